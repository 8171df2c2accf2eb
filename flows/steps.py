"""What the flows share: a flow's step context (``Steps``: where its steps write, where Prefect keeps their results,
the step log), running a task as a logged step (``run_step``; ``StepLog``: the ``steps`` table), a model step run
shard by shard (``Steps.model_step``), the measurement of Algorithm 1 (``measure``: sample, rubrics, verify, score,
evaluate, summarise), and a round config pointed at given generator and policy checkpoints (``with_models``). Flows
compose these; no flow imports another flow's helpers.
"""

from __future__ import annotations

import datetime as dt
import time

from prefect import get_run_logger
from prefect.futures import wait
from pydantic import BaseModel, ConfigDict, Field

from dr_core import progress
from dr_core.config import RoundConfig
from dr_core.model import is_bundled
from dr_core.resources import PeakRSS
from dr_core.runs.refs import (
    ArtifactRef,
    RoundInputs,
    RoundSummary,
    RubricInputs,
    SampleInputs,
    StepContext,
    VerifyInputs,
    unavailable,
)
from dr_core.runs.shards import Shard
from dr_core.runs.tracking import Track
from dr_core.store import checkpoints
from dr_core.store.artifacts import SEGMENT_PATTERN, Store, default_store_url
from flows import runners
from tasks import round as round_tasks
from tasks.runtime import result_storage


class RunParams(BaseModel):
    """What every flow run's parameters hold: where it writes and under which run id (frozen, no unknown field)."""

    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True, allow_inf_nan=False)

    store: str = Field(default_factory=default_store_url, description="Artifact store URL (path or s3://...).")
    run_id: str = Field("local", pattern=SEGMENT_PATTERN, description="Run id (partition).")
    track: Track = Field(
        "none",
        description="Experiment tracking (dr_core/runs/tracking.py): 'mlflow' logs the run to MLFLOW_TRACKING_URI, "
        "or to a SQLite file beside the store; 'tensorboard' writes event files; 'none' logs nothing. Not part of any "
        "step's cache key.",
    )


#: The stage of the measurement's artifacts (dr_core.store.schemas.STAGES).
STAGE = "measure"
#: A step's state in the ``steps`` table while it runs (a killed execution leaves it; the next marks it Interrupted).
RUNNING = round_tasks.RUNNING


def run_step(task, log: StepLog, name: str, *args, check=None, **kwargs):
    """Run a task and note it in the step log; return its result (a failed step is noted as Failed, then raised).

    Noted: whether it ran or came from the cache, when it started, how long it took and the peak resident memory of this
    process meanwhile (``peak_rss_mb``, sampled every 0.2 s: dr_core.resources); the progress sink is told
    (``progress.step_finished``: the CLI's step line). The ``StepLog`` writes the step's row when it starts (Running)
    and again when it ends, so a killed process leaves every finished step, and the one it died in, in the store.
    ``check`` (result -> problems): a step served from the cache whose result fails it is warned about and run again,
    its cache record replaced (``Steps.run``: the parts and checkpoints it points at must still be in the store)."""
    started = log.started(name)
    start = time.perf_counter()
    with PeakRSS() as rss:
        state = task(*args, return_state=True, **kwargs)
        if check is not None and state.name == "Cached" and (problems := check(state.result())):
            get_run_logger().warning(
                "step %s: its cached result points at data the store lost (%s): running it again",
                name,
                "; ".join(problems),
            )
            state = task.with_options(refresh_cache=True)(*args, return_state=True, **kwargs)
    log.finished(name, state.name, time.perf_counter() - start, started, rss.peak_mb)
    return state.result()


class StepLog:
    """A flow's step log, written to the store's ``steps`` table as it goes.

    ``entries()``: step name -> {"state", "seconds", "started_at", "peak_rss_mb"}. ``started`` and ``finished``
    rewrite the current round's file (one per flow run and round), so a process killed at any moment leaves a row for
    every step it finished and a Running row for the one it died in; ``finished`` also tells the progress sink.
    ``round``: the round whose file the next writes go to (a co-evolution moves it on).

    The first write of an execution marks the Running rows that earlier executions of the run left as Interrupted,
    and says so in the flow's log: one execution of a run at a time holds its lease (dr_core/store/lease.py), so a
    Running row of another execution is a dead one. ``flush()`` writes the current round again as a Prefect task
    (``record-steps``, retried on a transient store error; a failed write from ``started``/``finished`` only warns);
    leaving a ``with`` block flushes, also when a step failed. sql/step_times.sql reads the table."""

    def __init__(self, ctx: StepContext):
        self.ctx = ctx
        self.round = ctx.round_no
        self._entries: dict[str, dict] = {}
        self._round_of: dict[str, int] = {}
        self._closed_earlier = False

    def entries(self) -> dict[str, dict]:
        """Every step logged so far, in every round, by name (a copy)."""
        return {name: dict(entry) for name, entry in self._entries.items()}

    def started(self, name: str) -> str:
        """Log ``name`` as Running from now; returns its start time (ISO 8601, UTC)."""
        at = dt.datetime.now(dt.timezone.utc).isoformat()
        self._write(name, {"state": RUNNING, "seconds": None, "started_at": at, "peak_rss_mb": None})
        return at

    def finished(
        self, name: str, state: str, seconds: float, started_at: str, peak_rss_mb: float | None = None
    ) -> None:
        """Log how ``name`` ended (its Prefect state's name), how long it took and its sampled peak memory."""
        seconds, peak = round(seconds, 2), None if peak_rss_mb is None else round(peak_rss_mb, 1)
        self._write(name, {"state": state, "seconds": seconds, "started_at": started_at, "peak_rss_mb": peak})
        progress.step_finished(name, state, seconds, peak)

    def _current(self) -> dict:
        return {k: v for k, v in self._entries.items() if self._round_of[k] == self.round}

    def _write(self, name: str, entry: dict) -> None:
        """Log ``entry`` under ``name`` and write the current round's rows now (a failed write warns; the flow
        goes on, and ``flush`` writes them again)."""
        from prefect.runtime import flow_run

        self._entries[name] = entry
        self._round_of.setdefault(name, self.round)
        execution = flow_run.id or ""
        try:
            if not self._closed_earlier:
                self._closed_earlier = True
                for gone in round_tasks.close_interrupted(self.ctx, execution):
                    get_run_logger().warning(
                        "an earlier execution of run %r (%s) was interrupted in step %s (started %s): it runs again",
                        self.ctx.run_id,
                        gone["execution"],
                        gone["step"],
                        gone["started_at"],
                    )
            round_tasks.write_step_rows(
                self.ctx.at(round_no=self.round), flow_run.flow_name or "", execution, self._current()
            )
        except Exception as err:  # noqa: BLE001 - the step log must never fail the step it logs
            get_run_logger().warning(
                "could not write the step log to the store (will retry at the round's end): %s", err
            )

    def flush(self) -> str | None:
        from prefect.runtime import flow_run

        entries = self._current()
        if not entries:
            return None
        ctx = self.ctx.at(round_no=self.round)
        return round_tasks.record_steps(ctx, flow_run.flow_name or "", flow_run.id or "", entries)

    def __enter__(self) -> StepLog:
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        try:
            self.flush()
        except Exception as err:  # noqa: BLE001 - never hide the step's own error behind the log's
            if exc is None:
                raise
            get_run_logger().warning("could not record the flow's steps in the store: %s", err)
        return False


class Steps:
    """A flow's step context, passed to the flows' helpers as one argument: ``ctx`` (the store, run id, round and
    stage its tasks write under: ``dr_core.runs.refs.StepContext``), ``storage`` (where Prefect keeps the results and
    cache records: ``<store>/_prefect/results``) and ``log`` (the ``StepLog``). ``at`` gives the same flow in another
    round or stage (the same log and storage)."""

    def __init__(self, ctx: StepContext, storage=None, log: StepLog | None = None):
        self.ctx = ctx
        self.storage = storage if storage is not None else result_storage(ctx.store)
        self.log = log if log is not None else StepLog(ctx)

    @property
    def store(self) -> Store:
        return Store.from_url(self.ctx.store)

    def at(self, *, round_no: int | None = None, stage: str | None = None) -> Steps:
        return Steps(self.ctx.at(round_no=round_no, stage=stage), self.storage, self.log)

    def _stored(self, task):
        """The task with its results kept in the store (a task that persists results: the cached steps)."""
        return task.with_options(result_storage=self.storage) if task.persist_result else task

    def run(self, task, name: str, *args, **kwargs):
        """``run_step`` of the task, its results in the store, logged under ``name``."""
        return run_step(self._stored(task), self.log, name, *args, check=self._in_store, **kwargs)

    def _in_store(self, result) -> list[str]:
        return unavailable(result, self.store)

    def model_step(self, task, role: str, name: str, cfg: RoundConfig, inputs: BaseModel, *, table: str) -> ArtifactRef:
        """A model step, shard by shard (``cfg.scale.shards``; one shard when unsplit, dr_core/runs/shards.py), then
        ``merge-shards`` under the step's own name, which returns the step's reference (the whole step's part as it
        is). ``task(ctx, cfg, inputs, shard=)``: ``inputs`` is the step's frozen inputs value (``SampleInputs``,
        ``RubricInputs``, ``VerifyInputs``). On the Ray task runner the shards are submitted together, each with the
        role's resources, and run on the cluster's workers (each shard is logged with the seconds until all were in:
        the flow waits for the whole step); otherwise they run one after the other in this process (the engines are
        not shared between threads)."""
        shards = Shard.all(cfg.scale.shards)
        task = self._stored(task)
        if runners.fans_out():
            parts = self._on_cluster(task, role, name, cfg, shards, inputs)
        else:
            parts = [self.run(task, s.label(name), self.ctx, cfg, inputs, shard=s) for s in shards]
        return self.run(round_tasks.merge_shards, name, self.ctx, table, parts, len(shards))

    def _on_cluster(self, task, role: str, name: str, cfg: RoundConfig, shards: list[Shard], inputs: BaseModel) -> list:
        started, start = dt.datetime.now(dt.timezone.utc).isoformat(), time.perf_counter()
        with runners.role_options(cfg.scale.for_role(role).remote_options()):
            futures = [task.submit(self.ctx, cfg, inputs, shard=s) for s in shards]
        wait(futures)
        for s, fut in zip(shards, futures):
            self.log.finished(s.label(name), fut.state.name, time.perf_counter() - start, started)
        return [fut.result() for fut in futures]  # the first failed shard's error, after every shard is done

    def remote(self, task, role: str, name: str, cfg: RoundConfig, *args):
        """A model step that is not sharded (the evaluator's held-out slice): on the Ray task runner one task on the
        cluster with the role's resources, so the flow's own process loads no model; otherwise ``run``."""
        if not runners.fans_out():
            return self.run(task, name, self.ctx, cfg, *args)
        started, start = dt.datetime.now(dt.timezone.utc).isoformat(), time.perf_counter()
        with runners.role_options(cfg.scale.for_role(role).remote_options()):
            fut = self._stored(task).submit(self.ctx, cfg, *args)
        wait([fut])
        self.log.finished(name, fut.state.name, time.perf_counter() - start, started)
        return fut.result()


class Measured(BaseModel):
    """A measurement's summary numbers and its artifacts (name -> reference)."""

    model_config = ConfigDict(frozen=True)

    summary: RoundSummary
    artifacts: dict[str, ArtifactRef]


def measure(
    steps: Steps, cfg: RoundConfig, inputs: RoundInputs | None = None, *, run_eval: bool = True, prefix: str = ""
) -> Measured:
    """Sample C from the policy, write rubrics for (x, C), verify on C and the anchors, score, evaluate the
    evaluator, summarise: the measurement of Algorithm 1 for the engines in ``cfg`` (stage ``measure``, round
    ``steps.ctx.round_no``). Each step is logged under ``prefix + name``."""
    steps = steps.at(stage=STAGE)
    models = round_tasks.model_ids(cfg)
    if inputs is None:
        inputs = steps.run(round_tasks.select_inputs, prefix + "select-inputs", cfg, steps.ctx.store)
    samples = sample_step(steps, cfg, inputs, models.policy, prefix + "sample")
    artifacts = {**dict(inputs), **score_sets(steps, cfg, inputs, samples, prefix)}
    if run_eval:
        artifacts["eval"] = steps.remote(
            round_tasks.evaluate_evaluator,
            "verifier",
            prefix + "evaluate-evaluator",
            cfg,
            models.generator,
            models.verifier,
        )
    artifacts = steps.run(round_tasks.adopt, prefix + "adopt-artifacts", steps.ctx, artifacts)
    summary = steps.run(round_tasks.summarise, prefix + "summarise", steps.ctx, artifacts)
    return Measured(summary=summary, artifacts=artifacts)


def score_sets(
    steps: Steps, cfg: RoundConfig, inputs: RoundInputs, samples: ArtifactRef, prefix: str
) -> dict[str, ArtifactRef]:
    """The sets ``samples`` scored by the engines of ``cfg`` under ``steps.ctx.stage``: rubrics for (x, C), the
    verifier's answers on C and the anchor list, Eq. 12 scores and the generator's rewards. Returns the artifacts
    (samples, rubrics, verdicts, scores, rewards); each step is logged under ``prefix + name``."""
    models = round_tasks.model_ids(cfg)
    rubrics = steps.model_step(
        round_tasks.generate_rubrics,
        "generator",
        prefix + "generate-rubrics",
        cfg,
        RubricInputs(prompts=inputs.prompts, samples=samples, generator_model=models.generator),
        table="rubrics",
    )
    verdicts = steps.model_step(
        round_tasks.verify,
        "verifier",
        prefix + "verify",
        cfg,
        VerifyInputs(
            prompts=inputs.prompts,
            samples=samples,
            anchors=inputs.anchors,
            rubrics=rubrics,
            verifier_model=models.verifier,
        ),
        table="verdicts",
    )
    scored = steps.run(round_tasks.score, prefix + "score", steps.ctx, rubrics, verdicts)
    return {"samples": samples, "rubrics": rubrics, "verdicts": verdicts, **dict(scored)}


def sample_step(steps: Steps, cfg: RoundConfig, inputs: RoundInputs, policy_model: str, name: str) -> ArtifactRef:
    """The policy's sets C for the round's prompts (stage ``steps.ctx.stage``)."""
    return steps.model_step(
        round_tasks.sample,
        "policy",
        name,
        cfg,
        SampleInputs(prompts=inputs.prompts, policy_model=policy_model),
        table="samples",
    )


def with_models(rc: RoundConfig, store: Store, generator: str, policy: str) -> RoundConfig:
    """The round config with the generator and policy engines pointed at the checkpoints at these URIs (verifier
    unchanged)."""

    def point(cfg, uri: str):
        if is_bundled(uri):  # the role's own start model (train.base_ref): the engine as configured
            return cfg
        return cfg.model_copy(update={"model": str(checkpoints.materialise(store, uri))})

    engines = rc.engines.model_copy(
        update={"generator": point(rc.engines.generator, generator), "policy": point(rc.engines.policy, policy)}
    )
    return rc.model_copy(update={"engines": engines})
