"""Stage "commit", the last: a scored batch and its answers persisted, and what the service has answered, by request
id, so a retry is answered once. The worker (``batcher``) calls ``Ledger.commit`` with the scored sets
(``scoring``) and their answers (``answers``); the ledger makes the rows and writes them, and stores each answer as
it is given (it makes no answer). The intake reads ``get`` (replays) and ``group_scored``.

Commit protocol of a batch (``commit``): its rows go to ``samples``, ``rubrics``, ``verdicts``, ``scores`` and
``rewards`` as one part file each, named by the batch; the ``requests`` part of the same name is written last and
is the commit record. At start (``open``) the ledger reads every ``requests`` row of its run id (request ids with
their fingerprints, groups and batches; the groups scored) and removes the parts of batches that have no
``requests`` part (a process killed mid-batch), so a set is stored once: the clients' retries score it again, into
the same set id.

Memory: per request id answered, its fingerprint, group and batch name (a few hundred bytes); the answers themselves
only for the ``recent_answers`` most recently given or replayed. An older answer is read back from its batch's
``requests`` part when it is asked for again (one small file).

One service process per run id: the sweep would remove another live writer's parts in progress.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Callable, NamedTuple, Sequence

from dr_core.constants import UNSCORABLE
from dr_core.store.artifacts import Store
from dr_core.store.rows import RequestRow, RewardRow, Row, SampleRow, ScoreRow, rubric_rows, verdict_rows

if TYPE_CHECKING:
    from dr_core.evaluator.items import ScoredRubric
    from dr_core.service.metrics import Metrics
    from dr_core.service.scoring import ScoredSet

STAGE = "service"
ROUND = 0
LINEAGE_TABLES = ("samples", "rubrics", "verdicts", "scores", "rewards")
COMMIT_TABLE = "requests"

Log = Callable[[str], None]


@dataclass(frozen=True)
class Answered:
    answer: dict
    fingerprint: str
    group_id: str | None


class _Entry(NamedTuple):
    fingerprint: str
    group_id: str | None
    batch: str  # the part that holds its answer


class Ledger:
    """Answers by request id, and the group ids already scored. Thread-safe. ``metrics``: the seconds each commit
    spends writing are counted (``dr_stage_seconds_total``, stage ``store``). ``recent_answers``: answers kept in
    memory (older ones are read back from the store)."""

    def __init__(
        self,
        store: Store,
        run_id: str,
        log: Log = lambda _m: None,
        metrics: Metrics | None = None,
        recent_answers: int = 10_000,
    ):
        self.store, self.run_id, self.log, self.metrics = store, run_id, log, metrics
        self.recent_answers = recent_answers
        self._index: dict[str, _Entry] = {}
        self._recent: OrderedDict[str, dict] = OrderedDict()
        self._groups: set[str] = set()
        self._lock = threading.Lock()
        self.swept: list[str] = []

    # -- start-up ---------------------------------------------------------------------------------------------
    def open(self) -> "Ledger":
        """Load what was answered and sweep uncommitted batches."""
        keys = {"run_id": self.run_id, "round": ROUND}
        committed = {_part(u) for u in self.store.parts(COMMIT_TABLE, **keys)}
        for table in LINEAGE_TABLES:
            for uri in self.store.parts(table, **keys):
                if _part(uri) not in committed:
                    self.store.remove(uri)
                    self.swept.append(uri)
        if self.swept:
            self.log(
                f"removed {len(self.swept)} part file(s) of {len({_part(u) for u in self.swept})} batch(es) "
                "that did not commit (their requests are answered again when retried)"
            )
        t = self.store.read_table(COMMIT_TABLE, **keys)
        batches: dict[str, str] = {}  # one string per batch name
        for row in t.select(["request_id", "fingerprint", "group_id", "batch"]).to_pylist():
            batch = batches.setdefault(row["batch"], row["batch"])
            self._index[row["request_id"]] = _Entry(row["fingerprint"], row["group_id"], batch)
            if row["group_id"] is not None:
                self._groups.add(row["group_id"])
        return self

    # -- lookups ----------------------------------------------------------------------------------------------
    def get(self, request_id: str) -> Answered | None:
        """The answer given to ``request_id`` (None: none was), from memory or read back from its batch's part."""
        with self._lock:
            entry = self._index.get(request_id)
            if entry is None:
                return None
            answer = self._recent.get(request_id)
            if answer is not None:
                self._recent.move_to_end(request_id)
        if answer is None:  # read back: the whole batch's answers are remembered (a retried batch asks for them all)
            part = self.store.read(self.store.uri_for(COMMIT_TABLE, entry.batch, run_id=self.run_id, round=ROUND))
            rows = {r["request_id"]: r["answer_json"] for r in part.select(["request_id", "answer_json"]).to_pylist()}
            answer = json.loads(rows.pop(request_id))
            with self._lock:
                for rid, text in rows.items():
                    if rid not in self._recent:
                        self._remember(rid, json.loads(text))
                self._remember(request_id, answer)
        return Answered(answer, entry.fingerprint, entry.group_id)

    def _remember(self, request_id: str, answer: dict) -> None:
        self._recent[request_id] = answer
        self._recent.move_to_end(request_id)
        while len(self._recent) > self.recent_answers:
            self._recent.popitem(last=False)

    def group_scored(self, group_id: str) -> bool:
        with self._lock:
            return group_id in self._groups

    def __len__(self) -> int:
        return len(self._index)

    # -- commit -----------------------------------------------------------------------------------------------
    def commit(self, scored: Sequence[ScoredSet], answered: dict[str, dict], generator: str, verifier: str) -> None:
        """Write a batch (lineage parts, then its ``requests`` part) and record ``answered`` ({request id: answer},
        one per member). A failed write removes what this batch wrote and raises (nothing is recorded)."""
        batch = f"b{datetime.now(timezone.utc):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:10]}"
        started = time.perf_counter()
        try:
            self._write(batch, scored, answered, generator, verifier)
        finally:
            if self.metrics is not None:
                self.metrics.inc("dr_stage_seconds_total", time.perf_counter() - started, stage="store")
        fp = {m.request_id: (m.fingerprint, m.group_id) for s in scored for m in s.job.members}
        with self._lock:
            for rid, ans in answered.items():
                self._index[rid] = _Entry(*fp[rid], batch)
                self._remember(rid, ans)
                if fp[rid][1] is not None:
                    self._groups.add(fp[rid][1])

    def _write(
        self, batch: str, scored: Sequence[ScoredSet], answered: dict[str, dict], generator: str, verifier: str
    ) -> None:
        keys = {"run_id": self.run_id, "round": ROUND}
        written: list[str] = []
        try:
            for table, rows in lineage_rows(scored, generator, verifier).items():
                if rows:
                    written.append(self.store.write(table, rows, part=batch, **keys))
            self.store.write(COMMIT_TABLE, request_rows(batch, scored, answered), part=batch, **keys)
        except BaseException:
            for uri in written:
                try:
                    self.store.remove(uri)
                except Exception:  # the start-up sweep removes it later
                    pass
            raise


# -- the rows of a batch -----------------------------------------------------------------------------------------------


def prompt_id(prompt: str) -> str:
    """The stored id of a prompt (``samples.prompt_id``; the intake names OpenRLHF groups by it too)."""
    return "p" + hashlib.sha256(prompt.encode()).hexdigest()[:16]


def lineage_rows(scored: Sequence[ScoredSet], generator: str, verifier: str) -> dict[str, list[Row]]:
    """Rows of samples, rubrics, verdicts, scores and rewards for a batch (the pipeline's tables, stage
    ``service``; set_id from the set key; the writer adds run_id and round). The ``requests`` rows come from
    ``request_rows``."""
    rows: dict[str, list[Row]] = {t: [] for t in LINEAGE_TABLES}
    for s in scored:
        set_id, pid = s.job.set_id, prompt_id(s.job.prompt)
        for k, text in enumerate(s.job.responses):
            rows["samples"].append(SampleRow(STAGE, set_id, pid, k, "external", text, None, None))
        for rollout, r in enumerate(s.rubrics):
            _rollout_rows(rows, set_id, rollout, r, len(s.job.responses), generator, verifier)
    return rows


def _rollout_rows(
    rows: dict[str, list[Row]],
    set_id: int,
    rollout: int,
    r: ScoredRubric,
    n_responses: int,
    generator: str,
    verifier: str,
) -> None:
    """One rollout's rubric items (one row with the error when it has no rubric), verdicts, scores and R_disc."""
    g = r.generation
    items = None if g.rubric is None else list(zip(g.rubric.criteria, g.rubric.weights))
    rows["rubrics"] += rubric_rows(STAGE, set_id, rollout, generator, items, g.error)
    if items is not None:
        for k, verdict_row in enumerate(r.verdicts or []):
            rows["verdicts"] += verdict_rows(STAGE, set_id, rollout, "C", k, verdict_row, verifier)
    for k in range(n_responses):
        score = r.scores[k] if r.scores is not None else UNSCORABLE
        rows["scores"].append(ScoreRow(STAGE, set_id, rollout, "C", k, score))
    rows["rewards"].append(RewardRow(STAGE, set_id, rollout, r.r_disc, None, None, None, None))


def request_rows(batch: str, scored: Sequence[ScoredSet], answered: dict[str, dict]) -> list[RequestRow]:
    """One ``requests`` row per member: the commit record of the batch (written last). Its answer is stored as
    given (``answer_json``), with the two fields the table keeps as columns (``reward``, ``rubric_id``)."""
    rows = []
    for s in scored:
        for m in s.job.members:
            ans = answered[m.request_id]
            reward = ans.get("reward") if m.index is not None else None
            rows.append(
                RequestRow(
                    STAGE,
                    s.job.set_id,
                    batch,
                    m.request_id,
                    m.route,
                    m.group_id,
                    m.index,
                    reward,
                    ans["rubric_id"],
                    m.received_at,
                    s.job.prompt,
                    m.fingerprint,
                    json.dumps(ans, ensure_ascii=False),
                )
            )
    return rows


def _part(uri: str) -> str:
    return uri.rsplit("/", 1)[-1].removesuffix(".parquet")
