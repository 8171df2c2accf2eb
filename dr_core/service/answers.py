"""Stage "answer": what each request gets back, made from its scored set. Two moments:

- in the worker (``batcher``), after scoring and before the commit: ``answer_batch`` makes every request's answer
  ({request id: ``SetAnswer`` or ``MemberAnswer``}, JSON bodies with their keys declared); the commit (``ledger``)
  stores them as given (the ``requests`` rows are the commit record, and a retry is replayed from them), then the
  worker hands them to the waiting requests;
- in the routes' handlers (``intake``, ``app``), after the worker: ``openrlhf_answer`` turns the members' answers
  into OpenRLHF's ``/get_reward`` body (``fill_unscorable``), ``verify_answer`` into NeMo Gym's ``/verify`` body, and
  ``unscorable_count`` counts the unscorable responses for the metrics.

``fill_unscorable`` is also the trainer-side clients' (``clients``): this module imports nothing but the standard
library, so a trainer machine that loads the clients loads it too and nothing else of the project.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence, TypedDict

if TYPE_CHECKING:
    from dr_core.service.scoring import Member, ScoredSet


class SetAnswer(TypedDict):
    """``/v1/score-set``: each rubric rollout's record (criteria, verdict matrix, scores), the mean Eq. 12 score per
    response (None: unscorable), R_disc, and why any part was unscorable."""

    request_id: str
    set_id: int
    rubric_id: str
    rubrics: list[dict[str, Any]]
    scores: list[float | None]
    r_disc: float | None
    unscorable: list[str]


class MemberAnswer(TypedDict):
    """``/v1/rewards`` (and each member behind ``/get_reward`` and ``/verify``): one response's reward, None when
    unscorable with why."""

    request_id: str
    group_id: str | None
    reward: float | None
    rubric_id: str
    set_id: int
    unscorable: list[str]


class OpenRLHFAnswer(TypedDict):
    """``/get_reward``: a number per query (an unscorable one filled, and flagged in ``extra_logs.dr_unscorable``)."""

    rewards: list[float]
    scores: list[float]
    extra_logs: dict[str, list[float]]
    rubric_ids: list[str]
    request_ids: list[str]


def rubric_id(run_id: str, set_id: int) -> str:
    """Names a set's rubrics in answers; ``dr query why_reward`` finds them from the request id."""
    return f"{run_id}:{set_id}"


def set_answer(run_id: str, s: ScoredSet, request_id: str) -> SetAnswer:
    """The ``/v1/score-set`` answer: every rubric with its verdict matrix, Eq. 12 scores and R_disc."""
    return SetAnswer(
        request_id=request_id,
        set_id=s.job.set_id,
        rubric_id=rubric_id(run_id, s.job.set_id),
        rubrics=[{"rollout": i, **record} for i, record in enumerate(s.rubric_records())],
        scores=s.mean_scores,
        r_disc=s.r_disc,
        unscorable=s.unscorable(),
    )


def member_answer(run_id: str, s: ScoredSet, m: Member) -> MemberAnswer:
    """The ``/v1/rewards`` answer of one member: its reward (None when unscorable, with why) and the rubric id."""
    score = s.mean_scores[m.index]  # None: no rollout could score it
    why = [] if score is not None else (s.unscorable() or ["no rubric could score this response"])
    return MemberAnswer(
        request_id=m.request_id,
        group_id=m.group_id,
        reward=score,
        rubric_id=rubric_id(run_id, s.job.set_id),
        set_id=s.job.set_id,
        unscorable=why,
    )


def answer_batch(run_id: str, scored: Sequence[ScoredSet]) -> dict[str, SetAnswer | MemberAnswer]:
    """{request id: answer} for every member of every scored set of a batch."""
    out: dict[str, SetAnswer | MemberAnswer] = {}
    for s in scored:
        for m in s.job.members:
            out[m.request_id] = set_answer(run_id, s, m.request_id) if m.index is None else member_answer(run_id, s, m)
    return out


def fill_unscorable(rewards: Sequence[float | None]) -> tuple[list[float], list[float]]:
    """For trainers that need a number for every member (OpenRLHF, verl): an unscorable reward becomes its set's
    mean scorable reward (no advantage after group normalisation; 0.0 when none is scorable). Returns the filled
    rewards and a 1.0/0.0 unscorable flag per member, so the fill is never hidden."""
    mates = [r for r in rewards if r is not None]
    fill = sum(mates) / len(mates) if mates else 0.0
    return [fill if r is None else r for r in rewards], [float(r is None) for r in rewards]


def openrlhf_answer(answers: Sequence[MemberAnswer]) -> OpenRLHFAnswer:
    """The ``/get_reward`` body from its members' answers, in query order. OpenRLHF needs a number: an unscorable
    member gets its set's mean (``fill_unscorable``) and is flagged in ``extra_logs.dr_unscorable``."""
    rewards: list[float] = [0.0] * len(answers)
    unscorable: list[float] = [0.0] * len(answers)
    by_set: dict[int, list[int]] = {}
    for i, a in enumerate(answers):
        by_set.setdefault(a["set_id"], []).append(i)
    for idx in by_set.values():
        filled, flags = fill_unscorable([answers[i]["reward"] for i in idx])
        for i, f, u in zip(idx, filled, flags):
            rewards[i], unscorable[i] = f, u
    return OpenRLHFAnswer(
        rewards=rewards,
        scores=rewards,
        extra_logs={"dr_unscorable": unscorable, "dr_set_id": [float(a["set_id"] % 2**52) for a in answers]},
        rubric_ids=[a["rubric_id"] for a in answers],
        request_ids=[a["request_id"] for a in answers],
    )


def verify_answer(request: dict, answers: dict[str, MemberAnswer], request_id: str) -> dict:
    """NeMo Gym's ``BaseVerifyResponse`` for one rollout: the request as sent (``request``, its extra fields
    included), with its member answer's fields (``request_id``, ``group_id``, ``rubric_id``, ``set_id``,
    ``unscorable``) and ``reward`` set over it. ``answers``: every member's answer of its set. NeMo Gym needs a
    number: an unscorable rollout gets its set's mean (``fill_unscorable``), its ``unscorable`` list saying why."""
    mine = answers[request_id]
    mates = [a["reward"] for a in answers.values() if a["set_id"] == mine["set_id"]]
    reward = fill_unscorable([mine["reward"], *mates])[0][0]  # its own reward, or the mean of the scorable ones
    return {**request, **mine, "reward": reward}


def unscorable_count(answer: dict) -> float:
    """How many responses an answer of any route leaves without a reward (``dr_unscorable_total``); a ``/verify``
    reward filled with its set's mean counts (its ``unscorable`` says why)."""
    if "reward" in answer:
        return float(answer["reward"] is None or bool(answer.get("unscorable")))
    if "rewards" in answer:
        return sum(answer["extra_logs"]["dr_unscorable"])
    if "scores" in answer:
        return float(sum(s is None for s in answer["scores"]))
    return 0.0  # /seed_session's {}
