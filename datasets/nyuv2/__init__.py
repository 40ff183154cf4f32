"""NYU Depth v2 (labeled set) adapter ``nyuv2``: RGB, depth and surface normals -> semantic labels.

Dataset: Silberman, Hoiem, Kohli, Fergus, "Indoor Segmentation and Support Inference from RGBD
Images", ECCV 2012, https://doi.org/10.1007/978-3-642-33715-4_54 (1449 densely labeled Kinect
frames, 894 raw classes). Official download page: https://cs.nyu.edu/~fergus/datasets/nyu_depth_v2.html
40-class task: Gupta, Arbelaez, Malik, CVPR 2013 (``classMapping40.mat``); 13-class task: Couprie
et al. 2013 as used by MTAN (Liu, Johns, Davison, CVPR 2019) (``class13Mapping.mat``).

Layouts (``layout=`` option, auto-detected by default; see docs/datasets/nyuv2.md and
:mod:`~fusebench.datasets.nyuv2.layouts`; the file formats are described in
:mod:`~fusebench.datasets.nyuv2.formats`):

* ``official``: ``nyu_depth_v2_labeled.mat`` (MATLAB v7.3 = HDF5, read lazily with h5py, one frame
  per access) + ``splits.mat`` + ``classMapping40.mat`` (+ ``class13Mapping.mat`` for 13 classes),
  each at the root or under ``meta/``. Optionally the labels come from the published label PNGs
  ``{train,test}_labels_{40,13}/new_nyu_class{40,13}_%04d.png``.
* ``mtan``: the MTAN npy release ``{train,val}/{image,depth,normal,label}/<i>.npy`` (288x384).
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

Modules:

* ``formats``: readers of the official files (labeled .mat via h5py, metadata .mat via scipy, label
  PNGs) and of the MTAN ``.npy`` files; file names and the official class lists.
* ``layouts``: layout detection, frame index and split files per layout, the val carve.
* ``normal_cache``: normals computed from depth, cached per frame.
* ``transforms``: the train-time horizontal flip.
* ``synthetic``: the synthetic twin, written in the official format.
* ``adapter``: the registered :class:`NYUv2` (importing this package registers it).
"""

from __future__ import annotations

from .adapter import (
    CLASS_OPTIONS,
    DEPTH_SOURCES,
    LABEL_SOURCES,
    NORMAL_SOURCES,
    NYUv2,
)
from .formats import (
    CLASS13_NAMES,
    CLASS40_NAMES,
    LABELED_MAT,
    LABELS13,
    MAP13_MAT,
    MAP40_MAT,
    META_DIRS,
    NUM_RAW_CLASSES,
    SPLITS_MAT,
    read_label_png,
)
from .layouts import LAYOUTS, carve_val
from .normal_cache import NORMALS_VERSION
from .synthetic import SYN_BOX_CLASSES, SYN_RAW

__all__ = [
    "CLASS13_NAMES", "CLASS40_NAMES", "CLASS_OPTIONS", "DEPTH_SOURCES", "LABELED_MAT", "LABELS13",
    "LABEL_SOURCES", "LAYOUTS", "MAP13_MAT", "MAP40_MAT", "META_DIRS", "NORMALS_VERSION", "NORMAL_SOURCES",
    "NUM_RAW_CLASSES", "NYUv2", "SPLITS_MAT", "SYN_BOX_CLASSES", "SYN_RAW", "carve_val", "read_label_png",
]
