"""Cache keys come from content, not from run ids or URIs; retries happen on transient failures only."""

from types import SimpleNamespace

import pytest

from dr_core.datasets import DataError
from tasks.options import code_version, content_cache_key, is_transient


def ctx(name="sample"):
    return SimpleNamespace(task=SimpleNamespace(name=name))


def test_cache_key_ignores_run_id_store_and_uri_but_not_content():
    a = {"uri": "s3://b/samples/run_id=a/round=1/x.parquet", "sha256": "sha256:1", "rows": 4}
    b = {"uri": "/tmp/samples/run_id=b/round=1/x.parquet", "sha256": "sha256:1", "rows": 4}
    k1 = content_cache_key(ctx(), {"samples": a, "run_id": "a", "store": "s3://b", "round_no": 1})
    k2 = content_cache_key(ctx(), {"samples": b, "run_id": "b", "store": "/tmp", "round_no": 2})
    assert k1 == k2
    changed = content_cache_key(ctx(), {"samples": {**a, "sha256": "sha256:2"}, "run_id": "a"})
    assert changed != k1
    assert content_cache_key(ctx("verify"), {"samples": a}) != content_cache_key(ctx("sample"), {"samples": a})


def test_cache_key_depends_on_config():
    from dr_core.presets import preset

    assert content_cache_key(ctx(), {"cfg": preset("tiny")}) != content_cache_key(ctx(), {"cfg": preset("tiny", k=3)})
    assert content_cache_key(ctx(), {"cfg": preset("tiny")}) == content_cache_key(ctx(), {"cfg": preset("tiny")})


def test_code_version_is_stable_hex():
    assert code_version() == code_version() and len(code_version()) == 16


@pytest.mark.parametrize(
    "exc, retry",
    [
        (RuntimeError("engine crashed"), True),
        (MemoryError(), True),
        (ConnectionError("reset"), True),
        (TimeoutError(), True),
        (OSError("S3 503 slow down"), True),
        (DataError("f.jsonl", 2, "prompt", "missing"), False),
        (ValueError("bad config"), False),
        (KeyError("prompt_id"), False),
        (FileNotFoundError("anchors.jsonl"), False),
    ],
)
def test_transient_classification(exc, retry):
    assert is_transient(exc) is retry
