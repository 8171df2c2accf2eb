"""Each query in sql/ on a few hand-made rows in in-memory DuckDB, checked value by value; the loader's parameter
handling; and the read-only guard."""

from pathlib import Path

import duckdb
import numpy as np
import pytest

from dr_core.scoring.equations import discriminability_reward, mean_ordered_gap, rubric_scores
from dr_core.store import sql
from dr_core.store.schemas import TABLES, conform

RUN = dict(run_id="r1", round=0, stage="generator")


def _con(**tables):
    """In-memory DuckDB with every table as a view: the given rows (conformed to the schema) or empty."""
    con = duckdb.connect()
    for name in TABLES:
        con.register(name, conform(name, tables.get(name, [])))
    return con


def _rubric(set_id, rollout, weights, **kw):
    base = {**RUN, **kw}
    return [
        dict(base, set_id=set_id, generator_ckpt="g0", rollout=rollout, item=m, criterion=f"c{m}", weight=w)
        for m, w in enumerate(weights)
    ]


def _verdicts(set_id, rollout, matrix, target, **kw):
    """matrix[response][item]; anchor responses are ranks 1.., C responses indices 0.."""
    first = 1 if target == "anchor" else 0
    base = {**RUN, **kw}
    return [
        dict(base, set_id=set_id, rollout=rollout, item=m, target=target, response=first + i, verdict=v, verifier="ver")
        for i, row in enumerate(matrix)
        for m, v in enumerate(row)
    ]


# -- gap_by_round ---------------------------------------------------------------------------------------------------
def test_gap_by_round_values():
    w = [3, 1]
    list_a = [[1, 1], [1, 0], [0, 0]]  # scores 1, .75, 0
    list_b = [[1, 0], [None, 1], [0, 1]]  # .75, unscorable, .25
    list_c = [[None, 1], [0, None], [1, 1]]  # one scored response only: gap NULL
    rubrics = _rubric(1, 0, w) + _rubric(1, 1, w) + _rubric(2, 0, w)
    verdicts = (
        _verdicts(1, 0, list_a, "anchor")
        + _verdicts(1, 1, list_b, "anchor")
        + _verdicts(2, 0, list_c, "anchor")
        + _verdicts(1, 0, [[0, 0]] * 3, "C")
    )  # C verdicts must not enter the anchor gap
    rewards = [
        dict(RUN, set_id=1, rollout=0, r_disc=0.1, r_anchor=-1.0),
        dict(RUN, set_id=1, rollout=1, r_disc=0.3, r_anchor=None),
    ]
    rows = sql.run(_con(rubrics=rubrics, verdicts=verdicts, rewards=rewards), "gap_by_round").to_pylist()
    assert len(rows) == 1
    r = rows[0]
    gap_a = mean_ordered_gap(rubric_scores(w, list_a))
    gap_b = mean_ordered_gap(list(rubric_scores(w, list_b)))
    assert gap_a == pytest.approx((0.25 + 1 + 0.75) / 3) and gap_b == pytest.approx(0.5)
    assert (r["run_id"], r["round"], r["stage"], r["n_lists"], r["n_scored_lists"]) == ("r1", 0, "generator", 3, 2)
    assert r["mean_gap"] == pytest.approx((gap_a + gap_b) / 2)
    assert (r["n_rollouts"], r["n_unscorable_rewards"]) == (2, 1)
    assert r["mean_r_disc"] == pytest.approx(0.2) and r["mean_r_anchor"] == pytest.approx(-1.0)


def test_gap_by_round_matches_reference_on_random_lists():
    rng = np.random.default_rng(7)
    rubrics, verdicts, expected = [], [], {}
    for set_id in range(20):
        weights = rng.integers(1, 6, size=rng.integers(1, 5)).tolist()
        matrix = rng.integers(0, 2, size=(rng.integers(2, 8), len(weights))).astype(object)
        matrix[rng.random(matrix.shape) < 0.1] = None
        matrix = matrix.tolist()
        rnd = set_id % 2
        rubrics += _rubric(set_id, 0, weights, round=rnd)
        verdicts += _verdicts(set_id, 0, matrix, "anchor", round=rnd)
        scores = rubric_scores(weights, matrix)
        expected.setdefault(rnd, []).append(mean_ordered_gap(list(scores)))
    rows = sql.run(_con(rubrics=rubrics, verdicts=verdicts), "gap_by_round").to_pylist()
    for r in rows:
        gaps = [g for g in expected[r["round"]] if g is not None]
        assert r["n_lists"] == len(expected[r["round"]]) and r["n_scored_lists"] == len(gaps)
        assert r["mean_gap"] == pytest.approx(np.mean(gaps))


def test_gap_by_round_filters_run():
    v = _verdicts(1, 0, [[1], [0]], "anchor") + _verdicts(1, 0, [[1], [0]], "anchor", run_id="r2")
    rb = _rubric(1, 0, [2]) + _rubric(1, 0, [2], run_id="r2")
    rows = sql.run(_con(rubrics=rb, verdicts=v), "gap_by_round", {"run_id": "r2"}).to_pylist()
    assert [(r["run_id"], r["mean_gap"]) for r in rows] == [("r2", 1.0)]


# -- saturation -----------------------------------------------------------------------------------------------------
def test_saturation_values():
    # set 1: item 0 all yes, item 1 mixed, item 2 all no; set 2 (round 1): item 0 has a missing verdict
    v = _verdicts(1, 0, [[1, 1, 0], [1, 0, 0], [1, 0, 0]], "C") + _verdicts(1, 0, [[0, 0, 0]], "anchor")
    v += _verdicts(2, 0, [[1], [None]], "C", round=1)
    rows = sql.run(_con(verdicts=v), "saturation").to_pylist()
    assert [
        (r["round"], r["n_items"], r["n_judged"], r["n_incomplete"], r["n_all_yes"], r["n_all_no"], r["n_saturated"])
        for r in rows
    ] == [(0, 3, 3, 0, 1, 1, 2), (1, 1, 0, 1, 0, 0, 0)]
    assert rows[0]["saturation"] == pytest.approx(2 / 3) and rows[1]["saturation"] is None
    # R_disc agrees: only the mixed item contributes
    assert discriminability_reward([1, 1, 1], [[1, 1, 0], [1, 0, 0], [1, 0, 0]]) == pytest.approx((2 / 9) / 3)


# -- rubric_history -------------------------------------------------------------------------------------------------
def test_rubric_history_values():
    samples = [
        dict(RUN, set_id=s, prompt_id=p, response_idx=i, policy_ckpt="p0", response="x", round=rnd)
        for s, p, rnd in [(1, "p1", 0), (2, "p2", 0), (3, "p1", 1)]
        for i in range(2)
    ]
    rubrics = _rubric(1, 0, [5, 2]) + _rubric(2, 0, [1]) + _rubric(3, 0, [4], round=1)
    rubrics.append(
        dict(
            RUN,
            set_id=3,
            generator_ckpt="g1",
            rollout=1,
            item=None,
            criterion=None,
            weight=None,
            error="no JSON",
            round=1,
        )
    )
    verdicts = (
        _verdicts(1, 0, [[1, 0], [1, None]], "C")
        + _verdicts(1, 0, [[0, 1]], "anchor")
        + _verdicts(2, 0, [[1], [1]], "C")
        + _verdicts(3, 0, [[0], [0]], "C", round=1)
    )
    rows = sql.run(
        _con(samples=samples, rubrics=rubrics, verdicts=verdicts), "rubric_history", {"prompt_id": "p1"}
    ).to_pylist()
    got = [
        (
            r["round"],
            r["set_id"],
            r["item"],
            r["criterion"],
            r["weight"],
            r["yes_rate_c"],
            r["yes_rate_anchor"],
            r["n_verdicts"],
            r["n_unscorable"],
        )
        for r in rows
    ]
    assert got == [
        (0, 1, 0, "c0", 5, 1.0, 0.0, 3, 0),
        (0, 1, 1, "c1", 2, 0.0, 1.0, 3, 1),
        (1, 3, 0, "c0", 4, 0.0, None, 2, 0),
    ]


# -- eval_summary ---------------------------------------------------------------------------------------------------
def test_eval_summary_values():
    rows = [
        dict(run_id="r1", round=1, benchmark=b, checkpoint="g1", verifier="v", seed=s, metric="acc", value=x)
        for b, s, x in [("hh", 0, 0.6), ("hh", 1, 0.8), ("hh", 2, None), ("rm", 0, 0.5)]
    ]
    out = sql.run(_con(eval=rows), "eval_summary").to_pylist()
    assert [(r["benchmark"], r["n_seeds"], r["n_scored"]) for r in out] == [("hh", 3, 2), ("rm", 1, 1)]
    assert out[0]["mean"] == pytest.approx(0.7) and out[0]["std"] == pytest.approx(np.std([0.6, 0.8], ddof=1))
    assert (out[0]["min"], out[0]["max"]) == (0.6, 0.8)
    only = sql.run(_con(eval=rows), "eval_summary", {"benchmark": "rm"}).to_pylist()
    assert [r["benchmark"] for r in only] == ["rm"]


# -- anchor_filter --------------------------------------------------------------------------------------------------
GOOD = "A substantive answer that explains the idea with enough detail to be useful to the reader, number {}."
PROMPT = "Please explain in a few sentences how photosynthesis turns sunlight into chemical energy."


def _anchor_list(pid, responses, prompt=PROMPT):
    return [
        dict(dataset="d", prompt_id=pid, prompt=prompt, rank=r, response=x, source="s")
        for r, x in enumerate(responses, start=1)
    ]


def test_anchor_filter_values():
    good = [GOOD.format(i) for i in range(11)]
    refusals = ["I'm sorry, but I cannot help with that."] * 4
    boiler = ["Certainly! Great question! I hope this helps. Let me know if you need anything else."] * 4
    rows = (
        _anchor_list("ok", good)
        + _anchor_list("few", good[:6])
        + _anchor_list("short_p", good, prompt="Explain photosynthesis.")
        + _anchor_list("short_top", ["Too short."] + good[:10])
        + _anchor_list("rep", good[:3] + ["the cat sat on the mat " * 20] + good[3:10])
        + _anchor_list("degen", good[:3] + refusals + good[3:7])
        + _anchor_list(
            "greet",
            good[:3]
            + ["Hello! How can I help you today?"] * 2
            + ["Could you please clarify what you mean?"] * 2
            + good[3:7],
        )
        + _anchor_list("boiler", good[:3] + boiler + good[3:7])
        + _anchor_list("late_refusals", good[:7] + refusals)  # rank 8+ is outside the head of 7
    )
    con = _con(anchors=rows)
    out = {r["prompt_id"]: r for r in sql.run(con, "anchor_filter", {"include_rejected": True}).to_pylist()}
    reasons = {k: r["reject_reason"] for k, r in out.items()}
    assert reasons == {
        "ok": None,
        "few": "too_few_responses",
        "short_p": "short_prompt",
        "short_top": "short_top_response",
        "rep": "repetitive",
        "degen": "degenerate",
        "greet": "degenerate",
        "boiler": "boilerplate",
        "late_refusals": None,
    }
    assert (out["ok"]["n_responses"], out["ok"]["n_useful"], out["degen"]["n_degenerate"]) == (11, 7, 4)
    kept = sql.run(con, "anchor_filter").column("prompt_id").to_pylist()
    assert kept == ["late_refusals", "ok"]
    # the minimum list length is a parameter: our anchors have 11, the paper's Nectar 7
    assert sql.run(con, "anchor_filter", {"min_responses": 12}).num_rows == 0
    assert "few" in sql.run(con, "anchor_filter", {"min_responses": "6"}).column("prompt_id").to_pylist()


# -- loader and guard -----------------------------------------------------------------------------------------------
def test_every_query_has_header_and_test():
    assert set(sql.names()) >= {"anchor_filter", "gap_by_round", "rubric_history", "saturation", "eval_summary"}
    # a query's value test may live in this file or in another tests/test_*sql*.py (e.g. the report's queries)
    tests_text = "".join(p.read_text(encoding="utf-8") for p in Path(__file__).parent.glob("test_*sql*.py"))
    for name in sql.names():
        q = sql.load(name)
        assert "grain:" in q.header and len(duckdb.connect().extract_statements(q.text)) == 1, name
        assert f'"{name}"' in tests_text, f"no test runs {name}"


def test_params_bind_and_errors():
    q = sql.load("anchor_filter")
    assert q.params["min_responses"].default == 7 and q.params["dataset"].default is None
    assert q.bind({"min_responses": "11", "include_rejected": "true", "dataset": "null"})["min_responses"] == 11
    with pytest.raises(sql.QueryError, match="unknown parameter"):
        q.bind({"nope": "1"})
    with pytest.raises(sql.QueryError, match="expects INTEGER"):
        q.bind({"head": "seven"})
    with pytest.raises(sql.QueryError, match="required"):
        sql.load("rubric_history").bind({})
    with pytest.raises(sql.QueryError, match="no query named"):
        sql.load("../etc/passwd")


@pytest.mark.parametrize(
    "statement",
    [
        "COPY (SELECT 1) TO 'x.csv'",
        "CREATE TABLE t AS SELECT 1",
        "INSERT INTO anchors SELECT * FROM anchors",
        "ATTACH 'x.db'",
        "SET threads = 1",
        "PRAGMA show_tables",
        "CALL pragma_version()",
        "SELECT 1; DROP VIEW anchors",
        "DELETE FROM anchors",
    ],
)
def test_read_only_refuses_writes(statement):
    con = _con()
    with pytest.raises(sql.QueryError):
        sql.run_read_only(con, statement)
    assert con.sql("SELECT count(*) FROM anchors").fetchall() == [(0,)]


@pytest.mark.parametrize(
    "statement", ["SELECT 1 AS x", "WITH a AS (SELECT 1 AS x) FROM a", "DESCRIBE anchors", "EXPLAIN SELECT 1"]
)
def test_read_only_allows_reads(statement):
    assert sql.run_read_only(_con(), statement).num_rows >= 1
