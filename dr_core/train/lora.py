"""LoRA updates in bf16 mixed precision: the frozen base's linear weights held in bf16, the adapters (the only trained
weights) and everything else in float32, and the final model merged onto the float32 base read back from disk.

Why. Under bf16 autocast a linear layer's matmul casts its weight to bf16 whatever it is stored in, so a frozen
linear weight kept in float32 only costs memory (and a cast at every forward pass): storing it in bf16 gives the same
forward and backward passes. What stays float32: the LoRA adapters and their optimiser state (the master weights of
mixed precision), the embeddings, norms and the (tied) output layer, so the residual stream and the log-softmax are
as before. The merged checkpoint must not inherit the bf16 rounding (a one-step update moves a weight by about 1e-5,
below bf16's resolution of most weights), so it is the float32 base checkpoint plus the adapters' deltas, computed by
PEFT's own merge once the float32 base weights are read back.

    python -c "from dr_core.train.lora import bf16_linears; help(bf16_linears)"
"""

from __future__ import annotations

from pathlib import Path


def bf16_base_fits(settings, cuda: bool) -> bool:
    """Whether a LoRA update holds its frozen linear weights in bf16: bf16 training on the CPU with rollouts on the
    vLLM engine, where every forward pass of the trainer runs under autocast (the log-probabilities of one CPU
    process: ``logprobs.completion_logps``). TRL's own ``generate`` (``rollouts='trl'``) runs without autocast and would
    meet float32 activations in a bf16 layer."""
    return settings.use_lora and settings.bf16 and settings.rollouts == "vllm" and not cuda


def bf16_linears(model) -> int:
    """Cast the model's ``nn.Linear`` layers to bf16 in place, except the output layer (tied to the embeddings in
    small models); returns the parameters cast. Call before the LoRA adapters are added (PEFT then creates them in
    float32: ``autocast_adapter_dtype``)."""
    import torch

    head = model.get_output_embeddings()
    cast = 0
    for module in model.modules():
        if isinstance(module, torch.nn.Linear) and module is not head:
            module.to(torch.bfloat16)
            cast += sum(p.numel() for p in module.parameters())
    return cast


def has_bf16_base(model) -> bool:
    """True when some frozen weight of the (PEFT) model is bf16 (``bf16_linears`` was applied)."""
    import torch

    return any(p.dtype == torch.bfloat16 and not p.requires_grad for p in model.parameters())


def save_merged(peft_model, base_checkpoint: str | Path, out: Path) -> None:
    """Save the float32 base checkpoint with the trained adapters merged in (PEFT's ``merge_and_unload``) to ``out``.
    In place, to keep the peak low at the end of an update: every bf16 frozen weight of the model is replaced by its
    float32 tensor read from ``base_checkpoint`` (one tensor at a time), then the adapters are merged; the model is
    spent afterwards."""
    import torch
    from safetensors import safe_open

    wanted = {}
    for name, param in peft_model.named_parameters():
        if param.dtype == torch.bfloat16 and not param.requires_grad:
            module_name, _, attr = name.rpartition(".")
            wanted[module_name.removeprefix("base_model.model.").replace(".base_layer", "") + "." + attr] = (
                peft_model.get_submodule(module_name),
                attr,
            )
    for path in sorted(Path(base_checkpoint).glob("*.safetensors")):
        with safe_open(str(path), "pt") as tensors:
            for key in tensors.keys():
                if key in wanted:
                    module, attr = wanted.pop(key)
                    setattr(module, attr, torch.nn.Parameter(tensors.get_tensor(key).float(), requires_grad=False))
    if wanted:
        raise ValueError(f"{base_checkpoint}: no float32 tensor for {', '.join(sorted(wanted)[:3])}")
    peft_model.merge_and_unload().save_pretrained(out)
