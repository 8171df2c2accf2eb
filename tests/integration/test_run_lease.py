"""One writer per run (dr_core/store/lease.py), on a local store and on the real S3 server: a second process asking for
a held run id is refused at once with a line naming the holder, or waits with ``wait``; other run ids never wait; a
holder killed with SIGKILL never blocks the next run (local: the kernel drops its lock; S3: its lease names a dead
process of this host); and ``dr round`` on a held run id exits at once with that line, before any work.

The holder is a real second process (``python -m tests.integration.test_run_lease hold STORE RUN READY``): it takes
the lease, creates READY, and holds it until its stdin closes or it is killed. Every wait is on a file or a process,
never on a timer."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from dr_core.store.artifacts import Store
from dr_core.store.lease import LeaseHeld, run_lease
from tests.support.netutil import wait_until

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.integration


def _holder(store_url: str, run_id: str, tmp_path: Path) -> tuple[subprocess.Popen, Path]:
    ready = tmp_path / f"ready-{run_id}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.integration.test_run_lease", "hold", store_url, run_id, str(ready)],
        cwd=REPO,
        stdin=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    wait_until(ready.exists, timeout=60, interval=0.05, what="the holder to take the lease", proc=proc)
    return proc, ready


def _let_go(proc: subprocess.Popen) -> None:
    proc.stdin.close()
    assert proc.wait(timeout=60) == 0


def test_a_held_run_refuses_names_the_holder_and_other_runs_go_on(store_url, tmp_path):
    store = Store.from_url(store_url)
    proc, _ = _holder(store_url, "r1", tmp_path)
    try:
        with pytest.raises(LeaseHeld) as info:
            with run_lease(store, "r1", "second"):
                pytest.fail("two holders of one run")
        message = str(info.value)
        assert f"pid {proc.pid} on " in message and "(holder)" in message and "--wait" in message, message
        assert "\n" not in message
        with run_lease(store, "r2", "another run"):  # another run id: no wait
            pass
    finally:
        _let_go(proc)
    with run_lease(store, "r1", "after"):  # let go: free
        pass


def test_wait_takes_the_lease_when_the_holder_lets_go(store_url, tmp_path):
    store = Store.from_url(store_url)
    proc, _ = _holder(store_url, "r1", tmp_path)
    told, got = [], threading.Event()

    def waiter() -> None:
        with run_lease(store, "r1", "waiter", wait=True, poll_s=0.05, on_wait=told.append):
            got.set()

    t = threading.Thread(target=waiter)
    try:
        t.start()
        wait_until(lambda: bool(told), timeout=60, interval=0.02, what="the waiter to start waiting")
        assert not got.is_set() and told[0]["pid"] == proc.pid
    finally:
        _let_go(proc)
    t.join(60)
    assert got.is_set()


def test_a_killed_holder_never_blocks_the_next_run(store_url, tmp_path):
    store = Store.from_url(store_url)
    proc, _ = _holder(store_url, "r1", tmp_path)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    start = time.monotonic()
    with run_lease(store, "r1", "next"):
        pass
    assert time.monotonic() - start < 30  # taken at once: not after the S3 lease's 60 s heartbeat limit


def test_dr_round_on_a_held_run_exits_at_once_with_one_line(store_url, tmp_path):
    engines = tmp_path / "engines.json"
    role = {"kind": "openai_http", "base_url": "http://127.0.0.1:9/v1", "model": "default", "verdict_mode": "choice"}
    engines.write_text(json.dumps({r: role for r in ("generator", "verifier", "policy")}))
    proc, _ = _holder(store_url, "busy", tmp_path)
    try:
        out = subprocess.run(
            [sys.executable, "-m", "cli.main", "round", "--store", store_url, "--run-id", "busy"]
            + ["--engines", str(engines), "--json", str(tmp_path / "out.json")],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "400"},
        )
    finally:
        _let_go(proc)
    errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert out.returncode != 0 and len(errors) == 1, out.stderr[-3000:]
    assert f"pid {proc.pid}" in errors[0] and "'busy'" in errors[0], errors
    assert not (tmp_path / "out.json").exists()
    assert not Store.from_url(store_url).parts("samples"), "the refused run wrote rows"


if __name__ == "__main__" and sys.argv[1] == "hold":
    _, _, url, run, ready = sys.argv
    with run_lease(Store.from_url(url), run, "holder"):
        Path(ready).write_text("")
        sys.stdin.read()  # until the test closes our stdin (or kills us)
