"""The gap-analysis report of one run: named queries in ``sql/`` -> plain data -> one self-contained HTML page.

    dr report --store ./store --run-id demo --out ./report        # -> ./report/report.html and report.json

What it shows, round over round (paper sections 3.1, 4.4, Figure 2, appendix H):
  gap          Eq. 2 gap on the ranked anchor lists (sql/gap_by_round) and the score spread on the policy's own
               sets C (sql/set_gap: C has no reference order, so mean |S_i - S_j| over pairs)
  warnings     degenerate signal in words, at the top of the page and in report.json (dr_core.scoring.signals): GRPO steps
               without gradient, a verifier that says yes (or no) to almost everything, constant scores
  signal       per round: the verifier's yes-rate on the measured sets (sql/stage_costs), the share of sets with
               constant scores (sql/set_gap), the update steps without gradient (sql/training_signal)
  training     R_disc (Eq. 13) and R_anchor (Eq. 15) of the generator update's rollouts per GRPO step
               (sql/training_rewards), and the share of its GRPO groups with zero reward std per step
               (sql/training_signal); the same share for the policy update
  saturation   rubric items every response of a set answers alike (sql/saturation)
  accuracy     evaluator accuracy on the held-out eval slice (sql/eval_summary)
  stale-fresh  the same sets of P(t-1) scored by the stale G(t-1) and the fresh G(t) (stages "stale"/"fresh", written
               by ``dr stale-fresh``): the paper's Figure 2 comparison for this run
  examples     rubric, verdict matrix and Eq. 12 scores for a few prompts (sql/case_study; appendix H)
  cost         tokens, rubric and verdict counts, training seconds per stage and round, flow executions and their
               steps (sql/stage_costs, sql/run_log, sql/step_times)

Figures are inline SVG (``dr_core.report.svg``); the page loads nothing from anywhere (no scripts, no external CSS or
fonts), and text from the data is escaped with "://" broken by a zero-width space, so the raw HTML holds no URL a
browser could fetch. Missing data (a run without training, no eval, no stale-fresh run) shows as "no data"; a query
that fails shows its error in place of its section, never stops the report.
"""

from __future__ import annotations

import datetime as dt
import re
from collections import defaultdict
from html import escape
from pathlib import Path
from typing import Callable

import duckdb

from dr_core.store import atomic
from dr_core.scoring import signals
from dr_core.store import sql
from dr_core.store.atomic import json_text
from dr_core.store.schemas import TABLES, spec
from dr_core.store.artifacts import SEGMENT_PATTERN, Store
from dr_core.report.svg import bar_chart, line_chart

#: Stage values of the stale-versus-fresh experiment (dr_core.store.schemas.STAGES).
STALE, FRESH = "stale", "fresh"
NO_DATA = '<p class="nodata">no data</p>'


# -- data -------------------------------------------------------------------------------------------------------------
class ReportError(ValueError):
    """A report that cannot be made as asked (unknown run, bad output directory, every query failed)."""


class _QueryLog(list):
    """The failed queries' messages, and how many queries were tried."""

    tried = 0


def _query(con, name: str, params: dict, errors: list[str]) -> list[dict]:
    if isinstance(errors, _QueryLog):
        errors.tried += 1
    try:
        return sql.run(con, name, params).to_pylist()
    except (duckdb.Error, sql.QueryError) as exc:
        errors.append(f"{name}: {exc}")
        return []


def stage_metrics(con: duckdb.DuckDBPyConnection, run_id: str, errors: list[str] | None = None) -> list[dict]:
    """One dict per (round, stage) of the run: anchor gap (Eq. 2), spread on C, R_disc, R_anchor, saturation."""
    errors = [] if errors is None else errors
    p = {"run_id": run_id}
    merged: dict[tuple[int, str], dict] = defaultdict(dict)
    for r in _query(con, "gap_by_round", p, errors):
        merged[(r["round"], r["stage"])].update(
            anchor_gap=r["mean_gap"], n_anchor_lists=r["n_lists"], n_scored_anchor_lists=r["n_scored_lists"],
            r_disc=r["mean_r_disc"], r_anchor=r["mean_r_anchor"], n_rollouts=r["n_rollouts"],
            n_unscorable_rewards=r["n_unscorable_rewards"])
    for r in _query(con, "set_gap", p, errors):
        merged[(r["round"], r["stage"])].update(
            set_spread=r["mean_spread"], n_sets=r["n_lists"], zero_spread_share=r["zero_spread_share"])
    for r in _query(con, "saturation", p, errors):
        merged[(r["round"], r["stage"])].update(
            saturation=r["saturation"], n_items_judged=r["n_judged"], n_items_incomplete=r["n_incomplete"])
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
            by[(r["stage"], r["round"])].append({k: r[k] for k in ("step", "groups", "zero_std_groups",
                                                                   "zero_std_share", "reward_std_mean")})
    return [{"role": role, "round": t, "steps": sorted(v, key=lambda s: s["step"])}
            for (role, t), v in sorted(by.items())]


def run_warnings(metrics: list[dict], costs: list[dict], training_signal: list[dict],
                 eval_summary: list[dict] = ()) -> list[str]:
    """The run's degenerate-signal warnings in words (``signals.signal_warnings``): steps without gradient of each
    update, the verifier's yes-rate on the measured sets of each round (sql/stage_costs' yes_rate, stage measure),
    the share of measured sets whose scores are constant (sql/set_gap's zero_spread_share), and a policy-evaluation
    judge that always picks one position (the eval table's judge_position_a_rate)."""
    return signals.signal_warnings(
        update_steps(training_signal),
        yes_rates={c["round"]: c["yes_rate"] for c in costs if c["stage"] == "measure"},
        constant_score_shares={m["round"]: m.get("zero_spread_share") for m in metrics if m["stage"] == "measure"},
        judge_position_rates={r["round"]: r["mean"] for r in eval_summary if r["metric"] == "judge_position_a_rate"})


def _grids(rows: list[dict]) -> list[dict]:
    """case_study rows -> one grid per set: items x responses of verdicts, scores and texts per response."""
    sets: dict[int, dict] = {}
    for r in rows:
        g = sets.setdefault(r["set_id"], {"set_id": r["set_id"], "prompt_id": r["prompt_id"], "prompt": r["prompt"],
                                          "generator_ckpt": r["generator_ckpt"], "error": None, "items": {},
                                          "columns": [], "scores": {}, "texts": {}})
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


def collect(con: duckdb.DuckDBPyConnection, run_id: str, n_examples: int = 3) -> dict:
    """Everything the report shows for ``run_id``, as plain JSON-able data (also written beside the page)."""
    errors = _QueryLog()
    p = {"run_id": run_id}
    metrics = stage_metrics(con, run_id, errors)
    measure_rounds = sorted({m["round"] for m in metrics if m["stage"] == "measure"})
    sf = stale_fresh(metrics)
    views = []  # (label, round, stage) of the case-study grids
    if measure_rounds:
        views.append((f"round {measure_rounds[0]}, measure: P({measure_rounds[0]})'s sets, G({measure_rounds[0]})'s "
                      "rubrics", measure_rounds[0], "measure"))
        if measure_rounds[-1] != measure_rounds[0]:
            t = measure_rounds[-1]
            views.append((f"round {t}, measure: P({t})'s sets, G({t})'s rubrics", t, "measure"))
    if sf:
        t = sf["round"]
        views.append((f"round {t}, stale: P({t - 1})'s sets, stale G({t - 1})'s rubrics", t, STALE))
        views.append((f"round {t}, fresh: the same sets, fresh G({t})'s rubrics", t, FRESH))
    examples = [
        {"label": label, "round": t, "stage": stage,
         "sets": _grids(_query(con, "case_study", {"run_id": run_id, "round": t, "stage": stage,
                                                   "n_sets": n_examples}, errors))}
        for label, t, stage in views
    ]
    summary = _query(con, "eval_summary", p, errors)
    costs = _query(con, "stage_costs", p, errors)
    training_signal = _query(con, "training_signal", p, errors)
    return {
        "run_id": run_id,
        "generated_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "warnings": run_warnings(metrics, costs, training_signal, summary),
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


# -- HTML -------------------------------------------------------------------------------------------------------------
def _t(value) -> str:
    """Escaped text; "://" broken by a zero-width space so no URL in the data becomes a fetchable reference."""
    return escape(str(value)).replace("://", ":&#8203;//")


def _n(v, digits: int = 4) -> str:
    if v is None:
        return '<span class="na">n/a</span>'
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return _t(v)


def _table(headers: list[str], rows: list[list]) -> str:
    head = "".join(f"<th>{_t(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _chart(fn, *args, **kwargs) -> str:
    try:
        return f'<figure>{fn(*args, **kwargs)}</figure>'
    except ValueError:
        return NO_DATA


def _section(sid: str, title: str, intro: str, body: str) -> str:
    return f'<section id="{sid}"><h2>{_t(title)}</h2><p class="intro">{intro}</p>{body}</section>'


def _gap_section(d: dict) -> str:
    m = [r for r in d["metrics"] if r["stage"] == "measure"]
    chart = _chart(line_chart, [
        ("anchor lists: Eq. 2 gap (reference = anchor rank)", [(r["round"], r.get("anchor_gap")) for r in m]),
        ("policy sets C: spread, mean |S_i - S_j|", [(r["round"], r.get("set_spread")) for r in m]),
    ], "round t (P(t) sampled, G(t) writes the rubrics)", "score gap (Eq. 12 score units, 0..1)",
        title="Score gap per round, stage measure", x_tick_label="round {x}")
    rows = [[_n(r["round"]), _t(r["stage"]), _n(r.get("anchor_gap")),
             f'{_n(r.get("n_scored_anchor_lists"))}/{_n(r.get("n_anchor_lists"))}', _n(r.get("set_spread")),
             _n(r.get("zero_spread_share")), _n(r.get("r_disc")), _n(r.get("r_anchor"))] for r in d["metrics"]]
    table = _table(["round", "stage", "anchor gap (Eq. 2)", "scored / anchor lists", "spread on C",
                    "share of sets with spread 0", "mean R_disc (Eq. 13)", "mean R_anchor (Eq. 15)"], rows) if rows else NO_DATA
    intro = ("The <b>relative score gap</b> (Eq. 2) is the optimization signal the evaluator exposes (section 3.1): "
             "when it collapses, the policy update has nothing to climb. On the ranked anchor lists the gap is the mean "
             "over ordered pairs of S(better) - S(worse). The policy's own sets C have no reference order, so on C the "
             "<b>spread</b> (mean |S_i - S_j| over pairs) is shown: an upper bound on |Eq. 2| for any order; 0 means "
             "every response of the set scored the same. Stage <i>measure</i> is P(t)'s sets scored with G(t)'s "
             "rubrics; <i>generator</i> rows are the generator update's training rollouts; <i>stale</i>/<i>fresh</i> "
             "are the stale-versus-fresh experiment.")
    return _section("gap", "Score gap (Eq. 2) per round", intro, chart + (table if rows else ""))


def _training_section(d: dict) -> str:
    tr = [r for r in d["training"] if r["global_step"] is not None]
    markers = [(min(r["global_step"] for r in tr if r["round"] == t), f"round {t}") for t in sorted({r["round"] for r in tr})]
    c1 = _chart(line_chart, [("mean R_disc", [(r["global_step"], r["mean_r_disc"]) for r in tr])],
                "generator GRPO step (counted over the run's rounds)", "R_disc (Eq. 13)",
                title="Discriminability reward per training step", markers=markers)
    c2 = _chart(line_chart, [("mean R_anchor", [(r["global_step"], r["mean_r_anchor"]) for r in tr])],
                "generator GRPO step (counted over the run's rounds)", "R_anchor (Eq. 15, log-sigmoid)",
                title="Anchor reward per training step", markers=markers)
    rows = [[_n(r["round"]), _n(r["step"]), _n(r["global_step"]), _n(r["group_size"]), _n(r["n_rollouts"]),
             _n(r["n_unscorable"]), _n(r["mean_r_disc"]), _n(r["mean_r_anchor"])] for r in d["training"]]
    table = _table(["round", "step", "global step", "G", "rollouts", "unscorable", "mean R_disc", "mean R_anchor"],
                   rows) if rows else ""
    intro = ("Rewards of the generator update G(t-1) -> G(t), from its recorded GRPO rollouts (rewards table, stage "
             "generator; rollout = step x G + index). Unscorable rollouts (no usable rubric) are counted, not averaged. "
             "A run without training has no rows here.")
    if rows and not any(r["mean_r_disc"] is not None or r["mean_r_anchor"] is not None for r in tr):
        c1, c2 = '<p class="nodata">no data: no training rollout could be scored (every rubric unusable; see the table)</p>', ""
    body = (c1 + c2 + table) if rows else NO_DATA
    return _section("training", "Generator training rewards: R_disc and R_anchor over steps", intro,
                    body + f'<p class="intro">{ZERO_STD_INTRO}</p>' + _zero_std_block(d, "generator"))


ZERO_STD_INTRO = ("A GRPO group (the rollouts of one prompt in one step) whose rewards do not vary (sample std below "
                  f"{signals.ZERO_STD:g}, or fewer than 2 scorable rewards) gives every rollout advantage 0: it "
                  "teaches nothing. A step where every group is like that has <b>no gradient</b> (share 1). From "
                  "the recorded rollouts (sql/training_signal); the reward is what TRL got: the generator's "
                  "A = A_disc + lam A_anchor (Eq. 24-25), the policy's Eq. 12 score.")


def _zero_std_block(d: dict, role: str) -> str:
    """Chart and table of the share of zero-std GRPO groups per step of one update (sql/training_signal)."""
    rows = [r for r in d.get("training_signal", []) if r["stage"] == role]
    if not rows:
        return f"<h3>Zero-std GRPO groups per step, {role} update</h3>" + NO_DATA
    stepped = sorted((r for r in rows if r["step"] is not None), key=lambda r: (r["round"], r["step"]))
    x = {(r["round"], r["step"]): i for i, r in enumerate(stepped)}
    markers = [(min(i for (t, _), i in x.items() if t == rt), f"round {rt}") for rt in sorted({t for t, _ in x})]
    chart = _chart(line_chart, [("share of groups with zero reward std", [(x[(r["round"], r["step"])],
                                                                          r["zero_std_share"]) for r in stepped])],
                   f"{role} GRPO step (counted over the run's rounds)", "share of groups (0..1; 1 = no gradient)",
                   title=f"Zero-std GRPO groups per step, {role} update", markers=markers) if stepped else ""
    table = _table(["round", "step", "groups", "zero-std groups", "share", "mean group reward std", ""],
                   [[_n(r["round"]), _n(r["step"]), _n(r["groups"]), _n(r["zero_std_groups"]),
                     _n(r["zero_std_share"], 2), _n(r["reward_std_mean"]),
                     '<span class="warn">no gradient</span>' if r["groups"] and r["zero_std_groups"] == r["groups"]
                     else ""] for r in rows])
    return f"<h3>Zero-std GRPO groups per step, {role} update</h3>" + chart + table


def _policy_training_section(d: dict) -> str:
    intro = ("The policy update P(t-1) -> P(t): each group is the K completions of one prompt, rewarded with their "
             "Eq. 12 scores under the rubric the fixed G(t) writes for the group (rewards and scores tables, stage "
             "policy). " + ZERO_STD_INTRO)
    return _section("policy-training", "Policy training signal: zero-std groups per step", intro,
                    _zero_std_block(d, "policy"))


def _signal_section(d: dict) -> str:
    """Per round: the verifier's yes-rate on the measured sets, constant-score sets, update steps without gradient."""
    yes = {c["round"]: c for c in d["costs"] if c["stage"] == "measure"}
    const = {m["round"]: m.get("zero_spread_share") for m in d["metrics"] if m["stage"] == "measure"}
    dead = {(u["role"], u["round"]): (signals.no_gradient_steps(u["steps"]), len(u["steps"]))
            for u in update_steps(d.get("training_signal", []))}
    rounds = sorted(set(yes) | set(const) | {t for _, t in dead})

    def steps(role, t):
        return f"{dead[(role, t)][0]} of {dead[(role, t)][1]}" if (role, t) in dead else "-"

    def scored(c):
        return None if c is None else c["n_verdicts"] - c["n_unscorable_verdicts"]

    rows = [[_n(t), _n((yes.get(t) or {}).get("yes_rate"), 3), _n(scored(yes.get(t))), _n(const.get(t), 2),
             steps("generator", t), steps("policy", t)] for t in rounds]
    chart = _chart(line_chart, [("verifier yes-rate, measured sets", [(t, (yes.get(t) or {}).get("yes_rate"))
                                                                      for t in rounds]),
                                ("share of sets with constant scores", [(t, const.get(t)) for t in rounds])],
                   "round t", "share (0..1)", title="Signal checks per round, stage measure",
                   x_tick_label="round {x}") if rounds else NO_DATA
    table = _table(["round", "verifier yes-rate", "verdicts answered", "sets with constant scores",
                    "generator steps without gradient", "policy steps without gradient"], rows) if rows else ""
    intro = (f"Is there a signal at all? A verifier yes-rate above {signals.YES_RATE_HIGH} (or below "
             f"{signals.YES_RATE_LOW}) on the measured sets (C and anchors; sql/stage_costs) means it says yes (no) "
             "to almost everything, so every response of a set scores alike whatever the rubric; a set with constant "
             "Eq. 12 scores (sql/set_gap: spread 0) gives no gap and R_disc 0; a GRPO step whose groups all have zero "
             "reward std changes nothing (sql/training_signal). The warnings at the top say which rounds.")
    return _section("signal", "Signal checks per round", intro, chart + table)


def _warnings_box(d: dict) -> str:
    """The degenerate-signal warnings, first thing on the page (nothing when the run has no data at all)."""
    found = d.get("warnings") or []
    if found:
        items = "".join(f"<li>{_t(w)}</li>" for w in found)
        return (f'<section id="warnings" class="warnbox"><h2>Warnings: degenerate signal</h2><ul>{items}</ul>'
                '<p class="small">Details in <a href="#signal">signal checks</a>, <a href="#training">training '
                'rewards</a> and <a href="#policy-training">policy training signal</a>.</p></section>')
    if d["metrics"] or d.get("training_signal"):
        return ('<p id="warnings" class="ok">Signal checks passed: every recorded GRPO step had a gradient, the '
                f"verifier's yes-rate stayed within {signals.YES_RATE_LOW}..{signals.YES_RATE_HIGH} and fewer than "
                f"{signals.CONSTANT_SCORE_WARN:.0%} of the measured sets scored constant.</p>")
    return ""


def _saturation_section(d: dict) -> str:
    stages = [s for s in ("measure", "generator", "policy") if any(r["stage"] == s for r in d["metrics"])]
    series = [(f"stage {s}", [(r["round"], r.get("saturation")) for r in d["metrics"] if r["stage"] == s])
              for s in stages]
    chart = _chart(line_chart, series, "round t", "saturated items / judged items (share, 0..1)",
                   title="Rubric saturation per round", x_tick_label="round {x}") if series else NO_DATA
    rows = [[_n(r["round"]), _t(r["stage"]), _n(r.get("saturation")), _n(r.get("n_items_judged")),
             _n(r.get("n_items_incomplete"))] for r in d["metrics"] if "saturation" in r]
    table = _table(["round", "stage", "saturation", "items judged", "items with a missing verdict"], rows) if rows else ""
    intro = ("A rubric item is <b>saturated</b> when every response of the set gets the same verdict (all yes or all "
             "no): it adds nothing to R_disc or to the gap. Rising saturation on the current policy's sets is the "
             "collapse the paper's co-evolution is meant to prevent.")
    return _section("saturation", "Rubric saturation per round", intro, chart + table)


def _eval_section(d: dict) -> str:
    acc = [r for r in d["eval"] if r["metric"] == "accuracy"]
    benches = sorted({r["benchmark"] for r in acc})
    chart = _chart(line_chart, [(b, [(r["round"], r["mean"]) for r in acc if r["benchmark"] == b]) for b in benches],
                   "round t (G(t) as generator, frozen verifier)", "strict accuracy (share, 0..1)",
                   title="Evaluator accuracy per round, eval slice", x_tick_label="round {x}") if acc else NO_DATA
    by = defaultdict(dict)
    for r in d["eval"]:
        by[(r["round"], r["benchmark"], r["checkpoint"])][r["metric"]] = r
    rows = [[_n(t), _t(b), _t(c), _n(v.get("accuracy", {}).get("mean")), _n(v.get("ties", {}).get("mean")),
             _n(v.get("unscorable", {}).get("mean")), _n(v.get("accuracy", {}).get("n_scored"))]
            for (t, b, c), v in sorted(by.items())]
    table = _table(["round", "benchmark", "generator checkpoint", "accuracy", "ties", "unscorable",
                    "accuracy rows scored"], rows) if rows else ""
    intro = ("Strict accuracy of generator + frozen verifier on the preset's held-out preference slice (eval table): "
             "a tie or an unscorable example counts as wrong. Mean over rubric seeds (AVG@N).")
    return _section("accuracy", "Evaluator accuracy per round", intro, chart + table)


#: The eval-table metrics of the in-loop policy evaluation (tasks/policy_eval.py): P(t) against P(0).
WIN_METRICS = ("win_rate", "tie_rate", "win_rate_ci_low", "win_rate_ci_high", "n", "unscorable")


def _win_rate_section(d: dict) -> str:
    rows_in = d.get("win_rate") or []
    wins = [r for r in rows_in if r["metric"] == "win_rate"]
    benches = sorted({r["benchmark"] for r in wins})
    chart = _chart(line_chart, [(b, [(r["round"], r["mean"]) for r in wins if r["benchmark"] == b]) for b in benches],
                   "round t (policy P(t) after the update)", "win rate against P(0) (share, 0..1; ties count 1/2)",
                   title="Policy win rate per round, held-out prompts", x_tick_label="round {x}") if wins else NO_DATA
    by = defaultdict(dict)
    for r in rows_in:
        by[(r["round"], r["benchmark"], r["checkpoint"], r["verifier"])][r["metric"]] = r.get("mean")
    rows = [[_n(t), _t(b), _t(c), _t(j), _n(v.get("win_rate")), _n(v.get("tie_rate")),
             f"[{_n(v.get('win_rate_ci_low'))}, {_n(v.get('win_rate_ci_high'))}]", _n(v.get("n")),
             _n(v.get("unscorable"))] for (t, b, c, j), v in sorted(by.items())]
    table = _table(["round", "benchmark", "policy checkpoint", "judge", "win rate", "tie rate", "95% CI", "n",
                    "unscorable"], rows) if rows else ""
    intro = ("After each policy update P(t) answers held-out prompts (never used in training or as anchors: "
             "sql/heldout_overlap.sql) against P(0); a pairwise judge compares each pair in both orders, a split "
             "verdict is a tie counted as half. 0.5 means no measurable difference.")
    return _section("win-rate", "Policy win rate per round", intro, chart + table)


def _stale_fresh_section(d: dict) -> str:
    sf = d["stale_fresh"]
    intro = ("Section 4.4 / Figure 2: after round t, the same response sets of P(t-1) are scored with the "
             "<b>stale</b> generator G(t-1) (calibrated to P(t-2)'s outputs) and with the <b>fresh</b> G(t) (trained on "
             "P(t-1)'s outputs), with the same frozen verifier. The paper's claim: stale criteria saturate or give "
             "noisy gaps on the newer policy's samples; the fresh evaluator keeps the gap open.")
    if not sf:
        return _section("stale-fresh", "Stale versus fresh evaluator", intro,
                        NO_DATA + "<p>Run <code>dr stale-fresh --store STORE --run-id RUN</code> after a run of two "
                                  "or more rounds.</p>")
    t = sf["round"]
    metrics = [("anchor gap (Eq. 2)", "anchor_gap"), ("spread on C", "set_spread"), ("R_disc (Eq. 13)", "r_disc"),
               ("saturation", "saturation")]
    chart = _chart(bar_chart, [m[0] for m in metrics],
                   [(f"stale G({t - 1})", [sf[STALE].get(k) for _, k in metrics]),
                    (f"fresh G({t})", [sf[FRESH].get(k) for _, k in metrics])],
                   "value (score units; saturation: share)", title=f"Stale vs fresh evaluator on P({t - 1})'s sets",
                   x_label="metric")
    rows = [[_t(label), _n(sf[STALE].get(k)), _n(sf[FRESH].get(k))] for label, k in metrics + [
        ("R_anchor (Eq. 15)", "r_anchor"), ("share of sets with spread 0", "zero_spread_share"),
        ("rubric rollouts", "n_rollouts"), ("unscorable rollouts", "n_unscorable_rewards")]]
    table = _table(["metric", f"stale G({t - 1})", f"fresh G({t})"], rows)
    return _section("stale-fresh", "Stale versus fresh evaluator", intro, chart + table)


def _mark(v) -> str:
    return {True: '<td class="yes">yes</td>', False: '<td class="no">no</td>'}.get(v, '<td class="na">?</td>')


def _col_label(col: str) -> str:
    target, n = col.split(":")
    return f"y{n}" if target == "C" else f"anchor #{n}" + (" (best)" if n == "1" else "")


def _grid_html(g: dict) -> str:
    head = (f'<h4>{_t(g["prompt_id"])} (set {_t(g["set_id"])})</h4><p class="prompt">{_t(_clip(g["prompt"], 400))}</p>'
            f'<p class="small">generator {_t(g["generator_ckpt"])}</p>')
    if g["error"] and not g["items"]:
        return head + f'<p class="nodata">no usable rubric: {_t(g["error"])}</p>'
    cols = g["columns"]
    th = "".join(f"<th>{_t(_col_label(c))}</th>" for c in cols)
    body = "".join(
        f'<tr><td class="crit">{_t(it["criterion"])}</td><td>{_t(it["weight"])}</td>'
        + "".join(_mark(it["verdicts"].get(c)) for c in cols) + "</tr>" for it in g["items"])
    score = "".join(f"<td><b>{_n(g['scores'][c], 3)}</b></td>" for c in cols)
    table = (f'<table class="grid"><thead><tr><th>criterion</th><th>weight</th>{th}</tr></thead><tbody>{body}'
             f'<tr><td colspan="2"><b>Eq. 12 score</b></td>{score}</tr></tbody></table>')
    texts = "".join(f"<dt>{_t(_col_label(c))}</dt><dd>{_t(_clip(g['texts'][c] or '', 700))}</dd>" for c in cols)
    return head + table + f"<details><summary>responses</summary><dl>{texts}</dl></details>"


def _clip(s: str | None, n: int) -> str:
    s = s or ""
    return s if len(s) <= n else s[:n] + " [...]"


def _examples_section(d: dict) -> str:
    intro = ("The appendix H view for this run: each rubric item (criterion, weight 1..5) against every response of "
             "the policy set C (y0..) and of the ranked anchor list (anchor #1 = best), the verifier's yes/no "
             "(? = could not answer), and each response's Eq. 12 score (weighted share of yes). Identical scores "
             "across a row of responses are a collapsed gap.")
    parts = []
    for ex in d["examples"]:
        parts.append(f"<h3>{_t(ex['label'])}</h3>")
        parts.append("".join(_grid_html(g) for g in ex["sets"]) if ex["sets"] else NO_DATA)
    return _section("examples", "Rubric examples: rubric, verdict matrix, scores", intro, "".join(parts) or NO_DATA)


def _cost_section(d: dict) -> str:
    costs = d["costs"]
    rounds = sorted({c["round"] for c in costs})
    stages = sorted({c["stage"] for c in costs})
    get = {(c["round"], c["stage"]): c for c in costs}

    def tokens(c):
        if c is None or (c["prompt_tokens"] is None and c["response_tokens"] is None):
            return None
        return float((c["prompt_tokens"] or 0) + (c["response_tokens"] or 0))

    tok_chart = _chart(bar_chart, [f"round {t}" for t in rounds],
                       [(s, [tokens(get.get((t, s))) for t in rounds]) for s in stages],
                       "tokens (prompt + sampled response)", title="Policy sampling tokens per round and stage",
                       x_label="round") if costs else NO_DATA
    train = [c for c in costs if c["train_seconds"] is not None]
    train_chart = _chart(bar_chart, [f"round {t}" for t in rounds],
                         [(s, [get.get((t, s), {}).get("train_seconds") for t in rounds]) for s in ("generator", "policy")],
                         "seconds", title="GRPO update wall time per round", x_label="round") if train else ""
    rows = [[_n(c["round"]), _t(c["stage"]), _n(c["n_sets"]), _n(c["n_responses"]), _n(c["prompt_tokens"]),
             _n(c["response_tokens"]), f'{_n(c["n_rubric_rollouts"])} ({_n(c["n_rubric_failures"])} unusable)',
             _n(c["n_rubric_items"]), f'{_n(c["n_verdicts"])} ({_n(c["n_unscorable_verdicts"])} unscorable)',
             _n(c["yes_rate"], 3), _n(c["train_steps"]), _n(c["train_seconds"], 1)] for c in costs]
    table = _table(["round", "stage", "sets", "responses", "prompt tokens", "response tokens", "rubric rollouts",
                    "rubric items", "verdicts", "verifier yes-rate", "train steps", "train seconds"], rows) if rows else ""
    log_rows = [[_t(r["created_at"]), _t(r["status"]), _n(r["seconds_since_previous"], 1)] for r in d["run_log"]]
    log = ("<h3>Run records</h3>" + _table(["recorded at (UTC)", "status", "seconds since previous record"], log_rows)
           if log_rows else "")
    intro = ("What the store records about cost: token counts of the policy's sampled sets (the policy update's own "
             "rollouts carry none), rubric and verdict counts, the verifier's yes-rate, the GRPO updates' wall "
             "time (checkpoint metrics), and every flow execution's steps: which ran, which came from the cache, "
             "which failed, and their wall seconds (sql/step_times).")
    return _section("cost", "Tokens and seconds per stage and round", intro,
                    tok_chart + train_chart + table + log + _executions(d["step_times"]))


def _executions(step_times: list[dict], n_slowest: int = 8) -> str:
    """One row per flow execution (ran / cached / failed steps, seconds) and the run's slowest steps that ran."""
    if not step_times:
        return ""
    seen: dict[str, dict] = {}
    for r in step_times:
        seen.setdefault(r["execution"], r)
    rows = [[_t(r["execution_started_at"]), _t(r["flow"]), _t(r["execution"]), _n(r["execution_steps"]),
             _n(r["execution_ran"]), _n(r["execution_cached"]), _n(r["execution_failed"]),
             _n(r["execution_seconds"], 1)] for r in seen.values()]
    slow = sorted((r for r in step_times if r["state"] != "Cached"), key=lambda r: -r["seconds"])[:n_slowest]
    slow_rows = [[_n(r["round"]), _t(r["step"]), _t(r["state"]), _n(r["seconds"], 1), _t(r["started_at"])]
                 for r in slow]
    return ("<h3>Flow executions</h3>"
            + _table(["started (UTC)", "flow", "execution (Prefect flow run)", "steps", "ran", "cached", "failed",
                      "seconds"], rows)
            + ("<h3>Slowest steps that ran</h3>" + _table(["round", "step", "state", "seconds", "started (UTC)"],
                                                          slow_rows) if slow_rows else ""))


def _glance(d: dict) -> str:
    m = [r for r in d["metrics"] if r["stage"] == "measure"]
    items = []
    if m:
        first, last = m[0], m[-1]
        items.append(f"Anchor gap (Eq. 2), stage measure: {_n(first.get('anchor_gap'))} in round {first['round']}"
                     f" -> {_n(last.get('anchor_gap'))} in round {last['round']}.")
        items.append(f"Spread on the policy's sets C: {_n(first.get('set_spread'))} -> {_n(last.get('set_spread'))}; "
                     f"saturation {_n(first.get('saturation'))} -> {_n(last.get('saturation'))}.")
    sf = d["stale_fresh"]
    if sf:
        items.append(f"Stale vs fresh (round {sf['round']}): anchor gap {_n(sf[STALE].get('anchor_gap'))} vs "
                     f"{_n(sf[FRESH].get('anchor_gap'))}, R_disc {_n(sf[STALE].get('r_disc'))} vs "
                     f"{_n(sf[FRESH].get('r_disc'))}.")
    if not items:
        items.append("no data for this run id")
    return "<ul>" + "".join(f"<li>{i}</li>" for i in items) + "</ul>"


CSS = """
body{font-family:sans-serif;max-width:1100px;margin:1.5em auto;padding:0 1em;color:#222;line-height:1.4}
h1{font-size:1.5em}h2{border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:2em}
table{border-collapse:collapse;margin:.6em 0;font-size:.85em}th,td{border:1px solid #ccc;padding:2px 6px;text-align:right}
th{background:#f2f2f2}td.crit{text-align:left;max-width:420px}td.yes{background:#dcfce7}td.no{background:#fee2e2}
td.na,span.na{color:#888}.nodata{color:#888;font-style:italic}.warn{color:#9a3412;font-weight:bold}
figure{display:inline-block;margin:.4em .6em .4em 0}.intro{max-width:900px}.small{font-size:.8em;color:#555}
.prompt{background:#f7f7f7;padding:.4em;white-space:pre-wrap}dd{white-space:pre-wrap;margin-bottom:.6em}
nav a{margin-right:1em}pre{background:#f7f7f7;padding:.4em;white-space:pre-wrap}
.warnbox{border:2px solid #c2410c;background:#fff7ed;padding:.2em 1em;margin:1em 0}.warnbox h2{color:#9a3412;margin-top:.4em}
.warnbox li{color:#9a3412;font-weight:bold;margin:.3em 0}.ok{color:#166534}
"""


def render_html(d: dict, store_url: str = "") -> str:
    """The report page for ``collect``'s data: one HTML string, no external references."""
    sections = []
    for sid, render in (("signal", _signal_section), ("gap", _gap_section), ("training", _training_section),
                        ("policy-training", _policy_training_section), ("saturation", _saturation_section),
                        ("accuracy", _eval_section), ("win-rate", _win_rate_section),
                        ("stale-fresh", _stale_fresh_section),
                        ("examples", _examples_section), ("cost", _cost_section)):
        try:
            sections.append(render(d))
        except Exception as exc:  # a data shape the page did not foresee: say so in place, keep the rest
            sections.append(_section(sid, sid, "", f'<p class="nodata">no data (could not render: {_t(repr(exc))})</p>'))
    nav = "".join(f'<a href="#{sid}">{_t(label)}</a>' for sid, label in [
        ("signal", "signal checks"), ("gap", "score gap"), ("training", "training rewards"),
        ("policy-training", "policy training signal"), ("saturation", "saturation"),
        ("accuracy", "accuracy"), ("win-rate", "policy win rate"), ("stale-fresh", "stale vs fresh"),
        ("examples", "rubric examples"),
        ("cost", "cost")])
    errors = ("<h2>Query errors</h2><pre>" + _t("\n".join(d["errors"])) + "</pre>") if d["errors"] else ""
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>DynamicRubric report: run {_t(d['run_id'])}</title><style>{CSS}</style></head><body>"
        f"<h1>DynamicRubric gap analysis: run {_t(d['run_id'])}</h1>"
        f'<p class="small">store {_t(store_url)}; generated {_t(d["generated_at"])}; figures are inline SVG, hover a '
        "point or bar for its value; report.json beside this page holds the numbers.</p>"
        f"{_warnings_box(d)}<nav>{nav}</nav><h2>At a glance</h2>{_glance(d)}{''.join(sections)}{errors}"
        "</body></html>\n"
    )


def known_runs(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Run ids with anything recorded: the ``runs`` table, else any run-partitioned table's rows."""
    found: set[str] = set()
    for table in (name for name in TABLES if "run_id" in spec(name).partition_by):
        try:
            found |= {r[0] for r in con.sql(f"SELECT DISTINCT run_id FROM {table}").fetchall()}
        except duckdb.Error:
            continue
    return sorted(found)


def write_report(store: Store, run_id: str, out_dir: str | Path, n_examples: int = 3,
                 warn: Callable[[str], None] | None = None) -> Path:
    """Collect ``run_id``'s data from ``store``, write ``out_dir/report.html`` and ``out_dir/report.json`` together
    (atomically: both or neither); return the HTML path. Checked before any query: the run id is valid and in the
    store, ``out_dir`` is (or can be made) a directory. Queries that fail are listed in the page and passed to
    ``warn``; when every query failed, nothing is written and ReportError says why."""
    if not re.match(SEGMENT_PATTERN, run_id or ""):
        raise ReportError(f"--run-id {run_id!r} is not a run id (it must match {SEGMENT_PATTERN})")
    out = Path(out_dir).expanduser()
    if out.exists() and not out.is_dir():
        raise ReportError(f"--out {out} is a file; give a directory (report.html and report.json go inside)")
    for name in ("report.json", "report.html"):
        try:
            atomic.check_output_path(out / name, "report")
        except OSError as exc:
            raise ReportError(str(exc)) from None
    con = store.connect()
    runs = known_runs(con)
    if run_id not in runs:
        raise ReportError(f"no run {run_id!r} in store {store.url}; runs there: {', '.join(runs) or '(none)'}")
    d = collect(con, run_id, n_examples)
    if d["errors"] and len(d["errors"]) >= d["queries"]:
        raise ReportError(f"every one of the report's {d['queries']} queries failed on store {store.url} (nothing "
                          f"written); first: {d['errors'][0]}")
    for e in d["errors"]:
        if warn:
            warn(f"query {e}")
    atomic.write_all_atomic([(out / "report.json", json_text(d, indent=1, default=str)),
                             (out / "report.html", render_html(d, store.url))])
    return out / "report.html"
