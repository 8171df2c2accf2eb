"""Model checkpoints beside the artifact store: saved under ``<store>/models/run_id=R/round=T/<role>/`` (a local
directory, or the same prefix on S3), registered in the ``checkpoints`` table (role, round, uri, parent), and
materialised back to a local directory when an engine or a trainer needs one.

A checkpoint directory is usable only once its ``.dr-complete`` marker exists: it is written last, on upload too,
so a crashed save is never picked up. Each save writes a marker of its own (``complete <random>``): a cached download
is reused only while its marker is the store's, so a checkpoint saved again is downloaded again.

Several processes may save or materialise the same checkpoint at once (two runs on one store, a re-run beside a
live one). Each stages into a directory of its own beside the target (``.<name>.<random>.partial``, created by
``tempfile.mkdtemp`` and held under ``flock`` while it is filled), marker included, and publishes it with one rename
(``dr_core.store.atomic.publish_dir``): the target is absent, the old complete directory or the new complete one,
never a partial one. A download that finds the same content already published by another process uses that copy and
drops its own; a save replaces the old directory (swapped out atomically, then removed). On S3 a save removes the old
marker before it uploads, so a reader sees the old checkpoint as incomplete rather than a mix; a download whose
marker changed while it ran is done again. A staging directory a killed process left has no marker under the
target's name, so it is never taken for a checkpoint; the next save or download into the same directory removes it
(its lock is free: ``sweep_stale_staging``).

Layout: ``<store>/models/run_id=R/round=T/<role>/`` and, for a remote store, the downloaded copy
``<cache>/checkpoints/<sha256(uri)[:16]>/<role>/`` (named by its role like a local store's, so a checkpoint's
identity, ``dr_core.engines.identity.dir_identity``, is the same from either store).

    python -c "from dr_core.store.checkpoints import latest; from dr_core.store.artifacts import Store; \\
               print(latest(Store.from_url('./store'), 'run1', 'policy'))"
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from dr_core.constants import COMPLETE_MARKER, TRAINED_ROLES
from dr_core.paths import cache_dir
from dr_core.store.artifacts import Store
from dr_core.store.atomic import current_umask, publish_dir, sweep_unlocked
from dr_core.store.rows import CheckpointRow

#: The suffix of a staging directory beside a checkpoint (``.<name>.<random>.partial``; publish_dir's aside copy of a
#: replaced one adds ``.old``): never a checkpoint.
STAGING_SUFFIX = ".partial"


def checkpoint_uri(store: Store, run_id: str, round_no: int, role: str) -> str:
    if role not in TRAINED_ROLES:
        raise ValueError(f"role must be one of {TRAINED_ROLES}, got {role!r}")
    return f"{store.url}/models/run_id={run_id}/round={round_no}/{role}"


def save(store: Store, local_dir: str | Path, run_id: str, round_no: int, role: str) -> str:
    """Copy a finished local checkpoint directory into the store (marker last); return its URI."""
    src = Path(local_dir)
    if not (src / "config.json").is_file():
        raise ValueError(f"{src} is not a Hugging Face checkpoint directory (no config.json)")
    uri = checkpoint_uri(store, run_id, round_no, role)
    dest = store._path(uri)
    stamp = f"complete {uuid.uuid4().hex}\n".encode()  # this save's own marker (see the module docstring)
    if store.protocol == "file":
        with staging_dir(Path(dest)) as tmp:
            shutil.copytree(src, tmp, ignore=shutil.ignore_patterns(COMPLETE_MARKER), dirs_exist_ok=True)
            (tmp / COMPLETE_MARKER).write_bytes(stamp)  # whole before the rename: the target appears complete
            publish_dir(tmp, dest)
        return uri
    marker = f"{dest}/{COMPLETE_MARKER}"
    with contextlib.suppress(FileNotFoundError):  # saved before: readers see it incomplete while it is replaced
        store.fs.rm_file(marker)  # (no exists() first: a concurrent save of the same checkpoint may remove it too)
    for f in sorted(p for p in src.rglob("*") if p.is_file() and p.name != COMPLETE_MARKER):
        store.fs.put_file(str(f), f"{dest}/{f.relative_to(src).as_posix()}")
    store.fs.pipe_file(marker, stamp)
    return uri


def materialise(store: Store, uri: str) -> Path:
    """A local directory holding the checkpoint at ``uri``: the directory itself for a local store, else a
    download into the cache (reused while complete)."""
    if not uri.startswith(store.url + "/") and "://" not in uri and (Path(uri) / "config.json").is_file():
        return Path(uri)  # a start checkpoint outside the store (dr coevolve --generator-start/--policy-start)
    path = store._path(uri)
    if store.protocol == "file":
        if not store.fs.exists(f"{path}/{COMPLETE_MARKER}"):
            raise FileNotFoundError(f"checkpoint {uri} is missing or incomplete (no {COMPLETE_MARKER})")
        return Path(path)
    stamp = _remote_marker(store, path)
    if stamp is None:
        raise FileNotFoundError(f"checkpoint {uri} is missing or incomplete (no {COMPLETE_MARKER})")
    local = cache_dir() / "checkpoints" / hashlib.sha256(uri.encode()).hexdigest()[:16] / Path(path).name
    for _ in range(3):
        if _marker(local) == stamp:  # downloaded before (by this process or another one)
            return local
        with staging_dir(local) as tmp:
            store.fs.get(f"{path}/", f"{tmp}/", recursive=True)
            now = _remote_marker(store, path)
            if now == stamp and _marker(tmp) == stamp:  # one save's files, whole
                return publish_dir(tmp, local, keep=lambda d, want=stamp: _marker(d) == want)
        if now is None:
            raise FileNotFoundError(f"checkpoint {uri} became incomplete while it was downloaded (saved again?)")
        stamp = now  # saved again meanwhile: download the new one
    raise OSError(f"checkpoint {uri} kept changing while it was downloaded")


def _remote_marker(store: Store, path: str) -> bytes | None:
    try:
        return store.fs.cat_file(f"{path}/{COMPLETE_MARKER}")
    except FileNotFoundError:
        return None


def _marker(directory: Path) -> bytes | None:
    try:
        return (directory / COMPLETE_MARKER).read_bytes()
    except OSError:
        return None


def is_staging(name: str) -> bool:
    """True for the name of a staging directory (or publish_dir's aside copy of one): never a checkpoint."""
    return name.startswith(".") and (name.endswith(STAGING_SUFFIX) or name.endswith(STAGING_SUFFIX + ".old"))


def sweep_stale_staging(directory: str | Path) -> list[str]:
    """Remove the staging directories in ``directory`` that no live process holds (their ``flock`` is free: the
    kernel drops a dead process's locks); return them. One being filled is locked and left alone."""
    return sweep_unlocked(
        directory,
        is_staging,
        lambda path: shutil.rmtree(path, ignore_errors=True),
        flags=os.O_RDONLY | os.O_DIRECTORY,
    )


@contextmanager
def staging_dir(target: Path) -> Iterator[Path]:
    """A new, empty directory of this process's own beside ``target``, locked while the block runs. It is named
    ``.<name>.<random>.partial``, with the mode the umask asks for; whatever of it was not published is removed on the
    way out. Stale staging directories in the same parent are swept first."""
    target.parent.mkdir(parents=True, exist_ok=True)
    sweep_stale_staging(target.parent)
    while True:
        tmp = tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.", suffix=STAGING_SUFFIX)
        try:
            fd = os.open(tmp, os.O_RDONLY | os.O_DIRECTORY)
        except FileNotFoundError:  # another process's sweep took it before the lock: make another
            continue
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            if os.stat(tmp).st_ino == os.fstat(fd).st_ino:
                break
        except FileNotFoundError:
            pass
        os.close(fd)  # swept between open and lock: make another
    try:
        os.chmod(tmp, 0o777 & ~current_umask())  # mkdtemp makes it private; a checkpoint is read by other users too
        yield Path(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # a failed stage, or a copy dropped for another process's
        os.close(fd)


def register(
    store: Store, run_id: str, round_no: int, role: str, uri: str, parent: str | None, metrics: dict | None = None
) -> str:
    """One checkpoints-table row (run, round, role, uri, parent, metrics): its own part file, so registering the
    same checkpoint again replaces the row."""
    row = CheckpointRow(role, uri, parent, json.dumps(metrics or {}, default=str), dt.datetime.now(dt.timezone.utc))
    return store.write("checkpoints", [row], part=role, run_id=run_id, round=round_no)


def latest(store: Store, run_id: str, role: str) -> dict | None:
    """The newest registered checkpoint of ``role`` in ``run_id`` (highest round), or None."""
    rows = [r for r in store.read_table("checkpoints", run_id=run_id).to_pylist() if r["role"] == role]
    return max(rows, key=lambda r: r["round"]) if rows else None
