"""The integration half of tests/unit/test_store_failures.py (real models, servers or clusters): its helpers live
there."""

from __future__ import annotations

import uuid

import pytest

from dr_core.store.artifacts import Store
from tests.unit import test_store_failures as unit_half
from tests.unit.test_store_failures import ANCHORS, _one_error_line, dr

# fixtures of the unit half that the tests here ask for by name
real_s3 = unit_half.real_s3
s3_env = unit_half.s3_env


def test_wrong_secret_is_one_line_without_the_secret(real_s3, s3_env):
    good = f"s3://dr-test/{uuid.uuid4().hex[:8]}"
    assert dr("ingest", "anchors", ANCHORS, "--store", good).exit_code == 0
    s3_env.setenv("AWS_SECRET_ACCESS_KEY", "PLANTED-WRONG-SECRET")
    for args in (("sql", "SELECT count(*) FROM anchors"), ("ingest", "anchors", ANCHORS)):
        line = _one_error_line(dr(*args, "--store", good))
        assert real_s3.endpoint_url in line and "PLANTED-WRONG-SECRET" not in line, line


def test_typod_bucket_is_refused_unless_asked_to_create_it(real_s3):
    bucket = f"dr-tset-{uuid.uuid4().hex[:6]}"
    fs = Store.from_url(f"s3://{bucket}/x").fs
    line = _one_error_line(dr("ingest", "anchors", ANCHORS, "--store", f"s3://{bucket}/x"))
    assert f"bucket '{bucket}' does not exist" in line and "--create-bucket" in line
    assert not fs.exists(bucket)
    for args in (("sql", "SELECT 1"), ("query", "anchor_filter"), ("report", "--run-id", "r", "--out", "rep")):
        assert "does not exist" in _one_error_line(dr(*args, "--store", f"s3://{bucket}/x"))
    res = dr("ingest", "anchors", ANCHORS, "--store", f"s3://{bucket}/x", "--create-bucket")
    assert res.exit_code == 0, res.output
    assert fs.exists(bucket) and Store.from_url(f"s3://{bucket}/x").read_table("anchors").num_rows == 528


def test_typod_bucket_stops_round_before_any_model_work(real_s3, monkeypatch):
    import flows.round

    monkeypatch.setattr(flows.round, "round_flow", lambda *a, **k: pytest.fail("the flow started"))
    line = _one_error_line(dr("round", "--store", f"s3://dr-nope-{uuid.uuid4().hex[:6]}/p", "--run-id", "r"))
    assert "does not exist" in line
