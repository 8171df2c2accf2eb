"""The policy's per-token log-probabilities over the completion only, for GRPO on one CPU process.

TRL 1.16's ``GRPOTrainer._get_per_token_logps_and_entropies`` runs a fused, chunked LM head that, off CUDA/XPU, scores
every position of prompt + completion; ``dr_core.train.grpo``'s trainer calls ``completion_logps`` instead where
``completion_only_head`` says it may (tests/unit/test_grpo.py checks both against TRL's, gradients included).

    python -c "from dr_core.train.logprobs import completion_logps; help(completion_logps)"
"""

from __future__ import annotations


def completion_only_head(trainer, input_ids, compute_aux_loss: bool, multimodal: dict) -> bool:
    """True where ``completion_logps`` replaces TRL's log-probabilities: one process on the CPU, a text-only causal
    LM. TRL 1.16 computes them with a fused, chunked LM head (trl/kernels/chunked_logprob.py) that, off CUDA/XPU,
    scores EVERY position of prompt + completion ("every position is scored instead", to keep tile shapes fixed) and
    back-propagates through a Python loop of tiles: measured on the tiny preset's generator step (8 rollouts of about
    700 tokens, 128 of them completion), 40 s of a 71 s backward pass on 2 cores."""
    return (
        input_ids.device.type == "cpu"
        and not compute_aux_loss
        and trainer.accelerator.num_processes == 1
        and not trainer.is_deepspeed_enabled
        and all(v is None for v in multimodal.values())
    )


def completion_logps(
    trainer, model, input_ids, attention_mask, logits_to_keep: int, batch_size: int | None, compute_entropy: bool
):
    """Per-token log-probabilities (and entropies) of the last ``logits_to_keep`` tokens, the LM head in float32. What
    TRL's ``_get_per_token_logps_and_entropies`` returns, with the head applied to those positions only: the backbone
    runs under the trainer's autocast (bf16 mixed precision when training in bf16), the head in float32 on the float32
    master weights, so the log-softmax over the vocabulary never sees bf16-rounded logits."""
    import torch
    from trl.trainer.utils import entropy_from_logits, selective_log_softmax

    lm = trainer.accelerator.unwrap_model(model)
    lm = lm.get_base_model() if hasattr(lm, "get_base_model") else lm  # PEFT: the LoRA layers sit inside it
    backbone, head = getattr(lm, lm.base_model_prefix), lm.get_output_embeddings()
    batch_size = batch_size or input_ids.size(0)
    logps, entropies = [], []
    for start in range(0, input_ids.size(0), batch_size):
        ids, mask = input_ids[start : start + batch_size], attention_mask[start : start + batch_size]
        with trainer.accelerator.autocast():
            hidden = backbone(input_ids=ids, attention_mask=mask, use_cache=False).last_hidden_state
        hidden = hidden[:, -logits_to_keep - 1 : -1].float()  # position t predicts token t + 1
        with torch.autocast(hidden.device.type, enabled=False):
            logits = torch.nn.functional.linear(
                hidden, head.weight.float(), None if head.bias is None else head.bias.float()
            )
        logits = logits / trainer.temperature
        pad = mask[:, -logits_to_keep:] == 0  # as TRL: 0 at padding (the completion mask drops them anyway)
        logps.append(selective_log_softmax(logits, ids[:, -logits_to_keep:]).masked_fill(pad, 0.0))
        if compute_entropy:
            entropies.append(entropy_from_logits(logits).masked_fill(pad, 0.0))
    return torch.cat(logps), torch.cat(entropies) if compute_entropy else None, None
