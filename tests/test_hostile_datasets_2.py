"""Hostile-tester findings, second round: damaged copies of the real fixtures must give one DatasetError
naming the file, the field / key and the rule (never a traceback, never silent acceptance)."""

from __future__ import annotations

import numpy as np
import pytest

from fusebench.datasets import DatasetError, build

# -- 1. Sleep-EDF per-signal header fields -----------------------------------------------------------
# short_psg.edf by hand: 7 signals; the signal header starts at byte 256 with the fields stored for all
# signals in turn: label 16 x 7 = 112, transducer 80 x 7 = 560, dimension 8 x 7 = 56 bytes -> physical
# minimum at 256 + 112 + 560 + 56 = 984, physical maximum at 984 + 56 = 1040, digital minimum at 1096,
# digital maximum at 1152; signal i (0-based) at offset + 8 i. Signal 0 is 'EEG Fpz-Cz' with physical
# range -192..192 and digital range -2048..2047 (read off the file with a hex viewer).
PAIR = [("short_psg.edf", "SC4001EC-Hypnogram.edf")]
PMIN, PMAX, DMIN, DMAX = 984, 1040, 1096, 1152


def _sleep_copy(fixtures_dir, tmp_path, offset, value: bytes):
    src = fixtures_dir / "sleep_edf"
    (tmp_path / "SC4001EC-Hypnogram.edf").write_bytes((src / "SC4001EC-Hypnogram.edf").read_bytes())
    data = bytearray((src / "short_psg.edf").read_bytes())
    assert data[PMIN:PMIN + 8] == b"-192    " and data[DMAX:DMAX + 8] == b"2047    "  # the layout above
    data[offset:offset + 8] = value.ljust(8)
    (tmp_path / "short_psg.edf").write_bytes(bytes(data))


@pytest.mark.parametrize("offset,value,message", [
    (PMIN, b"nan", r"signal 1 'EEG Fpz-Cz': physical minimum field 'nan' is not a finite number"),
    (PMAX, b"inf", r"signal 1 'EEG Fpz-Cz': physical maximum field 'inf' is not a finite number"),
    (PMAX, b"-192", r"signal 1 'EEG Fpz-Cz': physical minimum = physical maximum = '-192'"),
    (DMAX, b"-2048", r"signal 1 'EEG Fpz-Cz': digital minimum '-2048' must be below the digital maximum '-2048'"),
    (DMIN + 8, b"3000", r"signal 2 'EEG Pz-Oz': digital minimum '3000' must be below"),
    (DMIN, b"1.5", r"signal 1 'EEG Fpz-Cz': digital minimum field '1.5' is not an integer"),
])
def test_edf_signal_ranges_refused(tmp_path, fixtures_dir, offset, value, message):
    _sleep_copy(fixtures_dir, tmp_path, offset, value)
    with pytest.raises(DatasetError, match=r"short_psg.edf: bad EDF header: " + message):
        build("sleep_edf", root=tmp_path, pairs=PAIR, use_cache=False)


def test_edf_signal_overflowing_float32_refused(tmp_path, fixtures_dir):
    # 1e300 is finite, but (1e300 - -192) / 4095 µV per digit overflows float32 for every non-zero sample
    _sleep_copy(fixtures_dir, tmp_path, PMAX, b"1e300")
    ds = build("sleep_edf", root=tmp_path, pairs=PAIR, use_cache=False)  # signals are read on first access
    with pytest.raises(DatasetError, match=r"short_psg.edf: signals \['EEG Fpz-Cz'\] hold non-finite values"):
        ds[0]


def test_edf_inverted_physical_range_still_read(tmp_path, fixtures_dir):
    # physical max < min is allowed by the EDF spec (an inverted signal): read, the values negated
    import numpy as np

    ref = build("sleep_edf", root=fixtures_dir / "sleep_edf", pairs=PAIR, use_cache=False)
    src = fixtures_dir / "sleep_edf"
    (tmp_path / "SC4001EC-Hypnogram.edf").write_bytes((src / "SC4001EC-Hypnogram.edf").read_bytes())
    data = bytearray((src / "short_psg.edf").read_bytes())
    data[PMIN:PMIN + 8], data[PMAX:PMAX + 8] = b"192     ", b"-192    "
    (tmp_path / "short_psg.edf").write_bytes(bytes(data))
    ds = build("sleep_edf", root=tmp_path, pairs=PAIR, use_cache=False)
    a, b = ref[0]["modalities"]["fpz_cz"].numpy(), ds[0]["modalities"]["fpz_cz"].numpy()
    assert np.abs(a).max() > 1  # a real signal, not zeros
    np.testing.assert_allclose(b, -a, atol=0.2)  # same digits, range mirrored -> negated (one step = 0.094 µV)


# -- 2. MOSI computational sequences ------------------------------------------------------------------
# CMU_MOSI_Opinion_Labels.csd (real): root group 'Opinion Segment Labels', 93 videos, features [n, 1]
# float32; video '03bSnISJMiM' has 13 segments. A copy also serves as the 'audio' feature sequence
# (csd_files=) so the feature checks run on a real file.
MOSI_LABELS = "CMU_MOSI_Opinion_Labels.csd"
VID = "03bSnISJMiM"


def _mosi_copy(fixtures_dir, tmp_path, name=MOSI_LABELS):
    import shutil

    shutil.copy(fixtures_dir / "mosi" / MOSI_LABELS, tmp_path / name)
    return tmp_path / name


def _replace(path, vid, key, value):
    import h5py

    with h5py.File(path, "r+") as f:
        g = f["Opinion Segment Labels"]["data"][vid]
        del g[key]
        g.create_dataset(key, data=value)


def _segments(fixtures_dir):
    import h5py
    import numpy as np

    with h5py.File(fixtures_dir / "mosi" / MOSI_LABELS, "r") as f:
        g = f["Opinion Segment Labels"]["data"][VID]
        return np.asarray(g["features"]), np.asarray(g["intervals"])


def test_csd_feature_width_differs_between_videos(tmp_path, fixtures_dir):
    import numpy as np

    _mosi_copy(fixtures_dir, tmp_path)
    audio = _mosi_copy(fixtures_dir, tmp_path, "CMU_MOSI_COVAREP.csd")
    y, _ = _segments(fixtures_dir)
    assert y.shape == (13, 1)
    _replace(audio, VID, "features", np.repeat(y, 3, axis=1))  # [13, 3]; every other video is [n, 1]
    with pytest.raises(DatasetError, match=r"CMU_MOSI_COVAREP.csd: video '03bSnISJMiM': features are 3 wide but 92 "
                                           r"video\(s\) \(e.g. '0h-zjBukYpk'\) have 1 \(widths found: \[1, 3\]\); every "
                                           r"video of one sequence must have the same"):
        build("mosi", root=tmp_path, modalities=["audio"], use_cache=False)


@pytest.mark.parametrize("shape,rule", [((13, 0), r"features have zero width \(13, 0\)"),
                                        ((13, 1, 2), r"features must be 2-D \[n_rows, d\], got shape \(13, 1, 2\)")])
def test_csd_features_of_the_wrong_shape(tmp_path, fixtures_dir, shape, rule):
    import numpy as np

    _mosi_copy(fixtures_dir, tmp_path)
    audio = _mosi_copy(fixtures_dir, tmp_path, "CMU_MOSI_COVAREP.csd")
    _replace(audio, VID, "features", np.zeros(shape, np.float32))
    with pytest.raises(DatasetError, match=r"CMU_MOSI_COVAREP.csd: video '03bSnISJMiM': " + rule):
        build("mosi", root=tmp_path, modalities=["audio"], use_cache=False)


def test_csd_interval_ending_before_it_starts(tmp_path, fixtures_dir):
    labels = _mosi_copy(fixtures_dir, tmp_path)
    _, t = _segments(fixtures_dir)
    t = t.copy()
    t[4] = t[4, ::-1]  # row 4: [end, start]
    assert t[4, 1] < t[4, 0]
    _replace(labels, VID, "intervals", t)
    with pytest.raises(DatasetError, match=r"CMU_MOSI_Opinion_Labels.csd: video '03bSnISJMiM': interval row 4 ends "
                                           r"before it starts .*1 such row"):
        build("mosi", root=tmp_path, modalities=[], use_cache=False)


def test_csd_labels_stored_n_1_1_read_as_the_same_labels(tmp_path, fixtures_dir):
    import json

    y, _ = _segments(fixtures_dir)
    labels = _mosi_copy(fixtures_dir, tmp_path)
    _replace(labels, VID, "features", y[:, :, None])  # [13, 1, 1]
    (tmp_path / "folds.json").write_text(json.dumps({"train": [VID], "valid": [], "test": []}))
    ds = build("mosi", root=tmp_path, modalities=[], use_cache=False)
    assert [float(ds[i]["target"]) for i in range(len(ds))] == [float(v) for v in y[:, 0]]
    # more than one value per segment in the labels' stray axis is not a label column: refused
    _replace(labels, VID, "features", y[:, :, None].repeat(2, axis=2))
    with pytest.raises(DatasetError, match=r"Labels.csd: video '03bSnISJMiM': features must be 2-D"):
        build("mosi", root=tmp_path, modalities=[], use_cache=False)


@pytest.mark.parametrize("folds,message", [
    ({"train": [VID, "0h-zjBukYpk"], "valid": [VID], "test": []},
     r"video '03bSnISJMiM' is listed in split 'train' and in split 'valid' too"),
    ({"train": [VID, VID], "valid": [], "test": []}, r"video '03bSnISJMiM' is listed in split 'train' and twice in"),
])
def test_folds_json_video_in_two_folds(tmp_path, fixtures_dir, folds, message):
    import json

    _mosi_copy(fixtures_dir, tmp_path)
    (tmp_path / "folds.json").write_text(json.dumps(folds))
    for split in ("train", "test"):  # refused whichever split is built
        with pytest.raises(DatasetError, match=r"mosi: .*folds.json: " + message):
            build("mosi", root=tmp_path, split=split, modalities=[], use_cache=False)


# -- 3. MMSA attention mask and zero-width features ---------------------------------------------------
# feature_aligned.pkl (real MMSA-FET output): text (9, 768), text_bert (3, 9) with an all-ones attention
# mask (row 1; 9 tokens), audio (9, 25), vision (9, 171); read as one sample with id 'feature_aligned'.
def _sims_copy(fixtures_dir, tmp_path, edit):
    import pickle

    from fusebench.datasets.safe_pickle import load

    obj = load(fixtures_dir / "ch_sims" / "feature_aligned.pkl")
    assert obj["text_bert"].shape == (3, 9) and obj["text_bert"][1].tolist() == [1] * 9
    edit(obj)
    path = tmp_path / "feature_aligned.pkl"
    path.write_bytes(pickle.dumps(obj, protocol=4))
    return path, obj


@pytest.mark.parametrize("value,shown", [(2, "2"), (-1, "-1"), (0.5, "0.5")])
def test_attention_mask_values_other_than_0_1_refused(tmp_path, fixtures_dir, value, shown):
    import numpy as np

    def edit(obj):
        obj["text_bert"] = obj["text_bert"].astype(np.float64)
        obj["text_bert"][1, 3] = value

    path, _ = _sims_copy(fixtures_dir, tmp_path, edit)
    with pytest.raises(DatasetError, match=rf"feature_aligned.pkl: key 'text_bert' row 1 \(attention mask\) of "
                                           rf"sample 0 \(id 'feature_aligned'\) holds {shown}; the mask must hold only"):
        build("chsims", root=path, use_cache=False)


def test_attention_mask_length_0_leaves_the_text_absent_and_a_prefix_cuts_it(tmp_path, fixtures_dir):
    def none(obj):
        obj["text_bert"][1, :] = 0

    path, obj = _sims_copy(fixtures_dir, tmp_path, none)
    s = build("chsims", root=path, use_cache=False)[0]
    assert sorted(s["modalities"]) == ["audio", "vision"]  # text absent (length 0), not clipped to 1 step
    assert tuple(s["modalities"]["audio"].shape) == (9, 25)

    def five(obj):
        obj["text_bert"][1, 5:] = 0

    path, obj = _sims_copy(fixtures_dir, tmp_path, five)
    s = build("chsims", root=path, use_cache=False)[0]
    assert tuple(s["modalities"]["text"].shape) == (5, 768)
    assert s["modalities"]["text"].numpy().tolist() == obj["text"][:5].tolist()


def test_zero_width_audio_refused(tmp_path, fixtures_dir):
    import numpy as np

    def edit(obj):
        obj["audio"] = np.zeros((9, 0))

    path, _ = _sims_copy(fixtures_dir, tmp_path, edit)
    with pytest.raises(DatasetError, match=r"feature_aligned.pkl: key 'audio' has shape \(1, 9, 0\), expected "
                                           r"\[n, T, d\] with d >= 1 features \(zero feature width\)"):
        build("chsims", root=path, use_cache=False)
    # a modality left out is not read: the same file builds without audio
    assert sorted(build("chsims", root=path, modalities=["text", "vision"], use_cache=False)[0]["modalities"]) == [
        "text", "vision"]


# -- 4. NYUv2 splits.mat ------------------------------------------------------------------------------
# meta/splits.mat (real): trainNdxs (795, 1) and testNdxs (654, 1) uint16, 1-based; testNdxs starts
# 1, 2, 9, 14, 15 (PROVENANCE.md). Copies are rewritten as MATLAB doubles (as MATLAB itself saves them).
def _splits_copy(fixtures_dir, tmp_path, edit):
    import shutil

    import numpy as np
    import scipy.io

    meta = tmp_path / "meta"
    meta.mkdir(exist_ok=True)
    shutil.copyfile(fixtures_dir / "nyuv2" / "meta" / "classMapping40.mat", meta / "classMapping40.mat")
    s = scipy.io.loadmat(fixtures_dir / "nyuv2" / "meta" / "splits.mat")
    v = {k: s[k].astype(np.float64) for k in ("trainNdxs", "testNdxs")}
    assert v["testNdxs"].ravel()[:5].tolist() == [1, 2, 9, 14, 15] and v["trainNdxs"].shape == (795, 1)
    edit(v)
    scipy.io.savemat(meta / "splits.mat", v)
    return meta / "splits.mat"


NYU_KW = dict(split="test", modalities=[], label_source="png", use_cache=False)


def test_splits_mat_as_doubles_reads_the_same_frames(tmp_path, fixtures_dir):
    _splits_copy(fixtures_dir, tmp_path, lambda v: None)
    ds = build("nyuv2", root=tmp_path, **NYU_KW)
    assert [f.frame for f in ds.samples][:5] == [1, 2, 9, 14, 15] and len(ds) == 654


@pytest.mark.parametrize("key,pos,value,message", [
    ("testNdxs", 3, float("nan"), r"variable 'testNdxs' entry 3 is nan; frame numbers must be finite integers >= 1"),
    ("testNdxs", 0, 1.5, r"variable 'testNdxs' entry 0 is 1.5; frame numbers must be finite integers"),
    ("trainNdxs", 7, float("inf"), r"variable 'trainNdxs' entry 7 is inf"),
    ("testNdxs", 2, 0.0, r"variable 'testNdxs' entry 2 is 0; frame numbers must be finite integers >= 1"),
    ("testNdxs", 4, 1450.0, r"variable 'testNdxs' refers to frame 1450 but the NYUv2 labeled set holds 1449"),
    ("testNdxs", 3, 9.0, r"variable 'testNdxs' lists frame\(s\) \[9\] more than once"),  # entry 2 is frame 9
])
def test_splits_mat_bad_indices_refused(tmp_path, fixtures_dir, key, pos, value, message):
    def edit(v):
        v[key][pos, 0] = value

    _splits_copy(fixtures_dir, tmp_path, edit)
    with pytest.raises(DatasetError, match=r"nyuv2: .*meta/splits.mat: " + message):
        build("nyuv2", root=tmp_path, **NYU_KW)


def test_splits_mat_of_strings_refused(tmp_path, fixtures_dir):
    import numpy as np

    def edit(v):
        v["testNdxs"] = np.array(["1", "2"])

    _splits_copy(fixtures_dir, tmp_path, edit)
    with pytest.raises(DatasetError, match=r"splits.mat: variable 'testNdxs' must hold 1-based frame numbers "
                                           r"\(integers\), got dtype <U1"):
        build("nyuv2", root=tmp_path, **NYU_KW)


def test_mtan_splits_mat_nan_refused(tmp_path, fixtures_dir):
    import shutil

    import numpy as np
    import scipy.io

    shutil.copytree(fixtures_dir / "nyuv2" / "mtan", tmp_path, dirs_exist_ok=True)
    train = scipy.io.loadmat(fixtures_dir / "nyuv2" / "meta" / "splits.mat")["trainNdxs"]
    scipy.io.savemat(tmp_path / "splits.mat", {"trainNdxs": train, "testNdxs": np.array([[np.nan]])})
    with pytest.raises(DatasetError, match=r"splits.mat: variable 'testNdxs' entry 0 is nan"):
        build("nyuv2", root=tmp_path, split="test", modalities=["depth"], use_cache=False)


# -- 5. NYUv2 MTAN .npy dtypes and the image range ----------------------------------------------------
# mtan/val/{image,depth,normal,label}/0.npy (real): image (288, 384, 3) float64 in 0..0.945, depth
# (288, 384, 1) float32 metres, label (288, 384) float32 in -1..11.
def _mtan_copy(fixtures_dir, tmp_path, sub, edit):
    import shutil

    import numpy as np

    shutil.copytree(fixtures_dir / "nyuv2" / "mtan", tmp_path, dirs_exist_ok=True)
    path = tmp_path / "val" / sub / "0.npy"
    arr = np.load(path)
    path.chmod(0o644)
    np.save(path, edit(arr))
    return path


@pytest.mark.parametrize("sub,edit,dtype", [
    ("label", lambda a: a.astype(str), r"<U\d+"),
    ("depth", lambda a: a.astype(np.complex64) + 1j, "complex64"),
    ("image", lambda a: a > 0.5, "bool"),
])
def test_mtan_non_numeric_or_complex_npy_refused(tmp_path, fixtures_dir, sub, edit, dtype):
    _mtan_copy(fixtures_dir, tmp_path, sub, edit)
    with pytest.raises(DatasetError, match=rf"nyuv2: .*val/{sub}/0.npy has dtype {dtype}; expected a real numeric "
                                           r"array"):
        build("nyuv2", root=tmp_path, split="test", modalities=["rgb", "depth"], use_cache=False)[0]


def test_mtan_image_outside_0_1_refused(tmp_path, fixtures_dir):
    _mtan_copy(fixtures_dir, tmp_path, "image", lambda a: a * 255)
    # 0.9450980392156862 * 255 = 241 (the fixture's maximum, PROVENANCE: 0..0.945)
    with pytest.raises(DatasetError, match=r"val/image/0.npy: values range 0..241; MTAN images are RGB scaled to "
                                           r"\[0, 1\]"):
        build("nyuv2", root=tmp_path, split="test", modalities=["rgb"], use_cache=False)[0]
    # the unmodified copy loads, its maximum as in the file
    s = build("nyuv2", root=fixtures_dir / "nyuv2" / "mtan", split="test", modalities=["rgb"], use_cache=False)[0]
    assert float(s["modalities"]["rgb"].max()) == pytest.approx(0.9450980392156862)


def test_mtan_string_label_through_data_prepare(tmp_path, fixtures_dir):
    import subprocess
    import sys

    _mtan_copy(fixtures_dir, tmp_path / "root", "label", lambda a: a.astype(str))
    r = subprocess.run([sys.executable, "-m", "fusebench", "data", "prepare", "nyuv2", "--data-root",
                        str(tmp_path / "root"), "--split", "test", "--opt", "classes=13", "--out", str(tmp_path / "cache")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert "label/0.npy has dtype <U" in r.stderr + r.stdout


# -- 6. multi-view .mat v7.3 (HDF5) -------------------------------------------------------------------
# multiview/100Leaves.mat (real, v5): X 1x3 cell of 1600 x 64 doubles, Y 1600 x 1. The copy is rewritten as
# MATLAB v7.3 writes it: a 512-byte MAT header user block, X a (3, 1) dataset of object references into
# '#refs#', every matrix stored transposed.
def _leaves_v73(fixtures_dir, path, null_cell=None, vlen_y=False):
    import h5py
    import scipy.io

    m = scipy.io.loadmat(fixtures_dir / "multiview" / "100Leaves.mat")
    views, y = [np.asarray(v, np.float64) for v in m["X"].ravel()], np.asarray(m["Y"], np.float64)
    assert [v.shape for v in views] == [(1600, 64)] * 3 and y.shape == (1600, 1)
    with h5py.File(path, "w", userblock_size=512) as f:
        refs = f.create_group("#refs#")
        r = np.empty((len(views), 1), dtype=h5py.ref_dtype)
        for i, v in enumerate(views):
            d = refs.create_dataset(f"v{i}", data=v.T)
            d.attrs["MATLAB_class"] = np.bytes_("double")
            r[i, 0] = h5py.Reference() if i == null_cell else d.ref
        x = f.create_dataset("X", data=r)
        x.attrs["MATLAB_class"] = np.bytes_("cell")
        if vlen_y:
            yd = f.create_dataset("Y", (1,), dtype=h5py.vlen_dtype(np.float64))
            yd[0] = y.ravel()
        else:
            yd = f.create_dataset("Y", data=y.T)
        yd.attrs["MATLAB_class"] = np.bytes_("double")
    with open(path, "r+b") as fh:
        fh.write(b"MATLAB 7.3 MAT-file, Platform: GLNXA64, Created on: Mon Jan  1 00:00:00 2024 HDF5 schema 1.00 ."
                 .ljust(116, b" ") + b"\x00" * 8 + b"\x00\x02" + b"IM")
    return path, views, y


def test_v73_copy_of_a_real_file_reads_its_values(tmp_path, fixtures_dir):
    from fusebench.datasets.multiview_mat.formats import read_mat

    path, views, y = _leaves_v73(fixtures_dir, tmp_path / "100Leaves.mat")
    part = read_mat(path)["parts"][0]
    assert all(np.array_equal(a, b) for a, b in zip(part["views"], views))
    assert np.array_equal(np.asarray(part["y"]).ravel(), y.ravel())


def test_v73_null_reference_in_x_names_the_cell(tmp_path, fixtures_dir):
    path, _, _ = _leaves_v73(fixtures_dir, tmp_path / "100Leaves.mat", null_cell=1)
    with pytest.raises(DatasetError, match=r"100Leaves.mat: X\{2\} is a null object reference \(an empty or damaged "
                                           r"cell entry\)"):
        build("multiview_mat", root=path, use_cache=False)


def test_v73_variable_length_y_refused(tmp_path, fixtures_dir):
    path, _, _ = _leaves_v73(fixtures_dir, tmp_path / "100Leaves.mat", vlen_y=True)
    with pytest.raises(DatasetError, match=r"100Leaves.mat: Y is a variable-length \(ragged\) dataset; expected a "
                                           r"numeric \(dense or sparse\) MATLAB matrix"):
        build("multiview_mat", root=path, use_cache=False)


# -- 7. `fusebench data check` on a file root -----------------------------------------------------------
def _cli(*args):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "fusebench", *args], capture_output=True, text=True, timeout=300)


def test_data_check_accepts_the_file_itself_as_root(tmp_path, fixtures_dir):
    import hashlib

    real = fixtures_dir / "multiview2" / "CUB.mat"
    r = _cli("data", "check", "mv_cub", "--data-root", str(real), "--out", str(tmp_path / "cache"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"ok       {real}" in r.stdout and "missing" not in r.stdout
    # one byte changed in a copy: the registered sha256 no longer matches, computed here independently
    data = bytearray(real.read_bytes())
    data[-1] ^= 0xFF
    bad = tmp_path / "CUB.mat"
    bad.write_bytes(bytes(data))
    r = _cli("data", "check", "mv_cub", "--data-root", str(bad), "--out", str(tmp_path / "cache"))
    assert r.returncode == 1 and f"MISMATCH {bad}: sha256 {hashlib.sha256(bytes(data)).hexdigest()}" in r.stdout


# -- 8. a folder of several .mat files: the message says what it leaves out and the exact --set syntax ---
def test_folder_of_many_mat_files_message(fixtures_dir):
    import re

    folder = fixtures_dir / "multiview2"
    names = sorted(p.name for p in folder.glob("*.mat"))
    assert len(names) == 11  # 3Sources, BBC, CUB, Cora, Movies, Prokaryotic, ProteinFold, Reuters-1200, ...
    with pytest.raises(DatasetError) as e:
        build("multiview_mat", root=folder, use_cache=False)
    msg = str(e.value)
    assert f"is a folder with 11 .mat files ({names[:10]} and 1 more not shown)" in msg
    assert "--set dataset.options.file=NAME.mat" in msg and "--opt file=NAME.mat" in msg
    assert re.search(r"--data-root \S*multiview2/NAME.mat", msg)


def test_the_suggested_set_syntax_runs(tmp_path, fixtures_dir):
    r = _cli("run", "multiview", "--data-root", str(fixtures_dir / "multiview2"), "--set",
             "dataset.options.file=Movies.mat", "--objective", "raw", "--seeds", "0", "--out", str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr[-2000:]
    assert "multiview raw seed0: acc=" in r.stdout


def test_aligned_mmsa_pickle_mask_cuts_every_modality(tmp_path, fixtures_dir):
    """The real clip as a one-sample aligned MMSA pickle (no audio/vision_lengths): the attention-mask sum cuts
    all three modalities; a sum of 0 leaves all three absent; a value 2 is refused."""
    import pickle

    from fusebench.datasets.safe_pickle import load

    clip = load(fixtures_dir / "ch_sims" / "feature_aligned.pkl")

    def write(mask):
        part = {"text": clip["text"][None], "text_bert": clip["text_bert"][None].copy(), "audio": clip["audio"][None],
                "vision": clip["vision"][None], "regression_labels": np.array([0.4], np.float32),
                "id": np.array(["0001"])}
        part["text_bert"][0, 1] = mask
        # the clip under another id in valid and test: a clip id in two splits is refused (leakage)
        splits = {"train": part, "valid": {**part, "id": np.array(["0002"])}, "test": {**part, "id": np.array(["0003"])}}
        (tmp_path / "unaligned_50.pkl").write_bytes(pickle.dumps(splits))

    write([1] * 5 + [0] * 4)
    s = build("mosi", root=tmp_path, use_cache=False)[0]
    assert {k: tuple(v.shape) for k, v in s["modalities"].items()} == {"text": (5, 768), "audio": (5, 25),
                                                                      "vision": (5, 171)}
    assert s["modalities"]["audio"].numpy().tolist() == clip["audio"][:5].astype(np.float32).tolist()
    write([0] * 9)
    assert build("mosi", root=tmp_path, use_cache=False)[0]["modalities"] == {}
    write([1, 1, 2, 1, 1, 1, 1, 1, 1])
    with pytest.raises(DatasetError, match=r"unaligned_50.pkl \[train\]: key 'text_bert' row 1 \(attention mask\) of "
                                           r"sample 0 \(id '0001'\) holds 2"):
        build("mosi", root=tmp_path, use_cache=False)


@pytest.mark.parametrize("pad, keys, shown", [
    ({"audio": 12}, ("text", "text_bert", "audio", "vision"), "text_bert 9, audio 12, vision 9"),
    ({"vision": 4}, ("text", "text_bert", "audio", "vision"), "text_bert 9, audio 9, vision 4"),
    ({"vision": 12}, ("text", "audio", "vision"), "text 9, audio 9, vision 12"),
])
def test_aligned_mmsa_pickle_needs_one_padded_length(tmp_path, fixtures_dir, pad, keys, shown):
    """The real clip (text (9, 768), text_bert (3, 9), audio (9, 25), vision (9, 171)) as a one-sample aligned
    MMSA pickle, with audio or vision re-padded to another T (zeros appended, or cut). MMSA's aligned files
    (aligned_50.pkl) pad all three to one T and the text mask gives all three lengths; audio or vision of another
    T was taken uncut, 3 rows of zero padding read as audio. Now one error naming the file, the split and the
    padded lengths, with what to pass instead."""
    import pickle

    from fusebench.datasets.safe_pickle import load

    clip = load(fixtures_dir / "ch_sims" / "feature_aligned.pkl")
    assert clip["text_bert"][1].tolist() == [1] * 9
    part = {k: clip[k][None] for k in keys}
    for m, t in pad.items():
        a = part[m][0]
        part[m] = (np.concatenate([a, np.zeros((t - 9, a.shape[1]))]) if t > 9 else a[:t])[None]
    part.update(regression_labels=np.array([0.4], np.float32), id=np.array(["0001"]))
    splits = {"train": part, "valid": {**part, "id": np.array(["0002"])}, "test": {**part, "id": np.array(["0003"])}}
    (tmp_path / "aligned_50.pkl").write_bytes(pickle.dumps(splits))
    with pytest.raises(DatasetError) as e:
        build("mosi", root=tmp_path, aligned=True, split="val", use_cache=False)
    msg = str(e.value)
    assert msg.startswith(f"{tmp_path / 'aligned_50.pkl'} [valid]: an aligned file (no 'audio_lengths' / "
                          "'vision_lengths') pads text, audio and vision to one length T")
    assert f"the padded lengths are {shown}:" in msg and "Pass the unaligned file with its audio_lengths" in msg
    # the same file with the lengths of an unaligned file (audio/vision cut to 9 steps) is read
    for p in splits.values():
        p.update(audio_lengths=[min(9, part["audio"].shape[1])], vision_lengths=[min(9, part["vision"].shape[1])])
    (tmp_path / "aligned_50.pkl").write_bytes(pickle.dumps(splits))
    s = build("mosi", root=tmp_path, aligned=True, split="val", use_cache=False)[0]
    assert s["modalities"]["audio"].shape[0] == min(9, part["audio"].shape[1])
