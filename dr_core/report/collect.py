"""The report's data side: the named queries in ``sql/`` on one run -> plain, JSON-able data (``collect``).

A query that fails is recorded (its name and error in ``errors``) and its part of the data stays empty: the page
(``dr_core.report.render``, which never sees DuckDB) shows "no data" there and lists the errors under "Query errors".
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict

from dr_core.config.monitors import MonitorSettings
from dr_core.errors import DRError
from dr_core.report.monitors import run_monitors
from dr_core.scoring import signals
from dr_core.store import sql
from dr_core.store.schemas import TABLES, spec

#: Stage values of the stale-versus-fresh experiment (dr_core.store.schemas.STAGES).
STALE, FRESH = "stale", "fresh"
#: The eval-table metrics of the in-loop policy evaluation (tasks/policy_eval.py): P(t) against P(0).
WIN_METRICS = ("win_rate", "tie_rate", "win_rate_ci_low", "win_rate_ci_high", "n", "unscorable")


class ReportError(DRError, ValueError):
    """A report that cannot be made as asked (unknown run, bad output directory, every query failed)."""


class _QueryLog(list):
    """The failed queries' messages, and how many queries were tried."""

    tried = 0


def _query(con, name: str, params: dict, errors: list[str]) -> list[dict]:
    if isinstance(errors, _QueryLog):
        errors.tried += 1
    try:
        return sql.run(con, name, params).to_pylist()
    except (sql.DatabaseError, sql.QueryError) as exc:
        errors.append(f"{name}: {exc}")
        return []


def stage_metrics(con: sql.Connection, run_id: str, errors: list[str] | None = None) -> list[dict]:
    """One dict per (round, stage) of the run: anchor gap (Eq. 2), spread on C, R_disc, R_anchor, saturation."""
    errors = [] if errors is None else errors
    p = {"run_id": run_id}
    merged: dict[tuple[int, str], dict] = defaultdict(dict)
    for r in _query(con, "gap_by_round", p, errors):
        merged[(r["round"], r["stage"])].update(
            anchor_gap=r["mean_gap"],
            n_anchor_lists=r["n_lists"],
            n_scored_anchor_lists=r["n_scored_lists"],
            r_disc=r["mean_r_disc"],
            r_anchor=r["mean_r_anchor"],
            n_rollouts=r["n_rollouts"],
            n_unscorable_rewards=r["n_unscorable_rewards"],
        )
    for r in _query(con, "set_gap", p, errors):
        merged[(r["round"], r["stage"])].update(
            set_spread=r["mean_spread"], n_sets=r["n_lists"], zero_spread_share=r["zero_spread_share"]
        )
    for r in _query(con, "saturation", p, errors):
        merged[(r["round"], r["stage"])].update(
            saturation=r["saturation"], n_items_judged=r["n_judged"], n_items_incomplete=r["n_incomplete"]
        )
    return [{"round": t, "stage": s, **v} for (t, s), v in sorted(merged.items())]


def stale_fresh(metrics: list[dict], round_no: int | None = None) -> dict | None:
    """The stale and fresh rows of ``stage_metrics`` at ``round_no`` (None: the latest round having both)."""
    by = {(m["round"], m["stage"]): m for m in metrics}
    rounds = sorted({t for t, s in by if s == STALE} & {t for t, s in by if s == FRESH})
    if round_no is None:
        round_no = rounds[-1] if rounds else None
    if round_no is None or round_no not in rounds:
        return None
    return {"round": round_no, STALE: by[(round_no, STALE)], FRESH: by[(round_no, FRESH)]}


def update_steps(training_signal: list[dict]) -> list[dict]:
    """sql/training_signal rows -> one {"role", "round", "steps"} per GRPO update (steps as
    ``signals.zero_std_by_step`` gives them); rows without a step (group size unknown) are left out."""
    by: dict[tuple[str, int], list[dict]] = defaultdict(list)
    for r in training_signal:
        if r["step"] is not None:
            by[(r["stage"], r["round"])].append(
                {k: r[k] for k in ("step", "groups", "zero_std_groups", "zero_std_share", "reward_std_mean")}
            )
    return [
        {"role": role, "round": t, "steps": sorted(v, key=lambda s: s["step"])} for (role, t), v in sorted(by.items())
    ]


def run_warnings(
    metrics: list[dict], costs: list[dict], training_signal: list[dict], eval_summary: list[dict] = ()
) -> list[str]:
    """The run's degenerate-signal warnings in words (``signals.signal_warnings``): steps without gradient of each
    update, the verifier's yes-rate on the measured sets of each round (sql/stage_costs' yes_rate, stage measure),
    the share of measured sets whose scores are constant (sql/set_gap's zero_spread_share), and a policy-evaluation
    judge that always picks one position (the eval table's judge_position_a_rate)."""
    return signals.signal_warnings(
        update_steps(training_signal),
        yes_rates={c["round"]: c["yes_rate"] for c in costs if c["stage"] == "measure"},
        constant_score_shares={m["round"]: m.get("zero_spread_share") for m in metrics if m["stage"] == "measure"},
        judge_position_rates={r["round"]: r["mean"] for r in eval_summary if r["metric"] == "judge_position_a_rate"},
    )


def _grids(rows: list[dict]) -> list[dict]:
    """case_study rows -> one grid per set: items x responses of verdicts, scores and texts per response."""
    sets: dict[int, dict] = {}
    for r in rows:
        g = sets.setdefault(
            r["set_id"],
            {
                "set_id": r["set_id"],
                "prompt_id": r["prompt_id"],
                "prompt": r["prompt"],
                "generator_ckpt": r["generator_ckpt"],
                "error": None,
                "items": {},
                "columns": [],
                "scores": {},
                "texts": {},
            },
        )
        if r["item"] is None:
            g["error"] = r["error"] or "no usable rubric"
            continue
        it = g["items"].setdefault(r["item"], {"criterion": r["criterion"], "weight": r["weight"], "verdicts": {}})
        if r["target"] is None:
            continue
        col = f"{r['target']}:{r['response']}"
        if col not in g["scores"]:
            g["columns"].append(col)
            g["scores"][col] = r["score"]
            g["texts"][col] = r["text"]
        it["verdicts"][col] = r["verdict"]
    out = []
    for g in sets.values():
        g["columns"].sort(key=lambda c: (c.split(":")[0] != "C", int(c.split(":")[1])))
        g["items"] = [g["items"][k] for k in sorted(g["items"])]
        out.append(g)
    return out


def collect(
    con: sql.Connection, run_id: str, n_examples: int = 3, monitor_settings: MonitorSettings | None = None
) -> dict:
    """Everything the report shows for ``run_id``, as plain JSON-able data (also written beside the page); the
    reward-hacking monitors judge with ``monitor_settings`` (default: ``MonitorSettings()``)."""
    errors = _QueryLog()
    p = {"run_id": run_id}
    metrics = stage_metrics(con, run_id, errors)
    measure_rounds = sorted({m["round"] for m in metrics if m["stage"] == "measure"})
    sf = stale_fresh(metrics)
    views = []  # (label, round, stage) of the case-study grids
    if measure_rounds:
        views.append(
            (
                f"round {measure_rounds[0]}, measure: P({measure_rounds[0]})'s sets, G({measure_rounds[0]})'s rubrics",
                measure_rounds[0],
                "measure",
            )
        )
        if measure_rounds[-1] != measure_rounds[0]:
            t = measure_rounds[-1]
            views.append((f"round {t}, measure: P({t})'s sets, G({t})'s rubrics", t, "measure"))
    if sf:
        t = sf["round"]
        views.append((f"round {t}, stale: P({t - 1})'s sets, stale G({t - 1})'s rubrics", t, STALE))
        views.append((f"round {t}, fresh: the same sets, fresh G({t})'s rubrics", t, FRESH))
    examples = [
        {
            "label": label,
            "round": t,
            "stage": stage,
            "sets": _grids(
                _query(con, "case_study", {"run_id": run_id, "round": t, "stage": stage, "n_sets": n_examples}, errors)
            ),
        }
        for label, t, stage in views
    ]
    summary = _query(con, "eval_summary", p, errors)
    costs = _query(con, "stage_costs", p, errors)
    training_signal = _query(con, "training_signal", p, errors)
    found = run_monitors(con, run_id, monitor_settings, lambda name, params: _query(con, name, params, errors))
    return {
        "run_id": run_id,
        "generated_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "warnings": run_warnings(metrics, costs, training_signal, summary),
        "monitors": found,
        "metrics": metrics,
        "training": _query(con, "training_rewards", p, errors),
        "training_signal": training_signal,
        "eval": [r for r in summary if r["metric"] in ("accuracy", "ties", "unscorable")],
        "win_rate": [r for r in summary if r["metric"] in WIN_METRICS],
        "stale_fresh": sf,
        "examples": examples,
        "costs": costs,
        "run_log": _query(con, "run_log", p, errors),
        "step_times": _query(con, "step_times", p, errors),
        "errors": list(errors),
        "queries": errors.tried,
    }


def known_runs(con: sql.Connection) -> list[str]:
    """Run ids with anything recorded: the ``runs`` table, else any run-partitioned table's rows."""
    found: set[str] = set()
    for table in (name for name in TABLES if "run_id" in spec(name).partition_by):
        try:
            found |= {r[0] for r in con.sql(f"SELECT DISTINCT run_id FROM {table}").fetchall()}
        except sql.DatabaseError:
            continue
    return sorted(found)
