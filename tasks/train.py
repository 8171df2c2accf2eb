"""Prefect tasks of the two GRPO updates of Algorithm 1: G(t-1) -> G(t) and P(t-1) -> P(t)
(``dr_core.runs.updates``: training, rollout tables, the new checkpoint and its registration).

A checkpoint reference is ``CheckpointRef`` ``{uri, fingerprint}``: ``uri`` is where it lives (``default`` for the
prepared default model), ``fingerprint`` its identity (``tasks.runtime.model_id``), which is what the cache key sees.
So a re-run of a finished round does no training, and a failed training resumes from TRL's last checkpoint in the
same scratch directory (``<cache>/train/<role>/<store and run key>-<content key>``) when Prefect retries it or the
user re-runs. The scratch directory belongs to one store and one run id: two runs (or two stores) doing the same
update at the same time never share TRL's working files.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from prefect import task

from dr_core.config import CoevolveConfig
from dr_core.paths import cache_dir
from dr_core.runs import updates
from dr_core.runs.refs import ArtifactRef, CheckpointRef, RoundInputs, StepContext, UpdateRef
from dr_core.runs.updates import base_ref, default_ref, local_dir
from dr_core.store.artifacts import Store
from tasks import runtime
from tasks.options import content_key, retry_on_transient, run_cache_key
from tasks.runtime import read_rows

__all__ = ["base_ref", "default_ref", "local_dir", "train_generator", "train_policy"]

TRAIN_STEP = dict(
    cache_key_fn=run_cache_key,
    persist_result=True,
    retries=1,
    retry_delay_seconds=[10],
    retry_condition_fn=retry_on_transient,
    timeout_seconds=24 * 3600,
)


def _scratch(ctx: StepContext, role: str, inputs: dict) -> Path:
    """TRL's working directory for one update: ``<cache>/train/<role>/<run>-<content>``, ``<run>`` the first 12 hex of
    a SHA-256 of the store URL and the run id, ``<content>`` the first 20 of the update's content key. The same
    store, run and inputs resume there after a crash; any other inputs (another config or parent) never reuse its
    checkpoints, and another run or store doing the same update at the same time works in a directory of its own."""
    run = hashlib.sha256(json.dumps([ctx.store, ctx.run_id]).encode()).hexdigest()[:12]
    return cache_dir() / "train" / role / f"{run}-{content_key(f'train-{role}', inputs, __name__)[:20]}"


@task(name="train-generator", **TRAIN_STEP)
def train_generator(
    ctx: StepContext,
    cfg: CoevolveConfig,
    inputs: RoundInputs,
    samples: ArtifactRef,
    base: CheckpointRef,
    verifier_model: str,
) -> UpdateRef:
    """G(t-1) -> G(t) on the current policy's sets (R_disc + lam R_anchor, Eq. 24-25)."""
    s = Store.from_url(ctx.store)
    rows = (read_rows(s, inputs.prompts), read_rows(s, samples), read_rows(s, inputs.anchors))
    scratch = _scratch(
        ctx,
        "generator",
        dict(
            cfg=cfg, prompts=inputs.prompts, samples=samples, anchors=inputs.anchors, base=base, verifier=verifier_model
        ),
    )
    return updates.train_generator(ctx, cfg, rows, base, verifier_model, scratch, runtime.engines())


@task(name="train-policy", **TRAIN_STEP)
def train_policy(
    ctx: StepContext,
    cfg: CoevolveConfig,
    prompts: ArtifactRef,
    base: CheckpointRef,
    generator: CheckpointRef,
    verifier_model: str,
) -> UpdateRef:
    """P(t-1) -> P(t) with rewards from the fixed G(t) and the frozen verifier (Eq. 12 scores, Eq. 21)."""
    s = Store.from_url(ctx.store)
    scratch = _scratch(
        ctx, "policy", dict(cfg=cfg, prompts=prompts, base=base, generator=generator, verifier=verifier_model)
    )
    return updates.train_policy(
        ctx, cfg, read_rows(s, prompts), base, generator, verifier_model, scratch, runtime.engines()
    )
