"""Benchmark (not a test): wall time of the tiny round, of its cached re-run, and Prefect's own cost per task.

    flock /tmp/dr-heavy.lock env OMP_NUM_THREADS=1 .venv/bin/python infra/benchmarks/bench_round.py [--preset tiny]

Runs `dr round` twice as a user would (two fresh processes, embedded Prefect, a fresh local store) and prints:
first-run wall time, re-run wall time, their ratio, the step table of both runs, and the mean seconds a cached
task takes (Prefect's orchestration + cache lookup + result read: the overhead per task).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def dr_command(subcommand: str, preset: str, store: Path, out: Path, extra: list[str]) -> list[str]:
    """``dr SUBCOMMAND --preset P --store S --run-id bench --json OUT EXTRA...``, run by this interpreter."""
    head = [sys.executable, "-m", "cli.main", subcommand, "--preset", preset, "--store", str(store)]
    return head + ["--run-id", "bench", "--json", str(out), *extra]


def run(store: Path, preset: str, out: Path, extra: list[str]) -> tuple[float, dict]:
    start = time.perf_counter()
    proc = subprocess.run(
        dr_command("round", preset, store, out, extra),
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"dr round failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return wall, json.loads(out.read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--set", action="append", default=[], help="preset override FIELD=VALUE (as dr round --set)")
    args = ap.parse_args()
    extra = [x for kv in args.set for x in ("--set", kv)]
    with tempfile.TemporaryDirectory(prefix="dr-bench-round-") as tmp:
        store = Path(tmp) / "store"
        first_wall, first = run(store, args.preset, Path(tmp) / "a.json", extra)
        second_wall, second = run(store, args.preset, Path(tmp) / "b.json", extra)
    print(f"{'step':<20}{'first run':>14}{'re-run':>20}")
    for name, info in first["steps"].items():
        again = second["steps"].get(name, {})
        redo = f"{again.get('seconds', 0):>8.2f} s {again.get('state', '')}"
        print(f"{name:<20}{info['seconds']:>8.2f} s {info['state']:<9}{redo}")
    cached = [i["seconds"] for i in second["steps"].values() if i["state"] == "Cached"]
    model_steps = [n for n in ("sample", "generate-rubrics", "verify", "evaluate-evaluator") if n in second["steps"]]
    redone = [n for n in model_steps if second["steps"][n]["state"] != "Cached"]
    print(f"\nfirst run wall      {first_wall:8.1f} s   (process start, embedded Prefect, engine start, model work)")
    print(f"cached re-run wall  {second_wall:8.1f} s")
    print(f"re-run / first      {second_wall / first_wall:8.3f}")
    print(f"model steps redone  {len(redone)} {redone}")
    if cached:
        print(f"Prefect overhead per cached task: {sum(cached) / len(cached) * 1000:.0f} ms (mean of {len(cached)})")
    print(f"summary identical   {first['summary'] == second['summary']}")


if __name__ == "__main__":
    main()
