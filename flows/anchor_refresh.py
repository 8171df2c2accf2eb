"""Scheduled anchor-refresh retraining: pick up new ranked-anchor files dropped under a store prefix, validate them,
ingest them into the ``anchors`` table, filter them with ``sql/anchor_filter.sql``, and run a co-evolution round
from the run's latest generator and policy checkpoints on the lists that pass.

    python -m flows.anchor_refresh --store ./store                 # once, by hand
    prefect deploy --all --prefect-file infra/prefect.yaml         # on a schedule (cron), on a process work pool

A file is new when its content hash is not yet an ingested dataset (``refresh-<name>-<sha8>``), so the same file is
never ingested twice and an unchanged prefix makes a scheduled run a no-op. Every new file is validated before any
is ingested: one malformed line fails the run with the file, line and field, and nothing is written.
"""

from __future__ import annotations

from prefect import flow, get_run_logger
from pydantic import BaseModel, ConfigDict, Field

from dr_core.config import coevolve_preset
from dr_core.runs.tracking import Track
from dr_core.store.artifacts import SEGMENT_PATTERN, Store, default_store_url
from dr_core.store.lease import run_lease
from flows.coevolve import CoevolveParams, coevolve_flow
from tasks import anchor_refresh as refresh_tasks


class AnchorRefreshParams(BaseModel):
    """Parameters of one anchor-refresh run. The flow takes them as separate arguments (validated into this model
    first) because a deployment run that overrides one of them (``parameters={"train": false}``) must keep the
    others from the deployment: Prefect merges parameters by top-level name."""

    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True, allow_inf_nan=False)

    store: str = Field(default_factory=default_store_url, description="Artifact store URL (path or s3://...).")
    incoming: str = Field("incoming/anchors", min_length=1, description="Store prefix where new anchor files land.")
    run_id: str = Field("refresh", pattern=SEGMENT_PATTERN, description="The co-evolution run to continue.")
    preset: str = Field("tiny", description="Co-evolution preset of the round (dr_core.config).")
    min_responses: int = Field(7, ge=1, description="anchor_filter rule 1: minimum list length.")
    n_prompts: int | None = Field(None, ge=1, description="Prompts per round (None: the preset's).")
    train: bool = Field(True, description="Run the co-evolution round (False: stop after filtering).")
    track: Track = Field(
        "none", description="Experiment tracking of the round (dr_core/runs/tracking.py): none, mlflow or tensorboard."
    )


@flow(name="dynamicrubric-anchor-refresh")
def anchor_refresh_flow(
    store: str | None = None,
    incoming: str = "incoming/anchors",
    run_id: str = "refresh",
    preset: str = "tiny",
    min_responses: int = 7,
    n_prompts: int | None = None,
    train: bool = True,
    track: str = "none",
) -> dict:
    """New anchor files -> validate -> ingest -> anchor_filter -> one co-evolution round from the latest checkpoints
    (``train=False``: stop after filtering)."""
    p = AnchorRefreshParams(
        store=store or default_store_url(),
        incoming=incoming,
        run_id=run_id,
        preset=preset,
        min_responses=min_responses,
        n_prompts=n_prompts,
        train=train,
        track=track,
    )
    # one writer per run: a refresh that fires while the previous one (or a `dr coevolve` of the run) still runs
    # fails at once, naming the holder (dr_core/store/lease.py), before it takes any file: the next run picks them up
    with run_lease(Store.from_url(p.store), p.run_id, "anchor-refresh deployment"):
        return _refresh(p)


def _refresh(p: AnchorRefreshParams) -> dict:
    new = refresh_tasks.find_new(p.store, p.incoming)
    if not new:
        get_run_logger().info(f"no new anchor files under {p.incoming}")
        return {"new_files": 0, "kept": 0, "trained": False}
    datasets = [f["dataset"] for f in new]
    refresh_tasks.validate_and_ingest(p.store, new)
    kept = refresh_tasks.filter_anchors(p.store, datasets, p.min_responses)
    get_run_logger().info(f"{len(new)} new file(s), {kept['kept']} anchor list(s) pass anchor_filter")
    result = {"new_files": len(new), "datasets": datasets, "kept": kept["kept"], "trained": False}
    if not p.train or kept["kept"] == 0:
        return result
    start = refresh_tasks.start_checkpoints(p.store, p.run_id)
    round_fields = {"anchors": kept["path"], "min_anchor_responses": p.min_responses}
    if p.n_prompts:
        round_fields["n_prompts"] = p.n_prompts
    cfg = coevolve_preset(p.preset, round=round_fields, measure_start=False)
    out = coevolve_flow(
        CoevolveParams(
            config=cfg,
            store=p.store,
            run_id=p.run_id,
            track=p.track,
            start_round=start["round"],
            generator_start=start["generator"],
            policy_start=start["policy"],
        )
    )
    return result | {
        "trained": True,
        "round": start["round"],
        "generator": out.generator["uri"],
        "policy": out.policy["uri"],
        "warnings": out.warnings,
    }


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description="Run the anchor refresh once.")
    ap.add_argument("--store", default=None)
    ap.add_argument("--incoming", default="incoming/anchors")
    ap.add_argument("--run-id", default="refresh")
    ap.add_argument("--no-train", action="store_true")
    a = ap.parse_args()
    from dr_core.config.runtime import configure_prefect

    configure_prefect()
    print(anchor_refresh_flow(store=a.store, incoming=a.incoming, run_id=a.run_id, train=not a.no_train))
