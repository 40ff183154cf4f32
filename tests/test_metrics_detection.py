"""Rotated 3D IoU and the detection metrics (map / mar / per-class AP) on hand-worked cases.

Every expected value below is worked out by hand in the comments (or by an independent slow
implementation with explicit loops and scipy's convex hull), never by the code under test.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.spatial import ConvexHull

from fusebench import metrics
from fusebench.geometry3d import box_corners, box_corners_bev, rotated_iou_3d
from fusebench.metrics.detection import per_class_ap, per_class_recall, voc_ap


def iou(a, b) -> float:
    return float(rotated_iou_3d(torch.tensor([a], dtype=torch.float64), torch.tensor([b], dtype=torch.float64))[0, 0])


# ------------------------------------------------------------------------------------------
# rotated IoU
# ------------------------------------------------------------------------------------------


def test_iou_identical_and_disjoint():
    box = [1.0, -2.0, 0.5, 2.0, 1.0, 0.5, 0.7]
    assert iou(box, box) == pytest.approx(1.0, abs=1e-12)
    assert iou(box, [9.0, -2.0, 0.5, 2.0, 1.0, 0.5, 0.7]) == 0.0  # far apart in x
    assert iou(box, [1.0, -2.0, 5.0, 2.0, 1.0, 0.5, 0.7]) == 0.0  # same footprint, disjoint in z


def test_iou_unit_cubes_shifted_half():
    # overlap 0.5 x 1 x 1 = 0.5, union 1 + 1 - 0.5 = 1.5 -> 1/3
    assert iou([0, 0, 0, 1, 1, 1, 0], [0.5, 0, 0, 1, 1, 1, 0]) == pytest.approx(1 / 3, abs=1e-12)


def test_iou_90_degree_yaw():
    # 2x1 footprint vs the same rotated by 90 degrees (a 1x2 footprint): intersection is the central
    # 1x1 square, height 1 -> inter 1, union 2 + 2 - 1 = 3 -> 1/3
    assert iou([0, 0, 0, 2, 1, 1, 0], [0, 0, 0, 2, 1, 1, math.pi / 2]) == pytest.approx(1 / 3, abs=1e-12)
    # a 1x2 box without yaw is the same solid as the 2x1 box turned by 90 degrees
    assert iou([0, 0, 0, 1, 2, 1, 0], [0, 0, 0, 2, 1, 1, math.pi / 2]) == pytest.approx(1.0, abs=1e-12)


def test_iou_45_degree_octagon():
    # unit square vs the same square turned 45 degrees about the common centre: a regular octagon.
    # The turned square's edges lie on x +- y = +-sqrt(2)/2; each corner of the unit square loses a
    # right triangle with legs 1 - sqrt(2)/2, so area = 1 - 4 * (1 - sqrt(2)/2)^2 / 2 = 2 sqrt(2) - 2.
    # Equal heights 1: IoU = (2 sqrt2 - 2) / (2 - (2 sqrt2 - 2)) = 1 / sqrt(2).
    octagon = 2 * math.sqrt(2) - 2
    assert iou([0, 0, 0, 1, 1, 1, 0], [0, 0, 0, 1, 1, 1, math.pi / 4]) == pytest.approx(octagon / (2 - octagon), abs=1e-12)
    assert iou([0, 0, 0, 1, 1, 1, 0], [0, 0, 0, 1, 1, 1, math.pi / 4]) == pytest.approx(1 / math.sqrt(2), abs=1e-12)


def test_iou_partial_z_overlap():
    # same 1x1 footprint; A spans z in [-1, 1] (volume 2), B spans [0.5, 1.5] (volume 1):
    # overlap 0.5 -> inter 0.5, union 2 + 1 - 0.5 = 2.5 -> 0.2
    assert iou([0, 0, 0, 1, 1, 2, 0], [0, 0, 1, 1, 1, 1, 0]) == pytest.approx(0.2, abs=1e-12)


def _slow_bev_intersection(a, b) -> float:
    """Independent method: the intersection polygon's vertices are the corners of each rectangle
    inside the other plus all edge-edge crossings; its area is that of their convex hull."""
    ca = box_corners_bev(torch.tensor(a, dtype=torch.float64)).numpy()
    cb = box_corners_bev(torch.tensor(b, dtype=torch.float64)).numpy()

    def inside(p, poly):
        for k in range(4):
            e0, e1 = poly[k], poly[(k + 1) % 4]
            if (e1[0] - e0[0]) * (p[1] - e0[1]) - (e1[1] - e0[1]) * (p[0] - e0[0]) < -1e-12:
                return False
        return True

    pts = [p for p in ca if inside(p, cb)] + [p for p in cb if inside(p, ca)]
    for i in range(4):
        p, r = ca[i], ca[(i + 1) % 4] - ca[i]
        for j in range(4):
            q, s = cb[j], cb[(j + 1) % 4] - cb[j]
            den = r[0] * s[1] - r[1] * s[0]
            if abs(den) < 1e-15:
                continue
            t = ((q[0] - p[0]) * s[1] - (q[1] - p[1]) * s[0]) / den
            u = ((q[0] - p[0]) * r[1] - (q[1] - p[1]) * r[0]) / den
            if 0 <= t <= 1 and 0 <= u <= 1:
                pts.append(p + t * r)
    if len(pts) < 3:
        return 0.0
    try:
        return ConvexHull(np.array(pts)).volume  # in 2-D, "volume" is the area
    except Exception:  # degenerate (collinear) hull
        return 0.0


def test_iou_matches_slow_convex_hull_and_is_symmetric():
    rng = np.random.default_rng(0)
    boxes = np.concatenate(
        [rng.uniform(-1, 1, (24, 3)), rng.uniform(0.3, 2.0, (24, 3)), rng.uniform(-math.pi, math.pi, (24, 1))], 1
    )
    fast = rotated_iou_3d(torch.from_numpy(boxes), torch.from_numpy(boxes)).numpy()
    assert np.allclose(fast, fast.T, atol=1e-12)
    for i in range(len(boxes)):
        for j in range(len(boxes)):
            a, b = boxes[i], boxes[j]
            h = max(0.0, min(a[2] + a[5] / 2, b[2] + b[5] / 2) - max(a[2] - a[5] / 2, b[2] - b[5] / 2))
            inter = _slow_bev_intersection(a, b) * h
            want = inter / (np.prod(a[3:6]) + np.prod(b[3:6]) - inter)
            assert fast[i, j] == pytest.approx(want, abs=1e-9)
    assert (fast > 0).sum() > len(boxes) + 20  # the random set does contain many overlapping pairs


def test_box_corners_hand_values():
    # 2x1x1 box at the origin turned by 90 degrees: its x axis points along +y
    c = box_corners(torch.tensor([0.0, 0, 0, 2, 1, 1, math.pi / 2], dtype=torch.float64)).numpy()
    want_bottom = [[0.5, -1, -0.5], [0.5, 1, -0.5], [-0.5, 1, -0.5], [-0.5, -1, -0.5]]
    assert np.allclose(c[:4], want_bottom, atol=1e-12)
    assert np.allclose(c[4:, 2], 0.5)


def test_iou_rejects_bad_boxes():
    with pytest.raises(ValueError, match=r"\[\.\.\., 7\]"):
        rotated_iou_3d(torch.zeros(2, 6), torch.zeros(2, 7))
    with pytest.raises(ValueError, match="negative sizes"):
        rotated_iou_3d(torch.tensor([[0.0, 0, 0, -1, 1, 1, 0]]), torch.tensor([[0.0, 0, 0, 1, 1, 1, 0]]))


# ------------------------------------------------------------------------------------------
# mAP / mAR
# ------------------------------------------------------------------------------------------

UNIT = [0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0]


def box(x=0.0, y=0.0, z=0.0, dx=1.0, dy=1.0, dz=1.0, yaw=0.0):
    return [x, y, z, dx, dy, dz, yaw]


def det(boxes, scores, labels):
    return {"boxes": np.array(boxes, dtype=np.float64).reshape(-1, 7), "scores": np.array(scores, dtype=np.float64),
            "labels": np.array(labels, dtype=np.int64)}


def gt(boxes, labels):
    return {"boxes": np.array(boxes, dtype=np.float64).reshape(-1, 7), "labels": np.array(labels, dtype=np.int64)}


def test_registered_ids_and_metadata():
    ids = metrics.available()
    for name in ("map_0.25", "map_0.50", "mar_0.25", "ap_0.25_bed", "ap_0.50_bathtub", "ap_0.25_night_stand"):
        assert name in ids
        assert metrics.get(name).higher_is_better and metrics.get(name).task == "detection"


def test_perfect_detections_give_one():
    gts = [gt([box(0), box(3)], [0, 2]), gt([box(1, 1, 0, 2, 1, 1, 0.3)], [5])]
    dets = [det([box(0), box(3)], [0.9, 0.4], [0, 2]), det([box(1, 1, 0, 2, 1, 1, 0.3)], [0.7], [5])]
    for name in ("map_0.25", "map_0.50", "mar_0.25", "ap_0.25_bed", "ap_0.50_desk"):
        assert metrics.get(name)(dets, gts, num_classes=10) == pytest.approx(1.0)


def test_duplicate_detection_is_a_false_positive():
    # class 0, two GT boxes (x = 0 and x = 5); ranking: a (0.9, hits g1), b (0.8, duplicate of g1), c (0.7, hits g2)
    # TP = [1, 0, 1] -> cum TP [1, 1, 2], precision [1, 1/2, 2/3], recall [1/2, 1/2, 1]
    # envelope: p(r <= 1/2) = 1, p(1/2 < r <= 1) = 2/3 -> AP = 1/2 * 1 + 1/2 * 2/3 = 5/6
    gts = [gt([box(0), box(5)], [0, 0])]
    dets = [det([box(0), box(0), box(5)], [0.9, 0.8, 0.7], [0, 0, 0])]
    assert metrics.get("map_0.25")(dets, gts) == pytest.approx(5 / 6)
    assert metrics.get("ap_0.25_bed")(dets, gts) == pytest.approx(5 / 6)
    assert metrics.get("mar_0.25")(dets, gts) == pytest.approx(1.0)


def test_ranking_is_across_scenes():
    # scene 1's false positive (0.9) outranks scene 0's hit (0.8) and scene 1's hit (0.7):
    # TP = [0, 1, 1]: precision [0, 1/2, 2/3], recall [0, 1/2, 1]; envelope 2/3 everywhere -> AP = 2/3
    gts = [gt([box(0)], [1]), gt([box(0)], [1])]
    dets = [det([box(0)], [0.8], [1]), det([box(10), box(0)], [0.9, 0.7], [1, 1])]
    assert metrics.get("map_0.25")(dets, gts) == pytest.approx(2 / 3)


def test_only_the_best_overlapping_ground_truth_is_tried():
    # GT g1 at x = 0, g2 at x = 0.5 (unit cubes). d1 (0.9) = g1 -> TP. d2 (0.8) at x = 0.2 overlaps
    # g1 with IoU 0.8/1.2 = 2/3 and g2 with 0.7/1.3 = 0.538: its best match g1 is taken -> FP (VOC rule).
    # precision [1, 1/2], recall [1/2, 1/2] -> AP = 1/2; final recall 1/2
    gts = [gt([box(0), box(0.5)], [0, 0])]
    dets = [det([box(0), box(0.2)], [0.9, 0.8], [0, 0])]
    assert metrics.get("map_0.25")(dets, gts) == pytest.approx(0.5)
    assert metrics.get("mar_0.25")(dets, gts) == pytest.approx(0.5)


def test_iou_exactly_at_threshold_is_not_a_true_positive():
    # GT x in [0, 1]; detection x in [0.5, 2] (centre 1.25, dx 1.5), same y/z extent:
    # overlap 0.5, union 1 + 1.5 - 0.5 = 2 -> IoU 1/4 exactly (dyadic numbers: exact in float)
    g = box(0.5, 0.5, 0.5)
    at = box(1.25, 0.5, 0.5, dx=1.5)
    assert iou(g, at) == 0.25
    gts = [gt([g], [3])]
    assert metrics.get("map_0.25")([det([at], [0.9], [3])], gts) == 0.0
    assert metrics.get("mar_0.25")([det([at], [0.9], [3])], gts) == 0.0
    # x in [0.5, 1.75]: IoU 0.5 / 1.75 = 2/7 > 1/4 -> a hit
    assert metrics.get("map_0.25")([det([box(1.125, 0.5, 0.5, dx=1.25)], [0.9], [3])], gts) == 1.0
    # IoU exactly 1/2 (x in [0.5, 1]: 0.5 / 1): not a hit at 0.50, a hit at 0.25
    half = box(0.75, 0.5, 0.5, dx=0.5)
    assert iou(g, half) == 0.5
    assert metrics.get("map_0.50")([det([half], [0.9], [3])], gts) == 0.0
    assert metrics.get("map_0.25")([det([half], [0.9], [3])], gts) == 1.0


def test_90_degree_yaw_in_the_metric():
    gts = [gt([box(0, 0, 0, 2, 1, 1, 0)], [0])]
    turned = [det([box(0, 0, 0, 2, 1, 1, math.pi / 2)], [0.9], [0])]  # IoU 1/3 (see above)
    assert metrics.get("map_0.25")(turned, gts) == 1.0
    assert metrics.get("map_0.50")(turned, gts) == 0.0
    # a 1x2 box without yaw is the same solid as a 2x1 box turned by 90 degrees: IoU 1, a hit at 0.50
    same_solid = [det([box(0, 0, 0, 1, 2, 1, 0)], [0.9], [0])]
    assert metrics.get("map_0.50")(same_solid, [gt([box(0, 0, 0, 2, 1, 1, math.pi / 2)], [0])]) == 1.0


def test_class_absent_from_ground_truth_is_left_out():
    # GT: class 0 (hit perfectly) and class 1 (never detected -> AP 0). Class 3 is detected but has no
    # GT: it is left out of the mean (VoteNet / mmdet3d iterate over GT classes) -> mAP = (1 + 0) / 2
    gts = [gt([box(0), box(4)], [0, 1])]
    dets = [det([box(0), box(8)], [0.9, 0.95], [0, 3])]
    ap = per_class_ap(dets, gts, 0.25, num_classes=10)
    assert ap[0] == 1.0 and ap[1] == 0.0 and np.isnan(ap[3]) and np.isnan(ap[9])
    assert metrics.get("map_0.25")(dets, gts) == pytest.approx(0.5)
    assert math.isnan(metrics.get("ap_0.25_chair")(dets, gts))
    assert metrics.get("mar_0.25")(dets, gts) == pytest.approx(0.5)


def test_mean_recall():
    # class 0: 2 GT, one found -> recall 1/2; class 1: 1 GT, found -> 1; mAR = 3/4
    gts = [gt([box(0), box(3)], [0, 0]), gt([box(0)], [1])]
    dets = [det([box(0), box(9)], [0.5, 0.6], [0, 0]), det([box(0)], [0.1], [1])]
    assert metrics.get("mar_0.25")(dets, gts) == pytest.approx(0.75)
    assert per_class_recall(dets, gts, 0.25)[:2] == pytest.approx([0.5, 1.0])


def test_torch_inputs_and_empty_scenes():
    gts = [gt([box(0)], [0]), gt(np.zeros((0, 7)), [])]
    dets_np = [det([box(0), box(2)], [0.6, 0.9], [0, 0]), det(np.zeros((0, 7)), [], [])]
    dets_t = [{k: torch.as_tensor(v) for k, v in d.items()} for d in dets_np]
    # ranking: FP (0.9) then TP (0.6): precision [0, 1/2], recall [0, 1] -> AP = 1 * 1/2
    assert metrics.get("map_0.25")(dets_np, gts) == pytest.approx(0.5)
    assert metrics.get("map_0.25")(dets_t, gts) == pytest.approx(0.5)


def test_voc_ap_envelope_by_hand():
    # recall [0.25, 0.5, 0.5, 0.75], precision [1, 0.5, 0.4, 0.6]: envelope 1, 0.6, 0.6 on the three
    # recall steps of width 0.25 -> AP = 0.25 + 0.15 + 0.15 = 0.55
    assert voc_ap(np.array([0.25, 0.5, 0.5, 0.75]), np.array([1.0, 0.5, 0.4, 0.6])) == pytest.approx(0.55)


def test_bad_inputs_raise_value_error():
    gts = [gt([box(0)], [0])]
    with pytest.raises(ValueError, match="one entry per scene"):
        metrics.get("map_0.25")([], gts)
    with pytest.raises(ValueError, match=r"\[N, 7\]"):
        metrics.get("map_0.25")([{"boxes": np.zeros((1, 6)), "scores": [1.0], "labels": [0]}], gts)
    with pytest.raises(ValueError, match="labels must be in"):
        metrics.get("map_0.25")([det([box(0)], [0.9], [12])], gts)
    with pytest.raises(ValueError, match="no boxes"):
        metrics.get("map_0.25")([det([box(0)], [0.9], [0])], [gt(np.zeros((0, 7)), [])])
