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


def test_the_committed_boards_widths_follow_the_rule():
    """Every base mv-* board lets raw_pca choose among width_grid(k x d) -- 2, 4, 8, ... and the pretrained rows'
    embedding width, k views (counted in the committed records) times the encoder's d features -- and a 4x variant
    has the one width its base chose (its frozen selection file): what docs/benchmarks.md and the README say."""
    import json
    from pathlib import Path

    from fusebench import benchmarks
    from fusebench.components.reference_features import width_grid

    root = Path(__file__).resolve().parents[1]
    specs = sorted(p.stem for p in (root / "benchmarks").glob("mv-*.yaml"))
    assert len(specs) == 17
    for name in specs:
        spec = benchmarks.load(name)
        widths = spec.options["embedding_eval"]["pca_widths"]
        if spec.variant_of:
            frozen = json.loads((root / "leaderboards" / "runs" / spec.variant_of / "_selection" / "raw_pca.json")
                                .read_text())
            assert widths == [frozen["choice"]["width"]], name
            continue
        rec = json.loads((root / "leaderboards" / "runs" / name / "raw_pca" / "seed0" / "run.json").read_text())
        k, d = len(rec["reference_features"]["view_widths"]), spec.encoder.config["num_features"]
        assert widths == width_grid(k * d), name


def test_raw_pca_narrower_width_is_a_prefix_of_a_wider_one(fixtures_dir):
    """The grid's widths are nested feature sets: the first w columns at width W are, bit for bit, the features at
    width w (same components, same signs) on real data."""
    views, _ = _mat_views(fixtures_dir, "handwritten.mat")
    rows = {"train": np.arange(0, 1200), "val": np.arange(1200, 1600)}
    split = {s: [v[r] for v in views] for s, r in rows.items()}
    wide = reference_features("raw_pca", split, width=96)[0]
    for w in (2, 8, 33):
        narrow = reference_features("raw_pca", split, width=w)[0]
        for s in rows:
            np.testing.assert_array_equal(wide[s][:, :w], narrow[s])


def test_raw_pca_refuses_a_width_beyond_the_numerical_rank():
    """Components past the numerical rank are rounding noise (machine-dependent), so such a width is refused. By
    hand: a view whose third column is the sum of the first two has z-scored columns spanning 2 dimensions (a z-scored
    sum is a combination of the z-scored parts), plus a second view of 1 column: rank 3 of 4 columns; 40 rows."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((40, 2))
    views = {"train": [np.hstack([a, a.sum(axis=1, keepdims=True)]), rng.standard_normal((40, 1))]}
    feats, rec, _ = reference_features("raw_pca", views, width=3)
    assert rec["rank"] == 3 and feats["train"].shape == (40, 3)
    with pytest.raises(ValueError, match=r"raw_pca: width 4 is more than the 3 principal component\(s\) the z-scored "
                                         r"train matrix \(40 x 4\) has \(its numerical rank\); choose widths up to 3"):
        reference_features("raw_pca", views, width=4)
    # centring takes one dimension from n rows: 5 rows of 10 full-rank columns span 4
    wide = {"train": [rng.standard_normal((5, 10))]}
    assert reference_features("raw_pca", wide, width=4)[1]["rank"] == 4
    with pytest.raises(ValueError, match="more than the 4 principal component"):
        reference_features("raw_pca", wide, width=5)


SELECTION_SEEDS = [1000, 1001]


@pytest.fixture(scope="module")
def pca_sweep(tmp_path_factory):
    """raw_pca on the synthetic mv-handwritten, its width selected from [2, 4, 8] on two selection seeds."""
    import fusebench

    out = tmp_path_factory.mktemp("pca-runs")
    recs = fusebench.run("mv-handwritten", objective=["raw_pca"], seeds=[0, 1], out=out, synthetic=True,
                         progress=False, overrides={"options.embedding_eval.pca_widths": [2, 4, 8],
                                                    "pretrain.selection_seeds": SELECTION_SEEDS})
    return out, recs


def test_raw_pca_width_is_chosen_on_the_selection_seeds_and_frozen(pca_sweep):
    """As an objective's hyper-parameters: every width scored on each selection seed's validation split (a trial
    record per width and seed, no test value in it), the best mean wins (the first width in grid order on a tie),
    frozen in _selection/raw_pca.json before any evaluation cell, and every evaluation run uses that width."""
    import json

    out, recs = pca_sweep
    trials = out / ".selection" / "mv-handwritten" / "raw_pca"
    means = {}
    for i, w in enumerate([2, 4, 8]):
        vals = []
        for seed in SELECTION_SEEDS:
            [path] = (trials / f"trial{i}-width{w}" / f"seed{seed}").rglob("run.json")
            rec = json.loads(path.read_text())
            assert rec["seed"] == seed and rec["hparams"] == {"width": w}
            assert rec["reference_features"]["width"] == w
            assert all(m.get("value") is None for m in rec["metrics"].values())  # a trial reads no test sample
            vals.append(rec["selection"]["val_metrics"]["fs1_best_acc"])
        means[w] = sum(vals) / len(vals)
    best = max(means.values())
    want = min(w for w, v in means.items() if v == best)
    frozen = json.loads((out / "mv-handwritten" / "_selection" / "raw_pca.json").read_text())
    assert frozen["grid"] == {"width": [2, 4, 8]} and frozen["seeds"] == SELECTION_SEEDS
    assert frozen["choice"] == {"width": want} and frozen["metric"] == "fs1_best_acc"
    assert [p["val"] for p in frozen["scores"]] == pytest.approx([means[w] for w in (2, 4, 8)], abs=1e-12)
    assert len(set(means.values())) > 1  # the widths score differently here: the choice is a real one
    assert len(recs) == 2
    for rec in recs:
        assert rec["hparams"] == {"width": want} and rec["reference_features"]["width"] == want
        assert rec["hparam_selection"]["choice"] == {"width": want}
        assert rec["metrics"]["fs1_best_acc"]["value"] is not None


def test_raw_pca_without_widths_takes_the_embedding_width():
    """No pca_widths: nothing is selected; the width is the pretrained rows' embedding width (k views x d
    features), at most n_train - 1 and the input columns; with widths but no chosen one the cell refuses."""
    from fusebench import benchmarks
    from fusebench.cells.embedding_protocol import input_width
    from fusebench.components.rows import row_of
    from fusebench.engine.loop import RunError

    spec = benchmarks.load("mv-handwritten", synthetic=True)
    row = row_of(spec, "raw_pca")
    assert row.selection_grid(spec) == {}
    views = {"train": [np.zeros((50, 7)), np.zeros((50, 9))]}
    assert input_width(row, {}, spec, views, 50, 16) == 16   # 2 views x 16 = 32 > 7 + 9 input columns
    assert input_width(row, {}, spec, views, 12, 4) == 8    # 2 x 4
    assert input_width(row, {}, spec, views, 6, 16) == 5    # n_train - 1
    chosen = benchmarks.load("mv-handwritten", synthetic=True, overrides={"options.embedding_eval.pca_widths": [2, 4]})
    assert row.selection_grid(chosen) == {"width": [2, 4]}
    assert input_width(row, {"hparams": {"raw_pca": {"width": 4}}}, chosen, views, 50, 16) == 4
    with pytest.raises(RunError, match=r"its width is selected from \[2, 4\], but the cell was given no chosen width"):
        input_width(row, {}, chosen, views, 50, 16)


def test_pca_widths_is_checked_when_the_spec_loads():
    from fusebench import benchmarks
    from fusebench.typed import ConfigError

    for bad in ([], [2, 2], [0, 4], [2.0], "8", [True]):
        with pytest.raises(ConfigError, match=r"options\.embedding_eval\.pca_widths = .*expected a non-empty list of "
                                              r"distinct positive integers"):
            benchmarks.load("mv-handwritten", synthetic=True, overrides={"options.embedding_eval.pca_widths": bad})
    with pytest.raises(ConfigError, match=r"pca_widths: no row of this benchmark's objectives has its width selected "
                                          r"\(raw_pca\), so the widths would be recorded and not used"):
        benchmarks.load("mv-handwritten", synthetic=True, overrides={"options.embedding_eval.pca_widths": [2],
                                                                     "objectives": ["none", "raw"]})


def test_pca_widths_and_the_selection_seeds_enter_raw_pca_identity_alone():
    """The widths (and, with them, the selection seeds) are read by raw_pca alone: every other row's config hash is
    the same with or without them (committed records stay valid), raw_pca's changes with each."""
    from fusebench import benchmarks
    from fusebench.components.identity import spec_hash

    plain = benchmarks.load("mv-handwritten", synthetic=True)
    widths = benchmarks.load("mv-handwritten", synthetic=True, overrides={"options.embedding_eval.pca_widths": [2, 4]})
    seeds = benchmarks.load("mv-handwritten", synthetic=True, overrides={"options.embedding_eval.pca_widths": [2, 4],
                                                                         "pretrain.selection_seeds": [1000, 1001]})
    for row in ("none", "raw", "raw_l2", "raw_balanced", "mv_infonce", "m3g"):
        assert spec_hash(plain, row) == spec_hash(widths, row) == spec_hash(seeds, row), row
    assert len({spec_hash(plain, "raw_pca"), spec_hash(widths, "raw_pca"), spec_hash(seeds, "raw_pca")}) == 3
    # without widths raw_pca reads no pretraining setting: the selection seeds do not enter its hash
    no_widths = benchmarks.load("mv-handwritten", synthetic=True, overrides={"pretrain.selection_seeds": [1000, 1001]})
    assert spec_hash(no_widths, "raw_pca") == spec_hash(plain, "raw_pca")


def test_raw_pca_is_row_version_3_and_the_other_rows_version_1():
    """Version 3 (the width a hyper-parameter chosen on the selection seeds; 2 chose it in each run, 1 fixed it): a
    record of another version is not reused and a board does not average the two."""
    from fusebench.components.identity import versions_block

    assert versions_block("raw_pca")["objective"] == "3"
    assert {versions_block(r)["objective"] for r in ("none", "raw", "raw_l2", "raw_tfidf", "raw_balanced")} == {"1"}


def test_selection_seeds_are_read_by_raw_pca_when_its_width_is_selected():
    """A run of raw_pca alone reads no pretraining setting but the selection seeds, when pca_widths gives it a
    grid; without widths the seeds would be recorded and not used, so they are refused."""
    from fusebench import benchmarks
    from fusebench.sweep.runner import check_objective_overrides_used
    from fusebench.typed import ConfigError

    seeds = {"pretrain.selection_seeds": [70, 80]}
    widths = {"options.embedding_eval.pca_widths": [2, 4]}
    check_objective_overrides_used(benchmarks.load("mv-handwritten", synthetic=True, overrides={**widths, **seeds}),
                                   ["raw_pca"], seeds)
    with pytest.raises(ConfigError, match=r"selection_seeds=\[70, 80\]: no row of this run pretrains \(raw_pca is a "
                                          r"reference row"):
        check_objective_overrides_used(benchmarks.load("mv-handwritten", synthetic=True, overrides=seeds),
                                       ["raw_pca"], seeds)
    with pytest.raises(ConfigError, match=r"lr=0.5: no row of this run pretrains"):  # any other pretraining setting
        check_objective_overrides_used(benchmarks.load("mv-handwritten", synthetic=True,
                                                       overrides={**widths, "pretrain.lr": 0.5}),
                                       ["raw_pca"], {"pretrain.lr": 0.5})


def _rank_of_zscored(views):
    """The numerical rank of the train views side by side, each column z-scored (population std, a constant column
    0), by numpy alone: what bounds raw_pca's width."""
    z = np.concatenate(views, axis=1)
    sd = z.std(axis=0)
    z = (z - z.mean(axis=0)) / np.where(sd > 0, sd, 1.0)
    return int(np.linalg.matrix_rank(z))


def test_pca_widths_auto_is_worked_out_from_the_real_file(fixtures_dir):
    """``multiview`` (views known from the file) writes pca_widths: auto; a sweep replaces it by 2, 4, ... and
    k views x 16 features, as the mv-* boards write theirs out: the real HW2sources.mat (2 views) gives
    mv-hw2sources' [2, 4, 8, 16, 32], the real handwritten.mat (6 views) mv-handwritten's [2, ..., 64, 96]; the
    spec's recorded options hold the list."""
    from fusebench import benchmarks
    from fusebench.components.rows import row_of
    from fusebench.sweep.runner import resolve_views, resolve_width_grid

    for name, want in (("HW2sources.mat", [2, 4, 8, 16, 32]), ("handwritten.mat", [2, 4, 8, 16, 32, 64, 96])):
        spec = benchmarks.load("multiview")
        assert spec.options["embedding_eval"]["pca_widths"] == "auto"
        assert row_of(spec, "raw_pca").selection_grid(spec) == {"width": ["auto"]}  # selects; points not known yet
        root = str(fixtures_dir / "multiview" / name)
        train = resolve_views(spec, False, root, 0)
        assert resolve_width_grid(spec, False, root, (0, train)) == want
        assert spec.to_dict()["options"]["embedding_eval"]["pca_widths"] == want
        assert row_of(spec, "raw_pca").selection_grid(spec) == {"width": want}
        mine = benchmarks.load(f"mv-{name[:-4].lower()}")
        assert mine.options["embedding_eval"]["pca_widths"] == want  # the curated board's list


def test_pca_widths_auto_stops_at_the_train_matrix_rank(tmp_path):
    """A file whose views repeat one another: the z-scored train matrix has rank 3 (by numpy in the test) though
    2 views x 16 = 32 and the columns number 6, so the widths are [2, 3]; a sweep selects among them, records the
    list and the choice, and a rerun resolves the same list (its records reused)."""
    import json

    import fusebench
    from fusebench import benchmarks
    from fusebench.engine.data import input_views
    from fusebench.sweep.runner import resolve_views, resolve_width_grid

    rng = np.random.default_rng(0)
    n = 120
    y = np.repeat(np.arange(3), n // 3)
    base = rng.standard_normal((n, 3)) + y[:, None]
    v1 = np.column_stack([base, np.ones(n)])         # 3 informative columns and a constant one
    v2 = np.column_stack([base[:, 0] * 2.0, base[:, 1] * 4.0])  # v1's columns scaled by powers of two (exact)
    path = tmp_path / "dup.mat"
    cell = np.empty((1, 2), dtype=object)
    cell[0, 0], cell[0, 1] = v1, v2
    scipy.io.savemat(str(path), {"X": cell, "Y": y[:, None].astype(float)})
    spec = benchmarks.load("multiview")
    train = resolve_views(spec, False, str(path), 0)
    views, _ = input_views(train, spec, 0)
    assert _rank_of_zscored(views) == 3
    assert resolve_width_grid(spec, False, str(path), (0, train)) == [2, 3]

    small = {"pretrain.selection_seeds": [1000, 1001], "options.embedding_eval.n_init": 2,
             "options.embedding_eval.fewshot_draws": 2}
    out = tmp_path / "runs"
    (rec,) = fusebench.run("multiview", objective=["raw_pca"], seeds=[0], out=out, data_root=str(path),
                           progress=False, overrides=small)
    assert rec["config"]["options"]["embedding_eval"]["pca_widths"] == [2, 3]
    assert rec["hparams"]["width"] in (2, 3) and rec["reference_features"]["rank"] >= rec["hparams"]["width"]
    frozen = json.loads((out / "multiview" / "_selection" / "raw_pca.json").read_text())
    assert frozen["grid"] == {"width": [2, 3]} and frozen["choice"] == rec["hparams"]
    (again,) = fusebench.run("multiview", objective=["raw_pca"], seeds=[0], out=out, data_root=str(path),
                             progress=False, overrides=small)
    assert again == rec  # the same list resolved again: the record is reused, not refused as another config
    # the board takes the written-out list for the spec's auto: not "made with settings other than the spec's"
    from fusebench.leaderboard.writer import write_leaderboards

    write_leaderboards(out, tmp_path / "board", plots=False)
    board = (tmp_path / "board" / "multiview.md").read_text()
    [flagged] = [line for line in board.splitlines() if "settings other than the current spec" in line]
    assert "raw_pca" in board and "`options.embedding_eval.n_init`" in flagged and "pca_widths" not in flagged


def test_pca_widths_auto_stops_at_the_lowest_rank_of_the_spec_splits(fixtures_dir):
    """The cap is the lowest rank over the train splits of the spec's seeds and selection seeds (a width past a
    split's rank is refused there), so the widths do not depend on the seeds a run asks for: with 512 features
    per view (2 x 512 > every rank) the real HW2sources.mat's splits differ in rank, each counted here by numpy,
    and the list is width_grid of the lowest, whichever split the run opened first."""
    from fusebench import benchmarks
    from fusebench.components.reference_features import width_grid
    from fusebench.engine.data import build_datasets, input_views
    from fusebench.sweep.runner import resolve_views, resolve_width_grid

    root = str(fixtures_dir / "multiview" / "HW2sources.mat")
    wide = {"encoder.config.num_features": 512}
    spec = benchmarks.load("multiview", overrides=wide)
    resolve_views(spec, False, root, 0)
    seeds = sorted(set(spec.seeds) | set(spec.selection_seeds))
    ranks = {s: _rank_of_zscored(input_views(build_datasets(spec, False, root, s, roles=("train",))["train"], spec,
                                             s)[0]) for s in seeds}
    assert len(set(ranks.values())) > 1 and min(ranks.values()) < 2 * 512  # the splits differ; the rank binds
    want = width_grid(min(ranks.values()))
    got = []
    for first in (0, 1002):
        spec = benchmarks.load("multiview", overrides=wide)
        train = resolve_views(spec, False, root, first)
        got.append(resolve_width_grid(spec, False, root, (first, train)))
    assert got == [want, want]


def test_pca_widths_auto_is_refused_where_no_sweep_resolves_it(fixtures_dir, tmp_path):
    """A selection called on a spec whose widths are still ``auto`` (no sweep opened the data) says so; other
    strings are refused when the spec loads."""
    from fusebench import benchmarks
    from fusebench.spec.request import RunOptions
    from fusebench.sweep.selection import select_hparams
    from fusebench.typed import ConfigError

    spec = benchmarks.load("multiview")
    with pytest.raises(ConfigError, match=r"multiview/raw_pca: options\.embedding_eval\.pca_widths is 'auto', worked "
                                          r"out from the data when a sweep opens it"):
        select_hparams(spec, "raw_pca", tmp_path, RunOptions(progress=False, data_root=str(
            fixtures_dir / "multiview" / "HW2sources.mat")), {})
    for bad in ("Auto", "all"):
        with pytest.raises(ConfigError, match=r"pca_widths = .*expected a non-empty list of distinct positive "
                                              r"integers .*or 'auto'"):
            benchmarks.load("mv-handwritten", synthetic=True, overrides={"options.embedding_eval.pca_widths": bad})


def test_fitted_features_equal_a_fresh_fit_bit_for_bit_and_fit_once(fixtures_dir, monkeypatch):
    """The missing-view scores compute a row's features of each masked test split; fitted once on train
    (raw_pca: one SVD for every mask), they equal a fresh reference_features call on {train, masked} bit for bit
    for every kind, on the real handwritten views."""
    from fusebench.components import reference_features as RF

    views, _ = _mat_views(fixtures_dir, "handwritten.mat")
    train = [v[:300] for v in views]
    rng = np.random.default_rng(0)
    masks = [rng.random((200, len(views))) < r for r in (0.1, 0.5)]
    tests = [[np.where(m[:, j:j + 1], v[300:500], 0.0) for j, v in enumerate(views)] for m in masks]
    for kind in [k for k in REFERENCE_KINDS if k != "raw_tfidf"]:
        width = 24 if kind == "raw_pca" else None
        apply = RF.fitted(kind, train, width=width)
        for x in tests:
            want = reference_features(kind, {"train": train, "x": x}, width=width)[0]["x"]
            got = apply(x)
            assert got.shape == want.shape and np.array_equal(got, want), kind
    calls = []
    real_svd = np.linalg.svd
    monkeypatch.setattr(np.linalg, "svd", lambda *a, **k: calls.append(1) or real_svd(*a, **k))
    apply = RF.fitted("raw_pca", train, width=8)
    for x in tests:
        apply(x)
    assert len(calls) == 1
    with pytest.raises(ValueError, match=r"raw_pca: width 5 is more than the 3 principal component"):
        RF.fitted("raw_pca", [np.column_stack([v, v]) for v in [train[5][:, :3]]], width=5)  # 6 columns, rank 3
