"""Evaluator metrics (paper appendix C.1 and H): strict pairwise accuracy, strict listwise top-1, nDCG, AVG@k.

Strict means a tie is wrong: an evaluator that gives the annotated-better response the same score as another has
not picked it (Table 9: two responses tied at 15/15 give accuracy 0). An unscorable score (None) is never a win.

    python -c "from dr_core.scoring.metrics import ndcg; print(ndcg([15, 15], [1, 0]))"   # 0.8155 (paper Table 9)
"""

from __future__ import annotations

from collections import Counter
from typing import Sequence

import numpy as np

from dr_core.constants import UNSCORABLE


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


def mean_or_none(values: Sequence[float]) -> float | None:
    """The mean of ``values``; None (n/a) for none."""
    return sum(values) / len(values) if values else None


def _all_scorable(scores) -> bool:
    return scores is not None and all(s is not UNSCORABLE for s in scores)


def score_list_metrics(fmt: str, score_lists: Sequence[Sequence], relevance: Sequence[Sequence[float]]) -> dict:
    """``accuracy``, ``chance_accuracy``, ``ties`` and (listwise/ranked) ``ndcg`` of one score list per set whose
    candidate 0 is the annotated best. Strict: pairwise, chosen above rejected; lists, the best is the unique top
    score. ``ties``: share of sets whose best is scorable and equals the top scorable other score."""
    n = len(score_lists)
    if fmt == "pairwise":
        acc = pairwise_accuracy([sc[0] for sc in score_lists], [sc[1] for sc in score_lists])
    else:
        acc = sum(is_strict_top1(sc, 0) for sc in score_lists) / n
    tie = 0
    for sc in score_lists:
        others = [x for x in sc[1:] if x is not UNSCORABLE]
        if sc[0] is not UNSCORABLE and others and sc[0] == max(others):
            tie += 1
    out = {"accuracy": acc, "chance_accuracy": sum(1 / len(sc) for sc in score_lists) / n, "ties": tie / n}
    if fmt != "pairwise":
        out["ndcg"] = sum(ndcg(sc, rel) for sc, rel in zip(score_lists, relevance)) / n
    return out


def evaluator_metrics(fmt: str, evaluation, relevance: Sequence[Sequence[float]]) -> dict:
    """The metrics of one rubric-evaluator run (``evaluation``: a ``dr_core.evaluator.items.SetEvaluation``,
    read by attribute only, so this module stays pure), per seed and AVG@N over the N rubric seeds: ``accuracy`` and
    ``ties`` (``score_list_metrics``), ``unscorable`` (share of (set, seed) with no usable rubric or a missing
    verdict on some candidate), ``ndcg`` for lists (unscorable scores ranked last), and rubric/verdict diagnostics.
    An unscorable set counts with every score unscorable."""
    n_items = len(evaluation.items)
    acc, ties, unscorable, ndcgs = [], [], [], []
    for s in range(len(evaluation.seeds)):
        per_set = [evaluation.results[i][s] for i in range(n_items)]
        score_lists = [
            r.scores if r.scores is not None else [UNSCORABLE] * len(evaluation.items[i].candidates)
            for i, r in enumerate(per_set)
        ]
        seed_metrics = score_list_metrics(fmt, score_lists, relevance)
        acc.append(seed_metrics["accuracy"])
        ties.append(seed_metrics["ties"])
        unscorable.append(sum(not _all_scorable(r.scores) for r in per_set) / n_items)
        if fmt != "pairwise":
            ndcgs.append(seed_metrics["ndcg"])
    flat = [r for row in evaluation.results for r in row]
    reasons = Counter(r.generation.error for r in flat if r.generation.error)
    verdicts = [v for r in flat if r.verdicts for row in r.verdicts for v in row]
    metrics = {
        "n": n_items,
        "seeds": len(evaluation.seeds),
        "mode": evaluation.mode,
        "format": fmt,
        "accuracy": avg_at_k(acc),
        "accuracy_per_seed": acc,
        "chance_accuracy": sum(1 / len(it.candidates) for it in evaluation.items) / n_items,
        "ties": avg_at_k(ties),
        "unscorable": avg_at_k(unscorable),
        "rubric_failures": dict(reasons),
        "rubric_items_dropped": sum(r.generation.dropped for r in flat),
        "rubric_items_mean": mean_or_none([len(r.generation.rubric.items) for r in flat if r.generation.rubric]),
        "verdicts": len(verdicts),
        "verdicts_unscorable": sum(v is UNSCORABLE for v in verdicts),
        "verdict_yes_rate": mean_or_none([v for v in verdicts if v is not UNSCORABLE]),
        "mean_r_disc": mean_or_none([r.r_disc for r in flat if r.r_disc is not UNSCORABLE]),
    }
    if fmt != "pairwise":
        metrics["ndcg"] = avg_at_k(ndcgs)
        metrics["ndcg_per_seed"] = ndcgs
    return metrics
