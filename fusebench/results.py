"""Per-seed results as data (issue #32, "results in pandas").

:func:`load` reads every ``run.json`` under a runs folder through the validated record reader
(:func:`fusebench.records.find_records`, :func:`fusebench.records.load_record`: an invalid record is a
:class:`~fusebench.records.RecordError` naming the file and field, never skipped) and returns one row per
record (one seed of one objective of one benchmark) as a ``pandas.DataFrame``::

    import fusebench.results
    df = fusebench.results.load("leaderboards/runs")
    df[df.benchmark == "quickstart"].groupby(["key", "objective"])["acc"].agg(["mean", "std", "count"])

Group by ``key`` (the comparability key) as above: one runs folder may hold runs of a benchmark that no board
puts in one table (synthetic and real data, another ``--set``, another data file), and grouping by
``objective`` alone would average them together.

Columns (:data:`FIXED` first, then one per metric, then :data:`TAIL`): ``benchmark``, ``objective``,
``seed``, ``key`` (the comparability key: rows of one board table share it), every metric of the records
(its id as the column name; a metric whose id is one of the fixed columns' names is ``metric_<id>``; a
metric undefined for a run, JSON ``null``, is NaN; a metric a record lacks is NaN), the pretraining budget
(``budget_steps``, ``budget_samples_seen``, ``budget_epochs``, ``budget_batch_size``: None / NaN for a record
without one, e.g. a reference row), the cost (``pretrain_time_s``, ``peak_memory_mb``, ``wall_time_s``),
``config_hash``, ``precision``, ``dataset``, ``synthetic`` and ``path`` (the record file). Rows are sorted
by benchmark, key, objective and seed. :func:`seed_rows` gives the same rows as plain dicts without
pandas; ``fusebench leaderboard --format csv`` writes them per board as ``<board>-seeds.csv``
(:func:`render_seeds_csv`, without ``path``).
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from fusebench.io import shown_path
from fusebench.records import RunRecord, duplicate_runs, find_records, load_record

FIXED = ("benchmark", "objective", "seed", "key")
TAIL = ("budget_steps", "budget_samples_seen", "budget_epochs", "budget_batch_size", "pretrain_time_s",
        "peak_memory_mb", "wall_time_s", "config_hash", "precision", "dataset", "synthetic", "path")
_BUDGET = {"budget_steps": "optimizer_steps", "budget_samples_seen": "samples_seen", "budget_epochs": "epochs",
           "budget_batch_size": "batch_size"}


def read_records(runs_dir: str | os.PathLike) -> list[RunRecord]:
    """Every record under ``runs_dir``, validated; a ValueError when it is not a folder (a TypeError when it is
    not a path)."""
    if not isinstance(runs_dir, (str, os.PathLike)):
        raise TypeError(f"runs_dir: expected the path of a runs folder (str or os.PathLike), got {runs_dir!r}")
    root = Path(runs_dir)
    if not root.is_dir():
        what = "is not a folder" if root.exists() else "does not exist"
        raise ValueError(f"runs folder {shown_path(root)} {what} (a folder of run.json files, e.g. "
                         "leaderboards/runs)")
    records = [load_record(p) for p in find_records(root)]
    twice = duplicate_runs(records)  # as the board: each (objective, seed) of one comparable group once
    if twice is not None:
        other, r = twice
        raise ValueError(f"duplicate runs of benchmark {r.benchmark!r}, objective {r.objective!r}, seed {r.seed}: "
                         f"{shown_path(other.path)} and {shown_path(r.path)} (a per-seed table counts each (objective, "
                         f"seed) once; remove one)")
    return records


def metric_column(metric: str) -> str:
    """A metric's column: its id, or ``metric_<id>`` when the id is the name of a fixed column."""
    return f"metric_{metric}" if metric in FIXED or metric in TAIL else metric


def columns(records: list[RunRecord]) -> list[str]:
    """:data:`FIXED`, the metric columns (each record's ``config.metrics`` order, then its other metrics sorted;
    first seen first), :data:`TAIL`."""
    metrics: dict[str, None] = {}
    for r in records:
        declared = [m for m in r.metric_order if m in r.metrics]
        for m in [*declared, *sorted(set(r.metrics) - set(declared))]:
            metrics.setdefault(metric_column(m), None)
    return [*FIXED, *metrics, *TAIL]


def _number(v: Any) -> Any:
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def seed_row(r: RunRecord) -> dict[str, Any]:
    """One record as a row (see the module docstring); a metric undefined for the run is NaN."""
    budget = r.raw.get("budget") if isinstance(r.raw.get("budget"), dict) else {}
    row: dict[str, Any] = {"benchmark": r.benchmark, "objective": r.objective, "seed": r.seed,
                           "key": r.comparability_key}
    row.update({metric_column(m): float(v) for m, v in r.metrics.items()})
    row.update({col: _number(budget.get(field)) for col, field in _BUDGET.items()})
    row.update({"pretrain_time_s": r.pretrain_time_s, "peak_memory_mb": r.peak_memory_mb,
                "wall_time_s": _number(r.raw.get("wall_time_s")), "config_hash": r.config_hash,
                "precision": r.precision, "dataset": r.dataset.id, "synthetic": r.dataset.synthetic, "path": r.path})
    return row


def _order(r: RunRecord) -> tuple:
    return r.benchmark, r.comparability_key, r.objective, r.seed, r.path


def seed_rows(records: list[RunRecord]) -> tuple[list[str], list[dict[str, Any]]]:
    """The columns and the rows (dicts; sorted by benchmark, key, objective, seed) of ``records``."""
    ordered = sorted(records, key=_order)
    return columns(ordered), [seed_row(r) for r in ordered]


def load(runs_dir: str | os.PathLike, benchmark: str | None = None):
    """The per-seed ``pandas.DataFrame`` of the records under ``runs_dir`` (of ``benchmark`` alone when given;
    columns in the module docstring). Needs pandas (``pip install pandas``)."""
    try:
        import pandas as pd
    except ImportError:
        raise ImportError("fusebench.results.load needs pandas: pip install pandas (or pip install -e .[results])") \
            from None
    if benchmark is not None and not isinstance(benchmark, str):
        raise TypeError(f"benchmark: expected a benchmark id (str) or None, got {benchmark!r}")
    records = read_records(runs_dir)
    if benchmark is not None:
        known = sorted({r.benchmark for r in records})
        if benchmark not in known:
            from fusebench.registry import closest

            hint = closest(benchmark, known)
            raise ValueError(f"no records of benchmark {benchmark!r} under {runs_dir}"
                             + (f"; did you mean {hint!r}?" if hint else "") + f" (found: {', '.join(known) or 'none'})")
        records = [r for r in records if r.benchmark == benchmark]
    cols, rows = seed_rows(records)
    return pd.DataFrame(rows, columns=cols)


def render_seeds_csv(records: list[RunRecord], cell: Any) -> str:
    """``<board>-seeds.csv``: a header line, then one line per record (:func:`seed_rows`); each cell through
    ``cell`` (the board CSV's, :func:`fusebench.leaderboard.export`: numbers rounded as there, text that a
    spreadsheet would run as a formula neutralised); an undefined metric is an empty cell. Without the ``path``
    column (it depends on where the runs folder was read from), so the file regenerates byte for byte."""
    import csv
    import io

    cols, rows = seed_rows(records)
    cols = [c for c in cols if c != "path"]  # where the runs folder was read from: not part of the board
    buf = io.StringIO()
    out = csv.writer(buf, lineterminator="\n")
    out.writerow([cell(c) for c in cols])
    for row in rows:
        out.writerow([cell(None if isinstance(v, float) and not math.isfinite(v) else v)
                      for v in (row.get(c) for c in cols)])
    return buf.getvalue()


__all__ = ["FIXED", "TAIL", "columns", "load", "metric_column", "read_records", "render_seeds_csv", "seed_row",
           "seed_rows"]
