"""Benchmark (not a test): what bf16 buys on this CPU and what it changes, float32 against bf16 in ONE run.

1. **matmul**: GFLOP/s of a 2048x2048 matmul in float32 and in bf16 (torch, this process's threads).
2. **gradient**: one real generator batch (the prompts of a finished run's round-1 generator update, each with the
   rubric rollouts written there, as ``[w] criterion`` lines, and their stored Eq. 24-25 advantages) through
   SmolLM2-135M: the GRPO surrogate loss at ratio 1 and beta 0, ``-sum_i A_i * mean_t log p(y_i,t)`` over the
   completion tokens, its gradient in float32 and under bf16 autocast with float32 weights (what training runs with
   ``bf16: true``: TRL/accelerate's mixed precision). Cosine similarity of the two gradients (whole model, and the
   lowest over the parameter tensors), relative norm difference ``|g_bf16 - g_fp32| / |g_fp32|``, and the seconds of
   each forward plus backward pass.
3. **verdicts**: the tiny preset's verifier (Qwen2.5-Coder-0.5B, plain prompt, balanced verdicts) in float32 and in
   bf16 on the same checks: every check of the run's measure-stage sets (their C and anchors under the stored
   rubrics) and of public preference pairs (one rubric per pair, written once by the default generator). Per input:
   the share of verdicts that flip, the yes-rates, the mean absolute change of the first-token yes-vs-no log-odds
   and of each dtype's threshold (the probe median), the change of mean R_disc (Eq. 13) on the sets, strict accuracy
   on the pairs, and verdicts per second.

    OMP_NUM_THREADS=2 flock /tmp/dr-heavy.lock .venv/bin/python infra/benchmarks/bench_numerics.py \\
        --store ~/.cache/dynamicrubric/store --run-id local --output infra/benchmarks/results/bench_numerics.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_verdicts import (  # noqa: E402
    SHARED,
    load_pairs,
    pair_metrics,
    pair_scores,
    rate,
    set_metrics,
    store_sets,
)

from dr_core.config.numerics import describe  # noqa: E402

DEFAULT_PAIRS = [
    f"{SHARED / 'eval' / 'hh_harmless_pairs.jsonl'}:40:20",
    f"{SHARED / 'eval' / 'rmbench_chat_pairs.jsonl'}:0:20",
]
DTYPES = ("float32", "bfloat16")


def bench_matmul(n: int = 2048, reps: int = 20) -> dict:
    import torch

    out = {}
    for name, dtype in (("float32", torch.float32), ("bfloat16", torch.bfloat16)):
        a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
        a @ b  # warm-up
        t = time.perf_counter()
        for _ in range(reps):
            a @ b
        out[name] = round(2 * n**3 * reps / (time.perf_counter() - t) / 1e9, 1)
    out["ratio"] = round(out["bfloat16"] / out["float32"], 2)
    return out


def generator_batch(store_url: str, run_id: str, tokenizer) -> list[tuple[list[int], list[int], float]]:
    """(prompt ids, completion ids, advantage) of every scorable rollout of the run's round-1 generator update."""
    from dr_core.config.training import GRPOSettings
    from dr_core.rubric import prompts
    from dr_core.store.artifacts import Store
    from dr_core.train import records
    from dr_core.train.grpo import generator_dataset

    con = Store.from_url(store_url).connect()
    rows = lambda q: [dict(zip([d[0] for d in r.description], t)) for r in [con.sql(q)] for t in r.fetchall()]  # noqa: E731
    samples = rows(f"SELECT * FROM samples WHERE run_id = '{run_id}' AND round = 1 AND stage = 'generator'")
    pids = {s["prompt_id"] for s in samples}
    prompt_rows = [p for p in rows("SELECT prompt_id, prompt FROM prompts") if p["prompt_id"] in pids]
    anchors = [a for a in rows("SELECT prompt_id, rank, response FROM anchors") if a["prompt_id"] in pids]
    gen_rows = records.generator_rows(list({p["prompt_id"]: p for p in prompt_rows}.values()), samples, anchors)
    settings = GRPOSettings(num_generations=4, per_device_train_batch_size=4)
    prompt_text = {r.group_id: d["prompt"] for r, d in zip(gen_rows, generator_dataset(gen_rows, settings, tokenizer))}
    items: dict[tuple[int, int], list[tuple[int, str]]] = {}
    for r in rows(
        f"SELECT set_id, rollout, item, criterion, weight FROM rubrics WHERE run_id = '{run_id}' AND "
        "round = 1 AND stage = 'generator' AND criterion IS NOT NULL ORDER BY set_id, rollout, item"
    ):
        items.setdefault((r["set_id"], r["rollout"]), []).append((int(r["weight"]), r["criterion"]))
    adv = {
        (r["set_id"], r["rollout"]): r["advantage"]
        for r in rows(
            f"SELECT set_id, rollout, advantage FROM rewards WHERE run_id = '{run_id}' AND round = 1 AND "
            "stage = 'generator'"
        )
    }
    batch = []
    for key, its in sorted(items.items()):
        if key not in adv or adv[key] is None or key[0] not in prompt_text:
            continue
        # the rollout's text after the primer, as the model wrote it ("[w] criterion" lines)
        text = "\n".join(f"[{w}] {c}" for w, c in its)[len(prompts.LINES_ROLLOUT_PREFIX) :] + tokenizer.eos_token
        batch.append(
            (
                tokenizer.encode(prompt_text[key[0]], add_special_tokens=False),
                tokenizer.encode(text, add_special_tokens=False),
                float(adv[key]),
            )
        )
    if not batch:
        raise SystemExit(f"{store_url}: no scorable round-1 generator rollouts for run {run_id!r}")
    return batch


def surrogate_grad(model, batch, autocast: bool) -> tuple[dict, float]:
    """Gradient of -sum_i A_i mean_t log p(y_it) (the GRPO loss at ratio 1, beta 0), one sequence at a time."""
    import torch

    model.zero_grad(set_to_none=True)
    t = time.perf_counter()
    for p_ids, c_ids, a in batch:
        x = torch.tensor([p_ids + c_ids])
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            logits = model(x).logits[0, len(p_ids) - 1 : -1].float()
        lp = torch.log_softmax(logits, -1).gather(-1, torch.tensor(c_ids)[:, None])[:, 0]
        (-a * lp.mean() / len(batch)).backward()
    seconds = time.perf_counter() - t
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}, seconds


def bench_gradient(store_url: str, run_id: str) -> dict:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from dr_core.model import prepare_default_model

    path = prepare_default_model()
    tok = AutoTokenizer.from_pretrained(path)
    batch = generator_batch(store_url, run_id, tok)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    model.train()
    g32, s32 = surrogate_grad(model, batch, autocast=False)
    g16, s16 = surrogate_grad(model, batch, autocast=True)
    # in float64: a float32 dot product over 135M entries drifts enough to give a cosine above 1
    flat32 = torch.cat([g.flatten() for g in g32.values()]).double()
    flat16 = torch.cat([g16[n].flatten() for n in g32]).double()
    per = [
        torch.nn.functional.cosine_similarity(g32[n].flatten().double(), g16[n].flatten().double(), dim=0).item()
        for n in g32
        if g32[n].norm() > 0
    ]
    return {
        "sequences": len(batch),
        "tokens": sum(len(p) + len(c) for p, c, _ in batch),
        "cosine": round(torch.nn.functional.cosine_similarity(flat32, flat16, dim=0).item(), 5),
        "min_param_cosine": round(min(per), 4),
        "relative_norm_difference": round(((flat16 - flat32).norm() / flat32.norm()).item(), 5),
        "norm_ratio": round((flat16.norm() / flat32.norm()).item(), 5),
        "seconds_fwd_bwd": {"float32": round(s32, 1), "bf16_autocast": round(s16, 1)},
        "speedup": round(s32 / s16, 2),
    }


def logodds_and_verdicts(
    engine, checks, style: str, mode: str
) -> tuple[list[float | None], list[int | None], float, float]:
    """First-token log-odds, verdicts (threshold: the mode's bias), the bias, and seconds, for every check."""
    from dr_core.evaluator.calibrate import ask_logodds, calibrated_verdict, first_logodds, verdict_bias
    from dr_core.evaluator.items import StageStats
    from dr_core.evaluator.verify import send_order

    bias = verdict_bias(engine, StageStats(), style, mode)
    unique = send_order(checks)  # as verify sends them: each check once, shared prefixes adjacent
    engine.reset_prefix_cache()
    t = time.perf_counter()
    outs = ask_logodds(engine, unique, style)
    seconds = time.perf_counter() - t
    by_check = {c: first_logodds(o) for c, o in zip(unique, outs)}
    lo = [by_check[c] for c in checks]
    return lo, [calibrated_verdict(x, bias) for x in lo], bias, seconds


def bench_verdicts(store_url: str, run_id: str, pair_specs: list[str]) -> dict:
    from dr_core.evaluator.items import Check

    pairs = load_pairs(pair_specs)
    pair_checks, layout = rubric_checks(pairs)
    sets = store_sets(store_url, run_id)
    set_checks = [
        Check(s["prompt"], resp, crit) for s in sets for resp in s["C"] + s["anchors"] for crit, _w in s["items"]
    ]
    per_dtype = verdicts_per_dtype({"sets": set_checks, "pairs": pair_checks})
    result = {"sets": len(sets), "pairs": len(pairs), "pair_specs": pair_specs}
    for name in ("sets", "pairs"):
        result[name] = compare_dtypes(name, per_dtype, sets, layout)
    return result


def rubric_checks(pairs) -> tuple[list, list]:
    """One rubric per pair from the default generator, and its checks on the chosen and the rejected answer; the
    layout says where each pair's checks start in the list (None: no usable rubric) and its weights."""
    from dr_core.config import engine_config
    from dr_core.engines import make_engine
    from dr_core.evaluator.generate import generate_rubrics
    from dr_core.evaluator.items import Check, EvalItem

    gen = make_engine(engine_config(model="default", max_model_len=4096))
    try:
        rubrics, _ = generate_rubrics(gen, [EvalItem(p, (c, r)) for _s, p, c, r in pairs], [0])
    finally:
        gen.close()
    pair_checks, layout = [], []
    for (_s, p, c, r), gens in zip(pairs, rubrics):
        rub = gens[0].rubric
        layout.append(None if rub is None else (len(pair_checks), rub.weights))
        if rub is not None:
            pair_checks += [Check(p, resp, crit) for resp in (c, r) for crit in rub.criteria]
    return pair_checks, layout


def verdicts_per_dtype(checks: dict[str, list]) -> dict:
    """The tiny preset's verifier in each dtype on each named list of checks: log-odds, verdicts, bias, seconds."""
    from dr_core.config import preset
    from dr_core.engines import make_engine
    from dr_core.model import prepare

    verifier = preset("tiny").engines.verifier
    prepare(verifier.model, print)
    per_dtype = {}
    for dtype in DTYPES:
        engine = make_engine(verifier.model_copy(update={"dtype": dtype, "max_model_len": 4096, "kv_cache_gib": 1}))
        try:
            out = {}
            for name, named_checks in checks.items():
                lo, v, bias, secs = logodds_and_verdicts(
                    engine, named_checks, verifier.verifier_prompt, verifier.verdict_mode
                )
                out[name] = {"logodds": lo, "verdicts": v, "bias": bias, "seconds": secs}
            per_dtype[dtype] = out
        finally:
            engine.close()
        print(f"verdicts in {dtype}: done", flush=True)
    return per_dtype


def compare_dtypes(name: str, per_dtype: dict, sets: list[dict], layout: list) -> dict:
    """float32 against bfloat16 on one list of checks: verdict flips, log-odds change, yes-rate, speed, and what
    the flips do to the sets' figures or the pairs' accuracy."""
    a, b = per_dtype["float32"][name], per_dtype["bfloat16"][name]
    both = [(x, y) for x, y in zip(a["verdicts"], b["verdicts"]) if x is not None and y is not None]
    dlo = [abs(x - y) for x, y in zip(a["logodds"], b["logodds"]) if x is not None and y is not None]
    n = len(a["verdicts"])
    row = {
        "checks": n,
        "flip_share": round(sum(x != y for x, y in both) / len(both), 4) if both else None,
        "flips": sum(x != y for x, y in both),
        "yes_rate": {d: rate(per_dtype[d][name]["verdicts"])[0] for d in DTYPES},
        "mean_abs_logodds_change": round(float(np.mean(dlo)), 4) if dlo else None,
        "threshold": {d: per_dtype[d][name]["bias"] for d in DTYPES},
        "verdicts_per_s": {d: round(n / per_dtype[d][name]["seconds"], 2) for d in DTYPES},
    }
    if name == "sets" and sets:
        m32, m16 = set_metrics(sets, a["verdicts"]), set_metrics(sets, b["verdicts"])
        row["r_disc"] = {"float32": m32["sets_r_disc"], "bfloat16": m16["sets_r_disc"]}
        row["constant_score_share"] = {
            "float32": m32["constant_score_share"],
            "bfloat16": m16["constant_score_share"],
        }
    if name == "pairs":
        row["float32"] = pair_metrics(pair_scores(layout, a["verdicts"]))
        row["bfloat16"] = pair_metrics(pair_scores(layout, b["verdicts"]))
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", required=True, help="store of a finished `dr coevolve --preset tiny` run")
    ap.add_argument("--run-id", default="local")
    ap.add_argument("--pairs", nargs="*", default=DEFAULT_PAIRS, help="pairwise slices FILE:START:N")
    ap.add_argument("--skip", nargs="*", default=[], choices=["matmul", "gradient", "verdicts"])
    ap.add_argument("--output", type=Path, required=True)
    args = ap.parse_args()
    out = {"machine": describe()}
    print(out["machine"], flush=True)
    if "matmul" not in args.skip:
        out["matmul_gflops"] = bench_matmul()
        print("matmul GFLOP/s:", out["matmul_gflops"], flush=True)
    if "gradient" not in args.skip:
        out["gradient"] = bench_gradient(args.store, args.run_id)
        print("gradient:", out["gradient"], flush=True)
    if "verdicts" not in args.skip:
        out["verdicts"] = bench_verdicts(args.store, args.run_id, args.pairs)
        print("verdicts:", json.dumps(out["verdicts"], default=float), flush=True)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(out, indent=1, default=float) + "\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
