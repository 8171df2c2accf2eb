"""Benchmark (not a test): how a round's cost grows with the number of prompts. Runs `dr round` (one measurement
round: sample K responses per prompt, write rubrics, verify on C and the anchors, score) at each n_prompts in a fresh
process and a fresh store, and prints the wall time, the model steps' seconds, the cost per prompt, and the log-log
slope of the model steps' seconds against n_prompts (1: linear; below 1: fixed costs amortised).

    flock /tmp/dr-heavy.lock env OMP_NUM_THREADS=2 .venv/bin/python infra/benchmarks/bench_scaling.py \\
        --sizes 2,4,8,16 --output bench_scaling.json [--preset tiny] [--engines FILE] [--eval]

The process start, embedded Prefect and engine start-up are in the wall time but not in the step seconds of the
slope's model steps (an engine starts inside the first step that needs it: that step carries it, at every size).
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODEL_STEPS = ("sample", "generate-rubrics", "verify", "score", "evaluate-evaluator")


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of log(y) against log(x)."""
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / sum((a - mx) ** 2 for a in lx)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="2,4,8,16")
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--engines")
    ap.add_argument("--eval", action="store_true", help="also run the evaluator-accuracy step (fixed size)")
    ap.add_argument("--output")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    with tempfile.TemporaryDirectory(prefix="dr-bench-scaling-") as tmp:
        rows = [run_size(n, args, tmp) for n in sizes]
    xs = [r["n_prompts"] for r in rows]
    s_model = slope(xs, [r["model_steps_s"] for r in rows])
    s_wall = slope(xs, [r["wall_s"] for r in rows])
    print(f"\nlog-log slope, model steps' seconds vs n_prompts: {s_model:.2f}   wall: {s_wall:.2f}")
    for name in MODEL_STEPS:
        if all(name in r["steps"] for r in rows):
            print(
                f"  {name:18} slope {slope(xs, [max(r['steps'][name], 1e-3) for r in rows]):.2f}   "
                + "  ".join(f"{r['steps'][name]:.1f}" for r in rows)
            )
    if args.output:
        Path(args.output).write_text(
            json.dumps({"sizes": sizes, "rows": rows, "slope_model_steps": s_model, "slope_wall": s_wall}, indent=1)
        )


def run_size(n: int, args, tmp: str) -> dict:
    """`dr round` at ``n_prompts=n`` in a fresh process and store: its wall time and model steps' seconds."""
    out = Path(tmp) / f"n{n}.json"
    cmd = [
        sys.executable,
        "-m",
        "cli.main",
        "round",
        "--preset",
        args.preset,
        "--store",
        f"{tmp}/s{n}",
        "--run-id",
        "scale",
        "--set",
        f"n_prompts={n}",
        "--json",
        str(out),
    ]
    cmd += [] if args.eval else ["--no-eval"]
    cmd += ["--engines", args.engines] if args.engines else []
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"dr round n_prompts={n} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    res = json.loads(out.read_text())
    steps = {k: v["seconds"] for k, v in res["steps"].items() if k in MODEL_STEPS}
    model = sum(steps.values())
    row = {
        "n_prompts": n,
        "wall_s": round(wall, 1),
        "model_steps_s": round(model, 1),
        "per_prompt_s": round(model / n, 2),
        "steps": steps,
        "verdicts": res["summary"].get("verdicts"),
        "responses": res["summary"].get("responses"),
    }
    print(
        f"n_prompts={n:3d}  wall {wall:7.1f} s  model steps {model:7.1f} s  per prompt {model / n:6.2f} s  "
        f"verdicts {row['verdicts']}",
        flush=True,
    )
    return row


if __name__ == "__main__":
    main()
