"""What the CLI shows of long work (``dr_core.progress``'s sink on rich): live bars and one line per finished step.

On a terminal, each piece of work counted by dr_core (the vLLM engine's rollouts or verdicts, labelled by
``progress.activity``) is a transient bar: label, done/total and unit, rate, ETA. Each finished flow step is a
permanent line::

      r1/train-generator          Completed    83.2 s   peak 5.1 GB

When stdout is not a terminal (CI, a log file, tests) there are no bars: the step lines, and for a piece of work
that takes long at most one plain line every ``plain_every`` seconds (30 by default), e.g.
``  verify: 120/400 verdicts, 3.1 verdicts/s, ETA 1 min 30 s``, so a log file still shows a long step moving.

    with showing_progress(console):
        result = coevolve_flow(params)
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Iterator

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, TextColumn, TimeRemainingColumn
from rich.text import Text

from dr_core import progress

#: Step states and their colour in the step line.
STATE_STYLES = {
    "Completed": "green",
    "Cached": "blue",
    "Failed": "bold red",
    "Crashed": "bold red",
    "TimedOut": "bold red",
    "Cancelled": "yellow",
}


def memory(mb: float | None) -> str:
    """``peak 5.1 GB`` / ``peak 830 MB`` (MB = 2**20 bytes); empty when unknown."""
    if mb is None:
        return ""
    return f"peak {mb / 1024:.1f} GB" if mb >= 1024 else f"peak {mb:.0f} MB"


def duration(seconds: float) -> str:
    """``42 s``, ``3 min 05 s``, ``1 h 02 min``."""
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def step_line(name: str, state: str, seconds: float, peak_rss_mb: float | None = None) -> Text:
    """The permanent line of a finished step (no markup: names are printed verbatim)."""
    line = Text("  ")
    line.append(f"{name:<28}", style="bold")
    line.append(f" {state:<10}", style=STATE_STYLES.get(state, ""))
    line.append(f" {seconds:8.1f} s")
    if peak_rss_mb is not None:
        line.append(f"   {memory(peak_rss_mb)}", style="dim")
    return line


def rate(per_second: float, unit: str) -> str:
    """``3.1 verdicts/s``; below 0.1 a second, per minute (``1.4 steps/min``)."""
    if per_second >= 0.1 or per_second <= 0:
        return f"{per_second:.1f} {unit}/s"
    return f"{per_second * 60:.1f} {unit}/min"


def plain_line(label: str, done: int, total: int | None, unit: str, elapsed: float) -> str:
    """A progress line for logs: ``  verify: 120/400 verdicts, 3.1 verdicts/s, ETA 1 min 30 s``."""
    per_second = done / elapsed if elapsed > 0 else 0.0
    text = f"  {label}: {done}/{'?' if total is None else total} {unit}, {rate(per_second, unit)}"
    if total is not None and per_second > 0 and done < total:
        text += f", ETA {duration((total - done) / per_second)}"
    return text


class _Rate(ProgressColumn):
    """Units per second of a bar (rich's estimate over the last 30 s)."""

    def render(self, task) -> Text:
        speed = task.finished_speed or task.speed
        if not speed:
            return Text("")
        return Text(rate(speed, task.fields.get("unit", "")), style="cyan")


class _Plain:
    """One piece of work in a log: counted, printed at most every ``every`` seconds."""

    def __init__(self, label: str, total: int | None, unit: str, now: float):
        self.label, self.total, self.unit = label, total, unit
        self.done, self.started, self.printed = 0, now, now


class ProgressSink:
    """``dr_core.progress`` sink on a rich console: live bars on a terminal (``live`` None: decided by the console),
    plain lines in a log; one line per finished step either way. Thread-safe (the engine may count from a worker
    thread)."""

    def __init__(self, console: Console, *, live: bool | None = None, plain_every: float = 30.0, clock=time.monotonic):
        self.console = console
        self.live = console.is_terminal if live is None else live
        self.plain_every, self.clock = plain_every, clock
        self._lock = threading.RLock()
        self._tasks: dict[int, object] = {}
        self._progress: Progress | None = None

    # -- dr_core.progress.Sink ---------------------------------------------------------------------------------
    def start(self, key: int, label: str, total: int | None, unit: str) -> None:
        with self._lock:
            if self.live:
                bars = self._bars()
                self._tasks[key] = bars.add_task(label, total=total, unit=unit)
            else:
                self._tasks[key] = _Plain(label, total, unit, self.clock())

    def advance(self, key: int, n: int) -> None:
        with self._lock:
            task = self._tasks.get(key)
            if task is None:
                return
            if self.live:
                self._progress.advance(task, n)
                return
            task.done += n
            now = self.clock()
            finished = task.total is not None and task.done >= task.total  # its step line follows
            if now - task.printed >= self.plain_every and not finished:
                task.printed = now
                self.console.print(
                    plain_line(task.label, task.done, task.total, task.unit, now - task.started),
                    soft_wrap=True,
                    highlight=False,
                )

    def stop(self, key: int) -> None:
        with self._lock:
            task = self._tasks.pop(key, None)
            if task is not None and self.live and self._progress is not None:
                self._progress.remove_task(task)
                if not self._tasks:  # nothing counted now: take the (transient) bars off the screen
                    self.close()
                else:
                    self._progress.refresh()

    def step(self, name: str, state: str, seconds: float, peak_rss_mb: float | None = None) -> None:
        with self._lock:
            self.console.print(step_line(name, state, seconds, peak_rss_mb), soft_wrap=True, highlight=False)

    # -- the live display -------------------------------------------------------------------------------------
    def _bars(self) -> Progress:
        if self._progress is None:
            self._progress = Progress(
                TextColumn("  {task.description}", markup=False),
                BarColumn(bar_width=30),
                MofNCompleteColumn(),
                TextColumn("{task.fields[unit]}", markup=False),
                _Rate(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                console=self.console,
                transient=True,  # print() and logging to sys.stdout/stderr go above the bars (rich's redirect)
            )
            self._progress.start()
        return self._progress

    def close(self) -> None:
        """Remove the live display (transient: the bars disappear, the step lines stay)."""
        with self._lock:
            self._tasks.clear()
            if self._progress is not None:
                self._progress.stop()
                self._progress = None


@contextlib.contextmanager
def showing_progress(console: Console, **options) -> Iterator[ProgressSink]:
    """Install a ``ProgressSink`` for the block (a flow call), and remove it afterwards, also on error."""
    sink = ProgressSink(console, **options)
    previous = progress.set_sink(sink)
    try:
        yield sink
    finally:
        progress.set_sink(previous)
        sink.close()
