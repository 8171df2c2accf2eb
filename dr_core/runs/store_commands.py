"""What ``dr ingest``, ``dr sql`` and ``dr query`` do; ``cli/app.py`` only declares the options.

dr ingest anchors dr_core/data/anchors_alpacaeval.jsonl --store /tmp/st
dr sql "SELECT count(DISTINCT prompt_id) FROM anchors" --store /tmp/st
dr query anchor_filter --store /tmp/st --param min_responses=11 --format csv
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pyarrow as pa

from dr_core.datasets import DataError, load_prompts, load_ranked
from dr_core.store import sql as named_sql
from dr_core.store.artifacts import Store
from dr_core.store.atomic import json_text

INGEST_KINDS = ("anchors", "prompts")
FORMATS = ("table", "csv", "json")


class CommandError(ValueError):
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


def run_sql(text: str, store_url: str | None) -> pa.Table:
    """One read-only statement over the store's views (``dr_core.store.sql.run_read_only``)."""
    con = _connect(store_url)
    try:
        return named_sql.run_read_only(con, text)
    except named_sql.QueryError as exc:
        raise CommandError(str(exc)) from None
    except Exception as exc:  # a DuckDB error in the user's SQL: show it, not a traceback
        raise CommandError(f"query failed: {named_sql.first_line(exc)}") from None


def run_query(name: str, store_url: str | None, raw_params: list[str]) -> pa.Table:
    """The named query from ``sql/`` with ``k=v`` parameters."""
    params = {}
    for item in raw_params:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CommandError(f"--param expects NAME=VALUE, got {item!r}")
        params[key.strip()] = value
    try:
        query = named_sql.load(name)
        query.bind(params)  # fail on a bad parameter before touching the store
    except named_sql.QueryError as exc:
        raise CommandError(str(exc)) from None
    con = _connect(store_url)
    try:
        return named_sql.run(con, name, params)
    except named_sql.DatabaseError as exc:  # a corrupt or foreign part file, say: name the query and the cause
        raise CommandError(f"query {name} failed: {named_sql.first_line(exc)}") from None


def _connect(store_url: str | None):
    """The store's confined DuckDB connection; StoreError for a store that does not exist (a typo'd path or
    bucket must not look like an empty store)."""
    try:
        store = Store.from_url(store_url)
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    return store.require_exists().connect()


def render(table: pa.Table, fmt: str) -> str | list[list[str]]:
    """``csv`` or ``json`` (an array of row objects) as a string; for ``table``, the cells as strings (NULL for a
    missing value), for the CLI to lay out."""
    if fmt not in FORMATS:
        raise CommandError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")
    rows = table.to_pylist()
    if fmt == "table":
        return [["NULL" if v is None else str(v) for v in r.values()] for r in rows]
    if fmt == "json":  # NaN and infinities are not JSON: they print as null
        return json_text(rows, indent=1, default=str)
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(table.column_names)
        writer.writerows([["" if v is None else v for v in r.values()] for r in rows])
        return buf.getvalue()
