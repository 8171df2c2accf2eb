"""The positive control's reward: the policy trained on the truth itself, the fraction of a prompt's instructions its
answer meets by IFEval's own code (strict: ``dr_core.ifeval.checks.strict_fraction``). It shows whether the policy
update can learn on this testbed at all, with nothing learned in between (infra/benchmarks/bench_ifeval.py).

A TRL reward function over whole groups (``dr_core.train.grpo.train_policy_with_reward``): every completion of group
``group_id`` answers the IFEval row of that group. Advantages are TRL's Eq. 21 within the group. Rollout records, one
per completion: ``{"group_id", "prompt_id", "rollout", "step", "text", "score"}``.

    python -c "from dr_core.ifeval.reward import ConstraintReward; help(ConstraintReward)"
"""

from __future__ import annotations

import time
from typing import Sequence

import numpy as np

from dr_core.ifeval.checks import IFEvalRow, strict_fraction
from dr_core.train.rewards import check_whole_groups, completion_text
from dr_core.train.rows import OnRollouts


class ConstraintReward:
    """TRL reward function: each completion's fraction of its row's instructions met (strict), by code."""

    __name__ = "dr_ifeval_constraints"

    def __init__(self, rows: dict[int, IFEvalRow], group_size: int, on_rollouts: OnRollouts | None = None):
        self.rows, self.group_size, self.on_rollouts = rows, group_size, on_rollouts
        self.history: list[dict] = []

    def __call__(self, prompts=None, completions=(), completion_ids=None, group_id=(), trainer_state=None, **_kw):
        started = time.perf_counter()
        blocks = check_whole_groups(group_id, self.group_size)
        step = int(getattr(trainer_state, "global_step", 0) or 0)
        texts = [completion_text(c) for c in completions]
        scores = [strict_fraction(self.rows[blocks[i // self.group_size]], t) for i, t in enumerate(texts)]
        records = [
            {
                "group_id": blocks[i // self.group_size],
                "prompt_id": self.rows[blocks[i // self.group_size]].id,
                "rollout": i % self.group_size,
                "step": step,
                "text": t,
                "score": s,
            }
            for i, (t, s) in enumerate(zip(texts, scores))
        ]
        groups = np.asarray(scores).reshape(-1, self.group_size)
        self.history.append(
            {
                "step": step,
                "rollouts": len(texts),
                "groups": len(blocks),
                "reward_mean": float(np.mean(scores)),
                "zero_std_groups": int((groups.std(axis=1) < 1e-9).sum()),
                "reward_seconds": round(time.perf_counter() - started, 2),
            }
        )
        if self.on_rollouts is not None:
            self.on_rollouts(records)
        return [float(s) for s in scores]


def rows_by_group(rows: Sequence[IFEvalRow]) -> dict[int, IFEvalRow]:
    """The rows keyed by their group id (their index), as ``PolicyRow``s of the same order carry it."""
    return dict(enumerate(rows))
