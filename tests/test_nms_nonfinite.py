"""Non-finite boxes and scores in 3D NMS / rotated IoU, and non-finite VoteNet outputs at prediction.

Boxes worked by hand (unit cubes ``[cx, cy, cz, dx, dy, dz, yaw]``):
A at the origin, B = A moved 0.5 m along x (overlap 0.5 x 1 x 1 = 0.5, union 1.5: IoU 1/3 > 0.25),
C at (5, 5, 5) (IoU 0 with A and B). Measured before the fix: a box with NaN / Inf in any column had IoU 0 with
every box, itself included, so it was neither suppressed nor suppressing and NMS kept it; +Inf scores ranked
first; a NaN centre out of VoteNet was dropped by ``min_points_in_box`` without a word.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from fusebench.geometry3d import nms_3d, paired_rotated_iou_3d, rotated_iou_3d

A = [0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0]
B = [0.5, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0]
C = [5.0, 5.0, 5.0, 1.0, 1.0, 1.0, 0.0]
INF, NAN = float("inf"), float("nan")
COLUMNS = ("cx", "cy", "cz", "dx", "dy", "dz", "yaw")


def boxes(*rows):
    return torch.tensor(rows, dtype=torch.float64)


def test_the_hand_worked_boxes():
    iou = rotated_iou_3d(boxes(A, B, C), boxes(A, B, C))
    want = torch.tensor([[1, 1 / 3, 0], [1 / 3, 1, 0], [0, 0, 1]], dtype=torch.float64)
    assert torch.allclose(iou, want, atol=1e-12)
    assert nms_3d(boxes(A, B, C), torch.tensor([0.9, 0.8, 0.7], dtype=torch.float64)).tolist() == [0, 2]


@pytest.mark.parametrize("value", [NAN, INF, -INF])
@pytest.mark.parametrize("col", range(7))
def test_nms_refuses_a_non_finite_box_naming_the_column(col, value):
    b = boxes(A, B, C)
    b[1, col] = value  # before: IoU 0 with A, so B survived A and NMS returned [0, 1, 2]
    with pytest.raises(ValueError, match=rf"nms_3d: boxes has NaN or Inf in 1 of 3 boxes \(columns {COLUMNS[col]}\)"):
        nms_3d(b, torch.tensor([0.9, 0.8, 0.7], dtype=torch.float64))


def test_nms_counts_the_bad_rows_and_names_every_column():
    b = boxes(A, B, C)
    b[0, 0], b[2, 6], b[2, 3] = NAN, INF, NAN
    with pytest.raises(ValueError, match=r"2 of 3 boxes \(columns cx, dx, yaw\)"):
        nms_3d(b, torch.tensor([0.9, 0.8, 0.7], dtype=torch.float64))


def test_nms_negative_size_is_named_as_nms_boxes():
    b = boxes(A, B, C)
    b[2, 4] = -1.0
    with pytest.raises(ValueError, match="nms_3d: boxes has negative sizes"):
        nms_3d(b, torch.tensor([0.9, 0.8, 0.7], dtype=torch.float64))


@pytest.mark.parametrize("scores, n_nan, n_inf", [([0.9, INF, 0.7], 0, 1), ([INF, INF, NAN], 1, 2),
                                                  ([NAN, 0.8, 0.7], 1, 0)])
def test_nms_refuses_nan_and_plus_inf_scores(scores, n_nan, n_inf):
    # before: [0.9, +Inf, 0.7] ranked B first and B suppressed A (IoU 1/3): [1, 2]
    with pytest.raises(ValueError, match=rf"got {n_nan} NaN and {n_inf} \+Inf among 3 rows"):
        nms_3d(boxes(A, B, C), torch.tensor(scores, dtype=torch.float64))


def test_minus_inf_score_ranks_last_and_is_kept_or_suppressed_like_any_box():
    # A at -Inf ranks below B (0.8) and C (0.7): B is kept, C is kept, A (IoU 1/3 with B) is suppressed
    assert nms_3d(boxes(A, B, C), torch.tensor([-INF, 0.8, 0.7], dtype=torch.float64)).tolist() == [1, 2]
    # A and B both -Inf: C first, then A (index order among ties), and A suppresses B
    assert nms_3d(boxes(A, B, C), torch.tensor([-INF, -INF, 0.7], dtype=torch.float64)).tolist() == [2, 0]
    # another class: nothing suppresses A, it is kept last
    labels = torch.tensor([1, 0, 0])
    assert nms_3d(boxes(A, B, C), torch.tensor([-INF, 0.8, 0.7]), labels=labels).tolist() == [1, 2, 0]


def test_rotated_iou_refuses_non_finite_boxes_naming_the_argument():
    bad = boxes(A, B)
    bad[0, 6] = NAN
    with pytest.raises(ValueError, match=r"boxes3d: b has NaN or Inf in 1 of 2 boxes \(columns yaw\)"):
        rotated_iou_3d(boxes(A, B, C), bad)  # before: IoU 0 everywhere in that row and column
    with pytest.raises(ValueError, match=r"boxes3d: a has NaN or Inf in 1 of 2 boxes"):
        paired_rotated_iou_3d(bad, boxes(A, B))


# ------------------------------------------------------------------------------------------- VoteNet
def _tiny_votenet_output(min_points_in_box):
    sys.path.insert(0, str(Path(__file__).parent))
    from test_pointnet2_votenet import scene_batch

    from fusebench.components.model import for_backbone
    from fusebench.encoders.votenet import VoteNet

    torch.manual_seed(0)
    model = for_backbone(VoteNet(config="tiny", min_points_in_box=min_points_in_box)).eval()
    batch = scene_batch(2)
    with torch.no_grad():
        return model, model(batch), batch


@pytest.mark.parametrize("value", [NAN, INF, -INF])
@pytest.mark.parametrize("key", ["center", "heading_logits", "heading_residuals", "size_logits", "size_residuals",
                                 "objectness_logits", "sem_logits"])
def test_votenet_predict_refuses_a_diverged_network_output_naming_the_tensor(key, value):
    model, out, batch = _tiny_votenet_output(5)
    assert len(model.predict(out, batch)) == 2  # the clean output decodes
    bad = dict(out)
    bad[key] = out[key].clone()
    bad[key][1, 3].reshape(-1)[0] = value  # one value of one proposal of the second scene
    n = out[key].numel()
    with pytest.raises(ValueError, match=rf"NaN or Inf in the network output '{key}' \(1 of {n} values\): "
                                         "the model diverged"):
        model.predict(bad, batch)


def test_votenet_names_every_bad_tensor_once():
    model, out, batch = _tiny_votenet_output(0)
    bad = dict(out, center=out["center"] * NAN, sem_logits=out["sem_logits"].clone())
    bad["sem_logits"][0, 0, :2] = INF
    n_c, n_s = out["center"].numel(), out["sem_logits"].numel()
    with pytest.raises(ValueError, match=rf"'center' \({n_c} of {n_c} values\), 'sem_logits' \(2 of {n_s} values\)"):
        model.predict(bad, batch)
