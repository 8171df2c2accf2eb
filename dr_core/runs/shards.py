"""Shards of a round's model steps, by prompt: which prompts a shard holds, and the checks of a merge.

A round with ``RoundConfig.scale.shards = N`` splits its prompts, in order, into N contiguous shards whose sizes
differ by at most one (``bounds``). Shard ``i`` samples the sets of its prompts (set ids stay the prompts' positions
in the round), writes rubrics for those sets and verifies them; each shard is a task of its own (tasks/round.py)
that writes its own Parquet part, is cached and retried on its own, and can run on another Ray worker. A merge
puts the parts back together in shard order (``merge``), after checking that every shard is there once, that each
part holds the rows its task reported, and that every set lies in its own shard's range (``ShardError`` otherwise).
Because the in-process vLLM engine seeds each request from its own prompt (dr_core/engines/vllm_engine.py), the
merged rows are the rows of the unsharded round: the same Parquet bytes, so the steps after the merge hit the same
cache either way.

    python -c "from dr_core.runs.shards import bounds; print(bounds(10, 3))"    # [(0, 4), (4, 7), (7, 10)]
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from pydantic import BaseModel, ConfigDict, Field

from dr_core.errors import DRError

Rows = list[dict]


class ShardError(DRError, ValueError):
    """A merge that cannot be trusted: a shard is missing or twice, a part lost rows, a set in the wrong shard."""


def bounds(n: int, shards: int) -> list[tuple[int, int]]:
    """[start, stop) of each shard over ``n`` prompts in order; sizes differ by at most one, none is empty."""
    if shards < 1 or shards > n:
        raise ShardError(f"cannot split {n} prompts into {shards} shards (1 <= shards <= prompts)")
    size, extra = divmod(n, shards)
    out, start = [], 0
    for i in range(shards):
        stop = start + size + (1 if i < extra else 0)
        out.append((start, stop))
        start = stop
    return out


class Shard(BaseModel):
    """Shard ``index`` of ``count`` of a model step. The unsharded step is shard 0 of 1 (``Shard()``): it holds every
    prompt, and its task writes the step's own table part; a shard of several writes its own part for the merge."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    index: int = Field(0, ge=0)
    count: int = Field(1, ge=1)

    @classmethod
    def all(cls, count: int) -> list[Shard]:
        """Every shard of a step split ``count`` ways."""
        return [cls(index=i, count=count) for i in range(count)]

    @property
    def whole(self) -> bool:
        """The step unsplit: shard 0 of 1."""
        return self.count == 1

    def span(self, n: int) -> tuple[int, int]:
        """[start, stop) of this shard's prompts among ``n``."""
        return bounds(n, self.count)[self.index]

    def label(self, step: str) -> str:
        """The shard's name in the step log: ``<step>/shard-<i>``."""
        return f"{step}/shard-{self.index}"

    def activity(self, what: str) -> str:
        """The progress line's name: ``sample`` for the whole step, ``sample 2/3`` for a shard."""
        return what if self.whole else f"{what} {self.index + 1}/{self.count}"


def in_shard(rows: Iterable[dict], span: Sequence[int]) -> Rows:
    """The rows whose ``set_id`` lies in ``span`` ([start, stop)), in their order."""
    lo, hi = span
    return [r for r in rows if lo <= r["set_id"] < hi]


def ordered(refs: Sequence[dict | None], shards: int, what: str) -> list[dict]:
    """The shard references in shard order, each of the ``shards`` shards checked to be there exactly once. A
    reference carries ``shard`` and ``shards`` (tasks/round.py)."""
    got: dict[int, dict] = {}
    for ref in refs:
        if ref is None:
            continue
        i = ref.get("shard")
        if ref.get("shards") != shards or not isinstance(i, int) or not 0 <= i < shards:
            raise ShardError(
                f"{what}: a part says it is shard {i} of {ref.get('shards')}, expected one of {shards}: "
                f"{ref.get('uri')}"
            )
        if i in got:
            raise ShardError(f"{what}: shard {i} of {shards} is there twice ({got[i].get('uri')}, {ref.get('uri')})")
        got[i] = ref
    missing = [i for i in range(shards) if i not in got]
    if missing:
        raise ShardError(
            f"{what}: shard{'s' * (len(missing) > 1)} {missing} of {shards} missing: the merge needs "
            "every shard (re-run the flow: finished shards come from the cache)"
        )
    return [got[i] for i in range(shards)]


def merge(parts: Sequence[Rows], refs: Sequence[dict], what: str, *, every_set: bool) -> Rows:
    """The shards' rows concatenated in shard order, after checking each part against its reference: its row count
    (``rows``) and that every set id lies in the shard's ``sets`` range. ``every_set``: each set of the range must
    have rows (samples, rubrics; verdicts need not: a set whose rubric failed has none)."""
    out: Rows = []
    for rows, ref in zip(parts, refs, strict=True):
        lo, hi = ref["sets"]
        if len(rows) != ref["rows"]:
            raise ShardError(
                f"{what}: shard {ref['shard']} ({ref['uri']}) holds {len(rows)} rows, its task wrote {ref['rows']}"
            )
        outside = sorted({r["set_id"] for r in rows if not lo <= r["set_id"] < hi})
        if outside:
            raise ShardError(f"{what}: shard {ref['shard']} holds sets {outside[:5]} outside its range [{lo}, {hi})")
        if every_set:
            absent = sorted(set(range(lo, hi)) - {r["set_id"] for r in rows})
            if absent:
                raise ShardError(f"{what}: shard {ref['shard']} has no rows for sets {absent[:5]}")
        out.extend(rows)
    return out


def add_costs(costs: Iterable[dict | None]) -> dict | None:
    """The shards' step costs summed (numbers added, nested dicts such as per-endpoint counters merged key by key);
    None when no shard reported one."""
    total: dict | None = None
    for cost in costs:
        if cost is None:
            continue
        total = _add(total or {}, cost)
    return total


def _add(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        if isinstance(v, dict):
            out[k] = _add(out.get(k) or {}, v)
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out[k] = out.get(k, 0) + v
        else:
            out.setdefault(k, v)
    return out
