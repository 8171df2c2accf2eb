"""The checkpoint races of tests/unit/test_checkpoint_concurrency.py against a real S3 server (SeaweedFS): two
processes downloading the same checkpoint into one cache at once, and a save of the checkpoint again racing a
process that keeps downloading it. Real processes, started together on a barrier.

    .venv/bin/python -m pytest tests/integration/test_checkpoint_concurrency_s3.py -q
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from dr_core.constants import COMPLETE_MARKER
from dr_core.store import checkpoints
from tests.support.fixtures_s3 import STORE_ENV, TEST_BUCKET
from tests.unit.test_checkpoint_concurrency import (
    ROLE,
    ROUND,
    RUN,
    TIMEOUT,
    _ctx,
    _digest,
    _join,
    _leftovers,
    _materialiser,
    _saver,
    _store,
    _versions,
    _watcher,
    _write_src,
)


@pytest.fixture
def s3_url(s3_server, monkeypatch) -> str:
    """A fresh prefix on the session's S3 server, its AWS_* variables set for this process and its children."""
    for var in STORE_ENV:
        monkeypatch.delenv(var, raising=False)
    for k, v in s3_server.env.items():
        monkeypatch.setenv(k, v)
    return f"s3://{TEST_BUCKET}/{uuid.uuid4().hex[:12]}"


def test_two_processes_download_the_same_checkpoint_from_s3_at_once(tmp_path, s3_url):
    src = _write_src(tmp_path / "src", 5)
    s = _store("s3", s3_url)
    uri = checkpoints.save(s, src, RUN, ROUND, ROLE)
    ctx, rounds = _ctx(), 3
    barrier, out = ctx.Barrier(2), ctx.Queue()
    cache = str(tmp_path / "cache")
    procs = [
        ctx.Process(target=_materialiser, args=("s3", s3_url, uri, cache, barrier, rounds, out), name=f"dl-{i}")
        for i in range(2)
    ]
    for p in procs:
        p.start()
    got = [out.get(timeout=TIMEOUT * 2) for _ in range(2 * rounds)]
    _join(procs)
    marker = s.fs.cat_file(f"{s._path(uri)}/{COMPLETE_MARKER}")
    for i in range(rounds):
        (a, b) = [g for g in got if g[0] == i]
        assert a[1] == b[1] and a[2] == b[2], "the two processes ended with different directories"
        assert a[3] == b[3] == _digest(src) and a[4] == b[4] == marker and a[5] == b[5] == {"version 5"}
    assert _leftovers(tmp_path) == []


def test_a_save_to_s3_racing_a_download_never_gives_a_partial_copy(tmp_path, s3_url):
    s = _store("s3", s3_url)
    uri = checkpoints.save(s, _write_src(tmp_path / "first", 0), RUN, ROUND, ROLE)
    ctx = _ctx()
    barrier, done, out = ctx.Barrier(2), ctx.Event(), ctx.Queue()
    cache = str(tmp_path / "cache")
    saver = ctx.Process(
        target=_saver, args=("s3", s3_url, str(tmp_path / "src"), range(1, 6), cache, True, barrier, done)
    )
    watcher = ctx.Process(target=_watcher, args=("s3", s3_url, uri, cache, barrier, done, out))
    saver.start()
    watcher.start()
    whole, bad, n_bad = out.get(timeout=TIMEOUT * 2)
    _join([saver, watcher])
    assert n_bad == 0, bad
    final = checkpoints.materialise(s, uri)
    assert _versions(final) == {"version 5"} and Path(final, COMPLETE_MARKER).is_file()
    assert _leftovers(tmp_path) == []
