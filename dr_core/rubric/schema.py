"""Rubric schema, the JSON schema for structured generation, and a total parser of model output.

A rubric is a list of weighted yes/no criteria (paper section 3.4): items (r_m, w_m) with integer w_m in 1..5.
``parse_rubric(text)`` turns any model output into either a valid ``Rubric`` or a ``RubricError`` that says
precisely why not (``ParseFailure``). ``UNSCORABLE`` is the single "could not score" value used everywhere.

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
from dataclasses import dataclass, field

#: The one "could not score" value: a missing verdict, an empty or malformed rubric. Never 0.0.
UNSCORABLE = None

WEIGHT_MIN, WEIGHT_MAX = 1, 5
MAX_ITEMS = 12
MAX_CRITERION_CHARS = 300

#: JSON schema for structured rubric generation: bounded so that a grammar-constrained output always fits.
RUBRIC_JSON_SCHEMA: dict = {
    "type": "object",
    "properties": {
        "rubrics": {
            "type": "array",
            "minItems": 1,
            "maxItems": MAX_ITEMS,
            "items": {
                "type": "object",
                "properties": {
                    "criterion": {"type": "string", "minLength": 1, "maxLength": MAX_CRITERION_CHARS},
                    "weight": {"type": "integer", "minimum": WEIGHT_MIN, "maximum": WEIGHT_MAX},
                },
                "required": ["criterion", "weight"],
                "additionalProperties": False,
            },
        }
    },
    "required": ["rubrics"],
    "additionalProperties": False,
}


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
        if not isinstance(self.weight, int) or isinstance(self.weight, bool):
            raise ValueError(f"weight must be an integer, got {self.weight!r}")
        if not WEIGHT_MIN <= self.weight <= WEIGHT_MAX:
            raise ValueError(f"weight must be in {WEIGHT_MIN}..{WEIGHT_MAX}, got {self.weight}")
        if not self.criterion.strip():
            raise ValueError("criterion is empty")


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
    if not isinstance(obj, dict):
        return RubricError(ParseFailure.WRONG_SHAPE, f"item {index} is not an object")
    for key in ("criterion", "weight"):
        if key not in obj:
            return RubricError(ParseFailure.MISSING_FIELD, f"item {index} has no '{key}'")
    crit, weight = obj["criterion"], obj["weight"]
    if not isinstance(crit, str) or not crit.strip():
        return RubricError(ParseFailure.EMPTY_CRITERION, f"item {index}")
    if len(crit) > MAX_CRITERION_CHARS:
        return RubricError(ParseFailure.CRITERION_TOO_LONG, f"item {index}: {len(crit)} > {MAX_CRITERION_CHARS} chars")
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or int(weight) != weight:
        return RubricError(ParseFailure.WEIGHT_NOT_INTEGER, f"item {index}: weight {weight!r}")
    if not WEIGHT_MIN <= weight <= WEIGHT_MAX:
        return RubricError(ParseFailure.WEIGHT_OUT_OF_RANGE, f"item {index}: weight {weight} not in 1..5")
    return RubricItem(crit.strip(), int(weight))


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
        return RubricError(ParseFailure.WRONG_SHAPE, "expected {\"rubrics\": [...]} or a list of items")
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
_LINE_ITEM = re.compile(r"^\s*(?:[-*]|\d+[.)])?\s*\[\s*(?:w(?:eight)?\s*[:=]?\s*)?(-?\d+)\s*\]\s*(.+?)\s*$", re.I | re.M)
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


def format_rubric_lines(rubric: Rubric) -> str:
    """The plain ``[w] criterion`` line format (what ``recover`` mode also reads), for prompts and reports."""
    return "\n".join(f"[{it.weight}] {it.criterion}" for it in rubric.items)
