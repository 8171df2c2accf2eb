"""The stale-versus-fresh evaluator experiment (paper section 4.4, Figure 2) on a finished co-evolution run.

    dr stale-fresh --store ./store --run-id demo [--round 2]        # or: python -m flows.stale_fresh

After round t, the same response sets of P(t-1) are scored by the stale generator G(t-1) and by the fresh G(t),
with the run's frozen verifier: rubrics, verdicts, Eq. 12 scores, R_disc, R_anchor, written as stages ``stale`` and
``fresh`` of round t. ``dr report`` then shows the gap and R_disc of both side by side. What is scored comes from
the store (``dr_core.runs.stale_fresh.plan``); the steps are the round's cached tasks (tasks/round.py), so a re-run
does no model work.
"""

from __future__ import annotations

from prefect import flow
from pydantic import BaseModel, ConfigDict, Field

from dr_core.presets import RoundConfig
from dr_core.report import collect
from dr_core.runs.stale_fresh import plan
from dr_core.store.artifacts import SEGMENT_PATTERN, Store, default_store_url
from flows.steps import StepLog, run_step, with_models
from tasks import round as round_tasks
from tasks.runtime import model_id, result_storage
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


@flow(name="dynamicrubric-stale-fresh")
def stale_fresh_flow(params: StaleFreshParams) -> dict:
    store, run = params.store, params.run_id
    st = Store.from_url(store)
    p = plan(st, run, params.round_no)
    t = p["round"]
    if params.config is not None:
        rc = params.config
    elif p["config_json"]:
        rc = RoundConfig.model_validate_json(p["config_json"])
    else:
        raise ValueError(f"run {run!r} recorded no round config; pass one (dr stale-fresh --preset ...)")
    opts = dict(result_storage=result_storage(store))
    with StepLog(store, run, t) as log:
        inputs = run_step(round_tasks.select_inputs.with_options(**opts), log, "select-inputs", rc, store)
        wanted = {r["prompt_id"] for r in st.read(p["sets"]["uri"]).to_pylist()}
        have = {r["prompt_id"] for r in st.read(inputs["prompts"]["uri"]).to_pylist()}
        if not wanted <= have:
            raise ValueError(
                f"the sets' prompts {sorted(wanted - have)} are not among the config's prompts: pass the "
                "round config the run used"
            )
        verifier = model_id(rc.engines.verifier)
        policy = {"uri": p["policy"]}
        for stage, gen_uri in ((collect.STALE, p["stale_generator"]), (collect.FRESH, p["fresh_generator"])):
            sc = with_models(rc, st, {"uri": gen_uri}, policy)
            samples = run_step(restage_samples, log, f"{stage}/restage-samples", p["sets"]["uri"], stage, store, run, t)
            rubrics = run_step(
                round_tasks.generate_rubrics.with_options(**opts),
                log,
                f"{stage}/generate-rubrics",
                sc,
                inputs["prompts"],
                samples,
                model_id(sc.engines.generator),
                store,
                run,
                t,
                stage,
            )
            verdicts = run_step(
                round_tasks.verify.with_options(**opts),
                log,
                f"{stage}/verify",
                sc,
                inputs["prompts"],
                samples,
                inputs["anchors"],
                rubrics,
                verifier,
                store,
                run,
                t,
                stage,
            )
            scored = run_step(
                round_tasks.score.with_options(**opts), log, f"{stage}/score", rubrics, verdicts, store, run, t, stage
            )
            run_step(
                round_tasks.adopt,
                log,
                f"{stage}/adopt-artifacts",
                {"samples": samples, "rubrics": rubrics, "verdicts": verdicts, **scored},
                store,
                run,
                t,
            )
    summary = collect.stale_fresh(collect.stage_metrics(st.connect(), run), t)
    return {
        "run_id": run,
        "round": t,
        "sets": p["sets"],
        "stale_generator": p["stale_generator"],
        "fresh_generator": p["fresh_generator"],
        "verifier": verifier,
        "summary": summary,
        "steps": dict(log),
    }


if __name__ == "__main__":
    print(stale_fresh_flow(StaleFreshParams()))
