"""Two ``dr coevolve`` runs with different run ids on one store at the same time give the same tables as the same
two runs one after the other: nothing shared between them (TRL's scratch directories, checkpoint staging, cached
downloads, Prefect cache records) lets one run's work land in, or be taken from, the other run's partition.

Cheap setup, as tests/integration/test_faults.py (whose helpers this module uses): every role on the scripted
OpenAI-compatible server, one real ``prefect server`` for the module, and the tiny random Llama
(tests/support/fixtures_grpo.py) as G(0) and P(0) (``--generator-start/--policy-start``), so each GRPO update is a
few seconds. The reference is the two runs one after the other on a local store; the concurrent pairs run on a
local store and on S3 (SeaweedFS). Tables are compared with the run's store location and the cached downloads'
paths mapped to one spelling; the ``steps`` table and the clock/location columns are not compared (VOLATILE,
NOT_COMPARED in test_faults.py).

    flock /tmp/dr-heavy.lock .venv/bin/python -m pytest tests/integration/test_concurrent_runs.py -q --durations=0
"""

from __future__ import annotations

import hashlib
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.integration.test_faults import (  # noqa: F401 - prefect_api, scripted: the module's fixtures
    Ctx,
    _engines,
    _run,
    prefect_api,
    scripted,
    snapshot,
    temp_files,
)
from tests.support.fixtures_s3 import ACCESS_KEY, REGION, SECRET_KEY, TEST_BUCKET

# A GRPO update is keyed by its run (tasks/options.py::run_cache_key) and the generator's sets are adopted into the
# run's partition (flows/coevolve.py), so a run never trains from, or leaves its rows in, another run's partition.
pytestmark = [pytest.mark.slow]


RUNS = ("conc-a", "conc-b")
ROUNDS = 2
SETTINGS = {
    "round.n_prompts": 2,
    "round.k": 2,
    "round.n_anchor": 2,
    "round.eval_limit": 2,
    "measure_start": "false",
    "policy_eval": "null",
    "generator.rollouts": "trl",
    "policy.rollouts": "trl",
    "generator.max_steps": 1,
    "policy.max_steps": 1,
    "generator.max_completion_length": 8,
    "policy.max_completion_length": 8,
    "generator.num_generations": 2,
    "policy.num_generations": 2,
    "policy.per_device_train_batch_size": 2,
    "generator.per_device_train_batch_size": 2,
    "generator.gradient_accumulation_steps": 1,
}
TIMEOUT = 300


@pytest.fixture(scope="module")
def ctx(tmp_path_factory, scripted, prefect_api) -> Ctx:  # noqa: F811 - the fixtures imported above
    root = tmp_path_factory.mktemp("concurrent")
    return Ctx(root, scripted, prefect_api[0], _engines(root / "engines.json", scripted.base_url))


def _coevolve(ctx: Ctx, store: str, run_id: str, out: Path, tiny: Path, cache: Path, env: dict) -> tuple[int, str]:
    cmd = [
        sys.executable,
        "-m",
        "cli.main",
        "coevolve",
        "--rounds",
        str(ROUNDS),
        "--store",
        store,
        "--run-id",
        run_id,
        "--engines",
        str(ctx.engines),
        "--generator-start",
        str(tiny),
        "--policy-start",
        str(tiny),
        *[a for k, v in SETTINGS.items() for a in ("--set", f"{k}={v}")],
        "--json",
        str(out),
    ]
    rc, text, seconds = _run(cmd, ctx.env(cache, **env), TIMEOUT, out.with_suffix(".log"))
    print(f"{run_id} on {store}: rc={rc} in {seconds:.1f} s")
    return rc, text


def _pair(ctx: Ctx, d: Path, store: str, tiny: Path, *, together: bool, env: dict | None = None) -> None:
    """The two runs on ``store`` (one cache directory, as two runs on one machine), at once or one after the other."""
    d.mkdir(parents=True, exist_ok=True)
    jobs = [(ctx, store, rid, d / f"{rid}.json", tiny, d / "cache", env or {}) for rid in RUNS]
    if together:
        with ThreadPoolExecutor(len(jobs)) as pool:
            results = list(pool.map(lambda j: _coevolve(*j), jobs))
    else:
        results = [_coevolve(*j) for j in jobs]
    for rid, (rc, text) in zip(RUNS, results):
        assert rc == 0, f"{rid}:\n{text[-4000:]}"
    cache = d / "cache"
    assert [p for p in cache.rglob("*") if p.name.startswith(".") and ".partial" in p.name] == []  # no staging left
    assert not list((cache / "train").glob("*/*")), "a scratch directory outlived its update"


def _normalise(rows: dict, spellings: dict[str, str]) -> dict:
    """Every string value with each key of ``spellings`` replaced by its value (longest first)."""
    keys = sorted(spellings, key=len, reverse=True)

    def fix(v):
        if isinstance(v, str):
            for k in keys:
                v = v.replace(k, spellings[k])
        return v

    return {t: sorted((tuple((k, fix(v)) for k, v in r) for r in rs), key=repr) for t, rs in rows.items()}


def _spellings(store_url: str, store_root: str, cache: Path) -> dict[str, str]:
    """The store's own spelling of its location -> STORE, and each cached download of a checkpoint of a remote store
    (<cache>/checkpoints/<sha of its uri>/<role>) -> the checkpoint's place in the store."""
    out = {store_url: "STORE", store_root: "STORE"}
    for rid in RUNS:
        for t in range(1, ROUNDS + 1):
            for role in ("generator", "policy"):
                rel = f"models/run_id={rid}/round={t}/{role}"
                uri = f"{store_url}/{rel}"
                cached = cache / "checkpoints" / hashlib.sha256(uri.encode()).hexdigest()[:16] / role
                out[str(cached)] = f"STORE/{rel}"
    return out


def _by_run(rows: dict, run_id: str, other: str) -> dict:
    """The rows of ``run_id`` with its id (as a value and inside paths) spelled as ``other``'s."""
    mine = {t: [r for r in rs if dict(r).get("run_id") == run_id] for t, rs in rows.items()}
    return _normalise(mine, {run_id: other})


@pytest.fixture(scope="module")
def reference(ctx, tiny_llama_dir) -> dict:
    """The two runs one after the other on a local store."""
    d = ctx.root / "sequential"
    store = d / "store"
    _pair(ctx, d, str(store), tiny_llama_dir, together=False)
    rows = _normalise(snapshot(str(store)), _spellings(str(store), str(store), d / "cache"))
    assert all(rows[t] for t in ("samples", "rubrics", "verdicts", "scores", "rewards", "checkpoints")), rows.keys()
    assert temp_files(store) == []
    return rows


def _check(rows: dict, reference: dict) -> None:
    # the same multiset of rows per table (a runs row per round is the same row twice once its clock is left out,
    # so the rows are compared as sorted lists, not checked for repeats)
    assert {t: len(v) for t, v in rows.items()} == {t: len(v) for t, v in reference.items()}
    for t in reference:
        assert rows[t] == reference[t], f"{t}: rows differ from the two runs one after the other"
    # and each run on its own holds the same rows as the other (the same work under another id): none of one
    # run's artifacts is only in the other run's partition
    a, b = _by_run(rows, RUNS[0], RUNS[1]), _by_run(rows, RUNS[1], RUNS[1])
    assert {t: len(v) for t, v in a.items()} == {t: len(v) for t, v in b.items()}
    assert a == b


def test_two_runs_at_once_on_a_local_store_equal_the_runs_one_after_the_other(ctx, tiny_llama_dir, reference):
    d = ctx.root / "local"
    store = d / "store"
    _pair(ctx, d, str(store), tiny_llama_dir, together=True)
    _check(_normalise(snapshot(str(store)), _spellings(str(store), str(store), d / "cache")), reference)
    assert temp_files(store) == []
    assert [p for p in store.rglob("*") if p.name.startswith(".") and ".partial" in p.name] == []


def test_two_runs_at_once_on_s3_equal_the_runs_one_after_the_other(ctx, tiny_llama_dir, reference, s3_server):
    from dr_core.store.artifacts import S3Options

    store = f"s3://{TEST_BUCKET}/{uuid.uuid4().hex[:12]}"
    d = ctx.root / "s3"
    _pair(ctx, d, store, tiny_llama_dir, together=True, env=s3_server.env)
    s3 = S3Options(endpoint_url=s3_server.endpoint_url, region=REGION, key=ACCESS_KEY, secret=SECRET_KEY)
    root = store.removeprefix("s3://")
    _check(_normalise(snapshot(store, s3=s3), _spellings(store, root, d / "cache")), reference)
