"""Experiment tracking of a run in MLflow (``--track mlflow``): one parent run per execution of ``dr coevolve``,
``dr round`` or ``dr stale-fresh``, and under a co-evolution run one nested run per GRPO update.

Where it logs: ``MLFLOW_TRACKING_URI`` when it is set (a shared server: ``http://mlflow.internal:5000``), otherwise a
SQLite file beside the artifact store: ``<store>/mlflow/mlflow.db`` for a local store (artifacts in
``<store>/mlflow/artifacts``), ``~/.cache/dynamicrubric/mlflow/`` for an S3 store. Experiment ``dynamicrubric``
(``MLFLOW_EXPERIMENT_NAME`` overrides it).

What it logs:

- the parent run (tags ``dr.run_id``, ``dr.kind``): the resolved configuration as params; per round t (step t) the
  round's figures (R_disc, R_anchor, the Eq. 2 gap, the evaluator's accuracy, the win rate, the signal checks as 1/0);
  the run's table and signal checks as the artifacts ``summary.md`` and ``signals.md``;
- one nested run per update (tags ``dr.round``, ``dr.role``, ``dr.checkpoint``, ``dr.fingerprint``; run name
  ``r<t>-<role>``): the role's GRPO settings as params, and per GRPO step TRL's own log under TRL's names
  (``reward``, ``reward_std``, ``frac_reward_zero_std``, ``completions/mean_length``, ``completions/clipped_ratio``,
  ``kl`` where beta > 0, ``entropy``, ``loss``, ...) with the project's own from the rewards (``dr/r_disc_mean``,
  ``dr/r_anchor_mean``, ``dr/unparseable``, ``dr/unscorable``, ``dr/yes_rate``), logged when the update ends (TRL's
  ``log_history``, kept with the update's result so a cached or resumed update has it too).

Nothing twice: a run is found again by its tags (the same run id and kind; the same parent, round and role), so a
resumed or repeated execution continues its runs instead of opening new ones, and a metric is logged only at steps
its history does not have yet. Tracking never fails a run: a server that is down or refuses is one warning line and
the run goes on untracked. Only MLflow's client (``MlflowClient``) is used, never its process-wide active run, so
threads and nested flows cannot cross.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from dr_core.paths import cache_dir
from dr_core.store.errors import short_cause

if TYPE_CHECKING:
    from dr_core.runs.finding import Finding

Track = Literal["none", "mlflow", "tensorboard"]
TRACK_CHOICES: tuple[str, ...] = ("none", "mlflow", "tensorboard")
EXPERIMENT = "dynamicrubric"
#: MLflow's limits: a param's value (characters) and the entries of one log_batch call.
PARAM_CHARS, BATCH = 6000, 1000
#: Seconds the reachability probe of an HTTP tracking server waits.
PROBE_SECONDS = 5.0

Warn = Callable[[str], None]
_log = logging.getLogger(__name__)


def tracking_uri(store_url: str) -> str:
    """``MLFLOW_TRACKING_URI`` when set, otherwise the SQLite file beside the store (module docstring)."""
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"]
    return f"sqlite:///{local_dir(store_url) / 'mlflow.db'}"


def local_dir(store_url: str, name: str = "mlflow") -> Path:
    """A tracker's default folder: ``<store>/<name>`` for a local store, the cache's ``<name>`` for a remote one."""
    if "://" in store_url and not store_url.startswith("file://"):
        return cache_dir() / name
    return Path(store_url.removeprefix("file://")).expanduser().resolve() / name


def open_tracker(track: str, store_url: str, warn: Warn | None = None) -> Tracker:
    """The run's tracker: ``NullTracker`` for ``none``; for ``mlflow`` an ``MlflowTracker`` (a refused server: one
    warning, then a NullTracker); for ``tensorboard`` event files (dr_core/runs/tensorboard.py)."""
    if track not in TRACK_CHOICES:
        raise ValueError(f"track must be one of {', '.join(TRACK_CHOICES)}; got {track!r}")
    if track == "none":
        return NullTracker()
    warn = warn or _log.warning
    if track == "tensorboard":
        from dr_core.runs.tensorboard import TensorBoardTracker, tensorboard_dir

        return TensorBoardTracker(tensorboard_dir(store_url), warn)
    uri = tracking_uri(store_url)
    try:
        return MlflowTracker(
            uri, warn, artifacts=None if os.environ.get("MLFLOW_TRACKING_URI") else local_dir(store_url)
        )
    except Exception as e:  # tracking must never fail the run
        warn(f"MLflow tracking off: {uri} refused ({short_cause(e)}); the run goes on untracked")
        return NullTracker()


class Tracker:
    """What a flow tells its tracker; every method does nothing here (``--track none``)."""

    enabled = False

    def start(self, run_id: str, kind: str, params: Mapping[str, Any]) -> None:
        """Open (or find again) the parent run of this execution, with the resolved configuration as params."""

    def log_update(self, round_no: int, role: str, ref: Any, settings: Mapping[str, Any] | None = None) -> None:
        """One GRPO update (an ``UpdateRef``): its nested run, params and per-step metrics."""

    def log_round(self, round_no: int, metrics: Mapping[str, float | None]) -> None:
        """The figures of round ``round_no`` on the parent run (step = the round)."""

    def log_text(self, text: str, name: str) -> None:
        """A text artifact of the parent run (``summary.md``, ``signals.md``): replaced by a later call."""

    def finish(self, status: str = "FINISHED") -> None:
        """Close the parent run (``FINISHED`` or ``FAILED``)."""

    @property
    def parent_id(self) -> str | None:
        return None


class NullTracker(Tracker):
    """No tracking."""


class MlflowTracker(Tracker):
    """Logs through ``MlflowClient`` to ``uri``; the first failure warns once and turns it off."""

    enabled = True

    def __init__(self, uri: str, warn: Warn, artifacts: Path | None = None):
        from mlflow.tracking import MlflowClient

        if uri.startswith(("http://", "https://")):
            _probe(uri)  # MLflow's own client retries a refused server for minutes before it gives up
        if uri.startswith("sqlite:///"):
            Path(uri.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        self.uri, self.warn = uri, warn
        self.client = MlflowClient(tracking_uri=uri)
        name = os.environ.get("MLFLOW_EXPERIMENT_NAME") or EXPERIMENT
        found = self.client.get_experiment_by_name(name)
        if found is not None:
            self.experiment = found.experiment_id
        else:
            location = None if artifacts is None else (artifacts / "artifacts").as_uri()
            self.experiment = self.client.create_experiment(name, artifact_location=location)
        self._parent: str | None = None
        self._tags: dict[str, str] = {}

    @property
    def parent_id(self) -> str | None:
        return self._parent

    # -- the calls, each guarded ---------------------------------------------------------------------------------
    def start(self, run_id: str, kind: str, params: Mapping[str, Any]) -> None:
        self._guard(self._start, run_id, kind, params)

    def log_update(self, round_no: int, role: str, ref: Any, settings: Mapping[str, Any] | None = None) -> None:
        if self._parent is not None:
            self._guard(self._log_update, round_no, role, ref, settings or {})

    def log_round(self, round_no: int, metrics: Mapping[str, float | None]) -> None:
        if self._parent is not None:
            self._guard(self._log_metrics, self._parent, {k: [(round_no, v)] for k, v in metrics.items()})

    def log_text(self, text: str, name: str) -> None:
        if self._parent is not None:
            self._guard(self.client.log_text, self._parent, text, name)

    def finish(self, status: str = "FINISHED") -> None:
        if self._parent is not None:
            self._guard(self.client.set_terminated, self._parent, status)

    def _guard(self, fn, *args) -> None:
        try:
            fn(*args)
        except Exception as e:  # tracking must never fail the run: warn once, then stop tracking
            self.warn(f"MLflow tracking off: {self.uri} failed ({short_cause(e)}); the run goes on untracked")
            self._parent = None

    # -- the work ------------------------------------------------------------------------------------------------
    def _start(self, run_id: str, kind: str, params: Mapping[str, Any]) -> None:
        tags = {"dr.run_id": run_id, "dr.kind": kind}
        found = self._find(tags, parent=None)
        if found is None:
            run = self.client.create_run(self.experiment, tags=tags, run_name=f"{run_id}-{kind}")
            self._parent = run.info.run_id
        else:  # a resumed or repeated execution of the same run id continues its run
            self._parent = found
            self.client.update_run(found, status="RUNNING")
        self._tags = tags
        self._log_params(self._parent, params)

    def _log_update(self, round_no: int, role: str, ref: Any, settings: Mapping[str, Any]) -> None:
        tags = {
            **self._tags,
            "dr.round": str(round_no),
            "dr.role": role,
            "dr.checkpoint": str(ref.uri),
            "dr.fingerprint": str(ref.fingerprint),
        }
        child = self._find({k: tags[k] for k in ("dr.round", "dr.role")}, parent=self._parent)
        if child is None:
            run = self.client.create_run(
                self.experiment, tags={**tags, "mlflow.parentRunId": self._parent}, run_name=f"r{round_no}-{role}"
            )
            child = run.info.run_id
        else:
            for key, value in tags.items():  # a new checkpoint after a rerun of the update: say which
                self.client.set_tag(child, key, value)
        self._log_params(child, settings)
        self._log_metrics(child, step_metrics(ref.trl_log))
        self._log_metrics(child, {f"update/{k}": [(0, v)] for k, v in update_figures(ref).items()})
        self.client.set_terminated(child, "FINISHED")

    def _find(self, tags: Mapping[str, str], parent: str | None) -> str | None:
        """The newest run of the experiment with these tags (and this parent), or None."""
        where = [f"tags.`{k}` = '{_quote(v)}'" for k, v in tags.items()]
        if parent is not None:
            where.append(f"tags.`mlflow.parentRunId` = '{parent}'")
        runs = self.client.search_runs(
            [self.experiment], filter_string=" and ".join(where), order_by=["attributes.start_time DESC"], max_results=5
        )
        if parent is None:  # a parent run is one without a parent
            runs = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
        return runs[0].info.run_id if runs else None

    def _log_params(self, run: str, params: Mapping[str, Any]) -> None:
        """``params`` flattened (``a.b.c``), each value at most ``PARAM_CHARS``; those the run already has (MLflow
        refuses to change a param) are left as they are, and a changed one is said once."""
        from mlflow.entities import Param

        have = self.client.get_run(run).data.params
        flat = {k: _param_value(v) for k, v in flatten(params).items()}
        changed = sorted(k for k, v in flat.items() if k in have and have[k] != v)
        if changed:
            self.warn(f"MLflow run {run}: params {', '.join(changed[:5])} differ from the run's first execution; kept")
        new = [Param(k, v) for k, v in flat.items() if k not in have]
        for i in range(0, len(new), 100):  # MLflow takes at most 100 params a call
            self.client.log_batch(run, params=new[i : i + 100])

    def _log_metrics(self, run: str, series: Mapping[str, Iterable[tuple[int, float | None]]]) -> None:
        """Each key's (step, value) points that the run's history of that key does not have yet."""
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        known = self.client.get_run(run).data.metrics
        batch = []
        for key, points in series.items():
            points = [(int(s), float(v)) for s, v in points if _finite(v)]
            if not points:
                continue
            have = {m.step for m in self.client.get_metric_history(run, key)} if key in known else set()
            batch += [Metric(key, v, now, s) for s, v in points if s not in have]
        for i in range(0, len(batch), BATCH):
            self.client.log_batch(run, metrics=batch[i : i + BATCH])


# -- dr doctor's line ----------------------------------------------------------------------------------------------
def check_tracking(store_url: str | None = None, timeout_s: float = 3.0) -> Finding:
    """Where ``--track mlflow`` logs (dr_core/runs/tracking.py): an http(s) ``MLFLOW_TRACKING_URI`` is asked for its
    ``/health``; unset, a note naming the SQLite file beside the store; a SQLite or local path must be writable."""
    import importlib.util

    from dr_core.runs.doctor import probe_writable
    from dr_core.runs.finding import NOTE, OK, PROBLEM, Finding, http_health
    from dr_core.store.artifacts import default_store_url

    if importlib.util.find_spec("mlflow") is None:
        return Finding(
            "tracking", PROBLEM, "mlflow is not installed: --track mlflow cannot log", "bash infra/install.sh"
        )
    uri = os.environ.get("MLFLOW_TRACKING_URI", "").strip()
    if not uri:
        local = tracking_uri(store_url or default_store_url())
        return Finding("tracking", NOTE, f"MLFLOW_TRACKING_URI is not set: --track mlflow logs to {local}")
    fix = "start that server (mlflow server), or correct MLFLOW_TRACKING_URI; unset it to log beside the store"
    if uri.startswith(("http://", "https://")):
        return http_health("tracking", uri.rstrip("/") + "/health", fix, timeout_s)
    path = uri.removeprefix("sqlite:///") if uri.startswith("sqlite:///") else uri.removeprefix("file://")
    if "://" in path:
        return Finding("tracking", NOTE, f"MLFLOW_TRACKING_URI={uri!r}: not checked here (MLflow's own scheme)")
    folder = Path(path).expanduser()
    folder = folder.parent if uri.startswith("sqlite:///") else folder
    problem = probe_writable(folder)
    if problem:
        return Finding("tracking", PROBLEM, f"MLFLOW_TRACKING_URI={uri!r}: {problem}", fix)
    return Finding("tracking", OK, f"MLFLOW_TRACKING_URI={uri!r}: writable")


# -- what is logged -----------------------------------------------------------------------------------------------
#: Entries of TRL's log that are not per-step metrics (the run's closing summary has these).
_NOT_STEP = {"step", "epoch", "total_flos", "train_runtime", "train_samples_per_second", "train_steps_per_second"}


def step_metrics(trl_log: Iterable[Mapping[str, Any]]) -> dict[str, list[tuple[int, float]]]:
    """TRL's ``log_history`` as {metric: [(step, value)]}, under TRL's own names; non-numeric entries are left out."""
    out: dict[str, list[tuple[int, float]]] = {}
    for entry in trl_log:
        step = entry.get("step")
        if step is None:
            continue
        for key, value in entry.items():
            if key not in _NOT_STEP and isinstance(value, (int, float)) and not isinstance(value, bool):
                out.setdefault(key, []).append((int(step), float(value)))
    return out


def update_figures(ref: Any) -> dict[str, float | None]:
    """An update's own figures (``UpdateRef``): steps, seconds, first and last reward, steps without gradient, the
    rollouts without a usable reward."""
    names = ("steps", "seconds", "step_seconds", "reward_first", "reward_last", "no_gradient_steps", "rollouts")
    out = {k: getattr(ref, k, None) for k in names}
    for k in ("unparseable", "unscorable"):
        if getattr(ref, k, None) is not None:
            out[k] = getattr(ref, k)
    return out


def round_figures(round_: Mapping[str, Any], checks: Iterable[Mapping[str, Any]] = ()) -> dict[str, float | None]:
    """The parent run's figures of one round (a ``CoevolveRound`` or ``dr round``'s summary, dumped): R_disc,
    R_anchor, the Eq. 2 gap, the evaluator's accuracy, the verifier's yes-rate, the constant-score share, the win
    rate and its counts; each signal check as 1 (ok) or 0 (``signal/<n>``, n its place in the list)."""
    m = round_.get("measure", round_)
    out = {
        k: m.get(k)
        for k in ("r_disc", "r_anchor", "anchor_gap", "eval_accuracy", "verifier_yes_rate", "constant_score_sets_share")
    }
    for k, v in (round_.get("policy_eval") or {}).items():
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            out[f"policy_eval/{k}"] = v
    for i, c in enumerate(checks, 1):
        if c.get("ok") is not None:
            out[f"signal/{i}"] = 1.0 if c["ok"] else 0.0
    return out


#: A monitor's level as a number on the parent run (``monitor/<name>``): 1 warn, 0 ok; n/a is not logged.
MONITOR_LEVELS = {"warn": 1.0, "ok": 0.0}


def monitor_figures(found: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """The reward-hacking monitors' findings as ``monitor/<name>`` (1 warn, 0 ok) and ``monitor/<name>/value``."""
    out: dict[str, float] = {}
    for f in found:
        if f["level"] in MONITOR_LEVELS:
            out[f"monitor/{f['monitor']}"] = MONITOR_LEVELS[f["level"]]
            if _finite(f.get("value")):
                out[f"monitor/{f['monitor']}/value"] = float(f["value"])
    return out


def stale_fresh_figures(summary: Mapping[str, Any]) -> dict[str, float | None]:
    """``dr stale-fresh``'s figures for the parent run: each stage's numeric figures as ``stale/<k>``, ``fresh/<k>``."""
    return {
        f"{stage}/{k}": v
        for stage in ("stale", "fresh")
        for k, v in (summary.get(stage) or {}).items()
        if _finite(v) and k != "round"
    }


def flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings as one level, keys joined with dots."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping) and v:
            out |= flatten(v, key + ".")
        else:
            out[key] = v
    return out


def _param_value(v: Any) -> str:
    text = "None" if v is None else str(v)
    return text if len(text) <= PARAM_CHARS else text[: PARAM_CHARS - 3] + "..."


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _quote(v: str) -> str:
    return v.replace("\\", "\\\\").replace("'", "\\'")


def _probe(uri: str) -> None:
    """Raise unless an HTTP tracking server answers its health route within ``PROBE_SECONDS`` (dr doctor's probe)."""
    from dr_core.runs.finding import OK, http_health

    found = http_health("tracking", uri.rstrip("/") + "/health", "", PROBE_SECONDS)
    if found.status != OK:
        raise ConnectionError(found.detail)
