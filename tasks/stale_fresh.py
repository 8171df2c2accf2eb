"""Prefect task of the stale-versus-fresh experiment: give a round's existing response sets a new stage.

The sets of P(t-1) already in the store (``dr_core.runs.stale_fresh.plan``) are copied under stage ``stale`` or
``fresh``
of round t, so each stage's samples, rubrics, verdicts, scores and rewards sit side by side in one partition and
every query (``sql/case_study``, ``sql/set_gap``...) joins them like any other stage. The copy's content is the same
on every run, so the round tasks downstream (tasks/round.py) hit their content cache on a re-run.
"""

from __future__ import annotations

import pyarrow as pa
from prefect import task

from dr_core.store.artifacts import Store
from tasks.options import retry_on_transient
from tasks.runtime import write_ref


@task(
    name="restage-samples",
    persist_result=False,
    retries=2,
    retry_delay_seconds=2,
    retry_condition_fn=retry_on_transient,
)
def restage_samples(source_uri: str, stage: str, store: str, run_id: str, round_no: int) -> dict:
    """Copy the samples file at ``source_uri`` to ``<stage>-samples`` of (run_id, round_no) with ``stage`` set."""
    s = Store.from_url(store)
    t = s.read(source_uri).drop_columns(["run_id", "round", "stage"])
    t = t.append_column("stage", pa.array([stage] * t.num_rows, pa.string()))
    return write_ref(s, "samples", t, f"{stage}-samples", run_id=run_id, round=round_no)
