"""Layout discovery for SUN RGB-D: which of the on-disk layouts (VoteNet extracted frames, mmdet3d
info pickles v0 / v2, VoteNet's ``sunrgbd_pc_bbox_votes_50k_<version>_<pool>/`` dumps) a root holds,
the frame listing of an official pool (``*_data_idx.txt``, info pickle or dump folder) and where
each frame's point, label and calib files are. :class:`SunRGBDLayouts` is mixed into the adapter.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..base import DatasetError, DatasetNotFoundError
from .classes import CLASS_TO_ID, CLASSES
from .formats import read_index_file

LAYOUTS = ("auto", "extracted", "infos", "pc_bbox_votes")
#: VoteNet's dumped folder of one official pool ("train"/"val") and label version ("v1"/"v2")
VOTES_DIR = "sunrgbd_pc_bbox_votes_50k_{version}_{pool}"
POINT_SOURCES = ("auto", "depth", "lidar", "bin", "ply", "pcd")


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


def _int_field(value: Any, where: str, source: Path, minimum: int | None = 0) -> int:
    """An integer field of an info pickle (frame number, feature count, box count, class id): a Python or
    numpy integer, or a float / digit string that is one (as some converters store them), at least
    ``minimum``. Anything else is one DatasetError naming the file and the field (``int()`` raised a bare
    ValueError / TypeError for a string or None, and cut 1.5 to 1)."""
    v = value.item() if isinstance(value, np.generic) or (isinstance(value, np.ndarray) and value.size == 1) \
        else value
    if isinstance(v, str) and v.strip().lstrip("-").isdigit():
        v = int(v)
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int) or (minimum is not None and v < minimum):
        want = "an integer" + (f" >= {minimum}" if minimum is not None else "")
        raise DatasetError(f"{source}: {where} must be {want}, got {value!r}")
    return v


class SunRGBDLayouts:
    """Index-time methods of :class:`~fusebench.datasets.sunrgbd.adapter.SUNRGBD`: finding the layout
    under ``self.root`` and listing the frames of an official pool (``"train"`` / ``"val"``)."""

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
        from .. import safe_pickle

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
        frame = _int_field(_require(pcinfo, "lidar_idx", f"{where}.point_cloud", path),
                           f"{where}.point_cloud.lidar_idx", path)
        nfeat = _int_field(pcinfo.get("num_features", 6), f"{where}.point_cloud.num_features", path, 3)
        annos = info.get("annos") if isinstance(info, dict) else None
        boxes, labels = np.zeros((0, 7)), np.zeros((0,), dtype=np.int64)
        if annos is not None and _int_field(_require(annos, "gt_num", f"{where}.annos", path), f"{where}.annos.gt_num",
                                            path) > 0:
            raw_gt = _require(annos, "gt_boxes_upright_depth", f"{where}.annos", path)
            try:
                gt = np.asarray(raw_gt, dtype=np.float64)
            except (TypeError, ValueError):
                raise DatasetError(f"{path}: {where}.annos.gt_boxes_upright_depth must be a [K, 7] array of numbers, "
                                   f"got {repr(raw_gt)[:80]}") from None
            raw_cls = np.asarray(_require(annos, "class", f"{where}.annos", path))
            if raw_cls.dtype.kind not in "iuf" or (raw_cls.dtype.kind == "f" and not (
                    np.isfinite(raw_cls).all() and (raw_cls == np.round(raw_cls)).all())):
                raise DatasetError(f"{path}: {where}.annos.class must hold integer class ids 0..{len(CLASSES) - 1}, "
                                   f"got {raw_cls.dtype} values {raw_cls.ravel()[:5].tolist()}")
            cls = raw_cls.astype(np.int64)
            if gt.ndim != 2 or gt.shape[1] != 7 or len(cls) != len(gt):
                raise DatasetError(
                    f"{path}: {where}.annos: gt_boxes_upright_depth {gt.shape} / class {cls.shape} "
                    f"do not match ([G, 7] and [G])"
                )
            if not np.isfinite(gt).all():
                raise DatasetError(f"{path}: {where}.annos.gt_boxes_upright_depth contains NaN or Inf")
            bad = (cls < 0) | (cls >= len(CLASSES))
            if bad.any():  # mmdet3d v0 keeps only the 10 classes in annos (ids 0..9): another id is damage
                raise DatasetError(
                    f"{path}: {where}.annos.class holds {int(bad.sum())} id(s) outside 0..{len(CLASSES) - 1} "
                    f"({sorted(set(cls[bad].tolist()))[:5]}); the v0 infos keep only the {len(CLASSES)} VoteNet "
                    f"classes {list(CLASSES)}, so such a box would be dropped silently")
            boxes = gt.copy()
            boxes[:, 6] = -gt[:, 6]  # v0 depth boxes turn clockwise; ours counter-clockwise
            labels = cls
        rtilt = k = None
        calib = info.get("calib") if isinstance(info, dict) else None
        if isinstance(calib, dict) and "K" in calib and "Rt" in calib:
            mats = {}
            for key in ("K", "Rt"):
                try:
                    m = np.asarray(calib[key], dtype=np.float64)
                except (TypeError, ValueError):
                    m = None
                if m is None or m.size != 9 or not np.isfinite(m).all():
                    got = "non-numeric values" if m is None else f"shape {m.shape}" + (
                        "" if m.size != 9 else " with NaN or Inf")
                    raise DatasetError(f"{path}: {where}.calib.{key} must be 9 finite numbers (a 3x3 matrix), "
                                       f"got {got}")
                mats[key] = m
            k = np.reshape(mats["K"], (3, 3), order="F")
            rtilt = mats["Rt"].reshape(3, 3)
        return _Frame(frame=frame, layout="mmdet3d_infos_v0", points_path=self._find_points(frame, "infos", base),
                      num_features=nfeat, boxes=boxes, labels=labels, rtilt=rtilt, k=k)

    def _frame_from_v2(self, info: Any, i: int, path: Path, base: Path, classes: tuple[str, ...]) -> _Frame:
        where = f"data_list[{i}]"
        lp = _require(info, "lidar_points", where, path)
        lidar_path = str(_require(lp, "lidar_path", f"{where}.lidar_points", path))
        nfeat = _int_field(lp.get("num_pts_feats", 6), f"{where}.lidar_points.num_pts_feats", path, 3)
        try:
            frame = int(Path(lidar_path).stem)
        except ValueError:
            raise DatasetError(f"{path}: {where}.lidar_points.lidar_path {lidar_path!r} is not NNNNNN.bin") from None
        boxes, labels = [], []
        for j, inst in enumerate(info.get("instances", []) or []):
            raw = _require(inst, "bbox_3d", f"{where}.instances[{j}]", path)
            try:
                b = np.asarray(raw, dtype=np.float64)
            except (TypeError, ValueError):
                b = None
            lab = _int_field(_require(inst, "bbox_label_3d", f"{where}.instances[{j}]", path),
                             f"{where}.instances[{j}].bbox_label_3d", path, None)
            if b is None or b.shape != (7,) or not np.isfinite(b).all():
                raise DatasetError(f"{path}: {where}.instances[{j}].bbox_3d must be 7 finite numbers, got "
                                   f"{b.tolist() if b is not None else repr(raw)[:80]}")
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
