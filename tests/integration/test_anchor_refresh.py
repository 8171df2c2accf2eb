"""Scheduled anchor refresh: new files are validated, ingested once and filtered; a bad file changes nothing; the
deployment in infra/prefect.yaml carries its cron schedule and runs once through a real process worker, triggered
with run_deployment instead of the clock. (The training half is the co-evolution flow, tested on its own.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from dr_core.paths import REPO_DIR, bundled

pytestmark = [pytest.mark.integration]


def _drop(store: Path, name: str, lines: list[str]) -> None:
    inc = store / "incoming" / "anchors"
    inc.mkdir(parents=True, exist_ok=True)
    (inc / name).write_text("".join(lines), encoding="utf-8")


def _anchor_parts(store: Path) -> list[str]:
    from dr_core.store.artifacts import Store

    return Store.from_url(str(store)).parts("anchors")


def test_new_files_are_ingested_once_and_a_bad_file_changes_nothing(prefect_harness, tmp_path):
    from dr_core.datasets import DataError
    from flows.anchor_refresh import anchor_refresh_flow

    store = tmp_path / "store"
    _drop(store, "batch1.jsonl", bundled("anchors_alpacaeval.jsonl").read_text().splitlines(keepends=True)[:6])
    first = anchor_refresh_flow(store=str(store), train=False)
    assert first["new_files"] == 1 and 0 < first["kept"] <= 6
    from dr_core.store.artifacts import Store

    con = Store.from_url(str(store)).connect()
    assert con.sql("SELECT count(DISTINCT prompt_id), count(*) FROM anchors").fetchall() == [(6, 66)]
    assert anchor_refresh_flow(store=str(store), train=False)["new_files"] == 0  # nothing new: a no-op

    good = bundled("anchors_alpacaeval.jsonl").read_text().splitlines(keepends=True)[10:12]
    _drop(store, "batch2.jsonl", good)
    _drop(store, "batch3.jsonl", [good[0], '{"id": "x", "prompt": "p"}\n'])
    before = _anchor_parts(store)
    with pytest.raises(DataError, match=r"batch3\.jsonl:2: field 'responses'"):
        anchor_refresh_flow(store=str(store), train=False)
    assert _anchor_parts(store) == before  # validation comes before any write: batch2 was not ingested either


def test_deployment_schedule_and_one_triggered_run(prefect_harness, tmp_path):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.schedules import CronSchedule
    from prefect.deployments import run_deployment
    from prefect.settings import PREFECT_API_URL

    spec = yaml.safe_load((REPO_DIR / "infra" / "prefect.yaml").read_text())
    dep = next(d for d in spec["deployments"] if d["name"] == "anchor-refresh")
    cron = dep["schedules"][0]["cron"]
    CronSchedule(cron=cron, timezone="UTC")  # a valid cron expression

    store = tmp_path / "store"
    _drop(store, "nightly.jsonl", bundled("anchors_alpacaeval.jsonl").read_text().splitlines(keepends=True)[:3])
    env = {**os.environ, "PREFECT_API_URL": PREFECT_API_URL.value(), "DR_STORE": str(store)}
    prefect = [sys.executable, "-m", "prefect"]
    subprocess.run(
        [*prefect, "work-pool", "create", "dr-process", "--type", "process"],
        env=env,
        cwd=REPO_DIR,
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = subprocess.run(
        [*prefect, "--no-prompt", "deploy", "--all", "--prefect-file", "infra/prefect.yaml"],
        env=env,
        cwd=REPO_DIR,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr

    with get_client(sync_client=True) as client:
        deployment = client.read_deployment_by_name("dynamicrubric-anchor-refresh/anchor-refresh")
        assert [s.schedule.cron for s in deployment.schedules] == [cron]
        assert deployment.parameters["store"] == str(store)
    run = run_deployment("dynamicrubric-anchor-refresh/anchor-refresh", parameters={"train": False}, timeout=0)
    worker = subprocess.run(
        [*prefect, "worker", "start", "--pool", "dr-process", "--run-once"],
        env=env,
        cwd=REPO_DIR,
        capture_output=True,
        text=True,
        timeout=600,
    )
    with get_client(sync_client=True) as client:
        state = client.read_flow_run(run.id).state
    assert state.is_completed(), worker.stdout[-3000:] + worker.stderr[-3000:]
    assert any("dataset=refresh-nightly-" in p for p in _anchor_parts(store))
