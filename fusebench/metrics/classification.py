"""Generic classification metrics: ``acc``, ``bacc``, ``mf1`` and ``kappa``, and the confusion-matrix helpers
the other metric modules share (per-class F1, support-weighted F1).

Call form: ``get(id)(y_pred, y_true) -> float`` with 1-D integer class ids (numpy or torch, any dtype
holding integers). Every metric is computed on one confusion matrix ``M[c_true, c_pred]`` over the labels
L = the classes seen in ``y_true`` or ``y_pred`` (scikit-learn's convention), n = sum of M:

* ``acc`` (accuracy) = trace(M) / n: the fraction of samples whose predicted class is the true class;
* ``bacc`` (balanced accuracy) = the mean, over the classes c with support (sum_j M[c, j] > 0), of the
  recall_c = M[c, c] / sum_j M[c, j]; a class predicted but never true does not enter the mean;
* ``mf1`` (macro F1) = the unweighted mean over L of F1_c = 2 M[c, c] / (sum_j M[c, j] + sum_i M[i, c])
  (0 when both sums are 0); a class predicted but never true counts, with F1 = 0;
* ``kappa`` (Cohen's unweighted kappa) = (p_o - p_e) / (1 - p_e), p_o = acc, the chance agreement
  p_e = sum_c (row_c / n)(col_c / n) with row_c = sum_j M[c, j], col_c = sum_i M[i, c]; NaN when
  p_e = 1 (both raters constant);
* :func:`class_f1` (a helper: per-class ids such as the sleep stages' ``f1_w`` register it) = the F1 of
  one class c one-vs-rest, 2 TP / (#predicted c + #true c); NaN when c occurs in neither array;
* :func:`weighted_f1` (a helper: the sentiment module's ``f1_*``) = sum_c F1_c * support_c / n.

Shape: ``y_pred`` [n], ``y_true`` [n]; n >= 1 (empty input raises ValueError), finite, integer-valued.
The sleep-staging benchmarks report these on predictions pooled over all test subjects
(:mod:`fusebench.metrics.sleep`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fusebench.metrics import register
from fusebench.metrics.arrays import pair


def confusion(y_true: np.ndarray, y_pred: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(labels [L], M [L, L]) with ``M[i, j]`` = #samples of true label i predicted as j."""
    labels = np.union1d(y_true, y_pred)
    ti = np.searchsorted(labels, y_true)
    pi = np.searchsorted(labels, y_pred)
    m = np.zeros((labels.size, labels.size), dtype=np.int64)
    np.add.at(m, (ti, pi), 1)
    return labels, m


def f1_from_confusion(m: np.ndarray) -> np.ndarray:
    """Per-class F1 = 2 TP / (support + predicted count); 0 where both are 0."""
    tp = np.diag(m).astype(np.float64)
    denom = m.sum(axis=1) + m.sum(axis=0)
    return np.divide(2 * tp, denom, out=np.zeros_like(tp), where=denom > 0)


def weighted_f1(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """Support-weighted F1 (scikit-learn ``average="weighted"``), called as (y_true, y_pred)."""
    _, m = confusion(y_true, y_pred)
    support = m.sum(axis=1)
    return float((f1_from_confusion(m) * support).sum() / support.sum())


@register("acc")
def acc(y_pred: Any, y_true: Any) -> float:
    """Accuracy: fraction of samples whose predicted class equals the true class."""
    p, t = pair(y_pred, y_true, "acc", integer=True)
    return float((p == t).mean())


@register("bacc")
def bacc(y_pred: Any, y_true: Any) -> float:
    """Balanced accuracy: mean recall over the classes present in y_true."""
    p, t = pair(y_pred, y_true, "bacc", integer=True)
    labels, m = confusion(t, p)
    support = m.sum(axis=1)
    has = support > 0
    return float((np.diag(m)[has] / support[has]).mean())


@register("mf1")
def mf1(y_pred: Any, y_true: Any) -> float:
    """Macro F1: unweighted mean of per-class F1 over the classes seen in y_true or y_pred."""
    p, t = pair(y_pred, y_true, "mf1", integer=True)
    return float(f1_from_confusion(confusion(t, p)[1]).mean())


@register("kappa")
def kappa(y_pred: Any, y_true: Any) -> float:
    """Cohen's kappa (unweighted): (p_o - p_e) / (1 - p_e); NaN only when p_e = 1 exactly (both raters give one
    and the same class), decided on the integer counts (sum of row x column totals = n^2), not by a tolerance."""
    p, t = pair(y_pred, y_true, "kappa", integer=True)
    _, m = confusion(t, p)
    n = int(m.sum())
    if int((m.sum(axis=1).astype(np.int64) * m.sum(axis=0).astype(np.int64)).sum()) == n * n:
        return float("nan")
    po = np.trace(m) / n
    pe = float((m.sum(axis=1) / n) @ (m.sum(axis=0) / n))
    return float((po - pe) / (1 - pe))


def class_f1(y_pred: Any, y_true: Any, cls: int, metric: str = "f1") -> float:
    """F1 of class ``cls`` one-vs-rest; NaN when ``cls`` occurs in neither array."""
    p, t = pair(y_pred, y_true, metric, integer=True)
    tp = int(((p == cls) & (t == cls)).sum())
    denom = int((p == cls).sum() + (t == cls).sum())
    return float("nan") if denom == 0 else 2 * tp / denom


__all__ = ["acc", "bacc", "class_f1", "confusion", "f1_from_confusion", "kappa", "mf1", "weighted_f1"]
