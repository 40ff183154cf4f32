"""``multiview_mat`` and the registered classic multi-view datasets (mv_handwritten, mv_leaves100,
mv_ngs, mv_hw2sources): values against an independent scipy.io.loadmat read of the real files,
standardisation recomputed from the train rows, stratified / deterministic / disjoint splits, MATLAB
v7.3 written here with h5py in MATLAB's layout, sparse and transposed views, label mappings, errors."""

from __future__ import annotations

import hashlib
import logging

import h5py
import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp

from fusebench.components.identity import spec_hash
from fusebench import datasets
from fusebench.datasets import DatasetError, DatasetNotFoundError
from fusebench.datasets import multiview_mat as mvm

SPLITS = ("train", "val", "test")
REGISTERED = {  # id -> (file, N, view dims, classes)
    "mv_handwritten": ("handwritten.mat", 2000, [240, 76, 216, 47, 64, 6], 10),
    "mv_leaves100": ("100Leaves.mat", 1600, [64, 64, 64], 100),
    "mv_ngs": ("NGs.mat", 500, [2000, 2000, 2000], 5),
    "mv_hw2sources": ("HW2sources.mat", 2000, [784, 256], 10),
}


def build_all(name, root, **opts):
    opts.setdefault("use_cache", False)
    return {s: datasets.build(name, root=root, split=s, **opts) for s in SPLITS}


def stack(ds):
    """(rows [n], {view: [n, d]}, targets [n]) through the public sample API."""
    samples = [ds[i] for i in range(len(ds))]
    rows = np.array([s["meta"]["index"] for s in samples])
    views = {m: np.stack([s["modalities"][m].numpy() for s in samples]) for m in ds.modalities}
    return rows, views, np.array([int(s["target"]) for s in samples])


def cell(views):
    c = np.empty((1, len(views)), dtype=object)
    for i, v in enumerate(views):
        c[0, i] = v
    return c


def write_v5(path, views, y, **extra):
    scipy.io.savemat(str(path), {"X": cell(views), "Y": np.asarray(y, dtype=np.float64).reshape(-1, 1), **extra})
    return path


def write_v73(path, views, y):
    """A MATLAB v7.3 file as MATLAB writes it: HDF5 with a 512-byte user block carrying the MAT header,
    X = 1-by-V cell stored as a (V, 1) dataset of object references into '#refs#', every matrix stored
    transposed (MATLAB is column-major), sparse matrices as groups with data / ir / jc (CSC)."""
    with h5py.File(path, "w", userblock_size=512) as f:
        refs = f.create_group("#refs#")
        r = np.empty((len(views), 1), dtype=h5py.ref_dtype)
        for i, v in enumerate(views):
            if sp.issparse(v):
                csc = sp.csc_matrix(v)
                g = refs.create_group(f"v{i}")
                g.attrs["MATLAB_class"] = np.bytes_("double")
                g.attrs["MATLAB_sparse"] = np.uint64(csc.shape[0])
                g.create_dataset("data", data=csc.data.astype(np.float64))
                g.create_dataset("ir", data=csc.indices.astype(np.uint64))
                g.create_dataset("jc", data=csc.indptr.astype(np.uint64))
                r[i, 0] = g.ref
            else:
                d = refs.create_dataset(f"v{i}", data=np.asarray(v, dtype=np.float64).T)
                d.attrs["MATLAB_class"] = np.bytes_("double")
                r[i, 0] = d.ref
        x = f.create_dataset("X", data=r)
        x.attrs["MATLAB_class"] = np.bytes_("cell")
        yd = f.create_dataset("Y", data=np.asarray(y, dtype=np.float64).reshape(-1, 1).T)
        yd.attrs["MATLAB_class"] = np.bytes_("double")
    header = b"MATLAB 7.3 MAT-file, Platform: GLNXA64, Created on: Mon Jan  1 00:00:00 2024 HDF5 schema 1.00 ."
    with open(path, "r+b") as fh:
        fh.write(header.ljust(116, b" ") + b"\x00" * 8 + b"\x00\x02" + b"IM")
    return path


def random_views(seed, n=60, dims=(5, 7, 3), classes=3):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % classes + 1
    views = [rng.standard_normal((n, d)) * (10.0 ** i) + y[:, None] for i, d in enumerate(dims)]
    return views, y


# ---------------------------------------------------------------------------------------------
# the real files
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def mv_dir(fixtures_dir):
    d = fixtures_dir / "multiview"
    if not d.is_dir():
        pytest.skip(f"{d} is absent")
    return d


@pytest.mark.parametrize("name", sorted(REGISTERED))
def test_real_file_raw_values_labels_and_splits(mv_dir, name):
    file, n, dims, classes = REGISTERED[name]
    m = scipy.io.loadmat(str(mv_dir / file))
    raw = [np.asarray(m["X"][0, v], dtype=np.float64) for v in range(m["X"].shape[1])]
    labels = m["Y"].ravel()
    expected_y = np.searchsorted(np.unique(labels), labels)  # sorted unique values -> 0..C-1
    dss = build_all(name, mv_dir, standardize=False)
    assert [m.channels for m in dss["train"].MODALITIES] == dims == [r.shape[1] for r in raw]
    assert dss["train"].modalities == [f"view{i}" for i in range(len(dims))]
    assert dss["train"].num_classes == classes
    seen = []
    for s in SPLITS:
        rows, views, targets = stack(dss[s])
        seen.append(rows)
        for v, x in enumerate(raw):
            np.testing.assert_array_equal(views[f"view{v}"], x[rows].astype(np.float32))
        np.testing.assert_array_equal(targets, expected_y[rows])
    # disjoint and covering
    allrows = np.concatenate(seen)
    assert len(allrows) == n and np.array_equal(np.sort(allrows), np.arange(n))
    # stratified: per class within 1 of fraction x class size; totals within 1 of fraction x N
    sizes = np.bincount(expected_y)
    for s, rows, f in zip(SPLITS, seen, (0.6, 0.2, 0.2)):
        per_class = np.bincount(expected_y[rows], minlength=classes)
        assert np.all(np.abs(per_class - f * sizes) < 1), s
        assert abs(len(rows) - f * n) <= 1
    info = dss["test"].split_info()
    assert info["fractions"] == {"train": 0.6, "val": 0.2, "test": 0.2} and info["seed"] == 0
    assert info["counts"] == {s: len(r) for s, r in zip(SPLITS, seen)}
    assert info["class_counts"]["val"] == np.bincount(expected_y[seen[1]], minlength=classes).tolist()
    assert info["label_values"] == np.unique(labels).tolist() and info["format"] == "v5"


def test_real_file_standardisation_uses_train_rows(mv_dir):
    file = "handwritten.mat"
    m = scipy.io.loadmat(str(mv_dir / file))
    raw = [np.asarray(m["X"][0, v], dtype=np.float64) for v in range(6)]
    dss = build_all("mv_handwritten", mv_dir)
    train_rows = stack(dss["train"])[0]
    for s in SPLITS:
        rows, views, _ = stack(dss[s])
        for v, x in enumerate(raw):
            tr = x[train_rows]
            mean, std = tr.mean(axis=0), tr.std(axis=0)
            constant = np.ptp(tr, axis=0) == 0
            want = np.where(constant, 0.0, (x[rows] - mean) / np.where(constant, 1.0, std))
            np.testing.assert_allclose(views[f"view{v}"], want, rtol=1e-5, atol=1e-5)
    # on the train split itself: mean 0, std 1 per non-constant feature
    _, views, _ = stack(dss["train"])
    z = views["view1"].astype(np.float64)
    np.testing.assert_allclose(z.mean(axis=0), 0, atol=1e-5)
    np.testing.assert_allclose(z.std(axis=0), 1, atol=1e-4)


def test_real_file_splits_are_deterministic_and_seeded_independently_of_run_seed(mv_dir):
    rows = lambda **kw: stack(datasets.build("mv_ngs", root=mv_dir, split="test", use_cache=False, **kw))[0]  # noqa: E731
    a = rows()
    assert np.array_equal(a, rows())
    assert np.array_equal(a, rows(seed=5))  # the run seed does not move the split ...
    assert not np.array_equal(a, rows(split_seed=1))  # ... the split seed does
    assert np.array_equal(rows(seed=1, split_seed="run"), rows(split_seed=1))


def test_root_may_be_the_file_or_its_folder_and_generic_adapter_reads_it(mv_dir):
    by_folder = stack(datasets.build("mv_hw2sources", root=mv_dir, split="val", use_cache=False))
    by_file = stack(datasets.build("mv_hw2sources", root=mv_dir / "HW2sources.mat", split="val", use_cache=False))
    generic = stack(datasets.build("multiview_mat", root=mv_dir / "HW2sources.mat", split="val", use_cache=False))
    named = stack(datasets.build("multiview_mat", root=mv_dir, file="HW2sources.mat", split="val", use_cache=False))
    for other in (by_file, generic, named):
        assert np.array_equal(by_folder[0], other[0]) and np.array_equal(by_folder[2], other[2])
        for k in by_folder[1]:
            np.testing.assert_array_equal(by_folder[1][k], other[1][k])
    with pytest.raises(DatasetError, match="4 .mat files"):  # folder with several files, no file=
        datasets.build("multiview_mat", root=mv_dir, split="val")


def test_sha256_checked_for_registered_files(mv_dir, tmp_path):
    info = datasets.get("mv_ngs").info()
    for word in ("20 Newsgroups", "zhou572/Multi-view-Datasets", "NGs.mat"):
        assert word in info
    assert "UCI" in datasets.get("mv_handwritten").info() and "UCI" in datasets.get("mv_leaves100").info()
    assert "MNIST" in datasets.get("mv_hw2sources").info() and "USPS" in datasets.get("mv_hw2sources").info()
    got = mvm.sha256_of(mv_dir / "NGs.mat")
    assert datasets.get("mv_ngs").FILES[0].sha256 == got == datasets.get("mv_ngs").SHA256
    views, y = random_views(0, n=50)
    write_v5(tmp_path / "NGs.mat", views, y)
    with pytest.raises(DatasetError, match=r"NGs.mat has sha256 .* expected 9100c95e.*verify_sha256=False"):
        datasets.build("mv_ngs", root=tmp_path, split="train")
    ds = datasets.build("mv_ngs", root=tmp_path, split="train", verify_sha256=False, use_cache=False)
    assert [m.channels for m in ds.MODALITIES] == [5, 7, 3] and ds.num_classes == 3  # follows the file
    digest = "00ff" * 16  # a user-given digest for any file
    with pytest.raises(DatasetError, match=f"has sha256 {mvm.sha256_of(tmp_path / 'NGs.mat')}, expected {digest}"):
        datasets.build("multiview_mat", root=tmp_path / "NGs.mat", split="train", sha256=digest)
    ok = datasets.build("multiview_mat", root=tmp_path / "NGs.mat", split="train", use_cache=False,
                        sha256=hashlib.sha256((tmp_path / "NGs.mat").read_bytes()).hexdigest().upper())
    assert ok.num_classes == 3
    # a digest that could never match (a shortened one), or one that would not be checked, is refused by name
    with pytest.raises(DatasetError, match=r"multiview_mat: sha256='00ff' is not a sha256 digest \(64 hexadecimal"):
        datasets.build("multiview_mat", root=tmp_path / "NGs.mat", split="train", sha256="00ff")
    with pytest.raises(DatasetError, match=r"sha256='0{64}' with verify_sha256=False: the digest would be recorded"):
        datasets.build("mv_ngs", root=tmp_path, split="train", sha256="0" * 64, verify_sha256=False)


def test_sha256_mismatch_names_the_dataset_whose_file_it_is_and_the_cli_option(mv_dir, tmp_path):
    """Another registered dataset's file given as the root of mv_ngs is named as that dataset's, with its benchmark;
    any mismatch says how to skip the check from the command line too (run: --set, data prepare: --opt)."""
    import hashlib

    wrong = mv_dir / "handwritten.mat"
    assert hashlib.sha256(wrong.read_bytes()).hexdigest() == datasets.get("mv_handwritten").SHA256
    with pytest.raises(DatasetError) as e:
        datasets.build("mv_ngs", root=wrong, split="train", use_cache=False)
    said = str(e.value)
    assert "it is the file of the dataset 'mv_handwritten': its benchmark is fusebench run mv-handwritten" in said
    assert "--set dataset.options.verify_sha256=false" in said and "--opt verify_sha256=false" in said
    views, y = random_views(0, n=50)
    write_v5(tmp_path / "NGs.mat", views, y)  # no registered file
    with pytest.raises(DatasetError, match=r"\(a different release or a corrupt copy\); to use it anyway"):
        datasets.build("mv_ngs", root=tmp_path, split="train", use_cache=False)


# ---------------------------------------------------------------------------------------------
# formats and layouts written here
# ---------------------------------------------------------------------------------------------
def same_data(a, b):
    for s in SPLITS:
        ra, va, ta = stack(a[s])
        rb, vb, tb = stack(b[s])
        assert np.array_equal(ra, rb) and np.array_equal(ta, tb)
        assert list(va) == list(vb)
        for k in va:
            np.testing.assert_array_equal(va[k], vb[k])


def test_v73_reads_like_v5_dense_and_sparse(tmp_path):
    views, y = random_views(1)
    dense_sparse = [views[0], sp.csr_matrix(np.where(np.abs(views[1]) > 8, views[1], 0.0)), views[2]]
    v5 = write_v5(tmp_path / "a.mat", dense_sparse, y)
    v73 = write_v73(tmp_path / "b.mat", dense_sparse, y)
    assert h5py.is_hdf5(v73) and not h5py.is_hdf5(v5)
    assert sp.issparse(scipy.io.loadmat(str(v5))["X"][0, 1])  # savemat really wrote a sparse view
    a, b = build_all("multiview_mat", v5), build_all("multiview_mat", v73)
    same_data(a, b)
    assert b["train"].split_info()["format"] == "v7.3"
    # raw values of the sparse view, densified
    rows, vals, _ = stack(datasets.build("multiview_mat", root=v73, split="train", standardize=False, use_cache=False))
    np.testing.assert_array_equal(vals["view1"], dense_sparse[1].toarray()[rows].astype(np.float32))
    np.testing.assert_array_equal(vals["view0"], views[0][rows].astype(np.float32))


def test_transposed_views_and_label_codings_give_the_same_dataset(tmp_path):
    views, y = random_views(2)
    ref = build_all("multiview_mat", write_v5(tmp_path / "ref.mat", views, y))
    transposed = build_all("multiview_mat", write_v5(tmp_path / "t.mat", [views[0].T, views[1], views[2].T], y))
    zero_based = build_all("multiview_mat", write_v5(tmp_path / "z.mat", views, y - 1))
    odd_values = build_all("multiview_mat", write_v5(tmp_path / "o.mat", views, y * 10 + 7))
    for other in (transposed, zero_based, odd_values):
        same_data(ref, other)
    assert transposed["train"].split_info()["view_layouts"] == ["d x N", "N x d", "d x N"]
    assert odd_values["train"].split_info()["label_values"] == [17, 27, 37]
    assert set(stack(zero_based["train"])[2].tolist()) == {0, 1, 2}


def test_logical_label_vector_is_a_two_class_label(tmp_path):
    """A MATLAB ``logical`` Y (a two-class problem saved as true / false) is read as classes False -> 0, True -> 1:
    the same dataset as the 0 / 1 double vector, its label values recorded as the booleans."""
    views, y = random_views(3, classes=2)  # y in {1, 2}
    as_double = build_all("multiview_mat", write_v5(tmp_path / "d.mat", views, y - 1))
    path = tmp_path / "b.mat"
    scipy.io.savemat(str(path), {"X": cell(views), "Y": (y == 2).reshape(-1, 1)})
    assert scipy.io.loadmat(str(path))["Y"].dtype == np.uint8  # MATLAB v5 stores logical as uint8 + a flag
    as_logical = build_all("multiview_mat", path)
    same_data(as_double, as_logical)
    expected = [0 if v == 1 else 1 for v in y]  # by hand: class 2 -> True -> 1
    rows, _, targets = stack(as_logical["train"])
    assert targets.tolist() == [expected[r] for r in rows]


def test_square_view_takes_rows_with_a_warning_unless_sample_axis_says(tmp_path, caplog):
    n = 30
    rng = np.random.default_rng(3)
    sq = rng.standard_normal((n, n))
    y = np.arange(n) % 2
    path = write_v5(tmp_path / "sq.mat", [sq, rng.standard_normal((n, 4))], y)
    with caplog.at_level(logging.WARNING, logger="fusebench.datasets.multiview_mat"):
        rows, vals, _ = stack(datasets.build("multiview_mat", root=path, split="train", standardize=False, use_cache=False))
    assert "both axes match" in caplog.text
    np.testing.assert_array_equal(vals["view0"], sq[rows].astype(np.float32))
    rows, vals, _ = stack(datasets.build("multiview_mat", root=path, split="train", standardize=False,
                                         sample_axis=[1, "auto"], use_cache=False))
    np.testing.assert_array_equal(vals["view0"], sq.T[rows].astype(np.float32))


def test_unseen_four_view_file_works(tmp_path):
    rng = np.random.default_rng(4)
    n, dims = 80, (3, 9, 4, 6)
    y = rng.permutation(np.arange(n) % 4) + 1
    views = [rng.standard_normal((n, d)) for d in dims]
    dss = build_all("multiview_mat", write_v5(tmp_path / "new.mat", views, y), standardize=False)
    assert dss["val"].modalities == ["view0", "view1", "view2", "view3"]
    assert [m.channels for m in dss["val"].MODALITIES] == list(dims) and dss["val"].num_classes == 4
    for s in SPLITS:
        rows, vals, targets = stack(dss[s])
        np.testing.assert_array_equal(targets, y[rows] - 1)
        for v in range(4):
            np.testing.assert_array_equal(vals[f"view{v}"], views[v][rows].astype(np.float32))
    assert sum(len(d) for d in dss.values()) == n
    sample = dss["test"][0]
    assert sample["meta"]["id"] == f"new-{sample['meta']['index']}"


def test_view_selection_names_and_split_options(tmp_path):
    views, y = random_views(5, n=100, dims=(2, 3, 4, 5))
    path = write_v5(tmp_path / "v.mat", views, y)
    full = stack(datasets.build("multiview_mat", root=path, split="test", use_cache=False))
    ds = datasets.build("multiview_mat", root=path, split="test", views=[3, 1], use_cache=False)
    assert ds.modalities == ["view3", "view1"] and [m.channels for m in ds.MODALITIES] == [5, 3]
    sub = stack(ds)
    np.testing.assert_array_equal(sub[1]["view3"], full[1]["view3"])
    named = datasets.build("multiview_mat", root=path, split="test", views=[3, 1], view_names=["a", "b"], use_cache=False)
    assert named.modalities == ["a", "b"]
    np.testing.assert_array_equal(stack(named)[1]["b"], full[1]["view1"])
    half = build_all("multiview_mat", path, split_fractions={"train": 0.5, "val": 0.25, "test": 0.25})
    assert {s: len(d) for s, d in half.items()} == {"train": 50, "val": 25, "test": 25}
    # classes of 34, 33, 33 at 0.5/0.25/0.25. class 0: floors 17/8/8, 1 left; deficits (17-17, 8.5-8, 8.5-8)
    # -> val (tie to the earlier split): 17/9/8. class 1: floors 16/8/8; deficits (33.5-33, 16.75-17,
    # 16.75-16) -> test: 16/8/9. class 2: floors 16/8/8, 1 left; deficits (50-49, 25-25, 25-25) -> train.
    info = half["val"].split_info()
    assert info["class_counts"] == {"train": [17, 16, 17], "val": [9, 8, 8], "test": [8, 9, 8]}


def test_file_is_read_once_for_three_splits(tmp_path, monkeypatch):
    calls = []
    real = mvm.formats._read_v5  # read_mat (datasets/multiview_mat/formats.py) calls the module's reader
    monkeypatch.setattr(mvm.formats, "_read_v5", lambda *a: calls.append(a) or real(*a))
    views, y = random_views(6)
    path = write_v5(tmp_path / "once.mat", views, y)
    build_all("multiview_mat", path)
    assert len(calls) == 1
    write_v5(path, [v + 1 for v in views], y)  # a changed file (size/mtime) is read again
    import os

    os.utime(path, ns=(1, 1))
    build_all("multiview_mat", path)
    assert len(calls) == 2


def test_synthetic_twin_is_informative(tmp_path):
    spec = {"num_samples": 120, "seed": 0}
    for name in ("multiview_mat", "mv_hw2sources"):
        dss = build_all(name, tmp_path, synthetic=True, synthetic_spec=spec)
        _, tr, ytr = stack(dss["train"])
        _, te, yte = stack(dss["test"])
        cls = datasets.get(name)
        assert [m.channels for m in dss["train"].MODALITIES] == [m.channels for m in cls.MODALITIES]
        for v in tr:  # nearest class mean per view, fit on train, beats chance by far on test
            means = np.stack([tr[v][ytr == c].mean(axis=0) for c in range(dss["train"].num_classes)])
            pred = ((te[v][:, None, :] - means[None]) ** 2).sum(-1).argmin(axis=1)
            assert (pred == yte).mean() > 0.8, (name, v)


# ---------------------------------------------------------------------------------------------
# errors
# ---------------------------------------------------------------------------------------------
def err(root, match, exc=DatasetError, **opts):
    with pytest.raises(exc, match=match):
        datasets.build("multiview_mat", root=root, split="train", use_cache=False, **opts)


def test_bad_files_give_one_clear_error(tmp_path):
    views, y = random_views(7, n=30)
    p = tmp_path
    scipy.io.savemat(str(p / "nox.mat"), {"Y": y[:, None].astype(float)})
    err(p / "nox.mat", r"nox.mat: no variable\(s\) \['X'\] in the file \(it holds \['Y'\]\)")
    scipy.io.savemat(str(p / "noy.mat"), {"X": cell(views)})
    err(p / "noy.mat", r"noy.mat: no variable\(s\) \['Y'\]")
    err(write_v5(p / "rows.mat", [views[0], views[1][:-2]], y), r"rows.mat: view 1 \(X\{2\}\) has shape \(28, 7\); neither axis matches the 30 labels of Y")
    bad = views[2].copy()
    bad[0, 0], bad[3, 1], bad[4, 2] = np.nan, np.inf, -np.inf
    err(write_v5(p / "nan.mat", [views[0], bad], y), r"nan.mat: view 1 \(view1\) has 3 NaN/Inf values")
    err(write_v5(p / "one.mat", views, np.ones_like(y)), "one.mat: Y holds a single class")
    err(write_v5(p / "single.mat", views[:1], y), r"single.mat: X holds 1 view\(s\); a multi-view dataset needs at least 2")
    (p / "text.mat").write_text("this is not a MATLAB file at all\n" * 10)
    err(p / "text.mat", "text.mat: not a readable MATLAB .mat file")
    (p / "empty.mat").write_bytes(b"")
    err(p / "empty.mat", "empty.mat: empty file")
    scipy.io.savemat(str(p / "notcell.mat"), {"X": views[0], "Y": y[:, None].astype(float)})
    err(p / "notcell.mat", "notcell.mat: X must be a cell array of view matrices")
    scipy.io.savemat(str(p / "ymat.mat"), {"X": cell(views), "Y": np.stack([y, y], 1).astype(float)})
    err(p / "ymat.mat", r"ymat.mat: Y must be an N-by-1 or 1-by-N label vector, got shape \(30, 2\)")
    err(write_v5(p / "ynan.mat", views, np.where(np.arange(30) == 0, np.nan, y)), "ynan.mat: Y has 1 NaN/Inf labels")
    with h5py.File(p / "h5bad.mat", "w") as f:
        f.create_dataset("X", data=np.zeros((3, 30)))
        f.create_dataset("Y", data=np.ones((1, 30)))
    err(p / "h5bad.mat", "h5bad.mat: X must be a cell array of view matrices")
    # text labels: a char matrix, and a cell with one class name per sample (not a cell of label vectors)
    names = np.array([f"class{int(c)}" for c in y])
    scipy.io.savemat(str(p / "ychar.mat"), {"X": cell(views), "Y": names[:, None]})
    err(p / "ychar.mat", r"ychar.mat: the label variable Y is a MATLAB char variable; expected a numeric label vector")
    ycell = np.empty((30, 1), dtype=object)
    ycell[:, 0] = list(names)
    scipy.io.savemat(str(p / "ycellstr.mat"), {"X": cell(views), "Y": ycell})
    err(p / "ycellstr.mat", r"ycellstr.mat: the label cell Y holds 30 entries of text, one per sample, not label vectors")
    ycell[:, 0] = [float(c) for c in y]
    scipy.io.savemat(str(p / "ycellnum.mat"), {"X": cell(views), "Y": ycell})
    err(p / "ycellnum.mat", r"ycellnum.mat: the label cell Y holds 30 entries of a number, one per sample")


def test_bad_roots_and_options(tmp_path):
    views, y = random_views(8, n=30)
    path = write_v5(tmp_path / "ok.mat", views, y)
    err(tmp_path / "missing.mat", "does not exist", DatasetNotFoundError)
    err(None, "no data root given", DatasetNotFoundError)
    err(tmp_path, "missing.mat does not exist", DatasetNotFoundError, file="missing.mat")
    (tmp_path / "empty_dir").mkdir()
    err(tmp_path / "empty_dir", r"empty_dir holds no \.mat file \(a multi-view \.mat file, or the folder that holds it, "
        r"is the data root: --data-root path/to/NAME\.mat\)", DatasetNotFoundError)  # not "0 .mat files ([])"
    err(path, r"unknown option\(s\) \['split_fraction'\]", split_fraction=[0.5, 0.25, 0.25])
    err(path, "split_fractions .* summing to 1", split_fractions=[0.5, 0.5, 0.5])
    err(path, "split_fractions .* summing to 1", split_fractions=[1.0, 0.0, 0.0])
    err(path, r"views=\[0, 3\] must be distinct indices in 0..2", views=[0, 3])
    err(path, r"views=\[1, 1\]", views=[1, 1])
    err(path, "view_names=.* must be 2 distinct", views=[0, 1], view_names=["a"])
    err(path, "sample_axis=2", sample_axis=2)
    err(path, "must be one value or a list of 3", sample_axis=[0, 0])
    err(path, r"view 0 \(X\{1\}\) has shape \(30, 5\); sample_axis=1 needs 30", sample_axis=1)
    err(path, "split_seed='x'", split_seed="x")
    err(write_v5(tmp_path / "tiny.mat", [np.eye(3)[:, :2] + 0.5, np.ones((3, 2))], [1, 2, 1]), "leave split")


def test_stratified_split_helper_by_hand():
    # 5 of class 0, 5 of class 1, fractions 0.6/0.2/0.2 -> per class exactly 3/1/1
    y = np.array([0] * 5 + [1] * 5)
    parts = mvm.stratified_split(y, (0.6, 0.2, 0.2), 0)
    assert [len(parts[s]) for s in SPLITS] == [6, 2, 2]
    for s, k in zip(SPLITS, (3, 1, 1)):
        assert np.bincount(y[parts[s]], minlength=2).tolist() == [k, k]
    # 3 classes of 4, fractions 0.5/0.25/0.25 -> exact 2/1/1 per class
    y = np.repeat(np.arange(3), 4)
    parts = mvm.stratified_split(y, (0.5, 0.25, 0.25), 3)
    assert [np.bincount(y[parts[s]], minlength=3).tolist() for s in SPLITS] == [[2, 2, 2], [1, 1, 1], [1, 1, 1]]
    # 4 classes of 3 at 0.6/0.2/0.2: floors 1/0/0 per class, the leftovers follow the deficit, so the
    # totals are 7/2/3 or so: each within 1 of 7.2/2.4/2.4
    y = np.repeat(np.arange(4), 3)
    parts = mvm.stratified_split(y, (0.6, 0.2, 0.2), 0)
    for s, f in zip(SPLITS, (0.6, 0.2, 0.2)):
        assert abs(len(parts[s]) - f * 12) < 1
        assert np.all(np.abs(np.bincount(y[parts[s]], minlength=4) - f * 3) < 1)


# ---------------------------------------------------------------------------------------------
# view_copies: k augmented copies of the same base view(s) (the k-views study's control arm)
# ---------------------------------------------------------------------------------------------
def expected_copies(raw_views, train_rows, copies, noise, mask, seed, standardized=True):
    """The copies by the formula of datasets/multiview_mat/copies.py, written out here with numpy:
    base = the (train-)standardised base views side by side; copy c = mu + keep * (base - mu + noise * s * eps)
    with eps, then the uniforms of keep, drawn from default_rng([seed, c])."""
    cols = []
    for x in raw_views:
        tr = x[train_rows]
        if standardized:
            sd = tr.std(axis=0)
            const = tr.max(axis=0) == tr.min(axis=0)
            cols.append(np.where(const, 0.0, (x - tr.mean(axis=0)) / np.where(const, 1.0, sd)))
        else:
            cols.append(x)
    base = np.hstack(cols)
    tr = base[train_rows]
    const = tr.max(axis=0) == tr.min(axis=0)
    mu = np.zeros(base.shape[1]) if standardized else np.where(const, tr[0], tr.mean(axis=0))
    s = np.where(const, 0.0, 1.0 if standardized else tr.std(axis=0))
    out = []
    for c in range(copies):
        g = np.random.default_rng([seed, c])
        eps = g.standard_normal(base.shape)
        keep = g.random(base.shape) >= mask
        out.append(np.where(keep, base + noise * s * eps, mu))
    return out


def test_view_copies_on_the_real_file_match_numpy(mv_dir):
    m = scipy.io.loadmat(str(mv_dir / "handwritten.mat"))
    raw = [np.asarray(m["X"][0, v], dtype=np.float64) for v in (1, 3)]  # 76 Fourier + 47 Zernike features
    opt = {"base": [1, 3], "copies": 3, "noise": 0.4, "mask": 0.25, "seed": 7}
    dss = build_all("mv_handwritten", mv_dir, view_copies=opt)
    assert dss["train"].modalities == ["copy0", "copy1", "copy2"]
    assert [mm.channels for mm in dss["train"].MODALITIES] == [123, 123, 123]
    train_rows = stack(dss["train"])[0]
    want = expected_copies(raw, train_rows, 3, 0.4, 0.25, 7)
    for s in SPLITS:
        rows, views, _ = stack(dss[s])
        for c in range(3):
            np.testing.assert_allclose(views[f"copy{c}"], want[c][rows], rtol=1e-5, atol=1e-5)
    # masking: a fraction ~ p of the entries is exactly the train mean (0); 246k entries, std of the fraction 0.001
    _, views, _ = stack(dss["train"])
    assert abs(float((views["copy1"] == 0).mean()) - 0.25) < 0.01
    # noise: the unmasked entries differ from the standardised base by sigma x N(0, 1)
    z = expected_copies(raw, train_rows, 1, 0.0, 0.0, 0)[0][train_rows]
    kept = views["copy2"] != 0
    resid = (views["copy2"][kept] - z[kept]) / 0.4
    assert abs(resid.mean()) < 0.01 and abs(resid.std() - 1) < 0.01
    info = dss["val"].split_info()
    assert info["view_copies"] == opt and info["views"] == [1, 3] and info["view_names"] == ["copy0", "copy1", "copy2"]


def test_view_copies_are_fixed_nested_and_seeded_apart_from_the_run_seed(mv_dir):
    def copies(split="test", **kw):
        opt = {"base": 4, "copies": 2, "noise": 0.5, "mask": 0.3, "seed": 0}
        opt.update(kw.pop("vc", {}))
        return stack(datasets.build("mv_handwritten", root=mv_dir, split=split, use_cache=False, view_copies=opt, **kw))

    rows, a, _ = copies()
    _, same, _ = copies(seed=5)  # the run seed does not move the augmentation ...
    _, three, _ = copies(vc={"copies": 3})  # ... copies 0 and 1 do not depend on how many copies there are ...
    _, other, _ = copies(vc={"seed": 1})  # ... the augmentation seed does
    for c in ("copy0", "copy1"):
        np.testing.assert_array_equal(a[c], same[c])
        np.testing.assert_array_equal(a[c], three[c])
        assert not np.array_equal(a[c], other[c])
    assert not np.array_equal(a["copy0"], a["copy1"])  # each copy its own draw
    # noise 0, mask 0: every copy is the standardised base view
    rows, plain, _ = copies(vc={"noise": 0.0, "mask": 0.0})
    ref = stack(datasets.build("mv_handwritten", root=mv_dir, split="test", use_cache=False, views=[4]))[1]["view4"]
    np.testing.assert_array_equal(plain["copy0"], ref)
    np.testing.assert_array_equal(plain["copy1"], ref)
    named = datasets.build("mv_handwritten", root=mv_dir, split="test", use_cache=False, view_names=["a", "b"],
                           view_copies={"base": [4], "copies": 2})
    assert named.modalities == ["a", "b"]


def test_view_copies_without_standardisation_scale_noise_by_the_train_std(tmp_path):
    rng = np.random.default_rng(11)
    n = 60
    y = np.arange(n) % 3 + 1
    v0 = rng.standard_normal((n, 4)) * np.array([1.0, 10.0, 100.0, 0.1]) + 5.0
    v0[:, 2] = 3.0  # constant: never noised, masked to its value
    path = write_v5(tmp_path / "u.mat", [v0, rng.standard_normal((n, 2))], y)
    opt = {"base": [0], "copies": 2, "noise": 0.3, "mask": 0.2, "seed": 3}
    dss = build_all("multiview_mat", path, standardize=False, view_copies=opt)
    train_rows = stack(dss["train"])[0]
    want = expected_copies([v0], train_rows, 2, 0.3, 0.2, 3, standardized=False)
    for s in SPLITS:
        rows, views, _ = stack(dss[s])
        for c in range(2):
            np.testing.assert_allclose(views[f"copy{c}"], want[c][rows], rtol=1e-5)
        assert np.all(views["copy0"][:, 2] == 3.0)


def test_view_copies_option_is_typed_checked_and_in_the_spec_hash(tmp_path):
    from fusebench import benchmarks
    from fusebench.options import OptionsError, check_options, options_of

    assert "view_copies: dict" in [str(o) for o in options_of(datasets.get("multiview_mat"))]
    with pytest.raises(OptionsError, match="dataset.options.view_copies: expected dict, got list"):
        check_options({"view_copies": [0, 2]}, datasets.get("multiview_mat"), "dataset.options")
    opt = {"base": [0], "copies": 3, "noise": 0.5, "mask": 0.1, "seed": 0}
    plain = spec_hash(benchmarks.load("multiview"), "m3g")
    one = spec_hash(benchmarks.load("multiview", overrides={"dataset.options.view_copies": opt}), "m3g")
    again = spec_hash(benchmarks.load("multiview", overrides={"dataset.options.view_copies": dict(opt)}), "m3g")
    other = spec_hash(benchmarks.load("multiview", overrides={"dataset.options.view_copies": {**opt, "noise": 0.6}}), "m3g")
    assert one == again and len({plain, one, other}) == 3

    views, y = random_views(9, n=30)
    path = write_v5(tmp_path / "ok.mat", views, y)
    good = {"base": [0], "copies": 2}
    for bad, match in [
        ([0], r"view_copies=\[0\] must be a mapping"),
        ({**good, "sigma": 1}, r"view_copies has unknown key\(s\) \['sigma'\]; valid keys"),
        ({"copies": 2}, r"view_copies needs the key\(s\) \['base'\]"),
        ({**good, "base": [3]}, r"view_copies.base=\[3\] must be .* in 0..2"),
        ({**good, "base": [1, 1]}, r"view_copies.base=\[1, 1\] must be .*distinct"),
        ({**good, "base": []}, r"view_copies.base=\[\]"),
        ({**good, "copies": 1}, r"view_copies.copies=1 must be an integer >= 2"),
        ({**good, "copies": True}, r"view_copies.copies=True must be an integer >= 2"),
        ({**good, "noise": -0.1}, r"view_copies.noise=-0.1 must be a finite number >= 0"),
        ({**good, "noise": float("nan")}, r"view_copies.noise=nan must be a finite number"),
        ({**good, "mask": 1.0}, r"view_copies.mask=1.0 must be a number in \[0, 1\)"),
        ({**good, "seed": -1}, r"view_copies.seed=-1 must be an integer >= 0"),
        ({**good, "seed": 1.5}, r"view_copies.seed=1.5 must be an integer >= 0"),
    ]:
        err(path, match, view_copies=bad)
    err(path, "views=.* and view_copies are exclusive", views=[0, 1], view_copies=good)
    err(path, r"view_names=\['a'\] must be 2 distinct non-empty names, one per copy", view_names=["a"], view_copies=good)
    flat = write_v5(tmp_path / "flat.mat", [views[0], np.ones((30, 2))], y)
    err(flat, r"view 1 \(view1\) is constant on the train split.*choose another view_copies.base",
        view_copies={"base": [1], "copies": 2})


def test_v73_square_view_and_explicit_sample_axis_read_like_v5(tmp_path):
    views, y = random_views(5, n=60, dims=(5, 60, 3))  # view1: 60 samples x 60 features (both axes match)
    v5 = write_v5(tmp_path / "a.mat", views, y)
    v73 = write_v73(tmp_path / "b.mat", views, y)
    same_data(build_all("multiview_mat", v5), build_all("multiview_mat", v73))
    rows, vals, _ = stack(datasets.build("multiview_mat", root=v73, split="train", standardize=False, use_cache=False))
    np.testing.assert_array_equal(vals["view1"], views[1][rows].astype(np.float32))  # auto on a square view: rows
    rows, vals, _ = stack(datasets.build("multiview_mat", root=v73, split="train", standardize=False, use_cache=False,
                                         sample_axis=0))
    np.testing.assert_array_equal(vals["view1"], views[1][rows].astype(np.float32))
    np.testing.assert_array_equal(vals["view0"], views[0][rows].astype(np.float32))


def test_dangling_symlink_as_the_folders_only_mat_is_named(fixtures_dir, tmp_path):
    """A folder root whose only .mat is a symbolic link to a file that is gone (a moved data disk): the sha256
    step's stat raised a raw FileNotFoundError; now the file and the link target are named. A link to the real
    file reads it."""
    import os

    os.symlink(tmp_path / "gone" / "HW2sources.mat", tmp_path / "HW2sources.mat")
    with pytest.raises(DatasetNotFoundError, match=r"HW2sources\.mat \(the only \.mat in the data root .*\) is a "
                                                   r"symbolic link to '.*gone/HW2sources\.mat', which does not exist"):
        datasets.build("multiview_mat", root=tmp_path, split="train", use_cache=False)
    os.remove(tmp_path / "HW2sources.mat")
    os.symlink(fixtures_dir / "multiview" / "HW2sources.mat", tmp_path / "HW2sources.mat")
    assert len(datasets.build("multiview_mat", root=tmp_path, split="train", use_cache=False)) == 1200  # 60 % of 2000
