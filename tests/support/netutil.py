"""What the tests share for servers and subprocesses: free loopback ports and one "poll until ready" loop.

port = free_port()                         # nothing listens there (yet)
ports = free_ports(8)                      # 8 distinct ones, for a server with many sockets
wait_until(marker.exists, timeout=120, what="the run to pause in verify", proc=proc)
wait_for_http(f"{api}/health", timeout=180, what="prefect server", proc=proc, log=log_path)
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def free_ports(n: int) -> list[int]:
    """n distinct free loopback ports: all sockets are held open together so the kernel cannot repeat one."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def free_port() -> int:
    """A loopback port nothing listens on (connecting to it is refused until something binds it)."""
    return free_ports(1)[0]


def _tail(log: Path | Callable[[], str] | None, chars: int = 3000) -> str:
    if log is None:
        return ""
    try:
        text = log() if callable(log) else Path(log).read_text(errors="replace")
    except OSError:
        return ""
    return f"\n--- log tail ---\n{text[-chars:]}" if text else ""


def wait_until(
    ready: Callable[[], T],
    *,
    timeout: float,
    what: str,
    proc: subprocess.Popen | None = None,
    interval: float = 0.2,
    retry_on: tuple[type[BaseException], ...] = (),
    log: Path | Callable[[], str] | None = None,
) -> T:
    """Call ``ready()`` every ``interval`` s until it returns something truthy, and return that.

    ``retry_on``: exceptions of ``ready`` that mean "not yet" (the last one is named if time runs out).
    ``proc``: the process being waited for; if it exits first, RuntimeError. After ``timeout`` s, TimeoutError.
    Both messages name ``what`` and end with the tail of ``log`` (a file, or a function giving the text)."""
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while True:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"waiting for {what}: the process exited with {proc.returncode}{_tail(log)}")
        try:
            value = ready()
        except retry_on as exc:
            value, last = None, exc
        if value:
            return value
        if time.monotonic() >= deadline:
            cause = f" (last error: {last!r})" if last is not None else ""
            raise TimeoutError(f"waiting for {what}: not ready after {timeout:.0f} s{cause}{_tail(log)}")
        time.sleep(interval)


def wait_for_http(
    url: str,
    *,
    timeout: float,
    what: str,
    proc: subprocess.Popen | None = None,
    interval: float = 0.5,
    log: Path | Callable[[], str] | None = None,
) -> None:
    """``wait_until`` a GET of ``url`` answers 200 (connection errors and other statuses mean "not yet")."""
    import httpx

    wait_until(
        lambda: httpx.get(url, timeout=2).status_code == 200,
        timeout=timeout,
        what=what,
        proc=proc,
        interval=interval,
        retry_on=(httpx.HTTPError,),
        log=log,
    )


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the process group of ``proc`` (started with ``start_new_session=True``), if anything is left in it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
