"""Frozen-embedding evaluation (probes layer): a linear probe, few-shot probes, a kNN probe and k-means, on the
same embeddings -- the input checks, the linear probe and the orchestration; each probe's rule is written in
its own module.

``probe_and_cluster(train_emb, train_y, val_emb, val_y, test_emb, test_y, num_classes, seed)`` returns
one dict. Every probe sees the embeddings **z-scored with the train split's per-column mean / std**
(population std; columns constant on train become 0; :func:`fusebench.probes.logistic.standardize`). The
keys are ``"test_<id>"`` (and ``"val_<id>"`` where the split has a value) for every metric id computed, the
older names kept beside them, and one record per evaluation:

* the **linear probe** (``_linear_probe``): the multinomial logistic regression of
  :mod:`fusebench.probes.logistic` on all train samples, ``mean_i CE(softmax(x_i W + b), y_i) + l2 / 2 *
  ||W||_F^2`` (bias not penalised; :func:`~fusebench.probes.logistic.fit_logistic`: float64, one thread, solved
  to its optimum by damped Newton-CG from zero, an error if not there). The L2 weight is chosen on the **validation** split only
  (:func:`~fusebench.probes.logistic.search_l2`: the searched value with the highest val accuracy, ties to
  the larger value, the grid extended by decades beyond the edge it chose while that helps, within [1e-8,
  1e4]); the test split is scored once, with that value. Keys ``val_acc``, ``test_acc`` (metric ``acc``),
  ``val_mf1``, ``test_mf1`` (metric ``mf1``: macro F1 over the classes seen in y_true or y_pred), the same
  two under their older names ``val_macro_f1``, ``test_macro_f1``, and the record ``probe = {"l2_grid",
  "l2", "val_acc_by_l2", "l2_searched", "l2_extended", "l2_edge", "selection", "standardize", "optimizer",
  "max_iter"}``.
* **few-shot probes** (:func:`fusebench.probes.fewshot.fewshot_probe`; the draws, the logistic and the
  prototype probe and the choice between them in :mod:`fusebench.probes.fewshot`): for each s in
  ``fewshot_shots`` and each of ``fewshot_draws`` seeded draws of s train samples per class. Keys
  ``val_fs<s>_acc``, ``test_fs<s>_acc`` (logistic), ``val_fs<s>_proto_acc``, ``test_fs<s>_proto_acc``
  (prototype), ``val_fs<s>_best_acc``, ``test_fs<s>_best_acc`` (the probe with the higher mean val accuracy,
  ties to logistic); records ``fewshot`` (per-draw values of both probes) and ``fewshot_probe = {"rule",
  "per_shot": {str(s): {"chosen", "metric", "val": {"logistic", "prototype"}}}}``. A class with fewer than s
  train samples raises ValueError.
* the **kNN probe** (:func:`fusebench.probes.knn.knn_probe`; the rule in :mod:`fusebench.probes.knn`):
  cosine similarity, majority vote, k chosen on val from ``knn_grid``. Keys ``val_knn_acc``,
  ``test_knn_acc``; record ``knn``.
* **k-means** (:func:`fusebench.probes.kmeans.kmeans`) with k = ``num_classes`` on the embeddings of
  ``cluster_on`` = ``"all"`` (train + val + test, the default: the multi-view clustering literature
  clusters every sample and labels are used only for scoring) or ``"test"``; ``cluster_standardize`` =
  ``"zscore"`` (z-scored with the mean / std of the clustered samples, the default) or ``"none"``
  (clustered as given: for reference features whose scale is part of the design,
  :mod:`fusebench.components.reference_features`). Greedy k-means++ seeding, Lloyd to convergence,
  ``n_init`` restarts (default 100), lowest inertia kept; see :func:`~fusebench.probes.kmeans.kmeans`. Keys
  ``cluster_acc``, ``nmi``, ``ari`` and the same values as ``test_cluster_acc``, ``test_nmi``, ``test_ari``
  (computed on the ``cluster_on`` samples, scored with every label; :mod:`fusebench.metrics.clustering`),
  record ``clustering = {"on", "num_samples", "k", "n_init", "init", "init_variant", "tol", "inertia",
  "seed", "standardize"}``.
  ``fewshot_shots=()`` / ``knn_grid=()`` skip those probes (and their keys).

Precision: embeddings of any float dtype (bfloat16 / float16 from a mixed-precision encoder
included) are widened to float64 on entry (exact, :func:`fusebench.metrics.arrays.to_numpy`), and
every reduction runs in float64; autocast never casts float64 tensors, so a caller's autocast changes
nothing.

Deterministic given ``seed`` (torch on CPU, one intra-op thread inside the probes, restored afterwards;
numpy only for element-wise work and the seeded draws). Cost, measured on the 2-core development
machine, one core: 10 classes, 1200 train / 400 val / 400 test x 96-d, default grids (3 shots x 20 draws
x 5 L2 values, the draws of one shot and one L2 value fitted together, each to its optimum by damped Newton-CG;
each value the search adds costs one more such fit): the few-shot probes about 1 s (the prototype probe a few ms), the kNN
probe about 0.06 s, the full probe about 0.7 s, k-means with n_init = 100 on the 2000 samples about
0.6 s (on the 2000 x 649 z-scored handwritten views about 6 s, as long as scikit-learn's KMeans with the
same n_init).

Shape: ``*_emb`` [n, d], or per-view ``[k, n, d]`` (the views of a sample concatenated: ``[n, k*d]``);
numpy or torch, any float dtype, dense or sparse (``scipy.sparse``, torch sparse: made dense). ``*_y`` [n] integer class
ids in 0..num_classes-1.

Every public name of the probes is importable from here as well (``__all__``: the few-shot, kNN and
logistic names of :mod:`fusebench.probes.fewshot`, :mod:`fusebench.probes.knn` and
:mod:`fusebench.probes.logistic`).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
from einops import rearrange

from fusebench.metrics.arrays import to_numpy
from fusebench.probes.fewshot import (DEFAULT_DRAWS, DEFAULT_SHOTS, FEWSHOT_CHOICE_RULE, PROTOTYPE_RULE,
                                      chosen_fewshot_val, fewshot_indices, fewshot_probe, prototype_predict)
from fusebench.probes.kmeans import DEFAULT_N_INIT, KMEANS_TOL, kmeans
from fusebench.probes.knn import DEFAULT_KNN_GRID, knn_predict, knn_probe
from fusebench.probes.logistic import (DEFAULT_L2_GRID, L2_CEILING, L2_FLOOR, fit_logistic, predict_classes, search_l2,
                                       standardize)

CLUSTER_STANDARDIZE = ("zscore", "none")


def _as_2d(x: Any, name: str) -> np.ndarray:
    a = to_numpy(x, np.float64)  # half precision widened exactly (numpy has no bfloat16)
    if a.ndim == 3:  # per-view embeddings: concatenate the views of each sample
        a = rearrange(a, "k n d -> n (k d)")
    if a.ndim != 2 or a.shape[0] == 0:
        raise ValueError(f"probe_and_cluster: {name} must be a non-empty [n, d] or [k, n, d] array, got shape {a.shape}")
    if not np.isfinite(a).all():
        raise ValueError(f"probe_and_cluster: {name} contains NaN or Inf")
    return a


def _as_labels(y: Any, n: int, num_classes: int, name: str) -> np.ndarray:
    a = to_numpy(y).reshape(-1)
    if a.size != n:
        raise ValueError(f"probe_and_cluster: {name} has {a.size} labels for {n} embeddings")
    if not np.issubdtype(a.dtype, np.integer) and not np.array_equal(a, np.round(a)):
        raise ValueError(f"probe_and_cluster: {name} must hold integer class ids")
    a = a.astype(np.int64)
    if a.size and (a.min() < 0 or a.max() >= num_classes):
        raise ValueError(f"probe_and_cluster: {name} has labels outside 0..{num_classes - 1}")
    return a


def _positive_ints(values: Sequence[Any], name: str) -> list[int]:
    """``values`` as a non-empty list of distinct positive ints (order kept), else a ValueError naming ``name``."""
    try:
        out = [int(v) for v in values]
        ok = (bool(out) and all(o == v and o >= 1 and not isinstance(v, (bool, np.bool_)) for o, v in zip(out, values))
              and len(set(out)) == len(out))  # a bool is no count (True == 1)
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(f"probe_and_cluster: {name} = {values!r} must be a non-empty sequence of distinct "
                         f"positive integers")
    return out


def _l2_values(values: Sequence[Any], name: str) -> list[float]:
    try:
        grid = [float(v) for v in values if not isinstance(v, (bool, np.bool_))]  # a bool is no weight (True == 1)
        grid = grid if len(grid) == len(values) else []
    except (TypeError, ValueError):
        grid = []
    if not grid or any(not np.isfinite(v) or v <= 0 for v in grid) or len(set(grid)) != len(grid):
        # (at 0 a separable draw has no optimum; a value given twice would make a grid of one look searched)
        raise ValueError(f"probe_and_cluster: {name} {list(values) if hasattr(values, '__iter__') else values!r} "
                         f"must be a non-empty sequence of distinct finite values > 0")
    return grid


def _linear_probe(ztr: np.ndarray, zva: np.ndarray, zte: np.ndarray | None, ys: dict[str, Any], num_classes: int,
                  grid: list[float], probe_max_iter: int) -> dict[str, Any]:
    """Part (a) of :func:`probe_and_cluster`: the logistic probe on all training samples, L2 chosen on val."""
    from fusebench import metrics as M

    fits = {}

    def score(l2: float) -> float:
        fits[l2] = fit_logistic(ztr, ys["train"], num_classes, l2, probe_max_iter)
        return float(M.get("acc")(predict_classes(zva, *fits[l2]), ys["val"]))

    search = search_l2(grid, score)
    chosen = search["l2"]
    w, b = fits[chosen]
    pv = predict_classes(zva, w, b)
    pt = None if zte is None else predict_classes(zte, w, b)  # None: a trial, no test sample scored
    out: dict[str, Any] = {
        "val_acc": float(M.get("acc")(pv, ys["val"])),
        "val_macro_f1": float(M.get("mf1")(pv, ys["val"])),
        "test_acc": None if pt is None else float(M.get("acc")(pt, ys["test"])),
        "test_macro_f1": None if pt is None else float(M.get("mf1")(pt, ys["test"])),
        "probe": {
            "l2_grid": grid, "l2": chosen, "val_acc_by_l2": {repr(k): search["scores"][k] for k in search["searched"]},
            "l2_searched": search["searched"], "l2_extended": search["extended"], "l2_edge": search["edge"],
            "selection": "highest val accuracy, ties to the larger l2; a grid of two or more values extended by "
                         f"decades beyond the chosen edge while strictly better, within [{L2_FLOOR:g}, {L2_CEILING:g}]",
            "standardize": "zscore_train",
            "optimizer": "newton_cg_float64 (solved to its optimum, gradient size <= 1e-12 max(1, its size at 0))",
            "max_iter": int(probe_max_iter),
        },
    }
    out["val_mf1"], out["test_mf1"] = out["val_macro_f1"], out["test_macro_f1"]
    return out


def probe_and_cluster(
    train_emb: Any, train_y: Any, val_emb: Any, val_y: Any, test_emb: Any, test_y: Any,
    num_classes: int, seed: int, *,
    l2_grid: Sequence[float] = DEFAULT_L2_GRID, probe_max_iter: int = 300,
    cluster_on: str = "all", n_init: int = DEFAULT_N_INIT, kmeans_max_iter: int = 300,
    fewshot_shots: Sequence[int] = DEFAULT_SHOTS, fewshot_draws: int = DEFAULT_DRAWS,
    fewshot_l2_grid: Sequence[float] | None = None, knn_grid: Sequence[int] = DEFAULT_KNN_GRID,
    cluster_standardize: str = "zscore", linear_probe: bool = True, cluster: bool = True,
) -> dict[str, Any]:
    """Linear probe (L2 chosen on val), few-shot probes, kNN probe and k-means ACC / NMI / ARI; see the
    module doc. ``fewshot_l2_grid`` defaults to ``l2_grid``; ``fewshot_shots=()`` skips the few-shot
    probes, ``knn_grid=()`` the kNN probe, ``linear_probe=False`` the linear probe and ``cluster=False``
    k-means (a hyper-parameter trial scores its selection metric alone). Each part computes the same
    numbers whichever others run: they share only the z-scoring, and the few-shot draws and k-means have
    seeded generators of their own. ``test_emb`` / ``test_y`` None (a hyper-parameter trial): no test sample is
    seen, every ``test_*`` value is None and k-means (scored on test) is skipped; the validation values are
    those the full call gives."""
    from fusebench import metrics as M

    num_classes = int(num_classes)
    if num_classes < 2:
        raise ValueError(f"probe_and_cluster: num_classes = {num_classes}, need at least 2")
    if cluster_on not in ("all", "test"):
        raise ValueError(f"probe_and_cluster: cluster_on={cluster_on!r} must be 'all' or 'test'")
    if cluster_standardize not in CLUSTER_STANDARDIZE:
        raise ValueError(f"probe_and_cluster: cluster_standardize={cluster_standardize!r} must be one of "
                         f"{list(CLUSTER_STANDARDIZE)}")
    grid = _l2_values(l2_grid, "l2_grid")
    fs_grid = grid if fewshot_l2_grid is None else _l2_values(fewshot_l2_grid, "fewshot_l2_grid")
    shots = _positive_ints(fewshot_shots, "fewshot_shots") if len(fewshot_shots) else []
    draws = _positive_ints([fewshot_draws], "fewshot_draws")[0] if shots else 0
    ks = _positive_ints(knn_grid, "knn_grid") if len(knn_grid) else []
    if (test_emb is None) != (test_y is None):
        raise ValueError("probe_and_cluster: give test_emb and test_y, or neither (a trial scored on validation)")
    splits = ("train", "val") if test_emb is None else ("train", "val", "test")
    given = {"train": (train_emb, train_y), "val": (val_emb, val_y), "test": (test_emb, test_y)}
    xs = {s: _as_2d(given[s][0], f"{s}_emb") for s in splits}
    dims = {x.shape[1] for x in xs.values()}
    if len(dims) != 1:
        raise ValueError(f"probe_and_cluster: embedding widths differ between splits: "
                         f"{ {s: x.shape[1] for s, x in xs.items()} }")
    ys = {s: _as_labels(given[s][1], xs[s].shape[0], num_classes, f"{s}_y") for s in splits}
    ys.setdefault("test", None)

    # (a) linear probe, L2 chosen on val
    ztr, zva, *rest = standardize(xs["train"], *(xs[s] for s in splits))
    zte = rest[0] if rest else None
    out: dict[str, Any] = {}
    if linear_probe:
        out.update(_linear_probe(ztr, zva, zte, ys, num_classes, grid, probe_max_iter))


    # (b) few-shot probes, L2 per shot count chosen on val (mean over draws)
    if shots:
        fs = fewshot_probe(ztr, ys["train"], zva, ys["val"], zte, ys["test"], num_classes, seed, shots, draws,
                           fs_grid, probe_max_iter)
        for s in shots:
            per = fs["per_shot"][str(s)]
            out[f"val_fs{s}_acc"], out[f"test_fs{s}_acc"] = per["val_acc"], per["test_acc"]
            out[f"val_fs{s}_proto_acc"] = per["prototype"]["val_acc"]
            out[f"test_fs{s}_proto_acc"] = per["prototype"]["test_acc"]
            out[f"val_fs{s}_best_acc"], out[f"test_fs{s}_best_acc"] = per["best_val_acc"], per["best_test_acc"]
        out["fewshot"] = fs
        out["fewshot_probe"] = {
            "rule": FEWSHOT_CHOICE_RULE,
            "per_shot": {str(s): {"chosen": fs["per_shot"][str(s)]["chosen"], "metric": f"fs{s}_best_acc",
                                  "val": {"logistic": fs["per_shot"][str(s)]["val_acc"],
                                          "prototype": fs["per_shot"][str(s)]["prototype"]["val_acc"]}}
                         for s in shots},
        }

    # (c) kNN probe, k chosen on val
    if ks:
        knn = knn_probe(ztr, ys["train"], zva, ys["val"], zte, ys["test"], num_classes, ks)
        out["val_knn_acc"], out["test_knn_acc"] = knn["val_acc"], knn["test_acc"]
        out["knn"] = knn

    # (d) k-means (scored on the test split: not in a trial)
    if cluster and zte is not None:
        if cluster_on == "all":
            xc = np.concatenate([xs["train"], xs["val"], xs["test"]])
            yc = np.concatenate([ys["train"], ys["val"], ys["test"]])
        else:
            xc, yc = xs["test"], ys["test"]
        zc = standardize(xc, xc)[0] if cluster_standardize == "zscore" else xc
        labels, _, inertia = kmeans(zc, num_classes, seed, n_init=n_init, max_iter=kmeans_max_iter)
        for mid in ("cluster_acc", "nmi", "ari"):
            out[mid] = out[f"test_{mid}"] = float(M.get(mid)(labels, yc))
        out["clustering"] = {
            "on": cluster_on, "num_samples": int(yc.size), "k": num_classes, "n_init": int(n_init),
            "init": "k-means++", "init_variant": "greedy, 2 + floor(ln k) candidates per centre",
            "tol": KMEANS_TOL, "inertia": inertia, "seed": int(seed),
            "standardize": "zscore_clustered_samples" if cluster_standardize == "zscore" else "none",
        }
    return out


def option_problems(options: Mapping[str, Any], metrics: Sequence[str],
                    key: str = "options.embedding_eval") -> list[str]:
    """What is wrong with the probe options ``options`` (a spec's ``options.embedding_eval``) for a benchmark
    reporting ``metrics``, each a phrase naming ``key`` (empty: nothing): the values :func:`probe_and_cluster`
    refuses, and a metric the options leave uncomputed (``fs5_acc`` with ``fewshot_shots: [1]``, ``knn_acc`` with an
    empty ``knn_grid``). Checked when a spec is loaded, not in every cell after its pretraining."""
    from fusebench.probes.fewshot import shot_count

    checks = {"l2_grid": lambda v: _l2_values(v, "l2_grid"),
              "fewshot_l2_grid": lambda v: _l2_values(v, "fewshot_l2_grid"),
              "fewshot_shots": lambda v: _positive_ints(v, "fewshot_shots") if len(v) else [],
              "fewshot_draws": lambda v: _positive_ints([v], "fewshot_draws"),
              "knn_grid": lambda v: _positive_ints(v, "knn_grid") if len(v) else [],
              "n_init": lambda v: _positive_ints([v], "n_init")}
    out = []
    for name, check in checks.items():
        if name in options:
            try:
                check(options[name])
            except (ValueError, TypeError):
                out.append(f"{key}.{name} = {options[name]!r}: expected "
                           + ("a non-empty list of finite numbers > 0" if "l2" in name else
                              "a positive integer" if name in ("fewshot_draws", "n_init") else
                              "a list of distinct positive integers"))
    if "cluster_on" in options and options["cluster_on"] not in ("all", "test"):
        out.append(f"{key}.cluster_on = {options['cluster_on']!r}: expected 'all' or 'test'")
    if out:
        return out
    shots = list(options["fewshot_shots"]) if "fewshot_shots" in options else None
    for m in metrics:
        s = shot_count(m)
        if s is not None and shots is not None and s not in shots:
            out.append(f"metric {m} needs {s} in {key}.fewshot_shots {shots} (the probes compute the shot counts "
                       "listed there)")
        if m == "knn_acc" and "knn_grid" in options and not len(options["knn_grid"]):
            out.append(f"metric knn_acc needs a non-empty {key}.knn_grid (it is empty: no kNN probe runs)")
    return out


__all__ = ["CLUSTER_STANDARDIZE", "DEFAULT_DRAWS", "DEFAULT_KNN_GRID", "DEFAULT_L2_GRID", "DEFAULT_SHOTS",
           "FEWSHOT_CHOICE_RULE", "L2_CEILING", "L2_FLOOR", "PROTOTYPE_RULE", "chosen_fewshot_val",
           "fewshot_indices", "fewshot_probe", "fit_logistic", "knn_predict", "knn_probe", "option_problems",
           "probe_and_cluster",
           "prototype_predict", "search_l2", "standardize"]
