"""Policy evaluation (paper section 4.3, appendix C.2, F.2): does the policy answer better than a baseline?

Pairwise, judged: the policy's answers (generated greedily by a model, or read from a saved {"id","answer"} file)
against the baseline's (another model's, a saved file's, or the data file's own ``baseline`` answers: Arena-Hard's
GPT-4-0314). A pairwise judge, any engine, compares each pair in BOTH orders (``dr_core.evaluator.judge``: by default
the order-cancelling first-token log-odds of "A" against "B"; or structured choice), so the order cannot decide:

    outcome = 1    the policy's answer is preferred
              0    the baseline's is preferred
              0.5  a tie (|d| within the threshold; a split choice), counted half
              None a verdict is missing (no letter in the judge's output, a prompt too long): unscorable, counted

win rate = mean outcome over scorable prompts; tie rate = share of 0.5; a 95% percentile bootstrap interval over
prompts; mean answer lengths (characters; tokens where an engine produced the answer); the judge's position bias.

Verifiable tasks (section 5.2, appendix C.3): the policy answers {"prompt","answer"} prompts and
``dr_core.evaluator.answers`` checks each final answer (exact, numeric, math via Math-Verify): accuracy, and the
baseline
checkpoint's when given.

    dr eval-policy --policy default --data dr_core/data/policy_eval_arenahard.jsonl --judge default --limit 4 \\
        --output metrics.json
    dr eval-policy --policy mine.jsonl --baseline theirs.jsonl --data prompts.jsonl --judge default
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from dr_core.config import DEFAULT_MODEL, EngineConfig, engine_config
from dr_core.datasets import DataError, PromptRow, VerifiableRow, load
from dr_core.engines import PROMPT_TOO_LONG, Engine
from dr_core.engines.pool import EnginePool
from dr_core.evaluator import answers
from dr_core.evaluator import judge as judge_mod
from dr_core.evaluator.judge import DEFAULT_PROCEDURE, TIE_THRESHOLD, JudgeProcedure
from dr_core.rubric import prompts

Log = Callable[[str], None]
#: Bootstrap resamples and confidence level of the win-rate interval.
N_BOOT = 2000
CI_LEVEL = 0.95


def _quiet(_msg: str) -> None:
    pass


# -- the math: pure ---------------------------------------------------------------------------------------------------
def pair_outcome(policy_as_a: str | None, policy_as_b: str | None) -> float | None:
    """The policy's result from the judge's two structured choices ("A"/"B"; policy shown as A, then as B): 1.0, 0.0,
    0.5 (split: a tie) or None (a verdict is missing). ``judge.choice_outcome`` seen from the policy."""
    return judge_mod.choice_outcome(policy_as_a, policy_as_b)


def win_rate_summary(outcomes: Sequence[float | None]) -> dict:
    """Counts and rates of per-prompt outcomes (each 0, 0.5, 1 or None). Rates are over scorable prompts; win_rate
    counts a tie half. win_rate and the rates are None when nothing was scorable."""
    scored = [o for o in outcomes if o is not None]
    wins, losses = sum(o == 1.0 for o in scored), sum(o == 0.0 for o in scored)
    ties = len(scored) - wins - losses
    n = len(scored)
    return {
        "n": len(outcomes),
        "scored": n,
        "unscorable": len(outcomes) - n,
        "wins": wins,
        "ties": ties,
        "losses": losses,
        "win_rate": sum(scored) / n if n else None,
        "tie_rate": ties / n if n else None,
        "loss_rate": losses / n if n else None,
    }


def bootstrap_ci(
    values: Sequence[float], *, n_boot: int = N_BOOT, level: float = CI_LEVEL, seed: int = 0
) -> tuple[float, float] | None:
    """Percentile bootstrap interval of the mean: resample ``values`` (n,) with replacement ``n_boot`` times,
    take the (1-level)/2 and (1+level)/2 quantiles of the (n_boot,) resampled means. None for no values."""
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        return None
    idx = np.random.default_rng(seed).integers(0, x.size, size=(n_boot, x.size))
    means = x[idx].mean(axis=1)
    lo, hi = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


def _mean(values) -> float | None:
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


# -- the model glue: behind Engine ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Answer:
    """One answer to a prompt: its text, tokens (None for a fixed answer from a file), whether it was cut by
    max_tokens, whether the prompt did not fit the engine's context at all."""

    text: str
    tokens: int | None = None
    truncated: bool = False
    prompt_too_long: bool = False


def answer_prompts(
    engine: Engine, texts: Sequence[str], *, max_tokens: int, temperature: float = 0.0, seed: int = 0
) -> list[Answer]:
    """The engine's answer to every prompt (policy system prompt; greedy by default), in one batched call."""
    outs = engine.chat(
        [prompts.policy_messages(t) for t in texts], n=1, temperature=temperature, max_tokens=max_tokens, seed=seed
    )
    return [
        Answer(o.texts[0], o.completion_tokens[0], o.truncated[0], o.finish_reasons[0] == PROMPT_TOO_LONG) for o in outs
    ]


def pairwise_metrics(
    policy: Sequence[Answer],
    baseline: Sequence[Answer],
    verdicts: Sequence[dict],
    judge_info: dict | None = None,
    *,
    seed: int = 0,
) -> tuple[dict, list]:
    """Win rate, tie rate, bootstrap interval, lengths and judge diagnostics; plus per-prompt outcomes. Pure.
    ``verdicts``: one {"outcome", ...} per prompt (``judge.judge_both_orders``); ``judge_info`` its diagnostics.
    A prompt whose policy or baseline prompt did not fit the context is unscorable, whatever the judge said."""
    outcomes = [
        None if (p.prompt_too_long or b.prompt_too_long) else v["outcome"]
        for p, b, v in zip(policy, baseline, verdicts, strict=True)
    ]
    summary = win_rate_summary(outcomes)
    ci = bootstrap_ci([o for o in outcomes if o is not None], seed=seed)
    return {
        **summary,
        "win_rate_ci95": list(ci) if ci else None,
        "policy_mean_chars": _mean([len(a.text) for a in policy]),
        "baseline_mean_chars": _mean([len(a.text) for a in baseline]),
        "policy_mean_tokens": _mean([a.tokens for a in policy]),
        "baseline_mean_tokens": _mean([a.tokens for a in baseline]),
        "policy_truncated": sum(a.truncated for a in policy),
        "baseline_truncated": sum(a.truncated for a in baseline),
        "prompt_too_long": sum(p.prompt_too_long or b.prompt_too_long for p, b in zip(policy, baseline)),
        "identical_answers": sum(p.text == b.text for p, b in zip(policy, baseline)),
        **(judge_info or {}),
    }, outcomes


def judge_and_score(
    judge: Engine,
    rows: Sequence[PromptRow],
    policy: Sequence[Answer],
    baseline: Sequence[Answer],
    *,
    seed: int = 0,
    procedure: JudgeProcedure = DEFAULT_PROCEDURE,
    threshold: float = TIE_THRESHOLD,
    log: Log = _quiet,
) -> tuple[dict, list[dict]]:
    """Judge every (policy, baseline) answer pair in both orders; return (metrics, one record per prompt)."""
    t0 = time.perf_counter()
    verdicts, info = judge_mod.judge_both_orders(
        judge,
        [r.prompt for r in rows],
        [p.text for p in policy],
        [b.text for b in baseline],
        procedure=procedure,
        threshold=threshold,
    )
    judge_s = time.perf_counter() - t0
    log(f"judge gave {2 * len(rows)} verdicts in {judge_s:.1f} s ({info['judge_procedure']})")
    if info["judge_fallback"]:
        log(f"judge: {info['judge_fallback']}")
    metrics, outcomes = pairwise_metrics(policy, baseline, verdicts, info, seed=seed)
    metrics["judge"] = judge.model_name
    metrics["judge_seconds"] = round(judge_s, 2)
    records = [
        {
            "id": r.id,
            "prompt": r.prompt,
            "policy": p.text,
            "baseline": b.text,
            "policy_truncated": p.truncated,
            "judge_policy_as_a": v["as_a"],
            "judge_policy_as_b": v["as_b"],
            "judge_d": v["d"],
            "outcome": o,
        }
        for r, p, b, v, o in zip(rows, policy, baseline, verdicts, outcomes)
    ]
    return metrics, records


def fixed_baseline(rows: Sequence[PromptRow]) -> list[Answer]:
    """The rows' own baseline answers (ValueError naming the ids that have none)."""
    missing = [r.id for r in rows if r.baseline is None]
    if missing:
        raise ValueError(f"no baseline answer for id(s) {missing[:5]}: give --baseline CKPT or a file with them")
    return [Answer(r.baseline) for r in rows]


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
    log: Log = _quiet,
) -> tuple[dict, list[dict]]:
    """Answer ``rows`` with ``policy`` (and ``baseline`` when given, else use each row's ``baseline`` answer), judge
    every pair in both orders, return (metrics, one record per prompt)."""
    texts = [r.prompt for r in rows]
    pol = answer_prompts(policy, texts, max_tokens=max_tokens, seed=seed)
    base = (
        answer_prompts(baseline, texts, max_tokens=max_tokens, seed=seed)
        if baseline is not None
        else fixed_baseline(rows)
    )
    return judge_and_score(judge, rows, pol, base, seed=seed, procedure=procedure, threshold=threshold, log=log)


def eval_rows(metrics: dict, *, benchmark: str, checkpoint: str, judge: str, seed: int) -> list[dict]:
    """``eval`` table rows (benchmark, checkpoint, verifier = the judge, seed, metric, value) of a pairwise run;
    a value that could not be computed is NULL."""
    ci = metrics.get("win_rate_ci95") or [None, None]
    values = {
        "win_rate": metrics["win_rate"],
        "tie_rate": metrics["tie_rate"],
        "win_rate_ci_low": ci[0],
        "win_rate_ci_high": ci[1],
        "n": metrics["n"],
        "unscorable": metrics["unscorable"],
        "policy_mean_chars": metrics["policy_mean_chars"],
        "baseline_mean_chars": metrics["baseline_mean_chars"],
        "judge_position_a_rate": metrics.get("judge_position_a_rate"),
        "judge_position_bias": metrics.get("judge_position_bias"),
    }
    base = {"benchmark": benchmark, "checkpoint": checkpoint, "verifier": judge, "seed": seed}
    return [{**base, "metric": k, "value": None if v is None else float(v)} for k, v in values.items()]


# -- verifiable tasks ---------------------------------------------------------------------------------------------
def load_verifiable(path: str | Path, task: str, limit: int | None = None) -> list[VerifiableRow]:
    """{"id"?, "prompt", "answer"} rows, every reference checked readable for ``task`` before any model work
    (DataError file:line: field 'answer' otherwise)."""
    if task not in answers.TASKS:
        raise ValueError(f"--task must be one of {', '.join(answers.TASKS)}, got {task!r}")
    rows = load(path, "verifiable")
    for r in rows:
        why = answers.reference_error(task, r.answer)
        if why:
            raise DataError(path, r.line, "answer", why)
    return rows[:limit] if limit else rows


def score_verifiable(
    rows: Sequence[VerifiableRow], task: str, runs: dict[str, Sequence[Answer]]
) -> tuple[dict, list[dict]]:
    """Accuracy of each run's final answers ({"policy": answers, "baseline": answers?}), per-prompt records. Pure
    (Math-Verify aside)."""
    metrics: dict = {"n": len(rows), "task": task}
    correct = {}
    for who, ans in runs.items():
        correct[who] = [answers.is_correct(task, a.text, r.answer) for a, r in zip(ans, rows, strict=True)]
        metrics[f"{who}_accuracy"] = sum(correct[who]) / len(rows)
        metrics[f"{who}_mean_tokens"] = _mean([a.tokens for a in ans])
        metrics[f"{who}_truncated"] = sum(a.truncated for a in ans)
        metrics[f"{who}_no_answer"] = sum(
            (answers.final_answer(a.text, task) is None) if task != "math" else not answers.parse_math(a.text)
            for a in ans
        )
    if "baseline" in runs:
        metrics["accuracy_delta"] = metrics["policy_accuracy"] - metrics["baseline_accuracy"]
    records = [
        {"id": r.id, "prompt": r.prompt, "reference": r.answer}
        | {who: runs[who][i].text for who in runs}
        | {f"{who}_correct": correct[who][i] for who in runs}
        for i, r in enumerate(rows)
    ]
    return metrics, records


# -- the command: resolve engines, load, run ------------------------------------------------------------------------
def engine_spec(spec: str, *, max_model_len: int = 4096, api_key: str | None = None) -> EngineConfig:
    """An engine from a command-line word: a bundled model's name (``default``, ``qwen2.5-coder-0.5b-instruct``,
    ...; `dr model list`), a local Hugging Face
    checkpoint directory, or an OpenAI-compatible server ``http(s)://host:port/v1[#served-model-name]`` (no name:
    the server's only model). ConfigError (a ValueError) with the fix otherwise."""
    if spec.startswith(("http://", "https://")):
        url, _, name = spec.partition("#")
        return engine_config(
            kind="openai_http", base_url=url, model=name or DEFAULT_MODEL, **({"api_key": api_key} if api_key else {})
        )
    return engine_config(model=spec, max_model_len=max_model_len)


def is_checkpoint_spec(spec: str) -> bool:
    """True when a --policy/--baseline word names a model (bundled name, URL, checkpoint directory), False for a
    file of saved answers."""
    from dr_core.model import is_bundled

    return is_bundled(spec) or spec.startswith(("http://", "https://")) or Path(spec).is_dir()


def _first_object(path: str | Path) -> dict:
    import json

    try:
        with open(path, encoding="utf-8-sig") as f:
            for line in f:
                if line.strip():
                    obj = json.loads(line)
                    return obj if isinstance(obj, dict) else {}
    except (OSError, ValueError):
        pass
    return {}  # load() reports what is wrong with the file, with its line


def answers_from_file(rows: Sequence, path: str | Path, who: str) -> list[Answer]:
    """Saved answers ({"id", "answer"} JSONL, every line validated) for ``rows``, matched by id; rows of the file that
    no prompt asks for are ignored. DataError naming the first prompt without an answer."""
    given = {a.id: a for a in load(path, "answers")}
    out = []
    for r in rows:
        a = given.get(r.id)
        if a is None:
            raise DataError(
                path, 0, "id", f"no {who} answer with id {r.id!r} (the prompt on line {r.line} of the data file)"
            )
        out.append(Answer(a.answer))
    return out


def baseline_from_file(rows: Sequence[PromptRow], path: str | Path) -> list[PromptRow]:
    """``rows`` with their baseline answers taken from ``path``, matched by id: saved answers ({"id","answer"}) or
    the policy_eval format ({"id","prompt","baseline"}). DataError for a prompt with no row in ``path`` (naming the
    prompt's id) or a row without a ``baseline`` (naming its line)."""
    if "answer" in _first_object(path):
        return [
            PromptRow(r.id, r.prompt, a.text, r.line) for r, a in zip(rows, answers_from_file(rows, path, "baseline"))
        ]
    given = {r.id: r for r in load(path, "policy_eval")}
    out = []
    for r in rows:
        b = given.get(r.id)
        if b is None:
            raise DataError(path, 0, "id", f"no row with id {r.id!r} (the prompt on line {r.line} of the data file)")
        if b.baseline is None:
            raise DataError(path, b.line, "baseline", f"missing: no baseline answer for id {r.id!r}")
        out.append(PromptRow(r.id, r.prompt, b.baseline, r.line))
    return out


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
    max_model_len: int = 4096,
    api_key: str | None = None,
    procedure: JudgeProcedure = DEFAULT_PROCEDURE,
    threshold: float = TIE_THRESHOLD,
    log: Log = _quiet,
) -> tuple[dict, list[dict]]:
    """What ``dr eval-policy`` does: validate every input first (data file, answers files, engine words), then
    answer, judge or check, and return (metrics, per-prompt records). Nothing is written here.

    ``policy`` and ``baseline`` are each a model word (answers are generated) or a file of saved answers (nothing
    is generated). Phases run one after another (policy answers, baseline answers, judge); an engine is closed as
    soon as no later phase needs it, and shared when two roles name the same model."""
    if procedure not in judge_mod.JUDGE_PROCEDURES:
        raise ValueError(f"--judge-procedure must be one of {', '.join(judge_mod.JUDGE_PROCEDURES)}, got {procedure!r}")
    if not threshold >= 0:
        raise ValueError(f"--tie-threshold must be >= 0, got {threshold}")
    pol_cfg = base_cfg = judge_cfg = None
    saved: dict[str, list[Answer]] = {}
    if task is not None:
        rows = load_verifiable(data, task, limit)
        if baseline is not None and not is_checkpoint_spec(baseline):
            raise ValueError(
                f"--baseline {baseline!r}: verifiable tasks compare against a model (default, a "
                "checkpoint directory or a URL), not an answers file"
            )
    else:
        if judge is None:
            raise ValueError("--judge is required for pairwise evaluation (default, a checkpoint or a URL)")
        rows = load(data, "policy_eval", limit)
        if baseline is not None and not is_checkpoint_spec(baseline):
            rows = baseline_from_file(rows, baseline)
        elif baseline is None:
            missing = [r for r in rows if r.baseline is None]
            if missing:
                raise DataError(
                    data,
                    missing[0].line,
                    "baseline",
                    f"missing (id {missing[0].id!r}; "
                    f"{len(missing)} row(s) without one): add the field or pass --baseline CKPT|FILE",
                )
    if is_checkpoint_spec(policy):
        pol_cfg = engine_spec(policy, max_model_len=max_model_len, api_key=api_key)
    elif Path(policy).suffix in (".jsonl", ".json") or Path(policy).is_file():
        saved["policy"] = answers_from_file(rows, policy, "policy")
    else:
        pol_cfg = engine_spec(policy, max_model_len=max_model_len, api_key=api_key)  # ConfigError naming the word
    if task is None:
        judge_cfg = judge_mod.judge_engine_config(
            engine_spec(judge, max_model_len=max_model_len, api_key=api_key), procedure
        )
    if baseline is not None and is_checkpoint_spec(baseline):
        base_cfg = engine_spec(baseline, max_model_len=max_model_len, api_key=api_key)
    log(f"{len(rows)} prompts from {data}")
    texts = [r.prompt for r in rows]
    engines = EnginePool(log)  # closes an engine as soon as no later phase needs it
    names: dict[str, str] = {"policy": f"file:{policy}"} if "policy" in saved else {}
    runs: dict[str, list[Answer]] = dict(saved)
    t0 = time.perf_counter()
    try:
        for who, cfg, later in (("policy", pol_cfg, [base_cfg, judge_cfg]), ("baseline", base_cfg, [judge_cfg])):
            if cfg is None:
                continue
            engine = engines.get(cfg)
            t = time.perf_counter()
            runs[who] = answer_prompts(engine, texts, max_tokens=max_tokens, seed=seed)
            log(f"{who} answered {len(texts)} prompts in {time.perf_counter() - t:.1f} s")
            names[who] = engine.model_name
            engines.release(cfg, later)
        if task is not None:
            metrics, records = score_verifiable(rows, task, runs)
        else:
            base = runs.get("baseline") or fixed_baseline(rows)
            metrics, records = judge_and_score(
                engines.get(judge_cfg),
                rows,
                runs["policy"],
                base,
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
            "policy": names["policy"],
            "baseline": names.get("baseline")
            or (f"file:{baseline}" if baseline else None if task else "data:baseline"),
            "startup_seconds": round(engines.startup_s, 2),
            "seconds": round(time.perf_counter() - t0, 2),
        }
    )
    return metrics, records
