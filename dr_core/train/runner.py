"""Running a launched GRPO update's command (``dr_core.train.multi``): ``run_launch`` starts it in its own process
group from the repository root, with a wall-clock limit, keeps its whole output in a log and its last lines for the
error, and stops the whole group (SIGTERM, then SIGKILL) when it times out or the caller is interrupted.
``ProgressMirror`` turns rank 0's ``DR-PROGRESS {json}`` lines (``dr_core.train.launch``) back into this process's
``dr_core.progress`` (the CLI's bar).

    .venv/bin/python -m pytest -q tests/unit/test_train_launch.py -k "launch_raises or timeout or progress"
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import Callable, Mapping, Sequence

from dr_core import progress
from dr_core.errors import DRError
from dr_core.train.launch import PROGRESS_PREFIX

#: Lines of the launch's output kept for the error message (all of them go to ``OUT/launch/launch.log``).
TAIL_LINES = 40
#: Seconds between SIGTERM and SIGKILL when a launch is stopped.
STOP_GRACE_S = 30.0


class LaunchError(DRError, RuntimeError):
    """A launched update failed (a rank crashed, ran out of memory, a machine was unreachable). Not bad input: the
    task retries it, and the retry resumes from the last checkpoint."""


class ProgressMirror:
    """Turns rank 0's ``DR-PROGRESS {json}`` lines into this process's ``dr_core.progress`` work."""

    def __init__(self):
        self.works: dict[int, progress.Work] = {}

    def __call__(self, line: str) -> bool:
        """Handle one output line; True when it was a progress line (consumed)."""
        if not line.startswith(PROGRESS_PREFIX):
            return False
        try:
            e = json.loads(line[len(PROGRESS_PREFIX) :])
            kind, key = e["event"], int(e["key"])
        except (ValueError, KeyError, TypeError):
            return False  # not ours after all: keep it in the log
        if kind == "start":
            self.works[key] = progress.Work(str(e.get("label", "")), e.get("total"), str(e.get("unit", "items")))
        elif kind == "advance" and key in self.works:
            self.works[key].advance(int(e.get("n", 1)))
        elif kind == "stop" and key in self.works:
            self.works.pop(key).close()
        return True

    def close(self) -> None:
        while self.works:
            self.works.popitem()[1].close()


def _stop(proc: subprocess.Popen, grace_s: float) -> None:
    """SIGTERM the launch's process group (accelerate, torchrun or DeepSpeed's runner, and the ranks; DeepSpeed's
    runner stops its remote ranks on SIGTERM) unless it has exited, then SIGKILL what is left of the group after
    ``grace_s``. The group is the one ``run_launch`` started (``start_new_session``): nothing else is touched."""

    def signal_group(sig: int) -> None:
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass  # the group is gone

    if proc.poll() is None:
        signal_group(signal.SIGTERM)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
    signal_group(signal.SIGKILL)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def run_launch(
    cmd: Sequence[str],
    env: Mapping[str, str],
    cwd: str | Path,
    timeout_s: float,
    log_path: str | Path,
    on_line: Callable[[str], bool] | None = None,
    what: str = "the launch",
    grace_s: float = STOP_GRACE_S,
) -> float:
    """Run ``cmd`` in its own process group, stdout and stderr into ``log_path``; ``on_line`` sees every line first
    and returns True for one it consumed (progress); the others' last ``TAIL_LINES`` go into the error. Returns
    the seconds it took. Raises ``LaunchError`` on a non-zero exit and ``TimeoutError`` past ``timeout_s`` (its
    processes are stopped first)."""
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    start = time.monotonic()
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    echo = progress.verbose()
    with log_path.open("w", encoding="utf-8") as log:
        proc = _start(cmd, env, cwd)
        reader = threading.Thread(
            target=_pump, args=(proc, log, on_line, tail, echo), name="launch-output", daemon=True
        )
        reader.start()
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _stop(proc, grace_s)
            reader.join(timeout=10)
            raise TimeoutError(
                f"{what} ran past launch.timeout_s = {timeout_s:g} s and was stopped; its last "
                f"lines (all of them: {log_path}):\n" + "\n".join(tail)
            ) from None
        except BaseException:  # interrupted or cancelled: the ranks must not outlive the step
            _stop(proc, grace_s)
            raise
        reader.join(timeout=30)  # a rank that still holds the pipe open must not hang the step
        if rc != 0:
            _stop(proc, 0.0)  # what the launcher left of its group
    seconds = time.monotonic() - start
    if rc != 0:
        raise LaunchError(
            f"{what} failed (exit {rc}) after {seconds:.0f} s; its last lines (all of them: "
            f"{log_path}):\n" + "\n".join(tail)
        )
    return seconds


def _start(cmd: Sequence[str], env: Mapping[str, str], cwd: str | Path) -> subprocess.Popen:
    """``cmd`` started in a new session (its own process group), its stdout and stderr one text pipe."""
    return subprocess.Popen(
        list(cmd),
        cwd=str(cwd),
        env=dict(env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        bufsize=1,
        start_new_session=True,
    )


def _pump(proc: subprocess.Popen, log, on_line: Callable[[str], bool] | None, tail: deque[str], echo: bool) -> None:
    """Copy the launch's output into ``log``; a line ``on_line`` does not consume goes to ``tail`` (and, when
    ``echo``, to stderr)."""
    for line in proc.stdout:
        log.write(line)
        line = line.rstrip("\n")
        if on_line is not None and on_line(line):
            continue
        tail.append(line)
        if echo:
            print(line, file=sys.stderr, flush=True)
