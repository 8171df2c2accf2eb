"""``dr eval-policy``'s command (the package docstring says what it measures): ``run_eval_policy``."""

from __future__ import annotations

import time
from functools import partial
from pathlib import Path
from typing import Callable, Sequence

from dr_core import progress
from dr_core.config import DEFAULT_MODEL, EngineConfig, EnginesConfig, engine_config
from dr_core.config.presets import engine_label, models_line
from dr_core.datasets import DataError, PromptRow, VerifiableRow, load
from dr_core.engines import Engine
from dr_core.engines.pool import EnginePool
from dr_core.evals.policy_eval.answers import (
    Answer,
    answer_prompts,
    answers_from_file,
    baseline_from_file,
    fixed_baseline,
)
from dr_core.evals.policy_eval.scoring import (
    CI_LEVEL,
    N_BOOT,
    Log,
    bootstrap_ci,
    eval_rows,
    judge_and_score,
    pair_outcome,
    pairwise_metrics,
    quiet,
    score_ifeval,
    score_verifiable,
    win_rate_summary,
)
from dr_core.evaluator import answers
from dr_core.evaluator import judge as judge_mod
from dr_core.evaluator.judge import DEFAULT_PROCEDURE, TIE_THRESHOLD, JudgeProcedure

__all__ = [
    "CI_LEVEL",
    "IFEVAL_TASK",
    "N_BOOT",
    "POLICY_TASKS",
    "Answer",
    "Log",
    "answer_prompts",
    "answers_from_file",
    "baseline_from_file",
    "bootstrap_ci",
    "engine_spec",
    "eval_rows",
    "evaluate_pairwise",
    "fixed_baseline",
    "is_checkpoint_spec",
    "judge_and_score",
    "load_verifiable",
    "pair_outcome",
    "pairwise_metrics",
    "run_eval_policy",
    "score_ifeval",
    "score_verifiable",
    "win_rate_summary",
]


def evaluate_pairwise(
    policy: Engine,
    judge: Engine,
    rows: Sequence[PromptRow],
    *,
    baseline: Engine | None = None,
    max_tokens: int = 256,
    seed: int = 0,
    procedure: JudgeProcedure = DEFAULT_PROCEDURE,
    threshold: float = TIE_THRESHOLD,
    log: Log = quiet,
) -> tuple[dict, list[dict]]:
    """Answer ``rows`` with ``policy``, judge every pair in both orders, return (metrics, one record per prompt).
    The other answer of a pair is ``baseline``'s when given, else the row's own ``baseline`` answer."""
    texts = [r.prompt for r in rows]
    pol = answer_prompts(policy, texts, max_tokens=max_tokens, seed=seed)
    base = (
        answer_prompts(baseline, texts, max_tokens=max_tokens, seed=seed)
        if baseline is not None
        else fixed_baseline(rows)
    )
    return judge_and_score(judge, rows, pol, base, seed=seed, procedure=procedure, threshold=threshold, log=log)


# -- verifiable tasks ---------------------------------------------------------------------------------------------
#: The instruction-following task: IFEval-shaped rows checked by IFEval's own code (dr_core/ifeval/).
IFEVAL_TASK = "ifeval"
#: Every --task: the final-answer tasks, then IFEval.
POLICY_TASKS = (*answers.TASKS, IFEVAL_TASK)


def load_verifiable(path: str | Path, task: str, limit: int | None = None) -> list[VerifiableRow]:
    """{"id"?, "prompt", "answer"} rows, every reference checked readable for ``task`` before any model work
    (DataError file:line: field 'answer' otherwise)."""
    if task not in answers.TASKS:
        raise ValueError(f"--task must be one of {', '.join(POLICY_TASKS)}, got {task!r}")
    rows = load(path, "verifiable")
    for r in rows:
        why = answers.reference_error(task, r.answer)
        if why:
            raise DataError(path, r.line, "answer", why)
    return rows[:limit] if limit else rows


# -- the command: resolve engines, load, run ------------------------------------------------------------------------
def engine_spec(
    spec: str, *, max_model_len: int | None = None, api_key: str | None = None, default: EngineConfig | None = None
) -> EngineConfig:
    """An engine from a command-line word: ``default`` (the role ``default`` when given, else the default bundled
    model), a bundled model's name (``qwen2.5-coder-0.5b-instruct``, ...; `dr model list`), a local Hugging Face
    checkpoint directory, or an OpenAI-compatible server ``http(s)://host:port/v1[#served-model-name]`` (no name:
    the server's only model). ``max_model_len``: the in-process engine's context (None: the role's, else 4096).
    ConfigError (a ValueError) with the fix otherwise."""
    if spec == DEFAULT_MODEL and default is not None:
        if max_model_len is None or default.kind != "vllm":
            return default
        return engine_config(**{**default.model_dump(), "max_model_len": max_model_len})
    if spec.startswith(("http://", "https://")):
        url, _, name = spec.partition("#")
        return engine_config(
            kind="openai_http", base_url=url, model=name or DEFAULT_MODEL, **({"api_key": api_key} if api_key else {})
        )
    return engine_config(model=spec, max_model_len=max_model_len or 4096)


def is_checkpoint_spec(spec: str) -> bool:
    """True when a --policy/--baseline word names a model (bundled name, URL, checkpoint directory), False for a
    file of saved answers."""
    from dr_core.model import is_bundled

    return is_bundled(spec) or spec.startswith(("http://", "https://")) or Path(spec).is_dir()


def run_eval_policy(
    *,
    policy: str,
    data: str | Path,
    judge: str | None = None,
    baseline: str | None = None,
    task: str | None = None,
    limit: int | None = None,
    max_tokens: int = 256,
    seed: int = 0,
    max_model_len: int | None = None,
    api_key: str | None = None,
    procedure: JudgeProcedure = DEFAULT_PROCEDURE,
    threshold: float = TIE_THRESHOLD,
    roles: EnginesConfig | None = None,
    roles_source: str = "engine defaults",
    log: Log = quiet,
) -> tuple[dict, list[dict]]:
    """What ``dr eval-policy`` does: validate every input first (data file, answers files, engine words), then
    answer, judge or check, and return (metrics, per-prompt records). Nothing is written here.

    ``policy`` and ``baseline`` are each a model word (answers are generated) or a file of saved answers (nothing
    is generated); ``default`` is a role of ``roles`` (``_engines``). Phases run one after another (policy answers,
    baseline answers, judge); an engine is closed once no later phase needs it, shared by roles of one model."""
    _check_judging(procedure, threshold)
    rows = _load_rows(data, task=task, judge=judge, baseline=baseline, limit=limit)
    spec = partial(engine_spec, max_model_len=max_model_len, api_key=api_key)
    (pol_cfg, base_cfg, judge_cfg), saved = _engines((policy, judge, baseline), rows, spec, roles, task, procedure)
    log(_models_line(roles_source, (policy, judge, baseline), (pol_cfg, base_cfg, judge_cfg), task or procedure))
    log(f"{len(rows)} prompts from {data}")
    engines = EnginePool(log)  # closes an engine as soon as no later phase needs it
    t0 = time.perf_counter()
    try:
        phases = (("policy", pol_cfg, [base_cfg, judge_cfg]), ("baseline", base_cfg, [judge_cfg]))
        generated, names = _answer_phases(engines, rows, phases, max_tokens=max_tokens, seed=seed, log=log)
        metrics, records = _score(
            engines,
            judge_cfg,
            rows,
            {**saved, **generated},
            task,
            seed=seed,
            procedure=procedure,
            threshold=threshold,
            log=log,
        )
    finally:
        engines.close()
    metrics.update(
        {
            "input": str(data),
            "limit": limit,
            "max_tokens": max_tokens,
            "seed": seed,
            **_answered_by(names, policy=policy, baseline=baseline, task=task),
            "startup_seconds": round(engines.startup_s, 2),
            "seconds": round(time.perf_counter() - t0, 2),
        }
    )
    return metrics, records


def _engines(words: tuple, rows: Sequence, spec: Callable, roles: EnginesConfig | None, task, procedure):
    """((policy, baseline, judge) engine configs, each None where no model answers or judges; the saved answers):
    ``default`` is a role of ``roles`` (the judge: its verifier; the policy and a baseline: its policy). No judge
    for a verifiable ``task``."""
    policy, judge, baseline = words
    policy_role, verifier_role = (None, None) if roles is None else (roles.policy, roles.verifier)
    pol_cfg, saved = _policy_source(policy, rows, partial(spec, default=policy_role))
    judge_cfg = judge_mod.judge_engine_config(spec(judge, default=verifier_role), procedure) if not task else None
    base_cfg = spec(baseline, default=policy_role) if baseline is not None and is_checkpoint_spec(baseline) else None
    return (pol_cfg, base_cfg, judge_cfg), saved


def _models_line(source: str, words: tuple, configs: tuple, how: str) -> str:
    """The command's models line: the policy, the baseline (a model or an answers file; omitted: the data's own
    answers), then the judge with its procedure (``how``), or the verifiable task (``how``) that checks answers.
    ``source`` (where ``default`` comes from) is said only when a word is ``default``."""
    (policy, _judge, baseline), (pol_cfg, base_cfg, judge_cfg) = words, configs
    source = source if DEFAULT_MODEL in words else "command line"
    parts = [("policy", engine_label(pol_cfg) if pol_cfg is not None else f"answers file {policy}")]
    if base_cfg is not None or baseline is not None:
        parts.append(("baseline", engine_label(base_cfg) if base_cfg is not None else f"answers file {baseline}"))
    if judge_cfg is not None:
        parts.append(("judge", f"{engine_label(judge_cfg)} ({how} in both orders)"))
    else:
        parts.append(("task", how))
    return models_line(source, parts)


def _answered_by(names: dict[str, str], *, policy: str, baseline: str | None, task: str | None) -> dict:
    """Who gave the answers compared: each model's name (``names``), ``file:PATH`` for saved answers,
    ``data:baseline`` for the rows' own baseline answers (None: a verifiable task without a baseline)."""
    return {
        "policy": names.get("policy", f"file:{policy}"),
        "baseline": names.get("baseline") or (f"file:{baseline}" if baseline else None if task else "data:baseline"),
    }


def _check_judging(procedure: str, threshold: float) -> None:
    """ValueError for a judge procedure or tie threshold the judge does not take."""
    if procedure not in judge_mod.JUDGE_PROCEDURES:
        raise ValueError(f"--judge-procedure must be one of {', '.join(judge_mod.JUDGE_PROCEDURES)}, got {procedure!r}")
    if not threshold >= 0:
        raise ValueError(f"--tie-threshold must be >= 0, got {threshold}")


def _load_rows(
    data: str | Path, *, task: str | None, judge: str | None, baseline: str | None, limit: int | None
) -> list[PromptRow] | list[VerifiableRow]:
    """The prompts to evaluate, checked before any model work: verifiable rows (``task``) compared with a model
    only; pairwise rows need a judge, and a baseline answer per row (from ``baseline``'s file, or the data's own)."""
    if task == IFEVAL_TASK:
        from dr_core.ifeval.checks import load_rows

        rows = load_rows(data, limit)  # every line validated (ids, instructions, kwargs) before any model work
        _no_answers_file_baseline(baseline)
        return rows
    if task is not None:
        rows = load_verifiable(data, task, limit)
        _no_answers_file_baseline(baseline)
        return rows
    if judge is None:
        raise ValueError("--judge is required for pairwise evaluation (default, a checkpoint or a URL)")
    rows = load(data, "policy_eval", limit)
    if baseline is not None and not is_checkpoint_spec(baseline):
        return baseline_from_file(rows, baseline)
    if baseline is None:
        missing = [r for r in rows if r.baseline is None]
        if missing:
            raise DataError(
                data,
                missing[0].line,
                "baseline",
                f"missing (id {missing[0].id!r}; "
                f"{len(missing)} row(s) without one): add the field or pass --baseline CKPT|FILE",
            )
    return rows


def _no_answers_file_baseline(baseline: str | None) -> None:
    if baseline is not None and not is_checkpoint_spec(baseline):
        raise ValueError(
            f"--baseline {baseline!r}: verifiable tasks compare against a model (default, a "
            "checkpoint directory or a URL), not an answers file"
        )


def _policy_source(
    policy: str, rows: Sequence, spec: Callable[[str], EngineConfig]
) -> tuple[EngineConfig | None, dict[str, list[Answer]]]:
    """(the policy's engine, None for saved answers; {"policy": its saved answers} or {}). A word that is neither a
    model nor a file is a ConfigError naming it."""
    if is_checkpoint_spec(policy):
        return spec(policy), {}
    if Path(policy).suffix in (".jsonl", ".json") or Path(policy).is_file():
        return None, {"policy": answers_from_file(rows, policy, "policy")}
    return spec(policy), {}  # ConfigError naming the word


def _score(
    engines: EnginePool,
    judge_cfg: EngineConfig | None,
    rows: Sequence,
    runs: dict[str, list[Answer]],
    task: str | None,
    *,
    seed: int,
    procedure: JudgeProcedure,
    threshold: float,
    log: Log,
) -> tuple[dict, list[dict]]:
    """(metrics, per-prompt records): each run's accuracy on a verifiable ``task``; else the judge's verdicts on the
    policy's answers against the baseline's (the rows' own when no baseline answered)."""
    if task == IFEVAL_TASK:
        return score_ifeval(rows, runs, seed=seed)
    if task is not None:
        return score_verifiable(rows, task, runs)
    base = runs.get("baseline") or fixed_baseline(rows)
    judge = engines.get(judge_cfg)
    log(f"judging {len(rows)} answer pairs in both orders")
    with progress.activity("judge", "verdicts"):
        return judge_and_score(
            judge, rows, runs["policy"], base, seed=seed, procedure=procedure, threshold=threshold, log=log
        )


def _answer_phases(
    engines: EnginePool,
    rows: Sequence,
    phases: Sequence[tuple[str, EngineConfig | None, list]],
    *,
    max_tokens: int,
    seed: int,
    log: Log,
) -> tuple[dict[str, list[Answer]], dict[str, str]]:
    """Each phase's answers to every prompt (``who`` -> answers) and the model that gave them (``who`` -> name), in
    order; a phase without an engine is skipped, and an engine is released once no later phase needs it."""
    texts = [r.prompt for r in rows]
    runs: dict[str, list[Answer]] = {}
    names: dict[str, str] = {}
    for who, cfg, later in phases:
        if cfg is None:
            continue
        engine = engines.get(cfg)
        log(f"{who}: answering {len(texts)} prompts")
        t = time.perf_counter()
        with progress.activity(f"{who} answers", "answers"):
            runs[who] = answer_prompts(engine, texts, max_tokens=max_tokens, seed=seed)
        log(f"{who} answered {len(texts)} prompts in {time.perf_counter() - t:.1f} s")
        names[who] = engine.model_name
        engines.release(cfg, later)
    return runs, names
