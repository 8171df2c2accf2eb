"""Benchmark (not a test): one generator and one policy GRPO update of the tiny preset, in float32 and bf16, with and
without LoRA, each in a fresh process, on the inputs of a finished run, in ONE run.

For each variant: the seconds per optimiser step and where they go (rollout generation on the in-process vLLM engine,
the rewards' verification, the rest: the trainer's forward and backward passes and the optimiser), the peak resident
memory of the process (sampled every 0.25 s; the verifier engine, the rollout engine and the trainer are all in it),
the reward of the step, and the parameters trained. Then the tokens of one generator rollout: the instructions, the
user prompt, the K responses (the set C), the anchors the rubric is checked on, and the rubric itself.

    OMP_NUM_THREADS=2 flock /tmp/dr-heavy.lock .venv/bin/python infra/benchmarks/bench_grpo_step.py \\
        --store ~/.cache/dynamicrubric/store --run-id local --output infra/benchmarks/results/bench_grpo_step.json

``--variants generator:bfloat16:lora policy:float32:full ...`` picks variants; ``--set generator.lora_r=8`` overrides
the preset's GRPO settings (as ``dr coevolve --set``) for every variant.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_main_job import TreeRSS  # noqa: E402

#: A LoRA update's learning rate over a full update's (dr_core/config/presets.py).
LORA_LR_SCALE = 10

ALL = [
    f"{role}:{dtype}:{mode}"
    for role in ("generator", "policy")
    for dtype, mode in (("float32", "full"), ("bfloat16", "full"), ("bfloat16", "lora"))
]


def _rows(con, query: str) -> list[dict]:
    rel = con.sql(query)
    names = [d[0] for d in rel.description]
    return [dict(zip(names, t)) for t in rel.fetchall()]


def inputs(store_url: str, run_id: str):
    """The round-1 update's inputs of the run: generator rows (prompt, C, anchors) and policy rows."""
    from dr_core.store.artifacts import Store
    from dr_core.train import records

    con = Store.from_url(store_url).connect()
    samples = _rows(con, f"SELECT * FROM samples WHERE run_id = '{run_id}' AND round = 1 AND stage = 'generator'")
    if not samples:
        raise SystemExit(f"{store_url}: run {run_id!r} has no round-1 generator samples (run dr coevolve first)")
    pids = {s["prompt_id"] for s in samples}
    prompt_rows = list(
        {
            p["prompt_id"]: p for p in _rows(con, "SELECT prompt_id, prompt FROM prompts") if p["prompt_id"] in pids
        }.values()
    )
    prompt_rows.sort(key=lambda p: min(s["set_id"] for s in samples if s["prompt_id"] == p["prompt_id"]))
    anchors = [a for a in _rows(con, "SELECT prompt_id, rank, response FROM anchors") if a["prompt_id"] in pids]
    # the run's selected anchors: the ranks its verdicts were asked on
    ranks = {
        r["response"]
        for r in _rows(
            con,
            f"SELECT DISTINCT response FROM verdicts WHERE run_id = '{run_id}' "
            "AND round = 1 AND stage = 'generator' AND target = 'anchor'",
        )
    }
    anchors = [a for a in anchors if a["rank"] in ranks]
    return records.generator_rows(prompt_rows, samples, anchors), records.policy_rows(prompt_rows)


def settings_for(role: str, dtype: str, mode: str, overrides: list[str]):
    from dr_core.config import coevolve_preset

    fields: dict = {}
    for kv in overrides:
        key, value = kv.split("=", 1)
        top, field = key.split(".", 1)
        fields.setdefault(top, {})[field] = json.loads(value) if value[:1] in "[{0123456789-tfn" else value
    cfg = coevolve_preset("tiny", **fields)
    base = getattr(cfg, role)
    lora = mode == "lora"
    # a LoRA update takes 10x the full update's learning rate (docs/benchmarks/performance.md: LoRA); the variant that
    # differs from the preset's choice gets the other one
    lr = base.learning_rate * (
        LORA_LR_SCALE if lora and not base.use_lora else 1 / LORA_LR_SCALE if base.use_lora and not lora else 1
    )
    return cfg, base.model_copy(update={"bf16": dtype == "bfloat16", "use_lora": lora, "learning_rate": lr})


def run_one(spec: str, store: str, run_id: str, overrides: list[str], out: Path) -> None:
    """One variant, in this (fresh) process."""
    from dr_core.engines import make_engine
    from dr_core.model import prepare
    from dr_core.train.grpo import train_generator, train_policy

    role, dtype, mode = spec.split(":")
    cfg, settings = settings_for(role, dtype, mode, overrides)
    gen_rows, pol_rows = inputs(store, run_id)
    engines = cfg.round.engines
    verifier_cfg = engines.verifier.model_copy(update={"dtype": dtype})
    prepare(verifier_cfg.model)
    prepare("default")
    t0 = time.perf_counter()
    verifier = make_engine(verifier_cfg)
    generator = make_engine(engines.generator.model_copy(update={"dtype": dtype})) if role == "policy" else None
    started = time.perf_counter() - t0
    records: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="dr-bench-grpo-") as tmp:
        from dr_core.model import prepare_default_model

        base = prepare_default_model()
        if role == "generator":
            n_sets = (
                settings.per_device_train_batch_size
                * settings.gradient_accumulation_steps
                // settings.num_generations
                * settings.max_steps
            )
            result = train_generator(
                base, gen_rows[:n_sets], verifier, settings, Path(tmp) / "out", on_rollouts=records.extend
            )
        else:
            result = train_policy(
                base, pol_rows, generator, verifier, settings, Path(tmp) / "out", on_rollouts=records.extend
            )
    row = step_row(spec, result, settings, started)
    if role == "generator":
        row["tokens"] = rollout_tokens(gen_rows[0], settings, records, verifier_cfg)
    out.write_text(json.dumps(row, default=float))


#: The GRPO settings a result row shows.
SHOWN_SETTINGS = {
    "learning_rate",
    "bf16",
    "use_lora",
    "lora_r",
    "lora_alpha",
    "max_steps",
    "num_generations",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
}


def step_row(spec: str, result, settings, started: float) -> dict:
    """A variant's result row: seconds per optimiser step and where they go, the update's reward and settings."""
    reward_s = sum(h.get("reward_seconds", 0) for h in result.history)
    stats = result.rollout_stats or {}
    steps = max(1, result.steps)
    step = result.step_seconds or 0.0
    gen_s = stats.get("generate_seconds", 0.0) / steps
    sync_s = stats.get("sync_seconds", 0.0) / steps
    return {
        "variant": spec,
        "steps": result.steps,
        "step_seconds": round(step, 1),
        "rollout_generate_s": round(gen_s, 1),
        "weight_sync_s": round(sync_s, 2),
        "reward_s": round(reward_s / steps, 1),
        "trainer_s": round(step - gen_s - sync_s - reward_s / steps, 1),
        "update_seconds": round(result.seconds, 1),
        "engines_start_s": round(started, 1),
        "reward_first": result.reward_first,
        "reward_last": result.reward_last,
        "settings": settings.model_dump(include=SHOWN_SETTINGS),
    }


def rollout_tokens(row, settings, records: list[dict], verifier_cfg) -> dict:
    """Tokens of one generator rollout (its group's first), by part, with SmolLM2's tokenizer (the generator's);
    the anchors and responses as the verifier reads them, with its own tokenizer."""
    from transformers import AutoTokenizer

    from dr_core.model import prepare, prepare_default_model
    from dr_core.rubric import prompts
    from dr_core.train.grpo import generator_dataset

    tok = AutoTokenizer.from_pretrained(prepare_default_model())
    n = lambda text: len(tok.encode(text, add_special_tokens=False))  # noqa: E731
    full = n(generator_dataset([row], settings, tok)[0]["prompt"])
    each = min(prompts.CANDIDATE_CHARS, prompts.CANDIDATES_TOTAL_CHARS // len(row.candidates))
    cands = [n(prompts.clip(c, each)) for c in row.candidates]
    prompt = n(prompts.clip(row.prompt, prompts.PROMPT_CHARS))
    texts = [r["text"] for r in records if r.get("group_id") == row.group_id]
    rubric = round(sum(n(t) for t in texts) / len(texts), 1) if texts else None
    vtok = AutoTokenizer.from_pretrained(prepare(verifier_cfg.model))
    vn = lambda text: len(vtok.encode(text, add_special_tokens=False))  # noqa: E731
    return {
        "prompt_total": full,
        "user_prompt": prompt,
        "responses_C": cands,
        "responses_C_total": sum(cands),
        "instructions_and_template": full - prompt - sum(cands),
        "rubric_mean": rubric,
        "verifier_anchor_tokens": [vn(prompts.clip(a, prompts.VERIFIED_RESPONSE_CHARS)) for a in row.anchors],
        "verifier_C_tokens": [vn(prompts.clip(c, prompts.VERIFIED_RESPONSE_CHARS)) for c in row.candidates],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", required=True, help="store of a finished `dr coevolve --preset tiny` run")
    ap.add_argument("--run-id", default="local")
    ap.add_argument("--variants", nargs="*", default=ALL, help="ROLE:DTYPE:full|lora")
    ap.add_argument("--set", action="append", default=[], help="override, e.g. generator.lora_r=8")
    ap.add_argument("--output", type=Path)
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        return run_one(args.one, args.store, args.run_id, args.set, args.result)
    results = []
    with tempfile.TemporaryDirectory(prefix="dr-bench-grpo-") as tmp:
        for i, spec in enumerate(args.variants):
            res = Path(tmp) / f"{i}.json"
            cmd = [
                sys.executable,
                __file__,
                "--store",
                args.store,
                "--run-id",
                args.run_id,
                "--one",
                spec,
                "--result",
                str(res),
                *[x for kv in args.set for x in ("--set", kv)],
            ]
            t = time.time()
            proc = subprocess.Popen(
                cmd, env=dict(os.environ), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
            rss = TreeRSS(proc.pid)
            log, _ = proc.communicate()
            rss.stop()
            if proc.returncode != 0:
                sys.exit(f"{spec} failed (exit {proc.returncode}):\n{log[-4000:]}")
            row = json.loads(res.read_text())
            row["wall_s"] = round(time.time() - t, 1)
            row["peak_gb"] = round((rss.peak() or 0) / 2**30, 2)
            results.append(row)
            print(json.dumps(row, default=float), flush=True)
    print(f"\n{'variant':28} {'step s':>7} {'rollout':>8} {'reward':>7} {'trainer':>8} {'peak GB':>8}")
    for r in results:
        print(
            f"{r['variant']:28} {r['step_seconds']:>7} {r['rollout_generate_s']:>8} {r['reward_s']:>7} "
            f"{r['trainer_s']:>8} {r['peak_gb']:>8}"
        )
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(
            json.dumps({"store": args.store, "overrides": args.set, "results": results}, indent=1, default=float) + "\n"
        )
        print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
