"""The report page: ``collect``'s data -> one self-contained HTML string, from the Jinja2 templates in ``templates/``.

The Python here only shapes the data for the page (which rows, grouped how) and draws the inline SVG charts
(``dr_core.report.svg``); the markup is in the templates: ``report.html.j2`` (the page: warnings, navigation, at a
glance, query errors), one ``<section id>.html.j2`` per section, ``macros.html.j2`` (tables, figures, the zero-std
block both training sections share) and ``report.css``.

Safety: the environment autoescapes every ``{{ ... }}`` and its ``finalize`` passes every value through the ``nourl``
filter, which escapes it and breaks "://" with a zero-width space, so no text from the data becomes markup or a URL a
browser could fetch. The SVG charts are inserted as trusted markup (``Markup``): svg.py escapes its own text.
``StrictUndefined``: a key the data lacks raises, never renders as an empty cell; a section that raises shows
"no data (could not render: ...)" in its place and the rest of the page is kept.
"""

from __future__ import annotations

from collections import defaultdict

from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup

from dr_core.report.collect import FRESH, STALE, update_steps
from dr_core.report.svg import bar_chart, line_chart
from dr_core.scoring import signals


def nourl(value) -> Markup:
    """Text from the data as markup: escaped, with "://" broken by a zero-width space so no URL in the data becomes a
    fetchable reference (``Markup.join`` escapes each piece). Markup (a chart, a macro's output) passes unchanged."""
    if hasattr(value, "__html__"):
        return value
    return Markup(":&#8203;//").join(str(value).split("://"))


def num(v, digits: int = 4):
    """A table value: a float with ``digits`` decimals, None as a grey "n/a", anything else as itself (as text)."""
    if v is None:
        return Markup('<span class="na">n/a</span>')
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return v


def clip(s: str | None, n: int) -> str:
    s = s or ""
    return s if len(s) <= n else s[:n] + " [...]"


def col_label(col: str) -> str:
    """A case-study grid column ("C:0", "anchor:1") as its header: y0.., anchor #1 (best).."""
    target, n = col.split(":")
    return f"y{n}" if target == "C" else f"anchor #{n}" + (" (best)" if n == "1" else "")


ENV = Environment(
    loader=PackageLoader("dr_core.report", "templates"),
    autoescape=True,
    undefined=StrictUndefined,
    finalize=nourl,
    trim_blocks=True,
    lstrip_blocks=True,
    keep_trailing_newline=True,
)
ENV.filters.update(nourl=nourl, num=num, clip=clip, col_label=col_label)
#: The signal thresholds the page's texts name (dr_core.scoring.signals).
ENV.globals["limits"] = {
    "zero_std": f"{signals.ZERO_STD:g}",
    "yes_rate_low": signals.YES_RATE_LOW,
    "yes_rate_high": signals.YES_RATE_HIGH,
    "constant_score_warn": f"{signals.CONSTANT_SCORE_WARN:.0%}",
}


def _chart(fn, *args, **kwargs) -> Markup | None:
    """An inline SVG chart as trusted markup; None when it has nothing to draw (svg.py raises ValueError)."""
    try:
        return Markup(fn(*args, **kwargs))
    except ValueError:
        return None


# -- per section: what its template needs besides the data ``d`` -------------------------------------------------------
def _signal(d: dict) -> dict:
    """Per round: the verifier's yes-rate on the measured sets, constant-score sets, update steps without gradient."""
    yes = {c["round"]: c for c in d["costs"] if c["stage"] == "measure"}
    const = {m["round"]: m.get("zero_spread_share") for m in d["metrics"] if m["stage"] == "measure"}
    dead = {
        (u["role"], u["round"]): (signals.no_gradient_steps(u["steps"]), len(u["steps"]))
        for u in update_steps(d.get("training_signal", []))
    }
    rounds = sorted(set(yes) | set(const) | {t for _, t in dead})

    def steps(role, t):
        return f"{dead[(role, t)][0]} of {dead[(role, t)][1]}" if (role, t) in dead else "-"

    def answered(c):
        return None if c is None else c["n_verdicts"] - c["n_unscorable_verdicts"]

    rows = [
        {
            "round": t,
            "yes_rate": (yes.get(t) or {}).get("yes_rate"),
            "answered": answered(yes.get(t)),
            "constant": const.get(t),
            "generator": steps("generator", t),
            "policy": steps("policy", t),
        }
        for t in rounds
    ]
    chart = (
        _chart(
            line_chart,
            [
                ("verifier yes-rate, measured sets", [(r["round"], r["yes_rate"]) for r in rows]),
                ("share of sets with constant scores", [(r["round"], r["constant"]) for r in rows]),
            ],
            "round t",
            "share (0..1)",
            title="Signal checks per round, stage measure",
            x_tick_label="round {x}",
        )
        if rounds
        else None
    )
    return {"chart": chart, "rows": rows}


def _gap(d: dict) -> dict:
    m = [r for r in d["metrics"] if r["stage"] == "measure"]
    return {
        "chart": _chart(
            line_chart,
            [
                ("anchor lists: Eq. 2 gap (reference = anchor rank)", [(r["round"], r.get("anchor_gap")) for r in m]),
                ("policy sets C: spread, mean |S_i - S_j|", [(r["round"], r.get("set_spread")) for r in m]),
            ],
            "round t (P(t) sampled, G(t) writes the rubrics)",
            "score gap (Eq. 12 score units, 0..1)",
            title="Score gap per round, stage measure",
            x_tick_label="round {x}",
        )
    }


def _zero_std(d: dict, role: str) -> dict:
    """The share of zero-std GRPO groups per step of one update (sql/training_signal): its rows and chart."""
    rows = [r for r in d.get("training_signal", []) if r["stage"] == role]
    stepped = sorted((r for r in rows if r["step"] is not None), key=lambda r: (r["round"], r["step"]))
    x = {(r["round"], r["step"]): i for i, r in enumerate(stepped)}
    markers = [(min(i for (t, _), i in x.items() if t == rt), f"round {rt}") for rt in sorted({t for t, _ in x})]
    chart = (
        _chart(
            line_chart,
            [
                (
                    "share of groups with zero reward std",
                    [(x[(r["round"], r["step"])], r["zero_std_share"]) for r in stepped],
                )
            ],
            f"{role} GRPO step (counted over the run's rounds)",
            "share of groups (0..1; 1 = no gradient)",
            title=f"Zero-std GRPO groups per step, {role} update",
            markers=markers,
        )
        if stepped
        else None
    )
    reward = "R_disc + lam R_anchor (Eq. 13 + Eq. 15)" if role == "generator" else "Eq. 12 score of the response"
    curve = (
        _chart(
            line_chart,
            [("mean reward", [(x[(r["round"], r["step"])], r.get("reward_mean")) for r in stepped])],
            f"{role} GRPO step (counted over the run's rounds)",
            reward,
            title=f"Training reward per step, {role} update (band: +- the mean within-group std)",
            include_zero=False,
            markers=markers,
            bands=[[(x[(r["round"], r["step"])], *_spread(r)) for r in stepped]],
        )
        if stepped
        else None
    )
    return {"role": role, "rows": rows, "stepped": bool(stepped), "chart": chart, "curve": curve}


def _spread(r: dict) -> tuple[float | None, float | None]:
    m, sd = r.get("reward_mean"), r.get("reward_spread")
    return (None, None) if m is None or sd is None else (m - sd, m + sd)


def _training(d: dict) -> dict:
    tr = [r for r in d["training"] if r["global_step"] is not None]
    markers = [
        (min(r["global_step"] for r in tr if r["round"] == t), f"round {t}") for t in sorted({r["round"] for r in tr})
    ]
    return {
        "scored": any(r["mean_r_disc"] is not None or r["mean_r_anchor"] is not None for r in tr),
        "r_disc_chart": _chart(
            line_chart,
            [("mean R_disc", [(r["global_step"], r["mean_r_disc"]) for r in tr])],
            "generator GRPO step (counted over the run's rounds)",
            "R_disc (Eq. 13)",
            title="Discriminability reward per training step",
            markers=markers,
        ),
        "r_anchor_chart": _chart(
            line_chart,
            [("mean R_anchor", [(r["global_step"], r["mean_r_anchor"]) for r in tr])],
            "generator GRPO step (counted over the run's rounds)",
            "R_anchor (Eq. 15, log-sigmoid)",
            title="Anchor reward per training step",
            markers=markers,
        ),
        "zero_std": _zero_std(d, "generator"),
    }


def _policy_training(d: dict) -> dict:
    return {"zero_std": _zero_std(d, "policy")}


def _saturation(d: dict) -> dict:
    stages = [s for s in ("measure", "generator", "policy") if any(r["stage"] == s for r in d["metrics"])]
    series = [
        (f"stage {s}", [(r["round"], r.get("saturation")) for r in d["metrics"] if r["stage"] == s]) for s in stages
    ]
    chart = (
        _chart(
            line_chart,
            series,
            "round t",
            "saturated items / judged items (share, 0..1)",
            title="Rubric saturation per round",
            x_tick_label="round {x}",
        )
        if series
        else None
    )
    return {"chart": chart, "rows": [r for r in d["metrics"] if "saturation" in r]}


def _accuracy(d: dict) -> dict:
    acc = [r for r in d["eval"] if r["metric"] == "accuracy"]
    benches = sorted({r["benchmark"] for r in acc})
    chart = (
        _chart(
            line_chart,
            [(b, [(r["round"], r["mean"]) for r in acc if r["benchmark"] == b]) for b in benches],
            "round t (G(t) as generator, frozen verifier)",
            "strict accuracy (share, 0..1)",
            title="Evaluator accuracy per round, eval slice",
            x_tick_label="round {x}",
        )
        if acc
        else None
    )
    by = defaultdict(dict)
    for r in d["eval"]:
        by[(r["round"], r["benchmark"], r["checkpoint"])][r["metric"]] = r
    rows = [
        {
            "round": t,
            "benchmark": b,
            "checkpoint": c,
            "accuracy": v.get("accuracy", {}).get("mean"),
            "ties": v.get("ties", {}).get("mean"),
            "unscorable": v.get("unscorable", {}).get("mean"),
            "n_scored": v.get("accuracy", {}).get("n_scored"),
        }
        for (t, b, c), v in sorted(by.items())
    ]
    return {"chart": chart, "rows": rows}


def _win_rate(d: dict) -> dict:
    rows_in = d.get("win_rate") or []
    wins = [r for r in rows_in if r["metric"] == "win_rate"]
    benches = sorted({r["benchmark"] for r in wins})
    chart = (
        _chart(
            line_chart,
            [(b, [(r["round"], r["mean"]) for r in wins if r["benchmark"] == b]) for b in benches],
            "round t (policy P(t) after the update)",
            "win rate against P(0) (share, 0..1; ties count 1/2)",
            title="Policy win rate per round, held-out prompts",
            x_tick_label="round {x}",
        )
        if wins
        else None
    )
    by = defaultdict(dict)
    for r in rows_in:
        by[(r["round"], r["benchmark"], r["checkpoint"], r["verifier"])][r["metric"]] = r.get("mean")
    rows = [{"round": t, "benchmark": b, "checkpoint": c, "judge": j, **v} for (t, b, c, j), v in sorted(by.items())]
    return {"chart": chart, "rows": rows}


def _stale_fresh(d: dict) -> dict:
    sf = d["stale_fresh"]
    if not sf:
        return {}
    t = sf["round"]
    metrics = [
        ("anchor gap (Eq. 2)", "anchor_gap"),
        ("spread on C", "set_spread"),
        ("R_disc (Eq. 13)", "r_disc"),
        ("saturation", "saturation"),
    ]
    chart = _chart(
        bar_chart,
        [m[0] for m in metrics],
        [
            (f"stale G({t - 1})", [sf[STALE].get(k) for _, k in metrics]),
            (f"fresh G({t})", [sf[FRESH].get(k) for _, k in metrics]),
        ],
        "value (score units; saturation: share)",
        title=f"Stale vs fresh evaluator on P({t - 1})'s sets",
        x_label="metric",
    )
    rows = [
        (label, sf[STALE].get(k), sf[FRESH].get(k))
        for label, k in metrics
        + [
            ("R_anchor (Eq. 15)", "r_anchor"),
            ("share of sets with spread 0", "zero_spread_share"),
            ("rubric rollouts", "n_rollouts"),
            ("unscorable rollouts", "n_unscorable_rewards"),
        ]
    ]
    return {"chart": chart, "rows": rows, "headers": ["metric", f"stale G({t - 1})", f"fresh G({t})"]}


def _cost(d: dict, n_slowest: int = 8) -> dict:
    """Tokens and training seconds per round and stage; one row per flow execution (ran / cached / failed steps,
    seconds) and the run's slowest steps that ran."""
    costs = d["costs"]
    rounds = sorted({c["round"] for c in costs})
    stages = sorted({c["stage"] for c in costs})
    get = {(c["round"], c["stage"]): c for c in costs}

    def tokens(c):
        if c is None or (c["prompt_tokens"] is None and c["response_tokens"] is None):
            return None
        return float((c["prompt_tokens"] or 0) + (c["response_tokens"] or 0))

    tokens_chart = (
        _chart(
            bar_chart,
            [f"round {t}" for t in rounds],
            [(s, [tokens(get.get((t, s))) for t in rounds]) for s in stages],
            "tokens (prompt + sampled response)",
            title="Policy sampling tokens per round and stage",
            x_label="round",
        )
        if costs
        else None
    )
    trained = any(c["train_seconds"] is not None for c in costs)
    train_chart = (
        _chart(
            bar_chart,
            [f"round {t}" for t in rounds],
            [(s, [get.get((t, s), {}).get("train_seconds") for t in rounds]) for s in ("generator", "policy")],
            "seconds",
            title="GRPO update wall time per round",
            x_label="round",
        )
        if trained
        else None
    )
    executions: dict[str, dict] = {}
    for r in d["step_times"]:
        executions.setdefault(r["execution"], r)
    slowest = sorted(
        (r for r in d["step_times"] if r["state"] != "Cached" and r["seconds"] is not None), key=lambda r: -r["seconds"]
    )[:n_slowest]
    return {
        "tokens_chart": tokens_chart,
        "trained": trained,
        "train_chart": train_chart,
        "executions": list(executions.values()),
        "slowest": slowest,
    }


#: (section id, its name in the navigation, what its template needs besides ``d`` or None), in page order.
def _monitors(d: dict) -> dict:
    """The monitors' findings, and each looked-at figure as a share of its threshold (1 = the threshold)."""
    found = d.get("monitors") or []
    drawn = [f for f in found if f.get("value") is not None and f.get("threshold")]
    chart = (
        _chart(
            bar_chart,
            [f["monitor"] for f in drawn],
            [("figure / threshold", [f["value"] / f["threshold"] for f in drawn])],
            "figure / its threshold (1 = warn)",
            title="Reward-hacking monitors",
        )
        if drawn
        else None
    )
    return {"found": found, "chart": chart}


SECTIONS = (
    ("monitors", "monitors", _monitors),
    ("signal", "signal checks", _signal),
    ("gap", "score gap", _gap),
    ("training", "training rewards", _training),
    ("policy-training", "policy training signal", _policy_training),
    ("saturation", "saturation", _saturation),
    ("accuracy", "accuracy", _accuracy),
    ("win-rate", "policy win rate", _win_rate),
    ("stale-fresh", "stale vs fresh", _stale_fresh),
    ("examples", "rubric examples", None),
    ("cost", "cost", _cost),
)


def render_html(d: dict, store_url: str = "") -> str:
    """The report page for ``collect``'s data: one HTML string, no external references."""
    sections = []
    for sid, _, view in SECTIONS:
        try:
            sections.append(Markup(ENV.get_template(f"{sid}.html.j2").render(d=d, **(view(d) if view else {}))))
        except Exception as exc:  # a data shape the page did not foresee: say so in place, keep the rest
            sections.append(ENV.get_template("macros.html.j2").module.failed_section(sid, repr(exc)))
    return ENV.get_template("report.html.j2").render(
        d=d, store_url=store_url, sections=sections, nav=[(sid, label) for sid, label, _ in SECTIONS]
    )
