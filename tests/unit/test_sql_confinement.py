"""`dr sql`, `dr query` and the report's connection can read the store and nothing else, and can write nothing.

Two walls, each tested on its own: the statement check (DuckDB's parser; EXPLAIN ANALYZE and the statement nested
in an EXPLAIN included) and DuckDB's own configuration on every ``Store.connect()`` (external access only to the
store's directory, no extension install or autoload, configuration locked). Against a local store and a real S3
server (SeaweedFS)."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest
from typer.testing import CliRunner

from cli.main import app  # the installed entry point: every command, report included
from dr_core.paths import bundled
from dr_core.store.artifacts import Store

runner = CliRunner()
ANCHORS = bundled("anchors_alpacaeval.jsonl")


def dr(*args):
    return runner.invoke(app, [str(a) for a in args])


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def local_store(tmp_path):
    store = tmp_path / "store"
    assert dr("ingest", "anchors", ANCHORS, "--store", store).exit_code == 0
    return store


WRITES = [
    "EXPLAIN ANALYZE COPY (SELECT 1 AS x) TO '{out}'",
    "explain analyse COPY (SELECT 1 AS x) TO '{out}'",
    "EXPLAIN (ANALYZE) COPY (SELECT 1 AS x) TO '{out}'",
    "EXPLAIN COPY (SELECT 1 AS x) TO '{out}'",
    "COPY (SELECT 1 AS x) TO '{out}'",
    "COPY anchors TO '{part}' (FORMAT parquet)",
    "EXPLAIN ANALYZE COPY (SELECT * FROM anchors LIMIT 5) TO '{part}' (FORMAT parquet)",
    "ATTACH '{out}.db' AS other",
    "CREATE TABLE t AS SELECT 1",
    "INSERT INTO anchors SELECT * FROM anchors",
    "SET enable_external_access = true",
    "PRAGMA enable_profiling",
    "INSTALL httpfs",
    "LOAD httpfs",
    "SELECT 1; COPY (SELECT 1) TO '{out}'",
]


@pytest.mark.parametrize("statement", WRITES)
def test_dr_sql_writes_nothing_anywhere(local_store, tmp_path, statement):
    part = next((local_store / "anchors").rglob("*.parquet"))
    before, out = _tree(local_store), tmp_path / "home" / "written.csv"
    out.parent.mkdir()
    res = dr("sql", statement.format(out=out, part=part), "--store", local_store)
    assert res.exit_code == 2, res.output
    assert res.output.startswith("error: ") and "Traceback" not in res.output
    assert _tree(local_store) == before  # the 528 anchor rows are untouched
    assert not list(out.parent.iterdir())


READS_OUTSIDE = [
    "SELECT * FROM read_text('/etc/passwd')",
    "SELECT * FROM read_csv('/etc/passwd')",
    "SELECT * FROM glob('/etc/*')",
    "SELECT * FROM read_parquet('{other}/anchors/**/*.parquet')",
    "SELECT * FROM read_text('{store}/../secret.txt')",
    "SELECT * FROM read_csv('http://127.0.0.1:9/x.csv')",
    "SELECT * FROM read_parquet('s3://some-bucket/x.parquet')",
]


@pytest.mark.parametrize("statement", READS_OUTSIDE)
def test_dr_sql_reads_nothing_outside_the_store(local_store, tmp_path, monkeypatch, statement):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # where DuckDB would install an extension
    (tmp_path / "secret.txt").write_text("s3cr3t-outside")
    other = tmp_path / "other"
    assert dr("ingest", "anchors", ANCHORS, "--store", other).exit_code == 0
    res = dr("sql", statement.format(other=other, store=local_store), "--store", local_store)
    assert res.exit_code == 2, res.output
    assert "disabled by configuration" in res.output or "Permission" in res.output, res.output
    assert "root:" not in res.output and "s3cr3t-outside" not in res.output
    assert not (tmp_path / "home").exists()  # no ~/.duckdb/extensions download was tried


def test_reads_inside_the_store_still_work(local_store):
    res = dr("sql", "SELECT count(*) AS n FROM anchors", "--store", local_store, "--format", "json")
    assert res.exit_code == 0 and json.loads(res.output) == [{"n": 528}]
    for ok in (
        "EXPLAIN SELECT * FROM anchors",
        "DESCRIBE anchors",
        "SUMMARIZE anchors",
        "WITH a AS (FROM anchors) SELECT count(*) FROM a",
        f"SELECT count(*) FROM glob('{local_store}/**')",
    ):
        assert dr("sql", ok, "--store", local_store).exit_code == 0, ok
    res = dr("query", "anchor_filter", "--store", local_store, "--format", "json")
    assert res.exit_code == 0 and len(json.loads(res.output)) > 0


def test_the_connection_is_confined_without_the_statement_check(local_store, tmp_path):
    """DuckDB's configuration alone holds: the wall under `dr query` and the report's queries."""
    con = Store.from_url(str(local_store)).connect()
    assert con.sql("SELECT count(*) FROM anchors").fetchall() == [(528,)]
    for statement in (
        f"COPY (SELECT 1) TO '{tmp_path / 'x.csv'}'",
        "SELECT * FROM read_text('/etc/passwd')",
        f"ATTACH '{tmp_path / 'x.db'}'",
        "INSTALL httpfs",
        "LOAD httpfs",
    ):
        with pytest.raises(duckdb.Error, match="disabled|Permission"):
            con.execute(statement)
    for statement in (
        "SET enable_external_access = true",
        "SET allowed_directories = ['/']",
        "RESET lock_configuration",
        "SET autoload_known_extensions = true",
    ):
        with pytest.raises(duckdb.Error, match="locked"):
            con.execute(statement)
    assert not list(tmp_path.glob("x.*"))


def test_markup_in_user_text_is_printed_verbatim(tmp_path):
    store = tmp_path / "st[/x]"
    res = dr("ingest", "anchors", ANCHORS, "--store", store)
    assert res.exit_code == 0, res.output
    assert str(store) in res.output.replace("\n", "")
    res = dr("sql", "SELECT '[/]' AS a, '[bold]b[/bold]' AS b", "--store", store, "--format", "csv")
    assert res.exit_code == 0 and res.output.splitlines()[1] == "[/],[bold]b[/bold]"
    res = dr("sql", "SELECT [/] FROM", "--store", store)
    assert res.exit_code == 2 and "MarkupError" not in res.output and "cannot parse the SQL" in res.output
    res = dr("sql", "SELECT 1", "--store", tmp_path / "st[red]y")
    assert res.exit_code == 2 and "st[red]y" in res.output


def test_json_output_is_valid_json_with_nan_and_infinity(local_store):
    res = dr(
        "sql", "SELECT 'nan'::DOUBLE AS a, 'inf'::DOUBLE AS b, 1.5 AS c", "--store", local_store, "--format", "json"
    )
    assert res.exit_code == 0
    assert json.loads(res.output, parse_constant=lambda t: pytest.fail(f"invalid JSON token {t}")) == [
        {"a": None, "b": None, "c": 1.5}
    ]


def test_reading_commands_refuse_a_store_that_does_not_exist(tmp_path, local_store):
    (tmp_path / "a-file").write_text("x")
    for store, message in (
        (tmp_path / "nope", "does not exist"),
        (tmp_path / "a-file", "is a file"),
        (tmp_path / "empty", "is empty"),
    ):
        if message == "is empty":
            store.mkdir()
        for args in (
            ("sql", "SELECT 1"),
            ("query", "anchor_filter"),
            ("report", "--run-id", "demo", "--out", tmp_path / "rep"),
        ):
            res = dr(*args, "--store", store)
            assert res.exit_code == 2 and message in res.output, (args, res.output)
    assert not (tmp_path / "rep").exists()


def test_dr_query_on_a_corrupt_or_foreign_part_is_one_line(local_store):
    part = next((local_store / "anchors").rglob("*.parquet"))
    for payload in (b"PAR1 not parquet at all", None):
        if payload is None:  # a foreign-schema Parquet file planted in the table's folder
            import pyarrow as pa
            import pyarrow.parquet as pq

            pq.write_table(pa.table({"other": [1]}), part)
        else:
            part.write_bytes(payload)
        res = dr("query", "anchor_filter", "--store", local_store)
        assert res.exit_code == 2, res.output
        # a corrupt file stops the connection, naming the table; a foreign schema fails the query, naming it
        assert res.output.startswith(("error: store ", "error: query anchor_filter failed")), res.output
        assert "table anchors cannot be read" in res.output or "not found" in res.output
        assert len(res.output.strip().splitlines()) == 1


def test_debug_shows_the_traceback(tmp_path):
    res = dr("--debug", "sql", "SELECT 1", "--store", tmp_path / "nope")
    assert res.exit_code == 1 and type(res.exception).__name__ == "StoreError"
    res = dr("sql", "SELECT 1", "--store", tmp_path / "nope")  # --debug holds for its own invocation only
    assert res.exit_code == 2 and res.output.startswith("error: no store at")
