"""Frozen-embedding evaluation metrics: the clustering scores ``cluster_acc``, ``nmi``, ``ari`` (the
multi-view clustering literature's three) and the probe accuracies ``fs<s>_acc``, ``fs<s>_proto_acc``,
``fs<s>_best_acc`` (s = 1, 5, 10), ``knn_acc`` of :mod:`fusebench.probes.embedding_eval`.

Call form: ``get(id)(y_pred, y_true) -> float`` with 1-D integer arrays (numpy or torch) of the same
length: ``y_pred`` = cluster ids (arbitrary integers, any number of clusters), ``y_true`` = class ids.
All three are invariant to renaming the clusters. Definitions on the contingency table
``n[i, j]`` = #samples of class i put in cluster j, with row sums a_i, column sums b_j, n samples:

* ``cluster_acc`` = max over one-to-one maps m (cluster -> class) of (1/n) sum_j n[m(j), j], the
  maximum found with the Hungarian algorithm (``scipy.optimize.linear_sum_assignment``); with more
  clusters than classes the unmatched clusters count as errors.
* ``nmi`` = I(true; pred) / ((H(true) + H(pred)) / 2): **arithmetic-mean** normalisation, scikit-learn's
  default ``average_method="arithmetic"``; natural logarithms (the ratio does not depend on the base).
  1.0 when both labelings have a single (the same trivial) group, as in scikit-learn; rounding is
  clipped to [0, 1].
* ``ari`` = (sum_ij C(n_ij, 2) - E) / ((sum_i C(a_i, 2) + sum_j C(b_j, 2)) / 2 - E) with
  E = sum_i C(a_i, 2) sum_j C(b_j, 2) / C(n, 2) (Hubert and Arabie, "Comparing partitions", Journal
  of Classification 2, 1985), computed with exact integer pair counts; 1.0 when the denominator is 0
  (both labelings all-singletons or both one group).

Probe accuracies (task ``classification``, like ``acc``; higher is better; unit fraction). Call form
``get(id)(y_pred, y_true) -> float`` = trace(M) / n, the fraction of ``y_pred`` equal to ``y_true``
(integer class ids), i.e. the accuracy of one set of probe predictions. What each id reports:

* ``fs1_acc``, ``fs5_acc``, ``fs10_acc``: test accuracy of a logistic probe trained on 1 / 5 / 10
  labelled train samples per class, **averaged over the seeded draws** of those samples (each draw's
  predictions are scored with this function, then the draws are averaged);
* ``fs1_proto_acc``, ``fs5_proto_acc``, ``fs10_proto_acc``: the same draws scored by the nearest-class-
  prototype probe (cosine similarity on centred, L2-normalised features; SimpleShot), averaged over the draws;
* ``fs1_best_acc``, ``fs5_best_acc``, ``fs10_best_acc``: the accuracy of whichever of the two few-shot probes
  has the higher mean validation accuracy for the run (the row's primary few-shot number);
* ``knn_acc``: test accuracy of the cosine-similarity k-nearest-neighbour classifier (k chosen on the
  validation split).

The protocols (sampling, standardisation, selection of the L2 weight and of k, tie-breaking) are in
:mod:`fusebench.probes.embedding_eval`. They are registered here, beside the clustering scores,
because this is the evaluation's metric module that the registry imports.

Shape: ``y_pred`` [n], ``y_true`` [n]; n >= 1 (empty input raises ValueError).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np
from scipy.optimize import linear_sum_assignment

from fusebench.metrics import register
from fusebench.metrics.arrays import pair
from fusebench.metrics.classification import acc


def contingency(y_true: np.ndarray, y_pred: np.ndarray) -> np.ndarray:
    """``n[i, j]`` = #samples with the i-th smallest true label and the j-th smallest cluster id."""
    _, ti = np.unique(y_true, return_inverse=True)
    _, pj = np.unique(y_pred, return_inverse=True)
    m = np.zeros((int(ti.max()) + 1, int(pj.max()) + 1), dtype=np.int64)
    np.add.at(m, (ti.ravel(), pj.ravel()), 1)
    return m


@register("cluster_acc")
def cluster_acc(y_pred: Any, y_true: Any) -> float:
    """Clustering accuracy: best one-to-one cluster->class matching (Hungarian), fraction correct."""
    p, t = pair(y_pred, y_true, "cluster_acc", integer=True)
    m = contingency(t, p)
    rows, cols = linear_sum_assignment(m, maximize=True)
    return float(m[rows, cols].sum() / t.size)


def _entropy(counts: np.ndarray, n: int) -> float:
    q = counts[counts > 0] / n
    return float(-(q * np.log(q)).sum())


@register("nmi")
def nmi(y_pred: Any, y_true: Any) -> float:
    """Normalized mutual information, arithmetic-mean normalisation: I / ((H_true + H_pred) / 2)."""
    p, t = pair(y_pred, y_true, "nmi", integer=True)
    m = contingency(t, p)
    if m.shape[0] == 1 and m.shape[1] == 1:
        return 1.0
    n = int(t.size)
    a, b = m.sum(axis=1), m.sum(axis=0)
    i, j = np.nonzero(m)
    nij = m[i, j].astype(np.float64)
    mi = float((nij / n * (np.log(nij * n) - np.log(a[i].astype(np.float64) * b[j]))).sum())
    denom = (_entropy(a, n) + _entropy(b, n)) / 2
    return float(min(max(mi / denom, 0.0), 1.0)) if denom > 0 else 1.0  # clip rounding outside [0, 1]


def _pairs(x: np.ndarray) -> int:
    return sum(int(v) * (int(v) - 1) // 2 for v in x.ravel())


@register("ari")
def ari(y_pred: Any, y_true: Any) -> float:
    """Adjusted Rand index (Hubert-Arabie): pair-counting agreement corrected for chance, 1 = identical."""
    p, t = pair(y_pred, y_true, "ari", integer=True)
    m = contingency(t, p)
    n = int(t.size)
    s_ij, s_a, s_b = _pairs(m), _pairs(m.sum(axis=1)), _pairs(m.sum(axis=0))
    total = n * (n - 1) // 2
    if total == 0:
        return 1.0
    expected = Fraction(s_a * s_b, total)
    denom = Fraction(s_a + s_b, 2) - expected
    if denom == 0:
        return 1.0
    return float((s_ij - expected) / denom)


#: the probe accuracies of :mod:`fusebench.probes.embedding_eval`: each scores one set of probe
#: predictions as plain accuracy (:func:`fusebench.metrics.classification.acc`); the evaluation averages the draws
PROBE_ACCURACIES = {
    "fs1_acc": "Few-shot probe accuracy, 1 labelled sample per class (one draw; the evaluation averages the draws).",
    "fs5_acc": "Few-shot probe accuracy, 5 labelled samples per class (one draw; the evaluation averages the draws).",
    "fs10_acc": "Few-shot probe accuracy, 10 labelled samples per class (one draw; the evaluation averages the draws).",
    "knn_acc": "Cosine k-nearest-neighbour probe accuracy (k chosen on the validation split): fraction correct.",
    **{f"fs{s}_proto_acc": f"Few-shot nearest-prototype probe accuracy (cosine, centred L2-normalised features), "
                           f"{s} labelled sample{'s' if s > 1 else ''} per class (one draw; the evaluation averages "
                           f"the draws)." for s in (1, 5, 10)},
    **{f"fs{s}_best_acc": f"Few-shot accuracy, {s} labelled sample{'s' if s > 1 else ''} per class, of the probe "
                          f"(logistic or prototype) with the higher validation accuracy for the run (one draw; the "
                          f"evaluation averages the draws)." for s in (1, 5, 10)},
}
for _id, _doc in PROBE_ACCURACIES.items():
    register(_id, description=_doc)(acc)


__all__ = ["PROBE_ACCURACIES", "ari", "cluster_acc", "contingency", "nmi"]
