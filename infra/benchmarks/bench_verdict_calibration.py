"""Benchmark (not a test): does contextual calibration (``verdict_mode="calibrated"``) make the verifier better
than the plain structured choice (``"choice"``) on checks with obvious answers?

The probe is ``dr_core/data/verifier_probe.jsonl``: 24 checks written for this project, 12 whose answer is yes
and 12 no, in 12 pairs (one criterion on a response that meets it and one that does not). Figures per arm:
accuracy (the constant-answer baseline is 0.5), yes-rate, unscorable, and for the calibrated arm the bias b and
the pair ordering (how many pairs give the meeting response the higher log-odds: what any threshold, hence any
bias, can at best turn into correct verdicts on both checks of a pair). A third arm, ``choice_logodds``, reads
the log-odds under the choice constraint (lowercase yes/no only) and calibrates them the same way, for reference.

    OMP_NUM_THREADS=1 flock /tmp/dr-heavy.lock .venv/bin/python infra/benchmarks/bench_verdict_calibration.py \\
        --output infra/benchmarks/results/bench_verdict_calibration.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from dr_core.config import EngineConfig  # noqa: E402
from dr_core.evaluator.calibrate import VERDICT_LOGPROBS, content_free_checks, first_logodds, verdict_bias
from dr_core.evaluator.items import Check
from dr_core.evaluator.verify import verify
from dr_core.paths import bundled  # noqa: E402
from dr_core.rubric import prompts


def load_probe() -> tuple[list[Check], list[int]]:
    rows = [json.loads(line) for line in bundled("verifier_probe.jsonl").read_text().splitlines() if line.strip()]
    return [Check(r["prompt"], r["response"], r["criterion"]) for r in rows], [int(r["expected"]) for r in rows]


def summary(verdicts: list[int | None], expected: list[int]) -> dict:
    scored = [v for v in verdicts if v is not None]
    return {
        "accuracy": sum(v == e for v, e in zip(verdicts, expected)) / len(expected),
        "yes_rate": sum(scored) / len(scored) if scored else None,
        "unscorable": sum(v is None for v in verdicts),
        "verdicts": verdicts,
    }


def pair_order(odds: list[float | None], expected: list[int]) -> dict:
    """Pairs (consecutive yes/no checks of one criterion) where the yes-check has the higher log-odds."""
    pairs = [(i, i + 1) for i in range(0, len(odds), 2)]
    right = sum(
        odds[a] is not None and odds[b] is not None and (odds[a] - odds[b]) * (expected[a] - expected[b]) > 0
        for a, b in pairs
    )
    return {"pairs": len(pairs), "ordered_right": right}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="default")
    ap.add_argument("--output", type=Path, required=True)
    args = ap.parse_args()
    from dr_core.engines import make_engine
    from dr_core.model import prepare_default_model

    model = str(prepare_default_model()) if args.model == "default" else args.model
    checks, expected = load_probe()
    engine = make_engine(EngineConfig(model=model, max_model_len=2048))
    try:
        plain, _ = verify(engine, checks, verdict_mode="choice")
        calibrated, _ = verify(engine, checks, verdict_mode="calibrated")
        bias = verdict_bias(engine)
        convs = [prompts.verifier_messages(c.prompt, c.response, c.criterion) for c in checks]
        free = engine.chat(convs, max_tokens=1, logprobs=VERDICT_LOGPROBS)
        odds = [first_logodds(o) for o in free]
        # reference arm: log-odds under the choice constraint (only lowercase yes/no tokens survive the mask)
        cf = content_free_checks()
        cf_convs = [prompts.verifier_messages(c.prompt, c.response, c.criterion) for c in cf]
        masked = engine.chat(convs, max_tokens=1, logprobs=VERDICT_LOGPROBS, choices=list(prompts.VERDICT_CHOICES))
        masked_cf = engine.chat(
            cf_convs, max_tokens=1, logprobs=VERDICT_LOGPROBS, choices=list(prompts.VERDICT_CHOICES)
        )
        m_odds = [first_logodds(o) for o in masked]
        m_cf = [o for o in map(first_logodds, masked_cf) if o is not None]
        m_bias = sum(m_cf) / len(m_cf) if m_cf else 0.0
        m_verdicts = [None if o is None else int(o - m_bias > 0) for o in m_odds]
    finally:
        engine.close()
    result = {
        "model": model,
        "checks": len(checks),
        "expected_yes": sum(expected),
        "constant_baseline_accuracy": max(sum(expected), len(expected) - sum(expected)) / len(expected),
        "choice": summary(plain, expected),
        "calibrated": summary(calibrated, expected) | {"bias": bias, "logodds": odds} | pair_order(odds, expected),
        "choice_logodds": summary(m_verdicts, expected)
        | {"bias": m_bias, "logodds": m_odds}
        | pair_order(m_odds, expected),
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    for arm in ("choice", "calibrated", "choice_logodds"):
        r = result[arm]
        extra = f", bias {r['bias']:+.3f}, pairs ordered right {r['ordered_right']}/{r['pairs']}" if "bias" in r else ""
        print(f"{arm:15s} accuracy {r['accuracy']:.3f}  yes-rate {r['yes_rate']}  unscorable {r['unscorable']}{extra}")
    print(f"constant baseline {result['constant_baseline_accuracy']:.3f}; wrote {args.output}")


if __name__ == "__main__":
    main()
