"""Progress of long work, and how much the log says, without any UI framework: dr_core reports, the CLI shows.

Work reports through ``work(label, total, unit)``, a context manager whose handle counts with ``advance(n)``. With
no sink installed (the default: library use, tests, Prefect workers) that costs nothing and shows nothing. The CLI
installs a sink (``cli/progress.py``: a rich progress bar with the count, the rate and the ETA) with
``set_sink``. The in-process vLLM engine reports every finished request of a batch through ``vllm_tqdm`` (vLLM's
``use_tqdm`` accepts a tqdm-like factory), labelled by the innermost ``activity`` ("verdicts", "rollouts", ...).
A flow step that has finished is told with ``step_finished`` (the sink's optional ``step`` method: the CLI's one
line per step).

``verbose()`` says whether the user asked for every third-party log line (``dr ... --verbose`` sets
``DR_VERBOSE=1``); by default the noise they cannot act on is filtered (``cli/quiet.py``).

    python -c "from dr_core import progress; \\
               with progress.work('demo', 3) as w: [w.advance() for _ in range(3)]"
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os
import threading
import time
from typing import Iterator, Protocol

VERBOSE_ENV = "DR_VERBOSE"


def verbose() -> bool:
    """True when the user asked for the full log (``--verbose``)."""
    return os.environ.get(VERBOSE_ENV, "") not in ("", "0")


class Sink(Protocol):
    """Where progress goes. ``key`` identifies one piece of work from ``start`` to ``stop``."""

    def start(self, key: int, label: str, total: int | None, unit: str) -> None: ...

    def advance(self, key: int, n: int) -> None: ...

    def stop(self, key: int) -> None: ...

    # Optional: ``step(name, state, seconds, peak_rss_mb)``, told when a flow step has finished (``step_finished``).


_SINK: Sink | None = None
_LOCK = threading.Lock()
_NEXT = [0]
_ACTIVITY: contextvars.ContextVar[tuple[str, str] | None] = contextvars.ContextVar("dr_activity", default=None)


def set_sink(sink: Sink | None) -> Sink | None:
    """Install ``sink`` (None: none) for the whole process; returns the previous one."""
    global _SINK
    with _LOCK:
        previous, _SINK = _SINK, sink
    return previous


def sink() -> Sink | None:
    return _SINK


def step_finished(name: str, state: str, seconds: float, peak_rss_mb: float | None = None) -> None:
    """A flow step has finished (``flows/steps.py::run_step``): tell the sink, if it has a ``step`` method (the CLI
    prints one line per step: name, state, seconds, peak resident memory)."""
    target = _SINK
    step = getattr(target, "step", None)
    if step is not None:
        step(name, state, seconds, peak_rss_mb)


class Work:
    """One piece of work being counted (``work``)."""

    def __init__(self, label: str, total: int | None, unit: str):
        self.label, self.total, self.unit = label, total, unit
        self.done = 0
        self._sink = _SINK
        with _LOCK:
            _NEXT[0] += 1
            self.key = _NEXT[0]
        if self._sink is not None:
            self._sink.start(self.key, label, total, unit)

    def advance(self, n: int = 1) -> None:
        self.done += n
        if self._sink is not None:
            self._sink.advance(self.key, n)

    def close(self) -> None:
        if self._sink is not None:
            self._sink.stop(self.key)
            self._sink = None


@contextlib.contextmanager
def work(label: str, total: int | None, unit: str = "items") -> Iterator[Work]:
    """Count ``total`` units of work named ``label`` (total None: unknown)."""
    w = Work(label, total, unit)
    try:
        yield w
    finally:
        w.close()


@contextlib.contextmanager
def activity(label: str, unit: str) -> Iterator[None]:
    """Name what the engine requests inside this block are (e.g. ``activity("verify", "verdicts")``)."""
    token = _ACTIVITY.set((label, unit))
    try:
        yield
    finally:
        _ACTIVITY.reset(token)


def current_activity(default: tuple[str, str] = ("generate", "requests")) -> tuple[str, str]:
    return _ACTIVITY.get() or default


class _EngineProgress:
    """The tqdm-like object vLLM's ``LLM.generate(use_tqdm=factory)`` drives: ``update(n)`` per finished request
    (n samples), ``format_dict["elapsed"]``, ``postfix``, ``refresh``, ``close``; called with an iterable (vLLM's
    "Rendering prompts") it only iterates."""

    def __init__(self, iterable=None, total=None, *, samples: int = 1, **_kwargs):
        self.iterable, self.total, self.n, self.postfix = iterable, total, 0, None
        self._start = time.monotonic()
        self._work = None
        if iterable is None:
            label, unit = current_activity()
            self._work = Work(label, None if total is None else total * samples, unit)

    def __iter__(self):
        return iter(self.iterable)

    @property
    def format_dict(self) -> dict:
        return {"elapsed": max(time.monotonic() - self._start, 1e-9)}

    def update(self, n: int = 1) -> None:
        self.n += n
        if self._work is not None:
            self._work.advance(n)

    def refresh(self) -> None:
        pass

    def close(self) -> None:
        if self._work is not None:
            self._work.close()
            self._work = None


def vllm_tqdm(samples: int = 1):
    """What to pass as vLLM's ``use_tqdm`` for a batch of ``samples`` samples per request: the reporting factory
    while a sink is installed (it counts samples), else False (no bar)."""
    if _SINK is None:
        return False
    return functools.partial(_EngineProgress, samples=samples)
