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

INGEST_KINDS = ("anchors", "prompts")


class CommandError(DRError, ValueError):
    """A user error: the CLI prints the message and exits non-zero; nothing has been written."""


def _anchor_rows(path: Path) -> list[dict]:
    rows = []
    for r in load_ranked(path):
        for rank, response in enumerate(r.responses, start=1):
            score = r.scores[rank - 1] if r.scores else None
            rows.append(
                dict(prompt_id=r.id, prompt=r.prompt, rank=rank, response=response, source=r.source, score=score)
            )
    return rows


def _prompt_rows(path: Path) -> list[dict]:
    return [dict(prompt_id=r.id, prompt=r.prompt, baseline=r.baseline) for r in load_prompts(path)]


def ingest(
    kind: str, file: Path, store_url: str | None, dataset: str | None = None, create_bucket: bool = False
) -> tuple[str, int]:
    """Validate ``file`` entirely (dr_core.datasets loaders), then write it as one part of table ``kind``
    partitioned by ``dataset`` (default: the file's stem). Re-ingesting a dataset replaces it.
    Returns (uri, rows written). CommandError, before any write, for a bad kind, file or dataset name;
    StoreError for a store that cannot be written (an S3 bucket that does not exist, unless ``create_bucket``)."""
    if kind not in INGEST_KINDS:
        raise CommandError(f"cannot ingest {kind!r}; expected one of {', '.join(INGEST_KINDS)}")
    try:
        rows = _anchor_rows(file) if kind == "anchors" else _prompt_rows(file)
    except DataError as exc:
        raise CommandError(f"{exc} (nothing was written)") from None
    name = dataset or file.stem
    try:
        store = Store.from_url(store_url)
        store.uri_for(kind, dataset=name)  # a bad dataset name: refused before anything is written
    except ValueError as exc:  # a bad store URL or dataset name
        raise CommandError(str(exc)) from None
    store.check_writable(create_bucket)
    return store.write(kind, rows, dataset=name), len(rows)
