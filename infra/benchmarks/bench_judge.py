"""Benchmark (not a test): which pairwise-judge procedure ``dr eval-policy`` uses by default, by measurement.

Human-labelled public pairs from ../shared/data (default: HH-RLHF harmless test pairs past the 40 the product
bundles, and RM-Bench chat pairs) are turned into saved answers, the chosen answers as the "policy" and the rejected
ones as the "baseline", and judged by ``dr_core.evals.policy_eval.run_eval_policy`` (what ``dr eval-policy --policy
chosen.jsonl --baseline rejected.jsonl`` does) once per procedure:

- ``logodds``: the A-vs-B first-token log-odds in both orders, d = (l1 - l2) / 2; a tie when |d| <= the threshold;
- ``choice``: structured A/B in both orders; a split verdict is a tie.

Per procedure and slice: accuracy (the chosen answer preferred; ties and unscorable pairs count wrong), tie rate,
accuracy on decisive pairs, position bias (logodds: the mean over pairs of (l1 + l2) / 2, nats, > 0 leans to the
first-shown answer) and the share of verdicts that favoured the first-shown answer. The rule, fixed before the run:
the procedure with the higher accuracy pooled over the slices becomes the default.

    OMP_NUM_THREADS=2 flock /tmp/dr-heavy.lock .venv/bin/python infra/benchmarks/bench_judge.py \\
        --output infra/benchmarks/results/bench_judge.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from dr_core.datasets import load  # noqa: E402
from dr_core.evals.policy_eval import run_eval_policy  # noqa: E402
from dr_core.evaluator.judge import JUDGE_PROCEDURES, TIE_THRESHOLD  # noqa: E402

SHARED = Path(__file__).resolve().parents[3] / "shared" / "data" / "eval"
DEFAULT_PAIRS = (f"{SHARED / 'hh_harmless_pairs.jsonl'}:40:64", f"{SHARED / 'rmbench_chat_pairs.jsonl'}:0:64")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", nargs="+", default=list(DEFAULT_PAIRS), help="FILE:START:N pairwise slices")
    ap.add_argument("--judge", default="qwen2.5-coder-0.5b-instruct")
    ap.add_argument("--threshold", type=float, default=TIE_THRESHOLD)
    ap.add_argument("--output", type=Path, required=True)
    args = ap.parse_args()
    result: dict = {"judge": args.judge, "threshold": args.threshold, "slices": {}}
    pooled = {p: {"n": 0, "wins": 0, "ties": 0, "losses": 0, "unscorable": 0} for p in JUDGE_PROCEDURES}
    with tempfile.TemporaryDirectory() as tmp:
        for spec in args.pairs:
            judge_slice(spec, args, Path(tmp), result, pooled)
    for c in pooled.values():
        c["accuracy"] = c["wins"] / c["n"]
        c["tie_rate"] = c["ties"] / max(1, c["n"] - c["unscorable"])
    result["pooled"] = pooled
    result["chosen"] = max(JUDGE_PROCEDURES, key=lambda p: (pooled[p]["accuracy"], p == "choice"))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    print_table(result, pooled)


def judge_slice(spec: str, args, d: Path, result: dict, pooled: dict) -> None:
    """One FILE:START:N slice judged once per procedure: its rows into ``result["slices"]``, its counts into
    ``pooled``."""
    path, start, n = spec.rsplit(":", 2)
    pairs = load(path, "pairwise")[int(start) : int(start) + int(n)]
    name = f"{Path(path).stem}[{start}:{int(start) + len(pairs)}]"
    data = write_jsonl(d / "prompts.jsonl", [{"id": p.id, "prompt": p.prompt} for p in pairs])
    chosen = write_jsonl(d / "chosen.jsonl", [{"id": p.id, "answer": p.chosen} for p in pairs])
    rejected = write_jsonl(d / "rejected.jsonl", [{"id": p.id, "answer": p.rejected} for p in pairs])
    result["slices"][name] = {}
    for proc in JUDGE_PROCEDURES:
        t0 = time.perf_counter()
        m, recs = run_eval_policy(
            policy=str(chosen),
            data=data,
            judge=args.judge,
            baseline=str(rejected),
            procedure=proc,
            threshold=args.threshold,
            log=log,
        )
        row = procedure_row(proc, m, recs, t0)
        result["slices"][name][proc] = row
        for k in pooled[proc]:
            pooled[proc][k] += m[k]
        log(
            f"{name} {proc}: accuracy {row['accuracy']:.3f}, ties {row['tie_rate']}, position bias "
            f"{row['position_bias']}, first-shown {row['first_shown_rate']}"
        )


def procedure_row(proc: str, m: dict, recs: list[dict], t0: float) -> dict:
    """One procedure's figures on one slice from ``run_eval_policy``'s metrics and records."""
    scored = m["wins"] + m["losses"]
    row = {
        "n": m["n"],
        "accuracy": m["wins"] / m["n"],
        "tie_rate": m["tie_rate"],
        "unscorable": m["unscorable"],
        "decisive_accuracy": m["wins"] / scored if scored else None,
        "decisive": scored,
        "win_rate": m["win_rate"],
        "win_rate_ci95": m["win_rate_ci95"],
        "position_bias": m["judge_position_bias"],
        "first_shown_rate": m["judge_first_shown_rate"],
        "mean_abs_d": m["judge_mean_abs_d"],
        "procedure_used": m["judge_procedure"],
        "fallback": m["judge_fallback"],
        "seconds": round(time.perf_counter() - t0, 1),
    }
    if proc == "logodds":  # how the tie threshold moves accuracy (reported, not chosen on)
        ds = [r["judge_d"] for r in recs]
        row["accuracy_by_threshold"] = {
            str(t): sum(x is not None and x > t for x in ds) / len(ds) for t in (0.0, 0.005, 0.01, 0.05, 0.1)
        }
        row["tie_rate_by_threshold"] = {
            str(t): sum(x is not None and abs(x) <= t for x in ds) / len(ds) for t in (0.0, 0.005, 0.01, 0.05, 0.1)
        }
    return row


def print_table(result: dict, pooled: dict) -> None:
    print("\n| slice | procedure | accuracy | tie rate | decisive accuracy (n) | position bias | first-shown |")
    print("|---|---|---|---|---|---|---|")
    for name, procs in result["slices"].items():
        for proc, r in procs.items():
            pb = "-" if r["position_bias"] is None else f"{r['position_bias']:+.3f}"
            da = "-" if r["decisive_accuracy"] is None else f"{r['decisive_accuracy']:.3f} ({r['decisive']})"
            fs = "-" if r["first_shown_rate"] is None else f"{r['first_shown_rate']:.3f}"
            print(f"| {name} | {proc} | {r['accuracy']:.3f} | {r['tie_rate']:.3f} | {da} | {pb} | {fs} |")
    print(
        f"\nchosen: {result['chosen']} (pooled accuracy "
        + ", ".join(f"{p} {c['accuracy']:.3f}" for p, c in pooled.items())
        + ")"
    )


if __name__ == "__main__":
    main()
