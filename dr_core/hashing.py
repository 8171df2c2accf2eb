"""The one hash-a-file loop: stream a binary file into a hashlib digest in blocks (models, checkpoint directories,
store part files). Imports nothing of the project, so the model registry, the store and the tasks can all use it.

    python -c "from dr_core.hashing import sha256_file; print(sha256_file('pyproject.toml'))"
"""

from __future__ import annotations

import hashlib
from pathlib import Path

BLOCK = 1 << 22


def update_from_file(digest, fh, block: int = BLOCK):
    """Feed the rest of the binary file object ``fh`` (a local file or an fsspec one) into ``digest``; return it."""
    while chunk := fh.read(block):
        digest.update(chunk)
    return digest


def sha256_file(path: str | Path) -> str:
    """The SHA-256 hex digest of a local file's bytes."""
    with Path(path).open("rb") as fh:
        return update_from_file(hashlib.sha256(), fh).hexdigest()
