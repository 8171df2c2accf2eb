"""The service's memory kept from creeping: glibc's allocator keeps what a batch freed, so ``dr serve`` trims it.

A verification batch allocates and frees short-lived activations; glibc's malloc keeps freed memory in its arenas
for reuse, so the resident set (RSS) stays near the largest batch seen. Measured in a soak
(infra/benchmarks/bench_soak.py, 4 clients, issue 41): 4 minutes in, the main arena held 695 MB for 170 MB in use,
and one ``malloc_trim(0)`` at 6.2 GB gave back 1.27 GB (to 4.9 GB, under the end of warm-up). (The other cause of
that soak's growth, oneDNN's per-shape cache, is bounded in ``dr_core.engines.vllm_engine``.)

``Trimmer`` is a daemon thread that calls ``malloc_trim(0)`` every ``interval_s`` (``dr serve
--memory-trim-interval``): freed pages go back to the system, in every arena; the next batch faults the ones it needs
back in. Where the C library has no ``malloc_trim`` (musl, macOS) it does nothing and says so once. The RSS is
``dr_core.resources.rss_mb``'s.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import threading
import time
from typing import Callable

from dr_core.resources import rss_mb

Log = Callable[[str], None]


def resident_bytes() -> int:
    """This process's resident set now, bytes (``dr_core.resources.rss_mb``)."""
    return int(rss_mb() * 2**20)


def find_malloc_trim() -> Callable[[], int] | None:
    """glibc's ``malloc_trim(0)`` as a function, or None where the C library has none (feature-detected)."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else ctypes.CDLL(None)
        fn = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    fn.argtypes, fn.restype = [ctypes.c_size_t], ctypes.c_int
    return lambda: fn(0)


class Trimmer:
    """Every ``interval_s``: ``malloc_trim(0)``; the RSS before and after, the bytes given back and the seconds it
    took are kept (``last``), trims and bytes counted (``trims``, ``released_bytes``). ``trim_now()`` does one now."""

    def __init__(self, interval_s: float, log: Log = lambda _m: None, trim: Callable[[], int] | None = None):
        if interval_s <= 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s}")
        self.interval_s, self._log = interval_s, log
        self._trim = trim if trim is not None else find_malloc_trim()
        self.available = self._trim is not None
        self.trims, self.released_bytes = 0, 0
        self.last: dict[str, float | int] = {}
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="dr-memory-trim", daemon=True)

    def start(self) -> "Trimmer":
        if not self.available:
            self._log("note: this C library has no malloc_trim; --memory-trim-interval does nothing here")
        else:
            self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def trim_now(self) -> dict[str, float | int]:
        """One trim; what it did: ``rss_before``, ``rss_after``, ``released`` (bytes), ``seconds``."""
        if self._trim is None:
            return {}
        with self._lock:
            before, started = resident_bytes(), time.perf_counter()
            self._trim()
            seconds, after = time.perf_counter() - started, resident_bytes()
            released = max(0, before - after)
            self.trims, self.released_bytes = self.trims + 1, self.released_bytes + released
            self.last = {"rss_before": before, "rss_after": after, "released": released, "seconds": seconds}
            return self.last

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.trim_now()
