"""Reference rows of the embedding_eval protocol (fusebench/components/reference_features.py): every kind
checked on hand-worked values, tf-idf against scikit-learn's TfidfTransformer (on the real NGs
bag-of-words counts), PCA against scikit-learn's PCA up to sign (on the real handwritten views), the
train-only fit, and the errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.io
import torch
from sklearn.decomposition import PCA
from sklearn.feature_extraction.text import TfidfTransformer
from sklearn.preprocessing import StandardScaler

from fusebench.components.reference_features import REFERENCE_KINDS, reference_features


def _views(seed=0, n=(30, 10, 10), widths=(3, 5)):
    rng = np.random.default_rng(seed)
    return {s: [rng.standard_normal((m, d)) * (v + 1) + v for v, d in enumerate(widths)]
            for s, m in zip(("train", "val", "test"), n)}


def _mat_views(fixtures_dir, name):
    m = scipy.io.loadmat(str(fixtures_dir / "multiview" / name))
    return [np.asarray(v, dtype=np.float64) for v in m["X"][0]], m["Y"].ravel()


def test_kinds_are_listed():
    assert REFERENCE_KINDS == ("raw", "raw_l2", "raw_tfidf", "raw_balanced", "raw_pca")


def test_raw_is_the_concatenation_and_is_zscored_by_the_evaluation():
    views = _views()
    feats, record, cs = reference_features("raw", views, width=7)  # width ignored for this kind
    for s, vs in views.items():
        assert np.array_equal(feats[s], np.hstack(vs))
    assert cs == "zscore" and record["kind"] == "raw" and record["view_widths"] == [3, 5]
    assert record["fitted_on"] == "train" and record["width"] is None


def test_raw_l2_hand_worked():
    views = {"train": [np.array([[3.0, 4.0], [0.0, 0.0]]), np.array([[1.0, 0.0, 0.0], [2.0, 2.0, 1.0]])],
             "test": [np.array([[0.0, -5.0]]), np.array([[0.0, 0.0, 0.0]])]}
    feats, _, cs = reference_features("raw_l2", views)
    np.testing.assert_allclose(feats["train"], [[0.6, 0.8, 1.0, 0.0, 0.0], [0.0, 0.0, 2 / 3, 2 / 3, 1 / 3]],
                               rtol=0, atol=1e-15)
    np.testing.assert_allclose(feats["test"], [[0.0, -1.0, 0.0, 0.0, 0.0]], rtol=0, atol=0)
    assert cs == "none"


def test_raw_tfidf_hand_worked():
    # train counts [[1, 0], [1, 2], [0, 0]]: n = 3, df = [2, 1] -> idf = [ln(4/3) + 1, ln(4/2) + 1];
    # row [1, 2]: tf = [1/3, 2/3] -> tf * idf, then unit norm; the all-zero row stays zero
    train = np.array([[1.0, 0.0], [1.0, 2.0], [0.0, 0.0]])
    test = np.array([[0.0, 3.0]])
    feats, _, cs = reference_features("raw_tfidf", {"train": [train], "test": [test]})
    idf = [math.log(4 / 3) + 1, math.log(4 / 2) + 1]
    row2 = np.array([1 / 3 * idf[0], 2 / 3 * idf[1]])
    np.testing.assert_allclose(feats["train"], [[1.0, 0.0], row2 / np.linalg.norm(row2), [0.0, 0.0]],
                               rtol=0, atol=1e-15)
    np.testing.assert_allclose(feats["test"], [[0.0, 1.0]], rtol=0, atol=1e-15)
    assert cs == "none"


def test_raw_tfidf_matches_sklearn_on_real_bag_of_words(fixtures_dir):
    views, _ = _mat_views(fixtures_dir, "NGs.mat")
    rng = np.random.default_rng(0)
    perm = rng.permutation(views[0].shape[0])
    rows = {"train": perm[:300], "val": perm[300:400], "test": perm[400:]}
    feats, record, _ = reference_features("raw_tfidf", {s: [v[r] for v in views] for s, r in rows.items()})
    assert record["view_widths"] == [2000, 2000, 2000]
    for v, x in enumerate(views):
        tf = TfidfTransformer(norm="l2", smooth_idf=True, sublinear_tf=False).fit(x[rows["train"]])
        for s, r in rows.items():
            want = tf.transform(x[r]).toarray()
            np.testing.assert_allclose(feats[s][:, 2000 * v: 2000 * (v + 1)], want, rtol=0, atol=1e-12)
    # every non-empty view row has unit norm
    norms = np.linalg.norm(feats["test"].reshape(-1, 3, 2000), axis=2)
    assert np.all((np.abs(norms - 1) < 1e-12) | (norms == 0))


def test_raw_balanced_hand_worked_and_equal_view_variance():
    # view 0 train [[0, 1], [2, 1]]: col 0 mean 1 std 1, col 1 constant -> d' = 1
    # view 1 train [[0, 0, 0], [2, 4, 6]]: means [1, 2, 3], stds [1, 2, 3] -> z = -+1, d' = 3
    views = {"train": [np.array([[0.0, 1.0], [2.0, 1.0]]), np.array([[0.0, 0.0, 0.0], [2.0, 4.0, 6.0]])],
             "test": [np.array([[3.0, 9.0]]), np.array([[1.0, 6.0, 0.0]])]}
    feats, record, cs = reference_features("raw_balanced", views)
    r3 = math.sqrt(3)
    np.testing.assert_allclose(feats["train"], [[-1, 0, -1 / r3, -1 / r3, -1 / r3], [1, 0, 1 / r3, 1 / r3, 1 / r3]],
                               rtol=0, atol=1e-15)
    np.testing.assert_allclose(feats["test"], [[2, 0, 0, 2 / r3, -1 / r3]], rtol=0, atol=1e-15)
    assert record["view_scale"] == [1.0, r3] and cs == "none"
    # random views of very different widths and scales: each view's total train variance is 1
    views = _views(widths=(4, 40, 7))
    views["train"][1][:, :5] = 3.0  # 5 constant columns in view 1
    feats, record, _ = reference_features("raw_balanced", views)
    edges = np.cumsum([0, 4, 40, 7])
    for a, b in zip(edges[:-1], edges[1:]):
        assert feats["train"][:, a:b].var(axis=0).sum() == pytest.approx(1.0, abs=1e-12)
    assert record["view_scale"] == [2.0, math.sqrt(35), math.sqrt(7)]


def test_raw_pca_matches_sklearn_up_to_sign(fixtures_dir):
    views, _ = _mat_views(fixtures_dir, "handwritten.mat")
    rng = np.random.default_rng(1)
    perm = rng.permutation(2000)
    rows = {"train": perm[:800], "val": perm[800:1000], "test": perm[1000:1200]}
    split = {s: [v[r] for v in views] for s, r in rows.items()}
    feats, record, cs = reference_features("raw_pca", split, width=24)
    assert cs == "none" and record["width"] == 24
    x = {s: np.hstack(vs) for s, vs in split.items()}
    scaler = StandardScaler().fit(x["train"])  # population std; constant columns scaled by 1 (centred -> 0)
    pca = PCA(n_components=24, svd_solver="full").fit(scaler.transform(x["train"]))
    for s in rows:
        want = pca.transform(scaler.transform(x[s]))
        assert feats[s].shape == (len(rows[s]), 24)
        signs = np.sign((feats["train"] * pca.transform(scaler.transform(x["train"]))).sum(axis=0))
        np.testing.assert_allclose(feats[s], want * signs, rtol=0, atol=1e-8 * np.abs(want).max())
    np.testing.assert_allclose(record["explained_variance_ratio"], pca.explained_variance_ratio_, rtol=1e-10)
    # sign rule: the loading of largest magnitude of each component is positive
    comps = np.linalg.lstsq(scaler.transform(x["train"]), feats["train"], rcond=None)[0].T  # [24, D]
    lead = comps[np.arange(24), np.abs(comps).argmax(axis=1)]
    assert (lead > 0).all()
    # train scores are centred and uncorrelated, variances decreasing
    cov = np.cov(feats["train"].T, bias=True)
    np.testing.assert_allclose(feats["train"].mean(axis=0), 0, atol=1e-9)
    np.testing.assert_allclose(cov - np.diag(np.diag(cov)), 0, atol=1e-8)
    assert np.all(np.diff(np.diag(cov)) <= 1e-9)


def test_statistics_are_fitted_on_train_only():
    views = _views()
    other = {s: [v.copy() for v in vs] for s, vs in views.items()}
    other["test"] = [v * 100 + 5 for v in other["test"]]  # a very different test split
    for kind in REFERENCE_KINDS:
        a, _, _ = reference_features(kind, {s: [np.abs(v) for v in vs] for s, vs in views.items()}, width=4)
        b, _, _ = reference_features(kind, {s: [np.abs(v) for v in vs] for s, vs in other.items()}, width=4)
        np.testing.assert_array_equal(a["train"], b["train"], err_msg=kind)
        np.testing.assert_array_equal(a["val"], b["val"], err_msg=kind)
        assert a["test"].shape == b["test"].shape


def test_accepts_torch_views_and_half_precision():
    views = _views()
    t = {s: [torch.as_tensor(v, dtype=torch.float16) for v in vs] for s, vs in views.items()}
    wide = {s: [v.to(torch.float64).numpy() for v in vs] for s, vs in t.items()}
    a, _, _ = reference_features("raw_balanced", t)
    b, _, _ = reference_features("raw_balanced", wide)
    assert all(np.array_equal(a[s], b[s]) and a[s].dtype == np.float64 for s in a)


def test_errors_are_clear():
    views = _views()
    valid = r"'raw', 'raw_l2', 'raw_tfidf', 'raw_balanced', 'raw_pca'"
    with pytest.raises(ValueError, match=r"unknown kind 'pca'.*" + valid):
        reference_features("pca", views)
    with pytest.raises(ValueError, match=r"needs width"):
        reference_features("raw_pca", views)
    with pytest.raises(ValueError, match=r"needs width"):
        reference_features("raw_pca", views, width=True)
    with pytest.raises(ValueError, match=r"width = 9 is out of range.*1\.\.8"):
        reference_features("raw_pca", views, width=9)  # total width 3 + 5 = 8
    with pytest.raises(ValueError, match=r"width = 0 is out of range"):
        reference_features("raw_pca", views, width=0)
    with pytest.raises(ValueError, match=r"non-negative counts.*views\['train'\]\[0\]"):
        reference_features("raw_tfidf", views)
    with pytest.raises(ValueError, match="'train' split"):
        reference_features("raw", {"val": views["val"]})
    with pytest.raises(ValueError, match=r"views\['test'\] have widths \[3\]"):
        reference_features("raw", {**views, "test": views["test"][:1]})
    with pytest.raises(ValueError, match="different row counts"):
        reference_features("raw", {**views, "val": [views["val"][0], views["val"][1][:3]]})
    with pytest.raises(ValueError, match=r"views\['val'\]\[1\] contains NaN"):
        reference_features("raw", {**views, "val": [views["val"][0], np.full((10, 5), np.nan)]})
    with pytest.raises(ValueError, match="2-D"):
        reference_features("raw", {**views, "val": [views["val"][0], views["val"][1][0]]})


# ---------------------------------------------------------------------------------------------
# raw_pca's width chosen on validation (row version 2)
# ---------------------------------------------------------------------------------------------
def test_width_grid_by_hand():
    from fusebench.components.reference_features import width_grid

    assert width_grid(96) == [2, 4, 8, 16, 32, 64, 96]
    assert width_grid(64) == [2, 4, 8, 16, 32, 64]
    assert width_grid(65) == [2, 4, 8, 16, 32, 64, 65]
    assert width_grid(3) == [2, 3] and width_grid(2) == [2] and width_grid(1) == [1]
    for bad in (0, -4, 2.0, True, None):
        with pytest.raises(ValueError, match="cap must be a positive integer"):
            width_grid(bad)


def test_raw_pca_narrower_width_is_a_prefix_of_a_wider_one(fixtures_dir):
    """The selection projects once at the largest width and slices: the first w columns at width W must be the
    features at width w (same components, same signs) on real data."""
    views, _ = _mat_views(fixtures_dir, "handwritten.mat")
    rows = {"train": np.arange(0, 1200), "val": np.arange(1200, 1600)}
    split = {s: [v[r] for v in views] for s, r in rows.items()}
    wide = reference_features("raw_pca", split, width=96)[0]
    for w in (2, 8, 33):
        narrow = reference_features("raw_pca", split, width=w)[0]
        for s in rows:
            np.testing.assert_array_equal(wide[s][:, :w], narrow[s])


def _by_hand_pca(train, val, w):
    """z-score the concatenation with train statistics (constant columns 0), project on the top-w right singular
    vectors of the train matrix, each signed so its largest-|.| loading is positive."""
    xtr, xva = np.hstack(train), np.hstack(val)
    mu, sd = xtr.mean(axis=0), xtr.std(axis=0)
    keep = sd > 0
    ztr = np.where(keep, (xtr - mu) / np.where(keep, sd, 1), 0)
    zva = np.where(keep, (xva - mu) / np.where(keep, sd, 1), 0)
    vt = np.linalg.svd(ztr, full_matrices=False)[2][:w]
    vt = vt * np.sign(vt[np.arange(w), np.abs(vt).argmax(axis=1)])[:, None]
    return ztr @ vt.T, zva @ vt.T


def test_select_width_scores_every_width_on_validation_and_never_reads_test(fixtures_dir):
    """On real handwritten views: the width chosen is the one whose PCA features give the best validation 1-shot
    score, the fewer components on a tie; test views full of NaN are never read. The features of each width are
    checked against a by-hand PCA (to 1e-8), and the probe scores the row's own features of that width (bit for bit
    what the selection slices): an accuracy compared across two float paths could flip on a rounding tie, with the
    thread count."""
    from fusebench.cells.embedding_protocol import select_width, trial_parts
    from fusebench.components.rows import row_of
    from fusebench.probes.embedding_eval import probe_and_cluster

    views, y = _mat_views(fixtures_dir, "handwritten.mat")
    y = y - 1
    rng = np.random.default_rng(3)
    perm = rng.permutation(2000)
    rows = {"train": perm[:300], "val": perm[300:700]}
    split = {s: [v[r] for v in views] for s, r in rows.items()}
    split["test"] = [np.full((5, v.shape[1]), np.nan) for v in views]  # a test sample read would raise
    kw = {"fewshot_draws": 4, "l2_grid": [0.01, 1.0], **trial_parts("fs1_best_acc")}
    got = select_width(row_of(None, "raw_pca"), split, y[rows["train"]], y[rows["val"]], 24, 10, 0, kw,
                       "fs1_best_acc")
    assert got["widths"] == [2, 4, 8, 16, 24] and got["metric"] == "fs1_best_acc"
    want = []
    trval = {"train": split["train"], "val": split["val"]}
    for w in got["widths"]:
        feats = reference_features("raw_pca", trval, width=w)[0]
        ftr, fva = _by_hand_pca(split["train"], split["val"], w)
        for mine, hand in ((feats["train"], ftr), (feats["val"], fva)):
            np.testing.assert_allclose(mine, hand, rtol=0, atol=1e-8 * np.abs(hand).max())
        res = probe_and_cluster(feats["train"], y[rows["train"]], feats["val"], y[rows["val"]], None, None, 10, 0,
                                cluster_standardize="none", **kw)
        want.append(res["val_fs1_best_acc"])
    assert got["val"] == want
    best = max(want)
    assert got["chosen"] == min(w for w, v in zip(got["widths"], want) if v == best)
    assert len(set(np.round(want, 6))) > 1  # the widths score differently on this data: the choice matters


def test_select_width_takes_the_fewer_components_on_a_tie(monkeypatch):
    from fusebench.cells import embedding_protocol as ep
    from fusebench.components.rows import row_of
    from fusebench.probes import embedding_eval

    monkeypatch.setattr(embedding_eval, "probe_and_cluster", lambda *a, **k: {"val_acc": 0.5})
    views = _views(n=(40, 12, 12), widths=(6, 6))
    got = ep.select_width(row_of(None, "raw_pca"), views, np.arange(40) % 2, np.arange(12) % 2, 12, 2, 0, {}, "acc")
    assert got["widths"] == [2, 4, 8, 12] and got["val"] == [0.5] * 4 and got["chosen"] == 2


def test_raw_pca_is_row_version_2_and_the_other_rows_version_1():
    """Version 2 (the width chosen on validation): a record of version 1 (the fixed width) is not reused and a
    board does not average the two."""
    from fusebench.components.identity import versions_block

    assert versions_block("raw_pca")["objective"] == "2"
    assert {versions_block(r)["objective"] for r in ("none", "raw", "raw_l2", "raw_tfidf", "raw_balanced")} == {"1"}
