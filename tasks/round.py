"""Prefect tasks of a DynamicRubric round: each reads its input artifacts, calls one ``dr_core.runs.round_steps``
function, writes Parquet against the table schema and returns a typed reference (``dr_core.runs.refs``), never
frames.

Every task takes a ``StepContext`` (store, run id, round, stage) as its first argument, is cached by content
(``tasks.options.content_cache_key``: inputs' content hashes, model identities, config, code version, the stage;
never the store, the run id or the round), persists its result in the artifact store, and retries transient failures
with backoff but never bad input (``tasks.options.retry_on_transient``). Model steps have a timeout.

The three model steps (sample, generate-rubrics, verify) are shard-aware: a ``Shard`` of ``RoundConfig.scale.shards``
(dr_core/runs/shards.py) does the model work of its prompts' sets. The unsharded step is shard 0 of 1: it writes the
step's table part itself, and ``merge-shards`` passes its reference on unchanged; the shards of a split step write
their own parts (``Store.write_shard``), which ``merge-shards`` checks and joins into the step's table part: the same
rows as the unsharded step. The flow runs every model step the same way (flows/steps.py::Steps.model_step).

Unit-test a body without Prefect through ``.fn``: ``sample.fn(ctx, cfg, inputs.prompts, "policy@0")``.
"""

from __future__ import annotations

from dataclasses import replace

from prefect import task

from dr_core import progress
from dr_core.config import RoundConfig
from dr_core.engines.identity import ModelIds
from dr_core.runs import round_steps
from dr_core.runs.refs import (
    ArtifactRef,
    EvalRef,
    RoundInputs,
    RoundSummary,
    RubricInputs,
    SampleInputs,
    Scored,
    ShardRef,
    StepContext,
    VerifyInputs,
)
from dr_core.runs.shards import Shard, ShardError, add_costs, in_shard
from dr_core.runs.shards import merge as merge_rows
from dr_core.runs.shards import ordered as shard_order
from dr_core.store.artifacts import Store
from dr_core.store.rows import RunRow
from tasks.options import content_cache_key, retry_on_transient
from tasks.runtime import engine_for, in_run, read_rows, write_ref

#: Shared by every step: cached by content, persisted, retried on transient failure only.
STEP = dict(
    cache_key_fn=content_cache_key,
    persist_result=True,
    retries=2,
    retry_delay_seconds=[2, 10],
    retry_jitter_factor=0.5,
    retry_condition_fn=retry_on_transient,
)
#: Model steps: a hang is cut off. (A thread-run task notices its timeout when the blocking engine call returns;
#: an HTTP engine also has its own request timeout, EngineConfig.timeout_s.)
MODEL_STEP = dict(STEP, timeout_seconds=4 * 3600)
#: Bookkeeping steps: never cached (they record this execution), retried on transient failure.
#: A step's state in the steps table while it runs, and once a later execution found it left so (killed in it).
RUNNING, INTERRUPTED = "Running", "Interrupted"
RECORD_STEP = dict(persist_result=False, retries=2, retry_delay_seconds=2, retry_condition_fn=retry_on_transient)
#: The run tables that ``adopt`` copies into a run's partition (prompts and anchors are not per run).
RUN_TABLES = frozenset({"samples", "rubrics", "verdicts", "scores", "rewards", "eval"})


def _write_part(
    s: Store, ctx: StepContext, table: str, rows: list[dict], shard: Shard, span: tuple[int, int], cost=None
) -> ArtifactRef:
    """The step's table part (the whole step), or this shard's own part for the merge."""
    part = f"{ctx.stage}-{table}"
    if shard.whole:
        return write_ref(s, table, rows, part, **ctx.partition).model_copy(update={"cost": cost})
    uri = s.write_shard(table, rows, part, shard.index, shard.count, **ctx.partition)
    return ShardRef(
        uri=uri, sha256=s.content_hash(uri), rows=len(rows), cost=cost, shard=shard.index, shards=shard.count, sets=span
    )


def _per_set_step(ctx: StepContext, inputs: RubricInputs | VerifyInputs, shard: Shard, names: tuple, work):
    """A model step over the shard's response sets: ``work(store, the round's prompt rows, the shard's span of set
    indices, the samples of the shard's sets)`` gives (rows, cost), counted as ``names`` = (activity, unit) and
    written to table ``names[2]`` (the step's part, or the shard's)."""
    label, unit, table = names
    s = Store.from_url(ctx.store)
    prompt_rows = read_rows(s, inputs.prompts)
    span = shard.span(len(prompt_rows))
    with progress.activity(shard.activity(label), unit):
        rows, cost = work(s, prompt_rows, span, in_shard(read_rows(s, inputs.samples), span))
    return _write_part(s, ctx, table, rows, shard, span, cost)


@task(name="select-inputs", **STEP)
def select_inputs(cfg: RoundConfig, store: str) -> RoundInputs:
    """Prompts and ranked anchor lists for the round (sql/anchor_filter), written to the prompts/anchors tables."""
    s = Store.from_url(store)
    prompt_rows, anchor_rows = round_steps.select_inputs(cfg)
    ds = f"{prompt_rows[0]['dataset']}.n{cfg.n_prompts}-a{cfg.n_anchor}-m{cfg.min_anchor_responses}"
    return RoundInputs(
        prompts=write_ref(s, "prompts", [replace(r, dataset=ds) for r in prompt_rows], "selected", dataset=ds),
        anchors=write_ref(s, "anchors", [replace(r, dataset=ds) for r in anchor_rows], "selected", dataset=ds),
    )


@task(name="sample", **MODEL_STEP)
def sample(ctx: StepContext, cfg: RoundConfig, inputs: SampleInputs, shard: Shard = Shard()) -> ArtifactRef:
    """K responses per prompt of the shard from the policy (set ids: the prompts' positions in the round)."""
    s = Store.from_url(ctx.store)
    prompt_rows = read_rows(s, inputs.prompts)
    lo, hi = shard.span(len(prompt_rows))
    with progress.activity(shard.activity("sample"), "responses"):
        rows = round_steps.sample_sets(
            engine_for(cfg.engines.policy), prompt_rows[lo:hi], cfg, inputs.policy_model, ctx.stage, set_offset=lo
        )
    return _write_part(s, ctx, "samples", rows, shard, (lo, hi))


@task(name="generate-rubrics", **MODEL_STEP)
def generate_rubrics(ctx: StepContext, cfg: RoundConfig, inputs: RubricInputs, shard: Shard = Shard()) -> ArtifactRef:
    """The generator's rubric list(s) for every response set of the shard."""

    def rubrics(_s: Store, prompt_rows: list, _span, samples: list):
        generator = engine_for(cfg.engines.generator)
        return round_steps.generate_rubric_rows(generator, prompt_rows, samples, cfg, inputs.generator_model, ctx.stage)

    return _per_set_step(ctx, inputs, shard, ("rubrics", "rubrics", "rubrics"), rubrics)


@task(name="verify", **MODEL_STEP)
def verify(ctx: StepContext, cfg: RoundConfig, inputs: VerifyInputs, shard: Shard = Shard()) -> ArtifactRef:
    """The frozen verifier's yes/no for every rubric item on every response of the shard's sets and anchors."""

    def verdicts(s: Store, prompt_rows: list, span, samples: list):
        anchors, rubrics = read_rows(s, inputs.anchors), in_shard(read_rows(s, inputs.rubrics), span)
        verifier = engine_for(cfg.engines.verifier)
        return round_steps.verify_sets(
            verifier, prompt_rows, samples, anchors, rubrics, inputs.verifier_model, ctx.stage
        )

    return _per_set_step(ctx, inputs, shard, ("verify", "verdicts", "verdicts"), verdicts)


@task(name="merge-shards", **STEP)
def merge_shards(ctx: StepContext, table: str, parts: list[ArtifactRef], shards: int) -> ArtifactRef:
    """One step's table part from its shards' parts. The whole step's part (one shard of one) is the step's: it is
    returned as it is. Several: every shard there once (in shard order), each part's file with the content and row
    count its task reported, every set in its shard's range; then the rows concatenated, which are the unsharded
    step's rows. Costs are summed."""
    if shards == 1 and len(parts) == 1 and not isinstance(parts[0], ShardRef):
        return parts[0]
    s = Store.from_url(ctx.store)
    part = f"{ctx.stage}-{table}"
    refs = shard_order([p.model_dump() for p in parts], shards, f"{table} of {part}")
    for ref in refs:
        if s.content_hash(ref["uri"]) != ref["sha256"]:
            raise ShardError(
                f"{table} of {part}: shard {ref['shard']} ({ref['uri']}) changed after its task wrote "
                "it (content hash differs); re-run the flow"
            )
    rows = merge_rows(
        [round_steps.rows_of(s.read(r["uri"])) for r in refs], refs, f"{table} of {part}", every_set=table != "verdicts"
    )
    out = write_ref(s, table, rows, part, **ctx.partition)
    return out.model_copy(update={"cost": add_costs(r.get("cost") for r in refs)})


@task(name="score", **STEP)
def score(ctx: StepContext, rubrics: ArtifactRef, verdicts: ArtifactRef) -> Scored:
    """Eq. 12 scores, R_disc, R_anchor and advantages (no model work)."""
    s = Store.from_url(ctx.store)
    score_rows, reward_rows = round_steps.score_sets(read_rows(s, rubrics), read_rows(s, verdicts), ctx.stage)
    return Scored(
        scores=write_ref(s, "scores", score_rows, f"{ctx.stage}-scores", **ctx.partition),
        rewards=write_ref(s, "rewards", reward_rows, f"{ctx.stage}-rewards", **ctx.partition),
    )


@task(name="evaluate-evaluator", **MODEL_STEP)
def evaluate_evaluator(ctx: StepContext, cfg: RoundConfig, generator_model: str, verifier_model: str) -> EvalRef:
    """Strict accuracy of generator + verifier on the preset's held-out preference slice."""
    s = Store.from_url(ctx.store)
    with progress.activity("evaluate evaluator", "requests"):  # the generator's rubrics, then the verdicts
        rows, metrics = round_steps.evaluate_evaluator(
            engine_for(cfg.engines.generator), engine_for(cfg.engines.verifier), cfg, generator_model, verifier_model
        )
    ref = write_ref(s, "eval", rows, "evaluator", **ctx.partition)
    return EvalRef(**ref.model_dump(), metrics=metrics)


@task(name="summarise", **STEP)
def summarise(ctx: StepContext, artifacts: dict[str, ArtifactRef]) -> RoundSummary:
    """The round's summary numbers from its artifacts (no model work; ``artifacts["eval"]``, if there, gives the
    evaluator's accuracy)."""
    s = Store.from_url(ctx.store)
    get = {k: read_rows(s, artifacts[k]) for k in ("prompts", "samples", "rubrics", "verdicts", "scores", "rewards")}
    ev = artifacts.get("eval")
    return round_steps.summarise(
        get["prompts"],
        get["samples"],
        get["rubrics"],
        get["verdicts"],
        get["scores"],
        get["rewards"],
        ev.metrics if isinstance(ev, EvalRef) else None,
    )


@task(name="adopt-artifacts", **RECORD_STEP)
def adopt(ctx: StepContext, artifacts: dict[str, ArtifactRef]) -> dict[str, ArtifactRef]:
    """Make every run artifact live under this run's partition. A step served from the cache of an identical
    earlier run points at that run's file; this copies it here with this run's id (a cheap read and write, no model
    work), so each run id's tables are complete on their own."""
    s = Store.from_url(ctx.store)
    out = {}
    for name, ref in artifacts.items():
        if name not in RUN_TABLES or in_run(ref.uri, ctx.run_id, ctx.round_no):
            out[name] = ref
            continue
        t = s.read(ref.uri).drop_columns(["run_id", "round"])
        part = ref.uri.rsplit("/", 1)[1].removesuffix(".parquet")
        copy = write_ref(s, name, t, part, **ctx.partition)
        out[name] = ref.model_copy(update={"uri": copy.uri, "sha256": copy.sha256, "rows": copy.rows})
    return out


@task(name="record-run", **RECORD_STEP)
def record_run(ctx: StepContext, cfg: RoundConfig, status: str) -> str:
    """One row in the runs table per (run, round): status, the typed config as JSON and the code version."""
    import datetime as dt

    from tasks.options import code_version

    row = RunRow(ctx.run_id, dt.datetime.now(dt.timezone.utc), status, cfg.model_dump_json(), code_version())
    return Store.from_url(ctx.store).write("runs", [row], part=f"round-{ctx.round_no}", run_id=ctx.run_id)


def close_interrupted(ctx: StepContext, execution: str) -> list[dict]:
    """Mark the steps that other executions of ``ctx.run_id`` left Running (killed in them) as Interrupted: their
    files are rewritten with the new state, nothing else changes. Returns the marked rows (execution, step,
    started_at). Only safe while this execution holds the run's lease (no other execution is alive)."""
    s = Store.from_url(ctx.store)
    rows = [r for r in s.read_table("steps", run_id=ctx.run_id).to_pylist() if r["execution"] != execution]
    stale = {(r["execution"], r["round"]) for r in rows if r["state"] == RUNNING}
    marked = []
    for ex, rnd in sorted(stale):
        mine = [r for r in rows if (r["execution"], r["round"]) == (ex, rnd)]
        for r in mine:
            if r["state"] == RUNNING:
                r["state"] = INTERRUPTED
                marked.append({"execution": ex, "step": r["step"], "started_at": r["started_at"]})
        keep = [{k: v for k, v in r.items() if k not in ("run_id", "round")} for r in mine]
        s.write("steps", keep, part=f"exec-{ex}", run_id=ctx.run_id, round=rnd)
    return marked


def write_step_rows(ctx: StepContext, flow: str, execution: str, entries: dict) -> str:
    """The flow's step log for one round as ``steps`` rows, one file per (execution, round): a rewrite replaces it."""
    rows = round_steps.step_rows(entries, flow, execution)
    return Store.from_url(ctx.store).write("steps", rows, part=f"exec-{execution}", **ctx.partition)


@task(name="record-steps", **RECORD_STEP)
def record_steps(ctx: StepContext, flow: str, execution: str, entries: dict) -> str:
    """``write_step_rows`` as a step of its own (retried on a transient store error): a round's last write."""
    return write_step_rows(ctx, flow, execution, entries)


def model_ids(cfg: RoundConfig) -> ModelIds:
    """Identity of each role's model (for artifacts and cache keys)."""
    return ModelIds.of(cfg.engines)
