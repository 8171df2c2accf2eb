"""Store and output failures a user meets: an S3 endpoint that refuses, hangs or rejects the key, a typo'd bucket,
an output path that cannot be written, a write killed by SIGTERM, a dead writer's temp file, a shared umask.

Each is one line on stderr and exit 2 within the stated budget (docs/concepts/guarantees.md), and changes nothing."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from dr_core.paths import bundled
from dr_core.store import atomic
from dr_core.store.artifacts import Store
from tests.support.netutil import free_port, wait_until

runner = CliRunner()
ANCHORS = bundled("anchors_alpacaeval.jsonl")
ROOT = Path(__file__).resolve().parents[2]


def dr(*args):
    return runner.invoke(app, [str(a) for a in args])


def _one_error_line(res) -> str:
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert res.exit_code == 2, res.output
    assert len(lines) == 1 and lines[0].startswith("error: "), res.output
    assert "Traceback" not in res.output
    return lines[0]


@pytest.fixture
def s3_env(monkeypatch):
    for var in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "DR_STORE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "PLANTED-S3-SECRET")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    return monkeypatch


class _SilentServer:
    """Accepts TCP connections on 127.0.0.1 and never answers (bounded: it stops with the test)."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.conns: list[socket.socket] = []
        self.stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        self.sock.settimeout(0.2)
        while not self.stop.is_set():
            try:
                self.conns.append(self.sock.accept()[0])
            except OSError:
                continue

    def close(self):
        self.stop.set()
        for c in self.conns:
            c.close()
        self.sock.close()


def test_refused_endpoint_is_one_line_naming_it(s3_env):
    endpoint = f"http://127.0.0.1:{free_port()}"
    s3_env.setenv("AWS_ENDPOINT_URL", endpoint)
    t0 = time.monotonic()
    for args in (("sql", "SELECT 1"), ("ingest", "anchors", ANCHORS), ("report", "--run-id", "r", "--out", "rep")):
        line = _one_error_line(dr(*args, "--store", "s3://bucket/prefix"))
        assert endpoint in line and "Could not connect" in line and "PLANTED-S3-SECRET" not in line, line
        assert "does not exist" not in line  # a dead endpoint is not reported as a missing bucket
    assert time.monotonic() - t0 < 30  # no retry storm: a refused connection is not retried


def test_endpoint_that_never_answers_is_cut_off_by_the_read_timeout(s3_env):
    server = _SilentServer()
    try:
        endpoint = f"http://127.0.0.1:{server.port}"
        s3_env.setenv("AWS_ENDPOINT_URL", endpoint)
        s3_env.setenv("DR_S3_READ_TIMEOUT", "1")
        s3_env.setenv("DR_S3_ATTEMPTS", "2")
        t0 = time.monotonic()
        line = _one_error_line(dr("sql", "SELECT 1", "--store", "s3://bucket/prefix"))
        took = time.monotonic() - t0
    finally:
        server.close()
    assert endpoint in line and "timeout" in line.lower(), line
    assert 1.5 <= took < 15, took  # two attempts of 1 s each, then the error (budget: attempts x read timeout)
    assert len(server.conns) >= 1


def test_bad_timeout_setting_is_named(s3_env):
    s3_env.setenv("DR_S3_READ_TIMEOUT", "soon")
    line = _one_error_line(dr("sql", "SELECT 1", "--store", "s3://bucket/prefix"))
    assert "DR_S3_READ_TIMEOUT" in line


@pytest.fixture
def real_s3(s3_server, s3_env):
    for k, v in s3_server.env.items():
        s3_env.setenv(k, v)
    return s3_server


# -- output paths: checked before any model work ------------------------------------------------------------------
@pytest.fixture
def no_model_work(monkeypatch):
    import dr_core.evals.evaluate
    import dr_core.evals.policy_eval

    def started(*a, **k):
        raise AssertionError("model work started before the output path was checked")

    monkeypatch.setattr(dr_core.evals.evaluate, "run_score", started)
    monkeypatch.setattr(dr_core.evals.evaluate, "run_eval_evaluator", started)
    monkeypatch.setattr(dr_core.evals.policy_eval, "run_eval_policy", started)


def _sets(tmp_path) -> Path:
    p = tmp_path / "sets.jsonl"
    p.write_text('{"id": "a", "prompt": "p", "responses": ["x", "y"]}\n')
    return p


def _pairs(tmp_path) -> Path:
    p = tmp_path / "pairs.jsonl"
    p.write_text('{"id": "a", "prompt": "p", "chosen": "x", "rejected": "y"}\n')
    return p


def test_output_paths_are_checked_before_any_work(tmp_path, no_model_work):
    a_dir, a_file = tmp_path / "out-dir", tmp_path / "a-file"
    a_dir.mkdir()
    a_file.write_text("keep")
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"id": "a", "prompt": "p", "baseline": "b"}\n')
    cases = [
        (("score", _sets(tmp_path), "--output", a_dir), "is a directory"),
        (("score", _sets(tmp_path), "--output", a_file / "x.jsonl"), "is a file"),
        (("eval-evaluator", _pairs(tmp_path), "--format", "pairwise", "--output", a_dir), "is a directory"),
        (("eval-evaluator", _pairs(tmp_path), "--format", "pairwise", "--output", a_file / "m.json"), "is a file"),
        (
            (
                "eval-policy",
                "--policy",
                "default",
                "--data",
                prompts,
                "--judge",
                "default",
                "--output",
                tmp_path / "m.json",
                "--records",
                a_file / "r.jsonl",
            ),
            "is a file",
        ),
        (
            (
                "eval-policy",
                "--policy",
                "default",
                "--data",
                prompts,
                "--judge",
                "default",
                "--output",
                a_dir,
                "--records",
                tmp_path / "r.jsonl",
            ),
            "is a directory",
        ),
        (("report", "--store", tmp_path, "--run-id", "r", "--out", a_file), "is a file"),
    ]
    before = sorted(p.name for p in tmp_path.iterdir())
    for args, message in cases:
        line = _one_error_line(dr(*args))
        assert message in line, (args, line)
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no metrics file without its records
    assert a_file.read_text() == "keep" and not list(a_dir.iterdir())


def test_outputs_of_one_command_are_written_together_or_not_at_all(tmp_path, monkeypatch):
    real = atomic._write_temp
    calls = []

    def second_fails(path, payload, fault=None):
        calls.append(path)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        return real(path, payload, fault)

    monkeypatch.setattr(atomic, "_write_temp", second_fails)
    with pytest.raises(OSError):
        atomic.write_all_atomic([(tmp_path / "metrics.json", "{}"), (tmp_path / "records.jsonl", "{}\n")])
    assert list(tmp_path.iterdir()) == []  # neither file, and no temp file


# -- temp files and permissions -----------------------------------------------------------------------------------
def test_dead_writers_temp_files_are_swept_and_live_ones_kept(tmp_path):
    import fcntl

    store = Store.from_url(str(tmp_path / "st"))
    uri = store.write(
        "anchors", [dict(prompt_id="p", prompt="x", rank=1, response="r", source="s", score=None)], dataset="d"
    )
    folder = Path(store._path(uri)).parent
    dead = folder / ".data.parquet.dead1234.tmp"
    dead.write_bytes(b"half a file")
    live = folder / ".data.parquet.live5678.tmp"
    live.write_bytes(b"in progress")
    fd = os.open(live, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)  # a writer still at work holds its lock
    try:
        store.write(
            "anchors", [dict(prompt_id="q", prompt="x", rank=1, response="r", source="s", score=None)], dataset="d"
        )
        assert not dead.exists() and live.exists()
    finally:
        os.close(fd)
    assert sorted(p.name for p in folder.iterdir()) == [".data.parquet.live5678.tmp", "data.parquet"]


def test_a_temp_file_just_created_is_not_swept_by_another_thread_before_it_is_locked(tmp_path, monkeypatch):
    """The gap between ``mkstemp`` and ``flock``: another thread of the process sweeping the same directory then
    (the reward service commits from several workers) must leave the fresh temp file alone."""
    import fcntl

    from dr_core.store import atomic

    real_flock, swept = fcntl.flock, []

    def flock_after_a_sweep(fd, op):
        if op == fcntl.LOCK_EX:  # the writer's blocking lock: another thread sweeps first
            swept.extend(atomic.sweep_stale_temps(tmp_path))
        return real_flock(fd, op)

    monkeypatch.setattr(atomic.fcntl, "flock", flock_after_a_sweep)
    atomic.write_atomic(tmp_path / "out.txt", b"whole")
    assert swept == [] and (tmp_path / "out.txt").read_bytes() == b"whole"
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")] and not atomic._FRESH


def test_many_threads_writing_into_one_directory_all_complete_without_remaking_temp_files(tmp_path, monkeypatch):
    """Each write sweeps the directory first: 16 threads x 1000 writes into one directory, every file whole, no temp
    file left, and no writer's fresh temp file swept by another thread (without ``_FRESH`` about 5 % were, each
    costing the writer another temp file, and five in a row failing the write)."""
    import concurrent.futures

    from dr_core.store import atomic

    real_is_at, remade = atomic._is_at, []
    monkeypatch.setattr(atomic, "_is_at", lambda fd, path: real_is_at(fd, path) or remade.append(path) or False)

    def write(i: int) -> None:
        atomic.write_atomic(tmp_path / f"out{i}.txt", f"payload {i}".encode() * 50)

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        list(pool.map(write, range(1000)))
    assert remade == []
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"out{i}.txt" for i in range(1000))
    assert all((tmp_path / f"out{i}.txt").read_bytes() == f"payload {i}".encode() * 50 for i in range(1000))


def test_a_temp_file_another_process_sweeps_before_it_is_locked_is_made_again(tmp_path, monkeypatch):
    """The same gap across processes (two ranks of one launch writing into one directory, as CI's ZeRO-2 run did):
    another process's sweep sees the fresh temp file unlocked and removes it; the writer finds it gone once locked
    and makes another, so the write completes instead of failing its rename."""
    import fcntl

    from dr_core.store import atomic

    real_flock, swept = fcntl.flock, []
    sweep = f"from dr_core.store import atomic; print(len(atomic.sweep_stale_temps({str(tmp_path)!r})))"

    def flock_after_another_process_sweeps(fd, op):
        if op == fcntl.LOCK_EX and not swept:  # the writer's first blocking lock: another process sweeps first
            done = subprocess.run([sys.executable, "-c", sweep], capture_output=True, text=True, timeout=120)
            swept.append(done.stdout.strip() or done.stderr)
        return real_flock(fd, op)

    monkeypatch.setattr(atomic.fcntl, "flock", flock_after_another_process_sweeps)
    atomic.write_atomic(tmp_path / "out.txt", b"whole")
    assert swept == ["1"]  # the other process did remove the first temp file
    assert (tmp_path / "out.txt").read_bytes() == b"whole"
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")] and not atomic._FRESH


def test_sigterm_during_a_store_write_leaves_no_temp_file(tmp_path):
    """`dr` turns SIGTERM into SystemExit, so the write's cleanup runs; the fault hook pauses it half-way."""
    code = (
        "import sys; from cli.app import install_signal_handlers; install_signal_handlers()\n"
        "from dr_core.store.artifacts import Store\n"
        "rows = [dict(prompt_id=f'p{i}', prompt='x' * 200, rank=1, response='r' * 500, source='s', score=None)"
        " for i in range(5000)]\n"
        f"Store.from_url({str(tmp_path / 'st')!r}).write('anchors', rows, dataset='d')\n"
    )
    env = {
        **os.environ,
        "DR_FAULT": "pause@store-write",
        "DR_FAULT_DIR": str(tmp_path / "faults"),
        "DR_FAULT_PAUSE_S": "120",
    }
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=env)
    marker = tmp_path / "faults" / "store-write.paused"
    wait_until(marker.exists, timeout=120, what="the store write to pause", proc=proc, interval=0.05)
    folder = tmp_path / "st" / "anchors" / "dataset=d"
    assert [p.name for p in folder.iterdir() if p.name.endswith(".tmp")]  # half-written temp file exists
    os.kill(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=60) == 128 + signal.SIGTERM
    assert list(folder.iterdir()) == []  # no temp file, no torn part


@pytest.mark.parametrize("umask", [0o022, 0o027])
def test_part_files_and_outputs_honour_the_umask(tmp_path, umask):
    old = os.umask(umask)
    try:
        store = Store.from_url(str(tmp_path / "st"))
        uri = store.write(
            "anchors", [dict(prompt_id="p", prompt="x", rank=1, response="r", source="s", score=None)], dataset="d"
        )
        atomic.write_atomic(tmp_path / "metrics.json", "{}")
    finally:
        os.umask(old)
    for path in (store._path(uri), tmp_path / "metrics.json"):
        assert os.stat(path).st_mode & 0o777 == 0o666 & ~umask, oct(os.stat(path).st_mode)
