"""Train-time augmentation of a SUN RGB-D sample (VoteNet, Qi et al. ICCV 2019, Sec. 5.1): flip
about the YZ plane with p = 0.5, rotation about z by U(-30, 30) degrees, isotropic scale
U(0.85, 1.15); the drawn values are recorded in ``meta["augmentation"]``.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from .. import pointcloud as pc

FLIP_P = 0.5
ROT_RANGE_RAD = math.pi / 6
SCALE_RANGE = (0.85, 1.15)


def augment_scene(sample: dict[str, Any], rng: torch.Generator) -> dict[str, Any]:
    """The augmented copy of ``sample`` (the adapter's ``_augment``; ``rng`` seeded per sample)."""
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
