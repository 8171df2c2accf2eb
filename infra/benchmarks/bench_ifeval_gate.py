"""Benchmark (minutes, not in CI): which verifier, with which verdict procedure, passes the IFEval benchmark's gate?

The gate of ``bench_ifeval.py`` (its phase 3, the same code: ``infra/benchmarks/ifeval/evaluator.gate``) on any
bundled model and verdict procedure: the verifier's verdicts on every (anchor, instruction) check of the tuning and
training splits' code-ranked anchors against IFEval's checkers. Those checks are not held out (no held-out prompt is
read), so measuring a candidate here before a protocol names it peeks at nothing a criterion tests. The protocol
files stay as they are; this script only answers "would this verifier pass?" for the next one.

    OMP_NUM_THREADS=2 .venv/bin/python infra/benchmarks/bench_ifeval_gate.py \\
        --verifier qwen2.5-coder-1.5b-instruct:plain:balanced --verifier qwen2.5-coder-0.5b-instruct:system:choice \\
        --output infra/benchmarks/results/bench_ifeval_gate.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # in-process engines (ENVIRONMENT.md)
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from dr_core.paths import cache_dir  # noqa: E402
from infra.benchmarks.ifeval import evaluator  # noqa: E402
from infra.benchmarks.ifeval.protocol_v2 import PROTOCOL_V2  # noqa: E402
from infra.benchmarks.ifeval.run import Run  # noqa: E402
from infra.benchmarks.learning.run import log  # noqa: E402

PROMPTS = ("system", "plain")
MODES = ("choice", "calibrated", "balanced")


def candidate(text: str) -> tuple[str, str, str]:
    """``MODEL:PROMPT:MODE`` (a bundled model's name, a verifier prompt, a verdict mode), checked."""
    parts = text.split(":")
    if len(parts) != 3 or parts[1] not in PROMPTS or parts[2] not in MODES:
        raise argparse.ArgumentTypeError(
            f"{text!r}: want MODEL:PROMPT:MODE with PROMPT one of {', '.join(PROMPTS)} and MODE one of "
            f"{', '.join(MODES)}"
        )
    return parts[0], parts[1], parts[2]


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--verifier",
        type=candidate,
        action="append",
        required=True,
        help="MODEL:PROMPT:MODE, e.g. qwen2.5-coder-1.5b-instruct:plain:balanced; repeat for more",
    )
    ap.add_argument("--output", type=Path, required=True, help="the result JSON")
    return ap


def main() -> None:
    args = parser().parse_args()
    from dr_core.config import engine_config
    from dr_core.engines import make_engine

    t0 = time.perf_counter()
    rows = []
    for model, prompt, mode in args.verifier:
        run = Run(PROTOCOL_V2, cache_dir() / "bench-ifeval-gate", args.output, {"verifier": model})
        cfg = engine_config(
            model=str(run.models["verifier"]), verifier_prompt=prompt, verdict_mode=mode, max_model_len=4096
        )
        engine = make_engine(cfg)
        try:
            g = evaluator.gate(run, engine)
        finally:
            engine.close()
        rows.append({"verifier": model, "prompt": prompt, "verdict_mode": mode} | g)
        log(f"{model} {prompt}/{mode}: balanced accuracy {g['balanced_accuracy']:.3f}, {g['seconds']} s")
    result = {
        "benchmark": "ifeval-gate",
        "checks": "every (anchor, instruction) check of the tuning and training anchors (no held-out prompt)",
        "threshold": PROTOCOL_V2.gate_threshold,
        "candidates": rows,
        "seconds": round(time.perf_counter() - t0, 1),
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2, default=float) + "\n")
    print("| verifier | prompt | verdicts | balanced accuracy | yes-rate | kappa | seconds |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['verifier']} | {r['prompt']} | {r['verdict_mode']} | {r['balanced_accuracy']:.3f} | "
            f"{r['yes_rate']:.2f} | {r['kappa']:+.3f} | {r['seconds']} |"
        )


if __name__ == "__main__":
    main()
