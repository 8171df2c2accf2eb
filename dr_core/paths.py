"""Where dynamicrubric finds its bundled data, its SQL files and its cache.

The cache (default model checkpoint, Prefect home, compiled DeepSpeed ops) is ``$DR_CACHE_DIR`` or
``~/.cache/dynamicrubric``.
"""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
DATA_DIR = PACKAGE_DIR / "data"
REPO_DIR = PACKAGE_DIR.parent
SQL_DIR = REPO_DIR / "sql"


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
