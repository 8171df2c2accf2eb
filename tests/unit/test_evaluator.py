"""The evaluator's pure logic with a scripted fake engine: shuffling, parsing, verdicts, scoring, metrics."""

import json

import numpy as np
import pytest

from dr_core.engines.base import PROMPT_TOO_LONG
from dr_core.evals.evaluate import eval_items, set_records
from dr_core.evaluator.generate import generate_rubrics, shuffled_order
from dr_core.evaluator.items import Check, EvalItem, RubricSampling
from dr_core.evaluator.score import evaluate_sets, score_rubrics
from dr_core.evaluator.verify import parse_verdict, verify
from dr_core.rubric import prompts
from dr_core.rubric.schema import UNSCORABLE
from dr_core.scoring.metrics import evaluator_metrics
from dr_core.store.atomic import write_json_atomic
from tests.support.fakes import FakeEngine


def fake_engine(rubric_text="", finish="stop", verdict_override=None) -> FakeEngine:
    """Generator: returns ``rubric_text``. Verifier: "yes" when the criterion's last word occurs in the response,
    else "no"; ``verdict_override`` maps a criterion to raw output."""

    def verdict(req):
        crit, resp = req.check()
        return (verdict_override or {}).get(crit, "yes" if crit.split()[-1] in resp else "no")

    return FakeEngine(rubric_text, finish=finish, verdict=verdict)


RUBRIC = json.dumps(
    {"rubrics": [{"criterion": "mentions apple", "weight": 3}, {"criterion": "mentions pear", "weight": 1}]}
)
ITEMS = [
    EvalItem("fruit?", ("apple and pear", "apple only", "nothing")),
    EvalItem("fruit again?", ("pear", "apple")),
]


def test_shuffled_order_is_seeded_per_item_and_seed():
    assert shuffled_order(7, 0, 3) == shuffled_order(7, 0, 3)
    assert sorted(shuffled_order(7, 1, 3)) == list(range(7))
    assert len({shuffled_order(7, s, 0) for s in range(10)}) > 1


def test_generator_sees_candidates_in_the_recorded_permutation():
    eng = fake_engine(RUBRIC)
    rubrics, stats = generate_rubrics(eng, ITEMS, [0, 1, 2])
    assert [len(r) for r in rubrics] == [3, 3] and stats.requests == 6
    convs = eng.calls[0].conversations
    assert eng.calls[0].json_schema == prompts.GENERATOR_JSON_SCHEMA
    for k, g in enumerate(rubrics[0]):
        user = convs[k]["content"] if isinstance(convs[k], dict) else convs[k][-1]["content"]
        shown = [ITEMS[0].candidates[i] for i in g.permutation]
        assert [user.index(f"[RESPONSE {j + 1}]\n{c}") for j, c in enumerate(shown)] == sorted(
            user.index(f"[RESPONSE {j + 1}]\n{c}") for j, c in enumerate(shown)
        )
        assert g.rubric is not None and g.error is None and g.seed == k


def test_static_mode_never_shows_responses():
    eng = fake_engine(RUBRIC)
    rubrics, _ = generate_rubrics(eng, ITEMS, [0, 1], RubricSampling(mode="static"))
    assert all(g.permutation == () for row in rubrics for g in row)
    for conv in eng.calls[0].conversations:
        assert "apple only" not in conv[-1]["content"] and "[RESPONSE" not in conv[-1]["content"]


@pytest.mark.parametrize(
    "text, finish, error",
    [
        (RUBRIC[:30], "length", "generation_length"),
        ("", "stop", "empty_output"),
        ("no json here", "stop", "not_json"),
        ('{"rubrics": []}', "stop", "empty_list"),
        (RUBRIC, PROMPT_TOO_LONG, f"generation_{PROMPT_TOO_LONG}"),
    ],
)
def test_unusable_generations_are_unscorable_with_a_reason(text, finish, error):
    rubrics, _ = generate_rubrics(fake_engine(text, finish), ITEMS[:1], [0])
    g = rubrics[0][0]
    assert g.rubric is UNSCORABLE and g.error == error


def test_unstructured_generation_recovers_line_items():
    rubrics, _ = generate_rubrics(
        fake_engine("[3] mentions apple\n[1] mentions pear"), ITEMS[:1], [0], RubricSampling(structured=False)
    )
    assert rubrics[0][0].rubric.weights == [3, 1]


@pytest.mark.parametrize(
    "text, finish, expected",
    [
        ("yes", "stop", 1),
        ("no", "stop", 0),
        (" Yes.", "stop", 1),
        ("maybe", "stop", None),
        ("yes", "length", None),
        ("", "stop", None),
        ("", PROMPT_TOO_LONG, None),
    ],
)
def test_parse_verdict(text, finish, expected):
    assert parse_verdict(text, finish) is expected if expected is None else parse_verdict(text, finish) == expected


def test_verify_dedups_groups_and_keeps_order():
    eng = fake_engine()
    checks = [
        Check("p", "apple", "has apple"),
        Check("q", "pear", "has apple"),
        Check("p", "apple", "has pear"),
        Check("p", "apple", "has apple"),
    ]
    verdicts, stats = verify(eng, checks)
    assert verdicts == [1, 0, 0, 1]
    assert stats.requests == 3 and eng.calls[0].choices == list(prompts.VERDICT_CHOICES)
    sent = [c[-1]["content"] for c in eng.calls[0].conversations]
    assert ["[RESPONSE]\napple" in s for s in sent] == [True, True, False]  # same response adjacent


def test_verify_uses_the_engines_verifier_prompt_and_an_override_wins():
    from dr_core.config import EngineConfig

    eng = fake_engine()
    eng.config = EngineConfig(verifier_prompt="plain")
    checks = [Check("p", "apple", "has apple"), Check("p", "pear", "has apple")]
    assert verify(eng, checks)[0] == [1, 0]
    assert [[m["role"] for m in c] for c in eng.calls[-1].conversations] == [["user"], ["user"]]
    assert verify(eng, checks, verifier_prompt="system")[0] == [1, 0]
    assert [c[0]["role"] for c in eng.calls[-1].conversations] == ["system", "system"]


def test_score_rubrics_matrix_scores_rdisc():
    eng = fake_engine(RUBRIC)
    ev = evaluate_sets(eng, eng, ITEMS, [0])
    r = ev.results[0][0]
    assert r.verdicts == [[1, 1], [1, 0], [0, 0]]
    assert r.scores == pytest.approx([1.0, 0.75, 0.0])
    vbar = np.array([2 / 3, 1 / 3])
    assert r.r_disc == pytest.approx(float((np.array([3, 1]) * vbar * (1 - vbar)).sum() / 4))
    assert r.unscorable == [] and ev.verification.requests == 10 and ev.generation.requests == 2


def test_unscorable_verdict_makes_that_response_unscorable_never_zero():
    eng = fake_engine(RUBRIC, verdict_override={"mentions pear": "perhaps"})
    ev = evaluate_sets(eng, eng, ITEMS[:1], [0])
    r = ev.results[0][0]
    assert r.scores == [None, None, None] and r.r_disc is UNSCORABLE
    assert r.unscorable and "3 of 6" in r.unscorable[0]


def test_anchors_get_scores_and_r_anchor():
    eng = fake_engine(RUBRIC)
    item = EvalItem("fruit?", ("apple", "nothing"), anchors=("apple and pear", "apple", "nothing"))
    results, _ = score_rubrics(eng, [item], generate_rubrics(eng, [item], [0])[0])
    r = results[0][0]
    assert r.anchor_scores == pytest.approx([1.0, 0.75, 0.0]) and r.r_anchor < 0


def test_metrics_pairwise_strict_with_ties_and_unscorable(tmp_path):
    f = tmp_path / "pairs.jsonl"
    rows = [
        {"id": "a", "prompt": "p", "chosen": "apple pear", "rejected": "nothing"},  # win
        {"id": "b", "prompt": "p", "chosen": "apple", "rejected": "apple"},  # tie
        {"id": "c", "prompt": "p", "chosen": "nothing", "rejected": "pear"},  # loss
    ]
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    _, items, rel = eval_items(f, "pairwise")
    ev = evaluate_sets(fake_engine(RUBRIC), fake_engine(RUBRIC), items, [0, 1])
    m = evaluator_metrics("pairwise", ev, rel)
    assert m["n"] == 3 and m["seeds"] == 2
    assert m["accuracy"] == pytest.approx(1 / 3) and m["ties"] == pytest.approx(1 / 3) and m["unscorable"] == 0
    assert m["chance_accuracy"] == 0.5 and "ndcg" not in m


def test_metrics_listwise_has_ndcg_and_counts_failed_rubrics(tmp_path):
    f = tmp_path / "list.jsonl"
    f.write_text(json.dumps({"id": "x", "prompt": "p", "best": "apple pear", "others": ["apple", "nothing"]}) + "\n")
    _, items, rel = eval_items(f, "listwise")
    assert rel == [[1.0, 0.0, 0.0]]
    m = evaluator_metrics("listwise", evaluate_sets(fake_engine(RUBRIC), fake_engine(), items, [0]), rel)
    assert m["accuracy"] == 1.0 and m["ndcg"] == pytest.approx(1.0)
    bad = evaluator_metrics("listwise", evaluate_sets(fake_engine("oops"), fake_engine(), items, [0]), rel)
    assert bad["accuracy"] == 0.0 and bad["unscorable"] == 1.0 and bad["rubric_failures"] == {"not_json": 1}


def test_ranked_relevance_is_graded_by_rank(tmp_path):
    f = tmp_path / "ranked.jsonl"
    f.write_text(json.dumps({"id": "r", "prompt": "p", "responses": ["a", "b", "c"]}) + "\n")
    _, items, rel = eval_items(f, "ranked")
    assert items[0].candidates == ("a", "b", "c") and rel == [[3.0, 2.0, 1.0]]


def test_set_records_are_json_ready():
    from dr_core.datasets import ResponseSet

    rows = [ResponseSet("s1", "fruit?", ("apple and pear", "apple only", "nothing"))]
    ev = evaluate_sets(fake_engine(RUBRIC), fake_engine(), [EvalItem(r.prompt, r.responses) for r in rows], [0, 1])
    rec = set_records(rows, ev)[0]
    json.dumps(rec)
    assert rec["mean_scores"] == pytest.approx([1.0, 0.75, 0.0]) and len(rec["seeds"]) == 2
    assert rec["seeds"][0]["rubric"][0] == {"criterion": "mentions apple", "weight": 3}


def test_atomic_write_leaves_nothing_on_failure(tmp_path):
    out = tmp_path / "m.json"
    with pytest.raises(TypeError):
        write_json_atomic(out, {"x": object()})
    assert list(tmp_path.iterdir()) == []
    write_json_atomic(out, {"x": 1})
    assert json.loads(out.read_text()) == {"x": 1}


def test_repeated_criterion_is_dropped_and_counted_not_fatal():
    rep = json.dumps(
        {
            "rubrics": [
                {"criterion": "mentions apple", "weight": 3},
                {"criterion": "Mentions apple.", "weight": 2},
                {"criterion": "mentions pear", "weight": 1},
            ]
        }
    )
    rubrics, _ = generate_rubrics(fake_engine(rep), ITEMS[:1], [0])
    g = rubrics[0][0]
    assert g.rubric.criteria == ["mentions apple", "mentions pear"] and g.dropped == 1 and g.error is None


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"mode": "oracle"}, "mode must be 'dynamic' or 'static'"),
        ({"rubric_format": "yaml"}, "rubric_format must be"),
        ({"mode": "static", "rubric_format": "lines"}, "in dynamic mode"),  # the primed format is dynamic only
    ],
)
def test_a_sampling_the_generator_cannot_follow_is_refused_when_made(kwargs, message):
    with pytest.raises(ValueError, match=message):
        RubricSampling(**kwargs)
