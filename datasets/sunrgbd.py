"""``sunrgbd``: SUN RGB-D 3D object detection (Song et al., CVPR 2015) as used by VoteNet.

Reads the files the field publishes, as published:

(a) **VoteNet / mmdet3d v0 extracted frames** (``extract_rgbd_data_v2.m`` / ``_v1.m`` of VoteNet,
    copied by mmdet3d into ``sunrgbd_trainval/``): ``depth/NNNNNN.mat`` (variable ``instance``,
    ``[N, 6]`` float32 xyz + rgb in [0, 1] in the *upright depth* frame: x right, y forward, z up,
    metres), ``label/NNNNNN.txt`` (SUN RGB-D v2 boxes) or ``label_v1/`` (v1 boxes; option
    ``version="v1"``), ``calib/NNNNNN.txt`` (line 1: Rtilt, line 2: K, both 3x3 written
    column-major by MATLAB), ``train_data_idx.txt`` / ``val_data_idx.txt`` (one frame number per
    line) and optionally ``lidar/NNNNNN.npz`` (array ``pc``: VoteNet's 50k-point subsample).
(b) **mmdet3d v0 info pickles** ``sunrgbd_infos_{train,val}.pkl``: a list of per-frame dicts with
    ``point_cloud.lidar_idx``, ``calib.{K, Rt}`` and ``annos.{gt_num, name, class,
    gt_boxes_upright_depth}``; points from ``points/NNNNNN.bin`` (float32 ``[N, 6]``), else
    ``lidar/*.npz``, else ``depth/*.mat``.
(c) **mmdet3d >= 1.1 info pickles** (``{"metainfo", "data_list"}``): per frame
    ``lidar_points.lidar_path`` (under ``points/``) and ``instances[*].{bbox_3d, bbox_label_3d}``.
(d) **VoteNet's dumped training folders** (``sunrgbd_data.py`` of VoteNet):
    ``sunrgbd_pc_bbox_votes_50k_{v1,v2}_{train,val}/`` (the label version is part of the folder name:
    ``version`` picks it) holding per frame ``NNNNNN_pc.npz`` (array ``pc``, ``[50000, 6]`` float32
    xyz + rgb in [0, 1], upright depth frame), ``NNNNNN_bbox.npy`` (``[K, 8]``: ``cx cy cz``,
    *half*-sizes ``l w h``, VoteNet ``heading``, class id 0..9; ``[0, 8]`` when the frame holds none of
    the 10 classes) and ``NNNNNN_votes.npz`` (not read: the vote targets follow from the boxes).
    The ``_train`` folder is the official train pool, the ``_val`` folder the official val pool.

Pickles are read with :mod:`fusebench.datasets.safe_pickle` (allowlist unpickler).

**Box convention (one for all three layouts).** ``[cx, cy, cz, dx, dy, dz, yaw]`` in the upright
depth frame, *full* sizes, ``dx`` measured along the box's heading axis ``(cos yaw, sin yaw, 0)``,
``yaw`` counter-clockwise about +z from +x, wrapped to [-pi, pi). Derivation, from the fixture frame
000001 (see docs/datasets/sunrgbd.md for the numbers): a label line holds ``classname, x y w h
(2D box), cx cy cz, c1 c2 c3 (half-sizes), ox oy (heading vector)``. The v0 info of the same frame
stores ``gt_boxes_upright_depth = [cx, cy, cz, 2*c2, 2*c1, 2*c3, -atan2(oy, ox)]`` and the v2 info
``bbox_3d = [cx, cy, cz, 2*c2, 2*c1, 2*c3, +atan2(oy, ox)]``. So

* label line: ``dx = 2*c2``, ``dy = 2*c1``, ``dz = 2*c3``, ``yaw = atan2(oy, ox)``;
* v0 info: sizes as stored, ``yaw = -stored`` (v0 ``DepthInstance3DBoxes`` turned clockwise);
* v2 info: stored as is (mmdet3d >= 1.0 turned the depth-box yaw counter-clockwise).
* VoteNet ``_bbox.npy`` row ``[cx, cy, cz, l, w, h, heading, cls]``: VoteNet's ``SUNObject3d`` reads
  ``w = c1``, ``l = c2``, ``h = c3``, ``heading = -atan2(oy, ox)`` and dumps them un-doubled, so
  ``dx = 2*l``, ``dy = 2*w``, ``dz = 2*h``, ``yaw = -heading`` (VoteNet's corners use ``rotz(-heading)``
  with ``l`` along x). Frame 000001's ``_bbox.npy`` equals its ``label_v1/000001.txt`` read this way
  (a test checks it, and that the in-box points marked in ``_votes.npz`` lie in the boxes).

With this reading the heading axis (``c2`` half-extent) lies along ``(ox, oy)``, as in VoteNet's
``rotz(-heading)`` corner code; on the real point clouds it also captures the most points (e.g. the
bed of frame 000002: 106k points inside vs 69k with the yaw sign flipped and 66k with c1/c2
swapped; a test checks this).

**Classes.** The 10 VoteNet classes (:data:`CLASSES`, ids 0..9 in that order, as in the mmdet3d
infos); other SUN RGB-D names (``lamp``, ``ottoman``, ``dresser_mirror`` ...) are dropped.

**Splits.** SUN RGB-D's official test labels are not public; VoteNet reports on the official "val"
(5050 frames) - so ``test`` = official val. ``val`` is a declared validation split carved out of the
official train frames (``val_fraction``, default 0.1, fixed permutation seeded by ``val_seed``) and
``train`` is the rest; model selection must use ``val``, never ``test``.

**Sample.** Per-frame points are sampled to ``num_points`` (default 20 000; every point once plus
duplicates when the frame has fewer; ``num_points=None`` keeps all) with a generator seeded by
``(seed, frame)``, so un-augmented samples are deterministic. Optional voxel-grid averaging first
(``voxel_size`` metres, ``voxel_backend`` "numpy" or "open3d").

Shape:
    ``modalities["points"]``: ``[N, 3]`` float32 xyz (metres);
    ``modalities["color"]``: ``[N, 3]`` float32 rgb in [0, 1];
    ``modalities["height"]``: ``[N, 1]`` float32, ``z - np.percentile(z_all, 0.99)`` (VoteNet's floor
    estimate: the 0.99th percentile of the frame's z, computed before sampling);
    ``target["boxes"]``: ``[G, 7]`` float32; ``target["labels"]``: ``[G]`` int64 in 0..9.

**Train augmentation** (VoteNet, Qi et al. ICCV 2019, Sec. 5.1), seeded per sample by the base
class: flip about the YZ plane with p = 0.5 (``x -> -x``, ``yaw -> pi - yaw``), rotation about z by
U(-30, 30) degrees (``yaw -> yaw + angle``), isotropic scale U(0.85, 1.15) (points, centres, sizes and
the height feature scaled). The drawn values are recorded in ``meta["augmentation"]``.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fusebench.datasets import DATASETS

from . import pointcloud as pc
from .base import DataFile, DatasetError, DatasetNotFoundError, Modality, MultimodalDataset, SyntheticSpec

log = logging.getLogger(__name__)

#: the 10 VoteNet / mmdet3d SUN RGB-D classes; label id = position
CLASSES = ("bed", "table", "sofa", "chair", "toilet", "desk", "dresser", "night_stand", "bookshelf", "bathtub")
CLASS_TO_ID = {c: i for i, c in enumerate(CLASSES)}
LABEL_FIELDS = 13
LAYOUTS = ("auto", "extracted", "infos", "pc_bbox_votes")
#: VoteNet's dumped folder of one official pool ("train"/"val") and label version ("v1"/"v2")
VOTES_DIR = "sunrgbd_pc_bbox_votes_50k_{version}_{pool}"
BBOX_FIELDS = 8
POINT_SOURCES = ("auto", "depth", "lidar", "bin", "ply", "pcd")
OPTIONS = ("num_points", "version", "layout", "info_file", "points_source", "val_fraction", "val_seed",
           "voxel_size", "voxel_backend", "use_cache")
FLIP_P = 0.5
ROT_RANGE_RAD = math.pi / 6
SCALE_RANGE = (0.85, 1.15)
IMAGE_W, IMAGE_H = 730, 530
SUN_K = np.array([[529.5, 0.0, 365.0], [0.0, 529.5, 265.0], [0.0, 0.0, 1.0]])


# --------------------------------------------------------------------------------------------
# readers of the individual files
# --------------------------------------------------------------------------------------------
def parse_label_file(path: Path) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """All objects of a VoteNet label file: ``(classname, box [7] in our convention, box2d [4] as
    x, y, w, h)``. Raises :class:`DatasetError` naming the file and line on malformed lines."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        raise DatasetNotFoundError(f"missing label file {path}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise DatasetError(f"{path}: cannot read label file ({e})") from None
    out = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        fields = line.split()
        if not fields:
            continue
        if len(fields) != LABEL_FIELDS:
            raise DatasetError(
                f"{path}, line {lineno}: expected {LABEL_FIELDS} space-separated fields (classname, 2D box "
                f"x y w h, centroid x y z, half-sizes c1 c2 c3, heading ox oy), got {len(fields)}: {line!r}"
            )
        try:
            v = np.array([float(x) for x in fields[1:]], dtype=np.float64)
        except ValueError:
            raise DatasetError(f"{path}, line {lineno}: non-numeric box field in {line!r}") from None
        if not np.isfinite(v).all():
            raise DatasetError(f"{path}, line {lineno}: NaN or Inf in box fields of {line!r}")
        c1, c2, c3 = np.abs(v[7:10])
        ox, oy = v[10], v[11]
        box = np.array([v[4], v[5], v[6], 2 * c2, 2 * c1, 2 * c3, math.atan2(oy, ox)])
        out.append((fields[0], box, v[0:4].copy()))
    return out


def read_calib(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """``(Rtilt [3, 3], K [3, 3])`` from a VoteNet calib file (two lines of 9 column-major floats)."""
    try:
        lines = [ln.split() for ln in Path(path).read_text().splitlines() if ln.strip()]
    except FileNotFoundError:
        raise DatasetNotFoundError(f"missing calib file {path}") from None
    if len(lines) != 2 or any(len(ln) != 9 for ln in lines):
        raise DatasetError(f"{path}: expected 2 lines of 9 numbers (Rtilt, K column-major), got {[len(ln) for ln in lines]}")
    try:
        rtilt, k = (np.reshape(np.array(ln, dtype=np.float64), (3, 3), order="F") for ln in lines)
    except ValueError:
        raise DatasetError(f"{path}: non-numeric value in calib file") from None
    return rtilt, k


def read_index_file(path: Path) -> list[int]:
    """Frame numbers listed in a ``*_data_idx.txt`` file (one integer per line)."""
    out = []
    for lineno, line in enumerate(Path(path).read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            out.append(int(line.strip()))
        except ValueError:
            raise DatasetError(f"{path}, line {lineno}: expected a frame number, got {line!r}") from None
    return out


def read_votenet_bbox(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """``(boxes [K, 7] float64 in our convention, labels [K] int64)`` from a VoteNet ``NNNNNN_bbox.npy``
    (``[K, 8]`` rows ``cx cy cz l w h heading class``, half-sizes, ``heading = -yaw``). An empty array
    (``[0, 8]``, or ``[0]`` as ``np.array([])`` saves) gives ``[0, 7]`` boxes. Raises
    :class:`DatasetError` naming the file for anything else."""
    path = Path(path)
    try:
        with open(path, "rb") as fh:
            arr = np.load(fh, allow_pickle=False)
    except FileNotFoundError:
        raise DatasetNotFoundError(f"missing box file {path}") from None
    except Exception as e:  # truncated / not .npy / object array
        raise DatasetError(f"{path}: not a readable .npy box file ({type(e).__name__}: {e})") from None
    if not isinstance(arr, np.ndarray) or not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
        kind = f"{arr.dtype} array" if isinstance(arr, np.ndarray) else type(arr).__name__
        raise DatasetError(f"{path}: expected a numeric [K, {BBOX_FIELDS}] array, got a {kind}")
    if arr.size == 0 and arr.ndim in (1, 2) and (arr.ndim == 1 or arr.shape[1] in (0, BBOX_FIELDS)):
        return np.zeros((0, 7)), np.zeros((0,), dtype=np.int64)
    if arr.ndim != 2 or arr.shape[1] != BBOX_FIELDS:
        raise DatasetError(
            f"{path}: expected a [K, {BBOX_FIELDS}] array (cx cy cz, half-sizes l w h, heading, class id), "
            f"got shape {tuple(arr.shape)}"
        )
    arr = arr.astype(np.float64)
    bad = ~np.isfinite(arr).all(axis=1)
    if bad.any():
        raise DatasetError(f"{path}: NaN or Inf in box rows {np.flatnonzero(bad).tolist()}")
    cls = arr[:, 7]
    bad = (cls != np.round(cls)) | (cls < 0) | (cls >= len(CLASSES))
    if bad.any():
        r = int(np.flatnonzero(bad)[0])
        raise DatasetError(f"{path}, row {r}: class id {float(cls[r]):g} is not an integer in 0..{len(CLASSES) - 1}")
    bad = (arr[:, 3:6] < 0).any(axis=1)
    if bad.any():
        r = int(np.flatnonzero(bad)[0])
        raise DatasetError(f"{path}, row {r}: negative half-size in {arr[r, 3:6].tolist()}")
    boxes = np.concatenate([arr[:, 0:3], 2.0 * arr[:, 3:6], pc.wrap_angle(-arr[:, 6:7])], axis=1)
    return boxes, cls.astype(np.int64)


def _filter_classes(objects: list[tuple[str, np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    keep = [(CLASS_TO_ID[n], b) for n, b, _ in objects if n in CLASS_TO_ID]
    if not keep:
        return np.zeros((0, 7)), np.zeros((0,), dtype=np.int64)
    return np.stack([b for _, b in keep]), np.array([c for c, _ in keep], dtype=np.int64)


@dataclass
class _Frame:
    frame: int
    layout: str
    points_path: Path
    num_features: int = 6
    label_path: Path | None = None
    bbox_path: Path | None = None  # VoteNet NNNNNN_bbox.npy (pc_bbox_votes layout)
    boxes: np.ndarray | None = None  # [G, 7] (info layouts: read at index time)
    labels: np.ndarray | None = None  # [G]
    calib_path: Path | None = None
    rtilt: np.ndarray | None = None
    k: np.ndarray | None = None


def _require(obj: Any, key: str, where: str, source: Path) -> Any:
    if not isinstance(obj, dict) or key not in obj:
        have = sorted(obj) if isinstance(obj, dict) else type(obj).__name__
        raise DatasetError(f"{source}: {where} lacks key {key!r} (has {have})")
    return obj[key]


# --------------------------------------------------------------------------------------------
# the adapter
# --------------------------------------------------------------------------------------------
@DATASETS.register("sunrgbd")
class SUNRGBD(MultimodalDataset):
    """SUN RGB-D point clouds with the 10-class VoteNet boxes (see the module docstring)."""

    #: dataset.options this adapter reads (others are errors, see MultimodalDataset.OPTIONS)
    OPTIONS = frozenset({"annos", "calib", "info_file", "instances", "layout", "num_features", "num_points", "points_source",
                         "val_fraction", "val_seed", "version", "voxel_backend", "voxel_size"})

    id = "sunrgbd"
    task = "detection"
    num_classes = len(CLASSES)
    classes = CLASSES
    SYNTHETIC_VERSION = 1
    CONFORMANCE_SPEC = {"num_samples": 16, "options": {"points_per_scene": 2000}}
    MODALITIES = (
        Modality("points", "points", 3, description="xyz in the upright depth frame, metres"),
        Modality("color", "point_features", 3, description="rgb in [0, 1]"),
        Modality("height", "point_features", 1, description="z - np.percentile(z, 0.99) (height above floor)"),
    )
    FILES = (
        DataFile("train_data_idx.txt", "official train frame numbers, one per line (VoteNet extract)"),
        DataFile("val_data_idx.txt", "official val frame numbers (used as the test split)"),
        DataFile("depth/<frame>.mat", "variable 'instance' [N, 6] float32 xyz + rgb, upright depth frame"),
        DataFile("label/<frame>.txt", "v2 boxes, 13 fields per object (label_v1/ for version='v1')"),
        DataFile("calib/<frame>.txt", "Rtilt and K, 9 column-major floats per line", required=False),
        DataFile("lidar/<frame>.npz", "array 'pc' [50000, 6] (VoteNet subsample)", required=False),
        DataFile("sunrgbd_infos_{train,val}.pkl", "mmdet3d info pickles (v0 list or v2 data_list)", required=False),
        DataFile("points/<frame>.bin", "float32 [N, 6] points used with the info pickles", required=False),
        DataFile("sunrgbd_pc_bbox_votes_50k_<version>_{train,val}/<frame>_pc.npz",
                 "VoteNet dump: array 'pc' [50000, 6] (layout pc_bbox_votes)", required=False),
        DataFile("sunrgbd_pc_bbox_votes_50k_<version>_{train,val}/<frame>_bbox.npy",
                 "VoteNet dump: [K, 8] cx cy cz, half-sizes l w h, heading, class id", required=False),
    )
    INFO = """SUN RGB-D (Song, Lichtenberg, Xiao, CVPR 2015), research use; cite the paper.
Official data: https://rgbd.cs.princeton.edu/ (SUNRGBD.zip, SUNRGBDMeta3DBB_v2.mat, SUNRGBDtoolbox.zip).
Extract frames with VoteNet's matlab scripts (https://github.com/facebookresearch/votenet, sunrgbd/matlab/
extract_split.m, extract_rgbd_data_v2.m, extract_rgbd_data_v1.m), or use mmdetection3d's data preparation
(https://mmdetection3d.readthedocs.io, "SUN RGB-D" dataset page: tools/create_data.py sunrgbd), which
writes sunrgbd_trainval/ plus points/*.bin and sunrgbd_infos_{train,val}.pkl. Point the root at the folder
holding train_data_idx.txt (or its parent with sunrgbd_trainval/), or at the folder with the info pickles,
or at the folder holding VoteNet's sunrgbd_pc_bbox_votes_50k_<version>_{train,val}/ (sunrgbd/sunrgbd_data.py
of VoteNet; version='v1' for the _v1_ folders)."""

    # -- construction -------------------------------------------------------------------------
    def _options(self) -> None:
        o = self._opts_rest
        unknown = sorted(set(o) - set(OPTIONS))
        if unknown:
            raise DatasetError(f"sunrgbd: unknown options {unknown}; valid options are {list(OPTIONS)}")
        n = o.get("num_points", 20000)
        if n is not None and (isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0):
            raise DatasetError(f"sunrgbd: num_points must be a positive integer or None, got {n!r}")
        self.num_points = int(n) if n else None
        self.version = o.get("version", "v2")
        if self.version not in ("v1", "v2"):
            raise DatasetError(f"sunrgbd: version must be 'v2' (label/) or 'v1' (label_v1/), got {self.version!r}")
        self.layout = o.get("layout", "auto")
        if self.layout not in LAYOUTS:
            raise DatasetError(f"sunrgbd: layout must be one of {LAYOUTS}, got {self.layout!r}")
        self.points_source = o.get("points_source", "auto")
        if self.points_source not in POINT_SOURCES:
            raise DatasetError(f"sunrgbd: points_source must be one of {POINT_SOURCES}, got {self.points_source!r}")
        self.val_fraction = float(o.get("val_fraction", 0.1))
        if not 0.0 <= self.val_fraction < 1.0:
            raise DatasetError(f"sunrgbd: val_fraction must be in [0, 1), got {self.val_fraction}")
        self.val_seed = int(o.get("val_seed", 0))
        vs = o.get("voxel_size")
        if vs is not None and not (isinstance(vs, (int, float)) and vs > 0):
            raise DatasetError(f"sunrgbd: voxel_size must be a positive number of metres or None, got {vs!r}")
        self.voxel_size = float(vs) if vs is not None else None
        self.voxel_backend = o.get("voxel_backend", "numpy")
        if self.voxel_backend not in ("numpy", "open3d"):
            raise DatasetError(f"sunrgbd: voxel_backend must be 'numpy' or 'open3d', got {self.voxel_backend!r}")
        self.info_file = o.get("info_file")

    def _index(self) -> list[_Frame]:
        self._options()
        pool = "val" if self.split == "test" else "train"
        self._listing: Path | None = None  # the idx file or info pickle listing the pool's frames
        self._split_file: Path | None = None  # what defines the split, named by the base class's empty-split error
        frames = self._pool(pool)
        # an empty pool (empty *_data_idx.txt, info list or folder) or an empty carved-out val gives [] here:
        # the base class then raises its DatasetError naming self._split_file / self._listing (allow_empty=True
        # builds the empty split on purpose); nothing is swallowed here
        if self.split == "test":
            return frames
        n = len(frames)
        n_val = int(round(self.val_fraction * n))
        if n >= 2 and self.val_fraction > 0.0:
            n_val = min(max(n_val, 1), n - 1)
        else:
            n_val = 0
        perm = np.random.default_rng(self.val_seed).permutation(n)
        chosen = set(perm[:n_val].tolist())
        return [f for i, f in enumerate(frames) if (i in chosen) == (self.split == "val")]

    # -- layout discovery ---------------------------------------------------------------------
    def _extracted_base(self, pool: str) -> Path | None:
        for base in (self.root, self.root / "sunrgbd_trainval"):
            if (base / f"{pool}_data_idx.txt").is_file():
                return base
        return None

    def _pool(self, pool: str) -> list[_Frame]:
        info = None
        if self.info_file is not None:
            info = Path(self.info_file)
            info = info if info.is_absolute() else self.root / info
            if not info.is_file():
                raise DatasetNotFoundError(f"sunrgbd: missing info file {info} (option info_file)")
        base = self._extracted_base(pool)
        default_info = self.root / f"sunrgbd_infos_{pool}.pkl"
        votes_dir = self.root / VOTES_DIR.format(version=self.version, pool=pool)
        if self.layout == "extracted" or (self.layout == "auto" and info is None and base is not None):
            if base is None:
                raise DatasetNotFoundError(
                    f"sunrgbd: missing {self.root / f'{pool}_data_idx.txt'} (also looked in "
                    f"{self.root / 'sunrgbd_trainval'}).\n{self.info()}"
                )
            return self._index_extracted(base, pool)
        if self.layout == "pc_bbox_votes" or (
            self.layout == "auto" and info is None and not default_info.is_file() and votes_dir.is_dir()
        ):
            if not votes_dir.is_dir():
                raise DatasetNotFoundError(f"sunrgbd: missing folder {votes_dir}{self._other_version_hint(pool)}"
                                           f".\n{self.info()}")
            if self.points_source != "auto":
                raise DatasetError(f"sunrgbd: points_source={self.points_source!r} does not apply to VoteNet's "
                                   f"{votes_dir.name}/ folders (points are always NNNNNN_pc.npz); leave it 'auto'")
            return self._index_votes(votes_dir, pool)
        info = info if info is not None else default_info
        if not info.is_file():
            raise DatasetNotFoundError(
                f"sunrgbd: found none of {self.root / f'{pool}_data_idx.txt'}, {info} or {votes_dir}"
                f"{self._other_version_hint(pool)}; pass the folder that holds them as root (or info_file=... "
                f"for an info pickle with another name).\n{self.info()}"
            )
        return self._index_infos(info, pool)

    def _other_version_hint(self, pool: str) -> str:
        other = "v1" if self.version == "v2" else "v2"
        d = self.root / VOTES_DIR.format(version=other, pool=pool)
        return f" ({d.name} exists: pass version={other!r} to read it)" if d.is_dir() else ""

    def _index_votes(self, folder: Path, pool: str) -> list[_Frame]:
        """Frames of a VoteNet ``sunrgbd_pc_bbox_votes_50k_<version>_<pool>/`` folder, by frame number.
        Every frame needs both ``NNNNNN_pc.npz`` and ``NNNNNN_bbox.npy``."""
        self._listing = None  # the folder itself lists the frames; source_files() names each file
        self._split_file = folder
        pcs, bboxes = {}, {}
        for p in folder.iterdir():
            for suffix, into in (("_pc.npz", pcs), ("_bbox.npy", bboxes)):
                if p.name.endswith(suffix):
                    stem = p.name[: -len(suffix)]
                    if not stem.isdigit():
                        raise DatasetError(f"{p}: expected a file named NNNNNN{suffix} (a frame number), got {p.name!r}")
                    into[int(stem)] = p
        frames = []
        for f in sorted(set(pcs) | set(bboxes)):
            if f not in pcs:
                raise DatasetNotFoundError(f"sunrgbd: missing point file {folder / f'{f:06d}_pc.npz'} "
                                           f"(its box file {bboxes[f].name} exists)")
            if f not in bboxes:
                raise DatasetNotFoundError(f"sunrgbd: missing box file {folder / f'{f:06d}_bbox.npy'} "
                                           f"(its point file {pcs[f].name} exists)")
            frames.append(_Frame(frame=f, layout="votenet_pc_bbox_votes", points_path=pcs[f], bbox_path=bboxes[f]))
        return frames

    def _point_candidates(self, frame: int, layout: str, base: Path, lidar_path: str | None = None) -> list[Path]:
        name = f"{frame:06d}"
        by_source = {
            "depth": [base / "depth" / f"{name}.mat"],
            "lidar": [base / "lidar" / f"{name}.npz"],
            "bin": [self.root / "points" / f"{name}.bin", base / "points" / f"{name}.bin"],
            "ply": [base / "depth" / f"{name}.ply"],
            "pcd": [base / "depth" / f"{name}.pcd"],
        }
        if lidar_path:
            by_source["bin"] = [self.root / "points" / lidar_path, self.root / lidar_path] + by_source["bin"]
        if self.points_source != "auto":
            return by_source[self.points_source]
        order = ("depth", "lidar", "bin") if layout == "extracted" else ("bin", "lidar", "depth")
        return [p for s in order for p in by_source[s]]

    def _find_points(self, frame: int, layout: str, base: Path, lidar_path: str | None = None) -> Path:
        cands = self._point_candidates(frame, layout, base, lidar_path)
        for p in cands:
            if p.is_file():
                return p
        raise DatasetNotFoundError(
            f"sunrgbd: missing point file for frame {frame:06d}: {cands[0]}"
            + (f" (also looked for {', '.join(str(c) for c in cands[1:])})" if len(cands) > 1 else "")
        )

    def _index_extracted(self, base: Path, pool: str) -> list[_Frame]:
        label_dir = base / ("label" if self.version == "v2" else "label_v1")
        self._listing = base / f"{pool}_data_idx.txt"
        frames = []
        for f in read_index_file(base / f"{pool}_data_idx.txt"):
            label = label_dir / f"{f:06d}.txt"
            if not label.is_file():
                raise DatasetNotFoundError(f"sunrgbd: missing label file {label} (frame {f:06d} of {pool}_data_idx.txt)")
            calib = base / "calib" / f"{f:06d}.txt"
            frames.append(_Frame(
                frame=f, layout="votenet_extracted", points_path=self._find_points(f, "extracted", base),
                label_path=label, calib_path=calib if calib.is_file() else None,
            ))
        return frames

    def _index_infos(self, path: Path, pool: str) -> list[_Frame]:
        from . import safe_pickle

        data = safe_pickle.load(path)
        self._listing = path
        base = self._extracted_base(pool) or self.root
        if isinstance(data, list):
            return [self._frame_from_v0(info, i, path, base) for i, info in enumerate(data)]
        if isinstance(data, dict) and "data_list" in data:
            classes = CLASSES
            meta = data.get("metainfo") or {}
            if isinstance(meta, dict) and meta.get("classes") is not None:
                classes = tuple(meta["classes"])
            return [self._frame_from_v2(info, i, path, base, classes) for i, info in enumerate(data["data_list"])]
        kind = type(data).__name__ + (f" with keys {sorted(data)}" if isinstance(data, dict) else "")
        raise DatasetError(
            f"{path}: not an mmdet3d SUN RGB-D info file: expected a list of frame dicts (v0) or a dict with "
            f"'data_list' (v2), got a {kind}"
        )

    def _frame_from_v0(self, info: Any, i: int, path: Path, base: Path) -> _Frame:
        where = f"info entry {i}"
        pcinfo = _require(info, "point_cloud", where, path)
        frame = int(_require(pcinfo, "lidar_idx", f"{where}.point_cloud", path))
        nfeat = int(pcinfo.get("num_features", 6)) if isinstance(pcinfo, dict) else 6
        annos = info.get("annos") if isinstance(info, dict) else None
        boxes, labels = np.zeros((0, 7)), np.zeros((0,), dtype=np.int64)
        if annos is not None and int(_require(annos, "gt_num", f"{where}.annos", path)) > 0:
            gt = np.asarray(_require(annos, "gt_boxes_upright_depth", f"{where}.annos", path), dtype=np.float64)
            cls = np.asarray(_require(annos, "class", f"{where}.annos", path)).astype(np.int64)
            if gt.ndim != 2 or gt.shape[1] != 7 or len(cls) != len(gt):
                raise DatasetError(
                    f"{path}: {where}.annos: gt_boxes_upright_depth {gt.shape} / class {cls.shape} "
                    f"do not match ([G, 7] and [G])"
                )
            if not np.isfinite(gt).all():
                raise DatasetError(f"{path}: {where}.annos.gt_boxes_upright_depth contains NaN or Inf")
            boxes = gt.copy()
            boxes[:, 6] = -gt[:, 6]  # v0 depth boxes turn clockwise; ours counter-clockwise
            keep = (cls >= 0) & (cls < len(CLASSES))
            boxes, labels = boxes[keep], cls[keep]
        rtilt = k = None
        calib = info.get("calib") if isinstance(info, dict) else None
        if isinstance(calib, dict) and "K" in calib and "Rt" in calib:
            k = np.reshape(np.asarray(calib["K"], dtype=np.float64), (3, 3), order="F")
            rtilt = np.asarray(calib["Rt"], dtype=np.float64).reshape(3, 3)
        return _Frame(frame=frame, layout="mmdet3d_infos_v0", points_path=self._find_points(frame, "infos", base),
                      num_features=nfeat, boxes=boxes, labels=labels, rtilt=rtilt, k=k)

    def _frame_from_v2(self, info: Any, i: int, path: Path, base: Path, classes: tuple[str, ...]) -> _Frame:
        where = f"data_list[{i}]"
        lp = _require(info, "lidar_points", where, path)
        lidar_path = str(_require(lp, "lidar_path", f"{where}.lidar_points", path))
        nfeat = int(lp.get("num_pts_feats", 6))
        try:
            frame = int(Path(lidar_path).stem)
        except ValueError:
            raise DatasetError(f"{path}: {where}.lidar_points.lidar_path {lidar_path!r} is not NNNNNN.bin") from None
        boxes, labels = [], []
        for j, inst in enumerate(info.get("instances", []) or []):
            b = np.asarray(_require(inst, "bbox_3d", f"{where}.instances[{j}]", path), dtype=np.float64)
            lab = int(_require(inst, "bbox_label_3d", f"{where}.instances[{j}]", path))
            if b.shape != (7,) or not np.isfinite(b).all():
                raise DatasetError(f"{path}: {where}.instances[{j}].bbox_3d must be 7 finite numbers, got {b.tolist()}")
            if not 0 <= lab < len(classes) or classes[lab] not in CLASS_TO_ID:
                continue  # -1 = ignored instance in mmdet3d, or a class outside the 10
            boxes.append(b)
            labels.append(CLASS_TO_ID[classes[lab]])
        return _Frame(
            frame=frame, layout="mmdet3d_infos_v2", num_features=nfeat,
            points_path=self._find_points(frame, "infos", base, lidar_path),
            boxes=np.stack(boxes) if boxes else np.zeros((0, 7)),
            labels=np.array(labels, dtype=np.int64),
        )

    def source_files(self) -> list[Path]:
        """The input files this split reads (for the prepared cache's manifest): the frame listing
        (idx file or info pickle) and each frame's point, label and calib files."""
        files = [self._listing] if self._listing is not None else []
        for rec in self.samples:
            files += [p for p in (rec.points_path, rec.label_path, rec.bbox_path, rec.calib_path) if p is not None]
        return files

    # -- loading --------------------------------------------------------------------------------
    def read_cloud(self, index: int) -> np.ndarray:
        """The frame's raw point cloud ``[N, 6]`` float32 (xyz, rgb), validated."""
        rec = self.samples[index]
        cloud = pc.read_point_file(rec.points_path, rec.num_features)
        if cloud.shape[1] < 6:
            raise DatasetError(f"{rec.points_path}: expected xyz + rgb (6 columns), got {cloud.shape[1]}")
        cloud = np.ascontiguousarray(cloud[:, :6], dtype=np.float32)
        if cloud.shape[0] == 0:
            raise DatasetError(f"{rec.points_path}: the point cloud is empty")
        bad = ~np.isfinite(cloud)
        if bad.any():
            rows = np.flatnonzero(bad.any(axis=1))
            raise DatasetError(
                f"{rec.points_path}: {len(rows)} points contain NaN or Inf (first rows {rows[:5].tolist()})"
            )
        rgb = cloud[:, 3:6]
        if rgb.min() < -1e-4 or rgb.max() > 1 + 1e-4:
            raise DatasetError(
                f"{rec.points_path}: colour columns 3..5 span [{rgb.min():.3g}, {rgb.max():.3g}]; expected rgb in [0, 1]"
            )
        return cloud

    def read_boxes(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        """``(boxes [G, 7] float64, labels [G] int64)`` of the 10 classes, in our box convention."""
        rec = self.samples[index]
        if rec.label_path is not None:
            return _filter_classes(parse_label_file(rec.label_path))
        if rec.bbox_path is not None:
            return read_votenet_bbox(rec.bbox_path)
        return rec.boxes, rec.labels

    def read_calibration(self, index: int) -> tuple[np.ndarray, np.ndarray] | None:
        """``(Rtilt, K)`` for the frame if the layout provides them, else None."""
        rec = self.samples[index]
        if rec.calib_path is not None:
            return read_calib(rec.calib_path)
        if rec.k is not None:
            return rec.rtilt, rec.k
        return None

    def _load_raw(self, index: int) -> dict[str, Any]:
        rec = self.samples[index]
        cloud = self.read_cloud(index)
        n_raw = cloud.shape[0]
        xyz, rgb = cloud[:, :3], cloud[:, 3:6]
        if self.voxel_size is not None:
            xyz, rgb = pc.voxel_downsample(xyz, rgb, self.voxel_size, backend=self.voxel_backend)
            xyz, rgb = xyz.astype(np.float32), rgb.astype(np.float32)
        floor = pc.floor_height(xyz[:, 2])
        if self.num_points is not None:
            rng = np.random.default_rng([self.seed, rec.frame])
            idx = pc.sample_indices(xyz.shape[0], self.num_points, rng)
            xyz, rgb = xyz[idx], rgb[idx]
        height = pc.height_feature(xyz, floor)
        boxes, labels = self.read_boxes(index)
        meta: dict[str, Any] = {
            "id": f"{rec.frame:06d}", "frame": rec.frame, "num_raw_points": int(n_raw),
            "num_points": int(xyz.shape[0]), "layout": rec.layout, "points_file": rec.points_path.name,
            "floor_z": floor,
        }
        if rec.layout in ("votenet_extracted", "votenet_pc_bbox_votes"):
            meta["label_version"] = self.version
        calib = self.read_calibration(index)
        if calib is not None:
            meta["Rtilt"], meta["K"] = calib[0].tolist(), calib[1].tolist()
        return {
            "modalities": {
                "points": torch.from_numpy(np.ascontiguousarray(xyz, dtype=np.float32)),
                "color": torch.from_numpy(np.ascontiguousarray(rgb, dtype=np.float32)),
                "height": torch.from_numpy(height),
            },
            "target": {
                "boxes": torch.from_numpy(np.asarray(boxes, dtype=np.float32).reshape(-1, 7)),
                "labels": torch.from_numpy(np.asarray(labels, dtype=np.int64).reshape(-1)),
            },
            "meta": meta,
        }

    def _augment(self, sample: dict[str, Any], rng: torch.Generator) -> dict[str, Any]:
        u = torch.rand(3, generator=rng, dtype=torch.float64)
        flip = bool(u[0] < FLIP_P)
        angle = float((2 * u[1] - 1) * ROT_RANGE_RAD)
        scale = float(SCALE_RANGE[0] + (SCALE_RANGE[1] - SCALE_RANGE[0]) * u[2])
        mods = dict(sample["modalities"])
        boxes = sample["target"]["boxes"].to(torch.float64)
        xyz = mods["points"].to(torch.float64) if "points" in mods else torch.zeros(0, 3, dtype=torch.float64)
        if flip:
            xyz, boxes = pc.flip_yz(xyz, boxes)
        xyz, boxes = pc.rotate_z(xyz, boxes, angle)
        xyz, boxes = pc.scale_scene(xyz, boxes, scale)
        if "points" in mods:
            mods["points"] = xyz.to(torch.float32)
        if "height" in mods:
            mods["height"] = mods["height"] * scale
        meta = dict(sample["meta"])
        meta["augmentation"] = {"flip": flip, "rotation_rad": angle, "scale": scale}
        return {**sample, "modalities": mods,
                "target": {**sample["target"], "boxes": boxes.to(torch.float32)}, "meta": meta}

    # -- synthetic twin -----------------------------------------------------------------------
    @classmethod
    def write_synthetic(cls, root: Path, spec: SyntheticSpec) -> None:
        """Write ``spec.num_samples`` synthetic rooms in the VoteNet extracted layout; see
        :func:`synthetic_scene` and :func:`write_synthetic_scenes`."""
        write_synthetic_scenes(Path(root), spec)


# --------------------------------------------------------------------------------------------
# synthetic twin
# --------------------------------------------------------------------------------------------
#: typical full sizes (dx along the heading, dy, dz) in metres
CLASS_SIZES = {
    "bed": (2.0, 1.6, 0.6), "table": (1.2, 0.8, 0.75), "sofa": (2.0, 0.9, 0.8), "chair": (0.5, 0.5, 0.9),
    "toilet": (0.7, 0.45, 0.75), "desk": (1.3, 0.65, 0.75), "dresser": (1.0, 0.5, 1.0),
    "night_stand": (0.5, 0.45, 0.55), "bookshelf": (1.0, 0.35, 1.8), "bathtub": (1.6, 0.75, 0.55),
    "lamp": (0.3, 0.3, 0.5),  # a distractor: written to the label file, dropped by the reader
}
PALETTE = {
    "bed": (0.85, 0.15, 0.15), "table": (0.15, 0.75, 0.2), "sofa": (0.2, 0.3, 0.9), "chair": (0.95, 0.8, 0.1),
    "toilet": (0.9, 0.9, 0.95), "desk": (0.55, 0.3, 0.1), "dresser": (0.7, 0.2, 0.7),
    "night_stand": (0.1, 0.8, 0.8), "bookshelf": (0.4, 0.4, 0.1), "bathtub": (0.95, 0.5, 0.6),
    "lamp": (1.0, 1.0, 0.6), "floor": (0.45, 0.4, 0.35), "wall": (0.8, 0.78, 0.72),
}
ROOM_X, ROOM_Y, WALL_H = (-2.5, 2.5), (1.0, 6.0), 2.6


def _surface_points(box: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` points uniform on the 5 visible faces (not the bottom) of ``box`` [7]."""
    dx, dy, dz = box[3:6]
    faces = [  # (area, fixed axis, sign)
        (dx * dy, 2, 1.0), (dx * dz, 1, 1.0), (dx * dz, 1, -1.0), (dy * dz, 0, 1.0), (dy * dz, 0, -1.0),
    ]
    areas = np.array([f[0] for f in faces])
    which = rng.choice(len(faces), size=n, p=areas / areas.sum())
    local = (rng.random((n, 3)) - 0.5) * np.array([dx, dy, dz])
    for k, (_, axis, sign) in enumerate(faces):
        sel = which == k
        local[sel, axis] = sign * 0.5 * box[3 + axis]
    c, s = math.cos(box[6]), math.sin(box[6])
    rot = np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])
    return local @ rot.T + box[0:3]


def _project_box_2d(box: np.ndarray) -> tuple[float, float, float, float]:
    """2D box (x, y, w, h) of the projected corners with Rtilt = I and the SUN RGB-D K, clipped."""
    corners = pc.box_corners(torch.from_numpy(box[None])).numpy()[0]
    cam = np.stack([corners[:, 0], -corners[:, 2], np.maximum(corners[:, 1], 0.1)], axis=1)
    uv = cam @ SUN_K.T
    uv = uv[:, :2] / uv[:, 2:3]
    x0, y0 = np.clip(uv.min(axis=0), 0, [IMAGE_W - 1, IMAGE_H - 1])
    x1, y1 = np.clip(uv.max(axis=0), 0, [IMAGE_W - 1, IMAGE_H - 1])
    return float(x0), float(y0), float(max(x1 - x0, 1.0)), float(max(y1 - y0, 1.0))


def _colors(name: str, n: int, inf: float, rng: np.random.Generator) -> np.ndarray:
    base = np.array(PALETTE[name])
    col = inf * base + (1 - inf) * rng.random((n, 3)) + rng.normal(0, 0.03, (n, 3))
    return np.clip(col, 0.0, 1.0)


def synthetic_scene(frame: int, spec: SyntheticSpec) -> tuple[np.ndarray, list[tuple[str, np.ndarray]], float]:
    """One deterministic room: ``(cloud [N, 6], objects [(classname, box [7])], floor_z)``.

    A floor at ``z = floor_z ~ U(-0.05, 0.05)``, three walls, 2-5 objects of the 10 classes plus
    sometimes a lamp, each standing on the floor (``cz - dz/2 = floor_z``), not overlapping. Points
    lie on the floor (outside the footprints), the walls and the 5 visible faces of each box.
    Informativeness in [0, 1] (``spec.informativeness``, default 1):

    * ``color``: colour = inf * class colour + (1 - inf) * uniform noise;
    * ``points``: Gaussian xyz jitter of std ``0.005 + 0.15 * (1 - inf)`` metres;
    * ``height``: a fraction ``0.05 * (1 - inf)`` of extra points below the floor, down to a random
      depth ``U(0, 2) * (1 - inf)`` m, so the 0.99th-percentile floor estimate (and hence the height
      feature) is shifted by a random per-scene amount.
    """
    inf = {m: float(spec.informativeness.get(m, 1.0)) for m in ("points", "color", "height")}
    for m, v in inf.items():
        if not 0.0 <= v <= 1.0:
            raise ValueError(f"sunrgbd synthetic: informativeness[{m!r}] must be in [0, 1], got {v}")
    n_pts = int(spec.options.get("points_per_scene", 8000))
    if n_pts < 100:
        raise ValueError(f"sunrgbd synthetic: points_per_scene must be >= 100, got {n_pts}")
    rng = np.random.default_rng([spec.seed, frame])
    floor_z = float(rng.uniform(-0.05, 0.05))
    names = [CLASSES[i] for i in rng.integers(0, len(CLASSES), size=int(rng.integers(2, 6)))]
    if rng.random() < 0.5:
        names.append("lamp")
    objects: list[tuple[str, np.ndarray]] = []
    for name in names:
        size = np.array(CLASS_SIZES[name]) * rng.uniform(0.85, 1.15, 3)
        radius = 0.5 * math.hypot(size[0], size[1])
        for _ in range(100):
            cx = rng.uniform(ROOM_X[0] + radius, ROOM_X[1] - radius)
            cy = rng.uniform(ROOM_Y[0] + radius, ROOM_Y[1] - radius)
            if all(math.hypot(cx - b[0], cy - b[1]) > radius + 0.5 * math.hypot(b[3], b[4]) + 0.05 for _, b in objects):
                yaw = float(rng.uniform(-math.pi, math.pi))
                objects.append((name, np.array([cx, cy, floor_z + size[2] / 2, *size, yaw])))
                break
    n_floor, n_wall = int(0.3 * n_pts), int(0.2 * n_pts)
    areas = np.array([b[3] * b[4] + 2 * (b[3] + b[4]) * b[5] for _, b in objects])  # 5 visible faces
    n_obj = np.floor((n_pts - n_floor - n_wall) * areas / max(areas.sum(), 1e-9)).astype(int)
    parts_xyz, parts_rgb = [], []
    # floor, outside the object footprints
    boxes_t = torch.from_numpy(np.stack([b for _, b in objects])) if objects else torch.zeros(0, 7, dtype=torch.float64)
    floor_xyz = np.zeros((0, 3))
    while len(floor_xyz) < n_floor:
        cand = np.stack([rng.uniform(*ROOM_X, 2 * n_floor), rng.uniform(*ROOM_Y, 2 * n_floor),
                         np.full(2 * n_floor, floor_z)], axis=1)
        inside = pc.points_in_boxes(torch.from_numpy(cand), boxes_t, eps=0.01).any(dim=1).numpy()
        floor_xyz = np.concatenate([floor_xyz, cand[~inside]])
    parts_xyz.append(floor_xyz[:n_floor])
    parts_rgb.append(_colors("floor", n_floor, inf["color"], rng))
    # walls: back (y = 6), left (x = -2.5), right (x = 2.5), area-proportional
    wall_len = np.array([ROOM_X[1] - ROOM_X[0], ROOM_Y[1] - ROOM_Y[0], ROOM_Y[1] - ROOM_Y[0]])
    which = rng.choice(3, size=n_wall, p=wall_len / wall_len.sum())
    t = rng.random(n_wall)
    wz = floor_z + rng.random(n_wall) * WALL_H
    wx = np.where(which == 0, ROOM_X[0] + t * wall_len[0], np.where(which == 1, ROOM_X[0], ROOM_X[1]))
    wy = np.where(which == 0, ROOM_Y[1], ROOM_Y[0] + t * wall_len[1])
    parts_xyz.append(np.stack([wx, wy, wz], axis=1))
    parts_rgb.append(_colors("wall", n_wall, inf["color"], rng))
    for (name, box), k in zip(objects, n_obj):
        parts_xyz.append(_surface_points(box, int(k), rng))
        parts_rgb.append(_colors(name, int(k), inf["color"], rng))
    xyz = np.concatenate(parts_xyz)
    rgb = np.concatenate(parts_rgb)
    xyz = xyz + rng.normal(0.0, 0.005 + 0.15 * (1 - inf["points"]), xyz.shape)
    n_out = int(round(0.05 * (1 - inf["height"]) * len(xyz)))
    if n_out:
        depth = rng.uniform(0, 2) * (1 - inf["height"])
        out = np.stack([rng.uniform(*ROOM_X, n_out), rng.uniform(*ROOM_Y, n_out),
                        floor_z - rng.random(n_out) * depth], axis=1)
        xyz = np.concatenate([xyz, out])
        rgb = np.concatenate([rgb, _colors("floor", n_out, inf["color"], rng)])
    perm = rng.permutation(len(xyz))
    cloud = np.concatenate([xyz, rgb], axis=1)[perm].astype(np.float32)
    return cloud, objects, floor_z


def format_label_line(name: str, box: np.ndarray) -> str:
    """A VoteNet label line for ``box`` [7] in our convention (inverse of :func:`parse_label_file`)."""
    x, y, w, h = _project_box_2d(box)
    return (f"{name} {x:.6e} {y:.6e} {w:.6e} {h:.6e} {box[0]:.6f} {box[1]:.6f} {box[2]:.6f} "
            f"{box[4] / 2:.6f} {box[3] / 2:.6f} {box[5] / 2:.6f} {math.cos(box[6]):.6f} {math.sin(box[6]):.6f}")


def write_synthetic_scenes(root: Path, spec: SyntheticSpec) -> None:
    """Write ``spec.num_samples`` rooms as VoteNet extracted frames under ``root``: ``depth/*.mat``
    (scipy.io.savemat, variable ``instance``), ``label/`` and ``label_v1/`` (identical), ``calib/``
    (Rtilt = I, the SUN RGB-D K) and ``{train,val}_data_idx.txt`` (the last quarter is official val)."""
    import scipy.io

    n = int(spec.num_samples)
    if n < 1:
        raise ValueError(f"sunrgbd synthetic: num_samples must be >= 1, got {n}")
    for d in ("depth", "label", "label_v1", "calib"):
        (root / d).mkdir(parents=True, exist_ok=True)
    calib_text = " ".join(f"{v:g}" for v in np.eye(3).ravel(order="F")) + "\n" + \
        " ".join(f"{v:g}" for v in SUN_K.ravel(order="F")) + "\n"
    for frame in range(1, n + 1):
        cloud, objects, _ = synthetic_scene(frame, spec)
        scipy.io.savemat(str(root / "depth" / f"{frame:06d}.mat"), {"instance": cloud})
        text = "".join(format_label_line(name, box) + "\n" for name, box in objects)
        (root / "label" / f"{frame:06d}.txt").write_text(text)
        (root / "label_v1" / f"{frame:06d}.txt").write_text(text)
        (root / "calib" / f"{frame:06d}.txt").write_text(calib_text)
    n_val = n // 4 if n >= 2 else 0
    ids = list(range(1, n + 1))
    (root / "train_data_idx.txt").write_text("".join(f"{i}\n" for i in ids[: n - n_val]))
    (root / "val_data_idx.txt").write_text("".join(f"{i}\n" for i in ids[n - n_val:]))
