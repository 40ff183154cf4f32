"""Hardening of the dataset adapters against the outside tester's report (items 2, 3, 7 and 8):
labels that cannot be classes and degenerate views in multi-view ``.mat`` files, unknown stage text
in a Sleep-EDF hypnogram, and damaged files (an empty ``.npy``, a damaged pickle, a truncated
MATLAB v5 file) giving one :class:`DatasetError` that names the file instead of a traceback.

Every broken file is built here in ``tmp_path`` from the real fixtures (``fixtures_dir``), and read
the way a user does: through ``fusebench.datasets.build`` or ``fusebench data prepare``
(:func:`fusebench.datasets.cli.main`)."""

from __future__ import annotations

import logging
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
import scipy.io

from fusebench import datasets
from fusebench.datasets import DatasetError
from fusebench.datasets import cli as data_cli
from fusebench.datasets import safe_pickle
from fusebench.datasets.multiview_mat import MultiviewMat
from fusebench.datasets.multiview_mat import splits as mv_splits
from fusebench.datasets.sleep import SleepEDF
from fusebench.options import OptionsError, check_options

SPLITS = ("train", "val", "test")


def _build(name: str, root, split: str = "train", **opts):
    return datasets.build(name, root=root, split=split, use_cache=False, **opts)


def _prepare(capsys, *argv: str) -> tuple[int, str]:
    """``fusebench data prepare ...`` in-process: (exit code, stderr)."""
    rc = data_cli.main(["prepare", *argv, "--quiet"])
    return rc, capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# multi-view .mat: the real NGs.mat (500 samples, 5 classes of 100, 3 views of 2000 features)
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def ngs(fixtures_dir) -> dict:
    path = fixtures_dir / "multiview" / "NGs.mat"
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    m = scipy.io.loadmat(str(path))
    views = [np.asarray(m["X"][0, v], dtype=np.float64) for v in range(3)]
    return {"path": path, "X": m["X"], "Y": m["Y"], "views": views}


def _cell(views: list[np.ndarray]) -> np.ndarray:
    c = np.empty((1, len(views)), dtype=object)
    for i, v in enumerate(views):
        c[0, i] = v
    return c


def _write(path: Path, views: list[np.ndarray], y) -> Path:
    scipy.io.savemat(str(path), {"X": _cell(views), "Y": np.asarray(y).reshape(-1, 1)})
    return path


def test_real_file_labels_stay_valid(ngs, tmp_path):
    ds = _build("multiview_mat", ngs["path"])
    assert ds.num_classes == 5 and ds.split_info()["label_values"] == [1, 2, 3, 4, 5]
    # the same labels stored as doubles 1.0 .. 5.0 (how MATLAB keeps them): integral floats keep working
    path = _write(tmp_path / "double.mat", ngs["views"], ngs["Y"].astype(np.float64))
    assert scipy.io.loadmat(str(path))["Y"].dtype == np.float64
    ds = _build("multiview_mat", path)
    assert ds.num_classes == 5 and ds.split_info()["label_values"] == [1.0, 2.0, 3.0, 4.0, 5.0]


def test_fractional_labels_are_refused(ngs, tmp_path):
    n = ngs["Y"].size
    regression = np.random.default_rng(0).normal(size=n)  # N distinct floats: not classes
    path = _write(tmp_path / "regression.mat", ngs["views"], regression)
    with pytest.raises(DatasetError, match=rf"regression.mat: Y holds {n} distinct non-integer label value\(s\) "
                                           r"\(.*; 500 of 500 samples\); class labels must be integers.*"
                                           r"allow_fractional_labels=True"):
        _build("multiview_mat", path)
    # a few 0.5 / 1.7 codes among integral labels are refused too, naming the values
    y = ngs["Y"].ravel().astype(np.float64).copy()
    y[:3] = [0.5, 1.7, 0.5]
    path = _write(tmp_path / "codes.mat", ngs["views"], y)
    with pytest.raises(DatasetError, match=r"codes.mat: Y holds 2 distinct non-integer label value\(s\) \(0.5, 1.7; "
                                           r"3 of 500 samples\)"):
        _build("multiview_mat", path)
    # the explicit escape hatch: every distinct value is a class (classes of 100 samples: 0.5 x label)
    path = _write(tmp_path / "halves.mat", ngs["views"], ngs["Y"].ravel() * 0.5)
    with pytest.raises(DatasetError, match="non-integer"):
        _build("multiview_mat", path)
    ds = _build("multiview_mat", path, allow_fractional_labels=True)
    assert ds.split_info()["label_values"] == [0.5, 1.0, 1.5, 2.0, 2.5]


def test_classes_too_small_for_the_splits_are_refused(ngs, tmp_path):
    n = ngs["Y"].size
    # the tester's case: 40 classes of one sample each (plus the rest in the original classes)
    y = ngs["Y"].ravel().astype(np.int64).copy()
    y[:40] = np.arange(100, 140)
    path = _write(tmp_path / "singletons.mat", ngs["views"], y)
    with pytest.raises(DatasetError, match=r"singletons.mat: 40 of 45 classes of Y have fewer than 5 samples, the "
                                           r"fewest split_fractions \[0.6, 0.2, 0.2\] need so that every class "
                                           r"appears in train, val and test .*\{100: 1, 101: 1, .*, 109: 1, \.\.\. "
                                           r"\(30 more\)\}.*allow_small_classes=True"):
        _build("multiview_mat", path)
    # the boundary follows the split code: with 0.6/0.2/0.2 a class of 5 always reaches all three
    # splits (floors 3/1/1), one of 4 may not
    assert mv_splits.min_class_size((0.6, 0.2, 0.2)) == 5 and mv_splits.min_class_size((0.5, 0.25, 0.25)) == 4
    assert mv_splits.min_class_size((0.8, 0.1, 0.1)) == 10
    y = ngs["Y"].ravel().astype(np.int64).copy()
    y[:4] = 9  # a class of 4 samples
    four = _write(tmp_path / "four.mat", ngs["views"], y)
    with pytest.raises(DatasetError, match=r"four.mat: 1 of 6 classes .* fewer than 5 samples.*\{9: 4\}"):
        _build("multiview_mat", four)
    # below the minimum a class may miss a split: a first class of 3 gets floors 1/0/0 and its 2 leftovers
    # go to train and val (largest deficits), none to test
    y3 = ngs["Y"].ravel().astype(np.int64).copy()
    y3[:3] = 0
    parts = mv_splits.stratified_split(np.searchsorted(np.unique(y3), y3), (0.6, 0.2, 0.2), 0)
    assert [int(np.isin(np.flatnonzero(y3 == 0), parts[s]).sum()) for s in SPLITS] == [2, 1, 0]
    with pytest.raises(DatasetError, match=r"three.mat: 1 of 6 classes .* fewer than 5 samples.*\{0: 3\}"):
        _build("multiview_mat", _write(tmp_path / "three.mat", ngs["views"], y3))
    ds = _build("multiview_mat", four, split_fractions=[0.5, 0.25, 0.25])  # needs 4: accepted
    assert all((np.array(ds.split_info()["class_counts"][s]) > 0).all() for s in SPLITS)
    y[:5] = 9  # a class of 5 samples
    ds = _build("multiview_mat", _write(tmp_path / "five.mat", ngs["views"], y))
    assert all((np.array(ds.split_info()["class_counts"][s]) > 0).all() for s in SPLITS)
    assert sum(ds.split_info()["counts"].values()) == n


def test_small_classes_escape_hatch_is_a_typed_option(ngs, tmp_path, caplog):
    y = ngs["Y"].ravel().astype(np.int64).copy()
    y[:40] = np.arange(100, 140)
    path = _write(tmp_path / "singletons.mat", ngs["views"], y)
    with caplog.at_level(logging.WARNING, logger="fusebench.datasets.multiview_mat"):
        ds = _build("multiview_mat", path, allow_small_classes=True)
    assert ds.num_classes == 45 and "allow_small_classes=True: running anyway" in caplog.text
    with pytest.raises(OptionsError, match=r"dataset.options.allow_small_classes: expected bool, got str 'yes'"):
        check_options({"allow_small_classes": "yes"}, MultiviewMat, "dataset.options")
    with pytest.raises(OptionsError, match=r"allow_fractional_labels: expected bool"):
        check_options({"allow_fractional_labels": 1}, MultiviewMat, "dataset.options")
    check_options({"allow_small_classes": True, "allow_fractional_labels": False}, MultiviewMat, "dataset.options")


def test_small_classes_via_data_prepare(ngs, tmp_path, capsys):
    y = ngs["Y"].ravel().astype(np.int64).copy()
    y[:40] = np.arange(100, 140)
    path = _write(tmp_path / "singletons.mat", ngs["views"], y)
    rc, err = _prepare(capsys, "multiview_mat", "--data-root", str(path), "--split", "train", "--out", str(tmp_path / "out"))
    assert rc == 2 and "Traceback" not in err
    assert f"{path}: 40 of 45 classes of Y have fewer than 5 samples" in err
    assert not (tmp_path / "out" / "multiview_mat").exists() or not any((tmp_path / "out" / "multiview_mat").iterdir())


# -- item 3: degenerate views ----------------------------------------------------------------------
def test_overflowing_view_is_refused(ngs, tmp_path):
    views = list(ngs["views"])
    views[1] = views[1] * 1e300 + 1e300  # the tester's view: overflow in the std, z-scored to zeros
    path = _write(tmp_path / "huge.mat", views, ngs["Y"])
    with pytest.raises(DatasetError, match=r"huge.mat: view 1 \(view1\) overflows when standardised: the train mean "
                                           r"or standard deviation of \d+ of its 2000 feature\(s\) is not finite "
                                           r"\(values up to .*e\+3\d\d in magnitude\)\. Fix or rescale it, or leave "
                                           r"it out with the option views=\[\.\.\.\]"):
        _build("multiview_mat", path)
    # raw values beyond float32 (standardize=False) are refused as well
    with pytest.raises(DatasetError, match=r"huge.mat: view 1 \(view1\) has values up to .* beyond the float32 range"):
        _build("multiview_mat", path, standardize=False)
    # the other views alone are fine
    assert _build("multiview_mat", path, views=[0, 2]).modalities == ["view0", "view2"]


def test_empty_view_is_refused(ngs, tmp_path):
    n = ngs["Y"].size
    path = _write(tmp_path / "empty_view.mat", [ngs["views"][0], np.zeros((n, 0)), ngs["views"][2]], ngs["Y"])
    with pytest.raises(DatasetError, match=rf"empty_view.mat: view 1 \(b\) has 0 features \(shape {n} x 0\)"):
        _build("multiview_mat", path, view_names=["a", "b", "c"])


def test_constant_view_is_refused(ngs, tmp_path):
    n = ngs["Y"].size
    const = np.tile(np.arange(7.0), (n, 1))  # every feature constant (on train and everywhere)
    path = _write(tmp_path / "constant.mat", [ngs["views"][0], ngs["views"][1], const], ngs["Y"])
    match = (r"constant.mat: view 2 \(view2\) is constant on the train split: each of its 7 feature\(s\) takes a "
             r"single value")
    with pytest.raises(DatasetError, match=match):
        _build("multiview_mat", path)
    with pytest.raises(DatasetError, match=match):
        _build("multiview_mat", path, standardize=False)
    # constant features next to informative ones are fine (they standardise to 0, as documented)
    mixed = np.concatenate([const, ngs["views"][2][:, :5]], axis=1)
    ds = _build("multiview_mat", _write(tmp_path / "mixed.mat", [ngs["views"][0], mixed], ngs["Y"]))
    assert ds[0]["modalities"]["view1"][:7].abs().sum() == 0


# -- item 8: a truncated MATLAB v5 file --------------------------------------------------------------
@pytest.mark.parametrize("keep", [0.5, 0.999])
def test_truncated_v5_mat_says_truncated(ngs, tmp_path, capsys, keep):
    data = ngs["path"].read_bytes()
    cut = tmp_path / "cut.mat"
    cut.write_bytes(data[: int(len(data) * keep)])
    assert [name for name, _, _ in scipy.io.whosmat(str(cut))] == ["X"]  # scipy alone sees no Y
    with pytest.raises(DatasetError, match=r"cut.mat: truncated MATLAB v5 .mat file: variable \d \(data element at "
                                           r"byte \d+\) declares \d+ bytes, but the file ends after \d+ bytes"):
        _build("multiview_mat", cut)
    rc, err = _prepare(capsys, "multiview_mat", "--data-root", str(cut), "--split", "test", "--out", str(tmp_path / "out"))
    assert rc == 2 and f"{cut}: truncated MATLAB v5 .mat file" in err and "no variable" not in err


def test_mat_shorter_than_its_header(ngs, tmp_path):
    cut = tmp_path / "head.mat"
    cut.write_bytes(ngs["path"].read_bytes()[:100])
    with pytest.raises(DatasetError, match=r"head.mat: truncated or damaged MATLAB .mat file: 100 bytes, shorter "
                                           r"than the 128-byte MATLAB v5 header"):
        _build("multiview_mat", cut)
    cut.write_bytes(ngs["path"].read_bytes()[:132])
    with pytest.raises(DatasetError, match=r"head.mat: truncated or damaged MATLAB v5 .mat file: it ends 4 byte\(s\) "
                                           r"into the 8-byte tag of data element 1 at byte 128"):
        _build("multiview_mat", cut)


# ---------------------------------------------------------------------------------------------
# item 7: Sleep-EDF hypnogram with unknown stage text
# ---------------------------------------------------------------------------------------------
PAIR = [("short_psg.edf", "SC4001EC-Hypnogram.edf")]


@pytest.fixture()
def flipped_hypnogram(fixtures_dir, tmp_path) -> Path:
    """The real PSG and hypnogram, with one byte of a later 'Sleep stage W' flipped to 'Sleep stafe W'
    (the first annotation, the only one overlapping the 5-minute PSG, stays intact)."""
    src = fixtures_dir / "sleep_edf"
    shutil.copyfile(src / "short_psg.edf", tmp_path / "short_psg.edf")
    data = bytearray((src / "SC4001EC-Hypnogram.edf").read_bytes())
    hits = [i for i in range(len(data)) if data.startswith(b"Sleep stage W", i)]
    assert len(hits) > 2
    at = hits[2] + len(b"Sleep sta")
    assert data[at:at + 1] == b"g"
    data[at] = ord("f")
    (tmp_path / "SC4001EC-Hypnogram.edf").write_bytes(bytes(data))
    return tmp_path


def test_unknown_stage_text_is_an_error(flipped_hypnogram, capsys):
    hyp = flipped_hypnogram / "SC4001EC-Hypnogram.edf"
    with pytest.raises(DatasetError, match=r"SC4001EC-Hypnogram.edf: unknown hypnogram description\(s\) "
                                           r"'Sleep stafe W' "
                                           r"\(1 annotation\(s\), first at onset 41460 s\); the known descriptions are "
                                           r"\[.*'Sleep stage W'\].*the option unknown_stages='skip'"):
        _build("sleep_edf", flipped_hypnogram, pairs=PAIR)
    rc, err = _prepare(capsys, "sleep_edf", "--data-root", str(flipped_hypnogram), "--split", "train", "--opt",
                       "pairs=[[short_psg.edf, SC4001EC-Hypnogram.edf]]", "--out", str(flipped_hypnogram / "out"))
    assert rc == 2 and f"{hyp}: unknown hypnogram description(s) 'Sleep stafe W'" in err and "Traceback" not in err


def test_unknown_stages_skip_option(flipped_hypnogram, caplog):
    with caplog.at_level(logging.WARNING, logger="fusebench.datasets.sleep"):
        ds = _build("sleep_edf", flipped_hypnogram, pairs=PAIR, unknown_stages="skip")
    assert len(ds) == 10 and [int(ds[i]["target"]) for i in range(10)] == [0] * 10
    assert "Sleep stafe W" in caplog.text and "unknown_stages='skip'" in caplog.text
    with pytest.raises(DatasetError, match=r"sleep_edf: unknown_stages='ignore' must be one of \['error', 'skip'\]"):
        _build("sleep_edf", flipped_hypnogram, pairs=PAIR, unknown_stages="ignore")
    with pytest.raises(OptionsError, match=r"dataset.options.unknown_stages: expected str, got int 1"):
        check_options({"unknown_stages": 1}, SleepEDF, "dataset.options")
    check_options({"unknown_stages": "skip"}, SleepEDF, "dataset.options")


def test_known_excluded_descriptions_stay_silent(fixtures_dir, caplog):
    """The real hypnogram holds 'Sleep stage ?' (documented as excluded): no error, no warning."""
    with caplog.at_level(logging.WARNING, logger="fusebench.datasets.sleep"):
        ds = _build("sleep_edf", fixtures_dir / "sleep_edf", pairs=PAIR)
    assert len(ds) == 10 and "unknown" not in caplog.text


# ---------------------------------------------------------------------------------------------
# item 8: an empty .npy (NYUv2, MTAN layout), a damaged pickle (CH-SIMS)
# ---------------------------------------------------------------------------------------------
def _mtan_copy(fixtures_dir, tmp_path) -> Path:
    src = fixtures_dir / "nyuv2" / "mtan"
    if not src.is_dir():
        pytest.skip(f"{src} is absent")
    root = tmp_path / "mtan"
    shutil.copytree(src, root, copy_function=shutil.copyfile)
    return root


def test_empty_npy_is_one_clear_error(fixtures_dir, tmp_path, capsys):
    root = _mtan_copy(fixtures_dir, tmp_path)
    empty = root / "val" / "depth" / "0.npy"
    empty.write_bytes(b"")
    with pytest.raises(DatasetError, match=r"depth/0.npy is empty \(0 bytes\): a truncated or unfinished copy"):
        _build("nyuv2", root, split="test")[0]
    out = tmp_path / "out"
    rc, err = _prepare(capsys, "nyuv2", "--data-root", str(root), "--split", "test", "--out", str(out))
    assert rc == 2 and "Traceback" not in err and "EOFError" not in err
    assert f"{empty} is empty (0 bytes)" in err
    assert not [p for p in out.rglob("*") if p.is_file()]  # nothing half-written


def test_half_npy_names_the_file(fixtures_dir, tmp_path):
    root = _mtan_copy(fixtures_dir, tmp_path)
    label = root / "val" / "label" / "0.npy"
    label.write_bytes(label.read_bytes()[:1000])
    with pytest.raises(DatasetError, match=r"cannot read .*label/0.npy as a .npy array"):
        _build("nyuv2", root, split="test")[0]


@pytest.fixture()
def chsims_pkl(fixtures_dir) -> bytes:
    path = fixtures_dir / "ch_sims" / "feature_aligned.pkl"
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    return path.read_bytes()


def test_damaged_pickle_via_data_prepare(chsims_pkl, tmp_path, capsys):
    data = bytearray(chsims_pkl)
    assert data[2:3] == b"\x95"  # protocol 5 FRAME opcode, then its 8-byte length
    data[10] = 0xFF  # the length's top byte: "FRAME length exceeds system's maximum" (OverflowError)
    bad = tmp_path / "feature_aligned.pkl"
    bad.write_bytes(bytes(data))
    with pytest.raises(DatasetError, match=r"feature_aligned.pkl: not a readable pickle: the file is damaged, "
                                           r"truncated or not a pickle \(OverflowError: FRAME length exceeds"):
        _build("chsims", bad)
    rc, err = _prepare(capsys, "chsims", "--data-root", str(bad), "--split", "train", "--out", str(tmp_path / "out"))
    assert rc == 2 and "Traceback" not in err and f"{bad}: not a readable pickle" in err


def test_damaged_pickle_family_is_one_error(chsims_pkl):
    """Damaged bytes make the unpickler raise many exception types; each is one DatasetError naming the file."""

    def flip(at: int, value: int) -> bytes:
        d = bytearray(chsims_pkl)
        d[at] = value
        return bytes(d)

    # (damaged bytes, the exception the unpickler raises): found by flipping bytes of the real file
    cases = [
        (flip(0, 0x00), "UnpicklingError"),  # invalid load key
        (flip(1, 0xFF), "ValueError"),  # unsupported pickle protocol 255
        (flip(10, 0xFF), "OverflowError"),  # FRAME length beyond the maximum
        (flip(15, 0xFF), "UnicodeDecodeError"),  # damaged key text
        (flip(68, 0x7F), "MemoryError"),  # a BYTEARRAY8 length of ~2**63
        (flip(1871, 0x01), "TypeError"),  # a damaged opcode calls the wrong object
        (chsims_pkl[: len(chsims_pkl) // 2], "UnpicklingError"),  # truncated
        (b"", "EOFError"),
    ]
    for data, kind in cases:
        with pytest.raises(DatasetError, match=rf"^damaged.pkl: not a readable pickle\b.*\({kind}: "):
            safe_pickle.loads(data, source="damaged.pkl")
    rng = np.random.default_rng(0)  # and random damage: never anything but a DatasetError
    for _ in range(300):
        d = bytearray(chsims_pkl)
        for i in rng.integers(0, len(d), size=int(rng.integers(1, 4))):
            d[int(i)] = int(rng.integers(0, 256))
        try:
            safe_pickle.loads(bytes(d), source="damaged.pkl")
        except DatasetError as e:
            assert str(e).startswith("damaged.pkl: ")


def test_forbidden_global_keeps_its_own_message(tmp_path):
    class Evil:
        def __reduce__(self):
            import os

            return (os.system, ("echo pwned",))

    path = tmp_path / "evil.pkl"
    path.write_bytes(pickle.dumps({"text": Evil()}))
    with pytest.raises(DatasetError, match=r"evil.pkl: refused to unpickle global '(posix|nt|os)\.system'") as info:
        safe_pickle.load(path)
    assert "not a readable pickle" not in str(info.value)


def test_data_prepare_says_an_error_every_split_shares_once(capsys) -> None:
    """A bad --opt stops every split alike: one line naming the splits, not the same line three times."""
    from fusebench.datasets.cli import main as data_main

    assert data_main(["prepare", "mv_handwritten", "--synthetic", "--opt", "split_seed=abc", "--quiet"]) != 0
    err = [ln for ln in capsys.readouterr().err.splitlines() if "must be an integer" in ln]
    assert err == ["fusebench data prepare: mv_handwritten/train,val,test: mv_handwritten: split_seed='abc' must be an "
                   "integer or 'run'"]
