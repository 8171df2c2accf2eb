"""The stale-versus-fresh evaluator experiment (paper section 4.4, Figure 2) on a finished co-evolution run.

    dr stale-fresh --store ./store --run-id demo [--round 2]        # or: python -m flows.stale_fresh

After round t, the same response sets of P(t-1) are scored by the stale generator G(t-1) and by the fresh G(t),
with the run's frozen verifier: rubrics, verdicts, Eq. 12 scores, R_disc, R_anchor, written as stages ``stale`` and
``fresh`` of round t. ``dr report`` then shows the gap and R_disc of both side by side. What is scored comes from
the store (``dr_core.runs.stale_fresh.plan``); the steps are the round's cached tasks (tasks/round.py), so a re-run
does no model work.
"""

from __future__ import annotations

from prefect import flow, get_run_logger
from pydantic import BaseModel, ConfigDict, Field

from dr_core.config import RoundConfig
from dr_core.report import collect
from dr_core.runs import tracking
from dr_core.runs.refs import RoundInputs, StepContext
from dr_core.runs.stale_fresh import plan
from dr_core.runs.tracking import Track
from dr_core.store.artifacts import SEGMENT_PATTERN, Store, default_store_url
from flows.steps import Steps, score_sets, with_models
from tasks import round as round_tasks
from tasks.runtime import model_id
from tasks.stale_fresh import restage_samples


class StaleFreshParams(BaseModel):
    """Parameters of one stale-versus-fresh run."""

    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True, allow_inf_nan=False)

    store: str = Field(default_factory=default_store_url, description="Artifact store URL (path or s3://...).")
    run_id: str = Field("local", pattern=SEGMENT_PATTERN, description="The co-evolution run.")
    round_no: int | None = Field(None, ge=1, description="Round t: G(t-1) vs G(t) on P(t-1)'s sets (None: latest).")
    config: RoundConfig | None = Field(
        None, description="Round config (engines, lengths); None: the run's recorded one."
    )
    track: Track = Field(
        "none", description="Experiment tracking (dr_core/runs/tracking.py): none, mlflow or tensorboard."
    )


@flow(name="dynamicrubric-stale-fresh")
def stale_fresh_flow(params: StaleFreshParams) -> dict:
    st = Store.from_url(params.store)
    p = plan(st, params.run_id, params.round_no)
    rc = _round_config(params, p)
    steps = Steps(StepContext(store=params.store, run_id=params.run_id, round_no=p["round"]))
    verifier = model_id(rc.engines.verifier)
    with steps.log:
        inputs = steps.run(round_tasks.select_inputs, "select-inputs", rc, params.store)
        _check_prompts(st, p, inputs)
        for stage, gen_uri in ((collect.STALE, p["stale_generator"]), (collect.FRESH, p["fresh_generator"])):
            score_stage(steps.at(stage=stage), with_models(rc, st, gen_uri, p["policy"]), inputs, p["sets"]["uri"])
    summary = collect.stale_fresh(collect.stage_metrics(st.connect(), params.run_id), p["round"])
    tracker = tracking.open_tracker(params.track, params.store, warn=get_run_logger().warning)
    tracker.start(params.run_id, "stale-fresh", {"round": p["round"], "config": rc.model_dump(mode="json")})
    if summary is not None:
        tracker.log_round(p["round"], tracking.stale_fresh_figures(summary))
    tracker.finish()
    return {
        "run_id": params.run_id,
        "round": p["round"],
        "sets": p["sets"],
        "stale_generator": p["stale_generator"],
        "fresh_generator": p["fresh_generator"],
        "verifier": verifier,
        "summary": summary,
        "steps": steps.log.entries(),
    }


def _round_config(params: StaleFreshParams, p: dict) -> RoundConfig:
    """The given round config, else the one the run recorded."""
    if params.config is not None:
        return params.config
    if p["config_json"]:
        return RoundConfig.model_validate_json(p["config_json"])
    raise ValueError(f"run {params.run_id!r} recorded no round config; pass one (dr stale-fresh --preset ...)")


def _check_prompts(st: Store, p: dict, inputs: RoundInputs) -> None:
    """The sets' prompts must be among the config's prompts (the config the run used)."""
    wanted = {r["prompt_id"] for r in st.read(p["sets"]["uri"]).to_pylist()}
    have = {r["prompt_id"] for r in st.read(inputs.prompts.uri).to_pylist()}
    if not wanted <= have:
        raise ValueError(
            f"the sets' prompts {sorted(wanted - have)} are not among the config's prompts: pass the "
            "round config the run used"
        )


def score_stage(steps: Steps, rc: RoundConfig, inputs: RoundInputs, sets_uri: str) -> None:
    """P(t-1)'s sets under stage ``steps.ctx.stage``, scored by the generator of ``rc``: rubrics, verdicts, scores,
    each step logged under ``<stage>/<step>``."""
    prefix = f"{steps.ctx.stage}/"
    samples = steps.run(restage_samples, prefix + "restage-samples", steps.ctx, sets_uri)
    artifacts = score_sets(steps, rc, inputs, samples, prefix)
    steps.run(round_tasks.adopt, prefix + "adopt-artifacts", steps.ctx, artifacts)


if __name__ == "__main__":
    print(stale_fresh_flow(StaleFreshParams()))
