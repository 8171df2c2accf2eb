"""A finished learning-benchmark result as Markdown: sizes, sweep, curves, held-out table, policy comparison
(``bench_learning.py --render RESULT.json`` prints it; a finished run prints it at the end). The documentation renders
the result JSON itself (docs/benchmarks/learning.md); this is the terminal's view of it."""

from __future__ import annotations

import numpy as np

from infra.benchmarks.learning.stats import METRICS


def fmt(c: dict) -> str:
    if c["mean"] is None:
        return "-"
    return f"{c['mean']:+.3f} [{c['ci95'][0]:+.3f}, {c['ci95'][1]:+.3f}]" if c["ci95"] else f"{c['mean']:+.3f}"


def markdown(result: dict) -> str:
    """A finished run's results as Markdown: sizes, sweep, curves, held-out table, policy comparison."""
    return "\n".join(_sweep(result) + _training(result) + _heldout(result) + _policy(result))


def print_tables(result: dict, seeds=None) -> None:
    print("\n" + markdown(result))


def _table(title: str, header: list[str], rows: list[list[str]]) -> list[str]:
    """A titled Markdown table: a blank line, the title, a blank line, the header, its rule, one line per row."""
    line = lambda cells: "| " + " | ".join(cells) + " |"  # noqa: E731
    return ["", title, "", line(header), "|" + "---|" * len(header)] + [line(r) for r in rows]


def _sweep(result: dict) -> list[str]:
    a, ch = result["args"], result["chosen"]
    intro = (
        f"Measured here (2 cores, one run of the protocol, {result['seconds'] / 60:.0f} min; audit: "
        f"{result['audit_overlap_rows']} overlapping prompts). Chosen on the tuning split: learning rate "
        f"{ch['lr']:g}, LoRA rank {ch['lora_r']}, K {ch['k']}. Means with 95 % bootstrap intervals over prompts."
    )
    header = ["lr", "LoRA rank", "K", "tuning R_disc gain", "reward first 10 -> last 10", "steps without gradient"]
    rows = []
    for sw in result["sweep"]:
        c, st = sw["curve"], sw["setting"]
        rows.append(
            [f"{st['lr']:g}", str(st["lora_r"]), str(st["k"]), fmt(sw["GS_minus_G0"]["r_disc"])]
            + [f"{c['first10']:.3f} -> {c['last10']:.3f}", str(c["steps_without_gradient"])]
        )
    return [intro] + _table(f"Sweep (tuning split, seed 0, {a['sweep_steps']} steps each):", header, rows)


def _training(result: dict) -> list[str]:
    a = result["args"]
    title = (
        f"Training ({a['steps']} generator steps a seed on the {a['train']} training prompts; reward = "
        "R_disc + R_anchor, one group of 4 rollouts a step):"
    )
    header = ["seed", "reward, first 10 steps", "last 10", "R_disc, first 10", "last 10", "steps without gradient"]
    rows = []
    for sd in result["seeds"]:
        c = result["seeds"][sd]["curve"]
        rows.append(
            [str(sd)]
            + [f"{c[k]:.3f}" for k in ("first10", "last10", "r_disc_first10", "r_disc_last10")]
            + [str(c["steps_without_gradient"])]
        )
    return _table(title, header, rows)


def _heldout(result: dict) -> list[str]:
    a = result["args"]
    named = [("G(0)", result["G0"])]
    for sd in result["seeds"]:
        named += [
            (f"G(S) seed {sd}", result["seeds"][sd]["GS"]),
            (f"G(S) - G(0) seed {sd}", result["seeds"][sd]["GS_minus_G0"]),
        ]
    named += [("G(S) pooled", result["pooled"]["GS"]), ("**G(S) - G(0) pooled**", result["pooled"]["GS_minus_G0"])]
    rows = [[name] + [fmt(v[m]) for m in METRICS] for name, v in named]
    return _table(f"Held out ({a['heldout']} prompts, {a['eval_rubrics']} rubrics each):", ["model", *METRICS], rows)


def _policy(result: dict) -> list[str]:
    a, pol = result["args"], result["policy"]
    out = [
        "",
        f"Policy ({a['policy_steps']} steps each from P(0), judged on the {a['heldout']} held-out prompts):",
        "",
        "| comparison | win rate [95 % CI] | wins / ties / losses | identical answers | judge position bias |",
        "|---|---|---|---|---|",
    ]
    for name, m in pol["judged"].items():
        ci = m.get("win_rate_ci95") or [None, None]
        pb = m.get("judge_position_bias")
        out.append(
            f"| {name.replace('_vs_', ' vs ')} | {m['win_rate']:.3f} [{ci[0]:.3f}, {ci[1]:.3f}] | "
            f"{m['wins']} / {m['ties']} / {m['losses']} | {m.get('identical_answers')} | "
            + ("-" if pb is None else f"{pb:+.3f}")
            + " |"
        )
    for name, u in pol["updates"].items():
        first = [s["reward_mean"] for s in u["steps"][:3]]
        last = [s["reward_mean"] for s in u["steps"][-3:]]
        out.append(
            f"\n{name}: {len(u['steps'])} steps in {u['seconds']:.0f} s, reward (mean Eq. 12 score) first 3 "
            f"steps {np.mean(first):.3f}, last 3 {np.mean(last):.3f}; {u['zero_std_groups']} of {u['groups']} "
            "groups with zero reward std."
        )
    return out
