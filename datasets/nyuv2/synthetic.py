"""NYUv2 synthetic twin: ray-cast box rooms written in the official on-disk format.

:func:`_write_synthetic` (called by ``NYUv2.write_synthetic``) writes ``nyu_depth_v2_labeled.mat``
(MATLAB v7.3 / HDF5), ``splits.mat``, ``classMapping40.mat`` and ``class13Mapping.mat``, which the
real reader then reads back; see docs/datasets/nyuv2.md, "Synthetic twin".
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from einops import rearrange

from fusebench.datasets.base import SyntheticSpec
from fusebench.datasets.normals import scaled_intrinsics

from .formats import (
    CLASS13_NAMES,
    CLASS40_NAMES,
    LABELED_MAT,
    LABELS13,
    MAP13_MAT,
    MAP40_MAT,
    NUM_RAW_CLASSES,
    SPLITS_MAT,
)

#: raw NYU class ids (1-based, official 894-class list) used by the twin, with their 40-class ids
SYN_RAW = {"wall": (21, 1), "floor": (11, 2), "ceiling": (4, 22), "cabinet": (3, 3), "bed": (157, 4),
           "table": (19, 7), "box": (26, 29)}
SYN_BOX_CLASSES = ("cabinet", "bed", "table", "box")
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
