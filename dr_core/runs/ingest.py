"""What ``dr ingest`` does, and the anchor refresh step's ingest (``dr_core/runs/anchor_refresh.py``):
validate a whole file, then write it to the store. ``cli/store_commands.py`` declares the command (and holds
``dr sql`` and ``dr query``).

dr ingest anchors dr_core/data/anchors_alpacaeval.jsonl --store /tmp/st
"""

from __future__ import annotations

from pathlib import Path

from dr_core.datasets import DataError, load_prompts, load_ranked
from dr_core.errors import DRError
from dr_core.store.artifacts import Store
from dr_core.store.rows import IngestedPromptRow, anchor_rows

INGEST_KINDS = ("anchors", "prompts")


class CommandError(DRError, ValueError):
    """A user error: the CLI prints the message and exits non-zero; nothing has been written."""


def ingest(
    kind: str, file: Path, store_url: str | None, dataset: str | None = None, create_bucket: bool = False
) -> tuple[str, int]:
    """Validate ``file`` entirely (dr_core.datasets loaders), then write it as one part of table ``kind``
    partitioned by ``dataset`` (default: the file's stem). Re-ingesting a dataset replaces it.
    Returns (uri, rows written). CommandError, before any write, for a bad kind, file or dataset name;
    StoreError for a store that cannot be written (an S3 bucket that does not exist, unless ``create_bucket``)."""
    if kind not in INGEST_KINDS:
        raise CommandError(f"cannot ingest {kind!r}; expected one of {', '.join(INGEST_KINDS)}")
    name = dataset or file.stem
    try:
        rows = (
            anchor_rows(name, load_ranked(file))
            if kind == "anchors"
            else [IngestedPromptRow(name, r.id, r.prompt, r.baseline) for r in load_prompts(file)]
        )
    except DataError as exc:
        raise CommandError(f"{exc} (nothing was written)") from None
    try:
        store = Store.from_url(store_url)
        store.uri_for(kind, dataset=name)  # a bad dataset name: refused before anything is written
    except ValueError as exc:  # a bad store URL or dataset name
        raise CommandError(str(exc)) from None
    store.check_writable(create_bucket)
    return store.write(kind, rows, dataset=name), len(rows)
