"""NYUv2 file formats: low-level readers of the official files and of the MTAN npy release.

* ``nyu_depth_v2_labeled.mat``: MATLAB v7.3 = HDF5, read lazily with h5py, one frame per access.
  h5py reverses MATLAB's axis order: ``images`` is [1449, 3, W=640, H=480] uint8, ``depths`` /
  ``rawDepths`` [1449, W, H] float, ``labels`` [1449, W, H] uint16 in 0..894 (0 = unlabeled); the
  last two axes are swapped back to H x W.
* ``splits.mat``, ``classMapping40.mat``, ``class13Mapping.mat``: read with scipy (:func:`_loadmat`),
  each at the root or under ``meta/`` (:func:`_find`).
* The published label PNGs ``{train,test}_labels_{40,13}/new_nyu_class{40,13}_%04d.png`` (mode L,
  0 = void, 1..C; suffix = 1-based frame index): :func:`read_label_png`.
* The MTAN npy release ``{train,val}/{image,depth,normal,label}/<i>.npy`` (288x384; image HWC
  float64 in [0, 1], depth HWx1 metres with 0 = missing, normal HWx3, label float -1/0..12).

:class:`_FrameReaders` is the mixin of the ``nyuv2`` adapter that reads one frame (a :class:`_Frame`: where
it is in either layout) and builds the raw label -> target lookup table from the class mappings.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from einops import rearrange

from fusebench.datasets.base import DatasetError, DatasetNotFoundError
from fusebench.datasets.normals import mtan_to_camera

LABELED_MAT = "nyu_depth_v2_labeled.mat"
SPLITS_MAT = "splits.mat"
MAP40_MAT = "classMapping40.mat"
MAP13_MAT = "class13Mapping.mat"
META_DIRS = ("", "meta")  # metadata files are looked up at the root, then under meta/
NUM_RAW_CLASSES = 894
CLASS40_NAMES = (
    "wall", "floor", "cabinet", "bed", "chair", "sofa", "table", "door", "window", "bookshelf", "picture",
    "counter", "blinds", "desk", "shelves", "curtain", "dresser", "pillow", "mirror", "floor mat", "clothes",
    "ceiling", "books", "refridgerator", "television", "paper", "towel", "shower curtain", "box",
    "whiteboard", "person", "night stand", "toilet", "sink", "lamp", "bathtub", "bag", "otherstructure",
    "otherfurniture", "otherprop",
)
#: 40 -> 13 mapping of class13Mapping.mat (13-class order: bed, books, ceiling, chair, floor, furniture,
#: objects, picture, sofa, table, tv, wall, window)
LABELS13 = (12, 5, 6, 1, 4, 9, 10, 12, 13, 6, 8, 6, 13, 10, 6, 13, 6, 7, 7, 5, 7, 3, 2, 6, 11, 7, 7, 7, 7, 7,
            7, 6, 7, 7, 7, 7, 7, 7, 6, 7)
CLASS13_NAMES = ("bed", "books", "ceiling", "chair", "floor", "furniture", "objects", "picture", "sofa",
                 "table", "tv", "wall", "window")


@dataclass(frozen=True)
class _Frame:
    """Where one frame is: read by :class:`_FrameReaders`, listed by the layouts (:mod:`.layouts`)."""

    pos: int  # 0-based position in the .mat file (official) or npy file number (mtan)
    frame: int  # 1-based labeled-set index; -1 when unknown (mtan without splits.mat)
    folder: str = ""  # mtan: "train" or "val"; official: "train"/"test" (label PNG folder)


def read_label_png(path: str | os.PathLike, classes: int) -> np.ndarray:
    """A published NYUv2 label PNG (mode L, 0 = void, 1..classes) -> int64 [H, W] with -1 = void."""
    from PIL import Image

    path = Path(path)
    if not path.is_file():
        raise DatasetNotFoundError(f"nyuv2: label PNG {path} is missing")
    try:
        with Image.open(path) as im:
            if im.mode not in ("L", "P", "I", "I;16"):
                raise DatasetError(f"nyuv2: label PNG {path} has mode {im.mode!r}; expected 8-bit grayscale 'L'")
            arr = np.asarray(im).astype(np.int64)
    except OSError as e:
        raise DatasetError(f"nyuv2: cannot decode label PNG {path}: {e}") from e
    if arr.size and (arr.min() < 0 or arr.max() > classes):
        raise DatasetError(f"nyuv2: label PNG {path} has values up to {arr.max()}; expected 0..{classes}")
    return arr - 1


def _find(root: Path, name: str) -> Path | None:
    for d in META_DIRS:
        p = root / d / name if d else root / name
        if p.is_file():
            return p
    return None


def _loadmat(path: Path, keys: tuple[str, ...]) -> dict[str, Any]:
    import scipy.io

    try:
        mat = scipy.io.loadmat(str(path))
    except Exception as e:  # scipy raises ValueError/TypeError/OSError on a damaged file
        raise DatasetError(f"nyuv2: cannot read {path} as a MATLAB .mat file: {e}") from e
    missing = [k for k in keys if k not in mat]
    if missing:
        found = sorted(k for k in mat if not k.startswith("__"))
        raise DatasetError(f"nyuv2: {path} lacks key(s) {missing}; found {found}")
    return mat


def _cell_strings(cells: np.ndarray) -> list[str]:
    """A MATLAB cell array of strings as loaded by scipy ([1, n] object of 1-element str arrays)."""
    out = []
    for c in np.asarray(cells).ravel():
        c = np.asarray(c).ravel()
        out.append(str(c[0]) if c.size else "")
    return out


class _FrameReaders:
    """Mixin of :class:`~fusebench.datasets.nyuv2.NYUv2`: per-frame readers of both layouts."""

    # official ---------------------------------------------------------------------------------
    def _label_lut(self) -> np.ndarray:
        """Lookup table raw label 0..894 -> target (-1 = void)."""
        lut = np.full(NUM_RAW_CLASSES + 1, -1, dtype=np.int64)
        if self.classes == NUM_RAW_CLASSES:
            lut[1:] = np.arange(NUM_RAW_CLASSES)
            return lut
        p40 = self._require(MAP40_MAT, "894 -> 40 class mapping")
        m40 = _loadmat(p40, ("mapClass",))
        map40 = np.asarray(m40["mapClass"]).ravel().astype(np.int64)
        if map40.shape != (NUM_RAW_CLASSES,) or map40.min() < 0 or map40.max() > 40:
            raise DatasetError(f"nyuv2: {p40}: mapClass must hold {NUM_RAW_CLASSES} values in 0..40, got "
                               f"shape {np.asarray(m40['mapClass']).shape}, range {map40.min()}..{map40.max()}")
        names40 = _cell_strings(m40["className"]) if "className" in m40 else []
        if self.classes == 40:
            lut[1:] = map40 - 1  # 0 (unmapped) -> -1 void
            self.class_names = names40
            return lut
        p13 = self._require(MAP13_MAT, "40 -> 13 class mapping")
        m13 = _loadmat(p13, ("classMapping13",))
        try:
            st = m13["classMapping13"][0, 0]
            labels13 = np.asarray(st["labels13"]).ravel().astype(np.int64)
            self.class_names = _cell_strings(st["classNames"])
        except (KeyError, ValueError, IndexError) as e:
            raise DatasetError(f"nyuv2: {p13}: expected struct classMapping13 with fields labels13 (1x40) and "
                               f"classNames (1x13): {e}") from e
        if labels13.shape != (40,) or labels13.min() < 1 or labels13.max() > 13:
            raise DatasetError(f"nyuv2: {p13}: labels13 must hold 40 values in 1..13, got {labels13.shape}")
        to13 = np.concatenate([[-1], labels13 - 1])  # index = 40-class id (0 = void)
        lut[1:] = to13[map40]
        return lut

    def _official_class_names(self) -> list[str]:
        """Class names in target order when the label LUT did not read them (``label_source='png'``):
        ``className`` of classMapping40.mat / ``classNames`` of class13Mapping.mat when present, else the
        official lists built in here; for 894 classes ``allClassName`` (or [] without the file)."""
        path = _find(self.root, MAP13_MAT if self.classes == 13 else MAP40_MAT)
        if path is None:
            return {13: list(CLASS13_NAMES), 40: list(CLASS40_NAMES)}.get(self.classes, [])
        if self.classes == 13:
            try:
                names = _cell_strings(_loadmat(path, ("classMapping13",))["classMapping13"][0, 0]["classNames"])
            except (KeyError, ValueError, IndexError) as e:
                raise DatasetError(f"nyuv2: {path}: expected struct classMapping13 with field classNames (1x13): "
                                   f"{e}") from e
        else:
            key = "className" if self.classes == 40 else "allClassName"
            names = _cell_strings(_loadmat(path, (key,))[key])
        if len(names) != self.classes:
            raise DatasetError(f"nyuv2: {path}: expected {self.classes} class names, got {len(names)}")
        return names

    def _open_mat(self):
        import h5py

        try:
            return h5py.File(self._mat_path, "r", rdcc_nbytes=16 * 2**20)
        except OSError as e:
            raise DatasetError(
                f"nyuv2: cannot open {self._mat_path} as a MATLAB v7.3 (HDF5) file ({e}); the file is "
                f"truncated, corrupt or not the v7.3 labeled set - re-download it"
            ) from e

    def _check_mat(self) -> tuple[int, tuple[int, int]]:
        needed = ["images", self.depth_source, "labels"]
        with self._open_mat() as f:
            missing = [k for k in needed if k not in f]
            if missing:
                raise DatasetError(f"nyuv2: {self._mat_path} lacks dataset(s) {missing}; found {sorted(f.keys())}")
            img, dep, lab = f["images"], f[self.depth_source], f["labels"]
            if img.ndim != 4 or img.shape[1] != 3:
                raise DatasetError(f"nyuv2: {self._mat_path}: 'images' has shape {img.shape}; expected "
                                   f"[N, 3, W, H] (MATLAB H x W x 3 x N read through h5py)")
            n, _, w, h = img.shape
            for name, ds in ((self.depth_source, dep), ("labels", lab)):
                if ds.shape != (n, w, h):
                    raise DatasetError(f"nyuv2: {self._mat_path}: {name!r} has shape {ds.shape}; expected "
                                       f"{(n, w, h)} to match 'images' {img.shape}")
            if img.dtype != np.uint8 or dep.dtype.kind != "f" or lab.dtype.kind not in "ui":
                raise DatasetError(f"nyuv2: {self._mat_path}: dtypes images={img.dtype}, {self.depth_source}="
                                   f"{dep.dtype}, labels={lab.dtype}; expected uint8, float, unsigned int")
        return n, (h, w)

    def _handle(self):
        """The per-process h5py handle (reopened after a fork, e.g. in DataLoader workers)."""
        pid = os.getpid()
        if self._h5 is None or self._h5_pid != pid:
            self._h5 = self._open_mat()
            self._h5_pid = pid
            self._h5_ds = {k: self._h5[k] for k in ("images", self.depth_source, "labels")}
        return self._h5_ds

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_h5"] = None
        state["_h5_ds"] = None
        state["_h5_pid"] = -1
        return state

    def close(self) -> None:
        if self._h5 is not None and self._h5_pid == os.getpid():
            self._h5.close()
        self._h5 = None
        self._h5_ds = None

    def _read_official(self, fr: _Frame) -> tuple[dict[str, np.ndarray], np.ndarray]:
        arrays: dict[str, np.ndarray] = {}
        need_depth = "depth" in self.modalities or "normal" in self.modalities
        if self.modalities or self.label_source == "mat":
            f = self._handle()
            try:
                if "rgb" in self.modalities:
                    img = f["images"][fr.pos]  # [3, W, H] uint8
                    arrays["rgb"] = rearrange(img, "c w h -> c h w").astype(np.float32) / 255.0
                if need_depth:
                    arrays["depth"] = np.ascontiguousarray(f[self.depth_source][fr.pos].T, dtype=np.float32)
                raw = f["labels"][fr.pos].T if self.label_source == "mat" else None
            except OSError as e:
                raise DatasetError(f"nyuv2: {self._mat_path}: cannot read frame {fr.frame}: {e}") from e
        if self.label_source == "png":
            sub = f"{fr.folder}_labels_{self.classes}"
            png = self.root / sub / f"new_nyu_class{self.classes}_{fr.frame:04d}.png"
            label = read_label_png(png, self.classes)
            for k, a in arrays.items():
                if a.shape[-2:] != label.shape:
                    raise DatasetError(f"nyuv2: {png}: the label image is {label.shape[0]} x {label.shape[1]} but "
                                       f"frame {fr.frame}'s {k} in {self._mat_path} is {a.shape[-2]} x {a.shape[-1]}; "
                                       f"the label PNGs must be the official ones for this .mat (480 x 640)")
        else:
            raw = np.asarray(raw)
            if raw.max(initial=0) > NUM_RAW_CLASSES:
                raise DatasetError(f"nyuv2: {self._mat_path}: frame {fr.frame} has label {raw.max()} > "
                                   f"{NUM_RAW_CLASSES}")
            label = self._lut[raw.astype(np.int64)]
        if "depth" in arrays:
            self._check_depth(arrays["depth"], f"{self._mat_path} ({self.depth_source}, frame {fr.frame})")
        return arrays, label

    # mtan -------------------------------------------------------------------------------------
    def _npy(self, fr: _Frame, sub: str, shape_tail: tuple[int, ...]) -> np.ndarray:
        path = self.root / fr.folder / sub / f"{fr.pos}.npy"
        try:
            arr = np.load(path, allow_pickle=False)
        except FileNotFoundError as e:
            raise DatasetNotFoundError(f"nyuv2: missing {path}") from e
        except EOFError as e:  # numpy: "No data left in file" for a 0-byte file
            raise DatasetError(f"nyuv2: {path} is empty (0 bytes): a truncated or unfinished copy, not a .npy "
                               "array; re-download or re-extract it") from e
        except (OSError, ValueError) as e:
            raise DatasetError(f"nyuv2: cannot read {path} as a .npy array (truncated or damaged file?): {e}") from e
        if not isinstance(arr, np.ndarray):  # np.load reads a .npz archive whatever the file's name
            names = list(arr.files)
            arr.close()
            raise DatasetError(f"nyuv2: {path} is a .npz archive (arrays {names}), not a .npy array; expected one "
                               f".npy array per frame, as MTAN ships")
        if arr.dtype.kind not in "iuf":  # strings, objects, bools, complex (its imaginary part would be dropped)
            raise DatasetError(f"nyuv2: {path} has dtype {arr.dtype}; expected a real numeric array (float or "
                               f"integer; MTAN ships float32 / float64)")
        if arr.ndim != 2 + len(shape_tail) or tuple(arr.shape[2:]) != shape_tail:
            want = "[H, W" + "".join(f", {s}" for s in shape_tail) + "]"
            raise DatasetError(f"nyuv2: {path} has shape {arr.shape}; expected {want}")
        if not np.all(np.isfinite(arr)):
            raise DatasetError(f"nyuv2: {path} contains NaN/Inf")
        return arr

    def _read_mtan(self, fr: _Frame) -> tuple[dict[str, np.ndarray], np.ndarray]:
        arrays: dict[str, np.ndarray] = {}
        label = self._npy(fr, "label", ())
        if "rgb" in self.modalities:
            img = self._npy(fr, "image", (3,))
            if img.size and (img.min() < 0 or img.max() > 1):
                raise DatasetError(f"nyuv2: {self.root / fr.folder}/image/{fr.pos}.npy: values range "
                                   f"{img.min():g}..{img.max():g}; MTAN images are RGB scaled to [0, 1] (rgb is "
                                   f"documented as [0, 1]); an image in 0..255 was not divided by 255")
            arrays["rgb"] = rearrange(img, "h w c -> c h w").astype(np.float32)
        if "depth" in self.modalities or ("normal" in self.modalities and self.normal_source == "computed"):
            arrays["depth"] = rearrange(self._npy(fr, "depth", (1,)), "h w c -> c h w")[0].astype(np.float32)
            self._check_depth(arrays["depth"], str(self.root / fr.folder / "depth" / f"{fr.pos}.npy"))
        if "normal" in self.modalities and self.normal_source == "shipped":
            raw = self._npy(fr, "normal", (3,))
            self._check_unit_normals(raw, str(self.root / fr.folder / "normal" / f"{fr.pos}.npy"))
            n = mtan_to_camera(raw)
            arrays["normal"] = rearrange(n, "h w c -> c h w").astype(np.float32)
        for k, a in arrays.items():
            if a.shape[-2:] != label.shape:
                raise DatasetError(f"nyuv2: {self.root / fr.folder}/{k}: size {a.shape[-2:]} differs from the "
                                   f"label's {label.shape} for frame file {fr.pos}.npy")
        lab = label.astype(np.int64)
        if np.any(lab != label) or lab.min() < -1 or lab.max() >= 13:
            raise DatasetError(f"nyuv2: {self.root / fr.folder}/label/{fr.pos}.npy: labels must be integers in "
                               f"-1..12, got range {label.min()}..{label.max()}")
        return arrays, lab

    #: how far from 1 the length of a shipped normal may be (MTAN's float64 normals: within 1e-15; float32: 1e-7)
    NORMAL_LENGTH_TOL = 1e-3

    @classmethod
    def _check_unit_normals(cls, normal: np.ndarray, where: str) -> None:
        """Shipped normals are unit vectors, or exactly (0, 0, 0) where invalid (PROVENANCE: MTAN's normal GT);
        anything else (normals scaled, or encoded as (n + 1) / 2 in [0, 1] as image releases store them) was
        passed on as if it were unit normals. Raises :class:`DatasetError` naming the file."""
        length = np.sqrt(np.einsum("...c,...c->...", normal.astype(np.float64), normal.astype(np.float64)))
        valid = length > 0
        bad = valid & (np.abs(length - 1.0) > cls.NORMAL_LENGTH_TOL)
        if bad.any():
            raise DatasetError(
                f"nyuv2: {where}: {int(bad.sum())} of {int(valid.sum())} non-zero normals are not unit vectors "
                f"(lengths {length[bad].min():.4g}..{length[bad].max():.4g}); expected unit normals with components "
                "in [-1, 1], and (0, 0, 0) where invalid (normals stored as (n + 1) / 2 or scaled must be decoded "
                "first)")

    # shared -----------------------------------------------------------------------------------
    @staticmethod
    def _check_depth(depth: np.ndarray, where: str) -> None:
        if not np.all(np.isfinite(depth)):
            raise DatasetError(f"nyuv2: {where}: depth contains {int((~np.isfinite(depth)).sum())} NaN/Inf "
                               f"values; expected metres with 0 = missing")
        if depth.min(initial=0.0) < 0:
            raise DatasetError(f"nyuv2: {where}: negative depth {depth.min()}")
