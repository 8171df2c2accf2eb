"""The IFEval benchmark's figures (infra/benchmarks/ifeval/stats.py): agreement as Spearman per set with the
unscorable and tie rules, and the hierarchical bootstrap, which resamples seeds before prompts."""

from __future__ import annotations

import numpy as np
import pytest

from infra.benchmarks.ifeval.stats import agreement, curve, hierarchical_ci, spearman


def test_agreement_is_spearman_and_never_rewards_a_rubric_that_ranks_nothing():
    assert agreement([0.9, 0.5, 0.1], [3, 2, 0]) == pytest.approx(1.0)
    assert agreement([0.1, 0.5, 0.9], [3, 2, 0]) == pytest.approx(-1.0)
    assert agreement([0.5, 0.5, 0.5], [3, 2, 0]) == 0.0  # constant scores: no agreement
    assert agreement(None, [1, 0]) == 0.0 and agreement([0.2, None], [1, 0]) == 0.0  # unscorable: no agreement
    assert agreement([0.9, 0.1], [1, 1]) is None  # counts all equal: nothing to agree with, for any rubric
    assert spearman([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(0.9486832980505138)


def test_hierarchical_interval_carries_the_spread_between_seeds():
    rng = np.random.default_rng(0)
    same = [list(rng.normal(0.1, 0.2, 150)) for _ in range(3)]
    apart = [list(np.asarray(row) + shift) for row, shift in zip(same, (-0.3, 0.1, 0.5))]
    a, b = hierarchical_ci(same), hierarchical_ci(apart)
    assert a["seeds"] == 3 and a["n"] == 450
    assert a["ci95"][0] < a["mean"] < a["ci95"][1]
    # seeds that disagree widen the interval: a prompt-only bootstrap of the pooled values would not
    assert (b["ci95"][1] - b["ci95"][0]) > 3 * (a["ci95"][1] - a["ci95"][0])
    assert b["mean"] == pytest.approx(np.mean([np.mean(r) for r in apart]))
    assert hierarchical_ci([[None, None]])["mean"] is None
    assert hierarchical_ci([[1.0, None, 3.0]])["n"] == 2


def test_curve_counts_steps_without_gradient():
    history = [{"step": 0, "reward_mean": 0.5}, {"step": 1, "reward_mean": 0.7}]
    records = [{"step": 0, "group_id": 0, "score": 0.5}] * 2 + [
        {"step": 1, "group_id": 0, "score": 0.4},
        {"step": 1, "group_id": 0, "score": 1.0},
    ]
    c = curve(history, records, "score")
    assert c["steps_without_gradient"] == 1 and c["steps"][1]["group_std"] == pytest.approx(0.3)
    assert (c["first"], c["last"]) == (0.5, 0.7)
