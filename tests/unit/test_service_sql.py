"""The reward service's named query, ``why_reward``, on rows written by the service's own commit (fake engines,
a real local store, DuckDB over its files)."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from dr_core.service.answers import answer_batch
from dr_core.service.ledger import Ledger
from dr_core.service.scoring import Member, SetJob, score_jobs
from dr_core.store import sql
from dr_core.store.artifacts import Store
from tests.support import fakes

RUBRIC = json.dumps(
    {
        "rubrics": [
            {"criterion": "Names a fruit.", "weight": 3},
            {"criterion": "Is one word.", "weight": 1},
            {"criterion": "Is polite.", "weight": 2},
        ]
    }
)


def _now():
    return datetime.now(timezone.utc)


def test_why_reward_lists_items_verdicts_and_scores_of_one_request(tmp_path):
    store = Store.from_url(str(tmp_path / "st"))
    led = Ledger(store, "service").open()
    eng = fakes.FakeEngine(RUBRIC, verdict=fakes.hashed_verdict)
    responses = ("apple", "a grey rock, sorry", "pear please")
    group = SetJob(
        "group:g",
        "Name a fruit.",
        responses,
        2,
        0,
        [Member(f"g-{k}", "rewards", "fp", _now(), k, "g") for k in range(3)],
    )
    whole = SetJob("set:s", "Say hi.", ("hi", "hello there"), 1, 0, [Member("s-1", "score-set", "fp", _now())])
    scored = score_jobs(eng, eng, [group, whole])
    answers = answer_batch("service", scored)
    led.commit(scored, answers, "gen", "ver")
    con = store.connect()

    rows = sql.run(con, "why_reward", {"request_id": "g-1"}).to_pylist()
    assert len(rows) == 2 * 3  # two rollouts x three items, for response 1 only
    assert {r["response"] for r in rows} == {responses[1]} and {r["response_idx"] for r in rows} == {1}
    assert {r["prompt"] for r in rows} == {"Name a fruit."} and {r["verifier"] for r in rows} == {"ver"}
    for rollout in (0, 1):
        mine = [r for r in rows if r["rollout"] == rollout]
        expect = sum(r["weight"] * r["verdict"] for r in mine) / sum(r["weight"] for r in mine)
        assert [r["score"] for r in mine] == pytest.approx([expect] * 3)
        assert all(r["verdict"] == bool(fakes.verdict_bit(r["criterion"], responses[1])) for r in mine)
    assert rows[0]["reward"] == pytest.approx(answers["g-1"]["reward"])
    assert rows[0]["reward"] == pytest.approx(sum({r["rollout"]: r["score"] for r in rows}.values()) / 2)

    whole_rows = sql.run(con, "why_reward", {"request_id": "s-1"}).to_pylist()
    assert {r["response_idx"] for r in whole_rows} == {0, 1} and {r["reward"] for r in whole_rows} == {None}
    assert sql.run(con, "why_reward", {"request_id": "nobody"}).num_rows == 0
    assert sql.run(con, "why_reward", {"request_id": "g-1", "run_id": "other"}).num_rows == 0
