"""Prefect task of the in-loop policy evaluation: P(t) against P(0) on a held-out prompt slice
(``dr_core.runs.heldout``: held-out prompts and their overlap audit, answers, the pairwise judge, ``eval`` rows).
Called by flows/coevolve.py after each policy update.

Cached by content like tasks/round.py: the checkpoint refs count by their fingerprint, so re-running a finished round
does no model work. Unit-test the body with ``evaluate_policy.fn(ctx, cfg, policy_ref)``.
"""

from __future__ import annotations

from prefect import task

from dr_core.config import CoevolveConfig
from dr_core.runs import heldout
from dr_core.runs.refs import CheckpointRef, EvalRef, StepContext
from tasks import runtime
from tasks.round import MODEL_STEP


@task(name="evaluate-policy", **MODEL_STEP)
def evaluate_policy(ctx: StepContext, cfg: CoevolveConfig, policy: CheckpointRef) -> EvalRef:
    """Win rate of P(t) (checkpoint ref ``policy``) against P(0) on ``cfg.policy_eval.data``; eval rows written."""
    return heldout.evaluate_policy(ctx, cfg, policy, runtime.engines())
