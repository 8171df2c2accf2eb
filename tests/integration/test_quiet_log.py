"""`dr coevolve` as a user runs it, in a subprocess with its output going to a pipe (a log), on the real default model:
one co-evolution round trains the generator, then the policy; both checkpoints are registered with their parents,
the training rollouts are in the store, and a re-run of the finished round does no training. By default the log has
one line per step with its state, seconds and peak memory, and none of the third-party noise a user cannot act on
(cli/quiet.py); `--verbose` shows it all (here: Prefect's task-run lines, on the re-run served from the cache).

Both runs and the stale-fresh run are tracked (``--track mlflow``, the default local store beside the artifact
store): MLflow's own client reads back one nested run per update with TRL's metrics per step, the round's figures on
the parent, and nothing logged twice by the re-run (dr_core/runs/tracking.py).

(One run serves both: the in-process round of tests/test_coevolve_flow.py, which ran the same micro config, was merged
into this module; the flows' in-process path is covered by tests/integration/test_round_flow.py and
tests/integration/test_stale_fresh_flow.py.)"""

from __future__ import annotations

import gc
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.noise import NOISE, assert_quiet, user_env

pytestmark = [pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
ENGINES = Path(__file__).resolve().parents[1] / "support" / "engines_smollm2.yaml"
#: The smallest co-evolution round: every role on the default model, 2 prompts x K=2, one GRPO step per update,
#: no round 0, the in-loop policy evaluation on 2 held-out prompts.
SMALL = [
    "round.n_prompts=2",
    "round.k=2",
    "round.n_anchor=3",
    "round.eval_limit=2",
    "round.policy_max_tokens=24",
    "round.generator_max_tokens=160",
    "generator.max_steps=1",
    "generator.num_generations=2",
    "generator.per_device_train_batch_size=2",
    "generator.gradient_accumulation_steps=1",
    "generator.max_completion_length=48",
    "policy.max_steps=1",
    "policy.max_completion_length=24",
    "policy.rubric_max_tokens=160",
    "measure_start=false",
    "policy_eval.limit=2",
    "policy_eval.max_tokens=16",
]

STEP_LINE = re.compile(
    r"^  (\S+)\s+(Completed|Cached|Failed|Crashed|TimedOut|Cancelled)\s+(\d+\.\d) s"
    r"(?:   peak \d+(?:\.\d)? (?:MB|GB))?$"
)


def _coevolve(store: Path, out: Path, *extra: str) -> tuple[int, str]:
    sets = [a for s in SMALL for a in ("--set", s)]
    return _dr(
        "coevolve",
        "--store",
        str(store),
        "--run-id",
        "quiet",
        "--engines",
        str(ENGINES),
        "--json",
        str(out),
        "--track",
        "mlflow",
        *sets,
        *extra,
    )


def _dr(*args: str) -> tuple[int, str]:
    """``dr ARGS`` as a user runs it, its stdout and stderr to one pipe, without the quiet log's variables."""
    cmd = [sys.executable, "-m", "cli.main", *args]
    env = user_env(drop=("DR_FAULT", "DR_FAULT_DIR"))
    proc = subprocess.run(
        cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=900
    )
    return proc.returncode, proc.stdout


@pytest.fixture(scope="module")
def runs(tmp_path_factory, default_model_dir):
    # The coevolve subprocess peaks near 10 GB; the suite's own process can hold as much in engines that earlier
    # in-process flow tests left in the task pool. Free those first (a full run was OOM-killed here without it).
    from dr_core.resources import return_freed_memory
    from tasks.runtime import close_engines

    close_engines()
    gc.collect()
    return_freed_memory()
    from dr_core.paths import cache_dir

    def scratch_dirs():
        return {p for role in ("generator", "policy") for p in (cache_dir() / "train" / role).glob("*")}

    tmp = tmp_path_factory.mktemp("quiet")
    before = scratch_dirs()
    first = _coevolve(tmp / "store", tmp / "first.json")
    scratch_left = scratch_dirs() - before
    (tmp / "first.log").write_text(first[1])  # kept with pytest's temporary directories, to read
    assert first[0] == 0, first[1][-6000:]
    again = _coevolve(tmp / "store", tmp / "again.json", "--verbose")
    (tmp / "again.log").write_text(again[1])
    assert again[0] == 0, again[1][-6000:]
    stale_fresh = _dr("stale-fresh", "--store", str(tmp / "store"), "--run-id", "quiet", "--track", "mlflow")
    (tmp / "stale-fresh.log").write_text(stale_fresh[1])
    assert stale_fresh[0] == 0, stale_fresh[1][-6000:]
    return {
        "stale-fresh": stale_fresh[1],
        "quiet": (first[1], json.loads((tmp / "first.json").read_text())),
        "verbose": (again[1], json.loads((tmp / "again.json").read_text())),
        "store": str(tmp / "store"),
        "scratch_left": scratch_left,
    }


def test_one_round_trains_both_and_stores_what_it_did(runs):
    from dr_core.store import checkpoints, sql
    from dr_core.store.artifacts import Store

    _, first = runs["quiet"]
    assert not runs["scratch_left"]  # each update's TRL scratch dir is dropped once its checkpoint is in the store
    (r1,) = first["rounds"]
    assert first["steps"]["r1/train-generator"]["state"] == "Completed"
    assert first["steps"]["r1/train-policy"]["state"] == "Completed"
    assert first["steps"]["r1/evaluate-policy"]["state"] == "Completed"  # P(1) against P(0), in the flow
    s = Store.from_url(runs["store"])
    gen, pol = checkpoints.latest(s, "quiet", "generator"), checkpoints.latest(s, "quiet", "policy")
    assert gen["round"] == 1 and gen["parent"] == "default" and gen["uri"] == r1["generator"]
    assert pol["round"] == 1 and pol["parent"] == "default"
    assert (checkpoints.materialise(s, pol["uri"]) / "config.json").is_file()
    con = s.connect()
    # every generator rollout is recorded with its rewards (NULL when its rubric could not be used)
    n_rollouts = r1["generator_update"]["rollouts"]
    assert con.sql("SELECT count(*) FROM rewards WHERE stage = 'generator'").fetchall() == [(n_rollouts,)]
    n_policy = r1["policy_update"]["rollouts"]
    assert con.sql("SELECT count(*) FROM samples WHERE stage = 'policy'").fetchall() == [(n_policy,)]
    assert con.sql("SELECT count(*) FROM rewards WHERE stage = 'policy'").fetchall() == [(n_policy,)]
    # the summary's zero-std GRPO groups per step are what sql/training_signal finds in the stored rollouts
    signal = sql.run(con, "training_signal", {"run_id": "quiet"}).to_pylist()
    for role in ("generator", "policy"):
        u = r1[f"{role}_update"]
        want = [(st["step"], st["groups"], st["zero_std_groups"]) for st in u["zero_std_by_step"]]
        assert want and [(r["step"], r["groups"], r["zero_std_groups"]) for r in signal if r["stage"] == role] == want
        assert u["no_gradient_steps"] == sum(st["zero_std_groups"] == st["groups"] for st in u["zero_std_by_step"])
    assert {"verifier_yes_rate", "verdicts_scored", "constant_score_sets_share"} <= set(r1["measure"])
    assert isinstance(first["warnings"], list) and all(isinstance(w, str) for w in first["warnings"])
    assert con.sql("SELECT count(*) FROM samples WHERE stage = 'measure' AND round = 1").fetchall() == [(4,)]
    # every step of the flow is in the steps table, under round 1 (no round-0 measurement here)
    # (dr stale-fresh, run on the same store by the fixture, adds its stale/ and fresh/ steps under round 1 too)
    steps = {
        name: t
        for name, t in con.sql("SELECT step, round FROM steps").fetchall()
        if name.split("/")[0] not in ("stale", "fresh")
    }
    assert steps == {name: 1 for name in first["steps"]}
    assert first["numerics"].startswith("numerics: engines ")  # the dtype choice, once per run, in the result


def test_default_log_has_no_known_noise_and_says_its_models(runs):
    log, _ = runs["quiet"]
    line = assert_quiet(log, f"engines file {ENGINES}", "generator smollm2-135m-instruct", "(system prompt, choice")
    assert line.endswith("policy smollm2-135m-instruct")


def test_stale_fresh_log_is_quiet_and_names_the_recorded_models(runs):
    # dr stale-fresh on the run above, with the round config the run recorded (its engines file's models)
    assert_quiet(runs["stale-fresh"], "run quiet's recorded config", "G(0) and G(1)", "verifier smollm2-135m-instruct")


def test_default_log_has_one_line_per_step_with_state_seconds_and_peak(runs):
    log, result = runs["quiet"]
    lines = [m for m in map(STEP_LINE.match, log.splitlines()) if m]
    names = [m.group(1) for m in lines]
    assert sorted(names) == sorted(result["steps"]), log[-4000:]  # each step once
    for m in lines:
        step = result["steps"][m.group(1)]
        assert m.group(2) == step["state"] and float(m.group(3)) == pytest.approx(step["seconds"], abs=0.051)
        assert "peak" in m.group(0) and step["peak_rss_mb"] > 0
    assert result["steps"]["r1/train-generator"]["state"] == "Completed"
    # the dtype choice is printed once, as the result records it
    assert [line.split(" - ", 1)[-1] for line in log.splitlines() if "numerics: " in line] == [result["numerics"]]


def test_verbose_shows_the_third_party_lines(runs):
    log, result = runs["verbose"]
    assert all(s["state"] == "Cached" for s in result["steps"].values() if s["state"] != "Completed"), result["steps"]
    assert result["steps"]["r1/train-policy"]["state"] == "Cached"  # the re-run did no training
    assert result["steps"]["r1/train-generator"]["state"] == "Cached"
    assert result["rounds"][0]["generator"] == runs["quiet"][1]["rounds"][0]["generator"]
    assert "Finished in state Cached" in log  # Prefect's task-run lines are back
    assert any(n in log for n in NOISE if n != "Finished in state")  # and the third-party lines
    assert sum(1 for line in log.splitlines() if STEP_LINE.match(line)) == len(result["steps"])


def test_track_mlflow_logs_each_update_per_step_and_the_round_once(runs):
    from mlflow.tracking import MlflowClient

    from dr_core.runs.tracking import tracking_uri

    client = MlflowClient(tracking_uri=tracking_uri(runs["store"]))
    assert tracking_uri(runs["store"]).endswith("/store/mlflow/mlflow.db")
    exp = client.get_experiment_by_name("dynamicrubric")
    found = client.search_runs([exp.experiment_id])
    parents = {r.data.tags["dr.kind"]: r for r in found if "mlflow.parentRunId" not in r.data.tags}
    assert sorted(parents) == ["coevolve", "stale-fresh"]  # the re-run continued its run: no second parent
    parent = parents["coevolve"]
    assert parent.info.status == "FINISHED" and parent.data.tags["dr.run_id"] == "quiet"
    assert parent.data.params["config.round.k"] == "2" and parent.data.params["config.generator.max_steps"] == "1"
    children = {r.data.tags["dr.role"]: r for r in found if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id}
    assert sorted(children) == ["generator", "policy"]
    _, result = runs["quiet"]
    (r1,) = result["rounds"]
    for role, run in children.items():
        assert run.data.tags["dr.round"] == "1" and run.data.tags["dr.checkpoint"] == r1[role]
        assert run.data.params["max_steps"] == "1"
        # TRL's own names, per GRPO step (one step here), each logged once though the re-run saw the update again
        for key in ("reward", "reward_std", "frac_reward_zero_std", "completions/mean_length", "entropy"):
            assert [m.step for m in client.get_metric_history(run.info.run_id, key)] == [1], (role, key)
        own = "dr/r_disc_mean" if role == "generator" else "dr/unscorable"
        assert [m.step for m in client.get_metric_history(run.info.run_id, own)] == [1], role
        assert client.get_metric_history(run.info.run_id, "update/steps")[0].value == 1
    for key in ("r_disc", "verifier_yes_rate"):  # the round's figures on the parent, at step = the round, once
        value = r1["measure"][key]
        want = [] if value is None else [(1, pytest.approx(value))]
        assert [(m.step, m.value) for m in client.get_metric_history(parent.info.run_id, key)] == want, key
    assert {"summary.md", "signals.md", "report.html"} <= {a.path for a in client.list_artifacts(parent.info.run_id)}
    # the reward-hacking monitors: in the result, printed, and their levels on the parent run
    log, _ = runs["quiet"]
    from dr_core.report.monitors import MONITORS

    assert [f["monitor"] for f in result["monitors"]] == list(MONITORS) and "reward-hacking monitors" in log
    looked = [f["monitor"] for f in result["monitors"] if f["level"] != "n/a"]
    assert looked and all(f"monitor/{m}" in parent.data.metrics for m in looked)
    stale_fresh = parents["stale-fresh"].data.metrics
    assert any(k.startswith("stale/") for k in stale_fresh) and any(k.startswith("fresh/") for k in stale_fresh)
