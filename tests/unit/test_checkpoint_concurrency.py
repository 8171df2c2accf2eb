"""Checkpoints saved and materialised by several processes at once (dr_core/store/checkpoints.py,
dr_core/store/atomic.py::publish_dir): real processes (``multiprocessing`` spawn), started together on a barrier, never
synchronised by sleeps.

- two processes materialising the same checkpoint from a remote store at once both end with the same complete
  directory, and the first complete copy is the one kept (the second drops its own);
- two processes saving the same checkpoint at once leave one complete directory;
- a save racing a reader never shows the reader a partial directory under the checkpoint's name (a local store:
  the directory itself; a remote store: the downloaded copy), with and without ``renameat2(RENAME_EXCHANGE)``;
- a staging directory left by a killed process is never taken for a checkpoint and is swept by the next stage,
  while a live one is left alone.

The remote store here is the local filesystem behind ``protocol="fake"`` (anything but ``file`` takes the download
path); tests/integration/test_checkpoint_concurrency_s3.py runs the materialise race against SeaweedFS.

    .venv/bin/python -m pytest tests/unit/test_checkpoint_concurrency.py -q
"""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import signal
from pathlib import Path

import pytest

from dr_core.constants import COMPLETE_MARKER
from dr_core.store import atomic, checkpoints
from dr_core.store.artifacts import Store

FILES = ("config.json", "model.safetensors", "tokenizer.json", "sub/extra.txt")
#: Big enough that two downloads or copies overlap in time, small enough to stay fast.
WEIGHT_BYTES = 2 << 20
RUN, ROUND, ROLE = "race", 1, "policy"
TIMEOUT = 60


def _ctx():
    return multiprocessing.get_context("spawn")


def _write_src(src: Path, version: int) -> Path:
    """A checkpoint directory whose every file names ``version`` (a mix of two versions is detectable)."""
    for name in FILES:
        p = src / name
        p.parent.mkdir(parents=True, exist_ok=True)
        body = f"version {version}\n{name}\n".encode()
        p.write_bytes(body + (b"w" * WEIGHT_BYTES if name.endswith(".safetensors") else b""))
    return src


def _store(kind: str, root: str | Path) -> Store:
    """``local``: a store directory; ``s3``: an S3 URL (the AWS_* variables in the environment); ``fake``: the local
    filesystem behind the download path."""
    if kind in ("local", "s3"):
        return Store.from_url(str(root))
    import fsspec

    return Store(f"fake://{root}", fsspec.filesystem("file", auto_mkdir=True), str(root), "fake")


def _digest(d: Path) -> dict[str, str]:
    return {
        p.relative_to(d).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(d.rglob("*"))
        if p.is_file() and p.name != COMPLETE_MARKER
    }


def _versions(d: Path) -> set[str]:
    return {(d / name).read_bytes().split(b"\n", 1)[0].decode() for name in FILES}


def _leftovers(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if checkpoints.is_staging(p.name))


# ------------------------------------------------------------------------------------------- the child processes


def _child_setup(cache: str, exchange: bool) -> None:
    os.environ["DR_CACHE_DIR"] = cache
    if not exchange:  # a kernel or filesystem without RENAME_EXCHANGE: the rename-aside path
        atomic._exchange_dirs = lambda a, b: False


def _materialiser(kind, root, uri, cache, barrier, rounds, out):
    """Materialise ``uri`` ``rounds`` times, each time together with the other process (barrier), the cache emptied
    between rounds by process 0; report each time the directory, its inode and its files' digests."""
    _child_setup(cache, True)
    import shutil

    s = _store(kind, root)
    for i in range(rounds):
        barrier.wait(TIMEOUT)
        local = checkpoints.materialise(s, uri)
        out.put(
            (
                i,
                str(local),
                local.stat().st_ino,
                _digest(local),
                (local / COMPLETE_MARKER).read_bytes(),
                _versions(local),
            )
        )
        barrier.wait(TIMEOUT)
        if _is_cleaner():
            shutil.rmtree(Path(cache) / "checkpoints", ignore_errors=True)
        barrier.wait(TIMEOUT)


def _is_cleaner() -> bool:
    return multiprocessing.current_process().name.endswith("-0")


def _saver(kind, root, src, versions, cache, exchange, barrier, done):
    """Save ``src`` (rewritten as each version in turn) as the same checkpoint, once per version."""
    _child_setup(cache, exchange)
    s = _store(kind, root)
    barrier.wait(TIMEOUT)
    try:
        for v in versions:
            _write_src(Path(src), v)
            checkpoints.save(s, src, RUN, ROUND, ROLE)
    finally:
        done.set()


def _watcher(kind, root, uri, cache, barrier, done, out):
    """Look at the checkpoint until the saver is done: on a local store the directory under its name, taken from one
    inode that stays the target throughout the look; on a remote store each materialised copy. Report (looks that
    saw a whole directory, looks that saw a partial or mixed one with what was wrong)."""
    _child_setup(cache, True)
    s = _store(kind, root)
    target = s._path(uri)
    whole, bad = 0, []
    barrier.wait(TIMEOUT)
    while True:
        finished = done.is_set()  # one more look after the saver is done
        if kind == "local":
            seen = _look_local(target)
        else:
            try:
                local = checkpoints.materialise(s, uri)
            except FileNotFoundError:  # absent, or being saved again: never partial
                seen = None
            except OSError as exc:  # saved again during every try: an error, never a partial copy
                assert "kept changing" in str(exc), exc
                seen = None
            else:
                seen = _check(local)
        if seen is True:
            whole += 1
        elif seen:
            bad.append(seen)
        if finished:
            break
    out.put((whole, bad[:5], len(bad)))


def _look_local(target: str):
    """None when the target is absent or was replaced during the look; True when whole; else what was wrong."""
    try:
        fd = os.open(target, os.O_RDONLY | os.O_DIRECTORY)
    except FileNotFoundError:
        return None
    try:
        ino = os.fstat(fd).st_ino
        names = set(os.listdir(fd))
        versions = set()
        for name in FILES:
            try:
                versions.add(_first_line(name, fd))
            except FileNotFoundError:
                versions.add("missing " + name)
        try:
            if os.stat(target).st_ino != ino:
                return None  # replaced meanwhile: this look may have read an old copy being removed
        except FileNotFoundError:
            return None
    finally:
        os.close(fd)
    if COMPLETE_MARKER not in names or len(versions) != 1:
        return f"names={sorted(names)} versions={sorted(versions)}"
    return True


def _first_line(name: str, dir_fd: int) -> str:
    parts = name.split("/")
    fd = dir_fd
    opened = []
    try:
        for part in parts[:-1]:
            fd = os.open(part, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            opened.append(fd)
        f = os.open(parts[-1], os.O_RDONLY, dir_fd=fd)
        try:
            return os.read(f, 64).split(b"\n", 1)[0].decode()
        finally:
            os.close(f)
    finally:
        for o in opened:
            os.close(o)


def _check(local: Path):
    try:
        marker_ok = (local / COMPLETE_MARKER).is_file()
        versions = _versions(local)
    except FileNotFoundError as exc:
        return f"{local}: {exc}"
    if not marker_ok or len(versions) != 1:
        return f"{local}: marker={marker_ok} versions={sorted(versions)}"
    return True


def _join(procs) -> None:
    for p in procs:
        p.join(TIMEOUT * 2)
    for p in procs:
        if p.is_alive():
            os.kill(p.pid, signal.SIGKILL)
            p.join()
    assert [p.exitcode for p in procs] == [0] * len(procs)


# ------------------------------------------------------------------------------------------------------ tests


def test_two_processes_materialise_the_same_checkpoint_at_once(tmp_path):
    """Both end with the same complete directory, identical to what was saved, and both use the first copy
    published (the same inode): a complete copy is never replaced by a process that merely downloaded it too."""
    src = _write_src(tmp_path / "src", 7)
    s = _store("fake", tmp_path / "store")
    uri = checkpoints.save(s, src, RUN, ROUND, ROLE)
    ctx, rounds = _ctx(), 4
    barrier, out = ctx.Barrier(2), ctx.Queue()
    cache = str(tmp_path / "cache")
    procs = [
        ctx.Process(
            target=_materialiser,
            args=("fake", str(tmp_path / "store"), uri, cache, barrier, rounds, out),
            name=f"materialiser-{i}",
        )
        for i in range(2)
    ]
    for p in procs:
        p.start()
    got = [out.get(timeout=TIMEOUT * 2) for _ in range(2 * rounds)]
    _join(procs)
    expected = _digest(src)
    for i in range(rounds):
        (a, b) = [g for g in got if g[0] == i]
        assert a[1] == b[1] and a[2] == b[2], "the two processes ended with different directories"
        assert a[3] == b[3] == expected and a[5] == b[5] == {"version 7"}
        assert a[4] == b[4] == (Path(s._path(uri)) / COMPLETE_MARKER).read_bytes()
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("kind", ["local", "fake"])
def test_two_processes_save_the_same_checkpoint_at_once(tmp_path, kind):
    ctx = _ctx()
    barrier, done = ctx.Barrier(2), ctx.Event()
    root = tmp_path / "store"
    procs = []
    for i in range(2):
        src = _write_src(tmp_path / f"src{i}", 3)
        args = (kind, str(root), str(src), [3] * 4, str(tmp_path / "cache"), True, barrier, done)
        procs.append(ctx.Process(target=_saver, args=args))
    for p in procs:
        p.start()
    _join(procs)
    s = _store(kind, root)
    uri = checkpoints.checkpoint_uri(s, RUN, ROUND, ROLE)
    local = checkpoints.materialise(s, uri)
    assert _digest(local) == _digest(tmp_path / "src0") and (local / COMPLETE_MARKER).is_file()
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize(
    "kind, exchange",
    [("local", True), ("local", False), ("fake", True)],
    ids=["local-exchange", "local-rename-aside", "remote-download"],
)
def test_a_save_racing_a_reader_never_shows_a_partial_directory(tmp_path, kind, exchange):
    """The saver saves 12 versions of the checkpoint one after the other while the watcher keeps looking at it:
    every look sees the checkpoint absent (or being replaced) or whole, of one version, with its marker."""
    root = tmp_path / "store"
    s = _store(kind, root)
    uri = checkpoints.save(s, _write_src(tmp_path / "first", 0), RUN, ROUND, ROLE)
    ctx = _ctx()
    barrier, done, out = ctx.Barrier(2), ctx.Event(), ctx.Queue()
    cache = str(tmp_path / "cache")
    saver = ctx.Process(
        target=_saver, args=(kind, str(root), str(tmp_path / "src"), range(1, 13), cache, exchange, barrier, done)
    )
    watcher = ctx.Process(target=_watcher, args=(kind, str(root), uri, cache, barrier, done, out))
    saver.start()
    watcher.start()
    whole, bad, n_bad = out.get(timeout=TIMEOUT * 2)
    _join([saver, watcher])
    assert n_bad == 0, bad
    assert whole > 0
    final = checkpoints.materialise(s, uri)
    assert _versions(final) == {"version 12"} and (final / COMPLETE_MARKER).is_file()
    assert _leftovers(tmp_path) == []


def _hold_staging(target, ready, release):
    with checkpoints.staging_dir(Path(target)) as tmp:
        (tmp / "config.json").write_text("{}")
        ready.set()
        release.wait(TIMEOUT)


def _die_in_staging(target, ready):
    with checkpoints.staging_dir(Path(target)) as tmp:
        (tmp / "config.json").write_text("{}")
        ready.set()
        os.kill(os.getpid(), signal.SIGKILL)


def test_a_killed_writers_staging_dir_is_no_checkpoint_and_is_swept_a_live_one_is_kept(tmp_path):
    s = _store("local", tmp_path / "store")
    uri = checkpoints.checkpoint_uri(s, RUN, ROUND, ROLE)
    target = Path(s._path(uri))
    ctx = _ctx()
    ready = ctx.Event()
    dead = ctx.Process(target=_die_in_staging, args=(str(target), ready))
    dead.start()
    dead.join(TIMEOUT)
    assert dead.exitcode == -signal.SIGKILL
    (left,) = _leftovers(tmp_path)
    assert left.parent == target.parent and left.name.startswith(f".{ROLE}.") and (left / "config.json").is_file()
    with pytest.raises(FileNotFoundError, match="missing or incomplete"):
        checkpoints.materialise(s, uri)  # the leftover is not the checkpoint

    ready, release = ctx.Event(), ctx.Event()
    live = ctx.Process(target=_hold_staging, args=(str(target), ready, release))
    live.start()
    try:
        assert ready.wait(TIMEOUT)
        (held,) = _leftovers(tmp_path)  # the new stager swept the dead one's directory first
        assert held != left and not left.exists()
        assert checkpoints.sweep_stale_staging(target.parent) == [] and held.is_dir()  # a live one is left alone
        checkpoints.save(s, _write_src(tmp_path / "src", 1), RUN, ROUND, ROLE)
        assert held.is_dir()
    finally:
        release.set()
        live.join(TIMEOUT)
    assert live.exitcode == 0
    assert _leftovers(tmp_path) == []  # the live one removed what it did not publish
    assert _versions(checkpoints.materialise(s, uri)) == {"version 1"}


@pytest.mark.parametrize("exchange", [True, False], ids=["exchange", "rename-aside"])
def test_publish_dir_replaces_or_keeps(tmp_path, monkeypatch, exchange):
    if not exchange:
        monkeypatch.setattr(atomic, "_exchange_dirs", lambda a, b: False)
    target = tmp_path / "target"
    for version in (1, 2):
        staged = tmp_path / f".target.{version}.partial"
        _write_src(staged, version)
        assert atomic.publish_dir(staged, target) == target
        assert _versions(target) == {f"version {version}"} and not staged.exists()
    staged = _write_src(tmp_path / ".target.3.partial", 3)
    ino = target.stat().st_ino
    atomic.publish_dir(staged, target, keep=lambda d: _versions(d) == {"version 2"})
    assert target.stat().st_ino == ino and not staged.exists()  # kept: the staged copy is dropped
    assert sorted(p.name for p in tmp_path.iterdir()) == ["target"]
