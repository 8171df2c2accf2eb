"""The artifact store against a local directory and a real S3 server (SeaweedFS): layout, atomic idempotent
writes, schemas enforced, DuckDB views (empty tables included), content hashes, no secrets in the open."""

import os

import pyarrow as pa
import pytest

from dr_core.store.artifacts import S3Options, Store, StoreError


def _verdicts(n=4, verdict=True):
    return [
        dict(stage="generator", set_id=i, rollout=0, item=0, target="C", response=i, verdict=verdict, verifier="v")
        for i in range(n)
    ]


def test_accepts_polars_and_arrow(tmp_path):
    import polars as pl

    store = Store.from_url(str(tmp_path))
    uri = store.write(
        "eval",
        pl.DataFrame(dict(benchmark=["b"], checkpoint=["c"], seed=[1], metric=["acc"], value=[None])),
        run_id="r",
        round=0,
    )
    assert store.read(uri).column("value").to_pylist() == [None]
    table = pa.table({"run_id": ["r"], "status": ["done"], "created_at": pa.array([0], pa.timestamp("us", "UTC"))})
    assert store.read(store.write("runs", table, run_id="r")).num_rows == 1


def test_local_write_is_atomic(tmp_path, monkeypatch):
    store = Store.from_url(str(tmp_path))
    uri = store.write("verdicts", _verdicts(), run_id="r1", round=0)

    def crash(src, dst):
        raise OSError("disk gone")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(StoreError, match="disk gone"):
        store.write("verdicts", _verdicts(1), run_id="r1", round=0)
    assert store.read(uri).num_rows == 4  # the old file survives intact
    assert os.listdir(os.path.dirname(uri)) == ["data.parquet"]  # and no temp file is left


def test_store_urls(tmp_path):
    assert Store.from_url(f"file://{tmp_path}").url == str(tmp_path)
    assert Store.from_url("s3://bucket/a/b/", S3Options()).url == "s3://bucket/a/b"
    for bad in ("s3://", "ftp://host/x"):
        with pytest.raises(ValueError):
            Store.from_url(bad)


def test_secrets_never_shown(monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cr3t-value")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "key-id-value")
    opts = S3Options.from_env()
    assert opts.secret == "s3cr3t-value"
    assert "s3cr3t" not in repr(opts) and "key-id-value" not in repr(opts)
    assert "s3cr3t" not in repr(Store.from_url("s3://bucket/p"))
