"""The GRPO hyper-parameters of one update (``GRPOSettings``): a plain pydantic model, no trl/peft/torch, so
loading a config (``dr_core.presets``) does not load the trainer glue (``dr_core.train.grpo``).

    python -c "from dr_core.train.settings import GRPOSettings; print(GRPOSettings())"
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class GRPOSettings(BaseModel):
    """GRPO hyper-parameters for one update (generator or policy). Defaults: appendix D where it applies (beta,
    K=8), sized down for small models otherwise. Frozen: a value that can go into cache keys."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    learning_rate: float = Field(5e-6, gt=0, description="AdamW learning rate (paper: 5e-6 generator, 1e-6 policy).")
    beta: float = Field(0.01, ge=0, description="KL coefficient against the reference (start) model (paper: 0.01).")
    num_generations: int = Field(
        8, ge=2, description="Rollouts per prompt: G rubrics per set (generator), K responses per prompt (policy)."
    )
    max_completion_length: int = Field(256, ge=1, description="Most tokens per rollout (a rubric or a response).")
    per_device_train_batch_size: int = Field(
        8, ge=1, description="Completions per process per optimiser micro-step. x steps_per_generation must be a "
        "multiple of num_generations, so that every process scores whole groups."
    )
    gradient_accumulation_steps: int = Field(1, ge=1, description="Micro-steps per optimiser step.")
    steps_per_generation: int | None = Field(
        None, ge=1, description="Micro-steps served by one generation round (None: gradient_accumulation_steps)."
    )
    max_steps: int = Field(10, ge=1, description="Optimiser steps of this update.")
    temperature: float = Field(1.0, gt=0, description="Sampling temperature of the rollouts.")
    seed: int = Field(0, description="Seeds TRL, the candidate shuffle shown to the generator and G(t)'s sampling.")
    save_steps: int = Field(50, ge=1, description="Save a resumable checkpoint every this many optimiser steps.")
    save_total_limit: int | None = Field(2, ge=1, description="Resumable checkpoints kept (None: all).")
    keep_resume_checkpoints: bool = Field(
        False, description="Keep out_dir/checkpoints once the final model is saved (model + optimiser state: about "
        "3x the model's size; only a crash before the final save needs them)."
    )
    lam: float = Field(1.0, ge=0, description="Eq. 17 / 24: weight of the anchor advantage (generator only).")
    use_lora: bool = Field(False, description="Train a LoRA adapter (merged into the final checkpoint).")
    lora_r: int = Field(16, ge=1, description="LoRA rank (use_lora only).")
    lora_alpha: int = Field(32, ge=1, description="LoRA alpha (use_lora only).")
    bf16: bool = Field(False, description="bfloat16 training. Keep False on CPU (bf16 is 3-8x slower there).")
    deepspeed: str | None = Field(
        None, description="Path of a DeepSpeed JSON config (infra/deepspeed/*.json), or None. Under `accelerate "
        "launch --config_file infra/accelerate/zero*.yaml` accelerate supplies it instead."
    )
    rubric_temperature: float = Field(
        0.7, ge=0, description="Policy update only: sampling temperature of the fixed G(t) writing a group's rubric."
    )
    rubric_max_tokens: int = Field(512, ge=16, description="Policy update only: most tokens of G(t)'s rubric.")
    rubric_format: Literal["lines", "json"] = Field(
        "lines", description="Generator update only: how rollouts write rubrics. 'lines': one '[w] criterion' per "
        "line, the rollout primed with prompts.LINES_ROLLOUT_PREFIX (a 135M model writes parseable lines, not free "
        "JSON); 'json': the JSON format of the structured-output prompt, unprimed (capable models)."
    )
    logging_steps: int = Field(1, ge=1, description="TRL logs metrics every this many steps.")
    rollouts: Literal["trl", "vllm"] = Field(
        "trl", description="Who samples the rollouts. 'trl': TRL itself (transformers' generate, or TRL's own vLLM "
        "modes on GPUs). 'vllm': an in-process vLLM engine that gets the trainer's weights at every optimiser step "
        "(dr_core/train/rollouts.py; one process; several times faster on CPU, where TRL's vLLM modes fail)."
    )

    @model_validator(mode="after")
    def _whole_groups(self):
        per_generation = self.per_device_train_batch_size * (self.steps_per_generation or self.gradient_accumulation_steps)
        if per_generation % self.num_generations:
            raise ValueError(
                f"per_device_train_batch_size x steps_per_generation = {per_generation} is not a multiple of "
                f"num_generations = {self.num_generations}: a process would score a split group. Make "
                "per_device_train_batch_size a multiple of num_generations."
            )
        if self.rollouts == "vllm" and self.deepspeed is not None:
            raise ValueError("rollouts='vllm' runs one in-process engine: it does not combine with DeepSpeed "
                             "(use TRL's vLLM server mode on several GPUs)")
        if self.deepspeed is not None and not Path(self.deepspeed).is_file():
            raise ValueError(f"deepspeed config {self.deepspeed!r} does not exist (see infra/deepspeed/)")
        return self
