"""DynamicRubric scores, rewards and advantages: one pure function per equation of the paper.

Shapes: N responses, M rubric items, K responses in a policy set, n anchor responses, G rollouts in a GRPO group.
Every function takes numpy arrays or plain lists and returns floats, 1-D float arrays or ``Scores``.

"Could not score" is never 0.0 here: a rubric with no usable item, or a response whose verdicts are missing
(None or NaN in the verdict matrix), is ``UNSCORABLE`` (None, defined in ``dr_core.constants``). Callers count it.
``rubric_scores`` always returns ``Scores``: one entry per response, each a float or ``UNSCORABLE``.

    python -c "from dr_core.scoring.equations import rubric_scores; print(rubric_scores([3, 1], [[1, 0], [1, 1]]))"
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dr_core.constants import UNSCORABLE, WEIGHT_MAX, WEIGHT_MIN

#: TRL's GRPO adds this to the group standard deviation before dividing (trl GRPOTrainer, scale_rewards="group").
ADV_EPS = 1e-4


def _weights(weights: Sequence[int] | np.ndarray) -> np.ndarray:
    w = np.asarray(weights)
    if w.ndim != 1:
        raise ValueError(f"weights must be 1-D (M,), got shape {w.shape}")
    if w.size and (not np.all(np.equal(np.mod(w, 1), 0)) or w.min() < WEIGHT_MIN or w.max() > WEIGHT_MAX):
        raise ValueError(f"weights must be integers in {WEIGHT_MIN}..{WEIGHT_MAX}, got {w.tolist()}")
    return w.astype(np.float64)


def _verdicts(verdicts, m: int) -> tuple[np.ndarray, np.ndarray]:
    """(N, M) verdicts as float with NaN for missing, plus the (N,) mask of complete rows."""
    v = np.array(
        [[np.nan if x is None else x for x in row] for row in verdicts] if len(verdicts) else np.zeros((0, m)),
        dtype=np.float64,
    )
    if v.ndim != 2 or v.shape[1] != m:
        raise ValueError(f"verdicts must have shape (N, {m}), got {v.shape}")
    known = v[~np.isnan(v)]
    if not np.all((known == 0) | (known == 1)):
        raise ValueError("verdicts must be 0 or 1 (or None/NaN for a missing verdict)")
    return v, ~np.isnan(v).any(axis=1)


@dataclass(frozen=True, eq=False)
class Scores(Sequence):
    """Eq. 12 scores of N responses under one rubric, the unscorable state explicit.

    As a sequence, entry i is response i's score as a float, or ``UNSCORABLE`` (what artifacts store and what
    ``anchor_reward``, ``mean_ordered_gap`` and the metrics read). ``values``: (N,) float64, read-only, NaN where
    unscorable; ``scorable``: (N,) bool.
    """

    values: np.ndarray

    def __post_init__(self):
        values = np.array(self.values, dtype=np.float64)
        if values.ndim != 1:
            raise ValueError(f"scores must be 1-D (N,), got shape {values.shape}")
        values.setflags(write=False)
        object.__setattr__(self, "values", values)

    @property
    def scorable(self) -> np.ndarray:
        return ~np.isnan(self.values)

    def __len__(self) -> int:
        return self.values.size

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[k] for k in range(len(self))[i]]
        s = self.values[i]
        return UNSCORABLE if np.isnan(s) else float(s)

    def __repr__(self) -> str:
        return f"Scores({list(self)})"


def _score_array(scores) -> np.ndarray:
    """(n,) float scores, NaN where unscorable: from ``Scores`` or any sequence of floats / ``UNSCORABLE``."""
    if isinstance(scores, Scores):
        return scores.values
    return np.array([np.nan if x is UNSCORABLE else x for x in scores], dtype=np.float64)


def rubric_scores(weights, verdicts) -> Scores:
    """Eq. 12: E(x, y | C) = sum_m w_m v_m(y) / sum_m w_m for every response.

    weights: (M,) ints 1..5. verdicts: (N, M) of 0/1; None/NaN marks a missing verdict.
    Returns (N,) ``Scores``: a response with a missing verdict is unscorable, and every response is when the
    rubric has no item.
    """
    w = _weights(weights)
    v, complete = _verdicts(verdicts, w.size)
    if w.size == 0:
        return Scores(np.full(v.shape[0], np.nan))
    return Scores(np.where(complete, np.nan_to_num(v) @ w / w.sum(), np.nan))


def discriminability_reward(weights, verdicts):
    """Eq. 13: R_disc = sum_m w_m vbar_m (1 - vbar_m) / sum_m w_m, vbar_m the yes-rate of item m over the N responses.

    weights: (M,), verdicts: (N, M). Returns a float in [0, 0.25]; ``UNSCORABLE`` when the rubric has no item,
    there is no response, or any verdict is missing (the variance of an incomplete set is not the set's).
    """
    w = _weights(weights)
    if w.size == 0:
        return UNSCORABLE
    v, complete = _verdicts(verdicts, w.size)
    if v.shape[0] == 0 or not complete.all():
        return UNSCORABLE
    vbar = v.mean(axis=0)
    return float((w * vbar * (1.0 - vbar)).sum() / w.sum())


def anchor_reward(scores):
    """Eq. 15: R_anchor = sum_{i<j} log sigmoid(S_i - S_j) / ((j - i) * 2^(i-1)), i and j 1-based ranks.

    scores: (n,) Eq. 12 scores of the anchor responses in anchor rank order, best first (n >= 2).
    Returns a float <= 0; ``UNSCORABLE`` when any score is unscorable.
    """
    s = _score_array(scores)
    n = s.size
    if np.isnan(s).any():
        return UNSCORABLE
    if n < 2:
        raise ValueError(f"anchor_reward needs at least 2 ranked scores, got {n}")
    i, j = np.triu_indices(n, k=1)  # 0-based, i < j
    diff = s[i] - s[j]
    log_sigmoid = -np.logaddexp(0.0, -diff)
    weight = 1.0 / ((j - i) * 2.0**i)  # 0-based i: 2^(i_1based - 1) == 2^i
    return float((log_sigmoid * weight).sum())


def group_advantages(rewards, group_size: int) -> np.ndarray:
    """Eq. 21 (as TRL computes it): A_i = (R_i - mean_g) / (std_g + 1e-4) within consecutive groups of size G.

    rewards: (B,) with B a multiple of group_size; std is the sample std (ddof=1). A group of size 1 gives 0.
    Returns (B,) float array.
    """
    r = np.asarray(rewards, dtype=np.float64)
    if group_size < 1 or r.ndim != 1 or r.size % group_size:
        raise ValueError(f"rewards of shape {r.shape} do not split into groups of {group_size}")
    if group_size == 1:
        return np.zeros_like(r)
    g = r.reshape(-1, group_size)
    centered = g - g.mean(axis=1, keepdims=True)
    return (centered / (g.std(axis=1, ddof=1, keepdims=True) + ADV_EPS)).reshape(-1)


def combined_advantages(r_disc, r_anchor, group_size: int, lam: float = 1.0) -> np.ndarray:
    """Eq. 24-25 (lam from Eq. 17): A = A_disc + lam * A_anchor, each reward normalised within its group first.

    r_disc, r_anchor: (B,) per-rollout rewards, B a multiple of group_size. Returns (B,).
    """
    return group_advantages(r_disc, group_size) + lam * group_advantages(r_anchor, group_size)


def mean_ordered_gap(scores):
    """Eq. 2 for one list in reference order (best first), P uniform over ordered pairs: mean_{i<j} (S_i - S_j).

    scores: (n,), n >= 2; unscorable entries drop the pairs they are in. Returns a float, or ``UNSCORABLE`` when
    no pair has both scores.
    """
    s = _score_array(scores)
    if s.size < 2:
        raise ValueError(f"mean_ordered_gap needs at least 2 scores, got {s.size}")
    i, j = np.triu_indices(s.size, k=1)
    diff = s[i] - s[j]
    diff = diff[~np.isnan(diff)]
    return float(diff.mean()) if diff.size else UNSCORABLE
