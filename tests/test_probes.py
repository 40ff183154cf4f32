"""The frozen-embedding probes of fusebench/probes/ (embedding_eval.py, logistic.py, fewshot.py, knn.py,
kmeans.py) against independent references:
k-means (greedy k-means++, n_init restarts) against scikit-learn's KMeans on blobs and on the real
handwritten views, the seeding against a slow loop implementation of its documented rule, the
few-shot probes against scikit-learn's LogisticRegression on the documented draws, the kNN probe
against scikit-learn's KNeighborsClassifier(metric="cosine") and hand-worked ties; the metric ids."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.io
import torch
from scipy.optimize import linear_sum_assignment
from sklearn.cluster import KMeans
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import adjusted_rand_score, confusion_matrix, normalized_mutual_info_score
from sklearn.neighbors import KNeighborsClassifier
from sklearn.preprocessing import StandardScaler

from fusebench import metrics
from fusebench.probes import embedding_eval as E
from fusebench.probes import fewshot as FS
from fusebench.probes import knn as KNN
from fusebench.probes import logistic as LR
from fusebench.probes import kmeans as K
from fusebench.runtime.utils import single_thread


def _blobs(seed, sizes, d=6, sep=25.0, std=1.0):
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((len(sizes), d)) * sep
    y = np.repeat(np.arange(len(sizes)), sizes)
    return centres[y] + rng.standard_normal((y.size, d)) * std, y


def _classes(seed, n_per, num_classes=4, d=8, spread=1.0):
    rng = np.random.default_rng(seed)
    means = np.random.default_rng(100).standard_normal((num_classes, d)) * 1.2
    y = np.repeat(np.arange(num_classes), n_per)
    return means[y] + rng.standard_normal((y.size, d)) * spread, y


def _same_partition(a, b):
    """Identical partitions up to renaming: a one-to-one label map exists (contingency is a permutation)."""
    m = confusion_matrix(a, b)
    return (np.count_nonzero(m, axis=0) <= 1).all() and (np.count_nonzero(m, axis=1) <= 1).all()


# ---------------------------------------------------------------------------------------------
# k-means
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(4))
def test_kmeans_matches_sklearn_on_separated_blobs(seed):
    x, y = _blobs(seed, sizes=[40, 25, 60, 10, 35, 30][: 3 + seed])
    k = int(y.max()) + 1
    labels, centres, inertia = K.kmeans(x, k, seed, n_init=10)
    ref = KMeans(k, n_init=10, random_state=seed).fit(x)
    assert _same_partition(labels, ref.labels_) and _same_partition(labels, y)
    assert inertia == pytest.approx(ref.inertia_, rel=1e-9)
    # converged: the centres are the means of their clusters and every row sits at its nearest centre
    for c in range(k):
        np.testing.assert_allclose(centres[c], x[labels == c].mean(axis=0), rtol=0, atol=1e-9)
    d = ((x[:, None, :] - centres[None]) ** 2).sum(-1)
    assert np.array_equal(d.argmin(axis=1), labels)
    assert inertia == pytest.approx(d[np.arange(len(x)), labels].sum(), rel=1e-12)


def test_kmeans_on_real_handwritten_views_is_as_good_as_sklearn(fixtures_dir):
    m = scipy.io.loadmat(str(fixtures_dir / "multiview" / "handwritten.mat"))
    x = np.hstack([np.asarray(v, dtype=np.float64) for v in m["X"][0]])
    y = m["Y"].ravel().astype(np.int64)
    z = StandardScaler().fit_transform(x)  # z-scored (population std; constant columns -> 0)
    labels, centres, inertia = K.kmeans(z, 10, seed=0, n_init=100)
    ref = KMeans(10, n_init=100, random_state=0).fit(z)
    assert inertia <= ref.inertia_ * (1 + 1e-3)
    # the reported inertia is that of the returned partition and centres
    assert inertia == pytest.approx(((z - centres[labels]) ** 2).sum(), rel=1e-10)
    # ACC / NMI / ARI of our labels: scikit-learn's metrics and the Hungarian matching on its contingency
    cont = confusion_matrix(y, labels)
    r, c = linear_sum_assignment(-cont)
    assert metrics.get("cluster_acc")(labels, y) == pytest.approx(cont[r, c].sum() / y.size, abs=1e-15)
    assert metrics.get("nmi")(labels, y) == pytest.approx(normalized_mutual_info_score(y, labels), abs=1e-12)
    assert metrics.get("ari")(labels, y) == pytest.approx(adjusted_rand_score(y, labels), abs=1e-12)


def _slow_kmeanspp(x, k, rng):
    """The documented greedy k-means++ rule, one point and one candidate at a time in python."""
    n = len(x)
    trials = 2 + math.floor(math.log(k))
    sq = lambda i, j: float(((x[i] - x[j]) ** 2).sum())  # noqa: E731
    chosen = [int(rng.integers(n))]
    closest = [sq(i, chosen[0]) for i in range(n)]
    for _ in range(1, k):
        phi = sum(closest)
        us = rng.random(trials) * phi
        cands = []
        for u in us:
            acc, pick = 0.0, n - 1
            for i in range(n):
                acc += closest[i]
                if acc > u:
                    pick = i
                    break
            cands.append(pick)
        pots = [sum(min(closest[i], sq(i, c)) for i in range(n)) for c in cands]
        best = cands[int(np.argmin(pots))]
        chosen.append(best)
        closest = [min(closest[i], sq(i, best)) for i in range(n)]
    return chosen


@pytest.mark.parametrize("k", [2, 3, 8, 21])
def test_kmeans_plusplus_follows_the_documented_greedy_rule(k):
    x, _ = _blobs(k, sizes=[30, 30, 30], sep=3.0)
    xt = torch.from_numpy(x)
    got = K.kmeans_plusplus(xt, (xt * xt).sum(1), k, np.random.default_rng(k))
    assert got.tolist() == _slow_kmeanspp(x, k, np.random.default_rng(k))
    assert len(set(got.tolist())) == k


def test_kmeans_restarts_are_nested_and_deterministic():
    x, _ = _blobs(1, sizes=[50, 50, 50, 50], sep=1.0, std=1.0)  # overlapping: restarts disagree
    inertias = [K.kmeans(x, 4, 3, n_init=n)[2] for n in (1, 5, 20)]
    assert inertias[0] >= inertias[1] >= inertias[2]  # restart r does not depend on n_init
    a, b = K.kmeans(x, 4, 3, n_init=20), K.kmeans(x, 4, 3, n_init=20)
    assert np.array_equal(a[0], b[0]) and a[2] == b[2]
    # the documented contract, restart by restart: restart r seeds from SeedSequence(3).spawn(n)[r]
    # (the same child for every n >= r + 1), and the restart of lowest inertia is kept (ties: earlier)
    xt = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float64))
    x_sq = (xt * xt).sum(dim=1)
    tol_abs = K.KMEANS_TOL * float(x.var(axis=0).mean())
    runs = []
    for child in np.random.SeedSequence(3).spawn(20):
        with single_thread():  # as kmeans runs them: the same reduction order, whatever the thread count
            start = K.kmeans_plusplus(xt, x_sq, 4, np.random.default_rng(child))
            c, labels, inertia = K._lloyd(xt, x_sq, xt[torch.from_numpy(start)].clone(), 300, tol_abs)
        runs.append((labels.numpy(), inertia))
    assert len({round(r[1], 6) for r in runs}) > 1  # the restarts really disagree here
    for n in (1, 5, 20):
        best = min(range(n), key=lambda r: (runs[r][1], r))
        assert np.array_equal(K.kmeans(x, 4, 3, n_init=n)[0], runs[best][0]), n
    with pytest.raises(ValueError, match="n_init = 0"):
        K.kmeans(x, 4, 0, n_init=0)


# ---------------------------------------------------------------------------------------------
# few-shot probes
# ---------------------------------------------------------------------------------------------
def test_fewshot_draws_follow_the_documented_recipe():
    y = np.array([2, 0, 1, 0, 2, 1, 0, 1, 2, 0, 1, 2, 0])
    got = FS.fewshot_indices(y, 2, 3, seed=7, num_classes=3)
    rng = np.random.default_rng(np.random.SeedSequence([7, 2]))
    for j in range(3):
        want = [i for c in range(3) for i in rng.choice(np.flatnonzero(y == c), size=2, replace=False)]
        assert got[j].tolist() == want
        assert y[got[j]].tolist() == [0, 0, 1, 1, 2, 2] and len(set(got[j].tolist())) == 6
    assert not np.array_equal(got[0], got[1])
    with pytest.raises(ValueError, match=r"s = 5 train samples per class, but class 1 has only 4 .*\[1, 2\]"):
        FS.fewshot_indices(y, 5, 1, seed=0, num_classes=3)


def test_fewshot_probe_matches_sklearn_logistic_regression():
    (xtr, ytr), (xva, yva), (xte, yte) = _classes(0, 30), _classes(1, 15), _classes(2, 15)
    shots, draws, grid = (1, 3), 4, (0.05, 1.0)
    r = E.probe_and_cluster(xtr, ytr, xva, yva, xte, yte, 4, seed=5, fewshot_shots=shots, fewshot_draws=draws,
                            fewshot_l2_grid=grid, knn_grid=(), n_init=1)
    scaler = StandardScaler().fit(xtr)  # statistics of ALL train embeddings
    ztr, zva, zte = (scaler.transform(a) for a in (xtr, xva, xte))
    fs = r["fewshot"]
    assert fs["shots"] == [1, 3] and fs["draws"] == 4 and fs["l2_grid"] == [0.05, 1.0]
    for s in shots:
        rng = np.random.default_rng(np.random.SeedSequence([5, s]))
        idx = [np.concatenate([rng.choice(np.flatnonzero(ytr == c), s, replace=False) for c in range(4)])
               for _ in range(draws)]
        val_acc, test_acc = {}, {}

        def fit(l2):
            va, te = [], []
            for i in idx:
                # mean CE + l2/2 ||W||^2 (bias free)  <=>  C * sum CE + 1/2 ||W||^2 with C = 1 / (n l2)
                clf = LogisticRegression(C=1.0 / (len(i) * l2), tol=1e-12, max_iter=10_000).fit(ztr[i], ytr[i])
                va.append(float((clf.predict(zva) == yva).mean()))
                te.append(float((clf.predict(zte) == yte).mean()))
            val_acc[l2], test_acc[l2] = va, te

        for l2 in grid:
            fit(l2)
        chosen = max(grid, key=lambda v: (np.mean(val_acc[v]), v))
        # the documented search beyond the grid's edge: a decade further while strictly better
        while chosen in (min(val_acc), max(val_acc)):
            nxt = float(f"{chosen / 10:.12g}") if chosen == min(val_acc) else float(f"{chosen * 10:.12g}")
            fit(nxt)
            if np.mean(val_acc[nxt]) <= np.mean(val_acc[chosen]):
                break
            chosen = nxt
        per = fs["per_shot"][str(s)]
        assert per["l2_searched"] == sorted(val_acc)
        for l2 in val_acc:
            assert per["val_acc_by_l2"][repr(l2)] == pytest.approx(np.mean(val_acc[l2]), abs=1e-12)
        assert per["l2"] == chosen
        assert per["test_acc_per_draw"] == pytest.approx(test_acc[chosen], abs=1e-12)
        assert per["val_acc_per_draw"] == pytest.approx(val_acc[chosen], abs=1e-12)
        assert r[f"test_fs{s}_acc"] == pytest.approx(np.mean(test_acc[chosen]), abs=1e-12)
        assert r[f"val_fs{s}_acc"] == pytest.approx(np.mean(val_acc[chosen]), abs=1e-12)
        assert per["test_acc_std"] == pytest.approx(np.std(test_acc[chosen]), abs=1e-12)


def test_fewshot_draws_are_seeded_and_do_not_depend_on_the_draw_count():
    y = np.array([0] * 5 + [1] * 3 + [2] * 4)
    a = FS.fewshot_indices(y, 2, 4, seed=0, num_classes=3)
    assert np.array_equal(a, FS.fewshot_indices(y, 2, 4, seed=0, num_classes=3))      # deterministic
    assert np.array_equal(a[:2], FS.fewshot_indices(y, 2, 2, seed=0, num_classes=3))  # draw j: not the count
    assert len({tuple(FS.fewshot_indices(y, 2, 1, seed=s, num_classes=3)[0]) for s in range(6)}) > 1
    for row in a:  # class-major, s distinct samples of every class (slow check, one sample at a time)
        assert [int(y[i]) for i in row] == [0, 0, 1, 1, 2, 2] and len(set(row.tolist())) == len(row)


def _slow_logistic_gradient(z, y, w, b, l2):
    """dL/dW and dL/db of mean_i CE(softmax(z_i W + b), y_i) + l2 / 2 ||W||^2, one sample and class at a time."""
    gw, gb = [[l2 * w[j][c] for c in range(len(b))] for j in range(len(w))], [0.0] * len(b)
    for i in range(len(y)):
        logits = [sum(z[i][j] * w[j][c] for j in range(len(w))) + b[c] for c in range(len(b))]
        top = max(logits)
        e = [math.exp(v - top) for v in logits]
        for c in range(len(b)):
            r = (e[c] / sum(e) - (1.0 if y[i] == c else 0.0)) / len(y)
            gb[c] += r
            for j in range(len(w)):
                gw[j][c] += z[i][j] * r
    return np.array(gw), np.array(gb)


def test_logistic_fit_is_at_the_optimum_by_a_slow_gradient():
    (x, y) = _classes(11, 6, num_classes=3, d=4)
    z = StandardScaler().fit_transform(x)
    w, b = LR.fit_logistic(z, y, 3, 0.1)
    gw, gb = _slow_logistic_gradient(z.tolist(), y.tolist(), w.tolist(), b.tolist(), 0.1)
    assert np.abs(gw).max() < 1e-6 and np.abs(gb).max() < 1e-6
    idx = np.array([[0, 1, 6, 7, 12, 13], [2, 3, 8, 9, 14, 15]])
    wb, bb = LR.fit_logistic(z[idx], y[idx], 3, np.array([0.05, 1.0]))  # batched: each problem at its optimum
    for j, l2 in enumerate((0.05, 1.0)):
        gw, gb = _slow_logistic_gradient(z[idx[j]].tolist(), y[idx[j]].tolist(), wb[j].tolist(), bb[j].tolist(), l2)
        assert np.abs(gw).max() < 1e-6 and np.abs(gb).max() < 1e-6


def test_fewshot_probes_on_per_view_embeddings_and_separable_classes():
    (xtr, ytr), (xva, yva), (xte, yte) = _blobs(4, [12] * 3), _blobs(4, [5] * 3), _blobs(4, [10] * 3)
    rev = [a[:, ::-1] * 2.0 for a in (xtr, xva, xte)]
    views = [torch.tensor(np.stack([a, r])) for a, r in zip((xtr, xva, xte), rev)]  # [k=2, n, d]
    kw = {"fewshot_shots": (2, 5), "fewshot_draws": 3, "fewshot_l2_grid": (1e-2,), "knn_grid": (), "n_init": 1}
    got = E.probe_and_cluster(views[0], ytr, views[1], yva, views[2], yte, 3, seed=0, **kw)
    # the views of a sample side by side, written out one value at a time
    cat = [np.array([[float(v[k, i, j]) for k in range(2) for j in range(v.shape[2])] for i in range(v.shape[1])])
           for v in views]
    assert got == E.probe_and_cluster(cat[0], ytr, cat[1], yva, cat[2], yte, 3, seed=0, **kw)
    for s in ("2", "5"):
        per = got["fewshot"]["per_shot"][s]
        draws = per["test_acc_per_draw"]
        mean = sum(draws) / len(draws)
        assert per["test_acc_std"] == pytest.approx(math.sqrt(sum((a - mean) ** 2 for a in draws) / len(draws)))
    # well-separated blobs: five labels per class place both probes' boundaries without an error
    assert got["test_fs5_acc"] == 1.0 and got["test_fs5_proto_acc"] == 1.0
    with pytest.raises(ValueError, match="train_emb must be a non-empty"):
        E.probe_and_cluster(np.zeros((0, 6)), ytr[:0], xva, yva, xte, yte, 3, seed=0, **kw)


def test_batched_logistic_fit_equals_separate_fits_and_sklearn_weights():
    (x, y) = _classes(3, 6)
    z = StandardScaler().fit_transform(x)
    rng = np.random.default_rng(0)
    idx = np.stack([rng.permutation(len(y))[:16] for _ in range(3)])
    while any(len(set(y[i])) < 4 for i in idx):  # every class present in every problem
        idx = np.stack([rng.permutation(len(y))[:16] for _ in range(3)])
    l2 = np.array([0.1, 0.5, 2.0])
    w, b = LR.fit_logistic(z[idx], y[idx], 4, l2)
    assert w.shape == (3, 8, 4) and b.shape == (3, 4)
    for j in range(3):
        clf = LogisticRegression(C=1.0 / (16 * l2[j]), tol=1e-12, max_iter=10_000).fit(z[idx[j]], y[idx[j]])
        np.testing.assert_allclose(w[j], clf.coef_.T, rtol=0, atol=1e-5)
        ws, _ = LR.fit_logistic(z[idx[j]], y[idx[j]], 4, float(l2[j]))
        np.testing.assert_allclose(w[j], ws, rtol=0, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# kNN probe
# ---------------------------------------------------------------------------------------------
def _no_vote_ties(z_train, y_train, query, k, num_classes):
    sim = (query / np.linalg.norm(query, axis=1, keepdims=True)) @ (
        z_train / np.linalg.norm(z_train, axis=1, keepdims=True)).T
    order = np.argsort(-sim, axis=1)
    s_sorted = np.take_along_axis(sim, order, axis=1)
    counts = np.stack([np.bincount(y_train[o[:k]], minlength=num_classes) for o in order])
    top2 = np.sort(counts, axis=1)[:, -2:]
    return (top2[:, 1] > top2[:, 0]).all() and (s_sorted[:, k - 1] > s_sorted[:, k]).all()


def test_knn_probe_matches_sklearn_cosine_neighbours():
    # two classes and odd k: a vote cannot tie (checked below, with ties of similarity at the k-th place)
    (xtr, ytr), (xva, yva), (xte, yte) = (_classes(s, n, num_classes=2, spread=2.0)
                                          for s, n in ((4, 60), (5, 40), (6, 40)))
    grid = (1, 2, 3, 5, 7, 9, 15, 1000)
    r = E.probe_and_cluster(xtr, ytr, xva, yva, xte, yte, 2, seed=0, knn_grid=grid, fewshot_shots=(), n_init=1)
    knn = r["knn"]
    assert knn["grid"] == [1, 2, 3, 5, 7, 9, 15]  # k > n_train = 120 dropped
    scaler = StandardScaler().fit(xtr)
    ztr, zva, zte = (scaler.transform(a) for a in (xtr, xva, xte))
    checked = 0
    for k in knn["grid"]:
        if not _no_vote_ties(ztr, ytr, zva, k, 2):
            continue
        ref = KNeighborsClassifier(n_neighbors=k, metric="cosine", algorithm="brute").fit(ztr, ytr)
        assert knn["val_acc_by_k"][str(k)] == pytest.approx(float((ref.predict(zva) == yva).mean()), abs=1e-15)
        checked += 1
    assert checked >= 6
    best = max(knn["grid"], key=lambda k: (knn["val_acc_by_k"][str(k)], k))
    assert knn["k"] == best and r["val_knn_acc"] == knn["val_acc_by_k"][str(best)]
    # test accuracy, at a k where the test split has no ties
    assert _no_vote_ties(ztr, ytr, zte, knn["k"], 2)
    ref = KNeighborsClassifier(n_neighbors=knn["k"], metric="cosine", algorithm="brute").fit(ztr, ytr)
    assert r["test_knn_acc"] == pytest.approx(float((ref.predict(zte) == yte).mean()), abs=1e-15)
    # four classes: predictions equal wherever the vote of a query has a unique winner
    (xtr, ytr), (xte, yte) = _classes(4, 40, spread=1.5), _classes(6, 30, spread=1.5)
    scaler = StandardScaler().fit(xtr)
    ztr, zte = scaler.transform(xtr), scaler.transform(xte)
    for k in (4, 7, 12):
        ref = KNeighborsClassifier(n_neighbors=k, metric="cosine", algorithm="brute").fit(ztr, ytr)
        pred, want = KNN.knn_predict(ztr, ytr, zte, [k], 4)[k], ref.predict(zte)
        unique = np.array([_no_vote_ties(ztr, ytr, zte[i:i + 1], k, 4) for i in range(len(zte))])
        assert unique.sum() > len(zte) // 2 and np.array_equal(pred[unique], want[unique])


def test_knn_ties_hand_worked():
    deg = lambda a: [math.cos(math.radians(a)), math.sin(math.radians(a))]  # noqa: E731
    train = np.array([deg(10), deg(-20), deg(30), deg(-10)])
    y = np.array([1, 0, 0, 0])
    q = np.array([deg(0), [0.0, 0.0]])
    got = KNN.knn_predict(train, y, q, [1, 2, 3], 2)
    # k=1: the nearest (+10 deg, class 1) and train 3 (-10 deg, class 0) tie in similarity: lower train index wins
    assert got[1].tolist() == [1, 1]  # zero query: similarity 0 to all -> train index 0
    # k=2: neighbours train 0 (class 1, cos 10) and train 3 (class 0, cos 10): equal votes, equal sums -> class 0
    assert got[2][0] == 0
    # k=3: + train 1 (-20 deg, class 0): class 0 has 2 votes
    assert got[3][0] == 0
    # tied votes with different summed similarity: class 1 at 10 deg beats class 0 at 20 deg
    two = KNN.knn_predict(np.array([deg(20), deg(10)]), np.array([0, 1]), np.array([deg(0)]), [2], 2)
    assert two[2].tolist() == [1]


# ---------------------------------------------------------------------------------------------
# probe_and_cluster: keys, records, options, errors; the metric ids
# ---------------------------------------------------------------------------------------------
def test_probe_and_cluster_keys_and_cluster_standardize():
    (xtr, ytr), (xva, yva), (xte, yte) = _classes(7, 20), _classes(8, 10), _classes(9, 10)
    scale = np.ones(8)
    scale[0] = 1000.0  # one feature of huge scale: z-scoring changes the clustering geometry
    xtr, xva, xte = xtr * scale, xva * scale, xte * scale
    r = E.probe_and_cluster(xtr, ytr, xva, yva, xte, yte, 4, seed=1, n_init=5, fewshot_draws=3)
    for mid in ("acc", "mf1", "fs1_acc", "fs5_acc", "fs10_acc", "knn_acc"):
        assert 0.0 <= r[f"test_{mid}"] <= 1.0 and 0.0 <= r[f"val_{mid}"] <= 1.0
    for mid in ("cluster_acc", "nmi", "ari"):
        assert r[f"test_{mid}"] == r[mid]
    assert r["val_macro_f1"] == r["val_mf1"] and r["test_macro_f1"] == r["test_mf1"]
    assert set(r) >= {"probe", "fewshot", "knn", "clustering"}
    assert r["clustering"]["standardize"] == "zscore_clustered_samples" and r["clustering"]["n_init"] == 5
    allx = np.concatenate([xtr, xva, xte])
    raw = E.probe_and_cluster(xtr, ytr, xva, yva, xte, yte, 4, seed=1, n_init=5, fewshot_draws=3,
                              cluster_standardize="none")
    assert raw["clustering"]["standardize"] == "none"
    assert raw["clustering"]["inertia"] == pytest.approx(K.kmeans(allx, 4, 1, n_init=5)[2], rel=1e-12)
    z = StandardScaler().fit_transform(allx)
    assert r["clustering"]["inertia"] == pytest.approx(K.kmeans(z, 4, 1, n_init=5)[2], rel=1e-9)
    # the probes do not depend on the clustering option
    assert all(raw[k] == r[k] for k in ("test_acc", "test_fs5_acc", "test_knn_acc", "fewshot", "knn"))
    assert E.probe_and_cluster(xtr, ytr, xva, yva, xte, yte, 4, seed=1, n_init=5, fewshot_draws=3) == r


def test_probe_and_cluster_rejects_bad_options():
    (xtr, ytr), (xva, yva), (xte, yte) = _classes(7, 6), _classes(8, 3), _classes(9, 3)
    args = (xtr, ytr, xva, yva, xte, yte, 4)
    with pytest.raises(ValueError, match="cluster_standardize='pca'.*'zscore', 'none'"):
        E.probe_and_cluster(*args, seed=0, cluster_standardize="pca")
    with pytest.raises(ValueError, match="fewshot_shots"):
        E.probe_and_cluster(*args, seed=0, fewshot_shots=(0, 1))
    with pytest.raises(ValueError, match="fewshot_draws"):
        E.probe_and_cluster(*args, seed=0, fewshot_draws=0)
    with pytest.raises(ValueError, match="knn_grid"):
        E.probe_and_cluster(*args, seed=0, knn_grid=(2.5,))
    with pytest.raises(ValueError, match=r"knn_grid \[50\] has no k <= n_train = 24"):
        E.probe_and_cluster(*args, seed=0, knn_grid=(50,), fewshot_shots=(1,))
    with pytest.raises(ValueError, match="class 0 has only 6"):  # default shots (1, 5, 10), 6 per class
        E.probe_and_cluster(*args, seed=0)
    with pytest.raises(ValueError, match="fewshot_l2_grid"):
        E.probe_and_cluster(*args, seed=0, fewshot_shots=(1,), fewshot_l2_grid=(-1.0,))


def test_probe_metric_ids_are_registered_as_accuracies():
    for mid in ("fs1_acc", "fs5_acc", "fs10_acc", "knn_acc"):
        m = metrics.get(mid)
        assert (m.task, m.higher_is_better, m.unit) == ("classification", True, "fraction")
        # version 2 of the few-shot logistic probe: its fit solved to the optimum (version 1: unconverged L-BFGS)
        assert metrics.metadata(mid) == {"task": "classification", "direction": "higher", "unit": "fraction",
                                         "version": "1" if mid == "knn_acc" else "2"}
        assert m([0, 1, 2, 2], [0, 1, 1, 2]) == 0.75
        assert m(torch.tensor([3, 3]), np.array([3, 1])) == 0.5
        with pytest.raises(ValueError, match="must match"):
            m([0, 1], [0])


def test_wide_batched_fit_in_the_row_space_equals_the_full_fit() -> None:
    """d > n (few-shot probes of wide features): the batched fit solves in the row space of x (QR);
    its W and b equal the full-width fit of each problem and scikit-learn's solution."""
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(3)
    xb = rng.normal(size=(3, 12, 300))                      # 3 problems, 12 samples, 300 features
    yb = np.tile(np.repeat(np.arange(4), 3), (3, 1))        # 4 classes x 3 samples
    for l2 in (1e-1, 1.0):
        w, b = LR.fit_logistic(xb, yb, 4, l2)
        assert w.shape == (3, 300, 4) and b.shape == (3, 4)
        for j in range(3):
            w1, b1 = LR.fit_logistic(xb[j], yb[j], 4, l2)     # the 2-D path: full width
            def objective(w_: np.ndarray, b_: np.ndarray) -> float:  # mean CE + l2/2 ||W||^2, by hand
                z = xb[j] @ w_ + b_
                z = z - z.max(1, keepdims=True)
                return float(-(z[np.arange(12), yb[j]] - np.log(np.exp(z).sum(1))).mean() + 0.5 * l2 * (w_ * w_).sum())

            assert objective(w[j], b[j]) == pytest.approx(objective(w1, b1), rel=1e-7)  # the same minimum
            np.testing.assert_allclose(w[j], w1, atol=2e-5)  # W well determined; the bias up to the tolerance
            np.testing.assert_allclose(b[j], b1, atol=5e-4)
            sk = LogisticRegression(C=1.0 / (12 * l2), tol=1e-12, max_iter=100_000).fit(xb[j], yb[j])
            np.testing.assert_allclose(xb[j] @ w[j] + b[j] - (xb[j] @ w[j] + b[j]).mean(1, keepdims=True),
                                       sk.decision_function(xb[j]) - sk.decision_function(xb[j]).mean(1, keepdims=True),
                                       atol=5e-4)  # sklearn stops at its own tolerance


def test_embedding_eval_re_exports_the_probes_from_their_modules() -> None:
    """One concept per module (logistic, fewshot, knn), every public name still importable from embedding_eval:
    the same objects, not copies."""
    # what embedding_eval exported before the split (its __all__ then), each from the module that now holds it
    before = ["CLUSTER_STANDARDIZE", "DEFAULT_DRAWS", "DEFAULT_KNN_GRID", "DEFAULT_L2_GRID", "DEFAULT_SHOTS",
              "FEWSHOT_CHOICE_RULE", "L2_CEILING", "L2_FLOOR", "PROTOTYPE_RULE", "chosen_fewshot_val",
              "fewshot_indices", "fewshot_probe", "fit_logistic", "knn_predict", "knn_probe", "probe_and_cluster",
              "prototype_predict", "search_l2", "standardize"]
    assert set(before) <= set(E.__all__)
    homes = {name: mod for mod in (LR, FS, KNN) for name in mod.__all__ if name in before}
    assert set(before) - set(homes) == {"CLUSTER_STANDARDIZE", "probe_and_cluster"}  # the orchestration's own
    assert {n: getattr(E, n) is getattr(homes[n], n) for n in homes} == {n: True for n in homes}
    assert not [n for n in E.__all__ if not hasattr(E, n)]


def test_knn_probe_a_tie_on_validation_keeps_the_larger_k(monkeypatch):
    """Every k of the grid scores val accuracy 1 (worked out below), so the documented rule "highest val accuracy,
    ties to the larger k" must pick k = 5, and the test split is predicted with k = 5 alone (recorded: on these
    points every k gives test accuracy 1, so the accuracy cannot tell which k scored it)."""
    real, asked = KNN.knn_predict, []
    monkeypatch.setattr(KNN, "knn_predict", lambda ztr, ytr, q, ks, c: asked.append(list(ks)) or real(ztr, ytr, q, ks, c))
    deg = lambda a: [math.cos(math.radians(a)), math.sin(math.radians(a))]  # noqa: E731
    # class 0 around 0 deg, class 1 around 90 deg, three train points each
    ztr = np.array([deg(-10), deg(0), deg(10), deg(80), deg(90), deg(100)])
    ytr = np.array([0, 0, 0, 1, 1, 1])
    zva = np.array([deg(5), deg(85)])
    yva = np.array([0, 1])
    # k = 1: nearest of 5 deg is 0/10 deg (class 0); of 85 deg, 80/90 deg (class 1): both right.
    # k = 3: the three nearest of 5 deg are the class-0 points (cos 15 > cos 75); likewise at 85 deg: both right.
    # k = 5: 3 votes to 2 for the own class: both right. So val accuracy is 1 at every k: a three-way tie.
    # test: a point at 40 deg of class 1. k = 1 -> 10 deg (class 0, wrong); k = 5 -> 10, 0, -10, 80, 90 deg
    # (cos 30, 40, 50, 40, 50): 3 votes class 0 -> wrong as well; so use 46 deg (class 1):
    # sims cos(36)=.809 (10), cos(46)=.695 (0), cos(56)=.559 (-10), cos(34)=.829 (80), cos(44)=.719 (90),
    # cos(54)=.588 (100). k = 1 -> 80 deg: class 1, right. k = 5 -> drop the smallest (-10 deg): class 1 has 3
    # votes (80, 90, 100), class 0 two: right. A second test point at 44 deg of class 0:
    # cos(34)=.829 (10), cos(44)=.719 (0), cos(54)=.588 (-10), cos(36)=.809 (80), cos(46)=.695 (90), cos(56)=.559
    # (100): k = 1 -> 10 deg, class 0, right; k = 5 -> drop 100 deg: class 0 has 3 votes: right.
    zte = np.array([deg(46), deg(44)])
    yte = np.array([1, 0])
    r = KNN.knn_probe(ztr, ytr, zva, yva, zte, yte, 2, grid=(1, 3, 5))
    assert r["val_acc_by_k"] == {"1": 1.0, "3": 1.0, "5": 1.0}
    assert r["k"] == 5
    assert r["val_acc"] == 1.0 and r["test_acc"] == 1.0
    assert asked == [[1, 3, 5], [5]]  # validation at every k, then the test split with the chosen k only
