"""The kNN probe on frozen embeddings (probes layer): cosine-similarity nearest neighbours from the train split,
majority vote, k chosen on the validation split.

* similarity (:func:`knn_predict`): ``sim(u, v) = <u, v> / (||u|| ||v||)`` between embeddings z-scored with the
  train split's statistics (:func:`fusebench.probes.logistic.standardize`); an all-zero row has similarity 0
  to everything;
* neighbours: the k nearest are the k largest similarities, equal similarities ordered by the lower train
  index;
* vote: the class with the most neighbours among the k; a tied vote goes to the tied class with the larger
  **summed similarity** of its neighbours among the k, then to the lower class id;
* selection (:func:`knn_probe`): k is chosen on the validation split from ``knn_grid`` (default
  :data:`DEFAULT_KNN_GRID`; values above n_train dropped): the highest val accuracy, ties to the larger k; the
  test split is scored once with it.

:func:`fusebench.probes.embedding_eval.probe_and_cluster` reports it as the keys ``val_knn_acc``,
``test_knn_acc`` (metric ``knn_acc``) and the record ``knn``.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch

from fusebench.components.reference_features import unit_rows
from fusebench.probes.logistic import accuracy_along
from fusebench.runtime.utils import single_thread

#: candidate numbers of neighbours of the kNN probe (chosen on val)
DEFAULT_KNN_GRID = (1, 3, 5, 10, 20, 50)


def knn_predict(ztr: np.ndarray, ytr: np.ndarray, query: np.ndarray, ks: Sequence[int], num_classes: int
                ) -> dict[int, np.ndarray]:
    """Cosine-similarity kNN predictions of ``query [m, d]`` from ``ztr [n, d]`` for every k in ``ks``
    (each <= n) -> ``{k: [m]}``. Neighbours: the k largest similarities, equal similarities ordered by
    the lower train index; vote: most neighbours, ties to the larger summed similarity, then to the
    lower class id."""
    with single_thread():  # one thread: the reduction order (and so exact similarity ties) is fixed
        sim = (torch.from_numpy(unit_rows(query)) @ torch.from_numpy(unit_rows(ztr)).T).numpy()  # [m, n]
    order = np.argsort(-sim, axis=1, kind="stable")[:, :max(ks)]                  # [m, kmax]
    near_sim = np.take_along_axis(sim, order, axis=1)                             # [m, kmax]
    near_y = ytr[order]                                                           # [m, kmax]
    onehot = near_y[:, :, None] == np.arange(num_classes)                         # [m, kmax, C]
    counts = np.cumsum(onehot, axis=1)                                            # votes after j+1 neighbours
    sums = np.cumsum(onehot * near_sim[:, :, None], axis=1)
    out = {}
    for k in ks:
        c, s = counts[:, k - 1], sums[:, k - 1]                                   # [m, C]
        tied = c == c.max(axis=1, keepdims=True)
        out[k] = np.where(tied, s, -np.inf).argmax(axis=1)                        # first = lowest class id
    return out


def knn_probe(ztr: np.ndarray, ytr: np.ndarray, zva: np.ndarray, yva: np.ndarray, zte: np.ndarray,
              yte: np.ndarray, num_classes: int, grid: Sequence[int] = DEFAULT_KNN_GRID) -> dict[str, Any]:
    """kNN probe on already z-scored features, k chosen on val (see the module doc).
    -> ``{"grid", "k", "val_acc_by_k", "val_acc", "test_acc", "similarity", "selection", "tie_break"}``."""
    ks = [k for k in grid if k <= ztr.shape[0]]
    if not ks:
        raise ValueError(f"probe_and_cluster: knn_grid {list(grid)} has no k <= n_train = {ztr.shape[0]}")
    val_by = {k: float(accuracy_along(p, yva)) for k, p in knn_predict(ztr, ytr, zva, ks, num_classes).items()}
    chosen = max(ks, key=lambda k: (val_by[k], k))
    test = None  # ``zte`` None: a hyper-parameter trial, no test sample scored
    if zte is not None:
        test = float(accuracy_along(knn_predict(ztr, ytr, zte, [chosen], num_classes)[chosen], yte))
    return {
        "grid": ks, "k": int(chosen), "val_acc_by_k": {str(k): v for k, v in val_by.items()},
        "val_acc": val_by[chosen], "test_acc": test,
        "similarity": "cosine on zscore_train embeddings (zero rows: similarity 0)",
        "selection": "highest val accuracy, ties to the larger k",
        "tie_break": "equal similarities: lower train index first; tied vote: larger summed similarity, "
                     "then lower class id",
    }


__all__ = ["DEFAULT_KNN_GRID", "knn_predict", "knn_probe"]
