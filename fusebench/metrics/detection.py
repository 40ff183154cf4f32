"""3D detection metrics: mean average precision / recall at rotated-3D-IoU thresholds (SUN RGB-D).

The indoor 3D detection protocol of VoteNet (Qi et al. 2019, Sec. 5; ``eval_det``) and mmdet3d
(``indoor_eval``), the numbers every SUN RGB-D table reports (mAP@0.25, mAP@0.5):

* IoU is the rotated 3D IoU of ``[cx, cy, cz, dx, dy, dz, yaw]`` boxes (yaw about z, full sizes):
  exact footprint-polygon intersection times z overlap (:mod:`fusebench.geometry3d`);
* per class ``c``, the detections of class ``c`` from all scenes are ranked by score (descending,
  ties in input order: a stable sort); each is compared with the class-``c`` ground truth of its own
  scene: with ``j = argmax_g IoU(d, g)`` it is a true positive iff ``IoU(d, g_j) > t`` (strictly) and
  ``g_j`` is not matched yet (then it becomes matched), otherwise a false positive (duplicates are
  false positives; VOC rule: only the best-overlapping box is tried);
* ``prec_i = TP_i / i``, ``rec_i = TP_i / G_c``; AP = area under the monotone envelope of the
  precision-recall curve (VOC "area" mode, VOC2010+):
  ``AP = sum_i (r_{i+1} - r_i) max_{r' >= r_{i+1}} p(r')`` over the points where recall changes;
* mAP = mean of AP over the classes that have at least one ground-truth box in the evaluated scenes
  (VoteNet / mmdet3d iterate over the ground-truth classes: a class absent from the ground truth is
  left out of the mean, whatever was predicted for it; a class with ground truth but no detections
  has AP 0);
* recall of a class = ``TP / G_c`` at the end of the ranking (all detections); mAR = its mean over
  the same classes.

Registered ids: ``map_0.25``, ``map_0.50``, ``mar_0.25``, ``mar_0.50`` and the per-class APs
``ap_0.25_<class>`` / ``ap_0.50_<class>`` for the 10 SUN RGB-D classes (bed, table, sofa, chair,
toilet, desk, dresser, night_stand, bookshelf, bathtub = labels 0..9). A per-class AP is NaN when the
class has no ground truth. :func:`per_class_ap` / :func:`per_class_recall` give all classes at once.

Call form: ``get(id)(detections, ground_truths, num_classes=10) -> float``, one entry per scene.

Shape:
    detections[s]: ``{"boxes": [K, 7], "scores": [K], "labels": [K]}`` (numpy or torch; finite scores, else
    ValueError);
    ground_truths[s]: ``{"boxes": [G, 7], "labels": [G]}``; ``per_class_ap`` -> ``ndarray[C]``.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch

from fusebench.geometry3d import rotated_iou_3d
from fusebench.metrics import register
from fusebench.metrics.arrays import to_numpy
from fusebench.metrics.catalog import SUNRGBD_CLASSES  # = fusebench.datasets.sunrgbd.classes.CLASSES (tested)


def _np(x: Any, name: str, dtype: Any) -> np.ndarray:
    try:
        return to_numpy(x, dtype)  # half-precision boxes / scores widened exactly, then float64
    except (TypeError, ValueError) as e:
        raise ValueError(f"detection metric: {name} is not numeric: {e}") from None


def _scenes(items: Sequence[dict], kind: str, num_classes: int, with_scores: bool) -> list[dict[str, np.ndarray]]:
    out = []
    for s, d in enumerate(items):
        need = ("boxes", "labels", "scores") if with_scores else ("boxes", "labels")
        if not isinstance(d, dict) or any(k not in d for k in need):
            raise ValueError(f"detection metric: {kind}[{s}] must be a dict with keys {list(need)}")
        boxes = _np(d["boxes"], f"{kind}[{s}]['boxes']", np.float64)
        if boxes.size == 0:
            boxes = boxes.reshape(0, 7)
        if boxes.ndim != 2 or boxes.shape[1] != 7:
            raise ValueError(f"detection metric: {kind}[{s}]['boxes'] must be [N, 7], got shape {boxes.shape}")
        labels = _np(d["labels"], f"{kind}[{s}]['labels']", np.float64).reshape(-1)
        if labels.shape[0] != boxes.shape[0] or np.any(labels != np.round(labels)):
            raise ValueError(f"detection metric: {kind}[{s}]['labels'] must be {boxes.shape[0]} integers")
        labels = labels.astype(np.int64)
        if labels.size and (labels.min() < 0 or labels.max() >= num_classes):
            raise ValueError(f"detection metric: {kind}[{s}] labels must be in [0, {num_classes}), got {np.unique(labels)}")
        if np.any(boxes[:, 3:6] < 0) or not np.all(np.isfinite(boxes)):
            raise ValueError(f"detection metric: {kind}[{s}]['boxes'] must be finite with sizes >= 0")
        entry = {"boxes": boxes, "labels": labels}
        if with_scores:
            scores = _np(d["scores"], f"{kind}[{s}]['scores']", np.float64).reshape(-1)
            if scores.shape[0] != boxes.shape[0]:
                raise ValueError(f"detection metric: {kind}[{s}] has {boxes.shape[0]} boxes but {scores.shape[0]} scores")
            if not np.all(np.isfinite(scores)):  # a NaN would be ranked last (or first) without a word
                raise ValueError(f"detection metric: {kind}[{s}]['scores'] contains NaN or Inf")
            entry["scores"] = scores
        out.append(entry)
    return out


def _prepare(detections: Sequence[dict], ground_truths: Sequence[dict], num_classes: int):
    if not isinstance(num_classes, int) or num_classes < 1:
        raise ValueError(f"detection metric: num_classes must be a positive int, got {num_classes!r}")
    if len(detections) != len(ground_truths):
        raise ValueError(
            f"detection metric: detections and ground_truths need one entry per scene, got {len(detections)} "
            f"and {len(ground_truths)}"
        )
    return _scenes(detections, "detections", num_classes, True), _scenes(ground_truths, "ground_truths", num_classes, False)


def voc_ap(recall: np.ndarray, precision: np.ndarray) -> float:
    """Area under the monotone envelope of a precision-recall curve (VOC "area" mode)."""
    mrec = np.concatenate([[0.0], recall, [1.0]])
    mpre = np.concatenate([[0.0], precision, [0.0]])
    mpre = np.maximum.accumulate(mpre[::-1])[::-1]  # envelope: p(r) = max_{r' >= r} p(r')
    i = np.nonzero(mrec[1:] != mrec[:-1])[0]
    return float(np.sum((mrec[i + 1] - mrec[i]) * mpre[i + 1]))


def _evaluate(dets, gts, iou_threshold: float, num_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-class (AP, final recall); NaN for classes without ground truth."""
    ap = np.full(num_classes, np.nan)
    rec = np.full(num_classes, np.nan)
    for c in range(num_classes):
        gt_c = [g["boxes"][g["labels"] == c] for g in gts]
        npos = sum(len(g) for g in gt_c)
        if npos == 0:
            continue
        scene_ids, scores, ious = [], [], []
        for s, d in enumerate(dets):
            m = d["labels"] == c
            if not m.any():
                continue
            k = int(m.sum())
            scene_ids.append(np.full(k, s))
            scores.append(d["scores"][m])
            if len(gt_c[s]):
                iou = rotated_iou_3d(torch.from_numpy(d["boxes"][m]), torch.from_numpy(gt_c[s])).numpy()
            else:
                iou = np.zeros((k, 0))
            ious.extend(iou)  # one row per detection
        if not scores:
            ap[c], rec[c] = 0.0, 0.0
            continue
        scene_ids = np.concatenate(scene_ids)
        order = np.argsort(-np.concatenate(scores), kind="stable")
        matched = [np.zeros(len(g), dtype=bool) for g in gt_c]
        tp = np.zeros(len(order))
        for r, i in enumerate(order):  # ranked detections of class c over all scenes
            row, s = ious[i], scene_ids[i]
            if row.size == 0:
                continue
            j = int(np.argmax(row))
            if row[j] > iou_threshold and not matched[s][j]:
                matched[s][j] = True
                tp[r] = 1.0
        ctp = np.cumsum(tp)
        recall = ctp / npos
        precision = ctp / np.arange(1, len(order) + 1)
        ap[c], rec[c] = voc_ap(recall, precision), recall[-1]
    return ap, rec


def per_class_ap(detections: Sequence[dict], ground_truths: Sequence[dict], iou_threshold: float = 0.25,
                 num_classes: int = 10) -> np.ndarray:
    """AP of every class ``[num_classes]`` (NaN where the class has no ground truth)."""
    return _evaluate(*_prepare(detections, ground_truths, num_classes), iou_threshold, num_classes)[0]


def per_class_recall(detections: Sequence[dict], ground_truths: Sequence[dict], iou_threshold: float = 0.25,
                     num_classes: int = 10) -> np.ndarray:
    """Final recall of every class ``[num_classes]`` (NaN where the class has no ground truth)."""
    return _evaluate(*_prepare(detections, ground_truths, num_classes), iou_threshold, num_classes)[1]


def _mean_over_gt_classes(values: np.ndarray, what: str) -> float:
    if np.all(np.isnan(values)):
        raise ValueError(f"detection metric {what}: the ground truth has no boxes in any scene; nothing to average")
    return float(np.nanmean(values))


def mean_ap(detections, ground_truths, iou_threshold: float = 0.25, num_classes: int = 10) -> float:
    return _mean_over_gt_classes(per_class_ap(detections, ground_truths, iou_threshold, num_classes), "mAP")


def mean_recall(detections, ground_truths, iou_threshold: float = 0.25, num_classes: int = 10) -> float:
    return _mean_over_gt_classes(per_class_recall(detections, ground_truths, iou_threshold, num_classes), "mAR")


def _register() -> None:
    for t, tag in ((0.25, "0.25"), (0.5, "0.50")):
        def m_ap(detections, ground_truths, num_classes: int = 10, _t: float = t) -> float:
            return mean_ap(detections, ground_truths, _t, num_classes)

        def m_ar(detections, ground_truths, num_classes: int = 10, _t: float = t) -> float:
            return mean_recall(detections, ground_truths, _t, num_classes)

        register(f"map_{tag}", description=f"mean AP over ground-truth classes, rotated 3D IoU > {t}, VOC area mode")(m_ap)
        register(f"mar_{tag}", description=f"mean final recall over ground-truth classes, rotated 3D IoU > {t}")(m_ar)
        for c, name in enumerate(SUNRGBD_CLASSES):
            def ap_c(detections, ground_truths, num_classes: int = 10, _t: float = t, _c: int = c) -> float:
                if num_classes <= _c:
                    raise ValueError(f"ap_{_t:.2f}_{SUNRGBD_CLASSES[_c]}: needs num_classes > {_c}, got {num_classes}")
                return float(per_class_ap(detections, ground_truths, _t, num_classes)[_c])

            register(f"ap_{tag}_{name}",
                     description=f"AP of SUN RGB-D class {name} (label {c}), rotated 3D IoU > {t}; NaN without GT")(ap_c)


_register()

__all__ = ["SUNRGBD_CLASSES", "mean_ap", "mean_recall", "per_class_ap", "per_class_recall", "voc_ap"]
