"""Frozen-embedding evaluation: a linear probe and k-means clustering on the same embeddings.

``probe_and_cluster(train_emb, train_y, val_emb, val_y, test_emb, test_y, num_classes, seed)`` returns
one dict with

* the **linear probe** (multinomial logistic regression on the embeddings z-scored with the *train*
  mean/std; features constant on train become 0): weights ``W [d, C]`` and bias ``b [C]`` minimise
  ``mean_i CE(softmax(x_i W + b), y_i) + l2 / 2 * ||W||_F^2`` (bias not penalised), full batch, float64,
  L-BFGS (``torch.optim.LBFGS``, strong-Wolfe line search) from zero on one thread, so the result does
  not depend on a seed or on the thread count. The L2 weight is chosen on the **validation** split
  only: the grid value with the highest val accuracy, ties to the larger (more regularised) value;
  the test split is scored once, with that value.
  Keys: ``val_acc``, ``val_macro_f1``, ``test_acc``, ``test_macro_f1`` (metrics ``acc`` and ``mf1`` of
  :mod:`fusebench.metrics`: macro F1 over the classes seen in y_true or y_pred) and the record
  ``probe = {"l2_grid", "l2", "val_acc_by_l2", "selection", "standardize", "optimizer", "max_iter"}``.
* **k-means** with k = ``num_classes`` on the z-scored embeddings of ``cluster_on`` = ``"all"``
  (train + val + test, the default: the multi-view clustering literature clusters every sample and
  labels are used only for scoring) or ``"test"``; k-means++ seeding (first centre uniform, the next
  ones drawn with probability proportional to the squared distance to the nearest chosen centre),
  Lloyd iterations until no assignment changes (at most ``kmeans_max_iter``), an emptied cluster is
  re-seeded with the point farthest from its centre; ``n_init`` restarts from generators derived
  from ``seed`` and the lowest inertia wins (ties to the earlier restart). Keys: ``cluster_acc``,
  ``nmi``, ``ari`` (:mod:`fusebench.metrics.clustering`) and the record ``clustering = {"on",
  "num_samples", "k", "n_init", "init", "inertia", "seed", "standardize"}``.

Precision: embeddings of any float dtype (bfloat16 / float16 from a mixed-precision encoder
included) are widened to float64 on entry (exact, :func:`fusebench.metrics.arrays.to_numpy`), and
every reduction runs in float64; autocast never casts float64 tensors, so a caller's autocast changes
nothing.

Deterministic given ``seed`` (torch on CPU, one intra-op thread inside this module, restored
afterwards; numpy only for element-wise work). Cost: 2000 x 96 embeddings, 10 classes, default
grid and n_init: about 0.7 s of CPU time on the 2-core development machine (the first torch
optimizer built in a process also imports torch._dynamo, once).

Shape: ``*_emb`` [n, d], or per-view ``[k, n, d]`` (concatenated to ``[n, k*d]``, as
:mod:`fusebench.metrics.fewshot` does); numpy or torch, any float dtype. ``*_y`` [n] integer class
ids in 0..num_classes-1.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator, Sequence

import numpy as np
import torch
from einops import rearrange

from fusebench.metrics.arrays import to_numpy

DEFAULT_L2_GRID = (1e-4, 1e-3, 1e-2, 1e-1, 1.0)


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


def standardize(fit: np.ndarray, *xs: np.ndarray) -> list[np.ndarray]:
    """z-score every array in ``xs`` with the per-column mean/std of ``fit``; columns constant on
    ``fit`` become 0."""
    mean = fit.mean(axis=0)
    std = fit.std(axis=0)
    constant = fit.max(axis=0) == fit.min(axis=0)
    scale = np.where(constant | (std == 0), np.inf, std)
    mean = np.where(constant, 0.0, mean)
    return [(x - mean) / scale for x in xs]


@contextmanager
def single_thread() -> Iterator[None]:
    """Run torch ops on one intra-op thread (restored afterwards): these matrices are small, so threads
    only add overhead (and contention on a busy machine), and one thread fixes the reduction order."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


# ---------------------------------------------------------------------------------------------
# linear probe
# ---------------------------------------------------------------------------------------------
def fit_logistic(x: np.ndarray, y: np.ndarray, num_classes: int, l2: float, max_iter: int = 300
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Multinomial logistic regression (mean CE + l2/2 ||W||_F^2, bias free): full-batch L-BFGS
    (``torch.optim.LBFGS``, strong-Wolfe line search) from zero, float64, one thread.
    -> (W [d, C], b [C])."""
    xt = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float64))       # [n, d]
    yt = torch.from_numpy(np.ascontiguousarray(y, dtype=np.int64))         # [n]
    w = torch.zeros(x.shape[1], num_classes, dtype=torch.float64, requires_grad=True)
    b = torch.zeros(num_classes, dtype=torch.float64, requires_grad=True)
    with single_thread(), torch.enable_grad():
        opt = torch.optim.LBFGS([w, b], lr=1.0, max_iter=int(max_iter), tolerance_grad=1e-7,
                                tolerance_change=1e-12, history_size=10, line_search_fn="strong_wolfe")

        def closure() -> torch.Tensor:
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(xt @ w + b, yt) + 0.5 * l2 * (w * w).sum()
            loss.backward()
            return loss

        opt.step(closure)
    return w.detach().numpy(), b.detach().numpy()


def _predict(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    with single_thread():
        logits = torch.from_numpy(np.ascontiguousarray(x)) @ torch.from_numpy(np.ascontiguousarray(w))
        return (logits + torch.from_numpy(b)).argmax(dim=1).numpy()


# ---------------------------------------------------------------------------------------------
# k-means
# ---------------------------------------------------------------------------------------------
def _sq_dists(x: torch.Tensor, x_sq: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """Squared distances [n, k] (clipped at 0 against rounding)."""
    return (x_sq[:, None] - 2.0 * (x @ c.T) + (c * c).sum(dim=1)[None, :]).clamp_min(0.0)


def _kmeanspp(x: torch.Tensor, x_sq: torch.Tensor, k: int, rng: np.random.Generator) -> torch.Tensor:
    n = x.shape[0]
    centres = [x[int(rng.integers(n))]]
    closest = _sq_dists(x, x_sq, centres[0][None])[:, 0].numpy()
    for _ in range(1, k):
        total = closest.sum()
        if total <= 0:  # fewer distinct points than k: any point
            i = int(rng.integers(n))
        else:
            i = min(int(np.searchsorted(np.cumsum(closest), rng.random() * total, side="right")), n - 1)
        centres.append(x[i])
        closest = np.minimum(closest, _sq_dists(x, x_sq, x[i][None])[:, 0].numpy())
    return torch.stack(centres)


def kmeans(x: np.ndarray, k: int, seed: int, n_init: int = 10, max_iter: int = 300
           ) -> tuple[np.ndarray, np.ndarray, float]:
    """Seeded k-means (k-means++ init, Lloyd). -> (labels [n], centres [k, d], inertia)."""
    n = x.shape[0]
    if not 1 <= k <= n:
        raise ValueError(f"kmeans: k = {k} must be in 1..{n} (the number of samples)")
    with single_thread():
        xt = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float64))  # [n, d]
        x_sq = (xt * xt).sum(dim=1)
        rows = torch.arange(n)
        best: tuple[np.ndarray, np.ndarray, float] | None = None
        for rng in (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(n_init)):
            c = _kmeanspp(xt, x_sq, k, rng)                                  # [k, d]
            labels = torch.full((n,), -1, dtype=torch.int64)
            for _ in range(max_iter):
                d = _sq_dists(xt, x_sq, c)                                   # [n, k]
                new = d.argmin(dim=1)
                if torch.equal(new, labels):
                    break
                labels = new
                for j in np.flatnonzero(torch.bincount(labels, minlength=k).numpy() == 0):
                    far = int(d[rows, labels].argmax())  # re-seed an emptied cluster with the worst-fit point
                    labels[far] = int(j)
                    d[far] = 0.0
                onehot = torch.nn.functional.one_hot(labels, k).double()     # [n, k]
                c = (onehot.T @ xt) / onehot.sum(dim=0)[:, None]
            inertia = float(_sq_dists(xt, x_sq, c)[rows, labels].sum())
            if best is None or inertia < best[2]:
                best = (labels.numpy().copy(), c.numpy().copy(), inertia)
    assert best is not None
    return best


# ---------------------------------------------------------------------------------------------
# the entry point
# ---------------------------------------------------------------------------------------------
def probe_and_cluster(
    train_emb: Any, train_y: Any, val_emb: Any, val_y: Any, test_emb: Any, test_y: Any,
    num_classes: int, seed: int, *,
    l2_grid: Sequence[float] = DEFAULT_L2_GRID, probe_max_iter: int = 300,
    cluster_on: str = "all", n_init: int = 10, kmeans_max_iter: int = 300,
) -> dict[str, Any]:
    """Linear-probe accuracy / macro-F1 (L2 chosen on val) and k-means ACC / NMI / ARI; see the module doc."""
    from fusebench import metrics as M

    num_classes = int(num_classes)
    if num_classes < 2:
        raise ValueError(f"probe_and_cluster: num_classes = {num_classes}, need at least 2")
    if cluster_on not in ("all", "test"):
        raise ValueError(f"probe_and_cluster: cluster_on={cluster_on!r} must be 'all' or 'test'")
    grid = [float(v) for v in l2_grid]
    if not grid or any(not np.isfinite(v) or v < 0 for v in grid):
        raise ValueError(f"probe_and_cluster: l2_grid {list(l2_grid)} must be non-empty, finite, >= 0")
    xs = {s: _as_2d(e, f"{s}_emb") for s, e in (("train", train_emb), ("val", val_emb), ("test", test_emb))}
    dims = {x.shape[1] for x in xs.values()}
    if len(dims) != 1:
        raise ValueError(f"probe_and_cluster: embedding widths differ between splits: "
                         f"{ {s: x.shape[1] for s, x in xs.items()} }")
    ys = {s: _as_labels(y, xs[s].shape[0], num_classes, f"{s}_y")
          for s, y in (("train", train_y), ("val", val_y), ("test", test_y))}

    # (a) linear probe, L2 chosen on val
    ztr, zva, zte = standardize(xs["train"], xs["train"], xs["val"], xs["test"])
    fits, val_acc_by = {}, {}
    for l2 in grid:
        fits[l2] = fit_logistic(ztr, ys["train"], num_classes, l2, probe_max_iter)
        val_acc_by[l2] = float(M.get("acc")(_predict(zva, *fits[l2]), ys["val"]))
    chosen = max(grid, key=lambda v: (val_acc_by[v], v))
    w, b = fits[chosen]
    pv, pt = _predict(zva, w, b), _predict(zte, w, b)
    out: dict[str, Any] = {
        "val_acc": float(M.get("acc")(pv, ys["val"])),
        "val_macro_f1": float(M.get("mf1")(pv, ys["val"])),
        "test_acc": float(M.get("acc")(pt, ys["test"])),
        "test_macro_f1": float(M.get("mf1")(pt, ys["test"])),
        "probe": {
            "l2_grid": grid, "l2": chosen, "val_acc_by_l2": {repr(k): v for k, v in val_acc_by.items()},
            "selection": "highest val accuracy, ties to the larger l2", "standardize": "zscore_train",
            "optimizer": "lbfgs_strong_wolfe_float64", "max_iter": int(probe_max_iter),
        },
    }

    # (b) k-means on the standardised embeddings
    if cluster_on == "all":
        xc = np.concatenate([xs["train"], xs["val"], xs["test"]])
        yc = np.concatenate([ys["train"], ys["val"], ys["test"]])
    else:
        xc, yc = xs["test"], ys["test"]
    (zc,) = standardize(xc, xc)
    labels, _, inertia = kmeans(zc, num_classes, seed, n_init=n_init, max_iter=kmeans_max_iter)
    out.update({
        "cluster_acc": float(M.get("cluster_acc")(labels, yc)),
        "nmi": float(M.get("nmi")(labels, yc)),
        "ari": float(M.get("ari")(labels, yc)),
        "clustering": {
            "on": cluster_on, "num_samples": int(yc.size), "k": num_classes, "n_init": int(n_init),
            "init": "k-means++", "inertia": inertia, "seed": int(seed), "standardize": "zscore_clustered_samples",
        },
    })
    return out


__all__ = ["DEFAULT_L2_GRID", "fit_logistic", "kmeans", "probe_and_cluster", "standardize"]
