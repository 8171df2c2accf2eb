"""The pairwise judge without a model (dr_core/evaluator/judge.py): reading A-vs-B log-odds, the order-cancelling
d, ties at the threshold, position bias, the fallback to structured choice, unscorable verdicts."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dr_core.engines import PROMPT_TOO_LONG, Completion
from dr_core.evaluator import judge as j
from tests.support.fakes import FakeEngine


@pytest.mark.parametrize(
    "top, expected",
    [
        ({"A": -0.1, "B": -2.3}, 2.2),
        ({"B": -0.1, "A": -2.3}, -2.2),
        ({" A": math.log(0.3), "A": math.log(0.3), "B": math.log(0.2)}, math.log(3)),  # spellings of A add up
        ({"A": -0.5, "the": -3.0}, 2.5),  # B absent: the smallest shown log-probability bounds it
        ({"the": -0.5, "I": -1.0}, None),  # neither letter: nothing to read
        ({}, None),
        (None, None),
        ({"A": 0.0, "x": -1000.0}, 50.0),  # capped
    ],
)
def test_ab_logodds(top, expected):
    got = j.ab_logodds(top)
    assert got == expected if expected is None else got == pytest.approx(expected)


@pytest.mark.parametrize(
    "l1, l2, expected",
    [
        (2.0, -1.0, 1.0),  # d = 1.5: the first answer preferred in both orders
        (-1.0, 2.0, 0.0),
        (3.0, 3.0, 0.5),  # the same log-odds in both orders: position only, d = 0, a tie
        (1.2, 1.0, 0.5),  # d = 0.1: at the threshold, still a tie
        (1.3, 1.0, 1.0),  # d = 0.15
        (None, 1.0, None),  # a verdict missing: unscorable, never a guess
        (1.0, None, None),
    ],
)
def test_logodds_outcome(l1, l2, expected):
    assert j.logodds_outcome(l1, l2, threshold=0.1) == expected


def content_judge(bias: float, preference: float, good: str = "GOOD") -> FakeEngine:
    """A judge whose A-vs-B log-odds are ``bias`` (whatever is shown) plus ``preference`` toward the answer that
    contains ``good`` (minus it when that answer is shown as B)."""

    def logprobs(req):
        a = req.user.split("[ANSWER A]")[1].split("[END ANSWER A]")[0]
        b = req.user.split("[ANSWER B]")[1].split("[END ANSWER B]")[0]
        lo = bias + preference * ((good in a) - (good in b))
        return {"A": -math.log1p(math.exp(-lo)), "B": -math.log1p(math.exp(lo))}  # log-odds exactly lo

    return FakeEngine(logprobs=logprobs, model_name="scripted")


@settings(max_examples=40, deadline=None)
@given(bias=st.floats(-5, 5), preference=st.floats(-5, 5))
def test_the_order_cancels_and_the_bias_is_reported(bias, preference):
    """d is the judge's preference for the first answer whatever its position bias; the bias comes out separately."""
    eng = content_judge(bias, preference)
    verdicts, info = j.judge_both_orders(eng, ["q"], ["GOOD answer"], ["plain answer"], threshold=0.1)
    (v,) = verdicts
    assert v["d"] == pytest.approx(preference, abs=1e-6)
    assert info["judge_position_bias"] == pytest.approx(bias, abs=1e-6)
    expected = 1.0 if preference > 0.1 + 1e-6 else 0.0 if preference < -0.1 - 1e-6 else None
    if expected is not None:
        assert v["outcome"] == expected
    assert info["judge_procedure"] == "logodds" and info["judge_fallback"] is None


def test_a_judge_with_only_position_bias_ties_everything():
    eng = content_judge(bias=4.0, preference=0.0)
    verdicts, info = j.judge_both_orders(eng, ["q1", "q2"], ["GOOD", "x"], ["y", "GOOD"])
    assert [v["outcome"] for v in verdicts] == [0.5, 0.5]
    assert info["judge_position_bias"] == pytest.approx(4.0) and info["judge_first_shown_rate"] == 1.0
    assert info["judge_position_a_rate"] is None  # no verdict was decided by position: nothing to warn about


def test_swapping_the_answers_negates_d():
    eng = content_judge(bias=1.0, preference=0.7)
    forward, _ = j.judge_both_orders(eng, ["q"], ["GOOD"], ["other"])
    backward, _ = j.judge_both_orders(eng, ["q"], ["other"], ["GOOD"])
    assert forward[0]["d"] == pytest.approx(-backward[0]["d"]) and forward[0]["outcome"] == 1 - backward[0]["outcome"]


def test_identical_answers_tie_exactly():
    eng = content_judge(bias=2.5, preference=3.0)
    verdicts, _ = j.judge_both_orders(eng, ["q"], ["GOOD same"], ["GOOD same"])
    assert verdicts[0]["d"] == 0.0 and verdicts[0]["outcome"] == 0.5


def test_both_orders_are_asked_with_log_probabilities_of_one_token():
    eng = content_judge(0.0, 1.0)
    j.judge_both_orders(eng, ["q"], ["first"], ["second"])
    (call,) = eng.calls
    assert call.logprobs == j.JUDGE_LOGPROBS and call.max_tokens == 1 and call.choices is None
    users = call.users
    assert users[0].index("first") < users[0].index("second") and users[1].index("second") < users[1].index("first")


def test_no_letter_in_the_top_log_probabilities_is_unscorable():
    eng = FakeEngine(logprobs=lambda req: {"Sure": -0.1, "I": -2.0})
    verdicts, info = j.judge_both_orders(eng, ["q"], ["a"], ["b"])
    assert verdicts[0]["outcome"] is None and info["judge_invalid"] == 2 and info["judge_position_bias"] is None


def test_a_prompt_too_long_is_unscorable():
    cut = Completion(("",), (PROMPT_TOO_LONG,), 0, (0,), 0, None)
    eng = FakeEngine(logprobs=lambda req: cut)
    verdicts, _ = j.judge_both_orders(eng, ["q"], ["a"], ["b"])
    assert verdicts[0]["outcome"] is None


def choosing_judge(good="GOOD") -> FakeEngine:
    def choose(req):
        a = req.user.split("[ANSWER A]")[1].split("[END ANSWER A]")[0]
        return "A" if good in a else "B"

    return FakeEngine(verdict=choose)


def test_a_judge_without_log_probabilities_falls_back_to_choice_and_says_so():
    verdicts, info = j.judge_both_orders(choosing_judge(), ["q1", "q2"], ["GOOD", "x"], ["y", "GOOD"])
    assert [v["outcome"] for v in verdicts] == [1.0, 0.0]
    assert info["judge_procedure"] == "choice" and "no log-probabilities" in info["judge_fallback"]
    assert info["judge_position_bias"] is None and info["judge_position_a_rate"] == 0.5


def test_a_server_that_returns_no_log_probabilities_falls_back_too():
    eng = FakeEngine(logprobs=lambda req: None, verdict="A")  # says it supports them, sends none back
    verdicts, info = j.judge_both_orders(eng, ["q"], ["a"], ["b"])
    assert info["judge_procedure"] == "choice" and info["judge_fallback"] and verdicts[0]["outcome"] == 0.5


def test_choice_procedure_when_asked():
    verdicts, info = j.judge_both_orders(content_judge(0, 1), ["q"], ["a"], ["b"], procedure="choice")
    assert info["judge_procedure"] == "choice" and info["judge_fallback"] is None
    with pytest.raises(ValueError, match="logodds, choice"):
        j.judge_both_orders(content_judge(0, 1), ["q"], ["a"], ["b"], procedure="vote")


def test_an_in_process_log_odds_judge_runs_in_float32():
    from dr_core.config import engine_config

    bf16 = engine_config(model="default", dtype="bfloat16")
    assert j.judge_engine_config(bf16, "logodds").dtype == "float32"
    assert j.judge_engine_config(bf16, "choice") == bf16
    url = engine_config(kind="openai_http", base_url="http://127.0.0.1:9/v1")
    assert j.judge_engine_config(url, "logodds") == url
