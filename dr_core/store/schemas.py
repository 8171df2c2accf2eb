"""Artifact table schemas, declared once: every Parquet file the pipeline writes conforms to one of these.

A table is a name, a pyarrow schema and the columns it is partitioned by. Files live at
``<store>/<table>/<key>=<value>/.../<part>.parquet`` (hive layout); the partition columns are also stored inside
each file, so a file read alone by URI is self-describing. Run tables are partitioned by ``run_id`` and ``round``;
``runs`` by ``run_id`` only; the ingested inputs (``prompts``, ``anchors``) by ``dataset``.

Conventions:
- ``stage`` says which step of Algorithm 1 produced a row: ``generator`` (generator update), ``policy`` (policy
  update), ``measure`` (evaluation of the current policy's sets), ``stale`` / ``fresh`` (section 4.4: P(t-1)'s sets
  scored by the stale G(t-1) and by the fresh G(t); ``flows/stale_fresh.py``), or ``service`` (a set scored by the
  reward service, ``dr serve``; its ``requests`` rows say which HTTP request asked for it).
- ``set_id`` (int64) identifies a response set within (run_id, round, stage); ``rollout`` a rubric rollout of the
  generator for that set; ``item`` a rubric item (0-based); integers because DuckDB groups and counts them far
  faster than strings.
- ``target`` is ``C`` (a response of the policy set, ``response`` = index in the set) or ``anchor`` (a response
  of the ranked anchor list, ``response`` = anchor rank, 1 = best).
- Could-not-score is NULL (verdict, score, reward), never 0.

    python -c "from dr_core.store.schemas import TABLES; print(list(TABLES))"
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from dr_core.constants import STAGES, TRAINED_ROLES

TARGETS = ("C", "anchor")

RUN_KEYS = ("run_id", "round")


@dataclass(frozen=True)
class TableSpec:
    """One artifact table: its schema and the (ordered) columns that make up its directory partitions."""

    name: str
    schema: pa.Schema
    partition_by: tuple[str, ...]
    doc: str = ""

    @property
    def columns(self) -> list[str]:
        return self.schema.names


def _f(name: str, typ: pa.DataType, nullable: bool = False) -> pa.Field:
    return pa.field(name, typ, nullable=nullable)


_RUN = [_f("run_id", pa.string()), _f("round", pa.int32())]
_RUN_STAGE = [*_RUN, _f("stage", pa.string())]

_SPECS = [
    TableSpec(
        "runs",
        pa.schema(
            [
                _f("run_id", pa.string()),
                _f("created_at", pa.timestamp("us", tz="UTC")),
                _f("status", pa.string()),
                _f("config_json", pa.string(), True),
                _f("code_version", pa.string(), True),
            ]
        ),
        ("run_id",),
        "one row per run: its typed config as JSON and the code version it ran",
    ),
    TableSpec(
        "prompts",
        pa.schema(
            [
                _f("dataset", pa.string()),
                _f("prompt_id", pa.string()),
                _f("prompt", pa.string()),
                _f("baseline", pa.string(), True),
            ]
        ),
        ("dataset",),
        "one row per prompt of an ingested prompt set",
    ),
    TableSpec(
        "anchors",
        pa.schema(
            [
                _f("dataset", pa.string()),
                _f("prompt_id", pa.string()),
                _f("prompt", pa.string()),
                _f("rank", pa.int32()),
                _f("response", pa.string()),
                _f("source", pa.string()),
                _f("score", pa.float64(), True),
            ]
        ),
        ("dataset",),
        "one row per (prompt, ranked response); rank 1 = best (the paper's C_anchor)",
    ),
    TableSpec(
        "samples",
        pa.schema(
            [
                *_RUN_STAGE,
                _f("set_id", pa.int64()),
                _f("prompt_id", pa.string()),
                _f("response_idx", pa.int32()),
                _f("policy_ckpt", pa.string()),
                _f("response", pa.string()),
                _f("prompt_tokens", pa.int32(), True),
                _f("response_tokens", pa.int32(), True),
            ]
        ),
        RUN_KEYS,
        "one row per sampled response: the response sets C",
    ),
    TableSpec(
        "rubrics",
        pa.schema(
            [
                *_RUN_STAGE,
                _f("set_id", pa.int64()),
                _f("generator_ckpt", pa.string()),
                _f("rollout", pa.int32()),
                _f("item", pa.int32(), True),
                _f("criterion", pa.string(), True),
                _f("weight", pa.int8(), True),
                _f("error", pa.string(), True),
            ]
        ),
        RUN_KEYS,
        "one row per rubric item; a rollout that gave no usable rubric is one row with item NULL and error set",
    ),
    TableSpec(
        "verdicts",
        pa.schema(
            [
                *_RUN_STAGE,
                _f("set_id", pa.int64()),
                _f("rollout", pa.int32()),
                _f("item", pa.int32()),
                _f("target", pa.string()),
                _f("response", pa.int32()),
                _f("verdict", pa.bool_(), True),
                _f("verifier", pa.string()),
            ]
        ),
        RUN_KEYS,
        "one row per (rubric item, target response): yes/no, NULL when the verifier could not answer",
    ),
    TableSpec(
        "scores",
        pa.schema(
            [
                *_RUN_STAGE,
                _f("set_id", pa.int64()),
                _f("rollout", pa.int32()),
                _f("target", pa.string()),
                _f("response", pa.int32()),
                _f("score", pa.float64(), True),
            ]
        ),
        RUN_KEYS,
        "one row per (rubric rollout, target response): Eq. 12 score, NULL when unscorable",
    ),
    TableSpec(
        "rewards",
        pa.schema(
            [
                *_RUN_STAGE,
                _f("set_id", pa.int64()),
                _f("rollout", pa.int32()),
                _f("r_disc", pa.float64(), True),
                _f("r_anchor", pa.float64(), True),
                _f("adv_disc", pa.float64(), True),
                _f("adv_anchor", pa.float64(), True),
                _f("advantage", pa.float64(), True),
            ]
        ),
        RUN_KEYS,
        "one row per GRPO rollout: R_disc (Eq. 13), R_anchor (Eq. 15) and advantages (Eq. 24-25); a policy-update "
        "row is one completion (rollout = step x K + index) with its Eq. 21 advantage and no R_disc / R_anchor",
    ),
    TableSpec(
        "requests",
        pa.schema(
            [
                *_RUN_STAGE,
                _f("set_id", pa.int64()),
                _f("batch", pa.string()),
                _f("request_id", pa.string()),
                _f("route", pa.string()),
                _f("group_id", pa.string(), True),
                _f("response_idx", pa.int32(), True),
                _f("reward", pa.float64(), True),
                _f("rubric_id", pa.string(), True),
                _f("received_at", pa.timestamp("us", tz="UTC")),
                _f("prompt", pa.string()),
                _f("fingerprint", pa.string()),
                _f("answer_json", pa.string()),
            ]
        ),
        RUN_KEYS,
        "one row per answered reward-service request (stage service): the set it was scored in, its response in "
        "that set (NULL for a whole-set request), the reward given (NULL when unscorable) and the exact answer "
        "sent, so a retry of the same request id is answered the same after a restart",
    ),
    TableSpec(
        "checkpoints",
        pa.schema(
            [
                *_RUN,
                _f("role", pa.string()),
                _f("uri", pa.string()),
                _f("parent", pa.string(), True),
                _f("metrics_json", pa.string(), True),
                _f("created_at", pa.timestamp("us", tz="UTC"), True),
            ]
        ),
        RUN_KEYS,
        "one row per saved checkpoint (role generator | policy) with its parent checkpoint",
    ),
    TableSpec(
        "steps",
        pa.schema(
            [
                *_RUN,
                _f("execution", pa.string()),
                _f("flow", pa.string()),
                _f("step", pa.string()),
                _f("state", pa.string()),
                _f("started_at", pa.timestamp("us", tz="UTC")),
                _f("seconds", pa.float64(), True),
                _f("peak_rss_mb", pa.float64(), True),
            ]
        ),
        RUN_KEYS,
        "one row per flow step of one flow run (execution): Completed (ran), Cached (served from the cache), "
        "Failed, Running (written when it starts; NULL seconds) or Interrupted (left Running by a killed execution, "
        "so marked by the next one), with its wall seconds and the flow process's peak resident memory meanwhile "
        "(MB; NULL in rows written before it was recorded); every execution adds its own rows",
    ),
    TableSpec(
        "eval",
        pa.schema(
            [
                *_RUN,
                _f("benchmark", pa.string()),
                _f("checkpoint", pa.string()),
                _f("verifier", pa.string(), True),
                _f("seed", pa.int64()),
                _f("metric", pa.string()),
                _f("value", pa.float64(), True),
            ]
        ),
        RUN_KEYS,
        "one row per (benchmark, checkpoint, verifier, seed, metric); value NULL when it could not be computed",
    ),
]

TABLES: dict[str, TableSpec] = {s.name: s for s in _SPECS}


def spec(table: str) -> TableSpec:
    """The TableSpec of ``table``; ValueError naming the known tables otherwise."""
    try:
        return TABLES[table]
    except KeyError:
        raise ValueError(f"unknown table {table!r}; expected one of {', '.join(TABLES)}") from None


def conform(table: str, data) -> pa.Table:
    """Cast ``data`` (pyarrow Table, polars/pandas DataFrame, or list of row dicts) to ``table``'s schema.

    Columns are put in schema order; a missing nullable column is filled with NULL. Raises ValueError for an
    unknown or missing required column, a NULL in a required column, or a value outside the enumerations
    (stage, target, role).
    """
    ts = spec(table)
    t = to_arrow(data)
    if t.num_rows == 0 and t.num_columns == 0:
        return ts.schema.empty_table()
    extra = sorted(set(t.column_names) - set(ts.columns))
    if extra:
        raise ValueError(f"{table}: unknown column(s) {extra}; the schema has {ts.columns}")
    cols = []
    for field in ts.schema:
        if field.name in t.column_names:
            col = t.column(field.name)
            try:
                col = col.cast(field.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise ValueError(f"{table}.{field.name}: cannot cast {col.type} to {field.type}: {exc}") from None
        elif field.nullable:
            col = pa.nulls(t.num_rows, field.type)
        else:
            raise ValueError(f"{table}: required column {field.name!r} is missing")
        if not field.nullable and col.null_count:
            raise ValueError(f"{table}.{field.name}: {col.null_count} NULL value(s) in a required column")
        cols.append(col)
    out = pa.Table.from_arrays(cols, schema=ts.schema)
    _check_enums(table, out)
    return out


_ENUMS = {"stage": STAGES, "target": TARGETS, "role": TRAINED_ROLES}


def _check_enums(table: str, t: pa.Table) -> None:
    for name, allowed in _ENUMS.items():
        if name in t.column_names:
            bad = set(t.column(name).unique().to_pylist()) - set(allowed)
            if bad:
                raise ValueError(f"{table}.{name}: unexpected value(s) {sorted(bad)}; expected one of {allowed}")


def to_arrow(data) -> pa.Table:
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, list):  # of dicts, or of typed rows (dr_core.store.rows: read-only mappings)
        return pa.Table.from_pylist([r if isinstance(r, dict) else dict(r) for r in data])
    if hasattr(data, "to_arrow"):  # polars
        return data.to_arrow()
    if hasattr(data, "to_dict") and hasattr(data, "columns"):  # pandas
        return pa.Table.from_pandas(data, preserve_index=False)
    raise TypeError(f"cannot convert {type(data).__name__} to a pyarrow Table")
