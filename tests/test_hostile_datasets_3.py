"""Hostile-tester findings, third round: malformed sparse views, a cache input left out, overlapping hypnogram
annotations, a wrong EDF record duration, MMSA arrays of the wrong kind, complex multi-view labels and the work
folders of a killed ``prepare``. Each bad input is built from a real fixture (or with scipy / h5py in tmp_path)
and must give one DatasetError naming the file, the key / variable and what was expected."""

from __future__ import annotations

import os
import pickle
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp

from fusebench.datasets import DatasetError, build
from fusebench.datasets import cache
from fusebench.datasets.multiview_mat.formats import check_sparse

from test_dataset_multiview import write_v73


# -- 1. malformed sparse views (v5 and v7.3) ----------------------------------------------------------------
# NGs.mat (real): X = 1x3 cell of 500 x 2000 document-term views, 97-99 % zeros, stored dense; Y (500, 1) in 1..5.
# The sparse files below hold its views as MATLAB sparse matrices (CSC: jc column pointers, ir row indices).
def _ngs(fixtures_dir):
    m = scipy.io.loadmat(fixtures_dir / "multiview" / "NGs.mat")
    views = [np.asarray(v, dtype=np.float64) for v in m["X"].ravel()]
    assert [v.shape for v in views] == [(500, 2000)] * 3
    return views, m["Y"]


def _v5_sparse(path, views, y, edit=None):
    """views[0] as a v5 sparse matrix edited in place by ``edit`` (scipy writes its jc / ir / data as they are:
    sorting is skipped, which would itself walk the bad indices)."""
    s = sp.csc_matrix(views[0])
    s.sort_indices()
    if edit is not None:
        edit(s)
    s.has_sorted_indices = True
    x = np.empty((1, len(views)), dtype=object)
    x[0, 0] = s
    for i, v in enumerate(views[1:], start=1):
        x[0, i] = v
    scipy.io.savemat(path, {"X": x, "Y": y})
    return path


def _v73_sparse(path, views, y, edit=None):
    """views[0] as a v7.3 sparse group ``#refs#/v0`` (data, ir, jc as MATLAB writes them), edited by ``edit``."""
    write_v73(path, [sp.csc_matrix(views[0])] + views[1:], y)
    if edit is not None:
        with h5py.File(path, "r+") as f:
            edit(f["#refs#/v0"])
    return path


def _replace(group, key, values):
    del group[key]
    group.create_dataset(key, data=values)


def test_well_formed_sparse_views_read_as_the_dense_file(tmp_path, fixtures_dir):
    views, y = _ngs(fixtures_dir)
    dense = build("multiview_mat", root=fixtures_dir / "multiview" / "NGs.mat", split="train", use_cache=False)
    for path in (_v5_sparse(tmp_path / "v5.mat", views, y), _v73_sparse(tmp_path / "v73.mat", views, y)):
        ds = build("multiview_mat", root=path, split="train", use_cache=False)
        assert ds.split_info()["view_dims"] == [2000, 2000, 2000]
        for i in (0, len(ds) - 1):
            a, b = ds[i]["modalities"], dense[i]["modalities"]
            assert all(np.array_equal(a[k].numpy(), b[k].numpy()) for k in b)


def _filled_column(jc):
    """A column j >= 1 holding nonzeros (jc[j] < jc[j + 1]): swapping its two pointers makes jc decrease there
    while jc[0] stays 0."""
    return int(next(j for j in np.flatnonzero(np.diff(np.asarray(jc, np.int64)) > 0) if j >= 1))


@pytest.mark.parametrize("case", ["ir_past_rows", "ir_negative_as_uint64", "jc_decreasing", "jc_past_nonzeros",
                                  "jc_short_of_nonzeros", "jc_not_from_0", "data_shorter"])
def test_malformed_v73_sparse_view_refused(tmp_path, fixtures_dir, case):
    views, y = _ngs(fixtures_dir)
    nnz = int(np.count_nonzero(views[0]))
    jc = sp.csc_matrix(views[0]).indptr.astype(np.uint64)
    j = _filled_column(jc)
    swapped = jc.copy()
    swapped[j], swapped[j + 1] = jc[j + 1], jc[j]
    edits = {
        "ir_past_rows": (lambda g: g["ir"].__setitem__(0, 500),
                         r"1 row index\(es\) \(ir\) outside 0..499 \(the first: 500 at nonzero 1\)"),
        "ir_negative_as_uint64": (lambda g: g["ir"].__setitem__(3, 2**64 - 1),
                                  rf"\(ir\) holds the index {2**64 - 1}, beyond any matrix's size"),
        "jc_decreasing": (lambda g: _replace(g, "jc", swapped),
                          rf"the column pointers \(jc\) decrease at column {j + 1} \({int(jc[j + 1])} then "
                          rf"{int(jc[j])}\); expected a non-decreasing sequence"),
        "jc_past_nonzeros": (lambda g: g["jc"].__setitem__(2000, nnz + 10),
                             rf"the last column pointer \(jc\) says {nnz + 10} nonzeros, the row indices \(ir\) hold "
                             rf"{nnz} and the data {nnz}; expected all three equal"),
        "jc_short_of_nonzeros": (lambda g: g["jc"].__setitem__(2000, int(jc[1999])),
                                 rf"the last column pointer \(jc\) says {int(jc[1999])} nonzeros, the row indices "
                                 rf"\(ir\) hold {nnz}"),
        "jc_not_from_0": (lambda g: g["jc"].__setitem__(0, 1), r"the first column pointer \(jc\) is 1; expected 0"),
        "data_shorter": (lambda g: _replace(g, "data", g["data"][()][:-10]),
                         rf"says {nnz} nonzeros, the row indices \(ir\) hold {nnz} and the data {nnz - 10}"),
    }
    edit, message = edits[case]
    path = _v73_sparse(tmp_path / f"{case}.mat", views, y, edit)
    with pytest.raises(DatasetError, match=rf"{re.escape(str(path))}: X\{{1\}}.*" + message):
        build("multiview_mat", root=path, split="train", use_cache=False)


@pytest.mark.parametrize("case", ["ir_past_rows", "jc_decreasing", "jc_past_nonzeros", "data_shorter"])
def test_malformed_v5_sparse_view_refused(tmp_path, fixtures_dir, case):
    views, y = _ngs(fixtures_dir)
    nnz = int(np.count_nonzero(views[0]))

    def jc_decreasing(s):
        j = _filled_column(s.indptr)
        s.indptr[j], s.indptr[j + 1] = s.indptr[j + 1], s.indptr[j]

    edits = {  # loadmat checks only the sizes (scipy's messages); the indices are checked by the reader
        "ir_past_rows": (lambda s: s.indices.__setitem__(0, 500),
                         r"X\{1\}: malformed sparse matrix \(500 x 2000\): 1 row index\(es\) \(ir\) outside 0..499"),
        "jc_decreasing": (jc_decreasing, r"X\{1\}: malformed sparse matrix \(500 x 2000\): the column pointers \(jc\) "
                                         r"decrease at column \d+ \(\d+ then \d+\)"),
        "jc_past_nonzeros": (lambda s: s.indptr.__setitem__(-1, nnz + 10),
                             r"X: malformed sparse matrix: Last value of index pointer"),
        "data_shorter": (lambda s: setattr(s, "data", s.data[:-10]),
                         r"X: malformed sparse matrix: indices and data should have the same size"),
    }
    edit, message = edits[case]
    path = _v5_sparse(tmp_path / f"{case}.mat", views, y, edit)
    with pytest.raises(DatasetError, match=rf"{re.escape(str(path))}: {message}"):
        build("multiview_mat", root=path, split="train", use_cache=False)


@pytest.mark.parametrize("jc,ir,n_data,n_rows,message", [
    ([0, 2, 1, 3], [0, 1, 2], 3, 4, r"decrease at column 2 \(2 then 1\)"),
    ([0, 1, 2, 5], [0, 1, 2], 3, 4, r"says 5 nonzeros, the row indices \(ir\) hold 3 and the data 3"),
    ([0, 1, 2, 3], [0, 1, 2], 2, 4, r"says 3 nonzeros, the row indices \(ir\) hold 3 and the data 2"),
    ([0, 1, 2, 3], [0, 4, 2], 3, 4, r"1 row index\(es\) \(ir\) outside 0..3 \(the first: 4 at nonzero 2\)"),
    ([0, 1, 2, 3], [0, -1, 2], 3, 4, r"outside 0..3 \(the first: -1 at nonzero 2\)"),
    ([0, 1, 3], [0, 1, 2], 3, 4, r"3 column pointers \(jc\) for 3 columns; expected 4"),
])
def test_check_sparse_by_hand(jc, ir, n_data, n_rows, message):
    """The check alone on arrays known to be bad (never densified: toarray() on them is what crashed)."""
    with pytest.raises(DatasetError, match=r"^f.mat: X\{1\}: malformed sparse matrix \(4 x 3\): .*" + message):
        check_sparse(np.array(jc), np.array(ir), n_data, n_rows, 3, "f.mat: X{1}")
    check_sparse(np.array([0, 1, 1, 3]), np.array([3, 0, 2]), 3, 4, 3, "fine")  # column 1 empty: well formed


# -- 6. complex multi-view views and labels ------------------------------------------------------------------
def test_complex_labels_and_complex_sparse_view_refused(tmp_path, fixtures_dir):
    views, y = _ngs(fixtures_dir)
    x = np.empty((1, 3), dtype=object)
    for i, v in enumerate(views):
        x[0, i] = v
    scipy.io.savemat(tmp_path / "cy.mat", {"X": x, "Y": y + 0.5j})
    with pytest.raises(DatasetError, match=r"cy.mat: Y is complex \(complex128\); class labels must be real numbers"):
        build("multiview_mat", root=tmp_path / "cy.mat", split="train", use_cache=False)
    scipy.io.savemat(tmp_path / "cy0.mat", {"X": x, "Y": y.astype(np.complex128)})  # imaginary part 0: still complex
    with pytest.raises(DatasetError, match=r"cy0.mat: Y is complex"):
        build("multiview_mat", root=tmp_path / "cy0.mat", split="train", use_cache=False)
    x[0, 0] = sp.csc_matrix(views[0] * (1 + 1j))
    scipy.io.savemat(tmp_path / "cx.mat", {"X": x, "Y": y})
    with pytest.raises(DatasetError, match=r"cx.mat: X\{1\} is a complex sparse matrix; only real views"):
        build("multiview_mat", root=tmp_path / "cx.mat", split="train", use_cache=False)


# -- 2. NYUv2 MTAN: splits.mat is an input of the prepared cache ---------------------------------------------
# mtan/val holds one real frame (0.npy); the real splits.mat's testNdxs starts 1, 2, 9 (PROVENANCE), so a
# splits.mat whose testNdxs is [1] names it frame 1, one with [2] frame 2.
def test_mtan_cache_goes_stale_when_splits_mat_changes(tmp_path, fixtures_dir, caplog):
    root = tmp_path / "mtan"
    shutil.copytree(fixtures_dir / "nyuv2" / "mtan", root)
    real = scipy.io.loadmat(fixtures_dir / "nyuv2" / "meta" / "splits.mat")
    assert real["testNdxs"].ravel()[:3].tolist() == [1, 2, 9]
    scipy.io.savemat(root / "splits.mat", {"trainNdxs": real["trainNdxs"], "testNdxs": real["testNdxs"][:1]})
    kw = dict(root=root, split="test", modalities=["depth"])
    ds = build("nyuv2", use_cache=False, **kw)
    assert ds[0]["meta"]["frame"] == 1
    assert root / "splits.mat" in [Path(p) for p in ds.source_files()]
    base = tmp_path / "prep"
    cache.prepare(ds, base=base, progress=False)
    assert cache.open_cache(ds, base=base) is not None

    scipy.io.savemat(root / "splits.mat", {"trainNdxs": real["trainNdxs"], "testNdxs": real["testNdxs"][1:2]})
    st = (root / "splits.mat").stat()
    os.utime(root / "splits.mat", ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # same size: a new mtime
    again = build("nyuv2", use_cache=False, **kw)
    assert again[0]["meta"]["frame"] == 2
    assert cache.open_cache(again, base=base) is None
    assert f"input {root / 'splits.mat'} changed since preparation" in caplog.text


# -- 3. Sleep-EDF overlapping annotations --------------------------------------------------------------------
# short_psg.edf (real): 10 records of 30 s, i.e. 10 epochs; the real hypnogram's first annotation is W for
# 30630 s, so the real pair gives 10 wake epochs (docs/datasets/eeg.md).
PAIR = [("short_psg.edf", "SC4001EC-Hypnogram.edf")]


def _hypnogram_pair(fixtures_dir, tmp_path, annotations):
    from fusebench.datasets.sleep.edf import read_edf_header, write_edf

    psg = fixtures_dir / "sleep_edf" / "short_psg.edf"
    shutil.copyfile(psg, tmp_path / "short_psg.edf")
    write_edf(tmp_path / "SC4001EC-Hypnogram.edf", [], read_edf_header(psg)["start"], annotations=annotations)
    return tmp_path / "SC4001EC-Hypnogram.edf"


def _stages(root, **kw):
    ds = build("sleep_edf", root=root, pairs=PAIR, crop_wake_min=None, use_cache=False, **kw)
    return [int(ds[i]["target"]) for i in range(len(ds))]


def test_real_pair_still_reads(fixtures_dir):
    assert _stages(fixtures_dir / "sleep_edf") == [0] * 10


@pytest.mark.parametrize("annotations", [
    [(0.0, 300.0, "Sleep stage W"), (60.0, 90.0, "Sleep stage 2")],
    [(60.0, 90.0, "Sleep stage 2"), (0.0, 300.0, "Sleep stage W")],  # order does not matter
])
def test_overlapping_annotations_of_two_stages_refused(tmp_path, fixtures_dir, annotations):
    hyp = _hypnogram_pair(fixtures_dir, tmp_path, annotations)
    # N2 from 60 s for 90 s covers epochs 2, 3, 4 (60..150 s), all also covered by W
    with pytest.raises(DatasetError, match=rf"{re.escape(str(hyp))}: overlapping annotations give 3 epoch\(s\) two "
                                           r"different stages, first epoch 2 \(60..90 s\): the annotation at onset "
                                           r"0 s, duration 300 s, 'Sleep stage W' and the one at onset 60 s, duration "
                                           r"90 s, 'Sleep stage 2'; each epoch must have one stage"):
        _stages(tmp_path)


def test_overlapping_annotations_that_agree_are_read(tmp_path, fixtures_dir):
    # W over everything plus W again for 60..150 s; N3 written as R&K stage 3 over 150..300 s and stage 4 over
    # 210..240 s (both N3 = 3); epochs 0..4 W, 5..9 N3
    _hypnogram_pair(fixtures_dir, tmp_path, [(0.0, 150.0, "Sleep stage W"), (60.0, 90.0, "Sleep stage W"),
                                             (150.0, 150.0, "Sleep stage 3"), (210.0, 30.0, "Sleep stage 4")])
    assert _stages(tmp_path) == [0] * 5 + [3] * 5


def test_movement_time_over_a_scored_epoch_refused(tmp_path, fixtures_dir):
    hyp = _hypnogram_pair(fixtures_dir, tmp_path, [(0.0, 300.0, "Sleep stage 2"), (90.0, 30.0, "Movement time")])
    with pytest.raises(DatasetError, match=rf"{re.escape(str(hyp))}: overlapping annotations give 1 epoch\(s\) two "
                                           r"different stages, first epoch 3 \(90..120 s\).*'Sleep stage 2'.*"
                                           r"'Movement time'"):
        _stages(tmp_path)


# -- 4. Sleep-EDF record duration -----------------------------------------------------------------------------
# short_psg.edf: record duration '30' at header bytes 244..251; EEG Fpz-Cz and Pz-Oz 3000 samples per record
# (100 Hz), EOG 3000, the other four signals 30 (1 Hz).
def _psg_with_record_duration(fixtures_dir, tmp_path, value: bytes):
    src = fixtures_dir / "sleep_edf"
    shutil.copyfile(src / "SC4001EC-Hypnogram.edf", tmp_path / "SC4001EC-Hypnogram.edf")
    data = bytearray((src / "short_psg.edf").read_bytes())
    assert data[244:252] == b"30      "
    data[244:252] = value.ljust(8)
    (tmp_path / "short_psg.edf").write_bytes(bytes(data))
    return tmp_path / "short_psg.edf"


@pytest.mark.parametrize("value,seconds,rate,channels", [  # rate = 3000 samples / the record duration
    (b"15", "15", "200", None), (b"60", "60", "50", None), (b"1e-9", "1e-09", "3e\\+12", None),
    (b"15", "15", "200", ["pz_oz"])])
def test_wrong_record_duration_refused(tmp_path, fixtures_dir, value, seconds, rate, channels):
    psg = _psg_with_record_duration(fixtures_dir, tmp_path, value)
    label = "EEG Pz-Oz" if channels else "EEG Fpz-Cz"
    with pytest.raises(DatasetError, match=rf"{re.escape(str(psg))}: channel '{label}' is stored at {rate} Hz \(3000 "
                                           rf"samples per {re.escape(seconds)}-s data record\), expected 100 Hz"):
        build("sleep_edf", root=tmp_path, pairs=PAIR, use_cache=False,
              **({"modalities": channels} if channels else {}))


def test_record_duration_0_refused_in_a_psg_but_not_in_a_hypnogram(tmp_path, fixtures_dir):
    psg = _psg_with_record_duration(fixtures_dir, tmp_path, b"0")
    with pytest.raises(DatasetError, match=rf"{re.escape(str(psg))}: bad EDF header: the record duration \(bytes "
                                           r"244-252\) is 0 s, but the file holds the signals \['EEG Fpz-Cz', "
                                           r"'EEG Pz-Oz', .*only an EDF\+ file of annotations alone"):
        build("sleep_edf", root=tmp_path, pairs=PAIR, use_cache=False)
    hyp = (fixtures_dir / "sleep_edf" / "SC4001EC-Hypnogram.edf").read_bytes()
    assert hyp[244:252] == b"0       "  # the real hypnogram has records of 0 s: read by the real pair above


# -- 5. MMSA pickles -----------------------------------------------------------------------------------------
# feature_aligned.pkl (real MMSA-FET output of one CH-SIMS clip): text (9, 768) float32, audio (9, 25) float64,
# vision (9, 171) float64. The split pickles below repeat that clip, one id per row.
def _clip(fixtures_dir):
    from fusebench.datasets.safe_pickle import load

    return load(fixtures_dir / "ch_sims" / "feature_aligned.pkl")


def _split(clip, ids):
    n = len(ids)
    return {"text": np.repeat(clip["text"][None], n, axis=0), "audio": np.repeat(clip["audio"][None], n, axis=0),
            "vision": np.repeat(clip["vision"][None], n, axis=0),
            "regression_labels": np.linspace(-1, 1, n).astype(np.float32), "id": np.array(ids),
            "raw_text": np.array([f"clip {i}" for i in ids])}


def _mmsa_pickle(tmp_path, fixtures_dir, edit=None, test_ids=("t0", "t1")):
    clip = _clip(fixtures_dir)
    obj = {"train": _split(clip, ["a0", "a1", "a2", "a3"]), "valid": _split(clip, ["v0", "v1"]),
           "test": _split(clip, list(test_ids))}
    if edit is not None:
        edit(obj["train"])
    path = tmp_path / "unaligned_50.pkl"
    path.write_bytes(pickle.dumps(obj, protocol=4))
    return path


def test_valid_split_pickle_reads_the_real_features(tmp_path, fixtures_dir):
    path = _mmsa_pickle(tmp_path, fixtures_dir)
    ds = build("mosi", root=path, split="train", use_cache=False)
    s = ds[3]
    assert s["meta"]["id"] == "a3" and s["meta"]["raw_text"] == "clip a3"
    assert s["modalities"]["audio"].numpy().tolist() == _clip(fixtures_dir)["audio"].astype(np.float32).tolist()
    assert float(s["target"]) == pytest.approx(1.0)


@pytest.mark.parametrize("key,edit,message", [
    ("audio", lambda a: a + 1j, r"key 'audio' must hold real numbers, got dtype complex128 \(complex values\)"),
    ("vision", lambda a: a.astype(str), r"key 'vision' must hold real numbers, got dtype <U\d+ \(text values\)"),
    ("regression_labels", lambda a: a.astype(str),
     r"label 'regression_labels' must hold one number per sample \(real regression scores\), got dtype <U\d+ "
     r"\(text values\)"),
    ("regression_labels", lambda a: a.astype(np.complex64),
     r"label 'regression_labels' must hold one number per sample .*got dtype complex64 \(complex values\)"),
])
def test_complex_or_text_arrays_refused(tmp_path, fixtures_dir, key, edit, message):
    path = _mmsa_pickle(tmp_path, fixtures_dir, lambda part: part.__setitem__(key, edit(part[key])))
    with pytest.raises(DatasetError, match=rf"{re.escape(str(path))} \[train\]: {message}"):
        build("mosi", root=path, split="train", use_cache=False)


def test_complex_features_of_the_real_feature_file_refused(tmp_path, fixtures_dir):
    clip = _clip(fixtures_dir)
    clip["audio"] = clip["audio"] * (1 + 1j)
    path = tmp_path / "feature_aligned.pkl"
    path.write_bytes(pickle.dumps(clip, protocol=4))
    with pytest.raises(DatasetError, match=rf"{re.escape(str(path))}: key 'audio' must hold real numbers, got dtype "
                                           r"complex128"):
        build("chsims", root=path, use_cache=False)


def test_float64_beyond_float32_reported_as_overflow(tmp_path, fixtures_dir):
    def edit(part):
        part["audio"] = part["audio"].copy()
        part["audio"][2, 4, 7] = 1e300

    path = _mmsa_pickle(tmp_path, fixtures_dir, edit)
    with pytest.raises(DatasetError, match=rf"{re.escape(str(path))} \[train\]: key 'audio' holds values that overflow "
                                           r"float32 .* in 1 samples, first sample 2 \(id 'a2', magnitude up to "
                                           r"1e\+300\)"):
        build("mosi", root=path, split="train", use_cache=False, nonfinite="zero")  # not NaN/Inf: not zeroed
    path = _mmsa_pickle(tmp_path, fixtures_dir, lambda p: p.__setitem__(
        "regression_labels", np.array([0.5, 1e300, 0.0, 0.0])))
    with pytest.raises(DatasetError, match=r"\[train\]: label 'regression_labels' holds 1e\+300 \(entry 1\), beyond the "
                                           r"float32 range"):
        build("mosi", root=path, split="train", use_cache=False)


@pytest.mark.parametrize("key,value,message", [
    ("id", np.array(["a0", "a1"]), r"key 'id' holds 2 entries, but 'regression_labels' has 4"),
    ("raw_text", np.array(["x"] * 5), r"key 'raw_text' holds 5 entries, but 'regression_labels' has 4"),
    ("id", 7, r"key 'id' holds the int 7, but 'regression_labels' has 4"),
])
def test_id_or_raw_text_of_the_wrong_length_refused(tmp_path, fixtures_dir, key, value, message):
    path = _mmsa_pickle(tmp_path, fixtures_dir, lambda part: part.__setitem__(key, value))
    with pytest.raises(DatasetError, match=rf"{re.escape(str(path))} \[train\]: {message}; '{key}' must hold one "
                                           r"entry per sample"):
        build("mosi", root=path, split="train", use_cache=False)


def test_clip_in_two_splits_refused_in_every_split(tmp_path, fixtures_dir):
    path = _mmsa_pickle(tmp_path, fixtures_dir, test_ids=("t0", "a1", "a3"))
    for split in ("train", "val", "test"):
        with pytest.raises(DatasetError, match=rf"{re.escape(str(path))}: 2 clip id\(s\) occur in both split \[train\] "
                                               r"and split \[test\] \('a1', 'a3'\); a clip in two splits leaks"):
            build("mosi", root=path, split=split, use_cache=False)


def _three_splits(tmp_path, fixtures_dir, train, valid=("v0", "v1"), test=("t0", "t1")):
    clip = _clip(fixtures_dir)
    obj = {"train": _split(clip, list(train)), "valid": _split(clip, list(valid)), "test": _split(clip, list(test))}
    path = tmp_path / "unaligned_50.pkl"
    path.write_bytes(pickle.dumps(obj, protocol=4))
    return path


def test_clip_repeated_within_one_split_refused_in_every_split(tmp_path, fixtures_dir):
    """A clip id twice in one split (here 'a1' at samples 1 and 3 of [train]) used to be read as two samples: the
    repeat weighed twice in training (or, in [test], in the metric). Refused whichever split is built."""
    path = _three_splits(tmp_path, fixtures_dir, train=("a0", "a1", "a2", "a1", "a4"))
    for split in ("train", "val", "test"):
        with pytest.raises(DatasetError, match=rf"^{re.escape(str(path))}: split \[train\] holds 1 clip id\(s\) more "
                                               r"than once \(1 repeated sample\(s\) of 5: 'a1' at samples 1, 3\); a "
                                               r"repeated clip weighs twice in training or in the test metric: each "
                                               r"clip id must occur once in a split$"):
            build("mosi", root=path, split=split, use_cache=False)
    # the count and the first ids of several repeats; an id thrice; a repeat in [test] is named there
    path = _three_splits(tmp_path, fixtures_dir, train=("a0", "a1"),
                         test=("b", "c", "b", "d", "c", "e", "d", "f", "e", "b"))
    with pytest.raises(DatasetError, match=r": split \[test\] holds 4 clip id\(s\) more than once \(5 repeated "
                                           r"sample\(s\) of 10: 'b' at samples 0, 2, 9; 'c' at samples 1, 4; 'd' at "
                                           r"samples 3, 6; \.\.\.\); a repeated clip"):
        build("mosi", root=path, split="train", use_cache=False)


def test_ids_that_are_rows_are_one_id_each(tmp_path, fixtures_dir):
    """An ``id`` array of rows (``[video, start]`` per sample) is one id per row: entries shared by rows of
    different clips (a video, a start time '0.0') are neither a repeat nor a clip in two splits (the check across
    splits used to compare the entries one by one)."""
    rows = lambda *pairs: [list(p) for p in pairs]  # noqa: E731
    path = _three_splits(tmp_path, fixtures_dir, train=rows(("vidA", "0.0"), ("vidA", "4.5"), ("vidB", "0.0")),
                         valid=rows(("vidC", "0.0"),), test=rows(("vidD", "0.0"), ("vidD", "4.5")))
    ds = build("mosi", root=path, split="train", use_cache=False)
    assert ds.sample_keys() == [ds[i]["meta"]["id"] for i in range(3)]
    assert len(set(ds.sample_keys())) == 3


def test_ids_that_are_rows_are_read_entry_by_entry_not_as_numpy_prints_them(tmp_path, fixtures_dir):
    """A row's entries are read as text one by one (bytes decoded, full float precision), joined by '|': a clip
    stored as bytes in one split and as text in another is the same clip, and two rows that differ beyond numpy's
    8 printed digits are two clips (numpy's printed form used to decide both)."""
    clip = _clip(fixtures_dir)
    obj = {"train": _split(clip, ["x0", "x1"]), "valid": _split(clip, ["v0"]), "test": _split(clip, ["t0"])}
    obj["train"]["id"] = np.array([[b"vidA", b"0.0"], [b"vidA", b"4.5"]])
    obj["test"]["id"] = np.array([["vidA", "0.0"]])
    path = tmp_path / "unaligned_50.pkl"
    path.write_bytes(pickle.dumps(obj, protocol=4))
    with pytest.raises(DatasetError, match=r"1 clip id\(s\) occur in both split \[train\] and split \[test\] "
                                           r"\('vidA\|0\.0'\)"):
        build("mosi", root=path, use_cache=False)
    obj["test"]["id"] = np.array([["vidD", "0.0"]])
    obj["train"]["id"] = np.array([[1, 0.123456789012], [1, 0.123456789013]], dtype=object)
    path.write_bytes(pickle.dumps(obj, protocol=4))
    ds = build("mosi", root=path, use_cache=False)
    assert ds.sample_keys() == ["1|0.123456789012", "1|0.123456789013"]


def test_missing_ids_are_no_clip_and_other_splits_malformed_ids_are_not_compared(tmp_path, fixtures_dir):
    clip = _clip(fixtures_dir)
    obj = {"train": _split(clip, ["a0", "a1", "a2"]), "valid": _split(clip, ["v0"]), "test": _split(clip, ["t0"])}
    obj["train"]["id"] = np.array(["a0", None, None], dtype=object)  # two missing ids: no repeat of one clip
    obj["valid"]["id"] = {"v0"}  # not a sequence: not compared here (refused when [valid] is built)
    path = tmp_path / "unaligned_50.pkl"
    path.write_bytes(pickle.dumps(obj, protocol=4))
    ds = build("mosi", root=path, use_cache=False)
    assert len(ds) == 3 and ds.sample_keys() is None  # a split with missing ids cannot name every sample
    with pytest.raises(DatasetError, match=rf"^{re.escape(str(path))} \[valid\]: key 'id' is a set; expected a list or "
                                           r"an array of one entry per sample, in the samples' order$"):
        build("mosi", root=path, split="val", use_cache=False)


def test_sample_keys_are_the_clip_ids_in_sample_order(tmp_path, fixtures_dir):
    from fusebench.records.builder import split_overlap

    path = _three_splits(tmp_path, fixtures_dir, train=("a3", "a0", "a2", "a1"), valid=("v1", "v0"), test=("t0",))
    data = {role: build("mosi", root=path, split=split, use_cache=False)
            for role, split in (("train", "train"), ("val", "val"), ("test", "test"))}
    assert data["train"].sample_keys() == ["a3", "a0", "a2", "a1"]  # as written, not sorted
    assert data["val"].sample_keys() == ["v1", "v0"] and data["test"].sample_keys() == ["t0"]
    assert [data["train"][i]["meta"]["id"] for i in range(4)] == ["a3", "a0", "a2", "a1"]
    assert split_overlap(data) is None  # disjoint: a run on them is ranked
    # bytes ids read as text, as the meta ids are
    path = _three_splits(tmp_path, fixtures_dir, train=(b"a0", b"a1"))
    assert build("mosi", root=path, use_cache=False).sample_keys() == ["a0", "a1"]
    # no 'id': the meta ids are the indices 0, 1, ..., which name no clip (split [valid] would share them)
    clip = _clip(fixtures_dir)
    obj = {k: {key: v for key, v in _split(clip, ["x", "y"]).items() if key != "id"} for k in ("train", "valid", "test")}
    path.write_bytes(pickle.dumps(obj, protocol=4))
    assert build("mosi", root=path, use_cache=False).sample_keys() is None


# -- 7. work folders of a killed prepare ----------------------------------------------------------------------
def _nyu_test(fixtures_dir):
    return build("nyuv2", root=fixtures_dir / "nyuv2" / "mtan", split="test", modalities=["depth"], use_cache=False)


def _ended_pid():
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def _work_folder(parent, name, age_s=0.0):
    d = parent / name
    (d / "modalities").mkdir(parents=True)
    (d / "modalities" / "depth.npy").write_bytes(b"x" * 100)
    if age_s:
        t = time.time() - age_s
        for p in (d / "modalities" / "depth.npy", d / "modalities", d):
            os.utime(p, (t, t))
    return d


def test_prepare_removes_the_work_folders_of_ended_processes_only(tmp_path, fixtures_dir):
    ds = _nyu_test(fixtures_dir)
    out = cache.cache_dir(ds, tmp_path / "prep")
    out.parent.mkdir(parents=True)
    key, host, dead, live = out.name, cache._host(), _ended_pid(), os.getppid()  # the parent lives while we run
    day = cache.STALE_WORK_S
    gone = [_work_folder(out.parent, f".{key}.tmp-{dead}-{host}-abcdefgh"),  # this host, process ended
            _work_folder(out.parent, f".{key}.old-{dead}-{host}-abcdefgh"),
            _work_folder(out.parent, f".{key}.tmp-{live}-other-node.cluster-abcdefgh", age_s=day + 60),  # idle a day
            _work_folder(out.parent, f".{key}.tmp-a1b2c3d4", age_s=day + 60)]  # the name before owners were named
    kept = [_work_folder(out.parent, f".{key}.tmp-{live}-{host}-abcdefgh"),  # a live prepare of this host
            _work_folder(out.parent, f".{key}.tmp-{os.getpid()}-{host}-ijklmnop"),  # this process's own
            _work_folder(out.parent, f".{key}.tmp-{dead}-other-node-abcdefgh", age_s=day - 600),  # another host's
            _work_folder(out.parent, f".{key}.tmp-qrstuvwx", age_s=60),  # an old-style name, written recently
            _work_folder(out.parent, f".{'0' * len(key)}.tmp-{dead}-{host}-abcdefgh")]  # another cache's
    assert cache.prepare(ds, base=tmp_path / "prep", progress=False) == out
    assert sorted(p.name for p in out.parent.iterdir()) == sorted([key] + [p.name for p in kept])
    assert not any(p.exists() for p in gone)


def test_a_work_folder_of_another_pid_namespace_or_boot_is_judged_by_age(tmp_path, fixtures_dir):
    """A container sharing this host's name numbers its processes apart: a folder named with this host but another
    process space (``~<8 hex>``: another pid namespace or an earlier boot) is not judged by pid here -- a live pid
    of ours does not keep it, a pid that is not alive here does not remove it; only a day without writes does. One
    of our own space is judged by pid."""
    from fusebench.runtime.processes import space_tag

    ds = _nyu_test(fixtures_dir)
    out = cache.cache_dir(ds, tmp_path / "prep")
    out.parent.mkdir(parents=True)
    key, host, dead, live, day = out.name, cache._host(), _ended_pid(), os.getppid(), cache.STALE_WORK_S
    ours = space_tag()
    other = "0" * 8 if ours != "0" * 8 else "1" * 8
    gone = [_work_folder(out.parent, f".{key}.tmp-{dead}-{host}~{ours}-abcdefgh"),  # our space, process ended
            _work_folder(out.parent, f".{key}.tmp-{live}-{host}~{other}-abcdefgh", age_s=day + 60)]  # idle a day
    kept = [_work_folder(out.parent, f".{key}.tmp-{dead}-{host}~{other}-abcdefgh", age_s=day - 600),
            _work_folder(out.parent, f".{key}.tmp-{live}-{host}~{ours}-ijklmnop")]
    assert cache.prepare(ds, base=tmp_path / "prep", progress=False) == out
    assert sorted(p.name for p in out.parent.iterdir()) == sorted([key] + [p.name for p in kept])
    assert not any(p.exists() for p in gone)


def test_the_folder_of_a_killed_prepare_is_removed_by_the_next(tmp_path, fixtures_dir):
    """A prepare killed just before it renames its finished folder into place (os._exit: no cleanup runs, as
    under SIGKILL) leaves ``.<key>.tmp-<its pid>-<host>-*``; the next prepare removes it and installs its own."""
    base = tmp_path / "prep"
    script = (
        "import os, sys\n"
        "from fusebench.datasets import build, cache\n"
        f"ds = build('nyuv2', root={str(fixtures_dir / 'nyuv2' / 'mtan')!r}, split='test', modalities=['depth'], "
        "use_cache=False)\n"
        "cache._install = lambda tmp, out: os._exit(9)\n"
        f"cache.prepare(ds, base={str(base)!r}, progress=False)\n")
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert r.returncode == 9, r.stderr
    ds = _nyu_test(fixtures_dir)
    out = cache.cache_dir(ds, base)
    [left] = list(out.parent.iterdir())
    assert re.fullmatch(rf"\.{out.name}\.tmp-\d+-{re.escape(cache._host())}~[0-9a-f]{{8}}-[a-z0-9_]{{8}}", left.name)
    assert (left / "manifest.json").is_file()  # it had finished writing
    cache.prepare(ds, base=base, progress=False)
    assert [p.name for p in out.parent.iterdir()] == [out.name]
    assert cache.open_cache(ds, base=base) is not None


@pytest.mark.parametrize("key,value,kind", [
    ("audio_lengths", np.array(["1", "1", "1", "1"]), r"<U1 \(text values\)"),
    ("vision_lengths", np.array([1, 1, 1, 1 + 1j]), r"complex128 \(complex values\)"),
])
def test_text_or_complex_lengths_refused(tmp_path, fixtures_dir, key, value, kind):
    """A length parsed from text ('1') or cast from a complex number was read as a number before."""
    path = _mmsa_pickle(tmp_path, fixtures_dir, lambda part: part.__setitem__(key, value))
    t = _clip(fixtures_dir)[key.split("_")[0]].shape[0]  # the padded length T of the modality
    with pytest.raises(DatasetError, match=rf"^{re.escape(str(path))} \[train\]: {key} must hold integers in "
                                           rf"0\.\.{t}, got dtype {kind}$"):
        build("mosi", root=path, split="train", use_cache=False)
