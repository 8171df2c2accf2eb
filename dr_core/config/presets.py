"""Typed run configuration and the shipped presets: ``tiny`` (CPU, default model, minutes) and ``paper`` (the
paper's appendix D settings, for GPU machines).

One config drives the CLI, the flows and the tests. It is frozen and validated when built; every field says what
it does. ``RoundConfig.model_dump_json()`` is what goes into cache keys and the ``runs`` table; engine secrets
(``EngineConfig.api_key``, ``basic_auth``) show there as ``**********`` and cache keys leave them out
(dr_core/config.py). Validation errors do not echo their input (``hide_input_in_errors``): it may hold those secrets.

    python -c "from dr_core.presets import preset; print(preset('tiny').model_dump_json(indent=1))"
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from dr_core.config import EngineConfig, EnginesConfig
from dr_core.train.settings import GRPOSettings, LaunchSettings


class RoleResources(BaseModel):
    """What one shard task of a role asks the Ray cluster for (``ray.remote`` options, prefect_ray's
    ``remote_options``). Ignored without the Ray task runner."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    num_cpus: float = Field(1, ge=0, description="CPUs a shard task of this role reserves on its Ray node.")
    num_gpus: float = Field(
        0,
        ge=0,
        description="GPUs a shard task of this role reserves (its engine's "
        "tensor_parallel_size x data_parallel_size for an in-process vLLM engine; 0 for a role "
        "served by openai_http endpoints).",
    )

    def remote_options(self) -> dict[str, float]:
        return {"num_cpus": self.num_cpus, "num_gpus": self.num_gpus}


class ScaleConfig(BaseModel):
    """How a round's model steps fan out (README "From laptop to cluster"). Not part of any cache key
    (tasks/options.py): the rows are the same whatever the shards and resources (tests/test_ray_shards.py)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    shards: int = Field(
        1,
        ge=1,
        description="Shards by prompt of the model steps (sample, generate-rubrics, verify): each shard is "
        "a task of its own that writes its own Parquet part, is cached and retried on its own, and runs on the "
        "flow's task runner (Ray workers with --task-runner ray); a merge step checks every shard is there. 1: one "
        "task per step, in the flow's process (unless the task runner is Ray).",
    )
    resources: dict[Literal["generator", "verifier", "policy"], RoleResources] = Field(
        default_factory=dict, description="Ray resources of each role's shard tasks (a role left out: 1 CPU, no GPU)."
    )

    def for_role(self, role: str) -> RoleResources:
        return self.resources.get(role, RoleResources())


class RoundConfig(BaseModel):
    """One DynamicRubric round's data sizes, sampling lengths and engines."""

    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True, allow_inf_nan=False)

    preset: str = Field("custom", description="Name of the preset this config came from (for reports).")
    anchors: str = Field(
        "bundled:anchors_alpacaeval.jsonl",
        description="Ranked anchor JSONL (prompt + responses best first). 'bundled:NAME' is a file shipped in "
        "dr_core/data; anything else is a local path.",
    )
    min_anchor_responses: int = Field(7, ge=2, description="anchor_filter: an anchor list needs this many responses.")
    n_prompts: int = Field(4, ge=1, description="Prompts taken (in file order, after filtering) for this round.")
    k: int = Field(4, ge=2, description="K: responses the policy samples per prompt (the set C). Paper: 8.")
    n_anchor: int = Field(
        4, ge=2, description="Anchor responses per prompt used for R_anchor, evenly spread over the ranking."
    )
    rubric_rollouts: int = Field(1, ge=1, description="Rubric lists the generator writes per set (seeds).")
    policy_max_tokens: int = Field(128, ge=8, description="Longest policy response, tokens. Paper: 8K.")
    generator_max_tokens: int = Field(384, ge=32, description="Longest rubric list, tokens. Paper: 8K.")
    policy_temperature: float = Field(1.0, ge=0, description="Sampling temperature of the policy.")
    generator_temperature: float = Field(0.7, ge=0, description="Sampling temperature of the rubric generator.")
    eval_data: str = Field(
        "bundled:eval_hh_harmless_pairs.jsonl", description="Held-out preference data for evaluator accuracy."
    )
    eval_format: Literal["pairwise", "listwise", "ranked"] = Field("pairwise", description="Format of eval_data.")
    eval_limit: int = Field(6, ge=1, description="Examples of eval_data scored each round.")
    eval_seeds: int = Field(1, ge=1, description="AVG@N: rubric sets per eval example. Paper: 5.")
    seed: int = Field(0, description="Seed for sampling and shuffling.")
    engines: EnginesConfig = Field(default_factory=EnginesConfig, description="Engine per role.")
    scale: ScaleConfig = Field(
        default_factory=ScaleConfig,
        description="Shards and Ray resources of the model steps (no effect on the rows or the cache).",
    )

    @model_validator(mode="after")
    def _check(self):
        if self.n_anchor > self.min_anchor_responses:
            raise ValueError(
                f"n_anchor={self.n_anchor} exceeds min_anchor_responses={self.min_anchor_responses}: raise "
                "min_anchor_responses or lower n_anchor"
            )
        if self.scale.shards > self.n_prompts:
            raise ValueError(
                f"scale.shards={self.scale.shards} exceeds n_prompts={self.n_prompts}: a shard would "
                "hold no prompt; lower scale.shards"
            )
        return self


#: One 8B role on GPUs: sharded over 2 GPUs (tensor parallel; 32K context for the generator's 24K-token inputs), 2
#: replicas (data parallel): 4 GPUs a role. Adjust to your node with an engines file.
PAPER_ENGINE = dict(
    dtype="bfloat16", max_model_len=32768, enforce_eager=False, tensor_parallel_size=2, data_parallel_size=2
)

#: The tiny preset's verifier (and pairwise judge): Qwen2.5-Coder-0.5B-Instruct, plain prompt, "balanced" verdicts
#: (first-token yes-vs-no log-odds above their median over the bundled balanced probe), chosen by measurement
#: (infra/benchmarks/bench_verdicts.py, README "Choosing the verdict procedure"): on the main job's own sets it is the
#: procedure whose verdicts vary most (yes-rate 0.58-0.62, mean R_disc 0.10-0.16) with the best obvious-probe
#: accuracy but one (0.67); structured choice said no to 82-99 % of the same checks, contextual calibration yes to
#: 77-87 %. SmolLM2-135M with the original prompt says yes to every check: no score could differ. Generator and policy
#: stay SmolLM2 (they are the trained models; the verifier is frozen). A KV cache of 21k tokens (0.5 GiB at its 24 KB
#: per token in float32, 0.25 GiB in bf16: ``_kv_gib``) holds every check of a round's sets with their shared prefixes.
TINY_VERIFIER = dict(model="qwen2.5-coder-0.5b-instruct", verifier_prompt="plain", verdict_mode="balanced")

#: The tiny preset's generator and policy: SmolLM2-135M (the default model) with a KV cache of 11k tokens (0.5 GiB at
#: its 46 KB per token in float32, 0.25 GiB in bf16), ample for 4 prompts x K=4 and the rubric prompts; the default
#: 2 GiB only costs memory.
TINY_TRAINED: dict = {}

#: KV cache of the tiny preset's engines in float32, GiB; a 2-byte dtype holds the same tokens in half the bytes.
TINY_KV_GIB_FLOAT32 = 0.5


def _kv_gib(engine: dict) -> dict:
    """The engine's fields with the tiny preset's KV cache for its resolved dtype (the same tokens in every dtype)."""
    dtype = EngineConfig(**engine).dtype
    return {**engine, "kv_cache_gib": TINY_KV_GIB_FLOAT32 / (1 if dtype == "float32" else 2)}


#: The shipped round presets' names (``preset``).
PRESET_NAMES = ("tiny", "paper")


def _round_preset(name: str) -> RoundConfig:
    """A preset, built now: the engines' ``dtype: auto`` is resolved for this machine when it is built
    (dr_core/numerics.py), so a preset is data, not a config fixed at import."""
    if name == "tiny":
        trained = EngineConfig(**_kv_gib(TINY_TRAINED))
        return RoundConfig(
            preset="tiny",
            n_anchor=3,
            eval_limit=4,
            engines=EnginesConfig(generator=trained, verifier=EngineConfig(**_kv_gib(TINY_VERIFIER)), policy=trained),
        )
    if name == "paper":
        engine = EngineConfig(**PAPER_ENGINE)
        return RoundConfig(
            preset="paper",
            min_anchor_responses=7,
            n_prompts=256,
            k=8,
            n_anchor=7,
            rubric_rollouts=8,
            policy_max_tokens=8192,
            generator_max_tokens=8192,
            eval_limit=500,
            eval_seeds=5,
            engines=EnginesConfig(generator=engine, verifier=engine, policy=engine),
            # 8 shards of 32 prompts; a shard task holds one role's engine: 4 GPUs (tensor 2 x data 2)
            scale=ScaleConfig(
                shards=8,
                resources={r: RoleResources(num_cpus=8, num_gpus=4) for r in ("generator", "verifier", "policy")},
            ),
        )
    raise ValueError(f"unknown preset {name!r}; choose one of {', '.join(PRESET_NAMES)}")


def preset(name: str, **overrides) -> RoundConfig:
    """A shipped preset, with field overrides validated like the preset itself."""
    base = _round_preset(name).model_dump()
    if isinstance(overrides.get("scale"), dict):  # --set scale.shards=N keeps the preset's resources
        overrides = {**overrides, "scale": {**base["scale"], **overrides["scale"]}}
    return RoundConfig(**{**base, **overrides})


class PolicyEvalConfig(BaseModel):
    """In-loop policy evaluation (tasks/policy_eval.py): after each policy update, P(t) against P(0) on a held-out
    prompt slice, judged pairwise in both orders; the win rate goes to the ``eval`` table."""

    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True, allow_inf_nan=False)

    data: str = Field(
        "bundled:policy_eval_arenahard.jsonl",
        description="Held-out prompts ({'id','prompt'} JSONL; 'bundled:NAME' or a path). They must never appear "
        "in training prompts or anchors: sql/heldout_overlap.sql checks it before every evaluation.",
    )
    limit: int = Field(4, ge=1, description="Prompts of `data` evaluated per round (first N).")
    max_tokens: int = Field(128, ge=8, description="Longest answer of P(t) and P(0), tokens (greedy).")
    judge: EngineConfig | None = Field(
        None, description="The pairwise judge's engine; None: the round's verifier engine (no extra model loaded)."
    )
    judge_procedure: Literal["logodds", "choice"] = Field(
        "logodds",
        description="How the judge decides (dr_core/evaluator/judge.py): 'logodds', the A-vs-B first-token "
        "log-odds in both orders averaged so that the order cancels (an in-process judge then runs in float32); "
        "'choice', structured A/B in both orders.",
    )
    tie_threshold: float = Field(
        0.01, ge=0, description="'logodds': |d| (nats) at or below which P(t) and P(0) tie on a prompt."
    )


class CoevolveConfig(BaseModel):
    """Algorithm 1: ``rounds`` rounds of generator update, policy update and measurement."""

    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True, allow_inf_nan=False)

    preset: str = Field("custom", description="Name of the preset this config came from.")
    round: RoundConfig = Field(default_factory=RoundConfig, description="Data sizes, lengths, engines (per round).")
    generator: GRPOSettings = Field(description="GRPO settings of the generator update G(t-1) -> G(t).")
    policy: GRPOSettings = Field(description="GRPO settings of the policy update P(t-1) -> P(t).")
    launch: LaunchSettings = Field(
        default_factory=LaunchSettings,
        description="Where both updates train: in this process (default), or `accelerate launch` on N processes "
        "of one machine or M machines (dr_core/train/settings.py LaunchSettings, dr_core/train/multi.py).",
    )
    rounds: int = Field(1, ge=1, description="T: co-evolution rounds.")
    measure_start: bool = Field(True, description="Also measure P(0) with G(0) as round 0 (the 'before' numbers).")
    policy_eval: PolicyEvalConfig | None = Field(
        default_factory=PolicyEvalConfig,
        description="Win rate of P(t) against P(0) on held-out prompts after each policy update; None: skip.",
    )

    @model_validator(mode="after")
    def _check(self):
        if self.policy.num_generations != self.round.k:
            raise ValueError(
                f"policy.num_generations ({self.policy.num_generations}) must equal round.k ({self.round.k}): the "
                "policy's GRPO group is the response set C of Eq. 12"
            )
        return self


def _coevolve_presets() -> dict[str, CoevolveConfig]:
    tiny = _round_preset("tiny")
    paper = _round_preset("paper")
    return {
        "tiny": CoevolveConfig(
            preset="tiny",
            round=tiny,
            # one step over two sets (2 groups of 4 rubric rollouts): a set on which the verifier answers every
            # check alike gives its group no gradient, and one group per step made such a step a no-op (measured)
            # rollouts on an in-process vLLM engine (dr_core/train/rollouts.py), not transformers' generate
            # micro-batches of 2 rollouts (4 accumulation steps, one generation of all 8): the same update as one
            # batch of 8 (the loss is normalised over the whole generation), a quarter of the activation memory
            # LoRA (rank 16, alpha 32, every linear layer) at 10x the full update's learning rate: measured faster
            # and smaller on both updates (infra/benchmarks/bench_grpo_step.py; README "Performance"). Why 10x: the
            # adapter's B starts at 0 and the update W + (alpha/r) B A moves W through a rank-16 product, so a step
            # at the same rate moves the model far less than a full update; across model sizes and tasks the best
            # LoRA rate was about 10x the best full fine-tuning rate (Schulman et al. 2025, "LoRA Without Regret",
            # Thinking Machines: also that in RL even low ranks match full fine-tuning).
            generator=GRPOSettings(
                learning_rate=5e-5,
                num_generations=4,
                max_completion_length=128,
                per_device_train_batch_size=2,
                gradient_accumulation_steps=4,
                max_steps=1,
                save_steps=1,
                temperature=1.0,
                rollouts="vllm",
                use_lora=True,
            ),
            # two groups (prompts) per step: one group whose K scores tie does not stop the step's gradient
            policy=GRPOSettings(
                learning_rate=1e-5,
                num_generations=tiny.k,
                max_completion_length=64,
                per_device_train_batch_size=2 * tiny.k,
                max_steps=2,
                save_steps=1,
                rubric_max_tokens=tiny.generator_max_tokens,
                rollouts="vllm",
                use_lora=True,
            ),
        ),
        "paper": CoevolveConfig(
            preset="paper",
            round=paper,
            generator=GRPOSettings(
                learning_rate=5e-6,
                num_generations=8,
                max_completion_length=8192,
                per_device_train_batch_size=8,
                gradient_accumulation_steps=32,
                max_steps=100,
                save_steps=10,
                bf16=True,
                gradient_checkpointing=True,
                rubric_format="json",
            ),
            policy=GRPOSettings(
                learning_rate=1e-6,
                num_generations=8,
                max_completion_length=8192,
                per_device_train_batch_size=8,
                gradient_accumulation_steps=32,
                max_steps=100,
                save_steps=10,
                bf16=True,
                gradient_checkpointing=True,
                rubric_max_tokens=8192,
            ),
        ),
    }


def coevolve_preset(name: str, **overrides) -> CoevolveConfig:
    """A shipped co-evolution preset; ``overrides`` are fields of CoevolveConfig (``round`` overrides take a dict
    of RoundConfig fields merged into the preset's)."""
    presets = _coevolve_presets()
    if name not in presets:
        raise ValueError(f"unknown preset {name!r}; choose one of {', '.join(presets)}")
    base = presets[name].model_dump()
    k = (overrides.get("round") or {}).get("k") if isinstance(overrides.get("round"), dict) else None
    if k is not None and "num_generations" not in (overrides.get("policy") or {}):
        # the policy's GRPO group is the set C: follow round.k unless the caller set it, keeping the preset's
        # number of groups per micro-step
        groups = base["policy"]["per_device_train_batch_size"] // base["policy"]["num_generations"]
        pol = dict(overrides.get("policy") or {})
        pol.setdefault("num_generations", k)
        pol.setdefault("per_device_train_batch_size", groups * k)
        overrides["policy"] = pol
    rnd = overrides.get("round")
    if isinstance(rnd, dict) and isinstance(rnd.get("scale"), dict):  # round.scale.shards keeps the resources
        overrides["round"] = {**rnd, "scale": {**base["round"]["scale"], **rnd["scale"]}}
    for key in ("round", "generator", "policy", "policy_eval"):
        if isinstance(overrides.get(key), dict):
            overrides[key] = {**(base[key] or {}), **overrides[key]}
    return CoevolveConfig(**{**base, **overrides})
