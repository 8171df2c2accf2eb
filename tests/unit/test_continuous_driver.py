"""The continuous engine's bookkeeping (``dr_core.engines.continuous``) over a fake vLLM ``LLMEngine``: requests join
the running batch at the next step, each call returns when its own requests finish, a refused request fails only its
own call, and a step that raises fails the calls in flight while the driver goes on with later ones. The real engine:
tests/integration/test_continuous_engine.py."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

pytest.importorskip("vllm", reason="the continuous engine builds vLLM requests")

from dr_core.engines.base import Completion, EngineError  # noqa: E402
from dr_core.engines.continuous import ContinuousEngine, Driver, _Serialized, make_concurrent  # noqa: E402


class FakeLLMEngine:
    """A request of prompt [k] needs k steps; ``fail_next_step`` makes the next step raise; prompt [0] is refused."""

    def __init__(self):
        self.left: dict[str, int] = {}
        self.steps = 0
        self.entered = 0  # steps the driver has begun (it took the inbox before each)
        self.fail_next_step = False
        self.gate = threading.Semaphore(0)  # one release per step the test allows
        self.batch_sizes: list[int] = []

    def add_request(self, request_id, prompt, params):
        k = prompt["prompt_token_ids"][0]
        if k == 0:
            raise ValueError("refused")
        self.left[request_id] = k

    def abort_request(self, ids):
        for i in ids:
            self.left.pop(i, None)

    def step(self):
        self.entered += 1
        assert self.gate.acquire(timeout=10)
        self.steps += 1
        if self.fail_next_step:
            self.fail_next_step = False
            raise RuntimeError("kernel crashed")
        self.batch_sizes.append(len(self.left))
        done = []
        for rid in list(self.left):
            self.left[rid] -= 1
            if self.left[rid] == 0:
                del self.left[rid]
                done.append(SimpleNamespace(request_id=rid, finished=True, steps=self.steps))
        return done


class FakeVLLM:
    model_name = "fake"
    supports_logprobs = False

    def __init__(self):
        self.llm = SimpleNamespace(llm_engine=FakeLLMEngine())

    def prepare(self, conversations, params):
        from vllm import SamplingParams

        prompts = [[int(c[0]["content"])] for c in conversations]
        return prompts, [SamplingParams(max_tokens=8) for _ in prompts], [None] * len(prompts)

    def completion(self, out, prompt_tokens, logprobs):
        return Completion((f"done at step {out.steps}",), ("stop",), prompt_tokens, (1,))


def _conv(k: int):
    return [{"role": "user", "content": str(k)}]


def _call(engine, k, into, key):
    def run():
        try:
            into[key] = engine.chat([_conv(k)])[0].texts[0]
        except EngineError as exc:
            into[key] = exc

    t = threading.Thread(target=run)
    t.start()
    return t


def _until(cond):
    for _ in range(2000):
        if cond():
            return
        threading.Event().wait(0.005)
    raise AssertionError("the driver never got there")


def _wait_running(engine, n):
    for _ in range(1000):
        if len(engine._running) + len(engine._inbox) >= n:
            return
        threading.Event().wait(0.005)
    raise AssertionError("requests never arrived")


def test_a_short_call_joins_and_returns_before_a_long_one():
    inner = FakeVLLM()
    fake = inner.llm.llm_engine
    engine = ContinuousEngine(inner)
    got: dict = {}
    try:
        long = _call(engine, 5, got, "long")
        _until(lambda: fake.entered == 1)  # step 1 holds the long request alone
        fake.gate.release()
        _until(lambda: fake.entered == 2)  # step 2 began: it took the inbox before the short call arrives
        short = _call(engine, 1, got, "short")
        _wait_running(engine, 2)
        fake.gate.release()  # step 2: the long request alone
        _until(lambda: fake.entered == 3)
        fake.gate.release()  # step 3: the short request joined; it finishes
        short.join(10)
        assert got["short"] == "done at step 3" and "long" not in got
        fake.gate.release()
        fake.gate.release()
        long.join(10)
        assert got["long"] == "done at step 5"
        assert fake.batch_sizes == [1, 1, 2, 1, 1]
    finally:
        for _ in range(10):
            fake.gate.release()
        engine.close()


def test_a_refused_request_fails_its_own_call_only_and_a_failed_step_does_not_stop_the_driver():
    inner = FakeVLLM()
    fake = inner.llm.llm_engine
    engine = ContinuousEngine(inner)
    got: dict = {}
    try:
        refused = _call(engine, 0, got, "refused")
        refused.join(10)
        assert isinstance(got["refused"], EngineError) and "refused" in str(got["refused"])

        fake.fail_next_step = True
        crashed = _call(engine, 2, got, "crashed")
        fake.gate.release()
        crashed.join(10)
        assert isinstance(got["crashed"], EngineError) and "kernel crashed" in str(got["crashed"])
        assert fake.left == {}  # aborted

        later = _call(engine, 1, got, "later")
        fake.gate.release()
        later.join(10)
        assert got["later"] == "done at step 2"
    finally:
        for _ in range(10):
            fake.gate.release()
        engine.close()


def test_close_fails_waiting_calls():
    inner = FakeVLLM()
    engine = ContinuousEngine(inner)
    got: dict = {}
    waiting = _call(engine, 3, got, "w")
    _wait_running(engine, 1)
    engine.close()
    waiting.join(10)
    assert isinstance(got["w"], EngineError) and "closed" in str(got["w"])
    inner.llm.llm_engine.gate.release(10)


def test_make_concurrent_keeps_thread_safe_engines_and_serializes_others():
    safe = SimpleNamespace(thread_safe=True)
    assert make_concurrent(safe) is safe
    plain = SimpleNamespace(thread_safe=False, model_name="m", supports_logprobs=False, generate=lambda c, p: ["x"])
    wrapped = make_concurrent(plain)
    assert isinstance(wrapped, _Serialized) and wrapped.chat([_conv(1)]) == ["x"]


def test_an_engine_of_higher_priority_is_stepped_alone_while_it_has_work():
    lo_inner, hi_inner = FakeVLLM(), FakeVLLM()
    lo_fake, hi_fake = lo_inner.llm.llm_engine, hi_inner.llm.llm_engine
    driver = Driver()  # engines take turns by priority only when they share a driver
    lo, hi = (
        ContinuousEngine(lo_inner, priority=0, driver=driver),
        ContinuousEngine(hi_inner, priority=1, driver=driver),
    )
    got: dict = {}
    try:
        lo_call = _call(lo, 2, got, "lo")
        _until(lambda: lo_fake.entered == 1)
        hi_call = _call(hi, 2, got, "hi")
        _wait_running(hi, 1)
        lo_fake.gate.release()  # lo's first step ends; from now on hi has work
        _until(lambda: hi_fake.entered == 1)
        hi_fake.gate.release()
        _until(lambda: hi_fake.entered == 2)
        assert lo_fake.entered == 1  # hi's second step began, lo's second did not
        hi_fake.gate.release()
        hi_call.join(10)
        assert got["hi"] == "done at step 2" and lo_fake.steps == 1  # lo waited while hi ran
        lo_fake.gate.release()
        lo_call.join(10)
        assert got["lo"] == "done at step 2"
    finally:
        lo_fake.gate.release(10)
        hi_fake.gate.release(10)
        lo.close()
        hi.close()


def test_a_driver_belongs_to_its_owner_and_its_thread_ends_with_its_last_engine():
    shared = Driver()
    a, b = ContinuousEngine(FakeVLLM(), driver=shared), ContinuousEngine(FakeVLLM(), driver=shared)
    own = ContinuousEngine(FakeVLLM())
    assert a.driver is b.driver is shared and own.driver is not shared
    assert shared.running() and own.driver.running()
    a.close()
    assert shared.running()  # b still uses it
    b.close()
    own.close()
    _until(lambda: not shared.running() and not own.driver.running())
    again = ContinuousEngine(FakeVLLM(), driver=shared)  # a driver whose thread ended starts a new one
    try:
        assert shared.running()
    finally:
        again.close()
