"""The TRL side of one GRPO update (``dr_core.train.grpo``): the model and its LoRA config, the ``GRPOConfig``, the
callbacks, and ``RecordingGRPOTrainer``, TRL 1.16's ``GRPOTrainer`` with three changes that leave the update the same:
it keeps the advantages TRL computed (``dr_advantages``, for checks and tests), it skips the reference model's forward
pass at the first optimiser step of a fresh run (``dr_skip_ref_at_start``: the policy still is the reference there,
so the KL term and its gradient are 0), and on one process it scores only the completion positions
(``dr_core.train.logprobs``). A one-step update gets beta = 0 and no reference model at all (``effective_beta``).
The TRL methods it overrides or calls are checked against the installed TRL when the class is built
(``dr_core.train.trl_seam``: another TRL version, or a changed parameter list, is refused with one line).

Float32 master weights always: with bf16 the trainer runs mixed precision (autocast). On CPU: bf16 mixed precision
where the CPU has bf16 instructions, float32 elsewhere (``GRPOSettings.bf16`` 'auto', dr_core/config/numerics.py),
``OMP_NUM_THREADS=1``, ``use_vllm=False`` (TRL's vLLM modes need CUDA here; ``dr_core.train.rollouts`` has its own);
several CPU processes (DeepSpeed tests) get ``ddp_backend="gloo"``, which accelerate does not pick by itself.
Multi-GPU: ``accelerate launch --config_file infra/accelerate/zero2.yaml -m dr_core.train.launch ...``.

TRL, transformers and torch are imported inside the functions: importing this module loads none of them.

    python -c "from dr_core.train.trainer import effective_beta; help(effective_beta)"
"""

from __future__ import annotations

import os
from pathlib import Path

from dr_core import faults, progress
from dr_core.config.training import GRPOSettings
from dr_core.train import logprobs, lora, trl_seam


def cpu_deepspeed_without_gpu() -> None:
    """Without a GPU, tell DeepSpeed (imported by TRL) to use the CPU before it is imported: it would warn it "was
    unable to detect" a GPU."""
    import torch

    if not torch.cuda.is_available():
        os.environ.setdefault("DS_ACCELERATOR", "cpu")


def load_tokenizer(base_checkpoint: str | Path):
    """The base checkpoint's tokenizer, padding with its EOS token where it has no pad token."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(base_checkpoint))
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_model(base_checkpoint: str | Path, settings: GRPOSettings):
    """The model to train, in float32, and its LoRA config (None without LoRA)."""
    import torch
    from transformers import AutoModelForCausalLM

    # float32 master weights always: with bf16 the trainer runs mixed precision (autocast), so AdamW's small updates
    # (lr 1e-6 moves a weight by about 1e-6, far below bf16's resolution of 2**-8 relative) are not rounded away
    model = AutoModelForCausalLM.from_pretrained(str(base_checkpoint), dtype=torch.float32)
    peft_config = None
    if settings.use_lora:
        from peft import LoraConfig

        if lora.bf16_base_fits(settings, torch.cuda.is_available()):
            lora.bf16_linears(model)  # frozen linear weights in bf16: what autocast computes with anyway

        peft_config = LoraConfig(
            r=settings.lora_r, lora_alpha=settings.lora_alpha, target_modules="all-linear", task_type="CAUSAL_LM"
        )
    return model, peft_config


#: The GRPOSettings fields that are GRPOConfig arguments of the same name and meaning.
PASSED_TO_GRPO_CONFIG = (
    "learning_rate",
    "num_generations",
    "max_completion_length",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "steps_per_generation",
    "max_steps",
    "temperature",
    "seed",
    "save_steps",
    "save_total_limit",
    "logging_steps",
    "bf16",
    "gradient_checkpointing",
    "deepspeed",
)


def grpo_config(settings: GRPOSettings, checkpoints_dir: Path, scale_rewards: str):
    """TRL's ``GRPOConfig`` of the update: checkpoints to ``checkpoints_dir``, rewards scaled as ``scale_rewards``."""
    import torch
    from trl import GRPOConfig

    return GRPOConfig(
        **{name: getattr(settings, name) for name in PASSED_TO_GRPO_CONFIG},
        output_dir=str(checkpoints_dir),
        beta=effective_beta(settings),
        save_strategy="steps",
        fp16=False,
        # transformers accepts bf16 without a GPU only with use_cpu; accelerate then autocasts the CPU to bf16
        use_cpu=settings.bf16 and not torch.cuda.is_available(),
        scale_rewards=scale_rewards,
        use_vllm=False,
        # several processes without CUDA (DeepSpeed on CPU): accelerate finds no backend by itself
        ddp_backend="gloo" if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not torch.cuda.is_available() else None,
        report_to="none",
        disable_tqdm=True,
        dataloader_pin_memory=torch.cuda.is_available(),  # pinning without an accelerator only warns
    )


def build_trainer(model, reward, args, dataset_rows: list[dict], tokenizer, peft_config, settings, rollouts):
    """The ``RecordingGRPOTrainer`` of the update, with the fault and progress callbacks; ``rollouts``: TRL's
    ``rollout_func`` (None: TRL generates)."""
    from datasets import Dataset

    trainer = grpo_trainer_class()(
        model=model,
        reward_funcs=[reward],
        args=args,
        train_dataset=Dataset.from_list(dataset_rows),
        processing_class=tokenizer,
        peft_config=peft_config,
        callbacks=[fault_callback(), progress_callback(settings.max_steps)],
        rollout_func=rollouts,
    )
    if not progress.verbose():
        from transformers.trainer_callback import PrinterCallback

        trainer.remove_callback(PrinterCallback)  # it prints every log dict to stdout
    trainer.dr_advantages = []
    return trainer


def fault_callback():
    """A TRL/transformers callback with the ``grpo-step`` fault point (``dr_core.faults``). It fires at the end of
    every optimiser step, before that step's checkpoint is saved: a fault there strikes between two checkpoints."""
    from transformers import TrainerCallback

    class FaultPoint(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            faults.fault_point("grpo-step")  # DR_FAULT hook (dr_core/faults.py)

    return FaultPoint()


def progress_callback(max_steps: int):
    """A TRL/transformers callback that counts optimiser steps in ``dr_core.progress`` (the CLI's bar)."""
    from transformers import TrainerCallback

    class StepProgress(TrainerCallback):
        work = None

        def on_train_begin(self, args, state, control, **kwargs):
            self.work = progress.Work("GRPO steps", max_steps, "steps")
            if state.global_step:
                self.work.advance(state.global_step)

        def on_step_end(self, args, state, control, **kwargs):
            if self.work is not None:
                self.work.advance(1)

        def on_train_end(self, args, state, control, **kwargs):
            if self.work is not None:
                self.work.close()
                self.work = None

    return StepProgress()


def effective_beta(settings: GRPOSettings) -> float:
    """The KL coefficient given to TRL. A one-step update (one generation per step) never leaves the reference
    model: the KL term (k3 estimator) and its gradient are 0 at that step, so beta = 0 is the same update and TRL
    then loads no reference model (its memory and its forward pass saved). Otherwise the settings' beta; the first
    step of a longer update still skips the reference forward (``dr_skip_ref_at_start``)."""
    one_step = settings.max_steps == 1
    return (
        0.0
        if one_step and one_generation_per_step(settings.steps_per_generation, settings.gradient_accumulation_steps)
        else settings.beta
    )


def one_generation_per_step(steps_per_generation: int | None, gradient_accumulation_steps: int) -> bool:
    """True when every completion generated is trained on within its own optimiser step (TRL generates once per
    ``steps_per_generation`` micro-steps; None means once per step)."""
    return (steps_per_generation or gradient_accumulation_steps) == gradient_accumulation_steps


class _Recording:
    """What ``RecordingGRPOTrainer`` adds to TRL's ``GRPOTrainer`` (a mixin placed before it, so ``super()`` is
    ``GRPOTrainer``); defined here, without TRL, so that importing this module does not load it."""

    dr_advantages: list[list[float]]

    dr_skip_ref_at_start = True
    dr_ref_forwards_skipped = 0
    _dr_beta_held = False

    def _reference_is_policy(self) -> bool:
        """Whether this step's KL to the reference is exactly 0, so the reference's forward pass can be skipped.
        True while the policy has the reference's weights (the first optimiser step of a fresh run, skipping
        enabled, beta non-zero) and every completion generated now is trained on within this step (one generation
        per step, one iteration)."""
        a = self.args
        return (
            self.dr_skip_ref_at_start
            and self.state.global_step == 0
            and self.beta != 0.0
            and self.num_iterations == 1
            and one_generation_per_step(a.steps_per_generation, a.gradient_accumulation_steps)
        )

    # stays: a public transformers hook; a callback could not put beta back when the step raises
    def training_step(self, model, inputs, num_items_in_batch=None):
        # At the first step the policy IS the reference, so the KL term (k3 estimator) and its gradient are
        # exactly 0 there: training with beta = 0 for that step is the same update, without the reference
        # model's forward pass over every prompt and completion.
        if not self._reference_is_policy():
            return super().training_step(model, inputs, num_items_in_batch)
        beta, self.beta = self.beta, 0.0
        self._dr_beta_held = True
        try:
            return super().training_step(model, inputs, num_items_in_batch)
        finally:
            self.beta, self._dr_beta_held = beta, False

    # stays: no public TRL hook computes the policy's log-probabilities (trl_seam.SEAMS records its parameters)
    def _get_per_token_logps_and_entropies(
        self,
        model,
        input_ids,
        attention_mask,
        logits_to_keep,
        batch_size=None,
        compute_entropy=False,
        compute_aux_loss=False,
        **multimodal,
    ):
        if not logprobs.completion_only_head(self, input_ids, compute_aux_loss, multimodal):
            return super()._get_per_token_logps_and_entropies(
                model,
                input_ids,
                attention_mask,
                logits_to_keep,
                batch_size=batch_size,
                compute_entropy=compute_entropy,
                compute_aux_loss=compute_aux_loss,
                **multimodal,
            )
        return logprobs.completion_logps(
            self, model, input_ids, attention_mask, logits_to_keep, batch_size, compute_entropy
        )

    # stays: only its output holds TRL's advantages (reward functions run before them, callbacks never see them)
    def _generate_and_score_completions(self, inputs):
        if self._dr_beta_held:
            self.dr_ref_forwards_skipped += 1
        output = super()._generate_and_score_completions(inputs)
        self.dr_advantages.append(output["advantages"].detach().float().cpu().reshape(-1).tolist())
        return output


def grpo_trainer_class():
    """``RecordingGRPOTrainer``: TRL's ``GRPOTrainer`` with the changes of ``_Recording`` (module docstring), after
    ``trl_seam.check_trl_seam`` found the installed TRL to be one they were written against."""
    from trl import GRPOTrainer

    trl_seam.check_trl_seam(added_names())

    class RecordingGRPOTrainer(_Recording, GRPOTrainer):
        """GRPOTrainer that keeps the advantages TRL computed (this process's slice), for checks and tests."""

    return RecordingGRPOTrainer


def added_names() -> tuple[str, ...]:
    """The attributes ``_Recording`` adds to ``GRPOTrainer``: every one it defines or annotates but does not override
    (``trl_seam.SEAMS``)."""
    overridden = {s.method for s in trl_seam.SEAMS if s.use == "overrides"}
    names = set(vars(_Recording)) | set(_Recording.__annotations__)
    return tuple(sorted(n for n in names if not n.startswith("__") and n not in overridden))
