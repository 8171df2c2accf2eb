"""IFEval's four accuracies, named as lm-eval names them, with 95 % percentile-bootstrap intervals over prompts:

- ``prompt_level_strict_acc``: the share of prompts whose every instruction is met (strict verdicts);
- ``inst_level_strict_acc``: the share of all instructions met (strict), pooled over prompts;
- ``prompt_level_loose_acc`` / ``inst_level_loose_acc``: the same with the loose verdicts.

An instruction-level interval resamples prompts and recomputes the pooled ratio, so a prompt's instructions stay
together. Rows whose checker cannot run here are left out and counted (``unscorable``, with their ids); they are
never counted as failures.

    python -c "from dr_core.ifeval.metrics import accuracies; print(accuracies([[(True, True), (False, True)]]))"
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

#: lm-eval's metric names, in its order.
METRICS = ("prompt_level_strict_acc", "inst_level_strict_acc", "prompt_level_loose_acc", "inst_level_loose_acc")
N_BOOT = 2000
CI_LEVEL = 0.95


def accuracies(verdicts: Sequence[Sequence[tuple[bool, bool]]], *, seed: int = 0, n_boot: int = N_BOOT) -> dict:
    """The four accuracies of scored prompts, each with ``<name>_ci95``. ``verdicts[p]``: the (strict, loose)
    verdict of every instruction of prompt p (shape (P, n_p, 2)). Nothing scored: every value None."""
    if not verdicts:
        return {m: None for m in METRICS} | {f"{m}_ci95": None for m in METRICS}
    per_prompt = np.array(
        [
            [all(s for s, _ in v), all(lo for _, lo in v), sum(s for s, _ in v), sum(lo for _, lo in v), len(v)]
            for v in verdicts
        ],
        dtype=np.float64,
    )
    idx = np.random.default_rng(seed).integers(0, len(per_prompt), size=(n_boot, len(per_prompt)))
    out: dict = {}
    for name, column, pooled in (
        ("prompt_level_strict_acc", 0, False),
        ("inst_level_strict_acc", 2, True),
        ("prompt_level_loose_acc", 1, False),
        ("inst_level_loose_acc", 3, True),
    ):
        x = per_prompt[:, column]
        if pooled:
            value = x.sum() / per_prompt[:, 4].sum()
            boot = x[idx].sum(axis=1) / per_prompt[:, 4][idx].sum(axis=1)
        else:
            value = x.mean()
            boot = x[idx].mean(axis=1)
        lo, hi = np.quantile(boot, [(1 - CI_LEVEL) / 2, (1 + CI_LEVEL) / 2])
        out[name] = float(value)
        out[f"{name}_ci95"] = [float(lo), float(hi)]
    return out
