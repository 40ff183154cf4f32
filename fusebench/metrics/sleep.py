"""Sleep-staging metrics: ``acc``, ``bacc``, ``mf1``, ``kappa`` and per-class F1 (W, N1, N2, N3, REM).

Call form: ``get(id)(y_pred, y_true) -> float`` with 1-D integer arrays (numpy or torch) of stage ids
0..4 = W, N1, N2, N3, REM (the adapters' mapping). Predictions are pooled over all test subjects
before computing a metric (one confusion matrix), as in the sleep-staging literature (e.g. the M3G
paper's Sec. 4.3 evaluation, Piran et al. 2024, arXiv:2405.19532, via Brüsch et al. 2023,
arXiv:2307.09614).

Definitions on the confusion matrix ``M[c_true, c_pred]`` over the labels L = classes seen in
``y_true`` or ``y_pred`` (scikit-learn's convention):

* ``acc``   = trace(M) / n;
* ``bacc``  = mean over classes with support of recall_c = M[c, c] / sum_j M[c, j];
* ``mf1``   = mean over L of F1_c = 2 M[c, c] / (sum_j M[c, j] + sum_i M[i, c]) (0 when both sums are 0);
* ``kappa`` = (p_o - p_e) / (1 - p_e), Cohen's unweighted kappa, p_o = acc,
  p_e = sum_c (row_c / n)(col_c / n); NaN when p_e = 1 (both raters constant);
* ``f1_w`` ... ``f1_rem``: F1 of that stage one-vs-rest; NaN when the stage occurs in neither array.

Shape: ``y_pred`` [n], ``y_true`` [n]; n >= 1 (empty input raises ValueError).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fusebench.metrics import register
from fusebench.metrics.arrays import to_numpy

STAGES = ("w", "n1", "n2", "n3", "rem")


def as_1d(x: Any, name: str, metric: str) -> np.ndarray:
    """``x`` (numpy / torch / sequence, any dtype: half precision is widened exactly, see
    :func:`fusebench.metrics.arrays.to_numpy`) as a 1-D numpy array; ValueError for other ranks or
    empty input."""
    a = to_numpy(x)
    if a.ndim != 1:
        raise ValueError(f"{metric}: {name} must be a 1-D array, got shape {a.shape}")
    if a.size == 0:
        raise ValueError(f"{metric}: {name} is empty; a metric needs at least one sample")
    return a


def pair(y_pred: Any, y_true: Any, metric: str, integer: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Validated ``(y_pred, y_true)``: same length, finite; integer-valued when ``integer``."""
    p = as_1d(y_pred, "y_pred", metric)
    t = as_1d(y_true, "y_true", metric)
    if p.shape != t.shape:
        raise ValueError(f"{metric}: y_pred has {p.size} entries, y_true {t.size}; they must match")
    for name, a in (("y_pred", p), ("y_true", t)):
        if a.dtype == bool:
            continue
        if not np.issubdtype(a.dtype, np.number):
            raise ValueError(f"{metric}: {name} must be numeric, got dtype {a.dtype}")
        if not np.isfinite(a).all():
            raise ValueError(f"{metric}: {name} contains NaN or Inf")
        if integer and not np.array_equal(a, np.round(a)):
            raise ValueError(f"{metric}: {name} must hold integer class ids, got non-integer values")
    if integer:
        return p.astype(np.int64), t.astype(np.int64)
    return p.astype(np.float64), t.astype(np.float64)


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
    """Cohen's kappa (unweighted): (p_o - p_e) / (1 - p_e)."""
    p, t = pair(y_pred, y_true, "kappa", integer=True)
    _, m = confusion(t, p)
    n = m.sum()
    po = np.trace(m) / n
    pe = float((m.sum(axis=1) / n) @ (m.sum(axis=0) / n))
    if np.isclose(pe, 1.0):
        return float("nan")
    return float((po - pe) / (1 - pe))


def class_f1(y_pred: Any, y_true: Any, cls: int, metric: str = "f1") -> float:
    """F1 of class ``cls`` one-vs-rest; NaN when ``cls`` occurs in neither array."""
    p, t = pair(y_pred, y_true, metric, integer=True)
    tp = int(((p == cls) & (t == cls)).sum())
    denom = int((p == cls).sum() + (t == cls).sum())
    return float("nan") if denom == 0 else 2 * tp / denom


def _make_stage_f1(stage: int, name: str) -> None:
    def fn(y_pred: Any, y_true: Any) -> float:
        return class_f1(y_pred, y_true, stage, f"f1_{name}")

    fn.__name__ = f"f1_{name}"
    fn.__doc__ = f"F1 of sleep stage {name.upper()} (class {stage}) one-vs-rest; NaN if absent from both."
    register(f"f1_{name}")(fn)
    globals()[fn.__name__] = fn


for _i, _name in enumerate(STAGES):
    _make_stage_f1(_i, _name)

__all__ = ["STAGES", "acc", "bacc", "class_f1", "confusion", "kappa", "mf1", "weighted_f1"] + [f"f1_{s}" for s in STAGES]
