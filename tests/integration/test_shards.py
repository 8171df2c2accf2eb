"""The integration half of tests/unit/test_shards.py (real models, servers or clusters): its helpers live
there."""

from __future__ import annotations

from dr_core.store.artifacts import Store
from tests.unit.test_shards import _cfg, _measure, prompt_engine
from tests.unit.test_task_bodies import serve


def test_sharded_round_writes_the_unsharded_rows(prefect_harness, monkeypatch, tmp_path):
    whole, split = _cfg(1), _cfg(3)
    serve(monkeypatch, whole.engines, prompt_engine())  # the same engines config: one engine for both
    store = str(tmp_path / "store")
    one = _measure(whole, store, "r")
    three = _measure(split, store, "r")  # the same run: the merge rewrites each step's part
    s = Store.from_url(store)
    for table in ("samples", "rubrics", "verdicts"):
        a, b = one["artifacts"][table], three["artifacts"][table]
        assert a.rows == b.rows > 0 and a.uri == b.uri
        # the same Parquet bytes: the steps after the merge hit the unsharded run's cache
        assert a.sha256 == b.sha256 == s.content_hash(b.uri)
    assert three["steps"]["score"]["state"] == "Cached"
    assert one["summary"] == three["summary"]
    assert {f"{step}/shard-{i}" for step in ("sample", "generate-rubrics", "verify") for i in range(3)} <= set(
        three["steps"]
    )
    assert three["artifacts"]["rubrics"].cost["requests"] == one["artifacts"]["rubrics"].cost["requests"]
    samples = s.read(three["artifacts"]["samples"].uri).to_pylist()
    prompts = {p["prompt_id"]: p["prompt"] for p in s.read(three["artifacts"]["prompts"].uri).to_pylist()}
    assert sorted({r["set_id"] for r in samples}) == [0, 1, 2, 3, 4]
    for r in samples:  # every set kept its own prompt's responses
        assert "-".join(prompts[r["prompt_id"]].split()[:2]) in r["response"]
    # each shard wrote its own part outside the tables (the DuckDB views count the merged rows once)
    assert len(s.files_under("_shards/samples", ".parquet")) == 3
    con = s.connect()
    assert con.sql("SELECT count(*) FROM samples WHERE run_id = 'r'").fetchall() == [(len(samples),)]
    # a re-run with more shards: new shard tasks, the same merged rows
    again = _measure(_cfg(5), store, "r")
    assert again["summary"] == one["summary"] and again["steps"]["score"]["state"] == "Cached"
