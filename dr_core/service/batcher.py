"""Stage "queue", second half: the queue of sets and the worker threads that run them through the engines, in one of
two modes (``dr serve --batching``):

- ``continuous`` (the default): ``max_batch_sets`` workers each take one set and run it through the later stages
  alone; the engines batch the concurrent sets' requests continuously (in-process vLLM behind
  ``dr_core.engines.continuous``, or a vLLM server), so a set is answered as soon as its own checks are done.
- ``coalesce``: one worker takes the first waiting set, waits up to ``batch_wait_s`` for more (at most
  ``max_batch_sets``), runs them as one engine batch and answers them all when the whole batch is done.

``submit(job)`` queues a set and returns a ``concurrent.futures.Future`` of its answers ({request id: answer}). A
worker runs its sets through the later stages, in order: ``score`` (``scoring.Scorer.score``), ``answer``
(``answers.answer_batch``), ``commit`` (``ledger.Ledger.commit``: the sets and their answers to the store), and
resolves their futures. Any failure fails that run's futures with ``Unavailable`` (the service answers 503 and
counts it); nothing of it is answered or kept.
"""

from __future__ import annotations

import queue
import threading
import time
from concurrent.futures import Future
from typing import TYPE_CHECKING, Callable, Literal, Sequence

from dr_core.engines.base import EngineError
from dr_core.faults import fault_point
from dr_core.service.errors import Unavailable
from dr_core.service.scoring import SetJob

if TYPE_CHECKING:
    from dr_core.service.metrics import Metrics

Log = Callable[[str], None]
Mode = Literal["continuous", "coalesce"]
MODES: tuple[str, ...] = ("continuous", "coalesce")


class Batcher:
    """``score(jobs)`` -> scored sets; ``answer(scored)`` -> {request id: answer}; ``commit(scored, answered)``
    stores them (None: nothing is stored). ``on_batch(n_sets, seconds, error)`` is told about every run of the
    stages (a batch in ``coalesce`` mode, one set in ``continuous`` mode). In ``continuous`` mode ``score``,
    ``answer`` and ``commit`` are called from several threads at once."""

    def __init__(
        self,
        score: Callable[[Sequence[SetJob]], list],
        answer: Callable[[list], dict[str, dict]],
        commit: Callable[[list, dict[str, dict]], None] | None = None,
        *,
        mode: Mode = "coalesce",
        max_batch_sets: int = 32,
        batch_wait_s: float = 0.02,
        max_queue_sets: int = 4096,
        on_batch: Callable[[int, float, str | None], None] = lambda *_a: None,
    ):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
        self._score, self._answer, self._commit, self._on_batch = score, answer, commit, on_batch
        self.mode, self.max_batch_sets, self.batch_wait_s = mode, max_batch_sets, batch_wait_s
        self._queue: queue.Queue = queue.Queue(max_queue_sets)
        self._stop = threading.Event()
        self._running = 0
        self._count = threading.Lock()
        workers = max_batch_sets if mode == "continuous" else 1
        self._threads = [
            threading.Thread(target=self._run, name=f"dr-batcher-{i}", daemon=True) for i in range(workers)
        ]

    @property
    def busy(self) -> bool:
        """A worker is running sets through the stages."""
        return self._running > 0

    def start(self) -> "Batcher":
        for t in self._threads:
            t.start()
        return self

    @property
    def alive(self) -> bool:
        return any(t.is_alive() for t in self._threads) and not self._stop.is_set()

    def depth(self) -> int:
        """Sets waiting for a worker (not counting those running)."""
        return self._queue.qsize()

    def submit(self, job: SetJob) -> Future:
        if not self.alive:
            raise Unavailable("not_ready", "the service is shutting down")
        fut: Future = Future()
        try:
            self._queue.put_nowait((job, fut))
        except queue.Full:
            raise Unavailable("busy", f"{self._queue.maxsize} sets are already waiting (--max-queue-sets)") from None
        return fut

    def close(self, timeout: float = 30.0) -> None:
        """Stop after the running sets; sets still queued fail with Unavailable."""
        self._stop.set()
        deadline = time.monotonic() + timeout
        for t in self._threads:
            if t.is_alive():
                t.join(max(0.0, deadline - time.monotonic()))
        while True:
            try:
                _job, fut = self._queue.get_nowait()
            except queue.Empty:
                break
            fut.set_exception(Unavailable("not_ready", "the service shut down before this set was scored"))

    # -- the worker -------------------------------------------------------------------------------------------
    def _take(self) -> list[tuple[SetJob, Future]]:
        try:
            first = self._queue.get(timeout=0.2)
        except queue.Empty:
            return []
        batch = [first]
        if self.mode == "continuous":
            return batch
        deadline = time.monotonic() + self.batch_wait_s
        while len(batch) < self.max_batch_sets:
            left = deadline - time.monotonic()
            try:
                batch.append(self._queue.get(timeout=left) if left > 0 else self._queue.get_nowait())
            except queue.Empty:
                break
        return batch

    def _run(self) -> None:
        while not self._stop.is_set():
            batch = self._take()
            if not batch:
                continue
            with self._count:
                self._running += 1
            started = time.perf_counter()
            jobs = [j for j, _ in batch]
            try:
                answered = self._run_batch(jobs)
            except Exception as exc:  # engine, store or bug: the whole batch fails, nothing is answered
                reason = "engine_failure" if isinstance(exc, EngineError) else "batch_failure"
                err = Unavailable(reason, f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:300]}")
                self._on_batch(len(jobs), time.perf_counter() - started, reason)
                for _, fut in batch:
                    fut.set_exception(err)
            else:
                self._on_batch(len(jobs), time.perf_counter() - started, None)
                for job, fut in batch:
                    fut.set_result({m.request_id: answered[m.request_id] for m in job.members})
            finally:
                with self._count:
                    self._running -= 1

    def _run_batch(self, jobs: list[SetJob]) -> dict[str, dict]:
        scored = self._score(jobs)
        fault_point("serve-batch")
        answered = self._answer(scored)
        if self._commit is not None:
            self._commit(scored, answered)
        return answered


def count_batch(metrics: Metrics, log: Log, n: int, seconds: float, error: str | None) -> None:
    """The worker's ``on_batch`` in the service (bound with ``functools.partial``): counts the batch, logs a failure."""
    metrics.inc("dr_batches_total", outcome=error or "ok")
    metrics.observe("dr_batch_sets", n)
    if error == "engine_failure":
        metrics.inc("dr_engine_failures_total")
    if error:
        log(f"a batch of {n} set(s) failed ({error}) after {seconds:.1f} s; its requests got 503")
