"""``dr report --learning FILE`` for the IFEval benchmark's result (infra/benchmarks/bench_ifeval.py): the gate, the
three pre-registered criteria with their intervals (seeds, then prompts) per seed and pooled, every policy's held-out
accuracies by code, the generators' agreement with the code, and the training curves of every update with their
group spread. Drawn from the JSON alone (dr_core/report/learning.py checks and dispatches)."""

from __future__ import annotations

from dr_core.report.render import ENV, _chart
from dr_core.report.svg import interval_chart

#: Keys an IFEval result must have to be drawn.
REQUIRED = ("version", "protocol", "gate", "pooled", "criteria", "policies", "seeds", "args")
CRITERIA = {
    "oracle_minus_P0": "(a) the control minus P(0): held-out prompt-level strict accuracy",
    "GS_minus_G0_agreement": "(b) G(S) minus G(0): agreement with the code (Spearman per set)",
    "PGS_minus_PG0": "(c) P_G(S) minus P_G(0): held-out prompt-level strict accuracy",
}
NAMES = {"generator": "G(0) -> G(S)", "oracle": "control (code's reward)", "PGS": "P_G(S)", "PG0": "P_G(0)"}


def _ci(c: dict | None) -> tuple:
    if not c:
        return (None, None, None)
    lo, hi = c.get("ci95") or (None, None)
    return c.get("mean"), lo, hi


def view(d: dict) -> dict:
    """What the page shows, shaped for its template."""
    from dr_core.report.learning import _band_chart

    criteria = []
    for key, label in CRITERIA.items():
        seeds = d.get("per_seed", {}).get(key, {})
        cats = [f"seed {s}" for s in seeds] + ["pooled"]
        pts = [_ci(seeds[s]) for s in seeds] + [_ci(d["pooled"].get(key))]
        chart = None
        if any(p[0] is not None for p in pts):
            chart = _chart(interval_chart, cats, pts, "difference", title=f"{label} (95 % interval)")
        crit = next((c for c in d["criteria"].values() if c["key"] == key), {})
        criteria.append({"key": key, "label": label, "rows": list(zip(cats, pts)), "chart": chart, "crit": crit})
    curves = []
    for part in NAMES:
        series = [(f"seed {s}", parts[part]["curve"]["steps"]) for s, parts in d["seeds"].items() if part in parts]
        series = [(n, [st for st in steps if st.get("reward_mean") is not None]) for n, steps in series]
        if any(steps for _, steps in series):
            y = "R_disc + lam R_anchor" if part == "generator" else "reward"
            curves.append(_band_chart(series, f"{NAMES[part]}: training reward per step (band: +- group std)", y))
    return {"criteria": criteria, "curves": curves, "names": NAMES}


def render_ifeval(d: dict, source: str = "") -> str:
    return ENV.get_template("learning-ifeval.html.j2").render(d=d, source=source, **view(d))
