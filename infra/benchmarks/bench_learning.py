"""Benchmark (hour-scale, not in CI): does training the rubric generator move the evaluator's numbers, and does the
co-evolved generator G(S) train a better policy than the frozen G(0)? Version 2; its protocol is README "Learning
benchmark" and was written before the run whose results are in infra/benchmarks/results/bench_learning.json.

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
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # in-process engines (ENVIRONMENT.md)
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402

from dr_core.config import engine_config  # noqa: E402
from dr_core.datasets import load  # noqa: E402
from dr_core.paths import bundled, cache_dir  # noqa: E402
from dr_core.rubric import prompts  # noqa: E402
from dr_core.runs.policy_eval import bootstrap_ci  # noqa: E402
from dr_core.runs.round_steps import spread_ranks  # noqa: E402
from dr_core.store import sql  # noqa: E402
from dr_core.store.artifacts import Store  # noqa: E402
from dr_core.train.grpo import (  # noqa: E402
    GeneratorReward,
    GeneratorRow,
    GRPOSettings,
    PolicyRow,
    generator_dataset,
    train_generator,
    train_policy,
)

METRICS = ("r_disc", "saturated_items", "anchor_tie_rate", "anchor_strict_accuracy", "unparseable")
ROOT = Path(__file__).resolve().parents[2]


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def ci(values) -> dict:
    vals = [float(v) for v in values if v is not None and not np.isnan(v)]
    if not vals:
        return {"mean": None, "ci95": None, "n": 0}
    return {"mean": float(np.mean(vals)), "ci95": bootstrap_ci(vals), "n": len(vals)}


def prompt_metrics(records: list[dict]) -> dict:
    """The five figures of one prompt from its measurement rollouts (GeneratorReward records)."""
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


def measure(
    checkpoint, verifier, rows: list[GeneratorRow], settings: GRPOSettings, n_rubrics: int, seed: int
) -> list[dict]:
    """Sample ``n_rubrics`` rollouts per row from ``checkpoint`` exactly as GRPO rolls out (text prompt with the
    primer, rollout temperature and length; a float32 engine, so that a small update is not lost to bf16 rounding),
    score them with the training reward code; per-prompt metrics."""
    import torch
    from vllm import SamplingParams, TokensPrompt

    from dr_core.engines import make_engine

    eng = make_engine(engine_config(model=str(checkpoint), max_model_len=4096, dtype="float32"))
    try:
        tok = eng.tokenizer
        ds = generator_dataset(rows, settings, tok)
        torch.manual_seed(seed)
        outs = eng.llm.generate(
            [TokensPrompt(prompt_token_ids=tok.encode(d["prompt"], add_special_tokens=False)) for d in ds],
            SamplingParams(
                n=n_rubrics, temperature=settings.temperature, max_tokens=settings.max_completion_length, seed=seed
            ),
            use_tqdm=False,
        )
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
    return {
        m: ci([a[m] - b[m] for a, b in zip(after, before) if a[m] is not None and b[m] is not None]) for m in METRICS
    }


def curve(history: list[dict], rollouts: list[dict], lam: float) -> dict:
    """Training reward per step (mean and spread over each group's rollouts), steps without gradient, and the mean
    of the first 10 steps against the last 10."""
    steps = []
    for h in history:
        groups: dict[int, list[float]] = {}
        for r in rollouts:
            if r["step"] == h["step"]:
                groups.setdefault(r["group_id"], []).append(r["r_disc"] + lam * r["r_anchor"])
        spread = [float(np.std(v)) for v in groups.values()]
        steps.append(
            {
                "step": h["step"],
                "reward_mean": h["reward_mean"],
                "r_disc_mean": h["r_disc_mean"],
                "r_anchor_mean": h["r_anchor_mean"],
                "unparseable": h["unparseable"],
                "group_std": float(np.mean(spread)) if spread else None,
                "zero_std_groups": sum(s < 1e-6 for s in spread),
                "groups": len(groups),
            }
        )
    rewards = [s["reward_mean"] for s in steps]
    n = min(10, len(rewards) // 2) or 1
    return {
        "steps": steps,
        "first10": float(np.mean(rewards[:n])),
        "last10": float(np.mean(rewards[-n:])),
        "r_disc_first10": float(np.mean([s["r_disc_mean"] for s in steps[:n]])),
        "r_disc_last10": float(np.mean([s["r_disc_mean"] for s in steps[-n:]])),
        "window": n,
        "steps_without_gradient": sum(s["zero_std_groups"] == s["groups"] for s in steps),
    }


class Phases:
    """Each phase's JSON result in the work directory, reused on a rerun."""

    def __init__(self, work: Path):
        self.dir = work / "phases"
        self.dir.mkdir(parents=True, exist_ok=True)

    def run(self, name: str, fn):
        path = self.dir / f"{name}.json"
        if path.exists():
            log(f"{name}: reusing {path}")
            return json.loads(path.read_text())
        value = fn()
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(value, default=float))
        tmp.replace(path)
        return value


def parse_sweep(text: str) -> list[dict]:
    out = []
    for part in text.split(","):
        lr, r, k = part.split(":")
        out.append({"lr": float(lr), "lora_r": int(r), "k": int(k)})
    return out


def main() -> None:
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
    ap.add_argument("--render", type=Path, help="print the README block of a finished result JSON and exit")
    args = ap.parse_args()
    if args.render:
        print(markdown(json.loads(args.render.read_text())))
        return
    if args.output is None:
        ap.error("--output is required")
    if args.smoke:
        args.steps, args.seeds, args.train, args.tune, args.heldout = 2, [0], 2, 2, 2
        args.sweep, args.sweep_steps, args.eval_rubrics, args.policy_steps = "5e-5:16:3,2e-4:4:4", 1, 2, 1
    from dr_core.engines import make_engine
    from dr_core.model import prepare

    t0 = time.perf_counter()
    work = args.workdir or cache_dir() / ("bench-learning-smoke" if args.smoke else "bench-learning")
    if args.fresh:
        shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    phases = Phases(work)
    sweep = parse_sweep(args.sweep)
    k_max = max(s["k"] for s in sweep)

    # 1. splits and the audit
    lists = [r for r in load(bundled("anchors_alpacaeval.jsonl"), "ranked") if len(r.responses) >= args.n_anchor]
    if args.train + args.tune + args.heldout > len(lists):
        raise SystemExit(f"only {len(lists)} anchor lists: --train + --tune + --heldout must be at most that")
    train, tune = lists[: args.train], lists[args.train : args.train + args.tune]
    held = lists[len(lists) - args.heldout :]
    store = Store.from_url(str(work / "store"))
    splits = {"bench-train": train, "bench-tune": tune, "bench-heldout": held}
    for name, split in splits.items():
        store.write("prompts", [{"prompt_id": r.id, "prompt": r.prompt, "baseline": None} for r in split], dataset=name)
    overlap = 0
    for a, b in (("bench-heldout", "bench-train"), ("bench-heldout", "bench-tune"), ("bench-tune", "bench-train")):
        rows = sql.run(store.connect(), "split_overlap", {"heldout": a, "train": b})
        overlap += rows.num_rows
        if rows.num_rows:
            raise SystemExit(f"{a} overlaps {b}: {rows.to_pylist()}")
    log(f"audit split_overlap: no overlap (train {len(train)}, tune {len(tune)}, held-out {len(held)})")

    # 2. C from P(0), anchors
    base = prepare("default", log)
    prepare(args.verifier, log)

    def sample_c():
        policy = make_engine(engine_config(model="default", max_model_len=4096))
        try:
            everything = train + tune + held
            outs = policy.chat(
                [prompts.policy_messages(r.prompt) for r in everything],
                n=k_max,
                temperature=1.0,
                max_tokens=args.c_tokens,
                seed=0,
            )
        finally:
            policy.close()
        return {r.id: list(o.texts) for r, o in zip(everything, outs)}

    sets = phases.run("C", sample_c)

    def rows_of(split, k):
        return [
            GeneratorRow(
                i,
                r.prompt,
                tuple(sets[r.id][:k]),
                tuple(r.responses[j - 1] for j in spread_ranks(len(r.responses), args.n_anchor)),
            )
            for i, r in enumerate(split)
        ]

    def settings_of(seed: int, setting: dict, steps: int) -> GRPOSettings:
        return GRPOSettings(
            learning_rate=setting["lr"],
            num_generations=args.rollouts,
            max_completion_length=128,
            per_device_train_batch_size=args.rollouts,
            max_steps=steps,
            save_steps=steps,
            temperature=1.0,
            seed=seed,
            rollouts="vllm",
            use_lora=True,
            lora_r=setting["lora_r"],
            lora_alpha=2 * setting["lora_r"],
        )

    def train_and_measure(tag: str, setting: dict, seed: int, steps: int, split) -> dict:
        settings = settings_of(seed, setting, steps)
        rows = rows_of(train, setting["k"])
        log(
            f"{tag}: {steps} generator steps (lr {setting['lr']:g}, LoRA r{setting['lora_r']}, K {setting['k']}, "
            f"seed {seed}) on {len(rows)} prompts"
        )
        out = work / tag / "generator"
        shutil.rmtree(out, ignore_errors=True)
        rollouts: list[dict] = []
        tr = train_generator(base, rows, verifier, settings, out, on_rollouts=rollouts.extend)
        log(f"{tag}: trained in {tr.seconds:.0f} s; measuring G(S)")
        gs = measure(Path(tr.checkpoint), verifier, rows_of(split, setting["k"]), settings, args.eval_rubrics, seed)
        return {
            "setting": setting,
            "seed": seed,
            "train_seconds": tr.seconds,
            "checkpoint": str(tr.checkpoint),
            "curve": curve(tr.history, rollouts, settings.lam),
            "per_prompt": gs,
        }

    verifier = make_engine(
        engine_config(model=args.verifier, verifier_prompt="plain", verdict_mode="balanced", max_model_len=4096)
    )
    result: dict = {
        "version": 2,
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "splits": {k: [r.id for r in v] for k, v in splits.items()},
        "audit_overlap_rows": overlap,
    }

    def save(partial: bool) -> None:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(result | {"partial": partial}, indent=2, default=float) + "\n")

    try:
        # 3. the sweep on the tuning split
        result["sweep"] = []
        g0_tune: dict[int, list] = {}
        for i, setting in enumerate(sweep):
            k = setting["k"]
            if k not in g0_tune:
                g0_tune[k] = phases.run(
                    f"tune-G0-k{k}",
                    lambda k=k, setting=setting: measure(
                        base, verifier, rows_of(tune, k), settings_of(0, setting, 1), args.eval_rubrics, 0
                    ),
                )
            r = phases.run(
                f"tune-{i}", lambda s=setting, i=i: train_and_measure(f"tune-{i}", s, 0, args.sweep_steps, tune)
            )
            d = diff(g0_tune[k], r["per_prompt"])
            result["sweep"].append(
                {
                    "setting": setting,
                    "steps": args.sweep_steps,
                    "G0": summarise(g0_tune[k]),
                    "GS": summarise(r["per_prompt"]),
                    "GS_minus_G0": d,
                    "curve": r["curve"],
                    "train_seconds": r["train_seconds"],
                }
            )
            log(f"tune {setting}: R_disc gain {d['r_disc']['mean']}")
        gains = [s["GS_minus_G0"]["r_disc"]["mean"] for s in result["sweep"]]
        best = max(range(len(gains)), key=lambda i: (gains[i] if gains[i] is not None else -1e9, -i))
        chosen = sweep[best]
        result["chosen"] = chosen
        log(f"chosen on the tuning split: {chosen}")
        save(True)

        # 4-5. seeds on the training prompts, measured on the held-out ones
        k = chosen["k"]
        g0 = phases.run(
            f"held-G0-k{k}",
            lambda: measure(
                base,
                verifier,
                rows_of(held, k),
                settings_of(args.seeds[0], chosen, 1),
                args.eval_rubrics,
                args.seeds[0],
            ),
        )
        result["G0"] = summarise(g0)
        result["seeds"] = {}
        for seed in args.seeds:
            r = phases.run(
                f"seed-{seed}", lambda seed=seed: train_and_measure(f"seed-{seed}", chosen, seed, args.steps, held)
            )
            result["seeds"][seed] = {
                "train_seconds": r["train_seconds"],
                "curve": r["curve"],
                "G0": summarise(g0),
                "GS": summarise(r["per_prompt"]),
                "GS_minus_G0": diff(g0, r["per_prompt"]),
                "per_prompt": {"G0": g0, "GS": r["per_prompt"]},
                "checkpoint": r["checkpoint"],
            }
            log(
                json.dumps(
                    {
                        "seed": seed,
                        "GS_minus_G0": result["seeds"][seed]["GS_minus_G0"]["r_disc"],
                        "first10": r["curve"]["first10"],
                        "last10": r["curve"]["last10"],
                    },
                    default=float,
                )
            )
            save(True)
        per = [result["seeds"][s]["per_prompt"]["GS"] for s in args.seeds]
        gs_pooled = [
            {
                m: (
                    float(np.mean([p[i][m] for p in per if p[i][m] is not None]))
                    if any(p[i][m] is not None for p in per)
                    else None
                )
                for m in METRICS
            }
            for i in range(len(held))
        ]
        result["pooled"] = {"G0": summarise(g0), "GS": summarise(gs_pooled), "GS_minus_G0": diff(g0, gs_pooled)}
        save(True)

        # 6. policy: P(0) trained by G(S) of the first seed and by G(0), judged on the held-out prompts
        gs_ckpt = result["seeds"][args.seeds[0]]["checkpoint"]
        pset = GRPOSettings(
            learning_rate=args.policy_lr,
            num_generations=args.policy_k,
            max_completion_length=64,
            per_device_train_batch_size=2 * args.policy_k,
            max_steps=args.policy_steps,
            save_steps=args.policy_steps,
            temperature=1.0,
            rubric_max_tokens=256,
            seed=0,
            rollouts="vllm",
            use_lora=True,
        )

        def policy_update(name: str, generator_ckpt) -> dict:
            log(f"policy update with {name}: {args.policy_steps} steps, 2 groups of K={args.policy_k} per step")
            prec: list[dict] = []
            out = work / f"policy-{name}"
            shutil.rmtree(out, ignore_errors=True)
            gen_engine = make_engine(engine_config(model=str(generator_ckpt), max_model_len=4096))
            try:
                ptr = train_policy(
                    base,
                    [PolicyRow(i, r.id, r.prompt) for i, r in enumerate(train)],
                    gen_engine,
                    verifier,
                    pset,
                    out,
                    on_rollouts=prec.extend,
                )
            finally:
                gen_engine.close()
            groups: dict[tuple[int, int], list[float]] = {}
            for r in prec:
                if r["score"] is not None:
                    groups.setdefault((r["step"], r["group_id"]), []).append(float(r["score"]))
            steps = [
                {
                    "step": s,
                    "reward_mean": float(np.mean([np.mean(v) for (st, _g), v in groups.items() if st == s])),
                    "group_std": float(np.mean([np.std(v) for (st, _g), v in groups.items() if st == s])),
                }
                for s in sorted({s for s, _ in groups})
            ]
            return {
                "checkpoint": str(ptr.checkpoint),
                "seconds": ptr.seconds,
                "steps": steps,
                "zero_std_groups": sum(float(np.std(v)) < 1e-6 for v in groups.values()),
                "groups": len(groups),
                "unscorable": sum(r["score"] is None for r in prec),
            }

        pols = {
            "P_GS": phases.run("policy-GS", lambda: policy_update("GS", gs_ckpt)),
            "P_G0": phases.run("policy-G0", lambda: policy_update("G0", base)),
        }
        result["policy"] = {"updates": pols}

        def answers() -> dict:
            out = {}
            for name, ckpt in (
                ("P0", base),
                ("P_GS", pols["P_GS"]["checkpoint"]),
                ("P_G0", pols["P_G0"]["checkpoint"]),
            ):
                eng = make_engine(engine_config(model=str(ckpt), max_model_len=4096, dtype="float32"))
                try:
                    outs = eng.chat(
                        [prompts.policy_messages(r.prompt) for r in held],
                        n=1,
                        temperature=0.0,
                        max_tokens=args.answer_tokens,
                        seed=0,
                    )
                finally:
                    eng.close()
                out[name] = [o.texts[0] for o in outs]
            return out

        ans = phases.run("answers", answers)
    finally:
        verifier.close()
    data = work / "heldout_prompts.jsonl"
    data.write_text("".join(json.dumps({"id": r.id, "prompt": r.prompt}) + "\n" for r in held))
    for name, texts in ans.items():
        (work / f"answers_{name}.jsonl").write_text(
            "".join(json.dumps({"id": r.id, "answer": a}) + "\n" for r, a in zip(held, texts))
        )
    result["policy"]["identical_answers"] = {
        f"{a}_vs_{b}": sum(x == y for x, y in zip(ans[a], ans[b]))
        for a, b in (("P_GS", "P0"), ("P_G0", "P0"), ("P_GS", "P_G0"))
    }
    result["policy"]["judged"] = {}
    for a, b in (("P_GS", "P0"), ("P_G0", "P0"), ("P_GS", "P_G0")):
        out = work / f"judge_{a}_vs_{b}.json"
        cmd = [
            str(ROOT / ".venv" / "bin" / "dr"),
            "eval-policy",
            "--data",
            str(data),
            "--policy",
            str(work / f"answers_{a}.jsonl"),
            "--baseline",
            str(work / f"answers_{b}.jsonl"),
            "--judge",
            args.verifier,
            "--output",
            str(out),
        ]
        log("judging: " + " ".join(cmd[1:]))
        subprocess.run(cmd, check=True)
        result["policy"]["judged"][f"{a}_vs_{b}"] = json.loads(out.read_text())
    result["seconds"] = time.perf_counter() - t0
    save(False)
    print_tables(result, args.seeds)
    print(f"wrote {args.output} in {result['seconds'] / 60:.1f} min")


def fmt(c: dict) -> str:
    if c["mean"] is None:
        return "-"
    return f"{c['mean']:+.3f} [{c['ci95'][0]:+.3f}, {c['ci95'][1]:+.3f}]" if c["ci95"] else f"{c['mean']:+.3f}"


def markdown(result: dict) -> str:
    """The README's results block of a finished run: sizes, sweep, curves, held-out table, policy comparison."""
    a, seeds = result["args"], list(result["seeds"])
    ch = result["chosen"]
    out = [
        f"Measured here (2 cores, one run of the protocol, {result['seconds'] / 60:.0f} min; audit: "
        f"{result['audit_overlap_rows']} overlapping prompts). Chosen on the tuning split: learning rate "
        f"{ch['lr']:g}, LoRA rank {ch['lora_r']}, K {ch['k']}. Means with 95 % bootstrap intervals over prompts.",
        "",
        f"Sweep (tuning split, seed 0, {a['sweep_steps']} steps each):",
        "",
        "| lr | LoRA rank | K | tuning R_disc gain | reward first 10 -> last 10 | steps without gradient |",
        "|---|---|---|---|---|---|",
    ]
    for sw in result["sweep"]:
        c, st = sw["curve"], sw["setting"]
        out.append(
            f"| {st['lr']:g} | {st['lora_r']} | {st['k']} | {fmt(sw['GS_minus_G0']['r_disc'])} | "
            f"{c['first10']:.3f} -> {c['last10']:.3f} | {c['steps_without_gradient']} |"
        )
    out += [
        "",
        f"Training ({a['steps']} generator steps a seed on the {a['train']} training prompts; reward = "
        "R_disc + R_anchor, one group of 4 rollouts a step):",
        "",
        "| seed | reward, first 10 steps | last 10 | R_disc, first 10 | last 10 | steps without gradient |",
        "|---|---|---|---|---|---|",
    ]
    for sd in seeds:
        c = result["seeds"][sd]["curve"]
        out.append(
            f"| {sd} | {c['first10']:.3f} | {c['last10']:.3f} | {c['r_disc_first10']:.3f} | "
            f"{c['r_disc_last10']:.3f} | {c['steps_without_gradient']} |"
        )
    out += [
        "",
        f"Held out ({a['heldout']} prompts, {a['eval_rubrics']} rubrics each):",
        "",
        "| model | " + " | ".join(METRICS) + " |",
        "|---|" + "---|" * len(METRICS),
    ]
    rows = [("G(0)", result["G0"])]
    for sd in seeds:
        rows += [
            (f"G(S) seed {sd}", result["seeds"][sd]["GS"]),
            (f"G(S) - G(0) seed {sd}", result["seeds"][sd]["GS_minus_G0"]),
        ]
    rows += [("G(S) pooled", result["pooled"]["GS"]), ("**G(S) - G(0) pooled**", result["pooled"]["GS_minus_G0"])]
    out += [f"| {name} | " + " | ".join(fmt(v[m]) for m in METRICS) + " |" for name, v in rows]
    pol = result["policy"]
    out += [
        "",
        f"Policy ({a['policy_steps']} steps each from P(0), judged on the {a['heldout']} held-out prompts):",
        "",
        "| comparison | win rate [95 % CI] | wins / ties / losses | identical answers | judge position bias |",
        "|---|---|---|---|---|",
    ]
    for name, m in pol["judged"].items():
        ci = m.get("win_rate_ci95") or [None, None]
        pb = m.get("judge_position_bias")
        out.append(
            f"| {name.replace('_vs_', ' vs ')} | {m['win_rate']:.3f} [{ci[0]:.3f}, {ci[1]:.3f}] | "
            f"{m['wins']} / {m['ties']} / {m['losses']} | {m.get('identical_answers')} | "
            + ("-" if pb is None else f"{pb:+.3f}")
            + " |"
        )
    for name, u in pol["updates"].items():
        first = [s["reward_mean"] for s in u["steps"][:3]]
        last = [s["reward_mean"] for s in u["steps"][-3:]]
        out.append(
            f"\n{name}: {len(u['steps'])} steps in {u['seconds']:.0f} s, reward (mean Eq. 12 score) first 3 "
            f"steps {np.mean(first):.3f}, last 3 {np.mean(last):.3f}; {u['zero_std_groups']} of {u['groups']} "
            "groups with zero reward std."
        )
    return "\n".join(out)


def print_tables(result: dict, seeds=None) -> None:
    print("\n" + markdown(result))


if __name__ == "__main__":
    main()
