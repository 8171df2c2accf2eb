"""One writer per run: the lease a process holds on ``(store, run_id)`` while it writes the run's partitions.

Two executions of the same run at once would interleave their writes (both rewrite the run's part files, both
resume the same training directory, the second marks the first's running steps as interrupted), so ``dr round``,
``dr coevolve``, ``dr stale-fresh`` and the anchor-refresh flow take the run's lease first. A second process asking
for a held lease is refused at once with one line naming the holder (``LeaseHeld``), or, with ``wait=True``,
waits until the holder lets go. Runs with other run ids never wait for each other.

Where the lease lives, ``<store>/_leases/run_id=<run>.json`` (who holds it: host, pid, command, since when):

- **local store**: an exclusive ``flock`` on ``run_id=<run>.lock`` beside it. The kernel drops the lock when the
  holder exits, however it exits (SIGKILL included), so a crashed run never blocks the next one.
- **S3 store**: the JSON object itself, created only if absent (a conditional ``PutObject``, ``If-None-Match: *``),
  refreshed by the holder every ``ttl_s / 3`` seconds (a heartbeat) and deleted when it lets go. A lease whose
  heartbeat is older than ``ttl_s`` (its holder died without letting go), or whose holder is a process of this host
  that no longer exists, is stale: the next process removes it and takes it.

    with run_lease(Store.from_url("./store"), "demo", "dr coevolve"):
        ...  # this process is the run's only writer
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import os
import socket
import threading
import time
import uuid
from pathlib import Path

from dr_core.errors import DRError
from dr_core.store.artifacts import Store
from dr_core.store.atomic import write_json_atomic

LEASES = "_leases"
#: An S3 lease without a heartbeat for this long is stale (its holder died).
TTL_S = 60.0


class LeaseHeld(DRError, RuntimeError):
    """The run's lease is held by another process (``holder``: what it wrote about itself, or {})."""

    def __init__(self, run_id: str, store_url: str, holder: dict):
        self.run_id, self.store_url, self.holder = run_id, store_url, holder
        super().__init__(
            f"run {run_id!r} in {store_url} is in use by {describe(holder)}; wait for it with --wait, "
            "or give this run another --run-id"
        )


def describe(holder: dict) -> str:
    """A lease holder in words: ``pid 123 on host-a (dr coevolve), since 2026-12-04 02:17:03 UTC``."""
    if not holder:
        return "another process (it has not said who it is yet)"
    what = f" ({holder['command']})" if holder.get("command") else ""
    return f"pid {holder.get('pid')} on {holder.get('host')}{what}, since {holder.get('since')}"


def _me(command: str) -> dict:
    now = dt.datetime.now(dt.timezone.utc)
    return {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "command": command,
        "since": now.strftime("%Y-%m-%d %H:%M:%S UTC"),
        "token": uuid.uuid4().hex,
        "heartbeat": now.timestamp(),
    }


def _alive_here(holder: dict) -> bool:
    """False only when ``holder`` names a process of this host that no longer exists."""
    if holder.get("host") != socket.gethostname():
        return True
    try:
        os.kill(int(holder["pid"]), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, KeyError, TypeError, ValueError):
        return True
    return True


@contextlib.contextmanager
def run_lease(
    store: Store,
    run_id: str,
    command: str,
    *,
    wait: bool = False,
    poll_s: float = 1.0,
    ttl_s: float = TTL_S,
    on_wait=None,
):
    """Hold the lease of ``run_id`` in ``store`` for the block. Held elsewhere: ``LeaseHeld`` at once, or with
    ``wait`` poll every ``poll_s`` seconds until it is free (``on_wait(holder)`` is called once, when waiting
    starts: the CLI's "waiting for ..." line)."""
    local = store.local_root()
    if local is not None:
        with _local_lease(local, store.url, run_id, command, wait, poll_s, on_wait):
            yield
    else:
        with _s3_lease(store, run_id, command, wait, poll_s, ttl_s, on_wait):
            yield


def _waiting(on_wait, holder: dict, told: bool) -> bool:
    if not told and on_wait is not None:
        on_wait(holder)
    return True


@contextlib.contextmanager
def _local_lease(root: Path, store_url: str, run_id: str, command: str, wait: bool, poll_s: float, on_wait):
    folder = root / LEASES
    folder.mkdir(parents=True, exist_ok=True)
    info = folder / f"run_id={run_id}.json"
    fd = os.open(folder / f"run_id={run_id}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        told = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                holder = _read_local(info)
                if not wait:
                    raise LeaseHeld(run_id, store_url, holder) from None
                told = _waiting(on_wait, holder, told)
                time.sleep(poll_s)
        write_json_atomic(info, _me(command))
        try:
            yield
        finally:
            info.unlink(missing_ok=True)  # before the unlock: a waiter that wins next writes its own
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _read_local(info: Path) -> dict:
    try:
        return json.loads(info.read_text())
    except (OSError, ValueError):
        return {}


@contextlib.contextmanager
def _s3_lease(store: Store, run_id: str, command: str, wait: bool, poll_s: float, ttl_s: float, on_wait):
    path = f"{store.root}/{LEASES}/run_id={run_id}.json"
    me = _me(command)
    told = False
    while True:
        if _create_if_absent(store, path, me):
            break
        holder = _read_s3(store, path)
        if holder is not None and _stale(holder, ttl_s):
            with contextlib.suppress(FileNotFoundError):
                store.fs.rm_file(path)  # a dead holder's: take it (a racing taker loses the create below)
            continue
        if holder is None:  # let go between our create and our read: try again
            continue
        if not wait:
            raise LeaseHeld(run_id, store.url, holder)
        told = _waiting(on_wait, holder, told)
        time.sleep(poll_s)
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(ttl_s / 3):
            with contextlib.suppress(Exception):  # a missed beat is retried; ttl_s allows two
                store.fs.pipe_file(path, json.dumps({**me, "heartbeat": time.time()}).encode())

    beater = threading.Thread(target=beat, name=f"dr-lease-{run_id}", daemon=True)
    beater.start()
    try:
        yield
    finally:
        stop.set()
        beater.join()
        held = _read_s3(store, path)
        if held is not None and held.get("token") == me["token"]:
            with contextlib.suppress(FileNotFoundError):
                store.fs.rm_file(path)


def _create_if_absent(store: Store, path: str, me: dict) -> bool:
    """Write the lease object only if none exists (a conditional PUT); False when one does."""
    from botocore.exceptions import ClientError

    try:
        store.fs.pipe_file(path, json.dumps(me).encode(), mode="create")
    except FileExistsError:
        return False
    except (ClientError, OSError) as exc:
        cause = exc if isinstance(exc, ClientError) else exc.__cause__  # s3fs wraps botocore's error in an OSError
        code = cause.response.get("Error", {}).get("Code", "") if isinstance(cause, ClientError) else ""
        if code in ("PreconditionFailed", "ConditionalRequestConflict"):
            return False
        raise
    store.fs.invalidate_cache(path)
    held = _read_s3(store, path)  # a server that ignores If-None-Match would let both in: the token decides
    return held is not None and held.get("token") == me["token"]


def _read_s3(store: Store, path: str) -> dict | None:
    try:
        store.fs.invalidate_cache(path)
        return json.loads(store.fs.cat_file(path))
    except FileNotFoundError:
        return None
    except ValueError:
        return {}


def _stale(holder: dict, ttl_s: float) -> bool:
    beat = holder.get("heartbeat")
    if not isinstance(beat, (int, float)) or time.time() - beat > ttl_s:
        return True
    return not _alive_here(holder)
