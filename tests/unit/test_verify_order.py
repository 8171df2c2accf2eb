"""How verify() sends its requests (order, grouping, one prompt per verdict) and the engine's KV block size, without a
model: the order may change for the prefix cache, never the requests or the order of the results."""

import random

import pytest
from pydantic import ValidationError

from dr_core.config import EngineConfig
from dr_core.evaluator.items import Check
from dr_core.evaluator.verify import send_order, verify
from dr_core.rubric import prompts
from tests.support.fakes import FakeEngine, hashed_verdict, verdict_bit


def _checks(seed: int = 0) -> list[Check]:
    rng = random.Random(seed)
    checks = [
        Check(f"prompt {p}", f"response {p}.{r}", f"criterion {c}")
        for p in range(3)
        for r in range(3)
        for c in range(4)
    ]
    checks += rng.sample(checks, 8)  # repeated checks
    rng.shuffle(checks)
    return checks


def test_send_order_dedups_and_groups_by_prompt_and_response_stably():
    checks = _checks()
    order = send_order(checks)
    assert set(order) == set(checks) and len(order) == len(set(checks))
    groups = [(c.prompt, c.response) for c in order]
    assert groups == sorted(groups)  # one run per (prompt, response)
    for key in set(groups):  # within a run, the order of first occurrence
        first_seen = [c for c in dict.fromkeys(checks) if (c.prompt, c.response) == key]
        assert [c for c in order if (c.prompt, c.response) == key] == first_seen


@pytest.mark.parametrize("style", ["system", "plain"])
def test_verify_sends_every_check_its_own_prompt_and_answers_in_the_original_order(style):
    checks = _checks(1)
    eng = FakeEngine(verdict=hashed_verdict)
    verdicts, stats = verify(eng, checks, verifier_prompt=style)
    assert verdicts == [verdict_bit(c.criterion, c.response) for c in checks]
    (call,) = eng.calls
    assert stats.requests == len(set(checks)) == len(call.conversations)
    assert call.conversations == [
        prompts.verifier_messages(c.prompt, c.response, c.criterion, style=style) for c in send_order(checks)
    ]


def test_verify_results_do_not_depend_on_the_input_order():
    checks = _checks(2)
    expected = dict(zip(checks, verify(FakeEngine(verdict=hashed_verdict), checks)[0]))
    for seed in range(3):
        shuffled = random.Random(seed).sample(checks, len(checks))
        assert verify(FakeEngine(verdict=hashed_verdict), shuffled)[0] == [expected[c] for c in shuffled]


def test_block_size_defaults_to_none_and_takes_multiples_of_16():
    assert EngineConfig().block_size is None
    assert EngineConfig(block_size=32).block_size == 32
    assert EngineConfig.model_validate_json('{"model": "default"}').block_size is None  # older configs stay valid
    for bad in (8, 24, 0):
        with pytest.raises(ValidationError):
            EngineConfig(block_size=bad)


class _FakeLLM:
    seen: list[dict] = []

    def __init__(self, **kwargs):
        _FakeLLM.seen.append(kwargs)

    def get_tokenizer(self):
        return None
