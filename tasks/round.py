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
from dr_core.runs import round_steps
from dr_core.presets import RoundConfig
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
def sample(cfg: RoundConfig, prompts: dict, policy_model: str, store: str, run_id: str, round_no: int,
           stage: str) -> dict:
    """K responses per prompt from the policy."""
    s = Store.from_url(store)
    with progress.activity("sample", "responses"):
        rows = round_steps.sample_sets(engine_for(cfg.engines.policy), _rows(s, prompts), cfg, policy_model, stage)
    return write_ref(s, "samples", rows, f"{stage}-samples", run_id=run_id, round=round_no)


@task(name="generate-rubrics", **MODEL_STEP)
def generate_rubrics(cfg: RoundConfig, prompts: dict, samples: dict, generator_model: str, store: str, run_id: str,
                     round_no: int, stage: str) -> dict:
    """The generator's rubric list(s) for every response set."""
    s = Store.from_url(store)
    with progress.activity("rubrics", "rubrics"):
        rows, cost = round_steps.generate_rubric_rows(engine_for(cfg.engines.generator), _rows(s, prompts),
                                                      _rows(s, samples), cfg, generator_model, stage)
    return write_ref(s, "rubrics", rows, f"{stage}-rubrics", run_id=run_id, round=round_no) | {"cost": cost}


@task(name="verify", **MODEL_STEP)
def verify(cfg: RoundConfig, prompts: dict, samples: dict, anchors: dict, rubrics: dict, verifier_model: str,
           store: str, run_id: str, round_no: int, stage: str) -> dict:
    """The frozen verifier's yes/no for every rubric item on every response of C and of the anchor list."""
    s = Store.from_url(store)
    with progress.activity("verify", "verdicts"):
        rows, cost = round_steps.verify_sets(engine_for(cfg.engines.verifier), _rows(s, prompts), _rows(s, samples),
                                             _rows(s, anchors), _rows(s, rubrics), verifier_model, stage)
    return write_ref(s, "verdicts", rows, f"{stage}-verdicts", run_id=run_id, round=round_no) | {"cost": cost}


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
def evaluate_evaluator(cfg: RoundConfig, generator_model: str, verifier_model: str, store: str, run_id: str,
                       round_no: int) -> dict:
    """Strict accuracy of generator + verifier on the preset's held-out preference slice."""
    s = Store.from_url(store)
    with progress.activity("evaluate evaluator", "requests"):  # the generator's rubrics, then the verdicts
        rows, metrics = round_steps.evaluate_evaluator(engine_for(cfg.engines.generator),
                                                       engine_for(cfg.engines.verifier), cfg, generator_model,
                                                       verifier_model)
    return write_ref(s, "eval", rows, "evaluator", run_id=run_id, round=round_no) | {"metrics": metrics}


@task(name="summarise", **STEP)
def summarise(artifacts: dict, eval_ref: dict | None, store: str) -> dict:
    """The round's summary numbers from its artifacts (no model work)."""
    s = Store.from_url(store)
    get = {k: _rows(s, artifacts[k]) for k in ("prompts", "samples", "rubrics", "verdicts", "scores", "rewards")}
    return round_steps.summarise(get["prompts"], get["samples"], get["rubrics"], get["verdicts"], get["scores"],
                              get["rewards"], eval_ref["metrics"] if eval_ref else None)


@task(name="adopt-artifacts", persist_result=False, retries=2, retry_delay_seconds=2,
      retry_condition_fn=retry_on_transient)
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

    row = {"run_id": run_id, "created_at": dt.datetime.now(dt.timezone.utc), "status": status,
           "config_json": cfg.model_dump_json(), "code_version": code_version()}
    return Store.from_url(store).write("runs", [row], part=f"round-{round_no}", run_id=run_id)


@task(name="record-steps", persist_result=False, retries=2, retry_delay_seconds=2,
      retry_condition_fn=retry_on_transient)
def record_steps(store: str, run_id: str, round_no: int, flow: str, execution: str, entries: dict) -> str:
    """The flow's step log for one round as ``steps`` rows, one file per (execution, round): a rewrite replaces it."""
    rows = round_steps.step_rows(entries, flow, execution)
    return Store.from_url(store).write("steps", rows, part=f"exec-{execution}", run_id=run_id, round=round_no)


def model_ids(cfg: RoundConfig) -> dict[str, str]:
    """Identity of each role's model (for artifacts and cache keys)."""
    return {role: model_id(getattr(cfg.engines, role)) for role in ("generator", "verifier", "policy")}
