"""The result-storage blocks (tasks/result_storage.py): Prefect's task results and cache records written atomically,
locally through the store's atomic writer and remotely as one whole-object put; a torn record is a cache miss.
No Prefect API: the blocks and a ``ResultStore`` are used directly (the saved blocks in a real flow:
tests/integration/test_result_faults.py)."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tasks.result_storage import FAULT_POINT, AtomicLocalFileSystem, AtomicRemoteFileSystem

REPO = Path(__file__).resolve().parents[2]


def _temps(folder: Path) -> list[Path]:
    return sorted(folder.glob(".*.tmp"))


def test_local_write_then_read_round_trip(tmp_path):
    block = AtomicLocalFileSystem(basepath=str(tmp_path / "results"))
    written = block.write_path("key-1", b"first")
    assert written == str(tmp_path / "results" / "key-1")
    assert block.read_path("key-1") == b"first"
    block.write_path("key-1", b"second, longer")  # replaced whole
    assert block.read_path("key-1") == b"second, longer"
    assert sorted(p.name for p in (tmp_path / "results").iterdir()) == ["key-1"]  # no temp file left
    with pytest.raises(ValueError, match="outside of the base path"):
        block.write_path("../escape", b"x")


def test_local_async_write_is_atomic_too(tmp_path):
    import asyncio

    block = AtomicLocalFileSystem(basepath=str(tmp_path))
    asyncio.run(block.awrite_path("k", b"async bytes"))
    assert (tmp_path / "k").read_bytes() == b"async bytes" and _temps(tmp_path) == []


def test_a_failure_mid_write_leaves_the_old_record_or_none(tmp_path, monkeypatch):
    """ENOSPC injected half-way through the temp file (``enospc@result-write``): the old record is unchanged, a new
    key gets no file at all, and the temp file is removed."""
    block = AtomicLocalFileSystem(basepath=str(tmp_path))
    block.write_path("old", b"old record")
    monkeypatch.setenv("DR_FAULT", f"enospc@{FAULT_POINT}")
    with pytest.raises(OSError, match="No space left on device"):
        block.write_path("old", b"a new record that never lands")
    with pytest.raises(OSError, match="No space left on device"):
        block.write_path("new", b"never written")
    assert (tmp_path / "old").read_bytes() == b"old record"
    assert not (tmp_path / "new").exists()
    assert _temps(tmp_path) == []


_KILLED_WRITER = """
import sys
from tasks.result_storage import AtomicLocalFileSystem
AtomicLocalFileSystem(basepath=sys.argv[1]).write_path("old", b"N" * 1000)
"""


def test_sigkill_mid_write_leaves_the_old_record_and_a_temp_file_the_next_write_sweeps(tmp_path):
    block = AtomicLocalFileSystem(basepath=str(tmp_path))
    block.write_path("old", b"O" * 600)
    env = {**os.environ, "DR_FAULT": f"kill@{FAULT_POINT}:old#1", "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", _KILLED_WRITER, str(tmp_path)], env=env, cwd=REPO, timeout=120)
    assert done.returncode == -signal.SIGKILL
    assert (tmp_path / "old").read_bytes() == b"O" * 600  # never torn
    [torn] = _temps(tmp_path)
    assert torn.name.startswith(".old.") and torn.read_bytes() == b"N" * 500  # half of the new bytes
    block.write_path("other", b"x")  # a write into the directory sweeps the dead writer's temp file
    assert _temps(tmp_path) == [] and sorted(p.name for p in tmp_path.iterdir()) == ["old", "other"]


def test_a_torn_record_is_a_cache_miss_not_a_crash(tmp_path):
    """What an older, non-atomic writer could leave: a truncated record under its final name. Prefect's
    ``ResultStore.exists`` (the cache lookup of a task's transaction) says no, so the step is recomputed; its record
    is then rewritten whole."""
    from prefect.results import ResultStore

    block = AtomicLocalFileSystem(basepath=str(tmp_path))
    store = ResultStore(result_storage=block)
    store.write({"uri": "file:///x.parquet", "rows": 3}, key="cache-key")
    assert store.exists("cache-key") and store.read("cache-key").result == {"uri": "file:///x.parquet", "rows": 3}
    full = (tmp_path / "cache-key").read_bytes()
    for torn in (full[: len(full) // 2], b""):
        (tmp_path / "cache-key").write_bytes(torn)
        fresh = ResultStore(result_storage=block)  # no in-memory copy
        assert not fresh.exists("cache-key")
        fresh.write({"uri": "file:///x.parquet", "rows": 3}, key="cache-key")
        assert ResultStore(result_storage=block).read("cache-key").result["rows"] == 3


class _ObjectStore:
    """An fsspec stand-in that records how objects are written: whole puts only (``open`` is for reading)."""

    def __init__(self):
        self.objects: dict[str, bytes] = {}
        self.puts: list[str] = []

    def makedirs(self, path, exist_ok=False):
        pass

    def pipe_file(self, path, value, **kwargs):
        self.puts.append(path)
        self.objects[path] = bytes(value)

    def open(self, path, mode="rb", **kwargs):
        assert mode == "rb", f"opened {path} with mode {mode!r}: a write stream"
        return io.BytesIO(self.objects[path])


def test_remote_write_is_one_whole_object_put_never_a_write_stream():
    """``AtomicRemoteFileSystem.write_path`` is one ``pipe_file`` of the whole record (on S3: a single PutObject, or
    a multipart upload visible only once completed); an fsspec ``open(..., "wb")`` stream is never used."""
    import asyncio

    block = AtomicRemoteFileSystem(basepath="s3://bucket/store/_prefect/results", settings={})
    fake = _ObjectStore()
    block._filesystem = fake
    assert block.write_path("key-1", b"remote record") == "s3://bucket/store/_prefect/results/key-1"
    asyncio.run(block.awrite_path("key-2", b"async record"))
    assert fake.puts == ["s3://bucket/store/_prefect/results/key-1", "s3://bucket/store/_prefect/results/key-2"]
    assert block.read_path("key-1") == b"remote record" and block.read_path("key-2") == b"async record"
