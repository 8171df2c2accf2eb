"""``dr demo``, the worked example: a bundled, hand-labelled rubric and verdict matrix over three ranked anchor
responses, scored with the math core (Eq. 2, 12, 13, 15 and nDCG) and printed as tables. No model runs here.

    dr demo
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rich.table import Table

from cli.output import console, styled

if TYPE_CHECKING:  # numpy and the math core load when the demo runs, not with ``dr --help``
    import numpy as np

    from dr_core.rubric.schema import Rubric
    from dr_core.scoring.equations import Scores


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
    import numpy as np

    from dr_core.paths import bundled
    from dr_core.rubric.schema import Rubric, RubricItem
    from dr_core.scoring.equations import anchor_reward, discriminability_reward, mean_ordered_gap, rubric_scores
    from dr_core.scoring.metrics import is_strict_top1, ndcg

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


def demo() -> None:
    """Score the bundled hand-labelled example with the math core and print the table (no model needed)."""
    res = run_demo()
    console.print(styled(("Prompt: ", "bold"), res.prompt))
    console.print(styled((res.note + "\n", "dim")))
    console.print(_rubric_table(res))
    console.print(_verdict_table(res))
    console.print(_summary_table(res))


def _rubric_table(res: DemoResult) -> Table:
    rub = Table(title="Rubric (criterion, weight)")
    rub.add_column("m", justify="right")
    rub.add_column("criterion")
    rub.add_column("w", justify="right")
    for m, it in enumerate(res.rubric.items, 1):
        rub.add_row(str(m), it.criterion, str(it.weight))
    return rub


def _verdict_table(res: DemoResult) -> Table:
    tab = Table(title="Verdicts and Eq. 12 scores")
    tab.add_column("anchor rank", justify="right")
    for m in range(len(res.rubric.items)):
        tab.add_column(f"v{m + 1}", justify="center")
    tab.add_column("score E(x,y|C)", justify="right")
    for rank, row, score in zip(res.anchor_ranks, res.verdicts, res.scores):
        tab.add_row(str(rank), *("yes" if v else "no" for v in row), f"{score:.3f}")
    return tab


def _summary_table(res: DemoResult) -> Table:
    summary = Table(title="Set-level values", show_header=False)
    summary.add_row("R_disc (Eq. 13)", f"{res.r_disc:.4f}")
    summary.add_row("R_anchor (Eq. 15)", f"{res.r_anchor:.4f}")
    summary.add_row("mean ordered gap (Eq. 2)", f"{res.gap:.4f}")
    summary.add_row("nDCG (graded by rank)", f"{res.ndcg:.4f}")
    summary.add_row("strict top-1", "yes" if res.top1 else "no")
    return summary
