"""The service's memory kept from creeping: glibc's allocator keeps what a batch freed, so ``dr serve`` trims it.

A verification batch allocates about a gigabyte of short-lived activations (the 0.5B verifier, 4096 batched tokens)
and frees it at once. glibc's malloc keeps freed memory in its arenas for reuse, and raises its mmap threshold after
each large free, so more of the next batch comes from the heap; the resident set (RSS) ratchets up to the largest
batch seen plus fragmentation and never comes down, though the live memory does not grow. Measured in a soak
(infra/benchmarks/bench_soak.py, issue 41): RSS 5.1 GB after warm-up rising to 7.0 GB over 20 minutes, and one
``malloc_trim(0)`` at 6.2 GB gave back 1.27 GB (to 4.9 GB, under the warm-up figure).

``Trimmer`` is a daemon thread that calls ``malloc_trim(0)`` every ``interval_s`` (``dr serve
--memory-trim-interval``): freed pages go back to the system, in every arena; the next batch faults the ones it needs
back in. Where the C library has no ``malloc_trim`` (musl, macOS) it does nothing and says so once. ``resident_bytes``
reads this process's RSS from ``/proc/self/statm`` (None where there is none).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
import time
from typing import Callable

Log = Callable[[str], None]


def resident_bytes() -> int | None:
    """This process's resident set in bytes (``/proc/self/statm``), or None where the file is not there."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


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
    """Every ``interval_s``: ``malloc_trim(0)``, then the RSS before and after, the bytes given back and the seconds
    it took are kept (``last``) and counted (``trims``, ``released_bytes``). ``trim_now()`` does one at once."""

    def __init__(self, interval_s: float, log: Log = lambda _m: None, trim: Callable[[], int] | None = None):
        if interval_s <= 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s}")
        self.interval_s, self._log = interval_s, log
        self._trim = trim if trim is not None else find_malloc_trim()
        self.available = self._trim is not None
        self.trims, self.released_bytes, self.seconds = 0, 0, 0.0
        self.last: dict[str, float | int | None] = {}
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

    def trim_now(self) -> dict[str, float | int | None]:
        """One trim; what it did: ``rss_before``, ``rss_after`` (bytes or None), ``released`` (bytes), ``seconds``."""
        if self._trim is None:
            return {}
        with self._lock:
            before, started = resident_bytes(), time.perf_counter()
            self._trim()
            seconds, after = time.perf_counter() - started, resident_bytes()
            released = max(0, before - after) if before is not None and after is not None else 0
            self.trims, self.released_bytes, self.seconds = (
                self.trims + 1,
                self.released_bytes + released,
                self.seconds + seconds,
            )
            self.last = {"rss_before": before, "rss_after": after, "released": released, "seconds": seconds}
            return self.last

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.trim_now()
