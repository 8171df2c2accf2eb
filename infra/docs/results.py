"""The benchmark results on the site: infra/benchmarks/results/*.json with their provenance (provenance.yaml).

- ``page()`` is benchmarks/results.md ("All results"): every results file, its title, date, machine and command,
  and its numbers as tables (``infra.docs.tables``).
- ``replace_markers(markdown, page)`` replaces each line ``<!-- dr:results NAME.json -->`` of a hand-written page by
  that file's tables with its date, machine and command; a name that is not a results file raises
  ``UnknownResult`` naming the page and the file (the hook turns it into a failed build).

    .venv/bin/python -c "from infra.docs.results import page; print(page())"
"""

from __future__ import annotations

import json
import posixpath
import re
from functools import lru_cache
from pathlib import Path

from dr_core.errors import DRError
from infra.docs import md, tables

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "infra" / "benchmarks" / "results"
PROVENANCE = RESULTS / "provenance.yaml"
#: What the results page is called in the docs (the marker's tables link to their section there).
PAGE = "benchmarks/results.md"
#: ``<!-- dr:results NAME.json -->`` alone on a line (surrounding spaces allowed).
MARKER = re.compile(r"^[ \t]*<!--\s*dr:results\s+(\S+?)\s*-->[ \t]*$", re.MULTILINE)
FIELDS = ("title", "date", "machine", "command")


class UnknownResult(DRError, ValueError):
    """A marker names a file that is not in infra/benchmarks/results/ (or has no provenance)."""


def result_files(results: Path = RESULTS) -> list[str]:
    """The results files' names, sorted."""
    return sorted(p.name for p in results.glob("*.json"))


@lru_cache(maxsize=4)
def provenance(path: Path = PROVENANCE) -> dict[str, dict[str, str]]:
    """provenance.yaml: file name -> {title, date, machine, command}, every value a string."""
    import yaml

    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    return {name: {k: str(entry.get(k, "not recorded")) for k in FIELDS} for name, entry in data.items()}


def anchor(name: str) -> str:
    """The id of a results file's section on the results page (its stem, as a slug)."""
    return md.slug(Path(name).stem)


def body(name: str, results: Path = RESULTS, link: str = "") -> str:
    """One results file: its provenance and its numbers (``link``: the results page, relative to the page this goes
    in, to link the file name to its section there). UnknownResult when it is not there."""
    path = results / name
    info = provenance(results / PROVENANCE.name).get(name)
    if not path.is_file() or Path(name).name != name or info is None:
        known = ", ".join(result_files(results))
        raise UnknownResult(f"no results file {name!r} with provenance in {results}; known: {known}")
    data = json.loads(path.read_text(encoding="utf-8"))
    source = f"`infra/benchmarks/results/{name}`"
    if link:
        source = f"[{source}]({link}#{anchor(name)})"
    facts = "\n".join(
        [
            f"- **File:** {source}",
            f"- **Date:** {md.text(info['date'])}",
            f"- **Machine:** {md.text(info['machine'])}",
            f"- **Command:** {_command(info['command'])}",
        ]
    )
    return f"{facts}\n\n{tables.render(data)}"


def _command(command: str) -> str:
    """The command as code when it is a plain command line; its explanation, in parentheses, as text."""
    if command.startswith("not recorded"):
        return md.text(command)
    cmd, _, note = command.partition(" (")
    return md.code(cmd) + (f" ({md.text(note)}" if note else "")


def section(name: str, results: Path = RESULTS) -> str:
    info = provenance(results / PROVENANCE.name).get(name) or {}
    title = info.get("title") or name
    return f"## {md.text(title)} {{#{anchor(name)}}}\n\n{body(name, results)}"


def page(results: Path = RESULTS) -> str:
    names = result_files(results)
    known = provenance(results / PROVENANCE.name)
    index = md.table(
        ["file", "what it measures", "date"],
        [
            [
                f"[`{n}`](#{anchor(n)})",
                md.cell(known.get(n, {}).get("title", "")),
                md.cell(known.get(n, {}).get("date", "")),
            ]
            for n in names
        ],
    )
    head = [
        "# All results",
        f"Generated at build time from the {len(names)} files in `infra/benchmarks/results/` by "
        "`infra/docs/results.py`, with their provenance from `infra/benchmarks/results/provenance.yaml`. Dates are "
        "the day each file was committed; a machine or command the file and the documentation do not record says "
        f'"not recorded". Alike branches of a result (old and new, first run and re-run, ...) are compared side by '
        "side, one row per measure and one column per branch. Tables show at most "
        f"{tables.MAX_ROWS} rows (comparisons {tables.MAX_PIVOT_ROWS}) and lists at most {tables.MAX_VALUES} values; "
        "logs are shown as their line count; the JSON files hold everything.",
        index,
    ]
    return "\n\n".join([*head, *(section(n, results) for n in names)]) + "\n"


def replace_markers(markdown: str, page_uri: str, results: Path = RESULTS) -> str:
    """``markdown`` with each ``<!-- dr:results NAME.json -->`` line replaced by that file's tables."""

    def one(match: re.Match) -> str:
        try:
            link = posixpath.relpath(PAGE, posixpath.dirname(page_uri) or ".") if page_uri != PAGE else ""
            return body(match.group(1), results, link=link)
        except UnknownResult as exc:
            raise UnknownResult(f"{page_uri}: <!-- dr:results {match.group(1)} -->: {exc}") from None

    return MARKER.sub(one, markdown)
