"""Typed run configuration and the shipped presets: ``tiny`` (CPU, default model, minutes) and ``paper`` (the
paper's appendix D settings, for GPU machines).

One config drives the CLI, the flows and the tests. It is frozen and validated when built; every field says what
it does. ``RoundConfig.model_dump_json()`` is what goes into cache keys and the ``runs`` table.

    python -c "from dr_core.presets import preset; print(preset('tiny').model_dump_json(indent=1))"
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from dr_core.config import EngineConfig, EnginesConfig


class RoundConfig(BaseModel):
    """One DynamicRubric round's data sizes, sampling lengths and engines."""

    model_config = ConfigDict(frozen=True, extra="forbid")

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

    @model_validator(mode="after")
    def _check(self):
        if self.n_anchor > self.min_anchor_responses:
            raise ValueError(
                f"n_anchor={self.n_anchor} exceeds min_anchor_responses={self.min_anchor_responses}: raise "
                "min_anchor_responses or lower n_anchor"
            )
        return self


_PAPER_ENGINE = EngineConfig(dtype="bfloat16", max_model_len=32768, enforce_eager=False)

PRESETS: dict[str, RoundConfig] = {
    "tiny": RoundConfig(preset="tiny"),
    "paper": RoundConfig(
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
        engines=EnginesConfig(generator=_PAPER_ENGINE, verifier=_PAPER_ENGINE, policy=_PAPER_ENGINE),
    ),
}


def preset(name: str, **overrides) -> RoundConfig:
    """A shipped preset, with field overrides validated like the preset itself."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
    return RoundConfig(**{**PRESETS[name].model_dump(), **overrides})
