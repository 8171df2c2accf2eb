"""One DynamicRubric round, evaluation part of Algorithm 1, as a Prefect flow over the artifact store.

    dr round --preset tiny --store ./store --run-id demo        # or: python -m flows.round

Reads like the algorithm: pick prompts and anchors, sample the policy's sets C, let the generator write rubrics
for (x, C), let the frozen verifier answer every item on C and on the anchor list, score (Eq. 12, 13, 15, 2),
measure the evaluator on held-out pairs, summarise. Every step is a cached, retryable task (tasks/round.py); a
re-run with the same inputs does no model work, a killed run resumes at its first unfinished step.
"""

from __future__ import annotations

from prefect import flow, get_run_logger
from pydantic import Field

from dr_core.config import RoundConfig, numerics, preset
from dr_core.runs import tracking
from dr_core.runs.refs import RoundResult, StepContext
from flows import artifacts, runners
from flows.steps import RunParams, Steps, measure
from tasks import round as round_tasks


class RoundParams(RunParams):
    """Parameters of one round flow run."""

    config: RoundConfig = Field(default_factory=lambda: preset("tiny"), description="Sizes, lengths, engines.")
    round_no: int = Field(1, ge=0, description="Round t of Algorithm 1.")
    run_eval: bool = Field(True, description="Measure evaluator accuracy on the preset's eval slice.")


@flow(name="dynamicrubric-round", task_runner=runners.from_env())
def round_flow(params: RoundParams) -> RoundResult:
    cfg = params.config
    numbers = numerics.describe(cfg.engines)
    get_run_logger().info(numbers)
    steps = Steps(StepContext(store=params.store, run_id=params.run_id, round_no=params.round_no))
    with steps.log:
        result = measure(steps, cfg, run_eval=params.run_eval)
        steps.run(round_tasks.record_run, "record-run", steps.ctx, cfg, "round-complete")
    summary = result.summary.model_dump()
    tracker = tracking.open_tracker(params.track, params.store, warn=get_run_logger().warning)
    tracker.start(params.run_id, "round", {"config": cfg.model_dump(mode="json"), "round": params.round_no})
    tracker.log_round(params.round_no, tracking.round_figures(summary))
    tracker.log_text(artifacts.markdown_table(artifacts.round_rows(params.round_no, summary)), "summary.md")
    tracker.finish()
    artifacts.publish_round(params.run_id, params.round_no, summary)
    return RoundResult(
        run_id=params.run_id,
        round=params.round_no,
        numerics=numbers,
        summary=result.summary,
        steps=steps.log.entries(),
        artifacts={k: v.uri for k, v in result.artifacts.items()},
    )


if __name__ == "__main__":
    print(round_flow(RoundParams()))
