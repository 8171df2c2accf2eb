"""Scoring a policy evaluation (dr_core/evals/policy_eval/run.py): the pairwise judge's verdicts and the verifiable
checks turned into metrics, per-prompt records and ``eval`` rows. The math is pure.

Pairwise: a judge (``dr_core.evaluator.judge``) compares each (policy, baseline) pair in both orders:

    outcome = 1    the policy's answer is preferred
              0    the baseline's is preferred
              0.5  a tie (|d| within the threshold; a split choice), counted half
              None a verdict is missing (no letter in the judge's output, a prompt too long): unscorable, counted

win rate = mean outcome over scorable prompts; tie rate = share of 0.5; a 95% percentile bootstrap interval over
prompts; mean answer lengths (characters; tokens where an engine produced the answer); the judge's position bias.

Verifiable tasks: ``dr_core.evaluator.answers`` checks each final answer (exact, numeric, math via Math-Verify):
accuracy of each run, and the difference to the baseline checkpoint's when given.
"""

from __future__ import annotations

import time
from typing import Callable, Sequence

import numpy as np

from dr_core.datasets import PromptRow, VerifiableRow
from dr_core.engines import Engine
from dr_core.evals.policy_eval.answers import Answer
from dr_core.evaluator import answers
from dr_core.evaluator import judge as judge_mod
from dr_core.evaluator.judge import DEFAULT_PROCEDURE, TIE_THRESHOLD, JudgeProcedure
from dr_core.store.rows import EvalRow

Log = Callable[[str], None]
#: Bootstrap resamples and confidence level of the win-rate interval.
N_BOOT = 2000
CI_LEVEL = 0.95


def quiet(_msg: str) -> None:
    """The log that says nothing."""


# -- the math: pure -------------------------------------------------------------------------------------------------
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


# -- pairwise: the judge's verdicts as metrics ------------------------------------------------------------------------
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
    log: Log = quiet,
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


def eval_rows(metrics: dict, *, benchmark: str, checkpoint: str, judge: str, seed: int) -> list[EvalRow]:
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
    return [EvalRow(benchmark, checkpoint, judge, seed, k, None if v is None else float(v)) for k, v in values.items()]


# -- verifiable tasks -------------------------------------------------------------------------------------------------
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


# -- IFEval ---------------------------------------------------------------------------------------------------------
def score_ifeval(rows: Sequence, runs: dict[str, Sequence[Answer]], seed: int = 0) -> tuple[dict, list[dict]]:
    """lm-eval's four IFEval accuracies of each run ({"policy": answers, "baseline": answers?}), each with its 95 %
    interval (``dr_core.ifeval.metrics``), from the library's own checkers (``dr_core.ifeval.checks``); per-prompt
    records with every instruction's strict and loose verdict. A row whose checker cannot run here is unscorable:
    left out of the accuracies, counted (``unscorable``) and named (``unscorable_instructions``)."""
    from dr_core.ifeval import checks, metrics

    missing = checks.unavailable_instructions()
    ok = [checks.scorable(r, missing) for r in rows]
    unscorable = sorted({i for r, good in zip(rows, ok) if not good for i in r.instruction_id_list if i in missing})
    out: dict = {"n": len(rows), "task": "ifeval", "scored": sum(ok), "unscorable": len(rows) - sum(ok)}
    out["unscorable_instructions"] = unscorable
    verdicts = {
        who: [checks.check(r, a.text) if good else None for r, a, good in zip(rows, ans, ok, strict=True)]
        for who, ans in runs.items()
    }
    for who, ans in runs.items():
        scored = [[(v.strict, v.loose) for v in vs] for vs in verdicts[who] if vs is not None]
        out |= {f"{who}_{k}": v for k, v in metrics.accuracies(scored, seed=seed).items()}
        out[f"{who}_mean_tokens"] = _mean([a.tokens for a in ans])
        out[f"{who}_truncated"] = sum(a.truncated for a in ans)
    if "baseline" in runs and out["scored"]:
        out["prompt_level_strict_acc_delta"] = (
            out["policy_prompt_level_strict_acc"] - out["baseline_prompt_level_strict_acc"]
        )
    records = []
    for i, r in enumerate(rows):
        rec = {"id": r.id, "prompt": r.prompt, "instruction_id_list": list(r.instruction_id_list), "scorable": ok[i]}
        for who in runs:
            vs = verdicts[who][i]
            rec[who] = runs[who][i].text
            rec[f"{who}_strict"] = None if vs is None else [v.strict for v in vs]
            rec[f"{who}_loose"] = None if vs is None else [v.loose for v in vs]
            rec[f"{who}_prompt_strict"] = None if vs is None else all(v.strict for v in vs)
        records.append(rec)
    return out, records
