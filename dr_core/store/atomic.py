"""Atomic local file writes, shared by the store's part files and the commands' outputs (one mechanism).

``write_atomic(path, payload)``: a temp file beside the target (``.<name>.<random>.tmp``: never matched by the
store's ``*.parquet`` globs), held under an exclusive ``flock`` while it is written, fsynced, given the mode the
umask asks for (``mkstemp`` alone would make it 0600, unreadable to a worker running as another user), then
``os.replace``d over the target and the directory fsynced. Readers see the old file or the new one, never a torn
one. On any exception (SIGTERM included, once ``dr`` turns it into SystemExit) the temp file is removed.

A process killed with SIGKILL cannot clean up: its temp file stays. The next write into the same directory sweeps
it: a temp file whose ``flock`` can be taken belongs to no live writer (the kernel drops a dead process's locks),
so it is removed; one still locked is a write in progress and is left alone. A temp file this process has just
created and not locked yet is never swept by its other threads (``_FRESH``: the reward service commits from
several threads into one directory); one that another process's sweep removed in that moment (two ranks writing
into one directory) is found gone once locked, and the writer makes another.

``write_all_atomic([(path, payload), ...])`` writes several outputs of one command together: every temp file is
written first, and only then are they renamed, so a failure leaves none of the new files.

``write_json_atomic`` / ``write_jsonl_atomic``: one JSON document / JSON Lines records (strict JSON: ``json_text``).

``publish_dir(staged, target, keep=None)``: the directory counterpart. A directory built in full beside ``target``
(a temp directory of its own in the same parent, unique to its writer) takes ``target``'s place in one rename, and the
parent directory is fsynced. An old ``target`` is swapped out in one ``renameat2(RENAME_EXCHANGE)`` (where the kernel
and filesystem lack it: renamed aside to a unique name first, so ``target`` is briefly absent), then removed: a
reader sees the old directory or the new one, never a partial one, and two processes publishing the same target at
once each end with a whole one. ``keep(target)`` true (a complete copy of the same content published meanwhile by
another process) discards ``staged`` instead. A crash leaves the staged directory, never a half-filled ``target``.

``check_output_path(path)`` refuses, before any work, a path that is a directory, lies under a regular file, or
whose directory cannot be created or written.

    python -c "from dr_core.store.atomic import write_atomic; write_atomic('/tmp/x.txt', b'hi')"
"""

from __future__ import annotations

import errno
import fcntl
import json
import math
import os
import shutil
import tempfile
import threading
from decimal import Decimal
from pathlib import Path
from typing import Callable

from dr_core import faults
from dr_core.errors import DRError

TEMP_SUFFIX = ".tmp"


class OutputPathError(DRError, OSError):
    """An output path that cannot be written: says which and why (checked before any work)."""

    def __str__(self) -> str:  # the message alone, not "[Errno 21] ...: 'path'"
        return self.strerror


def current_umask() -> int:
    """The process umask, read without changing it where /proc allows (os.umask is a set-and-restore)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    old = os.umask(0o022)
    os.umask(old)
    return old


def check_output_path(path: str | Path, what: str = "output") -> Path:
    """``path`` as a Path if a file can be written there; OutputPathError naming it and the reason otherwise.
    Missing parent directories are fine (they are created at write time) as long as the nearest existing
    ancestor is a writable directory."""
    p = Path(path).expanduser()
    if p.is_dir():
        raise OutputPathError(errno.EISDIR, f"{what} {p} is a directory; give a file path", str(p))
    if str(p).endswith(os.sep) or p.name in ("", ".", ".."):
        raise OutputPathError(errno.EISDIR, f"{what} {p} names a directory; give a file path", str(p))
    ancestor = p.parent
    while not ancestor.exists():
        if ancestor == ancestor.parent:
            break
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise OutputPathError(errno.ENOTDIR, f"{what} {p}: {ancestor} is a file, not a directory", str(p))
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise OutputPathError(errno.EACCES, f"{what} {p}: directory {ancestor} is not writable", str(p))
    if p.exists() and not os.access(p, os.W_OK):
        raise OutputPathError(errno.EACCES, f"{what} {p} exists and is not writable", str(p))
    return p


#: temp files this process created and has not locked yet (between ``mkstemp`` and ``flock``), guarded by _CREATING
_FRESH: set[str] = set()
_CREATING = threading.Lock()


def sweep_unlocked(
    directory: str | Path,
    matches: Callable[[str], bool],
    remove: Callable[[str], None],
    *,
    flags: int = os.O_RDONLY,
    in_use: Callable[[str], bool] = lambda path: False,
) -> list[str]:
    """Remove the entries of ``directory`` whose name ``matches`` and whose ``flock`` is free (a dead writer's: the
    kernel drops a dead process's locks), each with ``remove``; return their paths. A locked entry is a live
    writer's and is left alone, as is one ``in_use`` says this process is about to lock. ``flags``: how an entry is
    opened to take its lock (``os.O_DIRECTORY`` added for a directory)."""
    removed = []
    try:
        names = os.listdir(directory)
    except OSError:
        return removed
    for name in names:
        if not matches(name):
            continue
        path = os.path.join(directory, name)
        if in_use(path):
            continue
        try:
            fd = os.open(path, flags)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)  # locked: a live writer
            continue
        try:
            remove(path)
            removed.append(path)
        except OSError:
            pass
        finally:
            os.close(fd)
    return removed


def _fresh(path: str) -> bool:
    with _CREATING:
        return path in _FRESH  # another thread of this process is about to lock it


def sweep_stale_temps(directory: str | Path) -> list[str]:
    """Remove the temp files in ``directory`` left by writers that died (their flock is free); return them."""
    return sweep_unlocked(
        directory, lambda name: name.startswith(".") and name.endswith(TEMP_SUFFIX), os.unlink, in_use=_fresh
    )


#: How many temp files a writer makes before giving up when other processes' sweeps keep taking them.
_CREATE_TRIES = 5


def _locked_temp(directory: str, name: str) -> tuple[int, str]:
    """A new temp file for ``name`` in ``directory``, open and under this process's exclusive flock: (fd, path).

    Between ``mkstemp`` and ``flock`` another process's sweep can see the file unlocked, take its lock and remove it
    (two ranks of one launch writing into one directory). Once the flock is ours no sweep can take it, so the file
    is checked to still be at its path (the same inode); if a sweep removed it meanwhile, another one is made."""
    for _ in range(_CREATE_TRIES):
        with _CREATING:
            fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{name}.", suffix=TEMP_SUFFIX)
            _FRESH.add(tmp)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except BaseException:
            os.close(fd)
            _unlink_quietly(tmp)
            raise
        finally:
            with _CREATING:
                _FRESH.discard(tmp)
        if _is_at(fd, tmp):
            return fd, tmp
        os.close(fd)  # swept before our lock: its path is gone or another file's
    raise OSError(errno.EAGAIN, f"{_CREATE_TRIES} temp files for {name} in {directory} were removed before locked")


def _is_at(fd: int, path: str) -> bool:
    try:
        here, ours = os.stat(path), os.fstat(fd)
    except FileNotFoundError:
        return False
    return (here.st_dev, here.st_ino) == (ours.st_dev, ours.st_ino)


def _write_temp(path: str, payload: bytes, fault: str | None = None) -> tuple[str, int]:
    """Create, lock, fill, chmod and fsync the temp file for ``path``; return (temp path, its open fd)."""
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    sweep_stale_temps(directory)
    fd, tmp = _locked_temp(directory, os.path.basename(path))
    try:
        os.fchmod(fd, 0o666 & ~current_umask())
        view = memoryview(payload)
        if fault:  # a DR_FAULT point half-way through the bytes (dr_core/faults.py), as a crash mid-write
            half = view[: len(view) // 2]
            while half:
                half = half[os.write(fd, half) :]
            os.fsync(fd)
            faults.fault_point(fault, store_path=path)
            view = view[len(view) // 2 :]
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        _unlink_quietly(tmp)
        raise
    return tmp, fd


def _fsync_dir(directory: str) -> None:
    dir_fd = os.open(directory or ".", os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # make the rename itself durable
    finally:
        os.close(dir_fd)


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def write_all_atomic(outputs: list[tuple[str | Path, bytes | str]], fault: str | None = None) -> None:
    """Write every ``(path, payload)`` (str payloads as UTF-8): all temp files first, then the renames.
    ``fault``: the name of a ``dr_core.faults`` point hit half-way through each file (tests only)."""
    staged: list[tuple[str, str, int]] = []
    try:
        for path, payload in outputs:
            data = payload.encode("utf-8") if isinstance(payload, str) else payload
            tmp, fd = _write_temp(str(Path(path).expanduser()), data, fault)
            staged.append((str(Path(path).expanduser()), tmp, fd))
        for path, tmp, _ in staged:
            os.replace(tmp, path)
    except BaseException:
        for _, tmp, _ in staged:
            _unlink_quietly(tmp)
        raise
    finally:
        for _, _, fd in staged:
            os.close(fd)
    for directory in {os.path.dirname(path) for path, _, _ in staged}:
        _fsync_dir(directory)


def write_atomic(path: str | Path, payload: bytes | str, fault: str | None = None) -> None:
    """Write one file atomically (see the module docstring)."""
    write_all_atomic([(path, payload)], fault)


def publish_dir(staged: str | Path, target: str | Path, keep=None) -> Path:
    """Make the finished directory ``staged`` (built in a directory of its own beside ``target``: the same filesystem,
    so the rename is atomic) appear as ``target``, then fsync the parent directory. An existing ``target`` is replaced
    without a moment where a partial directory stands there: exchanged with ``staged`` in one rename (then removed),
    or where that is unsupported renamed aside first. ``keep``: a predicate on an existing ``target`` (e.g. "holds the
    completion marker of this very content"); when it holds, ``staged`` is removed and ``target`` kept. Safe when
    several processes publish the same ``target`` at once. Returns ``target`` as a Path."""
    staged, target = Path(staged), Path(target)
    for _ in range(1000):  # each pass loses only to another publisher's rename; they cannot keep winning
        if keep is not None and target.exists() and keep(target):
            shutil.rmtree(staged, ignore_errors=True)
            return target
        try:
            os.rename(staged, target)  # no target (or an empty one): the plain case
            break
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
        # a non-empty target: a finished old copy, a leftover, or another process's copy published meanwhile
        swapped = _exchange_dirs(staged, target)
        if swapped is None:  # the target vanished meanwhile (another publisher's move): try again
            continue
        if swapped:  # staged now holds the old directory
            shutil.rmtree(staged, ignore_errors=True)
            break
        aside = target.with_name(f"{staged.name}.old")  # unique: staged's name is
        try:
            os.rename(target, aside)
        except FileNotFoundError:
            continue
        try:
            os.rename(staged, target)
        except OSError as exc:
            shutil.rmtree(aside, ignore_errors=True)
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
            continue  # another publisher's copy took the place first
        shutil.rmtree(aside, ignore_errors=True)
        break
    else:
        raise OSError(errno.EBUSY, f"could not publish {staged} as {target}: other writers kept replacing it")
    _fsync_dir(str(target.parent))
    return target


#: renameat2(2)'s flag that swaps two paths atomically (Linux 3.15+, ext4/xfs/btrfs/tmpfs; glibc 2.28+)
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange_dirs(a: Path, b: Path) -> bool | None:
    """Swap the directories ``a`` and ``b`` in one atomic rename: True when done, False when the system cannot
    (no renameat2, or a filesystem without RENAME_EXCHANGE), None when one of them does not exist."""
    import ctypes

    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return False
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err == errno.ENOENT:
        return None
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EPERM):
        return False
    raise OSError(err, os.strerror(err), str(b))


def json_safe(obj):
    """``obj`` with every non-finite float (NaN, +-inf: not JSON) replaced by None (null: "n/a")."""
    if isinstance(obj, Decimal):  # SQL DECIMAL: a JSON number
        obj = float(obj)
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj


def json_text(obj, indent: int | None = 2, default=None) -> str:
    """``obj`` as strict JSON text: non-finite floats become null, never the invalid NaN/Infinity tokens.
    ``default``: how to write other objects (e.g. ``str`` for SQL dates); None: TypeError, before any file."""
    return json.dumps(json_safe(obj), indent=indent, ensure_ascii=False, allow_nan=False, default=default) + "\n"


def jsonl_text(records) -> str:
    """``records`` as JSON Lines text: one strict JSON object per line."""
    return "".join(json_text(r, indent=None) for r in records)


def write_json_atomic(path: str | Path, obj) -> None:
    """Write ``obj`` as strict JSON (``json_text``) atomically."""
    write_atomic(path, json_text(obj))


def write_jsonl_atomic(path: str | Path, records) -> None:
    """Write ``records`` as JSON Lines (``jsonl_text``) atomically."""
    write_atomic(path, jsonl_text(records))
