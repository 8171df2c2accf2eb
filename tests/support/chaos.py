"""The random-kill harness: a two-round ``dr coevolve`` on scripted engines, SIGKILLed at moments drawn from a seeded
generator, resumed, and compared table by table with an uninterrupted run. Used by the campaign
(infra/benchmarks/chaos.py, 30+ runs, not in CI) and by its short version in the suite
(tests/integration/test_chaos.py).

Every role is ``openai_http`` on the scripted server (tests/support/scripted_server.py: deterministic answers, no
model), and G(0) = P(0) = the tiny random Llama (tests/support/fixtures_grpo.py) through ``--generator-start`` and
``--policy-start``, so a run is about 30-40 s on 2 cores and still trains both roles twice with the real TRL trainer.
The runs talk to one real ``prefect server``. A kill is ``SIGKILL`` to the run's whole process group (the CLI and any
process it started), as a machine crash or an OOM kill would do; the resume is the same command again.

What a case reports (``Case.outcome``):

- ``kills``: the drawn kill times (seconds after the start of that execution), each with whether the execution was
  still running then (``killed``; False: it ended first), and ``died_in``: the steps the kills interrupted (the
  ``steps`` table's Interrupted rows; none when a kill struck before the first step or between two steps);
- ``lost`` / ``duplicated``: rows of the reference missing from the resumed store, and rows beyond the reference's
  count (per table, every compared table; the ``steps`` log is per execution and is checked on its own);
- ``tables_equal``: every table's content hash equals the reference's (volatile columns left out: clocks, code and
  config records, checkpoint locations);
- ``left``: temp files (``.*.tmp``) and staging directories (``*.partial``, ``.dr-*``) left in the store or the cache;
- ``cache``: of the cacheable steps a killed execution had finished, how many the resume served from the cache;
- ``log_ok``: every kill left a Running row that the resume marked Interrupted, and the resume completed that step.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RUN_ID = "chaos"
#: The two-round configuration: 2 prompts, K=2, one GRPO step per update, 8-token completions, no held-out eval.
SETTINGS = [
    "round.n_prompts=2",
    "round.k=2",
    "round.n_anchor=2",
    "round.eval_limit=2",
    "measure_start=false",
    "policy_eval=null",
    "generator.rollouts=trl",
    "policy.rollouts=trl",
    "generator.max_steps=1",
    "policy.max_steps=1",
    "generator.max_completion_length=8",
    "policy.max_completion_length=8",
    "generator.num_generations=2",
    "policy.num_generations=2",
    "generator.per_device_train_batch_size=2",
    "policy.per_device_train_batch_size=2",
    "generator.gradient_accumulation_steps=1",
]
#: Columns that differ between two executions of the same work (clocks, code and config records, locations).
VOLATILE = {
    "runs": {"created_at", "config_json", "code_version"},
    "checkpoints": {"created_at", "metrics_json", "uri", "parent"},
}
NOT_COMPARED = {"steps"}
ENV_CLEARED = ("DR_FAULT", "DR_FAULT_DIR", "PREFECT_API_URL", "DR_STORE")


def _value(v):
    return v.isoformat() if hasattr(v, "isoformat") else v


def snapshot(store_url: str) -> dict[str, list[str]]:
    """Every compared table as a sorted list of rows (each a canonical JSON string, volatile columns left out, the
    store's own location written as ``<store>``: a model id of a checkpoint names its directory)."""
    from dr_core.store.artifacts import Store
    from dr_core.store.schemas import TABLES

    st = Store.from_url(store_url)
    out = {}
    for name in TABLES:
        if name in NOT_COMPARED:
            continue
        drop = VOLATILE.get(name, set())
        rows = [
            json.dumps({k: _value(v) for k, v in sorted(r.items()) if k not in drop}, default=str).replace(
                store_url, "<store>"
            )
            for r in st.read_table(name).to_pylist()
        ]
        out[name] = sorted(rows)
    return out


def table_hashes(snap: dict[str, list[str]]) -> dict[str, str]:
    return {t: hashlib.sha256("\n".join(rows).encode()).hexdigest()[:16] for t, rows in snap.items()}


def leftovers(*roots: Path) -> list[str]:
    """Temp files and staging directories a crash could leave: ``.*.tmp`` files, ``*.partial`` and ``.dr-*``
    directories (checkpoint staging)."""
    found = []
    for root in roots:
        if root.exists():
            for p in root.rglob("*"):
                name = p.name
                if (name.startswith(".") and name.endswith(".tmp")) or name.endswith(".partial"):
                    found.append(str(p))
                elif p.is_dir() and name.startswith(".dr-"):
                    found.append(str(p))
    return sorted(found)


def step_rows(store_url: str) -> list[dict]:
    from dr_core.store.artifacts import Store

    return Store.from_url(store_url).read_table("steps", run_id=RUN_ID).to_pylist()


@dataclass
class Execution:
    rc: int | None
    seconds: float
    kill_at: float | None
    killed: bool


@dataclass
class Case:
    name: str
    kill_times: list[float]
    executions: list[Execution] = field(default_factory=list)
    outcome: dict = field(default_factory=dict)


class Chaos:
    """The campaign's shared set-up: a scratch root, the scripted server's engines file, a Prefect API, the tiny
    Llama, and the reference (an uninterrupted run, then the same run again to learn which steps the cache serves)."""

    def __init__(self, root: Path, engines: Path, api: str, tiny: Path, timeout: float = 600):
        self.root, self.engines, self.api, self.tiny, self.timeout = root, engines, api, tiny, timeout
        self.reference: dict = {}

    # -- one execution ------------------------------------------------------------------------------------------
    def env(self, case_dir: Path) -> dict:
        env = {k: v for k, v in os.environ.items() if k not in ENV_CLEARED and not k.startswith("AWS_")}
        env.update(
            PREFECT_API_URL=self.api,
            PREFECT_HOME=str(self.root / "prefect-client"),
            DR_CACHE_DIR=str(case_dir / "cache"),
            OMP_NUM_THREADS="1",
            PYTHONPATH=str(REPO),
            PREFECT_SERVER_ANALYTICS_ENABLED="false",
        )
        return env

    def command(self, case_dir: Path) -> list[str]:
        sets = [a for s in SETTINGS for a in ("--set", s)]
        return [
            sys.executable,
            "-m",
            "cli.main",
            "coevolve",
            "--rounds",
            "2",
            "--store",
            str(case_dir / "store"),
            "--run-id",
            RUN_ID,
            "--engines",
            str(self.engines),
            *sets,
            "--generator-start",
            str(self.tiny),
            "--policy-start",
            str(self.tiny),
            "--json",
            str(case_dir / "result.json"),
        ]

    def execute(self, case_dir: Path, kill_at: float | None, label: str, **env) -> Execution:
        """One execution of the run in ``case_dir``; with ``kill_at``, SIGKILL its process group that many seconds
        after its start (unless it ended first); ``env``: extra variables (``DR_FAULT`` for a kill at a named
        point, dr_core/faults.py)."""
        case_dir.mkdir(parents=True, exist_ok=True)
        log = case_dir / f"{label}.log"
        start = time.monotonic()
        with open(log, "wb") as fh:
            proc = subprocess.Popen(
                self.command(case_dir),
                env={**self.env(case_dir), **env},
                cwd=REPO,
                stdout=fh,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            killed = False
            try:
                rc = proc.wait(timeout=kill_at if kill_at is not None else self.timeout)
                killed = rc == -signal.SIGKILL  # a DR_FAULT kill
            except subprocess.TimeoutExpired:
                if kill_at is None:
                    _kill_group(proc)
                    raise RuntimeError(f"{label} did not finish in {self.timeout} s; see {log}") from None
                _kill_group(proc)
                rc, killed = proc.wait(), True
            finally:
                _kill_group(proc)  # whatever it left in its group
        return Execution(rc=rc, seconds=round(time.monotonic() - start, 1), kill_at=kill_at, killed=killed)

    # -- the reference ------------------------------------------------------------------------------------------
    def make_reference(self) -> dict:
        d = self.root / "reference"
        first = self.execute(d, None, "run")
        if first.rc != 0:
            raise RuntimeError(f"the reference run failed (rc {first.rc}); see {d / 'run.log'}")
        again = self.execute(d, None, "again")
        if again.rc != 0:
            raise RuntimeError(f"the reference's re-run failed (rc {again.rc}); see {d / 'again.log'}")
        steps = json.loads((d / "result.json").read_text())["steps"]
        snap = snapshot(str(d / "store"))
        self.reference = {
            "seconds": first.seconds,
            "rerun_seconds": again.seconds,
            "snapshot": snap,
            "hashes": table_hashes(snap),
            "cacheable": sorted(k for k, v in steps.items() if v["state"] == "Cached"),
            "rows": sum(len(v) for v in snap.values()),
        }
        return self.reference

    # -- a case ---------------------------------------------------------------------------------------------------
    def run_case(self, name: str, kill_times: list[float]) -> Case:
        """Kill the run at each time of ``kill_times`` in turn (one execution each), then resume it to the end, and
        compare the store with the reference."""
        case = Case(name=name, kill_times=kill_times)
        d = self.root / name
        for i, t in enumerate(kill_times):
            case.executions.append(self.execute(d, t, f"kill{i + 1}"))
        final = self.execute(d, None, "resume")
        case.executions.append(final)
        case.outcome = self.compare(d, case, final)
        return case

    def compare(self, d: Path, case: Case, final: Execution) -> dict:
        ref = self.reference
        out: dict = {"rc": final.rc, "seconds": sum(e.seconds for e in case.executions)}
        if final.rc != 0:
            out.update(ok=False, error=f"the resume failed (rc {final.rc}); see {d / 'resume.log'}")
            return out
        snap = snapshot(str(d / "store"))
        lost = dup = 0
        for t, rows in ref["snapshot"].items():
            got, want = Counter(snap.get(t, [])), Counter(rows)
            lost += sum((want - got).values())
            dup += sum((got - want).values())
        rows = step_rows(str(d / "store"))
        execs = _executions(rows)
        final_ex = execs[-1] if execs else None
        finished_before = {
            r["step"]
            for r in rows
            if r["execution"] != final_ex and r["state"] in ("Completed", "Cached") and r["step"] in ref["cacheable"]
        }
        final_states = {r["step"]: r["state"] for r in rows if r["execution"] == final_ex}
        served = sum(final_states.get(s) == "Cached" for s in finished_before)
        interrupted = sorted((r for r in rows if r["state"] == "Interrupted"), key=lambda r: r["started_at"])
        still_running = [r for r in rows if r["state"] == "Running"]
        kills = [{"at": e.kill_at, "killed": e.killed} for e in case.executions[:-1]]
        # a kill before the flow's first step (the CLI still importing) or between two steps leaves no Running row;
        # every Running row a kill left is Interrupted now, and the resume finished each of those steps
        log_ok = (
            not still_running
            and final_ex is not None
            and len(execs) <= len(case.executions)
            and all(final_states.get(r["step"]) in ("Completed", "Cached") for r in interrupted)
        )
        out.update(
            kills=kills,
            died_in=[r["step"] for r in interrupted],
            logged_executions=len(execs),
            lost=lost,
            duplicated=dup,
            tables_equal=table_hashes(snap) == ref["hashes"],
            left=leftovers(d / "store", d / "cache"),
            cache=f"{served}/{len(finished_before)}",
            cache_all=served == len(finished_before),
            log_ok=log_ok,
        )
        out["ok"] = bool(
            not lost and not dup and out["tables_equal"] and not out["left"] and out["cache_all"] and log_ok
        )
        return out


def _executions(rows: list[dict]) -> list[str]:
    """The run's executions in the order they started."""
    first: dict[str, object] = {}
    for r in rows:
        if r["execution"] not in first or r["started_at"] < first[r["execution"]]:
            first[r["execution"]] = r["started_at"]
    return sorted(first, key=lambda e: first[e])


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def draw_kills(seed: int, n_runs: int, twice: int, run_seconds: float) -> list[list[float]]:
    """For each of ``n_runs`` cases, its kill times: one uniform in (3%, 97%) of an uninterrupted run's seconds;
    ``twice`` of the cases (spread evenly) also get a second kill, of the resumed execution, in (3%, 60%)."""
    rng = random.Random(seed)
    doubles = {round(i * n_runs / twice) for i in range(twice)} if twice else set()
    plans = []
    for i in range(n_runs):
        times = [round(rng.uniform(0.03, 0.97) * run_seconds, 2)]
        if i in doubles:
            times.append(round(rng.uniform(0.03, 0.60) * run_seconds, 2))
        plans.append(times)
    return plans
