"""k-means as the clustering literature runs it (engine layer): greedy k-means++ seeding (``2 + floor(ln k)``
candidates per centre, the best kept), Lloyd iterations to convergence, ``n_init`` restarts from one
seeded generator, the lowest-inertia solution kept. scikit-learn's ``KMeans(init="k-means++")`` is the
reference (tests/test_clustering_probe.py)."""

from __future__ import annotations

import math

import numpy as np
import torch

from fusebench.runtime.utils import single_thread

#: k-means restarts of the boards
DEFAULT_N_INIT = 100
#: k-means convergence: total squared centre shift <= KMEANS_TOL * mean per-feature variance
KMEANS_TOL = 1e-4


def _sq_dists(x: torch.Tensor, x_sq: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """Squared distances [n, k] = ``(||x||^2 - 2 x.c) + ||c||^2`` (clipped at 0 against rounding), computed in
    place in the product's buffer: ``-2 p + ||x||^2`` is ``||x||^2 - 2 p`` to the bit (scaling by a power of
    two is exact, one IEEE addition commutes), so the values are those of the expression written out."""
    return (x @ c.T).mul_(-2.0).add_(x_sq[:, None]).add_((c * c).sum(dim=1)[None, :]).clamp_min_(0.0)


def kmeans_plusplus(x: torch.Tensor, x_sq: torch.Tensor, k: int, rng: np.random.Generator,
                    n_local_trials: int | None = None) -> np.ndarray:
    """Greedy k-means++ seeding -> indices [k] of the rows chosen as initial centres.

    The first centre is a uniformly drawn row. Each next centre: with D(i) = squared distance of row i
    to its nearest chosen centre and potential phi = sum_i D(i), draw ``n_local_trials`` candidates
    (default ``2 + floor(ln k)``, the rule of scikit-learn's implementation of Arthur and
    Vassilvitskii's "k-means++: the advantages of careful seeding", SODA 2007), each with probability
    D(i) / phi (inverse CDF: the first i with cumsum(D)[i] > u * phi, u ~ U[0, 1)), and keep the one
    giving the lowest potential sum_i min(D(i), ||x_i - candidate||^2) (ties to the first drawn).
    If phi = 0 (fewer distinct rows than k) the candidates are drawn uniformly.
    """
    n = x.shape[0]
    trials = 2 + int(math.log(k)) if n_local_trials is None else int(n_local_trials)
    chosen = [int(rng.integers(n))]
    closest = _sq_dists(x, x_sq, x[chosen]).numpy()[:, 0]                         # [n]
    potential = float(closest.sum())
    for _ in range(1, k):
        if potential > 0:
            cand = np.searchsorted(np.cumsum(closest), rng.random(trials) * potential, side="right")
            cand = np.minimum(cand, n - 1)
        else:
            cand = rng.integers(n, size=trials)
        trial = np.minimum(closest[:, None], _sq_dists(x, x_sq, x[torch.from_numpy(cand)]).numpy())  # [n, L]
        pots = trial.sum(axis=0)
        best = int(np.argmin(pots))
        chosen.append(int(cand[best]))
        closest, potential = trial[:, best], float(pots[best])
    return np.asarray(chosen, dtype=np.int64)


def _lloyd(xt: torch.Tensor, x_sq: torch.Tensor, c: torch.Tensor, max_iter: int, tol_abs: float
           ) -> tuple[torch.Tensor, torch.Tensor, float]:
    """Lloyd iterations from centres ``c [k, d]`` -> (final centres, labels of the rows assigned to
    them, sum of the rows' squared distances to their centres in the expanded form)."""
    n, k = xt.shape[0], c.shape[0]
    rows = torch.arange(n)
    previous = None
    for _ in range(max_iter):
        d = _sq_dists(xt, x_sq, c)                                                # [n, k]
        labels = d.argmin(dim=1)
        if previous is not None and torch.equal(labels, previous):
            return c, labels, float(d[rows, labels].sum())  # a fixed point: the means are c already
        counts = torch.bincount(labels, minlength=k)
        members = counts.numpy().copy()
        empty = np.flatnonzero(members == 0)
        for j in empty:
            # re-seed an emptied cluster with the worst-fit point among the clusters of two or more rows (one exists:
            # n >= k), so the move never empties another cluster (whose centre would be 0 / 0 = NaN: with fewer
            # distinct rows than k every distance is 0, and the first row was moved into every empty cluster in turn)
            fit = d[rows, labels].numpy()
            movable = np.flatnonzero(members[labels.numpy()] > 1)
            far = int(movable[np.argmax(fit[movable])])  # the first of equal distances, as argmax over all rows
            members[int(labels[far])] -= 1
            members[j] += 1
            labels[far] = int(j)
            d[far] = 0.0
        if empty.size:  # the counts after the re-seeding
            counts = torch.bincount(labels, minlength=k)
        sums = torch.zeros_like(c).index_add_(0, labels, xt)
        new = sums / counts.to(xt.dtype)[:, None]
        shift = float(((new - c) ** 2).sum())
        c = new
        previous = labels
        if shift <= tol_abs:
            break
    d = _sq_dists(xt, x_sq, c)  # stopped on the shift or max_iter: assign the rows to the final centres
    labels = d.argmin(dim=1)
    return c, labels, float(d[rows, labels].sum())


def kmeans(x: np.ndarray, k: int, seed: int, n_init: int = DEFAULT_N_INIT, max_iter: int = 300,
           tol: float = KMEANS_TOL) -> tuple[np.ndarray, np.ndarray, float]:
    """Seeded k-means -> (labels [n], centres [k, d], inertia = sum_i ||x_i - c_{label_i}||^2).

    ``n_init`` restarts, restart r using ``default_rng(SeedSequence(seed).spawn(n_init)[r])`` (so the
    first r restarts do not depend on ``n_init``): greedy k-means++ seeding (:func:`kmeans_plusplus`),
    then Lloyd iterations (assign every row to its nearest centre, ties to the lower centre index;
    move each centre to the mean of its rows; a cluster left empty gets the row farthest from its
    centre among the clusters of two or more rows, so no other cluster is emptied) until the partition stops
    changing, or the total squared centre shift is <= ``tol`` times
    the mean per-column variance of ``x`` (scikit-learn's rule), or ``max_iter`` iterations (the
    rows are then assigned to the final centres). Squared distances are computed as
    ``||x||^2 - 2 x.c + ||c||^2`` (clipped at 0); the restart of lowest inertia in that form is kept
    (ties to the earlier restart), and its reported inertia is recomputed directly as
    ``sum_i ||x_i - c_{label_i}||^2``. A restart whose seeding chose the same rows in the same order as
    an earlier one is not iterated again: Lloyd's iterations are a function of the starting centres, so it
    would reach the earlier restart's inertia, and a tie keeps the earlier restart.
    """
    x = np.asarray(x, dtype=np.float64)
    n = x.shape[0]
    if not 1 <= k <= n:
        raise ValueError(f"kmeans: k = {k} must be in 1..{n} (the number of samples)")
    if int(n_init) < 1:
        raise ValueError(f"kmeans: n_init = {n_init} must be >= 1")
    if not (np.isfinite(tol) and tol >= 0):
        raise ValueError(f"kmeans: tol = {tol} must be finite and >= 0")
    tol_abs = float(tol) * float(x.var(axis=0).mean())
    with single_thread():
        xt = torch.from_numpy(np.ascontiguousarray(x))                           # [n, d]
        x_sq = (xt * xt).sum(dim=1)
        best: tuple[torch.Tensor, torch.Tensor, float] | None = None
        started: set[bytes] = set()
        for rng in (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(int(n_init))):
            start = kmeans_plusplus(xt, x_sq, k, rng)
            if start.tobytes() in started:  # the same start as an earlier restart: the same result, never kept
                continue
            started.add(start.tobytes())
            c, labels, inertia = _lloyd(xt, x_sq, xt[torch.from_numpy(start)].clone(), int(max_iter), tol_abs)
            if best is None or inertia < best[2]:
                best = (labels, c, inertia)
        assert best is not None
        labels, c, _ = best
        inertia = float(((xt - c[labels]) ** 2).sum())
    return labels.numpy().copy(), c.numpy().copy(), inertia


__all__ = ["DEFAULT_N_INIT", "KMEANS_TOL", "kmeans", "kmeans_plusplus"]
