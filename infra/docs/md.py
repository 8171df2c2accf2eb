"""Markdown building blocks for the generated pages: text from the code made safe to put in a page or a table cell.

Help texts, docstrings and descriptions are plain text with ``code`` in backticks. ``text`` and ``cell`` escape
what Markdown would read as markup (``*``, ``_``, ``[``, ``<`` ...) and keep backticked spans as inline code, so a
description renders as written; ``table`` builds a pipe table from rows of such cells.
"""

from __future__ import annotations

import re
from typing import Iterable, Sequence

#: Characters Python-Markdown reads as markup, escaped with a backslash (its escapable set, plus ``|`` for tables).
_SPECIAL = frozenset("`*_{}#+-.!>|")
#: Characters that become entities instead: arithmatex reads a backslash before a parenthesis or bracket as the start
#: of math, and $...$ too (SQL parameters are $name); < > & as in HTML.
_ENTITIES = {"\\": "&#92;", "[": "&#91;", "]": "&#93;", "$": "&#36;", "<": "&lt;", ">": "&gt;", "&": "&amp;"}
_CODE_SPAN = re.compile(r"``(.+?)``|`([^`]+)`")


def _plain(text: str) -> str:
    return "".join(_ENTITIES.get(c) or (f"\\{c}" if c in _SPECIAL else c) for c in text)


def _code(text: str) -> str:
    """A code span: its content is not Markdown (nor math); the table extension does not split it at ``|``."""
    text = text.replace("\n", " ")
    fence = "`" * (max((len(m) for m in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def text(value: object) -> str:
    """``value`` as Markdown inline text: markup characters escaped, backticked spans (`` `x` `` or ``` ``x`` ```)
    kept as inline code. Line breaks are kept (a blank line still starts a paragraph)."""
    s = str(value)
    out, pos = [], 0
    for m in _CODE_SPAN.finditer(s):
        out.append(_plain(s[pos : m.start()]))
        out.append(_code(m.group(1) or m.group(2)))
        pos = m.end()
    out.append(_plain(s[pos:]))
    return "".join(out)


def cell(value: object) -> str:
    """``value`` for one table cell: ``text`` on one line (an empty value is an en dash)."""
    s = " ".join(str(value).split())
    return text(s) if s else "–"


def code(value: object) -> str:
    """``value`` as inline code, safe in a table cell."""
    return _code(str(value))


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A pipe table. Header and cells are used as given: pass them through ``cell`` or ``code`` first."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def paragraphs(doc: str | None) -> str:
    """A docstring or help text as Markdown paragraphs: common indentation removed, RST double backticks made
    single, each paragraph escaped with ``text`` (an indented block in the source becomes a code block)."""
    import inspect

    doc = inspect.cleandoc(doc or "")
    blocks = []
    for para in re.split(r"\n\s*\n", doc):
        if not para.strip():
            continue
        lines = para.splitlines()
        if all(line.startswith("    ") for line in lines):  # an example command: keep it verbatim
            blocks.append("```text\n" + "\n".join(line[4:] for line in lines) + "\n```")
        else:
            first = next((i for i, line in enumerate(lines) if line.lstrip().startswith("- ")), len(lines))
            if lines[:first]:
                blocks.append(text(" ".join(line.strip() for line in lines[:first])))
            if lines[first:]:
                blocks.append(_bullets(lines[first:]))
    return "\n\n".join(blocks)


def _bullets(lines: list[str]) -> str:
    items: list[str] = []
    for line in lines:
        if line.lstrip().startswith("- "):
            items.append(line.lstrip()[2:].strip())
        else:
            items[-1] += " " + line.strip()
    return "\n".join(f"- {text(item)}" for item in items)


def slug(value: str) -> str:
    """An HTML id for ``value`` (letters, digits and dashes), for ``{#id}`` on a heading."""
    return re.sub(r"[^a-z0-9]+", "-", value.lower()).strip("-") or "x"
