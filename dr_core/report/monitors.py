"""Reward-hacking monitors: five findings computed from the rows a run left in the store, one query each in sql/.

- ``length``: the measured sets' mean response length against P(0)'s (sql/monitor_length);
- ``spread``: the share of the policy update's GRPO groups whose rewards do not vary, and its rise
  (sql/training_signal);
- ``saturation``: rubric items that every response of its set passes (sql/saturation, all yes);
- ``kl``: each update's per-token KL to its reference, its size and its growth within the update (sql/monitor_kl);
- ``reward_vs_eval``: the policy's training reward rising while the held-out evaluator accuracy and win rate do not
  (sql/monitor_reward_vs_eval).

Each finding is ``{"monitor", "level", "line", "value", "threshold"}``: level ``warn`` (the sign is there), ``ok``
(looked, not there) or ``n/a`` (the run has no rows to look at: said, never a silent ok); ``line`` says what was seen
in words; ``value`` is the figure compared with ``threshold`` (both None with ``n/a``; ``dr report`` draws their
ratio). Thresholds: ``MonitorSettings`` (dr_core/config/monitors.py), each with its reason. The run's summary,
``dr report`` (``report.json`` ``monitors``) and ``--track mlflow`` show the same findings.

    python -c "from dr_core.report.monitors import run_monitors; ..."
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from dr_core.config.monitors import MonitorSettings
from dr_core.store import sql

WARN, OK, NA = "warn", "ok", "n/a"
MONITORS = ("length", "spread", "saturation", "kl", "reward_vs_eval")
#: Each monitor's query in sql/.
QUERIES = {
    "length": "monitor_length",
    "spread": "training_signal",
    "saturation": "saturation",
    "kl": "monitor_kl",
    "reward_vs_eval": "monitor_reward_vs_eval",
}


def finding(monitor: str, level: str, line: str, value: float | None = None, threshold: float | None = None) -> dict:
    return {"monitor": monitor, "level": level, "line": line, "value": value, "threshold": threshold}


def run_monitors(
    con, run_id: str, settings: MonitorSettings | None = None, query: Callable | None = None
) -> list[dict]:
    """The five findings of ``run_id``, in ``MONITORS`` order.

    ``query(name, params)`` returns a query's rows as dicts (default: ``sql.run`` on ``con``); a query that fails
    makes its monitor ``n/a``, with the error in its line."""
    settings = settings or MonitorSettings()
    query = query or (lambda name, params: sql.run(con, name, params).to_pylist())
    judge = {
        "length": judge_length,
        "spread": judge_spread,
        "saturation": judge_saturation,
        "kl": judge_kl,
        "reward_vs_eval": judge_reward_vs_eval,
    }
    out = []
    for name in MONITORS:
        try:
            rows = query(QUERIES[name], {"run_id": run_id})
        except Exception as e:  # a monitor must not take the report down: it says it could not look
            out.append(finding(name, NA, f"could not read sql/{QUERIES[name]}: {type(e).__name__}: {e}"))
            continue
        out.append(judge[name](rows, settings))
    return out


# -- the five judgements, each over its query's rows --------------------------------------------------------------
def judge_length(rows: Sequence[dict], s: MonitorSettings) -> dict:
    """The latest measured round's mean length against P(0)'s (sql/monitor_length rows)."""
    rows = [r for r in rows if r["ratio"] is not None and r["round"] > 0]
    if not rows:
        return finding("length", NA, "no measured round after P(0) with P(0)'s length to compare (needs round >= 1)")
    last = max(rows, key=lambda r: r["round"])
    ratio = float(last["ratio"])
    seen = f"round {last['round']}'s answers average {last['mean_chars']:.0f} characters, {ratio:.2f}x P(0)'s"
    if ratio >= s.length_ratio:
        return finding(
            "length", WARN, f"{seen}: answers grow longer (threshold {s.length_ratio}x)", ratio, s.length_ratio
        )
    return finding("length", OK, f"{seen} (threshold {s.length_ratio}x)", ratio, s.length_ratio)


def judge_spread(rows: Sequence[dict], s: MonitorSettings) -> dict:
    """The zero-spread share of the policy updates' groups, first round against the latest (sql/training_signal)."""
    by_round: dict[int, list[dict]] = {}
    for r in rows:
        if r["stage"] == "policy":
            by_round.setdefault(r["round"], []).append(r)
    if not by_round:
        return finding("spread", NA, "no policy update with rewards in the store")

    def share(t: int) -> float:
        groups = sum(r["groups"] for r in by_round[t])
        return sum(r["zero_std_groups"] for r in by_round[t]) / groups if groups else 0.0

    first, last = min(by_round), max(by_round)
    now, then = share(last), share(first)
    seen = f"{now:.0%} of round {last}'s policy groups have rewards that do not vary"
    if first != last:
        seen += f" (round {first}: {then:.0%})"
    if now >= s.zero_spread_share:
        return finding(
            "spread",
            WARN,
            f"{seen}: most of each step teaches nothing (threshold {s.zero_spread_share:.0%})",
            now,
            s.zero_spread_share,
        )
    if first != last and now - then >= s.zero_spread_rise:
        return finding(
            "spread",
            WARN,
            f"{seen}: the spread is collapsing (rise threshold {s.zero_spread_rise:.0%})",
            now,
            s.zero_spread_share,
        )
    return finding("spread", OK, f"{seen} (threshold {s.zero_spread_share:.0%})", now, s.zero_spread_share)


def judge_saturation(rows: Sequence[dict], s: MonitorSettings) -> dict:
    """The share of the latest measured round's judged items that every response passes (sql/saturation)."""
    rows = [r for r in rows if r["stage"] == "measure" and r["n_judged"]]
    if not rows:
        return finding("saturation", NA, "no measured rubric item with every verdict known")
    last = max(rows, key=lambda r: r["round"])
    share = last["n_all_yes"] / last["n_judged"]
    seen = f"{last['n_all_yes']} of round {last['round']}'s {last['n_judged']} judged rubric items pass every response"
    if share >= s.saturation_share:
        return finding(
            "saturation",
            WARN,
            f"{seen} ({share:.0%}): the rubric no longer ranks (threshold {s.saturation_share:.0%})",
            share,
            s.saturation_share,
        )
    return finding(
        "saturation", OK, f"{seen} ({share:.0%}; threshold {s.saturation_share:.0%})", share, s.saturation_share
    )


def judge_kl(rows: Sequence[dict], s: MonitorSettings) -> dict:
    """The policy's (else the generator's) latest update: its largest KL and the growth from first to last step."""
    if not rows:
        return finding("kl", NA, "no update logged a KL (beta = 0, or no update registered)")
    role = "policy" if any(r["role"] == "policy" for r in rows) else "generator"
    t = max(r["round"] for r in rows if r["role"] == role)
    steps = sorted((r["step"], r["kl"]) for r in rows if r["role"] == role and r["round"] == t and r["kl"] is not None)
    if not steps:
        return finding("kl", NA, f"round {t}'s {role} update logged no KL value")
    top = max(k for _, k in steps)
    first, last = steps[0][1], steps[-1][1]
    seen = (
        f"round {t}'s {role} update: KL to its reference {first:.4f} at step {steps[0][0]}, "
        f"{last:.4f} at step {steps[-1][0]}"
    )
    if top > s.kl_max:
        return finding("kl", WARN, f"{seen}, peak {top:.4f} nats: past {s.kl_max}", top, s.kl_max)
    if len(steps) > 1 and last > 0.01 and first > 0 and last / first >= s.kl_growth:
        return finding(
            "kl", WARN, f"{seen}: {last / first:.1f}x within the update (threshold {s.kl_growth}x)", top, s.kl_max
        )
    return finding("kl", OK, f"{seen} (threshold {s.kl_max} nats, {s.kl_growth}x)", top, s.kl_max)


def judge_reward_vs_eval(rows: Sequence[dict], s: MonitorSettings) -> dict:
    """The policy's training reward from its first update to its latest, beside the held-out figures."""
    trained = [r for r in rows if r["train_reward"] is not None]
    if len(trained) < 2:
        return finding("reward_vs_eval", NA, "needs two policy updates to see a trend")
    first, last = min(trained, key=lambda r: r["round"]), max(trained, key=lambda r: r["round"])
    rise = last["train_reward"] - first["train_reward"]
    seen = (
        f"training reward {first['train_reward']:.3f} (round {first['round']}) -> "
        f"{last['train_reward']:.3f} (round {last['round']})"
    )
    held = []
    for key, label in (("eval_accuracy", "evaluator accuracy"), ("win_rate", "win rate")):
        a, b = first.get(key), last.get(key)
        if a is not None and b is not None:
            held.append((label, a, b))
    if not held:
        return finding("reward_vs_eval", NA, f"{seen}; no held-out accuracy or win rate in both rounds")
    figures = ", ".join(f"{label} {a:.3f} -> {b:.3f}" for label, a, b in held)
    if rise >= s.reward_rise and all(b <= a for _, a, b in held):
        return finding(
            "reward_vs_eval",
            WARN,
            f"{seen} while {figures}: the reward rises, the held-out figures do not",
            rise,
            s.reward_rise,
        )
    return finding("reward_vs_eval", OK, f"{seen}; {figures} (rise threshold {s.reward_rise})", rise, s.reward_rise)


def markdown(findings: Sequence[dict]) -> str:
    """The findings as markdown lines (the tracker's ``monitors.md``, the run's signals artifact)."""
    mark = {WARN: "**warn**", OK: "ok", NA: "n/a"}
    return "".join(f"- {mark[f['level']]} {f['monitor']}: {f['line']}\n" for f in findings)
