"""Shared test set-up. Fixtures for the real S3 server and the real model live in their own modules."""

import os
import shutil
import tempfile
from pathlib import Path

import pytest

# 2-core machines: one thread per heavy op keeps a loaded machine from thrashing (ENVIRONMENT.md).
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# The cache (dr_core.paths.cache_dir: converted bundled models, Prefect's home, compiled DeepSpeed ops, training
# scratch) is a fresh temporary directory for the session, removed at its end, so the suite never writes into
# ~/.cache/dynamicrubric (nor, through Prefect, into ~/.prefect); a DR_CACHE_DIR of the shell is not used. Set here,
# before any project module runs: nothing computes a cache path at import time.
#
# Cost: the tests that use a real model convert it once per session into the fresh cache. Measured on the 2-core
# CPU machine: 33 s for the default model (SmolLM2-135M, 517 MB) and 73 s for the tiny preset's verifier
# (Qwen2.5-Coder-0.5B, 2.4 GB), so about 1 min 50 s when a session needs both; the fast set
# (-m "not slow and not integration") converts nothing. To reuse converted models (and compiled ops) across
# sessions, point DR_TEST_CACHE_DIR at a persistent directory of your own; it is used as is and kept:
#
#     DR_TEST_CACHE_DIR=~/.cache/dynamicrubric-tests .venv/bin/python -m pytest -q tests/integration/test_round_flow.py
_PERSISTENT_CACHE = os.environ.get("DR_TEST_CACHE_DIR")
TEST_CACHE_DIR = (
    Path(_PERSISTENT_CACHE).expanduser() if _PERSISTENT_CACHE else Path(tempfile.mkdtemp(prefix="dr-test-cache-"))
)
TEST_CACHE_DIR.mkdir(parents=True, exist_ok=True)
os.environ["DR_CACHE_DIR"] = str(TEST_CACHE_DIR)
os.environ["PREFECT_HOME"] = str(TEST_CACHE_DIR / "prefect")  # where dr_core.config.runtime.configure_prefect puts it

pytest_plugins = [
    "tests.support.fixtures_s3",
    "tests.support.fixtures_model",
    "tests.support.fixtures_prefect",
    "tests.support.fixtures_grpo",
]

#: The folders say what a test needs; its ``integration`` marker follows from them (``-m "not integration"``: unit/).
INTEGRATION_DIR = Path(__file__).resolve().parent / "integration"
UNIT_DIR = Path(__file__).resolve().parent / "unit"


def tier_problem(path: Path, marked_integration: bool) -> str | None:
    """Why a test at ``path`` is in the wrong folder, or None: a test under tests/unit/ marked ``integration`` by
    hand belongs in tests/integration/, and a test in neither folder has no tier."""
    if path.is_relative_to(INTEGRATION_DIR):
        return None
    if not path.is_relative_to(UNIT_DIR):
        return "neither under tests/unit/ nor tests/integration/"
    return "marked integration, but under tests/unit/" if marked_integration else None


def pytest_collection_modifyitems(config, items):
    """Every test under tests/integration/ is marked ``integration``; a test in the wrong folder (``tier_problem``)
    stops the collection."""
    misplaced = []
    for item in items:
        path = Path(str(item.fspath)).resolve()
        problem = tier_problem(path, item.get_closest_marker("integration") is not None)
        if problem:
            misplaced.append(f"{item.nodeid}: {problem}")
        elif path.is_relative_to(INTEGRATION_DIR):
            item.add_marker(pytest.mark.integration)
    if misplaced:
        raise pytest.UsageError("tests in the wrong folder:\n" + "\n".join(misplaced))


def pytest_unconfigure(config):
    if not _PERSISTENT_CACHE:
        shutil.rmtree(TEST_CACHE_DIR, ignore_errors=True)
