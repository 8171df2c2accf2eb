"""The learning benchmark's figures: per-prompt measurements of a generator's rubrics, means with bootstrap
intervals over prompts, per-prompt differences, and the training curves of the generator and policy updates."""

from __future__ import annotations

import numpy as np

from dr_core.evals.policy_eval import bootstrap_ci

METRICS = ("r_disc", "saturated_items", "anchor_tie_rate", "anchor_strict_accuracy", "unparseable")


def ci(values) -> dict:
    vals = [float(v) for v in values if v is not None and not np.isnan(v)]
    if not vals:
        return {"mean": None, "ci95": None, "n": 0}
    return {"mean": float(np.mean(vals)), "ci95": bootstrap_ci(vals), "n": len(vals)}


def prompt_metrics(records: list[dict]) -> dict:
    """The five figures of one prompt from its measurement rollouts (GeneratorReward records)."""
    parsed = [r for r in records if r["items"] is not None and r["scorable"]]
    sat, ties, right, pairs = [], 0, 0, 0
    for r in parsed:
        cols = list(zip(*r["verdicts_C"]))  # per item: its verdicts over C
        sat += [len(set(c)) == 1 for c in cols]
        s = r["scores_anchor"]
        for i in range(len(s)):
            for j in range(i + 1, len(s)):  # anchors are best first: i is better than j
                if s[i] is None or s[j] is None:
                    continue
                pairs += 1
                ties += abs(s[i] - s[j]) < 1e-9
                right += s[i] > s[j] + 1e-9
    return {
        "r_disc": float(np.mean([r["r_disc"] for r in parsed])) if parsed else None,
        "saturated_items": float(np.mean(sat)) if sat else None,
        "anchor_tie_rate": ties / pairs if pairs else None,
        "anchor_strict_accuracy": right / pairs if pairs else None,
        "unparseable": sum(r["items"] is None for r in records) / len(records),
    }


def summarise(per_prompt: list[dict]) -> dict:
    return {m: ci([p[m] for p in per_prompt]) for m in METRICS}


def diff(before: list[dict], after: list[dict]) -> dict:
    return {
        m: ci([a[m] - b[m] for a, b in zip(after, before) if a[m] is not None and b[m] is not None]) for m in METRICS
    }


def pooled(per_seed: list[list[dict]], n_prompts: int) -> list[dict]:
    """Per prompt, each figure's mean over the seeds that have it (None where no seed has)."""
    return [
        {
            m: (
                float(np.mean([p[i][m] for p in per_seed if p[i][m] is not None]))
                if any(p[i][m] is not None for p in per_seed)
                else None
            )
            for m in METRICS
        }
        for i in range(n_prompts)
    ]


def curve(history: list[dict], rollouts: list[dict], lam: float) -> dict:
    """Training reward per step (mean and spread over each group's rollouts), steps without gradient, and the mean
    of the first 10 steps against the last 10."""
    steps = []
    for h in history:
        groups: dict[int, list[float]] = {}
        for r in rollouts:
            if r["step"] == h["step"]:
                groups.setdefault(r["group_id"], []).append(r["r_disc"] + lam * r["r_anchor"])
        spread = [float(np.std(v)) for v in groups.values()]
        steps.append(
            {
                "step": h["step"],
                "reward_mean": h["reward_mean"],
                "r_disc_mean": h["r_disc_mean"],
                "r_anchor_mean": h["r_anchor_mean"],
                "unparseable": h["unparseable"],
                "group_std": float(np.mean(spread)) if spread else None,
                "zero_std_groups": sum(s < 1e-6 for s in spread),
                "groups": len(groups),
            }
        )
    rewards = [s["reward_mean"] for s in steps]
    n = min(10, len(rewards) // 2) or 1
    return {
        "steps": steps,
        "first10": float(np.mean(rewards[:n])),
        "last10": float(np.mean(rewards[-n:])),
        "r_disc_first10": float(np.mean([s["r_disc_mean"] for s in steps[:n]])),
        "r_disc_last10": float(np.mean([s["r_disc_mean"] for s in steps[-n:]])),
        "window": n,
        "steps_without_gradient": sum(s["zero_std_groups"] == s["groups"] for s in steps),
    }


def policy_curve(rollouts: list[dict]) -> tuple[list[dict], dict[tuple[int, int], list[float]]]:
    """A policy update's reward per step (mean over its groups of the mean Eq. 12 score, and the mean group spread),
    and the scored rollouts' scores by (step, group)."""
    groups: dict[tuple[int, int], list[float]] = {}
    for r in rollouts:
        if r["score"] is not None:
            groups.setdefault((r["step"], r["group_id"]), []).append(float(r["score"]))
    steps = [
        {
            "step": s,
            "reward_mean": float(np.mean([np.mean(v) for (st, _g), v in groups.items() if st == s])),
            "group_std": float(np.mean([np.std(v) for (st, _g), v in groups.items() if st == s])),
        }
        for s in sorted({s for s, _ in groups})
    ]
    return steps, groups
