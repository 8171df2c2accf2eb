"""What the flows share: running a task as a logged step (``run_step``, ``StepLog``: the ``steps`` table), the
measurement of Algorithm 1 (``measure``: sample, rubrics, verify, score, evaluate, summarise), and a round config
pointed at given generator and policy checkpoints (``with_models``). Flows compose these; no flow imports another
flow's helpers.
"""

from __future__ import annotations

import datetime as dt
import time

from prefect import get_run_logger
from prefect.futures import wait

from dr_core import progress
from dr_core.model import is_bundled
from dr_core.presets import RoundConfig
from dr_core.resources import PeakRSS
from dr_core.store import checkpoints
from dr_core.store.artifacts import Store
from flows import runners
from tasks import round as round_tasks

#: The stage of the measurement's artifacts (dr_core.store.schemas.STAGES).
STAGE = "measure"


def run_step(task, record: dict, name: str, *args, **kwargs):
    """Run a task, note whether it ran or came from the cache, when it started, how long it took and the peak
    resident memory of this process meanwhile (``peak_rss_mb``, sampled every 0.2 s: dr_core.resources), tell the
    progress sink (``progress.step_finished``: the CLI's step line), return its result (a failed step is noted as
    Failed, then its error is raised)."""
    started = dt.datetime.now(dt.timezone.utc).isoformat()
    start = time.perf_counter()
    with PeakRSS() as rss:
        state = task(*args, return_state=True, **kwargs)
    seconds, peak = round(time.perf_counter() - start, 2), round(rss.peak_mb, 1)
    record[name] = {"state": state.name, "seconds": seconds, "started_at": started, "peak_rss_mb": peak}
    progress.step_finished(name, state.name, seconds, peak)
    return state.result()


class StepLog(dict):
    """A flow's step log (step name -> {"state", "seconds", "started_at", "peak_rss_mb"}, filled by ``run_step``)
    that is also written to the store's ``steps`` table: ``flush()`` writes every step logged since the previous
    round's flush under the current ``round`` (one file per flow run and round, rewritten whole), and leaving a
    ``with`` block flushes, also when a step failed. So the store answers which steps ran, which came from the cache,
    which failed, how long each took and its peak memory (sql/step_times.sql), for every execution of a run."""

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
        return round_tasks.record_steps(
            self.store, self.run_id, self.round, flow_run.flow_name or "", flow_run.id or "", entries
        )

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


def run_remote(task, role: str, log: dict, name: str, cfg: RoundConfig, *args):
    """A model step that is not sharded (the evaluator's held-out slice): on the Ray task runner one task on the
    cluster with the role's resources, so the flow's own process loads no model; otherwise ``run_step``."""
    if not runners.fans_out():
        return run_step(task, log, name, cfg, *args)
    started, start = dt.datetime.now(dt.timezone.utc).isoformat(), time.perf_counter()
    with runners.role_options(cfg.scale.for_role(role).remote_options()):
        fut = task.submit(cfg, *args)
    wait([fut])
    _record(log, name, fut.state, started, time.perf_counter() - start)
    return fut.result()


def _record(record: dict, name: str, state, started: str, seconds: float) -> None:
    record[name] = {"state": state.name, "seconds": round(seconds, 2), "started_at": started, "peak_rss_mb": None}
    progress.step_finished(name, state.name, round(seconds, 2))


def run_shards(
    task,
    role: str,
    log: dict,
    name: str,
    cfg: RoundConfig,
    *args,
    storage,
    store: str,
    run: str,
    t: int,
    stage: str,
    table: str,
) -> dict:
    """A model step split by prompt (``cfg.scale.shards``, dr_core/runs/shards.py): one task per shard, then
        ``merge-shards`` under the step's own name, which returns the step's usual reference. On the Ray task runner
        the shards are submitted together, each with the role's resources (``cfg.scale.resources``), and run on the
        cluster's workers (the log notes each shard's state and, for every shard alike, the seconds until all of them
    were in: the flow waits for the whole step); otherwise they
        run one after the other in this process (the engines are not shared between threads)."""
    n = cfg.scale.shards
    shard_task = task.with_options(result_storage=storage)
    common = dict(store=store, run_id=run, round_no=t, stage=stage, shards=n)
    if runners.fans_out():
        started = dt.datetime.now(dt.timezone.utc).isoformat()
        start = time.perf_counter()
        with runners.role_options(cfg.scale.for_role(role).remote_options()):
            futures = [shard_task.submit(cfg, *args, shard=i, **common) for i in range(n)]
        wait(futures)
        for i, fut in enumerate(futures):
            _record(log, f"{name}/shard-{i}", fut.state, started, time.perf_counter() - start)
        parts = [fut.result() for fut in futures]  # the first failed shard's error, after every shard is done
    else:
        parts = [run_step(shard_task, log, f"{name}/shard-{i}", cfg, *args, shard=i, **common) for i in range(n)]
    return run_step(
        round_tasks.merge_shards.with_options(result_storage=storage),
        log,
        name,
        table,
        parts,
        n,
        store,
        run,
        t,
        f"{stage}-{table}",
    )


def sharded(cfg: RoundConfig) -> bool:
    """Whether the model steps run as shard tasks: more than one shard, or the Ray task runner (one shard then
    still goes to the cluster, with its role's resources)."""
    return cfg.scale.shards > 1 or runners.fans_out()


def sample_step(
    cfg: RoundConfig,
    prompts: dict,
    policy_model: str,
    store: str,
    run: str,
    t: int,
    stage: str,
    storage,
    log: dict,
    name: str,
) -> dict:
    """The policy's sets C for the round's prompts (sharded or one task)."""
    if sharded(cfg):
        return run_shards(
            round_tasks.sample_shard,
            "policy",
            log,
            name,
            cfg,
            prompts,
            policy_model,
            storage=storage,
            store=store,
            run=run,
            t=t,
            stage=stage,
            table="samples",
        )
    return run_step(
        round_tasks.sample.with_options(result_storage=storage),
        log,
        name,
        cfg,
        prompts,
        policy_model,
        store,
        run,
        t,
        stage,
    )


def measure(
    cfg: RoundConfig,
    store: str,
    run: str,
    t: int,
    storage,
    log: dict,
    *,
    run_eval: bool = True,
    inputs: dict | None = None,
    prefix: str = "",
) -> dict:
    """Sample C from the policy, write rubrics for (x, C), verify on C and the anchors, score, evaluate the
    evaluator, summarise: the measurement of Algorithm 1 for the engines in ``cfg`` (stage ``measure``).
    Returns {"summary", "artifacts"}; ``log`` gets each step's state and seconds under ``prefix + name``."""
    opts = dict(result_storage=storage)
    models = round_tasks.model_ids(cfg)
    if inputs is None:
        inputs = run_step(round_tasks.select_inputs.with_options(**opts), log, prefix + "select-inputs", cfg, store)
    samples = sample_step(
        cfg, inputs["prompts"], models["policy"], store, run, t, STAGE, storage, log, prefix + "sample"
    )
    where = dict(storage=storage, store=store, run=run, t=t, stage=STAGE)
    if sharded(cfg):
        rubrics = run_shards(
            round_tasks.generate_rubrics_shard,
            "generator",
            log,
            prefix + "generate-rubrics",
            cfg,
            inputs["prompts"],
            samples,
            models["generator"],
            table="rubrics",
            **where,
        )
        verdicts = run_shards(
            round_tasks.verify_shard,
            "verifier",
            log,
            prefix + "verify",
            cfg,
            inputs["prompts"],
            samples,
            inputs["anchors"],
            rubrics,
            models["verifier"],
            table="verdicts",
            **where,
        )
    else:
        rubrics = run_step(
            round_tasks.generate_rubrics.with_options(**opts),
            log,
            prefix + "generate-rubrics",
            cfg,
            inputs["prompts"],
            samples,
            models["generator"],
            store,
            run,
            t,
            STAGE,
        )
        verdicts = run_step(
            round_tasks.verify.with_options(**opts),
            log,
            prefix + "verify",
            cfg,
            inputs["prompts"],
            samples,
            inputs["anchors"],
            rubrics,
            models["verifier"],
            store,
            run,
            t,
            STAGE,
        )
    scored = run_step(
        round_tasks.score.with_options(**opts), log, prefix + "score", rubrics, verdicts, store, run, t, STAGE
    )
    artifacts = {**inputs, "samples": samples, "rubrics": rubrics, "verdicts": verdicts, **scored}
    if run_eval:
        artifacts["eval"] = run_remote(
            round_tasks.evaluate_evaluator.with_options(**opts),
            "verifier",
            log,
            prefix + "evaluate-evaluator",
            cfg,
            models["generator"],
            models["verifier"],
            store,
            run,
            t,
        )
    artifacts = run_step(round_tasks.adopt, log, prefix + "adopt-artifacts", artifacts, store, run, t)
    summary = run_step(
        round_tasks.summarise.with_options(**opts), log, prefix + "summarise", artifacts, artifacts.get("eval"), store
    )
    return {"summary": summary, "artifacts": artifacts}


def with_models(rc: RoundConfig, store: Store, generator: dict, policy: dict) -> RoundConfig:
    """The round config with the generator and policy engines pointed at these checkpoints (verifier unchanged)."""

    def point(cfg, ref):
        if is_bundled(ref["uri"]):  # the role's own start model (train.base_ref): the engine as configured
            return cfg
        return cfg.model_copy(update={"model": str(checkpoints.materialise(store, ref["uri"]))})

    engines = rc.engines.model_copy(
        update={"generator": point(rc.engines.generator, generator), "policy": point(rc.engines.policy, policy)}
    )
    return rc.model_copy(update={"engines": engines})
