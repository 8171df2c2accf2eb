"""The one engine contract: every Engine implementation (in-process vLLM, OpenAI-compatible HTTP against a real
vLLM server) must pass these, on the real default model."""

import json

import pytest

from dr_core.engines import FINISH_LENGTH, PROMPT_TOO_LONG, Completion

pytestmark = [pytest.mark.slow]

ENGINES = ["vllm_engine", "http_engine"]


def conv(text):
    return [{"role": "user", "content": text}]


@pytest.fixture(params=ENGINES)
def engine(request):
    return request.getfixturevalue(request.param)


def test_one_completion_per_conversation_with_n_samples(engine):
    short, long = conv("Name a colour."), conv("Name a colour. " + "Please think about it carefully. " * 10)
    out = engine.chat([short, long], n=2, temperature=0.8, max_tokens=8)
    assert len(out) == 2 and all(isinstance(c, Completion) for c in out)
    for c in out:
        assert len(c.texts) == len(c.finish_reasons) == len(c.completion_tokens) == 2
        assert all(1 <= t <= 8 for t in c.completion_tokens)
        assert all(r in ("stop", FINISH_LENGTH) for r in c.finish_reasons)
    # order is kept: the longer conversation has the longer prompt
    assert 0 < out[0].prompt_tokens < out[1].prompt_tokens


def test_cut_generation_says_length(engine):
    (c,) = engine.chat([conv("Write a long story about a dragon.")], max_tokens=5)
    assert c.finish_reasons == (FINISH_LENGTH,) and c.completion_tokens == (5,) and c.truncated == (True,)


def test_choice_constraint(engine):
    checks = [conv(f"Is {x} a fruit? Answer yes or no.") for x in ("an apple", "a hammer", "a banana")]
    out = engine.chat(checks, choices=["yes", "no"], max_tokens=4)
    for c in out:
        assert c.texts[0] in ("yes", "no") and c.finish_reasons == ("stop",)


def test_json_schema_constraint(engine):
    schema = {
        "type": "object",
        "properties": {
            "answer": {"type": "string", "maxLength": 20},
            "score": {"type": "integer", "minimum": 1, "maximum": 5},
        },
        "required": ["answer", "score"],
        "additionalProperties": False,
    }
    out = engine.chat([conv("Rate the word 'sun' from 1 to 5 as JSON.")], json_schema=schema, max_tokens=64)
    data = json.loads(out[0].texts[0])
    assert set(data) == {"answer", "score"} and 1 <= data["score"] <= 5 and len(data["answer"]) <= 20


def test_prompt_too_long_is_reported_not_raised(engine):
    huge = conv("word " * 3000)  # > 2048 tokens of context
    out = engine.chat([huge, conv("Say hi.")], max_tokens=4)
    assert out[0].finish_reasons == (PROMPT_TOO_LONG,) and out[0].texts == ("",)
    assert out[1].finish_reasons[0] in ("stop", FINISH_LENGTH) and out[1].completion_tokens[0] >= 1


def test_top_logprobs_on_request_only(engine):
    assert engine.supports_logprobs
    q = conv("Is Paris in France? Answer yes or no.")
    (plain,) = engine.chat([q], max_tokens=2)
    assert plain.top_logprobs is None
    (c,) = engine.chat([q], n=2, temperature=0.8, max_tokens=2, logprobs=5)
    assert len(c.top_logprobs) == 2
    for sample, k in zip(c.top_logprobs, c.completion_tokens):
        assert len(sample) == k and all(1 <= len(pos) <= 6 for pos in sample)  # top 5 + the sampled token
        assert all(lp <= 1e-4 for pos in sample for lp in pos.values())  # log-probabilities (float rounding only)
        assert all(isinstance(t, str) for pos in sample for t in pos)
    # greedy: the sampled first token is the most likely one shown
    (g,) = engine.chat([q], max_tokens=1, logprobs=5)
    first = g.top_logprobs[0][0]
    assert max(first, key=first.get) == g.texts[0]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"n": 0},
        {"max_tokens": 0},
        {"choices": []},
        {"choices": ["a"], "json_schema": {"type": "object"}},
        {"logprobs": 0},
        {"logprobs": 21},
    ],
)
def test_bad_requests_raise_value_error(engine, kwargs):
    with pytest.raises(ValueError):
        engine.chat([conv("hi")], **kwargs)


def test_model_name(engine):
    assert engine.model_name
