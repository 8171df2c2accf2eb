"""Prefect's task results and cache records (``<store>/_prefect/results``) survive a crash mid-write: a ``dr round`` on
the scripted engines is SIGKILLed half-way through a record (``DR_FAULT=kill@result-write#N``, dr_core/faults.py),
and a record torn by an older, non-atomic writer is planted; each time the re-run completes with the rows of an
uninterrupted reference run, and every file left under the results directory is a whole, readable record.

The set-up (scripted server, one real ``prefect server``, the reference run) and the helpers are those of
tests/integration/test_faults.py, imported from it.

    flock /tmp/dr-heavy.lock .venv/bin/python -m pytest tests/integration/test_result_faults.py -q --durations=0
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.integration import test_faults as faults
from tests.integration.test_faults import _result, assert_same_rows, dr_round, snapshot, temp_files

# test_faults.py's fixtures, registered here under their own names: its scripted server, its ``prefect server``,
# its reference run (an uninterrupted round in its own store) and a fresh directory per test
scripted = faults.scripted
prefect_api = faults.prefect_api
ctx = faults.ctx
reference = faults.reference
case = faults.case

pytestmark = [pytest.mark.slow]

RESULTS = Path("_prefect") / "results"
#: The 3rd record a round writes is the ``sample`` step's (after select-inputs' and sample/shard-0's).
KILLED_AT = 3
BEFORE = ["select-inputs", "sample/shard-0"]
KILLED_STEP = "sample"


def _records(results: Path) -> dict[str, object]:
    """Every record under ``results`` (temp files left out), read back as Prefect reads it: name -> its result.
    Fails on any file that is not a whole record."""
    from prefect._internal.result_records import ResultRecord

    out = {}
    for p in sorted(results.iterdir()):
        if p.name.startswith(".") and p.name.endswith(".tmp"):
            continue
        try:
            out[p.name] = ResultRecord.deserialize(p.read_bytes()).result
        except Exception as exc:  # noqa: BLE001 - say which file
            pytest.fail(f"{p} ({p.stat().st_size} bytes) is not a readable result record: {exc}")
    return out


def _reference_records(ctx) -> dict[str, int]:
    results = ctx.root / "reference" / "store" / RESULTS
    return {p.name: p.stat().st_size for p in results.iterdir()}


def test_sigkill_during_a_result_write_leaves_no_torn_record_and_the_rerun_completes(ctx, reference, case):
    store, out = case / "store", case / "result.json"
    results = store / RESULTS
    ref_records = _reference_records(ctx)
    rc, log, _ = dr_round(ctx, str(store), out, fault=f"kill@result-write#{KILLED_AT}")
    assert rc == -signal.SIGKILL, f"expected death by SIGKILL, got {rc}:\n{log[-3000:]}"
    assert not out.exists()

    # the records written before the kill are whole; the killed one is only a temp file with part of its bytes
    done = _records(results)
    assert len(done) == KILLED_AT - 1 and set(done) <= set(ref_records), sorted(done)
    [torn] = temp_files(results)
    key = torn.name[1:].split(".")[0]  # .<key>.<random>.tmp
    assert key in ref_records and not (results / key).exists()
    assert 0 < torn.stat().st_size < ref_records[key]
    assert temp_files(store) == [torn]  # nothing else torn anywhere in the store

    rc, log, _ = dr_round(ctx, str(store), out)
    assert rc == 0, log[-4000:]
    steps = _result(out)["steps"]
    assert all(steps[s]["state"] == "Cached" for s in BEFORE), steps  # whole records are cache hits
    assert steps[KILLED_STEP]["state"] == "Completed", steps  # its record never landed: recomputed
    assert _result(out)["summary"] == reference["result"]["summary"]
    assert_same_rows(snapshot(str(store)), reference["rows"])
    assert temp_files(store) == []  # the dead writer's temp file was swept by the next write
    assert set(_records(results)) == set(ref_records)  # every record whole, the same keys as the reference's


def test_a_torn_record_left_by_an_older_writer_is_a_cache_miss_and_is_rewritten(ctx, reference, case):
    """A record truncated under its final name (what Prefect's own non-atomic writer could leave): the re-run treats
    it as a cache miss, recomputes that step (no crash), serves the intact records from the cache, and rewrites the
    torn record whole."""
    store, out = case / "store", case / "result.json"
    results = store / RESULTS
    rc, log, _ = dr_round(ctx, str(store), out)
    assert rc == 0, log[-4000:]
    records = _records(results)
    [inputs_key] = [k for k, v in records.items() if type(v).__name__ == "RoundInputs"]  # select-inputs' record
    whole = (results / inputs_key).read_bytes()
    (results / inputs_key).write_bytes(whole[: len(whole) // 2])

    rc, log, _ = dr_round(ctx, str(store), out)
    assert rc == 0, log[-4000:]
    steps = _result(out)["steps"]
    assert steps["select-inputs"]["state"] == "Completed", steps
    assert all(v["state"] == "Cached" for k, v in steps.items() if k in ("sample", "generate-rubrics", "verify")), steps
    assert_same_rows(snapshot(str(store)), reference["rows"])
    again = _records(results)
    assert set(again) == set(records) and again[inputs_key] == records[inputs_key]  # rewritten whole, nothing added
    assert temp_files(store) == []
