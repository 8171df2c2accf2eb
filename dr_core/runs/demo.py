"""The worked example behind ``dr demo``: a bundled, hand-labelled rubric and verdict matrix over three ranked
anchor responses, scored with the math core (Eq. 2, 12, 13, 15 and nDCG). No model runs here.

    dr demo
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from dr_core.paths import bundled
from dr_core.rubric.schema import Rubric, RubricItem
from dr_core.scoring.equations import Scores, anchor_reward, discriminability_reward, mean_ordered_gap, rubric_scores
from dr_core.scoring.metrics import is_strict_top1, ndcg


@dataclass(frozen=True)
class DemoResult:
    prompt: str
    anchor_ranks: list[int]
    rubric: Rubric
    verdicts: np.ndarray
    scores: Scores
    r_disc: float
    r_anchor: float
    gap: float
    ndcg: float
    top1: bool
    note: str


def run_demo(name: str = "demo_case.json") -> DemoResult:
    case = json.loads(bundled(name).read_text(encoding="utf-8"))
    rubric = Rubric(tuple(RubricItem(it["criterion"], it["weight"]) for it in case["rubric"]))
    verdicts = np.asarray(case["verdicts"])
    scores = rubric_scores(rubric.weights, verdicts)
    n = len(scores)
    return DemoResult(
        prompt=case["prompt"],
        anchor_ranks=case["anchor_ranks"],
        rubric=rubric,
        verdicts=verdicts,
        scores=scores,
        r_disc=discriminability_reward(rubric.weights, verdicts),
        r_anchor=anchor_reward(scores),
        gap=mean_ordered_gap(scores),
        ndcg=ndcg(scores, [n - i for i in range(n)]),
        top1=is_strict_top1(list(scores), 0),
        note=case["note"],
    )
