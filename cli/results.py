"""How a flow's result prints: the tables of ``dr round``, ``dr coevolve`` and ``dr stale-fresh``, and the run's
degenerate-signal warnings (dr_core.scoring.signals) in words after them. Only reads the result dicts."""

from __future__ import annotations

from rich.table import Table

from cli.output import console, styled
from cli.progress import memory
from dr_core.report.tables import coevolve_table, fmt, round_header, round_table
from dr_core.scoring.signals import signal_warnings

_STALE_FRESH_ROWS = [
    ("anchor gap (Eq. 2)", "anchor_gap"),
    ("spread on C (mean |S_i - S_j|)", "set_spread"),
    ("mean R_disc (Eq. 13)", "r_disc"),
    ("mean R_anchor (Eq. 15)", "r_anchor"),
    ("saturation", "saturation"),
    ("unscorable rollouts", "n_unscorable_rewards"),
]


def print_warnings(found: list[str] | None) -> None:
    """The run's degenerate-signal warnings (dr_core.scoring.signals) in words, after the tables."""
    for w in found or ():
        console.print(styled(("warning: ", "bold yellow"), (w, "yellow")))


# -- dr round -----------------------------------------------------------------------------------------------------
def print_round(result: dict) -> None:
    s = result["summary"]
    tab = Table(title=f"Round {result['round']} of run {result['run_id']}", show_header=False)
    for label, value in round_table(s):
        tab.add_row(label, value)
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
    _print_monitors(result.get("monitors") or [])
    print_warnings(result.get("warnings"))


def _print_monitors(found: list[dict]) -> None:
    """The reward-hacking monitors' findings, one line each (dr_core/report/monitors.py)."""
    if found:
        console.print(styled(("reward-hacking monitors", "bold"), " (dr_core/report/monitors.py)"))
    for f in found:
        mark = {"warn": ("warn", "bold red"), "ok": ("ok", "green"), "n/a": ("n/a", "dim")}[f["level"]]
        console.print(styled("  ", mark, f"  {f['monitor']}: {f['line']}"))


def _coevolve_table(run_id: str, rounds: list[dict]) -> Table:
    """One column per round, one row per figure (``dr_core.report.tables.COEVOLVE_ROWS``)."""
    tab = Table(title=f"Co-evolution run {run_id}")
    tab.add_column("")
    for r in rounds:
        tab.add_column(round_header(r), justify="right")
    for label, cells in coevolve_table(rounds):
        tab.add_row(label, *cells)
    return tab


def _print_signal_checks(checks: list[dict]) -> None:
    if checks:
        console.print(
            styled(("signal checks", "bold"), " (can the figures move? dr_core.scoring.signals.signal_checks)")
        )
    for c in checks:
        mark = {True: ("yes", "green"), False: ("NO", "bold red"), None: ("n/a", "dim")}[c["ok"]]
        console.print(styled("  ", mark, f"  {c['check']}: {c['detail']}"))


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
