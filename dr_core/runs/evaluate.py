"""What ``dr score`` and ``dr eval-evaluator`` do, without the CLI: load and validate the whole input file (a bad
line stops the run before any model work), build the engines, run the evaluator, compute metrics, write the output
atomically (temp file + rename, only at the end).

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
from collections import Counter
from pathlib import Path
from typing import Callable, Literal, Sequence

from dr_core.store import atomic
from dr_core.store.atomic import json_text
from dr_core.config import EngineConfig, EnginesConfig
from dr_core.datasets import load
from dr_core.engines import Engine, make_engine
from dr_core.evaluator.evaluate import EvalItem, Mode, SetEvaluation, evaluate_sets
from dr_core.scoring.metrics import avg_at_k, is_strict_top1, ndcg, pairwise_accuracy
from dr_core.rubric.schema import UNSCORABLE

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


# ----------------------------------------------------------------------------------------------------- engines


def _bundled_model(cfg: EngineConfig) -> str | None:
    from dr_core.model import is_bundled

    return cfg.model if cfg.kind == "vllm" and is_bundled(cfg.model) else None


def open_engines(config: EnginesConfig, roles: Sequence[str], log: Log = _quiet) -> tuple[dict[str, Engine], float]:
    """One engine per distinct config among ``roles`` (roles with equal configs share one), and start-up seconds.
    Prepares the bundled models the roles name first."""
    start = time.perf_counter()
    from dr_core.model import prepare

    for name in dict.fromkeys(filter(None, (_bundled_model(getattr(config, r)) for r in roles))):
        prepare(name, log)
    built: dict[EngineConfig, Engine] = {}
    engines = {}
    for role in roles:
        cfg = getattr(config, role)
        if cfg not in built:
            log(f"starting {cfg.kind} engine for {role} (model {cfg.model})")
            built[cfg] = make_engine(cfg)
        engines[role] = built[cfg]
    return engines, time.perf_counter() - start


def close_engines(engines: dict[str, Engine]) -> None:
    for e in {id(e): e for e in engines.values()}.values():
        e.close()


# ----------------------------------------------------------------------------------------------------- metrics


def _complete(scores) -> bool:
    return scores is not None and all(s is not UNSCORABLE for s in scores)


def evaluator_metrics(fmt: EvalFormat, evaluation: SetEvaluation, relevance: Sequence[Sequence[float]]) -> dict:
    """The metrics of one evaluator run (module docstring), per seed and AVG@N. Pure."""
    n_items = len(evaluation.items)
    acc, ties, unscorable, ndcgs = [], [], [], []
    for s in range(len(evaluation.seeds)):
        per_set = [evaluation.results[i][s] for i in range(n_items)]
        score_lists = [
            r.scores if r.scores is not None else [UNSCORABLE] * len(evaluation.items[i].candidates)
            for i, r in enumerate(per_set)
        ]
        if fmt == "pairwise":
            acc.append(pairwise_accuracy([sc[0] for sc in score_lists], [sc[1] for sc in score_lists]))
        else:
            acc.append(sum(is_strict_top1(sc, 0) for sc in score_lists) / n_items)
        tie = 0
        for sc in score_lists:
            others = [x for x in sc[1:] if x is not UNSCORABLE]
            if sc[0] is not UNSCORABLE and others and sc[0] == max(others):
                tie += 1
        ties.append(tie / n_items)
        unscorable.append(sum(not _complete(r.scores) for r in per_set) / n_items)
        if fmt != "pairwise":
            ndcgs.append(sum(ndcg(sc, rel) for sc, rel in zip(score_lists, relevance)) / n_items)
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
        "rubric_items_mean": _mean([len(r.generation.rubric.items) for r in flat if r.generation.rubric]),
        "verdicts": len(verdicts),
        "verdicts_unscorable": sum(v is UNSCORABLE for v in verdicts),
        "verdict_yes_rate": _mean([v for v in verdicts if v is not UNSCORABLE]),
        "mean_r_disc": _mean([r.r_disc for r in flat if r.r_disc is not UNSCORABLE]),
    }
    if fmt != "pairwise":
        metrics["ndcg"] = avg_at_k(ndcgs)
        metrics["ndcg_per_seed"] = ndcgs
    return metrics


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def stage_costs(evaluation: SetEvaluation, startup_s: float) -> dict:
    g, v = evaluation.generation, evaluation.verification
    return {
        "startup": {"seconds": startup_s},
        "generation": g.as_dict(),
        "verification": v.as_dict()
        | {"verdicts_per_s": (v.requests / v.seconds) if v.seconds else None},
    }


# ----------------------------------------------------------------------------------------------------- runs


def run_eval_evaluator(
    path: str | Path,
    fmt: EvalFormat,
    *,
    config: EnginesConfig,
    limit: int | None = None,
    seeds: int = 5,
    mode: Mode = "dynamic",
    temperature: float = 0.7,
    max_tokens: int = 512,
    log: Log = _quiet,
) -> dict:
    """Evaluate the evaluator on a labelled file; returns the metrics dict (written by the caller)."""
    if seeds < 1:
        raise ValueError("seeds must be >= 1")
    _rows, items, relevance = eval_items(path, fmt, limit)  # validates the whole file before any model work
    log(f"{len(items)} {fmt} examples from {path}; mode {mode}, {seeds} seed(s)")
    engines, startup = open_engines(config, ("generator", "verifier"), log)
    try:
        log(f"generating {len(items) * seeds} rubrics")
        t0 = time.perf_counter()
        evaluation = evaluate_sets(
            engines["generator"], engines["verifier"], items, list(range(seeds)),
            mode=mode, temperature=temperature, max_tokens=max_tokens,
        )
        wall = time.perf_counter() - t0
        log(
            f"generation {evaluation.generation.seconds:.1f} s, verification of "
            f"{evaluation.verification.requests} checks {evaluation.verification.seconds:.1f} s"
        )
    finally:
        close_engines(engines)
    metrics = evaluator_metrics(fmt, evaluation, relevance)
    metrics["input"] = str(path)
    metrics["limit"] = limit
    metrics["models"] = {"generator": engines["generator"].model_name, "verifier": engines["verifier"].model_name}
    metrics["costs"] = stage_costs(evaluation, startup)
    metrics["seconds"] = wall
    return metrics


def set_records(rows: Sequence, evaluation: SetEvaluation) -> list[dict]:
    """One JSON-ready record per input set: every seed's rubric, verdict matrix, scores, R_disc, unscorable parts."""
    records = []
    for row, results in zip(rows, evaluation.results):
        seeds = []
        for r in results:
            g = r.generation
            seeds.append(
                {
                    "seed": g.seed,
                    "shown_order": list(g.permutation),
                    "rubric": (
                        [{"criterion": c, "weight": w} for c, w in zip(g.rubric.criteria, g.rubric.weights)]
                        if g.rubric else None
                    ),
                    "rubric_text": g.text,
                    "rubric_error": g.error,
                    "rubric_items_dropped": g.dropped,
                    "verdicts": r.verdicts,
                    "scores": r.scores,
                    "r_disc": r.r_disc,
                    "unscorable": r.unscorable,
                }
            )
        per_response = [
            [r.scores[k] for r in results if r.scores is not None and r.scores[k] is not UNSCORABLE]
            for k in range(len(row.responses))
        ]
        records.append(
            {
                "id": row.id,
                "prompt": row.prompt,
                "responses": list(row.responses),
                "mean_scores": [_mean(s) for s in per_response],
                "seeds": seeds,
            }
        )
    return records


def run_score(
    path: str | Path,
    *,
    config: EnginesConfig,
    seeds: int = 1,
    mode: Mode = "dynamic",
    temperature: float = 0.7,
    max_tokens: int = 512,
    log: Log = _quiet,
) -> tuple[list[dict], dict]:
    """Score response sets ({"id","prompt","responses"}); returns the records and the stage costs."""
    if seeds < 1:
        raise ValueError("seeds must be >= 1")
    rows = load(path, "sets")  # validates the whole file before any model work
    items = [EvalItem(r.prompt, tuple(r.responses)) for r in rows]
    log(f"{len(items)} sets from {path}; mode {mode}, {seeds} seed(s)")
    engines, startup = open_engines(config, ("generator", "verifier"), log)
    try:
        evaluation = evaluate_sets(
            engines["generator"], engines["verifier"], items, list(range(seeds)),
            mode=mode, temperature=temperature, max_tokens=max_tokens,
        )
    finally:
        close_engines(engines)
    return set_records(rows, evaluation), stage_costs(evaluation, startup)


# ----------------------------------------------------------------------------------------------------- output


def write_atomic(path: str | Path, text: str) -> None:
    """Write ``text`` atomically (``dr_core.store.atomic``): readers never see half a file."""
    atomic.write_atomic(path, text)


def jsonl_text(records: Sequence[dict]) -> str:
    return "".join(json_text(r, indent=None) for r in records)


def write_json_atomic(path: str | Path, obj) -> None:
    write_atomic(path, json_text(obj))


def write_jsonl_atomic(path: str | Path, records: Sequence[dict]) -> None:
    write_atomic(path, jsonl_text(records))
