"""Where dynamicrubric finds its bundled data, its SQL files and its cache, and the one hash-a-file loop.

The cache (default model checkpoint, Prefect home, compiled DeepSpeed ops) is ``$DR_CACHE_DIR`` or
``~/.cache/dynamicrubric``. ``update_from_file`` / ``sha256_file`` stream a binary file into a hashlib digest in
blocks (models, checkpoint directories, store part files). Imports nothing of the project, so the model registry,
the store and the tasks can all use it.

    python -c "from dr_core.paths import sha256_file; print(sha256_file('pyproject.toml'))"
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
DATA_DIR = PACKAGE_DIR / "data"
REPO_DIR = PACKAGE_DIR.parent
SQL_DIR = REPO_DIR / "sql"
#: bytes read at a time when hashing a file
BLOCK = 1 << 22


def cache_dir() -> Path:
    path = Path(os.environ.get("DR_CACHE_DIR") or Path.home() / ".cache" / "dynamicrubric")
    path.mkdir(parents=True, exist_ok=True)
    return path


def bundled(name: str) -> Path:
    """A file shipped in dr_core/data (see its NOTICE.md for sources and licenses)."""
    path = DATA_DIR / name
    if not path.exists():
        raise FileNotFoundError(f"bundled data file {name!r} is missing from {DATA_DIR}")
    return path


def update_from_file(digest, fh, block: int = BLOCK):
    """Feed the rest of the binary file object ``fh`` (a local file or an fsspec one) into ``digest``; return it."""
    while chunk := fh.read(block):
        digest.update(chunk)
    return digest


def sha256_file(path: str | Path) -> str:
    """The SHA-256 hex digest of a local file's bytes."""
    with Path(path).open("rb") as fh:
        return update_from_file(hashlib.sha256(), fh).hexdigest()
