"""The reward-hacking monitors' thresholds (``dr_core.report.monitors``), each default with its reason.

A rubric reward is where hacking shows first: answers that grow longer, groups whose rewards stop differing, rubric
items that every answer passes, a policy that runs away from its reference, and a training reward that rises while
the held-out figures do not. Each monitor is a warning, never a stop: it says what it saw in one line.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class MonitorSettings(BaseModel):
    """Thresholds of the five monitors; a run's summary, ``dr report`` and the tracker read the same ones."""

    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True, allow_inf_nan=False)

    length_ratio: float = Field(
        1.5,
        gt=1,
        description="Length drift: warn when the measured sets' mean response length reaches this multiple of "
        "P(0)'s. Why 1.5: sampling noise at the tiny preset's sizes moves the mean by well under 20 %, and length "
        "is the best-documented way a judged reward is gamed (longer answers pass more yes/no items).",
    )
    zero_spread_share: float = Field(
        0.5,
        gt=0,
        le=1,
        description="Spread collapse: warn when, in the policy update of the latest round, at least this share of "
        "GRPO groups has rewards that do not vary (no gradient from them). Why 0.5: the signal check's own bar "
        "(dr_core.scoring.signals.MOSTLY_ZERO_STD); past it most of each step's batch teaches nothing.",
    )
    zero_spread_rise: float = Field(
        0.25,
        gt=0,
        le=1,
        description="Spread collapse: also warn when that share rose by at least this much from the first policy "
        "update to the latest. Why 0.25: a rise of a quarter of the groups is a trend, not one batch's draw.",
    )
    saturation_share: float = Field(
        0.5,
        gt=0,
        le=1,
        description="Rubric saturation: warn when at least this share of the latest round's judged rubric items is "
        "passed by every response of its set (sql/saturation, all yes). Why 0.5: such an item adds the same to "
        "every score (no R_disc, Eq. 13); when most items do, the rubric no longer ranks the policy's answers.",
    )
    kl_max: float = Field(
        0.1,
        gt=0,
        description="KL growth: warn when an update's per-token KL to its reference (TRL's 'kl', beta > 0) "
        "exceeds this many nats. Why 0.1: GRPO runs at the paper's beta = 0.01 typically stay within a few "
        "hundredths; beyond a tenth the policy has moved far while the penalty costs it little.",
    )
    kl_growth: float = Field(
        3.0,
        gt=1,
        description="KL growth: also warn when the KL of the latest update's last step is this multiple of its "
        "first step's (and above 0.01 nats). Why 3: KL that keeps accelerating within one update is the drift the "
        "peers' monitors flag (OpenRLHF #1263), earlier than any absolute bar.",
    )
    reward_rise: float = Field(
        0.05,
        gt=0,
        description="Reward without learning: warn when the policy's mean training reward (Eq. 12 score, 0-1 for "
        "weights 1) rose by at least this much from the first policy update to the latest while neither the "
        "held-out evaluator accuracy nor the win rate against P(0) rose. Why 0.05: a twentieth of the score's range "
        "is a rise worth a look at any size; at the tiny preset's 24 rollouts an update the batch's draw of prompts "
        "and rubrics alone can move the mean this much, so on tiny runs read it as a prompt to look, not a finding "
        "(a two-round tiny run warned at +0.11 with flat held-out figures).",
    )
