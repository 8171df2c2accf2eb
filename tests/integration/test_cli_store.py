"""The integration half of tests/unit/test_cli_store.py (real models, servers or clusters): its helpers live
there."""

from __future__ import annotations

import json

import pytest

from dr_core.store.artifacts import Store
from tests.unit.test_cli_store import ANCHORS, _files, _text, dr


def test_ingest_then_sql_and_anchor_filter(store_url):
    res = dr("ingest", "anchors", ANCHORS, "--store", store_url)
    assert res.exit_code == 0, res.output
    assert "wrote 528 anchors rows" in res.output  # 48 prompts x 11 ranked responses
    res = dr(
        "sql",
        "SELECT count(DISTINCT prompt_id) AS n, min(rank) AS lo, max(rank) AS hi FROM anchors",
        "--store",
        store_url,
        "--format",
        "json",
    )
    assert res.exit_code == 0, res.output
    assert json.loads(res.output) == [{"n": 48, "lo": 1, "hi": 11}]
    res = dr("query", "anchor_filter", "--store", store_url, "--param", "min_responses=11", "--format", "csv")
    assert res.exit_code == 0, res.output
    lines = res.output.strip().splitlines()
    assert lines[0].startswith("dataset,prompt_id,n_responses")
    kept = [line.split(",")[1] for line in lines[1:]]
    assert 0 < len(kept) < 48 and "alpacaeval-0" in kept  # some AlpacaEval prompts are 50 characters or shorter
    # re-ingesting the same dataset replaces it: no duplicated rows
    assert dr("ingest", "anchors", ANCHORS, "--store", store_url).exit_code == 0
    res = dr("sql", "SELECT count(*) AS n FROM anchors", "--store", store_url, "--format", "csv")
    assert res.output == "n\n528\n"
    res = dr("query", "anchor_filter", "--store", store_url, "-p", "min_responses=12")
    assert res.exit_code == 0 and "0 row(s)" in res.output


def test_ingest_prompts_with_dataset_name(store_url, tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text('{"id": 1, "prompt": "Say hi."}\n\n{"id": "two", "prompt": "Count to 3.", "baseline": "1 2 3"}\n')
    res = dr("ingest", "prompts", f, "--store", store_url, "--dataset", "mine")
    assert res.exit_code == 0, res.output
    res = dr(
        "sql",
        "SELECT dataset, prompt_id, baseline FROM prompts ORDER BY prompt_id",
        "--store",
        store_url,
        "--format",
        "json",
    )
    assert json.loads(res.output) == [
        {"dataset": "mine", "prompt_id": "1", "baseline": None},
        {"dataset": "mine", "prompt_id": "two", "baseline": "1 2 3"},
    ]


@pytest.mark.parametrize(
    "content, where",
    [
        ('{"id": "a", "prompt": "p", "responses": ["x", "y"]}\n{"id": "b", "prompt": "p", "responses": ["x"]}\n', ":2"),
        ('{"id": "a", "prompt": "p", "responses": ["x", "y"]}\nnot json\n', ":2"),
        ('{"id": "a", "prompt": "p", "responses": ["x", "y"], "scores": [0.1, 0.9]}\n', ":1"),
    ],
)
def test_malformed_file_writes_nothing(store_url, tmp_path, content, where):
    assert dr("ingest", "anchors", ANCHORS, "--store", store_url).exit_code == 0
    before = {u: Store.from_url(store_url).content_hash(u) for u in _files(store_url)["anchors"]}
    f = tmp_path / "alpacaeval_anchors.jsonl"  # same dataset name as the good file would get: must not replace it
    f.write_text(content)
    res = dr("ingest", "anchors", f, "--store", store_url, "--dataset", "anchors_alpacaeval")
    assert res.exit_code != 0
    assert f"alpacaeval_anchors.jsonl{where}" in _text(res) and "nothing was written" in _text(res)
    store = Store.from_url(store_url)
    assert {u: store.content_hash(u) for u in _files(store_url)["anchors"]} == before


@pytest.mark.parametrize(
    "statement",
    [
        "COPY anchors TO '{tmp}/out.parquet'",
        "CREATE TABLE t AS SELECT 1",
        "INSERT INTO anchors SELECT * FROM anchors",
        "SELECT 1; DELETE FROM anchors",
    ],
)
def test_sql_refuses_writes(store_url, tmp_path, statement):
    assert dr("ingest", "anchors", ANCHORS, "--store", store_url).exit_code == 0
    before = _files(store_url)
    res = dr("sql", statement.format(tmp=tmp_path), "--store", store_url)
    assert res.exit_code != 0 and ("read-only" in _text(res) or "exactly one" in _text(res))
    assert _files(store_url) == before and not (tmp_path / "out.parquet").exists()
