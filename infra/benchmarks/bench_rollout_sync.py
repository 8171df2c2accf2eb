"""Benchmark (minutes, not in CI): how much of a small LoRA update the GRPO rollout engine sees after a weight sync, and
what each choice of engine costs, in ONE run (dr_core/train/rollouts.py chose from it).

The trainer of a LoRA update on a bf16 CPU holds its frozen linear weights in bf16 (dr_core/train/lora.py) and the
adapters in float32. Three ways to hand the updated model to the rollout engine:

- ``bf16 engine, bf16 base + delta``: the old sync, the trainer's bf16 base plus the adapters' delta, rounded to bf16
  by the engine;
- ``bf16 engine, fp32 base + delta``: the float32 base read from the checkpoint plus the delta, computed in float32,
  rounded to bf16 by the engine;
- ``fp32 engine, fp32 base + delta``: the same sum in a float32 engine (what the rollouts use now).

1. **What is kept** (no engine needed: an engine stores what it is given in its dtype): SmolLM2-135M with a rank-16
   LoRA on every linear layer, its adapters random and scaled so that the delta's entries have a given RMS (1e-5,
   3e-5, 1e-4, 3e-4: one to a few optimiser steps at the tiny preset's rates). For each way, the engine's weights
   after the sync minus its weights before (the checkpoint in the engine's dtype), against the true delta:
   ``kept`` = <moved, delta> / <delta, delta> (the share of the update along its own direction) and ``error`` =
   |moved - delta| / |delta|, over every LoRA-adapted weight.
2. **What it costs** (real in-process vLLM engines, one dtype after the other): one generation batch of GRPO
   rollouts (``--prompts`` generator prompts of the bundled sets x ``--rollouts`` rubric rollouts, up to
   ``--max-tokens`` tokens each, temperature 1), repeated ``--repeats`` times, and one full weight sync; output tokens
   per second and seconds per sync.

    OMP_NUM_THREADS=2 flock /tmp/dr-heavy.lock .venv/bin/python infra/benchmarks/bench_rollout_sync.py \\
        --output infra/benchmarks/results/bench_rollout_sync.json      # about 3 minutes on 2 cores
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

SIZES = (1e-5, 3e-5, 1e-4, 3e-4)
WAYS = ("bf16 engine, bf16 base + delta", "bf16 engine, fp32 base + delta", "fp32 engine, fp32 base + delta")


def lora_model(checkpoint: str, rms: float, seed: int = 0):
    """The model as a bf16 LoRA update's trainer holds it (bf16 frozen linears, float32 adapters), with random
    adapters scaled so that every adapted weight's delta has entries of RMS ``rms``."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from dr_core.train.lora import bf16_linears
    from dr_core.train.rollouts import _lora_layers

    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32)
    bf16_linears(model)
    torch.manual_seed(seed)
    model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules="all-linear", init_lora_weights=False))
    with torch.no_grad():
        for layer in _lora_layers(model).values():
            delta = layer.get_delta_weight("default")
            layer.lora_B["default"].weight.mul_(rms / float(delta.pow(2).mean().sqrt()))
    return model


def kept(checkpoint: str) -> list[dict]:
    """Part 1: for every delta size and way, the share of the update the engine's weights move by."""
    import torch

    from dr_core.train.rollouts import BaseWeights, _lora_layers, named_weights

    base = BaseWeights(checkpoint)
    out = []
    for rms in SIZES:
        model = lora_model(checkpoint, rms)
        adapted = {n.removeprefix("base_model.model.").replace(".base_layer.", ".") for n in _lora_layers(model)}
        old = dict(named_weights(model))
        new = dict(named_weights(model, base))
        sums = {w: [0.0, 0.0, 0.0] for w in WAYS}  # <moved, delta>, <delta, delta>, |moved - delta|^2
        with torch.no_grad():
            for name in adapted:
                fp32 = base.get(name)
                delta = new[name] - fp32
                for way, before, after in (
                    (WAYS[0], fp32.bfloat16().float(), old[name].bfloat16().float()),
                    (WAYS[1], fp32.bfloat16().float(), new[name].bfloat16().float()),
                    (WAYS[2], fp32, new[name]),
                ):
                    moved = (after - before).double()
                    d = delta.double()
                    s = sums[way]
                    s[0] += float((moved * d).sum())
                    s[1] += float((d * d).sum())
                    s[2] += float(((moved - d) ** 2).sum())
        for way, (dot, dd, err) in sums.items():
            out.append({"delta_rms": rms, "way": way, "kept": dot / dd, "error": (err / dd) ** 0.5})
            print(f"delta {rms:g}  {way:32s} kept {dot / dd:.3f}  error {(err / dd) ** 0.5:.3f}", flush=True)
        del model
    return out


def cost(checkpoint: str, prompts: int, rollouts: int, max_tokens: int, repeats: int) -> list[dict]:
    """Part 2: rollout tokens per second and one sync's seconds, per engine dtype."""
    from transformers import AutoTokenizer

    from dr_core.config import EngineConfig
    from dr_core.datasets import load
    from dr_core.engines.vllm_engine import VLLMEngine
    from dr_core.paths import bundled
    from dr_core.rubric import prompts as P
    from dr_core.train.rollouts import BaseWeights, named_weights

    tok = AutoTokenizer.from_pretrained(checkpoint)
    lists = load(bundled("anchors_alpacaeval.jsonl"), "ranked")[:prompts]
    ids = [
        tok.encode(
            tok.apply_chat_template(
                P.dynamic_generator_messages(r.prompt, [x[:600] for x in r.responses[:4]], answer="lines"),
                tokenize=False,
                add_generation_prompt=True,
            )
            + P.LINES_ROLLOUT_PREFIX,
            add_special_tokens=False,
        )
        for r in lists
    ]
    model = lora_model(checkpoint, 1e-4)
    weights = {n: t.clone() for n, t in named_weights(model, BaseWeights(checkpoint))}
    out = []
    for dtype in ("bfloat16", "float32"):
        eng = VLLMEngine(EngineConfig(model=checkpoint, dtype=dtype, max_model_len=2048, kv_cache_gib=1.0))
        try:
            eng.sample_ids(ids[:1], [1], temperature=1.0, max_tokens=8, seed=0)  # warm-up
            tokens, seconds = 0, 0.0
            for r in range(repeats):
                t = time.perf_counter()
                res = eng.sample_ids(ids, [rollouts] * len(ids), temperature=1.0, max_tokens=max_tokens, seed=r)
                seconds += time.perf_counter() - t
                tokens += sum(len(c) for group in res for c, _ in group)
            t = time.perf_counter()
            eng.load_weights(weights.items())
            sync = time.perf_counter() - t
        finally:
            eng.close()
        row = {
            "dtype": dtype,
            "rollout_tokens": tokens,
            "generate_seconds": round(seconds, 2),
            "tokens_per_s": round(tokens / seconds, 1),
            "sync_seconds": round(sync, 2),
        }
        print(json.dumps(row), flush=True)
        out.append(row)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="default", help="bundled model name or checkpoint directory")
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--rollouts", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--output", type=Path, required=True)
    args = ap.parse_args()
    from dr_core.config.numerics import describe
    from dr_core.model import prepare

    checkpoint = str(prepare(args.model, print))
    t0 = time.perf_counter()
    result = {
        "model": checkpoint,
        "numerics": describe(),
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "kept": kept(checkpoint),
        "cost": cost(checkpoint, args.prompts, args.rollouts, args.max_tokens, args.repeats),
    }
    bf16, fp32 = result["cost"]
    result["fp32_over_bf16_generate_seconds"] = round(
        (fp32["generate_seconds"] / fp32["rollout_tokens"]) / (bf16["generate_seconds"] / bf16["rollout_tokens"]), 3
    )
    result["seconds"] = round(time.perf_counter() - t0, 1)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    print(f"fp32 / bf16 seconds per rollout token: {result['fp32_over_bf16_generate_seconds']}")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
