"""The table of one comparability group and the lines under it: a row per distinct loss (cells
mean ± std over seeds, the best mean in bold), the primary metric's bootstrap CI and Δ vs the fixed
reference row with its Holm-adjusted p-value, the pretraining budget and cost columns
(:func:`table_lines`); then whether the budgets are equal, rows flagged invalid, merged alias rows
and where their numbers differ, and untested rows (:func:`notes_lines`)."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from fusebench.leaderboard.columns import fmt_delta, fmt_p, fmt_stats, fmt_value, md_code, md_text, shown_bound
from fusebench.components.rows import is_reference
from fusebench.leaderboard.groups import GroupView
from fusebench.leaderboard.view import is_external, record_budget


def _row_label(view: GroupView, o: str) -> str:
    label = f"`{o}`"
    if view.aliases.get(o):
        label += f" (≡ {', '.join(f'`{a}`' for a in view.aliases[o])})"
    if o in view.invalid:
        label += f" (invalid: {md_text(view.invalid[o])})"
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


def _rank_cell(view: GroupView, o: str) -> str:
    """``rank [low-high]``: the row's rank on the primary metric and its bootstrap interval over seeds."""
    r = view.ranks.get(o)
    if r is None or r["rank"] is None:
        return "— (invalid)" if o in view.invalid else "—"
    return f"{r['rank']}" + (f" [{r['low']}-{r['high']}]" if r["low"] is not None else "")


def _best_cell(view: GroupView, o: str) -> str:
    """The row against the best row on the primary metric: ``best``, ``tied (p)`` (not separable, Holm p above
    alpha), ``worse (p)``, or why it is not tested."""
    if o == view.best.get(view.primary):
        return "best"
    if o in view.invalid:
        return "— (invalid)"
    res = view.vs_best.get(o)
    if res is None:
        return "—"
    if res["p_holm"] is None:
        return f"n/a: {res['n']} seed"
    return f"{'tied' if res['tied'] else 'worse'} ({fmt_p(res['p_holm'])})"


def _alias_cells(view: GroupView, o: str, metric: Any) -> str:
    """For a row merging reference rows whose ``metric`` differs by design (clustering): the aliases' cells."""
    out = []
    for a, metrics in view.reference_aliases.get(o, {}).items():
        if metric.id in metrics:
            summary = view.summary(a, metric.id)
            undefined = view.undefined.get((a, metric.id), 0)
            if summary is None and not undefined:
                continue
            out.append(f"; `{a}`: {fmt_stats(metric.unit, *(summary or (None, None, 0)), undefined)}")
    return "".join(out)


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
        if view.ranks:
            header += [f"rank [95%] on {p}", f"vs best on {p} (Holm p)"]
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
            text = f"**{text}**" if summary and view.bold.get(m.id) == o else text
            row.append(text + _alias_cells(view, o, m))
        if stats_cols:
            ci = view.ci.get(o)
            unit = view.info(p).unit
            row.append(f"[{fmt_value(unit, ci[0])}, {fmt_value(unit, ci[1])}]" if ci else "—")
            if view.reference:
                row.append(_delta_cell(view, o))
            if view.ranks:
                row += [_rank_cell(view, o), _best_cell(view, o)]
        row += list(_row_budget(view, o))
        time_s, memory_mb = view.cost(o)
        row.append("—" if time_s is None else f"{time_s:.1f}")
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
    external = [o for o in view.rows if any(r.objective == o and is_external(r) for r in view.recs)]
    pretrained = [o for o in view.rows if not is_reference(o) and o not in external]
    outside = (f" Trained elsewhere (budget and pretraining time not known here): {', '.join(f'`{o}`' for o in external)}."
               if external else "")
    if not pretrained:
        return outside.strip() or None
    per: dict[str, set] = {}
    missing = []
    for o in pretrained:
        budgets = [b for r in view.recs if r.objective == o and (b := record_budget(r)) is not None]
        if not budgets:
            missing.append(o)
            continue
        per[o] = {(b["optimizer_steps"], b["samples_seen"], b.get("batch_size"), b.get("epochs")) for b in budgets}
    if not per:
        return "Pretraining budget: not recorded in these runs (records without a `budget` field)." + outside
    tail = (f" Not recorded for {', '.join(f'`{o}`' for o in missing)}." if missing else "") + outside
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


def _alias_lines(view: GroupView) -> tuple[list[str], list[str]]:
    """Merged rows and, where their runs differ, on which seeds and metrics: (loss aliases, reference rows)."""
    out, refs = [], []
    for d in sorted(view.aliases):
        for a in view.aliases[d]:
            distinct = view.reference_aliases.get(d, {}).get(a)  # None: a loss alias; else metrics shown for both
            seeds, metrics, worst, rounding = set(), [], 0.0, 0.0
            for m in view.metrics:
                if distinct is not None and m.id in distinct:
                    continue  # differs by design (clustering of other features): shown beside the row's cell
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
            if distinct is not None:
                refs.append(_reference_alias_line(d, a, distinct, seeds, metrics, worst, rounding)
                            + (f" Seeds run for `{a}` only: {', '.join(map(str, only))}." if only else ""))
                continue
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
    if refs:
        refs.insert(0, "Reference rows merged because they are the same features for every probe: a per-column "
                       "affine map of each other, which the probes' per-column z-scoring (train statistics) cancels "
                       "(`fusebench.components.reference_features.PROBE_BASE`); only the displayed id is tested and "
                       "ranked:")
    return out, refs


def _reference_alias_line(d: str, a: str, distinct: list[str], seeds: set, metrics: list[str], worst: float,
                          rounding: float) -> str:
    """The note of a reference row merged into ``d``: whether the probes' numbers agree, and the clustering."""
    if seeds:
        text = (f"- `{a}` gives the same features as `{d}` for every probe; its probe numbers differ on seed(s) "
                f"{', '.join(map(str, sorted(seeds)))} ({', '.join(metrics)}; largest difference {worst:.4g}: the "
                f"rounding of the features moves the probes' fits); the row shows `{d}`'s runs.")
    elif rounding:
        text = (f"- `{a}` gives the same features as `{d}` for every probe: the same probe numbers on every shared "
                f"seed (up to float rounding, at most {rounding:.1e}).")
    else:
        text = f"- `{a}` gives the same features as `{d}` for every probe: identical probe numbers on every shared seed."
    if distinct:
        text += (f" k-means clusters them differently (one z-scored, one as given), so the row shows both "
                 f"clustering numbers ({', '.join(distinct)}), `{a}`'s after `{d}`'s.")
    return text


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
        out += [f"- `{o}`: {md_text(why)}" for o, why in sorted(view.invalid.items())]
    aliases, refs = _alias_lines(view)
    for lines in (aliases, refs):
        if lines:
            out += [""] + lines[:1] + [""] + lines[1:]
    collapsed = collapsed_line(view)
    if collapsed:
        out += ["", collapsed]
    solver = solver_line(view)
    if solver:
        out += ["", solver]
    tests = _test_notes(view)
    if tests:
        out += ["", "Tests:", ""] + tests
    return out


#: a run's k-means clustering counts as collapsed when its NMI with the labels is below this: its clusters carry
#: under 1% of the information on the classes (all samples in one cluster, or clusters that cut across the
#: classes), and its clustering accuracy is then about what a partition blind to the labels scores (for one
#: cluster, the majority-class rate), whatever the embedding
COLLAPSED_NMI = 0.01


def collapsed_runs(view: GroupView) -> dict[str, tuple[int, int]]:
    """``{objective: (runs whose k-means collapsed, runs with an NMI)}`` for the objectives whose k-means cells the
    table shows (its rows and the reference rows merged into them, which show their own k-means numbers) with at
    least one collapsed run: NMI below :data:`COLLAPSED_NMI`, read from the records' ``nmi`` only (a run whose NMI is
    undefined is not counted). Empty when the group has no ``nmi`` metric."""
    if not any(m.id == "nmi" for m in view.metrics):
        return {}
    shown = [o for row in view.rows for o in [row, *sorted(view.reference_aliases.get(row, {}))]]
    out = {}
    for o in shown:
        nmi = view.values.get((o, "nmi")) or {}
        low = sum(1 for v in nmi.values() if v < COLLAPSED_NMI)
        if low:
            out[o] = (low, len(nmi))
    return out


def solver_counts(view: GroupView) -> dict[str, dict[str, Any]]:
    """``{objective: counts}`` for the objectives of the group with an iterative solver whose runs recorded its tally
    (the per-epoch curves of :mod:`fusebench.objectives.solver_tally`): ``runs`` (runs with the curves), ``of`` (the
    objective's runs), ``calls`` and ``not_converged`` (summed over those runs' epochs) and
    ``worst_marginal_error`` (the largest over them). Objectives none of whose runs has the curves (no solver, or
    records made before the tally) are left out."""
    from fusebench.objectives.solver_tally import merged, summed

    out: dict[str, dict[str, Any]] = {}
    for o in view.objectives:
        recs = [r for r in view.recs if r.objective == o]
        tallied = [t for t in (summed(r.curves) for r in recs) if t is not None]
        if tallied:
            out[o] = {"runs": len(tallied), "of": len(recs), **merged(tallied)}
    return out


def solver_line(view: GroupView) -> str | None:
    """The note under a table whose objectives have an iterative solver (:func:`solver_counts`): per objective, of
    its pretraining loss calls, how many stopped at ``max_iter`` before the solver's tolerance (their gap and
    gradient are approximate), and the largest marginal error a call stopped at."""
    counts = solver_counts(view)
    if not counts:
        return None
    parts = []
    for o, c in counts.items():
        part = (f"{md_code(o)} {c['not_converged']:,} of {c['calls']:,} calls (largest marginal error "
                f"{shown_bound(c['worst_marginal_error'], up=c['not_converged'] > 0)})")
        if c["runs"] < c["of"]:
            part += f", counted in {c['runs']} of its {c['of']} runs (the others' records do not count them)"
        parts.append(part)
    flagged = any(c["not_converged"] for c in counts.values())
    return ("**Solver did not converge**" if flagged else "Solver convergence") + (
        " (pretraining loss calls whose Sinkhorn solve stopped at `max_iter` before its marginal error fell below the "
        "tolerance `tol`: the gap and its gradient in such a call are approximate; the step still trains on them, as "
        "with the authors' ott-jax solver): " + "; ".join(parts) + ".")


def _task_of(metric: str) -> str | None:
    """The task of a registered metric (the metric registry's metadata), None for another id."""
    from fusebench import metrics as M

    try:
        return M.metadata(metric)["task"]
    except (M.UnknownNameError, KeyError, TypeError):
        return None


def collapsed_line(view: GroupView) -> str | None:
    """The note under a table whose rows have runs with a collapsed k-means clustering (:func:`collapsed_runs`):
    which rows, in how many of their runs; their k-means cells mix collapsed and working clusterings."""
    runs = collapsed_runs(view)
    if not runs:
        return None
    rows = ", ".join(f"{md_code(o)} {k} of {n}" for o, (k, n) in runs.items())
    cols = ", ".join(md_code(m.id) for m in view.metrics if _task_of(m.id) == "clustering")
    return (f"**k-means collapsed** (a run's NMI below {COLLAPSED_NMI:g}: its clusters carry almost no information "
            f"on the classes, so its clustering accuracy is about what a labelling-blind partition scores, the "
            f"majority-class rate for one cluster, whatever the embedding) "
            f"in these rows' runs: {rows} (collapsed of runs with an NMI). These rows' {cols} cells include the collapsed "
            f"runs' numbers: do not compare the rows on them.")
