"""What the service has answered, by request id, kept in the store so a retry is answered once.

Commit protocol of a batch (``commit``): its rows go to ``samples``, ``rubrics``, ``verdicts``, ``scores`` and
``rewards`` as one part file each, named by the batch; the ``requests`` part of the same name is written last and
is the commit record. At start (``open``) the ledger reads every ``requests`` row of its run id (answers, groups
scored) and removes the parts of batches that have no ``requests`` part (a process killed mid-batch), so a set is
stored once: the clients' retries score it again, into the same set id.

One service process per run id: the sweep would remove another live writer's parts in progress.
"""

from __future__ import annotations

import json
import threading
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Callable, Sequence

from dr_core.service.scoring import ROUND, ScoredSet, answers, lineage_rows, request_rows
from dr_core.store.artifacts import Store

LINEAGE_TABLES = ("samples", "rubrics", "verdicts", "scores", "rewards")
COMMIT_TABLE = "requests"

Log = Callable[[str], None]


@dataclass(frozen=True)
class Answered:
    answer: dict
    fingerprint: str
    group_id: str | None


class Ledger:
    """Answers by request id, and the group ids already scored. Thread-safe."""

    def __init__(self, store: Store, run_id: str, log: Log = lambda _m: None):
        self.store, self.run_id, self.log = store, run_id, log
        self._answers: dict[str, Answered] = {}
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
        for row in t.select(["request_id", "fingerprint", "group_id", "answer_json"]).to_pylist():
            self._answers[row["request_id"]] = Answered(
                json.loads(row["answer_json"]), row["fingerprint"], row["group_id"]
            )
            if row["group_id"] is not None:
                self._groups.add(row["group_id"])
        return self

    # -- lookups ----------------------------------------------------------------------------------------------
    def get(self, request_id: str) -> Answered | None:
        with self._lock:
            return self._answers.get(request_id)

    def group_scored(self, group_id: str) -> bool:
        with self._lock:
            return group_id in self._groups

    def __len__(self) -> int:
        return len(self._answers)

    # -- commit -----------------------------------------------------------------------------------------------
    def commit(self, scored: Sequence[ScoredSet], generator: str, verifier: str) -> dict[str, dict]:
        """Write a batch (lineage parts, then its ``requests`` part) and record its answers; returns them.
        A failed write removes what this batch wrote and raises (nothing is answered)."""
        batch = f"b{datetime.now(timezone.utc):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:10]}"
        answered: dict[str, dict] = {}
        for s in scored:
            answered.update(answers(self.run_id, s))
        keys = {"run_id": self.run_id, "round": ROUND}
        written: list[str] = []
        try:
            for table, rows in lineage_rows(self.run_id, scored, generator, verifier).items():
                if rows:
                    written.append(self.store.write(table, rows, part=batch, **keys))
            self.store.write(COMMIT_TABLE, request_rows(self.run_id, batch, scored, answered), part=batch, **keys)
        except BaseException:
            for uri in written:
                try:
                    self.store.remove(uri)
                except Exception:  # the start-up sweep removes it later
                    pass
            raise
        fp = {m.request_id: (m.fingerprint, m.group_id) for s in scored for m in s.job.members}
        with self._lock:
            for rid, ans in answered.items():
                self._answers[rid] = Answered(ans, *fp[rid])
                if fp[rid][1] is not None:
                    self._groups.add(fp[rid][1])
        return answered


def _part(uri: str) -> str:
    return uri.rsplit("/", 1)[-1].removesuffix(".parquet")
