"""reference/sql.md and reference/store.md: the named queries of sql/ and the store's tables, from the code.

- sql.md: every ``sql/<name>.sql`` as ``dr_core.store.sql.load`` parses it (the same parser ``dr query`` uses):
  its header comment and its declared parameters (name, type, default or required, description).
- store.md: every table of ``dr_core.store.schemas.TABLES``: its description, partition columns and each column's
  Arrow type and nullability, under the module's conventions.

    .venv/bin/python -c "from infra.docs.ref_data import sql_page; print(sql_page())"
"""

from __future__ import annotations

import re

from infra.docs import md


def queries() -> list:
    """Every named query, parsed (``dr_core.store.sql.Query``), in name order."""
    from dr_core.store import sql

    return [sql.load(name) for name in sql.names()]


def _param_default(p) -> str:
    if p.required:
        return "required"
    if p.default is None:
        return md.code("NULL")
    if isinstance(p.default, bool):
        return md.code(str(p.default).lower())
    return md.code(p.default)


def query_section(q) -> str:
    rows = [[md.code(p.name), md.code(p.type), _param_default(p), md.cell(p.doc)] for p in q.params.values()]
    example = " ".join(
        [f"dr query {q.name} --store STORE", *(f"-p {p.name}=..." for p in q.params.values() if p.required)]
    )
    parts = [
        f"## `{q.name}` {{#{md.slug(q.name)}}}",
        f"```text\n{header(q)}\n```",
        md.table(["parameter", "type", "default", "description"], rows) if rows else "No parameters.",
        f"```bash\n{example}\n```",
    ]
    return "\n\n".join(parts)


def sql_page() -> str:
    from dr_core.paths import SQL_DIR

    found = queries()
    index = md.table(
        ["query", "what it returns", "parameters"],
        [
            [f"[`{q.name}`](#{md.slug(q.name)})", md.cell(_purpose(q)), md.cell(", ".join(q.params) or "–")]
            for q in found
        ],
    )
    head = [
        "# SQL queries",
        f"Generated at build time from the {len(found)} files in `{SQL_DIR.name}/` by `infra/docs/ref_data.py`, "
        "with the parser `dr query` uses (`dr_core/store/sql.py`): each query's header comment and its bound "
        "parameters (`-- param NAME TYPE [= DEFAULT]: description`). Run one with "
        "`dr query NAME --store STORE -p NAME=VALUE` (`null` for NULL); the tables are the "
        "[store's tables](store.md).",
        index,
    ]
    return "\n\n".join([*head, *(query_section(q) for q in found)]) + "\n"


def _purpose(q) -> str:
    """The header's first sentence, without the leading ``name:``."""
    lines = []
    for line in q.header.strip().splitlines():
        if not line.strip() or line.startswith("grain:"):
            break
        lines.append(line.strip())
    first = " ".join(lines).removeprefix(f"{q.name}:").strip()
    return re.split(r"\.\s+(?=[A-Z])", first, maxsplit=1)[0].rstrip(".") + "."


def header(q) -> str:
    """The file's header comment as written (indentation kept), less the parameter lines the table shows."""
    from dr_core.store.sql import _PARAM

    out = []
    for line in q.text.splitlines():
        if not line.startswith("--"):
            break
        if not _PARAM.match(line):
            out.append(line[3:] if line.startswith("-- ") else line[2:])
    return "\n".join(out).strip() or "(no header comment)"


def table_section(spec) -> str:
    rows = [
        [
            md.code(f.name),
            md.code(str(f.type)),
            "yes" if f.nullable else "no",
            "yes" if f.name in spec.partition_by else "–",
        ]
        for f in spec.schema
    ]
    keys = ", ".join(f"`{k}`" for k in spec.partition_by)
    layout = "/".join(f"{k}=<{k}>" for k in spec.partition_by)
    return "\n\n".join(
        [
            f"## `{spec.name}` {{#{md.slug(spec.name)}}}",
            md.text(spec.doc or "(no description)"),
            f"Partitioned by {keys}: files at `<store>/{spec.name}/{layout}/<part>.parquet`.",
            md.table(["column", "type", "nullable", "partition key"], rows),
        ]
    )


def store_page() -> str:
    from dr_core.store import schemas

    specs = list(schemas.TABLES.values())
    index = md.table(
        ["table", "partitioned by", "one row per"],
        [[f"[`{s.name}`](#{md.slug(s.name)})", md.cell(", ".join(s.partition_by)), md.cell(s.doc)] for s in specs],
    )
    head = [
        "# Store tables",
        "Generated at build time from `dr_core/store/schemas.py` (`TABLES`) by `infra/docs/ref_data.py`: every "
        "Parquet file the pipeline writes conforms to one of these schemas. A column that is not nullable is "
        "required when a table is written (`conform`). The [SQL queries](sql.md) and `dr sql` see each table as a "
        "view of the same name.",
        md.paragraphs(schemas.__doc__.split("\n\n    python", 1)[0]),
        index,
    ]
    return "\n\n".join([*head, *(table_section(s) for s in specs)]) + "\n"
