"""The round against a real S3 server (SeaweedFS): artifacts and Prefect's cache records live in the bucket, so a
re-run is served from the cache."""

from __future__ import annotations

import uuid

import pytest

pytestmark = [pytest.mark.slow]


def test_round_on_s3_store_and_cached_rerun(prefect_harness, micro_round, s3_server, monkeypatch):
    from dr_core.store.artifacts import Store
    from flows.round import RoundParams, round_flow

    for k, v in s3_server.env.items():
        monkeypatch.setenv(k, v)
    cfg = micro_round.model_copy(update={"n_prompts": 1})
    store = f"s3://dr-test/round-{uuid.uuid4().hex[:10]}"  # the bucket the s3_server fixture made
    params = RoundParams(config=cfg, store=store, run_id="s3run", round_no=1, run_eval=False)
    first = round_flow(params)
    assert first.summary.responses == 2
    st = Store.from_url(store)
    assert st.read_table("samples", run_id="s3run", round=1).num_rows == 2
    assert st.fs.exists(f"{st.root}/_prefect/results")  # cache records are in the bucket
    again = round_flow(params)
    assert again.steps["sample"]["state"] == "Cached" and again.steps["verify"]["state"] == "Cached"
