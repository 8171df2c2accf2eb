"""Typed run configuration: a round (``RoundConfig``: data sizes, sampling lengths, engines, scale), the in-loop
policy evaluation (``PolicyEvalConfig``) and Algorithm 1 (``CoevolveConfig``: the round, both GRPO updates, where
they train). The shipped presets are data (dr_core/config/presets.yaml, read by dr_core/config/presets.py).

One config drives the CLI, the flows and the tests. It is frozen and validated when built; every field says what
it does. ``RoundConfig.model_dump_json()`` is what goes into cache keys and the ``runs`` table; engine secrets
(``EngineConfig.api_key``, ``basic_auth``) show there as ``**********`` and cache keys leave them out
(dr_core/config/engines.py). Validation errors do not echo their input (``hide_input_in_errors``): it may hold those
secrets.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from dr_core.config.engines import EngineConfig, EnginesConfig
from dr_core.config.monitors import MonitorSettings
from dr_core.config.training import GRPOSettings, LaunchSettings


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
    """How a round's model steps fan out (docs/how-to/laptop-to-cluster.md, "Ray: the model steps as shards"). Not
    part of any cache key (tasks/options.py): the rows are the same whatever the shards and resources
    (tests/integration/test_shards.py, tests/integration/test_ray_round.py)."""

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
        "of one machine or M machines (dr_core/config/training.py LaunchSettings, dr_core/train/multi.py).",
    )
    rounds: int = Field(1, ge=1, description="T: co-evolution rounds.")
    measure_start: bool = Field(True, description="Also measure P(0) with G(0) as round 0 (the 'before' numbers).")
    policy_eval: PolicyEvalConfig | None = Field(
        default_factory=PolicyEvalConfig,
        description="Win rate of P(t) against P(0) on held-out prompts after each policy update; None: skip.",
    )
    monitors: MonitorSettings = Field(
        default_factory=MonitorSettings,
        description="Reward-hacking monitors' thresholds (dr_core/config/monitors.py); read after the run, so they "
        "are in no step's cache key.",
    )

    @model_validator(mode="after")
    def _check(self):
        if self.policy.num_generations != self.round.k:
            raise ValueError(
                f"policy.num_generations ({self.policy.num_generations}) must equal round.k ({self.round.k}): the "
                "policy's GRPO group is the response set C of Eq. 12"
            )
        return self
