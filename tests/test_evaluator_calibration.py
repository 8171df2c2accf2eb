"""Calibrated verdicts (contextual calibration, Zhao et al. 2021) with scripted fake engines: token mapping,
log-odds, the content-free bias (computed once per engine), fallbacks to the plain choice, the config field."""

import math

import pytest

from dr_core.rubric import prompts
from dr_core.config import ConfigError, EngineConfig, engine_config
from dr_core.engines.base import PROMPT_TOO_LONG, Completion, Engine, check_request, merge_logprobs
from dr_core.evaluator.evaluate import (
    CONTENT_FREE_CRITERIA,
    CONTENT_FREE_INPUTS,
    Check,
    calibrated_verdict,
    content_free_checks,
    verdict_bias,
    verdict_mode_of,
    verify,
    yes_no_logodds,
)
from dr_core.rubric.schema import UNSCORABLE
from tests.fakes import verifier_check

LN = math.log


class LogprobEngine(Engine):
    """Verifier whose first-token distribution is scripted per criterion: ``table[criterion]`` is a
    {token: prob} dict (content-free checks use ``free``). The plain choice always answers "yes"."""

    model_name = "fake-logprobs"
    supports_logprobs = True

    def __init__(self, table, free=None, config=None, return_logprobs=True):
        self.table, self.free = table, free or {"Yes": 0.3, "No": 0.1, "The": 0.6}
        self.config, self.return_logprobs = config, return_logprobs
        self.calls = []

    def chat(self, conversations, *, n=1, temperature=0.0, max_tokens=256, json_schema=None, choices=None,
             seed=None, logprobs=None):
        check_request(n, max_tokens, json_schema, choices, logprobs)
        self.calls.append({"n": len(conversations), "choices": choices, "logprobs": logprobs,
                           "max_tokens": max_tokens})
        out = []
        for conv in conversations:
            user = conv[-1]["content"]
            crit, _ = verifier_check(user)
            if crit == "too long":
                out.append(Completion(("",), (PROMPT_TOO_LONG,), 0, (0,)))
                continue
            dist = self.free if crit in CONTENT_FREE_CRITERIA else self.table[crit]
            top = None
            if logprobs and self.return_logprobs:
                top = ((merge_logprobs((t, LN(p)) for t, p in dist.items()),),)
            out.append(Completion(("yes",), ("length" if logprobs else "stop",), 10, (1,), 0, top))
        return out


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


@pytest.mark.parametrize("odds, bias, expected", [(0.5, 0.2, 1), (0.1, 0.2, 0), (0.2, 0.2, 0), (-1.0, -2.0, 1),
                                                  (None, 0.0, UNSCORABLE)])
def test_calibrated_verdict(odds, bias, expected):
    got = calibrated_verdict(odds, bias)
    assert got is expected if expected is None else got == expected


def test_calibrated_verify_subtracts_the_content_free_bias_once_per_engine():
    # raw log-odds: all positive (the plain argmax would say yes to both); the bias log(3) separates them
    eng = LogprobEngine({"meets": {"Yes": 0.5, "No": 0.1}, "fails": {"Yes": 0.2, "No": 0.1}})
    checks = [Check("p", "r", "meets"), Check("p", "r", "fails"), Check("p", "r", "meets")]
    verdicts, stats = verify(eng, checks, verdict_mode="calibrated")
    assert verdicts == [1, 0, 1]
    assert verdict_bias(eng) == pytest.approx(FREE_BIAS)
    # first call: the content-free checks, then the unique checks, unconstrained, one token, top-N logprobs
    assert [c["n"] for c in eng.calls] == [len(CONTENT_FREE_INPUTS) * len(CONTENT_FREE_CRITERIA), 2]
    assert all(c["choices"] is None and c["max_tokens"] == 1 and c["logprobs"] for c in eng.calls)
    assert stats.requests == 9 + 2
    verify(eng, checks, verdict_mode="calibrated")
    assert [c["n"] for c in eng.calls][2:] == [2]  # bias cached on the engine: not asked again


def test_a_configured_bias_replaces_the_content_free_estimate():
    from dr_core.config import EngineConfig

    eng = LogprobEngine({"meets": {"Yes": 0.5, "No": 0.1}, "fails": {"Yes": 0.2, "No": 0.1}})
    eng.config = EngineConfig(verdict_mode="calibrated", verdict_bias=2.0)  # log-odds: log 5 = 1.61, log 2 = 0.69
    checks = [Check("p", "r", "meets"), Check("p", "r", "fails")]
    assert verify(eng, checks)[0] == [0, 0]  # both below the configured threshold
    assert [c["n"] for c in eng.calls] == [2]  # no content-free checks asked
    eng.config = EngineConfig(verdict_mode="calibrated", verdict_bias=1.0)
    assert verify(eng, checks)[0] == [1, 0]


def test_calibrated_unscorable_when_prompt_too_long_or_no_verdict_word():
    eng = LogprobEngine({"meets": {"Yes": 0.9, "No": 0.01}, "odd": {"The": 0.9, "I": 0.1}})
    checks = [Check("p", "r", "meets"), Check("p", "r", "too long"), Check("p", "r", "odd")]
    assert verify(eng, checks, verdict_mode="calibrated")[0] == [1, UNSCORABLE, UNSCORABLE]


def test_mode_comes_from_the_engine_config_and_choice_is_the_default():
    table = {"fails": {"Yes": 0.2, "No": 0.1}}
    assert EngineConfig().verdict_mode == "choice"
    cal = LogprobEngine(table, config=EngineConfig(verdict_mode="calibrated"))
    assert verdict_mode_of(cal) == "calibrated" and verify(cal, [Check("p", "r", "fails")])[0] == [0]
    plain = LogprobEngine(table, config=EngineConfig())
    assert verify(plain, [Check("p", "r", "fails")])[0] == [1]
    assert plain.calls[0]["choices"] == list(prompts.VERDICT_CHOICES) and plain.calls[0]["logprobs"] is None
    assert verdict_mode_of(object()) == "choice"  # engines without a config (test fakes)


@pytest.mark.parametrize("engine_kwargs", [{"return_logprobs": False}])
def test_falls_back_to_choice_when_no_logprobs_come_back(engine_kwargs):
    eng = LogprobEngine({"fails": {"Yes": 0.2, "No": 0.1}}, **engine_kwargs)
    verdicts, _ = verify(eng, [Check("p", "r", "fails")], verdict_mode="calibrated")
    assert verdicts == [1] and eng.calls[-1]["choices"] == list(prompts.VERDICT_CHOICES)
    assert verdict_bias(eng) is None


def test_falls_back_to_choice_on_engines_without_logprobs():
    class NoLogprobs(LogprobEngine):
        supports_logprobs = False

        def chat(self, conversations, *, n=1, temperature=0.0, max_tokens=256, json_schema=None, choices=None,
                 seed=None):  # the old signature: no logprobs argument at all
            return super().chat(conversations, n=n, max_tokens=max_tokens, choices=choices)

    eng = NoLogprobs({"fails": {"Yes": 0.2, "No": 0.1}})
    assert verify(eng, [Check("p", "r", "fails")], verdict_mode="calibrated")[0] == [1]
    assert len(eng.calls) == 1 and eng.calls[0]["choices"] == list(prompts.VERDICT_CHOICES)


def test_bad_verdict_mode_and_bad_logprobs_are_refused():
    with pytest.raises(ConfigError, match="verdict_mode"):
        engine_config(verdict_mode="argmax")
    with pytest.raises(ValueError, match="verdict_mode"):
        verify(LogprobEngine({}), [Check("p", "r", "x")], verdict_mode="argmax")
    for bad in (0, 21, True, 1.5):
        with pytest.raises(ValueError, match="logprobs"):
            check_request(1, 4, None, None, bad)
    check_request(1, 4, None, None, 20)


def test_content_free_checks_are_every_input_with_every_criterion():
    free = content_free_checks()
    assert len(free) == len(set(free)) == len(CONTENT_FREE_INPUTS) * len(CONTENT_FREE_CRITERIA)


def test_balanced_threshold_is_the_median_log_odds_over_the_bundled_probe():
    from dr_core.evaluator.evaluate import probe_checks

    probe = probe_checks()
    assert len(probe) == 24
    # a verifier whose log-odds rise with the probe's order: the median sits between the 12th and 13th
    odds = {c.criterion + c.response: i for i, c in enumerate(probe)}

    class Ranked(LogprobEngine):
        def chat(self, conversations, **kw):
            self.calls.append({**kw, "n": len(conversations)})
            out = []
            for conv in conversations:
                user = conv[-1]["content"]
                crit, resp = verifier_check(user)
                x = odds.get(crit + resp, 100)
                top = {"Yes": -math.log1p(math.exp(-x)), "No": -math.log1p(math.exp(x))}  # log-odds exactly x
                out.append(Completion(("Yes",), ("length",), 1, (1,), 0, ((top,),)))
            return out

    eng = Ranked({})
    assert verdict_bias(eng, mode="balanced") == pytest.approx(11.5)
    checks = [Check(c.prompt, c.response, c.criterion) for c in probe]
    verdicts, _ = verify(eng, checks, verdict_mode="balanced")
    assert sum(verdicts) == 12 and verdicts == [int(i > 11.5) for i in range(24)]
    assert [c["n"] for c in eng.calls] == [24, 24]  # the probe once (cached), then the checks
