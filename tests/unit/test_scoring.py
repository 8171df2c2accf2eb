"""The math core against the paper's equations (tests/support/reference.py) and the invariants of STYLE.md item 3."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dr_core.constants import UNSCORABLE
from dr_core.scoring.equations import (
    Scores,
    anchor_reward,
    combined_advantages,
    discriminability_reward,
    group_advantages,
    mean_ordered_gap,
    rubric_scores,
)
from tests.support import reference as ref


@st.composite
def rubric_case(draw, min_n=1):
    m = draw(st.integers(1, 8))
    n = draw(st.integers(min_n, 9))
    weights = draw(st.lists(st.integers(1, 5), min_size=m, max_size=m))
    verdicts = draw(st.lists(st.lists(st.integers(0, 1), min_size=m, max_size=m), min_size=n, max_size=n))
    return weights, verdicts


scores_st = st.lists(st.sampled_from([0.0, 0.25, 0.5, 0.75, 1.0]) | st.floats(0, 1), min_size=2, max_size=9)


@given(rubric_case())
def test_rubric_scores_match_eq12(case):
    weights, verdicts = case
    s = rubric_scores(weights, verdicts)
    assert isinstance(s, Scores) and s.scorable.all()
    np.testing.assert_allclose(s.values, ref.eq12(weights, verdicts))
    assert list(s) == pytest.approx(ref.eq12(weights, verdicts)) and all(type(x) is float for x in s)


@given(rubric_case())
def test_discriminability_matches_eq13_and_flip_invariance(case):
    weights, verdicts = case
    r = discriminability_reward(weights, verdicts)
    assert r == pytest.approx(ref.eq13(weights, verdicts))
    flipped = [[1 - v for v in row] for row in verdicts]
    assert discriminability_reward(weights, flipped) == pytest.approx(r)
    assert 0.0 <= r <= 0.25 + 1e-12


@given(rubric_case(min_n=2))
def test_discriminability_zero_when_every_item_unanimous(case):
    weights, verdicts = case
    same = [list(verdicts[0]) for _ in verdicts]
    assert discriminability_reward(weights, same) == 0.0


@given(scores_st)
def test_anchor_reward_matches_eq15(scores):
    assert anchor_reward(scores) == pytest.approx(ref.eq15(scores))
    assert anchor_reward(scores) <= 0.0


@given(scores_st, st.floats(0.01, 2.0))
def test_anchor_reward_rises_when_a_gap_moves_in_anchor_direction(scores, delta):
    # Raising the best response, or lowering the worst, only widens gaps in the anchor's direction.
    top_up = [scores[0] + delta, *scores[1:]]
    bottom_down = [*scores[:-1], scores[-1] - delta]
    assert anchor_reward(top_up) > anchor_reward(scores)
    assert anchor_reward(bottom_down) > anchor_reward(scores)
    # And for a pair, R_anchor is increasing in S_1 - S_2.
    assert anchor_reward([scores[0] + delta, scores[1]]) > anchor_reward(scores[:2])


def test_anchor_reward_prefers_correct_order():
    assert anchor_reward([1.0, 0.5, 0.0]) > anchor_reward([0.0, 0.5, 1.0])
    assert anchor_reward([0.5, 0.5]) == pytest.approx(np.log(0.5))


@given(st.integers(1, 6), st.integers(1, 5), st.data())
def test_group_advantages_match_eq21_mean_zero_and_shift_invariant(g, groups, data):
    rewards = data.draw(st.lists(st.floats(-5, 5), min_size=g * groups, max_size=g * groups))
    adv = group_advantages(rewards, g)
    np.testing.assert_allclose(adv, ref.eq21(rewards, g), atol=1e-9)
    np.testing.assert_allclose(adv.reshape(-1, g).mean(axis=1), 0.0, atol=1e-9)
    shift = data.draw(st.floats(-10, 10))
    np.testing.assert_allclose(group_advantages([r + shift for r in rewards], g), adv, atol=1e-6)


def test_group_advantages_all_equal_and_singleton_give_zero():
    np.testing.assert_array_equal(group_advantages([0.3] * 8, 4), np.zeros(8))
    np.testing.assert_array_equal(group_advantages([0.1, 0.9, 0.4], 1), np.zeros(3))
    with pytest.raises(ValueError):
        group_advantages([1.0, 2.0, 3.0], 2)


@given(st.integers(2, 6), st.data(), st.floats(0, 3))
def test_combined_advantages_are_normalised_then_summed(g, data, lam):
    r_disc = data.draw(st.lists(st.floats(0, 0.25), min_size=2 * g, max_size=2 * g))
    r_anchor = data.draw(st.lists(st.floats(-5, 0), min_size=2 * g, max_size=2 * g))
    expected = np.add(ref.eq21(r_disc, g), lam * np.asarray(ref.eq21(r_anchor, g)))
    np.testing.assert_allclose(combined_advantages(r_disc, r_anchor, g, lam), expected, atol=1e-9)


def test_combined_advantages_scale_mismatch_removed():
    # R_anchor is 100x larger in scale; after per-reward normalisation both contribute equally.
    a = combined_advantages([0.0, 0.2], [-100.0, 0.0], 2)
    b = combined_advantages([0.0, 0.2], [-1.0, 0.0], 2)
    np.testing.assert_allclose(a, b, atol=1e-3)


@given(scores_st)
def test_mean_ordered_gap_matches_eq2(scores):
    assert mean_ordered_gap(scores) == pytest.approx(ref.eq2(scores))


@settings(max_examples=50)
@given(rubric_case(min_n=2))
def test_slow_reference_equals_vectorised_on_seeded_inputs_with_ties(case):
    weights, verdicts = case
    s = rubric_scores(weights, verdicts)
    assert anchor_reward(s) == pytest.approx(ref.eq15(ref.eq12(weights, verdicts)))
    assert mean_ordered_gap(s) == pytest.approx(ref.eq2(ref.eq12(weights, verdicts)))


def test_random_inputs_with_ties_against_reference():
    rng = np.random.default_rng(0)
    for _ in range(200):
        m, n = rng.integers(1, 6), rng.integers(2, 8)
        w = rng.integers(1, 6, size=m)
        v = rng.integers(0, 2, size=(n, m))  # few items and binary verdicts: many tied scores
        np.testing.assert_allclose(rubric_scores(w, v).values, ref.eq12(w.tolist(), v.tolist()))
        assert discriminability_reward(w, v) == pytest.approx(ref.eq13(w.tolist(), v.tolist()))
        assert anchor_reward(rubric_scores(w, v)) == pytest.approx(ref.eq15(ref.eq12(w.tolist(), v.tolist())))


# --- the unscorable state -------------------------------------------------------------------------------------


def test_empty_rubric_is_unscorable_not_zero():
    s = rubric_scores([], [[], []])
    assert isinstance(s, Scores) and list(s) == [UNSCORABLE, UNSCORABLE] and not s.scorable.any()
    assert anchor_reward(s) is UNSCORABLE and mean_ordered_gap(s) is UNSCORABLE
    assert discriminability_reward([], [[], []]) is UNSCORABLE
    assert len(rubric_scores([2], [])) == 0


def test_missing_verdict_makes_that_response_unscorable():
    s = rubric_scores([2, 3], [[1, 0], [None, 1], [1, 1]])
    assert s[0] == pytest.approx(0.4) and s[1] is UNSCORABLE and s[2] == pytest.approx(1.0)
    assert s.scorable.tolist() == [True, False, True] and np.isnan(s.values[1])
    assert list(rubric_scores([2, 3], [[1, 0], [np.nan, 1]])) == [pytest.approx(0.4), UNSCORABLE]
    assert discriminability_reward([2, 3], [[1, 0], [None, 1]]) is UNSCORABLE
    assert anchor_reward(s) is UNSCORABLE
    assert mean_ordered_gap(s) == pytest.approx(-0.6)  # only the (0, 2) pair has both scores
    assert mean_ordered_gap([None, None, 0.5]) is UNSCORABLE


def test_scores_are_one_read_only_type_and_nan_is_unscorable_everywhere():
    s = rubric_scores([1, 1], [[1, 1], [1, 0]])
    with pytest.raises(ValueError):
        s.values[0] = 0.0
    assert anchor_reward(s) == pytest.approx(anchor_reward([1.0, 0.5])) == pytest.approx(anchor_reward(list(s)))
    assert anchor_reward([1.0, float("nan")]) is UNSCORABLE  # NaN is never a silent number
    assert mean_ordered_gap(Scores(np.array([np.nan, 0.5, 0.0]))) == pytest.approx(0.5)


@pytest.mark.parametrize("weights", [[0, 1], [6], [1.5], [[1, 2]]])
def test_bad_weights_raise(weights):
    with pytest.raises(ValueError):
        rubric_scores(weights, [[1] * (len(weights) if not isinstance(weights[0], list) else 2)])


def test_bad_verdicts_raise():
    with pytest.raises(ValueError):
        rubric_scores([1, 1], [[1, 2]])
    with pytest.raises(ValueError):
        rubric_scores([1, 1], [[1]])
