"""Small numeric helpers shared by the evaluator and the engines. Pure math, standard library only.

python -c "from dr_core.scoring.mathutil import logsumexp; print(logsumexp([-1.0, -2.0]))"
"""

from __future__ import annotations

import math
from typing import Iterable


def logsumexp(xs: Iterable[float]) -> float:
    """log(sum(exp(x) for x in xs)) of a non-empty sequence, without overflow or underflow: the largest term is
    factored out (hi + log1p(sum of the others' exp(x - hi))). -inf when every term is -inf."""
    xs = [float(x) for x in xs]
    hi = max(xs)
    if hi == -math.inf:
        return hi
    top = xs.index(hi)
    return hi + math.log1p(sum(math.exp(x - hi) for i, x in enumerate(xs) if i != top))
