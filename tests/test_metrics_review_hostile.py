"""Hostile inputs for the metrics, the probes and the 3D box geometry (review of the boards' numbers): each
expected value is derived by hand from the definition, not from the code under test."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fusebench.geometry3d import rotated_iou_3d

CUBE = [0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0]


@pytest.mark.parametrize("flat", [
    [0.0, 0.0, 0.0, 0.0, 0.0, 0.5, 0.0],   # a point footprint (dx = dy = 0) inside the cube, half its height
    [0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.3],   # the same, full height, rotated
    [0.0, 0.0, 0.0, 0.0, 0.5, 0.5, 0.0],   # a segment footprint (dx = 0)
    [0.2, 0.1, 0.0, 0.5, 0.0, 0.5, 1.0],   # a segment footprint (dy = 0)
])
def test_iou_with_a_zero_area_footprint_is_zero_in_both_orders(flat):
    # a box of zero footprint area has volume 0, so its intersection with anything has volume 0: IoU = 0
    a = torch.tensor([CUBE], dtype=torch.float64)
    b = torch.tensor([flat], dtype=torch.float64)
    assert float(rotated_iou_3d(a, b)[0, 0]) == 0.0
    assert float(rotated_iou_3d(b, a)[0, 0]) == 0.0


def test_detection_against_a_point_ground_truth_box_is_not_a_hit():
    from fusebench.metrics.detection import per_class_ap

    # the only ground-truth box has zero volume: no detection can overlap it by IoU > 0.25, so AP = 0
    gts = [{"boxes": np.array([[0.0, 0, 0, 0, 0, 0.5, 0]]), "labels": np.array([0])}]
    dets = [{"boxes": np.array([CUBE]), "labels": np.array([0]), "scores": np.array([0.9])}]
    assert per_class_ap(dets, gts, 0.25, 1)[0] == 0.0


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_detection_scores_must_be_finite(bad):
    from fusebench import metrics

    gts = [{"boxes": np.array([CUBE]), "labels": np.array([0])}]
    far = [5.0, 5.0, 5.0, 1.0, 1.0, 1.0, 0.0]
    dets = [{"boxes": np.array([far, CUBE]), "labels": np.array([0, 0]), "scores": np.array([bad, 0.3])}]
    with pytest.raises(ValueError, match="NaN or Inf"):
        metrics.get("map_0.25")(dets, gts)


def test_nms_rejects_nan_scores():
    from fusebench.geometry3d import nms_3d

    boxes = torch.tensor([CUBE, CUBE], dtype=torch.float64)
    with pytest.raises(ValueError, match="NaN"):
        nms_3d(boxes, torch.tensor([float("nan"), 0.9], dtype=torch.float64))


@pytest.mark.parametrize("max_iter", [1, 2, 3, 300])
def test_kmeans_with_fewer_distinct_rows_than_clusters_has_no_nan(max_iter):
    from fusebench.probes.kmeans import kmeans

    # 3 distinct rows, k = 5: every cluster can hold copies of one row, the optimum inertia is 0
    x = np.array([[0.0], [0.0], [0.0], [1.0], [2.0]])
    for seed in range(4):
        labels, centres, inertia = kmeans(x, 5, seed, n_init=1, max_iter=max_iter)
        assert np.isfinite(centres).all() and inertia == 0.0
        assert len({tuple(np.flatnonzero(labels == c)) for c in np.unique(labels)}) == 3


def test_kmeans_duplicated_rows_reach_the_zero_inertia_partition():
    from fusebench.probes.kmeans import kmeans

    p, q, r = [-1.14, 1.3], [-0.96, -3.11], [-1.18, -1.77]
    x = np.array([p, p, q, q, p, p, r, q])
    labels, centres, inertia = kmeans(x, 5, 83, n_init=1)
    assert np.isfinite(centres).all()
    # the rows of one value share a cluster, the three values three clusters: inertia 0 (it was 1.45: r merged)
    groups = {tuple(np.flatnonzero(labels == c)) for c in np.unique(labels)}
    assert groups == {(0, 1, 4, 5), (2, 3, 7), (6,)} and inertia <= 1e-24
