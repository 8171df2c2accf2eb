"""Prefect tasks of a DynamicRubric round: each resolves artifact URIs, calls one ``dr_core.runs.round_steps`` function,
writes Parquet against the table schema, and returns artifact references and small numbers, never frames.

Every task is cached by content (``tasks.options.content_cache_key``: inputs' content hashes, model identities,
config, code version; never the run id), persists its result in the artifact store, and retries transient
failures with backoff but never bad input (``tasks.options.retry_on_transient``). Model steps have a timeout.

Unit-test a body without Prefect through ``.fn``: ``sample.fn(cfg, prompts_ref, store, run_id, round_no, stage)``.
"""

from __future__ import annotations

from prefect import task

from dr_core import progress
from dr_core.presets import RoundConfig
from dr_core.runs import round_steps
from dr_core.runs.shards import ShardError, add_costs, in_shard
from dr_core.runs.shards import bounds as shard_bounds
from dr_core.runs.shards import merge as merge_rows
from dr_core.runs.shards import ordered as shard_order
from dr_core.store.artifacts import Store
from tasks.options import content_cache_key, retry_on_transient
from tasks.runtime import engine_for, in_run, model_id, write_ref

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


def _rows(store: Store, ref: dict) -> list[dict]:
    return round_steps.rows_of(store.read(ref["uri"]))


@task(name="select-inputs", **STEP)
def select_inputs(cfg: RoundConfig, store: str) -> dict:
    """Prompts and ranked anchor lists for the round (sql/anchor_filter), written to the prompts/anchors tables."""
    s = Store.from_url(store)
    prompt_rows, anchor_rows = round_steps.select_inputs(cfg)
    ds = f"{prompt_rows[0]['dataset']}.n{cfg.n_prompts}-a{cfg.n_anchor}-m{cfg.min_anchor_responses}"
    for r in prompt_rows + anchor_rows:
        r["dataset"] = ds
    return {
        "prompts": write_ref(s, "prompts", prompt_rows, "selected", dataset=ds),
        "anchors": write_ref(s, "anchors", anchor_rows, "selected", dataset=ds),
    }


@task(name="sample", **MODEL_STEP)
def sample(
    cfg: RoundConfig, prompts: dict, policy_model: str, store: str, run_id: str, round_no: int, stage: str
) -> dict:
    """K responses per prompt from the policy."""
    s = Store.from_url(store)
    with progress.activity("sample", "responses"):
        rows = round_steps.sample_sets(engine_for(cfg.engines.policy), _rows(s, prompts), cfg, policy_model, stage)
    return write_ref(s, "samples", rows, f"{stage}-samples", run_id=run_id, round=round_no)


@task(name="generate-rubrics", **MODEL_STEP)
def generate_rubrics(
    cfg: RoundConfig,
    prompts: dict,
    samples: dict,
    generator_model: str,
    store: str,
    run_id: str,
    round_no: int,
    stage: str,
) -> dict:
    """The generator's rubric list(s) for every response set."""
    s = Store.from_url(store)
    with progress.activity("rubrics", "rubrics"):
        rows, cost = round_steps.generate_rubric_rows(
            engine_for(cfg.engines.generator), _rows(s, prompts), _rows(s, samples), cfg, generator_model, stage
        )
    return write_ref(s, "rubrics", rows, f"{stage}-rubrics", run_id=run_id, round=round_no) | {"cost": cost}


@task(name="verify", **MODEL_STEP)
def verify(
    cfg: RoundConfig,
    prompts: dict,
    samples: dict,
    anchors: dict,
    rubrics: dict,
    verifier_model: str,
    store: str,
    run_id: str,
    round_no: int,
    stage: str,
) -> dict:
    """The frozen verifier's yes/no for every rubric item on every response of C and of the anchor list."""
    s = Store.from_url(store)
    with progress.activity("verify", "verdicts"):
        rows, cost = round_steps.verify_sets(
            engine_for(cfg.engines.verifier),
            _rows(s, prompts),
            _rows(s, samples),
            _rows(s, anchors),
            _rows(s, rubrics),
            verifier_model,
            stage,
        )
    return write_ref(s, "verdicts", rows, f"{stage}-verdicts", run_id=run_id, round=round_no) | {"cost": cost}


# -- shards of the model steps (RoundConfig.scale.shards; dr_core/runs/shards.py) ------------------------------
# Each shard task reads the step's whole inputs, keeps its own sets, does the model work of those and writes its
# own part (Store.write_shard); merge_shards checks every shard and writes the step's table part, the same rows as
# the unsharded step. Run on the flow's task runner: Ray workers with `--task-runner ray` (flows/runners.py).


def _shard_ref(
    s: Store,
    table: str,
    rows: list[dict],
    part: str,
    span: tuple[int, int],
    shard: int,
    shards: int,
    run_id: str,
    round_no: int,
) -> dict:
    uri = s.write_shard(table, rows, part, shard, shards, run_id=run_id, round=round_no)
    return {
        "uri": uri,
        "sha256": s.content_hash(uri),
        "rows": len(rows),
        "shard": shard,
        "shards": shards,
        "sets": list(span),
    }


@task(name="sample-shard", **MODEL_STEP)
def sample_shard(
    cfg: RoundConfig,
    prompts: dict,
    policy_model: str,
    store: str,
    run_id: str,
    round_no: int,
    stage: str,
    shard: int,
    shards: int,
) -> dict:
    """K responses per prompt for the prompts of one shard (set ids: their positions in the round)."""
    s = Store.from_url(store)
    prompt_rows = _rows(s, prompts)
    span = shard_bounds(len(prompt_rows), shards)[shard]
    with progress.activity(f"sample {shard + 1}/{shards}", "responses"):
        rows = round_steps.sample_sets(
            engine_for(cfg.engines.policy), prompt_rows[span[0] : span[1]], cfg, policy_model, stage, set_offset=span[0]
        )
    return _shard_ref(s, "samples", rows, f"{stage}-samples", span, shard, shards, run_id, round_no)


@task(name="generate-rubrics-shard", **MODEL_STEP)
def generate_rubrics_shard(
    cfg: RoundConfig,
    prompts: dict,
    samples: dict,
    generator_model: str,
    store: str,
    run_id: str,
    round_no: int,
    stage: str,
    shard: int,
    shards: int,
) -> dict:
    """The generator's rubric list(s) for the sets of one shard."""
    s = Store.from_url(store)
    prompt_rows = _rows(s, prompts)
    span = shard_bounds(len(prompt_rows), shards)[shard]
    with progress.activity(f"rubrics {shard + 1}/{shards}", "rubrics"):
        rows, cost = round_steps.generate_rubric_rows(
            engine_for(cfg.engines.generator),
            prompt_rows,
            in_shard(_rows(s, samples), span),
            cfg,
            generator_model,
            stage,
        )
    return _shard_ref(s, "rubrics", rows, f"{stage}-rubrics", span, shard, shards, run_id, round_no) | {"cost": cost}


@task(name="verify-shard", **MODEL_STEP)
def verify_shard(
    cfg: RoundConfig,
    prompts: dict,
    samples: dict,
    anchors: dict,
    rubrics: dict,
    verifier_model: str,
    store: str,
    run_id: str,
    round_no: int,
    stage: str,
    shard: int,
    shards: int,
) -> dict:
    """The frozen verifier's yes/no for every rubric item on every response of one shard's sets and anchors."""
    s = Store.from_url(store)
    prompt_rows = _rows(s, prompts)
    span = shard_bounds(len(prompt_rows), shards)[shard]
    with progress.activity(f"verify {shard + 1}/{shards}", "verdicts"):
        rows, cost = round_steps.verify_sets(
            engine_for(cfg.engines.verifier),
            prompt_rows,
            in_shard(_rows(s, samples), span),
            _rows(s, anchors),
            in_shard(_rows(s, rubrics), span),
            verifier_model,
            stage,
        )
    return _shard_ref(s, "verdicts", rows, f"{stage}-verdicts", span, shard, shards, run_id, round_no) | {"cost": cost}


@task(name="merge-shards", **STEP)
def merge_shards(table: str, parts: list[dict], shards: int, store: str, run_id: str, round_no: int, part: str) -> dict:
    """One step's table part from its shards: every shard there once (in shard order), each part's file with the
    content and row count its task reported, every set in its shard's range; then the rows concatenated, which
    are the unsharded step's rows. Costs are summed."""
    s = Store.from_url(store)
    refs = shard_order(parts, shards, f"{table} of {part}")
    for ref in refs:
        if s.content_hash(ref["uri"]) != ref["sha256"]:
            raise ShardError(
                f"{table} of {part}: shard {ref['shard']} ({ref['uri']}) changed after its task wrote "
                "it (content hash differs); re-run the flow"
            )
    rows = merge_rows([_rows(s, r) for r in refs], refs, f"{table} of {part}", every_set=table != "verdicts")
    out = write_ref(s, table, rows, part, run_id=run_id, round=round_no)
    cost = add_costs(r.get("cost") for r in refs)
    return out | ({"cost": cost} if cost is not None else {})


@task(name="score", **STEP)
def score(rubrics: dict, verdicts: dict, store: str, run_id: str, round_no: int, stage: str) -> dict:
    """Eq. 12 scores, R_disc, R_anchor and advantages (no model work)."""
    s = Store.from_url(store)
    score_rows, reward_rows = round_steps.score_sets(_rows(s, rubrics), _rows(s, verdicts), stage)
    return {
        "scores": write_ref(s, "scores", score_rows, f"{stage}-scores", run_id=run_id, round=round_no),
        "rewards": write_ref(s, "rewards", reward_rows, f"{stage}-rewards", run_id=run_id, round=round_no),
    }


@task(name="evaluate-evaluator", **MODEL_STEP)
def evaluate_evaluator(
    cfg: RoundConfig, generator_model: str, verifier_model: str, store: str, run_id: str, round_no: int
) -> dict:
    """Strict accuracy of generator + verifier on the preset's held-out preference slice."""
    s = Store.from_url(store)
    with progress.activity("evaluate evaluator", "requests"):  # the generator's rubrics, then the verdicts
        rows, metrics = round_steps.evaluate_evaluator(
            engine_for(cfg.engines.generator), engine_for(cfg.engines.verifier), cfg, generator_model, verifier_model
        )
    return write_ref(s, "eval", rows, "evaluator", run_id=run_id, round=round_no) | {"metrics": metrics}


@task(name="summarise", **STEP)
def summarise(artifacts: dict, eval_ref: dict | None, store: str) -> dict:
    """The round's summary numbers from its artifacts (no model work)."""
    s = Store.from_url(store)
    get = {k: _rows(s, artifacts[k]) for k in ("prompts", "samples", "rubrics", "verdicts", "scores", "rewards")}
    return round_steps.summarise(
        get["prompts"],
        get["samples"],
        get["rubrics"],
        get["verdicts"],
        get["scores"],
        get["rewards"],
        eval_ref["metrics"] if eval_ref else None,
    )


@task(
    name="adopt-artifacts",
    persist_result=False,
    retries=2,
    retry_delay_seconds=2,
    retry_condition_fn=retry_on_transient,
)
def adopt(artifacts: dict, store: str, run_id: str, round_no: int) -> dict:
    """Make every run artifact live under this run's partition. A step served from the cache of an identical
    earlier run points at that run's file; this copies it here with this run's id (a cheap read and write, no model
    work), so each run id's tables are complete on their own."""
    s = Store.from_url(store)
    out = {}
    for name, ref in artifacts.items():
        table = name if name in {"samples", "rubrics", "verdicts", "scores", "rewards", "eval"} else None
        if table is None or in_run(ref["uri"], run_id, round_no):
            out[name] = ref
            continue
        t = s.read(ref["uri"]).drop_columns(["run_id", "round"])
        part = ref["uri"].rsplit("/", 1)[1].removesuffix(".parquet")
        out[name] = write_ref(s, table, t, part, run_id=run_id, round=round_no) | {
            k: v for k, v in ref.items() if k not in {"uri", "sha256", "rows"}
        }
    return out


@task(name="record-run", persist_result=False, retries=2, retry_delay_seconds=2, retry_condition_fn=retry_on_transient)
def record_run(cfg: RoundConfig, store: str, run_id: str, round_no: int, status: str) -> str:
    """One row in the runs table per (run, round): status, the typed config as JSON and the code version."""
    import datetime as dt

    from tasks.options import code_version

    row = {
        "run_id": run_id,
        "created_at": dt.datetime.now(dt.timezone.utc),
        "status": status,
        "config_json": cfg.model_dump_json(),
        "code_version": code_version(),
    }
    return Store.from_url(store).write("runs", [row], part=f"round-{round_no}", run_id=run_id)


@task(
    name="record-steps", persist_result=False, retries=2, retry_delay_seconds=2, retry_condition_fn=retry_on_transient
)
def record_steps(store: str, run_id: str, round_no: int, flow: str, execution: str, entries: dict) -> str:
    """The flow's step log for one round as ``steps`` rows, one file per (execution, round): a rewrite replaces it."""
    rows = round_steps.step_rows(entries, flow, execution)
    return Store.from_url(store).write("steps", rows, part=f"exec-{execution}", run_id=run_id, round=round_no)


def model_ids(cfg: RoundConfig) -> dict[str, str]:
    """Identity of each role's model (for artifacts and cache keys)."""
    return {role: model_id(getattr(cfg.engines, role)) for role in ("generator", "verifier", "policy")}
