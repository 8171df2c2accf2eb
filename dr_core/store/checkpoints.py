"""Model checkpoints beside the artifact store: saved under ``<store>/models/run_id=R/round=T/<role>/`` (a local
directory, or the same prefix on S3), registered in the ``checkpoints`` table (role, round, uri, parent), and
materialised back to a local directory when an engine or a trainer needs one.

A checkpoint directory is usable only once its ``.dr-complete`` marker exists: it is written last, on upload too,
so a crashed save is never picked up.

    python -c "from dr_core.store.checkpoints import latest; from dr_core.store.artifacts import Store; \\
               print(latest(Store.from_url('./store'), 'run1', 'policy'))"
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import shutil
from pathlib import Path

from dr_core.constants import COMPLETE_MARKER, TRAINED_ROLES
from dr_core.paths import cache_dir
from dr_core.store.artifacts import Store
from dr_core.store.atomic import publish_dir


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
    if store.protocol == "file":
        tmp = Path(dest + ".partial")
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(src, tmp, ignore=shutil.ignore_patterns(COMPLETE_MARKER))
        publish_dir(tmp, dest)
    else:
        for f in sorted(p for p in src.rglob("*") if p.is_file() and p.name != COMPLETE_MARKER):
            store.fs.put_file(str(f), f"{dest}/{f.relative_to(src).as_posix()}")
    store.fs.pipe_file(f"{dest}/{COMPLETE_MARKER}", b"complete\n")
    return uri


def materialise(store: Store, uri: str) -> Path:
    """A local directory holding the checkpoint at ``uri``: the directory itself for a local store, else a
    download into the cache (reused while complete)."""
    path = store._path(uri)
    if not store.fs.exists(f"{path}/{COMPLETE_MARKER}"):
        raise FileNotFoundError(f"checkpoint {uri} is missing or incomplete (no {COMPLETE_MARKER})")
    if store.protocol == "file":
        return Path(path)
    local = cache_dir() / "checkpoints" / hashlib.sha256(uri.encode()).hexdigest()[:16]
    if not (local / COMPLETE_MARKER).exists():
        shutil.rmtree(local, ignore_errors=True)
        tmp = local.with_suffix(".partial")
        shutil.rmtree(tmp, ignore_errors=True)
        store.fs.get(path, str(tmp), recursive=True)
        publish_dir(tmp, local)
    return local


def register(
    store: Store, run_id: str, round_no: int, role: str, uri: str, parent: str | None, metrics: dict | None = None
) -> str:
    """One checkpoints-table row (run, round, role, uri, parent, metrics): its own part file, so registering the
    same checkpoint again replaces the row."""
    row = {
        "role": role,
        "uri": uri,
        "parent": parent,
        "metrics_json": json.dumps(metrics or {}, default=str),
        "created_at": dt.datetime.now(dt.timezone.utc),
    }
    return store.write("checkpoints", [row], part=role, run_id=run_id, round=round_no)


def latest(store: Store, run_id: str, role: str) -> dict | None:
    """The newest registered checkpoint of ``role`` in ``run_id`` (highest round), or None."""
    rows = [r for r in store.read_table("checkpoints", run_id=run_id).to_pylist() if r["role"] == role]
    return max(rows, key=lambda r: r["round"]) if rows else None
