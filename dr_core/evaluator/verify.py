"""Verification, batch first: a yes/no verdict for every (prompt, response, criterion) check in one engine call.

By structured choice ("choice" mode): a verdict that is not a clean yes/no, was cut, or whose prompt did not fit is
``UNSCORABLE`` (None), never 0. The "calibrated" and "balanced" modes read log-odds instead
(``dr_core.evaluator.calibrate``).

Cost (``send_order``): identical checks are sent once, and checks of one (prompt, response) are sent next to each
other with the criterion last (``prompts.verifier_messages``), so vLLM's prefix cache computes their shared prefix
once. vLLM caches a block when it is allocated, so checks scheduled in the same step as the first of their group
already hit it (sending one "leader" per prefix first buys nothing, measured). What is left above prefilling only
the unique tokens is block granularity: every check recomputes its prefix past the last full KV block, half a block
on average, so the engine's block size matters (``EngineConfig.block_size``: 32 on CPU instead of vLLM's 128).
Measured by infra/benchmarks/bench_verify.py (docs/benchmarks/evaluator.md, "Verification throughput").
"""

from __future__ import annotations

import time
from typing import Sequence

from dr_core.config import VerdictMode, VerifierPrompt
from dr_core.constants import UNSCORABLE
from dr_core.engines.base import Engine
from dr_core.evaluator.calibrate import (
    LOGODDS_MODES,
    ask_logodds,
    calibrated_verdict,
    first_logodds,
    verdict_bias,
    verdict_mode_of,
    verifier_prompt_of,
)
from dr_core.evaluator.endpoints import endpoint_counts, endpoint_delta
from dr_core.evaluator.items import DONE_REASONS, Check, StageStats
from dr_core.evaluator.verdict_cache import VerdictCache, verifier_identity
from dr_core.rubric import prompts


def parse_verdict(text: str, finish_reason: str) -> int | None:
    """1 for a clean yes, 0 for a clean no, ``UNSCORABLE`` for anything else (cut, empty, other words)."""
    if finish_reason not in DONE_REASONS:
        return UNSCORABLE
    word = text.strip().lower().rstrip(".")
    return 1 if word == "yes" else 0 if word == "no" else UNSCORABLE


def send_order(checks: Sequence[Check]) -> list[Check]:
    """The requests ``verify`` sends, in the order sent: each distinct check once (first occurrence), grouped by
    (prompt, response) so that checks sharing a prefix are adjacent; within a group, in input order."""
    unique = list(dict.fromkeys(checks))
    unique.sort(key=lambda c: (c.prompt, c.response))
    return unique


def verify(
    engine: Engine,
    checks: Sequence[Check],
    *,
    max_tokens: int = 4,
    structured: bool = True,
    verdict_mode: VerdictMode | None = None,
    verifier_prompt: VerifierPrompt | None = None,
    cache: VerdictCache | None = None,
) -> tuple[list[int | None], StageStats]:
    """Verdicts for every check (1 yes, 0 no, None unscorable), in input order, from one engine call.

    Greedy decoding. Identical checks are asked once; the rest are grouped by (prompt, response) so that checks
    sharing a prefix are adjacent in the batch (``send_order``). The order changes no request: every check is
    sent with its own full prompt, and the verdicts come back in the order of ``checks``.

    verifier_prompt: None reads the engine's ``config.verifier_prompt`` ("system" or "plain" wording).
    verdict_mode: None reads the engine's ``config.verdict_mode``. "balanced" is "calibrated" with the threshold
    from the bundled probe (``verdict_bias(mode="balanced")``). "calibrated" asks for the first token's top
    log-probabilities without the choice constraint (one token) and compares its yes-vs-no log-odds with the
    engine's bias: ``config.verdict_bias`` when set, else the content-free estimate (``verdict_bias``; its first
    computation is counted in the stats). It falls back
    to "choice" when the engine does not return log-probabilities (``supports_logprobs`` False, or none came
    back, or the content-free checks gave none) or when ``structured`` is False.

    The stats of an engine with endpoints (``endpoint_stats``) carry what its endpoints did during the call:
    ``endpoints``, ``endpoints_down``, ``requests_moved`` (dr_core/evaluator/endpoints.py).

    cache: verdicts held from earlier calls are not asked again, and the new ones are held
    (``dr_core.evaluator.verdict_cache``, keyed by the engine and the procedure): the same verdicts either way.
    """
    stats = StageStats()
    unique = send_order(checks)
    if not unique:
        return [], stats
    before = endpoint_counts(engine)
    mode = verdict_mode or verdict_mode_of(engine)
    style = verifier_prompt or verifier_prompt_of(engine)
    if mode not in ("choice", *LOGODDS_MODES):
        raise ValueError(f"verdict_mode must be 'choice', 'calibrated' or 'balanced', got {mode!r}")
    identity = verifier_identity(engine, mode, style, max_tokens, structured) if cache is not None else ""
    known = cache.lookup(identity, unique) if cache is not None else {}
    ask = [c for c in unique if c not in known]
    verdict: dict[Check, int | None] | None = None
    if ask and mode in LOGODDS_MODES and structured and getattr(engine, "supports_logprobs", False):
        verdict = _calibrated_verdicts(engine, ask, stats, style, mode)
    if verdict is None:
        verdict = _chosen_verdicts(engine, ask, stats, style, max_tokens, structured) if ask else {}
    if cache is not None:
        cache.store(identity, verdict)
    verdict.update(known)
    stats.add_endpoints(endpoint_delta(before, endpoint_counts(engine)))
    return [verdict[c] for c in checks], stats


def _calibrated_verdicts(
    engine: Engine, unique: list[Check], stats: StageStats, style: VerifierPrompt, mode: VerdictMode
) -> dict[Check, int | None] | None:
    """Each check's verdict from its yes-vs-no log-odds against the engine's bias; None (the caller falls back to
    choices) when there is no bias or no log-probabilities came back."""
    fixed = getattr(getattr(engine, "config", None), "verdict_bias", None)
    bias = fixed if fixed is not None else verdict_bias(engine, stats, style, mode)
    if bias is None:
        return None
    start = time.perf_counter()
    outs = ask_logodds(engine, unique, style)
    stats.add(outs, time.perf_counter() - start)
    if not any(o.top_logprobs is not None for o in outs):
        return None
    return {c: calibrated_verdict(first_logodds(o), bias) for c, o in zip(unique, outs)}


def _chosen_verdicts(
    engine: Engine, unique: list[Check], stats: StageStats, style: VerifierPrompt, max_tokens: int, structured: bool
) -> dict[Check, int | None]:
    """Each check's verdict from the engine's yes/no answer (a structured choice unless ``structured`` is False)."""
    start = time.perf_counter()
    outs = engine.chat(
        [prompts.verifier_messages(c.prompt, c.response, c.criterion, style=style) for c in unique],
        n=1,
        temperature=0.0,
        max_tokens=max_tokens,
        choices=list(prompts.VERDICT_CHOICES) if structured else None,
    )
    stats.add(outs, time.perf_counter() - start)
    return {c: parse_verdict(o.texts[0], o.finish_reasons[0]) for c, o in zip(unique, outs)}
