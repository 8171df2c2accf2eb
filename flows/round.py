"""One DynamicRubric round, evaluation part of Algorithm 1, as a Prefect flow over the artifact store.

    dr round --preset tiny --store ./store --run-id demo        # or: python -m flows.round

Reads like the algorithm: pick prompts and anchors, sample the policy's sets C, let the generator write rubrics
for (x, C), let the frozen verifier answer every item on C and on the anchor list, score (Eq. 12, 13, 15, 2),
measure the evaluator on held-out pairs, summarise. Every step is a cached, retryable task (tasks/round.py); a
re-run with the same inputs does no model work, a killed run resumes at its first unfinished step.
"""

from __future__ import annotations

import time

from prefect import flow
from pydantic import BaseModel, ConfigDict, Field

from dr_core.presets import RoundConfig, preset
from dr_core.store import default_store_url
from tasks import round as steps
from tasks.runtime import result_storage

STAGE = "measure"


class RoundParams(BaseModel):
    """Parameters of one round flow run."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    config: RoundConfig = Field(default_factory=lambda: preset("tiny"), description="Sizes, lengths, engines.")
    store: str = Field(default_factory=default_store_url, description="Artifact store URL (path or s3://...).")
    run_id: str = Field("local", pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$", description="Run id (partition).")
    round_no: int = Field(1, ge=0, description="Round t of Algorithm 1.")
    run_eval: bool = Field(True, description="Measure evaluator accuracy on the preset's eval slice.")


def _run(task, record: dict, name: str, *args, **kwargs):
    """Run a task, note whether it ran or came from the cache and how long it took, return its result."""
    start = time.perf_counter()
    state = task(*args, return_state=True, **kwargs)
    record[name] = {"state": state.name, "seconds": round(time.perf_counter() - start, 2)}
    return state.result()


@flow(name="dynamicrubric-round", log_prints=True)
def round_flow(params: RoundParams) -> dict:
    cfg, store, run, t = params.config, params.store, params.run_id, params.round_no
    storage = result_storage(store)
    opts = dict(result_storage=storage)
    steps_log: dict = {}
    models = steps.model_ids(cfg)

    inputs = _run(steps.select_inputs.with_options(**opts), steps_log, "select-inputs", cfg, store)
    samples = _run(steps.sample.with_options(**opts), steps_log, "sample", cfg, inputs["prompts"], models["policy"],
                   store, run, t, STAGE)
    rubrics = _run(steps.generate_rubrics.with_options(**opts), steps_log, "generate-rubrics", cfg, inputs["prompts"],
                   samples, models["generator"], store, run, t, STAGE)
    verdicts = _run(steps.verify.with_options(**opts), steps_log, "verify", cfg, inputs["prompts"], samples,
                    inputs["anchors"], rubrics, models["verifier"], store, run, t, STAGE)
    scored = _run(steps.score.with_options(**opts), steps_log, "score", rubrics, verdicts, store, run, t, STAGE)
    evaluation = None
    if params.run_eval:
        evaluation = _run(steps.evaluate_evaluator.with_options(**opts), steps_log, "evaluate-evaluator", cfg,
                          models["generator"], models["verifier"], store, run, t)
    artifacts = {**inputs, "samples": samples, "rubrics": rubrics, "verdicts": verdicts, **scored}
    if evaluation:
        artifacts["eval"] = evaluation
    artifacts = _run(steps.adopt, steps_log, "adopt-artifacts", artifacts, store, run, t)
    summary = _run(steps.summarise.with_options(**opts), steps_log, "summarise", artifacts,
                   artifacts.get("eval"), store)
    _run(steps.record_run, steps_log, "record-run", cfg, store, run, t, "round-complete")
    return {"run_id": run, "round": t, "summary": summary, "steps": steps_log,
            "artifacts": {k: v["uri"] for k, v in artifacts.items()}}


if __name__ == "__main__":
    print(round_flow(RoundParams()))
