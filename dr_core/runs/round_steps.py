"""The steps of one DynamicRubric round as plain functions over rows (lists of dicts shaped like the tables in
``dr_core.store.schemas``). The Prefect tasks in ``tasks/round.py`` call one of these each, between a read and a write
of the artifact store; nothing here knows about Prefect or files.

Algorithm 1, evaluation part, per round t:
  select_inputs      prompts x and their ranked anchor lists C_anchor (appendix B filters: sql/anchor_filter.sql)
  sample_sets        C = K responses per prompt from the policy P(t-1)
  generate_rubric_rows the generator's weighted rubric list(s) for each (x, C)                     (section 3.4)
  verify_sets        the frozen verifier's yes/no for every item on every response of C and C_anchor
  score_sets         Eq. 12 scores, R_disc (Eq. 13) on C, R_anchor (Eq. 15) and the Eq. 2 gap on C_anchor,
                     advantages (Eq. 24-25) across a set's rubric rollouts
  evaluate_evaluator strict accuracy of the same generator + verifier on held-out preference pairs

    python -c "from dr_core.runs.round_steps import select_inputs; from dr_core.config import preset; \\
               print(len(select_inputs(preset('tiny'))[1]))"
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Sequence

import numpy as np
import pyarrow as pa

from dr_core import faults
from dr_core.config import RoundConfig
from dr_core.constants import UNSCORABLE
from dr_core.datasets import load, load_ranked
from dr_core.engines import Engine
from dr_core.evaluator.generate import generate_rubrics
from dr_core.evaluator.items import Check, EvalItem, RubricSampling
from dr_core.evaluator.score import evaluate_sets
from dr_core.evaluator.verify import verify
from dr_core.paths import bundled
from dr_core.rubric import prompts
from dr_core.runs.refs import RoundSummary
from dr_core.scoring import signals
from dr_core.scoring.equations import (
    anchor_reward,
    combined_advantages,
    discriminability_reward,
    group_advantages,
    mean_ordered_gap,
    rubric_scores,
)
from dr_core.scoring.metrics import avg_at_k
from dr_core.store import sql
from dr_core.store.rows import (
    AnchorRow,
    EvalRow,
    IngestedPromptRow,
    RewardRow,
    RubricRow,
    SampleRow,
    ScoreRow,
    StepRow,
    VerdictRow,
    anchor_rows,
    rubric_rows,
)
from dr_core.store.schemas import spec

Rows = list[dict]


def resolve_data(ref: str) -> Path:
    """'bundled:NAME' -> the shipped file; anything else is a local path."""
    return bundled(ref.split(":", 1)[1]) if ref.startswith("bundled:") else Path(ref)


def check_inputs(cfg: RoundConfig, policy_eval_data: str | None = None) -> None:
    """Validate every data file a round (and its policy evaluation) reads, whole, before any model work:
    DataError naming file, line and field for the first bad line."""
    load(resolve_data(cfg.anchors), "ranked")
    load(resolve_data(cfg.eval_data), cfg.eval_format)
    if policy_eval_data is not None:
        load(resolve_data(policy_eval_data), "policy_eval")


def dataset_name(ref: str) -> str:
    return Path(ref.split(":", 1)[-1]).stem.replace("_", "-")


def spread_ranks(n: int, k: int) -> list[int]:
    """k anchor ranks (1-based) spread evenly over a list of n, always the best and the worst."""
    return sorted({int(round(x)) + 1 for x in np.linspace(0, n - 1, k)})


def select_inputs(cfg: RoundConfig) -> tuple[list[IngestedPromptRow], list[AnchorRow]]:
    """Prompts and anchor rows for the round: the anchor file's lists that pass sql/anchor_filter, first
    ``n_prompts`` in file order, each with ``n_anchor`` ranks spread over its ranking. Returns (prompts, anchors)."""
    path = resolve_data(cfg.anchors)
    ranked = load_ranked(path)
    ds = dataset_name(cfg.anchors)
    rows = anchor_rows(ds, ranked)
    table = pa.Table.from_pylist([dict(r) for r in rows], schema=spec("anchors").schema)
    kept = set(
        sql.run_on_tables("anchor_filter", {"anchors": table}, {"min_responses": cfg.min_anchor_responses})
        .column("prompt_id")
        .to_pylist()
    )
    chosen = [r for r in ranked if r.id in kept][: cfg.n_prompts]
    if not chosen:
        raise ValueError(f"{path}: no anchor list passes sql/anchor_filter (min_responses={cfg.min_anchor_responses})")
    prompt_rows = [IngestedPromptRow(ds, r.id, r.prompt, None) for r in chosen]
    return prompt_rows, anchor_rows(ds, chosen, lambda n: spread_ranks(n, cfg.n_anchor))


def sample_sets(
    policy: Engine, prompt_rows: Rows, cfg: RoundConfig, policy_ckpt: str, stage: str, set_offset: int = 0
) -> list[SampleRow]:
    """K responses per prompt (set_id = the prompt's position in the round: ``set_offset`` + its position here, for
    a shard of the round's prompts, dr_core/runs/shards.py), in one batched engine call."""
    outs = policy.chat(
        [prompts.policy_messages(p["prompt"]) for p in prompt_rows],
        n=cfg.k,
        temperature=cfg.policy_temperature,
        max_tokens=cfg.policy_max_tokens,
        seed=cfg.seed,
    )
    faults.fault_point("sample", stage)  # DR_FAULT hook (dr_core/faults.py): model work done, nothing written
    return [
        SampleRow(stage, s, p["prompt_id"], j, policy_ckpt, text, out.prompt_tokens, out.completion_tokens[j])
        for s, (p, out) in enumerate(zip(prompt_rows, outs), set_offset)
        for j, text in enumerate(out.texts)
    ]


def _sets(prompt_rows: Rows, sample_rows: Rows) -> dict[int, tuple[str, list[str]]]:
    """set_id -> (prompt, responses in response_idx order)."""
    text = {p["prompt_id"]: p["prompt"] for p in prompt_rows}
    grouped: dict[int, list[dict]] = defaultdict(list)
    for r in sample_rows:
        grouped[r["set_id"]].append(r)
    return {
        s: (text[rs[0]["prompt_id"]], [r["response"] for r in sorted(rs, key=lambda r: r["response_idx"])])
        for s, rs in sorted(grouped.items())
    }


def _sampling(cfg: RoundConfig) -> RubricSampling:
    """How a round asks its generator for rubrics (the JSON prompt, constrained)."""
    return RubricSampling(temperature=cfg.generator_temperature, max_tokens=cfg.generator_max_tokens)


def generate_rubric_rows(
    generator: Engine, prompt_rows: Rows, sample_rows: Rows, cfg: RoundConfig, generator_ckpt: str, stage: str
) -> tuple[list[RubricRow], dict]:
    """``rubric_rollouts`` rubric lists per set (structured JSON output); a rollout with no usable rubric is one row
    with item NULL and its error. Returns (rubric rows, stage cost)."""
    sets = _sets(prompt_rows, sample_rows)
    ids = list(sets)
    items = [EvalItem(sets[s][0], tuple(sets[s][1])) for s in ids]
    seeds = [cfg.seed + r for r in range(cfg.rubric_rollouts)]
    gens, stats = generate_rubrics(generator, items, seeds, _sampling(cfg))
    faults.fault_point("generate-rubrics", stage)  # DR_FAULT hook (dr_core/faults.py)
    rows = []
    for s, per_seed in zip(ids, gens):
        for rollout, g in enumerate(per_seed):
            items = None if g.rubric is None else [(it.criterion, it.weight) for it in g.rubric.items]
            rows += rubric_rows(stage, s, rollout, generator_ckpt, items, g.error)
    return rows, stats.as_dict()


def _rubrics(rubric_rows: Rows) -> dict[tuple[int, int], list[dict]]:
    """(set_id, rollout) -> its usable items in item order (rollouts with no rubric map to [])."""
    out: dict[tuple[int, int], list[dict]] = defaultdict(list)
    for r in rubric_rows:
        key = (r["set_id"], r["rollout"])
        out.setdefault(key, [])
        if r["item"] is not None:
            out[key].append(r)
    return {k: sorted(v, key=lambda r: r["item"]) for k, v in out.items()}


def _targets(
    prompt_rows: Rows, sample_rows: Rows, anchor_rows: Rows
) -> dict[int, tuple[str, list[tuple[str, int, str]]]]:
    """set_id -> (prompt, [(target, response number, text)]): the set C, then the anchor list by rank."""
    by_prompt: dict[str, list[dict]] = defaultdict(list)
    for a in anchor_rows:
        by_prompt[a["prompt_id"]].append(a)
    pid = {r["set_id"]: r["prompt_id"] for r in sample_rows}
    out = {}
    for s, (prompt, responses) in _sets(prompt_rows, sample_rows).items():
        anchors = sorted(by_prompt.get(pid[s], []), key=lambda a: a["rank"])
        out[s] = (
            prompt,
            [("C", j, t) for j, t in enumerate(responses)] + [("anchor", a["rank"], a["response"]) for a in anchors],
        )
    return out


def verify_sets(
    verifier: Engine,
    prompt_rows: Rows,
    sample_rows: Rows,
    anchor_rows: Rows,
    rubric_rows: Rows,
    verifier_name: str,
    stage: str,
) -> tuple[list[VerdictRow], dict]:
    """The verifier's answer for every rubric item on every response of C and of the anchor list (one batched
    call; checks sharing a response are adjacent, so the prefix cache serves them). NULL verdict = unscorable."""
    targets = _targets(prompt_rows, sample_rows, anchor_rows)
    keys, checks = [], []
    for (s, rollout), items in sorted(_rubrics(rubric_rows).items()):
        prompt, resp = targets[s]
        for target, number, text in resp:
            for it in items:
                keys.append((s, rollout, it["item"], target, number))
                checks.append(Check(prompt, text, it["criterion"]))
    verdicts, stats = verify(verifier, checks)
    faults.fault_point("verify", stage)  # DR_FAULT hook (dr_core/faults.py)
    rows = [
        VerdictRow(stage, s, rollout, m, target, number, None if v is UNSCORABLE else bool(v), verifier_name)
        for (s, rollout, m, target, number), v in zip(keys, verdicts)
    ]
    return rows, stats.as_dict()


def score_sets(rubric_rows: Rows, verdict_rows: Rows, stage: str) -> tuple[list[ScoreRow], list[RewardRow]]:
    """Eq. 12 scores per (rollout, response), and per rollout R_disc (Eq. 13, on C), R_anchor (Eq. 15, on the
    anchor list) and, across a set's rollouts, the Eq. 24-25 advantages (NULL when some reward is unscorable or
    there is a single rollout). Returns (score rows, reward rows)."""
    cell: dict[tuple, bool | None] = {
        (v["set_id"], v["rollout"], v["target"], v["response"], v["item"]): v["verdict"] for v in verdict_rows
    }
    responses: dict[tuple[int, str], set[int]] = defaultdict(set)
    for v in verdict_rows:
        responses[(v["set_id"], v["target"])].add(v["response"])
    score_rows, reward_rows = [], []
    for (s, rollout), items in sorted(_rubrics(rubric_rows).items()):
        weights = [it["weight"] for it in items]
        reward = {"stage": stage, "set_id": s, "rollout": rollout, "r_disc": None, "r_anchor": None}
        for target in ("C", "anchor"):
            numbers = sorted(responses.get((s, target), ()))
            matrix = [[_bit(cell.get((s, rollout, target, n, it["item"]))) for it in items] for n in numbers]
            scores = rubric_scores(weights, matrix)
            for n, sc in zip(numbers, scores):
                score_rows.append(ScoreRow(stage, s, rollout, target, n, sc))
            if target == "C" and items and numbers:
                reward["r_disc"] = discriminability_reward(weights, matrix)
            if target == "anchor" and len(numbers) >= 2:
                reward["r_anchor"] = anchor_reward(scores)
        reward_rows.append(reward)
    _add_advantages(reward_rows)
    return score_rows, [RewardRow(**r) for r in reward_rows]


def _bit(v: bool | None) -> int | None:
    return None if v is None else int(v)


def _add_advantages(reward_rows: Rows) -> None:
    """Eq. 24-25 within each set's group of rollouts, where the whole group has both rewards."""
    by_set: dict[int, list[dict]] = defaultdict(list)
    for r in reward_rows:
        by_set[r["set_id"]].append(r)
    for group in by_set.values():
        complete = len(group) > 1 and all(r["r_disc"] is not None and r["r_anchor"] is not None for r in group)
        if complete:
            g = len(group)
            disc, anch = [r["r_disc"] for r in group], [r["r_anchor"] for r in group]
            a_disc, a_anchor = group_advantages(disc, g), group_advantages(anch, g)
            total = combined_advantages(disc, anch, g)
        for i, r in enumerate(group):
            r["adv_disc"] = float(a_disc[i]) if complete else None
            r["adv_anchor"] = float(a_anchor[i]) if complete else None
            r["advantage"] = float(total[i]) if complete else None


def anchor_gaps(score_rows: Rows) -> list[float]:
    """Eq. 2 gap on each (set, rollout)'s anchor list (scores in rank order, best first), unscorable left out."""
    lists: dict[tuple[int, int], list[tuple[int, float | None]]] = defaultdict(list)
    for r in score_rows:
        if r["target"] == "anchor":
            lists[(r["set_id"], r["rollout"])].append((r["response"], r["score"]))
    gaps = []
    for scored in lists.values():
        if len(scored) >= 2:
            g = mean_ordered_gap([s for _, s in sorted(scored)])
            if g is not UNSCORABLE:
                gaps.append(g)
    return gaps


def evaluate_evaluator(
    generator: Engine, verifier: Engine, cfg: RoundConfig, checkpoint: str, verifier_name: str
) -> tuple[list[EvalRow], dict]:
    """Strict accuracy (and ties, unscorable; nDCG for lists) of generator + verifier on ``cfg.eval_data``, one
    eval row per (seed, metric) plus the AVG@N rows (seed -1). Returns (eval rows, metrics dict)."""
    from dr_core.evals.evaluate import eval_items
    from dr_core.scoring.metrics import evaluator_metrics

    _, items, relevance = eval_items(resolve_data(cfg.eval_data), cfg.eval_format, cfg.eval_limit)
    seeds = list(range(cfg.seed, cfg.seed + cfg.eval_seeds))
    ev = evaluate_sets(generator, verifier, items, seeds, _sampling(cfg))
    metrics = evaluator_metrics(cfg.eval_format, ev, relevance)
    bench = dataset_name(cfg.eval_data)
    per_seed = [(seed, "accuracy", a) for seed, a in zip(seeds, metrics["accuracy_per_seed"])]
    overall = [(-1, m, metrics[m]) for m in ("accuracy", "ties", "unscorable")]
    overall += [(-1, "ndcg", metrics["ndcg"])] if "ndcg" in metrics else []
    rows = [EvalRow(bench, checkpoint, verifier_name, seed, m, v) for seed, m, v in per_seed + overall]
    costs = {"generation": ev.generation.as_dict(), "verification": ev.verification.as_dict()}
    return rows, {**{k: metrics[k] for k in ("n", "seeds", "accuracy", "ties", "unscorable")}, "costs": costs}


def summarise(
    prompt_rows: Rows,
    sample_rows: Rows,
    rubric_rows: Rows,
    verdict_rows: Rows,
    score_rows: Rows,
    reward_rows: Rows,
    eval_metrics: dict | None,
) -> RoundSummary:
    """The round's summary figures from its rows. ``verifier_yes_rate`` is the share of yes among the known verdicts
    on C and the anchors (as sql/stage_costs' yes_rate); ``constant_score_sets_share`` the share of scored sets whose
    Eq. 12 scores on C are all equal (as sql/set_gap's zero_spread_share)."""
    r_disc = [r["r_disc"] for r in reward_rows if r["r_disc"] is not None]
    r_anchor = [r["r_anchor"] for r in reward_rows if r["r_anchor"] is not None]
    gaps = anchor_gaps(score_rows)
    yes, scored = signals.yes_rate(v["verdict"] for v in verdict_rows)
    return RoundSummary(
        prompts=len(prompt_rows),
        sets=len({r["set_id"] for r in sample_rows}),
        responses=len(sample_rows),
        rubric_rollouts=len(reward_rows),
        rubric_failures=sum(1 for r in rubric_rows if r["item"] is None),
        rubric_items=sum(1 for r in rubric_rows if r["item"] is not None),
        verdicts=len(verdict_rows),
        unscorable_verdicts=sum(1 for v in verdict_rows if v["verdict"] is None),
        verdicts_scored=scored,
        verifier_yes_rate=yes,
        constant_score_sets_share=signals.constant_score_share(score_rows),
        unscorable_scores=sum(1 for s in score_rows if s["score"] is None),
        r_disc=avg_at_k(r_disc) if r_disc else None,
        r_anchor=avg_at_k(r_anchor) if r_anchor else None,
        anchor_gap=avg_at_k(gaps) if gaps else None,
        eval_accuracy=eval_metrics["accuracy"] if eval_metrics else None,
        eval_n=eval_metrics["n"] if eval_metrics else None,
    )


def rows_of(table: pa.Table, drop: Sequence[str] = ("run_id", "round")) -> Rows:
    """A stored table back as row dicts without its run partition columns."""
    return [{k: v for k, v in r.items() if k not in drop} for r in table.to_pylist()]


def step_rows(entries: dict[str, dict], flow: str, execution: str) -> list[StepRow]:
    """Rows of the ``steps`` table from a flow's step log (name -> {"state", "seconds", "started_at" ISO-8601,
    "peak_rss_mb" (optional: the step's peak resident memory)})."""
    import datetime as dt

    return [
        StepRow(
            execution,
            flow,
            name,
            e["state"],
            dt.datetime.fromisoformat(e["started_at"]),
            None if e["seconds"] is None else float(e["seconds"]),
            e.get("peak_rss_mb"),
        )
        for name, e in entries.items()
    ]
