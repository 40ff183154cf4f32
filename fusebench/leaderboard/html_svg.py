"""The inline SVG of the HTML pages (:mod:`fusebench.leaderboard.html`), drawn without matplotlib: a
cell's seed values as a strip plot (:func:`strip_svg`), a row's rank interval (:func:`rank_bar_svg`), the
training curves (:func:`curves_svg`) and the index's critical-difference diagram (:func:`cd_svg`).
Colours by SVG attributes or the page's style sheet (the CSP allows no style attribute); coordinates with
one decimal, so the same inputs give the same bytes."""

from __future__ import annotations

import math
from typing import Any

from fusebench.leaderboard.columns import fmt_value, html_escape as escape  # html.escape, bidi controls escaped
from fusebench.leaderboard.groups import GroupView
from fusebench.leaderboard.html_assets import PALETTE

CURVE_POINTS = 200  # at most this many points per drawn curve (every k-th step)


STRIP_W, STRIP_H = 120, 16


def svg_num(x: float) -> str:
    """An SVG coordinate: one decimal, no ``-0.0``."""
    s = f"{x:.1f}"
    s = s[:-2] if s.endswith(".0") else s
    return "0" if s == "-0" else s


def strip_svg(view: GroupView, row: str, metric: Any, lo: float, hi: float) -> str:
    """The seed values of one cell as dots on the column's common scale, the mean as a tick, the interval
    (primary metric: its bootstrap CI; else mean ± std) as a line."""
    vals = view.values.get((row, metric.id)) or {}
    if not vals:
        return ""
    span = hi - lo if hi > lo else 1.0

    def x(v: float) -> str:
        return svg_num(4 + (STRIP_W - 8) * (v - lo) / span)

    summary = view.summary(row, metric.id)
    mean, std = summary[0], summary[1]  # type: ignore[index]
    ci = view.ci.get(row) if metric.id == view.primary else None
    a, b = ci if ci else (mean - std, mean + std)
    dots = "".join(f"M{x(v)} {4 + 8 * (k % 2)}h0" for k, (_, v) in enumerate(sorted(vals.items())))
    title = ", ".join(f"seed {s}: {fmt_value(metric.unit, v)}" for s, v in sorted(vals.items()))
    return (f'<svg class="strip" width="{STRIP_W}" height="{STRIP_H}" viewBox="0 0 {STRIP_W} {STRIP_H}" role="img">'
            f"<title>{escape(title)}</title><path class=\"ci\" d=\"M{x(a)} 8H{x(b)}\"/>"
            f'<path class="mean" d="M{x(mean)} 1V15"/><path class="dots" d="{dots}"/></svg>')


def rank_bar_svg(view: GroupView, row: str) -> str:
    r = view.ranks.get(row)
    n = len(view.valid_rows)
    if not r or r.get("low") is None or n < 2:
        return ""

    def x(k: float) -> str:
        return svg_num(4 + (STRIP_W - 8) * (k - 1) / (n - 1))

    return (f'<svg class="strip" width="{STRIP_W}" height="{STRIP_H}" viewBox="0 0 {STRIP_W} {STRIP_H}" role="img">'
            f"<title>rank {r['rank']}, 95% interval {r['low']}-{r['high']} of {n}</title>"
            f'<path class="axis" d="M4 8H{STRIP_W - 4}" stroke="#ccc"/><rect class="rk" x="{x(r["low"])}" y="4" '
            f'width="{svg_num(max(2.0, float(x(r["high"])) - float(x(r["low"]))))}" height="8"/>'
            f'<path class="mean" d="M{x(r["rank"])} 1V15"/></svg>')


def mean_curve(curves: list[list[float]]) -> list[tuple[int, float]]:
    """(step, mean of the finite values over seeds) per step up to the shortest curve (every k-th step past
    :data:`CURVE_POINTS`); steps where no value is finite are left out."""
    n = min(len(c) for c in curves)
    out = []
    for k in range(0, n, max(1, math.ceil(n / CURVE_POINTS))):  # ceil: never more than CURVE_POINTS
        vals = [c[k] for c in curves if math.isfinite(c[k])]
        if vals:
            m = sum(vals) / len(vals)
            out.append((k, m if math.isfinite(m) else sum(v / len(vals) for v in vals)))  # huge values: no inf
    return out


def line_chart(title: str, series: list[tuple[str, list[tuple[float, float]]]], x_text: str | None = None) -> str:
    """A line chart (inline SVG) of ``(label, [(x, y), ...])`` series (x from its smallest to its largest value;
    ``x_text`` under the axis, default ``step <largest x + 1>``), Okabe-Ito colours, dashes past 8 series."""
    pts = [v for _, s in series for _, v in s]
    if not pts:
        return ""
    w, left, right, top, bottom = 720, 56, 190, 22, 28
    h = max(260, top + 14 * len(series) + 12)  # room for the legend
    lo, hi = min(pts) / 2, max(pts) / 2  # halved: hi - lo stays finite for any finite values
    span = hi - lo if hi > lo else 1.0
    x0 = min(x for _, s in series for x, _ in s)
    x1 = max(x for _, s in series for x, _ in s)
    xspan = x1 - x0 if x1 > x0 else 1.0
    x_text = x_text if x_text is not None else f"step {x1 + 1:g}"
    parts = [f'<svg class="chart" width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img"><title>{escape(title)}'
             f'</title><text x="{left}" y="14">{escape(title)}</text>'
             f'<path class="axis" d="M{left} {top}V{h - bottom}H{w - right}"/>'
             f'<text x="4" y="{top + 8}">{escape(f"{2 * hi:.4g}")}</text><text x="4" y="{h - bottom}">'
             f'{escape(f"{2 * lo:.4g}")}</text><text x="{w - right}" y="{h - 8}" text-anchor="end">{escape(x_text)}</text>']
    for k, (label, s) in enumerate(series):
        xy = [(left + (w - left - right) * ((i - x0) / xspan), top + (h - top - bottom) * ((hi - v / 2) / span))
              for i, v in s]
        color = PALETTE[k % len(PALETTE)]
        dash = f' stroke-dasharray="{3 + 2 * (k // len(PALETTE))} 3"' if k >= len(PALETTE) else ""
        parts.append(f'<polyline stroke="{color}"{dash} points="' + " ".join(f"{svg_num(a)},{svg_num(b)}" for a, b in xy) + '"/>')
        y = top + 14 * k
        parts.append(f'<path d="M{w - right + 10} {y + 4}h18" stroke="{color}" stroke-width="2"{dash}/>'
                     f'<text x="{w - right + 32}" y="{y + 8}">{escape(label)}</text>')
    return "".join(parts) + "</svg>"


def curves_svg(view: GroupView) -> str:
    """The group's training curves (those of the PNG, :func:`fusebench.leaderboard.plots.plot_curves`): the
    mean pretraining loss (``pretrain_loss``, or per view count ``loss_M<k>``) and the mean validation
    primary metric per row."""
    loss: dict[str, list[list[float]]] = {}
    val: dict[str, list[list[float]]] = {}
    vkey = f"val_{view.primary}" if view.primary else ""
    for r in view.recs:
        for key in sorted(r.curves):
            if (key == "pretrain_loss" or key.startswith("loss_M")) and r.curves[key]:
                label = r.objective if key == "pretrain_loss" else f"{r.objective} {key}"
                loss.setdefault(label, []).append(r.curves[key])
        if vkey and r.curves.get(vkey):
            val.setdefault(r.objective, []).append(r.curves[vkey])
    charts = [line_chart("pretraining loss (mean over seeds)", [(o, mean_curve(c)) for o, c in sorted(loss.items())]),
              line_chart(f"validation {view.primary} (mean over seeds)",
                     [(o, mean_curve(c)) for o, c in sorted(val.items())])]
    return "\n".join(c for c in charts if c)


def cd_svg(ranking: dict[str, Any]) -> str:
    """The critical-difference diagram of the index's ranking as inline SVG: the average ranks on an axis,
    the CD as a bar, objectives whose average ranks differ by less than CD joined by a line."""
    avg = ranking["avg"]
    methods = sorted(avg, key=lambda m: (avg[m], m))
    k = len(methods)
    w, left, right = 760, 40, 40
    h = 90 + 16 * k

    def x(r: float) -> float:
        return left + (w - left - right) * (r - 1) / max(1, k - 1)

    parts = [f'<svg class="cd" width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img"><title>critical '
             f'difference diagram</title><path class="axis" d="M{left} 40H{w - right}"/>']
    for r in range(1, k + 1):
        parts.append(f'<path class="axis" d="M{svg_num(x(r))} 36V44"/><text x="{svg_num(x(r) - 3)}" y="32">{r}</text>')
    cd = float(ranking["cd"])
    parts.append(f'<path d="M{left} 12H{svg_num(x(1 + cd))}" stroke="#D55E00" stroke-width="2"/>'
                 f'<text x="{svg_num(x(1 + cd) + 6)}" y="16">CD = {cd:.2f}</text>')
    cliques, y = [], 50
    for i in range(k):
        j = max(j for j in range(i, k) if avg[methods[j]] - avg[methods[i]] < cd)
        if j > i and not any(a <= i and j <= b for a, b in cliques):
            cliques.append((i, j))
    for a, b in cliques:
        parts.append(f'<path d="M{svg_num(x(avg[methods[a]]) - 3)} {y}H{svg_num(x(avg[methods[b]]) + 3)}" stroke="#000" '
                     f'stroke-width="3"/>')
        y += 6
    for n, m in enumerate(methods):
        ty = y + 14 + 16 * n
        parts.append(f'<path class="axis" d="M{svg_num(x(avg[m]))} 40V{ty - 4}"/>'
                     f'<text x="{svg_num(x(avg[m]) + 4)}" y="{ty}">{escape(m)} ({avg[m]:.2f})</text>')
    return "".join(parts) + "</svg>"


def missing_svg(view: GroupView) -> str:
    """The missing-view robustness of the group (:mod:`fusebench.leaderboard.robustness`): per shown metric,
    each row's mean over seeds against the missing rate r."""
    from fusebench.leaderboard.robustness import robustness_of

    rb = robustness_of(view)
    if rb is None or not rb.rates or not rb.rows:
        return ""
    xs = [0.0, *rb.rates]
    charts = []
    for info in rb.shown:
        scale = 100.0 if info.unit == "fraction" else 1.0
        for rule in rb.rules:  # a chart per rule (how the rates count): r = 0, then that rule's rate columns
            cols = [("r = 0", info.id), *rb.rate_columns(info.id, rule)]
            series = []
            for o in rb.rows:
                pts = [(x, s[0] * scale) for x, (_, mid) in zip(xs, cols) if (s := rb.summary(o, mid))]
                series.append((o, pts))
            what = "missing rate r" if rule == "entry" else "instance-level missing rate r"
            charts.append(line_chart(f"test {info.id}{' (%)' if info.unit == 'fraction' else ''} vs {what} "
                                     f"(mean over seeds)", series, f"r = {', '.join(f'{x:g}' for x in xs)}"))
    return "\n".join(c for c in charts if c)


def sensitivity_svg(view: GroupView) -> str:
    """The hyper-parameter sensitivity of the group (:mod:`fusebench.leaderboard.sensitivity`): per table,
    each tuned row's mean validation score at each grid point (in grid order)."""
    from fusebench.leaderboard.sensitivity import tables, unit_of

    charts = []
    for metric, grid, sels in (tables(view) if view.ranked else []):
        unit = unit_of(view, metric)  # the catalog's unit where the selection metric is no column of the board
        scale = 100.0 if unit == "fraction" else 1.0
        series = [(s.objective, [(float(j), scale * v) for j, (_, v, _) in enumerate(s.points) if v is not None])
                  for s in sels]  # an undefined grid point is left out of its line
        labels = [", ".join(str(hp.get(k)) for k in grid) for hp, _, _ in sels[0].points] if sels else []
        charts.append(line_chart(f"validation {metric or '?'} per grid point of {' x '.join(grid)}", series,
                                 f"grid points: {'; '.join(labels)}"[:90]))
    return "\n".join(c for c in charts if c)
