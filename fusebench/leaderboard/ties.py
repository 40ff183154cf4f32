"""Ties said as ties (issue #30): every row of a ranked board against the best row (:func:`vs_best`: paired
t-tests over shared seeds, Holm over the rows; "tied" where not separable at :data:`ALPHA`), the best row bold
only when the second is separable from it, and each row's rank with a bootstrap interval over the seeds
(:func:`rank_intervals`); for the index, each objective's place in the cross-dataset ranking with a bootstrap
interval over the datasets (:func:`dataset_rank_intervals`). :func:`settle_ties` fills a
:class:`~fusebench.leaderboard.view.GroupView` with them. numpy and scipy only, like
:mod:`fusebench.leaderboard.stats`, whose tests and conventions these reuse."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from fusebench.leaderboard.stats import (HUGE, _int_at_least, _matrix, _open_unit, _row, average_ranks,
                                        paired_vs_reference, safe_mean)

if TYPE_CHECKING:  # annotations only: this module needs numpy and scipy, not the records a view holds
    from fusebench.leaderboard.view import GroupView

__all__ = ["ALPHA", "SEED_SETS_DIFFER", "dataset_rank_intervals", "order_statistic_interval", "rank_intervals",
           "settle_ties", "standing", "vs_best"]

#: the level of every test on a board: a row is "tied with the best" when its Holm-adjusted p vs the best row
#: is above it; the best row is bold only when the second is below it
ALPHA = 0.05
#: why a rank has no interval when the rows were not run on the same seeds (:func:`rank_intervals`)
SEED_SETS_DIFFER = "the rows' seed sets differ"


def vs_best(rows: Mapping[str, Mapping[int, float]], best: str, alpha: float = ALPHA) -> dict[str, dict[str, Any]]:
    """Every row against the ``best`` row: :func:`paired_vs_reference` with ``best`` as the reference (two-sided
    paired t-tests over the seeds each row shares with it, Holm-adjusted over the rows tested), each result
    with ``tied``: True when the row is not separable from the best (``p_holm`` > ``alpha``), False when it is,
    None when it is not tested (fewer than 2 shared seeds)."""
    out = paired_vs_reference(rows, best)
    alpha = _open_unit(alpha, "alpha")
    for res in out.values():
        res["tied"] = None if res["p_holm"] is None else bool(res["p_holm"] > alpha)
    return out


def standing(means: Mapping[str, float], higher_is_better: bool = True) -> dict[str, int]:
    """Competition ranks of ``means``: rank 1 + the number of rows with a strictly better mean, so tied rows
    share the best of the ranks they span. Means are rounded to 12 decimals first (means equal but for the
    order of summation tie)."""
    sign = 1.0 if higher_is_better else -1.0
    vals = {k: round(sign * float(v), 12) for k, v in means.items()}
    return {k: 1 + sum(1 for w in vals.values() if w > v) for k, v in vals.items()}


def order_statistic_interval(samples: Any, level: float = 0.95) -> tuple[float, float]:
    """The percentile interval of ``samples`` by order statistics: with x_(1) <= ... <= x_(B) sorted, the
    lower end is x_(ceil(B (1 - level) / 2)) and the upper end x_(ceil(B (1 + level) / 2)) (the empirical
    quantile that inverts the distribution function, Hyndman & Fan type 1: always a value that occurred, so
    the interval of integer ranks is integer)."""
    x = np.sort(np.asarray(samples, dtype=np.float64))
    level = _open_unit(level, "level")
    b = x.size
    if b == 0:
        raise ValueError("samples must hold at least one number")
    lo = max(1, math.ceil(b * (1.0 - level) / 2.0 - 1e-9))
    hi = max(1, math.ceil(b * (1.0 + level) / 2.0 - 1e-9))
    return float(x[lo - 1]), float(x[min(hi, b) - 1])


def rank_intervals(rows: Mapping[str, Mapping[int, float]], higher_is_better: bool = True, level: float = 0.95,
                   n_boot: int = 10000, seed: int = 0) -> dict[str, dict[str, Any]]:
    """Each row's rank (:func:`standing` of its mean over its seeds) and a percentile-bootstrap interval of it.

    The bootstrap resamples the seeds that **every** row has (S, n = |S|): resample b draws n seeds of S with
    replacement (row b of ``numpy.random.default_rng(seed).integers(0, n, size=(n_boot, n))``), every row's
    mean over those seeds is taken (each row on the same drawn seeds: the comparison stays paired), the rows
    are ranked (:func:`standing`), and the interval of a row is :func:`order_statistic_interval` of its
    ``n_boot`` ranks. Returns ``{row: {"rank", "low", "high", "n", "why"}}`` (``n`` = |S|); ``low`` and
    ``high`` are None, and ``why`` says why (else None), when there is one row, when fewer than 2 seeds are
    shared, or when the rows' seed sets differ: the rank is then a mean over seeds the resamples never draw,
    so an interval over the shared seeds need not hold it (A = {0, 1, 2: 1.0} and B = {0, 1, 2: 0.9, 3: 2.0,
    4: 2.0} rank B first, yet B ranks second in every resample of {0, 1, 2}). Raises ``ValueError`` for a
    value that is not a finite number, ``n_boot`` < 1 or ``level`` outside (0, 1)."""
    if not isinstance(rows, Mapping):
        raise ValueError(f"rows must be a mapping name -> {{seed: value}}, got {type(rows).__name__}")
    clean = {name: _row(values, f"rows[{name!r}]") for name, values in rows.items()}
    n_boot = _int_at_least(n_boot, 1, "n_boot")
    level = _open_unit(level, "level")
    names = sorted(clean, key=str)
    point = standing({k: safe_mean(list(v.values())) for k, v in clean.items() if v}, higher_is_better)
    shared = sorted(set.intersection(*(set(v) for v in clean.values()))) if clean else []
    why = (SEED_SETS_DIFFER if any(len(v) != len(shared) for v in clean.values())
           else "fewer than 2 seeds shared" if len(shared) < 2 else "one row" if len(names) < 2 else None)
    out = {k: {"rank": point.get(k), "low": None, "high": None, "n": len(shared), "why": why} for k in names}
    if why is not None:
        return out
    x = np.array([[clean[k][s] for s in shared] for k in names])  # [rows, n]
    idx = np.random.default_rng(int(seed)).integers(0, len(shared), size=(n_boot, len(shared)))
    scale = float(np.max(np.abs(x)))
    if scale * len(shared) >= HUGE:  # sums near the float limit would overflow: the same ranks on x / scale
        x = x / scale
    means = np.round((1.0 if higher_is_better else -1.0) * x[:, idx].mean(axis=2), 12)  # [rows, B]
    ranks = 1 + (means[None, :, :] > means[:, None, :]).sum(axis=1)  # [rows, B]: 1 + rows strictly better
    for i, k in enumerate(names):
        lo, hi = order_statistic_interval(ranks[i], level)
        out[k].update(low=int(lo), high=int(hi))
    return out


def dataset_rank_intervals(scores: Any, methods: Sequence[str], level: float = 0.95, n_boot: int = 10000,
                           seed: int = 0) -> dict[str, dict[str, Any]]:
    """Each method's place in a cross-dataset ranking and a bootstrap interval of it, over the datasets.

    ``scores[i, j]``: method j on dataset i, higher is better. The per-dataset ranks r_ij are
    :func:`average_ranks` (Demšar's, ties averaged); a method's place is :func:`standing` of the average ranks
    R_j (lower is better). Resample b draws N datasets with replacement (row b of
    ``numpy.random.default_rng(seed).integers(0, N, size=(n_boot, N))``), averages each method's ranks over
    them and places the methods again; the interval is :func:`order_statistic_interval` of a method's
    ``n_boot`` places. Returns ``{method: {"rank", "low", "high"}}``."""
    m = _matrix(scores)
    if m.shape[1] != len(methods):
        raise ValueError(f"methods must name the {m.shape[1]} columns of scores, got {len(methods)}")
    n_boot = _int_at_least(n_boot, 1, "n_boot")
    ranks = average_ranks(m, higher_is_better=True)  # [N, k]
    point = standing(dict(zip(methods, ranks.mean(axis=0))), higher_is_better=False)
    idx = np.random.default_rng(int(seed)).integers(0, m.shape[0], size=(n_boot, m.shape[0]))
    avg = np.round(ranks[idx].mean(axis=1), 12)  # [B, k]
    places = 1 + (avg[:, None, :] < avg[:, :, None]).sum(axis=2)  # [B, k]: 1 + methods with a smaller average
    out = {}
    for j, name in enumerate(methods):
        lo, hi = order_statistic_interval(places[:, j], level)
        out[name] = {"rank": point[name], "low": int(lo), "high": int(hi)}
    return out


def settle_ties(view: GroupView, level: float = 0.95, n_boot: int = 10000, seed: int = 0) -> None:
    """Per metric with a direction: every valid row against the column's best row (:func:`vs_best`:
    paired t-tests over shared seeds, Holm over the rows); the best is bold only when the second-best row
    (next mean, ties by id) is separable from it. For the primary metric the tests are kept (the table's
    "vs best" column) with every row's rank and its bootstrap interval over the seeds (:func:`rank_intervals`)."""
    for info in view.metrics:
        best = view.best.get(info.id)
        view.bold[info.id] = None
        if best is None:
            continue
        family = {o: v for o in view.valid_rows if (v := view.values.get((o, info.id)))}
        tests = vs_best(family, best)
        sign = 1.0 if info.direction == "higher" else -1.0
        second = min(tests, key=lambda o: (-sign * view.mean(o, info.id), o)) if tests else None
        view.separable[info.id] = second is None or tests[second]["tied"] is False
        view.bold[info.id] = best if view.separable[info.id] else None
        if info.id == view.primary:
            view.vs_best = tests
    p = view.primary
    info = view.info(p) if p else None
    if info is not None and info.direction is not None:
        family = {o: v for o in view.valid_rows if (v := view.values.get((o, p)))}
        if len(family) > 1:  # a row alone has nothing to be ranked against
            view.ranks = rank_intervals(family, info.direction == "higher", level=level, n_boot=n_boot, seed=seed)
