"""Benchmark (hour-scale, not in CI): does training the rubric generator move the evaluator's numbers, and does the
co-evolved generator G(S) train a better policy than the frozen G(0)? Version 2; its protocol is in
docs/benchmarks/learning.md ("The protocol") and was written before the run whose results are in
infra/benchmarks/results/bench_learning.json.

Self-contained on the bundled data and models. The frozen verifier is the tiny preset's (Qwen2.5-Coder-0.5B, plain
prompt, balanced verdicts); the judge is ``dr eval-policy``'s default procedure with the same model.

1. Splits of the 48 bundled ranked anchor lists (AlpacaEval, 11 responses each) in file order: ``--train`` for
   training, the next ``--tune`` for choosing the settings, the last ``--heldout`` for the results. All three go to a
   store's prompts table; ``sql/split_overlap.sql`` must return no rows for any two of them, else the script stops.
2. P(0) (SmolLM2-135M) samples C, the largest K of the sweep responses per prompt, once (seed 0); a setting with a
   smaller K uses the first K of them. ``--n-anchor`` anchors per prompt spread over the ranking.
3. Sweep on the tuning split: for every (learning rate, LoRA rank, K) of ``--sweep``, ``--sweep-steps`` GRPO steps of
   the generator update on the training prompts (seed 0), G(S) - G(0) measured on the tuning prompts. The setting
   with the highest mean tuning R_disc gain is used for the rest (ties: the first listed). Every setting is reported.
4. Per seed: G(0) -> G(S), ``--steps`` generator steps (R_disc + R_anchor at the advantage level, Eq. 24-25) on the
   training prompts; the training reward per step with its spread over the group's rollouts.
5. G(0) and every G(S) on the held-out prompts, in the format they are trained in (the 'lines' prompt and primer,
   rollout temperature, ``--eval-rubrics`` rubrics per prompt, scored by the training reward code): per prompt, mean
   R_disc (Eq. 13), saturated items, anchor-pair tie rate, strict anchor order, unparseable share. Means and the
   per-prompt difference G(S) - G(0) with 95 % percentile-bootstrap intervals over prompts, per seed and pooled (per
   prompt, the mean over seeds).
6. Policy: from the same P(0), ``--policy-steps`` policy steps rewarded by G(S) of the first seed and as many by
   G(0). The three policies answer the held-out prompts (greedy, saved as {"id","answer"} files), and
   ``dr eval-policy --policy FILE --baseline FILE`` judges P_G(S) vs P(0), P_G(0) vs P(0) and P_G(S) vs P_G(0).

Every phase stores its result in the work directory and a rerun with the same ``--workdir`` reuses it (``--fresh``
starts over): a crash in the last phase does not cost the hour before it.

    OMP_NUM_THREADS=2 flock /tmp/dr-heavy.lock .venv/bin/python infra/benchmarks/bench_learning.py \\
        --output infra/benchmarks/results/bench_learning.json        # about 1.5 hours on 2 cores

A smoke run (a few minutes): ``--smoke``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # in-process engines (ENVIRONMENT.md)
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from dr_core.config import engine_config  # noqa: E402
from dr_core.paths import cache_dir  # noqa: E402
from infra.benchmarks.learning import generator, policy  # noqa: E402
from infra.benchmarks.learning.render import markdown, print_tables  # noqa: E402
from infra.benchmarks.learning.run import Run, log, parse_or_render  # noqa: E402


def parse_sweep(text: str) -> list[dict]:
    out = []
    for part in text.split(","):
        lr, r, k = part.split(":")
        out.append({"lr": float(lr), "lora_r": int(r), "k": int(k)})
    return out


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=60, help="generator GRPO steps per seed")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--train", type=int, default=12, help="training prompts (the first N anchor lists)")
    ap.add_argument("--tune", type=int, default=12, help="tuning prompts (the next N)")
    ap.add_argument("--heldout", type=int, default=24, help="held-out prompts (the last N)")
    ap.add_argument(
        "--sweep",
        default="5e-5:16:3,2e-4:16:3,2e-4:4:3,2e-4:16:4",
        help="settings tried on the tuning split: lr:lora_rank:K,...",
    )
    ap.add_argument("--sweep-steps", type=int, default=20, help="generator steps of each sweep setting")
    ap.add_argument("--c-tokens", type=int, default=64, help="longest response of C (tokens)")
    ap.add_argument("--n-anchor", type=int, default=3)
    ap.add_argument("--rollouts", type=int, default=4, help="rubric rollouts per prompt in training (GRPO group)")
    ap.add_argument("--eval-rubrics", type=int, default=4, help="rubrics sampled per measured prompt")
    ap.add_argument("--verifier", default="qwen2.5-coder-0.5b-instruct")
    ap.add_argument("--policy-steps", type=int, default=10, help="policy steps with G(S) and with G(0) each")
    ap.add_argument("--policy-lr", type=float, default=1e-4, help="policy learning rate (LoRA r16; not tuned)")
    ap.add_argument("--policy-k", type=int, default=4, help="responses per prompt in a policy step")
    ap.add_argument("--answer-tokens", type=int, default=128, help="most tokens of a judged held-out answer")
    ap.add_argument("--workdir", type=Path, default=None, help="scratch (default: the cache's bench-learning dir)")
    ap.add_argument("--fresh", action="store_true", help="delete the work directory's earlier phases first")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes to check that every phase runs")
    ap.add_argument("--output", type=Path, help="the result JSON (required unless --render)")
    ap.add_argument("--render", type=Path, help="print a finished result JSON's tables as Markdown and exit")
    return ap


def main() -> None:
    args = parse_or_render(parser(), markdown)
    if args is None:
        return
    if args.smoke:
        args.steps, args.seeds, args.train, args.tune, args.heldout = 2, [0], 2, 2, 2
        args.sweep, args.sweep_steps, args.eval_rubrics, args.policy_steps = "5e-5:16:3,2e-4:4:4", 1, 2, 1
    benchmark(args)


def benchmark(args) -> None:
    """The protocol's phases in order; each phase's result is cached in the work directory."""
    from dr_core.engines import make_engine
    from dr_core.model import prepare

    t0 = time.perf_counter()
    work = args.workdir or cache_dir() / ("bench-learning-smoke" if args.smoke else "bench-learning")
    if args.fresh:
        shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    sweep = parse_sweep(args.sweep)
    splits, overlap = generator.splits_and_audit(args, work)  # 1. splits and the audit
    run = Run(args, work, splits)
    run.base = prepare("default", log)  # 2. C from P(0), anchors
    prepare(args.verifier, log)
    run.sets = run.phases.run("C", lambda: generator.sample_c(run, max(s["k"] for s in sweep)))
    run.verifier = make_engine(
        engine_config(model=args.verifier, verifier_prompt="plain", verdict_mode="balanced", max_model_len=4096)
    )
    run.result = {
        "version": 2,
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "splits": {k: [r.id for r in v] for k, v in splits.items()},
        "audit_overlap_rows": overlap,
    }
    try:
        chosen = generator.sweep(run, sweep)  # 3. the sweep on the tuning split
        generator.seeds(run, chosen)  # 4-5. seeds on the training prompts, measured on the held-out ones
        ans = policy.policies(run)  # 6. policy: P(0) trained by G(S) of the first seed and by G(0)
    finally:
        run.verifier.close()
    policy.judge(run, ans)  # ... judged on the held-out prompts
    run.result["seconds"] = time.perf_counter() - t0
    run.save(False)
    print_tables(run.result, args.seeds)
    print(f"wrote {args.output} in {run.result['seconds'] / 60:.1f} min")


if __name__ == "__main__":
    main()
