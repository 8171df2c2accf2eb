"""Stage "score": one batch of response sets through the evaluator. The worker (``batcher``) calls
``Scorer.score``; the scored sets go on to the answers (``answers``) and the commit (``ledger``), which read them.

A batch is any number of ``SetJob``s from any routes. Generation is one engine call per distinct (rollouts, seed)
among them, verification one call for the whole batch (``dr_core.evaluator.score.score_rubrics``), so vLLM's
continuous batching and prefix cache see every concurrent request at once. The order the generator sees a set's
responses depends on its seed only (``order_keys``), never on the batch it shared; the sampled text does depend on
the batch (one engine seed per call), as with any batched sampling.

Pure apart from the engine calls (and the cost of each call counted in the metrics).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Sequence

from dr_core.constants import UNSCORABLE
from dr_core.engines.base import Engine
from dr_core.evaluator.generate import generate_rubrics
from dr_core.evaluator.items import EvalItem, RubricSampling, ScoredRubric, StageStats
from dr_core.evaluator.score import rubric_record, score_rubrics
from dr_core.evaluator.verdict_cache import VerdictCache
from dr_core.scoring.metrics import mean_or_none

if TYPE_CHECKING:
    from dr_core.service.metrics import Metrics


@dataclass(frozen=True)
class Member:
    """Who asked for one response of a set (``index`` None: a whole-set request asked for all of them)."""

    request_id: str
    route: str
    fingerprint: str
    received_at: datetime
    index: int | None = None
    group_id: str | None = None


@dataclass
class SetJob:
    """One response set to score, and the requests waiting on it."""

    key: str  # what makes the set unique ("set:<request id>", "group:<group id>"): set_id is its hash
    prompt: str
    responses: tuple[str, ...]
    rollouts: int
    seed: int
    members: list[Member] = field(default_factory=list)

    @property
    def set_id(self) -> int:
        return set_id_of(self.key)


def set_id_of(key: str) -> int:
    """A stable non-negative int64 for a set key (a retry of the same request scores into the same set id)."""
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") >> 1


@dataclass(frozen=True)
class ScoredSet:
    job: SetJob
    rubrics: list[ScoredRubric]  # one per rollout

    @property
    def mean_scores(self) -> list[float | None]:
        """Each response's Eq. 12 score averaged over the rollouts that could score it (None: none could)."""
        return [
            mean_or_none([r.scores[k] for r in self.rubrics if r.scores is not None and r.scores[k] is not UNSCORABLE])
            for k in range(len(self.job.responses))
        ]

    @property
    def r_disc(self) -> float | None:
        """R_disc averaged over the rollouts that have one (None: none has)."""
        return mean_or_none([r.r_disc for r in self.rubrics if r.r_disc is not UNSCORABLE])

    def rubric_records(self) -> list[dict]:
        """Each rollout's rubric as JSON-ready data (``rubric_record``: generation, verdicts, scores, R_disc)."""
        return [rubric_record(r) for r in self.rubrics]

    def unscorable(self) -> list[str]:
        return [f"rollout {i}: {p}" for i, r in enumerate(self.rubrics) for p in r.unscorable]


def score_jobs(
    generator: Engine,
    verifier: Engine,
    jobs: Sequence[SetJob],
    *,
    temperature: float = 0.7,
    max_tokens: int = 512,
    stats: dict[str, StageStats] | None = None,
    cache: VerdictCache | None = None,
) -> list[ScoredSet]:
    """Score every job: rubrics (one generation call per distinct (rollouts, seed)), then one verification call.
    ``stats``: filled with the cost of each stage ("generation", "verification"). ``cache``: verdicts held from
    earlier batches are not asked again (``dr_core.evaluator.verdict_cache``)."""
    gen_stats = StageStats()
    items = [EvalItem(j.prompt, j.responses) for j in jobs]
    rubrics: list = [None] * len(jobs)
    by_seeds: dict[tuple[int, ...], list[int]] = {}
    for i, j in enumerate(jobs):
        by_seeds.setdefault(tuple(range(j.seed, j.seed + j.rollouts)), []).append(i)
    for seeds, idx in by_seeds.items():
        gens, st = generate_rubrics(
            generator,
            [items[i] for i in idx],
            list(seeds),
            RubricSampling(temperature=temperature, max_tokens=max_tokens, structured=True),
            order_keys=[0] * len(idx),
        )
        gen_stats.merge(st)
        for i, g in zip(idx, gens):
            rubrics[i] = g
    results, ver_stats = score_rubrics(verifier, items, rubrics, cache)
    if stats is not None:
        stats.update(generation=gen_stats, verification=ver_stats)
    return [ScoredSet(j, r) for j, r in zip(jobs, results)]


class Scorer:
    """The engines behind the worker: ``score(jobs)`` is ``score_jobs`` with the service's rubric sampling and verdict
    cache, each stage's seconds and tokens counted in ``metrics`` (failed batches too)."""

    def __init__(
        self,
        generator: Engine,
        verifier: Engine,
        *,
        temperature: float,
        max_tokens: int,
        metrics: Metrics,
        cache: VerdictCache | None = None,
    ):
        self.generator, self.verifier, self.metrics, self.cache = generator, verifier, metrics, cache
        self.temperature, self.max_tokens = temperature, max_tokens

    def score(self, jobs: Sequence[SetJob]) -> list[ScoredSet]:
        stats: dict[str, StageStats] = {}
        try:
            return score_jobs(
                self.generator,
                self.verifier,
                jobs,
                temperature=self.temperature,
                max_tokens=self.max_tokens,
                stats=stats,
                cache=self.cache,
            )
        finally:
            for stage, st in stats.items():
                self.metrics.inc("dr_stage_seconds_total", st.seconds, stage=stage)
                self.metrics.inc("dr_stage_tokens_total", st.prompt_tokens, stage=stage, kind="prompt")
                self.metrics.inc("dr_stage_tokens_total", st.completion_tokens, stage=stage, kind="completion")
