"""``Engine.chat`` hands every engine one checked ``SamplingParams`` (``Engine.generate``): the keywords are written
once, in the base class, and a bad request is refused before any engine sees it."""

from __future__ import annotations

import pytest

from dr_core.engines.base import Completion, Engine, SamplingParams


class Recording(Engine):
    model_name = "recording"

    def __init__(self):
        self.seen: list[SamplingParams] = []

    def generate(self, conversations, params):
        self.seen.append(params)
        return [Completion(("x",), ("stop",), 1, (1,)) for _ in conversations]


def test_chat_passes_its_keywords_as_one_value():
    eng = Recording()
    out = eng.chat([[{"role": "user", "content": "hi"}]] * 2, n=1, temperature=0.7, max_tokens=9, choices=["a", "b"])
    assert len(out) == 2
    assert eng.seen == [SamplingParams(n=1, temperature=0.7, max_tokens=9, choices=["a", "b"])]
    eng.chat([[{"role": "user", "content": "hi"}]])
    assert eng.seen[-1] == SamplingParams()  # the defaults: one greedy sample of at most 256 tokens


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"n": 0}, "n must be >= 1"),
        ({"max_tokens": 0}, "max_tokens must be >= 1"),
        ({"json_schema": {}, "choices": ["a"]}, "not both"),
        ({"logprobs": 21}, "logprobs must be None or an int"),
    ],
)
def test_a_bad_request_is_refused_before_the_engine_sees_it(kwargs, message):
    eng = Recording()
    with pytest.raises(ValueError, match=message):
        eng.chat([[{"role": "user", "content": "hi"}]], **kwargs)
    assert eng.seen == []
