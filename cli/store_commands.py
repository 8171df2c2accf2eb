"""The artifact store from the command line: ``dr ingest``, ``dr sql`` and ``dr query``, and how their rows print.

The ingest itself is ``dr_core.runs.ingest.ingest`` (the anchor refresh step ingests with it too); the
read-only SQL, the named queries and the rendering of their rows are here. A user error is a ``CommandError``:
one line on stderr, exit 2, nothing written. DuckDB and pyarrow load when a command runs, not with ``dr --help``.

    dr ingest anchors dr_core/data/anchors_alpacaeval.jsonl --store /tmp/st
    dr sql "SELECT count(DISTINCT prompt_id) FROM anchors" --store /tmp/st
    dr query anchor_filter --store /tmp/st --param min_responses=11 --format csv
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.table import Table

from cli.options import CREATE_BUCKET_HELP, STORE_HELP
from cli.output import console, fail

if TYPE_CHECKING:
    import pyarrow as pa

FORMATS = ("table", "csv", "json")
_FORMAT_HELP = "output format: table | csv | json"


# -- the commands -------------------------------------------------------------------------------------------------
def ingest(
    kind: str = typer.Argument(..., help="anchors | prompts"),
    file: Path = typer.Argument(..., help="JSON Lines file (ranked anchor lists, or prompts)"),
    store: str = typer.Option(None, "--store", envvar="DR_STORE", help=STORE_HELP),
    dataset: str = typer.Option(
        None, "--dataset", help="dataset name (default: the file's stem); re-ingest replaces it"
    ),
    create_bucket: bool = typer.Option(False, "--create-bucket", help=CREATE_BUCKET_HELP),
) -> None:
    """Validate a whole file, then write it to the store's anchors or prompts table (nothing is written if invalid)."""
    from dr_core.runs.ingest import CommandError
    from dr_core.runs.ingest import ingest as do_ingest

    try:
        uri, n = do_ingest(kind, file, store, dataset, create_bucket)
    except CommandError as exc:
        fail(str(exc))
    console.print(f"wrote {n} {kind} rows to {uri}", highlight=False, soft_wrap=True)


def sql_cmd(
    statement: str = typer.Argument(..., help="one read-only SQL statement; tables are views named after the tables"),
    store: str = typer.Option(None, "--store", envvar="DR_STORE", help=STORE_HELP),
    fmt: str = typer.Option("table", "--format", help=_FORMAT_HELP),
) -> None:
    """Run one read-only SQL statement (SELECT, EXPLAIN) over the store with DuckDB; writes are refused."""
    from dr_core.runs.ingest import CommandError

    try:
        result = run_sql(statement, store)
    except CommandError as exc:
        fail(str(exc))
    _print_result(result, fmt)


def query(
    name: str = typer.Argument(..., help="a query in sql/ (anchor_filter, gap_by_round, rubric_history, ...)"),
    store: str = typer.Option(None, "--store", envvar="DR_STORE", help=STORE_HELP),
    param: list[str] = typer.Option([], "--param", "-p", help="NAME=VALUE, repeatable ('null' for NULL)"),
    fmt: str = typer.Option("table", "--format", help=_FORMAT_HELP),
) -> None:
    """Run a named query from sql/ over the store, with bound parameters."""
    from dr_core.runs.ingest import CommandError

    try:
        result = run_query(name, store, param)
    except CommandError as exc:
        fail(str(exc))
    _print_result(result, fmt)


def _print_result(table: pa.Table, fmt: str) -> None:
    from dr_core.runs.ingest import CommandError

    try:
        out = render(table, fmt)
    except CommandError as exc:
        fail(str(exc))
    if isinstance(out, str):
        typer.echo(out, nl=False)
        return
    grid = Table(caption=f"{table.num_rows} row(s)")
    for name in table.column_names:
        grid.add_column(name, overflow="fold")
    for cells in out:
        grid.add_row(*cells)
    console.print(grid)


# -- what they do -------------------------------------------------------------------------------------------------
def run_sql(text: str, store_url: str | None) -> pa.Table:
    """One read-only statement over the store's views (``dr_core.store.sql.run_read_only``)."""
    from dr_core.runs.ingest import CommandError
    from dr_core.store import sql as named_sql

    con = _connect(store_url)
    try:
        return named_sql.run_read_only(con, text)
    except named_sql.QueryError as exc:
        raise CommandError(str(exc)) from None
    except Exception as exc:  # a DuckDB error in the user's SQL: show it, not a traceback
        raise CommandError(f"query failed: {named_sql.first_line(exc)}") from None


def run_query(name: str, store_url: str | None, raw_params: list[str]) -> pa.Table:
    """The named query from ``sql/`` with ``k=v`` parameters."""
    from dr_core.runs.ingest import CommandError
    from dr_core.store import sql as named_sql

    params = {}
    for item in raw_params:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CommandError(f"--param expects NAME=VALUE, got {item!r}")
        params[key.strip()] = value
    try:
        named = named_sql.load(name)
        named.bind(params)  # fail on a bad parameter before touching the store
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
    from dr_core.runs.ingest import CommandError
    from dr_core.store.artifacts import Store

    try:
        store = Store.from_url(store_url)
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    return store.require_exists().connect()


def render(table: pa.Table, fmt: str) -> str | list[list[str]]:
    """``csv`` or ``json`` (an array of row objects) as a string; for ``table``, the cells as strings (NULL for a
    missing value), for the CLI to lay out."""
    from dr_core.runs.ingest import CommandError
    from dr_core.store.atomic import json_text

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
