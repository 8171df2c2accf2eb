"""Loaders for the JSON Lines formats the pipeline reads: ranked anchor lists, pairwise, best-of-N listwise,
response sets and policy-evaluation prompts.

Every loader validates the whole file before returning anything: the first malformed line raises ``DataError``
naming the file, the 1-based line number and the field, and nothing after it is read. Blank lines are skipped; a
UTF-8 byte order mark on the first line is allowed.

Besides each format's fields, every line must be plain, finite JSON: no ``NaN``/``Infinity`` tokens or numbers that
overflow to infinity (``1e400``), no integers longer than Python converts (``sys.get_int_max_str_digits()``), no
lone surrogates (``"\\ud800"``: not encodable as UTF-8), no key given twice, no nesting deeper than the parser
allows, all anywhere in the object (extra fields included), each reported with its field path (``scores[1]``).

    python -c "from dr_core.datasets import load_ranked; print(len(load_ranked('anchors.jsonl')))"
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass
from dataclasses import field as dc_field
from pathlib import Path
from typing import Callable, Iterator, TypeVar

from dr_core.errors import DRError

T = TypeVar("T")

FORMATS = ("ranked", "pairwise", "listwise", "sets", "prompts", "policy_eval", "verifiable", "answers")


class DataError(DRError, ValueError):
    """A malformed input line: says where (file, line, field) and what is wrong."""

    def __init__(self, path: str | Path, line: int, field: str | None, message: str):
        self.path, self.line, self.field, self.message = str(path), line, field, message
        # line 0: the whole file (cannot open, no examples, a missing id); the message stays printable whatever the
        # path or field hold (a file name that is not UTF-8, a key with a lone surrogate)
        where = (
            _printable(self.path) + (f":{line}" if line else "") + (f": field '{_printable(field)}'" if field else "")
        )
        super().__init__(f"{where}: {message}")


def _printable(text: str) -> str:
    """``text`` with what cannot be written as UTF-8 (lone surrogates) shown as backslash escapes."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


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
    """A prompt (policy evaluation, the round's prompts) with an optional fixed baseline answer; ``line`` is where it
    came from (0: not from a file), for errors found later (a baseline answer missing)."""

    id: str
    prompt: str
    baseline: str | None = None
    line: int = dc_field(default=0, compare=False)


@dataclass(frozen=True)
class AnswerRow:
    """A saved answer to a prompt of a data file, matched by ``id`` (``dr eval-policy --policy/--baseline FILE``)."""

    id: str
    answer: str
    line: int = dc_field(default=0, compare=False)


@dataclass(frozen=True)
class VerifiableRow:
    """A prompt with a known reference answer (verifiable tasks: dr_core/evaluator/answers.py). ``id`` defaults to
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
        for i, x in enumerate(scores):
            if isinstance(x, bool) or not isinstance(x, (int, float)):
                raise ln.err(f"scores[{i}]", f"expected a number, got {type(x).__name__}")
            if isinstance(x, int) and not _fits_float(x):
                raise ln.err(f"scores[{i}]", "number too large for a float (not finite)")
        scores = tuple(float(x) for x in scores)
        if any(a < b for a, b in zip(scores, scores[1:])):
            raise ln.err("scores", "responses must be ranked best first (scores non-increasing)")
    return RankedList(ln.id(), ln.str("prompt"), responses, ln.str("source", required=False), scores)


def _pair(ln: _Line) -> Pair:
    return Pair(ln.id(), ln.str("prompt"), ln.str("chosen"), ln.str("rejected"), ln.str("subset", required=False))


def _listwise(ln: _Line) -> Listwise:
    return Listwise(
        ln.id(), ln.str("prompt"), ln.str("best"), ln.str_list("others", 1), ln.str("category", required=False)
    )


def _set(ln: _Line) -> ResponseSet:
    return ResponseSet(ln.id(), ln.str("prompt"), ln.str_list("responses", 1))


def _prompt(ln: _Line) -> PromptRow:
    baseline = ln.str("baseline", required=False, default=None) if "baseline" in ln.obj else None
    return PromptRow(ln.id(), ln.str("prompt"), baseline, ln.lineno)


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


def _answer(ln: _Line) -> AnswerRow:
    return AnswerRow(ln.id(), ln.str("answer", nonempty=False), ln.lineno)


_PARSERS: dict[str, Callable[[_Line], object]] = {
    "ranked": _ranked,
    "pairwise": _pair,
    "listwise": _listwise,
    "sets": _set,
    "prompts": _prompt,
    "policy_eval": _prompt,
    "verifiable": _verifiable,
    "answers": _answer,
}


def _fits_float(n: int) -> bool:
    try:
        return math.isfinite(float(n))
    except OverflowError:
        return False


class _Bad:
    """What the JSON parser puts where a value cannot be kept (a NaN token, an overflowing number, an integer too long
    to convert): ``_problem`` finds it with its field path."""

    __slots__ = ("why",)

    def __init__(self, why: str):
        self.why = why


def _short(token: str) -> str:
    return token if len(token) <= 24 else f"{token[:12]}...{token[-6:]} ({len(token)} characters)"


def _parse_constant(token: str) -> _Bad:  # NaN, Infinity, -Infinity: not JSON, json.loads accepts them
    return _Bad(f"{token} is not a finite number (JSON has no NaN or Infinity)")


def _parse_float(token: str) -> float | _Bad:
    value = float(token)
    return value if math.isfinite(value) else _Bad(f"{_short(token)} overflows to infinity (not a finite number)")


def _parse_int(token: str) -> int | _Bad:
    try:
        return int(token)
    except ValueError:  # longer than sys.get_int_max_str_digits()
        return _Bad(f"integer {_short(token)} is too long (more than {sys.get_int_max_str_digits()} digits)")


class _DuplicateKey(DRError):
    pass


def _object(pairs: list[tuple[str, object]]) -> dict:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen = set()
        for k, _ in pairs:
            if k in seen:
                raise _DuplicateKey(k)
            seen.add(k)
    return obj


def _lone_surrogate(text: str) -> str | None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"lone surrogate {text[exc.start]!r} at character {exc.start + 1}: not valid Unicode text"
    return None


def _problem(obj) -> tuple[str | None, str] | None:
    """(field path, why) of the first value in document order that ``_Line`` must not see: a ``_Bad`` number or
    a string (value or key) with a lone surrogate. Iterative: objects nest as deep as the parser allowed."""
    stack: list[tuple[str, object]] = [("", obj)]
    while stack:
        where, v = stack.pop()
        if isinstance(v, _Bad):
            return where or None, v.why
        if isinstance(v, str):
            why = _lone_surrogate(v)
            if why:
                return where or None, why
        elif isinstance(v, dict):
            items = list(v.items())
            for k, _ in items:
                why = _lone_surrogate(k)
                if why:
                    return (f"{where}.{k}" if where else k), f"key has a {why}"
            stack.extend((f"{where}.{k}" if where else k, x) for k, x in reversed(items))
        elif isinstance(v, list):
            stack.extend((f"{where}[{i}]", v[i]) for i in reversed(range(len(v))))
    return None


def parse_line(path: str | Path, lineno: int, raw: str) -> dict:
    """One JSON Lines line as a dict, or DataError(path, lineno, field, why): invalid or non-object JSON, a value
    that is not plain finite JSON (NaN, Infinity, 1e400, an integer too long, a lone surrogate), a duplicate key,
    nesting too deep. Usable by any reader of user JSONL."""
    try:
        obj = json.loads(
            raw,
            parse_constant=_parse_constant,
            parse_float=_parse_float,
            parse_int=_parse_int,
            object_pairs_hook=_object,
        )
    except json.JSONDecodeError as exc:
        raise DataError(path, lineno, None, f"invalid JSON ({exc.msg} at column {exc.colno})") from None
    except _DuplicateKey as exc:
        raise DataError(path, lineno, exc.args[0], "key given twice in one object") from None
    except RecursionError:
        raise DataError(path, lineno, None, "invalid JSON (nested too deeply)") from None
    if not isinstance(obj, dict):
        raise DataError(path, lineno, None, f"expected a JSON object, got {_json_type(obj)}")
    bad = _problem(obj)
    if bad:
        raise DataError(path, lineno, *bad)
    return obj


def _json_type(v) -> str:
    if isinstance(v, _Bad):
        return "a number that is not finite"
    return {
        list: "an array",
        str: "a string",
        bool: "a boolean",
        int: "a number",
        float: "a number",
        type(None): "null",
    }.get(type(v), type(v).__name__)


def _iter_objects(path: Path) -> Iterator[_Line]:
    """The file's non-blank lines as ``_Line``s. Read as bytes and decoded line by line, so a byte that is not UTF-8
    is reported on its own line."""
    try:
        fh = path.open("rb")
    except OSError as exc:
        raise DataError(path, 0, None, f"cannot open: {exc.strerror}") from None
    with fh:
        for lineno, data in enumerate(fh, start=1):
            if lineno == 1 and data.startswith(b"\xef\xbb\xbf"):  # a UTF-8 byte order mark
                data = data[3:]
            try:
                raw = data.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise DataError(
                    path,
                    lineno,
                    None,
                    f"not UTF-8 text (byte 0x{data[exc.start]:02x} at byte {exc.start + 1} of the line)",
                ) from None
            if not raw.strip():
                continue
            yield _Line(path, lineno, parse_line(path, lineno, raw))


def iter_lines(path: str | Path) -> Iterator[tuple[int, dict]]:
    """(1-based line number, object) of every non-blank line of a JSONL file, each checked as ``parse_line`` checks
    it (DataError naming the line otherwise): for readers of formats defined elsewhere (dr_core/ifeval/checks.py)."""
    for ln in _iter_objects(Path(path)):
        yield ln.lineno, ln.obj


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
