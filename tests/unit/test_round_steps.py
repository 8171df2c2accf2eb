"""Round steps as pure logic: a scripted fake engine stands in for the model (unit tests only; the real model
runs in test_round_*.py)."""

from __future__ import annotations

import pytest

from dr_core.config import preset
from dr_core.runs import round_steps
from dr_core.store.rows import RubricRow, VerdictRow
from tests.support.fakes import round_engine

RUBRIC = [{"criterion": "Mentions detail", "weight": 3}, {"criterion": "Says answer", "weight": 1}]


def test_spread_ranks():
    assert round_steps.spread_ranks(11, 4) == [1, 4, 8, 11]
    assert round_steps.spread_ranks(7, 7) == list(range(1, 8))
    assert round_steps.spread_ranks(2, 2) == [1, 2]


def test_select_inputs_filters_and_spreads():
    cfg = preset("tiny", n_prompts=3, n_anchor=3)
    prompts, anchors = round_steps.select_inputs(cfg)
    assert len(prompts) == 3 and len(anchors) == 9
    assert sorted({a["rank"] for a in anchors}) == [1, 6, 11]


def test_round_steps_shapes_and_scores():
    cfg = preset("tiny", n_prompts=2, k=4, n_anchor=3, rubric_rollouts=2)
    prompts, anchors = round_steps.select_inputs(cfg)
    eng = round_engine(RUBRIC)
    samples = round_steps.sample_sets(eng, prompts, cfg, "policy@0", "measure")
    assert len(samples) == 8 and {s["set_id"] for s in samples} == {0, 1}
    rubrics, _ = round_steps.generate_rubric_rows(eng, prompts, samples, cfg, "gen@0", "measure")
    assert len(rubrics) == 2 * 2 * 2 and all(r["error"] is None for r in rubrics)
    verdicts, _ = round_steps.verify_sets(eng, prompts, samples, anchors, rubrics, "ver", "measure")
    assert len(verdicts) == 2 * 2 * 2 * (4 + 3)
    scores, rewards = round_steps.score_sets(rubrics, verdicts, "measure")
    c_scores = {(s["set_id"], s["rollout"], s["response"]): s["score"] for s in scores if s["target"] == "C"}
    # odd responses mention "detail": weight 3 of 4; "Says answer" is yes for all (1 of 4)
    assert c_scores[(0, 0, 1)] == pytest.approx(1.0) and c_scores[(0, 0, 0)] == pytest.approx(0.25)
    r = rewards[0]
    assert r["r_disc"] == pytest.approx(3 * 0.25 / 4)  # the detail item splits 2/2, the other is unanimous
    assert r["adv_disc"] == pytest.approx(0.0)  # two identical rollouts: zero advantage
    summary = round_steps.summarise(prompts, samples, rubrics, verdicts, scores, rewards, None)
    assert summary.verdicts == len(verdicts) and summary.unscorable_verdicts == 0
    assert summary.rubric_rollouts == 4


def test_unusable_rubric_and_missing_verdicts_are_unscorable():
    rubrics = [
        RubricRow("measure", 0, "g", 0, None, None, None, "truncated_json"),
        RubricRow("measure", 0, "g", 1, 0, "A", 2, None),
    ]
    verdicts = [VerdictRow("measure", 0, 1, 0, "C", 0, True, "v"), VerdictRow("measure", 0, 1, 0, "C", 1, None, "v")]
    scores, rewards = round_steps.score_sets(rubrics, verdicts, "measure")
    by = {(r["rollout"]): r for r in rewards}
    assert by[0]["r_disc"] is None and by[0]["r_anchor"] is None  # no rubric: unscorable, not 0
    assert by[1]["r_disc"] is None  # a missing verdict makes the set's R_disc unscorable
    s = {(x["rollout"], x["response"]): x["score"] for x in scores}
    assert s[(1, 0)] == 1.0 and s[(1, 1)] is None
    assert all(r["advantage"] is None for r in rewards)


def test_anchor_gaps_in_rank_order():
    rows = [
        {"set_id": 0, "rollout": 0, "target": "anchor", "response": rank, "score": sc}
        for rank, sc in [(11, 0.0), (1, 1.0), (6, 0.5)]
    ]
    assert round_steps.anchor_gaps(rows) == [pytest.approx((0.5 + 1.0 + 0.5) / 3)]
