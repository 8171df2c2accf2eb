"""Benchmark (60 minutes, not in CI; ``--smoke`` is in the suite): does co-evolution learn where the truth is known?
The IFEval testbed (dr_core/ifeval/): prompts with verifiable instructions, anchors ranked by code, every policy
scored by IFEval's own code. Its protocol is infra/benchmarks/ifeval/protocol.py (the numbers) and
docs/benchmarks/learning.md ("IFEval: the protocol", the words), both committed before the first full run.

Phases, in order (each phase's result is stored in the work directory and reused on a rerun; ``--fresh`` starts
over):

1. The splits: the bundled training (68) and tuning (22) prompts, the first 150 of IFEval's own prompts whose
   checkers run here, held out; ``sql/split_overlap`` must find no prompt shared by any two, else the run stops.
2. P(0): ``k`` sampled answers per training and held-out prompt (the sets C), and greedy answers to the held-out
   prompts (float32), from which each held-out prompt's anchors are edited by code.
3. The gate: the frozen verifier's verdicts on every (anchor, instruction) check of the tuning and training anchors
   against the checkers; below the protocol's balanced accuracy, the generator and the two rubric-rewarded arms are
   not run and criteria (b) and (c) are reported as not tested.
4. Per seed, G(0) -> G(S) on the training prompts (R_disc on C + R_anchor on the code-ranked anchors, Eq. 24-25).
5. Criterion (b): one rubric per held-out set (the first 40) from G(0) (sampled with each seed) and from each G(S);
   agreement of the Eq. 12 scores over C and the anchors with the code's counts of instructions met (Spearman per set).
6. Per seed, P(0) trained on each arm's reward: the code's (the positive control), G(S)'s rubrics, G(0)'s rubrics.
7. Every policy's greedy held-out answers (float32), checked by code: criteria (a) the control above P(0), (c) P_G(S)
   above P_G(0), in prompt-level strict accuracy; intervals resample seeds, then prompts.

    OMP_NUM_THREADS=2 flock /tmp/dr-heavy.lock .venv/bin/python infra/benchmarks/bench_ifeval.py \\
        --output infra/benchmarks/results/bench_ifeval.json          # about 60 minutes on 2 cores
    .venv/bin/python infra/benchmarks/bench_ifeval.py --render infra/benchmarks/results/bench_ifeval.json
    .venv/bin/dr report --learning infra/benchmarks/results/bench_ifeval.json --out ./report
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # in-process engines (ENVIRONMENT.md)
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from dr_core.paths import cache_dir  # noqa: E402
from infra.benchmarks.ifeval import evaluator, policy  # noqa: E402
from infra.benchmarks.ifeval.protocol import PROTOCOL, SMOKE  # noqa: E402
from infra.benchmarks.ifeval.protocol_v2 import PROTOCOL_V2, SMOKE_V2  # noqa: E402
from infra.benchmarks.ifeval.render import markdown  # noqa: E402
from infra.benchmarks.ifeval.run import Run  # noqa: E402
from infra.benchmarks.ifeval.stats import hierarchical_ci  # noqa: E402
from infra.benchmarks.learning.run import log, parse_or_render  # noqa: E402

#: Each version's (protocol, smoke protocol).
PROTOCOLS = {1: (PROTOCOL, SMOKE), 2: (PROTOCOL_V2, SMOKE_V2)}


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--output", type=Path, help="the result JSON (required unless --render)")
    ap.add_argument("--workdir", type=Path, default=None, help="scratch (default: the cache's bench-ifeval dir)")
    ap.add_argument("--fresh", action="store_true", help="delete the work directory's earlier phases first")
    ap.add_argument("--smoke", action="store_true", help="every phase on tiny sizes (the protocol's SMOKE)")
    ap.add_argument(
        "--protocol",
        type=int,
        choices=sorted(PROTOCOLS),
        default=1,
        help="the protocol's version: 1 (protocol.py, its result bench_ifeval.json) or 2 (protocol_v2.py: the control "
        "at a larger budget on fresh held-out prompts, bench_ifeval_v2.json); default 1",
    )
    for role in ("policy", "generator", "verifier"):
        ap.add_argument(f"--{role}-model", default=None, help=f"override the protocol's {role} (smoke runs only)")
    ap.add_argument("--render", type=Path, help="print a finished result JSON's tables as Markdown and exit")
    return ap


def main() -> None:
    ap = parser()
    args = parse_or_render(ap, markdown)
    if args is None:
        return
    models = {
        r: getattr(args, f"{r}_model") for r in ("policy", "generator", "verifier") if getattr(args, f"{r}_model")
    }
    if models and not args.smoke:
        ap.error(
            "--policy-model, --generator-model and --verifier-model are for --smoke runs: the protocol names its models"
        )
    suffix = "" if args.protocol == 1 else f"-v{args.protocol}"
    work = args.workdir or cache_dir() / (("bench-ifeval-smoke" if args.smoke else "bench-ifeval") + suffix)
    if args.fresh:
        shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    benchmark(Run(PROTOCOLS[args.protocol][args.smoke], work, args.output, models))


class Verifier:
    """The frozen verifier's engine, opened on first use (a rerun whose phases are all stored opens none)."""

    def __init__(self, run: Run):
        self.run, self.engine = run, None

    def __call__(self):
        if self.engine is None:
            from dr_core.engines import make_engine

            self.engine = make_engine(self.run.verifier_config())
        return self.engine

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()
            self.engine = None


def benchmark(run: Run) -> None:
    """The protocol's phases in order (module docstring)."""
    t0 = time.perf_counter()
    p, ph, res = run.p, run.phases, run.result
    res["audit_overlap_rows"] = run.audit()
    sets = ph.run("C", lambda: evaluator.sample_c(run))
    p0 = ph.run("answers-P0", lambda: evaluator.greedy_answers(run, run.models["policy"]))
    anchors = ph.run("heldout-anchors", lambda: evaluator.heldout_anchors(run, p0))
    res["heldout_anchor_lists"] = sum(bool(a) for a in anchors.values())
    verifier = Verifier(run)
    try:
        res["gate"] = ph.run("gate", lambda: evaluator.gate(run, verifier()))
        rubric_arms = res["gate"]["passed"] or not p.gate_enforced
        gs = {}
        res["seeds"] = {str(s): {} for s in p.seeds}
        if rubric_arms:
            for s in p.seeds:
                g = ph.run(f"generator-{s}", lambda s=s: evaluator.train_seed(run, sets, verifier(), s))
                gs[s] = g["checkpoint"]
                res["seeds"][str(s)]["generator"] = g
            run.save(True)
            res["agreement"] = ph.run(
                "agreement", lambda: evaluator.agreement_phase(run, sets, anchors, verifier(), gs)
            )
    finally:
        verifier.close()
    answers = {"P0": p0}
    arms = policy.ARMS if rubric_arms else ("oracle",)
    for s in p.seeds:
        for arm in arms:
            ckpt = {"PGS": gs.get(s), "PG0": run.models["generator"]}.get(arm)
            tr = ph.run(
                f"policy-{arm}-{s}", lambda a=arm, s=s, c=ckpt: policy.train_arm(run, a, s, run.verifier_config(), c)
            )
            res["seeds"][str(s)][arm] = tr
            answers[f"{arm}-{s}"] = ph.run(
                f"answers-{arm}-{s}", lambda c=tr["checkpoint"]: evaluator.greedy_answers(run, c)
            )
            run.save(True)
    finish(run, answers, arms, rubric_arms)
    res["seconds"] = round(time.perf_counter() - t0, 1)
    run.save(False)
    print("\n" + markdown(res))
    print(f"wrote {run.output} in {res['seconds'] / 60:.1f} min")


def finish(run: Run, answers: dict[str, list[str]], arms, rubric_arms: bool) -> None:
    """Every policy's held-out accuracy, and the three pooled differences with their criteria."""
    p, res = run.p, run.result
    acc = {name: policy.accuracy(run, a) for name, a in answers.items()}
    for name, a in answers.items():
        acc[name]["identical_to_P0"] = sum(x == y for x, y in zip(a, answers["P0"]))
    res["policies"] = {name: {k: v for k, v in a.items()} for name, a in acc.items()}

    def diffs(a: str, b: str | None) -> list[list[float]]:
        return [
            [
                x - y
                for x, y in zip(acc[f"{a}-{s}"]["prompt_strict"], acc[b if b == "P0" else f"{b}-{s}"]["prompt_strict"])
            ]
            for s in p.seeds
        ]

    pooled = {"oracle_minus_P0": hierarchical_ci(diffs("oracle", "P0"), n_boot=p.n_boot)}
    if rubric_arms:
        agr = res["agreement"]["per_prompt"]
        agreement_diffs = [
            [None if g is None or z is None else g - z for g, z in zip(agr[f"GS-{s}"], agr[f"G0-{s}"])] for s in p.seeds
        ]
        pooled["GS_minus_G0_agreement"] = hierarchical_ci(agreement_diffs, n_boot=p.n_boot)
        pooled["PGS_minus_PG0"] = hierarchical_ci(diffs("PGS", "PG0"), n_boot=p.n_boot)
        pooled["PGS_minus_P0"] = hierarchical_ci(diffs("PGS", "P0"), n_boot=p.n_boot)
        pooled["PG0_minus_P0"] = hierarchical_ci(diffs("PG0", "P0"), n_boot=p.n_boot)
    else:
        for key in ("GS_minus_G0_agreement", "PGS_minus_PG0"):
            pooled[key] = {"mean": None, "ci95": None, "n": 0, "seeds": 0, "not_tested": "the gate was not passed"}
    res["pooled"] = pooled
    res["per_seed"] = {}  # each seed's difference, its interval over prompts only
    for key, d in (("oracle_minus_P0", diffs("oracle", "P0")),) + (
        (("GS_minus_G0_agreement", agreement_diffs), ("PGS_minus_PG0", diffs("PGS", "PG0"))) if rubric_arms else ()
    ):
        res["per_seed"][key] = {str(s): hierarchical_ci([row], n_boot=p.n_boot) for s, row in zip(p.seeds, d)}
    res["criteria"] = {
        c: {
            "key": key,
            "met": bool(pooled[key]["ci95"] and pooled[key]["ci95"][0] > 0),
            "tested": pooled[key]["ci95"] is not None,
        }
        for c, key in (("a", "oracle_minus_P0"), ("b", "GS_minus_G0_agreement"), ("c", "PGS_minus_PG0"))
    }
    log("criteria: " + json.dumps(res["criteria"]))


if __name__ == "__main__":
    main()
