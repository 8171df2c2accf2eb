"""This process's resident memory: the current value and the peak over a block of work (``PeakRSS``), stdlib only.

The peak is sampled, not exact: a daemon thread reads ``/proc/self/status`` (VmRSS) every ``interval`` seconds (0.2
by default) and once more at ``start`` and ``stop``, so a spike shorter than the interval can be missed. Where there
is no ``/proc`` (macOS) the current value falls back to ``resource.getrusage``'s ru_maxrss, which is the process's
peak since it started (so a step's figure there is "the highest so far", never lower than an earlier step's).

    python -c "from dr_core.resources import PeakRSS; p = PeakRSS().start(); b = bytearray(200 << 20); \\
               print(round(p.start_mb), round(p.stop()))"
"""

from __future__ import annotations

import sys
import threading

_STATUS = "/proc/self/status"


def rss_mb() -> float:
    """Resident memory of this process now, MB (1 MB = 2**20 bytes); without /proc, the peak so far."""
    try:
        with open(_STATUS, "rb") as fh:
            for line in fh:
                if line.startswith(b"VmRSS:"):
                    return int(line.split()[1]) / 1024.0  # kB
    except (OSError, ValueError, IndexError):
        pass
    import resource

    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return maxrss / (1 << 20) if sys.platform == "darwin" else maxrss / 1024.0  # bytes on macOS, kB elsewhere


class PeakRSS:
    """The peak resident memory of this process between ``start()`` and ``stop()`` (or over a ``with`` block).

    ``peak_mb`` can be read while running (the peak so far) and after ``stop()`` (final). Not reentrant: one
    object measures one interval; nest two objects to measure a block inside another.
    """

    def __init__(self, interval: float = 0.2):
        self.interval = interval
        self.start_mb: float | None = None
        self._peak = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample(self) -> None:
        value = rss_mb()
        if value > self._peak:
            self._peak = value

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def start(self) -> "PeakRSS":
        if self._thread is not None:
            raise RuntimeError("PeakRSS already started")
        self.start_mb = rss_mb()
        self._peak = self.start_mb
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="dr-peak-rss", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> float:
        """Stop sampling; returns the peak, MB."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
            self._sample()
        return self._peak

    @property
    def peak_mb(self) -> float:
        """The highest resident memory seen so far, MB."""
        if self._thread is not None:
            self._sample()
        return self._peak

    def __enter__(self) -> "PeakRSS":
        return self.start()

    def __exit__(self, *exc) -> bool:
        self.stop()
        return False


def return_freed_memory() -> bool:
    """Hand memory the process has freed back to the OS (glibc's ``malloc_trim``; a no-op elsewhere): after a
    training step, the trainer's freed tensors would otherwise stay resident for the rest of the run. True when it
    ran."""
    import ctypes
    import ctypes.util
    import gc

    gc.collect()
    name = ctypes.util.find_library("c")
    if not name or not sys.platform.startswith("linux"):
        return False
    try:
        ctypes.CDLL(name).malloc_trim(0)
    except (OSError, AttributeError):
        return False
    return True
