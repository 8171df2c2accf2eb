"""The run tables in plain values: the round's figures and the co-evolution table, one row per figure and one cell
(text) per round. ``dr round`` and ``dr coevolve`` print them (cli/results.py) and the flows publish them as Prefect
table artifacts (flows/artifacts.py); each reads the result dicts (``model_dump`` of ``RoundResult`` /
``CoevolveResult``)."""

from __future__ import annotations

from dr_core.scoring.signals import no_gradient_steps

#: The round table's rows: label, key in the round's summary (``RoundSummary``).
ROUND_ROWS = [
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


def fmt(v) -> str:
    """A figure as printed: 4 decimals for a float, ``n/a`` for None."""
    return "n/a" if v is None else f"{v:.4f}" if isinstance(v, float) else str(v)


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
COEVOLVE_ROWS = [
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


def round_table(summary: dict) -> list[tuple[str, str]]:
    """(label, value) per figure of a round's summary."""
    return [(label, fmt(summary.get(key))) for label, key in ROUND_ROWS]


def round_header(r: dict) -> str:
    """The column header of one round of a co-evolution run."""
    return f"round {r['round']}" + (" (start)" if r["round"] == 0 else "")


def coevolve_table(rounds: list[dict]) -> list[tuple[str, list[str]]]:
    """(label, one cell per round) per figure of a co-evolution run (``COEVOLVE_ROWS``)."""
    return [(label, [get(r) for r in rounds]) for label, get in COEVOLVE_ROWS]
