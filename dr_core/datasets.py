"""Loaders for the JSON Lines formats the pipeline reads: ranked anchor lists, pairwise, best-of-N listwise,
response sets and policy-evaluation prompts.

Every loader validates the whole file before returning anything: the first malformed line raises ``DataError``
naming the file, the 1-based line number and the field, and nothing after it is read. Blank lines are skipped.

    python -c "from dr_core.datasets import load_ranked; print(len(load_ranked('anchors.jsonl')))"
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, TypeVar

T = TypeVar("T")

FORMATS = ("ranked", "pairwise", "listwise", "sets", "prompts", "policy_eval", "verifiable")


class DataError(ValueError):
    """A malformed input line: says where (file, line, field) and what is wrong."""

    def __init__(self, path: str | Path, line: int, field: str | None, message: str):
        self.path, self.line, self.field, self.message = str(path), line, field, message
        where = f"{self.path}:{line}" + (f": field '{field}'" if field else "")
        super().__init__(f"{where}: {message}")


@dataclass(frozen=True)
class RankedList:
    """A prompt with a fully ranked response list, best first (paper's C_anchor)."""

    id: str
    prompt: str
    responses: tuple[str, ...]
    source: str = ""
    scores: tuple[float, ...] | None = None


@dataclass(frozen=True)
class Pair:
    id: str
    prompt: str
    chosen: str
    rejected: str
    subset: str = ""


@dataclass(frozen=True)
class Listwise:
    id: str
    prompt: str
    best: str
    others: tuple[str, ...]
    category: str = ""


@dataclass(frozen=True)
class ResponseSet:
    id: str
    prompt: str
    responses: tuple[str, ...]


@dataclass(frozen=True)
class PromptRow:
    id: str
    prompt: str
    baseline: str | None = None


@dataclass(frozen=True)
class VerifiableRow:
    """A prompt with a known reference answer (verifiable tasks: dr_core/answers.py). ``id`` defaults to
    ``line-N``; ``line`` is where it came from, for errors found later (a reference its task cannot read)."""

    id: str
    prompt: str
    answer: str
    line: int = 0


class _Line:
    """Field access for one JSON object, raising DataError with the location."""

    def __init__(self, path, lineno, obj):
        self.path, self.lineno, self.obj = path, lineno, obj

    def err(self, field, msg):
        return DataError(self.path, self.lineno, field, msg)

    def str(self, field, *, required=True, nonempty=True, default=""):
        if field not in self.obj:
            if required:
                raise self.err(field, "missing")
            return default
        v = self.obj[field]
        if not isinstance(v, str):
            raise self.err(field, f"expected a string, got {type(v).__name__}")
        if nonempty and not v.strip():
            raise self.err(field, "empty string")
        return v

    def id(self):
        v = self.obj.get("id")
        if isinstance(v, int) and not isinstance(v, bool):
            return str(v)
        return self.str("id")

    def str_list(self, field, min_len):
        if field not in self.obj:
            raise self.err(field, "missing")
        v = self.obj[field]
        if not isinstance(v, list):
            raise self.err(field, f"expected a list of strings, got {type(v).__name__}")
        if len(v) < min_len:
            raise self.err(field, f"expected at least {min_len} responses, got {len(v)}")
        for i, x in enumerate(v):
            if not isinstance(x, str) or not x.strip():
                raise self.err(f"{field}[{i}]", "expected a non-empty string")
        return tuple(v)


def _ranked(ln: _Line) -> RankedList:
    responses = ln.str_list("responses", 2)
    scores = ln.obj.get("scores")
    if scores is not None:
        if not isinstance(scores, list) or len(scores) != len(responses):
            raise ln.err("scores", f"expected a list of {len(responses)} numbers (one per response)")
        if any(isinstance(s, bool) or not isinstance(s, (int, float)) for s in scores):
            raise ln.err("scores", "expected numbers")
        if any(a < b for a, b in zip(scores, scores[1:])):
            raise ln.err("scores", "responses must be ranked best first (scores non-increasing)")
        scores = tuple(float(s) for s in scores)
    return RankedList(ln.id(), ln.str("prompt"), responses, ln.str("source", required=False), scores)


def _pair(ln: _Line) -> Pair:
    return Pair(ln.id(), ln.str("prompt"), ln.str("chosen"), ln.str("rejected"), ln.str("subset", required=False))


def _listwise(ln: _Line) -> Listwise:
    return Listwise(ln.id(), ln.str("prompt"), ln.str("best"), ln.str_list("others", 1), ln.str("category", required=False))


def _set(ln: _Line) -> ResponseSet:
    return ResponseSet(ln.id(), ln.str("prompt"), ln.str_list("responses", 1))


def _prompt(ln: _Line) -> PromptRow:
    baseline = ln.str("baseline", required=False, default=None) if "baseline" in ln.obj else None
    return PromptRow(ln.id(), ln.str("prompt"), baseline)


def _verifiable(ln: _Line) -> VerifiableRow:
    ans = ln.obj.get("answer")
    if isinstance(ans, (int, float)) and not isinstance(ans, bool):
        ans = str(ans)
    elif "answer" in ln.obj:
        ans = ln.str("answer")
    else:
        raise ln.err("answer", "missing")
    row_id = ln.id() if "id" in ln.obj else f"line-{ln.lineno}"
    return VerifiableRow(row_id, ln.str("prompt"), ans, ln.lineno)


_PARSERS: dict[str, Callable[[_Line], object]] = {
    "ranked": _ranked,
    "pairwise": _pair,
    "listwise": _listwise,
    "sets": _set,
    "prompts": _prompt,
    "policy_eval": _prompt,
    "verifiable": _verifiable,
}


def _iter_objects(path: Path) -> Iterator[_Line]:
    try:
        fh = path.open(encoding="utf-8")
    except OSError as exc:
        raise DataError(path, 0, None, f"cannot open: {exc.strerror}") from None
    with fh:
        lineno = 0
        try:
            for lineno, raw in enumerate(fh, start=1):
                if not raw.strip():
                    continue
                try:
                    obj = json.loads(raw)
                except json.JSONDecodeError as exc:
                    raise DataError(path, lineno, None, f"invalid JSON ({exc.msg} at column {exc.colno})") from None
                if not isinstance(obj, dict):
                    raise DataError(path, lineno, None, f"expected a JSON object, got {type(obj).__name__}")
                yield _Line(path, lineno, obj)
        except UnicodeDecodeError:
            raise DataError(path, lineno + 1, None, "not UTF-8 text") from None


def load(path: str | Path, fmt: str, limit: int | None = None) -> list:
    """Load and validate a JSONL file of format ``fmt`` (one of FORMATS). ``limit`` keeps the first N rows but still
    validates the whole file, so a run never starts on a file that is bad further down. Duplicate ids are refused."""
    if fmt not in _PARSERS:
        raise ValueError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")
    path = Path(path)
    parse = _PARSERS[fmt]
    rows, seen = [], {}
    for ln in _iter_objects(path):
        row = parse(ln)
        if row.id in seen:
            raise DataError(path, ln.lineno, "id", f"duplicate id {row.id!r} (first on line {seen[row.id]})")
        seen[row.id] = ln.lineno
        rows.append(row)
    if not rows:
        raise DataError(path, 0, None, "no examples in file")
    return rows[:limit] if limit else rows


def load_ranked(path, limit=None) -> list[RankedList]:
    return load(path, "ranked", limit)


def load_pairwise(path, limit=None) -> list[Pair]:
    return load(path, "pairwise", limit)


def load_listwise(path, limit=None) -> list[Listwise]:
    return load(path, "listwise", limit)


def load_sets(path, limit=None) -> list[ResponseSet]:
    return load(path, "sets", limit)


def load_prompts(path, limit=None) -> list[PromptRow]:
    return load(path, "prompts", limit)
