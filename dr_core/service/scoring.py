"""One batch of response sets through the evaluator, and what it gives back: the answers sent to clients and the
lineage rows written to the store (the pipeline's tables, stage ``service``).

A batch is any number of ``SetJob``s from any routes. Generation is one engine call per distinct (rollouts, seed)
among them, verification one call for the whole batch (``dr_core.evaluator.score.score_rubrics``), so vLLM's
continuous batching and prefix cache see every concurrent request at once. The order the generator sees a set's
responses depends on its seed only (``order_keys``), never on the batch it shared; the sampled text does depend on
the batch (one engine seed per call), as with any batched sampling.

Pure apart from the engine calls.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Sequence

from dr_core.constants import UNSCORABLE
from dr_core.engines.base import Engine
from dr_core.evaluator.generate import generate_rubrics
from dr_core.evaluator.items import EvalItem, ScoredRubric, StageStats
from dr_core.evaluator.score import rubric_record, score_rubrics
from dr_core.scoring.metrics import mean_or_none
from dr_core.service.requests import prompt_id

STAGE = "service"
ROUND = 0


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
) -> list[ScoredSet]:
    """Score every job: rubrics (one generation call per distinct (rollouts, seed)), then one verification call.
    ``stats``: filled with the cost of each stage ("generation", "verification")."""
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
            temperature=temperature,
            max_tokens=max_tokens,
            structured=True,
            order_keys=[0] * len(idx),
        )
        gen_stats.merge(st)
        for i, g in zip(idx, gens):
            rubrics[i] = g
    results, ver_stats = score_rubrics(verifier, items, rubrics)
    if stats is not None:
        stats.update(generation=gen_stats, verification=ver_stats)
    return [ScoredSet(j, r) for j, r in zip(jobs, results)]


def rubric_id(run_id: str, set_id: int) -> str:
    """Names a set's rubrics in answers; ``dr query why_reward`` finds them from the request id."""
    return f"{run_id}:{set_id}"


def set_answer(run_id: str, s: ScoredSet, request_id: str) -> dict:
    """The ``/v1/score-set`` answer: every rubric with its verdict matrix, Eq. 12 scores and R_disc."""
    return {
        "request_id": request_id,
        "set_id": s.job.set_id,
        "rubric_id": rubric_id(run_id, s.job.set_id),
        "rubrics": [{"rollout": i, **rubric_record(r)} for i, r in enumerate(s.rubrics)],
        "scores": s.mean_scores,
        "r_disc": mean_or_none([r.r_disc for r in s.rubrics if r.r_disc is not UNSCORABLE]),
        "unscorable": s.unscorable(),
    }


def member_answer(run_id: str, s: ScoredSet, m: Member) -> dict:
    """The ``/v1/rewards`` answer of one member: its reward (None when unscorable, with why) and the rubric id."""
    score = s.mean_scores[m.index]
    why = [] if score is not UNSCORABLE else (s.unscorable() or ["no rubric could score this response"])
    return {
        "request_id": m.request_id,
        "group_id": m.group_id,
        "reward": score,
        "rubric_id": rubric_id(run_id, s.job.set_id),
        "set_id": s.job.set_id,
        "unscorable": why,
    }


def answers(run_id: str, s: ScoredSet) -> dict[str, dict]:
    """{request id: answer} for every member of a scored set."""
    out = {}
    for m in s.job.members:
        out[m.request_id] = set_answer(run_id, s, m.request_id) if m.index is None else member_answer(run_id, s, m)
    return out


def lineage_rows(run_id: str, scored: Sequence[ScoredSet], generator: str, verifier: str) -> dict[str, list[dict]]:
    """Rows of samples, rubrics, verdicts, scores and rewards for a batch (the pipeline's tables, stage
    ``service``; set_id from the set key). The ``requests`` rows come from ``request_rows``."""
    base = {"run_id": run_id, "round": ROUND, "stage": STAGE}
    rows: dict[str, list[dict]] = {t: [] for t in ("samples", "rubrics", "verdicts", "scores", "rewards")}
    for s in scored:
        sid = s.job.set_id
        pid = prompt_id(s.job.prompt)
        for k, text in enumerate(s.job.responses):
            rows["samples"].append(
                {
                    **base,
                    "set_id": sid,
                    "prompt_id": pid,
                    "response_idx": k,
                    "policy_ckpt": "external",
                    "response": text,
                }
            )
        for rollout, r in enumerate(s.rubrics):
            g = r.generation
            if g.rubric is None:
                rows["rubrics"].append(
                    {
                        **base,
                        "set_id": sid,
                        "generator_ckpt": generator,
                        "rollout": rollout,
                        "item": None,
                        "criterion": None,
                        "weight": None,
                        "error": g.error,
                    }
                )
            else:
                for m, (c, w) in enumerate(zip(g.rubric.criteria, g.rubric.weights)):
                    rows["rubrics"].append(
                        {
                            **base,
                            "set_id": sid,
                            "generator_ckpt": generator,
                            "rollout": rollout,
                            "item": m,
                            "criterion": c,
                            "weight": w,
                            "error": None,
                        }
                    )
                for k, verdict_row in enumerate(r.verdicts or []):
                    for m, v in enumerate(verdict_row):
                        rows["verdicts"].append(
                            {
                                **base,
                                "set_id": sid,
                                "rollout": rollout,
                                "item": m,
                                "target": "C",
                                "response": k,
                                "verdict": None if v is UNSCORABLE else bool(v),
                                "verifier": verifier,
                            }
                        )
            for k in range(len(s.job.responses)):
                score = r.scores[k] if r.scores is not None else UNSCORABLE
                rows["scores"].append(
                    {**base, "set_id": sid, "rollout": rollout, "target": "C", "response": k, "score": score}
                )
            rows["rewards"].append({**base, "set_id": sid, "rollout": rollout, "r_disc": r.r_disc})
    return rows


def request_rows(run_id: str, batch: str, scored: Sequence[ScoredSet], answered: dict[str, dict]) -> list[dict]:
    """One ``requests`` row per member: the commit record of the batch (written last)."""
    rows = []
    for s in scored:
        for m in s.job.members:
            ans = answered[m.request_id]
            rows.append(
                {
                    "run_id": run_id,
                    "round": ROUND,
                    "stage": STAGE,
                    "set_id": s.job.set_id,
                    "batch": batch,
                    "request_id": m.request_id,
                    "route": m.route,
                    "group_id": m.group_id,
                    "response_idx": m.index,
                    "reward": ans.get("reward") if m.index is not None else None,
                    "rubric_id": ans["rubric_id"],
                    "received_at": m.received_at,
                    "prompt": s.job.prompt,
                    "fingerprint": m.fingerprint,
                    "answer_json": json.dumps(ans, ensure_ascii=False),
                }
            )
    return rows
