"""``dr report --learning FILE``: the learning benchmark's results (infra/benchmarks/bench_learning.py, version 2; an
IFEval benchmark result, infra/benchmarks/bench_ifeval.py, is drawn by dr_core/report/learning_ifeval.py) as one
offline HTML page: the training reward curves of both updates per step with their group spread, the held-out
G(S) - G(0) deltas with their 95 % intervals per seed and pooled, the tuning sweep, and the policy comparison.

The page is drawn from the benchmark's JSON alone (no store, no query). A file that is not such a result stops with
ReportError naming the file and the first missing key; nothing is written then.
"""

from __future__ import annotations

import json
from pathlib import Path

from markupsafe import Markup

from dr_core.report.collect import ReportError
from dr_core.report.render import ENV, _chart
from dr_core.report.svg import interval_chart, line_chart
from dr_core.store import atomic

#: Keys a result must have to be drawn (the benchmark's version 2 layout).
REQUIRED = ("version", "sweep", "chosen", "seeds", "pooled", "policy")
#: Held-out metrics, with which direction is better.
METRICS = (
    ("r_disc", "mean R_disc (Eq. 13), higher is better"),
    ("anchor_tie_rate", "anchor-pair tie rate, lower is better"),
    ("anchor_strict_accuracy", "strict anchor order, higher is better"),
    ("saturated_items", "saturated items, lower is better"),
    ("unparseable", "unparseable rubrics, lower is better"),
)


def load_result(path: str | Path) -> dict:
    """The benchmark's JSON, checked to be a complete version-2 result (ReportError naming what is not)."""
    path = Path(path)
    try:
        d = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ReportError(f"--learning {path}: cannot read it as JSON ({exc})") from None
    if not isinstance(d, dict):
        raise ReportError(f"--learning {path}: expected a JSON object (bench_learning.py's output)")
    if d.get("benchmark") == "ifeval":  # infra/benchmarks/bench_ifeval.py (dr_core/report/learning_ifeval.py)
        from dr_core.report.learning_ifeval import REQUIRED as IFEVAL_REQUIRED

        missing = [k for k in IFEVAL_REQUIRED if k not in d]
        if missing or d.get("partial"):
            raise ReportError(
                f"--learning {path}: not a complete bench_ifeval.py result: "
                + (f"no key {missing[0]!r}" if missing else "the run stopped early ('partial' is true)")
            )
        return d
    missing = [k for k in REQUIRED if k not in d]
    if missing:
        raise ReportError(
            f"--learning {path}: not a complete bench_learning.py version-2 result: no key "
            f"{missing[0]!r}" + (" (the run stopped early: 'partial' is true)" if d.get("partial") else "")
        )
    if d.get("version") != 2:
        raise ReportError(f"--learning {path}: version {d.get('version')!r}; this page draws version 2")
    return d


def _band_chart(curves: list[tuple[str, list[dict]]], title: str, y_label: str) -> Markup | None:
    series = [(name, [(s["step"], s["reward_mean"]) for s in steps]) for name, steps in curves]
    bands = [
        [
            (s["step"], s["reward_mean"] - s["group_std"], s["reward_mean"] + s["group_std"])
            for s in steps
            if s.get("group_std") is not None and s.get("reward_mean") is not None
        ]
        for _, steps in curves
    ]
    return _chart(line_chart, series, "GRPO step", y_label, title=title, include_zero=False, bands=bands)


def _ci(c: dict) -> tuple:
    lo, hi = c.get("ci95") or (None, None)
    return c.get("mean"), lo, hi


def view(d: dict) -> dict:
    """What the page shows, shaped for its template."""
    seeds = list(d["seeds"])
    gen = _band_chart(
        [(f"seed {s}", d["seeds"][s]["curve"]["steps"]) for s in seeds],
        "Generator update: training reward per step (band: +- the within-group std)",
        "R_disc + lam R_anchor",
    )
    updates = d["policy"].get("updates", {})
    pol = (
        _band_chart(
            [(name, u["steps"]) for name, u in updates.items()],
            "Policy updates: Eq. 12 score per step (band: +- the within-group std)",
            "score",
        )
        if updates
        else None
    )
    deltas = []
    for m, label in METRICS:
        cats = [f"seed {s}" for s in seeds] + ["pooled"]
        pts = [_ci(d["seeds"][s]["GS_minus_G0"][m]) for s in seeds] + [_ci(d["pooled"]["GS_minus_G0"][m])]
        deltas.append(
            {
                "metric": m,
                "label": label,
                "rows": list(zip(cats, pts)),
                "chart": _chart(
                    interval_chart,
                    cats,
                    pts,
                    f"G(S) - G(0), {m}",
                    title=f"Held-out change: {label} (95 % bootstrap interval over prompts)",
                ),
            }
        )
    judged = d["policy"].get("judged", {})
    wins = [(name, (m.get("win_rate"), *(m.get("win_rate_ci95") or (None, None)))) for name, m in judged.items()]
    win_chart = (
        _chart(
            interval_chart,
            [n for n, _ in wins],
            [p for _, p in wins],
            "win rate (ties count 1/2)",
            title="Policy comparisons on held-out prompts (95 % bootstrap interval)",
            reference=0.5,
        )
        if wins
        else None
    )
    return {
        "seeds": seeds,
        "gen_chart": gen,
        "pol_chart": pol,
        "deltas": deltas,
        "win_chart": win_chart,
        "judged": judged,
        "updates": updates,
    }


def render_learning(d: dict, source: str = "") -> str:
    return ENV.get_template("learning.html.j2").render(d=d, source=source, **view(d))


def write_learning_report(path: str | Path, out_dir: str | Path) -> Path:
    """``out_dir/learning.html`` from the benchmark result at ``path`` (atomic; checked before anything is written)."""
    d = load_result(path)
    out = Path(out_dir).expanduser()
    if out.exists() and not out.is_dir():
        raise ReportError(f"--out {out} is a file; give a directory (learning.html goes inside)")
    try:
        atomic.check_output_path(out / "learning.html", "report")
    except OSError as exc:
        raise ReportError(str(exc)) from None
    if d.get("benchmark") == "ifeval":
        from dr_core.report.learning_ifeval import render_ifeval

        page = render_ifeval(d, str(path))
    else:
        page = render_learning(d, str(path))
    atomic.write_all_atomic([(out / "learning.html", page)])
    return out / "learning.html"
