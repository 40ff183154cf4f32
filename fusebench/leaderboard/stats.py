"""Statistics for the leaderboards: confidence intervals over seeds, paired tests against a fixed
reference row with Holm's correction, and the Friedman / Nemenyi comparison of methods over several
datasets with the groups of its critical-difference (CD) diagram (drawn by
:func:`fusebench.leaderboard.plots.cd_diagram`).

Everything here uses numpy and scipy only (scipy imported by the functions that need it); nothing
imports torch. Inputs are checked: a bad argument raises one ``ValueError`` naming it and
what was expected.

Conventions:

* "seeds" are the independent repetitions of one benchmark cell; a row is ``{seed: value}``;
* p-values are two-sided;
* ranks: rank 1 = best, tied methods share the average of the ranks they span;
* every random draw comes from ``numpy.random.default_rng(seed)``: the same inputs give the same
  numbers on every run (numpy's ``Generator`` stream for ``integers`` has been stable across
  releases, though numpy does not promise it).

References: Efron & Tibshirani (1993), *An Introduction to the Bootstrap*, ch. 13 (percentile
interval); Holm (1979), "A simple sequentially rejective multiple test procedure", Scand. J. Statist.
6:65-70; Friedman (1937), JASA 32:675-701; Iman & Davenport (1980), Comm. Statist. A9:571-595;
Nemenyi (1963), *Distribution-free multiple comparisons*, PhD thesis; Demšar (2006), "Statistical
comparisons of classifiers over multiple data sets", JMLR 7:1-30.
"""

from __future__ import annotations

import functools
import math
import numbers
from typing import Any, Mapping, NamedTuple, Sequence

import numpy as np

__all__ = ["FriedmanResult", "average_ranks", "bootstrap_ci", "cd_groups", "friedman", "holm", "nemenyi_cd", "safe_mean",
           "nemenyi_q", "paired_vs_reference", "ranked_methods"]

#: differences whose spread is below this fraction of their largest magnitude are treated as constant
#: (what remains is floating-point rounding of equal differences, e.g. 0.7 - 0.6 vs 0.6 - 0.5)
CONSTANT_RTOL = 1e-12
#: past this magnitude a sum or square of finite values may overflow: such values are scaled by their largest
#: magnitude first (the statistics are the same up to rounding; ordinary values take the unscaled formulas)
HUGE = 1e150


def safe_mean(values: Sequence[float]) -> float:
    """The mean of a non-empty list of finite floats, ``math.fsum(values) / n``; values whose sum would overflow
    are summed divided by their largest magnitude and the mean scaled back (finite: it lies between them)."""
    try:
        return math.fsum(values) / len(values)
    except OverflowError:
        scale = max(abs(v) for v in values)
        return math.fsum(v / scale for v in values) / len(values) * scale


# ---------------------------------------------------------------------------------------------
# argument checks
# ---------------------------------------------------------------------------------------------
def _finite_vector(values: Any, name: str) -> np.ndarray:
    """``values`` as a 1-D float64 array of finite numbers, or one clear error naming ``name``."""
    if isinstance(values, (str, bytes)) or isinstance(values, Mapping):
        raise ValueError(f"{name} must be a sequence of numbers, got {type(values).__name__}")
    try:
        items = list(values)
    except TypeError:
        raise ValueError(f"{name} must be a sequence of numbers, got {type(values).__name__}") from None
    for i, v in enumerate(items):
        if isinstance(v, bool) or not isinstance(v, (numbers.Real, np.floating, np.integer)):
            raise ValueError(f"{name} must hold numbers; item {i} is {v!r}")
        if not math.isfinite(float(v)):
            raise ValueError(f"{name} must hold finite numbers (NaN and infinities are refused); item {i} is {v!r}")
    return np.asarray([float(v) for v in items], dtype=np.float64)


def _int_at_least(value: Any, low: int, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or int(value) < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    return int(value)


def _open_unit(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (numbers.Real, np.floating)) or not 0.0 < float(value) < 1.0:
        raise ValueError(f"{name} must be a number strictly between 0 and 1, got {value!r}")
    return float(value)


def _row(values: Any, name: str) -> dict[int, float]:
    """A row ``{seed: value}`` with finite values, or one clear error."""
    if not isinstance(values, Mapping):
        raise ValueError(f"{name} must be a mapping seed -> value, got {type(values).__name__}")
    out = {}
    for seed, v in values.items():
        number = isinstance(v, (numbers.Real, np.floating, np.integer)) and not isinstance(v, bool)
        if not number or not math.isfinite(float(v)):
            raise ValueError(f"{name} must map seeds to finite numbers; seed {seed!r} has {v!r}")
        out[seed] = float(v)
    return out


# ---------------------------------------------------------------------------------------------
# confidence interval of a mean over seeds
# ---------------------------------------------------------------------------------------------
def bootstrap_ci(values: Sequence[float], level: float = 0.95, n_boot: int = 10000,
                 seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap confidence interval of the mean of ``values`` (one value per seed).

    With x_1..x_n the values, draw ``n_boot`` resamples x*_b of size n with replacement (indices
    uniform on {1..n}, ``numpy.random.default_rng(seed).integers``), take their means
    m_b = (1/n) sum_i x*_{b,i}, and return the empirical quantiles of m_1..m_B at (1 - level)/2 and
    (1 + level)/2 (``numpy.quantile``, linear interpolation between order statistics, Hyndman & Fan
    type 7). Efron & Tibshirani (1993), ch. 13. Deterministic: the same ``seed`` gives the same
    interval. With one value, or all values equal, the interval is that value: (v, v). A bound is never -0.0
    (a board would print it as ``-0.00``): it is 0.0.

    With few seeds the percentile interval is too narrow (it ignores the uncertainty of the spread;
    with n = 2 it is [min, max] for any level above 50%): read it as a description of the seeds,
    not as a calibrated interval.

    Raises ``ValueError`` for an empty input, NaN or infinite values, ``level`` outside (0, 1),
    ``n_boot`` < 1."""
    x = _finite_vector(values, "values")
    level = _open_unit(level, "level")
    n_boot = _int_at_least(n_boot, 1, "n_boot")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise ValueError(f"seed must be an integer, got {seed!r}")
    if x.size == 0:
        raise ValueError("values must hold at least one number, got an empty sequence")
    if np.all(x == x[0]):  # + 0.0: -0.0 (the value, or a quantile of -0.0 means) is 0.0, never "-0.00" on a board
        return float(x[0]) + 0.0, float(x[0]) + 0.0
    rng = np.random.default_rng(int(seed))
    idx = rng.integers(0, x.size, size=(n_boot, x.size))
    scale = float(np.max(np.abs(x)))
    if scale * x.size < HUGE:
        means = x[idx].mean(axis=1)
    else:  # a sum of values near the float limit would overflow: resample x / scale (the same draws), then scale back
        means = (x / scale)[idx].mean(axis=1) * scale
    lo, hi = np.quantile(means, [(1.0 - level) / 2.0, (1.0 + level) / 2.0])
    return float(lo) + 0.0, float(hi) + 0.0


# ---------------------------------------------------------------------------------------------
# multiple testing
# ---------------------------------------------------------------------------------------------
def holm(pvalues: Mapping[str, float]) -> dict[str, float]:
    """Holm-Bonferroni step-down adjusted p-values (Holm 1979).

    With the m p-values sorted ascending, p_(1) <= ... <= p_(m), the adjusted values are

        p~_(i) = min(1, max_{j <= i} (m - j + 1) p_(j)),

    monotone in i and capped at 1; rejecting the hypotheses with p~ <= alpha controls the
    family-wise error rate at alpha under any dependence. Tied p-values get equal adjusted values
    (whatever their order). Returns ``{name: adjusted p}`` for the same names; ``{}`` for ``{}``.

    Raises ``ValueError`` for a p-value that is not a number in [0, 1]."""
    if not isinstance(pvalues, Mapping):
        raise ValueError(f"pvalues must be a mapping name -> p-value, got {type(pvalues).__name__}")
    for k, p in pvalues.items():
        if isinstance(p, bool) or not isinstance(p, (numbers.Real, np.floating)) or not 0.0 <= float(p) <= 1.0:
            raise ValueError(f"pvalues must map names to numbers in [0, 1]; {k!r} has {p!r}")
    order = sorted(pvalues, key=lambda k: (float(pvalues[k]), str(k)))
    m = len(order)
    out: dict[str, float] = {}
    running = 0.0
    for j, k in enumerate(order):  # j = 0 .. m - 1: multiplier m - j
        running = max(running, min(1.0, (m - j) * float(pvalues[k])))
        out[k] = running
    return {k: out[k] for k in pvalues}


def paired_vs_reference(rows: Mapping[str, Mapping[int, float]], reference: str) -> dict[str, dict[str, Any]]:
    """Two-sided paired t-tests of every row against the fixed ``reference`` row, Holm-corrected.

    ``rows`` maps a row name to ``{seed: value}``. For every row other than ``reference``, over the
    n seeds it shares with the reference (the others are left out), with differences
    d_s = row[s] - reference[s]:

        mean_diff = (1/n) sum_s d_s,   sd = sqrt(sum_s (d_s - mean_diff)^2 / (n - 1)),
        t = mean_diff / (sd / sqrt(n)),   p = 2 P(T_{n-1} >= |t|)  (``scipy.stats.t.sf``)

    (Student's t with n - 1 degrees of freedom: the statistic and p-value of
    ``scipy.stats.ttest_rel(row, reference)``). When the differences do not vary (their spread is
    below ``CONSTANT_RTOL`` times their largest magnitude, i.e. equal up to rounding) the t statistic
    is undefined; by convention: all zero -> t = 0, p = 1 (the row equals the reference on every
    shared seed); the same nonzero difference -> t = +-inf, p = 0, with a ``note`` saying so. With
    fewer than 2 shared seeds t, p and p_holm are None (``mean_diff`` is given for 1 seed, None for
    0).

    ``p_holm``: :func:`holm` over the family of rows that have a p-value (every row compared, the
    reference excluded).

    Returns ``{row: {"mean_diff", "t", "p", "p_holm", "n", "note"}}`` for every row but the
    reference, in sorted order of the names; ``note`` is "" unless a convention above applied.

    Raises ``ValueError`` when ``reference`` is not a row, or a value is not a finite number."""
    if not isinstance(rows, Mapping):
        raise ValueError(f"rows must be a mapping name -> {{seed: value}}, got {type(rows).__name__}")
    if reference not in rows:
        raise ValueError(f"reference must name one of the rows {sorted(map(str, rows))}, got {reference!r}")
    clean = {name: _row(values, f"rows[{name!r}]") for name, values in rows.items()}
    ref = clean[reference]
    from scipy.stats import t as student_t

    out: dict[str, dict[str, Any]] = {}
    for name in sorted(clean, key=str):
        if name == reference:
            continue
        seeds = sorted(set(clean[name]) & set(ref))
        n = len(seeds)
        unit = max((max(abs(clean[name][s]), abs(ref[s])) for s in seeds), default=0.0)
        # values near the float limit: the differences of x / unit (t is the same for any positive unit; the mean
        # difference is scaled back, infinite only where it lies beyond the float range)
        unit = unit if unit >= HUGE else 1.0
        d = [clean[name][s] / unit - ref[s] / unit for s in seeds]
        res: dict[str, Any] = {"mean_diff": math.fsum(d) / n * unit if n else None, "t": None, "p": None,
                               "p_holm": None, "n": n, "note": ""}
        if n < 2:
            res["note"] = f"{n} seed(s) shared with the reference: no test"
        else:
            mean = math.fsum(d) / n
            spread = max(abs(v - mean) for v in d)
            scale = max(abs(v) for v in d)
            if spread <= CONSTANT_RTOL * scale or scale == 0.0:
                if scale == 0.0:
                    res.update(mean_diff=0.0, t=0.0, p=1.0)
                    res["note"] = "equal to the reference on every shared seed: p = 1"
                else:
                    res.update(t=math.copysign(math.inf, mean), p=0.0)
                    res["note"] = ("the same nonzero difference on every shared seed (zero variance): t infinite, "
                                   "p = 0 by convention")
            else:
                sd = math.sqrt(math.fsum((v - mean) ** 2 for v in d) / (n - 1))
                t = mean / (sd / math.sqrt(n))
                p = float(2.0 * student_t.sf(abs(t), n - 1))
                res.update(t=t, p=min(1.0, max(0.0, p)))
        out[name] = res
    adjusted = holm({k: v["p"] for k, v in out.items() if v["p"] is not None})
    for k, p in adjusted.items():
        out[k]["p_holm"] = p
    return out


# ---------------------------------------------------------------------------------------------
# several methods over several datasets
# ---------------------------------------------------------------------------------------------
class FriedmanResult(NamedTuple):
    """Friedman's test of k methods over N datasets (:func:`friedman`)."""

    statistic: float  # chi^2_F, tie-corrected (scipy.stats.friedmanchisquare's value)
    pvalue: float  # P(chi^2_{k-1} >= statistic)
    avg_ranks: tuple[float, ...]  # per method (column order), rank 1 = best
    iman_davenport: float  # F_F = (N - 1) chi^2_F / (N (k - 1) - chi^2_F)
    iman_davenport_p: float  # P(F_{k-1, (k-1)(N-1)} >= F_F)
    n_datasets: int
    n_methods: int


def average_ranks(scores: Any, higher_is_better: bool = True) -> np.ndarray:
    """Per-dataset ranks of a [datasets x methods] matrix: rank 1 = best, ties get the average rank."""
    from scipy.stats import rankdata

    m = _matrix(scores)
    return np.vstack([rankdata(-row if higher_is_better else row, method="average") for row in m])


def _matrix(scores: Any) -> np.ndarray:
    try:
        raw = np.asarray(scores)
    except (TypeError, ValueError):  # ragged rows
        raise ValueError("scores must be a [datasets x methods] matrix of numbers (rows of equal length)") from None
    if raw.dtype.kind not in "iuf" or raw.dtype == bool:
        raise ValueError(f"scores must be a [datasets x methods] matrix of numbers, got elements of type {raw.dtype}")
    m = raw.astype(np.float64)
    if m.ndim != 2:
        raise ValueError(f"scores must be a 2-D [datasets x methods] matrix, got {m.ndim} dimension(s)")
    if not np.all(np.isfinite(m)):
        i, j = np.argwhere(~np.isfinite(m))[0]
        raise ValueError(f"scores must hold finite numbers; row {i}, column {j} is {float(m[i, j])!r}")
    return m


def friedman(scores: Any, higher_is_better: bool = True) -> FriedmanResult:
    """Friedman's test that k methods perform equally over N datasets (Friedman 1937; Demšar 2006, Sec. 3.2.2).

    ``scores[i, j]`` is method j's score on dataset i (``higher_is_better`` says which way is
    better). Methods are ranked within each dataset, r_ij (rank 1 = best, ties: average rank), and
    R_j = (1/N) sum_i r_ij are the average ranks. The statistic reported is

        chi^2_F = [12 N / (k (k + 1))] [sum_j R_j^2 - k (k + 1)^2 / 4] / C,
        C = 1 - sum_i sum_{tie groups g in dataset i} (t_g^3 - t_g) / (N k (k^2 - 1)),

    the tie-corrected statistic of ``scipy.stats.friedmanchisquare`` (C = 1 without ties, where it is
    Demšar's Eq. for chi^2_F), referred to chi^2 with k - 1 degrees of freedom. Also Iman &
    Davenport's less conservative F_F = (N - 1) chi^2_F / (N (k - 1) - chi^2_F) with (k - 1,
    (k - 1)(N - 1)) degrees of freedom (F_F = inf, p = 0 when the denominator is 0: every dataset
    ranks the methods the same way). When every dataset ties all methods (C = 0) the statistic is 0
    and p = 1.

    Raises ``ValueError`` unless ``scores`` is a finite matrix with N >= 2 rows and k >= 2 columns."""
    m = _matrix(scores)
    n, k = m.shape
    if n < 2 or k < 2:
        raise ValueError(f"scores must have at least 2 datasets (rows) and 2 methods (columns), got {n} x {k}")
    from scipy import stats as st

    ranks = average_ranks(m, higher_is_better)
    avg = ranks.mean(axis=0)
    ties = 0.0
    for row in ranks:
        _, counts = np.unique(row, return_counts=True)
        ties += float(np.sum(counts.astype(np.float64) ** 3 - counts))
    c = 1.0 - ties / (n * k * (k * k - 1.0))
    raw = 12.0 * n / (k * (k + 1.0)) * (float(np.sum(avg ** 2)) - k * (k + 1.0) ** 2 / 4.0)
    if c <= 0.0:
        stat, p = 0.0, 1.0
    else:
        stat = max(0.0, raw / c)
        p = float(st.chi2.sf(stat, k - 1))
    denom = n * (k - 1.0) - stat
    if denom <= 1e-12 * n * (k - 1.0):
        f_id, p_id = math.inf, 0.0
    else:
        f_id = (n - 1.0) * stat / denom
        p_id = float(st.f.sf(f_id, k - 1, (k - 1) * (n - 1)))
    return FriedmanResult(float(stat), p, tuple(float(r) for r in avg), float(f_id), p_id, n, k)


@functools.lru_cache(maxsize=64)
def _q(k: int, alpha: float) -> float:
    from scipy.stats import studentized_range

    return float(studentized_range.ppf(1.0 - alpha, k, np.inf) / math.sqrt(2.0))


def nemenyi_q(num_methods: int, alpha: float = 0.05) -> float:
    """Nemenyi's critical value q_alpha = (studentized range quantile, k means, infinite df) / sqrt(2)
    (Demšar 2006, Table 5a for alpha = 0.05: 1.960 2.343 2.569 2.728 2.850 2.949 3.031 3.102 3.164 for
    k = 2..10)."""
    k = _int_at_least(num_methods, 2, "num_methods")
    return _q(k, _open_unit(alpha, "alpha"))


def nemenyi_cd(num_methods: int, num_datasets: int, alpha: float = 0.05) -> float:
    """Critical difference of the Nemenyi post-hoc test (Nemenyi 1963; Demšar 2006, Sec. 3.2.2):

        CD = q_alpha sqrt(k (k + 1) / (6 N)),
        q_alpha = studentized_range.ppf(1 - alpha, k, inf) / sqrt(2),

    for k methods over N datasets: two methods whose average ranks differ by at least CD perform
    differently at level alpha (all pairs compared).

    Raises ``ValueError`` unless k >= 2, N >= 1 are integers and 0 < alpha < 1."""
    k = _int_at_least(num_methods, 2, "num_methods")
    n = _int_at_least(num_datasets, 1, "num_datasets")
    return nemenyi_q(k, alpha) * math.sqrt(k * (k + 1.0) / (6.0 * n))


def ranked_methods(avg_ranks: Mapping[str, float]) -> list[tuple[str, float]]:
    """``avg_ranks`` as (method, average rank) pairs sorted by rank, ties by name; the order of a CD
    diagram. Raises ``ValueError`` for fewer than 2 methods or a rank that is not a finite number."""
    if not isinstance(avg_ranks, Mapping) or len(avg_ranks) < 2:
        raise ValueError("avg_ranks must be a mapping method -> average rank with at least 2 methods")
    for name, r in avg_ranks.items():
        if isinstance(r, bool) or not isinstance(r, (numbers.Real, np.floating)) or not math.isfinite(float(r)):
            raise ValueError(f"avg_ranks must map methods to finite numbers; {name!r} has {r!r}")
    return sorted(((str(k), float(v)) for k, v in avg_ranks.items()), key=lambda kv: (kv[1], kv[0]))


def _check_cd(cd: Any) -> float:
    if isinstance(cd, bool) or not isinstance(cd, (numbers.Real, np.floating)) or not (0.0 < float(cd) < math.inf):
        raise ValueError(f"cd must be a finite number > 0, got {cd!r}")
    return float(cd)


def cd_groups(avg_ranks: Mapping[str, float], cd: float) -> list[list[str]]:
    """The bars of a CD diagram: the maximal runs of consecutive methods (sorted by average rank,
    ties by name) whose first and last ranks differ by less than ``cd``, i.e. groups not
    significantly different; runs of a single method and runs inside a longer one are left out.
    Each group lists its methods best first; groups are ordered by their best method."""
    order = ranked_methods(avg_ranks)
    cd = _check_cd(cd)
    out: list[list[str]] = []
    last_end = -1
    for i in range(len(order)):
        j = i
        while j + 1 < len(order) and order[j + 1][1] - order[i][1] < cd:
            j += 1
        if j > i and j > last_end:  # not inside the previous (longer or equal) run
            out.append([name for name, _ in order[i:j + 1]])
            last_end = j
    return out
