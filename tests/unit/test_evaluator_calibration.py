"""Calibrated verdicts (contextual calibration, Zhao et al. 2021) with scripted fake engines: token mapping,
log-odds, the content-free bias (computed once per engine), fallbacks to the plain choice, the config field."""

import math

import pytest

from dr_core.config import ConfigError, EngineConfig, engine_config
from dr_core.engines.base import PROMPT_TOO_LONG, Completion, check_request, merge_logprobs
from dr_core.evaluator.calibrate import (
    CONTENT_FREE_CRITERIA,
    CONTENT_FREE_INPUTS,
    calibrated_verdict,
    content_free_checks,
    verdict_bias,
    verdict_mode_of,
    yes_no_logodds,
)
from dr_core.evaluator.items import Check
from dr_core.evaluator.verify import verify
from dr_core.rubric import prompts
from dr_core.rubric.schema import UNSCORABLE
from tests.support.fakes import FakeEngine

LN = math.log


TOO_LONG = Completion(("",), (PROMPT_TOO_LONG,), 0, (0,))


def logprob_engine(table, free=None, config=None, return_logprobs=True, supports_logprobs=True) -> FakeEngine:
    """Verifier whose first-token distribution is scripted per criterion: ``table[criterion]`` is a
    {token: prob} dict (content-free checks use ``free``); criterion "too long" does not fit the context. The plain
    choice always answers "yes". ``return_logprobs=False``: log-probabilities are never returned;
    ``supports_logprobs=False``: an engine whose ``chat`` has no ``logprobs`` argument at all."""
    free = free or {"Yes": 0.3, "No": 0.1, "The": 0.6}

    def dist(req):
        crit, _ = req.check()
        if crit == "too long":
            return TOO_LONG
        probs = free if crit in CONTENT_FREE_CRITERIA else table[crit]
        return {t: LN(p) for t, p in probs.items()} if return_logprobs else None

    def verdict(req):
        return TOO_LONG if req.check()[0] == "too long" else "yes"

    return FakeEngine(
        verdict=verdict, logprobs=dist, supports_logprobs=supports_logprobs, config=config, model_name="fake-logprobs"
    )


FREE_BIAS = LN(0.3 / 0.1)


def test_token_mapping_sums_every_spelling_of_yes_and_no():
    top = {"Yes": LN(0.2), " yes": LN(0.1), "YES": LN(0.05), "No": LN(0.1), " no": LN(0.05), "The": LN(0.5)}
    assert yes_no_logodds(top) == pytest.approx(LN(0.35 / 0.15))
    # partial words and other words never count
    assert yes_no_logodds({"Y": LN(0.5), "yes.": LN(0.2), "Not": LN(0.1), "no": LN(0.2)}) == pytest.approx(
        LN(0.1 / 0.2)  # yes absent: the smallest shown log-probability stands in for it
    )


def test_logodds_missing_cases():
    assert yes_no_logodds(None) is None and yes_no_logodds({}) is None
    assert yes_no_logodds({"The": -0.1, "I": -2.0}) is None  # neither verdict word among the top N
    assert yes_no_logodds({"Yes": 0.0, "The": -math.inf}) == 50.0  # capped


def test_merge_logprobs_log_sum_exp():
    merged = merge_logprobs([("a", LN(0.2)), ("b", LN(0.1)), ("a", LN(0.3))])
    assert merged["a"] == pytest.approx(LN(0.5)) and merged["b"] == pytest.approx(LN(0.1))


@pytest.mark.parametrize(
    "odds, bias, expected", [(0.5, 0.2, 1), (0.1, 0.2, 0), (0.2, 0.2, 0), (-1.0, -2.0, 1), (None, 0.0, UNSCORABLE)]
)
def test_calibrated_verdict(odds, bias, expected):
    got = calibrated_verdict(odds, bias)
    assert got is expected if expected is None else got == expected


def test_calibrated_verify_subtracts_the_content_free_bias_once_per_engine():
    # raw log-odds: all positive (the plain argmax would say yes to both); the bias log(3) separates them
    eng = logprob_engine({"meets": {"Yes": 0.5, "No": 0.1}, "fails": {"Yes": 0.2, "No": 0.1}})
    checks = [Check("p", "r", "meets"), Check("p", "r", "fails"), Check("p", "r", "meets")]
    verdicts, stats = verify(eng, checks, verdict_mode="calibrated")
    assert verdicts == [1, 0, 1]
    assert verdict_bias(eng) == pytest.approx(FREE_BIAS)
    # first call: the content-free checks, then the unique checks, unconstrained, one token, top-N logprobs
    assert [len(c.conversations) for c in eng.calls] == [len(CONTENT_FREE_INPUTS) * len(CONTENT_FREE_CRITERIA), 2]
    assert all(c.choices is None and c.max_tokens == 1 and c.logprobs for c in eng.calls)
    assert stats.requests == 9 + 2
    verify(eng, checks, verdict_mode="calibrated")
    assert [len(c.conversations) for c in eng.calls][2:] == [2]  # bias cached on the engine: not asked again


def test_a_configured_bias_replaces_the_content_free_estimate():
    from dr_core.config import EngineConfig

    eng = logprob_engine({"meets": {"Yes": 0.5, "No": 0.1}, "fails": {"Yes": 0.2, "No": 0.1}})
    eng.config = EngineConfig(verdict_mode="calibrated", verdict_bias=2.0)  # log-odds: log 5 = 1.61, log 2 = 0.69
    checks = [Check("p", "r", "meets"), Check("p", "r", "fails")]
    assert verify(eng, checks)[0] == [0, 0]  # both below the configured threshold
    assert [len(c.conversations) for c in eng.calls] == [2]  # no content-free checks asked
    eng.config = EngineConfig(verdict_mode="calibrated", verdict_bias=1.0)
    assert verify(eng, checks)[0] == [1, 0]


def test_calibrated_unscorable_when_prompt_too_long_or_no_verdict_word():
    eng = logprob_engine({"meets": {"Yes": 0.9, "No": 0.01}, "odd": {"The": 0.9, "I": 0.1}})
    checks = [Check("p", "r", "meets"), Check("p", "r", "too long"), Check("p", "r", "odd")]
    assert verify(eng, checks, verdict_mode="calibrated")[0] == [1, UNSCORABLE, UNSCORABLE]


def test_mode_comes_from_the_engine_config_and_choice_is_the_default():
    table = {"fails": {"Yes": 0.2, "No": 0.1}}
    assert EngineConfig().verdict_mode == "choice"
    cal = logprob_engine(table, config=EngineConfig(verdict_mode="calibrated"))
    assert verdict_mode_of(cal) == "calibrated" and verify(cal, [Check("p", "r", "fails")])[0] == [0]
    plain = logprob_engine(table, config=EngineConfig())
    assert verify(plain, [Check("p", "r", "fails")])[0] == [1]
    assert plain.calls[0].choices == list(prompts.VERDICT_CHOICES) and plain.calls[0].logprobs is None
    assert verdict_mode_of(object()) == "choice"  # engines without a config (test fakes)


@pytest.mark.parametrize("engine_kwargs", [{"return_logprobs": False}])
def test_falls_back_to_choice_when_no_logprobs_come_back(engine_kwargs):
    eng = logprob_engine({"fails": {"Yes": 0.2, "No": 0.1}}, **engine_kwargs)
    verdicts, _ = verify(eng, [Check("p", "r", "fails")], verdict_mode="calibrated")
    assert verdicts == [1] and eng.calls[-1].choices == list(prompts.VERDICT_CHOICES)
    assert verdict_bias(eng) is None


def test_falls_back_to_choice_on_engines_without_logprobs():
    eng = logprob_engine({"fails": {"Yes": 0.2, "No": 0.1}}, supports_logprobs=False)  # chat() takes no logprobs
    assert verify(eng, [Check("p", "r", "fails")], verdict_mode="calibrated")[0] == [1]
    assert len(eng.calls) == 1 and eng.calls[0].choices == list(prompts.VERDICT_CHOICES)


def test_bad_verdict_mode_and_bad_logprobs_are_refused():
    with pytest.raises(ConfigError, match="verdict_mode"):
        engine_config(verdict_mode="argmax")
    with pytest.raises(ValueError, match="verdict_mode"):
        verify(logprob_engine({}), [Check("p", "r", "x")], verdict_mode="argmax")
    for bad in (0, 21, True, 1.5):
        with pytest.raises(ValueError, match="logprobs"):
            check_request(1, 4, None, None, bad)
    check_request(1, 4, None, None, 20)


def test_content_free_checks_are_every_input_with_every_criterion():
    free = content_free_checks()
    assert len(free) == len(set(free)) == len(CONTENT_FREE_INPUTS) * len(CONTENT_FREE_CRITERIA)


def test_balanced_threshold_is_the_median_log_odds_over_the_bundled_probe():
    from dr_core.evaluator.calibrate import probe_checks

    probe = probe_checks()
    assert len(probe) == 24
    # a verifier whose log-odds rise with the probe's order: the median sits between the 12th and 13th
    odds = {c.criterion + c.response: i for i, c in enumerate(probe)}

    def ranked(req):
        crit, resp = req.check()
        x = odds.get(crit + resp, 100)
        return {"Yes": -math.log1p(math.exp(-x)), "No": -math.log1p(math.exp(x))}  # log-odds exactly x

    eng = FakeEngine(logprobs=ranked)
    assert verdict_bias(eng, mode="balanced") == pytest.approx(11.5)
    checks = [Check(c.prompt, c.response, c.criterion) for c in probe]
    verdicts, _ = verify(eng, checks, verdict_mode="balanced")
    assert sum(verdicts) == 12 and verdicts == [int(i > 11.5) for i in range(24)]
    assert [len(c.conversations) for c in eng.calls] == [24, 24]  # the probe once (cached), then the checks
