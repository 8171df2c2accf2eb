"""The round flow in-process on the real model: artifacts per run id, content caching, retries that mean
something. Fault injection replaces a dr_core step for one call; the Prefect task around it is the real one."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.slow]

MODEL_STEPS = ["sample", "generate-rubrics", "verify", "evaluate-evaluator"]


def _run(cfg, store, run_id, run_eval=True):
    from flows.round import RoundParams, round_flow

    return round_flow(RoundParams(config=cfg, store=store, run_id=run_id, round_no=1, run_eval=run_eval))


def _count(store_url, table, run_id):
    from dr_core.store.artifacts import Store

    return Store.from_url(store_url).read_table(table, run_id=run_id, round=1).num_rows


def test_round_fills_tables_and_rerun_is_served_from_cache(prefect_harness, micro_round, tmp_path):
    store = str(tmp_path / "store")
    first = _run(micro_round, store, "r1")
    s = first.summary.model_dump()
    assert (s["prompts"], s["sets"], s["responses"]) == (2, 2, 4)
    assert all(first.steps[name]["state"] == "Completed" for name in MODEL_STEPS)
    assert _count(store, "samples", "r1") == 4
    # every usable rubric item is verified on the K responses and the 3 anchors
    assert _count(store, "verdicts", "r1") == s["rubric_items"] * (2 + 3) == s["verdicts"]
    assert _count(store, "rewards", "r1") == s["rubric_rollouts"] == 2
    assert _count(store, "eval", "r1") > 0

    from tests.integration.test_prefect_artifacts import read_artifacts, table_rows

    published = read_artifacts("dr-r1-summary")[0]  # the round's figures in the Prefect UI, newest version
    assert {r["figure"]: r["round 1"] for r in table_rows(published)}["verdicts"] == str(s["verdicts"])

    again = _run(micro_round, store, "r1")
    assert all(again.steps[name]["state"] == "Cached" for name in MODEL_STEPS + ["select-inputs", "score"])
    assert again.summary.model_dump() == s
    assert _count(store, "samples", "r1") == 4  # replaced, never duplicated

    other = _run(micro_round, store, "r2")  # same inputs, another run id: no model work, its own partition
    assert all(other.steps[name]["state"] == "Cached" for name in MODEL_STEPS)
    assert _count(store, "samples", "r2") == 4 and _count(store, "verdicts", "r2") == s["verdicts"]
    from dr_core.store.artifacts import Store

    con = Store.from_url(store).connect()
    assert con.sql("SELECT count(DISTINCT run_id) FROM samples").fetchall() == [(2,)]
    # one runs row per (run, round): the re-run of r1 replaced its row
    assert con.sql("SELECT count(*) FROM runs WHERE status = 'round-complete'").fetchall() == [(2,)]
    # the steps table keeps both executions of r1: the first ran every model step, the re-run none
    from dr_core.store import sql

    ex = {}
    for r in sql.run(con, "step_times", {"run_id": "r1"}).to_pylist():
        ex.setdefault(r["execution"], {})[r["step"]] = r
    assert len(ex) == 2
    ran, cached = ex.values()
    assert set(ran) == set(first.steps) and set(cached) == set(again.steps)
    assert all(ran[n]["state"] == "Completed" for n in MODEL_STEPS) and ran["sample"]["flow"] == "dynamicrubric-round"
    assert all(cached[n]["state"] == "Cached" for n in MODEL_STEPS)
    assert cached["sample"]["execution_ran"] < ran["sample"]["execution_ran"]
    assert ran["verify"]["seconds"] == first.steps["verify"]["seconds"]


def test_transient_failure_is_retried_and_bad_input_is_not(prefect_harness, micro_round, tmp_path, monkeypatch):
    import dr_core.runs.round_steps as pipeline
    from dr_core.datasets import DataError

    real = pipeline.sample_sets
    calls = []

    def crash_once(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("simulated engine crash")
        return real(*args, **kwargs)

    monkeypatch.setattr(pipeline, "sample_sets", crash_once)
    result = _run(micro_round, str(tmp_path / "a"), "retry", run_eval=False)
    assert len(calls) == 2 and result.steps["sample"]["state"] == "Completed"
    assert _count(str(tmp_path / "a"), "samples", "retry") == 4

    bad = []

    def bad_input(*args, **kwargs):
        bad.append(1)
        raise DataError("prompts.jsonl", 3, "prompt", "empty string")

    monkeypatch.setattr(pipeline, "sample_sets", bad_input)
    with pytest.raises(DataError):
        _run(micro_round, str(tmp_path / "b"), "bad", run_eval=False)
    assert len(bad) == 1  # no retry on bad input
    # the failed step is recorded in the store with the steps before it
    from dr_core.store.artifacts import Store

    states = dict(Store.from_url(str(tmp_path / "b")).connect().sql("SELECT step, state FROM steps").fetchall())
    # the model step is one shard of one: its shard task failed, so its merge never ran
    assert states == {"select-inputs": "Completed", "sample/shard-0": "Failed"}
    from dr_core.store.artifacts import Store

    assert Store.from_url(str(tmp_path / "b")).parts("samples") == []  # nothing half-written
