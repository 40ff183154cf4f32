"""The table of one comparability group and the lines under it: a row per distinct loss (cells
mean ± std over seeds, the best mean in bold), the primary metric's bootstrap CI and Δ vs the fixed
reference row with its Holm-adjusted p-value, the pretraining budget and cost columns
(:func:`table_lines`); then whether the budgets are equal, rows flagged invalid, merged alias rows
and where their numbers differ, and untested rows (:func:`notes_lines`)."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from fusebench.leaderboard.columns import cell_text, fmt_delta, fmt_p, fmt_stats, fmt_value
from fusebench.leaderboard.groups import REFERENCE_ROWS, GroupView, record_budget


def _row_label(view: GroupView, o: str) -> str:
    label = f"`{o}`"
    if view.aliases.get(o):
        label += f" (≡ {', '.join(f'`{a}`' for a in view.aliases[o])})"
    if o in view.invalid:
        label += f" (invalid: {cell_text(view.invalid[o])})"
    return label


def _row_budget(view: GroupView, o: str) -> tuple[str, str]:
    """The (steps, samples seen) cells of a row: the value when every seed agrees, 'min–max' otherwise."""
    budget = view.budget(o)
    if budget is None:
        return "—", "—"
    cells = []
    for key in ("optimizer_steps", "samples_seen"):
        lo, hi = budget[key]
        cells.append(f"{lo:,}" if lo == hi else f"{lo:,}–{hi:,}")
    return cells[0], cells[1]


def _delta_cell(view: GroupView, o: str) -> str:
    if o == view.reference:
        return "reference"
    if o in view.invalid:
        return "— (invalid)"
    res = view.tests.get(o)
    if res is None:
        return "—"
    if res["mean_diff"] is None:
        return "— (no shared seed)"
    unit = view.info(view.primary).unit
    delta = fmt_delta(unit, res["mean_diff"])
    if res["p_holm"] is None:
        return f"{delta} (n/a: {res['n']} seed)"
    return f"{delta} ({fmt_p(res['p_holm'])})"


def table_lines(view: GroupView) -> list[str]:
    """The markdown table of one group: a row per displayed objective, a column per metric, then for
    ranked groups the primary metric's CI and Δ vs the reference, the budget and the cost columns."""
    p = view.primary
    stats_cols = view.ranked and bool(p)
    header = ["objective"] + [m.header for m in view.metrics]
    if stats_cols:
        pct = " (%)" if view.info(p).unit == "fraction" else ""
        header.append(f"{p} 95% CI{pct}")
        if view.reference:
            header.append(f"Δ {p} vs `{view.reference}` (Holm p)")
    header += ["steps", "samples seen", "pretrain time (s) ↓", "peak memory (MiB) ↓"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for o in view.rows:
        row = [_row_label(view, o)]
        for m in view.metrics:
            summary = view.summary(o, m.id)
            undefined = view.undefined.get((o, m.id), 0)
            if summary is None and not undefined:
                row.append("—")
                continue
            text = fmt_stats(m.unit, *(summary or (None, None, 0)), undefined)
            row.append(f"**{text}**" if summary and view.best[m.id] == o else text)
        if stats_cols:
            ci = view.ci.get(o)
            unit = view.info(p).unit
            row.append(f"[{fmt_value(unit, ci[0])}, {fmt_value(unit, ci[1])}]" if ci else "—")
            if view.reference:
                row.append(_delta_cell(view, o))
        row += list(_row_budget(view, o))
        time_s, memory_mb = view.cost(o)
        row.append(f"{time_s:.1f}")
        row.append(f"{memory_mb:.0f}")
        lines.append("| " + " | ".join(row) + " |")
    return lines


def _budget_text(b: tuple[int, int, Any, Any]) -> str:
    steps, samples, batch, epochs = b
    extra = [f"batch {batch}" if batch is not None else "", f"{epochs} epochs" if epochs is not None else ""]
    extra = [e for e in extra if e]
    return f"{steps:,} optimizer steps, {samples:,} samples seen" + (f" ({', '.join(extra)})" if extra else "")


def _budget_line(view: GroupView) -> str | None:
    """Whether the pretrained rows (all but the reference rows) had equal pretraining budgets."""
    pretrained = [o for o in view.rows if o not in REFERENCE_ROWS]
    if not pretrained:
        return None
    per: dict[str, set] = {}
    missing = []
    for o in pretrained:
        budgets = [b for r in view.recs if r.objective == o and (b := record_budget(r)) is not None]
        if not budgets:
            missing.append(o)
            continue
        per[o] = {(b["optimizer_steps"], b["samples_seen"], b.get("batch_size"), b.get("epochs")) for b in budgets}
    if not per:
        return "Pretraining budget: not recorded in these runs (records without a `budget` field)."
    tail = f" Not recorded for {', '.join(f'`{o}`' for o in missing)}." if missing else ""
    keys = {o: {(s, n) for s, n, _, _ in v} for o, v in per.items()}  # (steps, samples seen) per row
    every = {b for v in keys.values() for b in v}
    if len(every) == 1:  # equal: one (steps, samples seen) for every row and seed
        full = {b for v in per.values() for b in v}  # with batch and epochs, when those agree too
        shown = next(iter(full)) if len(full) == 1 else (*next(iter(every)), None, None)
        return (f"Pretraining budget: **equal** across the {len(per)} pretrained row(s): {_budget_text(shown)} "
                f"each.{tail}")
    counts: dict[tuple[int, int], int] = defaultdict(int)
    for v in keys.values():
        if len(v) == 1:
            counts[next(iter(v))] += 1
    common = min(counts, key=lambda b: (-counts[b], b)) if counts else None
    odd = []
    for o in sorted(per):
        if keys[o] == {common}:
            continue
        if len(keys[o]) > 1:
            odd.append(f"`{o}` varies by seed ({', '.join(f'{s:,} / {n:,}' for s, n in sorted(keys[o]))})")
        else:
            odd.append(f"`{o}` {_budget_text(next(iter(per[o])))}")
    rest = (f"; the other {counts[common]} row(s): {common[0]:,} optimizer steps, {common[1]:,} samples seen"
            if common else "")
    return f"Pretraining budgets **differ** across the pretrained rows: {'; '.join(odd)}{rest}.{tail}"


def _rounding_only(x: float, y: float) -> bool:
    """Whether two metric values differ by float rounding only (relative 1e-9)."""
    return math.isfinite(x) and math.isfinite(y) and abs(x - y) <= 1e-9 * max(1.0, abs(x), abs(y))


def _alias_lines(view: GroupView) -> list[str]:
    """Merged rows and, where their runs differ, on which seeds and metrics."""
    out = []
    for d in sorted(view.aliases):
        for a in view.aliases[d]:
            seeds, metrics, worst, rounding = set(), [], 0.0, 0.0
            for m in view.metrics:
                dv, av = view.values.get((d, m.id), {}), view.values.get((a, m.id), {})
                shared = [s for s in set(dv) & set(av) if dv[s] != av[s]]
                # the same loss trains the same network; a metric may still differ in its last bits (a
                # reduction in another order): that is rounding, not a different result
                diff = sorted(s for s in shared if not _rounding_only(dv[s], av[s]))
                rounding = max([rounding, *(abs(dv[s] - av[s]) for s in shared if s not in diff)])
                if diff:
                    seeds.update(diff)
                    metrics.append(m.id)
                    worst = max(worst, max(abs(dv[s] - av[s]) for s in diff))
            d_seeds = {r.seed for r in view.recs if r.objective == d}
            a_seeds = {r.seed for r in view.recs if r.objective == a}
            only = sorted(a_seeds - d_seeds)
            k = f" at k = {view.num_views} views" if view.num_views else ""
            if seeds:
                text = (f"- `{a}` computes the same loss as `{d}`{k} but its numbers **differ** on seed(s) "
                        f"{', '.join(map(str, sorted(seeds)))} ({', '.join(metrics)}; largest difference "
                        f"{worst:.4g}); the row shows `{d}`'s runs.")
            elif rounding:
                text = (f"- `{a}` computes the same loss as `{d}`{k}: the same numbers on every shared seed "
                        f"(up to float rounding, at most {rounding:.1e}).")
            else:
                text = f"- `{a}` computes the same loss as `{d}`{k}: identical numbers on every shared seed."
            if only:
                text += f" Seeds run for `{a}` only: {', '.join(map(str, only))}."
            out.append(text)
    if out:
        out.insert(0, "Rows merged because the objectives compute the same loss "
                      "(`fusebench.objectives.equivalence`); only the displayed id is tested and ranked:")
    return out


def _test_notes(view: GroupView) -> list[str]:
    out = []
    few = sorted(o for o, r in view.tests.items() if r["p"] is None)
    if few:
        out.append(f"- not tested (fewer than 2 seeds shared with `{view.reference}`): "
                   f"{', '.join(f'`{o}`' for o in few)}")
    for o, r in sorted(view.tests.items()):
        if r["p"] is not None and r["note"]:
            out.append(f"- `{o}`: {r['note']}")
    return out


def notes_lines(view: GroupView) -> list[str]:
    """The lines under a table: budgets, merged rows, invalid rows, test conventions."""
    out = []
    budget = _budget_line(view)
    if budget:
        out += ["", budget]
    if view.invalid:
        out += ["", "Rows flagged invalid by their runs (shown, never ranked best, not tested):", ""]
        out += [f"- `{o}`: {why}" for o, why in sorted(view.invalid.items())]
    aliases = _alias_lines(view)
    if aliases:
        out += [""] + aliases[:1] + [""] + aliases[1:]
    tests = _test_notes(view)
    if tests:
        out += ["", "Tests:", ""] + tests
    return out
