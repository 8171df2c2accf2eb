"""One DynamicRubric round, evaluation part of Algorithm 1, as a Prefect flow over the artifact store.

    dr round --preset tiny --store ./store --run-id demo        # or: python -m flows.round

Reads like the algorithm: pick prompts and anchors, sample the policy's sets C, let the generator write rubrics
for (x, C), let the frozen verifier answer every item on C and on the anchor list, score (Eq. 12, 13, 15, 2),
measure the evaluator on held-out pairs, summarise. Every step is a cached, retryable task (tasks/round.py); a
re-run with the same inputs does no model work, a killed run resumes at its first unfinished step.
"""

from __future__ import annotations

import datetime as dt
import time

from prefect import flow, get_run_logger
from pydantic import BaseModel, ConfigDict, Field

from dr_core.presets import RoundConfig, preset
from dr_core.store.artifacts import SEGMENT_PATTERN, default_store_url
from tasks import round as steps
from tasks.runtime import result_storage

STAGE = "measure"


class RoundParams(BaseModel):
    """Parameters of one round flow run."""

    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True, allow_inf_nan=False)

    config: RoundConfig = Field(default_factory=lambda: preset("tiny"), description="Sizes, lengths, engines.")
    store: str = Field(default_factory=default_store_url, description="Artifact store URL (path or s3://...).")
    run_id: str = Field("local", pattern=SEGMENT_PATTERN, description="Run id (partition).")
    round_no: int = Field(1, ge=0, description="Round t of Algorithm 1.")
    run_eval: bool = Field(True, description="Measure evaluator accuracy on the preset's eval slice.")


def run_step(task, record: dict, name: str, *args, **kwargs):
    """Run a task, note whether it ran or came from the cache, when it started and how long it took, return its
    result (a failed step is noted as Failed, then its error is raised)."""
    started = dt.datetime.now(dt.timezone.utc).isoformat()
    start = time.perf_counter()
    state = task(*args, return_state=True, **kwargs)
    record[name] = {"state": state.name, "seconds": round(time.perf_counter() - start, 2), "started_at": started}
    return state.result()


class StepLog(dict):
    """A flow's step log (step name -> {"state", "seconds", "started_at"}, filled by ``run_step``) that is also
    written to the store's ``steps`` table: ``flush()`` writes every step logged since the previous round's flush
    under the current ``round`` (one file per flow run and round, rewritten whole), and leaving a ``with`` block
    flushes, also when a step failed. So the store answers which steps ran, which came from the cache, which failed
    and how long each took (sql/step_times.sql), for every execution of a run."""

    def __init__(self, store: str, run_id: str, round_no: int):
        super().__init__()
        self.store, self.run_id, self.round = store, run_id, round_no
        self._round_of: dict[str, int] = {}

    def flush(self) -> str | None:
        from prefect.runtime import flow_run

        for name in self:
            self._round_of.setdefault(name, self.round)
        entries = {k: v for k, v in self.items() if self._round_of[k] == self.round}
        if not entries:
            return None
        return steps.record_steps(self.store, self.run_id, self.round, flow_run.flow_name or "", flow_run.id or "",
                                  entries)

    def __enter__(self) -> "StepLog":
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        try:
            self.flush()
        except Exception as err:  # noqa: BLE001 - never hide the step's own error behind the log's
            if exc is None:
                raise
            get_run_logger().warning("could not record the flow's steps in the store: %s", err)
        return False


def measure(cfg: RoundConfig, store: str, run: str, t: int, storage, log: dict, *, run_eval: bool = True,
            inputs: dict | None = None, prefix: str = "") -> dict:
    """Sample C from the policy, write rubrics for (x, C), verify on C and the anchors, score, evaluate the
    evaluator, summarise: the measurement of Algorithm 1 for the engines in ``cfg`` (stage ``measure``).
    Returns {"summary", "artifacts"}; ``log`` gets each step's state and seconds under ``prefix + name``."""
    opts = dict(result_storage=storage)
    models = steps.model_ids(cfg)
    if inputs is None:
        inputs = run_step(steps.select_inputs.with_options(**opts), log, prefix + "select-inputs", cfg, store)
    samples = run_step(steps.sample.with_options(**opts), log, prefix + "sample", cfg, inputs["prompts"],
                       models["policy"], store, run, t, STAGE)
    rubrics = run_step(steps.generate_rubrics.with_options(**opts), log, prefix + "generate-rubrics", cfg,
                       inputs["prompts"], samples, models["generator"], store, run, t, STAGE)
    verdicts = run_step(steps.verify.with_options(**opts), log, prefix + "verify", cfg, inputs["prompts"], samples,
                        inputs["anchors"], rubrics, models["verifier"], store, run, t, STAGE)
    scored = run_step(steps.score.with_options(**opts), log, prefix + "score", rubrics, verdicts, store, run, t, STAGE)
    artifacts = {**inputs, "samples": samples, "rubrics": rubrics, "verdicts": verdicts, **scored}
    if run_eval:
        artifacts["eval"] = run_step(steps.evaluate_evaluator.with_options(**opts), log, prefix + "evaluate-evaluator",
                                     cfg, models["generator"], models["verifier"], store, run, t)
    artifacts = run_step(steps.adopt, log, prefix + "adopt-artifacts", artifacts, store, run, t)
    summary = run_step(steps.summarise.with_options(**opts), log, prefix + "summarise", artifacts,
                       artifacts.get("eval"), store)
    return {"summary": summary, "artifacts": artifacts}


@flow(name="dynamicrubric-round", log_prints=True)
def round_flow(params: RoundParams) -> dict:
    cfg, store, run, t = params.config, params.store, params.run_id, params.round_no
    with StepLog(store, run, t) as log:
        result = measure(cfg, store, run, t, result_storage(store), log, run_eval=params.run_eval)
        run_step(steps.record_run, log, "record-run", cfg, store, run, t, "round-complete")
    return {"run_id": run, "round": t, "summary": result["summary"], "steps": dict(log),
            "artifacts": {k: v["uri"] for k, v in result["artifacts"].items()}}


if __name__ == "__main__":
    print(round_flow(RoundParams()))
