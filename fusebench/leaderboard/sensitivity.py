"""The hyper-parameter sensitivity section of a ranked board (issue #30): for every objective whose runs were
tuned on the validation split, the validation score of every grid point (the mean over the selection seeds),
the chosen point marked, as tables (:func:`section_lines`) and a plot (:func:`plot_sensitivity`,
``<benchmark>-sensitivity.png``).

Read from the records' ``hparam_selection`` (the frozen selection of :mod:`fusebench.sweep.selection`,
copied into every record of the objective): ``grid`` ({key: values}), ``scores`` (one entry per grid point:
``hparams``, ``val`` = the mean over the selection seeds, ``val_by_seed``, and for an objective with an iterative
solver ``solver``, the trials' tally: a line under the table names the points whose solves did not converge),
``choice``, ``metric`` (the
metric id; records written before issue #30 hold a text such as ``"validation acc (mean over 3 selection
seeds)"``, whose metric id is read from it) and ``at_edge`` (absent in older records: computed here by the
same rule, :func:`fusebench.grids.at_edge`). A score that is null or NaN is undefined, as a metric value is
(:func:`fusebench.records.validate_record` accepts both): left out of the mean over seeds, and a grid point
with no defined score is shown ``— (undefined)``. Only validation scores are read: a selection run's test
score is never shown, even where a record carries one."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fusebench.grids import at_edge
from fusebench.io import canonical_json, sha256_hex
from fusebench.leaderboard.columns import fmt_value, md_code, md_text, shown_bound
from fusebench.leaderboard.groups import GroupView, oldest_first
from fusebench.records.schema import selection_metric_id  # the id in a record's hparam_selection.metric

SENSITIVITY_PLOT_VERSION = 1  # bump when the plot is drawn differently
UNDEFINED = "— (undefined)"  # a grid point without a defined validation score


@dataclass
class Selection:
    """One objective's frozen selection as the board shows it."""

    objective: str
    metric: str | None  # the metric id (None: not recorded in a form the board reads)
    grid: dict[str, list[Any]]
    # (hparams, mean validation score or None when undefined, number of seeds with a defined score), grid order
    points: list[tuple[dict[str, Any], float | None, int]]
    choice: dict[str, Any]
    edge: list[str]  # grid keys whose chosen value is on an edge of the grid
    variants: int = 1  # distinct selections among the objective's runs (1: all runs carry the same)
    # per point (grid order), its trials' solver tally ({calls, not_converged, worst_marginal_error}) or None
    solver: list[dict[str, Any] | None] | None = None


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _parse(sel: dict[str, Any], objective: str) -> Selection | None:
    """A record's ``hparam_selection`` (typed by :func:`fusebench.records.validate_record`) as a
    :class:`Selection` (None when it holds no scores). A grid point's score is its recorded ``val`` when that is
    a finite number, else the mean of its defined ``val_by_seed`` entries (null / NaN ones left out), else
    undefined (None)."""
    from fusebench.leaderboard.stats import safe_mean  # a sum past the float range is scaled, never an error

    scores = sel.get("scores") or []
    if not scores or not isinstance(sel.get("grid"), dict) or not isinstance(sel.get("choice"), dict):
        return None
    points = []
    for e in scores:
        by_seed = e.get("val_by_seed") or {}
        defined = [float(v) for v in by_seed.values() if _finite(v)]
        val = e.get("val")
        if _finite(val):
            n = len(defined) if by_seed else max(1, len(sel.get("seeds") or []))
            points.append((dict(e["hparams"]), float(val), n))
        else:  # null or NaN: undefined, left out like an undefined metric value
            points.append((dict(e["hparams"]), safe_mean(defined) if defined else None, len(defined)))
    grid = {str(k): list(v) if isinstance(v, list) else [v] for k, v in sel["grid"].items()}
    edge = sel.get("at_edge")
    edge = sorted(map(str, edge)) if isinstance(edge, list) else at_edge(grid, sel["choice"])
    solver = [e.get("solver") if isinstance(e.get("solver"), dict) else None for e in scores]
    return Selection(objective, selection_metric_id(sel.get("metric")), grid, points, dict(sel["choice"]), edge,
                     solver=solver)


def selections(view: GroupView) -> list[Selection]:
    """Per objective of the group (merged aliases included, sorted) whose runs carry a selection: the newest
    run's, with the number of distinct selections among its runs."""
    out = []
    for o in view.objectives:
        recs = [r for r in oldest_first(view.recs) if r.objective == o and isinstance(r.raw.get("hparam_selection"), dict)]
        if not recs:
            continue
        sel = _parse(recs[-1].raw["hparam_selection"], o)
        if sel is None:
            continue
        sel.variants = len({canonical_json(r.raw["hparam_selection"], compact=True, default=None) for r in recs})
        out.append(sel)
    return out


def _grid_key(sel: Selection) -> str:
    return canonical_json({"metric": sel.metric, "grid": sel.grid}, compact=True, default=None)


def tables(view: GroupView) -> list[tuple[str | None, dict[str, list[Any]], list[Selection]]]:
    """The selections grouped by (metric, grid), in order of first appearance: one table (and panel) each."""
    groups: dict[str, tuple[str | None, dict[str, list[Any]], list[Selection]]] = {}
    for sel in selections(view):
        groups.setdefault(_grid_key(sel), (sel.metric, sel.grid, []))[2].append(sel)
    return list(groups.values())


def unit_of(view: GroupView, metric: str | None) -> str:
    """The unit of ``metric`` on the board of ``view``: its column's, else the metric catalog's
    (:func:`fusebench.metrics.metadata`; a selection metric need not be a column), else ``raw``."""
    if metric is None:
        return "raw"
    if any(m.id == metric for m in view.metrics):
        return view.info(metric).unit
    from fusebench import metrics as M
    from fusebench.registry import UnknownNameError

    try:
        return M.metadata(metric)["unit"]
    except (UnknownNameError, KeyError):
        return "raw"


def _point_label(grid: dict[str, list[Any]], hparams: dict[str, Any]) -> str:
    return ", ".join(md_text(hparams.get(k)) for k in grid)


def _same(a: Any, b: Any) -> bool:
    return canonical_json(a, compact=True, default=None) == canonical_json(b, compact=True, default=None)


def section_lines(view: GroupView, plot_name: str | None, level: int = 2) -> list[str]:
    """The board's sensitivity section ([] for a pipeline check or a group without a tuned objective)."""
    if not view.ranked:
        return []
    found = tables(view)
    if not found:
        return []
    h = "#" * level
    out = ["", f"{h} Hyper-parameter sensitivity", "",
           "Validation score of every grid point of each tuned row (an objective's hyper-parameters; `raw_pca`'s "
           "number of components, `width`): the mean over its selection seeds (runs "
           "on their own train / val splits, never an evaluation seed), read from the runs' `hparam_selection`; "
           "**bold ✓** marks the chosen point (the best mean; ties: the first in grid order). Only validation "
           "scores are shown: no test score of a selection run is read. Metrics marked (%) are fractions shown x100."]
    any_edge = undefined = False
    for metric, grid, sels in found:
        edges = []
        unit = unit_of(view, metric)
        points = [p[0] for p in sels[0].points]
        seeds = sorted({n for s in sels for _, _, n in s.points if n})
        what = md_code(metric) if metric else "the selection metric (not recorded)"
        counts = "/".join(map(str, seeds)) or "0"
        out += ["", f"Grid {' × '.join(md_code(k) for k in grid)}; validation {what}"
                    f"{' (%)' if unit == 'fraction' else ''}, mean over {counts} selection seed(s):", ""]
        head = ["objective"] + [_point_label(grid, p) for p in points]
        out += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for sel in sels:
            cells = []
            for p in points:
                hit = next(((v,) for hp, v, _ in sel.points if _same(hp, p)), None)
                if hit is None:  # not a point of this objective's grid
                    cells.append("—")
                    continue
                undefined = undefined or hit[0] is None
                text = UNDEFINED if hit[0] is None else fmt_value(unit, hit[0])
                cells.append(f"**{text} ✓**" if _same({k: p.get(k) for k in sel.choice}, sel.choice) else text)
            label = f"`{sel.objective}`" + (f" ({sel.variants} different selections in its runs; the newest shown)"
                                            if sel.variants > 1 else "")
            out.append("| " + " | ".join([label] + cells) + " |")
            for k in sel.edge:
                values = [v for v in grid.get(k, []) if _finite(v)]
                side = "smallest" if values and sel.choice.get(k) == min(values) else "largest"
                edges.append(f"`{sel.objective}` ({md_text(k)} = {md_text(sel.choice.get(k))}, {side})")
        if edges:
            any_edge = True
            out += ["", f"Chosen on an edge of this grid (the optimum may lie outside it): {', '.join(edges)}."]
        line = _solver_line(grid, sels)
        if line:
            out += ["", line]
    if not any_edge:
        out += ["", "Every chosen point lies inside its grid."]
    if undefined:
        out += ["", f"{UNDEFINED}: no selection seed gave the grid point a defined validation score (null or NaN in "
                    "the record); undefined seeds are left out of every mean shown."]
    if plot_name:
        out += ["", f"![hyper-parameter sensitivity]({plot_name})"]
    return out


def _solver_line(grid: dict[str, list[Any]], sels: list[Selection]) -> str | None:
    """The note under a grid table whose objectives' trials counted their solver's calls (the ``solver`` entry of a
    score): per objective, the grid points whose trials had Sinkhorn solves stop at ``max_iter``, with the counts
    summed over the point's trials and the largest marginal error, the chosen point named; None when no trial of
    the table counted."""
    parts, flagged = [], False
    for sel in sels:
        counted = [(hp, t) for (hp, _, _), t in zip(sel.points, sel.solver or []) if t is not None]
        if not counted:
            continue
        bad = [(hp, t) for hp, t in counted if t["not_converged"]]
        flagged = flagged or bool(bad)
        if bad:
            text = "; ".join(
                f"{', '.join(f'{md_text(k)} = {md_text(hp.get(k))}' for k in grid)}: {t['not_converged']:,} of "
                f"{t['calls']:,} calls (largest marginal error {shown_bound(t['worst_marginal_error'], up=True)})"
                + (", the chosen point" if _same({k: hp.get(k) for k in sel.choice}, sel.choice) else "")
                for hp, t in bad)
            if len(bad) < len(counted):
                text += f"; every call of its other {len(counted) - len(bad)} grid point(s) converged"
        else:
            text = f"every one of {sum(t['calls'] for _, t in counted):,} calls converged"
        if len(counted) < len(sel.points):
            text += f" (the trials of {len(sel.points) - len(counted)} grid point(s) did not count them)"
        parts.append(f"{md_code(sel.objective)} {text}")
    if not parts:
        return None
    return ("**Selection trials' solver did not converge**" if flagged else "Selection trials' solver convergence") + (
        " (their pretraining loss calls whose Sinkhorn solve stopped at `max_iter` before its marginal error fell "
        "below the tolerance `tol`, summed over each grid point's selection seeds; such a point is scored, not "
        "refused): " + "; ".join(parts) + ".")


def has_plot(view: GroupView) -> bool:
    """Whether the group's board has a sensitivity plot (a ranked group with a tuned objective)."""
    return view.ranked and bool(tables(view))


def plot_sensitivity(view: GroupView, path: Path) -> bool:
    """One panel per table of :func:`section_lines`: each objective's mean validation score against the grid
    points (in grid order), the chosen point a star. Deterministic; the PNG carries a hash of its inputs and
    is left untouched when that hash is unchanged (like the curves plot); written atomically. Returns False
    (writing nothing) when there is nothing to plot."""
    from fusebench.leaderboard.plots import PLOT_KEY, drawable, png_text, save_png, tight_layout_once

    found = tables(view) if view.ranked else []
    if not found:
        return False
    data = [{"metric": metric, "unit": unit_of(view, metric), "grid": grid,
             "rows": [{"objective": s.objective, "points": [[hp, v] for hp, v, _ in s.points], "choice": s.choice}
                      for s in sels]} for metric, grid, sels in found]
    key = sha256_hex(canonical_json({"v": SENSITIVITY_PLOT_VERSION, "name": view.name, "panels": data},
                                    compact=False, default=None))
    if png_text(path).get(PLOT_KEY) == key:
        return True
    from matplotlib.figure import Figure

    cols = min(2, len(data))
    rows = -(-len(data) // cols)
    fig = Figure(figsize=(5.2 * cols, 3.2 * rows), dpi=90)
    for i, panel in enumerate(data):
        ax = fig.add_subplot(rows, cols, i + 1)
        scale = 100.0 if panel["unit"] == "fraction" else 1.0
        labels = [", ".join(str(hp.get(k)) for k in panel["grid"]) for hp, _ in panel["rows"][0]["points"]]
        for j, row in enumerate(panel["rows"]):
            xs = list(range(len(row["points"])))
            # undefined, or beyond what an axis can lay out (plots.drawable): a gap
            ys = [scale * v if v is not None and drawable(scale * v) else math.nan for _, v in row["points"]]
            ax.plot(xs, ys, color=f"C{j % 10}", linewidth=1.0, marker="o", markersize=3, label=row["objective"])
            for x, (hp, v), y in zip(xs, row["points"], ys):
                if drawable(y) and all(_same(hp.get(k), c) for k, c in row["choice"].items()):
                    ax.plot([x], [y], color=f"C{j % 10}", marker="*", markersize=11, linestyle="none")
        ax.set_xticks(range(len(labels)))
        # the grid's names and values are the records' text, shown as it is: never parsed as mathtext (a "$" pair in
        # one would be, and a bad one stopped the regeneration with a traceback after the files written before it)
        ax.set_xticklabels(labels, fontsize=6, rotation=30 if len(labels) > 4 else 0, parse_math=False)
        ax.set_xlabel(" x ".join(panel["grid"]), fontsize=7, parse_math=False)
        ax.set_ylabel(f"validation {panel['metric'] or '?'}{' (%)' if panel['unit'] == 'fraction' else ''}",
                      fontsize=7)
        ax.tick_params(labelsize=6)
        ax.legend(fontsize=5, ncol=2, loc="best")
    fig.suptitle(f"{view.name}: validation score per grid point (mean over selection seeds); star = chosen",
                 fontsize=9)
    tight_layout_once(fig)
    save_png(path, fig, {PLOT_KEY: key})
    return True
