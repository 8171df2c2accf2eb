"""`dr round` as a user runs it, in subprocesses: a run killed mid-step resumes at its first unfinished step
without duplicate rows, and the same flow runs against a real `prefect server` when PREFECT_API_URL is set."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.fixtures_prefect import prefect_server
from tests.support.netutil import kill_group
from tests.support.noise import assert_quiet, user_env

pytestmark = [pytest.mark.slow]

#: Every role on the default model (SmolLM2-135M): these tests are about resuming and the server, where the tiny
#: preset's larger verifier would only add minutes.
ENGINES = Path(__file__).resolve().parents[1] / "support" / "engines_smollm2.yaml"
SMALL = [
    "--set",
    "n_prompts=2",
    "--set",
    "k=2",
    "--set",
    "n_anchor=3",
    "--set",
    "eval_limit=2",
    "--set",
    "policy_max_tokens=32",
    "--set",
    "generator_max_tokens=200",
    "--engines",
    str(ENGINES),
]


def _dr_round(store: Path, run_id: str, out: Path, env=None, **popen):
    cmd = [
        sys.executable,
        "-m",
        "cli.main",
        "round",
        "--store",
        str(store),
        "--run-id",
        run_id,
        *SMALL,
        "--json",
        str(out),
    ]
    env = user_env(drop=("DR_FAULT", "DR_FAULT_DIR")) | (env or {})
    popen = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT, "text": True} | popen
    return subprocess.Popen(cmd, env=env, **popen)


@pytest.fixture(scope="module")
def killed_then_resumed(tmp_path_factory, default_model_dir):
    """`dr round` dies by SIGKILL inside its first verify step (``DR_FAULT=kill@verify#1``, dr_core/faults.py:
    after the step's model work, before its rows are written; the sample and rubric steps have finished), then it
    is run again."""
    tmp = tmp_path_factory.mktemp("kill")
    store, out, log = tmp / "store", tmp / "result.json", tmp / "killed.log"
    with open(log, "wb") as fh:  # a file, not a pipe: a child left behind by the killed run may hold a pipe open
        proc = _dr_round(
            store, "k", out, env={"DR_FAULT": "kill@verify#1"}, start_new_session=True, stdout=fh, text=False
        )
    try:
        rc = proc.wait(timeout=900)
    finally:
        kill_group(proc)  # whatever the dead run left in its process group (Prefect's temporary server)
    assert rc == -signal.SIGKILL, log.read_text(errors="replace")[-4000:]
    assert not out.exists()  # killed before the end
    assert (store / "rubrics" / "run_id=k" / "round=1" / "measure-rubrics.parquet").is_file()  # the rubric step wrote
    assert not (store / "verdicts").exists()  # the verify step did not
    again = _dr_round(store, "k", out)
    text, _ = again.communicate(timeout=900)
    assert again.returncode == 0, text
    # the resumed run's log (a pipe) has none of the known noise and says its models once
    assert_quiet(text, f"models: engines file {ENGINES} — generator smollm2-135m-instruct", "policy smollm2-135m")
    return store, json.loads(out.read_text())


def test_killed_run_resumes_without_redoing_finished_steps(killed_then_resumed):
    from dr_core.store.artifacts import Store

    store, result = killed_then_resumed
    steps = result["steps"]
    assert [steps[k]["state"] for k in ("select-inputs", "sample", "generate-rubrics")] == ["Cached"] * 3, steps
    assert steps["verify"]["state"] == "Completed"  # the first unfinished step ran
    s = Store.from_url(str(store))
    assert s.read_table("samples", run_id="k", round=1).num_rows == 4  # no duplicate rows
    assert s.read_table("verdicts", run_id="k", round=1).num_rows == result["summary"]["verdicts"]


def test_same_flow_runs_against_a_real_prefect_server(killed_then_resumed, tmp_path):
    import httpx

    store, _ = killed_then_resumed
    with prefect_server(tmp_path / "prefect-home") as api:
        out = tmp_path / "result.json"
        proc = _dr_round(store, "k", out, env={"PREFECT_API_URL": api, "PREFECT_HOME": str(tmp_path / "client")})
        text, _ = proc.communicate(timeout=600)
        assert proc.returncode == 0, text
        assert "temporary server" not in text  # it used the real server, not the embedded one
        runs = httpx.post(f"{api}/flow_runs/filter", json={"limit": 10}, timeout=10).json()
        assert any(r["state_type"] == "COMPLETED" for r in runs)
        assert json.loads(out.read_text())["steps"]["sample"]["state"] == "Cached"
