"""Benchmark (not a test): which verdict procedure to use with which bundled verifier model, by measurement.

Every verifier model (the bundled ones that are prepared, or ``--models``) is run through every procedure:

- ``choice/system``: structured yes/no choice, instructions in a system turn (the project's original prompt);
- ``choice/plain``: structured choice, one user turn without a system turn ("plain" prompt: instructions,
  [User prompt], [Response], [Criterion], the question last);
- ``calibrated/system`` and ``calibrated/plain``: contextual calibration (first-token yes-vs-no log-odds minus
  the content-free bias) under each prompt.

On two inputs:
1. the probe ``dr_core/data/verifier_probe.jsonl`` (24 checks with obvious answers, 12 yes / 12 no): accuracy
   (constant answer: 0.5) and yes-rate;
2. slices of public preference pairs (default: HH-RLHF harmless test pairs past the 40 the product bundles, and
   RM-Bench chat pairs, from ../shared/data; pass ``--pairs FILE:START:N`` for others). One rubric per pair is
   written once by the generator (default: the tiny preset's, SmolLM2-135M, dynamic mode, seed 0) and the same
   rubrics go to every verifier, so only the verdict procedure varies. Per procedure: verdict yes-rate (n checks),
   tie rate, strict accuracy (ties and unscorable pairs count wrong; chance for a strict metric with ties is below
   0.5) and accuracy on decisive pairs (n decisive), each with its n.

    OMP_NUM_THREADS=2 flock /tmp/dr-heavy.lock .venv/bin/python infra/benchmarks/bench_verdicts.py \\
        --output infra/benchmarks/results/bench_verdicts.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from dr_core.config import engine_config  # noqa: E402
from dr_core.datasets import load  # noqa: E402
from dr_core.evaluator.generate import generate_rubrics  # noqa: E402
from dr_core.evaluator.items import Check, EvalItem  # noqa: E402
from dr_core.evaluator.verify import verify  # noqa: E402
from dr_core.paths import REPO_DIR, bundled  # noqa: E402
from dr_core.scoring.equations import rubric_scores  # noqa: E402

SHARED = REPO_DIR.parent / "shared" / "data"
DEFAULT_PAIRS = [
    f"{SHARED / 'eval' / 'hh_harmless_pairs.jsonl'}:40:10",
    f"{SHARED / 'eval' / 'rmbench_chat_pairs.jsonl'}:0:10",
]
PROCEDURES = [
    ("choice", "system"),
    ("choice", "plain"),
    ("calibrated", "system"),
    ("calibrated", "plain"),
    ("balanced", "system"),
    ("balanced", "plain"),
]


def load_probe() -> tuple[list[Check], list[int]]:
    rows = [json.loads(line) for line in bundled("verifier_probe.jsonl").read_text().splitlines() if line.strip()]
    return [Check(r["prompt"], r["response"], r["criterion"]) for r in rows], [int(r["expected"]) for r in rows]


def load_pairs(specs: list[str]) -> list[tuple[str, str, str, str]]:
    """(source, prompt, chosen, rejected) of every slice FILE:START:N."""
    out = []
    for spec in specs:
        path, start, n = spec.rsplit(":", 2)
        rows = load(path, "pairwise")[int(start) : int(start) + int(n)]
        out += [(Path(path).stem, r.prompt, r.chosen, r.rejected) for r in rows]
    return out


def store_sets(url: str, run_id: str) -> list[dict]:
    """The measure-stage sets of a finished run (``dr coevolve``): prompt, C, the anchors it was scored on, and each
    rubric's items, read back from the store, so a procedure can be tried on the very sets the main job scores."""
    from dr_core.store.artifacts import Store

    con = Store.from_url(url).connect()
    q = lambda text: con.sql(text).fetchall()  # noqa: E731
    sets: dict[tuple, dict] = {}
    for rnd, sid, pid, _idx, text in q(
        f"SELECT round, set_id, prompt_id, response_idx, response FROM samples WHERE "
        f"run_id = '{run_id}' AND stage = 'measure' ORDER BY ALL"
    ):
        sets.setdefault((rnd, sid), {"prompt_id": pid, "C": []})["C"].append(text)
    anchors: dict[str, dict[int, str]] = {}
    prompt_of: dict[str, str] = {}
    for pid, prompt, rank, resp in q("SELECT prompt_id, prompt, rank, response FROM anchors"):
        anchors.setdefault(pid, {})[rank] = resp
        prompt_of[pid] = prompt
    rubrics: dict[tuple, list] = {}
    for rnd, sid, ro, _item, crit, w in q(
        f"SELECT round, set_id, rollout, item, criterion, weight FROM rubrics WHERE "
        f"run_id = '{run_id}' AND stage = 'measure' AND criterion IS NOT NULL "
        f"ORDER BY ALL"
    ):
        rubrics.setdefault((rnd, sid, ro), []).append((crit, int(w)))
    out = []
    for (rnd, sid, _ro), items in sorted(rubrics.items()):
        s = sets[(rnd, sid)]
        ranked = anchors[s["prompt_id"]]  # the round's anchors: the store holds the ranks it selected
        out.append(
            {
                "round": rnd,
                "set_id": sid,
                "prompt": prompt_of[s["prompt_id"]],
                "C": s["C"],
                "anchors": [ranked[r] for r in sorted(ranked)],
                "items": items,
            }
        )
    return out


def set_metrics(sets: list[dict], verdicts: list[int | None]) -> dict:
    """Yes-rate over every check of the sets, share of sets whose Eq. 12 scores on C are all equal, mean R_disc."""
    from dr_core.scoring.equations import discriminability_reward

    it = iter(verdicts)
    constant, r_disc = 0, []
    for s in sets:
        m = len(s["items"])
        weights = [w for _c, w in s["items"]]
        cand = [[next(it) for _ in range(m)] for _ in s["C"]]
        for _ in s["anchors"]:
            [next(it) for _ in range(m)]
        scores = rubric_scores(weights, cand)
        constant += bool(scores.scorable.all()) and float(np.ptp(scores.values)) < 1e-9
        d = discriminability_reward(weights, cand)
        if d is not None:
            r_disc.append(float(d))
    y, n = rate(list(verdicts))
    return {
        "sets": len(sets),
        "sets_yes_rate": y,
        "sets_checks": n,
        "constant_score_share": constant / len(sets) if sets else None,
        "sets_r_disc": float(np.mean(r_disc)) if r_disc else None,
    }


def pair_metrics(scores: list[tuple[float | None, float | None]]) -> dict:
    """Strict accuracy (chosen scores strictly higher; ties and unscorable are wrong), ties, decisive accuracy."""
    n = len(scores)
    scorable = [(c, r) for c, r in scores if c is not None and r is not None]
    ties = sum(abs(c - r) < 1e-9 for c, r in scorable)
    right = sum(c > r + 1e-9 for c, r in scorable)
    decisive = len(scorable) - ties
    return {
        "n": n,
        "unscorable": n - len(scorable),
        "tie_rate": ties / n if n else None,
        "strict_accuracy": right / n if n else None,
        "decisive_n": decisive,
        "decisive_accuracy": right / decisive if decisive else None,
    }


def rate(verdicts: list[int | None]) -> tuple[float | None, int]:
    scored = [v for v in verdicts if v is not None]
    return (sum(scored) / len(scored) if scored else None), len(scored)


def pair_scores(layout: list, verdicts: list) -> list[tuple]:
    """Eq. 12 scores (chosen, rejected) of each pair from its rubric's verdicts ((None, None): no usable rubric);
    ``layout``: per pair, where its checks start in ``verdicts`` and its rubric's weights."""
    scores = []
    for lay in layout:
        if lay is None:
            scores.append((None, None))
            continue
        start, weights = lay
        m = len(weights)
        matrix = [verdicts[start : start + m], verdicts[start + m : start + 2 * m]]
        scores.append(tuple(rubric_scores(weights, matrix)))
    return scores


@dataclass
class Inputs:
    """What every verifier is run on: the probe, the pairs' checks (``layout`` per pair: where its checks start
    and its rubric's weights, None without a usable rubric) and the store's sets with their checks."""

    checks: list[Check]
    expected: list[int]
    pair_checks: list[Check]
    layout: list
    sets: list[dict]
    set_checks: list[Check]


def parse_args() -> tuple[argparse.Namespace, list[tuple[str, str]]]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--models", nargs="*", default=None, help="bundled verifier models (default: every prepared bundled model)"
    )
    ap.add_argument("--generator", default="default", help="bundled model or checkpoint that writes the rubrics")
    ap.add_argument("--pairs", nargs="*", default=DEFAULT_PAIRS, help="pairwise slices FILE:START:N")
    ap.add_argument(
        "--procedures",
        nargs="*",
        default=[f"{m}/{s}" for m, s in PROCEDURES],
        help="verdict_mode/verifier_prompt pairs to run (default: all four)",
    )
    ap.add_argument(
        "--sets-store",
        default=None,
        help="also try every procedure on the measure-stage sets of a "
        "finished `dr coevolve` run in this store (with --sets-run-id)",
    )
    ap.add_argument("--sets-run-id", default="local")
    ap.add_argument("--output", type=Path, required=True)
    args = ap.parse_args()
    procedures = [tuple(p.split("/")) for p in args.procedures]
    if not set(procedures) <= set(PROCEDURES):
        ap.error(f"--procedures: choose among {', '.join(f'{m}/{s}' for m, s in PROCEDURES)}")
    return args, procedures


def main() -> None:
    args, procedures = parse_args()
    from dr_core.model import BUNDLED, is_prepared

    models = args.models or [n for n in BUNDLED if is_prepared(n)]
    checks, expected = load_probe()
    pairs = load_pairs(args.pairs)
    pair_checks, layout = pair_rubric_checks(args.generator, pairs)
    sets = store_sets(args.sets_store, args.sets_run_id) if args.sets_store else []
    set_checks = [
        Check(s["prompt"], resp, crit) for s in sets for resp in s["C"] + s["anchors"] for crit, _w in s["items"]
    ]
    if sets:
        print(f"store sets: {len(sets)} rubric x set pairs, {len(set_checks)} checks", flush=True)
    inputs = Inputs(checks, expected, pair_checks, layout, sets, set_checks)
    results = [row for name in models for row in run_model(name, procedures, inputs)]
    out = {
        "generator": args.generator,
        "sets_store": args.sets_store,
        "pairs": args.pairs,
        "rubric_usable": sum(x is not None for x in layout),
        "results": results,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(out, indent=2, default=float) + "\n")
    print_table(results, bool(sets))
    print(f"wrote {args.output}")


def pair_rubric_checks(generator: str, pairs: list) -> tuple[list[Check], list]:
    """One rubric per pair, written once by ``generator``, and its checks on the chosen and the rejected answer."""
    from dr_core.engines import make_engine
    from dr_core.model import is_bundled, prepare

    rubrics, gseconds = [], 0.0
    if pairs:
        if is_bundled(generator):
            prepare(generator, print)
        gen = make_engine(engine_config(model=generator, max_model_len=4096))
        try:
            items = [EvalItem(p, (c, r)) for _src, p, c, r in pairs]
            rubrics, gstats = generate_rubrics(gen, items, [0])
            gseconds = gstats.seconds
        finally:
            gen.close()
    pair_checks, layout = [], []
    for (_src, p, c, r), gens in zip(pairs, rubrics):
        rub = gens[0].rubric
        if rub is None:
            layout.append(None)
            continue
        start = len(pair_checks)
        pair_checks += [Check(p, resp, crit) for resp in (c, r) for crit in rub.criteria]
        layout.append((start, rub.weights))
    print(
        f"rubrics: {sum(x is not None for x in layout)}/{len(pairs)} usable, {len(pair_checks)} pair checks, "
        f"{gseconds:.0f} s",
        flush=True,
    )
    return pair_checks, layout


def run_model(name: str, procedures: list[tuple[str, str]], inputs: Inputs) -> list[dict]:
    """One verifier model through every procedure, each from a cold prefix cache; a result row per procedure."""
    from dr_core.engines import make_engine
    from dr_core.model import prepare

    rows = []
    prepare(name, print)
    engine = make_engine(engine_config(model=name, max_model_len=4096))
    try:
        for mode, style in procedures:
            engine.reset_prefix_cache()  # each procedure from a cold cache: its speed is its own
            t = time.perf_counter()
            probe, _ = verify(engine, inputs.checks, verdict_mode=mode, verifier_prompt=style)
            on_pairs, _ = verify(engine, inputs.pair_checks, verdict_mode=mode, verifier_prompt=style)
            on_sets = (
                verify(engine, inputs.set_checks, verdict_mode=mode, verifier_prompt=style)[0] if inputs.sets else []
            )
            secs = time.perf_counter() - t
            row = procedure_row(name, mode, style, inputs, probe, on_pairs, on_sets, secs)
            rows.append(row)
            print(json.dumps(row, default=float), flush=True)
    finally:
        engine.close()
    return rows


def procedure_row(name: str, mode: str, style: str, inputs: Inputs, probe, on_pairs, on_sets, secs: float) -> dict:
    p_yes, p_n = rate(probe)
    v_yes, v_n = rate(on_pairs)
    n_checks = len(inputs.checks) + len(inputs.pair_checks) + len(inputs.set_checks)
    return {
        "model": name,
        "verdict_mode": mode,
        "verifier_prompt": style,
        "probe_accuracy": sum(v == e for v, e in zip(probe, inputs.expected)) / len(inputs.expected),
        "probe_yes_rate": p_yes,
        "probe_n": len(inputs.expected),
        "pairs_yes_rate": v_yes,
        "pairs_checks": v_n,
        **pair_metrics(pair_scores(inputs.layout, on_pairs)),
        "seconds": round(secs, 1),
        "verdicts_per_s": round(n_checks / secs, 2),
        **(set_metrics(inputs.sets, on_sets) if inputs.sets else {}),
    }


def print_table(results: list[dict], with_sets: bool) -> None:
    print(
        "\n| model | verdict mode | prompt | probe acc. (n=24) | probe yes | pair-check yes (n) | ties "
        "| strict acc. (n) | decisive acc. (n) | verdicts/s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    f = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
    for r in results:
        print(
            f"| {r['model']} | {r['verdict_mode']} | {r['verifier_prompt']} | {f(r['probe_accuracy'])} | "
            f"{f(r['probe_yes_rate'])} | {f(r['pairs_yes_rate'])} ({r['pairs_checks']}) | {f(r['tie_rate'])} | "
            f"{f(r['strict_accuracy'])} ({r['n']}) | {f(r['decisive_accuracy'])} ({r['decisive_n']}) | "
            f"{r['verdicts_per_s']} |"
            + (
                f" sets: yes {f(r['sets_yes_rate'])} ({r['sets_checks']}), constant "
                f"{f(r['constant_score_share'])} of {r['sets']}"
                if with_sets
                else ""
            )
        )


if __name__ == "__main__":
    main()
