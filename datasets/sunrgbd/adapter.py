"""The registered ``sunrgbd`` adapter (:class:`SUNRGBD`): options, splits, loading; the readers,
layout discovery, augmentation and synthetic twin live in the sibling modules."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, ClassVar, Mapping

import numpy as np
import torch

from fusebench.datasets import DATASETS

from .. import pointcloud as pc
from ..base import DataFile, DatasetError, Delivered, Modality, MultimodalDataset, SyntheticSpec
from .classes import CLASSES
from .formats import _filter_classes, parse_label_file, read_calib, read_votenet_bbox
from .layouts import LAYOUTS, POINT_SOURCES, SunRGBDLayouts, _Frame
from .synthetic import write_synthetic_scenes
from .transforms import augment_scene

log = logging.getLogger(__package__)

OPTIONS = ("num_points", "version", "layout", "info_file", "points_source", "val_fraction", "val_seed",
           "voxel_size", "voxel_backend", "use_cache")
#: points sampled per scene when ``num_points`` is not set (VoteNet's input size)
DEFAULT_NUM_POINTS = 20000


@DATASETS.register("sunrgbd")
class SUNRGBD(SunRGBDLayouts, MultimodalDataset):
    """SUN RGB-D point clouds with the 10-class VoteNet boxes (see the :mod:`fusebench.datasets.sunrgbd`
    package docstring)."""

    #: the public path (unchanged by the split into a package): the prepared cache's manifest and the
    #: registry name the adapter as ``fusebench.datasets.sunrgbd:SUNRGBD``
    __module__ = "fusebench.datasets.sunrgbd"

    #: dataset.options this adapter reads (others are errors, see MultimodalDataset.OPTIONS)
    OPTIONS = frozenset(OPTIONS)  # the module-level tuple that _options checks: one list, not two
    #: their types, checked when a benchmark spec is loaded (fusebench.options); the values _options accepts
    OPTION_TYPES: ClassVar[dict[str, Any]] = {
        "info_file": str | None, "layout": str, "num_points": int | None, "points_source": str, "val_fraction": float,
        "val_seed": int, "version": str, "voxel_backend": str, "voxel_size": float | None}

    id = "sunrgbd"
    #: the test split is the official test pool; the adapter takes no split_seed (val_seed carves val out of train)
    SPLIT_SEED_MOVES_TEST: ClassVar[bool | None] = False
    task = "detection"
    num_classes = len(CLASSES)
    fixed_num_classes = True  # the same count under every option (MultimodalDataset.delivers)
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

    @classmethod
    def delivers(cls, options: Mapping[str, Any]) -> dict[str, Delivered]:
        """The 10 classes, and ``num_points`` points per scene (every scene is sampled to exactly that many, with
        repeats where it has fewer; ``None``, every point of the scene, is known only once the data is read)."""
        out = super().delivers(options)
        points = cls.option_delivered(options, "num_points", DEFAULT_NUM_POINTS)
        if isinstance(points.value, int) and not isinstance(points.value, bool):
            out["points_per_sample"] = points
        return out

    # -- construction -------------------------------------------------------------------------
    def _options(self) -> None:
        o = self._opts_rest
        unknown = sorted(set(o) - set(OPTIONS))
        if unknown:
            raise DatasetError(f"sunrgbd: unknown options {unknown}; valid options are {list(OPTIONS)}")
        n = o.get("num_points", DEFAULT_NUM_POINTS)
        if n is not None and (isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1):
            raise DatasetError(f"sunrgbd: num_points must be a positive integer or None (every point), got {n!r}")
        self.num_points = None if n is None else int(n)
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
        self._check_frames_once(frames, pool)
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

    def _check_frames_once(self, frames: list[_Frame], pool: str) -> None:
        """Raise :class:`DatasetError` when a frame is listed twice in the pool's listing, or also in the other
        official pool (train vs val, whose frames become the test split): the frame would weigh twice, or be
        trained on and tested on. The other pool is checked when it can be read (and no ``info_file`` replaces
        the default listings); its own problems are reported when a split of it is built."""
        where = self._listing or self._split_file or self.root
        seen: dict[int, int] = {}
        for f in frames:
            seen[f.frame] = seen.get(f.frame, 0) + 1
        repeated = sorted(k for k, n in seen.items() if n > 1)
        if repeated:
            shown = ", ".join(f"{k:06d} ({seen[k]} times)" for k in repeated[:5])
            raise DatasetError(
                f"sunrgbd: {where} lists {len(repeated)} frame(s) more than once: {shown}"
                f"{' ...' if len(repeated) > 5 else ''}; a repeated frame weighs twice in training or in the test "
                f"metric: each frame must be listed once")
        if self.info_file is not None:
            return
        other = "train" if pool == "val" else "val"
        listing, split_file = self._listing, self._split_file
        try:
            other_frames = self._pool(other)
            other_where = self._listing or self._split_file
        except DatasetError:  # no other pool (or a damaged one, reported when its split is built)
            return
        finally:
            self._listing, self._split_file = listing, split_file
        both = sorted(set(seen) & {f.frame for f in other_frames})
        if both:
            shown = ", ".join(f"{k:06d}" for k in both[:10])
            raise DatasetError(
                f"sunrgbd: {len(both)} frame(s) are listed both in {where} ({pool} pool) and in {other_where} "
                f"({other} pool, {'the test split' if other == 'val' else 'train and val'}): {shown}"
                f"{' ...' if len(both) > 10 else ''}; a frame in both is trained on and tested on (leakage): the "
                f"official train and val frame lists are disjoint")

    # -- indexing: layout discovery in SunRGBDLayouts (layouts.py) ------------------------------
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
        return augment_scene(sample, rng)

    # -- synthetic twin -----------------------------------------------------------------------
    @classmethod
    def write_synthetic(cls, root: Path, spec: SyntheticSpec) -> None:
        """Write ``spec.num_samples`` synthetic rooms in the VoteNet extracted layout; see
        :func:`synthetic_scene` and :func:`write_synthetic_scenes`."""
        write_synthetic_scenes(Path(root), spec)
