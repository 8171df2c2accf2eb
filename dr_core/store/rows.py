"""Typed, frozen rows: one class per artifact table, checked against the table's schema (``schemas.TABLES``).

- When the class is defined: its fields are the table's columns in schema order, less any partition keys the
  writer adds from its keys (``run_id``, ``round`` of the run tables), or it is a TypeError.
- When a row is built: every value is of its column's type (str, int, float, bool, datetime; an int is not a
  bool), and None only where the column is nullable, or it is a ValueError naming the table, the field and the value.

A row is also a read-only mapping (``row["item"]``, ``{**row}``, ``dict(row)``), so the code that reads rows as
dicts reads these unchanged, and ``schemas.to_arrow`` stores ``dict(row)``: the same values a dict row held, so the
stored bytes are the same.

    >>> SampleRow("measure", 0, "p0", 0, "policy@0", "hi", None, 2)["response"]
    'hi'
"""

from __future__ import annotations

import datetime as dt
import numbers
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, Callable, ClassVar, TypeVar

import pyarrow as pa

from dr_core.store.schemas import TABLES

R = TypeVar("R", bound="Row")


def _is_int(v: Any) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _is_float(v: Any) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def _checker(typ: pa.DataType) -> tuple[str, Callable[[Any], bool]]:
    """(type name, check) for a value of a column of arrow type ``typ``."""
    if pa.types.is_string(typ):
        return "str", lambda v: isinstance(v, str)
    if pa.types.is_boolean(typ):
        return "bool", lambda v: isinstance(v, bool)
    if pa.types.is_integer(typ):
        return "int", _is_int
    if pa.types.is_floating(typ):
        return "float", _is_float
    if pa.types.is_timestamp(typ):
        return "datetime", lambda v: isinstance(v, dt.datetime)
    raise TypeError(f"no typed-row check for arrow type {typ}")


class Row(Mapping):
    """The base of the typed rows; subclasses are made with ``@table_row("<table>")``."""

    TABLE: ClassVar[str]
    _NAMES: ClassVar[tuple[str, ...]]
    _CHECKS: ClassVar[tuple[tuple[str, bool, str, Callable[[Any], bool]], ...]]

    def __post_init__(self) -> None:
        for name, nullable, type_name, ok in self._CHECKS:
            v = getattr(self, name)
            if v is None:
                if not nullable:
                    raise ValueError(f"{self.TABLE}.{name}: None in a required column")
            elif not ok(v):
                raise ValueError(f"{self.TABLE}.{name}: expected {type_name}, got {type(v).__name__} {v!r:.80}")

    def __getitem__(self, key: str) -> Any:
        if key not in self._NAMES:
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._NAMES)

    def __len__(self) -> int:
        return len(self._NAMES)


def table_row(table: str) -> Callable[[type[R]], type[R]]:
    """Make ``cls`` (annotated fields, in the table's column order) a frozen dataclass row of ``table``."""

    def make(cls: type[R]) -> type[R]:
        cls = dataclass(frozen=True, eq=True)(cls)
        spec = TABLES[table]
        names = tuple(f.name for f in fields(cls))
        want = tuple(c for c in spec.columns if c in names or c not in spec.partition_by)
        if names != want:
            raise TypeError(f"{cls.__name__}: fields {names} are not table {table!r}'s columns {want}")
        checks = []
        for name in names:
            field = spec.schema.field(name)
            checks.append((name, field.nullable, *_checker(field.type)))
        cls.TABLE, cls._CHECKS, cls._NAMES = table, tuple(checks), names
        return cls

    return make


@table_row("runs")
class RunRow(Row):
    """One execution record of a run: its status, its typed config as JSON and the code version it ran."""

    run_id: str
    created_at: dt.datetime
    status: str
    config_json: str | None
    code_version: str | None


@table_row("prompts")
class IngestedPromptRow(Row):
    """One prompt of an ingested prompt set (``baseline``: a saved reference answer, if the file has one)."""

    dataset: str
    prompt_id: str
    prompt: str
    baseline: str | None


@table_row("anchors")
class AnchorRow(Row):
    """One ranked response of a prompt's anchor list (rank 1 = best; ``score`` the ranking's own, if any)."""

    dataset: str
    prompt_id: str
    prompt: str
    rank: int
    response: str
    source: str
    score: float | None


@table_row("samples")
class SampleRow(Row):
    """One sampled response of the set ``set_id`` (position ``response_idx``)."""

    stage: str
    set_id: int
    prompt_id: str
    response_idx: int
    policy_ckpt: str
    response: str
    prompt_tokens: int | None
    response_tokens: int | None


@table_row("rubrics")
class RubricRow(Row):
    """One rubric item of rollout ``rollout`` for set ``set_id``; item, criterion and weight None (and ``error``
    set) for a rollout that gave no usable rubric."""

    stage: str
    set_id: int
    generator_ckpt: str
    rollout: int
    item: int | None
    criterion: str | None
    weight: int | None
    error: str | None


@table_row("verdicts")
class VerdictRow(Row):
    """The verifier's yes/no (None: unscorable) for one rubric item on one target response (``target`` "C":
    ``response`` is the index in the set; "anchor": the anchor's rank)."""

    stage: str
    set_id: int
    rollout: int
    item: int
    target: str
    response: int
    verdict: bool | None
    verifier: str


@table_row("scores")
class ScoreRow(Row):
    """The Eq. 12 score of one target response under one rubric rollout (None: unscorable)."""

    stage: str
    set_id: int
    rollout: int
    target: str
    response: int
    score: float | None


@table_row("rewards")
class RewardRow(Row):
    """One GRPO rollout's R_disc (Eq. 13), R_anchor (Eq. 15) and advantages (Eq. 24-25); None where unscorable."""

    stage: str
    set_id: int
    rollout: int
    r_disc: float | None
    r_anchor: float | None
    adv_disc: float | None
    adv_anchor: float | None
    advantage: float | None


@table_row("eval")
class EvalRow(Row):
    """One metric of a benchmark for a checkpoint (``verifier``: the judge; ``seed`` -1 for a metric over all
    seeds); ``value`` None when it could not be computed."""

    benchmark: str
    checkpoint: str
    verifier: str | None
    seed: int
    metric: str
    value: float | None


@table_row("steps")
class StepRow(Row):
    """One flow step of one flow run (``execution``): its state, start, wall seconds and the flow process's peak
    resident memory meanwhile (MB); seconds None while Running."""

    execution: str
    flow: str
    step: str
    state: str
    started_at: dt.datetime
    seconds: float | None
    peak_rss_mb: float | None


@table_row("requests")
class RequestRow(Row):
    """One answered reward-service request: the set it was scored in, its response there (None: a whole-set
    request), the reward given (None: unscorable) and the exact answer sent (JSON)."""

    stage: str
    set_id: int
    batch: str
    request_id: str
    route: str
    group_id: str | None
    response_idx: int | None
    reward: float | None
    rubric_id: str | None
    received_at: dt.datetime
    prompt: str
    fingerprint: str
    answer_json: str


@table_row("checkpoints")
class CheckpointRow(Row):
    """One registered checkpoint of ``role`` (generator | policy) with its parent and update metrics (JSON)."""

    role: str
    uri: str
    parent: str | None
    metrics_json: str | None
    created_at: dt.datetime | None


def anchor_rows(dataset: str, ranked: Iterable, ranks: Callable[[int], Iterable[int]] | None = None) -> list[AnchorRow]:
    """The anchors rows of ranked lists (``dr_core.datasets`` ranked rows: id, prompt, responses best first, source,
    scores or None): every rank, or ``ranks(len(responses))`` of each list."""
    return [
        AnchorRow(dataset, r.id, r.prompt, k, r.responses[k - 1], r.source, r.scores[k - 1] if r.scores else None)
        for r in ranked
        for k in (ranks(len(r.responses)) if ranks else range(1, len(r.responses) + 1))
    ]


def rubric_rows(
    stage: str, set_id: int, rollout: int, generator: str, items: Sequence[tuple[str, int]] | None, error: str | None
) -> list[RubricRow]:
    """One rollout's rubric: a row per (criterion, weight) of ``items``, or one row with ``error`` when it gave no
    usable rubric (``items`` None)."""
    if items is None:
        return [RubricRow(stage, set_id, generator, rollout, None, None, None, error)]
    return [RubricRow(stage, set_id, generator, rollout, m, c, w, None) for m, (c, w) in enumerate(items)]


def verdict_rows(
    stage: str, set_id: int, rollout: int, target: str, response: int, verdicts: Sequence, verifier: str
) -> list[VerdictRow]:
    """A row per rubric item's verdict on one response (item = position in ``verdicts``; None stays None:
    unscorable; any other value is its truth)."""
    return [
        VerdictRow(stage, set_id, rollout, m, target, response, None if v is None else bool(v), verifier)
        for m, v in enumerate(verdicts)
    ]
