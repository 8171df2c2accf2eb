"""Slow, loop-by-loop transcriptions of the paper's equations: the independent implementation the vectorised
dr_core functions are checked against."""

import math


def eq12(weights, verdicts):
    total = sum(weights)
    return [sum(w * v for w, v in zip(weights, row)) / total for row in verdicts]


def eq13(weights, verdicts):
    k = len(verdicts)
    num = 0.0
    for m, w in enumerate(weights):
        vbar = sum(row[m] for row in verdicts) / k
        num += w * vbar * (1 - vbar)
    return num / sum(weights)


def eq15(scores):
    n = len(scores)
    total = 0.0
    for i in range(1, n):  # 1-based i = 1..n-1
        for j in range(i + 1, n + 1):
            d = scores[i - 1] - scores[j - 1]
            total += math.log(1 / (1 + math.exp(-d))) / ((j - i) * 2 ** (i - 1))
    return total


def eq21(rewards, g):
    out = []
    for start in range(0, len(rewards), g):
        grp = rewards[start : start + g]
        if g == 1:
            out.append(0.0)
            continue
        mean = sum(grp) / g
        std = math.sqrt(sum((r - mean) ** 2 for r in grp) / (g - 1))
        out.extend((r - mean) / (std + 1e-4) for r in grp)
    return out


def eq2(scores):
    diffs = [scores[i] - scores[j] for i in range(len(scores)) for j in range(i + 1, len(scores))]
    return sum(diffs) / len(diffs)


def ndcg_by_permutations(scores, relevance):
    """nDCG averaged over every ordering consistent with the scores (ties broken every possible way)."""
    import itertools

    n = len(scores)
    ideal = sum(r / math.log2(i + 2) for i, r in enumerate(sorted(relevance, reverse=True)))
    vals = []
    for perm in itertools.permutations(range(n)):
        if all(scores[perm[a]] >= scores[perm[a + 1]] for a in range(n - 1)):
            vals.append(sum(relevance[p] / math.log2(i + 2) for i, p in enumerate(perm)) / ideal)
    return sum(vals) / len(vals)
