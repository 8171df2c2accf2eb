"""Benchmark (not a test): the README's main job, `dr coevolve --preset tiny`, on today's code against an older
commit, in ONE run, as a user runs it (fresh processes, embedded Prefect, a fresh local store each; models prepared
before, so the conversion is not timed).

    flock /tmp/dr-heavy.lock env OMP_NUM_THREADS=2 .venv/bin/python infra/benchmarks/bench_main_job.py \\
        --baseline a6aea0f --output bench_main_job.json [--engines FILE] [--set round.n_prompts=8 ...]

For each side it prints the wall time, the peak resident memory of the whole process tree (sampled every 0.25 s),
the time and peak memory of every step (the step's window in the sampled series), the generator update's seconds per
GRPO step, the log's line count, and the cached re-run's wall time and the flow's own time (the sum of the steps'
seconds). Then the ratios new / old. The baseline runs from a git worktree of ``--baseline`` (``git worktree add``,
removed afterwards) with this checkout's virtualenv. ``--no-baseline`` times today's code alone (the scaling
figures: ``--set round.n_prompts=N``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
from bench_round import dr_command

ROOT = Path(__file__).resolve().parents[2]


class TreeRSS:
    """Samples the summed RSS of a process and its descendants every ``interval`` seconds: [(unix time, bytes)]."""

    def __init__(self, pid: int, interval: float = 0.25):
        self.pid, self.interval, self.samples = pid, interval, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            root = psutil.Process(self.pid)
        except psutil.NoSuchProcess:
            return
        while not self._stop.is_set():
            total = 0
            try:
                procs = [root, *root.children(recursive=True)]
            except psutil.NoSuchProcess:
                break
            for p in procs:
                try:
                    total += p.memory_info().rss
                except psutil.Error:
                    pass
            self.samples.append((time.time(), total))
            self._stop.wait(self.interval)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def peak(self, start: float | None = None, end: float | None = None) -> int | None:
        vals = [b for t, b in self.samples if (start is None or t >= start) and (end is None or t <= end)]
        return max(vals) if vals else None


def run_job(cwd: Path, store: Path, out: Path, extra: list[str]) -> dict:
    env = dict(os.environ)
    env.pop("DR_VERBOSE", None)
    cmd = dr_command("coevolve", "tiny", store, out, extra)
    start = time.time()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    rss = TreeRSS(proc.pid)
    log, _ = proc.communicate()
    wall = time.time() - start
    rss.stop()
    if proc.returncode != 0:
        sys.exit(f"dr coevolve failed in {cwd} (exit {proc.returncode}):\n{log[-4000:]}")
    result = json.loads(out.read_text())
    steps = {}
    for name, info in result["steps"].items():
        t0 = dt.datetime.fromisoformat(info["started_at"]).timestamp()
        peak = rss.peak(t0, t0 + info["seconds"] + 0.5)
        steps[name] = {
            "state": info["state"],
            "seconds": info["seconds"],
            "peak_gb": None if peak is None else round(peak / 2**30, 2),
        }
    gen = result.get("generator") or {}
    return {
        "wall_s": round(wall, 1),
        "peak_gb": round((rss.peak() or 0) / 2**30, 2),
        "steps": steps,
        "flow_s": round(sum(s["seconds"] for s in result["steps"].values()), 2),
        "generator_step_s": gen.get("step_seconds"),
        "generator_rollouts": gen.get("rollout_stats"),
        "log_lines": len(log.splitlines()),
        "log": log,
        "signal_checks": result.get("signal_checks"),
    }


def side(cwd: Path, tmp: Path, name: str, extra: list[str]) -> dict:
    store = tmp / f"{name}-store"
    print(f"[{name}] dr coevolve --preset tiny {' '.join(extra)} (code: {cwd})", flush=True)
    first = run_job(cwd, store, tmp / f"{name}-1.json", extra)
    print(f"[{name}] {first['wall_s']} s, peak {first['peak_gb']} GB; re-running (cached)", flush=True)
    again = run_job(cwd, store, tmp / f"{name}-2.json", extra)
    return {
        "first": first,
        "rerun": {k: again[k] for k in ("wall_s", "flow_s", "peak_gb", "log_lines")},
        "rerun_states": sorted({s["state"] for s in again["steps"].values()}),
    }


def ratio(new, old) -> str:
    return "n/a" if not new or not old else f"{new / old:.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", default="a6aea0f", help="git ref of the old code (default: before the issue)")
    ap.add_argument("--no-baseline", action="store_true", help="time today's code only")
    ap.add_argument("--engines", help="engines file for both sides (default: the preset's models)")
    ap.add_argument("--set", action="append", default=[], help="override as dr coevolve --set (both sides)")
    ap.add_argument("--output", help="write the measurements (with both logs) as JSON")
    args = ap.parse_args()
    extra = [x for kv in args.set for x in ("--set", kv)] + (["--engines", args.engines] if args.engines else [])
    res: dict = {"extra": extra}
    with tempfile.TemporaryDirectory(prefix="dr-bench-main-") as tmp:
        tmp = Path(tmp)
        if not args.no_baseline:
            wt = tmp / "baseline"
            subprocess.run(
                ["git", "worktree", "add", "--detach", str(wt), args.baseline],
                cwd=ROOT,
                check=True,
                capture_output=True,
            )
            try:
                res["old"] = side(wt, tmp, "old", extra)
                res["baseline"] = subprocess.run(
                    ["git", "rev-parse", "--short", args.baseline], cwd=ROOT, capture_output=True, text=True
                ).stdout.strip()
            finally:
                subprocess.run(["git", "worktree", "remove", "--force", str(wt)], cwd=ROOT, capture_output=True)
                shutil.rmtree(wt, ignore_errors=True)
        res["new"] = side(ROOT, tmp, "new", extra)
    new, old = res["new"], res.get("old")
    print(f"\n{'':32} {'old':>10} {'new':>10} {'new/old':>8}")
    rows = [
        ("main job wall, s", "wall_s"),
        ("peak RSS, GB", "peak_gb"),
        ("flow's steps, s", "flow_s"),
        ("generator s per GRPO step", "generator_step_s"),
        ("log lines", "log_lines"),
    ]
    for label, key in rows:
        o = old["first"].get(key) if old else None
        n = new["first"].get(key)
        print(f"{label:32} {o if o is not None else '-':>10} {n if n is not None else '-':>10} {ratio(n, o):>8}")
    for label, key in [("re-run wall, s", "wall_s"), ("re-run flow's steps, s", "flow_s")]:
        o = old["rerun"][key] if old else None
        n = new["rerun"][key]
        print(f"{label:32} {o if o is not None else '-':>10} {n:>10} {ratio(n, o):>8}")
    print(f"\n{'step':34} {'old s':>8} {'new s':>8} {'old GB':>7} {'new GB':>7}")
    names = list(dict.fromkeys([*(old["first"]["steps"] if old else {}), *new["first"]["steps"]]))
    for name in names:
        o = (old["first"]["steps"].get(name) if old else None) or {}
        n = new["first"]["steps"].get(name) or {}
        print(
            f"{name:34} {o.get('seconds', '-'):>8} {n.get('seconds', '-'):>8} {o.get('peak_gb', '-'):>7} "
            f"{n.get('peak_gb', '-'):>7}"
        )
    print(f"\nnew generator rollouts: {new['first']['generator_rollouts']}")
    print(f"re-run states: old {old['rerun_states'] if old else '-'}, new {new['rerun_states']}")
    if args.output:
        Path(args.output).write_text(json.dumps(res, indent=1))
        print(f"written: {args.output}")


if __name__ == "__main__":
    main()
