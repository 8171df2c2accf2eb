"""Strict metrics with ties, and nDCG including the paper's Table 9 case."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dr_core.scoring.metrics import avg_at_k, is_strict_top1, listwise_top1_accuracy, ndcg, pairwise_accuracy
from tests.support.reference import ndcg_by_permutations


def test_table9_ndcg_two_tied_responses():
    assert ndcg([15, 15], [1, 0]) == pytest.approx(0.8155, abs=5e-5)
    assert ndcg([53, 24], [1, 0]) == pytest.approx(1.0)
    assert listwise_top1_accuracy([[15, 15]], [0]) == 0.0
    assert listwise_top1_accuracy([[53, 24]], [0]) == 1.0


@pytest.mark.parametrize(
    "chosen, rejected, acc",
    [
        ([1.0, 0.5, 0.2], [0.5, 0.5, 0.9], 1 / 3),  # a tie is wrong
        ([0.7, 0.7], [0.1, 0.2], 1.0),
        ([0.0], [0.0], 0.0),
        ([None, 0.9], [0.1, 0.1], 0.5),  # unscorable is never a win
        ([0.9], [None], 0.0),
    ],
)
def test_pairwise_accuracy_table(chosen, rejected, acc):
    assert pairwise_accuracy(chosen, rejected) == pytest.approx(acc)


@pytest.mark.parametrize(
    "scores, best, top1",
    [
        ([3, 1, 2], 0, True),
        ([3, 3, 2], 0, False),  # tied top
        ([1, 3, 2], 0, False),
        ([None, 1, 2], 0, False),
        ([2, None, 1], 0, True),
        ([1, 2], 1, True),
    ],
)
def test_strict_top1_table(scores, best, top1):
    assert is_strict_top1(scores, best) is top1


def test_listwise_accuracy_mixed():
    assert listwise_top1_accuracy([[3, 1], [2, 2], [0, 1, 2]], [0, 0, 2]) == pytest.approx(2 / 3)


@pytest.mark.parametrize(
    "scores, rel, expected",
    [
        ([3, 2, 1], [3, 2, 1], 1.0),
        ([1, 2, 3], [1, 0, 0], 0.5),  # best item last of 3: 1/log2(4)
        ([1, 1, 1], [1, 0, 0], (1 + 1 / np.log2(3) + 0.5) / 3),
    ],
)
def test_ndcg_table(scores, rel, expected):
    assert ndcg(scores, rel) == pytest.approx(expected)


@given(st.lists(st.integers(0, 3), min_size=1, max_size=6), st.data())
def test_ndcg_equals_mean_over_all_tie_breaking_orders(scores, data):
    rel = data.draw(st.lists(st.integers(0, 3), min_size=len(scores), max_size=len(scores)))
    if sum(rel) == 0:
        with pytest.raises(ValueError):
            ndcg(scores, rel)
        return
    assert ndcg(scores, rel) == pytest.approx(ndcg_by_permutations(scores, rel))
    assert 0.0 < ndcg(scores, rel) <= 1.0 + 1e-12


def test_ndcg_unscorable_ranks_last():
    assert ndcg([None, 0.2], [1, 0]) == pytest.approx(1 / np.log2(3))


def test_metric_input_errors():
    with pytest.raises(ValueError):
        pairwise_accuracy([], [])
    with pytest.raises(ValueError):
        pairwise_accuracy([1.0], [1.0, 2.0])
    with pytest.raises(ValueError):
        listwise_top1_accuracy([[1, 2]], [])
    assert avg_at_k([0.5, 1.0]) == 0.75
