"""How a flow's result prints: the tables of ``dr round``, ``dr coevolve`` and ``dr stale-fresh``, and the run's
degenerate-signal warnings (dr_core.scoring.signals) in words after them. Only reads the result dicts."""

from __future__ import annotations

from rich.table import Table

from cli.output import console, styled
from cli.progress import memory
from dr_core.scoring.signals import no_gradient_steps, signal_warnings

_ROUND_ROWS = [
    ("prompts", "prompts"),
    ("response sets", "sets"),
    ("responses", "responses"),
    ("rubric rollouts", "rubric_rollouts"),
    ("rubric items", "rubric_items"),
    ("unusable rubrics (unscorable)", "rubric_failures"),
    ("verdicts", "verdicts"),
    ("unscorable verdicts", "unscorable_verdicts"),
    ("unscorable scores", "unscorable_scores"),
    ("verifier yes-rate (known verdicts, C and anchors)", "verifier_yes_rate"),
    ("sets with constant Eq. 12 scores (share)", "constant_score_sets_share"),
    ("mean R_disc (Eq. 13)", "r_disc"),
    ("mean R_anchor (Eq. 15)", "r_anchor"),
    ("mean anchor gap (Eq. 2)", "anchor_gap"),
    ("evaluator accuracy (eval slice, strict)", "eval_accuracy"),
    ("eval examples", "eval_n"),
]
_STALE_FRESH_ROWS = [
    ("anchor gap (Eq. 2)", "anchor_gap"),
    ("spread on C (mean |S_i - S_j|)", "set_spread"),
    ("mean R_disc (Eq. 13)", "r_disc"),
    ("mean R_anchor (Eq. 15)", "r_anchor"),
    ("saturation", "saturation"),
    ("unscorable rollouts", "n_unscorable_rewards"),
]


def fmt(v) -> str:
    return "n/a" if v is None else f"{v:.4f}" if isinstance(v, float) else str(v)


def print_warnings(found: list[str] | None) -> None:
    """The run's degenerate-signal warnings (dr_core.scoring.signals) in words, after the tables."""
    for w in found or ():
        console.print(styled(("warning: ", "bold yellow"), (w, "yellow")))


# -- dr round -----------------------------------------------------------------------------------------------------
def print_round(result: dict) -> None:
    s = result["summary"]
    tab = Table(title=f"Round {result['round']} of run {result['run_id']}", show_header=False)
    for label, key in _ROUND_ROWS:
        v = s.get(key)
        tab.add_row(label, "n/a" if v is None else f"{v:.4f}" if isinstance(v, float) else str(v))
    console.print(tab)
    steps = Table(title="Steps")
    steps.add_column("step")
    steps.add_column("state")
    steps.add_column("seconds", justify="right")
    steps.add_column("peak memory", justify="right")
    for name, info in result["steps"].items():
        steps.add_row(
            name, info["state"], f"{info['seconds']:.1f}", memory(info.get("peak_rss_mb")).removeprefix("peak ")
        )
    console.print(steps)
    t = result["round"]
    print_warnings(
        signal_warnings(
            yes_rates={t: s.get("verifier_yes_rate")}, constant_score_shares={t: s.get("constant_score_sets_share")}
        )
    )


# -- dr coevolve --------------------------------------------------------------------------------------------------
def print_coevolve(result: dict) -> None:
    rounds = result["rounds"]
    console.print(_coevolve_table(result["run_id"], rounds))
    for r in rounds:
        if r.get("generator_update"):
            g, p = r["generator_update"], r["policy_update"]
            console.print(
                f"round {r['round']}: generator update {g['steps']} steps in {g['seconds']} s; "
                f"policy update {p['steps']} steps in {p['seconds']} s"
            )
            console.print(f"  G({r['round']}) = {r['generator']}\n  P({r['round']}) = {r['policy']}")
    slow = sorted(result["steps"].items(), key=lambda kv: -kv[1]["seconds"])[:6]
    console.print("slowest steps: " + ", ".join(f"{k} {v['seconds']:.0f}s ({v['state']})" for k, v in slow))
    _print_signal_checks(result.get("signal_checks") or [])
    print_warnings(result.get("warnings"))


def _coevolve_table(run_id: str, rounds: list[dict]) -> Table:
    """One column per round, one row per figure (``_COEVOLVE_ROWS``)."""
    tab = Table(title=f"Co-evolution run {run_id}")
    tab.add_column("")
    for r in rounds:
        tab.add_column(f"round {r['round']}" + (" (start)" if r["round"] == 0 else ""), justify="right")
    for label, get in _COEVOLVE_ROWS:
        tab.add_row(label, *(get(r) for r in rounds))
    return tab


def _print_signal_checks(checks: list[dict]) -> None:
    if checks:
        console.print(
            styled(("signal checks", "bold"), " (can the figures move? dr_core.scoring.signals.signal_checks)")
        )
    for c in checks:
        mark = {True: ("yes", "green"), False: ("NO", "bold red"), None: ("n/a", "dim")}[c["ok"]]
        console.print(styled("  ", mark, f"  {c['check']}: {c['detail']}"))


def _update_cell(r: dict, role: str, key: str) -> str:
    u = r.get(f"{role}_update")
    return "-" if not u else f"{fmt(u['reward_first'])} -> {fmt(u['reward_last'])}" if key == "reward" else fmt(u[key])


def _of_rollouts_cell(r: dict, role: str, key: str) -> str:
    """'failed/rollouts' of a role's update: its unparseable rubrics or unscorable policy rollouts."""
    u = r.get(f"{role}_update")
    return "-" if not u else f"{u[key]}/{u['rollouts']}"


def win_rate_cell(r: dict) -> str:
    pe = r.get("policy_eval")
    if not pe:
        return "-"
    ci = pe.get("win_rate_ci95")
    same = pe.get("identical_answers")
    note = f"; {same} of {pe['n']} answers identical to P(0)'s: a tie each" if same else ""
    return f"{fmt(pe['win_rate'])}" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "") + f" (n={pe['n']}{note})"


def _yes_rate_cell(r: dict) -> str:
    m = r["measure"]
    return "-" if "verifier_yes_rate" not in m else f"{fmt(m['verifier_yes_rate'])} (n={m.get('verdicts_scored')})"


def _zero_std_cell(r: dict, role: str) -> str:
    """'step: share' per GRPO step of the update, with the steps that had no gradient at all."""
    steps = (r.get(f"{role}_update") or {}).get("zero_std_by_step")
    if not steps:
        return "-"
    cells = ", ".join(f"{s['step']}: {s['zero_std_share']:.2f}" for s in steps)
    dead = no_gradient_steps(steps)
    return cells + (f" ({dead} without gradient)" if dead else "")


#: The coevolve table's rows: label, cell of one round's result.
_COEVOLVE_ROWS = [
    ("generator reward, first -> last step (R_disc + lam R_anchor)", lambda r: _update_cell(r, "generator", "reward")),
    ("generator rubric rollouts unparseable", lambda r: _of_rollouts_cell(r, "generator", "unparseable")),
    ("policy reward, first -> last step (Eq. 12 score)", lambda r: _update_cell(r, "policy", "reward")),
    ("policy rollouts unscorable", lambda r: _of_rollouts_cell(r, "policy", "unscorable")),
    ("measured R_disc on P(t)'s sets (Eq. 13)", lambda r: fmt(r["measure"]["r_disc"])),
    ("measured R_anchor (Eq. 15)", lambda r: fmt(r["measure"]["r_anchor"])),
    ("anchor gap (Eq. 2)", lambda r: fmt(r["measure"]["anchor_gap"])),
    (
        "evaluator accuracy, eval slice (strict)",
        lambda r: f"{fmt(r['measure']['eval_accuracy'])} (n={r['measure']['eval_n']})",
    ),
    ("unscorable verdicts", lambda r: f"{r['measure']['unscorable_verdicts']}/{r['measure']['verdicts']}"),
    ("verifier yes-rate, measured sets (C and anchors)", _yes_rate_cell),
    ("sets with constant Eq. 12 scores (share)", lambda r: fmt(r["measure"].get("constant_score_sets_share"))),
    ("generator zero-std GRPO groups per step (share)", lambda r: _zero_std_cell(r, "generator")),
    ("policy zero-std GRPO groups per step (share)", lambda r: _zero_std_cell(r, "policy")),
    ("win rate P(t) vs P(0), held-out [95% CI] (tasks/policy_eval.py)", win_rate_cell),
]


# -- dr stale-fresh -----------------------------------------------------------------------------------------------
def print_stale_fresh(result: dict, store: str, run_id: str) -> None:
    t, s = result["round"], result["summary"]
    tab = Table(
        title=f"Stale vs fresh evaluator, run {run_id}, round {t}: P({t - 1})'s sets "
        f"({result['sets']['stage']} samples of round {result['sets']['round']})"
    )
    tab.add_column("")
    tab.add_column(f"stale G({t - 1})", justify="right")
    tab.add_column(f"fresh G({t})", justify="right")
    for label, key in _STALE_FRESH_ROWS:
        tab.add_row(label, *(fmt(s[k].get(key)) if s else "n/a" for k in ("stale", "fresh")))
    console.print(tab)
    console.print(
        f"stale G({t - 1}) = {result['stale_generator']}\nfresh G({t}) = {result['fresh_generator']}\n"
        f"next: dr report --store {store} --run-id {run_id} --out DIR"
    )
