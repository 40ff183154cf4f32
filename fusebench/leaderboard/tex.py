"""``fusebench leaderboard --format tex``: ``<board>.tex``, a booktabs table per comparability group of a
board, ready for ``\\input`` inside the paper's own ``table`` environment (needs ``\\usepackage{booktabs}``).

Made from the board's data (:func:`fusebench.leaderboard.export.board_data`, the numbers of the CSV / JSON
files), one row per displayed objective. The columns are chosen with ``--tex-columns`` (default
:data:`DEFAULT_COLUMNS`), each one of :data:`COLUMNS` or a metric id of the records (its mean ± std; dashes on
a board without that metric, a name that is no metric of any record is refused):

* ``mean``: the primary metric's mean ± sample std over the seeds (the group's best row in bold, only when
  it is separable from the second-best row: ``best_separable``, as on the markdown and HTML boards);
* ``ci``: its percentile-bootstrap 95% interval of the mean;
* ``n``: the seeds; ``steps`` / ``samples``: the pretraining budget (optimiser steps, samples seen; a
  range when the seeds differ); ``delta`` / ``p``: Δ vs the reference row and its Holm-adjusted p;
  ``time`` / ``memory``: mean pretraining seconds, mean peak MB.

Fractions are shown in percent with two decimals, other metrics with four (as on the markdown board).
Every text that comes from records (objective ids, aliases, metric ids, the benchmark name) is escaped
for LaTeX (:func:`tex_text`), so a record can never inject a command. Written only where the text
changed, like every board file.
"""

from __future__ import annotations

import math
from typing import Any

from fusebench.leaderboard.columns import fmt_delta, fmt_p, fmt_value

COLUMNS = ("mean", "ci", "n", "steps", "samples", "delta", "p", "time", "memory")
DEFAULT_COLUMNS = ("mean", "ci", "n", "steps")

_TEX_ESCAPES = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
                "<": r"\textless{}", ">": r"\textgreater{}", "|": r"\textbar{}"}
_TEX_TABLE = str.maketrans(_TEX_ESCAPES)


def tex_text(text: object) -> str:
    """Text from a record as LaTeX that prints it literally, on one line: whitespace runs become one space,
    LaTeX's special characters (``\\ & % $ # _ { } ~ ^``, and ``< > |``, which OT1 fonts print as other
    glyphs) are escaped."""
    return " ".join(str(text).split()).translate(_TEX_TABLE)


def check_columns(columns: Any, metrics: Any = None) -> tuple[str, ...]:
    """``columns`` as a tuple of distinct names of :data:`COLUMNS` or of ``metrics`` (metric ids; None: any
    name is taken as a metric id); a ValueError naming the unknown one and the closest known name, or the one
    given twice."""
    if isinstance(columns, str) or not columns:
        raise ValueError(f"--tex-columns: expected one or more of {', '.join(COLUMNS)} or a metric id, got {columns!r}")
    out: list[str] = []
    for c in columns:
        if not isinstance(c, str) or not c or (c not in COLUMNS and metrics is not None and c not in metrics):
            from fusebench.registry import closest

            known = [*COLUMNS, *sorted(metrics or ())]
            hint = closest(str(c), known)
            raise ValueError(f"--tex-columns: unknown column {c!r}" + (f" (did you mean {hint!r}?)" if hint else "")
                             + f"; known: {', '.join(COLUMNS)} or a metric id of the records "
                             f"({', '.join(sorted(metrics or ())) or 'none'})")
        if c in out:  # the second would be dropped: refused, not ignored
            raise ValueError(f"--tex-columns: {c!r} given twice; a table has each column once")
        out.append(c)
    return tuple(out)


def _unit(group: dict[str, Any], metric: str | None) -> str:
    return next((m["unit"] for m in group["metrics"] if m["id"] == metric), "raw")


def _header_metric(group: dict[str, Any], metric: str) -> str:
    info = next((m for m in group["metrics"] if m["id"] == metric), {"unit": "raw", "direction": None})
    arrow = {"higher": r" $\uparrow$", "lower": r" $\downarrow$"}.get(info["direction"] or "", "")
    percent = r" (\%)" if info["unit"] == "fraction" else ""
    return f"{tex_text(metric)}{percent}{arrow}"


def _mean_std(group: dict[str, Any], row: dict[str, Any], metric: str | None, bold: bool = False) -> str:
    entry = (row["metrics"] or {}).get(metric) if metric else None
    if not entry or entry.get("mean") is None:
        return "--"
    unit = _unit(group, metric)
    mean = fmt_value(unit, entry["mean"])
    # a null std beside a mean: beyond the float range (export.number), shown as the bound it exceeds, "> 1.8e+308"
    std = tex_text(fmt_value(unit, math.inf if entry.get("std") is None else entry["std"]))
    return (rf"\textbf{{{mean}}}" if bold else mean) + rf" $\pm$ {std}"


def _range(pair: list[int] | None) -> str:
    if not pair:
        return "--"
    lo, hi = pair
    return f"{lo}" if lo == hi else f"{lo}--{hi}"


def _number(x: Any, fmt: str = "{:.1f}") -> str:
    return "--" if x is None else fmt.format(x)


def _cell(column: str, group: dict[str, Any], row: dict[str, Any]) -> str:
    primary = group["primary"]
    if column == "mean":
        bold = group.get("best_separable") is True and bool(group.get("best")) and group.get("best") == row["objective"]
        return _mean_std(group, row, primary, bold=bold)  # a best row tied with the second is not bold
    if column == "ci":
        ci = row.get("ci")
        unit = _unit(group, primary)
        return f"[{fmt_value(unit, ci[0])}, {fmt_value(unit, ci[1])}]" if ci else "--"
    if column == "n":
        entry = (row["metrics"] or {}).get(primary) or {}
        return str(entry.get("n", 0))
    if column in ("steps", "samples"):
        budget = row.get("budget")
        return _range(budget["steps" if column == "steps" else "samples_seen"]) if budget else "--"
    if column == "delta":
        return "--" if row.get("delta") is None else fmt_delta(_unit(group, primary), row["delta"]).replace("-", "$-$")
    if column == "p":
        return "--" if row.get("p_holm") is None else fmt_p(row["p_holm"]).replace("<", "$<$")
    if column == "time":
        return _number((row.get("cost") or {}).get("pretrain_time_s"))
    if column == "memory":
        return _number((row.get("cost") or {}).get("peak_memory_mb"), "{:.0f}")
    return _mean_std(group, row, column)  # a metric id


def _header(column: str, group: dict[str, Any]) -> str:
    primary = group["primary"] or ""
    fixed = {"mean": _header_metric(group, primary) if primary else "Primary", "ci": r"95\% CI", "n": "$n$",
             "steps": "Steps", "samples": "Samples seen",
             "delta": rf"$\Delta$ vs {tex_text(group.get('reference') or 'reference')}", "p": "$p$ (Holm)",
             "time": "Pretrain (s)", "memory": "Peak MB"}
    return fixed.get(column) or _header_metric(group, column)


def _objective(row: dict[str, Any]) -> str:
    name = tex_text(row["objective"])
    if row.get("aliases"):
        name += " ($\\equiv$ " + ", ".join(tex_text(a) for a in row["aliases"]) + ")"
    if row.get("invalid"):
        name += r"$^\dagger$"
    return name


def render_tex(data: dict[str, Any], columns: Any = DEFAULT_COLUMNS) -> str:
    """``<board>.tex`` of ``data`` (:func:`fusebench.leaderboard.export.board_data`) with ``columns``."""
    cols = check_columns(columns)
    parts = [f"% fusebench board {tex_text(data['benchmark'])}: generated from run records by fusebench leaderboard "
             "--format tex; needs \\usepackage{booktabs}"]
    for i, group in enumerate(data["groups"]):
        if i:
            parts.append("\\par\\medskip")
        invalid = any(r.get("invalid") for r in group["rows"])
        parts.append(f"% comparability key {tex_text(group['key'])}; dataset {tex_text(group['dataset'])}"
                     + ("; synthetic" if group.get("synthetic") else "") + f"; seeds {len(group.get('seeds') or [])}"
                     + ("; $^\\dagger$ rows flagged invalid" if invalid else ""))
        absent = [c for c in cols if c not in COLUMNS and c not in {m["id"] for m in group["metrics"]}]
        if absent:
            parts.append(f"% not metrics of this board (columns of dashes): {tex_text(', '.join(absent))}")
        parts.append("\\begin{tabular}{l" + "r" * len(cols) + "}")
        parts.append("\\toprule")
        parts.append(" & ".join(["Objective", *(_header(c, group) for c in cols)]) + " \\\\")
        parts.append("\\midrule")
        for row in group["rows"]:
            parts.append(" & ".join([_objective(row), *(_cell(c, group, row) for c in cols)]) + " \\\\")
        parts.append("\\bottomrule")
        parts.append("\\end{tabular}")
    return "\n".join(parts) + "\n"


__all__ = ["COLUMNS", "DEFAULT_COLUMNS", "check_columns", "render_tex", "tex_text"]
