"""Scoring sets: verify every rubric item on every candidate (and anchor) of its set, then Eq. 12 scores,
R_disc (Eq. 13), R_anchor (Eq. 15) and what could not be scored; ``evaluate_sets`` is the whole evaluator
(generate, verify, score) on many sets at once.

Pure apart from the engine calls: no printing, no files, no CLI. The CLI (``dr score``, ``dr eval-evaluator``),
the Prefect tasks and the GRPO reward functions all call these.

    python -c "from dr_core.evaluator.score import evaluate_sets; help(evaluate_sets)"
"""

from __future__ import annotations

from typing import Sequence

from dr_core.constants import UNSCORABLE
from dr_core.engines.base import Engine
from dr_core.evaluator.generate import generate_rubrics
from dr_core.evaluator.items import (
    DEFAULT_SAMPLING,
    Check,
    EvalItem,
    GeneratedRubric,
    RubricSampling,
    ScoredRubric,
    SetEvaluation,
    StageStats,
)
from dr_core.evaluator.verdict_cache import VerdictCache
from dr_core.evaluator.verify import verify
from dr_core.scoring.equations import anchor_reward, discriminability_reward, rubric_scores


def score_rubrics(
    verifier: Engine,
    items: Sequence[EvalItem],
    rubrics: Sequence[Sequence[GeneratedRubric]],
    cache: VerdictCache | None = None,
) -> tuple[list[list[ScoredRubric]], StageStats]:
    """Verify every rubric item on every candidate (and anchor) of its set in one batched call, then score.
    ``cache``: verdicts held from earlier calls are not asked again (``verify``)."""
    checks: list[Check] = []
    for item, gens in zip(items, rubrics):
        for g in gens:
            if g.rubric is None:
                continue
            for resp in item.candidates + (item.anchors or ()):
                checks.extend(Check(item.prompt, resp, crit) for crit in g.rubric.criteria)
    verdicts, stats = verify(verifier, checks, cache=cache)
    it = iter(verdicts)
    results: list[list[ScoredRubric]] = []
    for item, gens in zip(items, rubrics):
        row = []
        for g in gens:
            if g.rubric is None:
                row.append(ScoredRubric(g, None, None, UNSCORABLE, unscorable=[f"rubric: {g.error}"]))
                continue
            m = len(g.rubric.items)
            cand = [[next(it) for _ in range(m)] for _ in item.candidates]
            anch = [[next(it) for _ in range(m)] for _ in item.anchors] if item.anchors else None
            problems = []
            missing = sum(v is UNSCORABLE for r in cand for v in r)
            if missing:
                problems.append(f"verdicts: {missing} of {m * len(cand)} on candidates unscorable")
            scores = list(rubric_scores(g.rubric.weights, cand))
            r_disc = discriminability_reward(g.rubric.weights, cand)
            a_scores = r_anchor = None
            if anch is not None:
                a_missing = sum(v is UNSCORABLE for r in anch for v in r)
                if a_missing:
                    problems.append(f"verdicts: {a_missing} of {m * len(anch)} on anchors unscorable")
                a_scores = list(rubric_scores(g.rubric.weights, anch))
                r_anchor = anchor_reward(a_scores)
            row.append(ScoredRubric(g, cand, scores, r_disc, anch, a_scores, r_anchor, problems))
        results.append(row)
    return results, stats


def rubric_record(r: ScoredRubric) -> dict:
    """One scored rubric as JSON-ready data (``dr score``'s records, the reward service's answers): the generation
    (seed, order shown, items, raw text, error), the verdict matrix, Eq. 12 scores, R_disc, what was unscorable."""
    g = r.generation
    return {
        "seed": g.seed,
        "shown_order": list(g.permutation),
        "rubric": [{"criterion": c, "weight": w} for c, w in zip(g.rubric.criteria, g.rubric.weights)]
        if g.rubric
        else None,
        "rubric_text": g.text,
        "rubric_error": g.error,
        "rubric_items_dropped": g.dropped,
        "verdicts": r.verdicts,
        "scores": r.scores,
        "r_disc": r.r_disc,
        "unscorable": r.unscorable,
    }


def evaluate_sets(
    generator: Engine,
    verifier: Engine,
    items: Sequence[EvalItem],
    seeds: Sequence[int],
    sampling: RubricSampling = DEFAULT_SAMPLING,
) -> SetEvaluation:
    """Generate one rubric per (item, seed) as ``sampling`` says (``generate_rubrics``), verify and score them all:
    the whole evaluator, batch first."""
    items = list(items)
    rubrics, gen_stats = generate_rubrics(generator, items, seeds, sampling)
    results, ver_stats = score_rubrics(verifier, items, rubrics)
    return SetEvaluation(items, list(seeds), sampling.mode, results, gen_stats, ver_stats)
