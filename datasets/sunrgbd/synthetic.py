"""The SUN RGB-D synthetic twin: deterministic rooms (floor, walls, boxes of the 10 classes and a
distractor) written as VoteNet extracted frames (``depth/*.mat``, ``label/``, ``label_v1/``,
``calib/``, ``{train,val}_data_idx.txt``), read back by the adapter like the real data.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch

from .. import pointcloud as pc
from ..base import SyntheticSpec
from .classes import CLASSES

IMAGE_W, IMAGE_H = 730, 530
SUN_K = np.array([[529.5, 0.0, 365.0], [0.0, 529.5, 265.0], [0.0, 0.0, 1.0]])

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
