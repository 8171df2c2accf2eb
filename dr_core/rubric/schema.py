"""Rubric schema, the JSON schema for structured generation, and a total parser of model output.

A rubric is a list of weighted yes/no criteria (paper section 3.4): items (r_m, w_m) with integer w_m in
WEIGHT_MIN..WEIGHT_MAX (1..5). ``RubricModel`` (pydantic) is the one declaration of its shape and bounds (the bounds
themselves are constants of ``dr_core.constants``): ``RUBRIC_JSON_SCHEMA`` / ``rubric_json_schema`` (structured
generation, also the generator's tighter schema in ``dr_core.rubric.prompts``), the parser's item checks and
``RubricItem`` all derive from it. ``parse_rubric(text)`` turns any model output into either a valid ``Rubric`` or
a ``RubricError`` that says precisely why not (``ParseFailure``). ``UNSCORABLE`` (``dr_core.constants``, re-exported
here) is the single "could not score" value used everywhere.

Two modes:
- strict (default): for grammar-constrained output (vLLM structured outputs); any defect rejects the rubric.
- ``recover=True``: for free-form rollouts (GRPO generation is not grammar-constrained): every complete item is
  kept, from JSON (truncated JSON included) or from ``[w] criterion`` lines; what could not be used is counted in
  ``Rubric.dropped``. A rollout with no recoverable item is still a failure.

    python -c "from dr_core.rubric.schema import parse_rubric; print(parse_rubric('{\\"rubrics\\": []}'))"
"""

from __future__ import annotations

import enum
import json
import re
from dataclasses import dataclass, field, replace
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dr_core.constants import (
    MAX_CRITERION_CHARS,
    MAX_ITEMS,
    UNSCORABLE,  # noqa: F401  (re-exported: defined in dr_core.constants)
    WEIGHT_MAX,
    WEIGHT_MIN,
)


class RubricItemModel(BaseModel):
    """One criterion as a generator writes it. With ``RubricModel``, the one declaration of the rubric's shape and
    bounds: the JSON schema for structured generation, the parser's item checks and ``RubricItem`` derive from it."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    criterion: Annotated[str, Field(min_length=1, max_length=MAX_CRITERION_CHARS)]
    weight: Annotated[int, Field(ge=WEIGHT_MIN, le=WEIGHT_MAX)]


class RubricModel(BaseModel):
    """A rubric as a generator writes it: ``{"rubrics": [{"criterion": ..., "weight": ...}, ...]}``."""

    model_config = ConfigDict(extra="forbid", strict=True)

    rubrics: Annotated[list[RubricItemModel], Field(min_length=1, max_length=MAX_ITEMS)]


def _plain_schema(node, defs: dict):
    """``node`` with every ``$ref`` inlined and pydantic's annotations (``title``, ``description`` from docstrings)
    dropped: the plain schema engines are sent, as it was written by hand before the model existed."""
    if isinstance(node, list):
        return [_plain_schema(x, defs) for x in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        return _plain_schema(defs[node["$ref"].rsplit("/", 1)[-1]], defs)
    out = {}
    for key, value in node.items():
        if key in ("title", "description", "$defs"):
            continue
        out[key] = (
            {name: _plain_schema(v, defs) for name, v in value.items()}
            if key == "properties"
            else _plain_schema(value, defs)
        )
    return out


def rubric_json_schema(*, max_items: int | None = None, max_criterion_chars: int | None = None) -> dict:
    """The JSON schema of ``RubricModel`` for structured generation (refs inlined, no titles), optionally with a
    tighter item count or criterion length. Bounds looser than the model's are refused: a grammar-constrained
    output must always parse."""
    raw = RubricModel.model_json_schema()
    schema = _plain_schema(raw, raw.get("$defs", {}))
    rubrics = schema["properties"]["rubrics"]
    criterion = rubrics["items"]["properties"]["criterion"]
    for bound, holder, key in ((max_items, rubrics, "maxItems"), (max_criterion_chars, criterion, "maxLength")):
        if bound is None:
            continue
        if not 1 <= bound <= holder[key]:
            raise ValueError(f"{key} {bound} is not within the rubric model's 1..{holder[key]}")
        holder[key] = bound
    return schema


#: JSON schema for structured rubric generation: bounded so that a grammar-constrained output always fits.
RUBRIC_JSON_SCHEMA: dict = rubric_json_schema()


class ParseFailure(str, enum.Enum):
    """Why a model output is not a usable rubric."""

    EMPTY_OUTPUT = "empty_output"
    TRUNCATED_JSON = "truncated_json"
    NOT_JSON = "not_json"
    WRONG_SHAPE = "wrong_shape"
    EMPTY_LIST = "empty_list"
    TOO_MANY_ITEMS = "too_many_items"
    MISSING_FIELD = "missing_field"
    EMPTY_CRITERION = "empty_criterion"
    CRITERION_TOO_LONG = "criterion_too_long"
    WEIGHT_NOT_INTEGER = "weight_not_integer"
    WEIGHT_OUT_OF_RANGE = "weight_out_of_range"
    DUPLICATE_CRITERIA = "duplicate_criteria"
    NO_RECOVERABLE_ITEM = "no_recoverable_item"


@dataclass(frozen=True)
class RubricItem:
    criterion: str
    weight: int

    def __post_init__(self):
        if not isinstance(self.criterion, str) or not self.criterion.strip():
            raise ValueError("criterion is empty")
        RubricItemModel(criterion=self.criterion, weight=self.weight)  # a pydantic ValidationError is a ValueError


@dataclass(frozen=True)
class Rubric:
    items: tuple[RubricItem, ...]
    #: items seen in the output but not usable (recover mode only)
    dropped: int = 0

    @property
    def weights(self) -> list[int]:
        return [it.weight for it in self.items]

    @property
    def criteria(self) -> list[str]:
        return [it.criterion for it in self.items]

    def to_json(self) -> str:
        return json.dumps({"rubrics": [{"criterion": c, "weight": w} for c, w in zip(self.criteria, self.weights)]})


@dataclass(frozen=True)
class RubricError:
    reason: ParseFailure
    detail: str = ""
    dropped: int = field(default=0)

    def __str__(self) -> str:
        return f"{self.reason.value}: {self.detail}" if self.detail else self.reason.value


def _norm(criterion: str) -> str:
    return " ".join(criterion.lower().split()).rstrip(".")


def _check_item(obj, index: int) -> RubricItem | RubricError:
    """``obj`` checked against ``RubricItemModel`` (other keys ignored); the first defect names the failure."""
    if not isinstance(obj, dict):
        return RubricError(ParseFailure.WRONG_SHAPE, f"item {index} is not an object")
    for key in RubricItemModel.model_fields:
        if key not in obj:
            return RubricError(ParseFailure.MISSING_FIELD, f"item {index} has no '{key}'")
    crit, weight = obj["criterion"], obj["weight"]
    if isinstance(crit, str) and not crit.strip():  # the model's minLength counts spaces; a blank criterion is empty
        return RubricError(ParseFailure.EMPTY_CRITERION, f"item {index}")
    whole = int(weight) if isinstance(weight, float) and weight.is_integer() else weight  # JSON's 3.0 is 3
    try:
        RubricItemModel(criterion=crit, weight=whole)
    except ValidationError as exc:
        err = exc.errors()[0]  # in field order: the criterion's defect before the weight's
        if err["loc"][0] == "criterion":
            if err["type"] == "string_too_long":
                limit = err["ctx"]["max_length"]
                return RubricError(ParseFailure.CRITERION_TOO_LONG, f"item {index}: {len(crit)} > {limit} chars")
            return RubricError(ParseFailure.EMPTY_CRITERION, f"item {index}")
        if err["type"] == "int_type":
            return RubricError(ParseFailure.WEIGHT_NOT_INTEGER, f"item {index}: weight {weight!r}")
        return RubricError(
            ParseFailure.WEIGHT_OUT_OF_RANGE, f"item {index}: weight {weight} not in {WEIGHT_MIN}..{WEIGHT_MAX}"
        )
    return RubricItem(crit.strip(), whole)


def _is_cut_json(body: str) -> bool:
    """True when ``body`` opens a JSON value that the text ends before closing (a generation cut by max_tokens)."""
    if body[:1] not in "{[":
        return False
    depth, in_str, escaped = 0, False, False
    for ch in body:
        if in_str:
            if ch == '"' and not escaped:
                in_str = False
            escaped = not escaped and ch == "\\"
            continue
        if ch == '"':
            in_str = True
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
    return in_str or depth > 0


def _strict(text: str) -> Rubric | RubricError:
    body = text.strip()
    if body.startswith("```"):  # tolerate a fenced block; the content must still be exact JSON
        body = re.sub(r"^```[a-zA-Z]*\s*|\s*```$", "", body)
    try:
        data = json.loads(body)
    except json.JSONDecodeError as exc:
        reason = ParseFailure.TRUNCATED_JSON if _is_cut_json(body) else ParseFailure.NOT_JSON
        return RubricError(reason, str(exc))
    items = data.get("rubrics") if isinstance(data, dict) else data if isinstance(data, list) else None
    if not isinstance(items, list):
        return RubricError(ParseFailure.WRONG_SHAPE, 'expected {"rubrics": [...]} or a list of items')
    if not items:
        return RubricError(ParseFailure.EMPTY_LIST)
    if len(items) > MAX_ITEMS:
        return RubricError(ParseFailure.TOO_MANY_ITEMS, f"{len(items)} > {MAX_ITEMS}")
    parsed: list[RubricItem] = []
    seen: set[str] = set()
    for i, obj in enumerate(items):
        item = _check_item(obj, i)
        if isinstance(item, RubricError):
            return item
        key = _norm(item.criterion)
        if key in seen:
            return RubricError(ParseFailure.DUPLICATE_CRITERIA, f"item {i}: {item.criterion!r}")
        seen.add(key)
        parsed.append(item)
    return Rubric(tuple(parsed))


_JSON_ITEM = re.compile(
    r'\{\s*"criterion"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"weight"\s*:\s*(-?\d+(?:\.\d+)?)\s*\}'
    r'|\{\s*"weight"\s*:\s*(-?\d+(?:\.\d+)?)\s*,\s*"criterion"\s*:\s*"((?:[^"\\]|\\.)*)"\s*\}'
)
_LINE_ITEM = re.compile(
    r"^\s*(?:[-*]|\d+[.)])?\s*\[\s*(?:w(?:eight)?\s*[:=]?\s*)?(-?\d+)\s*\]\s*(.+?)\s*$", re.I | re.M
)
_ITEM_START = re.compile(r'\{\s*"(?:criterion|weight)"|^\s*(?:[-*]|\d+[.)])?\s*\[', re.M)


def _recover(text: str) -> Rubric | RubricError:
    candidates: list[tuple[str, float]] = []
    for m in _JSON_ITEM.finditer(text):
        crit = m.group(1) if m.group(1) is not None else m.group(4)
        weight = m.group(2) if m.group(2) is not None else m.group(3)
        try:
            crit = json.loads(f'"{crit}"')
        except json.JSONDecodeError:
            continue
        candidates.append((crit, float(weight)))
    if not candidates:
        candidates = [(m.group(2), float(m.group(1))) for m in _LINE_ITEM.finditer(text)]
    starts = len(_ITEM_START.findall(text))
    items: list[RubricItem] = []
    seen: set[str] = set()
    for i, (crit, weight) in enumerate(candidates):
        item = _check_item({"criterion": crit, "weight": int(weight) if weight.is_integer() else weight}, i)
        if isinstance(item, RubricError) or _norm(item.criterion) in seen or len(items) >= MAX_ITEMS:
            continue
        seen.add(_norm(item.criterion))
        items.append(item)
    dropped = max(starts, len(candidates)) - len(items)
    if not items:
        return RubricError(ParseFailure.NO_RECOVERABLE_ITEM, f"{dropped} unusable item(s)", dropped=dropped)
    return Rubric(tuple(items), dropped=dropped)


def parse_rubric(text: str | None, *, recover: bool = False) -> Rubric | RubricError:
    """Parse a generator's output into a ``Rubric``, or a ``RubricError`` naming the defect. Never raises."""
    if text is None or not text.strip():
        return RubricError(ParseFailure.EMPTY_OUTPUT)
    strict = _strict(text)
    if isinstance(strict, Rubric) or not recover:
        return strict
    return _recover(text)


def parse_free_rubric(text: str | None, truncated: bool = False) -> Rubric | RubricError:
    """A rubric written without a grammar (a GRPO rollout, or the 'lines' format), every complete item kept
    (``recover`` mode). ``truncated``: the text was cut by the token limit, so its last line stops mid-criterion and is
    not an item, though it would still match the ``[w] criterion`` shape; it is counted in ``dropped``. (A cut JSON
    item is never recovered anyway.)"""
    if text is None or not truncated or text.endswith("\n"):
        return parse_rubric(text, recover=True)
    whole, _, cut = text.rpartition("\n")
    parsed = parse_rubric(whole, recover=True)
    return replace(parsed, dropped=parsed.dropped + (1 if cut.strip() else 0))


def format_rubric_lines(rubric: Rubric) -> str:
    """The plain ``[w] criterion`` line format (what ``recover`` mode also reads), for prompts and reports."""
    return "\n".join(f"[{it.weight}] {it.criterion}" for it in rubric.items)
