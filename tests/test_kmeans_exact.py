"""k-means made cheaper without changing a bit (issue #31, item 5): the in-place squared distances, one
``bincount`` per Lloyd iteration and the skipped restarts whose seeding repeats an earlier one give exactly
the labels, centres and inertia of the straightforward implementation kept here (the module as it was),
``==`` on every float."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from fusebench.probes import kmeans as km

pytestmark = pytest.mark.usefixtures("one_torch_thread")


# ---- the slow reference: the implementation before the speed-ups, written out --------------------------------
def _ref_sq_dists(x, x_sq, c):
    return (x_sq[:, None] - 2.0 * (x @ c.T) + (c * c).sum(dim=1)[None, :]).clamp_min(0.0)


def _ref_plusplus(x, x_sq, k, rng):
    n = x.shape[0]
    trials = 2 + int(math.log(k))
    chosen = [int(rng.integers(n))]
    closest = _ref_sq_dists(x, x_sq, x[chosen]).numpy()[:, 0]
    potential = float(closest.sum())
    for _ in range(1, k):
        if potential > 0:
            cand = np.minimum(np.searchsorted(np.cumsum(closest), rng.random(trials) * potential, side="right"), n - 1)
        else:
            cand = rng.integers(n, size=trials)
        trial = np.minimum(closest[:, None], _ref_sq_dists(x, x_sq, x[torch.from_numpy(cand)]).numpy())
        pots = trial.sum(axis=0)
        best = int(np.argmin(pots))
        chosen.append(int(cand[best]))
        closest, potential = trial[:, best], float(pots[best])
    return np.asarray(chosen, dtype=np.int64)


def _ref_lloyd(xt, x_sq, c, max_iter, tol_abs):
    n, k = xt.shape[0], c.shape[0]
    rows = torch.arange(n)
    previous = None
    for _ in range(max_iter):
        d = _ref_sq_dists(xt, x_sq, c)
        labels = d.argmin(dim=1)
        if previous is not None and torch.equal(labels, previous):
            return c, labels, float(d[rows, labels].sum())
        for j in np.flatnonzero(torch.bincount(labels, minlength=k).numpy() == 0):
            # the worst-fit row among the clusters of two or more rows (a move never empties another cluster;
            # the module before took the worst-fit row of any cluster, and with fewer distinct rows than k moved the
            # first row into every empty cluster in turn, leaving NaN centres)
            sizes = torch.bincount(labels, minlength=k)
            fit = torch.where(sizes[labels] > 1, d[rows, labels], torch.full((n,), -1.0, dtype=d.dtype))
            far = int(fit.argmax())
            labels[far] = int(j)
            d[far] = 0.0
        sums = torch.zeros_like(c).index_add_(0, labels, xt)
        new = sums / torch.bincount(labels, minlength=k).to(xt.dtype)[:, None]
        shift = float(((new - c) ** 2).sum())
        c = new
        previous = labels
        if shift <= tol_abs:
            break
    d = _ref_sq_dists(xt, x_sq, c)
    labels = d.argmin(dim=1)
    return c, labels, float(d[rows, labels].sum())


def _ref_kmeans(x, k, seed, n_init, max_iter=300, tol=km.KMEANS_TOL):
    x = np.asarray(x, dtype=np.float64)
    tol_abs = float(tol) * float(x.var(axis=0).mean())
    xt = torch.from_numpy(np.ascontiguousarray(x))
    x_sq = (xt * xt).sum(dim=1)
    best = None
    for rng in (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(int(n_init))):
        start = _ref_plusplus(xt, x_sq, k, rng)
        c, labels, inertia = _ref_lloyd(xt, x_sq, xt[torch.from_numpy(start)].clone(), int(max_iter), tol_abs)
        if best is None or inertia < best[2]:
            best = (labels, c, inertia)
    labels, c, _ = best
    return labels.numpy().copy(), c.numpy().copy(), float(((xt - c[labels]) ** 2).sum())


def _blobs(n, d, k, seed, spread=2.0):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(k, d)) * spread
    return centres[rng.integers(k, size=n)] + rng.normal(size=(n, d))


@pytest.mark.parametrize("n,d,k,seed,n_init", [(300, 8, 5, 0, 20), (500, 32, 10, 3, 10), (120, 40, 3, 9, 15),
                                               (60, 2, 7, 4, 25)])
def test_kmeans_equals_the_reference_bit_for_bit(n, d, k, seed, n_init) -> None:
    x = _blobs(n, d, k, seed, spread=0.5 if d == 2 else 2.0)  # d = 2: overlapping blobs, long Lloyd runs
    labels, centres, inertia = km.kmeans(x, k, seed, n_init=n_init)
    ref = _ref_kmeans(x, k, seed, n_init)
    assert np.array_equal(labels, ref[0]) and np.array_equal(centres, ref[1]) and inertia == ref[2]


def test_repeated_seedings_are_skipped_and_the_result_is_the_same(monkeypatch) -> None:
    """Few rows, many restarts: seedings repeat. Each distinct one runs Lloyd once; the result is the
    reference's (which runs them all)."""
    x = _blobs(6, 3, 2, 1)
    starts, runs = [], []
    plusplus, lloyd = km.kmeans_plusplus, km._lloyd
    monkeypatch.setattr(km, "kmeans_plusplus", lambda *a, **kw: starts.append(plusplus(*a, **kw)) or starts[-1])
    monkeypatch.setattr(km, "_lloyd", lambda *a, **kw: runs.append(1) or lloyd(*a, **kw))
    got = km.kmeans(x, 4, 5, n_init=40)
    distinct = {s.tobytes() for s in starts}
    assert len(starts) == 40 and len(runs) == len(distinct) < 40
    ref = _ref_kmeans(x, 4, 5, 40)
    assert np.array_equal(got[0], ref[0]) and np.array_equal(got[1], ref[1]) and got[2] == ref[2]


def test_empty_clusters_reseeded_as_before() -> None:
    """Three distinct rows for k = 5 (k-means++ then has phi = 0 and draws uniformly, so centres coincide and
    clusters empty): the re-seeding path gives the reference's result."""
    base = _blobs(3, 4, 3, 2)
    x = np.concatenate([base, base, base, base])
    emptied = []
    bincount = torch.bincount

    def counting(*args, **kw):
        out = bincount(*args, **kw)
        emptied.append(bool((out == 0).any()))
        return out

    for seed in range(6):
        with pytest.MonkeyPatch.context() as m:
            m.setattr(torch, "bincount", counting)
            got = km.kmeans(x, 5, seed, n_init=3)
        ref = _ref_kmeans(x, 5, seed, 3)
        assert np.array_equal(got[0], ref[0]) and np.array_equal(got[1], ref[1]) and got[2] == ref[2]
    assert any(emptied)  # the re-seeding ran


def test_squared_distances_in_place_equal_the_expression() -> None:
    g = torch.Generator().manual_seed(0)
    for scale in (1e-3, 1.0, 1e4):
        x = torch.randn(257, 19, generator=g, dtype=torch.float64) * scale
        c = torch.randn(7, 19, generator=g, dtype=torch.float64) * scale
        x_sq = (x * x).sum(dim=1)
        assert torch.equal(km._sq_dists(x, x_sq, c), _ref_sq_dists(x, x_sq, c))
