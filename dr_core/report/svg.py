"""Plain SVG charts for the report, written by hand (no plotting library): a line chart (optionally with a shaded
band around each line), a grouped bar chart and an interval chart (a point and its interval per category).

Each function returns one ``<svg>`` element as a string, meant to be inlined in an HTML5 page (no xmlns needed, no
external fonts, scripts or styles). Axis names, tick labels and a legend are always drawn; every point and bar
carries a ``<title>`` with its exact value (a browser shows it on hover). Missing values (None) are skipped: a line
is broken there, a bar is not drawn and its slot says "n/a".

    python -c "from dr_core.report.svg import line_chart as c; print(c([('gap', [(0, .1), (1, .3)])], 'round', 'gap'))"
"""

from __future__ import annotations

import math
from html import escape
from typing import Sequence

W, H = 600, 300
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 34, 50
#: Distinguishable in colour and in grey print.
COLORS = ("#1f4e9c", "#c2410c", "#15803d", "#7e22ce", "#a16207", "#0f766e")
DASHES = ("", "6 3", "2 3", "8 3 2 3", "", "6 3")

Point = tuple[float, float | None]


def _fmt(v: float) -> str:
    if v == 0:
        return "0"
    if abs(v) >= 1000 or abs(v) < 0.001:
        return f"{v:.2g}"
    return f"{v:.3g}"


def _ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """About n round tick values covering [lo, hi]."""
    span = hi - lo
    raw = span / max(n - 1, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.floor(lo / step) * step
    out, v = [], start
    while v <= hi + step * 1e-9:
        out.append(round(v, 12))
        v += step
    return out


def _y_range(values: Sequence[float], include_zero: bool) -> tuple[float, float]:
    lo, hi = min(values), max(values)
    if include_zero:
        lo, hi = min(lo, 0.0), max(hi, 0.0)
    if hi - lo < 1e-12:  # all equal: a flat line; all 0 (a collapsed gap) sits on the axis of a 0..1 plot
        lo, hi = (0.0, 1.0) if abs(lo) < 1e-12 else (lo - 0.5, hi + 0.5)
    ticks = _ticks(lo, hi)
    return min(ticks[0], lo), max(ticks[-1], hi)


def _plot_area(y_lo: float, y_hi: float):
    """(plot width, plot height, y value -> pixel row) of a chart whose y axis runs from y_lo to y_hi."""
    pw, ph = W - LEFT - RIGHT, H - TOP - BOTTOM
    return pw, ph, lambda y: TOP + ph * (1 - (y - y_lo) / (y_hi - y_lo))


def _frame(title: str, x_label: str, y_label: str, y_lo: float, y_hi: float) -> list[str]:
    pw, ph = W - LEFT - RIGHT, H - TOP - BOTTOM
    out = [
        f'<svg class="chart" viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img" '
        f'aria-label="{escape(title)}" font-family="sans-serif" font-size="11">',
        f"<title>{escape(title)}</title>",
        f'<text x="{W / 2}" y="16" text-anchor="middle" font-size="13" font-weight="bold">{escape(title)}</text>',
        f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{TOP + ph}" stroke="#333"/>',
        f'<line x1="{LEFT}" y1="{TOP + ph}" x2="{LEFT + pw}" y2="{TOP + ph}" stroke="#333"/>',
        f'<text x="{LEFT + pw / 2}" y="{H - 8}" text-anchor="middle">{escape(x_label)}</text>',
        f'<text transform="translate(14 {TOP + ph / 2}) rotate(-90)" text-anchor="middle">{escape(y_label)}</text>',
    ]
    for t in _ticks(y_lo, y_hi):
        if y_lo - 1e-12 <= t <= y_hi + 1e-12:
            y = TOP + ph * (1 - (t - y_lo) / (y_hi - y_lo))
            out.append(f'<line x1="{LEFT - 4}" y1="{y:.1f}" x2="{LEFT + pw}" y2="{y:.1f}" stroke="#ddd"/>')
            out.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{_fmt(t)}</text>')
    if y_lo < 0 < y_hi:
        y0 = TOP + ph * (1 - (0 - y_lo) / (y_hi - y_lo))
        out.append(f'<line x1="{LEFT}" y1="{y0:.1f}" x2="{LEFT + pw}" y2="{y0:.1f}" stroke="#888"/>')
    return out


def _legend(labels: Sequence[str], bars: bool = False) -> list[str]:
    out, x = [], LEFT + 4
    for i, label in enumerate(labels):
        c = COLORS[i % len(COLORS)]
        if bars:
            out.append(f'<rect x="{x}" y="{TOP - 12}" width="14" height="8" fill="{c}"/>')
        else:
            dash = f' stroke-dasharray="{DASHES[i % len(DASHES)]}"' if DASHES[i % len(DASHES)] else ""
            out.append(
                f'<line x1="{x}" y1="{TOP - 8}" x2="{x + 14}" y2="{TOP - 8}" stroke="{c}" stroke-width="2"{dash}/>'
            )
        out.append(f'<text x="{x + 18}" y="{TOP - 4}">{escape(label)}</text>')
        x += 26 + 6.5 * len(label)
    return out


Band = tuple[float, float, float]


def line_chart(
    series: Sequence[tuple[str, Sequence[Point]]],
    x_label: str,
    y_label: str,
    title: str = "",
    include_zero: bool = True,
    x_tick_label: str = "{x}",
    markers: Sequence[tuple[float, str]] = (),
    bands: Sequence[Sequence[Band]] = (),
) -> str:
    """Lines of (x, y) points, one per named series; y None breaks a line. ``x_tick_label`` formats an x tick
    (e.g. "round {x}"); ``markers`` are labelled vertical lines at x (e.g. where a round starts). Integer xs get a
    tick each (at most 12, else evenly thinned). ``bands[i]``: (x, low, high) points shaded in series i's colour
    (e.g. the mean plus and minus a spread). Returns the ``<svg>`` element; a ValueError if no point has a y."""
    ys = [y for _, pts in series for _, y in pts if y is not None]
    ys += [v for band in bands for _, lo, hi in band for v in (lo, hi) if v is not None] if ys else []
    xs = sorted({x for _, pts in series for x, _ in pts} | {m for m, _ in markers})
    if not ys or not xs:
        raise ValueError("line_chart: no data")
    y_lo, y_hi = _y_range(ys, include_zero)
    px, py = _line_scales(xs[0], xs[-1], y_lo, y_hi)
    out = _frame(title, x_label, y_label, y_lo, y_hi)
    out += _bands(bands, px, py)
    out += _x_ticks(xs, x_tick_label, px)
    out += _markers(markers, px)
    for i, (name, pts) in enumerate(series):
        out += _series(i, name, pts, x_tick_label, px, py)
    out += _legend([name for name, _ in series])
    out.append("</svg>")
    return "\n".join(out)


def _line_scales(x_lo: float, x_hi: float, y_lo: float, y_hi: float):
    """(x value -> pixel column, y value -> pixel row) of a line chart; a single x sits in the middle."""
    if x_hi == x_lo:
        x_lo, x_hi = x_lo - 1, x_hi + 1
    pw, _, py = _plot_area(y_lo, y_hi)
    pad = pw * 0.04

    def px(x):
        return LEFT + pad + (pw - 2 * pad) * (x - x_lo) / (x_hi - x_lo)

    return px, py


def _bands(bands: Sequence[Sequence[Band]], px, py) -> list[str]:
    """One shaded polygon per band of at least two complete points, in its series' colour."""
    out = []
    for i, band in enumerate(bands):
        pts = sorted((x, lo, hi) for x, lo, hi in band if lo is not None and hi is not None)
        if len(pts) > 1:
            edge = [f"{px(x):.1f},{py(hi):.1f}" for x, _, hi in pts] + [
                f"{px(x):.1f},{py(lo):.1f}" for x, lo, _ in reversed(pts)
            ]
            out.append(
                f'<polygon points="{" ".join(edge)}" fill="{COLORS[i % len(COLORS)]}" fill-opacity="0.15" '
                'stroke="none"/>'
            )
    return out


def _x_ticks(xs: Sequence[float], x_tick_label: str, px) -> list[str]:
    """A tick and its label per x (at most 12, else evenly thinned)."""
    ph = H - TOP - BOTTOM
    out = []
    tick_xs = xs if len(xs) <= 12 else xs[:: math.ceil(len(xs) / 12)]
    for x in tick_xs:
        out.append(f'<line x1="{px(x):.1f}" y1="{TOP + ph}" x2="{px(x):.1f}" y2="{TOP + ph + 4}" stroke="#333"/>')
        label = x_tick_label.format(x=int(x) if float(x).is_integer() else _fmt(x))
        out.append(f'<text x="{px(x):.1f}" y="{TOP + ph + 16}" text-anchor="middle">{escape(label)}</text>')
    return out


def _markers(markers: Sequence[tuple[float, str]], px) -> list[str]:
    """A dashed vertical line and its label per marker."""
    ph = H - TOP - BOTTOM
    out = []
    for mx, mlabel in markers:
        out.append(
            f'<line x1="{px(mx):.1f}" y1="{TOP}" x2="{px(mx):.1f}" y2="{TOP + ph}" stroke="#999" '
            f'stroke-dasharray="3 3"/>'
        )
        out.append(f'<text x="{px(mx) + 3:.1f}" y="{TOP + 10}" fill="#555">{escape(mlabel)}</text>')
    return out


def _series(i: int, name: str, pts: Sequence[Point], x_tick_label: str, px, py) -> list[str]:
    """Series i: a polyline per run of points with a y (None breaks it), and a circle with its value per point."""
    c = COLORS[i % len(COLORS)]
    dash = f' stroke-dasharray="{DASHES[i % len(DASHES)]}"' if DASHES[i % len(DASHES)] else ""
    out: list[str] = []
    run: list[str] = []
    for x, y in sorted(pts, key=lambda p: p[0]) + [(None, None)]:
        if y is None:
            if len(run) > 1:
                out.append(f'<polyline points="{" ".join(run)}" fill="none" stroke="{c}" stroke-width="2"{dash}/>')
            run = []
            continue
        run.append(f"{px(x):.1f},{py(y):.1f}")
        out.append(
            f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3.5" fill="{c}"><title>{escape(name)}: '
            f"{escape(x_tick_label.format(x=x))} = {y:.4g}</title></circle>"
        )
    return out


def bar_chart(
    categories: Sequence[str],
    groups: Sequence[tuple[str, Sequence[float | None]]],
    y_label: str,
    title: str = "",
    x_label: str = "",
) -> str:
    """Grouped bars: for each category (x), one bar per group (legend), ``groups[g][1][c]`` its height; None draws
    no bar and writes "n/a". Returns the ``<svg>`` element; a ValueError if every value is None."""
    vals = [v for _, vs in groups for v in vs if v is not None]
    if not vals or not categories:
        raise ValueError("bar_chart: no data")
    y_lo, y_hi = _y_range(vals, include_zero=True)
    pw, ph, py = _plot_area(y_lo, y_hi)
    out = _frame(title, x_label, y_label, y_lo, y_hi)
    slot = pw / len(categories)
    bw = slot * 0.7 / max(len(groups), 1)
    for ci, cat in enumerate(categories):
        x0 = LEFT + ci * slot + slot * 0.15
        out.append(
            f'<text x="{LEFT + (ci + 0.5) * slot:.1f}" y="{TOP + ph + 16}" text-anchor="middle">{escape(cat)}</text>'
        )
        for gi, (gname, vs) in enumerate(groups):
            v = vs[ci]
            x = x0 + gi * bw
            if v is None:
                out.append(
                    f'<text x="{x + bw / 2:.1f}" y="{py(0) - 4:.1f}" text-anchor="middle" fill="#777">n/a</text>'
                )
                continue
            top, bottom = (py(v), py(0)) if v >= 0 else (py(0), py(v))
            out.append(
                f'<rect x="{x:.1f}" y="{top:.1f}" width="{bw * 0.92:.1f}" height="{max(bottom - top, 0.8):.1f}" '
                f'fill="{COLORS[gi % len(COLORS)]}"><title>{escape(cat)}, {escape(gname)}: {v:.4g}</title></rect>'
            )
            out.append(
                f'<text x="{x + bw * 0.46:.1f}" y="{top - 3:.1f}" text-anchor="middle" font-size="10">{_fmt(v)}</text>'
            )
    out += _legend([g for g, _ in groups], bars=True)
    out.append("</svg>")
    return "\n".join(out)


def interval_chart(
    categories: Sequence[str],
    points: Sequence[tuple[float | None, float | None, float | None]],
    y_label: str,
    title: str = "",
    x_label: str = "",
    reference: float | None = 0.0,
) -> str:
    """One point with its interval per category: ``points[c]`` = (value, low, high); a None value writes "n/a", a
    None interval draws the point alone. ``reference`` draws a dashed horizontal line (e.g. 0 for a difference).
    Returns the ``<svg>`` element; a ValueError if every value is None."""
    vals = [v for p in points for v in p if v is not None] + ([reference] if reference is not None else [])
    if not categories or all(p[0] is None for p in points):
        raise ValueError("interval_chart: no data")
    y_lo, y_hi = _y_range(vals, include_zero=False)
    pw, ph, py = _plot_area(y_lo, y_hi)
    out = _frame(title, x_label, y_label, y_lo, y_hi)
    if reference is not None:
        out.append(
            f'<line x1="{LEFT}" y1="{py(reference):.1f}" x2="{LEFT + pw}" y2="{py(reference):.1f}" '
            'stroke="#c2410c" stroke-dasharray="4 3"/>'
        )
    slot = pw / len(categories)
    for ci, (cat, (v, lo, hi)) in enumerate(zip(categories, points, strict=True)):
        x = LEFT + (ci + 0.5) * slot
        out.append(f'<text x="{x:.1f}" y="{TOP + ph + 16}" text-anchor="middle">{escape(cat)}</text>')
        if v is None:
            out.append(f'<text x="{x:.1f}" y="{TOP + ph / 2:.1f}" text-anchor="middle" fill="#777">n/a</text>')
            continue
        if lo is not None and hi is not None:
            out.append(
                f'<line x1="{x:.1f}" y1="{py(lo):.1f}" x2="{x:.1f}" y2="{py(hi):.1f}" stroke="{COLORS[0]}" '
                'stroke-width="2"/>'
            )
            for end in (lo, hi):
                out.append(
                    f'<line x1="{x - 6:.1f}" y1="{py(end):.1f}" x2="{x + 6:.1f}" y2="{py(end):.1f}" '
                    f'stroke="{COLORS[0]}" stroke-width="2"/>'
                )
        shown = f"{v:.4g}" + (f" [{lo:.4g}, {hi:.4g}]" if lo is not None and hi is not None else "")
        out.append(
            f'<circle cx="{x:.1f}" cy="{py(v):.1f}" r="4" fill="{COLORS[0]}"><title>{escape(cat)}: '
            f"{escape(shown)}</title></circle>"
        )
        out.append(f'<text x="{x + 8:.1f}" y="{py(v) - 4:.1f}" font-size="10">{_fmt(v)}</text>')
    out.append("</svg>")
    return "\n".join(out)
