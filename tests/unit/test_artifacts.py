"""The Prefect artifacts' contents (flows/artifacts.py) and the shared run tables (dr_core/report/tables.py), as plain
values; tests/integration/test_prefect_artifacts.py publishes and reads them back through Prefect's API."""

from __future__ import annotations

import logging

from flows import artifacts


def test_a_key_holds_only_what_prefect_accepts():
    assert artifacts.artifact_key("demo", "summary") == "dr-demo-summary"
    assert artifacts.artifact_key("My_Run.2026/12", "signals") == "dr-my-run-2026-12-signals"
    assert artifacts.artifact_key("__", "summary") == "dr-run-summary"


def _round(t, r_disc, update=None):
    measure = {"r_disc": r_disc, "r_anchor": -1.2, "anchor_gap": 0.1, "eval_accuracy": 0.5, "eval_n": 4}
    measure |= {"unscorable_verdicts": 1, "verdicts": 10, "verifier_yes_rate": 0.4, "verdicts_scored": 9}
    measure |= {"constant_score_sets_share": 0.25}
    return {"round": t, "generator": f"g{t}", "policy": f"p{t}", "measure": measure} | (update or {})


def test_the_artifact_table_is_the_terminal_table_with_a_column_per_round():
    update = {"reward_first": 0.1, "reward_last": 0.25, "rollouts": 8, "unparseable": 2, "unscorable": 0}
    update |= {
        "steps": 2,
        "seconds": 3.0,
        "zero_std_by_step": [{"step": 0, "groups": 2, "zero_std_groups": 1, "zero_std_share": 0.5}],
    }
    rounds = [_round(0, 0.05), _round(1, 0.125, {"generator_update": update, "policy_update": update})]
    rows = artifacts.coevolve_rows(rounds)
    by = {r["figure"]: r for r in rows}
    assert list(rows[0]) == ["figure", "round 0 (start)", "round 1"]
    assert by["measured R_disc on P(t)'s sets (Eq. 13)"] == {
        "figure": "measured R_disc on P(t)'s sets (Eq. 13)",
        "round 0 (start)": "0.0500",
        "round 1": "0.1250",
    }
    gen = by["generator reward, first -> last step (R_disc + lam R_anchor)"]
    assert (gen["round 0 (start)"], gen["round 1"]) == ("-", "0.1000 -> 0.2500")
    assert by["generator rubric rollouts unparseable"]["round 1"] == "2/8"
    assert by["unscorable verdicts"]["round 0 (start)"] == "1/10"


def test_the_signals_markdown_says_each_check_and_warning():
    checks = [
        {"check": "policy update moves", "ok": False, "detail": "step 0: 0/2"},
        {"check": "yes-rate in band", "ok": True, "detail": "round 1: 0.40"},
        {"check": "scores not constant", "ok": None, "detail": "no verdicts"},
    ]
    md = artifacts.signals_markdown("demo", checks, ["policy update, round 1: no gradient"])
    assert "- **NO**: policy update moves (step 0: 0/2)" in md
    assert "- yes: yes-rate in band (round 1: 0.40)" in md and "- n/a: scores not constant (no verdicts)" in md
    assert md.rstrip().endswith("- policy update, round 1: no gradient")
    assert "- none" in artifacts.signals_markdown("demo", [], []) and "no checks yet" in artifacts.signals_markdown(
        "demo", [], []
    )


def test_a_refused_publication_is_one_warning_and_the_run_goes_on(caplog):
    def refuse():
        raise ConnectionError("connection refused")

    done = []
    with caplog.at_level(logging.WARNING, logger="flows.artifacts"):
        ok = artifacts._publish(refuse, lambda: done.append(1))
    assert ok is False and done == []  # the first refusal stops the rest: one line, not one per artifact
    (record,) = [r for r in caplog.records if r.name == "flows.artifacts"]
    assert "not published (ConnectionError: connection refused); the run goes on" in record.getMessage()
    assert artifacts._publish(lambda: done.append(1)) is True and done == [1]
