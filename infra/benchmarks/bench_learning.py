"""Benchmark (hour-scale, not in CI): does training the rubric generator move the evaluator's numbers?

Self-contained on the bundled data and models. The frozen verifier is a bundled model with its chosen verdict
procedure (default: qwen2.5-coder-0.5b-instruct, plain prompt, balanced verdicts: the tiny preset's verifier).

1. Splits: the bundled ranked anchor lists (AlpacaEval, 11 responses each), the first ``--train`` prompts for
   training and the next ``--heldout`` for measurement. Both splits go to a store's prompts table and the audit
   ``sql/split_overlap.sql`` must return no rows (same text or id in both): the script stops otherwise.
2. P(0) (SmolLM2-135M) samples C, K responses per prompt, once (seed 0); ``--n-anchor`` anchors per prompt spread
   over the ranking (best and worst always in).
3. Per seed: G(0) -> G(S), ``--steps`` GRPO steps of the generator update (dr_core.train.grpo.train_generator: R_disc +
   R_anchor at the advantage level, Eq. 24-25) on the training prompts, against the frozen verifier.
4. G(0) and G(S) are measured on the held-out prompts in the format they are trained in (the 'lines' rollout
   prompt and primer, sampled at the rollout temperature, ``--eval-rubrics`` rubrics per prompt, scored by the
   same reward code as training): per prompt, mean R_disc (Eq. 13) of parseable rubrics, share of saturated items
   (answered alike on every response of C), tie rate on anchor pairs (equal Eq. 12 scores), strict anchor-order
   accuracy (share of anchor pairs i better than j with S_i > S_j strictly), and the unparseable share. Means with
   95 % percentile-bootstrap CIs over prompts, per seed, and of the per-prompt difference G(S) - G(0).
5. One policy update with G(S) of the first seed (dr_core.train.grpo.train_policy: each rollout's Eq. 12 score under
   G(S)'s rubric): the reward std per group and step, then the win rate of P(1) against P(0) on held-out
   Arena-Hard prompts (pairwise, both orders, the verifier model as judge), with its CI.

    OMP_NUM_THREADS=2 flock /tmp/dr-heavy.lock .venv/bin/python infra/benchmarks/bench_learning.py \\
        --output infra/benchmarks/results/bench_learning.json        # about 1-2 hours on 2 cores

A small smoke run: ``--steps 2 --train 4 --heldout 2 --seeds 0 --eval-rubrics 2 --policy-steps 1``.
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

import numpy as np  # noqa: E402

from dr_core.rubric import prompts
from dr_core.store import sql
from dr_core.config import engine_config  # noqa: E402
from dr_core.datasets import load  # noqa: E402
from dr_core.train.grpo import (  # noqa: E402
    GeneratorReward,
    GeneratorRow,
    GRPOSettings,
    PolicyRow,
    generator_dataset,
    train_generator,
    train_policy,
)
from dr_core.paths import bundled, cache_dir  # noqa: E402
from dr_core.runs.round_steps import spread_ranks  # noqa: E402
from dr_core.runs.policy_eval import bootstrap_ci, evaluate_pairwise  # noqa: E402
from dr_core.store.artifacts import Store  # noqa: E402

METRICS = ("r_disc", "saturated_items", "anchor_tie_rate", "anchor_strict_accuracy", "unparseable")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def ci(values) -> dict:
    vals = [float(v) for v in values if v is not None and not np.isnan(v)]
    if not vals:
        return {"mean": None, "ci95": None, "n": 0}
    return {"mean": float(np.mean(vals)), "ci95": bootstrap_ci(vals), "n": len(vals)}


def prompt_metrics(records: list[dict]) -> dict:
    """The five figures of one held-out prompt from its measurement rollouts (GeneratorReward records)."""
    parsed = [r for r in records if r["items"] is not None and r["scorable"]]
    sat, ties, right, pairs = [], 0, 0, 0
    for r in parsed:
        cols = list(zip(*r["verdicts_C"]))  # per item: its verdicts over C
        sat += [len(set(c)) == 1 for c in cols]
        s = r["scores_anchor"]
        for i in range(len(s)):
            for j in range(i + 1, len(s)):  # anchors are best first: i is better than j
                if s[i] is None or s[j] is None:
                    continue
                pairs += 1
                ties += abs(s[i] - s[j]) < 1e-9
                right += s[i] > s[j] + 1e-9
    return {
        "r_disc": float(np.mean([r["r_disc"] for r in parsed])) if parsed else None,
        "saturated_items": float(np.mean(sat)) if sat else None,
        "anchor_tie_rate": ties / pairs if pairs else None,
        "anchor_strict_accuracy": right / pairs if pairs else None,
        "unparseable": sum(r["items"] is None for r in records) / len(records),
    }


def measure(checkpoint: Path, verifier, rows: list[GeneratorRow], settings: GRPOSettings, n_rubrics: int,
            seed: int) -> list[dict]:
    """Sample ``n_rubrics`` rollouts per held-out row from ``checkpoint`` exactly as GRPO rolls out (text prompt with
    the primer, rollout temperature and length), score them with the training reward code; per-prompt metrics."""
    import torch
    from vllm import SamplingParams, TokensPrompt

    from dr_core.engines import make_engine

    eng = make_engine(engine_config(model=str(checkpoint), max_model_len=4096))
    try:
        tok = eng.tokenizer
        ds = generator_dataset(rows, settings, tok)
        torch.manual_seed(seed)
        outs = eng.llm.generate(
            [TokensPrompt(prompt_token_ids=tok.encode(d["prompt"], add_special_tokens=False)) for d in ds],
            SamplingParams(n=n_rubrics, temperature=settings.temperature, max_tokens=settings.max_completion_length),
            use_tqdm=False)
        eos = tok.eos_token_id
    finally:
        eng.close()
    mset = settings.model_copy(update={"num_generations": n_rubrics, "per_device_train_batch_size": n_rubrics})
    records: list[dict] = []
    reward = GeneratorReward(rows, verifier, mset, on_rollouts=records.extend, eos_token_id=eos)
    texts, ids, gids = [], [], []
    for row, out in zip(rows, outs):
        for o in sorted(out.outputs, key=lambda o: o.index):
            texts.append(o.text)
            ids.append(list(o.token_ids))
            gids.append(row.group_id)
    reward(completions=texts, completion_ids=ids, group_id=gids)
    return [prompt_metrics([r for r in records if r["group_id"] == row.group_id]) for row in rows]


def summarise(per_prompt: list[dict]) -> dict:
    return {m: ci([p[m] for p in per_prompt]) for m in METRICS}


def diff(before: list[dict], after: list[dict]) -> dict:
    out = {}
    for m in METRICS:
        d = [a[m] - b[m] for a, b in zip(after, before) if a[m] is not None and b[m] is not None]
        out[m] = ci(d)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=20, help="GRPO steps of the generator update per seed")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--train", type=int, default=12, help="training prompts (the first N anchor lists)")
    ap.add_argument("--heldout", type=int, default=8, help="held-out prompts (the next N)")
    ap.add_argument("--k", type=int, default=4, help="responses per prompt in C")
    ap.add_argument("--c-tokens", type=int, default=96, help="longest response of C (tokens)")
    ap.add_argument("--n-anchor", type=int, default=3)
    ap.add_argument("--rollouts", type=int, default=4, help="rubric rollouts per prompt in training (GRPO group)")
    ap.add_argument("--eval-rubrics", type=int, default=2, help="rubrics sampled per held-out prompt")
    ap.add_argument("--lr", type=float, default=1e-5, help="generator learning rate")
    ap.add_argument("--verifier", default="qwen2.5-coder-0.5b-instruct")
    ap.add_argument("--verifier-prompt", default="plain", choices=["system", "plain"])
    ap.add_argument("--verdict-mode", default="balanced", choices=["choice", "calibrated", "balanced"])
    ap.add_argument("--policy-steps", type=int, default=2, help="steps of the one policy update with G(S)")
    ap.add_argument("--policy-lr", type=float, default=5e-6)
    ap.add_argument("--win-prompts", type=int, default=8, help="held-out Arena-Hard prompts for the win rate")
    ap.add_argument("--workdir", type=Path, default=None, help="scratch (default: the cache's bench-learning dir)")
    ap.add_argument("--output", type=Path, required=True)
    args = ap.parse_args()
    from dr_core.engines import make_engine
    from dr_core.model import prepare

    t0 = time.perf_counter()
    work = args.workdir or cache_dir() / "bench-learning"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)

    # 1. splits and the audit
    lists = [r for r in load(bundled("anchors_alpacaeval.jsonl"), "ranked") if len(r.responses) >= args.n_anchor]
    train, held = lists[:args.train], lists[args.train:args.train + args.heldout]
    if len(held) < args.heldout:
        raise SystemExit(f"only {len(lists)} anchor lists: --train + --heldout must be at most that")
    store = Store.from_url(str(work / "store"))
    for name, split in (("bench-train", train), ("bench-heldout", held)):
        store.write("prompts", [{"prompt_id": r.id, "prompt": r.prompt, "baseline": None} for r in split],
                    dataset=name)
    overlap = sql.run(store.connect(), "split_overlap", {"heldout": "bench-heldout", "train": "bench-train"})
    log(f"audit split_overlap: {overlap.num_rows} overlapping prompts (train {len(train)}, held-out {len(held)})")
    if overlap.num_rows:
        raise SystemExit(f"held-out prompts overlap training: {overlap.to_pylist()}")

    # 2. C from P(0), anchors
    base = prepare("default", log)
    prepare(args.verifier, log)
    policy = make_engine(engine_config(model="default", max_model_len=4096))
    try:
        outs = policy.chat([prompts.policy_messages(r.prompt) for r in train + held], n=args.k, temperature=1.0,
                           max_tokens=args.c_tokens, seed=0)
    finally:
        policy.close()
    sets = {r.id: tuple(o.texts) for r, o in zip(train + held, outs)}

    def rows_of(split):
        return [GeneratorRow(i, r.prompt, sets[r.id],
                             tuple(r.responses[k - 1] for k in spread_ranks(len(r.responses), args.n_anchor)))
                for i, r in enumerate(split)]

    train_rows, held_rows = rows_of(train), rows_of(held)
    verifier = make_engine(engine_config(model=args.verifier, verifier_prompt=args.verifier_prompt,
                                         verdict_mode=args.verdict_mode, max_model_len=4096))
    result: dict = {"args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
                    "audit_overlap_rows": overlap.num_rows, "seeds": {}}
    try:
        def settings_of(seed: int) -> GRPOSettings:
            return GRPOSettings(learning_rate=args.lr, num_generations=args.rollouts, max_completion_length=128,
                                per_device_train_batch_size=args.rollouts, max_steps=args.steps,
                                save_steps=args.steps, temperature=1.0, seed=seed)

        # G(0) is one model: measured once (rubrics sampled with the first seed), the baseline of every seed
        log(f"G(0) on {len(held_rows)} held-out prompts")
        g0 = measure(base, verifier, held_rows, settings_of(args.seeds[0]), args.eval_rubrics, args.seeds[0])
        result["G0"] = summarise(g0)
        log(json.dumps({"G0": result["G0"]}, default=float))
        for seed in args.seeds:
            settings = settings_of(seed)
            log(f"seed {seed}: training the generator, {args.steps} GRPO steps on {len(train_rows)} prompts")
            rollouts: list[dict] = []
            tr = train_generator(base, train_rows, verifier, settings, work / f"seed{seed}" / "generator",
                                 on_rollouts=rollouts.extend)
            steps = []
            for h in tr.history:
                adv = [r["advantage"] for r in rollouts if r["step"] == h["step"]]
                groups = {}
                for r in rollouts:
                    if r["step"] == h["step"]:
                        groups.setdefault(r["group_id"], []).append(r["r_disc"] + settings.lam * r["r_anchor"])
                zero = sum(float(np.std(v)) < 1e-6 for v in groups.values())
                steps.append({"step": h["step"], "reward_mean": h["reward_mean"], "r_disc_mean": h["r_disc_mean"],
                              "r_anchor_mean": h["r_anchor_mean"], "unparseable": h["unparseable"],
                              "zero_std_groups": zero, "groups": len(groups), "n_adv": len(adv)})
            log(f"seed {seed}: trained in {tr.seconds:.0f} s; G(S) on held-out prompts")
            gs = measure(Path(tr.checkpoint), verifier, held_rows, settings, args.eval_rubrics, seed)
            result["seeds"][seed] = {"train_seconds": tr.seconds, "train_steps": steps, "G0": summarise(g0),
                                     "GS": summarise(gs), "GS_minus_G0": diff(g0, gs),
                                     "per_prompt": {"G0": g0, "GS": gs}, "checkpoint": tr.checkpoint}
            log(json.dumps({"seed": seed, "G0": summarise(g0), "GS": summarise(gs)}, default=float))
            args.output.parent.mkdir(parents=True, exist_ok=True)  # what is done so far, in case a later part fails
            args.output.write_text(json.dumps(result | {"partial": True}, indent=2, default=float) + "\n")
        # pooled over seeds: per prompt, the mean of G(S) over seeds, against G(0)
        per = [result["seeds"][s]["per_prompt"]["GS"] for s in args.seeds]
        gs_pooled = [{m: (float(np.mean([p[i][m] for p in per if p[i][m] is not None]))
                          if any(p[i][m] is not None for p in per) else None) for m in METRICS}
                     for i in range(len(held_rows))]
        result["pooled"] = {"G0": summarise(g0), "GS": summarise(gs_pooled), "GS_minus_G0": diff(g0, gs_pooled)}

        # 5. one policy update with G(S) of the first seed, then P(1) vs P(0)
        gs_ckpt = result["seeds"][args.seeds[0]]["checkpoint"]
        k = args.k
        pset = GRPOSettings(learning_rate=args.policy_lr, num_generations=k, max_completion_length=64,
                            per_device_train_batch_size=2 * k, max_steps=args.policy_steps,
                            save_steps=args.policy_steps, temperature=1.0, rubric_max_tokens=384, seed=0)
        log(f"policy update with G(S): {args.policy_steps} steps, 2 groups of K={k} per step")
        prec: list[dict] = []
        gen_engine = make_engine(engine_config(model=gs_ckpt, max_model_len=4096))
        try:
            ptr = train_policy(base, [PolicyRow(i, r.id, r.prompt) for i, r in enumerate(train)], gen_engine,
                               verifier, pset, work / "policy", on_rollouts=prec.extend)
        finally:
            gen_engine.close()
        groups: dict[tuple[int, int], list[float]] = {}
        for r in prec:
            if r["score"] is not None:
                groups.setdefault((r["step"], r["group_id"]), []).append(float(r["score"]))
        stds = [{"step": s, "group": g, "reward_std": float(np.std(v)), "n": len(v)}
                for (s, g), v in sorted(groups.items())]
        win_rows = load(bundled("policy_eval_arenahard.jsonl"), "policy_eval")[:args.win_prompts]
        p1 = make_engine(engine_config(model=ptr.checkpoint, max_model_len=4096))
        p0 = make_engine(engine_config(model="default", max_model_len=4096))
        try:
            metrics, _ = evaluate_pairwise(p1, verifier, win_rows, baseline=p0, max_tokens=128, seed=0)
        finally:
            p1.close()
            p0.close()
        result["policy"] = {"steps": ptr.steps, "seconds": ptr.seconds, "group_reward_std": stds,
                            "zero_std_share": (sum(s["reward_std"] < 1e-6 for s in stds) / len(stds)) if stds
                            else None, "win_rate_vs_P0": metrics}
    finally:
        verifier.close()
    result["seconds"] = time.perf_counter() - t0
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2, default=float) + "\n")
    f = lambda c: "-" if c["mean"] is None else (  # noqa: E731
        f"{c['mean']:.3f} [{c['ci95'][0]:.3f}, {c['ci95'][1]:.3f}]" if c["ci95"] else f"{c['mean']:.3f}")
    print("\n| seed | model | " + " | ".join(METRICS) + " |")
    print("|---|---|" + "---|" * len(METRICS))
    for s in args.seeds:
        for key in ("G0", "GS", "GS_minus_G0"):
            print(f"| {s} | {key} | " + " | ".join(f(result['seeds'][s][key][m]) for m in METRICS) + " |")
    for key in ("G0", "GS", "GS_minus_G0"):
        print(f"| pooled | {key} | " + " | ".join(f(result['pooled'][key][m]) for m in METRICS) + " |")
    pol = result["policy"]
    w = pol["win_rate_vs_P0"]
    print(f"\npolicy update: {pol['steps']} steps, zero-std share {pol['zero_std_share']}, group reward std "
          f"{[round(s['reward_std'], 3) for s in pol['group_reward_std']]}; win rate P(1) vs P(0) "
          f"{w.get('win_rate')} (CI {w.get('win_rate_ci95')}, ties {w.get('tie_rate')}, n {w.get('n')})")
    print(f"wrote {args.output} in {result['seconds'] / 60:.1f} min")


if __name__ == "__main__":
    main()
