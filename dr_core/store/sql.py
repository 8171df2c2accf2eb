"""Named DuckDB queries from the top-level ``sql/`` directory, and read-only ad-hoc SQL.

Each ``sql/<name>.sql`` holds one statement. Its header comment gives purpose and grain, then one line per bound
parameter::

    -- param run_id VARCHAR = NULL: only this run (NULL: every run)
    -- param prompt_id VARCHAR: the prompt (no default: required)

Parameters are bound (``$run_id``), never formatted into the text. Types: VARCHAR, INTEGER, DOUBLE, BOOLEAN.

    python -c "from dr_core import sql; print(sql.names())"
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import duckdb
import pyarrow as pa

from dr_core.errors import DRError
from dr_core.paths import SQL_DIR

#: The DuckDB names other packages need, so that only dr_core/store imports duckdb (tests/unit/test_structure.py).
Connection = duckdb.DuckDBPyConnection
DatabaseError = duckdb.Error

_PARAM = re.compile(r"^--\s*param\s+(\w+)\s+(\w+)(?:\s*=\s*([^:]+?))?\s*:\s*(.*)$")
_CONVERT = {
    "VARCHAR": str,
    "INTEGER": int,
    "DOUBLE": float,
    "BOOLEAN": lambda s: {"true": True, "false": False, "1": True, "0": False}[s.strip().lower()],
}


class QueryError(DRError, ValueError):
    """A query name, parameter or statement the caller must fix (the message says how)."""


@dataclass(frozen=True)
class Param:
    name: str
    type: str
    default: object
    required: bool
    doc: str


@dataclass(frozen=True)
class Query:
    """One ``sql/<name>.sql``: its text, header (purpose and grain) and declared parameters."""

    name: str
    text: str
    header: str
    params: dict[str, Param]

    def bind(self, raw: dict[str, object] | None = None) -> dict[str, object]:
        """Values for every declared parameter: ``raw`` (strings from a command line are converted to the declared
        type; 'null' gives NULL) over the defaults. QueryError for an unknown, missing or badly typed one."""
        raw = dict(raw or {})
        unknown = sorted(set(raw) - set(self.params))
        if unknown:
            raise QueryError(f"{self.name}: unknown parameter(s) {unknown}; it takes {self._signature()}")
        values = {}
        for p in self.params.values():
            if p.name in raw:
                values[p.name] = _convert(self.name, p.name, p.type, raw[p.name])
            elif p.required:
                raise QueryError(f"{self.name}: parameter {p.name!r} is required ({p.doc}); pass --param {p.name}=...")
            else:
                values[p.name] = p.default
        return values

    def _signature(self) -> str:
        return ", ".join(
            f"{p.name} {p.type}" + ("" if p.required else f" = {'NULL' if p.default is None else p.default}")
            for p in self.params.values()
        )


def _convert(query: str, pname: str, ptype: str, value: object) -> object:
    if not isinstance(value, str):
        return value
    if value.strip().lower() == "null":
        return None
    try:
        return _CONVERT[ptype](value)
    except (ValueError, KeyError):
        raise QueryError(f"{query}: parameter {pname!r} expects {ptype}, got {value!r}") from None


def names(sql_dir: Path = SQL_DIR) -> list[str]:
    """The names of the queries in ``sql_dir`` (file stems), sorted."""
    return sorted(p.stem for p in sql_dir.glob("*.sql"))


def load(name: str, sql_dir: Path = SQL_DIR) -> Query:
    """Parse ``sql_dir/<name>.sql``. QueryError listing the known names when there is no such file."""
    path = sql_dir / f"{name}.sql"
    if not re.fullmatch(r"\w+", name) or not path.exists():
        raise QueryError(f"no query named {name!r}; known: {', '.join(names(sql_dir)) or '(none)'}")
    text = path.read_text(encoding="utf-8")
    header_lines, params = [], {}
    for line in text.splitlines():
        if not line.startswith("--"):
            break
        if m := _PARAM.match(line):
            pname, ptype, default, doc = m.groups()
            ptype = ptype.upper()
            if ptype not in _CONVERT:
                raise QueryError(f"{path}: parameter {pname} has unsupported type {ptype}")
            required = default is None
            value = None if required else _convert(name, pname, ptype, default)
            params[pname] = Param(pname, ptype, value, required, doc)
        else:
            header_lines.append(line[2:].strip())
    return Query(name, text, "\n".join(header_lines), params)


def run(
    con: duckdb.DuckDBPyConnection, name: str, params: dict[str, object] | None = None, sql_dir: Path = SQL_DIR
) -> pa.Table:
    """Run the named query on ``con`` (views named after the tables, e.g. from ``Store.connect()``) with bound
    ``params`` (declared defaults fill the rest). Returns the result rows as a pyarrow Table."""
    query = load(name, sql_dir)
    values = query.bind(params)
    return con.sql(query.text, params=values or None).to_arrow_table()


def confine(con: duckdb.DuckDBPyConnection, directories: Sequence[str] = ()) -> duckdb.DuckDBPyConnection:
    """Lock ``con``: external access off except ``directories`` (no other file, no URL, no ATTACH, no extension
    install or load), then ``lock_configuration`` so no statement can undo it."""
    if directories:
        con.execute(f"SET allowed_directories = [{', '.join(quote(d) for d in directories)}]")
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")
    return con


def quote(value: str) -> str:
    """``value`` as an SQL string literal (for the few places DuckDB takes no bound parameter: SET, view paths)."""
    return "'" + value.replace("'", "''") + "'"


def run_on_tables(
    name: str, tables: dict[str, pa.Table], params: dict[str, object] | None = None, sql_dir: Path = SQL_DIR
) -> pa.Table:
    """Run the named query over in-memory ``tables`` (view name -> rows) instead of a store. The connection can
    read nothing else: no files, no URLs, no extensions."""
    con = duckdb.connect()
    try:
        for view, table in tables.items():
            con.register(view, table)
        return run(confine(con), name, params, sql_dir)
    finally:
        con.close()


_EXPLAIN = re.compile(r"^\s*EXPLAIN\b\s*(\(.*?\)\s*)?(?P<analyze>ANALY[SZ]E\b)?", re.IGNORECASE | re.DOTALL)


def check_read_only(con: duckdb.DuckDBPyConnection, text: str) -> None:
    """QueryError unless ``text`` is exactly one statement that only reads: SELECT (incl. WITH/FROM/DESCRIBE/
    SUMMARIZE/SHOW) or a plain EXPLAIN of one. ``EXPLAIN ANALYZE`` is refused: it executes the statement inside
    it (``EXPLAIN ANALYZE COPY ... TO`` writes). DuckDB's parser decides, not a regex: the statement nested in an
    EXPLAIN is parsed again and must itself be a SELECT."""
    try:
        statements = con.extract_statements(text)
    except duckdb.Error as exc:
        raise QueryError(f"cannot parse the SQL: {first_line(exc)}") from None
    if len(statements) != 1:
        raise QueryError(f"expected exactly one SQL statement, got {len(statements)}")
    kind = statements[0].type
    if kind == duckdb.StatementType.EXPLAIN:
        m = _EXPLAIN.match(text)
        if m is None:
            raise QueryError("refused: cannot find the statement inside this EXPLAIN")
        if m.group("analyze") or re.search(r"ANALY[SZ]E", m.group(1) or "", re.IGNORECASE):
            raise QueryError(
                "refused: EXPLAIN ANALYZE executes the statement inside it; use EXPLAIN (the plan "
                "only) or run the SELECT itself"
            )
        check_read_only(con, text[m.end() :])
        return
    if kind != duckdb.StatementType.SELECT:
        raise QueryError(
            f"refused: `dr sql` is read-only and this is a {kind.name} statement; only SELECT (incl. "
            "WITH/FROM/DESCRIBE/SUMMARIZE) and EXPLAIN may run. Artifacts are written by the pipeline "
            "and `dr ingest`."
        )


def run_read_only(con: duckdb.DuckDBPyConnection, text: str) -> pa.Table:
    """Run one ad-hoc statement if it only reads (``check_read_only``); QueryError otherwise, before anything runs.
    ``COPY``, ``CREATE``, ``INSERT``, ``ATTACH``, ``SET``, ``PRAGMA``, ``CALL``, ``EXPLAIN ANALYZE`` are refused.
    This is the first of two walls: a connection from ``Store.connect()`` is also confined by DuckDB's own
    configuration to the store's files, with no extensions and the configuration locked."""
    check_read_only(con, text)
    return con.sql(text).to_arrow_table()


def first_line(exc: BaseException) -> str:
    """A DuckDB error's first line (the rest is the statement quoted back with a caret under the fault)."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
