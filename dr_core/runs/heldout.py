"""The in-loop policy evaluation of a co-evolution round: P(t) against P(0) on a held-out prompt slice, judged
pairwise in both orders (``dr_core.evals.policy_eval``), one ``eval`` row per metric (benchmark ``<data>.vs-P0``,
checkpoint P(t), verifier = the judge). tasks/policy_eval.py wraps it in a cached Prefect task.

Before any model work it writes the held-out prompts to the ``prompts`` table (dataset ``heldout-<name>``) and runs
the audit ``sql/heldout_overlap.sql`` over the whole store: a held-out prompt that is also an anchor prompt or a
prompt the policy was sampled on stops the run (ValueError: bad input, not retried). Then one phase at a time: the
answering models (P(t), P(0)), then the judge alone.
"""

from __future__ import annotations

from dr_core.config import CoevolveConfig, EngineConfig
from dr_core.datasets import load
from dr_core.engines.identity import model_id
from dr_core.engines.pool import EnginePool
from dr_core.evals import policy_eval
from dr_core.evaluator.judge import judge_engine_config
from dr_core.model import is_bundled
from dr_core.runs.refs import CheckpointRef, EvalRef, StepContext, write_ref
from dr_core.runs.round_steps import dataset_name, resolve_data
from dr_core.store import checkpoints, sql
from dr_core.store.artifacts import Store
from dr_core.store.rows import IngestedPromptRow

#: The metrics an evaluation's reference carries (the round summary's ``policy_eval``).
SUMMARY_METRICS = (
    "n",
    "unscorable",
    "win_rate",
    "tie_rate",
    "win_rate_ci95",
    "policy_mean_chars",
    "baseline_mean_chars",
    "judge_position_a_rate",
    "judge_position_bias",
    "judge_procedure",
    "identical_answers",
    "judge",
)


def policy_engine(cfg: CoevolveConfig, s: Store, ref: CheckpointRef) -> EngineConfig:
    """The round's policy engine pointed at the checkpoint ``ref`` (``default``: the backbone P(0) as configured)."""
    base = cfg.round.engines.policy
    if is_bundled(ref.uri):
        return base
    return base.model_copy(update={"model": str(checkpoints.materialise(s, ref.uri))})


def heldout_overlap(s: Store, dataset: str) -> list[dict]:
    """Rows of the audit sql/heldout_overlap.sql for this held-out dataset (must be empty)."""
    return sql.run(s.connect(), "heldout_overlap", {"heldout": dataset}).to_pylist()


def heldout_prompts(s: Store, cfg: CoevolveConfig) -> list:
    """The held-out rows of ``cfg.policy_eval.data``, written to ``prompts`` and audited for overlap first."""
    pe = cfg.policy_eval
    path = resolve_data(pe.data)
    rows = load(path, "policy_eval", pe.limit)
    ds = "heldout-" + dataset_name(pe.data)
    prompt_rows = [IngestedPromptRow(ds, r.id, r.prompt, r.baseline) for r in rows]
    write_ref(s, "prompts", prompt_rows, "heldout", dataset=ds)
    overlap = heldout_overlap(s, ds)
    if overlap:
        shown = ", ".join(
            f"{o['heldout_prompt_id']} ({o['source']} {o['dataset']}/{o['prompt_id']})" for o in overlap[:5]
        )
        raise ValueError(f"{path}: {len(overlap)} held-out prompt(s) also used in training or anchors: {shown}")
    return rows


def evaluate_policy(ctx: StepContext, cfg: CoevolveConfig, policy: CheckpointRef, engines: EnginePool) -> EvalRef:
    """Win rate of P(t) (checkpoint ``policy``) against P(0) on ``cfg.policy_eval.data``; eval rows written."""
    pe = cfg.policy_eval
    s = Store.from_url(ctx.store)
    rows = heldout_prompts(s, cfg)
    pol_cfg, base_cfg = policy_engine(cfg, s, policy), cfg.round.engines.policy
    judge_cfg = judge_engine_config(pe.judge or cfg.round.engines.verifier, pe.judge_procedure)
    texts, seed = [r.prompt for r in rows], cfg.round.seed
    engines.keep(pol_cfg, base_cfg)  # one phase at a time: the answering models, then the judge alone
    pol = policy_eval.answer_prompts(engines.get(pol_cfg), texts, max_tokens=pe.max_tokens, seed=seed)
    base = policy_eval.answer_prompts(engines.get(base_cfg), texts, max_tokens=pe.max_tokens, seed=seed)
    engines.keep(judge_cfg)
    metrics, _records = policy_eval.judge_and_score(
        engines.get(judge_cfg), rows, pol, base, seed=seed, procedure=pe.judge_procedure, threshold=pe.tie_threshold
    )
    eval_rows = policy_eval.eval_rows(
        metrics,
        benchmark=f"{dataset_name(pe.data)}.vs-P0",
        checkpoint=policy.fingerprint,
        judge=model_id(judge_cfg),
        seed=cfg.round.seed,
    )
    ref = write_ref(s, "eval", eval_rows, "policy-eval", **ctx.partition)
    return EvalRef(**ref.model_dump(), metrics={k: metrics[k] for k in SUMMARY_METRICS})
