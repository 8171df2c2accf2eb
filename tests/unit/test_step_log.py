"""The flows' step log (``flows.steps.StepLog``): ``started`` and ``finished`` write the round's ``steps`` rows at
once (a killed process leaves them), rounds go to their own files, and ``entries`` is what the flow returns."""

from __future__ import annotations

from dr_core.runs.refs import StepContext
from dr_core.store.artifacts import Store
from flows.steps import RUNNING, StepLog


def test_started_and_finished_write_the_rounds_rows_as_they_happen(tmp_path):
    """Outside a flow run (no Prefect server: the execution id is empty) the log writes the same rows."""
    store = str(tmp_path / "store")
    seen: dict = {}

    def go():
        log = StepLog(StepContext(store=store, run_id="r", round_no=0))
        at = log.started("select-inputs")
        seen["running"] = Store.from_url(store).read_table("steps", run_id="r").to_pylist()
        log.finished("select-inputs", "Completed", 1.234, at, 51.26)
        log.round = 1
        log.finished("r1/sample", "Cached", 0.01, log.started("r1/sample"))
        return log.entries()

    entries = go()
    assert [(r["step"], r["state"], r["round"]) for r in seen["running"]] == [("select-inputs", RUNNING, 0)]
    assert entries["select-inputs"] == {
        "state": "Completed",
        "seconds": 1.23,
        "started_at": entries["select-inputs"]["started_at"],
        "peak_rss_mb": 51.3,
    }
    rows = Store.from_url(store).read_table("steps", run_id="r").to_pylist()
    assert sorted((r["round"], r["step"], r["state"]) for r in rows) == [
        (0, "select-inputs", "Completed"),
        (1, "r1/sample", "Cached"),
    ]
    assert entries["r1/sample"]["peak_rss_mb"] is None
