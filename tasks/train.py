"""Prefect tasks of the two GRPO updates of Algorithm 1: G(t-1) -> G(t) and P(t-1) -> P(t).

Each task materialises its base checkpoint, trains with ``dr_core.train.grpo`` (TRL), writes every training rollout's
rubric, verdicts and rewards/scores to the store (stage ``generator`` / ``policy``), saves the new checkpoint
beside the store (``<store>/models/...``) and registers it in the ``checkpoints`` table with its parent.

A checkpoint reference is ``{"uri", "fingerprint"}``: ``uri`` is where it lives (``default`` for the prepared default
model), ``fingerprint`` its identity (``tasks.runtime.model_id``: a bundled model's checkpoint name, else the
directory's name and a hash of its files), which is what the cache key sees. So a re-run of a finished
round does no training, and a failed training resumes from TRL's last checkpoint in the same scratch directory
(``<cache>/train/<role>/<content key>``) when Prefect retries it or the user re-runs. Once the new checkpoint is in
the store and registered, the scratch directory is deleted (it holds another copy of the model) unless the role's
``keep_resume_checkpoints`` is set.

Where the update runs is ``cfg.launch`` (``dr_core.train.settings.LaunchSettings``): by default in this process,
with the rewards' engines from the pool; with an accelerate config (N processes, M machines) as
``accelerate launch`` of ``dr_core.train.launch`` (``dr_core.train.multi.launch_train``), every rank building its
engines from the same configs. Both hand the same rollout records to the same sink, so the stored tables and the
returned checkpoint reference have the same shape.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from prefect import task

from dr_core.config import DEFAULT_MODEL, EngineConfig
from dr_core.paths import cache_dir
from dr_core.presets import CoevolveConfig
from dr_core.resources import return_freed_memory
from dr_core.runs import round_steps
from dr_core.scoring import signals
from dr_core.store import checkpoints
from dr_core.store.artifacts import Store
from dr_core.train import multi, records
from dr_core.train.grpo import train_generator as grpo_train_generator
from dr_core.train.grpo import train_policy as grpo_train_policy
from tasks.options import content_cache_key, content_key, retry_on_transient
from tasks.runtime import engine_for, keep_engines, model_id, write_ref

TRAIN_STEP = dict(
    cache_key_fn=content_cache_key,
    persist_result=True,
    retries=1,
    retry_delay_seconds=[10],
    retry_condition_fn=retry_on_transient,
    timeout_seconds=24 * 3600,
)


def default_ref(name: str = DEFAULT_MODEL) -> dict:
    """The reference of a bundled model as a training start (round 0): uri = its name, identity = its checkpoint."""
    from dr_core.model import model_identity

    return {"uri": name, "fingerprint": model_identity(name)}


def base_ref(cfg: EngineConfig) -> dict:
    """G(0) or P(0): the role's configured bundled model, else the default model (the self-contained backbone)."""
    from dr_core.model import is_bundled

    return default_ref(cfg.model if cfg.kind == "vllm" and is_bundled(cfg.model) else DEFAULT_MODEL)


def local_dir(store: Store, ref: dict) -> Path:
    """A local directory holding the checkpoint ``ref`` points at."""
    from dr_core.model import is_bundled, prepare

    if is_bundled(ref["uri"]):
        return Path(prepare(ref["uri"]))
    return checkpoints.materialise(store, ref["uri"])


def _scratch(role: str, inputs: dict) -> Path:
    """TRL's working directory for one update, named by the update's content key: the same inputs resume there after
    a crash; any other inputs (another store, config or parent) never reuse its checkpoints."""
    return cache_dir() / "train" / role / content_key(f"train-{role}", inputs, __name__)[:20]


def _update(
    cfg: CoevolveConfig,
    role: str,
    base_dir: Path,
    rows,
    scratch: Path,
    sink: records.RolloutSink,
    verifier: EngineConfig,
    generator: EngineConfig | None = None,
):
    """Train in this process with the pool's engines, or launch the ranks (``cfg.launch``), which build their own:
    this process then frees its engines for them."""
    settings = cfg.generator if role == "generator" else cfg.policy
    if not cfg.launch.in_process:
        keep_engines()
        return multi.launch_train(
            role,
            base_dir,
            rows,
            settings,
            scratch,
            cfg.launch,
            verifier=verifier,
            generator=generator,
            on_rollouts=sink,
        )
    if role == "generator":
        keep_engines(verifier)  # the rewards' verifier; the trainer needs the memory of the rest
        return grpo_train_generator(base_dir, rows, engine_for(verifier), settings, scratch, on_rollouts=sink)
    keep_engines(generator, verifier)  # the rewards' G(t) and verifier
    return grpo_train_policy(
        base_dir, rows, engine_for(generator), engine_for(verifier), settings, scratch, on_rollouts=sink
    )


def _rollouts(sink: records.RolloutSink, scratch: Path) -> records.RolloutSink:
    """Keep the rollout records beside the training output, so an update finished earlier (TRL returns its saved
    result without training) still writes its rollouts to this store."""
    path = scratch / "rollouts.jsonl"
    if sink.records:
        path.write_text("".join(json.dumps(r, default=str) + "\n" for r in sink.records), encoding="utf-8")
    elif path.exists():
        sink.records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    return sink


def _finish(
    s: Store,
    result,
    role: str,
    base: dict,
    run_id: str,
    round_no: int,
    tables: dict[str, list[dict]],
    scratch: Path | None,
    counted: str,
    signal: list[dict],
    group_size: int,
) -> dict:
    """Write the update's rollout tables, save and register the new checkpoint, drop the scratch directory (None:
    keep it), return the checkpoint's reference and metrics (``counted``: the history field of rollouts without a
    usable reward,
    summed over the run; ``signal``: the zero-std groups per GRPO step, ``dr_core.scoring.signals.zero_std_by_step``,
    kept
    as ``zero_std_by_step`` with the count of ``no_gradient_steps``; ``group_size``: G, for sql/training_signal)."""
    for table, trows in tables.items():
        if trows:
            write_ref(s, table, trows, f"{role}-train-{table}", run_id=run_id, round=round_no)
    metrics = {
        "steps": result.steps,
        "reward_first": result.reward_first,
        "reward_last": result.reward_last,
        "seconds": round(result.seconds, 1),
        "step_seconds": result.step_seconds,
        "resumed_from": result.resumed_from,
        "history": result.history,
        "rollout_stats": result.rollout_stats,
        counted: sum(h.get(counted, 0) for h in result.history),
        "rollouts": sum(h.get("rollouts", 0) for h in result.history),
        "group_size": group_size,
        "zero_std_by_step": signal,
        "no_gradient_steps": signals.no_gradient_steps(signal),
    }
    uri = checkpoints.save(s, result.checkpoint, run_id, round_no, role)
    checkpoints.register(s, run_id, round_no, role, uri, parent=base["uri"], metrics=metrics)
    local = checkpoints.materialise(s, uri)
    ref = {"uri": uri, "fingerprint": model_id(EngineConfig(model=str(local))), **metrics}
    if scratch is not None:
        shutil.rmtree(scratch, ignore_errors=True)
    return ref


@task(name="train-generator", **TRAIN_STEP)
def train_generator(
    cfg: CoevolveConfig,
    prompts: dict,
    samples: dict,
    anchors: dict,
    base: dict,
    verifier_model: str,
    store: str,
    run_id: str,
    round_no: int,
) -> dict:
    """G(t-1) -> G(t) on the current policy's sets (R_disc + lam R_anchor, Eq. 24-25)."""
    s = Store.from_url(store)
    p, c, a = (round_steps.rows_of(s.read(r["uri"])) for r in (prompts, samples, anchors))
    rows = records.generator_rows(p, c, a)
    sink = records.RolloutSink(
        base["fingerprint"], verifier_model, cfg.generator.num_generations, anchor_ranks=records.anchor_ranks(p, c, a)
    )
    scratch = _scratch(
        "generator",
        dict(cfg=cfg, prompts=prompts, samples=samples, anchors=anchors, base=base, verifier=verifier_model),
    )
    result = _update(cfg, "generator", local_dir(s, base), rows, scratch, sink, cfg.round.engines.verifier)
    return_freed_memory()  # the trainer's tensors are freed: give their pages back before the next step
    sink = _rollouts(sink, scratch)
    return _finish(
        s,
        result,
        "generator",
        base,
        run_id,
        round_no,
        sink.generator_tables(),
        None if cfg.generator.keep_resume_checkpoints else scratch,
        counted="unparseable",
        signal=sink.zero_std_by_step("advantage"),
        group_size=cfg.generator.num_generations,
    )


@task(name="train-policy", **TRAIN_STEP)
def train_policy(
    cfg: CoevolveConfig,
    prompts: dict,
    base: dict,
    generator: dict,
    verifier_model: str,
    store: str,
    run_id: str,
    round_no: int,
) -> dict:
    """P(t-1) -> P(t) with rewards from the fixed G(t) and the frozen verifier (Eq. 12 scores, Eq. 21)."""
    s = Store.from_url(store)
    gen_cfg = cfg.round.engines.generator.model_copy(update={"model": str(local_dir(s, generator))})
    rows = records.policy_rows(round_steps.rows_of(s.read(prompts["uri"])))
    sink = records.RolloutSink(
        base["fingerprint"], verifier_model, cfg.policy.num_generations, generator=generator["fingerprint"]
    )
    scratch = _scratch(
        "policy", dict(cfg=cfg, prompts=prompts, base=base, generator=generator, verifier=verifier_model)
    )
    result = _update(cfg, "policy", local_dir(s, base), rows, scratch, sink, cfg.round.engines.verifier, gen_cfg)
    return_freed_memory()
    sink = _rollouts(sink, scratch)
    return _finish(
        s,
        result,
        "policy",
        base,
        run_id,
        round_no,
        sink.policy_tables(),
        None if cfg.policy.keep_resume_checkpoints else scratch,
        counted="unscorable",
        signal=sink.zero_std_by_step("score"),
        group_size=cfg.policy.num_generations,
    )
