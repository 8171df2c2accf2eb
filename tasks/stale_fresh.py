"""Prefect task of the stale-versus-fresh experiment: give a round's existing response sets a new stage
(``dr_core.runs.stale_fresh.restage``: the sets of P(t-1) copied under stage ``stale`` or ``fresh`` of round t)."""

from __future__ import annotations

from prefect import task

from dr_core.runs import stale_fresh
from dr_core.runs.refs import ArtifactRef, StepContext
from tasks.round import RECORD_STEP


@task(name="restage-samples", **RECORD_STEP)
def restage_samples(ctx: StepContext, source_uri: str) -> ArtifactRef:
    """Copy the samples file at ``source_uri`` to ``<stage>-samples`` of the context's run and round."""
    return stale_fresh.restage(ctx, source_uri)
