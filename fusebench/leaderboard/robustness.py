"""The "Missing-view robustness" section of a board and its plot (issue #23), for the comparability groups
whose records carry the ``missing_views`` field (:mod:`fusebench.probes.missing_views`; a group without
it renders nothing here, so its board is unchanged).

:func:`robustness_of` gathers, per displayed row of the group (merged aliases as in the main table: the
displayed objective's runs), the values over seeds of every metric shown (the record field's
``shown``: the probe accuracy ``acc`` and the clustering accuracy ``cluster_acc`` of the
``embedding_eval`` protocol, the primary metric of a task head) at r = 0 (the record's own metric),
at each missing rate r under each rule the records scored (``miss<100 r>_<metric>``, the entry-level rate;
``inst<100 r>_<metric>``, the instance-level rate, columns ``inst. r``) and with each view alone
(``only_<view>_<metric>``).
:func:`section_lines` renders one table per shown metric (cells mean ± std (n) over seeds, sample std,
the best mean per column in bold on ranked boards when the second-best row is separable from it, as in
the main table); :func:`plot_missing` draws ``<board>-missing.png``:
the metric against r, one line per row, error bars ± 1 sample std over seeds, one panel per shown
metric and rule. The PNG is deterministic and carries a hash of its inputs (as :mod:`fusebench.leaderboard.plots`),
so an unchanged plot is never redrawn. :func:`export_entries` gives the same numbers to the CSV / JSON
export.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from fusebench.io import canonical_json, sha256_hex
from fusebench.leaderboard.columns import MetricInfo, fmt_cell, md_code, mean_std, metric_info
from fusebench.leaderboard.groups import GroupView
from fusebench.leaderboard.plots import PLOT_KEY, drawable, png_text, save_png, tight_layout_once
from fusebench.components.protocols import MISSING_RULES, PROTOCOLS, Protocol, rate_id, view_id

PLOT_VERSION = 1  # bump when plot_missing draws differently: every such plot is redrawn once
TITLE = "Missing-view robustness"


@dataclass
class Robustness:
    """What the section shows for one group."""

    rates: list[float]  # the missing rates, ascending (r = 0 not included)
    views: list[str]  # the views of the single-view columns (empty: none)
    shown: list[MetricInfo]  # one table / panel per metric
    rows: list[str]  # displayed rows with missing-view runs
    values: dict[tuple[str, str], dict[int, float]] = field(default_factory=dict)  # (row, id) -> seed -> value
    undefined: dict[tuple[str, str], int] = field(default_factory=dict)  # (row, id) -> runs whose value is NaN
    pretrain_rates: list[float] = field(default_factory=list)  # pretrain.missing_rate of the runs
    protocol: str = ""
    restarts: list[int] = field(default_factory=list)  # k-means restarts of the incomplete data's clusterings
    # how the rates count (the records' ``rules``, absent: ``entry``), in :data:`MISSING_RULES` order
    rules: list[str] = field(default_factory=lambda: ["entry"])

    def rate_columns(self, metric: str, rule: str) -> list[tuple[str, str]]:
        """(header, metric id) of ``metric`` at each rate under ``rule``: ``r = 0.1`` (``miss10_<metric>``, the
        entry-level rate), ``inst. r = 0.1`` (``inst10_<metric>``, the instance-level rate)."""
        label = "r" if rule == "entry" else "inst. r"
        return [(f"{label} = {r:g}", f"{rate_id(r, rule)}_{metric}") for r in self.rates]

    def columns(self, metric: str) -> list[tuple[str, str]]:
        """(header, metric id) of every column of ``metric``'s table: r = 0, the rates under each rule, the views
        alone."""
        out = [("r = 0", metric)]
        for rule in self.rules:
            out += self.rate_columns(metric, rule)
        out += [(f"{md_code(v)} alone", f"{view_id(v)}_{metric}") for v in self.views]
        return out

    def summary(self, row: str, mid: str) -> tuple[float, float, int] | None:
        v = self.values.get((row, mid))
        return (*mean_std(list(v.values())), len(v)) if v else None


def _field(r) -> dict | None:
    """The record's ``missing_views`` (None when absent); its types were checked by
    :func:`fusebench.records.validate_record`."""
    return r.raw.get("missing_views")


def robustness_of(view: GroupView) -> Robustness | None:
    """The section's numbers for ``view`` (None when no record of the group carries ``missing_views``)."""
    fields = {id(r): mv for r in view.recs if (mv := _field(r)) is not None}
    if not fields:
        return None
    recs = [r for r in view.recs if id(r) in fields]
    rates = sorted({float(x) for mv in fields.values() for x in mv.get("rates", [])})
    views: list[str] = []
    shown: list[str] = []
    for mv in fields.values():
        views += [str(v) for v in mv.get("views", []) if mv.get("single_view") and str(v) not in views]
        shown += [str(m) for m in mv.get("shown", []) if str(m) not in shown]
    rows = [o for o in view.rows if any(r.objective == o for r in recs)]
    used = {str(rule) for mv in fields.values() for rule in (mv.get("rules") or ["entry"])}
    out = Robustness(rates, views, [metric_info(m, recs) for m in shown], rows,
                     protocol=str(next(iter(fields.values())).get("protocol", "")),
                     rules=[rule for rule in MISSING_RULES if rule in used])
    wanted = [mid for m in shown for _, mid in out.columns(m)]
    for r in recs:
        mv = fields[id(r)]
        for mid in wanted:
            if mid not in (r.metrics if mid in shown else mv["metrics"]):
                continue
            v = r.metrics[mid] if mid in shown else mv["metrics"][mid]  # a number, or null / NaN: undefined
            if v is not None and math.isfinite(v):
                out.values.setdefault((r.objective, mid), {})[r.seed] = float(v)
            else:  # undefined for this run (e.g. a correlation of constant predictions), counted in the cell
                out.undefined[(r.objective, mid)] = out.undefined.get((r.objective, mid), 0) + 1
    out.pretrain_rates = sorted({float((r.config.get("pretrain") or {}).get("missing_rate", 0.0) or 0.0) for r in recs})
    out.restarts = sorted({int(mv["clustering"]["n_init"]) for mv in fields.values()
                           if isinstance(mv.get("clustering"), dict) and isinstance(mv["clustering"].get("n_init"), int)})
    return out


def _intro(rb: Robustness) -> str:
    if "entry" in rb.rules:
        text = ("At test time a seeded fraction r of the (sample, view) entries is absent (every sample keeps at "
                "least one view; one mask per seed and rate, the same for every row)")
        if "instance" in rb.rules:
            text += ("; in the `inst. r` columns a seeded fraction r of the samples is incomplete instead (the "
                     "instance-level rate of the incomplete multi-view papers: each incomplete sample keeps at least "
                     "one view and misses at least one, the other samples keep every view)")
    else:
        text = ("At test time a seeded fraction r of the samples is incomplete (`inst. r`, the instance-level rate of "
                "the incomplete multi-view papers: each incomplete sample keeps at least one view and misses at least "
                "one, the other samples keep every view; one mask per seed and rate, the same for every row)")
    text += "; the encoders see the presence mask. "
    # the protocol says how it scores the missing-view test (a protocol not installed here: the common text)
    protocol = PROTOCOLS.get(rb.protocol) if rb.protocol in PROTOCOLS else Protocol
    restarts = f"; {' / '.join(map(str, rb.restarts))} k-means++ restarts, lowest inertia kept" if rb.restarts else ""
    text += protocol.missing_views_text.replace("{restarts}", restarts)  # other braces are text
    text += ("r = 0: the table above (its own clustering settings); `v` alone: every other view absent. Cells are mean ± std (n) over seeds "
             "(sample std); metrics marked (%) are fractions shown x100.")
    pre = [r for r in rb.pretrain_rates if r > 0]
    text += (f" Pretraining saw missing views too (`pretrain.missing_rate` = {', '.join(f'{r:g}' for r in pre)})."
             if pre else " Pretraining saw complete views.")
    return text


def section_lines(view: GroupView, plot_name: str | None, level: int = 2) -> list[str]:
    """The section of ``view`` (empty when its records carry no missing-view metrics)."""
    rb = robustness_of(view)
    if rb is None:
        return []
    h = "#" * level
    out = ["", f"{h} {TITLE}", "", _intro(rb)]
    for info in rb.shown:
        cols = rb.columns(info.id)
        best = _best(view, rb, info, cols)
        out += ["", f"`{info.header}`:", ""]
        out.append("| objective | " + " | ".join(c for c, _ in cols) + " |")
        out.append("|" + "---|" * (len(cols) + 1))
        for o in rb.rows:
            cells = []
            for _, mid in cols:
                s, undefined = rb.summary(o, mid), rb.undefined.get((o, mid), 0)
                text = fmt_cell(info.unit, list(rb.values.get((o, mid), {}).values()), undefined) \
                    if s or undefined else "—"
                cells.append(f"**{text}**" if s and best.get(mid) == o else text)
            label = f"`{o}`" + (f" (≡ {', '.join(f'`{a}`' for a in view.aliases[o])})" if view.aliases.get(o) else "")
            out.append(f"| {label} | " + " | ".join(cells) + " |")
            for a, distinct in view.reference_aliases.get(o, {}).items():  # same features, other clustering
                if info.id in distinct:
                    cells = [fmt_cell(info.unit, list(rb.values.get((a, mid), {}).values()),
                                      rb.undefined.get((a, mid), 0)) if rb.summary(a, mid) or rb.undefined.get((a, mid))
                             else "—" for _, mid in cols]
                    out.append(f"| `{a}` (k-means of the merged row's other features) | " + " | ".join(cells) + " |")
    if plot_name:
        out += ["", f"![missing-view robustness]({plot_name})"]
    return out


def _best(view: GroupView, rb: Robustness, info: MetricInfo, cols: list[tuple[str, str]]) -> dict[str, str]:
    """The row in bold per column: the best mean of the valid rows of a ranked board, only when the second-best
    row is separable from it -- the main table's rule (:func:`fusebench.leaderboard.ties.settle_ties`: paired
    t-tests over shared seeds against the best row, Holm over the rows, separable at p_holm <= ``ALPHA``); no
    bold where every row ties or the best is not separable from the second."""
    from fusebench.leaderboard.ties import vs_best

    out: dict[str, str] = {}
    if not view.ranked or info.direction is None:
        return out
    sign = 1.0 if info.direction == "higher" else -1.0
    for _, mid in cols:
        means = {o: s[0] for o in rb.rows if o not in view.invalid and (s := rb.summary(o, mid))}
        if not means or len(set(means.values())) == 1:
            continue
        target = max(means.values()) if info.direction == "higher" else min(means.values())
        best = sorted(o for o in means if means[o] == target)[0]
        tests = vs_best({o: rb.values[(o, mid)] for o in means}, best)
        second = min(tests, key=lambda o: (-sign * means[o], o)) if tests else None
        if second is None or tests[second]["tied"] is False:
            out[mid] = best
    return out


def export_entries(view: GroupView, row: str) -> dict[str, tuple[float, float, int]] | None:
    """(mean, sample std, n) of every missing-view metric of ``row`` (the rates' and the views' columns;
    r = 0 is the row's own metric, exported with it); None for a group without them."""
    rb = robustness_of(view)
    if rb is None:
        return None
    out = {}
    for info in rb.shown:
        for _, mid in rb.columns(info.id)[1:]:
            s = rb.summary(row, mid)
            if s:
                out[mid] = s
    return out


def has_plot(view: GroupView) -> bool:
    """Whether the group has missing-view rates to plot."""
    rb = robustness_of(view)
    return rb is not None and bool(rb.rates) and bool(rb.rows)


def plot_missing(view: GroupView, path: Path) -> bool:
    """Per shown metric a panel: the mean over seeds against r (0 and every rate), one line per row, error
    bars ± 1 sample std. Returns False (writing nothing) when there is nothing to plot; leaves a file on
    disk whose inputs hash is the same untouched."""
    rb = robustness_of(view)
    if rb is None or not rb.rates or not rb.rows:
        return False
    xs = [0.0, *rb.rates]
    # one panel per shown metric and rule (how the rates count); an entry-rule panel keyed by the metric alone
    panels = [(info, rule, info.id if rule == "entry" else f"{info.id} ({rule})") for info in rb.shown
              for rule in rb.rules]
    series = {name: {o: [rb.summary(o, info.id)] + [rb.summary(o, mid) for _, mid in rb.rate_columns(info.id, rule)]
                     for o in rb.rows} for info, rule, name in panels}
    key = sha256_hex(canonical_json({"v": PLOT_VERSION, "name": view.name, "xs": xs,
                                     "units": [i.unit for i in rb.shown], "series": series}, compact=False))
    if png_text(path).get(PLOT_KEY) == key:
        return True
    from matplotlib.figure import Figure

    count = len(panels)
    fig = Figure(figsize=(4.6 * count + 1.8, 3.4), dpi=90)
    axes = fig.subplots(1, count, squeeze=False)[0]
    for ax, (info, rule, name) in zip(axes, panels):
        scale = 100.0 if info.unit == "fraction" else 1.0
        for i, o in enumerate(rb.rows):
            pts = [(x, s[0] * scale, s[1] * scale) for x, s in zip(xs, series[name][o])
                   if s is not None and drawable(s[0] * scale) and drawable(s[1] * scale)]  # else: no axis fits it
            if not pts:
                continue
            ax.errorbar([p[0] for p in pts], [p[1] for p in pts], yerr=[p[2] for p in pts], color=f"C{i % 10}",
                        linestyle=("-", "--", ":", "-.")[(i // 10) % 4], marker="o", markersize=3, linewidth=1.1,
                        capsize=2, label=o)
        ax.set_xticks(xs)
        ax.set_xticklabels([f"{x:g}" for x in xs], fontsize=7)
        ax.tick_params(labelsize=7)
        ax.set_xlabel("missing rate r (fraction of (sample, view) entries absent)" if rule == "entry" else
                      "instance-level missing rate r (fraction of samples incomplete)", fontsize=7)
        ax.set_ylabel(f"{info.id}{' (%)' if info.unit == 'fraction' else ''}", fontsize=8)
        ax.set_title(f"test {info.id} vs missing rate" + ("" if rule == "entry" else " (instance-level)"), fontsize=9)
        ax.grid(alpha=0.3, linewidth=0.5)
    right = 1.0 - 1.7 / (4.6 * count + 1.8)  # the legend's strip on the right
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(right, 0.5), fontsize=7, frameon=False)
    fig.suptitle(f"{view.name}: missing-view robustness; mean over seeds, error bars ± 1 std", fontsize=10)
    tight_layout_once(fig, rect=(0.0, 0.0, right, 1.0))
    save_png(path, fig, {PLOT_KEY: key})
    return True


__all__ = ["TITLE", "Robustness", "export_entries", "has_plot", "plot_missing", "robustness_of", "section_lines"]
