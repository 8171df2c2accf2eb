"""The verdict cache (dr_core/evaluator/verdict_cache.py) is an optimisation only: verify() answers the same with it
and without it, asks the engine only what the cache does not hold, keys by verifier and procedure (never by call),
never holds an unscorable verdict, and stays within its bound."""

import random

import pytest

from dr_core.config import EngineConfig
from dr_core.evaluator.items import Check
from dr_core.evaluator.verdict_cache import VerdictCache, verifier_identity
from dr_core.evaluator.verify import send_order, verify
from tests.support.fakes import FakeEngine, hashed_verdict, verdict_bit


def _checks(n_prompts: int = 3, seed: int = 0) -> list[Check]:
    checks = [
        Check(f"prompt {p}", f"response {p}.{r}", f"criterion {c}")
        for p in range(n_prompts)
        for r in range(3)
        for c in range(4)
    ]
    random.Random(seed).shuffle(checks)
    return checks


def _asked(eng: FakeEngine) -> int:
    return sum(len(c.conversations) for c in eng.calls)


def test_answers_are_the_same_with_the_cache_on_and_off_and_a_repeat_asks_nothing():
    checks = _checks()
    off = verify(FakeEngine(verdict=hashed_verdict), checks)[0]
    cache, eng = VerdictCache(1000), FakeEngine(verdict=hashed_verdict)
    assert verify(eng, checks, cache=cache)[0] == off
    assert (_asked(eng), cache.hits, cache.misses, len(cache)) == (36, 0, 36, 36)
    again = random.Random(1).sample(checks, len(checks))
    assert verify(eng, again, cache=cache)[0] == [dict(zip(checks, off))[c] for c in again]
    assert (_asked(eng), len(eng.calls), cache.hits) == (36, 1, 36)  # no engine call at all


def test_only_the_checks_the_cache_lacks_are_asked():
    old, new = _checks(2), [c for c in _checks(3) if c.prompt == "prompt 2"]
    cache, eng = VerdictCache(1000), FakeEngine(verdict=hashed_verdict)
    verify(eng, old, cache=cache)
    verdicts = verify(eng, old[:5] + new, cache=cache)[0]
    assert verdicts == verify(FakeEngine(verdict=hashed_verdict), old[:5] + new)[0]
    assert len(eng.calls[-1].conversations) == len(new) and cache.hits == 5


def test_another_verifier_or_procedure_does_not_share_verdicts():
    checks, cache = _checks(1), VerdictCache(1000)
    yes, no = FakeEngine(verdict="yes", model_name="a"), FakeEngine(verdict="no", model_name="b")
    assert set(verify(yes, checks, cache=cache)[0]) == {1}
    assert set(verify(no, checks, cache=cache)[0]) == {0}  # another model: asked, not answered from a's
    assert set(verify(yes, checks, cache=cache, verifier_prompt="plain")[0]) == {1}
    assert _asked(yes) == 2 * len(checks) and cache.hits == 0
    a = verifier_identity(FakeEngine(config=EngineConfig(dtype="float32")), "choice", "system", 4, True)
    b = verifier_identity(FakeEngine(config=EngineConfig(dtype="bfloat16")), "choice", "system", 4, True)
    assert a != b


def test_an_unscorable_verdict_is_not_held_and_is_asked_again():
    checks, cache = _checks(1), VerdictCache(1000)
    cut = FakeEngine(verdict="maybe")
    assert verify(cut, checks, cache=cache)[0] == [None] * len(checks) and len(cache) == 0
    verify(cut, checks, cache=cache)
    assert _asked(cut) == 2 * len(checks)


def test_the_bound_evicts_the_least_recently_used():
    checks, cache = _checks(), VerdictCache(10)
    verify(FakeEngine(verdict=hashed_verdict), checks, cache=cache)
    assert len(cache) == 10
    held = cache.lookup("unused identity", checks)
    assert held == {}  # keyed by identity too
    eng = FakeEngine(verdict=hashed_verdict)
    verify(eng, send_order(checks)[-10:], cache=cache)  # the last ten stored (in the order sent) are held
    assert eng.calls == []
    with pytest.raises(ValueError, match="at least 1"):
        VerdictCache(0)


def test_calibrated_verdicts_are_cached_the_same_way():
    def logprobs(req):
        return {"yes": -0.2, "no": -1.9} if verdict_bit(*req.check()) else {"yes": -1.9, "no": -0.2}

    checks, config = _checks(2), EngineConfig(verdict_mode="calibrated", verdict_bias=0.0)
    off = verify(FakeEngine(logprobs=logprobs, config=config), checks)[0]
    cache, eng = VerdictCache(1000), FakeEngine(logprobs=logprobs, config=config)
    assert verify(eng, checks, cache=cache)[0] == off and set(off) == {0, 1}
    assert verify(eng, checks, cache=cache)[0] == off and len(eng.calls) == 1
