"""The two GRPO updates of Algorithm 1 as pipeline steps: G(t-1) -> G(t) and P(t-1) -> P(t) (tasks/train.py wraps
each in a cached, retried Prefect task).

Each materialises its base checkpoint, trains with ``dr_core.train.grpo`` (TRL), writes every training rollout's
rubric, verdicts and rewards/scores to the store (stage ``generator`` / ``policy``), saves the new checkpoint
beside the store (``<store>/models/...``), registers it in the ``checkpoints`` table with its parent, and returns
an ``UpdateRef``: the checkpoint's ``{uri, fingerprint}`` (``dr_core.engines.identity.model_id``: what a cache key
sees) and what the update measured.

``scratch`` is TRL's working directory for the update (the task names it by the update's content key): a failed
update resumes from TRL's last checkpoint there when it is run again with the same inputs. Once the new checkpoint
is in the store and registered, the scratch directory is deleted (it holds another copy of the model) unless the
role's ``keep_resume_checkpoints`` is set.

Where the update runs is ``cfg.launch`` (``dr_core.config.training.LaunchSettings``): by default in this process,
with the rewards' engines from the pool the caller gives (the task's: ``tasks.runtime.engines()``); with an
accelerate config (N processes, M machines) as ``accelerate launch`` of ``dr_core.train.launch``
(``dr_core.train.multi.launch_train``), every rank building its engines from the same configs. Both hand the same
rollout records to the same sink, so the stored tables and the returned reference have the same shape.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from dr_core.config import DEFAULT_MODEL, CoevolveConfig, EngineConfig
from dr_core.engines.identity import dir_identity, model_id
from dr_core.engines.pool import EnginePool
from dr_core.resources import return_freed_memory
from dr_core.runs.refs import CheckpointRef, StepContext, UpdateRef, write_ref
from dr_core.scoring import signals
from dr_core.store import checkpoints
from dr_core.store.artifacts import Store
from dr_core.train import multi, records
from dr_core.train.grpo import train_generator as grpo_train_generator
from dr_core.train.grpo import train_policy as grpo_train_policy

Rows = list[dict]


def default_ref(name: str = DEFAULT_MODEL) -> CheckpointRef:
    """The reference of a bundled model as a training start (round 0): uri = its name, identity = its checkpoint."""
    from dr_core.model import model_identity

    return CheckpointRef(uri=name, fingerprint=model_identity(name))


def base_ref(cfg: EngineConfig) -> CheckpointRef:
    """G(0) or P(0): the role's configured bundled model, else the default model (the self-contained backbone)."""
    from dr_core.model import is_bundled

    return default_ref(cfg.model if cfg.kind == "vllm" and is_bundled(cfg.model) else DEFAULT_MODEL)


def start_ref(path: str | Path) -> CheckpointRef:
    """G(0) or P(0) from a local Hugging Face checkpoint directory (``dr coevolve --generator-start/--policy-start``):
    uri = the resolved directory, identity = a hash of its files (so the cache keys see its content, not where it
    is). Raises ValueError naming the path when it is not a checkpoint directory."""
    p = Path(path).expanduser().resolve()
    if not (p / "config.json").is_file():
        raise ValueError(f"{path}: not a Hugging Face checkpoint directory (no config.json)")
    return CheckpointRef(uri=str(p), fingerprint=dir_identity(p))


def local_dir(store: Store, ref: CheckpointRef) -> Path:
    """A local directory holding the checkpoint ``ref`` points at."""
    from dr_core.model import is_bundled, prepare

    if is_bundled(ref.uri):
        return Path(prepare(ref.uri))
    return checkpoints.materialise(store, ref.uri)


def train_generator(
    ctx: StepContext,
    cfg: CoevolveConfig,
    rows: tuple[Rows, Rows, Rows],
    base: CheckpointRef,
    verifier_model: str,
    scratch: Path,
    engines: EnginePool,
) -> UpdateRef:
    """G(t-1) -> G(t) on the current policy's sets (``rows``: prompts, samples, anchors; R_disc + lam R_anchor,
    Eq. 24-25); the rewards' verifier from ``engines``."""
    s = Store.from_url(ctx.store)
    p, c, a = rows
    sink = records.RolloutSink(
        base.fingerprint, verifier_model, cfg.generator.num_generations, anchor_ranks=records.anchor_ranks(p, c, a)
    )
    train_rows = records.generator_rows(p, c, a)
    return _train_and_publish(s, ctx, cfg, "generator", base, train_rows, scratch, sink, engines)


def train_policy(
    ctx: StepContext,
    cfg: CoevolveConfig,
    prompt_rows: Rows,
    base: CheckpointRef,
    generator: CheckpointRef,
    verifier_model: str,
    scratch: Path,
    engines: EnginePool,
) -> UpdateRef:
    """P(t-1) -> P(t) with rewards from the fixed G(t) and the frozen verifier (Eq. 12 scores, Eq. 21), both from
    ``engines``."""
    s = Store.from_url(ctx.store)
    gen_cfg = cfg.round.engines.generator.model_copy(update={"model": str(local_dir(s, generator))})
    sink = records.RolloutSink(
        base.fingerprint, verifier_model, cfg.policy.num_generations, generator=generator.fingerprint
    )
    train_rows = records.policy_rows(prompt_rows)
    # G(t) is asked for the reward's rubrics in the format it was trained in
    cfg = cfg.model_copy(
        update={"policy": cfg.policy.model_copy(update={"rubric_format": cfg.generator.rubric_format})}
    )
    return _train_and_publish(s, ctx, cfg, "policy", base, train_rows, scratch, sink, engines, gen_cfg)


#: Per role: the history field of rollouts without a usable reward, the record field whose zero spread in a group is
#: no gradient, and the sink's method that gives the role's rollout tables.
_ROLE_FIELDS = {
    "generator": ("unparseable", "advantage", records.RolloutSink.generator_tables),
    "policy": ("unscorable", "score", records.RolloutSink.policy_tables),
}


def _train_and_publish(
    s: Store,
    ctx: StepContext,
    cfg: CoevolveConfig,
    role: str,
    base: CheckpointRef,
    train_rows,
    scratch: Path,
    sink: records.RolloutSink,
    engines: EnginePool,
    generator: EngineConfig | None = None,
) -> UpdateRef:
    """The update of ``role`` from ``base``: train, keep its rollouts, write its rollout tables (stage ``role``),
    save and register the new checkpoint."""
    settings = cfg.generator if role == "generator" else cfg.policy
    verifier = cfg.round.engines.verifier
    result = _update(cfg, role, local_dir(s, base), train_rows, scratch, sink, engines, verifier, generator)
    return_freed_memory()  # the trainer's tensors are freed: give their pages back before the next step
    sink = _rollouts(sink, scratch)
    counted, spread_field, tables = _ROLE_FIELDS[role]
    metrics = _metrics(result, counted, sink.zero_std_by_step(spread_field), settings.num_generations)
    _write_tables(s, ctx, role, tables(sink))
    return _publish(s, ctx, role, result, base, metrics, _drop(settings, scratch))


def _update(
    cfg: CoevolveConfig,
    role: str,
    base_dir: Path,
    rows,
    scratch: Path,
    sink: records.RolloutSink,
    engines: EnginePool,
    verifier: EngineConfig,
    generator: EngineConfig | None = None,
):
    """Train in this process with the rewards' engines from ``engines``, or launch the ranks (``cfg.launch``), which
    build their own: this process then frees its engines for them."""
    settings = cfg.generator if role == "generator" else cfg.policy
    if not cfg.launch.in_process:
        engines.keep()
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
        engines.keep(verifier)  # the rewards' verifier; the trainer needs the memory of the rest
        return grpo_train_generator(base_dir, rows, engines.get(verifier), settings, scratch, on_rollouts=sink)
    engines.keep(generator, verifier)  # the rewards' G(t) and verifier
    return grpo_train_policy(
        base_dir, rows, engines.get(generator), engines.get(verifier), settings, scratch, on_rollouts=sink
    )


def _rollouts(sink: records.RolloutSink, scratch: Path) -> records.RolloutSink:
    """Keep the rollout records beside the training output. So an update finished earlier (TRL returns its saved
    result without training) still writes its rollouts to this store."""
    path = scratch / "rollouts.jsonl"
    if sink.records:
        path.write_text("".join(json.dumps(r, default=str) + "\n" for r in sink.records), encoding="utf-8")
    elif path.exists():
        sink.records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    return sink


def _metrics(result, counted: str, signal: list[dict], group_size: int) -> dict:
    """What the update measured. ``counted``: the history field of rollouts without a usable reward, summed over the
    run; ``signal``: the zero-std groups per GRPO step (``dr_core.scoring.signals.zero_std_by_step``), kept as
    ``zero_std_by_step`` with the count of ``no_gradient_steps``; ``group_size``: G, for sql/training_signal;
    ``kl_by_step``: TRL's per-step KL, for sql/monitor_kl."""
    return {
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
        "kl_by_step": kl_by_step(getattr(result, "trl_log", None) or []),
    }


def kl_by_step(trl_log: list[dict]) -> list[dict]:
    """TRL's per-step KL to the reference ({step, kl}, the steps that logged one: beta > 0), for sql/monitor_kl."""
    return [{"step": int(e["step"]), "kl": float(e["kl"])} for e in trl_log if "kl" in e and "step" in e]


def _write_tables(s: Store, ctx: StepContext, role: str, tables: dict[str, Rows]) -> None:
    """The update's rollout tables (stage ``role``), one part each."""
    for table, rows in tables.items():
        if rows:
            write_ref(s, table, rows, f"{role}-train-{table}", **ctx.partition)


def _drop(settings, scratch: Path) -> Path | None:
    """The scratch directory to delete after publishing (None: the role keeps its resume checkpoints)."""
    return None if settings.keep_resume_checkpoints else scratch


def _publish(
    s: Store, ctx: StepContext, role: str, result, base: CheckpointRef, metrics: dict, scratch: Path | None
) -> UpdateRef:
    """Save and register the new checkpoint, drop the scratch directory (None: keep it), return its reference."""
    uri = checkpoints.save(s, result.checkpoint, ctx.run_id, ctx.round_no, role)
    checkpoints.register(s, ctx.run_id, ctx.round_no, role, uri, parent=base.uri, metrics=metrics)
    local = checkpoints.materialise(s, uri)
    ref = UpdateRef(
        uri=uri,
        fingerprint=model_id(EngineConfig(model=str(local))),
        trl_log=list(getattr(result, "trl_log", None) or []),
        **metrics,
    )
    if scratch is not None:
        shutil.rmtree(scratch, ignore_errors=True)
    return ref
