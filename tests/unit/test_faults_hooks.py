"""The DR_FAULT hook itself (dr_core/faults.py): rule syntax, hit counting, qualifiers, the three actions; and the
crash-tolerant JSON-lines reading GRPO's resume relies on. Fast; the fault matrix is
tests/integration/test_faults.py."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from dr_core import faults
from tests.support.netutil import wait_until


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    monkeypatch.delenv("DR_FAULT", raising=False)
    faults._hits.clear()
    yield
    faults._hits.clear()


def test_parse_rules():
    assert faults.parse("kill@verify") == [("kill", "verify", None, False)]
    assert faults.parse("enospc@store-write:rubrics#2, pause@sample#3+") == [
        ("enospc", "store-write:rubrics", 2, False),
        ("pause", "sample", 3, True),
    ]
    for bad in ("verify", "boom@verify", "kill@", "kill@x#0", "kill@x#two"):
        with pytest.raises(ValueError, match="DR_FAULT"):
            faults.parse(bad)


def test_unset_or_other_points_do_nothing(monkeypatch):
    faults.fault_point("verify")
    monkeypatch.setenv("DR_FAULT", "enospc@sample")
    faults.fault_point("verify", "measure")
    assert faults._hits == {}


def test_hit_numbers_and_qualifiers(monkeypatch):
    monkeypatch.setenv("DR_FAULT", "enospc@store-write:rubrics#2")
    path = "/s/rubrics/run_id=r/round=1/measure-rubrics.parquet"
    assert faults.store_tags(path) == ("rubrics", "measure-rubrics")
    assert faults.store_tags("/s/prompts/dataset=d/selected.parquet") == ("prompts", "selected")
    faults.fault_point("store-write", store_path="/s/verdicts/run_id=r/round=1/measure-verdicts.parquet")
    faults.fault_point("store-write", store_path=path)  # hit 1: passes
    with pytest.raises(OSError) as err:
        faults.fault_point("store-write", store_path=path)
    assert err.value.errno == errno.ENOSPC and "DR_FAULT" in str(err.value)
    faults.fault_point("store-write", store_path=path)  # hit 3: passes again

    monkeypatch.setenv("DR_FAULT", "enospc@verify:measure#2+")
    faults.fault_point("verify", "measure")
    for _ in range(2):
        with pytest.raises(OSError):
            faults.fault_point("verify", "measure")


def test_pause_waits_for_the_continue_file(monkeypatch, tmp_path):
    monkeypatch.setenv("DR_FAULT", "pause@verify")
    monkeypatch.setenv("DR_FAULT_DIR", str(tmp_path))
    done = threading.Event()
    t = threading.Thread(target=lambda: (faults.fault_point("verify"), done.set()))
    t.start()
    wait_until((tmp_path / "verify.paused").exists, timeout=10, what="the pause marker", interval=0.01)
    assert not done.wait(0.2)  # still waiting
    (tmp_path / "verify.continue").write_text("")
    t.join(5)
    assert done.is_set()


def test_kill_is_sigkill_of_the_process(tmp_path):
    code = "from dr_core.faults import fault_point; fault_point('x'); fault_point('x'); print('survived')"
    env = {**os.environ, "DR_FAULT": "kill@x#2", "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=tmp_path, timeout=60
    )
    assert proc.returncode == -9 and "survived" not in proc.stdout


def test_grpo_jsonl_tolerates_a_torn_last_line(tmp_path):
    from dr_core.train.resume import read_jsonl

    path = tmp_path / "records.jsonl"
    path.write_text(json.dumps({"step": 0}) + "\n" + json.dumps({"step": 1}) + "\n" + '{"step": 2, "te')
    assert read_jsonl(path) == [{"step": 0}, {"step": 1}]
    path.write_text('{"step": 0, "te\n' + json.dumps({"step": 1}) + "\n")
    with pytest.raises(json.JSONDecodeError):
        read_jsonl(path)
