"""The report's queries in sql/ (set_gap, training_rewards, stage_costs, run_log, step_times, case_study) on a few
hand-made rows in in-memory DuckDB, checked value by value against hand computation or the dr_core reference."""

import datetime as dt
import itertools
import json

import numpy as np
import pytest

from dr_core.store import sql
from tests.unit.test_sql import RUN, _con, _rubric, _verdicts


def _scores(set_id, rollout, scores, target="C", **kw):
    first = 1 if target == "anchor" else 0
    return [
        dict(RUN, **kw, set_id=set_id, rollout=rollout, target=target, response=first + i, score=s)
        for i, s in enumerate(scores)
    ]


def _spread(scores):
    """Reference: mean over pairs i < j of |S_i - S_j|, unscorable left out."""
    xs = [s for s in scores if s is not None]
    pairs = list(itertools.combinations(xs, 2))
    return np.mean([abs(a - b) for a, b in pairs]) if pairs else None


# -- set_gap ----------------------------------------------------------------------------------------------------------
def test_set_gap_values():
    a, b, c = [0.5, 1.0, None, 0.0], [0.25, 0.25, 0.25], [None, 0.75]
    rows = (
        _scores(1, 0, a)
        + _scores(2, 0, b)
        + _scores(3, 0, c)
        + _scores(1, 0, [1.0, 0.0], target="anchor")  # anchors are not the policy's set
        + _scores(1, 0, [0.0, 1.0], round=1, stage="measure")
    )
    out = sql.run(_con(scores=rows), "set_gap").to_pylist()
    assert [(r["round"], r["stage"]) for r in out] == [(0, "generator"), (1, "measure")]
    r0, r1 = out
    assert (r0["n_lists"], r0["n_scored_lists"], r0["n_zero_spread"]) == (3, 2, 1)
    assert _spread(a) == pytest.approx(2 / 3)
    assert r0["mean_spread"] == pytest.approx((_spread(a) + _spread(b)) / 2)
    assert r0["zero_spread_share"] == pytest.approx(0.5)
    assert r1["mean_spread"] == pytest.approx(1.0) and r1["zero_spread_share"] == 0


def test_set_gap_matches_reference_on_random_sets():
    rng = np.random.default_rng(3)
    rows, ref = [], []
    for set_id in range(30):
        s = rng.integers(0, 5, size=rng.integers(2, 9)) / 4
        s = [None if rng.random() < 0.15 else float(x) for x in s]
        rows += _scores(set_id, 0, s)
        ref.append(_spread(s))
    (r,) = sql.run(_con(scores=rows), "set_gap", {"run_id": "r1"}).to_pylist()
    got = [g for g in ref if g is not None]
    assert r["n_scored_lists"] == len(got) and r["mean_spread"] == pytest.approx(np.mean(got))
    assert sql.run(_con(scores=rows), "set_gap", {"run_id": "other"}).num_rows == 0


# -- training_rewards -------------------------------------------------------------------------------------------------
def _rewards(round_no, rollouts, r_disc, r_anchor=-1.0):
    return [
        dict(
            run_id="r1",
            round=round_no,
            stage="generator",
            set_id=s,
            rollout=k,
            r_disc=r_disc(s, k),
            r_anchor=None if r_disc(s, k) is None else r_anchor,
        )
        for s, k in rollouts
    ]


def _ckpt(round_no, steps):
    return dict(
        run_id="r1",
        round=round_no,
        role="generator",
        uri=f"g{round_no}",
        parent=None,
        metrics_json=json.dumps({"steps": steps, "seconds": 12.5}),
    )


def test_training_rewards_steps_from_checkpoint():
    # round 1: G=2, 2 steps, sets 0 and 1 in both steps (rollout = step * G + i); round 2: 1 step
    r1 = _rewards(1, [(s, k) for s in (0, 1) for k in range(4)], lambda s, k: 0.1 * k if (s, k) != (1, 3) else None)
    r2 = _rewards(2, [(0, 0), (0, 1)], lambda s, k: 0.2)
    policy = [dict(run_id="r1", round=1, stage="policy", set_id=0, rollout=0, r_disc=9.0, r_anchor=9.0)]
    ckpts = [_ckpt(1, 2), _ckpt(2, 1), dict(_ckpt(1, 7), role="policy")]
    out = sql.run(_con(rewards=r1 + r2 + policy, checkpoints=ckpts), "training_rewards").to_pylist()
    got = [(r["round"], r["step"], r["global_step"], r["group_size"], r["n_rollouts"], r["n_unscorable"]) for r in out]
    assert got == [(1, 0, 0, 2, 4, 0), (1, 1, 1, 2, 4, 1), (2, 0, 2, 2, 2, 0)]
    assert out[0]["mean_r_disc"] == pytest.approx(0.05)  # rollouts 0, 1 of both sets
    assert out[1]["mean_r_disc"] == pytest.approx((0.2 + 0.3 + 0.2) / 3)  # (1, 3) unscorable: left out
    assert out[2]["mean_r_anchor"] == pytest.approx(-1.0)


def test_training_rewards_group_size_param_and_missing_checkpoint():
    rows = _rewards(1, [(0, k) for k in range(6)], lambda s, k: 0.0)
    no_ckpt = sql.run(_con(rewards=rows), "training_rewards").to_pylist()
    assert [(r["step"], r["global_step"], r["n_rollouts"]) for r in no_ckpt] == [(None, None, 6)]
    given = sql.run(_con(rewards=rows), "training_rewards", {"group_size": 3}).to_pylist()
    assert [(r["step"], r["global_step"], r["n_rollouts"]) for r in given] == [(0, 0, 3), (1, 1, 3)]


# -- stage_costs ------------------------------------------------------------------------------------------------------
def test_stage_costs_values():
    samples = [
        dict(
            RUN,
            stage="measure",
            set_id=s,
            prompt_id=f"p{s}",
            response_idx=i,
            policy_ckpt="p0",
            response="x",
            prompt_tokens=10 + s,
            response_tokens=5,
        )
        for s in range(2)
        for i in range(3)
    ]
    samples += [
        dict(RUN, stage="policy", set_id=0, prompt_id="p0", response_idx=i, policy_ckpt="p0", response="x")
        for i in range(2)
    ]
    rubrics = [dict(r, stage="measure") for r in _rubric(0, 0, [1, 2]) + _rubric(1, 0, [3])]
    rubrics.append(dict(RUN, stage="measure", set_id=1, generator_ckpt="g", rollout=1, item=None, error="no JSON"))
    verdicts = [dict(v, stage="measure") for v in _verdicts(0, 0, [[1, 1], [1, 0], [None, 1]], "C")]
    ckpts = [dict(run_id="r1", round=0, role="policy", uri="u", metrics_json=json.dumps({"steps": 3, "seconds": 4.5}))]
    out = {
        r["stage"]: r
        for r in sql.run(
            _con(samples=samples, rubrics=rubrics, verdicts=verdicts, checkpoints=ckpts), "stage_costs"
        ).to_pylist()
    }
    m, p = out["measure"], out["policy"]
    assert (m["n_sets"], m["n_responses"], m["prompt_tokens"], m["response_tokens"]) == (2, 6, 21, 30)
    assert (m["n_rubric_rollouts"], m["n_rubric_failures"], m["n_rubric_items"]) == (3, 1, 3)
    assert (m["n_verdicts"], m["n_unscorable_verdicts"], m["yes_rate"]) == (6, 1, pytest.approx(4 / 5))
    assert (m["train_steps"], m["train_seconds"]) == (None, None)
    assert (p["n_responses"], p["prompt_tokens"], p["response_tokens"], p["train_steps"], p["train_seconds"]) == (
        2,
        None,
        None,
        3,
        4.5,
    )


# -- run_log ----------------------------------------------------------------------------------------------------------
def test_run_log_values():
    t0 = dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc)
    runs = [
        dict(run_id="r1", created_at=t0 + dt.timedelta(seconds=s), status=f"round-{i}")
        for i, s in enumerate([0, 90.5, 200])
    ] + [dict(run_id="r2", created_at=t0, status="x")]
    out = sql.run(_con(runs=runs), "run_log", {"run_id": "r1"}).to_pylist()
    assert [(r["status"], r["seconds_since_previous"]) for r in out] == [
        ("round-0", None),
        ("round-1", pytest.approx(90.5)),
        ("round-2", pytest.approx(109.5)),
    ]


# -- step_times -------------------------------------------------------------------------------------------------------
def test_step_times_values():
    t0 = dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc)

    def step(execution, name, state, start, seconds, run_id="r1", round=1):
        return dict(
            run_id=run_id,
            round=round,
            execution=execution,
            flow="dynamicrubric-round",
            step=name,
            state=state,
            started_at=t0 + dt.timedelta(seconds=start),
            seconds=seconds,
        )

    steps = [
        step("e2", "sample", "Cached", 500, 0.5),
        step("e2", "verify", "Cached", 501, 0.25),
        step("e1", "verify", "Failed", 130, 7.0),
        step("e1", "sample", "Completed", 0, 120.0),
        step("e1", "select-inputs", "Completed", -5, 2.0, round=0),
        step("x", "sample", "Completed", 0, 1.0, "r2"),
    ]
    out = sql.run(_con(steps=steps), "step_times", {"run_id": "r1"}).to_pylist()
    # executions in time order, steps in time order within each; the other run is left out
    assert [(r["execution"], r["step"], r["round"]) for r in out] == [
        ("e1", "select-inputs", 0),
        ("e1", "sample", 1),
        ("e1", "verify", 1),
        ("e2", "sample", 1),
        ("e2", "verify", 1),
    ]
    e1, e2 = out[0], out[3]
    assert (e1["execution_steps"], e1["execution_ran"], e1["execution_cached"], e1["execution_failed"]) == (3, 2, 0, 1)
    assert e1["execution_seconds"] == pytest.approx(129.0) and e1["execution_started_at"] == t0 - dt.timedelta(
        seconds=5
    )
    assert (e2["execution_steps"], e2["execution_ran"], e2["execution_cached"], e2["execution_failed"]) == (2, 0, 2, 0)
    assert e2["execution_seconds"] == pytest.approx(0.75)
    assert len(sql.run(_con(steps=steps), "step_times").to_pylist()) == 6


# -- case_study -------------------------------------------------------------------------------------------------------
def test_case_study_values():
    m = dict(stage="measure")
    samples = [
        dict(RUN, **m, set_id=s, prompt_id=f"p{s}", response_idx=i, policy_ckpt="p0", response=f"resp {s}.{i}")
        for s in range(3)
        for i in range(2)
    ]
    prompts = [dict(dataset=d, prompt_id=f"p{s}", prompt=f"prompt {s}") for s in range(3) for d in ("a", "b")]
    anchors = [
        dict(dataset="a", prompt_id=f"p{s}", prompt="x", rank=r, response=f"anchor {s}.{r}", source="s")
        for s in range(3)
        for r in (1, 4)
    ]
    rubrics = [dict(r, **m, error=None) for r in _rubric(0, 0, [2, 1]) + _rubric(0, 1, [5]) + _rubric(2, 0, [3])]
    rubrics.append(dict(RUN, **m, set_id=1, generator_ckpt="g0", rollout=0, item=None, error="bad JSON"))
    verdicts = [
        dict(v, **m) for v in _verdicts(0, 0, [[1, 0], [1, 1]], "C") + _verdicts(0, 0, [[1, 1], [0, None]], "anchor")
    ]
    verdicts[6]["response"] = 4  # the anchor list holds ranks 1 and 4
    verdicts[7]["response"] = 4
    scores = [
        dict(s, **m)
        for s in _scores(0, 0, [1 / 3, 1.0])
        + [
            dict(RUN, set_id=0, rollout=0, target="anchor", response=1, score=1.0),
            dict(RUN, set_id=0, rollout=0, target="anchor", response=4, score=None),
        ]
    ]
    con = _con(samples=samples, prompts=prompts, anchors=anchors, rubrics=rubrics, verdicts=verdicts, scores=scores)
    out = sql.run(con, "case_study", {"run_id": "r1", "round": 0, "n_sets": 2}).to_pylist()
    got = [(r["set_id"], r["item"], r["target"], r["response"], r["verdict"], r["score"], r["text"]) for r in out]
    assert got == [
        (0, 0, "C", 0, True, pytest.approx(1 / 3), "resp 0.0"),
        (0, 0, "C", 1, True, 1.0, "resp 0.1"),
        (0, 0, "anchor", 1, True, 1.0, "anchor 0.1"),
        (0, 0, "anchor", 4, False, None, "anchor 0.4"),
        (0, 1, "C", 0, False, pytest.approx(1 / 3), "resp 0.0"),
        (0, 1, "C", 1, True, 1.0, "resp 0.1"),
        (0, 1, "anchor", 1, True, 1.0, "anchor 0.1"),
        (0, 1, "anchor", 4, None, None, "anchor 0.4"),
        (1, None, None, None, None, None, None),  # set 1: no usable rubric, its error
    ]
    assert out[0]["prompt"] == "prompt 0" and out[0]["criterion"] == "c0" and out[0]["weight"] == 2
    assert out[-1]["error"] == "bad JSON"
    assert {
        r["rollout"] for r in sql.run(con, "case_study", {"run_id": "r1", "round": 0, "rollout": 1}).to_pylist()
    } == {1}
    assert sql.run(con, "case_study", {"run_id": "r1", "round": 0, "stage": "fresh"}).num_rows == 0


# -- training_signal --------------------------------------------------------------------------------------------------
def _gen_rewards(round_no, advantages, g, **kw):
    """Generator rollouts of set 0 and 1: advantages[step][set] = the G advantages (rollout = step * G + i)."""
    return [
        dict(
            run_id="r1",
            round=round_no,
            stage="generator",
            set_id=s,
            rollout=step * g + i,
            r_disc=0.1,
            r_anchor=-1.0,
            advantage=a,
            **kw,
        )
        for step, sets in enumerate(advantages)
        for s, adv in enumerate(sets)
        for i, a in enumerate(adv)
    ]


def test_training_signal_generator_groups_per_step():
    # round 1: G=2 from the checkpoint's group_size, 2 steps; round 2: G derived from $.steps (old checkpoints)
    r1 = _gen_rewards(1, [[[0.0, 0.0], [1.0, -1.0]], [[0.0, 0.0], [1e-8, -1e-8]]], 2)
    r2 = _gen_rewards(2, [[[0.5, -0.5, 0.0], [None, None, None]]], 3)
    ckpts = [dict(_ckpt(1, 2), metrics_json=json.dumps({"steps": 2, "group_size": 2})), _ckpt(2, 1)]
    out = sql.run(_con(rewards=r1 + r2, checkpoints=ckpts), "training_signal").to_pylist()
    got = [(r["round"], r["stage"], r["step"], r["groups"], r["zero_std_groups"], r["zero_std_share"]) for r in out]
    assert got == [(1, "generator", 0, 2, 1, 0.5), (1, "generator", 1, 2, 2, 1.0), (2, "generator", 0, 2, 1, 0.5)]
    assert out[0]["reward_std_mean"] == pytest.approx((0.0 + np.std([1.0, -1.0], ddof=1)) / 2)
    assert out[2]["reward_std_mean"] == pytest.approx(np.std([0.5, -0.5, 0.0], ddof=1))  # the NULL group has none
    # $group_size overrides; with no checkpoint and no parameter the step is unknown
    given = sql.run(_con(rewards=r1), "training_signal", {"group_size": 4}).to_pylist()
    assert [(r["step"], r["groups"]) for r in given] == [(0, 2)]
    assert [(r["step"], r["groups"]) for r in sql.run(_con(rewards=r1), "training_signal").to_pylist()] == [(None, 2)]


def test_training_signal_policy_groups_are_sets_scored_by_eq_12():
    # K=2; step 0: set 0 varies, set 1 constant; step 1: set 2 with one unscorable completion (one score: no std)
    sets = {0: (0, [1.0, 0.0]), 1: (0, [0.5, 0.5]), 2: (1, [None, 0.25])}
    rewards = [
        dict(run_id="r1", round=1, stage="policy", set_id=s, rollout=step * 2 + i, advantage=0.0)
        for s, (step, scs) in sets.items()
        for i in range(2)
    ]
    scores = [
        dict(run_id="r1", round=1, stage="policy", set_id=s, rollout=0, target="C", response=i, score=sc)
        for s, (_, scs) in sets.items()
        for i, sc in enumerate(scs)
    ]
    scores += [dict(sc, stage="measure") for sc in scores]  # other stages' scores stay out
    out = sql.run(_con(rewards=rewards, scores=scores), "training_signal", {"run_id": "r1"}).to_pylist()
    assert [(r["stage"], r["step"], r["groups"], r["zero_std_groups"]) for r in out] == [
        ("policy", 0, 2, 1),
        ("policy", 1, 1, 1),
    ]
    assert out[0]["reward_std_mean"] == pytest.approx(np.std([1.0, 0.0], ddof=1) / 2)
    assert out[1]["zero_std_share"] == 1.0 and out[1]["reward_std_mean"] is None
    assert sql.run(_con(rewards=rewards, scores=scores), "training_signal", {"run_id": "x"}).num_rows == 0


def test_training_signal_matches_dr_core_on_the_training_records():
    """The rows RolloutSink writes, through the query, give what tasks/train.py reports (signals.zero_std_by_step)."""
    from dr_core.train.records import RolloutSink
    from tests.unit.test_signals import policy_records

    rng = np.random.default_rng(5)
    by_step = {
        step: [[None if rng.random() < 0.2 else float(rng.integers(0, 3) / 2) for _ in range(3)] for _ in range(4)]
        for step in range(5)
    }
    sink = RolloutSink("P0", "V", 3, generator="G1")
    sink(policy_records(by_step))
    tables = {k: [dict(r, run_id="r1", round=2) for r in v] for k, v in sink.policy_tables().items()}
    gen = RolloutSink("G0", "V", 3)
    gen_recs = [
        {
            "group_id": g,
            "rollout": i,
            "step": step,
            "advantage": float(rng.integers(0, 2)) * (i - 1),
            "items": None,
            "error": "x",
            "verdicts_C": None,
            "verdicts_anchor": None,
            "scores_C": None,
            "scores_anchor": None,
            "r_disc": 0.0,
            "r_anchor": -1.0,
            "scorable": False,
        }
        for step in range(3)
        for g in range(4)
        for i in range(3)
    ]
    gen(gen_recs)
    tables["rewards"] += [dict(r, run_id="r1", round=2) for r in gen.generator_tables()["rewards"]]
    ckpt = dict(_ckpt(2, 3), metrics_json=json.dumps({"steps": 3, "group_size": 3}))
    out = sql.run(_con(**tables, checkpoints=[ckpt]), "training_signal").to_pylist()
    for stage, sink_, key in (("generator", gen, "advantage"), ("policy", sink, "score")):
        want = sink_.zero_std_by_step(key)
        got = [{k: r[k] for k in want[0]} for r in out if r["stage"] == stage]
        assert [(g["step"], g["groups"], g["zero_std_groups"]) for g in got] == [
            (w["step"], w["groups"], w["zero_std_groups"]) for w in want
        ]
        for g, w in zip(got, want):
            assert g["zero_std_share"] == pytest.approx(w["zero_std_share"])
            assert (g["reward_std_mean"] is None) == (w["reward_std_mean"] is None)
            if w["reward_std_mean"] is not None:
                assert g["reward_std_mean"] == pytest.approx(w["reward_std_mean"])


def test_policy_rewards_rows_stay_out_of_gap_by_round():
    rewards = [
        dict(RUN, set_id=0, rollout=0, r_disc=0.2, r_anchor=-1.0),
        dict(RUN, stage="policy", set_id=0, rollout=0, advantage=0.5),
    ]
    out = sql.run(_con(rewards=rewards), "gap_by_round").to_pylist()
    assert [(r["stage"], r["n_rollouts"], r["n_unscorable_rewards"]) for r in out] == [("generator", 1, 0)]
