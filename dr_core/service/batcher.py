"""Stage "queue", second half: the queue of sets and the one worker thread that owns the engines; concurrent sets
are coalesced into engine batches.

``submit(job)`` queues a set and returns a ``concurrent.futures.Future`` of its answers ({request id: answer}).
The worker takes the first waiting set, waits up to ``batch_wait_s`` for more (at most ``max_batch_sets``), then
runs the batch through the later stages, in order: ``score`` (``scoring.Scorer.score``), ``answer``
(``answers.answer_batch``), ``commit`` (``ledger.Ledger.commit``: the batch and its answers to the store), and
resolves every future. Sets that arrive while a batch runs form the next one. Any failure fails the whole batch's
futures with ``Unavailable`` (the service answers 503 and counts it); nothing of the batch is answered or kept.
"""

from __future__ import annotations

import queue
import threading
import time
from concurrent.futures import Future
from typing import TYPE_CHECKING, Callable, Sequence

from dr_core.engines.base import EngineError
from dr_core.faults import fault_point
from dr_core.service.errors import Unavailable
from dr_core.service.scoring import SetJob

if TYPE_CHECKING:
    from dr_core.service.metrics import Metrics

Log = Callable[[str], None]


class Batcher:
    """``score(jobs)`` -> scored sets; ``answer(scored)`` -> {request id: answer}; ``commit(scored, answered)``
    stores them (None: nothing is stored). ``on_batch(n_sets, seconds, error)`` is told about every batch."""

    def __init__(
        self,
        score: Callable[[Sequence[SetJob]], list],
        answer: Callable[[list], dict[str, dict]],
        commit: Callable[[list, dict[str, dict]], None] | None = None,
        *,
        max_batch_sets: int = 32,
        batch_wait_s: float = 0.02,
        max_queue_sets: int = 4096,
        on_batch: Callable[[int, float, str | None], None] = lambda *_a: None,
    ):
        self._score, self._answer, self._commit, self._on_batch = score, answer, commit, on_batch
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
                self.busy = False

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
