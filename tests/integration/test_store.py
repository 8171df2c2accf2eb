"""The integration half of tests/unit/test_store.py (real models, servers or clusters): its helpers live
there."""

from __future__ import annotations

import pytest

from dr_core.store import schemas
from dr_core.store.artifacts import Store
from tests.unit.test_store import _verdicts


def test_write_read_layout(store_url):
    store = Store.from_url(store_url)
    uri = store.write("verdicts", _verdicts(), part="verify", run_id="r1", round=2)
    assert (
        uri
        == f"{store.url}/verdicts/run_id=r1/round=2/verify.parquet"
        == store.uri_for("verdicts", part="verify", run_id="r1", round=2)
    )
    assert store.exists(uri) and not store.exists(store.uri_for("verdicts", part="other", run_id="r1", round=2))
    t = store.read(uri)
    assert t.schema == schemas.TABLES["verdicts"].schema
    assert t.column("run_id").to_pylist() == ["r1"] * 4 and t.column("round").to_pylist() == [2] * 4
    assert store.parts("verdicts") == [uri] and store.parts("verdicts", run_id="r2") == []


def test_rewrite_replaces_never_duplicates(store_url):
    store = Store.from_url(store_url)
    first = store.write("verdicts", _verdicts(), part="verify", run_id="r1", round=0)
    h1 = store.content_hash(first)
    again = store.write("verdicts", _verdicts(), part="verify", run_id="r1", round=0)
    assert again == first and store.content_hash(again) == h1 and h1.startswith("sha256:")
    con = store.connect()
    assert con.sql("SELECT count(*) FROM verdicts").fetchall() == [(4,)]
    store.write("verdicts", _verdicts(2, verdict=False), part="verify", run_id="r1", round=0)
    assert store.content_hash(first) != h1
    assert con.sql("SELECT count(*), bool_or(verdict) FROM verdicts").fetchall() == [(2, False)]


def test_views_see_new_parts_and_keep_null_verdicts(store_url):
    store = Store.from_url(store_url)
    store.write("verdicts", _verdicts(3, verdict=None), run_id="r1", round=0)
    con = store.connect()
    store.write("verdicts", _verdicts(2), run_id="r1", round=1)
    rows = con.sql("SELECT round, count(*), count(verdict) FROM verdicts GROUP BY ALL ORDER BY 1").fetchall()
    assert rows == [(0, 3, 0), (1, 2, 2)]  # unscorable stays NULL, never 0
    assert store.read_table("verdicts", run_id="r1").num_rows == 5


def test_empty_tables_are_views_with_columns(store_url):
    con = Store.from_url(store_url).connect()
    for name, ts in schemas.TABLES.items():
        cols = [r[0] for r in con.sql(f"DESCRIBE {name}").fetchall()]
        assert cols == ts.columns, name
        assert con.sql(f"SELECT count(*) FROM {name}").fetchall() == [(0,)]


def test_dataset_tables_and_read_table(store_url):
    store = Store.from_url(store_url)
    rows = [dict(prompt_id="p1", prompt="x", rank=r, response=f"r{r}", source="s") for r in (1, 2)]
    uri = store.write("anchors", rows, dataset="d1")
    assert uri.endswith("/anchors/dataset=d1/data.parquet")
    t = store.read_table("anchors")
    assert t.column("dataset").to_pylist() == ["d1", "d1"] and t.column("score").null_count == 2
    assert store.read_table("prompts").num_rows == 0


@pytest.mark.parametrize(
    "rows, keys, message",
    [
        (_verdicts(), dict(run_id="r1"), "partitioned by"),
        (_verdicts(), dict(run_id="../x", round=0), "path segment"),
        (_verdicts(), dict(run_id="r1", round=-1), "non-negative"),
        ([{**_verdicts(1)[0], "run_id": "r2"}], dict(run_id="r1", round=0), "file is run_id=r1"),
        ([{**_verdicts(1)[0], "extra": 1}], dict(run_id="r1", round=0), "unknown column"),
        ([{**_verdicts(1)[0], "target": "policy"}], dict(run_id="r1", round=0), "target"),
        ([{**_verdicts(1)[0], "set_id": None}], dict(run_id="r1", round=0), "NULL value"),
        ([{k: v for k, v in _verdicts(1)[0].items() if k != "item"}], dict(run_id="r1", round=0), "'item' is missing"),
    ],
)
def test_bad_writes_are_refused_and_write_nothing(store_url, rows, keys, message):
    store = Store.from_url(store_url)
    with pytest.raises(ValueError, match=message):
        store.write("verdicts", rows, **keys)
    assert store.parts("verdicts") == []


def test_s3_artifacts_hold_no_credentials(s3_server, monkeypatch):
    for k, v in s3_server.env.items():
        monkeypatch.setenv(k, v)
    store = Store.from_url("s3://dr-test/no-secrets")
    uri = store.write("verdicts", _verdicts(), run_id="r1", round=0)
    payload = store.fs.cat_file(store._path(uri))
    assert s3_server.env["AWS_SECRET_ACCESS_KEY"].encode() not in payload
    assert s3_server.env["AWS_ACCESS_KEY_ID"].encode() not in payload
