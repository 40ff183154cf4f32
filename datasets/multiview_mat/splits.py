"""Multi-view splits and standardisation: there is no official split, so seeded stratified
train/val/test splits are drawn (:func:`stratified_split`, fractions from :func:`parse_fractions`,
default 0.6/0.2/0.2), and each view is z-scored with the train split's statistics
(:func:`zscore_stats`). :func:`min_class_size` is the class size every split is sure to receive a
sample from, :func:`view_problem` why a view cannot be used (empty, constant on train, overflowing).
Pure functions, tested on their own.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..base import DatasetError

SPLIT_NAMES = ("train", "val", "test")
DEFAULT_FRACTIONS = (0.6, 0.2, 0.2)


def parse_fractions(value: Any) -> tuple[float, float, float]:
    if value is None:
        return DEFAULT_FRACTIONS
    if isinstance(value, dict):
        extra = set(value) - set(SPLIT_NAMES)
        if extra or len(value) != 3:
            raise DatasetError(f"multiview_mat: split_fractions {value!r} must have exactly the keys {list(SPLIT_NAMES)}")
        value = [value[s] for s in SPLIT_NAMES]
    try:
        fr = tuple(float(v) for v in value)
    except (TypeError, ValueError):
        raise DatasetError(f"multiview_mat: split_fractions {value!r} must be three numbers (train, val, test)") from None
    if len(fr) != 3 or any(not np.isfinite(v) or v <= 0 for v in fr) or abs(sum(fr) - 1.0) > 1e-6:
        raise DatasetError(f"multiview_mat: split_fractions {value!r} must be three positive numbers "
                           "(train, val, test) summing to 1")
    return fr  # type: ignore[return-value]


def stratified_split(y: np.ndarray, fractions: tuple[float, float, float], seed: int) -> dict[str, np.ndarray]:
    """Seeded stratified split of the sample indices: ``{"train": idx, "val": idx, "test": idx}``.

    Per class (classes in ascending order) the members are shuffled with one generator seeded by
    ``seed``; split s receives floor(f_s n_c) or that + 1 of them: the n_c - sum floor(...) leftover
    samples go to the splits with the largest deficit f_s * (samples seen so far) - (given so far),
    ties to the earlier split. Each split's indices are returned in ascending order.
    """
    return dict(zip(SPLIT_NAMES, stratified_parts(y, fractions, seed)))


def stratified_parts(y: np.ndarray, fractions: Any, seed: int) -> list[np.ndarray]:
    """:func:`stratified_split` for any number of parts (``fractions`` summing to 1): one sorted index array
    per fraction. With three fractions it is :func:`stratified_split`'s split, draw for draw."""
    rng = np.random.default_rng(seed)
    f = np.asarray(fractions, dtype=np.float64)
    k = f.size
    given = np.zeros(k, dtype=np.int64)
    seen = 0
    parts: list[list[np.ndarray]] = [[] for _ in range(k)]
    for c in np.unique(y):
        members = np.flatnonzero(y == c)
        members = members[rng.permutation(members.size)]
        n_c = members.size
        base = np.floor(f * n_c + 1e-9).astype(np.int64)
        seen += n_c
        deficit = f * seen - (given + base)
        extra = n_c - int(base.sum())
        order = sorted(range(k), key=lambda s: (-deficit[s], s))
        counts = base.copy()
        for s in order[:extra]:
            counts[s] += 1
        given += counts
        start = 0
        for s in range(k):
            parts[s].append(members[start : start + counts[s]])
            start += counts[s]
    return [np.sort(np.concatenate(p)) if p else np.zeros(0, dtype=np.int64) for p in parts]


def outer_split(y: np.ndarray, fractions: tuple[float, float, float], test_seed: int, seed: int,
                test: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """A fixed outer test split and a per-seed train / val partition of the rest.

    The test split is ``test`` when given (a file's shipped test rows), else the ``"test"`` part of
    :func:`stratified_split` with ``test_seed`` -- the same for every run and selection seed of a dataset.
    The other samples are split into train and val by :func:`stratified_parts` with ``seed``, in the
    proportion ``f_train : f_val``. So no seed's train or val split ever holds a test sample, and the
    hyper-parameter trials (selection seeds) draw their train / val from the same non-test samples as
    the evaluation seeds. Returns ``{"train", "val", "test"}``, each sorted."""
    test = np.sort(np.asarray(test if test is not None else stratified_split(y, fractions, test_seed)["test"],
                              dtype=np.int64))
    rest = np.setdiff1d(np.arange(y.size), test)
    f_train, f_val = float(fractions[0]), float(fractions[1])
    tr, va = stratified_parts(y[rest], (f_train / (f_train + f_val), f_val / (f_train + f_val)), seed)
    return {"train": rest[tr], "val": rest[va], "test": test}


def min_class_size(fractions: tuple[float, float, float]) -> int:
    """The fewest samples a class needs so that :func:`stratified_split` puts at least one of them in
    every split whatever the other classes are: floor(f_s n_c) >= 1 for each fraction f_s (the
    leftover samples follow the other classes' deficits, so below this a class may miss a split).
    0.6/0.2/0.2 -> 5; 0.5/0.25/0.25 -> 4; 0.8/0.1/0.1 -> 10."""
    f = np.asarray(fractions, dtype=np.float64)

    def enough(n: int) -> bool:
        return bool(np.all(np.floor(f * n + 1e-9) >= 1))

    n = max(1, int(np.ceil(1.0 / f.min() - 1e-6)))
    while not enough(n):
        n += 1
    while n > 1 and enough(n - 1):
        n -= 1
    return n


def view_problem(x: np.ndarray, train: np.ndarray, standardize: bool = True) -> str | None:
    """Why the view ``x`` [N, d] cannot be used, or None: it has no feature; it is constant on the
    ``train`` rows (every feature takes one value there, so z-scoring makes it all zeros and it carries
    nothing); its train mean or standard deviation overflows (e.g. values near 1e300, which z-score to
    zeros or NaN); or its values (standardised with the train statistics when ``standardize``) do not
    fit in float32, the dtype of the samples."""
    n, d = x.shape
    if d == 0:
        return f"has 0 features (shape {n} x 0); every view needs at least one feature"
    xt = x[train]
    big = float(np.finfo(np.float32).max)
    with np.errstate(over="ignore", invalid="ignore"):
        lo_t, hi_t = xt.min(axis=0), xt.max(axis=0)
        constant = lo_t == hi_t
        if constant.all():
            return (f"is constant on the train split: each of its {d} feature(s) takes a single value over the "
                    f"{xt.shape[0]} train samples, so it carries no information (standardised it is all zeros)")
        lo, hi = x.min(axis=0), x.max(axis=0)
        absmax = float(np.maximum(np.abs(lo), np.abs(hi)).max())
        if not standardize:
            if absmax > big:
                return (f"has values up to {absmax:.3g} in magnitude, beyond the float32 range (+-{big:.3g}) of the "
                        "samples (standardize=False)")
            return None
        mean, std = xt.mean(axis=0), xt.std(axis=0)
        bad = ~constant & ~(np.isfinite(mean) & np.isfinite(std))
        if bad.any():
            return (f"overflows when standardised: the train mean or standard deviation of {int(bad.sum())} of its "
                    f"{d} feature(s) is not finite (values up to {absmax:.3g} in magnitude)")
        live = ~constant & (std > 0)
        z = np.maximum(np.abs(hi - mean), np.abs(lo - mean))[live] / std[live]
        if z.size and not (np.all(np.isfinite(z)) and z.max() <= big):
            return (f"is not finite after standardisation: a feature's values lie {z.max():.3g} train standard "
                    "deviations from its train mean, beyond float32")
    return None


def zscore_stats(x_train: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-feature mean and scale from the train rows; scale is inf for features constant on train
    (so they standardise to exactly 0)."""
    mean = x_train.mean(axis=0)
    std = x_train.std(axis=0)
    constant = (x_train.max(axis=0) == x_train.min(axis=0)) if x_train.shape[0] else np.ones(x_train.shape[1], bool)
    scale = np.where(constant | (std == 0), np.inf, std)
    mean = np.where(constant, 0.0, mean)
    return mean, scale
