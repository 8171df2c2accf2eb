"""One DynamicRubric round, evaluation part of Algorithm 1, as a Prefect flow over the artifact store.

    dr round --preset tiny --store ./store --run-id demo        # or: python -m flows.round

Reads like the algorithm: pick prompts and anchors, sample the policy's sets C, let the generator write rubrics
for (x, C), let the frozen verifier answer every item on C and on the anchor list, score (Eq. 12, 13, 15, 2),
measure the evaluator on held-out pairs, summarise. Every step is a cached, retryable task (tasks/round.py); a
re-run with the same inputs does no model work, a killed run resumes at its first unfinished step.
"""

from __future__ import annotations

from prefect import flow, get_run_logger
from pydantic import BaseModel, ConfigDict, Field

from dr_core import numerics
from dr_core.presets import RoundConfig, preset
from dr_core.store.artifacts import SEGMENT_PATTERN, default_store_url
from flows import runners
from flows.steps import StepLog, measure, run_step
from tasks import round as round_tasks
from tasks.runtime import result_storage


class RoundParams(BaseModel):
    """Parameters of one round flow run."""

    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True, allow_inf_nan=False)

    config: RoundConfig = Field(default_factory=lambda: preset("tiny"), description="Sizes, lengths, engines.")
    store: str = Field(default_factory=default_store_url, description="Artifact store URL (path or s3://...).")
    run_id: str = Field("local", pattern=SEGMENT_PATTERN, description="Run id (partition).")
    round_no: int = Field(1, ge=0, description="Round t of Algorithm 1.")
    run_eval: bool = Field(True, description="Measure evaluator accuracy on the preset's eval slice.")


@flow(name="dynamicrubric-round", task_runner=runners.from_env())
def round_flow(params: RoundParams) -> dict:
    cfg, store, run, t = params.config, params.store, params.run_id, params.round_no
    numbers = numerics.describe(cfg.engines)
    get_run_logger().info(numbers)
    with StepLog(store, run, t) as log:
        result = measure(cfg, store, run, t, result_storage(store), log, run_eval=params.run_eval)
        run_step(round_tasks.record_run, log, "record-run", cfg, store, run, t, "round-complete")
    return {
        "run_id": run,
        "round": t,
        "numerics": numbers,
        "summary": result["summary"],
        "steps": dict(log),
        "artifacts": {k: v["uri"] for k, v in result["artifacts"].items()},
    }


if __name__ == "__main__":
    print(round_flow(RoundParams()))
