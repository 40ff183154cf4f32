"""The registered ``nyuv2`` adapter :class:`NYUv2`: options, files, data-info text, sample assembly.

The work is done by mixins from the sibling modules: :mod:`.layouts` (layout detection, frame
index, split files), :mod:`.formats` (frame readers), :mod:`.normal_cache` (normals from depth) and
:mod:`.transforms` (train-time flip); :mod:`.synthetic` writes the synthetic twin.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Mapping

import numpy as np
import torch

from fusebench.datasets import DATASETS
from fusebench.datasets.base import (
    DataFile,
    DatasetError,
    Delivered,
    Modality,
    MultimodalDataset,
    SyntheticSpec,
)
from fusebench.datasets.normals import NORMAL_METHODS

from .formats import LABELED_MAT, MAP13_MAT, MAP40_MAT, META_DIRS, SPLITS_MAT, _Frame, _FrameReaders
from .layouts import _LayoutIndex
from .normal_cache import _NormalCache
from .synthetic import _write_synthetic
from .transforms import _Flip

CLASS_OPTIONS = (40, 13, 894)
#: the class count of each layout where ``classes`` is not set (the MTAN release ships 13-class labels)
DEFAULT_CLASSES = {"official": 40, "mtan": 13}
LABEL_SOURCES = ("mat", "png")
DEPTH_SOURCES = ("depths", "rawDepths")
NORMAL_SOURCES = ("shipped", "computed")
_OPTIONS = (
    "layout", "classes", "val_fraction", "split_seed", "label_source", "depth_source",
    "normal_method", "normal_radius_px", "normal_source", "normal_cache", "flip_p",
)


@DATASETS.register("nyuv2")
class NYUv2(_LayoutIndex, _FrameReaders, _NormalCache, _Flip, MultimodalDataset):
    """NYU Depth v2 labeled frames (see module docstring).

    Options: ``layout`` ('official' | 'mtan', auto), ``classes`` (40 default, 13, 894; mtan: 13),
    ``val_fraction`` (0.1), ``split_seed`` (0), ``label_source`` ('mat' | 'png', official layout),
    ``depth_source`` ('depths' in-painted | 'rawDepths'), ``normal_method`` ('pca' | 'open3d'),
    ``normal_radius_px`` (PCA window radius, default 10 px at 640 px width), ``normal_source``
    ('shipped' for mtan by default, 'computed'), ``normal_cache`` (True: ``$FUSEBENCH_CACHE/nyuv2-normals``,
    a path, or False), ``flip_p`` (train augmentation: horizontal flip probability, 0.5).
    """

    # the public name stays fusebench.datasets.nyuv2:NYUv2 (recorded as "adapter" in prepared-cache
    # manifests and as the registry origin), as when the adapter was the module fusebench.datasets.nyuv2
    __module__ = "fusebench.datasets.nyuv2"

    #: dataset.options this adapter reads (others are errors, see MultimodalDataset.OPTIONS)
    OPTIONS = frozenset({"classes", "depth_source", "flip_p", "label_source", "layout", "normal_cache", "normal_method",
                         "normal_radius_px", "normal_source", "split_seed", "val_fraction"})
    #: their types, checked when a benchmark spec is loaded (fusebench.options)
    OPTION_TYPES = {"classes": int, "depth_source": str, "flip_p": float, "label_source": str, "layout": str | None,
                    "normal_method": str, "normal_source": str, "split_seed": int, "val_fraction": float}

    id: ClassVar[str] = "nyuv2"
    #: the test split is the official one whatever split_seed (splits.mat testNdxs; MTAN: the val/ folder):
    #: split_seed only carves val out of the official train frames (layouts.carve_val)
    SPLIT_SEED_MOVES_TEST: ClassVar[bool | None] = False
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
        # the three metadata files are fixed (redistributed unchanged by ankurhanda/nyuv2-meta-data):
        # `fusebench data check nyuv2 --data-root DIR` compares them with these sha256
        DataFile(SPLITS_MAT, "official split: trainNdxs (795) / testNdxs (654), 1-based; root or meta/",
                 sha256="6e081404491a8bfba2f066beaa9713ef6046f9007aa5f799f2a350506a580cee"),
        DataFile(MAP40_MAT, "894 -> 40 class mapping (mapClass, className); root or meta/",
                 sha256="ff177194cce9a2163517f1e1e6f1c64c50987162f542dedddc04bbf6ebe6d851"),
        DataFile(MAP13_MAT, "40 -> 13 class mapping (classMapping13.labels13); only for classes=13",
                 sha256="4e79ab24c345896c19abc62476b2c3520f3e2db00f71f868c5027208af48a3de", required=False),
        DataFile("test_labels_40/new_nyu_class40_%04d.png", "optional 40-class label PNGs (label_source=png); "
                 "also train_labels_40/, test_labels_13/, train_labels_13/", required=False),
        DataFile("{train,val}/{image,depth,normal,label}/<i>.npy", "alternative layout 'mtan' (MTAN release, "
                 "288x384, 13 classes; its val = official test)", required=False),
    )
    FILE_DIRS: ClassVar[tuple[str, ...]] = META_DIRS
    INFO: ClassVar[str] = """\
NYU Depth Dataset V2, labeled set (Silberman et al., ECCV 2012). Research use; cite the paper.
  labeled frames: http://horatio.cs.nyu.edu/mit/silberman/nyu_depth_v2/nyu_depth_v2_labeled.mat
  splits.mat, classMapping40.mat, class13Mapping.mat: https://github.com/ankurhanda/nyuv2-meta-data
    (the 40-class mapping is Gupta et al., CVPR 2013; label PNGs test_labels_40/ etc. are in the same repo)
  MTAN preprocessed release (layout 'mtan'): https://github.com/lorenmt/mtan (NYUv2 link in its README)
Splits: test = official 654 test frames; train/val carved from the 795 official train frames
(val_fraction=0.1, split_seed=0)."""

    @classmethod
    def delivers(cls, options: Mapping[str, Any]) -> dict[str, Delivered]:
        """The class count: ``classes`` where it is set, else the default of the layout where ``layout`` names it;
        with neither it depends on the layout found under the data root (40 official, 13 mtan): not known yet."""
        if "classes" in options:
            c = options["classes"]
            return {"num_classes": Delivered(c, f"dataset.options.classes = {c!r}", "dataset.options.classes")} \
                if c in CLASS_OPTIONS and not isinstance(c, bool) else {}  # another value: the adapter refuses it
        layout = options.get("layout")
        if layout not in DEFAULT_CLASSES:
            return {}
        n = DEFAULT_CLASSES[layout]
        return {"num_classes": Delivered(n, f"dataset.options.classes (not set: {n} with dataset.options.layout = "
                                            f"{layout!r})", "dataset.options.classes")}

    # -- construction -------------------------------------------------------------------------
    def _index(self) -> list[_Frame]:
        opts = dict(self._opts_rest)
        unknown = [k for k in opts if k not in _OPTIONS and k != "use_cache" and not k.startswith("cache")]
        if unknown:
            raise DatasetError(f"nyuv2: unknown option(s) {unknown}; valid options: {list(_OPTIONS)}")
        self.layout = self._detect_layout(opts.get("layout"))
        self.classes = int(opts.get("classes", DEFAULT_CLASSES[self.layout]))
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

    # synthetic twin -------------------------------------------------------------------------
    @classmethod
    def write_synthetic(cls, root: Path, spec: SyntheticSpec) -> None:
        """Write a deterministic twin in the official format (details: :func:`_write_synthetic`)."""
        _write_synthetic(Path(root), spec)
