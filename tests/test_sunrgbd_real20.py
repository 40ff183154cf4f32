"""The ``sunrgbd`` adapter on 20 real SUN RGB-D scenes in VoteNet's dumped layout, and the
``sunrgbd-det-real20`` pipeline check on them.

Fixture ``sunrgbd/votenet_real20/`` (see the fixtures' PROVENANCE.md): ``sunrgbd_pc_bbox_votes_50k_v1_train/``
(official train frames 005051-005060, six of them without any box) and ``..._v1_val/`` (official val
frames 000001-000010), each frame as ``NNNNNN_pc.npz`` (``pc`` [50000, 6]), ``NNNNNN_bbox.npy``
([K, 8]: centre, half-sizes l w h, VoteNet heading, class id) and ``NNNNNN_votes.npz``.

Expected values are computed here from the files with plain numpy: the points and colours as stored,
the height from a hand-interpolated 0.99th percentile of z, the boxes from the half-size / heading
reading written out below. That reading is checked against two independent sources: the v1 label text
of the same frames (``mmdet3d_v0_trainval/label_v1``) and the in-box mask and vote offsets VoteNet
wrote to ``_votes.npz`` from its own box corners.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

import fusebench
from fusebench import benchmarks
from fusebench.datasets import DatasetError, DatasetNotFoundError, build
from fusebench.metrics import values_of

VOTENET = ["bed", "table", "sofa", "chair", "toilet", "desk", "dresser", "night_stand", "bookshelf", "bathtub"]
TRAIN_DIR = "sunrgbd_pc_bbox_votes_50k_v1_train"
VAL_DIR = "sunrgbd_pc_bbox_votes_50k_v1_val"
TRAIN_FRAMES = list(range(5051, 5061))
VAL_FRAMES = list(range(1, 11))
NO_BOX_FRAMES = [5052, 5053, 5054, 5055, 5057, 5058]


@pytest.fixture(scope="module")
def real20(fixtures_dir: Path) -> Path:
    root = fixtures_dir / "sunrgbd" / "votenet_real20"
    if not (root / TRAIN_DIR).is_dir():
        pytest.skip(f"{root} is absent (second-round fixtures)")
    return root


def _ds(root: Path, **kw):
    kw.setdefault("use_cache", False)
    kw.setdefault("augment", False)
    kw.setdefault("version", "v1")
    kw.setdefault("val_fraction", 0.0)
    return build("sunrgbd", root=root, **kw)


def _folder(frame: int) -> str:
    return VAL_DIR if frame in VAL_FRAMES else TRAIN_DIR


def _raw(root: Path, frame: int) -> tuple[np.ndarray, np.ndarray]:
    d = root / _folder(frame)
    return np.load(d / f"{frame:06d}_pc.npz")["pc"], np.load(d / f"{frame:06d}_bbox.npy")


def _hand_boxes(bbox: np.ndarray) -> tuple[np.ndarray, list[int]]:
    """VoteNet row [cx cy cz l w h heading cls] -> [cx cy cz 2l 2w 2h yaw], yaw = -heading in [-pi, pi)."""
    out, labels = [], []
    for row in bbox.reshape(-1, 8).tolist():
        cx, cy, cz, l, w, h, heading, cls = row
        yaw = -heading
        while yaw >= math.pi:
            yaw -= 2 * math.pi
        while yaw < -math.pi:
            yaw += 2 * math.pi
        out.append([cx, cy, cz, 2 * l, 2 * w, 2 * h, yaw])
        labels.append(int(cls))
    return np.array(out).reshape(-1, 7), labels


def _floor_by_hand(z: np.ndarray) -> float:
    """np.percentile(z, 0.99) written out: linear interpolation at rank 0.0099 * (n - 1) of sorted z."""
    zs = np.sort(z.astype(np.float64))
    pos = 0.0099 * (len(zs) - 1)
    lo = int(math.floor(pos))
    return float(zs[lo] + (pos - lo) * (zs[lo + 1] - zs[lo]))


def _inside(xyz: np.ndarray, box: np.ndarray) -> np.ndarray:
    """Points inside a box [cx cy cz dx dy dz yaw] (dx along (cos yaw, sin yaw)): the box frame by hand."""
    d = xyz - box[:3]
    c, s = math.cos(box[6]), math.sin(box[6])
    u, v = c * d[:, 0] + s * d[:, 1], -s * d[:, 0] + c * d[:, 1]
    return (np.abs(u) <= box[3] / 2) & (np.abs(v) <= box[4] / 2) & (np.abs(d[:, 2]) <= box[5] / 2)


def _angle_diff(a, b):
    return np.abs((np.asarray(a) - np.asarray(b) + np.pi) % (2 * np.pi) - np.pi)


# ---------------------------------------------------------------------------------------------
# the adapter on the real scenes
# ---------------------------------------------------------------------------------------------
def test_frames_splits_and_layout(real20: Path) -> None:
    train, test = _ds(real20, split="train"), _ds(real20, split="test")
    assert [r.frame for r in train.samples] == TRAIN_FRAMES  # the _train folder, nothing carved out
    assert [r.frame for r in test.samples] == VAL_FRAMES  # the _val folder = official val = our test
    s = test[0]
    assert s["meta"]["id"] == "000001" and s["meta"]["layout"] == "votenet_pc_bbox_votes"
    assert s["meta"]["label_version"] == "v1" and s["meta"]["num_raw_points"] == 50000
    # the cache manifest hashes each frame's point and box files (the votes are not read)
    names = sorted(p.name for p in test.source_files())
    assert names == sorted([f"{f:06d}_pc.npz" for f in VAL_FRAMES] + [f"{f:06d}_bbox.npy" for f in VAL_FRAMES])
    # a carved-out val split comes from the train folder only, disjoint from train
    tr, va = _ds(real20, split="train", val_fraction=0.3), _ds(real20, split="val", val_fraction=0.3)
    assert len(va) == 3 and len(tr) == 7
    assert sorted(r.frame for r in tr.samples + va.samples) == TRAIN_FRAMES
    # the label version is part of the folder name: asking for v2 names the v1 folder that exists
    with pytest.raises(DatasetNotFoundError, match=r"sunrgbd_pc_bbox_votes_50k_v1_train exists: pass version='v1'"):
        _ds(real20, split="train", version="v2")
    with pytest.raises(DatasetNotFoundError, match=r"missing folder .*sunrgbd_pc_bbox_votes_50k_v2_val"):
        _ds(real20, split="test", version="v2", layout="pc_bbox_votes")


def test_points_colour_height_against_numpy(real20: Path) -> None:
    """All points kept (num_points=None): xyz and rgb exactly as stored, height = z - floor with the
    floor the hand-interpolated 0.99th percentile of the frame's z (VoteNet's estimate)."""
    for split, frames in (("train", TRAIN_FRAMES), ("test", VAL_FRAMES)):
        ds = _ds(real20, split=split, num_points=None)
        for i, frame in enumerate(frames):
            pc, _ = _raw(real20, frame)
            s = ds[i]
            np.testing.assert_array_equal(s["modalities"]["points"].numpy(), pc[:, :3])
            np.testing.assert_array_equal(s["modalities"]["color"].numpy(), pc[:, 3:6])
            assert 0.0 <= pc[:, 3:6].min() and pc[:, 3:6].max() <= 1.0
            floor = _floor_by_hand(pc[:, 2])
            assert s["meta"]["floor_z"] == pytest.approx(floor, abs=1e-6)
            assert -2.0 < floor < -0.5  # the camera is 0.5-2 m above the floor (upright depth frame, z up)
            h = s["modalities"]["height"].numpy()
            assert h.shape == (50000, 1) and h.dtype == np.float32
            np.testing.assert_allclose(h[:, 0], pc[:, 2].astype(np.float64) - floor, atol=2e-6)
            assert (h < 0).mean() == pytest.approx(0.0099, abs=2e-4)  # ~1 % of the points below the floor


def test_sampled_points_keep_the_full_frame_floor(real20: Path) -> None:
    """With num_points the floor is still the full frame's (computed before sampling, as VoteNet does);
    the sampled rows are distinct rows of the file with their own colours."""
    pc, _ = _raw(real20, 1)
    s = _ds(real20, split="test", num_points=2048)[0]
    xyz, col, h = (s["modalities"][k].numpy() for k in ("points", "color", "height"))
    assert xyz.shape == (2048, 3) and col.shape == (2048, 3) and h.shape == (2048, 1)
    rows = {tuple(r) for r in pc.tolist()}
    got = np.concatenate([xyz, col], axis=1)
    assert all(tuple(r) in rows for r in got.tolist())
    assert len(np.unique(got, axis=0)) == 2048
    np.testing.assert_allclose(h[:, 0], xyz[:, 2].astype(np.float64) - _floor_by_hand(pc[:, 2]), atol=2e-6)


def test_boxes_against_numpy(real20: Path) -> None:
    """Every frame's boxes and class ids from the .npy read by hand; frames without boxes give [0, 7]."""
    n_empty = 0
    for split, frames in (("train", TRAIN_FRAMES), ("test", VAL_FRAMES)):
        ds = _ds(real20, split=split, num_points=64)
        for i, frame in enumerate(frames):
            _, bbox = _raw(real20, frame)
            want, labels = _hand_boxes(bbox)
            t = ds[i]["target"]
            assert t["boxes"].dtype == torch.float32 and t["labels"].dtype == torch.int64
            assert tuple(t["boxes"].shape) == (len(bbox), 7) and tuple(t["labels"].shape) == (len(bbox),)
            assert t["labels"].tolist() == labels
            if len(bbox) == 0:
                n_empty += 1
                assert frame in NO_BOX_FRAMES
                continue
            got = t["boxes"].double().numpy()
            np.testing.assert_allclose(got[:, :6], want[:, :6], atol=1e-5)
            assert _angle_diff(got[:, 6], want[:, 6]).max() < 1e-5
            assert (got[:, 6] >= -math.pi).all() and (got[:, 6] < math.pi).all()
    assert n_empty == len(NO_BOX_FRAMES)
    # concrete numbers: frame 000001's bed row is [1.047307 4.168696 -0.246859 1.151035 0.943792 0.984807
    # 1.695649 0]: full sizes twice the stored half-sizes, yaw = -1.695649
    bed = _ds(real20, split="test", num_points=64)[0]["target"]
    np.testing.assert_allclose(bed["boxes"][0].numpy(),
                               [1.047307, 4.168696, -0.246859, 2.30207, 1.887584, 1.969614, -1.695649], atol=1e-5)
    assert [VOTENET[c] for c in bed["labels"].tolist()] == ["bed", "night_stand", "dresser"]


def test_boxes_equal_the_v1_label_text(real20: Path, fixtures_dir: Path) -> None:
    """Frames 000001-000004 also exist as label_v1 text (another fixture): ``c1 c2 c3`` half-sizes and the
    heading vector ``(ox, oy)``; the dumped boxes read our way equal ``[2 c2, 2 c1, 2 c3, atan2(oy, ox)]``."""
    label_dir = fixtures_dir / "sunrgbd" / "mmdet3d_v0_trainval" / "label_v1"
    ds = _ds(real20, split="test", num_points=64)
    for i, frame in enumerate(VAL_FRAMES[:4]):
        want, labels = [], []
        for line in (label_dir / f"{frame:06d}.txt").read_text().splitlines():
            f = line.split()
            if f and f[0] in VOTENET:
                c1, c2, c3 = (float(x) for x in f[8:11])
                want.append([float(f[5]), float(f[6]), float(f[7]), 2 * c2, 2 * c1, 2 * c3,
                             math.atan2(float(f[12]), float(f[11]))])
                labels.append(VOTENET.index(f[0]))
        t = ds[i]["target"]
        assert t["labels"].tolist() == labels
        got, want = t["boxes"].double().numpy(), np.array(want)
        np.testing.assert_allclose(got[:, :6], want[:, :6], atol=1e-5)
        assert _angle_diff(got[:, 6], want[:, 6]).max() < 1e-5


def test_boxes_fit_votenets_own_in_box_mask(real20: Path) -> None:
    """``_votes.npz`` column 0 marks the points VoteNet found inside its boxes and columns 1-3 the offset
    to the box centre. Our boxes enclose exactly the marked points, and the readings with the yaw sign
    flipped or l / w swapped do clearly worse; every marked point votes for one of our centres."""
    agree = {"ours": 0, "yaw_flipped": 0, "lw_swapped": 0}
    total = 0
    for frame in TRAIN_FRAMES + VAL_FRAMES:
        if frame in NO_BOX_FRAMES:
            continue
        split = "test" if frame in VAL_FRAMES else "train"
        frames = VAL_FRAMES if split == "test" else TRAIN_FRAMES
        s = _ds(real20, split=split, num_points=None)[frames.index(frame)]
        xyz = s["modalities"]["points"].double().numpy()
        boxes = s["target"]["boxes"].double().numpy()
        votes = np.load(real20 / _folder(frame) / f"{frame:06d}_votes.npz")["point_votes"]
        marked = votes[:, 0] > 0
        flipped = boxes.copy()
        flipped[:, 6] = -boxes[:, 6]
        swapped = boxes.copy()
        swapped[:, [3, 4]] = boxes[:, [4, 3]]
        for name, bb in (("ours", boxes), ("yaw_flipped", flipped), ("lw_swapped", swapped)):
            inside = np.zeros(len(xyz), dtype=bool)
            for b in bb:
                inside |= _inside(xyz, b)
            agree[name] += int((inside == marked).sum())
            if name == "ours":
                assert (inside == marked).mean() > 0.9995, frame  # float32 boxes: a few face points may flip
        total += len(xyz)
        target = xyz[marked] + votes[marked, 1:4]
        dist = np.linalg.norm(target[:, None, :] - boxes[None, :, :3], axis=2).min(axis=1)
        assert dist.max() < 1e-5, frame
    assert agree["ours"] > total - 20
    assert agree["yaw_flipped"] < total - 50_000 and agree["lw_swapped"] < total - 50_000


def test_no_box_scene_collates_and_augments(real20: Path) -> None:
    from fusebench.datasets.collate import collate

    ds = _ds(real20, split="train", num_points=256, augment=True)
    empty = ds[TRAIN_FRAMES.index(5052)]
    assert tuple(empty["target"]["boxes"].shape) == (0, 7) and tuple(empty["target"]["labels"].shape) == (0,)
    assert "augmentation" in empty["meta"]
    batch = collate([ds[0], empty], ["points", "color", "height"])
    assert batch["modalities"]["points"].shape == (2, 256, 3)
    assert [tuple(t["boxes"].shape) for t in batch["target"]] == [(8, 7), (0, 7)]


# ---------------------------------------------------------------------------------------------
# bad input in this layout (copies of two real frames)
# ---------------------------------------------------------------------------------------------
@pytest.fixture()
def two_frames(real20: Path, tmp_path: Path) -> Path:
    root = tmp_path / "votes"
    for d, frame in ((TRAIN_DIR, 5051), (VAL_DIR, 1), (TRAIN_DIR, 5052)):
        (root / d).mkdir(parents=True, exist_ok=True)
        for suffix in ("_pc.npz", "_bbox.npy"):
            shutil.copy(real20 / d / f"{frame:06d}{suffix}", root / d / f"{frame:06d}{suffix}")
    return root


@pytest.mark.parametrize("content,match", [
    (np.zeros((2, 7)), r"expected a \[K, 8\] array .* got shape \(2, 7\)"),
    (np.array([[0, 0, 0, 1, 1, 1, 0, np.nan]]), r"NaN or Inf in box rows \[0\]"),
    (np.array([[0, 0, 0, 1, 1, 1, 0, 10.0]]), r"row 0: class id 10 is not an integer in 0\.\.9"),
    (np.array([[0, 0, 0, 1, 1, 1, 0, 0], [0, 0, 0, 1, 1, 1, 0, 2.5]]), r"row 1: class id 2\.5 is not"),
    (np.array([[0, 0, 0, 1, -1, 1, 0, 3]]), r"row 0: negative half-size in \[1\.0, -1\.0, 1\.0\]: expected non-negative"),
    (np.array(["a", "b"]), r"expected a numeric \[K, 8\] array, got a <U1 array"),
])
def test_bad_bbox_file(two_frames: Path, content, match) -> None:
    f = two_frames / VAL_DIR / "000001_bbox.npy"
    np.save(f, content)
    ds = _ds(two_frames, split="test")
    with pytest.raises(DatasetError, match=r"000001_bbox\.npy.*" + match):
        ds[0]


def test_empty_and_truncated_bbox_files(two_frames: Path) -> None:
    f = two_frames / VAL_DIR / "000001_bbox.npy"
    np.save(f, np.array([]))  # np.array([]) of an empty object list: shape (0,)
    assert tuple(_ds(two_frames, split="test")[0]["target"]["boxes"].shape) == (0, 7)
    f.write_bytes(f.read_bytes()[:20])
    with pytest.raises(DatasetError, match=r"000001_bbox\.npy: not a readable \.npy box file"):
        _ds(two_frames, split="test")[0]


def test_missing_or_misnamed_files(two_frames: Path) -> None:
    (two_frames / VAL_DIR / "000001_bbox.npy").unlink()
    with pytest.raises(DatasetNotFoundError, match=r"missing box file .*000001_bbox\.npy"):
        _ds(two_frames, split="test")
    (two_frames / TRAIN_DIR / "005051_pc.npz").unlink()
    with pytest.raises(DatasetNotFoundError, match=r"missing point file .*005051_pc\.npz"):
        _ds(two_frames, split="train")
    (two_frames / TRAIN_DIR / "5052b_pc.npz").write_bytes(b"")
    with pytest.raises(DatasetError, match=r"5052b_pc\.npz: expected a file named NNNNNN_pc\.npz"):
        _ds(two_frames, split="train")
    with pytest.raises(DatasetError, match="points_source='depth' does not apply"):
        _ds(two_frames, split="test", points_source="depth")


def test_empty_folder_is_an_error(two_frames: Path) -> None:
    for p in (two_frames / VAL_DIR).iterdir():
        p.unlink()
    with pytest.raises(DatasetError, match=r"split 'test' is empty.*sunrgbd_pc_bbox_votes_50k_v1_val"):
        _ds(two_frames, split="test")


def test_truncated_point_file(two_frames: Path) -> None:
    f = two_frames / VAL_DIR / "000001_pc.npz"
    f.write_bytes(f.read_bytes()[:1000])
    with pytest.raises(DatasetError, match=r"000001_pc\.npz"):
        _ds(two_frames, split="test")[0]


# ---------------------------------------------------------------------------------------------
# the real-data pipeline check
# ---------------------------------------------------------------------------------------------
def test_real20_spec_settings() -> None:
    """The spec is the documented pipeline check: v1 folders, train = the 10 train-folder frames,
    val = test = the official val folder, tiny model, 1 epoch per phase; notes say it ranks nothing."""
    spec = benchmarks.load("sunrgbd-det-real20")
    opts = spec.dataset.options
    assert spec.dataset.id == "sunrgbd" and opts["version"] == "v1" and opts["val_fraction"] == 0.0
    assert spec.dataset.val_split == "test" and spec.dataset.test_split == "test"
    assert spec.encoder.config["config"] == "tiny"
    assert spec.pretrain.epochs == 1 and spec.downstream.epochs == 1
    notes = " ".join(spec.protocol_notes.values())
    assert "pipeline check" in notes and "20 real" in notes and "ranks nothing" in notes
    # sunrgbd-det with the --set overrides documented in docs/datasets/sunrgbd.md resolves to the same
    # data and model settings
    sets = ["dataset.options.version=v1", "dataset.options.val_fraction=0", "dataset.val_split=test",
            "dataset.options.num_points=1024", "encoder.config={config: tiny, fusion: late}",
            "downstream.epochs=1"]  # one epoch: nothing chosen on the shared val / test split (more is refused)
    from fusebench.spec.config import parse_override

    det = benchmarks.load("sunrgbd-det", overrides=dict(parse_override(s) for s in sets))
    assert det.dataset.val_split == spec.dataset.val_split
    assert {k: det.dataset.options[k] for k in ("version", "val_fraction", "num_points")} == \
        {k: opts[k] for k in ("version", "val_fraction", "num_points")}
    assert det.encoder == spec.encoder


def test_real20_runs_end_to_end(real20: Path, tmp_path: Path) -> None:
    """none + m3g, seed 0, on the 20 real scenes: each cell writes run.json with finite metrics, a
    dataset record marked real (not synthetic) with 10 / 10 / 10 frames, finite loss curves."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        recs = fusebench.run("sunrgbd-det-real20", objective=["none", "m3g"], seeds=[0], out=tmp_path,
                             data_root=str(real20), progress=False)
    finally:
        torch.set_num_threads(before)
    for rec, objective in zip(recs, ["none", "m3g"]):
        assert rec.get("status") != "failed", f"{objective}: {rec.get('error')}\n{rec.get('traceback')}"
        path = tmp_path / "sunrgbd-det-real20" / objective / "seed0" / "run.json"
        assert path.is_file()
        on_disk = json.loads(path.read_text())
        assert math.isfinite(values_of(on_disk["metrics"])["map_0.25"]) and 0.0 <= values_of(on_disk["metrics"])["map_0.25"] <= 1.0
        assert all(math.isfinite(values_of(on_disk["metrics"])[m]) for m in ("map_0.50", "mar_0.25"))
        ds = on_disk["dataset"]
        assert ds["synthetic"] is False and ds["manifest_hash"] != "synthetic" and ds["id"] == "sunrgbd"
        assert Path(ds["root"]).resolve() == real20.resolve()
        assert on_disk["config"]["dataset"]["options"]["version"] == "v1"
        assert "ranks nothing" in on_disk["config"]["protocol_notes"]["scale"]
        curves = on_disk["curves"]
        assert curves["downstream_loss"] and all(math.isfinite(x) for x in curves["downstream_loss"])
        assert len(curves["downstream_loss"]) == 2  # 10 train frames in batches of 5, one epoch
        if objective == "m3g":
            assert len(curves["pretrain_loss"]) == 2 and all(math.isfinite(x) for x in curves["pretrain_loss"])
        else:
            assert "pretrain_loss" not in curves
