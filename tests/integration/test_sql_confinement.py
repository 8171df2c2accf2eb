"""The integration half of tests/unit/test_sql_confinement.py (real models, servers or clusters): its helpers live
there."""

from __future__ import annotations

import json

import duckdb
import pytest

from dr_core.store.artifacts import Store
from tests.unit.test_sql_confinement import ANCHORS, dr


def test_confinement_on_a_real_s3_store(s3_server, monkeypatch, tmp_path):
    import uuid

    for k, v in s3_server.env.items():
        monkeypatch.setenv(k, v)
    url, other = (f"s3://dr-test/conf-{uuid.uuid4().hex[:8]}" for _ in range(2))
    for u in (url, other):
        assert dr("ingest", "anchors", ANCHORS, "--store", u).exit_code == 0
    res = dr("sql", "SELECT count(*) AS n FROM anchors", "--store", url, "--format", "json")
    assert res.exit_code == 0 and json.loads(res.output) == [{"n": 528}]
    store = Store.from_url(url)
    before = sorted(store.fs.find(store.root))
    for statement in (
        f"SELECT count(*) FROM read_parquet('{other}/anchors/**/*.parquet')",
        f"EXPLAIN ANALYZE COPY (SELECT 1 AS x) TO '{url}/anchors/evil.csv'",
        "SELECT * FROM read_text('/etc/passwd')",
    ):
        res = dr("sql", statement, "--store", url)
        assert res.exit_code == 2, (statement, res.output)
    con = store.connect()
    with pytest.raises(duckdb.Error, match="disabled|Permission"):
        con.execute(f"COPY (SELECT 1) TO '{tmp_path / 'x.csv'}'")
    assert sorted(store.fs.find(store.root)) == before
