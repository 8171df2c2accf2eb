"""The policy's phases of the IFEval benchmark: P(0) trained per seed on each arm's reward, from the same P(0) and
on the same training prompts, and every policy's held-out prompt-level accuracy by IFEval's own code.

Arms (``ARMS``): ``oracle``, the positive control, rewarded by the code itself (the fraction of a prompt's
instructions met: ``dr_core.ifeval.reward``); ``PGS``, rewarded by the Eq. 12 scores of the rubrics the seed's G(S)
writes (verified by the frozen verifier); ``PG0``, the same under the frozen G(0)."""

from __future__ import annotations

import shutil

from dr_core.engines import make_engine
from dr_core.ifeval import checks, metrics
from dr_core.ifeval.reward import ConstraintReward, rows_by_group
from dr_core.train.grpo import GRPOSettings, PolicyRow, train_policy, train_policy_with_reward
from infra.benchmarks.ifeval.run import Run
from infra.benchmarks.ifeval.stats import curve
from infra.benchmarks.learning.run import log

ARMS = ("oracle", "PGS", "PG0")


def policy_settings(run: Run, seed: int) -> GRPOSettings:
    p = run.p
    return run.grpo_settings(
        seed,
        p.policy_steps,
        learning_rate=p.policy_lr,
        num_generations=p.policy_rollouts,
        max_completion_length=p.answer_tokens,
        per_device_train_batch_size=p.policy_rollouts,
        gradient_accumulation_steps=p.policy_prompts_per_step,
        rubric_temperature=p.reward_rubric_temperature,
        rubric_max_tokens=p.rubric_tokens,
    )


def train_arm(run: Run, arm: str, seed: int, verifier_cfg, generator_ckpt) -> dict:
    """P(0) trained on one arm's reward with seed ``seed``: its checkpoint and curve (the mean reward per step, the
    group spread of the scores)."""
    from dr_core.config import engine_config

    out = run.work / f"policy-{arm}-{seed}"
    shutil.rmtree(out, ignore_errors=True)
    rows = [PolicyRow(i, p.row.id, p.row.prompt) for i, p in enumerate(run.train)]
    settings = policy_settings(run, seed)
    records: list[dict] = []
    log(
        f"policy {arm} seed {seed}: {run.p.policy_steps} GRPO steps, "
        f"{run.p.policy_prompts_per_step} x {run.p.policy_rollouts} answers"
    )
    if arm == "oracle":
        reward = ConstraintReward(rows_by_group([p.row for p in run.train]), settings.num_generations, records.extend)
        tr = train_policy_with_reward(run.models["policy"], rows, reward, settings, out)
    else:
        gen = make_engine(engine_config(model=str(generator_ckpt), max_model_len=4096, dtype="float32"))
        ver = make_engine(verifier_cfg)
        try:
            tr = train_policy(run.models["policy"], rows, gen, ver, settings, out, on_rollouts=records.extend)
        finally:
            gen.close()
            ver.close()
    return {"checkpoint": tr.checkpoint, "seconds": tr.seconds, "curve": curve(tr.history, records, "score")}


def accuracy(run: Run, answers: list[str]) -> dict:
    """One policy's held-out answers checked by code: per prompt, every instruction met (prompt-level strict) and
    the four lm-eval accuracies."""
    verdicts = [checks.check(p.row, a) for p, a in zip(run.held, answers)]
    return {
        "prompt_strict": [float(all(v.strict for v in vs)) for vs in verdicts],
        "accuracies": metrics.accuracies([[(v.strict, v.loose) for v in vs] for vs in verdicts], n_boot=run.p.n_boot),
        "identical_to_P0": None,
    }
