"""`dr ingest`, `dr sql`, `dr query` end to end through the real CLI, against a local directory and a real S3
server: ranked anchors go in and come back; malformed input and write statements change nothing."""

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from cli.app import app
from dr_core.paths import bundled
from dr_core.store.artifacts import Store

runner = CliRunner()
ANCHORS = bundled("anchors_alpacaeval.jsonl")


def dr(*args):
    return runner.invoke(app, [str(a) for a in args])


def _text(res) -> str:
    """The output with rich's line wrapping undone (error messages wrap at the terminal width)."""
    return res.output.replace("\n", "")


def _files(url):
    store = Store.from_url(url)
    return {t: store.parts(t) for t in ("anchors", "prompts")}


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


def test_query_errors(tmp_path):
    store = str(tmp_path / "st")
    assert dr("ingest", "anchors", ANCHORS, "--store", store).exit_code == 0
    for args, message in [
        (("query", "nope", "--store", store), "no query named"),
        (("query", "anchor_filter", "--store", store, "-p", "head"), "NAME=VALUE"),
        (("query", "rubric_history", "--store", store), "required"),
        (("sql", "SELEC 1", "--store", store), "cannot parse"),
        (("sql", "SELECT * FROM nowhere", "--store", store), "query failed"),
        (("sql", "SELECT 1", "--store", store, "--format", "xml"), "unknown format"),
        (("ingest", "rubrics", ANCHORS, "--store", store), "cannot ingest"),
        (("ingest", "anchors", ANCHORS, "--store", "ftp://x/y"), "unsupported store URL"),
    ]:
        res = dr(*args)
        assert res.exit_code == 2 and message in _text(res), (args, res.output)


def test_real_entry_point_and_dr_store_env(tmp_path):
    env = {"DR_STORE": str(tmp_path / "st"), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}
    dr_bin = [sys.executable, "-m", "cli.main"]
    out = subprocess.run(
        [*dr_bin, "ingest", "anchors", str(ANCHORS)], capture_output=True, text=True, env=env, timeout=120
    )
    assert out.returncode == 0, out.stderr
    out = subprocess.run(
        [*dr_bin, "query", "gap_by_round", "--format", "json"], capture_output=True, text=True, env=env, timeout=120
    )
    assert out.returncode == 0 and json.loads(out.stdout) == []
