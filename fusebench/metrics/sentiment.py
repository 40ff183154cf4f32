"""Multimodal sentiment metrics: CMU-MOSI/MOSEI (labels in [-3, 3]) and CH-SIMS (labels in [-1, 1]).

Conventions follow the MMSA toolkit's regression evaluation (https://github.com/thuiar/MMSA,
``src/MMSA/utils/metricsTop.py``; platform paper: Mao et al., "M-SENA: An Integrated Platform for
Multimodal Sentiment Analysis", ACL 2022 demos, arXiv:2203.12441; the usual MOSI/MOSEI/SIMS tables),
with every variant the field uses named explicitly:

* ``mae`` = mean |y_pred - y_true| (no clipping); ``corr`` = Pearson r (NaN when either is constant);
* ``acc7`` = exact match of round(clip(y, -3, 3)) — NumPy rounding, i.e. round half to even
  (0.5 -> 0, 1.5 -> 2, -2.5 -> -2); ``acc5`` the same with clip to [-2, 2];
* ``acc2_has0`` = mean[(y_pred >= 0) == (y_true >= 0)] over all samples ("negative / non-negative"),
  ``f1_has0`` its weighted F1;
* ``acc2_non0`` = the same with ``> 0`` after dropping samples whose y_true == 0 ("negative /
  positive"), ``f1_non0`` its weighted F1;
* ``acc2_nonpos`` = mean[(y_pred > 0) == (y_true > 0)] over all samples ("non-positive / positive");
* F1 is the support-weighted F1 called as F1(y_true, y_pred) (many public repositories swap them).

CH-SIMS (``sims_``): both arrays are clipped to [-1, 1] first; classes are left-open bins
``(lo, hi]``: ``sims_acc2`` cuts at 0 (bins (-1.01, 0], (0, 1.01]), ``sims_acc3`` at -0.1, 0.1,
``sims_acc5`` at -0.7, -0.1, 0.1, 0.7; ``sims_f1`` = weighted F1 on the acc2 bins; ``sims_mae`` and
``sims_corr`` on the clipped values.

Call form: ``get(id)(y_pred, y_true) -> float``. Shape: ``y_pred`` [n], ``y_true`` [n] (numpy or
torch, any real dtype); empty input raises ValueError.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fusebench.metrics import register
from fusebench.metrics.arrays import pair
from fusebench.metrics.classification import weighted_f1

SIMS_CUTS = {2: (0.0,), 3: (-0.1, 0.1), 5: (-0.7, -0.1, 0.1, 0.7)}


def _pearson(p: np.ndarray, t: np.ndarray) -> float:
    """Pearson's r; NaN when either input is constant (decided on the values: the centred sums of a constant
    float64 array are rounding noise, not 0, and gave 0.0, or 1.0 for two constants)."""
    if np.all(p == p[0]) or np.all(t == t[0]):
        return float("nan")
    dp, dt = p - p.mean(), t - t.mean()
    denom = np.sqrt((dp * dp).sum() * (dt * dt).sum())
    return float("nan") if denom == 0 else float((dp * dt).sum() / denom)


@register("mae")
def mae(y_pred: Any, y_true: Any) -> float:
    """Mean absolute error (no clipping)."""
    p, t = pair(y_pred, y_true, "mae")
    return float(np.abs(p - t).mean())


@register("corr")
def corr(y_pred: Any, y_true: Any) -> float:
    """Pearson correlation between predictions and labels (NaN if either is constant)."""
    p, t = pair(y_pred, y_true, "corr")
    return _pearson(p, t)


def _acc_rounded(y_pred: Any, y_true: Any, bound: float, metric: str) -> float:
    p, t = pair(y_pred, y_true, metric)
    # np.round rounds half to even (banker's rounding), the convention of the published numbers
    return float((np.round(np.clip(p, -bound, bound)) == np.round(np.clip(t, -bound, bound))).mean())


@register("acc7")
def acc7(y_pred: Any, y_true: Any) -> float:
    """7-class accuracy: clip to [-3, 3], round half to even, exact match."""
    return _acc_rounded(y_pred, y_true, 3.0, "acc7")


@register("acc5")
def acc5(y_pred: Any, y_true: Any) -> float:
    """5-class accuracy: clip to [-2, 2], round half to even, exact match."""
    return _acc_rounded(y_pred, y_true, 2.0, "acc5")


@register("acc2_has0")
def acc2_has0(y_pred: Any, y_true: Any) -> float:
    """Binary accuracy, negative vs non-negative (>= 0), over all samples."""
    p, t = pair(y_pred, y_true, "acc2_has0")
    return float(((p >= 0) == (t >= 0)).mean())


@register("f1_has0")
def f1_has0(y_pred: Any, y_true: Any) -> float:
    """Weighted F1(y_true >= 0, y_pred >= 0) over all samples."""
    p, t = pair(y_pred, y_true, "f1_has0")
    return weighted_f1(t >= 0, p >= 0)


def _non0(y_pred: Any, y_true: Any, metric: str) -> tuple[np.ndarray, np.ndarray]:
    p, t = pair(y_pred, y_true, metric)
    keep = t != 0
    if not keep.any():
        raise ValueError(f"{metric}: every y_true is 0; the non-zero binary metric drops them all")
    return p[keep] > 0, t[keep] > 0


@register("acc2_non0")
def acc2_non0(y_pred: Any, y_true: Any) -> float:
    """Binary accuracy, negative vs positive (> 0), samples with y_true == 0 dropped."""
    p, t = _non0(y_pred, y_true, "acc2_non0")
    return float((p == t).mean())


@register("f1_non0")
def f1_non0(y_pred: Any, y_true: Any) -> float:
    """Weighted F1(y_true > 0, y_pred > 0) with samples whose y_true == 0 dropped."""
    p, t = _non0(y_pred, y_true, "f1_non0")
    return weighted_f1(t, p)


@register("acc2_nonpos")
def acc2_nonpos(y_pred: Any, y_true: Any) -> float:
    """Binary accuracy, non-positive vs positive (> 0), over all samples."""
    p, t = pair(y_pred, y_true, "acc2_nonpos")
    return float(((p > 0) == (t > 0)).mean())


# -- CH-SIMS -----------------------------------------------------------------------------------
def _sims(y_pred: Any, y_true: Any, metric: str) -> tuple[np.ndarray, np.ndarray]:
    p, t = pair(y_pred, y_true, metric)
    return np.clip(p, -1.0, 1.0), np.clip(t, -1.0, 1.0)


def sims_bins(x: np.ndarray, classes: int) -> np.ndarray:
    """Class of each clipped value in the left-open bins (lo, hi] of ``SIMS_CUTS[classes]``."""
    # side="left" counts the cuts strictly below x, so a value equal to a cut falls in the lower bin
    return np.searchsorted(np.asarray(SIMS_CUTS[classes]), x, side="left")


def _sims_acc(y_pred: Any, y_true: Any, classes: int) -> float:
    p, t = _sims(y_pred, y_true, f"sims_acc{classes}")
    return float((sims_bins(p, classes) == sims_bins(t, classes)).mean())


@register("sims_acc2")
def sims_acc2(y_pred: Any, y_true: Any) -> float:
    """CH-SIMS 2-class accuracy on the bins (-1.01, 0], (0, 1.01] after clipping to [-1, 1]."""
    return _sims_acc(y_pred, y_true, 2)


@register("sims_acc3")
def sims_acc3(y_pred: Any, y_true: Any) -> float:
    """CH-SIMS 3-class accuracy, cuts at -0.1 and 0.1 (bins closed on the right)."""
    return _sims_acc(y_pred, y_true, 3)


@register("sims_acc5")
def sims_acc5(y_pred: Any, y_true: Any) -> float:
    """CH-SIMS 5-class accuracy, cuts at -0.7, -0.1, 0.1, 0.7 (bins closed on the right)."""
    return _sims_acc(y_pred, y_true, 5)


@register("sims_f1")
def sims_f1(y_pred: Any, y_true: Any) -> float:
    """CH-SIMS weighted F1(y_true, y_pred) on the 2-class bins."""
    p, t = _sims(y_pred, y_true, "sims_f1")
    return weighted_f1(sims_bins(t, 2), sims_bins(p, 2))


@register("sims_mae")
def sims_mae(y_pred: Any, y_true: Any) -> float:
    """CH-SIMS mean absolute error on values clipped to [-1, 1]."""
    p, t = _sims(y_pred, y_true, "sims_mae")
    return float(np.abs(p - t).mean())


@register("sims_corr")
def sims_corr(y_pred: Any, y_true: Any) -> float:
    """CH-SIMS Pearson correlation on values clipped to [-1, 1]."""
    p, t = _sims(y_pred, y_true, "sims_corr")
    return _pearson(p, t)


__all__ = [
    "acc2_has0", "acc2_non0", "acc2_nonpos", "acc5", "acc7", "corr", "f1_has0", "f1_non0", "mae",
    "sims_acc2", "sims_acc3", "sims_acc5", "sims_bins", "sims_corr", "sims_f1", "sims_mae",
]
