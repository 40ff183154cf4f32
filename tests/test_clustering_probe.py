"""Clustering metrics (cluster_acc, nmi, ari) on hand-worked cases and brute force, and the
frozen-embedding evaluation (linear probe with val-chosen L2, seeded k-means)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from fusebench import metrics
from fusebench.probes.embedding_eval import probe_and_cluster
from fusebench.probes.logistic import standardize
from fusebench.runtime.utils import single_thread
from fusebench.probes.kmeans import kmeans


# ---------------------------------------------------------------------------------------------
# slow, obviously-correct references
# ---------------------------------------------------------------------------------------------
def brute_acc(pred, true):
    """Best accuracy over every injective map of clusters to classes (itertools, tiny inputs only)."""
    clusters, classes = sorted(set(pred)), sorted(set(true))
    best = 0
    slots = classes + [None] * max(0, len(clusters) - len(classes))
    for perm in itertools.permutations(slots, len(clusters)):
        mapping = dict(zip(clusters, perm))
        best = max(best, sum(mapping[p] == t for p, t in zip(pred, true)))
    return best / len(true)


def brute_ari(pred, true):
    """ARI from explicit pair enumeration (Hubert & Arabie's formula on pair counts)."""
    n = len(true)
    pairs = list(itertools.combinations(range(n), 2))
    both = sum(1 for i, j in pairs if true[i] == true[j] and pred[i] == pred[j])
    same_t = sum(1 for i, j in pairs if true[i] == true[j])
    same_p = sum(1 for i, j in pairs if pred[i] == pred[j])
    expected = same_t * same_p / len(pairs)
    return (both - expected) / ((same_t + same_p) / 2 - expected)


def brute_nmi(pred, true):
    n = len(true)
    mi = 0.0
    for a in set(true):
        for b in set(pred):
            nab = sum(1 for t, p in zip(true, pred) if t == a and p == b)
            if nab:
                mi += nab / n * math.log(nab * n / (true.count(a) * pred.count(b)))
    h = lambda lab: -sum(lab.count(v) / n * math.log(lab.count(v) / n) for v in set(lab))  # noqa: E731
    return mi / ((h(true) + h(pred)) / 2)


# ---------------------------------------------------------------------------------------------
# metrics
# ---------------------------------------------------------------------------------------------
def test_registered_with_task_direction_unit():
    for mid in ("cluster_acc", "nmi", "ari"):
        m = metrics.get(mid)
        assert m.task == "clustering" and m.higher_is_better
        assert getattr(m, "unit", "fraction") == "fraction"


def test_cluster_acc_hand_worked():
    acc = metrics.get("cluster_acc")
    # class 0 -> clusters {1, 1, 0}, class 1 -> {0, 0, 0}: best map 1->0, 0->1 gets 2 + 3 of 6
    assert acc([1, 1, 0, 0, 0, 0], [0, 0, 0, 1, 1, 1]) == pytest.approx(5 / 6)
    assert acc([5, 5, 5, 9, 9, 9], [0, 0, 0, 1, 1, 1]) == 1.0  # renamed clusters
    assert acc([0, 1, 2, 3], [0, 0, 1, 1]) == 0.5  # 4 singleton clusters: only 2 can be matched
    assert acc(np.array([0, 0, 0, 0]), torch.tensor([0, 1, 2, 3])) == 0.25


def test_nmi_hand_worked():
    nmi = metrics.get("nmi")
    # true [0,0,1,1], pred [0,0,0,1]: p(0,0)=1/2, p(1,0)=1/4, p(1,1)=1/4; p_true=(1/2,1/2), p_pred=(3/4,1/4)
    mi = 0.5 * math.log(0.5 / (0.5 * 0.75)) + 0.25 * math.log(0.25 / (0.5 * 0.75)) + 0.25 * math.log(0.25 / (0.5 * 0.25))
    h_true = math.log(2)
    h_pred = -(0.75 * math.log(0.75) + 0.25 * math.log(0.25))
    assert nmi([0, 0, 0, 1], [0, 0, 1, 1]) == pytest.approx(mi / ((h_true + h_pred) / 2), abs=1e-12)
    assert nmi([1, 1, 0, 0], [0, 0, 1, 1]) == pytest.approx(1.0, abs=1e-12)
    assert nmi([0, 1, 0, 1], [0, 0, 1, 1]) == pytest.approx(0.0, abs=1e-12)  # independent
    assert nmi([0, 1, 2, 3], [0, 0, 0, 0]) == 0.0  # scikit-learn's documented value
    assert nmi([3, 3, 3], [0, 0, 0]) == 1.0  # both trivial


def test_ari_hand_worked():
    ari = metrics.get("ari")
    # [0,0,1,1] vs [0,0,1,2]: sum C(n_ij,2)=1, sum C(a,2)=2, sum C(b,2)=1, C(4,2)=6 -> (1-1/3)/(3/2-1/3) = 4/7
    assert ari([0, 0, 1, 2], [0, 0, 1, 1]) == pytest.approx(4 / 7, abs=1e-15)
    # [0,0,0,1,1,1] vs [0,0,1,1,2,2]: 2, 6, 3, 15 -> (2-1.2)/(4.5-1.2) = 8/33
    assert ari([0, 0, 1, 1, 2, 2], [0, 0, 0, 1, 1, 1]) == pytest.approx(8 / 33, abs=1e-15)
    assert ari([0, 0, 0, 1], [0, 0, 1, 1]) == pytest.approx(0.0, abs=1e-15)
    assert ari([7, 7, 2, 2], [0, 0, 1, 1]) == 1.0
    assert ari([0, 1, 2], [0, 1, 2]) == 1.0 and ari([0, 0], [1, 1]) == 1.0  # degenerate: denominator 0


@pytest.mark.parametrize("case", range(12))
def test_metrics_match_brute_force_on_random_labelings(case):
    rng = np.random.default_rng(case)
    n = int(rng.integers(5, 9))
    true = rng.integers(0, 3, n).tolist()
    pred = rng.integers(0, int(rng.integers(2, 5)), n).tolist()
    if len(set(true)) < 2 or len(set(pred)) < 2:
        true[0], true[1], pred[0], pred[1] = 0, 1, 0, 1
    assert metrics.get("cluster_acc")(pred, true) == pytest.approx(brute_acc(pred, true), abs=1e-12)
    assert metrics.get("ari")(pred, true) == pytest.approx(brute_ari(pred, true), abs=1e-12)
    assert metrics.get("nmi")(pred, true) == pytest.approx(brute_nmi(pred, true), abs=1e-12)


def test_metrics_reject_bad_input():
    for mid in ("cluster_acc", "nmi", "ari"):
        with pytest.raises(ValueError, match="must match"):
            metrics.get(mid)([0, 1], [0, 1, 1])
        with pytest.raises(ValueError, match="empty"):
            metrics.get(mid)([], [])
        with pytest.raises(ValueError, match="integer"):
            metrics.get(mid)([0.5, 1.0], [0, 1])


# ---------------------------------------------------------------------------------------------
# k-means
# ---------------------------------------------------------------------------------------------
def _blobs(seed=0, k=4, per=50, d=5, sep=20.0, std=0.5):
    rng = np.random.default_rng(seed)
    centres = np.eye(k, d) * sep
    y = np.repeat(np.arange(k), per)
    return centres[y] + rng.standard_normal((k * per, d)) * std, y


def test_kmeans_recovers_separated_blobs_for_every_seed():
    x, y = _blobs()
    # inertia of the true partition, from the blobs' own sample means
    true_inertia = sum(((x[y == c] - x[y == c].mean(axis=0)) ** 2).sum() for c in range(4))
    partitions = set()
    for seed in range(5):
        labels, centres, inertia = kmeans(x, 4, seed)
        assert metrics.get("cluster_acc")(labels, y) == 1.0
        assert inertia == pytest.approx(true_inertia, rel=1e-9)
        # the partition (as a set of frozensets of indices) does not depend on the seed
        partitions.add(frozenset(frozenset(np.flatnonzero(labels == c).tolist()) for c in range(4)))
    assert len(partitions) == 1
    # margin: every point is much closer to its own centre than to any other
    d = ((x[:, None, :] - centres[None]) ** 2).sum(-1)
    own = d[np.arange(len(x)), labels]
    other = np.where(np.arange(4)[None] == labels[:, None], np.inf, d).min(axis=1)
    assert (other > 10 * own.max()).all()


def test_kmeans_is_deterministic_and_checks_k():
    x, _ = _blobs(seed=1, sep=1.0, std=1.0)  # overlapping: the answer depends on the init
    a, b = kmeans(x, 4, 7), kmeans(x, 4, 7)
    assert np.array_equal(a[0], b[0]) and a[2] == b[2]
    with pytest.raises(ValueError, match="k = 300"):
        kmeans(x, 300, 0)


# ---------------------------------------------------------------------------------------------
# probe_and_cluster
# ---------------------------------------------------------------------------------------------
def _separable(seed, n_per=30, k=3, d=6):
    rng = np.random.default_rng(seed)
    y = np.repeat(np.arange(k), n_per)
    x = np.eye(k, d)[y] * 6.0 + rng.standard_normal((len(y), d)) * 0.3
    return x.astype(np.float32), y


def test_probe_is_perfect_on_linearly_separable_data_and_clusters_them():
    (xtr, ytr), (xva, yva), (xte, yte) = _separable(0), _separable(1, 10), _separable(2, 10)
    r = probe_and_cluster(torch.from_numpy(xtr), torch.from_numpy(ytr), xva, yva, xte, yte, 3, seed=0)
    assert r["val_acc"] == r["test_acc"] == 1.0
    assert r["val_macro_f1"] == r["test_macro_f1"] == 1.0
    assert r["cluster_acc"] == 1.0 and r["ari"] == 1.0 and r["nmi"] == pytest.approx(1.0, abs=1e-12)
    assert r["clustering"]["on"] == "all" and r["clustering"]["num_samples"] == 90 + 30 + 30
    assert r["clustering"]["k"] == 3 and r["clustering"]["init"] == "k-means++"
    t = probe_and_cluster(xtr, ytr, xva, yva, xte, yte, 3, seed=0, cluster_on="test")
    assert t["clustering"]["num_samples"] == 30 and t["cluster_acc"] == 1.0
    assert probe_and_cluster(xtr, ytr, xva, yva, xte, yte, 3, seed=0) == r  # deterministic


def test_per_view_embeddings_are_concatenated():
    (xtr, ytr), (xva, yva), (xte, yte) = _separable(0), _separable(1, 10), _separable(2, 10)
    per_view = lambda x: np.stack([x[:, :3], x[:, 3:]])  # noqa: E731  [2, n, 3]
    a = probe_and_cluster(per_view(xtr), ytr, per_view(xva), yva, per_view(xte), yte, 3, seed=0)
    assert a == probe_and_cluster(xtr, ytr, xva, yva, xte, yte, 3, seed=0)


def test_l2_is_chosen_on_val_only():
    """Train: 90 class-0 points on [-3, 1], 10 class-1 points on [0, 3]. A weakly regularised probe
    puts x = 4 in class 1; a strongly regularised one (l2 = 10) shrinks the weight to ~0 and predicts
    the majority class 0 everywhere. Val rewards the first (x=-3 -> 0, x=4 -> 1), test (x=4 -> 0) the
    second: the choice must follow val."""
    xtr = np.concatenate([np.linspace(-3, 1, 90), np.linspace(0, 3, 10)])[:, None]
    ytr = np.array([0] * 90 + [1] * 10)
    xva, yva = np.array([-3.0] * 5 + [4.0] * 5)[:, None], np.array([0] * 5 + [1] * 5)
    xte, yte = np.full((10, 1), 4.0), np.zeros(10, dtype=np.int64)
    r = probe_and_cluster(xtr, ytr, xva, yva, xte, yte, 2, seed=0, l2_grid=[1e-4, 10.0])
    assert r["probe"]["l2_grid"] == [1e-4, 10.0]
    assert r["probe"]["l2"] == 1e-4
    # 1e-4 is the grid's lower edge: the search tries 1e-5, which is not better, and stops (issue #30)
    assert r["probe"]["val_acc_by_l2"] == {"1e-05": 1.0, "0.0001": 1.0, "10.0": 0.5}
    assert r["probe"]["l2_extended"] == [1e-5] and r["probe"]["l2_edge"] is None
    assert r["val_acc"] == 1.0 and r["test_acc"] == 0.0
    # test would have preferred l2 = 10 ...
    assert probe_and_cluster(xtr, ytr, xva, yva, xte, yte, 2, seed=0, l2_grid=[10.0])["test_acc"] == 1.0
    # ... and flipping the test labels does not change the choice
    flipped = probe_and_cluster(xtr, ytr, xva, yva, xte, 1 - yte, 2, seed=0, l2_grid=[1e-4, 10.0])
    assert flipped["probe"]["l2"] == 1e-4 and flipped["test_acc"] == 1.0


def test_probe_ties_go_to_the_larger_l2():
    (xtr, ytr), (xva, yva), (xte, yte) = _separable(0), _separable(1, 10), _separable(2, 10)
    r = probe_and_cluster(xtr, ytr, xva, yva, xte, yte, 3, seed=0, l2_grid=[1e-3, 1e-1])
    # 0.1 wins the tie and is the grid's upper edge: 1.0 is tried, ties, is not better: 0.1 stays
    assert r["probe"]["val_acc_by_l2"] == {"0.001": 1.0, "0.1": 1.0, "1.0": 1.0} and r["probe"]["l2"] == 0.1


def test_probe_and_cluster_validates_inputs_and_restores_threads():
    (xtr, ytr), (xva, yva), (xte, yte) = _separable(0), _separable(1, 10), _separable(2, 10)
    with pytest.raises(ValueError, match="widths differ"):
        probe_and_cluster(xtr, ytr, xva[:, :3], yva, xte, yte, 3, seed=0)
    with pytest.raises(ValueError, match="outside 0..1"):
        probe_and_cluster(xtr, ytr, xva, yva, xte, yte, 2, seed=0)
    with pytest.raises(ValueError, match="labels for"):
        probe_and_cluster(xtr, ytr[:-1], xva, yva, xte, yte, 3, seed=0)
    with pytest.raises(ValueError, match="cluster_on"):
        probe_and_cluster(xtr, ytr, xva, yva, xte, yte, 3, seed=0, cluster_on="train")
    with pytest.raises(ValueError, match="NaN"):
        probe_and_cluster(np.full_like(xtr, np.nan), ytr, xva, yva, xte, yte, 3, seed=0)
    before = torch.get_num_threads()
    with single_thread():
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before


def test_standardize_uses_fit_statistics_and_zeroes_constant_columns():
    fit = np.array([[1.0, 5.0], [3.0, 5.0]])  # col 0: mean 2, std 1; col 1 constant
    (out,) = standardize(fit, np.array([[4.0, 7.0]]))
    assert out.tolist() == [[2.0, 0.0]]
