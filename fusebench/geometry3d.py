"""Oriented 3D box geometry: corners, points-in-box, exact rotated 3D IoU and 3D NMS.

Model-free and shared by the datasets, metrics and models (formerly ``fusebench.encoders.boxes3d``, now
removed: import these names from here).

Boxes are ``[cx, cy, cz, dx, dy, dz, yaw]``: centre, *full* sizes along the box's own x / y / z axes,
and ``yaw`` the counter-clockwise rotation about +z (radians) taking the world x axis onto the box's
x axis. This is the upright-depth convention of SUN RGB-D used throughout fusebench (x right, y forward,
z up); VoteNet's original code measures heading with the opposite sign, mmdet3d >= 1.0 with this one.

Rotated 3D IoU (the quantity VoteNet / mmdet3d evaluate, Qi et al. 2019, Sec. 5 and supp.; "Deep Hough
Voting for 3D Object Detection in Point Clouds", ICCV 2019, arXiv:1904.09664,
https://arxiv.org/abs/1904.09664):
the footprints of two boxes are rotated rectangles in the xy plane; their intersection is the convex
polygon obtained by clipping one rectangle by the four edge half-planes of the other (Sutherland &
Hodgman 1974), its area given by the shoelace formula. With ``h`` the overlap of the z intervals,

    inter = area(A_xy ∩ B_xy) * h,     IoU = inter / (vol_A + vol_B - inter)           (1)

The clipping is vectorised over all box pairs with fixed-size vertex buffers (a convex quadrilateral
clipped by k half-planes has at most 4 + k vertices), so there is no Python loop over boxes.

3D NMS: greedy, in decreasing score order a box is kept unless a kept box (of the same label, when
labels are given) overlaps it with IoU ``> iou_threshold`` (VoteNet's ``nms_3d_faster_samecls``
suppresses ``IoU > threshold`` too, but on axis-aligned hulls; we use the rotated IoU of (1)).

Boxes with a NaN / Inf entry or a negative size are refused (ValueError) by the IoU functions and NMS;
NMS refuses NaN and +Inf scores and ranks a -Inf score last (``nms_3d``).

Shape:
    boxes: ``[..., 7]``;  ``box_corners_bev``: ``[..., 4, 2]`` (counter-clockwise);
    ``box_corners``: ``[..., 8, 3]`` (bottom face then top face, each counter-clockwise);
    ``rotated_iou_3d(a [N, 7], b [M, 7])`` -> ``[N, M]``; ``paired_rotated_iou_3d(a [P, 7], b [P, 7])``
    -> ``[P]``; ``points_in_boxes(points [B, S, 3], boxes [B, G, 7])`` -> ``BoolTensor[B, S, G]``;
    ``nms_3d(boxes [K, 7], scores [K], labels [K] | None)`` -> ``LongTensor[K']`` kept indices.

Example::

    >>> a = torch.tensor([[0.0, 0, 0, 1, 1, 1, 0]]); b = torch.tensor([[0.5, 0, 0, 1, 1, 1, 0]])
    >>> float(rotated_iou_3d(a, b))  # 0.5 / 1.5
    0.3333333432674408
"""

from __future__ import annotations

import numpy as np
import torch
from einops import rearrange, repeat
from torch import Tensor


def _as_boxes(boxes: Tensor, arg: str) -> Tensor:
    if not isinstance(boxes, Tensor):
        boxes = torch.as_tensor(np.asarray(boxes))
    if boxes.shape[-1:] != (7,):
        raise ValueError(
            f"boxes3d: {arg} must have shape [..., 7] = [cx, cy, cz, dx, dy, dz, yaw], got {tuple(boxes.shape)}"
        )
    if not boxes.is_floating_point():
        boxes = boxes.to(torch.get_default_dtype())
    return boxes


def box_corners_bev(boxes: Tensor) -> Tensor:
    """Footprint corners ``[..., 4, 2]`` in counter-clockwise order (for positive sizes)."""
    boxes = _as_boxes(boxes, "boxes")
    # local corners (-,-), (+,-), (+,+), (-,+) scaled by the half sizes
    signs = boxes.new_tensor([[-1.0, -1.0], [1.0, -1.0], [1.0, 1.0], [-1.0, 1.0]])
    local = signs * (0.5 * boxes[..., None, 3:5])  # [..., 4, 2]
    c, s = torch.cos(boxes[..., 6])[..., None], torch.sin(boxes[..., 6])[..., None]
    x = c * local[..., 0] - s * local[..., 1] + boxes[..., None, 0]
    y = s * local[..., 0] + c * local[..., 1] + boxes[..., None, 1]
    return torch.stack([x, y], dim=-1)


def box_corners(boxes: Tensor) -> Tensor:
    """All eight corners ``[..., 8, 3]``: the bottom face then the top face."""
    boxes = _as_boxes(boxes, "boxes")
    bev = box_corners_bev(boxes)  # [..., 4, 2]
    z0 = (boxes[..., 2] - 0.5 * boxes[..., 5])[..., None, None].expand(*bev.shape[:-1], 1)
    z1 = (boxes[..., 2] + 0.5 * boxes[..., 5])[..., None, None].expand(*bev.shape[:-1], 1)
    return torch.cat([torch.cat([bev, z0], -1), torch.cat([bev, z1], -1)], dim=-2)


def points_in_boxes(points: Tensor, boxes: Tensor) -> Tensor:
    """``BoolTensor[B, S, G]``: point ``s`` lies inside (or on the surface of) box ``g``."""
    boxes = _as_boxes(boxes, "boxes")
    rel = points[:, :, None, :] - boxes[:, None, :, :3]  # [B, S, G, 3]
    c, s = torch.cos(boxes[:, None, :, 6]), torch.sin(boxes[:, None, :, 6])
    # rotate by -yaw into the box frame
    lx = c * rel[..., 0] + s * rel[..., 1]
    ly = -s * rel[..., 0] + c * rel[..., 1]
    local = torch.stack([lx, ly, rel[..., 2]], dim=-1)
    return (local.abs() <= 0.5 * boxes[:, None, :, 3:6]).all(dim=-1)


def _polygon_area(poly: Tensor, count: Tensor) -> Tensor:
    """Shoelace area of convex polygons ``poly [P, V, 2]`` whose first ``count [P]`` vertices are used."""
    v = poly.shape[1]
    idx = torch.arange(v, device=poly.device)
    nxt_idx = (idx[None, :] + 1) % count.clamp(min=1)[:, None]  # [P, V]
    nxt = torch.gather(poly, 1, repeat(nxt_idx, "p v -> p v two", two=2))
    cross = poly[..., 0] * nxt[..., 1] - nxt[..., 0] * poly[..., 1]
    cross = torch.where(idx[None, :] < count[:, None], cross, torch.zeros_like(cross))
    return 0.5 * cross.sum(dim=1).abs()


def _clip_convex(subject: Tensor, count: Tensor, clip: Tensor) -> tuple[Tensor, Tensor]:
    """Sutherland-Hodgman: clip polygons ``subject [P, V, 2]`` (first ``count`` vertices valid) by the
    convex counter-clockwise polygons ``clip [P, 4, 2]``. Returns ``(poly [P, V + 4, 2], count [P])``."""
    for k in range(clip.shape[1]):  # the four edge half-planes of the clip rectangle
        c0, c1 = clip[:, k], clip[:, (k + 1) % clip.shape[1]]  # [P, 2]
        edge = c1 - c0
        v = subject.shape[1]
        idx = torch.arange(v, device=subject.device)
        nxt_idx = (idx[None, :] + 1) % count.clamp(min=1)[:, None]
        cur = subject
        nxt = torch.gather(subject, 1, repeat(nxt_idx, "p v -> p v two", two=2))

        def side(p: Tensor) -> Tensor:  # > 0 left of the edge (inside for a CCW clip polygon)
            return edge[:, None, 0] * (p[..., 1] - c0[:, None, 1]) - edge[:, None, 1] * (p[..., 0] - c0[:, None, 0])

        d_cur, d_nxt = side(cur), side(nxt)
        in_cur, in_nxt = d_cur >= 0, d_nxt >= 0
        denom = d_cur - d_nxt
        t = d_cur / torch.where(denom == 0, torch.ones_like(denom), denom)
        crossing = cur + t[..., None] * (nxt - cur)
        valid = idx[None, :] < count[:, None]
        # per input edge (cur -> nxt): emit the crossing point if the edge crosses, then nxt if inside
        out = torch.stack([crossing, nxt], dim=2)  # [P, V, 2 slots, 2]
        keep = torch.stack([(in_cur != in_nxt) & valid, in_nxt & valid], dim=2)  # [P, V, 2]
        out = rearrange(out, "p v s two -> p (v s) two")
        keep = rearrange(keep, "p v s -> p (v s)")
        # compact: valid vertices first, in order (stable sort on "not kept")
        order = torch.sort((~keep).to(torch.int8), dim=1, stable=True).indices
        out = torch.gather(out, 1, repeat(order, "p m -> p m two", two=2))
        count = keep.sum(dim=1)
        subject = out[:, : v + 1]  # clipping a convex polygon by a half-plane adds at most one vertex
        count = count.clamp(max=v + 1)
    return subject, count


_COLUMNS = ("cx", "cy", "cz", "dx", "dy", "dz", "yaw")


def _check_sizes(boxes: Tensor, arg: str, who: str = "boxes3d") -> None:
    """Refuse boxes ``[..., 7]`` with a NaN / Inf entry or a negative size, naming ``arg``, the number of rows
    and the columns. (A NaN or Inf box had IoU 0 with every box, itself included: it neither suppressed nor was
    suppressed, and reached the metric unnoticed.)"""
    bad = ~torch.isfinite(boxes)
    if bool(bad.any()):
        rows = int(bad.reshape(-1, 7).any(-1).sum())
        cols = [c for c, hit in zip(_COLUMNS, bad.reshape(-1, 7).any(0).tolist()) if hit]
        raise ValueError(f"{who}: {arg} has NaN or Inf in {rows} of {boxes.reshape(-1, 7).shape[0]} boxes "
                         f"(columns {', '.join(cols)}); boxes must be finite")
    if bool((boxes[..., 3:6] < 0).any()):
        raise ValueError(f"{who}: {arg} has negative sizes (columns 3:6 are full sizes dx, dy, dz >= 0)")


def paired_rotated_iou_3d(a: Tensor, b: Tensor) -> Tensor:
    """IoU (1) of the box pairs ``(a[p], b[p])``: ``a, b [P, 7]`` -> ``[P]``."""
    a, b = _as_boxes(a, "a"), _as_boxes(b, "b")
    if a.shape != b.shape or a.dim() != 2:
        raise ValueError(f"boxes3d: paired IoU needs a and b of equal shape [P, 7], got {tuple(a.shape)}, {tuple(b.shape)}")
    _check_sizes(a, "a")
    _check_sizes(b, "b")
    dtype = torch.promote_types(a.dtype, b.dtype)
    a, b = a.to(dtype), b.to(dtype)
    if a.shape[0] == 0:
        return a.new_zeros(0)
    poly, count = _clip_convex(box_corners_bev(a), torch.full_like(a[:, 0], 4, dtype=torch.long), box_corners_bev(b))
    # a footprint of zero area (dx * dy = 0) meets nothing: clipped by a point (dx = dy = 0) every edge test is
    # 0 >= 0, so the clip would keep the whole other footprint (IoU of a unit cube and a point box 1.0, not 0)
    flat = (a[:, 3] * a[:, 4] == 0) | (b[:, 3] * b[:, 4] == 0)
    area = torch.where(flat, torch.zeros_like(a[:, 0]), _polygon_area(poly, count))
    z_lo = torch.maximum(a[:, 2] - 0.5 * a[:, 5], b[:, 2] - 0.5 * b[:, 5])
    z_hi = torch.minimum(a[:, 2] + 0.5 * a[:, 5], b[:, 2] + 0.5 * b[:, 5])
    inter = area * (z_hi - z_lo).clamp(min=0)
    union = a[:, 3:6].prod(-1) + b[:, 3:6].prod(-1) - inter
    return torch.where(union > 0, inter / torch.where(union > 0, union, torch.ones_like(union)), torch.zeros_like(union))


def rotated_iou_3d(a: Tensor, b: Tensor) -> Tensor:
    """Pairwise IoU (1): ``a [N, 7]``, ``b [M, 7]`` -> ``[N, M]``."""
    a, b = _as_boxes(a, "a"), _as_boxes(b, "b")
    if a.dim() != 2 or b.dim() != 2:
        raise ValueError(f"boxes3d: rotated_iou_3d takes a [N, 7] and b [M, 7], got {tuple(a.shape)}, {tuple(b.shape)}")
    _check_sizes(a, "a")  # here, before the pairs repeat the rows
    _check_sizes(b, "b")
    n, m = a.shape[0], b.shape[0]
    pa = repeat(a, "n c -> (n m) c", m=m)
    pb = repeat(b, "m c -> (n m) c", n=n)
    return rearrange(paired_rotated_iou_3d(pa, pb), "(n m) -> n m", n=n, m=m)


def nms_3d(boxes: Tensor, scores: Tensor, iou_threshold: float = 0.25, labels: Tensor | None = None) -> Tensor:
    """Greedy 3D NMS; returns the kept indices in decreasing score order.

    A box is suppressed by a higher-scoring kept box with ``IoU > iou_threshold`` (and, when ``labels``
    is given, the same label: per-class NMS).

    Non-finite input raises one ValueError naming it: boxes with NaN / Inf (or negative sizes), NaN or +Inf
    scores (a probability, logit or log-probability is never +Inf but by overflow). A ``-Inf`` score is
    accepted as a log-probability of 0: it ranks below every finite score (ties keep index order) and is kept
    or suppressed like any other box.
    """
    boxes = _as_boxes(boxes, "boxes")
    if boxes.dim() != 2 or scores.shape != boxes.shape[:1]:
        raise ValueError(f"nms_3d: boxes [K, 7] and scores [K] expected, got {tuple(boxes.shape)}, {tuple(scores.shape)}")
    if labels is not None and labels.shape != scores.shape:
        raise ValueError(f"nms_3d: labels must have shape [K] = {tuple(scores.shape)}, got {tuple(labels.shape)}")
    if boxes.shape[0] == 0:
        return torch.zeros(0, dtype=torch.long, device=boxes.device)
    _check_sizes(boxes, "boxes", "nms_3d")
    n_nan, n_inf = int(torch.isnan(scores).sum()), int((scores == float("inf")).sum())
    if n_nan or n_inf:  # sorted first, a NaN box would suppress its betters
        raise ValueError(f"nms_3d: scores must be finite or -Inf, got {n_nan} NaN and {n_inf} +Inf among "
                         f"{scores.shape[0]} rows")
    order = torch.sort(scores, descending=True, stable=True).indices
    iou = rotated_iou_3d(boxes[order], boxes[order])
    overlap = iou > iou_threshold
    if labels is not None:
        lab = labels[order]
        overlap &= lab[:, None] == lab[None, :]
    overlap = overlap.cpu().numpy()
    suppressed = np.zeros(len(order), dtype=bool)
    keep = []
    for i in range(len(order)):  # greedy pass over the (few hundred) proposals
        if suppressed[i]:
            continue
        keep.append(i)
        suppressed |= overlap[i]
    return order[torch.as_tensor(keep, dtype=torch.long, device=order.device)]


__all__ = [
    "box_corners",
    "box_corners_bev",
    "nms_3d",
    "paired_rotated_iou_3d",
    "points_in_boxes",
    "rotated_iou_3d",
]
