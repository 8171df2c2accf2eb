"""A benchmark result (any JSON) as readable Markdown: key/value rows for scalars, tables for lists of records.

- Scalars, and short lists of scalars, are rows of one key/value table; a nested object's scalars join it under
  dotted keys (``gradient.cosine``).
- A list of objects is a table (one row per object, nested objects as dotted columns); so is an object whose values
  are all objects of scalars (``steps: {"r0/sample": {...}, ...}``: one row per key).
- Long lists and long strings are cut, with a note saying how much was left out.
"""

from __future__ import annotations

import json

from infra.docs import md

#: The most rows a table shows, the most values a list of scalars shows, the longest string shown.
MAX_ROWS, MAX_VALUES, MAX_CHARS = 25, 12, 240


def scalar(value) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))


def fmt(value) -> str:
    """One value as a cell: numbers to 6 significant digits, long strings and lists cut with a note."""
    if isinstance(value, bool) or value is None:
        return md.code(json.dumps(value))
    if isinstance(value, float):
        return md.cell(f"{value:.6g}")
    if isinstance(value, int):
        return md.cell(str(value))
    if isinstance(value, str):
        return md.cell(value if len(value) <= MAX_CHARS else f"{value[:MAX_CHARS]}… ({len(value)} characters)")
    if isinstance(value, list) and all(scalar(v) for v in value):
        shown = ", ".join(_plain(v) for v in value[:MAX_VALUES])
        more = f" … ({len(value)} values, first {MAX_VALUES} shown)" if len(value) > MAX_VALUES else ""
        return md.cell(f"[{shown}]{more}")
    if isinstance(value, list):
        return md.cell(f"({len(value)} items)")
    return md.cell(json.dumps(value)[:MAX_CHARS])


def _plain(value) -> str:
    return f"{value:.6g}" if isinstance(value, float) else json.dumps(value) if not isinstance(value, str) else value


def _is_records(value) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)


def _is_keyed_records(value) -> bool:
    """An object of >= 2 objects whose leaves are scalars: a table with one row per key."""
    if not isinstance(value, dict) or len(value) < 2 or not all(isinstance(v, dict) and v for v in value.values()):
        return False
    return all(scalar(x) or isinstance(x, list) for v in value.values() for _, x in _flat(v))


def _flat(record: dict, prefix: str = "") -> list[tuple[str, object]]:
    out = []
    for key, value in record.items():
        if isinstance(value, dict) and value:
            out += _flat(value, f"{prefix}{key}.")
        else:
            out.append((f"{prefix}{key}", value))
    return out


def records_table(records: list[dict], key_column: str | None = None, keys: list[str] | None = None) -> str:
    """A table of records (nested objects as dotted columns); at most MAX_ROWS rows, with a note past that."""
    flat = [dict(_flat(r)) for r in records[:MAX_ROWS]]
    columns = list(dict.fromkeys(c for row in flat for c in row))
    header = ([md.cell(key_column)] if key_column else []) + [md.cell(c) for c in columns]
    rows = []
    for i, row in enumerate(flat):
        first = [md.code(keys[i])] if key_column and keys else []
        rows.append(first + [fmt(row[c]) if c in row else "–" for c in columns])
    note = f"\n\n{len(records)} rows; the first {MAX_ROWS} shown." if len(records) > MAX_ROWS else ""
    return md.table(header, rows) + note


def render(data, label: str = "") -> str:
    """``data`` as Markdown blocks: its key/value table first, then one labelled table per list of records."""
    rows: list[tuple[str, object]] = []
    blocks: list[tuple[str, str]] = []
    _collect(data, "", rows, blocks)
    out = []
    if rows:
        out.append(md.table(["key", "value"], [[md.code(k or label or "value"), fmt(v)] for k, v in rows]))
    for where, block in blocks:
        out.append(f"**{md.text(where)}**\n\n{block}")
    return "\n\n".join(out) or "(empty)"


def _collect(value, path: str, rows: list, blocks: list) -> None:
    if _is_records(value):
        blocks.append((path or "rows", records_table(value)))
    elif isinstance(value, dict) and _is_keyed_records(value):
        keys = list(value)
        column = path.rsplit(".", 1)[-1] if path else "key"
        blocks.append((path or "rows", records_table([value[k] for k in keys], key_column=column, keys=keys)))
    elif isinstance(value, dict) and value:
        for key, item in value.items():
            _collect(item, f"{path}.{key}" if path else str(key), rows, blocks)
    elif isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value):
        for i, item in enumerate(value[:MAX_ROWS]):
            _collect(item, f"{path}[{i}]", rows, blocks)
    else:
        rows.append((path, value))
