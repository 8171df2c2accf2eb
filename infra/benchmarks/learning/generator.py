"""Phases 1-5 of the learning benchmark: the splits and their audit, P(0)'s responses C, the sweep on the tuning
split, and per seed G(0) -> G(S) on the training prompts, measured on the held-out ones."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from dr_core.config import engine_config
from dr_core.datasets import load
from dr_core.paths import bundled
from dr_core.rubric import prompts
from dr_core.store import sql
from dr_core.store.artifacts import Store
from dr_core.train.grpo import GeneratorReward, GeneratorRow, GRPOSettings, generator_dataset, train_generator
from infra.benchmarks.learning.run import Run, log
from infra.benchmarks.learning.stats import curve, diff, pooled, prompt_metrics, summarise


# -- 1. splits and the audit --------------------------------------------------------------------------------------
def splits_and_audit(args, work: Path) -> tuple[dict[str, list], int]:
    """The three splits of the bundled anchor lists in file order, written to the store's prompts table; stops
    unless ``split_overlap`` finds no shared prompt between any two. Returns (splits, overlapping rows)."""
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
    return splits, overlap


# -- 2. C from P(0) -----------------------------------------------------------------------------------------------
def sample_c(run: Run, k_max: int) -> dict[str, list[str]]:
    """``k_max`` responses of P(0) per prompt of every split (seed 0), by prompt id."""
    from dr_core.engines import make_engine

    policy = make_engine(engine_config(model="default", max_model_len=4096))
    try:
        everything = run.train + run.tune + run.held
        outs = policy.chat(
            [prompts.policy_messages(r.prompt) for r in everything],
            n=k_max,
            temperature=1.0,
            max_tokens=run.args.c_tokens,
            seed=0,
        )
    finally:
        policy.close()
    return {r.id: list(o.texts) for r, o in zip(everything, outs)}


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


def train_and_measure(run: Run, tag: str, setting: dict, seed: int, steps: int, split) -> dict:
    """``steps`` generator steps from P(0)'s checkpoint on the training prompts, then G(S) measured on ``split``."""
    args = run.args
    settings = run.settings_of(seed, setting, steps)
    rows = run.rows_of(run.train, setting["k"])
    log(
        f"{tag}: {steps} generator steps (lr {setting['lr']:g}, LoRA r{setting['lora_r']}, K {setting['k']}, "
        f"seed {seed}) on {len(rows)} prompts"
    )
    out = run.work / tag / "generator"
    shutil.rmtree(out, ignore_errors=True)
    rollouts: list[dict] = []
    tr = train_generator(run.base, rows, run.verifier, settings, out, on_rollouts=rollouts.extend)
    log(f"{tag}: trained in {tr.seconds:.0f} s; measuring G(S)")
    gs = measure(Path(tr.checkpoint), run.verifier, run.rows_of(split, setting["k"]), settings, args.eval_rubrics, seed)
    return {
        "setting": setting,
        "seed": seed,
        "train_seconds": tr.seconds,
        "checkpoint": str(tr.checkpoint),
        "curve": curve(tr.history, rollouts, settings.lam),
        "per_prompt": gs,
    }


# -- 3. the sweep on the tuning split -----------------------------------------------------------------------------
def sweep(run: Run, settings: list[dict]) -> dict:
    """Every setting trained with seed 0 and measured on the tuning split against G(0); the setting with the
    highest mean R_disc gain (ties: the first listed) is returned and recorded as ``chosen``."""
    result = run.result
    result["sweep"] = []
    g0_tune: dict[int, list] = {}
    for i, setting in enumerate(settings):
        result["sweep"].append(_tune(run, i, setting, g0_tune))
    gains = [s["GS_minus_G0"]["r_disc"]["mean"] for s in result["sweep"]]
    best = max(range(len(gains)), key=lambda i: (gains[i] if gains[i] is not None else -1e9, -i))
    chosen = settings[best]
    result["chosen"] = chosen
    log(f"chosen on the tuning split: {chosen}")
    run.save(True)
    return chosen


def _tune(run: Run, i: int, setting: dict, g0_tune: dict[int, list]) -> dict:
    """Sweep setting ``i`` against G(0) on the tuning split (G(0) measured once per K, kept in ``g0_tune``)."""
    args = run.args
    k = setting["k"]
    if k not in g0_tune:
        g0_tune[k] = run.phases.run(
            f"tune-G0-k{k}",
            lambda: measure(
                run.base, run.verifier, run.rows_of(run.tune, k), run.settings_of(0, setting, 1), args.eval_rubrics, 0
            ),
        )
    r = run.phases.run(f"tune-{i}", lambda: train_and_measure(run, f"tune-{i}", setting, 0, args.sweep_steps, run.tune))
    d = diff(g0_tune[k], r["per_prompt"])
    log(f"tune {setting}: R_disc gain {d['r_disc']['mean']}")
    return {
        "setting": setting,
        "steps": args.sweep_steps,
        "G0": summarise(g0_tune[k]),
        "GS": summarise(r["per_prompt"]),
        "GS_minus_G0": d,
        "curve": r["curve"],
        "train_seconds": r["train_seconds"],
    }


# -- 4-5. seeds on the training prompts, measured on the held-out ones --------------------------------------------
def seeds(run: Run, chosen: dict) -> None:
    """G(0) on the held-out prompts, then per seed G(0) -> G(S) and G(S) on them; the seeds pooled per prompt."""
    args, result = run.args, run.result
    k = chosen["k"]
    g0 = run.phases.run(
        f"held-G0-k{k}",
        lambda: measure(
            run.base,
            run.verifier,
            run.rows_of(run.held, k),
            run.settings_of(args.seeds[0], chosen, 1),
            args.eval_rubrics,
            args.seeds[0],
        ),
    )
    result["G0"] = summarise(g0)
    result["seeds"] = {}
    for seed in args.seeds:
        _one_seed(run, chosen, seed, g0)
        run.save(True)
    gs_pooled = pooled([result["seeds"][s]["per_prompt"]["GS"] for s in args.seeds], len(run.held))
    result["pooled"] = {"G0": summarise(g0), "GS": summarise(gs_pooled), "GS_minus_G0": diff(g0, gs_pooled)}
    run.save(True)


def _one_seed(run: Run, chosen: dict, seed: int, g0: list[dict]) -> None:
    r = run.phases.run(
        f"seed-{seed}", lambda: train_and_measure(run, f"seed-{seed}", chosen, seed, run.args.steps, run.held)
    )
    run.result["seeds"][seed] = {
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
                "GS_minus_G0": run.result["seeds"][seed]["GS_minus_G0"]["r_disc"],
                "first10": r["curve"]["first10"],
                "last10": r["curve"]["last10"],
            },
            default=float,
        )
    )
