"""Semantic-segmentation metrics: ``miou`` (ESANet), ``miou_nanmean`` (mmseg), ``pixel_acc``.

One confusion matrix ``M[c_true, c_pred]`` is accumulated over everything passed (a whole split:
pass all label maps at once, or sum :func:`confusion_matrix` over batches and use the ``*_from``
functions), ignoring pixels whose target equals ``ignore_index``. With TP_c = M[c, c],
FP_c = sum_i M[i, c] - TP_c, FN_c = sum_j M[c, j] - TP_c and IoU_c = TP_c / (TP_c + FP_c + FN_c):

* ``miou``: mean of IoU_c over the classes that have ground-truth pixels (ESANet, Seichter et al.
  2021, arXiv:2011.06961, code https://github.com/TUI-NICR/ESANet: classes absent from the ground
  truth are left out, even if predicted);
* ``miou_nanmean``: mmsegmentation's (https://github.com/open-mmlab/mmsegmentation) ``nanmean`` over
  classes with a non-empty union — a class predicted but absent from the ground truth counts IoU 0;
  a class neither present nor predicted is left out;
* ``pixel_acc``: trace(M) / sum(M).

Call form: ``get(id)(pred, target, num_classes, ignore_index=-1) -> float``.
Shape: ``pred`` and ``target`` integer label arrays of the same (any) shape, e.g. [n, H, W];
``target`` values in 0..num_classes-1 or ``ignore_index``; ``pred`` in 0..num_classes-1 wherever the
target is not ignored.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fusebench.metrics import register
from fusebench.metrics.arrays import to_numpy


def _array(x: Any, name: str, metric: str) -> np.ndarray:
    a = to_numpy(x)  # half-precision class ids widened exactly (numpy has no bfloat16)
    if a.dtype == bool or not (np.issubdtype(a.dtype, np.integer) or np.issubdtype(a.dtype, np.floating)):
        raise ValueError(f"{metric}: {name} must hold integer class ids, got dtype {a.dtype}")
    if np.issubdtype(a.dtype, np.floating):
        if not np.isfinite(a).all() or not np.array_equal(a, np.round(a)):
            raise ValueError(f"{metric}: {name} must hold integer class ids, got non-integer values")
        a = a.astype(np.int64)
    return a


def confusion_matrix(pred: Any, target: Any, num_classes: int, ignore_index: int = -1,
                     metric: str = "confusion_matrix") -> np.ndarray:
    """[num_classes, num_classes] int64 counts ``M[true, pred]`` over the non-ignored pixels."""
    if not isinstance(num_classes, (int, np.integer)) or isinstance(num_classes, bool) or num_classes < 1:
        raise ValueError(f"{metric}: num_classes must be a positive int, got {num_classes!r}")
    p = _array(pred, "pred", metric)
    t = _array(target, "target", metric)
    if p.shape != t.shape:
        raise ValueError(f"{metric}: pred has shape {p.shape}, target {t.shape}; they must match")
    if t.size == 0:
        raise ValueError(f"{metric}: empty input (no pixels)")
    valid = t != ignore_index
    if not valid.any():
        raise ValueError(f"{metric}: every target pixel equals ignore_index={ignore_index}; nothing to score")
    tv, pv = t[valid].astype(np.int64), p[valid].astype(np.int64)
    bad_t = (tv < 0) | (tv >= num_classes)
    if bad_t.any():
        raise ValueError(f"{metric}: target holds labels {np.unique(tv[bad_t])[:5].tolist()} outside "
                         f"0..{num_classes - 1} (and not ignore_index={ignore_index})")
    bad_p = (pv < 0) | (pv >= num_classes)
    if bad_p.any():
        raise ValueError(f"{metric}: pred holds labels {np.unique(pv[bad_p])[:5].tolist()} outside 0..{num_classes - 1}")
    return np.bincount(tv * num_classes + pv, minlength=num_classes * num_classes).reshape(num_classes, num_classes)


def iou_per_class(m: np.ndarray) -> np.ndarray:
    """IoU_c = TP / (TP + FP + FN) per class; NaN where the union is empty."""
    tp = np.diag(m).astype(np.float64)
    union = m.sum(axis=0) + m.sum(axis=1) - tp
    return np.divide(tp, union, out=np.full_like(tp, np.nan), where=union > 0)


def miou_from(m: np.ndarray) -> float:
    """ESANet mIoU from a confusion matrix: mean over classes with ground-truth pixels."""
    has_gt = m.sum(axis=1) > 0
    return float(iou_per_class(m)[has_gt].mean())


def miou_nanmean_from(m: np.ndarray) -> float:
    """mmseg mIoU from a confusion matrix: nanmean over classes with a non-empty union."""
    return float(np.nanmean(iou_per_class(m)))


@register("miou")
def miou(pred: Any, target: Any, num_classes: int, ignore_index: int = -1) -> float:
    """Mean IoU over classes present in the ground truth (ESANet convention)."""
    return miou_from(confusion_matrix(pred, target, num_classes, ignore_index, "miou"))


@register("miou_nanmean")
def miou_nanmean(pred: Any, target: Any, num_classes: int, ignore_index: int = -1) -> float:
    """Mean IoU, mmseg nanmean convention (a predicted class absent from the ground truth counts 0)."""
    return miou_nanmean_from(confusion_matrix(pred, target, num_classes, ignore_index, "miou_nanmean"))


@register("pixel_acc")
def pixel_acc(pred: Any, target: Any, num_classes: int, ignore_index: int = -1) -> float:
    """Pixel accuracy over the non-ignored pixels."""
    m = confusion_matrix(pred, target, num_classes, ignore_index, "pixel_acc")
    return float(np.trace(m) / m.sum())


__all__ = ["confusion_matrix", "iou_per_class", "miou", "miou_from", "miou_nanmean", "miou_nanmean_from", "pixel_acc"]
