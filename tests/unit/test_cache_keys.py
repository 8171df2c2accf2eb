"""Per-step code versions: a step's cache key hashes the code that step runs (its module, the project modules it
imports, the queries they name), so an edit elsewhere keeps its cache and an edit to its own code misses it.

The edits are made to a copy of the repository; the keys are the ones Prefect computes (``content_cache_key`` of
the real task objects)."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

import tasks.options as options
from dr_core.paths import REPO_DIR
from tasks.round import score, verify
from tasks.train import train_generator


@pytest.fixture()
def repo(tmp_path, monkeypatch):
    root = tmp_path / "repo"
    for name in ("dr_core", "tasks", "sql"):
        shutil.copytree(REPO_DIR / name, root / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    monkeypatch.setattr(options, "REPO_DIR", root)
    options.code_version.cache_clear()
    yield root
    options.code_version.cache_clear()


def _key(task) -> str:
    options.code_version.cache_clear()
    ctx = SimpleNamespace(task=task)
    return options.content_cache_key(ctx, {"samples": {"uri": "s3://b/x.parquet", "sha256": "sha256:1"}, "round_no": 2})


def _edit(root: Path, rel: str, old: str, new: str) -> None:
    path = root / rel
    text = path.read_text(encoding="utf-8")
    assert old in text, f"{rel} no longer holds {old!r}: update this test"
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


def test_the_training_step_runs_train_and_not_report(repo):
    files = options.step_code("tasks.train")
    assert "dr_core/train/grpo.py" in files and "tasks/train.py" in files
    assert not [f for f in files if f.startswith(("dr_core/report/", "tasks/anchor_refresh"))], sorted(files)


def test_engines_named_by_path_are_part_of_the_model_steps(repo):
    """make_engine imports its implementations by a dotted path in a string: an edit there must miss the cache."""
    assert {"dr_core/engines/vllm_engine.py", "dr_core/engines/openai_http/engine.py"} <= set(
        options.step_code("tasks.round")
    )
    before = _key(verify)
    _edit(
        repo,
        "dr_core/engines/vllm_engine.py",
        "from __future__ import annotations",
        "from __future__ import annotations\nW = 2",
    )
    assert _key(verify) != before


def test_bundled_data_the_code_names_counts_by_content(repo):
    """The verifier's balanced probe and the preset's anchors are data the steps read: an edit misses the cache."""
    files = options.step_code("tasks.round")
    assert {"dr_core/data/verifier_probe.jsonl", "dr_core/data/anchors_alpacaeval.jsonl"} <= set(files)
    before = _key(verify)
    path = repo / "dr_core" / "data" / "verifier_probe.jsonl"
    path.write_text(path.read_text(encoding="utf-8") + "\n", encoding="utf-8")
    assert _key(verify) != before


def test_a_report_edit_keeps_the_training_cache_hit(repo):
    before = {t.name: _key(t) for t in (train_generator, verify, score)}
    whole = options.code_version()
    (repo / "dr_core" / "report" / "render_extra.py").write_text("X = 1\n", encoding="utf-8")
    _edit(
        repo, "dr_core/report/svg.py", "from __future__ import annotations", "from __future__ import annotations\nW = 2"
    )
    after = {t.name: _key(t) for t in (train_generator, verify, score)}
    assert after == before
    assert options.code_version() != whole  # the run's recorded code version still moves


def test_a_header_comment_or_docstring_edit_keeps_the_cache(repo):
    before = _key(train_generator)
    _edit(repo, "sql/anchor_filter.sql", "-- anchor_filter:", "-- anchor_filter (edited header):")
    _edit(repo, "dr_core/train/grpo.py", '"""', '"""Edited docstring. ')
    _edit(
        repo,
        "dr_core/train/grpo.py",
        "from __future__ import annotations",
        "from __future__ import annotations  # an edited comment",
    )
    assert _key(train_generator) == before


def test_an_edit_to_train_misses_the_training_cache_but_not_the_verify_cache(repo):
    train_before, verify_before = _key(train_generator), _key(verify)
    _edit(
        repo, "dr_core/train/grpo.py", "from __future__ import annotations", "from __future__ import annotations\nW = 2"
    )
    assert _key(train_generator) != train_before
    assert _key(verify) == verify_before  # verify does not run the trainer


def test_an_edit_to_a_query_the_step_runs_misses_its_cache(repo):
    assert "sql/anchor_filter.sql" in options.step_code("tasks.round")
    before = _key(verify)
    _edit(repo, "sql/anchor_filter.sql", "ORDER BY dataset, prompt_id", "ORDER BY prompt_id, dataset")
    assert _key(verify) != before
    _edit(repo, "sql/anchor_filter.sql", "-- param min_responses INTEGER = 7", "-- param min_responses INTEGER = 8")
    assert _key(verify) != before  # a parameter's default is part of the query
