"""The one worker thread that owns the engines: concurrent sets are coalesced into engine batches.

``submit(job)`` queues a set and returns a ``concurrent.futures.Future`` of its answers ({request id: answer}).
The worker takes the first waiting set, waits up to ``batch_wait_s`` for more (at most ``max_batch_sets``), scores
them in one batch (``scoring.score_jobs``), commits the batch to the store (``Ledger.commit``), then resolves
every future. Sets that arrive while a batch runs form the next one. Any failure fails the whole batch's futures
with ``Unavailable`` (the service answers 503 and counts it); nothing of the batch is answered or kept.
"""

from __future__ import annotations

import queue
import threading
import time
from concurrent.futures import Future
from typing import Callable, Sequence

from dr_core.engines.base import EngineError
from dr_core.faults import fault_point
from dr_core.service.scoring import SetJob


class Unavailable(RuntimeError):
    """The engines or the store failed on a batch, or the service is not ready or too busy (503)."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


class Batcher:
    """score(jobs) -> scored sets; commit(scored) -> {request id: answer}. ``on_batch(n_sets, seconds, error)``
    is told about every batch (metrics)."""

    def __init__(
        self,
        score: Callable[[Sequence[SetJob]], list],
        commit: Callable[[list], dict],
        *,
        max_batch_sets: int = 32,
        batch_wait_s: float = 0.02,
        max_queue_sets: int = 4096,
        on_batch: Callable[[int, float, str | None], None] = lambda *_a: None,
    ):
        self._score, self._commit, self._on_batch = score, commit, on_batch
        self.max_batch_sets, self.batch_wait_s = max_batch_sets, batch_wait_s
        self._queue: queue.Queue = queue.Queue(max_queue_sets)
        self._stop = threading.Event()
        self.busy = False
        self._thread = threading.Thread(target=self._run, name="dr-batcher", daemon=True)

    def start(self) -> "Batcher":
        self._thread.start()
        return self

    @property
    def alive(self) -> bool:
        return self._thread.is_alive() and not self._stop.is_set()

    def depth(self) -> int:
        """Sets waiting for a batch (not counting the one running)."""
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
        """Stop after the running batch; sets still queued fail with Unavailable."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
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
            self.busy = True
            started = time.perf_counter()
            jobs = [j for j, _ in batch]
            try:
                scored = self._score(jobs)
                fault_point("serve-batch")
                answered = self._commit(scored)
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
                self.busy = False
