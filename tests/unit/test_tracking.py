"""``--track mlflow`` (dr_core/runs/tracking.py) against a real MLflow store (a SQLite file in a temporary directory),
read back through MLflow's own client: the parent run with its params and per-round figures, nested runs per update with
TRL's metrics per step, a resumed execution that continues its runs and logs nothing twice, and a tracking server that
refuses (one warning, the run goes on)."""

from __future__ import annotations

import socket
import time

import pytest

from dr_core.runs import tracking
from dr_core.runs.refs import UpdateRef

#: A TRL log_history of two GRPO steps and the closing summary (the names TRL 1.16 logs).
TRL_LOG = [
    {"step": 1, "epoch": 0.5, "loss": 0.01, "reward": 0.25, "reward_std": 0.1, "frac_reward_zero_std": 0.5,
     "completions/mean_length": 31.0, "completions/clipped_ratio": 0.0, "entropy": 1.9, "dr/r_disc_mean": 0.2},
    {"step": 2, "epoch": 1.0, "loss": 0.02, "reward": 0.5, "reward_std": 0.2, "frac_reward_zero_std": 0.0,
     "completions/mean_length": 29.5, "completions/clipped_ratio": 0.25, "entropy": 1.7, "dr/r_disc_mean": 0.4},
    {"step": 2, "train_runtime": 12.5, "train_loss": 0.015, "total_flos": 0.0, "epoch": 1.0},
]  # fmt: skip


def _ref(uri: str = "s3://b/models/g1", log=TRL_LOG) -> UpdateRef:
    return UpdateRef(
        uri=uri, fingerprint="fp-" + uri[-2:], steps=2, seconds=12.5, group_size=4, reward_first=0.25,
        reward_last=0.5, unparseable=1, trl_log=log,
    )  # fmt: skip


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)
    return str(tmp_path / "store")


def _client(store: str):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=tracking.tracking_uri(store))


def _runs(store: str):
    c = _client(store)
    exp = c.get_experiment_by_name(tracking.EXPERIMENT)
    return c, c.search_runs([exp.experiment_id])


def _history(client, run_id: str, key: str) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))


def test_step_metrics_are_trls_names_per_step_without_the_closing_summary():
    series = tracking.step_metrics(TRL_LOG)
    assert series["reward"] == [(1, 0.25), (2, 0.5)]
    assert series["completions/mean_length"] == [(1, 31.0), (2, 29.5)]
    assert series["train_loss"] == [(2, 0.015)]  # the summary's own figures stay, at its step
    assert not {"step", "epoch", "train_runtime", "total_flos"} & set(series)


def test_round_figures_take_the_measure_the_win_rate_and_the_checks_as_one_or_zero():
    rnd = {
        "round": 1,
        "measure": {"r_disc": 0.1, "r_anchor": -1.2, "anchor_gap": None, "eval_accuracy": 0.5},
        "policy_eval": {"win_rate": 0.6, "judge": "log-odds", "n": 8},
    }
    checks = [{"ok": True}, {"ok": False}, {"ok": None}]
    out = tracking.round_figures(rnd, checks)
    assert out["r_disc"] == 0.1 and out["anchor_gap"] is None
    assert out["policy_eval/win_rate"] == 0.6 and out["policy_eval/n"] == 8 and "policy_eval/judge" not in out
    assert (out["signal/1"], out["signal/2"]) == (1.0, 0.0) and "signal/3" not in out


def test_the_default_store_is_beside_a_local_store_and_in_the_cache_for_s3(store, monkeypatch, tmp_path):
    assert tracking.tracking_uri(store) == f"sqlite:///{tmp_path}/store/mlflow/mlflow.db"
    monkeypatch.setenv("DR_CACHE_DIR", str(tmp_path / "cache"))
    assert tracking.tracking_uri("s3://bucket/prefix") == f"sqlite:///{tmp_path}/cache/mlflow/mlflow.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://mlflow.example:5000")
    assert tracking.tracking_uri(store) == "http://mlflow.example:5000"


def test_a_run_is_a_parent_with_its_config_and_rounds_and_a_nested_run_per_update(store):
    t = tracking.open_tracker("mlflow", store, warn=pytest.fail)
    t.start("demo", "coevolve", {"config": {"rounds": 2, "generator": {"learning_rate": 1e-5}}})
    t.log_round(0, {"r_disc": 0.05, "anchor_gap": None})
    t.log_update(1, "generator", _ref(), {"max_steps": 2})
    t.log_update(1, "policy", _ref("s3://b/models/p1"), {"max_steps": 2})
    t.log_round(1, {"r_disc": 0.15, "policy_eval/win_rate": 0.5})
    t.log_text("| figure | round 1 |\n", "summary.md")
    t.finish()

    c, runs = _runs(store)
    (parent,) = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert parent.data.tags["dr.run_id"] == "demo" and parent.data.tags["dr.kind"] == "coevolve"
    assert parent.info.status == "FINISHED"
    assert parent.data.params == {"config.rounds": "2", "config.generator.learning_rate": "1e-05"}
    assert _history(c, parent.info.run_id, "r_disc") == [(0, 0.05), (1, 0.15)]
    assert "anchor_gap" not in parent.data.metrics  # None is not logged (never a silent 0)
    assert [a.path for a in c.list_artifacts(parent.info.run_id)] == ["summary.md"]
    children = {r.data.tags["dr.role"]: r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id}
    assert sorted(children) == ["generator", "policy"]
    gen = children["generator"]
    assert gen.info.run_name == "r1-generator" and gen.data.tags["dr.checkpoint"] == "s3://b/models/g1"
    assert gen.data.tags["dr.round"] == "1" and gen.data.params == {"max_steps": "2"}
    assert _history(c, gen.info.run_id, "reward") == [(1, 0.25), (2, 0.5)]
    assert _history(c, gen.info.run_id, "dr/r_disc_mean") == [(1, 0.2), (2, 0.4)]
    assert _history(c, gen.info.run_id, "update/unparseable") == [(0, 1.0)]
    assert "update/unscorable" not in gen.data.metrics  # the generator's count is unparseable


def test_a_resumed_execution_continues_its_runs_and_logs_nothing_twice(store):
    first = tracking.open_tracker("mlflow", store, warn=pytest.fail)
    first.start("demo", "coevolve", {"config": {"rounds": 1}})
    first.log_round(0, {"r_disc": 0.05})
    first.log_update(1, "generator", _ref(log=TRL_LOG[:1]))  # killed after step 1 was logged
    # a new process: the same run id, the round 0 again from the cache, the update resumed to its end
    again = tracking.open_tracker("mlflow", store, warn=pytest.fail)
    again.start("demo", "coevolve", {"config": {"rounds": 1}})
    assert again.parent_id == first.parent_id
    again.log_round(0, {"r_disc": 0.05})
    again.log_update(1, "generator", _ref())
    again.log_update(1, "generator", _ref())  # a cached step seen once more
    again.finish()

    c, runs = _runs(store)
    assert len(runs) == 2  # one parent, one update
    child = next(r for r in runs if "mlflow.parentRunId" in r.data.tags)
    assert _history(c, child.info.run_id, "reward") == [(1, 0.25), (2, 0.5)]
    assert _history(c, again.parent_id, "r_disc") == [(0, 0.05)]


def test_a_changed_config_on_resume_is_one_warning_and_keeps_the_first(store):
    said = []
    tracking.open_tracker("mlflow", store, warn=pytest.fail).start("demo", "round", {"k": 4})
    tracking.open_tracker("mlflow", store, warn=said.append).start("demo", "round", {"k": 8, "n": 1})
    _, (run,) = _runs(store)
    assert run.data.params == {"k": "4", "n": "1"}
    assert len(said) == 1 and "params k differ" in said[0]


def test_a_refused_tracking_server_is_one_warning_and_nothing_else(store, monkeypatch):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{port}")
    said = []
    start = time.perf_counter()
    t = tracking.open_tracker("mlflow", store, warn=said.append)
    t.start("demo", "coevolve", {"k": 1})
    t.log_update(1, "generator", _ref())
    t.log_round(1, {"r_disc": 0.1})
    t.finish()
    assert time.perf_counter() - start < 30  # the probe, not MLflow's minutes of retries
    assert isinstance(t, tracking.NullTracker) and not t.enabled
    assert len(said) == 1 and f"127.0.0.1:{port} refused" in said[0] and "goes on untracked" in said[0]


def test_a_store_that_fails_mid_run_is_one_warning_then_no_tracking(store):
    said = []
    t = tracking.open_tracker("mlflow", store, warn=said.append)
    t.start("demo", "coevolve", {})

    def broken(*_a, **_k):
        raise OSError("disk full")

    t.client.log_batch = broken
    t.log_round(1, {"r_disc": 0.1})
    t.log_round(2, {"r_disc": 0.2})
    t.log_update(2, "policy", _ref())
    t.finish()
    assert len(said) == 1 and "OSError: disk full" in said[0]
    assert t.parent_id is None


def test_track_none_logs_nothing_and_an_unknown_kind_is_refused(store, tmp_path):
    t = tracking.open_tracker("none", store)
    t.start("demo", "coevolve", {"k": 1})
    t.log_round(1, {"r_disc": 0.1})
    t.finish()
    assert not (tmp_path / "store" / "mlflow").exists()
    with pytest.raises(ValueError, match="track must be one of none, mlflow, tensorboard; got 'wandb'"):
        tracking.open_tracker("wandb", store)


# -- --track tensorboard ------------------------------------------------------------------------------------------
def _scalars(folder) -> dict[str, list[tuple[int, float]]]:
    """Every scalar series under ``folder``, read back through TensorBoard's own event reader."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder))
    acc.Reload()
    return {tag: [(e.step, pytest.approx(e.value)) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_tensorboard_writes_each_update_per_step_and_the_rounds_once(store, tmp_path, monkeypatch):
    monkeypatch.delenv("DR_TENSORBOARD_DIR", raising=False)
    t = tracking.open_tracker("tensorboard", store, warn=pytest.fail)
    t.start("demo", "coevolve", {})
    t.log_round(0, {"r_disc": 0.05, "anchor_gap": None})
    t.log_update(1, "generator", _ref())
    t.log_round(1, {"r_disc": 0.15})
    # a resumed execution: the same update and rounds again, nothing written twice
    again = tracking.open_tracker("tensorboard", store, warn=pytest.fail)
    again.start("demo", "coevolve", {})
    again.log_round(1, {"r_disc": 0.15})
    again.log_update(1, "generator", _ref())
    root = tmp_path / "store" / "tensorboard" / "demo"
    gen = _scalars(root / "r1-generator")
    assert gen["reward"] == [(1, 0.25), (2, 0.5)] and gen["dr/r_disc_mean"] == [(1, 0.2), (2, 0.4)]
    assert _scalars(root / "coevolve") == {"r_disc": [(0, 0.05), (1, 0.15)]}
    # a new checkpoint for the same round and role (the update re-ran): its steps replace the old ones
    again.log_update(1, "generator", _ref("s3://b/models/g9", log=TRL_LOG[:1]))
    assert _scalars(root / "r1-generator")["reward"] == [(1, 0.25)]


def test_tensorboard_that_cannot_write_is_one_warning(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("DR_TENSORBOARD_DIR", str(tmp_path / "file" / "tb"))
    said = []
    t = tracking.open_tracker("tensorboard", str(tmp_path / "store"), warn=said.append)
    t.start("demo", "coevolve", {})
    t.log_update(1, "generator", _ref())
    t.log_round(1, {"r_disc": 0.1})
    assert len(said) == 1 and said[0].startswith("TensorBoard tracking off:") and "goes on untracked" in said[0]
