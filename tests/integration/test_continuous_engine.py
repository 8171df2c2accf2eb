"""The continuous engine (``dr_core.engines.continuous``) on the real in-process vLLM engine and the default model:
``chat`` from several threads at once gives what ``VLLMEngine.chat`` gives, and a short call made while a long one
runs is answered first (it joins the running batch instead of waiting for it)."""

from __future__ import annotations

import threading
import time

import pytest

from dr_core.engines.base import EngineError
from dr_core.engines.continuous import ContinuousEngine, make_concurrent

pytestmark = pytest.mark.integration

SAMPLE = dict(n=2, temperature=0.7, max_tokens=24, seed=5)


def _convs(k: int) -> list[list[dict]]:
    return [[{"role": "user", "content": f"Name {i + 2} fruits."}] for i in range(k)]


@pytest.fixture
def continuous(vllm_engine):
    engine = make_concurrent(vllm_engine)
    assert isinstance(engine, ContinuousEngine)
    yield engine
    engine.close()


def _until(condition, what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        threading.Event().wait(0.01)


def test_threads_get_what_one_batch_gets(vllm_engine, continuous, monkeypatch):
    convs = _convs(4)
    vllm_engine.chat(convs, **SAMPLE)  # a cold prefix cache changes the first call's numerics: warm it
    expected = [c.texts for c in vllm_engine.chat(convs, **SAMPLE)]
    got: dict[int, tuple] = {}

    # bf16 numerics depend on which requests share a step, so an exact comparison needs the same batch: hold the
    # driver until all four calls wait in the inbox, in the batch's order, then let it add them in one step.
    # (Without the gate a thread that starts late joins a later step, and a sampled token may differ: CI saw it.)
    release = threading.Event()
    step_once = continuous.step_once

    def gated_step() -> None:
        release.wait(300)
        step_once()

    monkeypatch.setattr(continuous, "step_once", gated_step)

    def one(i: int) -> None:
        got[i] = continuous.chat([convs[i]], **SAMPLE)[0].texts

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(convs))]
    for i, t in enumerate(threads):
        t.start()
        _until(lambda n=i + 1: len(continuous._inbox) == n, f"call {i} in the inbox")
    release.set()
    for t in threads:
        t.join(300)
    assert [got[i] for i in range(len(convs))] == expected
    assert [c.texts for c in continuous.chat(convs, **SAMPLE)] == expected


def test_constraints_and_logprobs(continuous):
    [verdict] = continuous.chat(
        [[{"role": "user", "content": "Is water wet? Answer yes or no."}]], choices=["yes", "no"]
    )
    assert verdict.texts[0] in ("yes", "no")
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    [obj] = continuous.chat(
        [[{"role": "user", "content": "A JSON object, please."}]], json_schema=schema, max_tokens=24
    )
    assert obj.finish_reasons == ("stop",) and '"a"' in obj.texts[0]
    [lp] = continuous.chat([[{"role": "user", "content": "Say yes."}]], max_tokens=1, logprobs=3)
    assert lp.top_logprobs is not None and len(lp.top_logprobs[0][0]) >= 3
    [long] = continuous.chat([[{"role": "user", "content": "word " * 3000}]], max_tokens=8)
    assert long.finish_reasons == ("prompt_too_long",)


def test_a_short_call_joins_the_running_batch_and_returns_first(continuous):
    done: list[str] = []
    long_prompt = [[{"role": "user", "content": "Count from 1 to 1000 as a JSON list."}]]
    at_least_500 = {"type": "array", "items": {"type": "integer"}, "minItems": 500}  # cannot stop before 192 tokens
    results: dict[str, list] = {}

    def long_call() -> None:
        results["long"] = continuous.chat(long_prompt, max_tokens=192, json_schema=at_least_500)
        done.append("long")

    t = threading.Thread(target=long_call)
    t.start()
    # the long call is running once the driver has taken it from the inbox (it then takes 192 decode steps)
    while not continuous._running and t.is_alive():
        threading.Event().wait(0.01)
    short = continuous.chat([[{"role": "user", "content": "Is 2 even? yes or no"}]], choices=["yes", "no"])
    done.append("short")
    t.join(300)
    assert results["long"][0].finish_reasons == ("length",)  # it really ran 192 steps
    assert short[0].texts[0] in ("yes", "no")
    assert done == ["short", "long"]


def test_closed_engine_refuses(vllm_engine):
    engine = ContinuousEngine(vllm_engine)
    engine.close()
    with pytest.raises(EngineError, match="closed"):
        engine.chat(_convs(1), max_tokens=4)
