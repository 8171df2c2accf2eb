"""``--track tensorboard``: a run's GRPO updates and rounds as TensorBoard event files, for those who watch runs there.

Where: ``DR_TENSORBOARD_DIR`` when set, else ``<store>/tensorboard`` for a local store (``~/.cache/dynamicrubric/
tensorboard`` for an S3 store); ``tensorboard --logdir`` that folder. Under it, ``<run-id>/r<t>-<role>`` holds one
update's per-step scalars under TRL's own names (its ``log_history``, the same series ``--track mlflow`` logs,
written when the update ends), and ``<run-id>/<kind>`` the round's figures at step t (``kind``: coevolve, round,
stale-fresh).

Nothing twice: an update's folder carries a marker with its checkpoint's fingerprint, written last; a folder with the
same marker is left as it is, any other (an interrupted write, an earlier checkpoint) is rewritten whole. A round's
figures are written once per round (a marker per round). A folder that cannot be written is one warning line, and
the run goes on untracked.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dr_core.runs.tracking import Tracker, Warn, _finite, local_dir, step_metrics
from dr_core.store.errors import short_cause

MARKER = ".dr-logged"


def tensorboard_dir(store_url: str) -> Path:
    """``DR_TENSORBOARD_DIR``, else ``<store>/tensorboard`` (local store) or the cache's (S3 store)."""
    if os.environ.get("DR_TENSORBOARD_DIR"):
        return Path(os.environ["DR_TENSORBOARD_DIR"]).expanduser().resolve()
    return local_dir(store_url, "tensorboard")


class TensorBoardTracker(Tracker):
    """Event files under ``root`` (module docstring); the first failure warns once and turns it off."""

    enabled = True

    def __init__(self, root: Path, warn: Warn):
        self.root, self.warn = Path(root), warn
        self._run: Path | None = None
        self._kind = ""

    def start(self, run_id: str, kind: str, params: Mapping[str, Any]) -> None:
        self._guard(self._start, run_id, kind)

    def log_update(self, round_no: int, role: str, ref: Any, settings: Mapping[str, Any] | None = None) -> None:
        if self._run is not None:
            self._guard(self._log_update, round_no, role, ref)

    def log_round(self, round_no: int, metrics: Mapping[str, float | None]) -> None:
        if self._run is not None:
            self._guard(self._log_round, round_no, metrics)

    def _guard(self, fn, *args) -> None:
        try:
            fn(*args)
        except Exception as e:  # tracking must never fail the run
            self.warn(f"TensorBoard tracking off: {self.root} failed ({short_cause(e)}); the run goes on untracked")
            self._run = None

    def _start(self, run_id: str, kind: str) -> None:
        self._run, self._kind = self.root / run_id, kind
        self._run.mkdir(parents=True, exist_ok=True)

    def _log_update(self, round_no: int, role: str, ref: Any) -> None:
        folder = self._run / f"r{round_no}-{role}"
        marker = folder / MARKER
        if marker.is_file() and marker.read_text(encoding="utf-8") == ref.fingerprint:
            return  # this checkpoint's steps are there already
        shutil.rmtree(folder, ignore_errors=True)  # an interrupted write, or an earlier checkpoint's steps
        with _writer(folder) as w:
            for key, points in step_metrics(ref.trl_log).items():
                for step, value in points:
                    w.add_scalar(key, value, step)
        marker.write_text(ref.fingerprint, encoding="utf-8")

    def _log_round(self, round_no: int, metrics: Mapping[str, float | None]) -> None:
        folder = self._run / self._kind
        marker = folder / f".dr-round-{round_no}"
        if marker.is_file():
            return
        with _writer(folder, suffix=f".round{round_no}") as w:
            for key, value in metrics.items():
                if _finite(value):
                    w.add_scalar(key, float(value), round_no)
        marker.write_text("", encoding="utf-8")


def _writer(folder: Path, suffix: str = ""):
    from torch.utils.tensorboard import SummaryWriter

    folder.mkdir(parents=True, exist_ok=True)
    return SummaryWriter(log_dir=str(folder), filename_suffix=suffix)
