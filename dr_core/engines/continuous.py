"""Continuous batching for in-process vLLM engines: ``chat`` from many threads at once, every conversation a request
of one running engine batch, each call answered as soon as its own requests finish.

``vllm.LLM.generate`` runs a batch to its end and is not safe to call from two threads. ``ContinuousEngine`` wraps a
``VLLMEngine`` and hands its requests to a driver thread (``Driver``, one per owner: the reward service holds one for
its generator and verifier) that steps the wrapped engines: it adds waiting requests to their engine
(``LLMEngine.add_request``, output kind FINAL_ONLY, as ``LLM.generate`` does), runs one scheduler step of each engine
with work in turn, those of the highest ``priority`` first (``LLMEngine.step``: vLLM's scheduler admits new requests
into the running batch at every step) and resolves a request as soon as its final output comes back. Steps of the
engines of one driver never overlap, so two models of one service share the CPU as before.

A conversation sends exactly what ``VLLMEngine.chat`` sends (``VLLMEngine.prepare``: the same prompt tokens, the
same ``SamplingParams``, the same per-conversation seed), so its samples do not depend on what else is running.
A step that raises fails every request then in flight on that engine with ``EngineError``.

``make_concurrent(engine)`` is what a caller with many threads uses (the reward service, ``dr serve``): a
``VLLMEngine`` comes back wrapped; an engine whose ``chat`` is already safe to call from many threads
(``thread_safe``: the OpenAI-compatible HTTP engine, whose server batches continuously itself) comes back as it is;
any other is serialized behind a lock.

    engine = make_concurrent(VLLMEngine(config))   # then engine.chat(...) from any thread
    (tests/integration/test_continuous_engine.py shows it with threads)
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, field

from dr_core.engines.base import Completion, Conversation, Engine, EngineError, SamplingParams


@dataclass
class _Call:
    """One ``chat`` call waiting for its requests."""

    results: list[Completion | None]
    pending: int
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None

    def finish_one(self) -> None:
        self.pending -= 1
        if self.pending == 0:
            self.done.set()

    def fail(self, exc: BaseException) -> None:
        if self.error is None:
            self.error = exc
        self.done.set()


@dataclass
class _Request:
    request_id: str
    prompt_ids: list[int]
    params: object  # vllm.SamplingParams
    call: _Call
    index: int
    logprobs: int | None


class Driver:
    """The thread that steps the continuous engines registered with it: started by the first, ended after the last
    leaves. Engines that share one driver never step at the same time and obey each other's ``priority``."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._engines: list[ContinuousEngine] = []
        self._thread: threading.Thread | None = None

    def register(self, engine: "ContinuousEngine") -> None:
        with self._cond:
            self._engines.append(engine)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="dr-vllm-driver", daemon=True)
                self._thread.start()

    def unregister(self, engine: "ContinuousEngine") -> None:
        with self._cond:
            if engine in self._engines:
                self._engines.remove(engine)
            self._cond.notify_all()

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def running(self) -> bool:
        """True while the driver's thread is alive (it has engines, or has not yet seen the last leave)."""
        with self._cond:
            return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._engines and not any(e.has_work() for e in self._engines):
                    self._cond.wait(1.0)
                if not self._engines:  # the last engine left: the thread ends (a new one starts on register)
                    self._thread = None
                    return
                busy = [e for e in self._engines if e.has_work()]
                top = max(e.priority for e in busy)
            for engine in busy:
                if engine.priority == top:  # a higher priority with work holds back the lower ones
                    try:
                        engine.step_once()
                    except Exception as exc:  # e.g. the engine was closed under it: fail its calls, drive the rest
                        engine.fail_running(exc)


class ContinuousEngine(Engine):
    """A ``VLLMEngine`` whose ``chat`` may be called from any number of threads at once (module docstring). The
    wrapped engine belongs to the caller (its pool closes it); ``close`` here only detaches the driver.

    ``priority``: while an engine of a higher priority has work, the driver steps only the engines of that priority
    (the reward service gives its verifier, the later stage, the higher one: a set being verified finishes before
    more rubrics are decoded for sets that arrived later; measured in docs/benchmarks/service.md)."""

    thread_safe = True

    def __init__(self, inner, priority: int = 0, driver: Driver | None = None) -> None:
        """``driver``: the one to share with the caller's other continuous engines (None: a driver of its own)."""
        self.inner, self.priority = inner, priority
        self.driver = driver if driver is not None else Driver()
        self.model_name = inner.model_name
        self.supports_logprobs = inner.supports_logprobs
        self._lock = threading.Lock()  # the inbox, the running requests, the tokenizer
        self._inbox: list[_Request] = []
        self._running: dict[str, _Request] = {}
        self._ids = itertools.count()
        self._closed = False
        self.driver.register(self)

    # -- callers' side ------------------------------------------------------------------------------------------
    def generate(self, conversations: list[Conversation], params: SamplingParams) -> list[Completion]:
        with self._lock:  # the tokenizer is not safe to share between threads
            prompts, per_request, results = self.inner.prepare(conversations, params)
        fits = [i for i, r in enumerate(results) if r is None]
        if not fits:
            return results  # type: ignore[return-value]
        call = _Call(results, len(fits))
        with self._lock:
            if self._closed:
                raise EngineError(f"{self.model_name}: the engine is closed")
            for i in fits:
                self._inbox.append(
                    _Request(f"c{next(self._ids)}", prompts[i], per_request[i], call, i, params.logprobs)
                )
        self.driver.wake()
        call.done.wait()
        if call.error is not None:
            raise call.error
        return results  # type: ignore[return-value]

    def close(self) -> None:
        """Detach from the driver; calls still waiting fail with ``EngineError`` (the wrapped engine stays open)."""
        with self._lock:
            self._closed = True
            waiting = self._inbox + list(self._running.values())
            self._inbox, self._running = [], {}
        for req in waiting:
            req.call.fail(EngineError(f"{self.model_name}: the engine was closed before this request finished"))
        self.driver.unregister(self)

    # -- the driver's side --------------------------------------------------------------------------------------
    def has_work(self) -> bool:
        return bool(self._inbox or self._running)

    def step_once(self) -> None:
        """Add the waiting requests, run one engine step, resolve what finished (on the driver thread)."""
        from vllm import TokensPrompt
        from vllm.sampling_params import RequestOutputKind

        engine = self.inner.llm.llm_engine
        with self._lock:
            new, self._inbox = self._inbox, []
            for req in new:
                self._running[req.request_id] = req
        for req in new:
            req.params.output_kind = RequestOutputKind.FINAL_ONLY
            try:
                engine.add_request(req.request_id, TokensPrompt(prompt_token_ids=req.prompt_ids), req.params)
            except Exception as exc:  # this request is refused: its call fails, the others run on
                with self._lock:
                    self._running.pop(req.request_id, None)
                req.call.fail(EngineError(f"{self.model_name}: {type(exc).__name__}: {exc}"))
        if not self._running:
            return
        try:
            outputs = engine.step()
        except Exception as exc:  # the model, a bad request, a bug: fail what is in flight, keep the driver alive
            self.fail_running(exc)
            return
        for out in outputs:
            if not getattr(out, "finished", False):
                continue
            with self._lock:
                req = self._running.pop(out.request_id, None)
            if req is None:
                continue
            try:
                req.call.results[req.index] = self.inner.completion(out, len(req.prompt_ids), req.logprobs)
            except Exception as exc:
                req.call.fail(EngineError(f"{self.model_name}: {type(exc).__name__}: {exc}"))
                continue
            req.call.finish_one()

    def fail_running(self, exc: Exception) -> None:
        """Fail every call with a request in flight or waiting (a step raised)."""
        with self._lock:
            failed, self._running = list(self._running.values()) + self._inbox, {}
            self._inbox = []
        ids = [r.request_id for r in failed]
        try:
            self.inner.llm.llm_engine.abort_request(ids)
        except Exception:  # the engine is broken already; nothing more to free
            pass
        err = exc if isinstance(exc, EngineError) else EngineError(f"{self.model_name}: {type(exc).__name__}: {exc}")
        for req in failed:
            req.call.fail(err)


class _Serialized(Engine):
    """An engine that is not safe to call from two threads, behind a lock (correct, but no concurrency gained)."""

    thread_safe = True

    def __init__(self, inner: Engine) -> None:
        self.inner = inner
        self.model_name = inner.model_name
        self.supports_logprobs = inner.supports_logprobs
        self._lock = threading.Lock()

    def generate(self, conversations: list[Conversation], params: SamplingParams) -> list[Completion]:
        with self._lock:
            return self.inner.generate(conversations, params)


def make_concurrent(engine: Engine, priority: int = 0, driver: Driver | None = None) -> Engine:
    """``engine`` made safe for ``chat`` from many threads at once (module docstring); ``priority`` and ``driver``:
    the continuous engine's, if it becomes one (engines given one driver take turns by priority)."""
    if getattr(engine, "thread_safe", False):
        return engine
    from dr_core.engines.vllm_engine import VLLMEngine

    if isinstance(engine, VLLMEngine):
        return ContinuousEngine(engine, priority, driver)
    return _Serialized(engine)
