"""What ``dr score`` and ``dr eval-evaluator`` do, without the CLI: load and validate the whole input file (a bad
line stops the run before any model work), build the engines, run the evaluator, compute the metrics
(``dr_core.scoring.metrics.evaluator_metrics``); the CLI writes the output atomically (``dr_core.store.atomic``).
Once the input is valid, the models are said in one line (``models: preset tiny — generator ..., verifier ...``),
then each phase: engine start-up, rubric generation, verification (counted through ``dr_core.progress``).

Metrics (paper appendix C.1, H), each averaged over the N rubric seeds (AVG@N, paper N=5):
- ``accuracy``: strict: pairwise, chosen scored above rejected; listwise/ranked, the annotated best is the unique
  top score. A tie or an unscorable score is wrong.
- ``ties``: fraction of sets where the best candidate ties with the top other score (both scorable).
- ``unscorable``: fraction of (set, seed) with no usable rubric or a missing verdict on some candidate.
- ``ndcg`` (listwise: relevance 1 for the best, 0 for the others; ranked: n - rank), unscorable scores ranked last.

    dr eval-evaluator dr_core/data/eval_hh_harmless_pairs.jsonl --format pairwise --limit 8 --seeds 2 \\
        --output metrics.json
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Literal, Sequence

from dr_core import progress
from dr_core.config import EnginesConfig
from dr_core.config.presets import engines_line
from dr_core.constants import UNSCORABLE
from dr_core.datasets import load
from dr_core.engines.pool import EnginePool
from dr_core.evaluator.generate import generate_rubrics
from dr_core.evaluator.items import DEFAULT_SAMPLING, EvalItem, RubricSampling, SetEvaluation
from dr_core.evaluator.score import rubric_record, score_rubrics
from dr_core.scoring.metrics import evaluator_metrics, mean_or_none

EvalFormat = Literal["pairwise", "listwise", "ranked"]
EVAL_FORMATS = ("pairwise", "listwise", "ranked")
Log = Callable[[str], None]


def _quiet(_msg: str) -> None:
    pass


# ----------------------------------------------------------------------------------------------------- input


def eval_items(path: str | Path, fmt: EvalFormat, limit: int | None = None) -> tuple[list, list[EvalItem], list]:
    """Rows of a labelled file, their EvalItems (candidates in label order: best first), and per-row relevance.

    The annotated best is always candidate 0; the generator only ever sees a shuffled order.
    Raises ``DataError`` on the first malformed line (the whole file is validated).
    """
    if fmt not in EVAL_FORMATS:
        raise ValueError(f"format must be one of {', '.join(EVAL_FORMATS)}, got {fmt!r}")
    rows = load(path, fmt, limit)
    items, relevance = [], []
    for r in rows:
        if fmt == "pairwise":
            cands = (r.chosen, r.rejected)
            rel = [1.0, 0.0]
        elif fmt == "listwise":
            cands = (r.best, *r.others)
            rel = [1.0] + [0.0] * len(r.others)
        else:
            cands = tuple(r.responses)
            rel = [float(len(cands) - i) for i in range(len(cands))]
        items.append(EvalItem(r.prompt, cands))
        relevance.append(rel)
    return rows, items, relevance


# ----------------------------------------------------------------------------------------------------- metrics


def stage_costs(evaluation: SetEvaluation, startup_s: float) -> dict:
    g, v = evaluation.generation, evaluation.verification
    return {
        "startup": {"seconds": startup_s},
        "generation": g.as_dict(),
        "verification": v.as_dict() | {"verdicts_per_s": (v.requests / v.seconds) if v.seconds else None},
    }


# ----------------------------------------------------------------------------------------------------- runs


def _evaluate(engines: dict, items: list[EvalItem], seeds: int, sampling: RubricSampling, log: Log) -> SetEvaluation:
    """One rubric per (item, seed), then every verdict (``dr_core.evaluator.score.evaluate_sets``). A line per
    phase, and each phase's requests counted under its own label."""
    n = len(items) * seeds
    log(f"generating {n} rubric{'s' * (n != 1)}")
    with progress.activity("rubrics", "rubrics"):
        rubrics, gen = generate_rubrics(engines["generator"], items, list(range(seeds)), sampling)
    log(f"generation {gen.seconds:.1f} s; verifying the rubrics' checks")
    with progress.activity("verify", "verdicts"):
        results, ver = score_rubrics(engines["verifier"], items, rubrics)
    log(f"verification of {ver.requests} checks {ver.seconds:.1f} s")
    return SetEvaluation(items, list(range(seeds)), sampling.mode, results, gen, ver)


def run_eval_evaluator(
    path: str | Path,
    fmt: EvalFormat,
    *,
    config: EnginesConfig,
    limit: int | None = None,
    seeds: int = 5,
    sampling: RubricSampling = DEFAULT_SAMPLING,
    source: str = "engines config",
    log: Log = _quiet,
) -> dict:
    """Evaluate the evaluator on a labelled file; returns the metrics dict (written by the caller). ``source``:
    where ``config`` came from, for the models line (``preset tiny``, ``engines file PATH``)."""
    if seeds < 1:
        raise ValueError("seeds must be >= 1")
    _rows, items, relevance = eval_items(path, fmt, limit)  # validates the whole file before any model work
    log(engines_line(config, source, ("generator", "verifier")))
    log(f"{len(items)} {fmt} examples from {path}; mode {sampling.mode}, {seeds} seed(s)")
    pool = EnginePool(log)  # roles with equal configs share one engine; bundled models prepared first
    try:
        engines = pool.open_roles(config, ("generator", "verifier"))
        t0 = time.perf_counter()
        evaluation = _evaluate(engines, items, seeds, sampling, log)
        wall = time.perf_counter() - t0
    finally:
        pool.close()
    metrics = evaluator_metrics(fmt, evaluation, relevance)
    metrics["input"] = str(path)
    metrics["limit"] = limit
    metrics["models"] = {"generator": engines["generator"].model_name, "verifier": engines["verifier"].model_name}
    metrics["costs"] = stage_costs(evaluation, pool.startup_s)
    metrics["seconds"] = wall
    return metrics


def set_records(rows: Sequence, evaluation: SetEvaluation) -> list[dict]:
    """One JSON-ready record per input set: every seed's rubric, verdict matrix, scores, R_disc, unscorable parts."""
    records = []
    for row, results in zip(rows, evaluation.results):
        seeds = [rubric_record(r) for r in results]
        per_response = [
            [r.scores[k] for r in results if r.scores is not None and r.scores[k] is not UNSCORABLE]
            for k in range(len(row.responses))
        ]
        records.append(
            {
                "id": row.id,
                "prompt": row.prompt,
                "responses": list(row.responses),
                "mean_scores": [mean_or_none(s) for s in per_response],
                "seeds": seeds,
            }
        )
    return records


def run_score(
    path: str | Path,
    *,
    config: EnginesConfig,
    seeds: int = 1,
    sampling: RubricSampling = DEFAULT_SAMPLING,
    source: str = "engines config",
    log: Log = _quiet,
) -> tuple[list[dict], dict]:
    """Score response sets ({"id","prompt","responses"}); returns the records and the stage costs. ``source``: as
    ``run_eval_evaluator``'s."""
    if seeds < 1:
        raise ValueError("seeds must be >= 1")
    rows = load(path, "sets")  # validates the whole file before any model work
    items = [EvalItem(r.prompt, tuple(r.responses)) for r in rows]
    log(engines_line(config, source, ("generator", "verifier")))
    log(f"{len(items)} sets from {path}; mode {sampling.mode}, {seeds} seed(s)")
    pool = EnginePool(log)  # roles with equal configs share one engine; bundled models prepared first
    try:
        engines = pool.open_roles(config, ("generator", "verifier"))
        evaluation = _evaluate(engines, items, seeds, sampling, log)
    finally:
        pool.close()
    return set_records(rows, evaluation), stage_costs(evaluation, pool.startup_s)
