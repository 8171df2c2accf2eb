"""A benchmark result (any JSON) as Markdown tables a reader can compare at a glance.

- Scalars, and short lists of scalars (inline), are rows of one key/value table; a nested object's scalars join it
  under dotted keys (``gradient.cosine``).
- Sibling objects with largely the same keys (``{"old": {...}, "new": {...}}``) are compared side by side: one row
  per leaf key, one column per branch, an empty cell where a branch lacks the key. A branch whose own objects are
  alike again splits into sub-columns (``old / first``, ``old / rerun``) while the columns stay few. Within such a
  comparison an object of objects (the steps of a run) is its own table, one row per key.
- Many alike objects with few keys each (``steps: {"r0/sample": {...}, ...}``) are a table with one row per key; so
  is a list of objects (one row per object). A short list of objects with many fields is turned to a comparison
  with one column per object, named by its leading fields.
- Numbers to 4 significant digits (whole numbers as they are); a log (a long text of several lines) is shown as
  ``(log, N lines)``, a long one-line text as a note under the table; long tables and lists are cut with a note.
"""

from __future__ import annotations

import json
import math

from infra.docs import md

#: The most rows a table of records shows, the most values a list of scalars shows, the longest text in a cell.
MAX_ROWS, MAX_VALUES, MAX_CHARS = 25, 12, 120
#: The most rows of a comparison; the most branches compared side by side (more become rows of a table).
MAX_PIVOT_ROWS, MAX_COLUMNS = 40, 6
#: A list of at most MAX_TURN objects with more than WIDE fields is shown with one column per object.
MAX_TURN, WIDE = 8, 10
#: Two objects are alike when this share of the smaller one's keys is in the other.
ALIKE = 0.5

Blocks = list[tuple[str, str]]


def scalar(value) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))


def number(value: float) -> str:
    """A float to 4 significant digits, without an exponent from 0.001 up; whole values as integers."""
    if not math.isfinite(value):
        return str(value)
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    if abs(value) >= 1e4:
        return f"{value:.0f}"
    return f"{value:.4g}" if abs(value) >= 1e-3 else f"{value:.3g}"


def _plain(value) -> str:
    if isinstance(value, float):
        return number(value)
    return value if isinstance(value, str) else json.dumps(value)


def _is_log(value) -> bool:
    return isinstance(value, str) and len(value) > MAX_CHARS and "\n" in value.strip()


def _is_note(value) -> bool:
    """A long one-line text (shown as a note under the key/value table, not in a cell)."""
    return isinstance(value, str) and len(value) > MAX_CHARS and not _is_log(value)


def fmt(value) -> str:
    """One value as a cell: numbers readable, logs and long texts as what they are, lists inline and cut."""
    if isinstance(value, bool) or value is None:
        return md.code(json.dumps(value))
    if isinstance(value, (int, float)):
        return md.cell(_plain(value))
    if _is_log(value):
        return md.cell(f"(log, {len(value.strip().splitlines())} lines)")
    if isinstance(value, str):
        return md.cell(value if len(value) <= MAX_CHARS else f"(text, {len(value)} characters)")
    if value in ([], {}):
        return md.cell("(none)")
    if isinstance(value, list) and all(scalar(v) for v in value):
        shown = ", ".join(_plain(v) for v in value[:MAX_VALUES])
        more = f" … ({len(value)} values, first {MAX_VALUES} shown)" if len(value) > MAX_VALUES else ""
        return md.cell(f"[{shown}]{more}")
    if isinstance(value, list):
        return md.cell(f"({len(value)} items)")
    return md.cell(f"({len(value)} fields)")


def _is_records(value) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)


def _is_record_lists(value) -> bool:
    """An object whose values are all lists of objects (``{"today": [...], "new": [...]}``): one table."""
    return isinstance(value, dict) and bool(value) and all(_is_records(v) for v in value.values())


def _is_dict_of_dicts(value) -> bool:
    return isinstance(value, dict) and bool(value) and all(isinstance(v, dict) and v for v in value.values())


def _flat(record: dict, prefix: str = "") -> list[tuple[str, object]]:
    out = []
    for key, value in record.items():
        if isinstance(value, dict) and value:
            out += _flat(value, f"{prefix}{key}.")
        else:
            out.append((f"{prefix}{key}", value))
    return out


def _join(*parts: str) -> str:
    return ".".join(p for p in parts if p)


def _alike(a: dict, b: dict) -> bool:
    """Whether two objects have largely the same leaves (dotted keys): ALIKE of the smaller one's are in the other."""
    a_keys, b_keys = {k for k, _ in _flat(a)}, {k for k, _ in _flat(b)}
    return len(a_keys & b_keys) >= ALIKE * min(len(a_keys), len(b_keys))


def groups(node: dict) -> list[list[str]]:
    """The keys of ``node``'s objects, grouped by likeness (each group alike with its first member); groups of 2+.
    Objects of lists of objects are not grouped (each is one table)."""
    found: list[list[str]] = []
    for key, value in node.items():
        if not (isinstance(value, dict) and value) or _is_record_lists(value):
            continue
        group = next((g for g in found if _alike(node[g[0]], value)), None)
        if group is None:
            found.append([key])
        else:
            group.append(key)
    return [g for g in found if len(g) >= 2]


def _fields(members: list[dict]) -> list[str]:
    return list(dict.fromkeys(k for m in members for k, _ in _flat(m)))


def records_table(records: list[dict], key_column: str | None = None, keys: list[str] | None = None) -> str:
    """A table of records (nested objects as dotted columns); at most MAX_ROWS rows, with a note past that. In a
    table wider than WIDE columns, a column with one value throughout is a note instead."""
    flat = [dict(_flat(r)) for r in records]
    columns = list(dict.fromkeys(c for row in flat for c in row))
    same = []
    if len(columns) > WIDE and len(flat) > 1:
        same = [c for c in columns if _one_value([row.get(c, row) for row in flat])]
        columns = [c for c in columns if c not in same]
    header = ([md.cell(key_column)] if key_column else []) + [md.cell(c) for c in columns]
    rows = []
    for i, row in enumerate(flat[:MAX_ROWS]):
        first = [md.code(keys[i])] if key_column and keys else []
        rows.append(first + [fmt(row[c]) if c in row else "" for c in columns])
    notes = [_same_note([(c, flat[0][c]) for c in same])] if same else []
    if len(records) > MAX_ROWS:
        notes.append(f"{len(records)} rows; the first {MAX_ROWS} shown.")
    return "\n\n".join([md.table(header, rows), *notes])


# --- comparisons: one row per leaf key, one column per branch ---------------------------------------------------


def _split(columns: list[tuple[str, dict]]) -> tuple[list[tuple[str, dict]], list[tuple[str, object]]]:
    """Branches whose objects are all alike, with the same keys, split into sub-columns ``branch / key`` while the
    columns stay at most MAX_COLUMNS; their other values come back as (dotted path, value) to show elsewhere."""
    keys = None
    for _, node in columns:
        found = groups(node)
        objects = [k for k, v in node.items() if isinstance(v, dict) and v]
        if len(found) != 1 or found[0] != objects or len(node) - len(objects) >= len(objects):
            return columns, []
        if keys not in (None, found[0]):
            return columns, []
        keys = found[0]
    if keys is None or len(columns) * len(keys) > MAX_COLUMNS:
        return columns, []
    split = [(f"{label} / {k}", node[k]) for label, node in columns for k in keys]
    rest = [(_join(label, k), v) for label, node in columns for k, v in node.items() if k not in keys]
    deeper, more = _split(split)
    return deeper, rest + more


def _spread(node: dict, prefix: str, column: str, found: dict) -> None:
    """``node``'s leaves into ``found["rows"]`` (path -> column -> value); its objects of objects into
    ``found["subs"]`` (path -> column -> object), its lists of objects into ``found["lists"]``."""
    for key, value in node.items():
        path = f"{prefix}{key}"
        if _is_dict_of_dicts(value):
            found["subs"].setdefault(path, {})[column] = value
        elif isinstance(value, dict) and value:
            _spread(value, f"{path}.", column, found)
        elif _is_records(value):
            found["lists"].append((f"{column} · {path}", value))
        else:
            found["rows"].setdefault(path, {})[column] = value


def pivot_table(rows: dict[str, dict[str, object]], names: list[str]) -> str:
    """Rows (leaf key -> column -> value) as a table with one column per name, empty where a column lacks the key."""
    lines = [[md.code(path)] + [fmt(cells[n]) if n in cells else "" for n in names] for path, cells in rows.items()]
    note = ""
    if len(lines) > MAX_PIVOT_ROWS:
        note = f"\n\n{len(lines)} rows; the first {MAX_PIVOT_ROWS} shown."
    return md.table(["", *(md.cell(n) for n in names)], lines[:MAX_PIVOT_ROWS]) + note


def pivot(columns: list[tuple[str, dict]], label: str = "", title: str = "") -> Blocks:
    """Branches (name, object) compared side by side (under ``title``, else ``label``); then, per object of objects
    in them, a table of its own, and their lists of objects (under ``label.path``)."""
    found: dict = {"rows": {}, "subs": {}, "lists": []}
    for name, node in columns:
        _spread(node, "", name, found)
    names = [name for name, _ in columns]
    blocks = [(title or label, pivot_table(found["rows"], names))] if found["rows"] else []
    for path, per in found["subs"].items():
        blocks += _keyed_across(_join(label, path), per)
    for where, records in found["lists"]:
        blocks += records_blocks(records, _join(label, where))
    return blocks


def _keyed_across(label: str, per: dict[str, dict]) -> Blocks:
    """The same object of objects in several branches: one row per key with each field per branch when that is
    narrow (``seconds (old / first)``; a field with one value throughout is a note), else a comparison with one
    row per key and field."""
    keys = list(dict.fromkeys(k for keyed in per.values() for k in keyed))
    flat = {
        (key, name): dict(_flat(keyed[key])) if isinstance(keyed.get(key), dict) else {}
        for key in keys
        for name, keyed in per.items()
    }
    fields = _fields([m for keyed in per.values() for m in keyed.values()])
    same = [f for f in fields if len(keys) > 1 and _one_value([cells.get(f, flat) for cells in flat.values()])]
    fields = [f for f in fields if f not in same]
    if not fields or len(fields) * len(per) > WIDE - 2:
        return pivot(list(per.items()), label)
    header = [md.cell(label.rsplit(".", 1)[-1])] + [md.cell(f"{f} ({name})") for f in fields for name in per]
    rows = [
        [md.code(key)] + [fmt(flat[key, n][f]) if f in flat[key, n] else "" for f in fields for n in per]
        for key in keys[:MAX_ROWS]
    ]
    notes = [_same_note([(f, flat[keys[0], next(iter(per))][f]) for f in same])] if same else []
    if len(keys) > MAX_ROWS:
        notes.append(f"{len(keys)} rows; the first {MAX_ROWS} shown.")
    return [(label, "\n\n".join([md.table(header, rows), *notes]))]


def _same_note(pairs: list[tuple[str, object]]) -> str:
    return "The same in every row: " + "; ".join(f"{md.code(k)} {fmt(v)}" for k, v in pairs) + "."


def _one_value(values: list) -> bool:
    """Whether all values are one and the same scalar (a missing one is never the same)."""
    return all(scalar(v) and v == values[0] and type(v) is type(values[0]) for v in values)


# --- lists of objects ------------------------------------------------------------------------------------------


def _labels(records: list[dict]) -> tuple[list[str], list[str]]:
    """Names for records shown as columns: their first 1-3 scalar fields, as few as make the names unique (a text
    as itself, a number as ``field=value``); else ``#1``, ``#2``... Returns the names and the fields used."""
    flat = [_flat(r) for r in records]
    for n in (1, 2, 3):
        heads = [f[:n] for f in flat]
        if any(len(h) < n or not all(scalar(v) and not _is_note(v) for _, v in h) for h in heads):
            break
        if len({tuple(k for k, _ in h) for h in heads}) != 1:
            break
        names = [
            " / ".join(_plain(v) if isinstance(v, str) else f"{k.rsplit('.', 1)[-1]}={_plain(v)}" for k, v in h)
            for h in heads
        ]
        if len(set(names)) == len(names):
            return names, [k for k, _ in heads[0]]
    return [f"#{i + 1}" for i in range(len(records))], []


def _without(node: dict, path: str) -> dict:
    """``node`` without the value at a dotted path (an object left empty goes too)."""
    head, _, rest = path.partition(".")
    if not rest or not isinstance(node.get(head), dict):
        return {k: v for k, v in node.items() if k != head}
    inner = _without(node[head], rest)
    return {k: (inner if k == head else v) for k, v in node.items() if k != head or inner}


def records_blocks(records: list[dict], label: str) -> Blocks:
    """A list of objects: a table with one row per object, or, for a few objects with many fields, a comparison with
    one column per object."""
    if len(records) <= MAX_TURN and len(_fields(records)) > WIDE:
        names, used = _labels(records)
        stripped = []
        for record in records:
            for path in used:
                record = _without(record, path)
            stripped.append(record)
        return pivot(list(zip(names, stripped)), label)
    return [(label or "rows", records_table(records))]


# --- the whole result ------------------------------------------------------------------------------------------


def render(data, label: str = "") -> str:
    """``data`` as Markdown blocks: its key/value table (with notes for long texts) first, then its comparisons and
    tables, each under its dotted path."""
    rows: list[tuple[str, object]] = []
    blocks: Blocks = []
    collect(data, "", rows, blocks)
    out = []
    short = [(k, v) for k, v in rows if not _is_note(v)]
    if short:
        out.append(md.table(["key", "value"], [[md.code(k or label or "value"), fmt(v)] for k, v in short]))
    out += [f"**{md.text(k or label or 'note')}:** {md.text(v)}" for k, v in rows if _is_note(v)]
    for where, block in blocks:
        out.append(f"**{md.text(where)}**\n\n{block}" if where else block)
    return "\n\n".join(out) or "(empty)"


def collect(value, path: str, rows: list, blocks: Blocks) -> None:
    """``value`` at ``path``: its scalars into ``rows``, its comparisons and tables into ``blocks``."""
    if _is_records(value):
        blocks += records_blocks(value, path)
    elif _is_record_lists(value):
        keys = [k for k, items in value.items() for _ in items]
        column = path.rsplit(".", 1)[-1] if path else "key"
        blocks.append((path or "rows", records_table([r for v in value.values() for r in v], column, keys)))
    elif isinstance(value, dict) and value:
        _collect_object(value, path, rows, blocks)
    elif isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value):
        for i, item in enumerate(value[:MAX_ROWS]):
            collect(item, f"{path}[{i}]", rows, blocks)
    else:
        rows.append((path, value))


def _collect_object(value: dict, path: str, rows: list, blocks: Blocks) -> None:
    """An object: each group of alike objects compared (few) or a table with one row per key (many, with few keys
    each), where its first member stands; every other value in its place."""
    first = {g[0]: g for g in groups(value)}
    grouped = {k for g in first.values() for k in g}
    for key, item in value.items():
        if key in first:
            _collect_group(value, first[key], path, rows, blocks)
        elif key not in grouped:
            collect(item, _join(path, str(key)), rows, blocks)


def _collect_group(value: dict, group: list[str], path: str, rows: list, blocks: Blocks) -> None:
    members = [value[k] for k in group]
    if len(group) <= MAX_COLUMNS and len(group) <= len(_fields(members)):
        columns, rest = _split([(k, value[k]) for k in group])
        blocks += pivot(columns, path, title=path or ", ".join(group))
        for where, item in rest:
            collect(item, _join(path, where), rows, blocks)
    else:
        column = path.rsplit(".", 1)[-1] if path else "key"
        blocks.append((path, records_table(members, key_column=column, keys=group)))
