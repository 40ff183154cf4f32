"""Sentiment adapters mosi / mosei / chsims: real fixtures, synthetic twins, bad input."""

from __future__ import annotations

import hashlib
import json
import math
import os
import pickle
import warnings

import h5py
import numpy as np
import pytest
import torch

from fusebench.datasets import DatasetError, SyntheticSpec, build
from fusebench.datasets.collate import collate
from fusebench.datasets.csd import read_csd
from fusebench.datasets.mmsa import CHSIMS, MOSEI, MOSI

SMALL = {"pad_len": {"text": 12, "audio": 30, "vision": 20}}


# -- real fixtures --------------------------------------------------------------------------------
def test_opinion_labels_csd_counts_and_a_segment(fixtures_dir):
    path = fixtures_dir / "mosi" / "CMU_MOSI_Opinion_Labels.csd"
    seq = read_csd(path)
    assert seq.name == "Opinion Segment Labels"
    assert len(seq.videos) == 93 and seq.num_segments == 2199
    assert seq.metadata["dataset name"] == "CMU-MOSI"
    with h5py.File(path, "r") as f:  # independent read
        g = f["Opinion Segment Labels"]["data"]["03bSnISJMiM"]
        feats, ivals = g["features"][()], g["intervals"][()]
    assert feats.shape == (13, 1)
    assert seq.features["03bSnISJMiM"][0, 0] == pytest.approx(2.4) == pytest.approx(float(feats[0, 0]))
    np.testing.assert_allclose(seq.intervals["03bSnISJMiM"][0], [51.904533, 55.94535], rtol=1e-6)

    # the adapter over the labels only: three disjoint video-level splits covering all 2199 segments
    splits = {s: build("mosi", root=fixtures_dir / "mosi", split=s, modalities=[], use_cache=False)
              for s in ("train", "val", "test")}
    assert sum(len(d) for d in splits.values()) == 2199
    videos = {s: {v for v, _ in d.samples} for s, d in splits.items()}
    assert [len(videos[s]) for s in ("train", "val", "test")] == [52, 10, 31]
    assert not (videos["train"] & videos["test"]) and not (videos["train"] & videos["val"])
    where = next(s for s, v in videos.items() if "03bSnISJMiM" in v)
    ds = splits[where]
    i = ds.samples.index(("03bSnISJMiM", 2))
    sample = ds[i]
    assert sample["meta"]["id"] == "03bSnISJMiM[2]"
    assert float(sample["target"]) == pytest.approx(float(feats[2, 0]))
    assert sample["meta"]["interval"] == pytest.approx(tuple(float(v) for v in ivals[2]))
    assert all(-3 <= float(ds[j]["target"]) <= 3 for j in range(0, len(ds), 50))


def test_chsims_feature_file_loads(fixtures_dir):
    path = fixtures_dir / "ch_sims" / "feature_aligned.pkl"
    ds = build("chsims", root=path, use_cache=False)
    assert ds.layout == "feature_file" and len(ds) == 1
    s = ds[0]
    assert {k: tuple(v.shape) for k, v in s["modalities"].items()} == {
        "text": (9, 768), "audio": (9, 25), "vision": (9, 171)}
    assert all(v.dtype == torch.float32 for v in s["modalities"].values())
    assert float(s["modalities"]["text"][0, 0]) == pytest.approx(-0.35983992, abs=1e-7)  # BERT [CLS] dim 0
    assert float(s["modalities"]["audio"][0, 0]) == 0.0
    assert math.isnan(float(s["target"])) and all(math.isnan(float(v)) for v in s["extra_targets"].values())
    assert s["meta"]["raw_text"] == "我不想嫁给李茶"
    assert [m.channels for m in ds.MODALITIES] == [768, 25, 171]
    # labels given separately, and the token-id view of the text
    ds = build("chsims", root=path, use_cache=False, label=0.4, unimodal_labels={"T": 0.2, "A": -1.0, "V": 1.0},
               text_field="text_bert")
    s = ds[0]
    assert float(s["target"]) == pytest.approx(0.4) and float(s["extra_targets"]["A"]) == -1.0
    ids = s["modalities"]["text"][:, 0].tolist()
    assert s["modalities"]["text"].shape == (9, 3) and ids[0] == 101 and ids[-1] == 102 and ids[3] == 100
    # label= without every unimodal label: the error names the option (it said "label 'regression_labels_T' is not
    # finite", naming a key the user never wrote)
    for uni in (None, {"T": 0.2, "A": -1.0}):
        with pytest.raises(DatasetError, match=r"no unimodal label for \[('T', 'A', )?'V'\].*unimodal_labels="):
            build("chsims", root=path, use_cache=False, label=0.4, **({"unimodal_labels": uni} if uni else {}))
    # the same feature file through the CMU adapter (same code path)
    assert build("mosi", root=path, use_cache=False)[0]["modalities"]["vision"].shape == (9, 171)


class _ArraysOnly(pickle.Unpickler):
    """The test's own restricted reader of the real feature file: numpy arrays and plain containers only."""

    ALLOWED = {("numpy", "ndarray"), ("numpy", "dtype"), ("numpy.core.multiarray", "_reconstruct"),
               ("numpy._core.multiarray", "_reconstruct"), ("numpy.core.multiarray", "scalar"),
               ("numpy._core.multiarray", "scalar"), ("numpy._core.numeric", "_frombuffer"),
               ("numpy.core.numeric", "_frombuffer")}

    def find_class(self, module, name):
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"{module}.{name} is not an array global")
        return super().find_class(module, name)


def test_sample_keys_of_the_real_files(fixtures_dir):
    """sample_keys(): each sample's clip id in delivery order, the ids split_overlap compares across splits."""
    from fusebench.records.builder import split_overlap

    # the CH-SIMS feature file holds no 'id' (read here without the product's reader): its one sample is named by
    # the file, and it is the same sample in train, val and test, so a run on it is a pipeline check
    path = fixtures_dir / "ch_sims" / "feature_aligned.pkl"
    with open(path, "rb") as f, warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # the file names numpy.core.* (numpy 1.x pickles)
        raw = _ArraysOnly(f).load()
    assert sorted(raw) == ["align", "audio", "config", "text", "text_bert", "vision"]
    data = {s: build("chsims", root=path, split=s, use_cache=False) for s in ("train", "val", "test")}
    assert all(ds.sample_keys() == ["feature_aligned"] == [ds[0]["meta"]["id"]] for ds in data.values())
    assert split_overlap(data).startswith("the splits are not disjoint: train and val share 1 sample(s) (of 1 and 1; "
                                          "e.g. feature_aligned)")
    # the MOSI labels sequence (csd layout), read here with h5py: <video>[<segment>] for every labelled segment,
    # each split's videos in its order, segments in file order; the three splits disjoint and covering all 2199
    labels = fixtures_dir / "mosi" / "CMU_MOSI_Opinion_Labels.csd"
    with h5py.File(labels, "r") as f:
        g = f["Opinion Segment Labels"]["data"]
        segments = {vid: g[vid]["features"].shape[0] for vid in g}
    data = {s: build("mosi", root=fixtures_dir / "mosi", split=s, modalities=[], use_cache=False)
            for s in ("train", "val", "test")}
    keys = {s: ds.sample_keys() for s, ds in data.items()}
    for s, ds in data.items():
        videos = list(dict.fromkeys(v for v, _ in ds.samples))
        assert keys[s] == [f"{v}[{i}]" for v in videos for i in range(segments[v])]
        assert [ds[j]["meta"]["id"] for j in (0, len(ds) - 1)] == [keys[s][0], keys[s][-1]]
    every = [k for s in ("train", "val", "test") for k in keys[s]]
    assert len(every) == len(set(every)) == sum(segments.values()) == 2199
    assert "03bSnISJMiM[12]" in every and "03bSnISJMiM[13]" not in every  # 13 segments, 0-based
    assert split_overlap(data) is None


# -- synthetic twins ------------------------------------------------------------------------------
@pytest.mark.parametrize("cls", [MOSI, MOSEI, CHSIMS])
def test_mmsa_twin_round_trip(tmp_path, cls):
    spec = SyntheticSpec(num_samples=15, seed=3, options=SMALL)
    cls.write_synthetic(tmp_path, spec)
    with open(tmp_path / cls.PICKLES["unaligned"], "rb") as f:
        raw = pickle.load(f)  # we wrote it: trusted, read with the plain unpickler
    assert sorted(raw) == ["test", "train", "valid"]
    ds = build(cls.id, root=tmp_path, split="val", use_cache=False)
    part = raw["valid"]
    assert len(ds) == len(part["regression_labels"]) == 3
    lo, hi = cls.LABEL_RANGE
    for i in range(len(ds)):
        s = ds[i]
        n_text = int(part["text_bert"][i, 1].sum())
        np.testing.assert_array_equal(s["modalities"]["text"].numpy(), part["text"][i, :n_text])
        np.testing.assert_array_equal(s["modalities"]["audio"].numpy(), part["audio"][i, : part["audio_lengths"][i]])
        np.testing.assert_array_equal(s["modalities"]["vision"].numpy(),
                                      part["vision"][i, : part["vision_lengths"][i]])
        assert s["modalities"]["audio"].shape[1] == cls.DIMS["audio"]
        assert float(s["target"]) == pytest.approx(float(part["regression_labels"][i]))
        assert lo <= float(s["target"]) <= hi
        assert s["meta"]["id"] == str(part["id"][i])
        if cls is CHSIMS:
            for m in "TAV":
                assert float(s["extra_targets"][m]) == pytest.approx(float(part[f"regression_labels_{m}"][i]))
    batch = collate([ds[i] for i in range(len(ds))], names=ds.modalities)
    lengths = batch["masks"]["audio"].sum(dim=1).tolist()
    assert lengths == [int(v) for v in part["audio_lengths"]]
    # deterministic
    other = tmp_path / "again"
    other.mkdir()
    cls.write_synthetic(other, spec)
    assert (other / cls.PICKLES["unaligned"]).read_bytes() == (tmp_path / cls.PICKLES["unaligned"]).read_bytes()


def _pc1_corr(x: np.ndarray, y: np.ndarray) -> float:
    x = x - x.mean(axis=0)
    u, _, _ = np.linalg.svd(x, full_matrices=False)
    return abs(float(np.corrcoef(u[:, 0], y)[0, 1]))


def test_twin_sentiment_follows_informativeness(tmp_path):
    spec = SyntheticSpec(num_samples=150, seed=0, informativeness={"text": 1.0, "audio": 0.0, "vision": 0.0},
                         options=SMALL)
    MOSI.write_synthetic(tmp_path, spec)
    ds = build("mosi", root=tmp_path, split="train", use_cache=False)
    y = np.array([float(ds[i]["target"]) for i in range(len(ds))])
    means = {m: np.stack([ds[i]["modalities"][m].mean(0).numpy() for i in range(len(ds))]) for m in ds.modalities}
    assert _pc1_corr(means["text"], y) > 0.85
    assert _pc1_corr(means["audio"], y) < 0.3 and _pc1_corr(means["vision"], y) < 0.3


def test_csd_twin_matches_pickle_twin(tmp_path):
    spec = dict(num_samples=10, seed=1)
    a, b = tmp_path / "pkl", tmp_path / "csd"
    a.mkdir(), b.mkdir()
    MOSI.write_synthetic(a, SyntheticSpec(**spec, options=SMALL))
    MOSI.write_synthetic(b, SyntheticSpec(**spec, options={**SMALL, "layout": "csd"}))
    assert sorted(p.name for p in b.glob("*.csd")) == sorted(
        f"CMU_MOSI_{n}.csd" for n in ("COVAREP", "Opinion_Labels", "TimestampedWordVectors", "Visual_Facet_42"))
    ref = build("mosi", root=a, split="test", use_cache=False)
    ds = build("mosi", root=b, split="test", use_cache=False)
    assert ds.layout == "csd" and len(ds) == len(ref) == 2
    by_id = {}
    for i in range(len(ref)):
        vid, seg = ref[i]["meta"]["id"].split("$_$")
        by_id[f"{vid}[{int(seg) - 1}]"] = ref[i]
    for i in range(len(ds)):
        s = ds[i]
        r = by_id[s["meta"]["id"]]
        assert float(s["target"]) == pytest.approx(float(r["target"]))
        for m in ("text", "audio", "vision"):
            torch.testing.assert_close(s["modalities"][m], r["modalities"][m])
    # word-level alignment: audio averaged over each word interval, checked by explicit loops
    al = build("mosi", root=b, split="test", use_cache=False, csd_alignment="text")
    s = al[0]
    vid, seg = s["meta"]["video"], s["meta"]["segment"]
    with h5py.File(b / "CMU_MOSI_COVAREP.csd", "r") as f:
        ax, ai = f["COVAREP/data"][vid]["features"][()], f["COVAREP/data"][vid]["intervals"][()]
    with h5py.File(b / "CMU_MOSI_TimestampedWordVectors.csd", "r") as f:
        wi = f["TimestampedWordVectors/data"][vid]["intervals"][()]
    start, end = s["meta"]["interval"]
    words = [w for w in wi if min(w[1], end) - max(w[0], start) > 0]
    assert s["modalities"]["audio"].shape == (len(words), 5) == (s["modalities"]["text"].shape[0], 5)
    for k in (0, len(words) - 1):
        rows = [ax[j] for j in range(len(ax)) if min(ai[j][1], words[k][1]) - max(ai[j][0], words[k][0]) > 0]
        np.testing.assert_allclose(s["modalities"]["audio"][k].numpy(), np.mean(rows, axis=0), rtol=1e-5, atol=1e-6)


# -- bad input ------------------------------------------------------------------------------------
def _write(path, obj):
    path.write_bytes(pickle.dumps(obj, protocol=4))
    return path


@pytest.fixture
def twin(tmp_path):
    MOSI.write_synthetic(tmp_path, SyntheticSpec(num_samples=10, seed=0, options=SMALL))
    with open(tmp_path / "unaligned_50.pkl", "rb") as f:
        return tmp_path, pickle.load(f)


def test_nonfinite_features(twin):
    root, data = twin
    data["train"]["audio"][2, 0, 1] = np.nan
    data["train"]["vision"][4, 1, 0] = -np.inf
    _write(root / "unaligned_50.pkl", data)
    with pytest.raises(DatasetError) as err:
        build("mosi", root=root, use_cache=False)
    msg = str(err.value)
    assert "unaligned_50.pkl" in msg and "'audio'" in msg and "sample 2" in msg and str(data["train"]["id"][2]) in msg
    ds = build("mosi", root=root, use_cache=False, nonfinite="zero")
    assert float(ds[2]["modalities"]["audio"][0, 1]) == 0.0 and float(ds[4]["modalities"]["vision"][1, 0]) == 0.0
    assert torch.isfinite(ds[4]["modalities"]["vision"]).all()


def test_wrong_keys_and_missing_modality(twin):
    root, data = twin
    _write(root / "bad_top.pkl", {"training": data["train"]})
    with pytest.raises(DatasetError, match=r"bad_top.pkl.*\['train', 'valid', 'test'\]"):
        build("mosi", root=root, file="bad_top.pkl", use_cache=False)
    no_label = {k: dict(v) for k, v in data.items()}
    del no_label["train"]["regression_labels"]
    _write(root / "no_label.pkl", no_label)
    with pytest.raises(DatasetError, match=r"no_label.pkl \[train\]: missing keys \['regression_labels'\]"):
        build("mosi", root=root, file="no_label.pkl", use_cache=False)
    no_vision = {k: dict(v) for k, v in data.items()}
    del no_vision["train"]["vision"]
    _write(root / "no_vision.pkl", no_vision)
    with pytest.raises(DatasetError, match=r"no_vision.pkl \[train\]: modality 'vision' is missing"):
        build("mosi", root=root, file="no_vision.pkl", use_cache=False)
    ds = build("mosi", root=root, file="no_vision.pkl", modalities=["text", "audio"], use_cache=False)
    assert sorted(ds[0]["modalities"]) == ["audio", "text"]
    out_of_range = {k: dict(v) for k, v in data.items()}
    out_of_range["train"]["regression_labels"] = out_of_range["train"]["regression_labels"] + 10
    _write(root / "range.pkl", out_of_range)
    with pytest.raises(DatasetError, match=r"range.pkl.*outside \[-3.0, 3.0\]"):
        build("mosi", root=root, file="range.pkl", use_cache=False)
    with pytest.raises(DatasetError, match="does not exist"):
        build("mosi", root=root, file="nope.pkl", use_cache=False)


@pytest.mark.parametrize("key, value, expected", [
    ("regression_labels", lambda n: np.array(["pos", "neg"] * n)[:n],
     r"label 'regression_labels' must hold one number per sample .*got dtype <U3"),
    ("regression_labels", lambda n: None, r"label 'regression_labels' is None"),
    ("regression_labels", lambda n: np.zeros((n, 2), np.float32),
     r"label 'regression_labels' must be a vector \[n\].*shape \({n}, 2\)"),
    ("regression_labels_T", lambda n: np.zeros(n - 1, np.float32),
     r"label keys \['regression_labels_T'\] have \[{m}\] entries, but 'regression_labels' has {n}"),
    ("audio", lambda n: [np.zeros((3 + i, 4), np.float32) for i in range(n)],
     r"key 'audio' must be one padded array \[n={n}, T, d\], got a ragged list"),
])
def test_labels_and_features_of_the_wrong_form_name_the_key(tmp_path, key, value, expected):
    """Every label key is one number per sample, of the split's length; a feature key one padded array: a file
    breaking that is refused when the dataset is built, naming the file, the split and the key (a short unimodal
    label used to load and fail later with an IndexError at its last samples, a string label with a bare
    'could not convert string to float')."""
    CHSIMS.write_synthetic(tmp_path, SyntheticSpec(num_samples=10, seed=0, options=SMALL))
    [path] = list(tmp_path.glob("*.pkl"))
    with open(path, "rb") as f:
        data = pickle.load(f)
    n = len(data["train"]["regression_labels"])
    assert n > 2 and "regression_labels_T" in data["train"]
    data["train"][key] = value(n)
    _write(path, data)
    with pytest.raises(DatasetError, match=rf"{path.name} \[train\]: " + expected.format(n=n, m=n - 1)):
        build("chsims", root=tmp_path, use_cache=False)


def test_folds_json_of_the_wrong_form_or_with_unknown_videos(tmp_path, fixtures_dir, caplog):
    """folds.json beside the real MOSI labels: unreadable JSON or the wrong form is one error naming the file; a
    video id the labels do not hold is left out with a warning naming it (it used to shrink the split silently);
    the known one keeps its 13 segments (counted from the file above)."""
    import logging
    import shutil

    shutil.copy(fixtures_dir / "mosi" / "CMU_MOSI_Opinion_Labels.csd", tmp_path)
    folds = tmp_path / "folds.json"
    kw = dict(root=tmp_path, modalities=[], use_cache=False)
    folds.write_text('{"train": ["03bSnISJMiM"], ')
    with pytest.raises(DatasetError, match=r"mosi: cannot read .*folds.json as JSON \(Expecting"):
        build("mosi", **kw)
    folds.write_text('["03bSnISJMiM"]')
    with pytest.raises(DatasetError, match=r"folds.json must map each split to a list of video ids .*got a list"):
        build("mosi", **kw)
    folds.write_text('{"train": "03bSnISJMiM", "valid": [], "test": []}')
    with pytest.raises(DatasetError, match=r"got split 'train' holding '03bSnISJMiM'"):
        build("mosi", **kw)
    folds.write_text('{"train": ["03bSnISJMiM", "typo_video_id"], "valid": [], "test": []}')
    with caplog.at_level(logging.WARNING):
        ds = build("mosi", **kw)
    assert len(ds) == 13
    assert "1 of the 2 video ids of split 'train' in" in caplog.text and "'typo_video_id'" in caplog.text
    # the other labelled videos, in no split of these folds, are said too: 92 of the file's 93 videos, and of its
    # 2199 opinion segments (PROVENANCE.md; MMSA's 1284 + 229 + 686) all but the 13 of the listed video
    assert (f"mosi: {folds} lists no split for 92 of the 93 labelled videos of "
            f"{tmp_path / 'CMU_MOSI_Opinion_Labels.csd'} (2186 segments); they are in no split: ") in caplog.text


class _Evil:
    def __init__(self, target):
        self.target = target

    def __reduce__(self):
        return (os.system, (f"touch {self.target}",))


def test_malicious_feature_pickle(tmp_path):
    target = tmp_path / "ran.txt"
    _write(tmp_path / "unaligned_50.pkl", {"train": {"audio": _Evil(str(target))}, "valid": {}, "test": {}})
    with pytest.raises(DatasetError, match=r"unaligned_50.pkl.*refused"):
        build("mosi", root=tmp_path, use_cache=False)
    assert not target.exists()


def test_corrupt_csd(tmp_path, fixtures_dir):
    data = (fixtures_dir / "mosi" / "CMU_MOSI_Opinion_Labels.csd").read_bytes()
    (tmp_path / "CMU_MOSI_Opinion_Labels.csd").write_bytes(data[: len(data) // 3])
    with pytest.raises(DatasetError, match="CMU_MOSI_Opinion_Labels.csd"):
        build("mosi", root=tmp_path, modalities=[], use_cache=False)
    (tmp_path / "CMU_MOSI_Opinion_Labels.csd").write_bytes(data)
    with pytest.raises(DatasetError, match=r"no computational sequence for modality 'audio'"):
        build("mosi", root=tmp_path, modalities=["audio"], use_cache=False)


def test_lengths_outside_padded_range(twin):
    root, data = twin
    t_audio = data["train"]["audio"].shape[1]  # padded length (30 with SMALL)
    assert t_audio == 30
    for bad in (10**6, -5):
        broken = {k: dict(v) for k, v in data.items()}
        lengths = list(data["train"]["audio_lengths"])
        lengths[3] = bad
        broken["train"]["audio_lengths"] = lengths
        _write(root / "bad_len.pkl", broken)
        with pytest.raises(DatasetError) as err:
            build("mosi", root=root, file="bad_len.pkl", use_cache=False)
        msg = str(err.value)
        assert "bad_len.pkl [train]" in msg and "audio_lengths" in msg and "sample 3" in msg
        assert str(data["train"]["id"][3]) in msg and f"is {bad}," in msg and "0..30" in msg
    # the boundaries 0 and T are valid: T keeps the whole padded sequence, 0 = audio missing for that sample
    edge = {k: dict(v) for k, v in data.items()}
    lengths = list(data["train"]["audio_lengths"])
    lengths[1], lengths[2] = 0, 30
    edge["train"]["audio_lengths"] = lengths
    _write(root / "edge.pkl", edge)
    ds = build("mosi", root=root, file="edge.pkl", use_cache=False)
    assert "audio" not in ds[1]["modalities"] and sorted(ds[1]["modalities"]) == ["text", "vision"]
    np.testing.assert_array_equal(ds[2]["modalities"]["audio"].numpy(), data["train"]["audio"][2])
    batch = collate([ds[1], ds[2]], names=ds.modalities)
    assert batch["present"][ds.modalities.index("audio")].tolist() == [False, True]
    assert batch["modalities"]["audio"].shape == (2, 30, 5) and not batch["modalities"]["audio"][0].any()


def test_feature_dimension_differs_between_splits(twin):
    root, data = twin
    broken = {k: dict(v) for k, v in data.items()}
    a = data["test"]["audio"]
    broken["test"]["audio"] = np.concatenate([a, np.zeros((*a.shape[:2], 2), a.dtype)], axis=2)  # 5 -> 7
    _write(root / "dims.pkl", broken)
    for split, first, second in (("test", "test", "train"), ("train", "train", "test")):
        with pytest.raises(DatasetError) as err:
            build("mosi", root=root, file="dims.pkl", split=split, use_cache=False)
        msg = str(err.value)
        d = {"train": 5, "test": 7}
        assert "dims.pkl" in msg and "'audio'" in msg
        assert f"dimension {d[first]} in split [{first}] but {d[second]} in split [{second}]" in msg
    # without the audio modality the other splits are consistent and load
    assert len(build("mosi", root=root, file="dims.pkl", split="test", modalities=["text", "vision"],
                     use_cache=False)) == 2


def test_empty_valid_split(twin):
    root, data = twin
    empty = {k: dict(v) for k, v in data.items()}
    empty["valid"] = {k: v[:0] for k, v in data["valid"].items()}  # every array with n = 0
    _write(root / "empty.pkl", empty)
    with pytest.raises(DatasetError) as err:
        build("mosi", root=root, file="empty.pkl", split="val", use_cache=False)
    msg = str(err.value)
    assert "mosi: split 'val' is empty (0 samples)" in msg and "empty.pkl [valid]" in msg and str(root) in msg
    assert "reshape" not in msg
    assert len(build("mosi", root=root, file="empty.pkl", split="train", use_cache=False)) == 6
    # lists instead of arrays, as a hand-written pickle may hold
    empty["valid"] = {"text": [], "audio": [], "vision": [], "regression_labels": []}
    _write(root / "empty.pkl", empty)
    with pytest.raises(DatasetError, match=r"split 'val' is empty.*empty.pkl \[valid\]"):
        build("mosi", root=root, file="empty.pkl", split="val", use_cache=False)
    # allow_empty builds it on purpose
    assert len(build("mosi", root=root, file="empty.pkl", split="val", use_cache=False, allow_empty=True)) == 0


def test_chsims_folder_without_pickle_message(tmp_path):
    with pytest.raises(DatasetError) as err:
        build("chsims", root=tmp_path, use_cache=False)
    first = str(err.value).splitlines()[0]
    assert first == f"chsims: {tmp_path} holds no MMSA pickle (unaligned_39.pkl, aligned_39.pkl)."
    with pytest.raises(DatasetError) as err:
        build("mosi", root=tmp_path, use_cache=False)
    assert str(err.value).splitlines()[0] == (f"mosi: {tmp_path} holds neither an MMSA pickle (unaligned_50.pkl, "
                                              f"aligned_50.pkl) nor .csd computational sequences.")


def test_text_bert_of_the_wrong_shape_or_length_is_an_error(fixtures_dir, tmp_path):
    """The real CH-SIMS feature file: text (9, 768) and text_bert (3, 9), both 9 steps ([CLS] + 7 characters +
    [SEP]). A transposed text (768, 9) was cut to its first 9 rows by the 9-step mask and delivered as text
    [9, 9]; a transposed text_bert (9, 3) was ignored (no mask: the text kept every padded step)."""
    from fusebench.datasets import safe_pickle

    real = safe_pickle.load(fixtures_dir / "ch_sims" / "feature_aligned.pkl")
    assert real["text"].shape == (9, 768) and real["text_bert"].shape == (3, 9)
    path = tmp_path / "clip.pkl"
    _write(path, real)
    assert tuple(build("chsims", root=path, split="train", use_cache=False)[0]["modalities"]["text"].shape) == (9, 768)
    _write(path, {**real, "text": real["text"].T})
    with pytest.raises(DatasetError, match=r"clip\.pkl: key 'text' has 768 steps .* but 'text_bert' 9"):
        build("chsims", root=path, split="train", use_cache=False)
    _write(path, {**real, "text_bert": real["text_bert"].T})
    with pytest.raises(DatasetError, match=r"clip\.pkl: key 'text_bert' has shape \(1, 9, 3\), expected \[n=1, 3, T\]"):
        build("chsims", root=path, split="train", use_cache=False)
    # an MMSA split whose text is padded to 12 steps but whose text_bert to 9 (the keys of two different files)
    part = {"text": np.zeros((2, 12, 4), np.float32), "text_bert": np.ones((2, 3, 9), np.int64),
            "audio": np.ones((2, 5, 3), np.float32), "vision": np.ones((2, 5, 2), np.float32),
            "audio_lengths": [5, 5], "vision_lengths": [5, 5], "regression_labels": np.zeros(2, np.float32),
            "id": ["a", "b"]}
    _write(tmp_path / "unaligned_50.pkl", {"train": part, "valid": {**part, "id": ["c", "d"]},
                                           "test": {**part, "id": ["e", "f"]}})
    with pytest.raises(DatasetError, match=r"\[train\]: key 'text' has 12 steps .* but 'text_bert' 9"):
        build("mosi", root=tmp_path, split="train", use_cache=False)


def test_mosi_csd_uses_the_standard_folds(tmp_path, fixtures_dir):
    """Without folds= / folds.json the real MOSI labels are split by the CMU-MultimodalSDK's standard folds
    (cmu_mosi_std_folds.py), not a hash of the ids cut to their sizes: 1284 / 229 / 686 segments, the sizes of
    MMSA's MOSI pickles (counted here from the file with h5py); a few videos checked against the SDK's lists.
    A labels file with a MOSI video and a video the folds do not list is refused, naming the odd one."""
    import shutil

    path = fixtures_dir / "mosi" / "CMU_MOSI_Opinion_Labels.csd"
    with h5py.File(path, "r") as f:
        segments = {vid: g["features"].shape[0] for vid, g in f["Opinion Segment Labels"]["data"].items()}
    data = {s: build("mosi", root=fixtures_dir / "mosi", split=s, modalities=[], use_cache=False)
            for s in ("train", "val", "test")}
    videos = {s: {v for v, _ in ds.samples} for s, ds in data.items()}
    assert {s: sum(segments[v] for v in vids) for s, vids in videos.items()} == {"train": 1284, "val": 229,
                                                                                  "test": 686}
    assert {s: len(ds) for s, ds in data.items()} == {"train": 1284, "val": 229, "test": 686}
    # first and last entries of each list in cmu_mosi_std_folds.py
    assert {"2iD-tVS8NPw", "IumbAb8q2dM", "03bSnISJMiM"} <= videos["train"]
    assert {"WKA5OygbEKI", "ZUXBRvtny7o"} <= videos["val"] and len(videos["val"]) == 10
    assert {"tmZoasNr4rU", "c7UH_rxdZv4"} <= videos["test"] and len(videos["test"]) == 31

    mixed = tmp_path / "CMU_MOSI_Opinion_Labels.csd"
    shutil.copy(path, mixed)
    with h5py.File(mixed, "r+") as f:
        d = f["Opinion Segment Labels"]["data"]
        d.copy(d["03bSnISJMiM"], "not_a_mosi_video")
    with pytest.raises(DatasetError, match=r"CMU_MOSI_Opinion_Labels.csd holds 1 video\(s\) outside the standard "
                                           r"folds of mosi \('not_a_mosi_video'\) beside 93 of their videos"):
        build("mosi", root=tmp_path, modalities=[], use_cache=False)


# -- MOSEI's standard folds (CMU-MultimodalSDK cmu_mosei_std_folds.py) ------------------------------
def test_mosei_standard_fold_lists():
    """The lists as the SDK file (CMU-MultiComp-Lab/CMU-MultimodalSDK 3e27d378) has them: 2249 / 300 / 678 video
    ids, none twice and none in two folds; first, last and a few other entries as read in that file, and
    '-NFrJFQijFE' (listed by some copies of the file, not by the upstream one) in none."""
    from fusebench.datasets.mmsa.folds import MOSEI_STANDARD_FOLDS, MOSI_STANDARD_FOLDS

    folds = MOSEI_STANDARD_FOLDS
    assert {k: len(v) for k, v in folds.items()} == {"train": 2249, "valid": 300, "test": 678}
    assert {k: len(set(v)) for k, v in folds.items()} == {"train": 2249, "valid": 300, "test": 678}
    for a, b in (("train", "valid"), ("train", "test"), ("valid", "test")):
        assert not set(folds[a]) & set(folds[b]), (a, b)
    assert folds["train"][:4] == ("hh04W3xXa5s", "GdFP_p4eQX0", "4iG0ffmnCOw", "81406")
    assert folds["train"][-3:] == ("CfWxp5bRt2A", "mO4H5S_Q7aU", "91276")
    assert folds["valid"][:3] == ("188343", "VAXhC2U9-2A", "AxNy9TeTLq8") and folds["valid"][-1] == "Vuay0mVKkik"
    assert folds["test"][:3] == ("7l3BNtSE0xc", "dZFV0lyedX4", "286943") and folds["test"][-1] == "vR90Pdx9wxs"
    assert "--qXJuDtHPw" in folds["valid"] and "ZzL2sHtTWRc" in folds["train"] and "-ri04Z7vwnc" in folds["test"]
    i = folds["train"].index("aYdMtEO0cbI")
    assert folds["train"][i + 1] == "zU2_X9lIcUM"  # where the copies with 2250 training videos list '-NFrJFQijFE'
    assert all("-NFrJFQijFE" not in v for v in folds.values())
    assert MOSEI.STANDARD_FOLDS is folds and MOSI.STANDARD_FOLDS is MOSI_STANDARD_FOLDS
    assert {k: len(v) for k, v in MOSI_STANDARD_FOLDS.items()} == {"train": 52, "valid": 10, "test": 31}
    assert not set().union(*MOSI_STANDARD_FOLDS.values()) & set().union(*folds.values())


# video of the real MOSI labels file -> the MOSEI id it is renamed to (and the split it must land in)
_MOSEI_RENAMES = {"03bSnISJMiM": ("hh04W3xXa5s", "train"), "0h-zjBukYpk": ("91276", "train"),
                  "1DmNV9C1hbY": ("--qXJuDtHPw", "val"), "1iG0909rllw": ("vR90Pdx9wxs", "test"),
                  "2WGyTLYerpo": ("-NFrJFQijFE", None)}


def _mosei_labels(fixtures_dir, folder):
    """CMU_MOSEI_Labels.csd in the SDK's real format: the real MOSI labels file with five of its videos renamed to
    MOSEI ids (four of the standard folds, '-NFrJFQijFE' of none) and the others removed; the segment count of
    each renamed video, read from the file with h5py."""
    import shutil

    folder.mkdir(exist_ok=True)
    path = folder / "CMU_MOSEI_Labels.csd"
    shutil.copy(fixtures_dir / "mosi" / "CMU_MOSI_Opinion_Labels.csd", path)
    with h5py.File(path, "r+") as f:
        d = f["Opinion Segment Labels"]["data"]
        for vid in list(d):
            if vid in _MOSEI_RENAMES:
                d.move(vid, _MOSEI_RENAMES[vid][0])
            else:
                del d[vid]
        counts = {vid: d[vid]["features"].shape[0] for vid in d}
    return path, counts


def test_mosei_csd_uses_the_standard_folds(tmp_path, fixtures_dir, caplog):
    """Without folds= / folds.json a MOSEI labels sequence is split by the SDK's standard folds (it was a hash of
    the video ids cut 70/10/20): each segment lands in its video's fold; a video no fold lists ('-NFrJFQijFE',
    one of those the SDK's real labels hold) is in no split, with a warning naming it and its segment count."""
    import logging

    path, counts = _mosei_labels(fixtures_dir, tmp_path / "mosei")
    with caplog.at_level(logging.WARNING):
        data = {s: build("mosei", root=path.parent, split=s, modalities=[], use_cache=False)
                for s in ("train", "val", "test")}
    # the segments of each video in the order of its fold's list (hh04W3xXa5s is the train list's first entry,
    # 91276 its last)
    order = {"train": ["hh04W3xXa5s", "91276"], "val": ["--qXJuDtHPw"], "test": ["vR90Pdx9wxs"]}
    for s, ds in data.items():
        assert ds.sample_keys() == [f"{v}[{i}]" for v in order[s] for i in range(counts[v])]
        assert [ds[k]["meta"]["video"] for k in range(len(ds))] == [v for v in order[s] for _ in range(counts[v])]
    assert len(data["train"]) == counts["hh04W3xXa5s"] + counts["91276"] == 13 + 25
    assert "holds 1 video(s) (" + str(counts["-NFrJFQijFE"]) + " segments) that the standard folds of mosei do " \
           "not list ('-NFrJFQijFE')" in caplog.text
    assert not any("-NFrJFQijFE" in k for ds in data.values() for k in ds.sample_keys())
    # said once for the file, not once per split opened (it was said three times)
    assert sum("-NFrJFQijFE" in r.getMessage() for r in caplog.records) == 1
    # MOSI keeps refusing a labels file that mixes its videos with others (test_mosi_csd_uses_the_standard_folds)
    assert MOSI.STANDARD_FOLDS_UNLISTED == "refuse" and MOSEI.STANDARD_FOLDS_UNLISTED == "leave_out"


@pytest.mark.parametrize("dataset", ["mosi", "mosei"])
def test_csd_cache_of_another_split_is_not_served(tmp_path, fixtures_dir, monkeypatch, dataset):
    """A prepared cache of the csd layout made while the split was the hash split (before the standard folds were
    built in) is not served for the standard-folds split of the same files and options: the split's sample ids
    are in the cache key (and the manifest), so the new split looks under another key; the pickle layouts' keys
    hold no sample list."""
    from fusebench.datasets import cache

    cls = {"mosi": MOSI, "mosei": MOSEI}[dataset]
    if dataset == "mosi":
        root = fixtures_dir / "mosi"
    else:
        root = _mosei_labels(fixtures_dir, tmp_path / "mosei")[0].parent
    base = tmp_path / "prepared"
    with monkeypatch.context() as m:
        m.setattr(cls, "STANDARD_FOLDS", {})  # the split as it was: the deterministic video split
        old = build(dataset, root=root, split="train", modalities=[], use_cache=False)
        folder = cache.prepare(old, base=base, progress=False)
    new = build(dataset, root=root, split="train", modalities=[], use_cache=False)
    assert old.sample_keys() != new.sample_keys()
    assert cache.open_cache(new, base=base) is None
    assert cache.cache_key(new) != cache.cache_key(old) == folder.name
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["split_samples_sha256"] == hashlib.sha256(json.dumps(old.sample_keys()).encode()).hexdigest()
    assert cache.check(folder) == []  # the manifest's own fields give its folder's key
    reader = cache.open_cache(old, base=base)  # the old split still finds its own cache
    assert reader is not None and len(reader) == len(old)
    fresh = cache.prepare(new, base=base, progress=False)
    assert fresh != folder and [s["id"] for s in json.loads((fresh / "meta.json").read_text())] == new.sample_keys()


def test_unlisted_videos_are_said_once_per_file(tmp_path, fixtures_dir, caplog):
    """The real MOSI labels (93 videos, 2199 segments) with a folds.json placing one video in each split: the other
    90 videos are in no split, said in one warning when the three splits are built (it was said once per split
    opened, three times); the same splits built again from the unchanged file say nothing more, a rewritten
    folds.json placing one more video is said again."""
    import logging
    import shutil

    shutil.copy(fixtures_dir / "mosi" / "CMU_MOSI_Opinion_Labels.csd", tmp_path)
    labels = read_csd(tmp_path / "CMU_MOSI_Opinion_Labels.csd", labels=True)
    placed = {"train": ["03bSnISJMiM"], "valid": [labels.videos[1]], "test": [labels.videos[2]]}
    (tmp_path / "folds.json").write_text(json.dumps(placed))
    unlisted = [v for v in labels.videos if v not in sum(placed.values(), [])]
    seg = sum(labels.features[v].shape[0] for v in unlisted)
    assert len(unlisted) == 90 and 0 < seg < 2199

    def said():
        return [r.getMessage() for r in caplog.records if "they are in no split" in r.getMessage()]

    with caplog.at_level(logging.WARNING):
        sizes = [len(build("mosi", root=tmp_path, split=s, modalities=[], use_cache=False))
                 for s in ("train", "val", "test")]
    assert sum(sizes) == 2199 - seg
    assert said() == [f"mosi: {tmp_path / 'folds.json'} lists no split for 90 of the 93 labelled videos of "
                      f"{tmp_path / 'CMU_MOSI_Opinion_Labels.csd'} ({seg} segments); they are in no split: "
                      + ", ".join(map(repr, unlisted[:5])) + ", ..."]
    with caplog.at_level(logging.WARNING):
        for s in ("train", "val", "test"):
            build("mosi", root=tmp_path, split=s, modalities=[], use_cache=False)
    assert len(said()) == 1
    placed["test"].append(labels.videos[3])
    (tmp_path / "folds.json").write_text(json.dumps(placed))
    with caplog.at_level(logging.WARNING):
        for s in ("train", "val", "test"):
            build("mosi", root=tmp_path, split=s, modalities=[], use_cache=False)
    assert len(said()) == 2 and "lists no split for 89 of the 93" in said()[1]


def test_labelled_video_without_segments_is_said(tmp_path, fixtures_dir, caplog):
    """The real MOSI labels with two videos (the first of the standard train and test folds) emptied to 0 rows of
    'features' [0, 1] and 'intervals' [0, 2]: the CMU-MultimodalSDK's integrity check passes such a video and
    its alignment makes no entry of it, so it gives no sample; that was silent, it is now one warning for the
    three splits naming the file, the count and the videos. Sample counts: the file's 2199 segments less the two
    videos' (read here with h5py)."""
    import logging
    import shutil

    path = tmp_path / "CMU_MOSI_Opinion_Labels.csd"
    shutil.copy(fixtures_dir / "mosi" / "CMU_MOSI_Opinion_Labels.csd", path)
    gone = [MOSI.STANDARD_FOLDS["train"][0], MOSI.STANDARD_FOLDS["test"][0]]
    with h5py.File(path, "r+") as f:
        data = f["Opinion Segment Labels"]["data"]
        removed = sum(data[v]["features"].shape[0] for v in gone)
        for v in gone:
            for k, width in (("features", 1), ("intervals", 2)):
                del data[v][k]
                data[v].create_dataset(k, data=np.zeros((0, width), np.float32))
    assert removed > 0
    with caplog.at_level(logging.WARNING):
        data = {s: build("mosi", root=tmp_path, split=s, modalities=[], use_cache=False)
                for s in ("train", "val", "test")}
    assert sum(len(ds) for ds in data.values()) == 2199 - removed
    assert not any(k.startswith(tuple(gone)) for ds in data.values() for k in ds.sample_keys())
    said = [r for r in caplog.records if "no labelled segment" in r.getMessage()]
    assert [r.levelno for r in said] == [logging.WARNING]
    assert said[0].getMessage() == (f"mosi: {path} holds 2 of its 93 video(s) with no labelled segment (0 rows of "
                                    "'features' and 'intervals'); they give no sample in any split: "
                                    + ", ".join(map(repr, sorted(gone))))
