"""The pre-registered protocol of infra/benchmarks/bench_ifeval.py, as data: every split, size, seed, step count,
setting, the gate's threshold and the three criteria, fixed before the benchmark's first full run and committed
before it (docs/benchmarks/learning.md, "IFEval: the protocol"). The script reads nothing else; its result records
this file's SHA-256, so a result shows which protocol produced it. ``SMOKE`` is the same protocol on tiny sizes, for
the suite: it checks that every phase runs, never what they measure.

Sizes were chosen from step costs measured on this 2-core machine before the protocol was written (a generator step
of one prompt x 8 rubric rollouts about 55 s, a policy step of 2 prompts x 8 answers about 25 s with the code's reward
and 40 s with a rubric reward, greedy answers to 150 prompts about 70 s, verification about 10 verdicts a second),
so that the whole run takes about 60 minutes: three seeds, 10 generator and 8 policy steps and criterion (b) on all
150 held-out prompts would have taken about 130, more than the session that runs it has beside the test suite. No
setting was tuned: the budget leaves no room for a sweep, and the settings are the tiny preset's except where stated.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace


@dataclass(frozen=True)
class Protocol:
    # -- models (the tiny preset's roles) ------------------------------------------------------------------------
    policy_model: str = "default"  # P(0): SmolLM2-135M-Instruct
    generator_model: str = "default"  # G(0): the same backbone
    verifier_model: str = "qwen2.5-coder-0.5b-instruct"  # frozen; plain prompt, balanced verdicts (tiny preset)
    # -- splits -----------------------------------------------------------------------------------------------------
    heldout: int = 150  # the first N of IFEval's prompts whose checkers run here (file order); never trained on
    train_limit: int | None = None  # the bundled training split (68 prompts) whole
    tune_limit: int | None = (
        None  # the bundled tuning split (22 prompts) whole: the gate's data with the training split
    )
    seeds: tuple[int, ...] = (0, 1)  # two, not three: three would not fit the session that runs it (docstring)
    agreement_heldout: int = 40  # criterion (b) on the first N held-out prompts: each costs ~130 verdicts a model
    # -- P(0)'s response sets C (the generator sees them; the held-out agreement is measured on them) --------------
    k: int = 4  # responses per prompt
    answer_tokens: int = 128  # longest answer of any policy, in training and on the held-out prompts
    c_temperature: float = 1.0
    # -- the gate ------------------------------------------------------------------------------------------------
    # every (anchor, instruction) check of the tuning and training splits' code-ranked anchors: the instruction's own
    # text (the registry's) as the criterion, the verifier's verdict against the checker's strict verdict
    gate_metric: str = "balanced_accuracy"  # mean of the yes-rate on met checks and the no-rate on unmet ones
    gate_threshold: float = 0.60  # at least this, else the generator and both rubric-rewarded arms are not run
    gate_min_checks: int = 200
    gate_enforced: bool = True  # False in the smoke run only, which must run every phase whatever the gate says
    # -- generator update G(0) -> G(S), per seed ---------------------------------------------------------------
    generator_steps: int = 8
    generator_prompts_per_step: int = 1
    rubric_rollouts: int = 8  # the GRPO group: rubrics per prompt
    rubric_tokens: int = 128
    generator_lr: float = 1e-4  # LoRA r16 (2x the tiny preset's 5e-5: 8 steps only)
    # -- policy updates P(0) -> P', per seed and arm --------------------------------------------------------------
    policy_steps: int = 6
    policy_prompts_per_step: int = 2
    policy_rollouts: int = 8  # the GRPO group: answers per prompt
    policy_lr: float = 2e-4  # LoRA r16 (the tiny preset's 1e-5 moves nothing in 6 steps)
    reward_rubric_temperature: float = 0.7
    # -- shared ------------------------------------------------------------------------------------------------------
    lora_r: int = 16
    beta: float = 0.0  # no KL term: 6-8 steps from the start model, and no reference model's forward pass to pay
    temperature: float = 1.0  # rollouts
    n_boot: int = 2000  # hierarchical bootstrap draws: seeds with replacement, then prompts within each seed
    # -- the criteria, each met when the lower end of its 95 % interval is above 0 ---------------------------------
    criteria: dict = field(
        default_factory=lambda: {
            "a": "oracle_minus_P0: the positive control (trained on the code's reward) above P(0) in held-out "
            "prompt-level strict accuracy",
            "b": "GS_minus_G0_agreement: G(S) above G(0) in held-out agreement of Eq. 12 scores with the code's "
            "counts of instructions met (Spearman per set over C and the anchors)",
            "c": "PGS_minus_PG0: P_G(S) above P_G(0) in held-out prompt-level strict accuracy",
        }
    )


PROTOCOL = Protocol()

#: Every phase on tiny sizes (the suite's smoke run; models chosen by the caller).
SMOKE = replace(
    PROTOCOL,
    heldout=3,
    agreement_heldout=2,
    train_limit=4,
    tune_limit=3,
    seeds=(0,),
    k=2,
    answer_tokens=16,
    gate_min_checks=1,
    gate_enforced=False,
    generator_steps=1,
    rubric_rollouts=2,
    rubric_tokens=24,
    policy_steps=1,
    policy_prompts_per_step=1,
    policy_rollouts=2,
    n_boot=50,
)
