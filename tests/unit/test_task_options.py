"""Cache keys come from content, not from run ids or URIs; retries happen on transient failures only."""

from types import SimpleNamespace

import pytest

from dr_core.datasets import DataError
from tasks.options import code_version, content_cache_key, is_transient


def ctx(name="sample"):
    return SimpleNamespace(task=SimpleNamespace(name=name, fn=SimpleNamespace(__module__="tasks.round")))


def test_cache_key_ignores_run_id_store_and_uri_but_not_content():
    a = {"uri": "s3://b/samples/run_id=a/round=1/x.parquet", "sha256": "sha256:1", "rows": 4}
    b = {"uri": "/tmp/samples/run_id=b/round=1/x.parquet", "sha256": "sha256:1", "rows": 4}
    k1 = content_cache_key(ctx(), {"samples": a, "run_id": "a", "store": "s3://b", "round_no": 1})
    k2 = content_cache_key(ctx(), {"samples": b, "run_id": "b", "store": "/tmp", "round_no": 2})
    assert k1 == k2
    changed = content_cache_key(ctx(), {"samples": {**a, "sha256": "sha256:2"}, "run_id": "a"})
    assert changed != k1
    assert content_cache_key(ctx("verify"), {"samples": a}) != content_cache_key(ctx("sample"), {"samples": a})


def test_a_checkpoint_ref_counts_by_its_fingerprint_only():
    a = {"uri": "s3://b/models/run_id=a/round=1/policy", "fingerprint": "policy@1f", "reward_last": 0.4, "steps": 2}
    b = {"uri": "/tmp/models/run_id=b/round=3/policy", "fingerprint": "policy@1f", "reward_last": 0.9, "steps": 5}
    assert content_cache_key(ctx(), {"base": a}) == content_cache_key(ctx(), {"base": b})
    assert content_cache_key(ctx(), {"base": a}) != content_cache_key(
        ctx(), {"base": {**a, "fingerprint": "policy@2e"}}
    )


def test_the_step_context_counts_by_its_stage_and_typed_refs_by_their_content():
    """A task's first argument, the StepContext: another store, run id or round is the same work (the same key);
    another stage is other rows (another key). Typed references count like the dicts they dump to."""
    from dr_core.runs.refs import ArtifactRef, CheckpointRef, ShardRef, StepContext, UpdateRef
    from dr_core.runs.shards import Shard

    here = StepContext(store="s3://b/p", run_id="a", round_no=1, stage="measure")
    there = StepContext(store="/tmp/st", run_id="b", round_no=7, stage="measure")
    ref = ArtifactRef(uri="s3://b/p/samples/run_id=a/round=1/measure-samples.parquet", sha256="1", rows=4)
    moved = ArtifactRef(uri="/tmp/st/samples/run_id=b/round=7/measure-samples.parquet", sha256="1", rows=4, cost={})
    key = content_cache_key(ctx(), {"ctx": here, "samples": ref, "shard": Shard()})
    assert content_cache_key(ctx(), {"ctx": there, "samples": moved, "shard": Shard()}) == key
    assert content_cache_key(ctx(), {"ctx": here.at(stage="generator"), "samples": ref, "shard": Shard()}) != key
    assert content_cache_key(ctx(), {"ctx": here, "samples": ref.model_copy(update={"sha256": "2"})}) != key
    assert content_cache_key(ctx(), {"ctx": here, "samples": ref, "shard": Shard(index=0, count=2)}) != key
    part = ShardRef(uri=ref.uri, sha256="1", rows=4, shard=0, shards=2, sets=(0, 1))
    assert content_cache_key(ctx(), {"parts": [part]}) == content_cache_key(
        ctx(), {"parts": [{"uri": "x", "sha256": "1"}]}
    )
    start = CheckpointRef(uri="default", fingerprint="p@0")
    trained = UpdateRef(uri="/s/models/p", fingerprint="p@0", steps=2, seconds=1.0, group_size=2, unscorable=0)
    assert content_cache_key(ctx(), {"base": start}) == content_cache_key(ctx(), {"base": trained})
    assert trained.checkpoint == CheckpointRef(uri="/s/models/p", fingerprint="p@0")


def test_cache_key_depends_on_config():
    from dr_core.config import preset

    assert content_cache_key(ctx(), {"cfg": preset("tiny")}) != content_cache_key(ctx(), {"cfg": preset("tiny", k=3)})
    assert content_cache_key(ctx(), {"cfg": preset("tiny")}) == content_cache_key(ctx(), {"cfg": preset("tiny")})


def test_code_versions_are_per_step_hex():
    versions = {m: code_version(m) for m in ("tasks.round", "tasks.train", "tasks.stale_fresh")}
    assert all(len(v) == 16 and set(v) <= set("0123456789abcdef") for v in versions.values())
    assert len(set(versions.values())) == 3  # each step's own code (tests/unit/test_cache_keys.py: edits)


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
