"""A board's results as data: ``<benchmark>.csv`` and ``<benchmark>.json`` beside ``<benchmark>.md``
(``fusebench leaderboard --format md csv json``), one row per (comparability group, displayed
objective), from the same :class:`~fusebench.leaderboard.groups.GroupView` the markdown is rendered
from: every number is read from the view (:meth:`GroupView.summary`, ``ci``, ``tests``,
:meth:`GroupView.budget`, :meth:`GroupView.cost`), never computed a second way.

Numbers are plain values in the records' units (fractions as stored, never x100; seconds; MiB).
Every float is rounded to :data:`SIGNIFICANT` significant digits and written as Python's ``repr`` of
that float (the shortest text that reads back as it): the same text in both files, byte-identical on
every regeneration, and blind to differences in the last bits of a p-value or an interval between
library versions. Integers are written as integers; a missing value is an empty CSV cell or JSON
``null``. A CSV cell of text (never a number this module formats) that starts with ``=``, ``+``, ``-``,
``@``, a tab or a carriage return is prefixed with ``'`` so that a spreadsheet shows it as text and
never runs it as a formula (OWASP's CSV injection rule; e.g. a validity reason ``=HYPERLINK(...)``).
The columns and the JSON schema: docs/leaderboards.md, "Results as data (CSV / JSON)".
"""

from __future__ import annotations

import csv
import io
import json
import math
from typing import Any

from fusebench.leaderboard.columns import no_bidi
from fusebench.leaderboard.grouping import group_key
from fusebench.leaderboard.groups import RANK_RESAMPLES, GroupView
from fusebench.leaderboard.robustness import export_entries
from fusebench.leaderboard.table import solver_counts

FORMATS = ("md", "csv", "json", "html", "tex")  # what `fusebench leaderboard --format` writes (html: leaderboard.html;
# tex: <board>.tex; csv also writes <board>-seeds.csv: fusebench.leaderboard.outputs)
EXPORT_FORMAT = 1  # version of the JSON schema (its "format" field); bump when a field changes meaning
SIGNIFICANT = 12  # significant digits of every float in the CSV and JSON files


def check_formats(formats: Any) -> tuple[str, ...]:
    """``formats`` as a tuple of distinct names of :data:`FORMATS` (in the order given), or a ValueError."""
    if isinstance(formats, str) or not formats:
        raise ValueError(f"formats must be a non-empty list of {', '.join(FORMATS)}, got {formats!r}")
    out: list[str] = []
    for f in formats:
        if f not in FORMATS:
            raise ValueError(f"unknown leaderboard format {f!r}: choose from {', '.join(FORMATS)}")
        if f not in out:
            out.append(f)
    return tuple(out)


def number(x: float | int | None) -> float | int | None:
    """A value as exported: None stays None, an int stays an int, a float is rounded to
    :data:`SIGNIFICANT` significant digits (-0.0 written as 0.0). A non-finite value (a statistic beyond the float
    range: the std or a difference of finite values near the float limit; record values are finite or undefined)
    is None, as an undefined value is: strict JSON has no infinity."""
    if x is None or (isinstance(x, int) and not isinstance(x, bool)):
        return x
    x = float(x)
    if not math.isfinite(x):
        return None
    return float(f"{x + 0.0:.{SIGNIFICANT}g}") + 0.0


def _metric_entry(view: GroupView, row: str, metric: str) -> dict[str, Any]:
    summary = view.summary(row, metric)
    mean, std, n = summary if summary else (None, None, 0)
    return {"mean": number(mean), "std": number(std), "n": n, "undefined": view.undefined.get((row, metric), 0)}


def _row(view: GroupView, row: str, solver: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """One row of a group: the numbers the markdown row shows, unrounded (see the module docstring)."""
    ci = view.ci.get(row)
    test = view.tests.get(row)  # None for the reference row, invalid and untested rows, pipeline checks
    budget = view.budget(row)
    time_s, memory_mb = view.cost(row)
    missing = export_entries(view, row)  # only groups whose runs have missing-view metrics carry the key
    extra = {} if missing is None else {"missing_views": {
        mid: {"mean": number(m), "std": number(sd), "n": n} for mid, (m, sd, n) in missing.items()}}
    if view.reference_aliases.get(row):  # merged reference rows: the metrics that differ by design, per alias
        extra["alias_metrics"] = {a: {m: _metric_entry(view, a, m) for m in ms}
                                  for a, ms in view.reference_aliases[row].items()}
    rank = view.ranks.get(row)
    vs = view.vs_best.get(row)
    return {
        **extra,
        "objective": row,
        "aliases": list(view.aliases.get(row, [])),
        "invalid": view.invalid.get(row),
        "metrics": {m.id: _metric_entry(view, row, m.id) for m in view.metrics},
        "ci": [number(ci[0]), number(ci[1])] if ci else None,
        "delta": number(test["mean_diff"]) if test else None,
        "p_holm": number(test["p_holm"]) if test else None,
        "rank": rank["rank"] if rank else None,
        "rank_interval": [rank["low"], rank["high"]] if rank and rank["low"] is not None else None,
        "delta_best": number(vs["mean_diff"]) if vs else None,  # None on the best row itself (the group's "best")
        "p_best_holm": number(vs["p_holm"]) if vs else None,
        "tied_with_best": vs["tied"] if vs else None,
        "budget": {"steps": list(budget["optimizer_steps"]), "samples_seen": list(budget["samples_seen"])}
        if budget else None,
        "cost": {"pretrain_time_s": number(time_s), "peak_memory_mb": number(memory_mb)},
        # an iterative solver's pretraining calls that stopped at max_iter (None: no solver, or not counted)
        "solver": _solver_entry(solver.get(row)),  # solver_counts(view), computed once per group
    }


def _solver_entry(counts: dict[str, Any] | None) -> dict[str, Any] | None:
    if counts is None:
        return None
    return {**counts, "worst_marginal_error": number(counts["worst_marginal_error"])}


def group_data(view: GroupView) -> dict[str, Any]:
    """One comparability group as the JSON file holds it."""
    first = view.recs[0]
    solver = solver_counts(view)  # once per group, not once per row
    return {
        "key": group_key(view.recs),
        "kind": view.kind,
        "dataset": first.dataset.id,
        "synthetic": first.dataset.synthetic,
        "seeds": view.seeds,
        "primary": view.primary or None,
        "reference": view.reference,
        "best": view.best.get(view.primary) if view.ranks else None,
        "best_separable": view.separable.get(view.primary) if view.ranks else None,
        "rank_resamples": RANK_RESAMPLES if view.ranks else None,
        # what the index decides by (fusebench.leaderboard.index): the protocol, the data's family, the base board
        "protocol": view.protocol,
        "family": view.family or None,
        "variant_of": view.variant_of or None,
        "metrics": [{"id": m.id, "unit": m.unit, "direction": m.direction} for m in view.metrics],
        "rows": [_row(view, o, solver) for o in view.rows],
    }


def board_data(name: str, views: list[GroupView]) -> dict[str, Any]:
    """The JSON document of one benchmark's board."""
    return {"format": EXPORT_FORMAT, "benchmark": name, "groups": [group_data(v) for v in views]}


def render_json(data: dict[str, Any]) -> str:
    """``<benchmark>.json``: ``data`` (:func:`board_data`) with sorted keys, indent 1, ASCII, a final newline."""
    return json.dumps(data, indent=1, sort_keys=True, ensure_ascii=True, allow_nan=False) + "\n"


def csv_columns(groups: list[dict[str, Any]]) -> list[str]:
    """The CSV header of a board's ``groups`` (:func:`group_data`): the fixed columns, three per metric
    (every metric of every group, in the order of first appearance), then the statistics, budget and
    cost columns, then those of the missing-view metrics."""
    metrics: list[str] = []
    for g in groups:
        metrics += [m["id"] for m in g["metrics"] if m["id"] not in metrics]
    head = ["benchmark", "key", "kind", "dataset", "synthetic", "primary", "reference", "objective", "aliases",
            "invalid"]
    per_metric = [f"{m}_{s}" for m in metrics for s in ("mean", "std", "n")]
    tail = ["ci_low", "ci_high", "delta", "p_holm", "rank", "rank_low", "rank_high", "delta_best", "p_best_holm",
            "tied_with_best", "steps_min", "steps_max", "samples_seen_min",
            "samples_seen_max", "pretrain_time_s", "peak_memory_mb"]
    missing: list[str] = []  # missing-view metrics (issue #23), last: only boards whose runs have them
    for g in groups:
        for row in g["rows"]:
            missing += [m for m in row.get("missing_views", {}) if m not in missing]
    return head + per_metric + tail + [f"{m}_{s}" for m in missing for s in ("mean", "std", "n")]


#: how a CSV text cell may not start (a spreadsheet formula or a DDE payload): OWASP's CSV injection list
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _cell(x: Any) -> str:
    """A CSV cell: "" for None, true / false, integers as such, floats as the repr of :func:`number`;
    text with its bidirectional-text controls as visible escapes (:func:`~fusebench.leaderboard.columns.no_bidi`),
    prefixed with ``'`` when it starts with one of :data:`FORMULA_START`."""
    if x is None:
        return ""
    if isinstance(x, bool):
        return "true" if x else "false"
    if isinstance(x, int):
        return str(x)
    if isinstance(x, float):
        return repr(number(x))
    text = no_bidi(x)
    return "'" + text if text.startswith(FORMULA_START) else text


def render_csv(data: dict[str, Any]) -> str:
    """``<benchmark>.csv`` of ``data`` (:func:`board_data`): a header line, then one line per (group,
    displayed objective); ``\\n`` line ends, cells quoted only where they need it (``csv.QUOTE_MINIMAL``)."""
    columns = csv_columns(data["groups"])
    buf = io.StringIO()
    out = csv.writer(buf, lineterminator="\n")
    out.writerow(columns)
    for group in data["groups"]:
        for row in group["rows"]:
            cells: dict[str, Any] = {
                "benchmark": data["benchmark"], "key": group["key"], "kind": group["kind"], "dataset": group["dataset"],
                "synthetic": group["synthetic"], "primary": group["primary"], "reference": group["reference"],
                "objective": row["objective"], "aliases": ";".join(row["aliases"]), "invalid": row["invalid"],
                "delta": row["delta"], "p_holm": row["p_holm"], "rank": row["rank"], "delta_best": row["delta_best"],
                "p_best_holm": row["p_best_holm"], "tied_with_best": row["tied_with_best"],
                "pretrain_time_s": row["cost"]["pretrain_time_s"], "peak_memory_mb": row["cost"]["peak_memory_mb"]}
            for metric, entry in [*row["metrics"].items(), *row.get("missing_views", {}).items()]:
                cells.update({f"{metric}_{s}": entry[s] for s in ("mean", "std", "n")})
            if row["ci"]:
                cells["ci_low"], cells["ci_high"] = row["ci"]
            if row["rank_interval"]:
                cells["rank_low"], cells["rank_high"] = row["rank_interval"]
            if row["budget"]:
                cells["steps_min"], cells["steps_max"] = row["budget"]["steps"]
                cells["samples_seen_min"], cells["samples_seen_max"] = row["budget"]["samples_seen"]
            out.writerow([_cell(cells.get(c)) for c in columns])
    return buf.getvalue()


#: per format, its text from :func:`board_data` (computed once per board for both files)
RENDERERS = {"csv": render_csv, "json": render_json}
