"""Frozen-embedding evaluation: a linear probe, few-shot probes, a kNN probe and k-means, on the same embeddings.

``probe_and_cluster(train_emb, train_y, val_emb, val_y, test_emb, test_y, num_classes, seed)`` returns
one dict. Every probe sees the embeddings **z-scored with the train split's per-column mean / std**
(population std; columns constant on train become 0; :func:`standardize`). The keys are
``"test_<id>"`` (and ``"val_<id>"`` where the split has a value) for every metric id computed, the
older names kept beside them, and one record per evaluation:

* the **linear probe** (:func:`fit_logistic`): multinomial logistic regression, weights ``W [d, C]``
  and bias ``b [C]`` minimising ``mean_i CE(softmax(x_i W + b), y_i) + l2 / 2 * ||W||_F^2`` (bias not
  penalised), full batch, float64, L-BFGS (``torch.optim.LBFGS``, strong-Wolfe line search) from
  zero on one thread, so the result depends on neither a seed nor the thread count. The L2 weight is
  chosen on the **validation** split only (:func:`search_l2`): the searched value with the highest val
  accuracy, ties to the larger (more regularised) value; the test split is scored once, with that
  value. **The search**: a grid of two or more values is extended beyond the edge it chose, a decade
  at a time (``v / 10`` below the smallest value, ``v * 10`` above the largest), while the value
  beyond the edge has a strictly higher val score, within [:data:`L2_FLOOR`, :data:`L2_CEILING`] =
  [1e-8, 1e4]; so the chosen value lies inside the searched values unless a bound (or 0) stops the
  search, and the record says so (``l2_edge``: ``"lower"`` / ``"upper"`` / null, ``l2_searched``,
  ``l2_extended``). A grid of one value is a fixed weight: nothing is searched. Keys
  ``val_acc``, ``test_acc`` (metric ``acc``), ``val_mf1``, ``test_mf1`` (metric ``mf1``: macro F1 over
  the classes seen in y_true or y_pred), the same two under their older names ``val_macro_f1``,
  ``test_macro_f1``, and the record ``probe = {"l2_grid", "l2", "val_acc_by_l2", "l2_searched",
  "l2_extended", "l2_edge", "selection", "standardize", "optimizer", "max_iter"}``.
* **few-shot probes** (:func:`fewshot_probe`): for each s in ``fewshot_shots`` (labels per class) and
  each of ``fewshot_draws`` draws, s train samples of every class are drawn without replacement and
  two probes are fitted on them alone, **on the same draws**. Draws: one ``numpy.random.Generator`` per s,
  ``default_rng(SeedSequence([seed, s]))``; draw j = 0, 1, ... takes, class by class in increasing
  class id, ``rng.choice(pool_c, size=s, replace=False)`` where ``pool_c`` = the train indices of
  class c in increasing order (so draw j does not depend on how many draws follow). Features are
  z-scored with the statistics of **all** train embeddings (no labels are used for that, so it leaks
  nothing the few-shot learner would not have: the unlabelled train pool).

  - the **logistic probe**: the same logistic regression, its L2 weight fixed per s by the validation
    split: for every searched value (:func:`search_l2`: ``fewshot_l2_grid``, default ``l2_grid``,
    extended beyond its edges while that helps) all draws are fitted (:func:`fit_logistic`, batched
    over the draws); the value with the highest **mean over draws** of the val accuracy is kept (ties
    to the larger value) and the test accuracies of that value are reported. Keys ``val_fs<s>_acc``,
    ``test_fs<s>_acc`` = mean over draws (metric ids ``fs1_acc``, ``fs5_acc``, ``fs10_acc``).
  - the **prototype probe** (:func:`prototype_predict`; SimpleShot, Wang et al. 2019, "SimpleShot:
    Revisiting Nearest-Neighbor Classification for Few-Shot Learning", arXiv:1911.04623, its CL2N
    features): the features are **centred with the mean of all train-split embeddings** of the run
    (the unlabelled train pool the support sets are drawn from: the split's own ``train`` role, not
    val or test; the z-scoring above already subtracts exactly that mean, so the centring is the
    z-score's and the per-column scaling is the protocol's common standardisation), then every row is
    L2-normalised (a zero row stays zero); a class prototype is the mean of its s normalised support
    rows; a query goes to the prototype of **largest cosine similarity** ``<u, p_c> / ||p_c||`` (a
    zero prototype has similarity 0; ties to the lower class id). Norm-invariant: the scale of a
    query or of a support row does not matter, unlike the logistic probe's. Nothing is tuned. Keys
    ``val_fs<s>_proto_acc``, ``test_fs<s>_proto_acc`` (mean over draws; metric ``fs<s>_proto_acc``).
  - **the row's few-shot number** (metric ``fs<s>_best_acc``; keys ``val_fs<s>_best_acc``,
    ``test_fs<s>_best_acc``): per run and per s, the probe with the higher mean **validation**
    accuracy over the draws (ties: the logistic probe), recorded as ``fewshot_probe = {"rule",
    "per_shot": {str(s): {"chosen", "metric", "val": {"logistic", "prototype"}}}}``; its val and test
    accuracies are the chosen probe's (:func:`chosen_fewshot_val` reads the validation score back).
    The logistic probe's val score is the maximum over its L2 search, the prototype probe's is not
    tuned: the comparison is, if anything, tilted towards the logistic probe.

  Record ``fewshot`` with per-draw values of both probes. A class with fewer than s train samples
  raises ValueError.
* the **kNN probe** (:func:`knn_probe`): cosine similarity ``<u, v> / (||u|| ||v||)`` between z-scored
  embeddings (an all-zero row has similarity 0 to everything), neighbours taken from the train split;
  the k nearest are the k largest similarities, equal similarities ordered by the lower train index;
  majority vote; a tied vote goes to the tied class with the larger **summed similarity** of its
  neighbours among the k, then to the lower class id. k is chosen on the validation split from
  ``knn_grid`` (values above n_train dropped): highest val accuracy, ties to the larger k. Keys
  ``val_knn_acc``, ``test_knn_acc``; record ``knn``.
* **k-means** (:func:`kmeans`) with k = ``num_classes`` on the embeddings of ``cluster_on`` = ``"all"``
  (train + val + test, the default: the multi-view clustering literature clusters every sample and
  labels are used only for scoring) or ``"test"``; ``cluster_standardize`` = ``"zscore"`` (z-scored
  with the mean / std of the clustered samples, the default) or ``"none"`` (clustered as given: for
  reference features whose scale is part of the design, :mod:`fusebench.components.reference_features`).
  Greedy k-means++ seeding, Lloyd to convergence, ``n_init`` restarts (default 100), lowest inertia
  kept; see :func:`kmeans`. Keys ``cluster_acc``, ``nmi``, ``ari`` and the same values as
  ``test_cluster_acc``, ``test_nmi``, ``test_ari`` (computed on the ``cluster_on`` samples, scored
  with every label; :mod:`fusebench.metrics.clustering`), record ``clustering = {"on",
  "num_samples", "k", "n_init", "init", "init_variant", "tol", "inertia", "seed", "standardize"}``.
  ``fewshot_shots=()`` / ``knn_grid=()`` skip those probes (and their keys).

Precision: embeddings of any float dtype (bfloat16 / float16 from a mixed-precision encoder
included) are widened to float64 on entry (exact, :func:`fusebench.metrics.arrays.to_numpy`), and
every reduction runs in float64; autocast never casts float64 tensors, so a caller's autocast changes
nothing.

Deterministic given ``seed`` (torch on CPU, one intra-op thread inside this module, restored
afterwards; numpy only for element-wise work and the seeded draws). Cost, measured on the 2-core
development machine, one core: 10 classes, 1200 train / 400 val / 400 test x 96-d, default grids
(3 shots x 20 draws x 5 L2 values, the draws of one shot and one L2 value fitted in one batched
L-BFGS; each value the search adds costs one more such fit): the few-shot probes about 1 s (the
prototype probe a few ms), the kNN probe about 0.06 s, the full probe about 0.7 s,
k-means with n_init = 100 on the 2000 samples about 0.6 s (on the 2000 x 649 z-scored handwritten
views about 6 s, as long as scikit-learn's KMeans with the same n_init). The L-BFGS optimisers are
:func:`fusebench.runtime.utils.optimizer_class` ones: PyTorch's, without importing torch._dynamo.

Shape: ``*_emb`` [n, d], or per-view ``[k, n, d]`` (the views of a sample concatenated: ``[n, k*d]``);
numpy or torch, any float dtype. ``*_y`` [n] integer class
ids in 0..num_classes-1.

This module is longer than 450 lines: the probes share one standardisation, one logistic fit and one L2
search, and their protocol is written once, here; split by probe, the pieces would import each other.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import torch
from einops import rearrange

from fusebench.metrics.arrays import to_numpy
from fusebench.probes.kmeans import DEFAULT_N_INIT, KMEANS_TOL, kmeans
from fusebench.components.reference_features import unit_rows, zscore_stats
from fusebench.runtime.utils import optimizer_class, single_thread

DEFAULT_L2_GRID = (1e-4, 1e-3, 1e-2, 1e-1, 1.0)
#: labels per class of the few-shot probes (metric ids ``fs1_acc``, ``fs5_acc``, ``fs10_acc``)
DEFAULT_SHOTS = (1, 5, 10)
#: seeded draws per shot count
DEFAULT_DRAWS = 20
#: candidate numbers of neighbours of the kNN probe (chosen on val)
DEFAULT_KNN_GRID = (1, 3, 5, 10, 20, 50)
CLUSTER_STANDARDIZE = ("zscore", "none")
#: the bounds of the L2 search (:func:`search_l2`): a grid is never extended below / above them
L2_FLOOR, L2_CEILING = 1e-8, 1e4
FEWSHOT_CHOICE_RULE = ("per shot count s: the probe (logistic | prototype) with the higher mean val accuracy over "
                       "the draws, ties to logistic; fs<s>_best_acc is the chosen probe's val / test accuracy")
PROTOTYPE_RULE = ("SimpleShot CL2N: features centred with the mean of all train-split embeddings (the z-score's mean) "
                  "and z-scored, rows L2-normalised; prototype = mean of a class's normalised support rows; "
                  "prediction = largest cosine similarity to the prototypes, ties to the lower class id")


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
        ok = bool(out) and all(o == v and o >= 1 for o, v in zip(out, values)) and len(set(out)) == len(out)
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(f"probe_and_cluster: {name} = {values!r} must be a non-empty sequence of distinct "
                         f"positive integers")
    return out


def _l2_values(values: Sequence[Any], name: str) -> list[float]:
    try:
        grid = [float(v) for v in values]
    except (TypeError, ValueError):
        grid = []
    if not grid or any(not np.isfinite(v) or v < 0 for v in grid):
        raise ValueError(f"probe_and_cluster: {name} {list(values) if hasattr(values, '__iter__') else values!r} "
                         f"must be a non-empty sequence of finite values >= 0")
    return grid


def _decade(v: float) -> float:
    """``v`` rounded to 12 significant digits (``1e-4 / 10`` is ``1e-05``, not ``1.0000000000000002e-05``)."""
    return float(f"{v:.12g}")


def search_l2(grid: Sequence[float], score: Any) -> dict[str, Any]:
    """The validation search of an L2 weight (module doc): ``score(l2) -> float`` (the val score, higher is
    better) is called once per searched value. The grid's best value (ties to the larger); then, for a grid
    of two or more values, while the chosen value is the smallest (largest) searched value, ``v / 10``
    (``v * 10``) is scored and taken when its score is strictly higher, within [L2_FLOOR, L2_CEILING].
    -> ``{"l2", "scores" {l2: score}, "searched" (ascending), "extended" (in search order), "edge"}``,
    ``edge`` ``"lower"`` / ``"upper"`` when the chosen value is the smallest / largest searched value,
    else None (a one-value grid: None, nothing searched)."""
    scores = {float(v): float(score(v)) for v in grid}
    chosen = max(scores, key=lambda v: (scores[v], v))
    extended: list[float] = []
    while len(scores) >= 2:
        lo, hi = min(scores), max(scores)
        if chosen == lo and lo > 0 and _decade(lo / 10) >= L2_FLOOR:
            nxt = _decade(lo / 10)
        elif chosen == hi and _decade(hi * 10) <= L2_CEILING:
            nxt = _decade(hi * 10)
        else:
            break
        scores[nxt] = float(score(nxt))
        extended.append(nxt)
        if scores[nxt] <= scores[chosen]:
            break
        chosen = nxt
    searched = sorted(scores)
    edge = None
    if len(searched) >= 2:
        edge = "lower" if chosen == searched[0] else "upper" if chosen == searched[-1] else None
    return {"l2": chosen, "scores": scores, "searched": searched, "extended": extended, "edge": edge}


def standardize(fit: np.ndarray, *xs: np.ndarray) -> list[np.ndarray]:
    """z-score every array in ``xs`` with the per-column mean / population std of ``fit``:
    ``(x - mean) / std``; columns constant on ``fit`` become 0."""
    mean, scale, _ = zscore_stats(fit)
    return [(x - mean) / scale for x in xs]


# ---------------------------------------------------------------------------------------------
# linear probe
# ---------------------------------------------------------------------------------------------
def fit_logistic(x: np.ndarray, y: np.ndarray, num_classes: int, l2: Any, max_iter: int = 300
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Multinomial logistic regression (mean CE + l2/2 ||W||_F^2, bias free): full-batch L-BFGS
    (``torch.optim.LBFGS``, strong-Wolfe line search, stop at max-abs gradient <= 1e-7 or a change
    <= 1e-12) from zero, float64, one thread. ``x [n, d]``, ``y [n]`` -> ``(W [d, C], b [C])``.

    Batched form: ``x [B, n, d]``, ``y [B, n]``, ``l2`` a number or ``[B]`` -> ``(W [B, d, C],
    b [B, C])``: B independent problems (each its own mean CE and its own l2) fitted jointly by
    minimising the **sum** of their objectives. The sum is separable, so its minimiser is the tuple of
    the per-problem minimisers, and the max-abs gradient test applies to every problem's gradient;
    the iterates differ from B separate runs only at the solver's tolerance. One joint run costs
    about what one separate run costs (these problems are small; the time is per-iteration overhead).
    """
    if np.ndim(x) == 3:
        return _fit_logistic_batched(x, y, num_classes, l2, max_iter)
    xt = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float64))       # [n, d]
    yt = torch.from_numpy(np.ascontiguousarray(y, dtype=np.int64))         # [n]
    w = torch.zeros(x.shape[1], num_classes, dtype=torch.float64, requires_grad=True)
    b = torch.zeros(num_classes, dtype=torch.float64, requires_grad=True)
    with single_thread(), torch.enable_grad():
        opt = optimizer_class(torch.optim.LBFGS)([w, b], lr=1.0, max_iter=int(max_iter), tolerance_grad=1e-7,
                                tolerance_change=1e-12, history_size=10, line_search_fn="strong_wolfe")

        def closure() -> torch.Tensor:
            w.grad = b.grad = None  # opt.zero_grad() without its profiler scope (the same: set to None)
            loss = torch.nn.functional.cross_entropy(xt @ w + b, yt) + 0.5 * l2 * (w * w).sum()
            loss.backward()
            return loss

        opt.step(closure)
    return w.detach().numpy(), b.detach().numpy()


def _fit_logistic_batched(x: np.ndarray, y: np.ndarray, num_classes: int, l2: Any, max_iter: int
                          ) -> tuple[np.ndarray, np.ndarray]:
    xt = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float64))       # [B, n, d]
    yt = torch.from_numpy(np.ascontiguousarray(y, dtype=np.int64))         # [B, n]
    nb, n, d = xt.shape
    if tuple(yt.shape) != (nb, n):
        raise ValueError(f"fit_logistic: batched y must be [B={nb}, n={n}], got {tuple(yt.shape)}")
    l2t = torch.from_numpy(np.broadcast_to(np.asarray(l2, dtype=np.float64), (nb,)).copy())  # [B]
    if d > n:
        return _fit_logistic_batched_span(xt, yt, num_classes, l2t, max_iter)
    w = torch.zeros(nb, d, num_classes, dtype=torch.float64, requires_grad=True)
    b = torch.zeros(nb, 1, num_classes, dtype=torch.float64, requires_grad=True)
    with single_thread(), torch.enable_grad():
        opt = optimizer_class(torch.optim.LBFGS)([w, b], lr=1.0, max_iter=int(max_iter), tolerance_grad=1e-7,
                                tolerance_change=1e-12, history_size=10, line_search_fn="strong_wolfe")

        def closure() -> torch.Tensor:
            w.grad = b.grad = None  # opt.zero_grad() without its profiler scope (the same: set to None)
            logits = torch.bmm(xt, w) + b                                   # [B, n, C]
            ce = torch.nn.functional.cross_entropy(logits.reshape(nb * n, num_classes), yt.reshape(-1),
                                                   reduction="sum") / n     # sum over problems of mean CE
            loss = ce + 0.5 * (l2t * (w * w).sum(dim=(1, 2))).sum()
            loss.backward()
            return loss

        opt.step(closure)
    return w.detach().numpy(), b.detach().numpy()[:, 0]


def _fit_logistic_batched_span(xt: torch.Tensor, yt: torch.Tensor, num_classes: int, l2t: torch.Tensor,
                               max_iter: int) -> tuple[np.ndarray, np.ndarray]:
    """The batched fit when features outnumber samples (d > n: few-shot probes of wide features), in the
    row space of x. With the reduced QR factorisation ``x^T = Q R`` (``Q [d, n]`` orthonormal columns),
    every gradient of the objective, ``x^T G + l2 W``, and so every L-BFGS iterate started from W = 0,
    lies in the span of Q: ``W = Q V``. Because ``Q`` is an isometry (``||Q V|| = ||V||``, inner
    products preserved), minimising over ``V [n, C]`` with the features ``x Q = R^T [n, n]`` is the
    same problem with the same L-BFGS trajectory (up to rounding) at O(n^2 C) per iteration instead of
    O(n d C). Returns ``W = Q V`` and ``b``."""
    with single_thread():  # like every other step of the probes: the same bits whatever the thread count
        q, r = torch.linalg.qr(xt.transpose(1, 2), mode="reduced")           # [B, d, n], [B, n, n]
    v, b = _fit_logistic_batched(r.transpose(1, 2).numpy(), yt.numpy(), num_classes, l2t.numpy(), max_iter)
    with single_thread():
        w = torch.bmm(q, torch.from_numpy(v))                                # [B, d, C]
    return w.numpy(), b


def _predict(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    """argmax of ``x W + b``: ``x [n, d]`` with ``W [d, C]`` -> ``[n]``, or with ``W [B, d, C]``,
    ``b [B, C]`` -> ``[B, n]`` (ties to the lower class id)."""
    with single_thread():
        xt, wt, bt = (torch.from_numpy(np.ascontiguousarray(a)) for a in (x, w, b))
        if wt.dim() == 3:
            return (torch.matmul(xt, wt) + bt[:, None, :]).argmax(dim=2).numpy()
        return (xt @ wt + bt).argmax(dim=1).numpy()


def _accuracy(pred: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Fraction correct along the last axis (``pred [..., n]``, ``y [n]``)."""
    return (pred == y).mean(axis=-1)


# ---------------------------------------------------------------------------------------------
# few-shot probes
# ---------------------------------------------------------------------------------------------
def fewshot_indices(y: np.ndarray, s: int, draws: int, seed: int, num_classes: int) -> np.ndarray:
    """The few-shot training sets: ``[draws, num_classes * s]`` train indices, class-major (the s
    indices of class 0, then class 1, ...). Generator ``default_rng(SeedSequence([seed, s]))``; draw
    j takes, for c = 0..C-1, ``rng.choice(flatnonzero(y == c), size=s, replace=False)``. ValueError when
    a class has fewer than s samples."""
    pools = [np.flatnonzero(y == c) for c in range(num_classes)]
    short = [(c, p.size) for c, p in enumerate(pools) if p.size < s]
    if short:
        c, have = short[0]
        raise ValueError(f"probe_and_cluster: fewshot_shots asks for s = {s} train samples per class, but class "
                         f"{c} has only {have} (classes short of samples: {[c for c, _ in short]})")
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), int(s)]))
    out = np.empty((draws, num_classes * s), dtype=np.int64)
    for j in range(draws):
        out[j] = np.concatenate([rng.choice(p, size=s, replace=False) for p in pools])
    return out


def prototype_predict(support: np.ndarray, support_y: np.ndarray, query: np.ndarray, num_classes: int
                      ) -> np.ndarray:
    """Nearest-prototype predictions by cosine similarity (the module doc's prototype probe) on features
    that are already centred: ``support [B, n, d]`` with labels ``support_y [B, n]`` (B independent support
    sets), ``query [m, d]`` -> ``[B, m]`` class ids. Rows are L2-normalised (zero rows stay zero), a
    prototype is the mean of its class's normalised support rows (a class absent from a support set gets a
    zero prototype), a query goes to the prototype with the largest ``<u, p_c> / ||p_c||`` (zero
    prototype: 0), ties to the lower class id."""
    with single_thread():
        u = torch.from_numpy(unit_rows(np.asarray(support, dtype=np.float64).reshape(-1, support.shape[-1])))
        u = u.reshape(support.shape)                                                   # [B, n, d]
        onehot = torch.nn.functional.one_hot(torch.from_numpy(np.asarray(support_y, dtype=np.int64)),
                                             num_classes).to(torch.float64)           # [B, n, C]
        counts = onehot.sum(dim=1)                                                     # [B, C]
        proto = torch.bmm(onehot.transpose(1, 2), u) / counts.clamp_min(1.0)[:, :, None]  # [B, C, d]
        norm = proto.norm(dim=2, keepdim=True)
        proto = torch.where(norm > 0, proto / torch.where(norm > 0, norm, torch.ones_like(norm)), proto)
        q = torch.from_numpy(unit_rows(np.asarray(query, dtype=np.float64)))           # [m, d]
        return torch.matmul(q, proto.transpose(1, 2)).argmax(dim=2).numpy()            # [B, m]


def fewshot_probe(ztr: np.ndarray, ytr: np.ndarray, zva: np.ndarray, yva: np.ndarray, zte: np.ndarray,
                  yte: np.ndarray, num_classes: int, seed: int, shots: Sequence[int] = DEFAULT_SHOTS,
                  draws: int = DEFAULT_DRAWS, l2_grid: Sequence[float] = DEFAULT_L2_GRID,
                  max_iter: int = 300) -> dict[str, Any]:
    """Few-shot logistic and prototype probes on already z-scored features, on the same draws (see the
    module doc for the protocol).

    -> ``{"shots", "draws", "l2_grid", "sampling", "standardize", "selection", "prototype", "choice",
    "per_shot": {str(s): {"l2", "val_acc_by_l2", "l2_searched", "l2_extended", "l2_edge", "val_acc",
    "test_acc", "test_acc_std", "val_acc_per_draw", "test_acc_per_draw", "prototype": {"val_acc",
    "test_acc", "test_acc_std", "val_acc_per_draw", "test_acc_per_draw"}, "chosen", "best_val_acc",
    "best_test_acc"}}}``; the unprefixed accuracies are the logistic probe's: means over draws of the
    chosen l2, ``test_acc_std`` the population std over draws.
    """
    per_shot: dict[str, Any] = {}
    for s in shots:
        idx = fewshot_indices(ytr, s, draws, seed, num_classes)                   # [draws, C*s]
        xb, yb = ztr[idx], ytr[idx]                                               # [draws, C*s, d], [draws, C*s]
        val_by, test_by = {}, {}

        def score(l2: float) -> float:
            w, b = fit_logistic(xb, yb, num_classes, l2, max_iter)
            val_by[l2] = _accuracy(_predict(zva, w, b), yva)                      # [draws]
            test_by[l2] = _accuracy(_predict(zte, w, b), yte)
            return float(val_by[l2].mean())

        search = search_l2(l2_grid, score)
        chosen = search["l2"]
        proto_val = _accuracy(prototype_predict(xb, yb, zva, num_classes), yva)  # [draws]
        proto_test = _accuracy(prototype_predict(xb, yb, zte, num_classes), yte)
        logistic_val = float(val_by[chosen].mean())
        probe = "prototype" if float(proto_val.mean()) > logistic_val else "logistic"
        per_shot[str(s)] = {
            "l2": chosen,
            "val_acc_by_l2": {repr(v): search["scores"][v] for v in search["searched"]},
            "l2_searched": search["searched"], "l2_extended": search["extended"], "l2_edge": search["edge"],
            "val_acc": logistic_val,
            "test_acc": float(test_by[chosen].mean()),
            "test_acc_std": float(test_by[chosen].std()),
            "val_acc_per_draw": [float(a) for a in val_by[chosen]],
            "test_acc_per_draw": [float(a) for a in test_by[chosen]],
            "prototype": {
                "val_acc": float(proto_val.mean()), "test_acc": float(proto_test.mean()),
                "test_acc_std": float(proto_test.std()),
                "val_acc_per_draw": [float(a) for a in proto_val],
                "test_acc_per_draw": [float(a) for a in proto_test],
            },
            "chosen": probe,
            "best_val_acc": float(proto_val.mean()) if probe == "prototype" else logistic_val,
            "best_test_acc": float(proto_test.mean()) if probe == "prototype" else float(test_by[chosen].mean()),
        }
    return {
        "shots": [int(s) for s in shots], "draws": int(draws), "l2_grid": [float(v) for v in l2_grid],
        "sampling": "per shot s: default_rng(SeedSequence([seed, s])); per draw, per class c ascending: "
                    "choice(train indices of c, s, replace=False)",
        "standardize": "zscore_train (mean/std of all train embeddings, no labels used)",
        "selection": "per shot: l2 with the highest mean val accuracy over draws, ties to the larger l2; a grid of "
                     f"two or more values extended by decades beyond the chosen edge while strictly better, within "
                     f"[{L2_FLOOR:g}, {L2_CEILING:g}]",
        "optimizer": "lbfgs_strong_wolfe_float64 (draws of one shot and l2 fitted jointly, separable sum)",
        "prototype": PROTOTYPE_RULE, "choice": FEWSHOT_CHOICE_RULE,
        "max_iter": int(max_iter), "per_shot": per_shot,
    }


def chosen_fewshot_val(source: Mapping[str, Any], shots: int = 1) -> float:
    """The validation score of the few-shot probe chosen for a run (metric ``fs<shots>_best_acc``): the mean
    val accuracy over the draws of the probe the run chose (module doc). ``source`` is what
    :func:`probe_and_cluster` returned or a run record (``run.json`` as a mapping) of the ``embedding_eval``
    protocol; a record written before the prototype probe existed had only the logistic probe, whose
    val score is then returned. ValueError when ``source`` has no few-shot probe with ``shots`` labels per
    class."""
    s = int(shots)
    best = f"fs{s}_best_acc"
    if f"val_{best}" in source:                                            # probe_and_cluster's result
        return float(source[f"val_{best}"])
    selection = source.get("selection") if isinstance(source.get("selection"), Mapping) else {}
    val = selection.get("val_metrics") if isinstance(selection.get("val_metrics"), Mapping) else {}
    if isinstance(val.get(best), (int, float)):
        return float(val[best])
    fewshot = source.get("fewshot") or selection.get("fewshot")            # the probe's own record
    per = ((fewshot or {}).get("per_shot") or {}).get(str(s)) if isinstance(fewshot, Mapping) else None
    if isinstance(per, Mapping):
        return float(per.get("best_val_acc", per["val_acc"]))             # older records: logistic only
    raise ValueError(f"chosen_fewshot_val: no few-shot probe with {s} label(s) per class in this "
                     f"{'record' if 'selection' in source else 'result'} (its fewshot_shots do not include {s})")


# ---------------------------------------------------------------------------------------------
# kNN probe
# ---------------------------------------------------------------------------------------------
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
    val_by = {k: float(_accuracy(p, yva)) for k, p in knn_predict(ztr, ytr, zva, ks, num_classes).items()}
    chosen = max(ks, key=lambda k: (val_by[k], k))
    pred = knn_predict(ztr, ytr, zte, [chosen], num_classes)[chosen]
    return {
        "grid": ks, "k": int(chosen), "val_acc_by_k": {str(k): v for k, v in val_by.items()},
        "val_acc": val_by[chosen], "test_acc": float(_accuracy(pred, yte)),
        "similarity": "cosine on zscore_train embeddings (zero rows: similarity 0)",
        "selection": "highest val accuracy, ties to the larger k",
        "tie_break": "equal similarities: lower train index first; tied vote: larger summed similarity, "
                     "then lower class id",
    }


def _linear_probe(ztr: np.ndarray, zva: np.ndarray, zte: np.ndarray, ys: dict[str, np.ndarray], num_classes: int,
                  grid: list[float], probe_max_iter: int) -> dict[str, Any]:
    """Part (a) of :func:`probe_and_cluster`: the logistic probe on all training samples, L2 chosen on val."""
    from fusebench import metrics as M

    fits = {}

    def score(l2: float) -> float:
        fits[l2] = fit_logistic(ztr, ys["train"], num_classes, l2, probe_max_iter)
        return float(M.get("acc")(_predict(zva, *fits[l2]), ys["val"]))

    search = search_l2(grid, score)
    chosen = search["l2"]
    w, b = fits[chosen]
    pv, pt = _predict(zva, w, b), _predict(zte, w, b)
    out: dict[str, Any] = {
        "val_acc": float(M.get("acc")(pv, ys["val"])),
        "val_macro_f1": float(M.get("mf1")(pv, ys["val"])),
        "test_acc": float(M.get("acc")(pt, ys["test"])),
        "test_macro_f1": float(M.get("mf1")(pt, ys["test"])),
        "probe": {
            "l2_grid": grid, "l2": chosen, "val_acc_by_l2": {repr(k): search["scores"][k] for k in search["searched"]},
            "l2_searched": search["searched"], "l2_extended": search["extended"], "l2_edge": search["edge"],
            "selection": "highest val accuracy, ties to the larger l2; a grid of two or more values extended by "
                         f"decades beyond the chosen edge while strictly better, within [{L2_FLOOR:g}, {L2_CEILING:g}]",
            "standardize": "zscore_train",
            "optimizer": "lbfgs_strong_wolfe_float64", "max_iter": int(probe_max_iter),
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
    seeded generators of their own."""
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
    xs = {s: _as_2d(e, f"{s}_emb") for s, e in (("train", train_emb), ("val", val_emb), ("test", test_emb))}
    dims = {x.shape[1] for x in xs.values()}
    if len(dims) != 1:
        raise ValueError(f"probe_and_cluster: embedding widths differ between splits: "
                         f"{ {s: x.shape[1] for s, x in xs.items()} }")
    ys = {s: _as_labels(y, xs[s].shape[0], num_classes, f"{s}_y")
          for s, y in (("train", train_y), ("val", val_y), ("test", test_y))}

    # (a) linear probe, L2 chosen on val
    ztr, zva, zte = standardize(xs["train"], xs["train"], xs["val"], xs["test"])
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

    # (d) k-means
    if cluster:
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


__all__ = ["CLUSTER_STANDARDIZE", "DEFAULT_DRAWS", "DEFAULT_KNN_GRID", "DEFAULT_L2_GRID", "DEFAULT_SHOTS",
           "FEWSHOT_CHOICE_RULE", "L2_CEILING", "L2_FLOOR", "PROTOTYPE_RULE", "chosen_fewshot_val",
           "fewshot_indices", "fewshot_probe", "fit_logistic", "knn_predict", "knn_probe", "probe_and_cluster",
           "prototype_predict", "search_l2", "standardize"]
