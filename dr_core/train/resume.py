"""Checkpoints and resume of one GRPO update (``dr_core.train.grpo``), and the reward history and rollout records it
keeps on disk so that a resumed run reports the whole run.

TRL saves ``out_dir/checkpoints/checkpoint-N`` every ``save_steps``; a new call with the same ``out_dir`` resumes
from the newest checkpoint whose ``trainer_state.json`` exists (it is written last). The reward history is appended
to ``out_dir/history.jsonl`` so a resumed run reports the whole run. Likewise every rollout record goes to
``out_dir/records.jsonl`` as it is handed to ``on_rollouts``: a resumed call first hands ``on_rollouts`` the records
of the steps before its checkpoint (those after it are done again), and a call that finds the finished model
(``dr_core.train.publish``) hands it every record of the run, so ``on_rollouts`` always sees each rollout of the
whole run exactly once per call (replayed records come back from JSON: tuples as lists). With several processes
rank R > 0 keeps its own ``history.rank<R>.jsonl`` and ``records.rank<R>.jsonl``.

    python -c "from dr_core.train.resume import last_checkpoint; print(last_checkpoint('/tmp/none'))"
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from dr_core.store.atomic import write_atomic
from dr_core.train.rows import OnRollouts

CHECKPOINTS_DIR = "checkpoints"
HISTORY_FILE = "history.jsonl"
RECORDS_FILE = "records.jsonl"


def last_checkpoint(checkpoints_dir: str | Path) -> Path | None:
    """The newest ``checkpoint-N`` whose ``trainer_state.json`` (written last by transformers) exists."""
    d = Path(checkpoints_dir)
    if not d.is_dir():
        return None
    done = [
        p for p in d.glob("checkpoint-*") if p.name.split("-")[-1].isdigit() and (p / "trainer_state.json").is_file()
    ]
    return max(done, key=lambda p: int(p.name.split("-")[-1])) if done else None


def _rank() -> int:
    return int(os.environ.get("RANK", "0"))


def history_path(out_dir: Path, rank: int | None = None) -> Path:
    """The reward history of rank ``rank`` (default: this process's, ``RANK``)."""
    rank = _rank() if rank is None else rank
    return out_dir / (HISTORY_FILE if rank == 0 else f"history.rank{rank}.jsonl")


def records_path(out_dir: Path) -> Path:
    """This process's rollout records."""
    rank = _rank()
    return out_dir / (RECORDS_FILE if rank == 0 else f"records.rank{rank}.jsonl")


def read_jsonl(path: Path) -> list[dict]:
    """The entries of a JSON-lines file we append to; a last line torn by a crash mid-append is left out."""
    if not path.is_file():
        return []
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    out = []
    for i, line in enumerate(lines):
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            if i < len(lines) - 1:
                raise
    return out


def _load_history(out_dir: Path, before_step: int) -> list[dict]:
    """History of earlier calls up to the resumed step (later entries are re-done after the resume)."""
    return [e for e in read_jsonl(history_path(out_dir)) if e["step"] < before_step]


def _jsonable(value):
    return value.item() if hasattr(value, "item") else str(value)


class PersistedRecords:
    """``on_rollouts`` that first appends the records to a JSON-lines file, then hands them on."""

    def __init__(self, path: Path, initial: list[dict], downstream: OnRollouts | None):
        self.path, self.downstream = path, downstream
        write_atomic(path, "".join(json.dumps(r, default=_jsonable) + "\n" for r in initial))  # as the history

    def __call__(self, records: list[dict]) -> None:
        with self.path.open("a", encoding="utf-8") as fh:
            fh.writelines(json.dumps(r, default=_jsonable) + "\n" for r in records)
        if self.downstream is not None:
            self.downstream(records)


class PersistedHistory(list):
    """A list that also appends each entry to a JSON-lines file (so a resumed run reports the whole run)."""

    def __init__(self, path: Path, initial: list[dict]):
        super().__init__(initial)
        self.path = path
        # rewritten whole and atomically: a crash here must not lose the entries of the steps before the resume
        write_atomic(path, "".join(json.dumps(e) + "\n" for e in initial))

    def append(self, entry: dict) -> None:
        super().append(entry)
        with self.path.open("a") as fh:
            fh.write(json.dumps(entry) + "\n")


def replay_records(reward, out_dir: Path, before_step: int | None) -> list[dict]:
    """Hand ``reward.on_rollouts`` the saved records of an earlier call (all of them, or those of the steps before
    ``before_step``) and return them."""
    saved = read_jsonl(records_path(out_dir))
    if before_step is not None:
        saved = [r for r in saved if r["step"] < before_step]
    if saved and getattr(reward, "on_rollouts", None) is not None:
        reward.on_rollouts(saved)
    return saved


def resume_run(reward, out_dir: Path) -> tuple[Path | None, int]:
    """The checkpoint to resume from (None: a fresh run) and its global step (0 when fresh). Gives ``reward`` a
    history and an ``on_rollouts`` that persist what they get, after replaying the records of the steps before the
    checkpoint."""
    checkpoint = last_checkpoint(out_dir / CHECKPOINTS_DIR)
    resumed_step = json.loads((checkpoint / "trainer_state.json").read_text())["global_step"] if checkpoint else 0
    reward.history = PersistedHistory(history_path(out_dir), _load_history(out_dir, resumed_step) if checkpoint else [])
    earlier = replay_records(reward, out_dir, resumed_step) if checkpoint else []
    reward.on_rollouts = PersistedRecords(records_path(out_dir), earlier, reward.on_rollouts)
    return checkpoint, resumed_step
