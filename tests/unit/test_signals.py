"""Degenerate-signal figures and warnings (dr_core.scoring.signals): zero-std GRPO groups per step, the verifier's
yes-rate, constant-score sets, every warning branch at its boundaries; the round summary's signal numbers; the training
records' policy rewards rows; the coevolve summary's warnings (flow helper and CLI table). No model, no Prefect run."""

from __future__ import annotations

import statistics

import pytest

from dr_core.runs import round_steps as pipeline
from dr_core.scoring import signals
from dr_core.scoring.signals import (
    CONSTANT_SCORE_WARN,
    MOSTLY_ZERO_STD,
    YES_RATE_HIGH,
    YES_RATE_LOW,
    ZERO_STD,
    constant_score_share,
    group_std,
    no_gradient_steps,
    signal_warnings,
    yes_rate,
    zero_std_by_step,
)
from dr_core.train.records import RolloutSink


def _step(step, groups, zero, std=0.1):
    return {
        "step": step,
        "groups": groups,
        "zero_std_groups": zero,
        "zero_std_share": zero / groups if groups else 0,
        "reward_std_mean": std,
    }


# -- figures ----------------------------------------------------------------------------------------------------------
def test_group_std_is_the_sample_std_of_the_known_rewards():
    assert group_std([1.0, 0.0, None, 0.5]) == pytest.approx(statistics.stdev([1.0, 0.0, 0.5]))
    assert group_std([0.3, None]) is None and group_std([None, None]) is None and group_std([]) is None
    assert group_std([0.25, 0.25]) == 0.0


def test_is_zero_std_boundary():
    assert signals.is_zero_std(None) and signals.is_zero_std(0.0) and signals.is_zero_std(ZERO_STD * 0.99)
    assert not signals.is_zero_std(ZERO_STD) and not signals.is_zero_std(0.5)


def test_zero_std_by_step_counts_groups_per_step():
    rollouts = [
        (0, 7, 0.5),
        (0, 7, 0.5),  # step 0, group 7: constant -> zero std
        (0, 8, 0.0),
        (0, 8, 1.0),  # step 0, group 8: varies
        (1, 7, None),
        (1, 7, None),  # step 1: every reward unscorable -> zero std
        (1, 8, 0.2),
        (1, 8, None),  # one scorable reward: no std -> zero std
        (2, 7, 0.1),
        (2, 7, 0.1 + 1e-7),  # below ZERO_STD -> zero std
    ]
    out = zero_std_by_step(reversed(rollouts))  # arrival order does not matter
    assert [(s["step"], s["groups"], s["zero_std_groups"], s["zero_std_share"]) for s in out] == [
        (0, 2, 1, 0.5),
        (1, 2, 2, 1.0),
        (2, 1, 1, 1.0),
    ]
    assert out[0]["reward_std_mean"] == pytest.approx((0.0 + statistics.stdev([0.0, 1.0])) / 2)
    assert out[1]["reward_std_mean"] is None  # no group with 2 scorable rewards
    assert no_gradient_steps(out) == 2 and no_gradient_steps(None) == 0 and no_gradient_steps([]) == 0
    assert zero_std_by_step([]) == []


def test_yes_rate_leaves_unknown_verdicts_out():
    assert yes_rate([True, True, None, False, 1, 0]) == (pytest.approx(0.6), 5)
    assert yes_rate([None, None]) == (None, 0) and yes_rate([]) == (None, 0)


def test_constant_score_share_per_scored_list():
    rows = [
        dict(stage="measure", set_id=s, rollout=k, target="C", response=i, score=v)
        for s, k, scores in (
            (0, 0, [0.5, 0.5]),
            (0, 1, [0.0, 1.0]),
            (1, 0, [0.25, None, 0.25]),
            (2, 0, [0.75, None]),
        )  # set 2: one scored response, not a list
        for i, v in enumerate(scores)
    ]
    rows.append(dict(stage="measure", set_id=3, rollout=0, target="anchor", response=1, score=1.0))
    assert constant_score_share(rows) == pytest.approx(2 / 3)
    assert constant_score_share(rows[-1:]) is None and constant_score_share([]) is None


# -- warnings, branch by branch ---------------------------------------------------------------------------------------
def test_no_gradient_at_every_step_says_the_update_did_nothing():
    (w,) = signal_warnings([{"role": "policy", "round": 1, "steps": [_step(2, 4, 4, None)]}])
    assert w == (
        "policy update, round 1: no gradient: every GRPO group had zero reward std at step 2 (the update did nothing)"
    )
    (w,) = signal_warnings(
        [{"role": "generator", "round": 3, "steps": [_step(0, 2, 2), _step(1, 2, 2), _step(2, 2, 2)]}]
    )
    assert "generator update, round 3: no gradient" in w and "at steps 0, 1 and 2 (the update did nothing)" in w


def test_no_gradient_at_some_steps_names_them():
    (w,) = signal_warnings([{"role": "generator", "round": 1, "steps": [_step(0, 2, 2), _step(1, 2, 0)]}])
    assert w.endswith("at step 0 (the update did nothing at that step)")
    (w,) = signal_warnings(
        [{"role": "generator", "round": 1, "steps": [_step(0, 2, 2), _step(1, 2, 0), _step(2, 2, 2)]}]
    )
    assert w.endswith("at steps 0 and 2 (the update did nothing at those steps)")


def test_weak_gradient_boundary():
    at = [_step(0, 4, 2)]  # share exactly MOSTLY_ZERO_STD: flagged
    assert at[0]["zero_std_share"] == MOSTLY_ZERO_STD
    (w,) = signal_warnings([{"role": "policy", "round": 2, "steps": at}])
    assert w.startswith("policy update, round 2: weak gradient") and "2 of 4 at step 0" in w
    below = [_step(0, 5, 2), _step(1, 4, 0)]  # 0.4 < 0.5 and 0: nothing to say
    assert signal_warnings([{"role": "policy", "round": 2, "steps": below}]) == []
    both = signal_warnings([{"role": "policy", "round": 2, "steps": [_step(0, 4, 4), _step(1, 4, 3)]}])
    assert [w.split(": ")[1] for w in both] == ["no gradient", "weak gradient"]


def test_updates_without_steps_say_nothing():
    assert (
        signal_warnings(
            [
                {"role": "generator", "round": 1, "steps": None},
                {"role": "policy", "round": 1, "steps": []},
                {"role": "policy", "round": 2, "steps": [_step(0, 0, 0)]},
            ]
        )
        == []
    )


@pytest.mark.parametrize(
    "rate, expected",
    [
        (
            1.0,
            "verifier yes-rate 1.00 in round 0 is above 0.95: the verifier says yes to everything, so scores cannot "
            "separate responses",
        ),
        (
            0.98,
            "verifier yes-rate 0.98 in round 0 is above 0.95: the verifier says yes to almost everything, so scores "
            "cannot separate responses",
        ),
        (
            0.951,
            "verifier yes-rate 0.951 in round 0 is above 0.95: the verifier says yes to almost everything, so "
            "scores cannot separate responses",
        ),
        (YES_RATE_HIGH, None),
        (0.5, None),
        (YES_RATE_LOW, None),
        (None, None),
        (
            0.049,
            "verifier yes-rate 0.049 in round 0 is below 0.05: the verifier says no to almost everything, so "
            "scores cannot separate responses",
        ),
        (
            0.0,
            "verifier yes-rate 0.00 in round 0 is below 0.05: the verifier says no to everything, so scores cannot "
            "separate responses",
        ),
    ],
)
def test_yes_rate_warning_boundaries(rate, expected):
    assert signal_warnings(yes_rates={0: rate}) == ([expected] if expected else [])


@pytest.mark.parametrize(
    "share, expected",
    [
        (1.0, "every scored set"),
        (0.75, "75% of the scored sets"),
        (CONSTANT_SCORE_WARN, "50% of the scored sets"),
        (0.49, None),
        (0.0, None),
        (None, None),
    ],
)
def test_constant_score_warning_boundaries(share, expected):
    out = signal_warnings(constant_score_shares={4: share})
    if expected is None:
        assert out == []
    else:
        (w,) = out
        assert w.startswith(f"constant scores in round 4: {expected} gave every response the same Eq. 12 score")


def test_warnings_come_in_round_then_kind_order():
    out = signal_warnings(
        [
            {"role": "policy", "round": 1, "steps": [_step(0, 1, 1)]},
            {"role": "generator", "round": 1, "steps": [_step(0, 1, 1)]},
            {"role": "generator", "round": 0, "steps": [_step(0, 1, 1)]},
        ],
        yes_rates={1: 1.0, 0: 0.5},
        constant_score_shares={1: 1.0},
    )
    assert [w.split(":")[0] for w in out] == [
        "generator update, round 0",
        "generator update, round 1",
        "policy update, round 1",
        "verifier yes-rate 1.00 in round 1 is above 0.95",
        "constant scores in round 1",
    ]


# -- the round summary ------------------------------------------------------------------------------------------------
def test_summary_carries_yes_rate_and_constant_score_share():
    verdicts = [
        dict(stage="measure", set_id=0, rollout=0, item=0, target=t, response=i, verdict=v, verifier="v")
        for t, i, v in (("C", 0, True), ("C", 1, True), ("anchor", 1, True), ("anchor", 2, None), ("anchor", 3, False))
    ]
    scores = [
        dict(stage="measure", set_id=s, rollout=0, target="C", response=i, score=v)
        for s, vs in ((0, [1.0, 1.0]), (1, [0.0, 0.5]))
        for i, v in enumerate(vs)
    ]
    s = pipeline.summarise([], [], [], verdicts, scores, [], None)
    assert (s.verdicts, s.verdicts_scored, s.unscorable_verdicts) == (5, 4, 1)
    assert s.verifier_yes_rate == pytest.approx(0.75) and s.constant_score_sets_share == pytest.approx(0.5)
    empty = pipeline.summarise([], [], [], [], [], [], None)
    assert (empty.verifier_yes_rate, empty.verdicts_scored, empty.constant_score_sets_share) == (None, 0, None)


# -- training records: the policy update's rewards rows ---------------------------------------------------------------
def policy_records(scores_by_step: dict[int, list[list[float | None]]]) -> list[dict]:
    """Policy rollout records (dr_core.train.grpo shape): scores_by_step[step][group] = the K completions' scores."""
    return [
        {
            "group_id": g,
            "prompt_id": f"p{g}",
            "rollout": r,
            "step": step,
            "text": f"y{step}.{g}.{r}",
            "rubric_text": "",
            "rubric_items": [("c", 1)],
            "rubric_error": None,
            "verdicts": [None if sc is None else int(sc > 0.5)],
            "score": sc,
        }
        for step, groups in scores_by_step.items()
        for g, scs in enumerate(groups)
        for r, sc in enumerate(scs)
    ]


def test_policy_tables_write_rewards_rows_with_step_and_eq_21_advantages():
    sink = RolloutSink("P0", "V", 3, generator="G1")
    sink(policy_records({0: [[1.0, 0.0, None], [0.5, 0.5, 0.5]], 1: [[None, 0.25, None]]}))
    rewards = sink.policy_tables()["rewards"]
    assert [(r["stage"], r["set_id"], r["rollout"]) for r in rewards] == [
        ("policy", 0, 0),
        ("policy", 0, 1),
        ("policy", 0, 2),
        ("policy", 1, 0),
        ("policy", 1, 1),
        ("policy", 1, 2),
        ("policy", 2, 3),
        ("policy", 2, 4),
        ("policy", 2, 5),
    ]  # rollout = step * K + index
    adv = [r["advantage"] for r in rewards]
    std = statistics.stdev([1.0, 0.0])
    assert adv[:3] == [pytest.approx(0.5 / (std + 1e-4)), pytest.approx(-0.5 / (std + 1e-4)), 0.0]
    assert adv[3:] == [0.0] * 6  # constant group; a group with one scored completion
    assert all(r["r_disc"] is None and r["r_anchor"] is None for r in rewards)
    steps = sink.zero_std_by_step("score")
    assert [(s["step"], s["groups"], s["zero_std_groups"]) for s in steps] == [(0, 2, 1), (1, 1, 1)]


# -- the coevolve summary: flow helper and CLI ------------------------------------------------------------------------
def _coevolve_result(policy_steps, yes):
    from dr_core.runs.refs import CoevolveRound, RoundSummary, UpdateSummary
    from flows.coevolve import round_warnings

    counts = dict(prompts=2, sets=2, responses=4, rubric_rollouts=4, rubric_failures=0, rubric_items=8)
    measure = RoundSummary(
        **counts,
        verdicts=10,
        unscorable_verdicts=0,
        verdicts_scored=10,
        verifier_yes_rate=yes,
        constant_score_sets_share=0.25,
        unscorable_scores=0,
        r_disc=0.0,
        r_anchor=-1.0,
        anchor_gap=0.0,
        eval_accuracy=0.0,
        eval_n=2,
    )

    def update(steps, unparseable, unscorable):
        return UpdateSummary(
            reward_first=0.1,
            reward_last=0.2,
            steps=2,
            seconds=1.0,
            step_seconds=0.5,
            unparseable=unparseable,
            unscorable=unscorable,
            rollouts=4,
            rollout_stats=None,
            zero_std_by_step=steps,
            no_gradient_steps=no_gradient_steps(steps),
        )

    rounds = [
        CoevolveRound(round=0, generator="g0", policy="p0", measure=measure),
        CoevolveRound(
            round=1,
            generator="g1",
            policy="p1",
            measure=measure,
            generator_update=update([_step(0, 2, 0), _step(1, 2, 1)], 0, None),
            policy_update=update(policy_steps, None, 0),
        ),
    ]
    return {
        "run_id": "r",
        "rounds": [r.model_dump() for r in rounds],
        "steps": {"r1/train-policy": {"state": "Completed", "seconds": 3.0}},
        "warnings": round_warnings(rounds),
    }


def test_coevolve_warnings_and_cli_rows(monkeypatch):
    from cli.output import console
    from cli.results import print_coevolve

    monkeypatch.setattr(console, "_width", 220)  # one line per table row and per warning

    result = _coevolve_result([_step(0, 2, 2, None), _step(1, 2, 2, None)], yes=1.0)
    assert result["warnings"] == [
        "verifier yes-rate 1.00 in round 0 is above 0.95: the verifier says yes to everything, so scores cannot "
        "separate responses",
        "generator update, round 1: weak gradient: most GRPO groups had zero reward std (1 of 2 at step 1); those "
        "groups taught nothing",
        "policy update, round 1: no gradient: every GRPO group had zero reward std at steps 0 and 1 (the update did "
        "nothing)",
        "verifier yes-rate 1.00 in round 1 is above 0.95: the verifier says yes to everything, so scores cannot "
        "separate responses",
    ]
    with console.capture() as cap:
        print_coevolve(result)
    out = cap.get()
    assert "zero-std GRPO groups per step" in out and "0: 1.00, 1: 1.00 (2 without" in out and "0: 0.00, 1: 0.50" in out
    assert "verifier yes-rate" in out and "1.0000 (n=10)" in out and "0.2500" in out
    assert out.rstrip().endswith("separate responses") and out.count("warning:") == 4
    fine = _coevolve_result([_step(0, 2, 0)], yes=0.5)
    assert [w.split(":")[1] for w in fine["warnings"]] == [" weak gradient"]  # only the generator's step 1


def test_signal_checks_pass_fail_and_missing():
    from dr_core.scoring.signals import signal_checks

    def steps(*zero_of_groups):
        return [
            {"step": i, "groups": g, "zero_std_groups": z, "zero_std_share": z / g}
            for i, (z, g) in enumerate(zero_of_groups)
        ]

    good = [
        {"round": 0, "measure": {"verifier_yes_rate": 0.15, "constant_score_sets_share": 0.25}},
        {
            "round": 1,
            "measure": {"verifier_yes_rate": 0.85, "constant_score_sets_share": 0.49},
            "generator_update": {"zero_std_by_step": steps((0, 1), (0, 1))},
            "policy_update": {"zero_std_by_step": steps((1, 2), (0, 2))},
        },
    ]
    assert [c["ok"] for c in signal_checks(good)] == [True, True, True, True]
    bad = [
        {
            "round": 1,
            "measure": {"verifier_yes_rate": 0.86, "constant_score_sets_share": 0.5},
            "generator_update": {"zero_std_by_step": steps((0, 1), (1, 1))},
            "policy_update": {"zero_std_by_step": steps((2, 2), (0, 2))},
        }
    ]
    checks = signal_checks(bad)
    assert [c["ok"] for c in checks] == [False, False, False, False]
    assert checks[0]["detail"] == "step 0: 0/2, step 1: 2/2" and checks[2]["detail"] == "round 1: 0.86"
    assert [c["ok"] for c in signal_checks([{"round": 0, "measure": {}}])] == [None, None, None, None]


def test_a_judge_that_always_picks_one_position_is_flagged():
    from dr_core.scoring.signals import judge_position_warning, signal_warnings

    assert judge_position_warning(1, 0.5) is None and judge_position_warning(1, None) is None
    assert judge_position_warning(1, 0.94) is None and judge_position_warning(1, 0.06) is None
    assert "first-shown answer in 100%" in judge_position_warning(1, 1.0)
    assert "second-shown answer in 96%" in judge_position_warning(2, 0.04)
    out = signal_warnings(yes_rates={1: 1.0}, judge_position_rates={1: 1.0})
    assert len(out) == 2 and "judge" in out[1] and "cannot move from 0.5" in out[1]
