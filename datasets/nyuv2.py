"""NYU Depth v2 (labeled set) adapter ``nyuv2``: RGB, depth and surface normals -> semantic labels.

Dataset: Silberman, Hoiem, Kohli, Fergus, "Indoor Segmentation and Support Inference from RGBD
Images", ECCV 2012 (1449 densely labeled Kinect frames, 894 raw classes). 40-class task: Gupta,
Arbelaez, Malik, CVPR 2013 (``classMapping40.mat``); 13-class task: Couprie et al. 2013 as used by
MTAN (Liu, Johns, Davison, CVPR 2019) (``class13Mapping.mat``).

Layouts (``layout=`` option, auto-detected by default; see docs/datasets/nyuv2.md):

* ``official``: ``nyu_depth_v2_labeled.mat`` (MATLAB v7.3 = HDF5, read lazily with h5py, one frame
  per access) + ``splits.mat`` + ``classMapping40.mat`` (+ ``class13Mapping.mat`` for 13 classes),
  each at the root or under ``meta/``. h5py reverses MATLAB's axis order: ``images`` is
  [1449, 3, W=640, H=480] uint8, ``depths`` / ``rawDepths`` [1449, W, H] float, ``labels``
  [1449, W, H] uint16 in 0..894 (0 = unlabeled); the last two axes are swapped back to H x W.
  Optionally the labels come from the published label PNGs ``{train,test}_labels_{40,13}/
  new_nyu_class{40,13}_%04d.png`` (mode L, 0 = void, 1..C; suffix = 1-based frame index).
* ``mtan``: the MTAN npy release ``{train,val}/{image,depth,normal,label}/<i>.npy`` (288x384;
  image HWC float64 in [0, 1], depth HWx1 metres with 0 = missing, normal HWx3, label float -1/0..12).
  MTAN's ``val`` folder is the official test split.

Splits: ``test`` = the 654 official test frames (never used for selection); ``train`` / ``val`` are
carved out of the 795 official train frames: a frame goes to ``val`` when its key
``sha256(f"{split_seed}:{frame}")`` is among the ``round(val_fraction * 795)`` smallest
(defaults 0.1 and 0 -> 80 val / 715 train), so the carve is independent of library versions.

Sample (see :mod:`fusebench.datasets.base`):

Shape:
    modalities["rgb"]: [3, H, W] float32 in [0, 1]
    modalities["depth"]: [1, H, W] float32 metres (0 = missing)
    modalities["normal"]: [3, H, W] float32 camera-frame unit normals (0 = invalid), see
        :mod:`fusebench.datasets.normals`
    target: LongTensor [H, W], classes 0..C-1, -1 = void
    meta: {"id", "frame" (1-based labeled index, -1 if unknown), "height", "width" (original size),
        "layout", "split"}
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from einops import rearrange

from fusebench.datasets import DATASETS
from fusebench.datasets.base import (
    DataFile,
    DatasetError,
    DatasetNotFoundError,
    Modality,
    MultimodalDataset,
    SyntheticSpec,
    cache_home,
)
from fusebench.datasets.normals import (
    NORMAL_METHODS,
    default_radius_px,
    estimate_normals,
    mtan_to_camera,
    scaled_intrinsics,
)

log = logging.getLogger(__name__)

LABELED_MAT = "nyu_depth_v2_labeled.mat"
SPLITS_MAT = "splits.mat"
MAP40_MAT = "classMapping40.mat"
MAP13_MAT = "class13Mapping.mat"
META_DIRS = ("", "meta")  # metadata files are looked up at the root, then under meta/
NUM_RAW_CLASSES = 894
LAYOUTS = ("official", "mtan")
CLASS_OPTIONS = (40, 13, 894)
LABEL_SOURCES = ("mat", "png")
DEPTH_SOURCES = ("depths", "rawDepths")
NORMAL_SOURCES = ("shipped", "computed")
NORMALS_VERSION = 1
_OPTIONS = (
    "layout", "classes", "val_fraction", "split_seed", "label_source", "depth_source",
    "normal_method", "normal_radius_px", "normal_source", "normal_cache", "flip_p",
)
_MTAN_FOLDERS = ("image", "depth", "normal", "label")


@dataclass(frozen=True)
class _Frame:
    pos: int  # 0-based position in the .mat file (official) or npy file number (mtan)
    frame: int  # 1-based labeled-set index; -1 when unknown (mtan without splits.mat)
    folder: str = ""  # mtan: "train" or "val"; official: "train"/"test" (label PNG folder)


def carve_val(frames: list[int], val_fraction: float, split_seed: int) -> tuple[list[int], list[int]]:
    """Split official train frames into (train, val): val = the ``round(val_fraction * n)`` frames with
    the smallest ``sha256(f"{split_seed}:{frame}")``. Both lists sorted ascending."""
    if not 0.0 <= val_fraction < 1.0:
        raise DatasetError(f"nyuv2: val_fraction must be in [0, 1), got {val_fraction}")
    n_val = int(round(val_fraction * len(frames)))
    keyed = sorted(frames, key=lambda f: hashlib.sha256(f"{split_seed}:{f}".encode()).hexdigest())
    val = set(keyed[:n_val])
    return sorted(f for f in frames if f not in val), sorted(val)


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


@DATASETS.register("nyuv2")
class NYUv2(MultimodalDataset):
    """NYU Depth v2 labeled frames (see module docstring).

    Options: ``layout`` ('official' | 'mtan', auto), ``classes`` (40 default, 13, 894; mtan: 13),
    ``val_fraction`` (0.1), ``split_seed`` (0), ``label_source`` ('mat' | 'png', official layout),
    ``depth_source`` ('depths' in-painted | 'rawDepths'), ``normal_method`` ('pca' | 'open3d'),
    ``normal_radius_px`` (PCA window radius, default 10 px at 640 px width), ``normal_source``
    ('shipped' for mtan by default, 'computed'), ``normal_cache`` (True: ``$FUSEBENCH_CACHE/nyuv2-normals``,
    a path, or False), ``flip_p`` (train augmentation: horizontal flip probability, 0.5).
    """

    #: dataset.options this adapter reads (others are errors, see MultimodalDataset.OPTIONS)
    OPTIONS = frozenset({"classes", "depth_source", "flip_p", "label_source", "layout", "normal_cache", "normal_method",
                         "normal_radius_px", "normal_source", "split_seed", "val_fraction"})

    id: ClassVar[str] = "nyuv2"
    task: ClassVar[str] = "segmentation"
    num_classes: ClassVar[int | None] = 40
    SYNTHETIC_VERSION: ClassVar[int] = 1
    PREPROCESS_VERSION: ClassVar[int] = 1
    #: `fusebench bench data`: synthetic twin at the real 480 x 640 resolution
    BENCH_SPEC: ClassVar[dict] = {"num_samples": 48, "options": {"height": 480, "width": 640}}
    BENCH_TARGET: ClassVar[float] = 500.0
    MODALITIES: ClassVar[tuple[Modality, ...]] = (
        Modality("rgb", "image", 3, description="Kinect RGB, [3, H, W] in [0, 1]"),
        Modality("depth", "depth", 1, description="depth in metres, 0 = missing"),
        Modality("normal", "normal", 3, description="camera-frame surface normals (from depth or MTAN GT)"),
    )
    FILES: ClassVar[tuple[DataFile, ...]] = (
        DataFile(LABELED_MAT, "labeled set, MATLAB v7.3 (HDF5): images, depths, rawDepths, labels (2.8 GB)"),
        DataFile(SPLITS_MAT, "official split: trainNdxs (795) / testNdxs (654), 1-based; root or meta/"),
        DataFile(MAP40_MAT, "894 -> 40 class mapping (mapClass, className); root or meta/"),
        DataFile(MAP13_MAT, "40 -> 13 class mapping (classMapping13.labels13); only for classes=13",
                 required=False),
        DataFile("test_labels_40/new_nyu_class40_%04d.png", "optional 40-class label PNGs (label_source=png); "
                 "also train_labels_40/, test_labels_13/, train_labels_13/", required=False),
        DataFile("{train,val}/{image,depth,normal,label}/<i>.npy", "alternative layout 'mtan' (MTAN release, "
                 "288x384, 13 classes; its val = official test)", required=False),
    )
    INFO: ClassVar[str] = """\
NYU Depth Dataset V2, labeled set (Silberman et al., ECCV 2012). Research use; cite the paper.
  labeled frames: http://horatio.cs.nyu.edu/mit/silberman/nyu_depth_v2/nyu_depth_v2_labeled.mat
  splits.mat, classMapping40.mat, class13Mapping.mat: https://github.com/ankurhanda/nyuv2-meta-data
    (the 40-class mapping is Gupta et al., CVPR 2013; label PNGs test_labels_40/ etc. are in the same repo)
  MTAN preprocessed release (layout 'mtan'): https://github.com/lorenmt/mtan (NYUv2 link in its README)
Splits: test = official 654 test frames; train/val carved from the 795 official train frames
(val_fraction=0.1, split_seed=0)."""

    # -- construction -------------------------------------------------------------------------
    def _index(self) -> list[_Frame]:
        opts = dict(self._opts_rest)
        unknown = [k for k in opts if k not in _OPTIONS and k != "use_cache" and not k.startswith("cache")]
        if unknown:
            raise DatasetError(f"nyuv2: unknown option(s) {unknown}; valid options: {list(_OPTIONS)}")
        self.layout = self._detect_layout(opts.get("layout"))
        default_classes = 13 if self.layout == "mtan" else 40
        self.classes = int(opts.get("classes", default_classes))
        if self.classes not in CLASS_OPTIONS:
            raise DatasetError(f"nyuv2: classes={self.classes} is not one of {CLASS_OPTIONS}")
        if self.layout == "mtan" and self.classes != 13:
            raise DatasetError(f"nyuv2: the mtan layout under {self.root} ships 13-class labels; classes="
                               f"{self.classes} needs the official layout")
        self.num_classes = self.classes  # instance attribute shadows the class default
        self.val_fraction = float(opts.get("val_fraction", 0.1))
        self.split_seed = int(opts.get("split_seed", 0))
        self.label_source = str(opts.get("label_source", "mat"))
        if self.label_source not in LABEL_SOURCES:
            raise DatasetError(f"nyuv2: label_source={self.label_source!r} is not one of {LABEL_SOURCES}")
        if self.label_source == "png" and self.classes not in (40, 13):
            raise DatasetError("nyuv2: label PNGs exist for classes 40 and 13 only")
        self.depth_source = str(opts.get("depth_source", "depths"))
        if self.depth_source not in DEPTH_SOURCES:
            raise DatasetError(f"nyuv2: depth_source={self.depth_source!r} is not one of {DEPTH_SOURCES}")
        self.normal_method = str(opts.get("normal_method", "pca"))
        if self.normal_method not in NORMAL_METHODS:
            raise DatasetError(f"nyuv2: normal_method={self.normal_method!r} is not one of {NORMAL_METHODS}")
        radius = opts.get("normal_radius_px")
        self.normal_radius_px = None if radius is None else int(radius)
        self.normal_source = str(opts.get("normal_source", "shipped" if self.layout == "mtan" else "computed"))
        if self.normal_source not in NORMAL_SOURCES or (self.layout == "official" and self.normal_source == "shipped"):
            raise DatasetError(f"nyuv2: normal_source={self.normal_source!r} is invalid for layout "
                               f"{self.layout!r} (official: 'computed'; mtan: 'shipped' or 'computed')")
        self.flip_p = float(opts.get("flip_p", 0.5))
        self._normal_cache_opt = opts.get("normal_cache", True)
        self._h5 = None
        self._h5_ds: dict[str, Any] | None = None
        self._h5_pid = -1
        self.class_names: list[str] = []
        if self.layout == "official":
            frames = self._index_official()
        else:
            frames = self._index_mtan()
        self._normal_dir = self._normal_cache_dir()
        return frames

    def _detect_layout(self, layout: str | None) -> str:
        root = self.root
        if layout is not None:
            if layout not in LAYOUTS:
                raise DatasetError(f"nyuv2: layout={layout!r} is not one of {LAYOUTS}")
            return layout
        mtan = [root / d / "image" for d in ("train", "val") if (root / d / "image").is_dir()]
        if mtan and (root / LABELED_MAT).is_file():
            raise DatasetError(
                f"nyuv2: {root} holds both {LABELED_MAT} (layout 'official') and MTAN folders "
                f"({', '.join(str(p) for p in mtan)}: layout 'mtan'); pass layout='official' or layout='mtan'"
            )
        if mtan:  # a splits.mat next to the MTAN folders only adds frame numbers
            return "mtan"
        if (root / LABELED_MAT).is_file() or _find(root, SPLITS_MAT) is not None:
            return "official"
        raise DatasetNotFoundError(
            f"nyuv2: no NYUv2 layout recognised under {root}. Looked for {LABELED_MAT} / {SPLITS_MAT} "
            f"(at the root or meta/: layout 'official') and train/image/ or val/image/ (layout 'mtan').\n"
            f"{self.info()}"
        )

    def _require(self, name: str, why: str) -> Path:
        p = _find(self.root, name)
        if p is None:
            raise DatasetNotFoundError(
                f"nyuv2: missing {name} ({why}); looked in {self.root} and {self.root / 'meta'}.\n{self.info()}"
            )
        return p

    # official ---------------------------------------------------------------------------------
    def _index_official(self) -> list[_Frame]:
        splits = _loadmat(self._require(SPLITS_MAT, "official train/test split"), ("trainNdxs", "testNdxs"))
        self._split_file = _find(self.root, SPLITS_MAT)
        train = [int(x) for x in np.asarray(splits["trainNdxs"]).ravel()]
        test = [int(x) for x in np.asarray(splits["testNdxs"]).ravel()]
        if set(train) & set(test):
            raise DatasetError(f"nyuv2: {_find(self.root, SPLITS_MAT)}: trainNdxs and testNdxs overlap")
        if min(train + test, default=1) < 1:
            raise DatasetError(f"nyuv2: {_find(self.root, SPLITS_MAT)}: indices must be 1-based")
        self._train_set = frozenset(train)
        if self.split == "test":
            chosen = sorted(test)
        else:
            tr, va = carve_val(sorted(train), self.val_fraction, self.split_seed)
            chosen = tr if self.split == "train" else va

        self._mat_path = self.root / LABELED_MAT
        need_mat = bool(self.modalities) or self.label_source == "mat"
        self.num_frames = None
        if need_mat:
            if not self._mat_path.is_file():
                raise DatasetNotFoundError(
                    f"nyuv2: missing {self._mat_path} (the labeled frames; needed for modalities "
                    f"{self.modalities} / label_source={self.label_source!r}).\n{self.info()}"
                )
            self.num_frames, self.frame_size = self._check_mat()
            if max(train + test, default=0) > self.num_frames:
                raise DatasetError(f"nyuv2: {_find(self.root, SPLITS_MAT)} refers to frame "
                                   f"{max(train + test)} but {self._mat_path} holds {self.num_frames}")
        self._lut = self._label_lut() if self.label_source == "mat" else None
        if not self.class_names:
            self.class_names = self._official_class_names()
        return [_Frame(pos=f - 1, frame=f, folder="train" if f in self._train_set else "test") for f in chosen]

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
            label = read_label_png(self.root / sub / f"new_nyu_class{self.classes}_{fr.frame:04d}.png", self.classes)
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
    def _index_mtan(self) -> list[_Frame]:
        folder = "val" if self.split == "test" else "train"
        base = self.root / folder
        if not base.is_dir():
            raise DatasetNotFoundError(
                f"nyuv2: split {self.split!r} of the mtan layout needs {base}/{{image,depth,normal,label}}/ "
                f"(MTAN's {folder!r} folder{'; its val = official test' if folder == 'val' else ''}).\n{self.info()}"
            )
        need = {"label"} | {"image" if m == "rgb" else m for m in self.modalities}
        if "normal" in self.modalities and self.normal_source == "computed":
            need.add("depth")
        counts = {}
        for sub in sorted(need):
            d = base / sub
            if not d.is_dir():
                raise DatasetNotFoundError(f"nyuv2: missing folder {d} (mtan layout)")
            nums = sorted(int(m.group(1)) for p in d.iterdir() if (m := re.fullmatch(r"(\d+)\.npy", p.name)))
            if nums != list(range(len(nums))):
                raise DatasetError(f"nyuv2: {d}: expected files 0.npy .. {len(nums) - 1}.npy without gaps")
            counts[sub] = len(nums)
        if len(set(counts.values())) != 1:
            raise DatasetError(f"nyuv2: {base}: folders hold different numbers of frames: {counts}")
        n = next(iter(counts.values()))
        self._split_file = base / "label"  # the split is the folder: its label files list the frames
        # frame ids from splits.mat when it is present (MTAN keeps the official order)
        sp = _find(self.root, SPLITS_MAT)
        ids = list(range(-1, -n - 1, -1))
        if sp is not None:
            s = _loadmat(sp, ("trainNdxs", "testNdxs"))
            official = [int(x) for x in np.asarray(s["testNdxs" if folder == "val" else "trainNdxs"]).ravel()]
            if len(official) == n:
                ids = official
            else:
                log.warning("nyuv2: %s lists %d frames for MTAN's %r folder but %s holds %d; frame numbers "
                            "are left unknown (-1)", sp, len(official), folder, base, n)
        positions = list(range(n))
        if self.split != "test":
            tr, va = carve_val(positions, self.val_fraction, self.split_seed)
            positions = tr if self.split == "train" else va
        self.class_names = ["bed", "books", "ceiling", "chair", "floor", "furniture", "objects", "picture",
                            "sofa", "table", "tv", "wall", "window"]
        return [_Frame(pos=i, frame=ids[i] if ids[i] > 0 else -1, folder=folder) for i in positions]

    def _npy(self, fr: _Frame, sub: str, shape_tail: tuple[int, ...]) -> np.ndarray:
        path = self.root / fr.folder / sub / f"{fr.pos}.npy"
        try:
            arr = np.load(path, allow_pickle=False)
        except FileNotFoundError as e:
            raise DatasetNotFoundError(f"nyuv2: missing {path}") from e
        except (OSError, ValueError) as e:
            raise DatasetError(f"nyuv2: cannot read {path} as a .npy array: {e}") from e
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
            arrays["rgb"] = rearrange(self._npy(fr, "image", (3,)), "h w c -> c h w").astype(np.float32)
        if "depth" in self.modalities or ("normal" in self.modalities and self.normal_source == "computed"):
            arrays["depth"] = rearrange(self._npy(fr, "depth", (1,)), "h w c -> c h w")[0].astype(np.float32)
            self._check_depth(arrays["depth"], str(self.root / fr.folder / "depth" / f"{fr.pos}.npy"))
        if "normal" in self.modalities and self.normal_source == "shipped":
            n = mtan_to_camera(self._npy(fr, "normal", (3,)))
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

    # shared -----------------------------------------------------------------------------------
    @staticmethod
    def _check_depth(depth: np.ndarray, where: str) -> None:
        if not np.all(np.isfinite(depth)):
            raise DatasetError(f"nyuv2: {where}: depth contains {int((~np.isfinite(depth)).sum())} NaN/Inf "
                               f"values; expected metres with 0 = missing")
        if depth.min(initial=0.0) < 0:
            raise DatasetError(f"nyuv2: {where}: negative depth {depth.min()}")

    def _normal_cache_dir(self) -> Path | None:
        if "normal" not in self.modalities or self.normal_source != "computed" or not self._normal_cache_opt:
            return None
        base = (Path(self._normal_cache_opt) if isinstance(self._normal_cache_opt, (str, os.PathLike))
                else cache_home() / "nyuv2-normals")
        src = self._mat_path if self.layout == "official" else self.root / ("val" if self.split == "test" else "train")
        st = src.stat()
        key = f"{src.resolve()}|{st.st_size}|{st.st_mtime_ns}|{self.layout}|{self.depth_source}|" \
              f"{self.normal_method}|{self.normal_radius_px}|v{NORMALS_VERSION}"
        return base / hashlib.sha256(key.encode()).hexdigest()[:16]

    def _normals(self, depth: np.ndarray, fr: _Frame) -> np.ndarray:
        name = f"{fr.folder}-{fr.pos:05d}.npy"
        if self._normal_dir is not None:
            p = self._normal_dir / name
            if p.is_file():
                try:
                    arr = np.load(p)
                    if arr.shape == (3, *depth.shape):
                        return arr.astype(np.float32)
                except (OSError, ValueError):
                    log.warning("nyuv2: ignoring unreadable normal cache file %s", p)
        h, w = depth.shape
        n = estimate_normals(depth, self.normal_method, scaled_intrinsics(h, w),
                             self.normal_radius_px or default_radius_px(w))
        # stored as float16 in the normal cache: round always, so cached and fresh reads are identical
        n = n.astype(np.float16)
        if self._normal_dir is not None:
            self._normal_dir.mkdir(parents=True, exist_ok=True)
            tmp = self._normal_dir / f".{name}.{os.getpid()}.tmp"
            with open(tmp, "wb") as fh:
                np.save(fh, n)
            os.replace(tmp, self._normal_dir / name)
        return n.astype(np.float32)

    def source_files(self) -> list[Path]:
        """The input files the samples of this split depend on (for the prepared-cache manifest)."""
        if self.layout == "mtan":
            base = self.root / ("val" if self.split == "test" else "train")
            return sorted(p for sub in _MTAN_FOLDERS if (base / sub).is_dir() for p in (base / sub).glob("*.npy"))
        files = [p for p in (_find(self.root, n) for n in (SPLITS_MAT, MAP40_MAT, MAP13_MAT)) if p is not None]
        if self._mat_path.is_file():
            files.append(self._mat_path)
        if self.label_source == "png":
            for fr in self.samples:
                files.append(self.root / f"{fr.folder}_labels_{self.classes}" /
                             f"new_nyu_class{self.classes}_{fr.frame:04d}.png")
        return files

    def _load_raw(self, index: int) -> dict[str, Any]:
        fr: _Frame = self.samples[index]
        arrays, label = self._read_official(fr) if self.layout == "official" else self._read_mtan(fr)
        if "normal" in self.modalities and "normal" not in arrays:
            arrays["normal"] = self._normals(arrays["depth"], fr)
        mods: dict[str, torch.Tensor] = {}
        for m in self.modalities:
            a = arrays[m]
            mods[m] = torch.from_numpy(np.ascontiguousarray(a[None] if m == "depth" else a, dtype=np.float32))
        h, w = label.shape
        ident = f"{fr.frame:04d}" if fr.frame > 0 else f"{fr.folder}/{fr.pos}"
        return {
            "modalities": mods,
            "target": torch.from_numpy(np.ascontiguousarray(label, dtype=np.int64)),
            "meta": {"id": ident, "frame": fr.frame, "height": h, "width": w, "layout": self.layout,
                     "split": self.split},
        }

    def _augment(self, sample: dict[str, Any], rng: torch.Generator) -> dict[str, Any]:
        """Seeded horizontal flip with probability ``flip_p`` (normals: x component negated)."""
        if float(torch.rand((), generator=rng)) >= self.flip_p:
            return sample
        mods = {k: torch.flip(v, dims=[-1]) for k, v in sample["modalities"].items()}
        if "normal" in mods:
            mods["normal"] = mods["normal"] * torch.tensor([-1.0, 1.0, 1.0])[:, None, None]
        sample["modalities"] = mods
        sample["target"] = torch.flip(sample["target"], dims=[-1])
        return sample

    # synthetic twin -------------------------------------------------------------------------
    @classmethod
    def write_synthetic(cls, root: Path, spec: SyntheticSpec) -> None:
        """Write a deterministic twin in the official format (details: :func:`_write_synthetic`)."""
        _write_synthetic(Path(root), spec)


# ------------------------------------------------------------------------------------------------
# synthetic twin
# ------------------------------------------------------------------------------------------------

#: raw NYU class ids (1-based, official 894-class list) used by the twin, with their 40-class ids
SYN_RAW = {"wall": (21, 1), "floor": (11, 2), "ceiling": (4, 22), "cabinet": (3, 3), "bed": (157, 4),
           "table": (19, 7), "box": (26, 29)}
SYN_BOX_CLASSES = ("cabinet", "bed", "table", "box")
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
_MAT73_HEADER = b"MATLAB 7.3 MAT-file, Platform: GLNXA64, Created on: Thu Jan  1 00:00:00 1970 HDF5 schema 1.00 ."


def _cellstr(names: list[str] | tuple[str, ...]) -> np.ndarray:
    out = np.empty((1, len(names)), dtype=object)
    for i, s in enumerate(names):
        out[0, i] = s
    return out


def _ray_cast(h: int, w: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Ray-cast a random box room. Returns depth [H, W] (camera z, metres) and raw labels [H, W].

    World frame = camera frame before the downward pitch: x right, y down, z forward, origin at the
    camera; the floor is the plane y = cam_height; boxes stand on it (axis-aligned, bottom on the floor).
    """
    intr = scaled_intrinsics(h, w)
    cam_h = rng.uniform(1.0, 1.6)
    pitch = np.radians(rng.uniform(4.0, 20.0))
    room_h = rng.uniform(2.5, 2.9)
    z_back = rng.uniform(3.5, 5.5)
    x_left, x_right = -rng.uniform(1.6, 2.6), rng.uniform(1.6, 2.6)
    u = np.arange(w)[None, :] * np.ones((h, 1))
    v = np.arange(h)[:, None] * np.ones((1, w))
    ray_cam = np.stack([(u - intr.cx) / intr.fx, (v - intr.cy) / intr.fy, np.ones_like(u)], axis=-1)
    c, s = np.cos(pitch), np.sin(pitch)
    rot = np.array([[1.0, 0.0, 0.0], [0.0, c, s], [0.0, -s, c]])  # camera z axis -> (0, s, c): looks down
    d = np.einsum("ij,hwj->hwi", rot, ray_cam)  # world ray with camera-z component 1 -> t = depth
    t_best = np.full((h, w), np.inf)
    lab = np.zeros((h, w), dtype=np.int64)

    def hit_plane(axis: int, value: float, raw: int) -> None:
        with np.errstate(divide="ignore", invalid="ignore"):
            t = value / d[..., axis]
        ok = (t > 1e-6) & (t < t_best)
        t_best[ok] = t[ok]
        lab[ok] = raw

    hit_plane(1, cam_h, SYN_RAW["floor"][0])
    hit_plane(1, cam_h - room_h, SYN_RAW["ceiling"][0])
    hit_plane(2, z_back, SYN_RAW["wall"][0])
    hit_plane(0, x_left, SYN_RAW["wall"][0])
    hit_plane(0, x_right, SYN_RAW["wall"][0])
    for _ in range(int(rng.integers(1, 4))):
        name = SYN_BOX_CLASSES[int(rng.integers(len(SYN_BOX_CLASSES)))]
        sx, sy, sz = rng.uniform(0.4, 1.0), rng.uniform(0.3, 1.1), rng.uniform(0.4, 0.9)
        cx = rng.uniform(max(x_left + sx / 2 + 0.1, -1.0), min(x_right - sx / 2 - 0.1, 1.0))
        cz = rng.uniform(1.6, z_back - sz / 2 - 0.2)
        lo = np.array([cx - sx / 2, cam_h - sy, cz - sz / 2])
        hi = np.array([cx + sx / 2, cam_h, cz + sz / 2])
        with np.errstate(divide="ignore", invalid="ignore"):
            t1, t2 = lo / d, hi / d
        t_near = np.nanmax(np.minimum(t1, t2), axis=-1)
        t_far = np.nanmin(np.maximum(t1, t2), axis=-1)
        ok = (t_near <= t_far) & (t_near > 1e-6) & (t_near < t_best)
        t_best[ok] = t_near[ok]
        lab[ok] = SYN_RAW[name][0]
    return t_best, lab


def _write_synthetic(root: Path, spec: SyntheticSpec) -> None:
    """Synthetic NYUv2 in the official on-disk format.

    ``nyu_depth_v2_labeled.mat``: MATLAB v7.3 header + HDF5 with ``images`` [N, 3, W, H] uint8,
    ``depths`` / ``rawDepths`` [N, W, H] float32, ``labels`` [N, W, H] uint16 (raw 894-class ids, 0 at
    object boundaries = unlabeled), chunked per frame and gzip-compressed like MATLAB's writer.
    ``splits.mat`` (trainNdxs / testNdxs, [n, 1] uint16, 1-based), ``classMapping40.mat`` (the official
    keys and shapes; mapClass agrees with the official mapping on the raw ids used here, all other ids
    -> 40 otherprop) and ``class13Mapping.mat``.

    Informativeness (``spec.informativeness``, 0..1, default 1): ``rgb`` blends the per-class colour
    with random colours and adds pixel noise (sigma 0.02 + 0.3 (1 - i)); ``depth`` sets multiplicative
    depth noise (sigma 0.002 + 0.1 (1 - i)), which also degrades the normals computed from it.
    Options: ``height`` (48), ``width`` (64), ``compression`` ('gzip' or None).
    """
    import h5py
    import scipy.io

    unknown = set(spec.informativeness) - {"rgb", "depth"}
    if unknown:
        raise ValueError(f"nyuv2 synthetic: informativeness keys {sorted(unknown)} unknown; use 'rgb', 'depth'")
    h = int(spec.options.get("height", 48))
    w = int(spec.options.get("width", 64))
    comp = spec.options.get("compression", "gzip")
    n = int(spec.num_samples)
    if n < 4 or h < 8 or w < 8:
        raise ValueError(f"nyuv2 synthetic: need num_samples >= 4 and height, width >= 8; got {n}, {h}x{w}")
    inf_rgb = float(spec.informativeness.get("rgb", 1.0))
    inf_depth = float(spec.informativeness.get("depth", 1.0))
    palette = {raw: np.random.default_rng([spec.seed, 999, raw]).uniform(0.1, 0.9, 3)
               for raw, _ in SYN_RAW.values()}
    root.mkdir(parents=True, exist_ok=True)
    path = root / LABELED_MAT
    with h5py.File(path, "w", userblock_size=512) as f:
        kw = {"compression": comp} if comp else {}
        images = f.create_dataset("images", (n, 3, w, h), np.uint8, chunks=(1, 3, w, h), **kw)
        depths = f.create_dataset("depths", (n, w, h), np.float32, chunks=(1, w, h), **kw)
        raw_depths = f.create_dataset("rawDepths", (n, w, h), np.float32, chunks=(1, w, h), **kw)
        labels = f.create_dataset("labels", (n, w, h), np.uint16, chunks=(1, w, h), **kw)
        for ds, cls_ in ((images, "uint8"), (depths, "single"), (raw_depths, "single"), (labels, "uint16")):
            ds.attrs["MATLAB_class"] = np.bytes_(cls_)
        for i in range(n):
            rng = np.random.default_rng([spec.seed, i])
            depth, raw = _ray_cast(h, w, rng)
            # unlabeled (0) where the depth jumps, as around object boundaries in the real labels
            jump = np.zeros((h, w), bool)
            rel = np.abs(np.diff(depth, axis=1)) / depth[:, 1:] > 0.08
            jump[:, 1:] |= rel
            jump[:, :-1] |= rel
            rel = np.abs(np.diff(depth, axis=0)) / depth[1:] > 0.08
            jump[1:] |= rel
            jump[:-1] |= rel
            raw = np.where(jump, 0, raw)
            col = np.zeros((h, w, 3))
            for r, p in palette.items():
                col[raw == r] = p
            shade = 1.0 / (1.0 + 0.08 * depth)[..., None]
            mix = inf_rgb * col + (1 - inf_rgb) * rng.uniform(0, 1, (h, w, 3))
            rgb = np.clip(mix * shade + rng.normal(0, 0.02 + 0.3 * (1 - inf_rgb), (h, w, 3)), 0, 1)
            dn = depth * (1 + rng.normal(0, 0.002 + 0.1 * (1 - inf_depth), (h, w)))
            dn = np.clip(dn, 0.3, 10.0)
            holes = rng.uniform(size=(h, w)) < 0.04
            images[i] = rearrange(np.round(rgb * 255).astype(np.uint8), "h w c -> c w h")
            depths[i] = dn.T.astype(np.float32)
            raw_depths[i] = np.where(holes, 0.0, dn).T.astype(np.float32)
            labels[i] = raw.T.astype(np.uint16)
    with open(path, "r+b") as fh:  # MATLAB v7.3 files are HDF5 with a 512-byte MAT header user block
        header = _MAT73_HEADER.ljust(116, b" ") + b"\0" * 8 + b"\x00\x02" + b"IM"
        fh.write(header)
    order = np.random.default_rng([spec.seed, 12345]).permutation(n) + 1
    n_test = max(1, int(round(n * 654 / 1449)))
    scipy.io.savemat(root / SPLITS_MAT, {
        "trainNdxs": np.sort(order[n_test:]).astype(np.uint16)[:, None],
        "testNdxs": np.sort(order[:n_test]).astype(np.uint16)[:, None],
    })
    map_class = np.full((1, NUM_RAW_CLASSES), 40, dtype=np.uint8)
    all_names = [f"synthetic_{k}" for k in range(1, NUM_RAW_CLASSES + 1)]
    for name, (raw, c40) in SYN_RAW.items():
        map_class[0, raw - 1] = c40
        all_names[raw - 1] = name
    superclass = np.array([[1 if c == "floor" else 2 if c in ("wall", "ceiling") else
                            3 if c in SYN_BOX_CLASSES else 4 for c in CLASS40_NAMES]], dtype=np.uint8)
    super_mat = np.zeros((4, 40), dtype=np.uint8)
    super_mat[superclass[0] - 1, np.arange(40)] = 1
    scipy.io.savemat(root / MAP40_MAT, {
        "className": _cellstr(CLASS40_NAMES), "mapClass": map_class, "allClassName": _cellstr(all_names),
        "mapToNYUSuperClass": superclass, "mapToNYUSuperClassMat": super_mat,
    })
    scipy.io.savemat(root / MAP13_MAT, {"classMapping13": {
        "labels13": np.array([LABELS13], dtype=np.uint8), "classNames": _cellstr(CLASS13_NAMES)}})
