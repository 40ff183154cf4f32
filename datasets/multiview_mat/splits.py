"""Multi-view splits and standardisation: there is no official split, so seeded stratified
train/val/test splits are drawn (:func:`stratified_split`, fractions from :func:`parse_fractions`,
default 0.6/0.2/0.2), and each view is z-scored with the train split's statistics
(:func:`zscore_stats`). Pure functions, tested on their own.
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
    rng = np.random.default_rng(seed)
    f = np.asarray(fractions, dtype=np.float64)
    given = np.zeros(3, dtype=np.int64)
    seen = 0
    parts: list[list[np.ndarray]] = [[], [], []]
    for c in np.unique(y):
        members = np.flatnonzero(y == c)
        members = members[rng.permutation(members.size)]
        n_c = members.size
        base = np.floor(f * n_c + 1e-9).astype(np.int64)
        seen += n_c
        deficit = f * seen - (given + base)
        extra = n_c - int(base.sum())
        order = sorted(range(3), key=lambda s: (-deficit[s], s))
        counts = base.copy()
        for s in order[:extra]:
            counts[s] += 1
        given += counts
        start = 0
        for s in range(3):
            parts[s].append(members[start : start + counts[s]])
            start += counts[s]
    return {name: np.sort(np.concatenate(parts[s])) for s, name in enumerate(SPLIT_NAMES)}


def zscore_stats(x_train: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-feature mean and scale from the train rows; scale is inf for features constant on train
    (so they standardise to exactly 0)."""
    mean = x_train.mean(axis=0)
    std = x_train.std(axis=0)
    constant = (x_train.max(axis=0) == x_train.min(axis=0)) if x_train.shape[0] else np.ones(x_train.shape[1], bool)
    scale = np.where(constant | (std == 0), np.inf, std)
    mean = np.where(constant, 0.0, mean)
    return mean, scale
