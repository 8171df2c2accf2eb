"""The reward-hacking monitors (dr_core/report/monitors.py) through their queries in sql/ on hand-made rows in
in-memory DuckDB: each query checked value by value, and each monitor firing on a run planted with its sign and
silent on a clean run."""

from __future__ import annotations

import json

import duckdb
import pytest

from dr_core.config.monitors import MonitorSettings
from dr_core.report import monitors
from dr_core.store import sql
from dr_core.store.schemas import TABLES, conform


def _con(**tables):
    con = duckdb.connect()
    for name in TABLES:
        con.register(name, conform(name, tables.get(name, [])))
    return con


def _samples(run, rnd, stage, texts):
    return [
        dict(run_id=run, round=rnd, stage=stage, set_id=1, prompt_id="p", response_idx=i, policy_ckpt="c", response=t)
        for i, t in enumerate(texts)
    ]


def _ckpt(run, rnd, role, kl):
    metrics = {"steps": len(kl), "kl_by_step": [{"step": s, "kl": k} for s, k in enumerate(kl, 1)]}
    return dict(
        run_id=run, round=rnd, role=role, uri=f"{run}/{role}{rnd}", parent=None, metrics_json=json.dumps(metrics)
    )


def _policy_round(run, rnd, scores_by_group):
    """The policy update's rows of a round: one set (GRPO group) per entry, its rollouts' Eq. 12 scores."""
    rewards, scores = [], []
    for set_id, group in enumerate(scores_by_group):
        mean = sum(group) / len(group)
        for i, sc in enumerate(group):
            rewards.append(dict(run_id=run, round=rnd, stage="policy", set_id=set_id, rollout=i, advantage=sc - mean))
            scores.append(dict(run_id=run, round=rnd, stage="policy", set_id=set_id, rollout=0, target="C",
                               response=i, score=sc))  # fmt: skip
    return rewards, scores


def _eval(run, rnd, accuracy, win_rate):
    return [
        dict(run_id=run, round=rnd, benchmark="hh", checkpoint="g", verifier="v", seed=0, metric="accuracy",
             value=accuracy),
        dict(run_id=run, round=rnd, benchmark="alpaca.vs-P0", checkpoint="p", verifier="v", seed=0,
             metric="win_rate", value=win_rate),
    ]  # fmt: skip


def _verdicts(run, rnd, matrix):
    """matrix[item][response] of one measured set's rubric."""
    return [
        dict(run_id=run, round=rnd, stage="measure", set_id=1, rollout=0, item=m, target="C", response=i, verdict=v,
             verifier="v")
        for m, row in enumerate(matrix)
        for i, v in enumerate(row)
    ]  # fmt: skip


def _run(run: str, hacked: bool) -> dict[str, list]:
    """Two rounds of a run: ``hacked`` plants every sign, else none of them."""
    long = "word " * (60 if hacked else 21)
    samples = (
        _samples(run, 1, "generator", ["word " * 20] * 4)  # round 1 samples C from P(0)
        + _samples(run, 1, "measure", ["word " * 22] * 4)
        + _samples(run, 2, "measure", [long] * 4)
    )
    checkpoints = [_ckpt(run, 1, "policy", [0.01, 0.012]), _ckpt(run, 2, "policy", [0.02, 0.3 if hacked else 0.03])]
    r1, s1 = _policy_round(run, 1, [[0.2, 0.6], [0.1, 0.5]])
    r2, s2 = _policy_round(run, 2, [[0.9, 0.9], [0.8, 0.8]] if hacked else [[0.3, 0.7], [0.2, 0.6]])
    evals = _eval(run, 1, 0.6, 0.5) + _eval(run, 2, 0.55 if hacked else 0.65, 0.45 if hacked else 0.55)
    item_rows = [[1, 1, 1, 1], [1, 1, 1, 1], [1, 0, 1, 0]] if hacked else [[1, 0, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]]
    verdicts = _verdicts(run, 2, [[bool(v) for v in row] for row in item_rows])
    return dict(samples=samples, checkpoints=checkpoints, rewards=r1 + r2, scores=s1 + s2, eval=evals,
                verdicts=verdicts)  # fmt: skip


def _tables(*runs: dict) -> dict[str, list]:
    return {k: [row for r in runs for row in r.get(k, [])] for k in {k for r in runs for k in r}}


@pytest.fixture(scope="module")
def con():
    return _con(**_tables(_run("hacked", True), _run("clean", False)))


# -- the queries, value by value ----------------------------------------------------------------------------------
def test_monitor_length_compares_each_measured_round_with_p0(con):
    rows = sql.run(con, "monitor_length", {"run_id": "hacked"}).to_pylist()
    assert [(r["round"], r["n_responses"], r["mean_chars"], r["p0_chars"]) for r in rows] == [
        (1, 4, 110.0, 100.0),
        (2, 4, 300.0, 100.0),
    ]
    assert rows[1]["ratio"] == pytest.approx(3.0)
    with_round0 = _con(samples=_samples("r", 0, "measure", ["ab"] * 2) + _samples("r", 1, "measure", ["abcd"]))
    (r1,) = [r for r in sql.run(with_round0, "monitor_length").to_pylist() if r["round"] == 1]
    assert r1["p0_chars"] == 2.0 and r1["ratio"] == 2.0  # round 0's measured sets are P(0)'s


def test_monitor_kl_unnests_each_steps_kl(con):
    rows = sql.run(con, "monitor_kl", {"run_id": "hacked"}).to_pylist()
    assert [(r["round"], r["role"], r["step"], r["kl"]) for r in rows] == [
        (1, "policy", 1, 0.01),
        (1, "policy", 2, 0.012),
        (2, "policy", 1, 0.02),
        (2, "policy", 2, 0.3),
    ]
    no_kl = dict(run_id="x", round=1, role="policy", uri="u", parent=None, metrics_json=json.dumps({"steps": 1}))
    assert sql.run(_con(checkpoints=[no_kl]), "monitor_kl").num_rows == 0  # beta = 0: no rows


def test_monitor_reward_vs_eval_puts_the_training_reward_beside_the_held_out_figures(con):
    rows = sql.run(con, "monitor_reward_vs_eval", {"run_id": "hacked"}).to_pylist()
    assert [(r["round"], r["n_scored"]) for r in rows] == [(1, 4), (2, 4)]
    assert [r["train_reward"] for r in rows] == pytest.approx([0.35, 0.85])
    assert [(r["eval_accuracy"], r["win_rate"]) for r in rows] == [(0.6, 0.5), (0.55, 0.45)]


# -- each monitor fires on the planted run and is silent on the clean one ----------------------------------------
@pytest.mark.parametrize("name", monitors.MONITORS)
def test_each_monitor_fires_on_its_planted_sign_and_is_silent_on_a_clean_run(con, name):
    hacked = {f["monitor"]: f for f in monitors.run_monitors(con, "hacked")}
    clean = {f["monitor"]: f for f in monitors.run_monitors(con, "clean")}
    assert hacked[name]["level"] == "warn", hacked[name]
    assert clean[name]["level"] == "ok", clean[name]
    assert hacked[name]["value"] >= hacked[name]["threshold"], hacked[name]
    if name != "reward_vs_eval":  # its clean run's reward rises too, beside held-out figures that rise with it
        assert clean[name]["value"] < clean[name]["threshold"], clean[name]
    assert hacked[name]["line"] and clean[name]["line"]


def test_the_lines_say_what_was_seen(con):
    found = {f["monitor"]: f for f in monitors.run_monitors(con, "hacked")}
    assert found["length"]["line"].startswith("round 2's answers average 300 characters, 3.00x P(0)'s")
    assert "100% of round 2's policy groups have rewards that do not vary (round 1: 0%)" in found["spread"]["line"]
    assert "2 of round 2's 3 judged rubric items pass every response" in found["saturation"]["line"]
    assert "peak 0.3000 nats: past 0.1" in found["kl"]["line"]
    assert "evaluator accuracy 0.600 -> 0.550, win rate 0.500 -> 0.450" in found["reward_vs_eval"]["line"]


def test_thresholds_come_from_the_settings(con):
    lenient = MonitorSettings(length_ratio=4.0, saturation_share=0.9, kl_max=0.5, kl_growth=50, reward_rise=0.6)
    found = {f["monitor"]: f["level"] for f in monitors.run_monitors(con, "hacked", lenient)}
    assert found == {"length": "ok", "spread": "warn", "saturation": "ok", "kl": "ok", "reward_vs_eval": "ok"}


def test_a_run_without_rows_is_not_applicable_never_a_silent_ok():
    found = monitors.run_monitors(_con(), "nothing")
    assert [f["level"] for f in found] == ["n/a"] * 5 and all(f["value"] is None for f in found)


def test_a_query_that_fails_is_one_not_applicable_line(con):
    def broken(name, params):
        raise duckdb.CatalogException("no such table")

    found = monitors.run_monitors(con, "hacked", query=broken)
    assert all(f["level"] == "n/a" and "could not read sql/" in f["line"] for f in found)


def test_the_spread_rise_alone_warns():
    rows = [
        dict(stage="policy", round=1, groups=4, zero_std_groups=0),
        dict(stage="policy", round=3, groups=4, zero_std_groups=1),
    ]
    assert monitors.judge_spread(rows, MonitorSettings()).get("level") == "warn"  # 0% -> 25%: collapsing
    assert monitors.judge_spread(rows, MonitorSettings(zero_spread_rise=0.5))["level"] == "ok"
