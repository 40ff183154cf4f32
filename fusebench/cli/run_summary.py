"""The end of ``fusebench run`` (issue #32, "say where and what"): where the records are, the boards written
with ``--leaderboard``, and a compact table of what the sweep ran or reused -- per (benchmark, objective)
the primary metric's mean ± sample std (ddof 1, as the boards) over the seeds and their number ``n``::

    records: runs (5 cell(s) of quickstart)
    quickstart  objective  acc (mean ± std)  n
                none       0.4355 ± 0.0123   3
"""

from __future__ import annotations

import math
from typing import Any

from fusebench.io import shown_path, shown_text
from fusebench.leaderboard.columns import mean_std
from fusebench.metrics import values_of

SHOWN = ("failed", "worker", "skipped", "interrupted", "submitted")  # entries without a record: not in the table


def primary_of(record: dict[str, Any]) -> str | None:
    """The record's primary metric: ``comparison.primary``, else the selection metric, else its first metric."""
    comparison = record.get("comparison") if isinstance(record.get("comparison"), dict) else {}
    selection = record.get("selection") if isinstance(record.get("selection"), dict) else {}
    metrics = values_of(record.get("metrics"))
    for name in (comparison.get("primary"), selection.get("metric")):
        if isinstance(name, str) and name in metrics:
            return name
    return sorted(metrics)[0] if metrics else None


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def summary_rows(records: list[dict[str, Any]]) -> list[tuple[str, str, str, str, int, int]]:
    """``(benchmark, objective, metric, "mean ± std", n, undefined)`` per (benchmark, objective) of the records
    with metrics, in sweep order; ``n`` counts the seeds with a finite value, ``undefined`` the others."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in records:
        if r.get("status") in SHOWN or not isinstance(r.get("metrics"), dict):
            continue
        groups.setdefault((str(r.get("benchmark")), str(r.get("objective"))), []).append(r)
    rows = []
    for (bench, obj), recs in groups.items():
        metric = primary_of(recs[0]) or "-"
        values = [values_of(r["metrics"]).get(metric) for r in recs]
        good = [float(v) for v in values if _finite(v)]
        shown = "{:.4f} ± {:.4f}".format(*mean_std(good)) if good else "—"
        rows.append((bench, obj, metric, shown, len(good), len(values) - len(good)))
    return rows


def summary_table(records: list[dict[str, Any]]) -> list[str]:
    """The table's lines (none without a record): a header per benchmark and metric, then one line per
    objective, columns aligned."""
    rows = summary_rows(records)
    if not rows:
        return []
    table = [("benchmark", "objective", "metric", "mean ± std", "n")]
    table += [(b, o, m, s, f"{n}" + (f" ({u} undefined)" if u else "")) for b, o, m, s, n, u in rows]
    widths = [max(len(r[i]) for r in table) for i in range(5)]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in table]


def tracker_lines(loggers: list[str] | None, out: str, mlflow_uri: str | None = None) -> list[str]:
    """Where the ``--logger`` trackers wrote: one line each, as each tracker's registration says
    (:func:`fusebench.engine.trackers.written_where`; mlflow: its tracking URI, by default ``file:<out>/.mlruns``)."""
    from fusebench.engine.trackers import written_where

    return [f"logs ({name}): {shown_text(written_where(name, out, mlflow_uri))}" for name in loggers or []]


def closing_lines(records: list[dict[str, Any]], out: str, board_lines: list[str] | None = None,
                  log_lines: list[str] | None = None) -> list[str]:
    """What ``fusebench run`` ends with: the records folder (escaped as a message shows a path,
    :func:`fusebench.io.shown_path`), the board files (``board_lines``, from
    :func:`fusebench.leaderboard.outputs.file_lines`; None without ``--leaderboard``), where the trackers wrote
    (``log_lines``, :func:`tracker_lines`) and the table."""
    done = [r for r in records if r.get("status") not in SHOWN]
    benches = sorted({str(r.get("benchmark")) for r in done})
    lines = [f"records: {shown_path(out)} ({len(done)} cell(s){' of ' + ', '.join(benches) if benches else ''})"]
    if board_lines is not None:
        lines += [f"boards: {line}" for line in board_lines]
    return lines + list(log_lines or []) + summary_table(records)


__all__ = ["closing_lines", "primary_of", "summary_rows", "summary_table", "tracker_lines"]
