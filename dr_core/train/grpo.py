"""GRPO training glue (TRL 1.16 ``GRPOTrainer``): the generator update G(t-1) -> G(t) and the policy update
P(t-1) -> P(t) of Algorithm 1, with the rewards of section 3.4 and the advantage combination of appendix D.
``train_generator`` / ``train_policy`` check the rows, build the TRL dataset and the reward function, and run one
update; the pieces have their own modules:

- ``dr_core.train.rows``: the inputs (``GeneratorRow``, ``PolicyRow``) and the ``OnRollouts`` callback;
- ``dr_core.train.rewards``: the reward functions (R_disc, R_anchor and the Eq. 24-25 advantage; the Eq. 12 policy
  score), whole-group checks, unscorable rollouts, and the shapes of the rollout records;
- ``dr_core.train.trainer``: the model and LoRA, the ``GRPOConfig`` (on CPU and on several processes), the callbacks
  and the trainer subclass;
- ``dr_core.train.rollouts``: rollouts on an in-process vLLM engine (``GRPOSettings.rollouts = "vllm"``);
- ``dr_core.train.resume``: checkpoints, resume, and the reward history and rollout records kept on disk;
- ``dr_core.train.publish``: the final model, its ``result.json`` and ``TrainResult``.

Generator update (``train_generator``), one dataset row per ``GeneratorRow`` (prompt x, the current policy's
response set C, the ranked anchor list, best first). The row's prompt is ``prompts.dynamic_generator_messages`` with
C shown in the seeded order ``evaluator.shuffled_order(K, settings.seed, group_id)``; each of the
``num_generations`` (G) rollouts is a rubric written from (x, C). By default (``rubric_format="lines"``) rollouts
write one ``[w] criterion`` per line and start from the primer ``prompts.LINES_ROLLOUT_PREFIX``, which is part of
the rollout's text for parsing: unconstrained, SmolLM2-135M wrote no parseable JSON rubric at temperature 1.0, while
primed lines parsed 16 of 16 (it copies the prompt's example criteria often: that is a weak model's behaviour and
exactly what R_disc penalises, since copied generic criteria rarely split the set). The reward function returns the
Eq. 24-25 advantage itself, so the trainer runs with ``scale_rewards="none"``.

Policy update (``train_policy``), one row per ``PolicyRow``; ``num_generations`` = K rollouts per prompt, each
rewarded with its Eq. 12 score under the rubric the FIXED generator G(t) writes for its group of K. Advantages are
TRL's default Eq. 21 (``scale_rewards="group"``).

Every dataset row carries its ``group_id`` (TRL passes no group id; it hands extra columns to the reward function),
so each reward call can check that it got whole groups.

Checkpoints and resume: a call with the same ``out_dir`` resumes from the newest checkpoint
(``dr_core.train.resume``), and a call that finds a complete ``out_dir/final`` returns its saved result without
training again (``dr_core.train.publish``); either way ``on_rollouts`` sees each rollout of the whole run exactly
once per call. Multi-GPU: ``accelerate launch --config_file infra/accelerate/zero2.yaml -m dr_core.train.launch ...``
(``dr_core.train.multi`` builds and runs that command).

    python -c "from dr_core.config.training import GRPOSettings; print(GRPOSettings())"
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Sequence

from dr_core import faults
from dr_core.config.training import GRPOSettings
from dr_core.engines.base import Engine
from dr_core.evaluator.generate import shuffled_order
from dr_core.resources import return_freed_memory
from dr_core.rubric import prompts
from dr_core.train.publish import (
    FINAL_DIR,
    RESULT_FILE,
    TrainResult,
    is_complete,
    publish,
    result_dict,
    save_model,
    saved_result,
)
from dr_core.train.resume import (
    CHECKPOINTS_DIR,
    HISTORY_FILE,
    RECORDS_FILE,
    last_checkpoint,
    replay_records,
    resume_run,
)
from dr_core.train.rewards import (
    GeneratorReward,
    GroupSplitError,
    PolicyReward,
    anchor_all_tie,
    anchor_minimum,
    check_whole_groups,
    group_floor_rewards,
    parse_rollout,
    rollout_prefix,
)
from dr_core.train.rows import GeneratorRow, OnRollouts, PolicyRow
from dr_core.train.trainer import (
    build_trainer,
    cpu_deepspeed_without_gpu,
    grpo_config,
    load_model,
    load_tokenizer,
)

__all__ = [
    "CHECKPOINTS_DIR",
    "FINAL_DIR",
    "HISTORY_FILE",
    "RECORDS_FILE",
    "RESULT_FILE",
    "GeneratorReward",
    "GeneratorRow",
    "GroupSplitError",
    "GRPOSettings",
    "OnRollouts",
    "PolicyReward",
    "PolicyRow",
    "TrainResult",
    "anchor_all_tie",
    "anchor_minimum",
    "check_whole_groups",
    "generator_dataset",
    "group_floor_rewards",
    "is_complete",
    "last_checkpoint",
    "parse_rollout",
    "result_dict",
    "rollout_prefix",
    "train_generator",
    "train_policy",
    "train_policy_with_reward",
]


def _check_ids(rows) -> None:
    ids = [r.group_id for r in rows]
    if not rows:
        raise ValueError("no training rows")
    if len(set(ids)) != len(ids):
        raise ValueError("group_id must be unique within one training call")


def generator_dataset(rows: Sequence[GeneratorRow], settings: GRPOSettings, tokenizer=None) -> list[dict]:
    """TRL dataset rows: the generator prompt (C in the seeded shuffled order) and the group id. 'json' rollouts get
    the conversational prompt; 'lines' rollouts a rendered text prompt (the chat template's generation prompt plus
    the primer), because TRL's GRPO always opens a fresh assistant turn for conversational prompts."""
    out = []
    for row in rows:
        order = shuffled_order(len(row.candidates), settings.seed, row.group_id)
        messages = prompts.dynamic_generator_messages(
            row.prompt, [row.candidates[k] for k in order], answer=settings.rubric_format
        )
        if settings.rubric_format == "lines":
            text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
            out.append({"prompt": text + rollout_prefix(settings), "group_id": row.group_id})
        else:
            out.append({"prompt": messages, "group_id": row.group_id})
    return out


def train_generator(
    base_checkpoint: str | Path,
    rows: list[GeneratorRow],
    verifier: Engine,
    settings: GRPOSettings,
    out_dir: str | Path,
    on_rollouts: OnRollouts | None = None,
) -> TrainResult:
    """G(t-1) -> G(t): GRPO on rubric rollouts with the Eq. 24-25 advantage of R_disc and lam * R_anchor.

    base_checkpoint: G(t-1) (a Hugging Face directory). rows: the sets to write rubrics for (each with >= 2 anchors).
    verifier: the frozen DR-Verifier. Returns the TrainResult; the model is in ``out_dir/final``.
    """
    _check_ids(rows)
    for r in rows:
        if not r.candidates:
            raise ValueError(f"group {r.group_id}: no candidate responses")
        if len(r.anchors) < 2:
            raise ValueError(f"group {r.group_id}: the anchor list needs at least 2 ranked responses")
    reward = GeneratorReward(rows, verifier, settings, on_rollouts)
    tokenizer = None
    if settings.rubric_format == "lines":
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(base_checkpoint))
    return _train(base_checkpoint, generator_dataset(rows, settings, tokenizer), reward, settings, out_dir, "none")


def train_policy(
    base_checkpoint: str | Path,
    rows: list[PolicyRow],
    generator: Engine,
    verifier: Engine,
    settings: GRPOSettings,
    out_dir: str | Path,
    on_rollouts: OnRollouts | None = None,
) -> TrainResult:
    """P(t-1) -> P(t): GRPO (Eq. 21 advantages) with each rollout's Eq. 12 score under the rubric the fixed G(t)
    writes for its group of K. Returns the TrainResult; the model is in ``out_dir/final``."""
    _check_ids(rows)
    reward = PolicyReward(rows, generator, verifier, settings, on_rollouts)
    return train_policy_with_reward(base_checkpoint, rows, reward, settings, out_dir)


def train_policy_with_reward(
    base_checkpoint: str | Path, rows: list[PolicyRow], reward, settings: GRPOSettings, out_dir: str | Path
) -> TrainResult:
    """P -> P' (Eq. 21 advantages) with any TRL reward function over whole groups of ``num_generations`` completions
    of one row (it gets each completion's ``group_id``); the positive control of infra/benchmarks/bench_ifeval.py
    trains on the code-checked reward (``dr_core.ifeval.reward``) this way. The reward keeps its own records and
    ``history``; the model is in ``out_dir/final``."""
    _check_ids(rows)
    dataset = [{"prompt": prompts.policy_messages(r.prompt), "group_id": r.group_id} for r in rows]
    return _train(base_checkpoint, dataset, reward, settings, out_dir, "group")


def _train(
    base_checkpoint: str | Path,
    dataset_rows: list[dict],
    reward,
    settings: GRPOSettings,
    out_dir: str | Path,
    scale_rewards: str,
) -> TrainResult:
    """One update: the saved result of a finished ``out_dir``; otherwise resume (or start), train, and publish."""
    start = time.perf_counter()
    out_dir = Path(out_dir)
    final = out_dir / FINAL_DIR
    if is_complete(final):
        replay_records(reward, out_dir, None)
        return saved_result(final)

    cpu_deepspeed_without_gpu()
    checkpoint, resumed_step = resume_run(reward, out_dir)
    tokenizer = load_tokenizer(base_checkpoint)
    if hasattr(reward, "eos_token_id"):
        reward.eos_token_id = tokenizer.eos_token_id
    model, peft_config = load_model(base_checkpoint, settings)
    args = grpo_config(settings, out_dir / CHECKPOINTS_DIR, scale_rewards)
    rollouts = _rollout_func(base_checkpoint, dataset_rows, tokenizer, settings)
    try:
        trainer = build_trainer(model, reward, args, dataset_rows, tokenizer, peft_config, settings, rollouts)
        train_start = time.perf_counter()
        if checkpoint is not None and 0 < settings.max_steps <= resumed_step and settings.deepspeed is None:
            # killed after the last step's checkpoint, before the final model: that checkpoint is the trained model.
            # train() would still start one more step from it (rollouts and rewards past max_steps, and an update
            # whenever its groups have a reward spread), so load it instead of training
            _load_finished_checkpoint(trainer, checkpoint)
        else:
            trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
        train_seconds = time.perf_counter() - train_start
        faults.fault_point("grpo-final")  # DR_FAULT hook: after the last checkpoint, before the final model
    finally:
        if rollouts is not None:
            rollouts.close()  # free the engine (its model and KV cache) before the save
            return_freed_memory()  # and give its pages back: the save's copies come on top of what is resident
    steps = int(trainer.state.global_step)

    save_model(trainer, settings, base_checkpoint, out_dir)
    history = list(reward.history)
    result = TrainResult(
        checkpoint=str(final),
        steps=steps,
        history=history,
        reward_first=history[0]["reward_mean"] if history else None,
        reward_last=history[-1]["reward_mean"] if history else None,
        seconds=time.perf_counter() - start,
        resumed_from=str(checkpoint) if checkpoint else None,
        step_seconds=train_seconds / max(1, steps - resumed_step),
        trl_advantages=list(trainer.dr_advantages),
        rollout_stats=_rollout_stats(rollouts),
        trl_log=[dict(e) for e in trainer.state.log_history],
    )
    publish(trainer, tokenizer, result, settings, out_dir)
    return result


def _load_finished_checkpoint(trainer, checkpoint: Path) -> None:
    """The trainer as ``train()`` would have left it at ``checkpoint``: its weights (a LoRA adapter or the whole
    model) and its state (global step, log history)."""
    from transformers.trainer_callback import TrainerState

    trainer._load_from_checkpoint(str(checkpoint))
    trainer.state = TrainerState.load_from_json(str(checkpoint / "trainer_state.json"))


def _rollout_func(base_checkpoint: str | Path, dataset_rows: list[dict], tokenizer, settings: GRPOSettings):
    """TRL's ``rollout_func``: an in-process vLLM engine with ``rollouts="vllm"`` (one process only), else None
    (TRL generates with transformers)."""
    if settings.rollouts != "vllm":
        return None
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise ValueError("rollouts='vllm' runs one in-process engine: start one process (or use rollouts='trl')")
    from dr_core.train.rollouts import vllm_rollouts

    return vllm_rollouts(str(base_checkpoint), [r["prompt"] for r in dataset_rows], tokenizer, settings)


def _rollout_stats(rollouts) -> dict | None:
    """The vLLM rollouts' weight syncs and seconds, for ``TrainResult.rollout_stats``."""
    if rollouts is None:
        return None
    return {
        "engine": "vllm",
        "weight_syncs": rollouts.syncs,
        "sync_seconds": round(rollouts.sync_seconds, 2),
        "generate_seconds": round(rollouts.generate_seconds, 2),
    }
