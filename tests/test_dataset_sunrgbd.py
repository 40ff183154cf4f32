"""Tests of the ``sunrgbd`` adapter and ``fusebench.datasets.pointcloud`` on the real fixture frames
(``sunrgbd/`` of the fixtures folder) and on the synthetic twin.

Expected values are computed here independently: label lines parsed by hand, the raw ``.mat`` read
with scipy, points-in-box tested with explicit loops.
"""

from __future__ import annotations

import math
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
import scipy.io
import torch

from fusebench.datasets import DatasetError, DatasetNotFoundError, SyntheticSpec, build
from fusebench.datasets import pointcloud as pc
from fusebench.datasets import safe_pickle, sunrgbd
from fusebench.datasets.collate import collate

VOTENET = ["bed", "table", "sofa", "chair", "toilet", "desk", "dresser", "night_stand", "bookshelf", "bathtub"]


@pytest.fixture(scope="module")
def v0_root(fixtures_dir: Path) -> Path:
    return fixtures_dir / "sunrgbd" / "mmdet3d_v0_trainval"


@pytest.fixture(scope="module")
def v2_root(fixtures_dir: Path) -> Path:
    return fixtures_dir / "sunrgbd" / "mmdet3d_tests"


def _ds(root: Path, **kw):
    kw.setdefault("use_cache", False)
    kw.setdefault("augment", False)
    kw.setdefault("val_fraction", 0.0)
    return build("sunrgbd", root=root, **kw)


def _hand_boxes(label_file: Path) -> tuple[np.ndarray, list[int]]:
    """Parse a label file by hand: fields 5..7 centre, 8..10 half-sizes (c1, c2, c3), 11..12 heading."""
    boxes, labels = [], []
    for line in label_file.read_text().splitlines():
        f = line.split()
        if not f or f[0] not in VOTENET:
            continue
        cx, cy, cz = float(f[5]), float(f[6]), float(f[7])
        c1, c2, c3 = float(f[8]), float(f[9]), float(f[10])
        yaw = math.atan2(float(f[12]), float(f[11]))
        boxes.append([cx, cy, cz, 2 * c2, 2 * c1, 2 * c3, yaw])
        labels.append(VOTENET.index(f[0]))
    return np.array(boxes), labels


def _inside_loop(p, box) -> bool:
    """Independent point-in-rotated-box test (plain Python): express p in the box frame."""
    dx, dy = p[0] - box[0], p[1] - box[1]
    c, s = math.cos(box[6]), math.sin(box[6])
    u = c * dx + s * dy  # along the heading axis
    v = -s * dx + c * dy
    w = p[2] - box[2]
    return abs(u) <= box[3] / 2 and abs(v) <= box[4] / 2 and abs(w) <= box[5] / 2


def _angle_diff(a, b):
    return np.abs((np.asarray(a) - np.asarray(b) + np.pi) % (2 * np.pi) - np.pi)


# ---------------------------------------------------------------------------------------------
# real fixtures
# ---------------------------------------------------------------------------------------------
def test_frame1_values_from_extracted_layout(v0_root: Path) -> None:
    ds = _ds(v0_root, split="train")
    assert [r.frame for r in ds.samples] == [1, 2]
    s = ds[0]
    assert s["meta"]["id"] == "000001"
    assert s["meta"]["num_raw_points"] == 280961
    assert s["meta"]["layout"] == "votenet_extracted"
    # boxes of frame 1, computed here from the text (bed, night_stand, dresser; lamp etc. dropped)
    expected, labels = _hand_boxes(v0_root / "label" / "000001.txt")
    assert labels == [0, 7, 6]
    got = s["target"]["boxes"].numpy()
    assert got.shape == (3, 7) and s["target"]["boxes"].dtype == torch.float32
    np.testing.assert_allclose(got, expected, atol=1e-5)
    # concrete numbers of the bed: centre from the file, dx = 2 * 1.151035, dy = 2 * 0.943792
    np.testing.assert_allclose(got[0, :6], [1.047307, 4.168696, -0.246859, 2.30207, 1.887584, 1.969614], atol=1e-5)
    assert s["target"]["labels"].tolist() == [0, 7, 6] and s["target"]["labels"].dtype == torch.int64
    np.testing.assert_allclose(s["meta"]["K"], [[529.5, 0, 365], [0, 529.5, 265], [0, 0, 1]])
    np.testing.assert_allclose(s["meta"]["Rtilt"][0], [0.97959, 0.012593, -0.20061])
    # shapes of the three modalities at the default fixed point count
    assert s["modalities"]["points"].shape == (20000, 3)
    assert s["modalities"]["color"].shape == (20000, 3)
    assert s["modalities"]["height"].shape == (20000, 1)


def test_label_v1_version(v0_root: Path) -> None:
    s = _ds(v0_root, split="train", version="v1", num_points=64)[0]
    expected, labels = _hand_boxes(v0_root / "label_v1" / "000001.txt")
    assert labels == [0, 7, 6]
    np.testing.assert_allclose(s["target"]["boxes"].numpy(), expected, atol=1e-5)
    assert s["target"]["boxes"][1, 0].item() == pytest.approx(2.431818, abs=1e-6)  # v1 night_stand


def test_same_boxes_from_three_layouts(v0_root: Path, v2_root: Path) -> None:
    a = _ds(v0_root, split="train", num_points=32)[0]
    b = _ds(v0_root, split="train", num_points=32, info_file="sunrgbd_infos_train.pkl")[0]
    c = _ds(v2_root, split="train", num_points=32, info_file="sunrgbd_infos.pkl")[0]
    assert b["meta"]["layout"] == "mmdet3d_infos_v0" and c["meta"]["layout"] == "mmdet3d_infos_v2"
    for other in (b, c):
        assert other["meta"]["id"] == "000001"
        assert other["target"]["labels"].tolist() == [0, 7, 6]
        ba, bo = a["target"]["boxes"].numpy(), other["target"]["boxes"].numpy()
        np.testing.assert_allclose(bo[:, :6], ba[:, :6], atol=1e-5)
        assert _angle_diff(bo[:, 6], ba[:, 6]).max() < 1e-5
    # the raw v0 pickle stores the opposite yaw sign (clockwise): read it by hand to be sure
    raw = safe_pickle.load(v0_root / "sunrgbd_infos_train.pkl")
    np.testing.assert_allclose(raw[0]["annos"]["gt_boxes_upright_depth"][:, 6], -a["target"]["boxes"][:, 6].numpy(), atol=1e-5)


def test_box_convention_fits_the_real_points(v0_root: Path) -> None:
    """Frame 2's bed: our reading of c1/c2 and the yaw sign encloses clearly more of the cloud."""
    cloud = scipy.io.loadmat(str(v0_root / "depth" / "000002.mat"))["instance"][:, :3].astype(np.float64)
    box = _ds(v0_root, split="train", num_points=32)[1]["target"]["boxes"][0].double().numpy()

    def count(b):
        d = cloud - b[:3]
        c, s = np.cos(b[6]), np.sin(b[6])
        u, v = c * d[:, 0] + s * d[:, 1], -s * d[:, 0] + c * d[:, 1]
        return int(((np.abs(u) <= b[3] / 2) & (np.abs(v) <= b[4] / 2) & (np.abs(d[:, 2]) <= b[5] / 2)).sum())

    flipped = box.copy(); flipped[6] = -box[6]
    swapped = box.copy(); swapped[3], swapped[4] = box[4], box[3]
    ours = count(box)
    assert ours > 100_000
    assert ours > 1.3 * count(flipped) and ours > 1.3 * count(swapped)


def test_points_bin_and_sampling_with_replacement(v0_root: Path, v2_root: Path) -> None:
    raw = np.fromfile(v2_root / "points" / "000001.bin", dtype="<f4").reshape(-1, 6)
    assert raw.shape == (100, 6)
    full = _ds(v2_root, split="train", num_points=None, info_file="sunrgbd_infos.pkl")[0]
    np.testing.assert_array_equal(full["modalities"]["points"].numpy(), raw[:, :3])
    np.testing.assert_array_equal(full["modalities"]["color"].numpy(), raw[:, 3:])
    up = _ds(v2_root, split="train", num_points=256, info_file="sunrgbd_infos.pkl")[0]
    pts = up["modalities"]["points"].numpy()
    assert pts.shape == (256, 3)
    rows = {tuple(r) for r in pts.tolist()}
    assert rows == {tuple(r) for r in raw[:, :3].tolist()}  # every raw point kept, the rest duplicates
    # the mmdet3d test points are a subsample of the full-resolution frame
    mat = scipy.io.loadmat(str(v0_root / "depth" / "000001.mat"))["instance"]
    mat_rows = {tuple(r) for r in mat.tolist()}
    assert all(tuple(r) in mat_rows for r in raw.tolist())


def test_height_feature_and_fixed_count(v0_root: Path) -> None:
    raw = scipy.io.loadmat(str(v0_root / "depth" / "000001.mat"))["instance"]
    floor = np.percentile(raw[:, 2].astype(np.float64), 0.99)
    assert -1.3 < floor < -1.1  # the camera is ~1.2 m above the floor
    s = _ds(v0_root, split="train", num_points=5000)[0]
    xyz, h, col = (s["modalities"][k].numpy() for k in ("points", "height", "color"))
    assert xyz.shape == (5000, 3)
    np.testing.assert_allclose(h[:, 0], xyz[:, 2] - floor, atol=1e-5)
    assert abs(np.percentile(h, 0.99)) < 0.03  # ~0 at the floor
    assert (h > -0.5).all() and h.max() > 2.0
    # sampled without replacement from the raw cloud: distinct raw rows, with their colours
    raw_rows = {tuple(r) for r in raw.tolist()}
    got = np.concatenate([xyz, col], axis=1)
    assert all(tuple(r) in raw_rows for r in got[:500].tolist())
    assert len(np.unique(got, axis=0)) == 5000
    # deterministic for a given seed, different for another seed
    again = _ds(v0_root, split="train", num_points=5000)[0]
    assert torch.equal(again["modalities"]["points"], s["modalities"]["points"])
    other = _ds(v0_root, split="train", num_points=5000, seed=1)[0]
    assert not torch.equal(other["modalities"]["points"], s["modalities"]["points"])


def test_augmentation_deterministic_and_consistent(v0_root: Path) -> None:
    plain = _ds(v0_root, split="train", num_points=3000)[0]
    flips = set()
    for seed in range(8):
        ds = _ds(v0_root, split="train", num_points=3000, augment=True, seed=seed)
        ref = _ds(v0_root, split="train", num_points=3000, seed=seed)[0]
        a, b = ds[0], ds[0]
        assert torch.equal(a["modalities"]["points"], b["modalities"]["points"])
        assert torch.equal(a["target"]["boxes"], b["target"]["boxes"])
        ds.set_epoch(1)
        assert not torch.equal(ds[0]["modalities"]["points"], a["modalities"]["points"])
        aug = a["meta"]["augmentation"]
        flips.add(aug["flip"])
        assert abs(aug["rotation_rad"]) <= math.pi / 6 and 0.85 <= aug["scale"] <= 1.15
        # the transform, written out: x' = s * Rz(t) * F * x
        f = np.diag([-1.0 if aug["flip"] else 1.0, 1.0, 1.0])
        t, sc = aug["rotation_rad"], aug["scale"]
        rz = np.array([[math.cos(t), -math.sin(t), 0], [math.sin(t), math.cos(t), 0], [0, 0, 1]])
        x0 = ref["modalities"]["points"].double().numpy()
        np.testing.assert_allclose(a["modalities"]["points"].numpy(), sc * x0 @ (rz @ f).T, atol=1e-4)
        np.testing.assert_allclose(a["modalities"]["height"].numpy(), sc * ref["modalities"]["height"].numpy(), atol=1e-5)
        np.testing.assert_allclose(a["target"]["boxes"][:, 3:6].numpy(), sc * ref["target"]["boxes"][:, 3:6].numpy(), atol=1e-5)
        # membership: a point inside a box before is inside the transformed box after, and vice versa
        b0, b1 = ref["target"]["boxes"].double().numpy(), a["target"]["boxes"].double().numpy()
        p0, p1 = x0, a["modalities"]["points"].double().numpy()
        n_in = 0
        for g in range(len(b0)):
            near = np.flatnonzero(np.linalg.norm(p0[:, :2] - b0[g, :2], axis=1) < 0.6 * np.hypot(b0[g, 3], b0[g, 4]) + 0.1)
            for n in near:
                before = _inside_loop(p0[n], b0[g])
                after = _inside_loop(p1[n], b1[g])
                # points within 1e-4 m of a face may switch by float rounding; none do here
                assert before == after, (seed, g, n)
                n_in += before
        assert n_in > 100
    assert flips == {True, False}
    assert torch.equal(plain["modalities"]["points"], _ds(v0_root, split="train", num_points=3000)[0]["modalities"]["points"])


def test_splits(v0_root: Path) -> None:
    test = _ds(v0_root, split="test")
    assert [r.frame for r in test.samples] == [3, 4]  # official val = our test
    tr = _ds(v0_root, split="train", val_fraction=0.5)
    va = _ds(v0_root, split="val", val_fraction=0.5)
    assert len(tr) == 1 and len(va) == 1
    assert {tr.samples[0].frame, va.samples[0].frame} == {1, 2}
    # augmentation defaults: on for train only
    kw = dict(root=v0_root, use_cache=False, val_fraction=0.5)
    assert build("sunrgbd", split="train", **kw).augment
    assert not build("sunrgbd", split="val", **kw).augment and not build("sunrgbd", split="test", **kw).augment
    # the files a cache manifest must hash: the listing and the frames' point/label/calib files
    assert sorted(p.name for p in test.source_files()) == sorted(
        ["val_data_idx.txt", "000003.mat", "000003.txt", "000003.txt", "000004.mat", "000004.txt", "000004.txt"])
    v = _ds(v0_root, split="test", info_file="sunrgbd_infos_val.pkl")
    s = v[0]
    assert s["meta"]["id"] == "000003" and s["target"]["labels"].tolist() == [0, 7, 6]
    assert s["meta"]["num_raw_points"] == 50000  # the lidar/*.npz subsample is preferred for infos


def test_collate_batch(v0_root: Path) -> None:
    ds = _ds(v0_root, split="train", num_points=1000)
    batch = collate([ds[0], ds[1]], names=["points", "color", "height"])
    assert batch["modalities"]["points"].shape == (2, 1000, 3)
    assert batch["modalities"]["height"].shape == (2, 1000, 1)
    assert [t["labels"].tolist() for t in batch["target"]] == [[0, 7, 6], [0, 7]]


# ---------------------------------------------------------------------------------------------
# pointcloud utilities
# ---------------------------------------------------------------------------------------------
def test_points_in_boxes_and_corners_against_loops() -> None:
    rng = np.random.default_rng(0)
    boxes = np.array([[0.3, -0.2, 0.5, 2.0, 0.6, 1.0, 0.7], [-1.0, 1.0, 0.2, 0.5, 1.5, 0.4, -2.5]])
    pts = rng.uniform(-2, 2, (400, 3))
    mask = pc.points_in_boxes(torch.from_numpy(pts), torch.from_numpy(boxes)).numpy()
    for n in range(len(pts)):
        for g in range(2):
            assert mask[n, g] == _inside_loop(pts[n], boxes[g])
    assert mask.any(axis=0).all()
    corners = pc.box_corners(torch.from_numpy(boxes)).numpy()
    # the first corner is local (+dx/2, +dy/2, -dz/2) rotated by yaw
    b = boxes[0]
    c, s = math.cos(b[6]), math.sin(b[6])
    want = [b[0] + c * b[3] / 2 - s * b[4] / 2, b[1] + s * b[3] / 2 + c * b[4] / 2, b[2] - b[5] / 2]
    np.testing.assert_allclose(corners[0, 0], want)
    assert all(_inside_loop(p * 0.999 + b[:3] * 0.001, b) for p in corners[0])


def test_sample_indices() -> None:
    idx = pc.sample_indices(10, 4, np.random.default_rng(0))
    assert len(set(idx.tolist())) == 4
    idx = pc.sample_indices(3, 7, np.random.default_rng(0))
    assert sorted(set(idx.tolist())) == [0, 1, 2] and len(idx) == 7
    with pytest.raises(ValueError, match="empty"):
        pc.sample_indices(0, 5, np.random.default_rng(0))


def test_voxel_downsample_numpy_by_hand() -> None:
    xyz = np.array([[0.0, 0, 0], [0.04, 0, 0], [0.2, 0, 0], [0.21, 0.01, 0]])
    col = np.array([[1.0, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 1]])
    # origin = min - 0.05 -> voxel index floor((x + 0.05) / 0.1): {0, 0, 2, 2}
    out, oc = pc.voxel_downsample(xyz, col, 0.1)
    np.testing.assert_allclose(out, [[0.02, 0, 0], [0.205, 0.005, 0]])
    np.testing.assert_allclose(oc, [[0.5, 0.5, 0], [0.5, 0.5, 1]])


def test_open3d_voxel_and_ply(tmp_path: Path) -> None:
    pytest.importorskip("open3d")
    rng = np.random.default_rng(1)
    xyz = rng.uniform(0, 1, (2000, 3))
    col = rng.uniform(0, 1, (2000, 3))
    a, ac = pc.voxel_downsample(xyz, col, 0.13, backend="numpy")
    b, bc = pc.voxel_downsample(xyz, col, 0.13, backend="open3d")
    np.testing.assert_allclose(a, b, atol=1e-9)
    np.testing.assert_allclose(ac, bc, atol=1e-9)
    cloud = np.concatenate([xyz, col], axis=1).astype(np.float32)
    pc.write_point_file(tmp_path / "x.ply", cloud)
    back = pc.read_point_file(tmp_path / "x.ply")
    np.testing.assert_allclose(back[:, :3], cloud[:, :3], atol=1e-6)
    np.testing.assert_allclose(back[:, 3:], cloud[:, 3:], atol=0.5 / 255 + 1e-6)  # ply colours are uint8


# ---------------------------------------------------------------------------------------------
# synthetic twin
# ---------------------------------------------------------------------------------------------
SPEC = {"num_samples": 4, "seed": 3, "options": {"points_per_scene": 3000}}


def test_synthetic_twin_roundtrip(tmp_path: Path) -> None:
    ds = build("sunrgbd", root=tmp_path, synthetic=True, synthetic_spec=SPEC, split="train",
               val_fraction=0.0, use_cache=False, augment=False, num_points=2000)
    assert len(ds) == 3 and len(build("sunrgbd", root=tmp_path, synthetic=True, synthetic_spec=SPEC,
                                       split="test", use_cache=False)) == 1
    spec = SyntheticSpec(**SPEC)
    for i in range(len(ds)):
        s = ds[i]
        cloud, objects, floor_z = sunrgbd.synthetic_scene(i + 1, spec)
        keep = [(n, b) for n, b in objects if n in VOTENET]
        assert s["target"]["labels"].tolist() == [VOTENET.index(n) for n, _ in keep]
        np.testing.assert_allclose(s["target"]["boxes"].numpy(), np.stack([b for _, b in keep]), atol=2e-6)
        assert s["meta"]["num_raw_points"] == len(cloud)
        boxes = s["target"]["boxes"].double().numpy()
        # boxes stand on the floor: bottom face at the floor; height ~0 there
        np.testing.assert_allclose(boxes[:, 2] - boxes[:, 5] / 2, floor_z, atol=1e-5)
        assert abs(s["meta"]["floor_z"] - floor_z) < 0.03
        # points inside a box carry its class colour (informativeness 1)
        xyz, col = s["modalities"]["points"].numpy(), s["modalities"]["color"].numpy()
        for (name, _), b in zip(keep, boxes):
            inside = np.array([_inside_loop(p, b) for p in xyz])
            assert inside.sum() > 10
            np.testing.assert_allclose(col[inside].mean(axis=0), sunrgbd.PALETTE[name], atol=0.08)
        # every label line of the written file has 13 fields
        lines = (ds.root / "label" / f"{i + 1:06d}.txt").read_text().splitlines()
        assert all(len(line.split()) == 13 for line in lines)
    s2 = build("sunrgbd", root=tmp_path, synthetic=True, synthetic_spec=SPEC, split="train", val_fraction=0.0,
               use_cache=False, augment=False, num_points=2000)[0]
    assert torch.equal(s2["modalities"]["points"], ds[0]["modalities"]["points"])


def test_synthetic_informativeness(tmp_path: Path) -> None:
    spec = dict(SPEC, informativeness={"color": 0.0, "height": 0.0})
    s = build("sunrgbd", root=tmp_path, synthetic=True, synthetic_spec=spec, split="train", val_fraction=0.0,
              use_cache=False, augment=False, num_points=None)[0]
    _, objects, floor_z = sunrgbd.synthetic_scene(1, SyntheticSpec(**spec))
    name, box = next((n, b) for n, b in objects if n in VOTENET)
    xyz, col = s["modalities"]["points"].numpy(), s["modalities"]["color"].numpy()
    inside = np.array([_inside_loop(p, box) for p in xyz])
    # colour no longer tells the class: mean colour ~ uniform noise (0.5), not the palette colour
    np.testing.assert_allclose(col[inside].mean(axis=0), 0.5, atol=0.08)
    # height: points below the floor displace the 0.99th-percentile floor estimate
    assert (xyz[:, 2] < floor_z - 0.05).sum() > 0.02 * len(xyz)


# ---------------------------------------------------------------------------------------------
# bad input
# ---------------------------------------------------------------------------------------------
@pytest.fixture()
def synth_copy(tmp_path: Path) -> Path:
    src = build("sunrgbd", root=tmp_path / "base", synthetic=True, synthetic_spec=SPEC, use_cache=False).root
    dst = tmp_path / "copy"
    shutil.copytree(src, dst)
    return dst


def test_truncated_mat(synth_copy: Path) -> None:
    f = synth_copy / "depth" / "000001.mat"
    f.write_bytes(f.read_bytes()[:2000])
    ds = _ds(synth_copy, split="train")
    with pytest.raises(DatasetError, match="000001.mat"):
        ds[0]
    f.write_bytes(b"garbage" * 100)
    with pytest.raises(DatasetError, match="000001.mat"):
        ds[0]
    scipy.io.savemat(str(f), {"points": np.zeros((5, 6), np.float32)})
    with pytest.raises(DatasetError, match="no variable 'instance'"):
        ds[0]


def test_bad_label_line(synth_copy: Path) -> None:
    f = synth_copy / "label" / "000002.txt"
    lines = f.read_text().splitlines()
    lines[1] = " ".join(lines[1].split()[:12])
    f.write_text("\n".join(lines) + "\n")
    ds = _ds(synth_copy, split="train")
    ds[0]
    with pytest.raises(DatasetError, match=r"000002\.txt, line 2: expected 13 .* got 12"):
        ds[1]


def test_missing_files(synth_copy: Path, tmp_path: Path) -> None:
    (synth_copy / "depth" / "000002.mat").unlink()
    with pytest.raises(DatasetNotFoundError, match=r"depth/000002\.mat"):
        _ds(synth_copy, split="train")
    (synth_copy / "label" / "000001.txt").unlink()
    with pytest.raises(DatasetNotFoundError, match=r"label/000001\.txt"):
        _ds(synth_copy, split="train")
    with pytest.raises(DatasetNotFoundError, match="train_data_idx.txt"):
        _ds(tmp_path, split="train")
    with pytest.raises(DatasetNotFoundError, match="does not exist"):
        _ds(tmp_path / "nope", split="train")
    with pytest.raises(DatasetError, match="unknown options"):
        _ds(synth_copy, split="test", num_point=5)


def test_nan_points(synth_copy: Path) -> None:
    f = synth_copy / "depth" / "000001.mat"
    cloud = scipy.io.loadmat(str(f))["instance"]
    cloud[7, 1] = np.nan
    scipy.io.savemat(str(f), {"instance": cloud})
    with pytest.raises(DatasetError, match=r"000001\.mat: 1 points contain NaN"):
        _ds(synth_copy, split="train")[0]


def test_bad_info_pickles(synth_copy: Path) -> None:
    p = synth_copy / "bad.pkl"
    p.write_bytes(pickle.dumps({"frames": []}))
    with pytest.raises(DatasetError, match="data_list"):
        _ds(synth_copy, split="train", info_file="bad.pkl")
    p.write_bytes(pickle.dumps([{"annos": {"gt_num": 0}}]))
    with pytest.raises(DatasetError, match="info entry 0 lacks key 'point_cloud'"):
        _ds(synth_copy, split="train", info_file="bad.pkl")
    p.write_bytes(pickle.dumps({"data_list": [{"lidar_points": {"lidar_path": "000001.bin"},
                                               "instances": [{"bbox_3d": [0, 0, 0, 1, 1, float("nan"), 0], "bbox_label_3d": 0}]}]}))
    with pytest.raises(DatasetError, match="bbox_3d must be 7 finite"):
        _ds(synth_copy, split="train", info_file="bad.pkl")
    p.write_bytes(pickle.dumps(Path("x")))  # a class outside the allowlist
    with pytest.raises(DatasetError, match="refused"):
        _ds(synth_copy, split="train", info_file="bad.pkl")


def test_empty_split_listing_is_an_error(synth_copy: Path) -> None:
    """An empty ``val_data_idx.txt`` (the official val frames = our test split) is an error naming the
    file, not an empty test set; so is an empty info pickle and a val split that val_fraction leaves empty."""
    ok = _ds(synth_copy, split="test")
    assert len(ok) >= 1
    (synth_copy / "val_data_idx.txt").write_text("\n")
    with pytest.raises(DatasetError, match=r"split 'test' is empty.*val_data_idx\.txt"):
        _ds(synth_copy, split="test")
    assert len(_ds(synth_copy, split="test", allow_empty=True)) == 0  # asked for on purpose
    (synth_copy / "train_data_idx.txt").write_text("")
    with pytest.raises(DatasetError, match=r"split 'train' is empty.*train_data_idx\.txt"):
        _ds(synth_copy, split="train", val_fraction=0.5)
    (synth_copy / "empty.pkl").write_bytes(pickle.dumps([]))
    with pytest.raises(DatasetError, match=r"split 'test' is empty.*empty\.pkl"):
        _ds(synth_copy, split="test", layout="infos", info_file="empty.pkl")


def test_val_fraction_zero_leaves_val_empty_error(synth_copy: Path) -> None:
    train = _ds(synth_copy, split="train", val_fraction=0.0)
    assert len(train) == len(sunrgbd.read_index_file(synth_copy / "train_data_idx.txt"))
    with pytest.raises(DatasetError, match=r"split 'val' is empty.*val_fraction"):
        _ds(synth_copy, split="val", val_fraction=0.0)


def _copy_real(v0_root: Path, tmp_path: Path) -> Path:
    root = tmp_path / "sun"
    shutil.copytree(v0_root, root)
    return root


def test_frame_listed_twice_or_in_both_official_lists_is_an_error(v0_root: Path, tmp_path: Path) -> None:
    """The real extracted frames (train_data_idx.txt 1, 2; val_data_idx.txt 3, 4). A frame listed twice in one
    list was read twice (the train split held frame 1 twice), and a frame in both lists was in the train and
    the test split at once; both are errors naming the list(s) and the frame."""
    root = _copy_real(v0_root, tmp_path)
    assert len(_ds(root, split="train")) == 2 and len(_ds(root, split="test")) == 2
    (root / "train_data_idx.txt").write_text("1\n2\n1\n")
    for split in ("train", "val"):
        with pytest.raises(DatasetError, match=r"train_data_idx\.txt lists 1 frame\(s\) more than once: "
                                               r"000001 \(2 times\)"):
            _ds(root, split=split, val_fraction=0.5)
    (root / "train_data_idx.txt").write_text("1\n2\n")
    (root / "val_data_idx.txt").write_text("2\n3\n4\n")
    for split in ("train", "test"):
        with pytest.raises(DatasetError, match=r"1 frame\(s\) are listed both in .*_data_idx\.txt .* and in "
                                               r".*_data_idx\.txt .*: 000002; .*leakage"):
            _ds(root, split=split)
    # an info pickle listing frame 1 twice (the real v0 train infos, first entry appended again)
    (root / "val_data_idx.txt").write_text("3\n4\n")
    infos = safe_pickle.load(root / "sunrgbd_infos_train.pkl")
    assert [i["point_cloud"]["lidar_idx"] for i in infos] == [1, 2]
    (root / "twice.pkl").write_bytes(pickle.dumps(infos + infos[:1]))
    with pytest.raises(DatasetError, match=r"twice\.pkl lists 1 frame\(s\) more than once: 000001 \(2 times\)"):
        _ds(root, split="train", layout="infos", info_file="twice.pkl")


@pytest.mark.parametrize("edit, expected", [
    (lambda info: info["calib"].update(K=np.arange(8.0)), r"info entry 0\.calib\.K must be 9 finite numbers .*shape \(8,\)"),
    (lambda info: info["calib"].update(K=np.full(9, np.nan)), r"info entry 0\.calib\.K must be 9 finite numbers .*NaN"),
    (lambda info: info["calib"].update(Rt=np.eye(2)), r"info entry 0\.calib\.Rt must be 9 finite numbers .*shape \(2, 2\)"),
    (lambda info: info["annos"].update({"class": np.array([0, 7, 16])}),
     r"info entry 0\.annos\.class holds 1 id\(s\) outside 0\.\.9 \(\[16\]\)"),
    (lambda info: info["annos"].update({"class": np.array([0.0, 7.5, 6.0])}),
     r"info entry 0\.annos\.class must hold integer class ids"),
])
def test_damaged_v0_info_calib_or_class_is_an_error(v0_root: Path, tmp_path: Path, edit, expected) -> None:
    """The real v0 train infos (frame 1: 3 boxes of classes bed 0, night_stand 7, dresser 6, and its calib).
    A K of 8 values was a raw numpy reshape error, a NaN K or Rt went into meta["K"] unchecked (the calib text
    file refuses both), an id outside 0..9 dropped its box silently and 7.5 was read as night_stand (7)."""
    root = _copy_real(v0_root, tmp_path)
    infos = safe_pickle.load(root / "sunrgbd_infos_train.pkl")
    assert infos[0]["point_cloud"]["lidar_idx"] == 1 and infos[0]["annos"]["class"].tolist() == [0, 7, 6]
    ok = _ds(root, split="train", layout="infos")
    k = next(ok[i]["meta"]["K"] for i in range(len(ok)) if ok[i]["meta"]["frame"] == 1)
    assert k == [[529.5, 0.0, 365.0], [0.0, 529.5, 265.0], [0.0, 0.0, 1.0]]  # PROVENANCE: column-major K
    edit(infos[0])
    (root / "sunrgbd_infos_train.pkl").write_bytes(pickle.dumps(infos))
    with pytest.raises(DatasetError, match=r"sunrgbd_infos_train\.pkl: " + expected):
        _ds(root, split="train", layout="infos")


@pytest.mark.parametrize("line, field", [(2, 10), (6, 9)])
def test_negative_half_size_in_label_line_is_an_error(v0_root: Path, tmp_path: Path, line, field) -> None:
    """The real label file of frame 1 (line 2 night_stand c1 c2 c3 = 0.441588 0.292586 0.486667, line 6 lamp
    0.321404 ...). The official extraction writes abs(coeffs), so a negative half-size was made positive with
    np.abs without a word, while VoteNet's _bbox.npy reader refused it; now both refuse, naming file, line and
    field, also on a line of a class that is dropped (lamp)."""
    root = _copy_real(v0_root, tmp_path)
    f = root / "label" / "000001.txt"
    lines = f.read_text().splitlines()
    fields = lines[line - 1].split()
    fields[field - 1] = "-" + fields[field - 1]
    lines[line - 1] = " ".join(fields)
    f.write_text("\n".join(lines) + "\n")
    ds = _ds(root, split="train")
    with pytest.raises(DatasetError, match=rf"label/000001\.txt, line {line}: field {field} \(half-size "
                                           rf"c{field - 8}\) is -0\.[0-9]+: expected a non-negative half-size"
                                           r" .*abs\(coeffs\)") as e:
        ds[0]
    assert len(e.value.args) == 1


def test_zero_half_size_is_kept_in_both_box_readers(v0_root: Path, tmp_path: Path, fixtures_dir: Path) -> None:
    """A zero half-size (a flat box) is taken as written by the label reader and VoteNet's _bbox.npy reader
    alike. Real frame 1, bed line c1 c2 c3 = 0.943792 1.151035 0.984807 with c3 set to 0 -> sizes
    2 * 1.151035, 2 * 0.943792, 0; real VoteNet frame 000001_bbox.npy row 0 with its h set to 0 -> dz 0."""
    root = _copy_real(v0_root, tmp_path)
    f = root / "label" / "000001.txt"
    lines = f.read_text().splitlines()
    assert lines[0].split()[10] == "0.984807"
    fields = lines[0].split()
    fields[10] = "0"
    lines[0] = " ".join(fields)
    f.write_text("\n".join(lines) + "\n")
    got = _ds(root, split="train")[0]["target"]["boxes"].numpy()
    np.testing.assert_allclose(got[0, 3:6], [2.30207, 1.887584, 0.0], atol=1e-6)
    src = fixtures_dir / "sunrgbd" / "votenet_real20" / "sunrgbd_pc_bbox_votes_50k_v1_val" / "000001_bbox.npy"
    arr = np.load(src)
    arr[0, 5] = 0.0
    np.save(tmp_path / "000001_bbox.npy", arr)
    boxes, _ = sunrgbd.read_votenet_bbox(tmp_path / "000001_bbox.npy")
    np.testing.assert_allclose(boxes[0, 3:6], [2 * arr[0, 3], 2 * arr[0, 4], 0.0], rtol=1e-6)
