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

**References.**

* Song, Lichtenberg, Xiao, "SUN RGB-D: A RGB-D Scene Understanding Benchmark Suite", CVPR 2015,
  https://rgbd.cs.princeton.edu/paper.pdf ; data: https://rgbd.cs.princeton.edu/
* Qi, Litany, He, Guibas, "Deep Hough Voting for 3D Object Detection in Point Clouds", ICCV 2019,
  arXiv:1904.09664 (https://arxiv.org/abs/1904.09664); the data preparation followed here is
  https://github.com/facebookresearch/votenet (``sunrgbd/sunrgbd_data.py``, ``sunrgbd/matlab/``).

**Modules.** :mod:`.classes` (:data:`CLASSES`, :data:`CLASS_TO_ID`), :mod:`.formats` (readers of
label / calib / ``*_data_idx.txt`` / ``_bbox.npy`` files), :mod:`.layouts` (layout discovery, frame
listings, info pickles), :mod:`.transforms` (train augmentation), :mod:`.synthetic` (synthetic twin),
:mod:`.adapter` (the registered :class:`SUNRGBD`; importing this package registers it). The package
exports the adapter and the public tables, readers and writers in ``__all__``; every other name is
imported from the module that defines it.
"""

from __future__ import annotations

from .adapter import OPTIONS, SUNRGBD
from .classes import CLASS_TO_ID, CLASSES
from .formats import BBOX_FIELDS, LABEL_FIELDS, parse_label_file, read_calib, read_index_file, read_votenet_bbox
from .layouts import LAYOUTS, POINT_SOURCES, VOTES_DIR, SunRGBDLayouts
from .synthetic import (
    CLASS_SIZES,
    IMAGE_H,
    IMAGE_W,
    PALETTE,
    ROOM_X,
    ROOM_Y,
    SUN_K,
    WALL_H,
    format_label_line,
    synthetic_scene,
    write_synthetic_scenes,
)
from .transforms import FLIP_P, ROT_RANGE_RAD, SCALE_RANGE, augment_scene

__all__ = [
    "BBOX_FIELDS", "CLASSES", "CLASS_SIZES", "CLASS_TO_ID", "FLIP_P", "IMAGE_H", "IMAGE_W", "LABEL_FIELDS", "LAYOUTS",
    "OPTIONS", "PALETTE", "POINT_SOURCES", "ROOM_X", "ROOM_Y", "ROT_RANGE_RAD", "SCALE_RANGE", "SUNRGBD", "SUN_K",
    "SunRGBDLayouts", "VOTES_DIR", "WALL_H", "augment_scene", "format_label_line", "parse_label_file", "read_calib",
    "read_index_file", "read_votenet_bbox", "synthetic_scene", "write_synthetic_scenes",
]
