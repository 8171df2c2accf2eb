"""Evaluator metrics (paper appendix C.1 and H): strict pairwise accuracy, strict listwise top-1, nDCG, AVG@k.

Strict means a tie is wrong: an evaluator that gives the annotated-better response the same score as another has
not picked it (Table 9: two responses tied at 15/15 give accuracy 0). An unscorable score (None) is never a win.

    python -c "from dr_core.scoring.metrics import ndcg; print(ndcg([15, 15], [1, 0]))"   # 0.8155 (paper Table 9)
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from dr_core.rubric.schema import UNSCORABLE


def _is_num(x) -> bool:
    return x is not UNSCORABLE and not (isinstance(x, float) and np.isnan(x))


def pairwise_accuracy(chosen_scores: Sequence, rejected_scores: Sequence) -> float:
    """Fraction of pairs with chosen > rejected (strict: a tie or an unscorable score counts as wrong)."""
    if len(chosen_scores) != len(rejected_scores):
        raise ValueError(f"{len(chosen_scores)} chosen scores vs {len(rejected_scores)} rejected scores")
    if not len(chosen_scores):
        raise ValueError("pairwise_accuracy of no pairs")
    wins = sum(1 for c, r in zip(chosen_scores, rejected_scores) if _is_num(c) and _is_num(r) and c > r)
    return wins / len(chosen_scores)


def is_strict_top1(scores: Sequence, best_index: int) -> bool:
    """True when scores[best_index] is scorable and strictly above every other score."""
    best = scores[best_index]
    if not _is_num(best):
        return False
    return all(not _is_num(s) or s < best for i, s in enumerate(scores) if i != best_index)


def listwise_top1_accuracy(score_lists: Sequence[Sequence], best_indices: Sequence[int]) -> float:
    """Fraction of lists whose annotated best response is the unique maximum (strict top-1)."""
    if len(score_lists) != len(best_indices):
        raise ValueError(f"{len(score_lists)} score lists vs {len(best_indices)} best indices")
    if not len(score_lists):
        raise ValueError("listwise_top1_accuracy of no lists")
    return sum(is_strict_top1(s, b) for s, b in zip(score_lists, best_indices)) / len(score_lists)


def ndcg(scores: Sequence, relevance: Sequence[float]) -> float:
    """nDCG over the whole list: linear gain, 1/log2(rank+1) discount, ties in ``scores`` averaged over all orders.

    The expected DCG under uniform random tie-breaking is exact: every item of a tie block occupying ranks
    p..p+g-1 gets the mean of those ranks' discounts. Unscorable scores rank below every scorable one, tied
    with each other. scores, relevance: (n,). Raises when every relevance is 0 (nDCG is undefined).
    """
    rel = np.asarray(relevance, dtype=np.float64)
    if len(scores) != rel.size or rel.size == 0:
        raise ValueError(f"{len(scores)} scores vs {rel.size} relevance values")
    ideal_discount = 1.0 / np.log2(np.arange(2, rel.size + 2))
    idcg = float((np.sort(rel)[::-1] * ideal_discount).sum())
    if idcg <= 0:
        raise ValueError("nDCG is undefined when every relevance is 0")
    keyed = np.array([s if _is_num(s) else -np.inf for s in scores], dtype=np.float64)
    order = np.argsort(-keyed, kind="stable")
    dcg, pos = 0.0, 0
    while pos < rel.size:
        end = pos
        while end + 1 < rel.size and keyed[order[end + 1]] == keyed[order[pos]]:
            end += 1
        block = order[pos : end + 1]
        dcg += rel[block].sum() * ideal_discount[pos : end + 1].mean()
        pos = end + 1
    return dcg / idcg


def avg_at_k(values: Sequence[float]) -> float:
    """AVG@k: the mean of a metric over k independently generated rubric sets (paper: k=5)."""
    if not len(values):
        raise ValueError("avg_at_k of no values")
    return float(np.mean(values))
