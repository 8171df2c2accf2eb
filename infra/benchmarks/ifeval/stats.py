"""The IFEval benchmark's figures (numpy only): Spearman agreement of a rubric's scores with the code's counts, the
hierarchical bootstrap over seeds then prompts, and the training curves of an update.

Intervals resample the trained seeds first and then the prompts within each drawn seed (``hierarchical_ci``): the
three seeds are a level of the resampling, not fixed, so the interval carries the run-to-run spread of training as
well as the prompts'. Each seed's difference pairs the trained arm with its own control (G(S) of seed s against G(0)
sampled with seed s and as many rubrics; a policy of seed s against the other policy of seed s, or against P(0)).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np


def rankdata(v: np.ndarray) -> np.ndarray:
    """1-based ranks, ties given their average rank."""
    order = np.argsort(v, kind="stable")
    ranks = np.empty(len(v))
    ranks[order] = np.arange(1, len(v) + 1)
    for value in np.unique(v):
        tied = v == value
        ranks[tied] = ranks[tied].mean()
    return ranks


def spearman(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Spearman's rho of two equal-length sequences (ties averaged); None when ``y`` is constant (the set cannot
    rank anything), 0.0 when only ``x`` is (the rubric ranks nothing: no agreement)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(y) < 2 or np.ptp(y) == 0:
        return None
    if np.ptp(x) == 0:
        return 0.0
    rx, ry = rankdata(x), rankdata(y)
    return float(np.corrcoef(rx, ry)[0, 1])


def agreement(scores: Sequence[float | None] | None, counts: Sequence[int]) -> float | None:
    """One rubric's agreement on one set: Spearman of its Eq. 12 scores with the code's counts of instructions met.
    None when the counts are all equal (no order to agree with: the same for every rubric, so the set drops out of
    both arms). An unscorable rubric, or a missing score, ranks nothing: 0.0 (never a silent win)."""
    if len(set(counts)) < 2:
        return None
    if scores is None or any(s is None for s in scores):
        return 0.0
    return spearman(scores, counts)


def hierarchical_ci(diffs: Sequence[Sequence[float | None]], *, n_boot: int = 2000, seed: int = 0) -> dict:
    """Mean and 95 % interval of per-(seed, prompt) differences ``diffs[s][p]`` (None: that prompt has no value for
    that seed). The mean is over seeds of each seed's mean over prompts; each bootstrap draw resamples the seeds with
    replacement, then the prompts with replacement within each drawn seed. ``n``: values; ``seeds``: seeds."""
    per_seed = [np.asarray([v for v in row if v is not None], dtype=float) for row in diffs]
    per_seed = [a for a in per_seed if a.size]
    if not per_seed:
        return {"mean": None, "ci95": None, "n": 0, "seeds": 0}
    rng = np.random.default_rng(seed)
    means = np.empty(n_boot)
    for b in range(n_boot):
        drawn = rng.integers(0, len(per_seed), len(per_seed))
        means[b] = np.mean([per_seed[i][rng.integers(0, per_seed[i].size, per_seed[i].size)].mean() for i in drawn])
    lo, hi = np.quantile(means, [0.025, 0.975])
    return {
        "mean": float(np.mean([a.mean() for a in per_seed])),
        "ci95": [float(lo), float(hi)],
        "n": int(sum(a.size for a in per_seed)),
        "seeds": len(per_seed),
    }


def means(per_seed: Sequence[Sequence[float | None]], **kw) -> dict:
    """``hierarchical_ci`` of the values themselves (an arm's level rather than a difference)."""
    return hierarchical_ci(per_seed, **kw)


def curve(history: Sequence[dict], records: Sequence[dict], value: str) -> dict:
    """An update's reward per optimiser step: the mean over its rollouts (``reward_mean`` of the history) and the mean
    within-group spread of ``value`` in its records; steps whose every group had no spread (no gradient); the
    first and last thirds' means."""
    steps = []
    for h in history:
        groups: dict = {}
        for r in records:
            if r["step"] == h["step"] and r.get(value) is not None:
                groups.setdefault(r["group_id"], []).append(float(r[value]))
        spread = [float(np.std(v)) for v in groups.values()]
        steps.append(
            {
                "step": h["step"],
                "reward_mean": h.get("reward_mean"),
                "group_std": float(np.mean(spread)) if spread else None,
                "zero_std_groups": sum(s < 1e-9 for s in spread),
                "groups": len(groups),
                **{k: h[k] for k in ("r_disc_mean", "r_anchor_mean", "unparseable", "truncated") if k in h},
            }
        )
    rewards = [s["reward_mean"] for s in steps if s["reward_mean"] is not None]
    third = max(1, len(rewards) // 3)
    return {
        "steps": steps,
        "first": float(np.mean(rewards[:third])) if rewards else None,
        "last": float(np.mean(rewards[-third:])) if rewards else None,
        "steps_without_gradient": sum(s["groups"] > 0 and s["zero_std_groups"] == s["groups"] for s in steps),
    }
