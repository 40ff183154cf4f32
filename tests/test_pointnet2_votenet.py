"""PointNet++ primitives against slow explicit-loop references, the per-modality encoder, VoteNet
(forward/backward, gradient of every loss term, descent on a fixed scene, prediction) and 3D NMS."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from fusebench.encoders import build
from fusebench.geometry3d import nms_3d
from fusebench.encoders.pointnet2 import (
    PointNet2Encoder,
    modality_inputs,
    SetAbstraction,
    ball_query,
    farthest_point_sample,
    three_nn_interpolate,
)
from fusebench.encoders.votenet import SUNRGBD_MEAN_SIZES, VoteNet, angle_to_class, class_to_angle
from fusebench.components.model import for_backbone



# one intra-op thread (conftest): tiny point clouds, as fast, and no spin-waiting on a loaded machine
pytestmark = pytest.mark.usefixtures("one_torch_thread")


# ------------------------------------------------------------------------------------------
# primitives vs slow loops
# ------------------------------------------------------------------------------------------


def slow_fps(pts: np.ndarray, m: int) -> list[int]:
    chosen = [0]
    for _ in range(1, m):
        best, best_d = -1, -1.0
        for i in range(len(pts)):
            d = min(float(np.sum((pts[i] - pts[j]) ** 2)) for j in chosen)
            if d > best_d:
                best, best_d = i, d
        chosen.append(best)
    return chosen


def test_fps_matches_slow_loop_and_spreads_points():
    g = torch.Generator().manual_seed(0)
    xyz = torch.rand(2, 120, 3, generator=g, dtype=torch.float64)
    idx = farthest_point_sample(xyz, 16)
    for b in range(2):
        assert idx[b].tolist() == slow_fps(xyz[b].numpy(), 16)
    # FPS points are pairwise farther apart than the same number of points taken in index order
    sel = xyz[0, idx[0]]
    d_fps = torch.cdist(sel, sel) + torch.eye(16, dtype=xyz.dtype) * 9
    first = xyz[0, :16]
    d_first = torch.cdist(first, first) + torch.eye(16, dtype=xyz.dtype) * 9
    assert d_fps.min() > d_first.min()


def test_ball_query_matches_slow_loop():
    g = torch.Generator().manual_seed(1)
    xyz = torch.rand(2, 200, 3, generator=g)
    centers = torch.cat([xyz[:, :10], torch.full((2, 1, 3), 5.0)], dim=1)  # the last ball is empty
    r, k = 0.25, 8
    got = ball_query(xyz, centers, r, k, chunk=4)
    for b in range(2):
        for s in range(centers.shape[1]):
            inside = [i for i in range(200) if float(((xyz[b, i] - centers[b, s]) ** 2).sum()) < r * r][:k]
            want = inside + [inside[0] if inside else 0] * (k - len(inside))
            assert got[b, s].tolist() == want


def test_three_nn_interpolation_matches_slow_loop():
    g = torch.Generator().manual_seed(2)
    unknown, known = torch.rand(2, 30, 3, generator=g, dtype=torch.float64), torch.rand(2, 12, 3, generator=g, dtype=torch.float64)
    feats = torch.randn(2, 5, 12, generator=g, dtype=torch.float64)
    got = three_nn_interpolate(unknown, known, feats)
    for b in range(2):
        for i in range(30):
            d = sorted((float(torch.linalg.norm(unknown[b, i] - known[b, j])), j) for j in range(12))[:3]
            w = [1 / (dd + 1e-8) for dd, _ in d]
            want = sum(wi * feats[b, :, j] for wi, (_, j) in zip(w, d)) / sum(w)
            assert torch.allclose(got[b, :, i], want, atol=1e-10)


def test_set_abstraction_is_max_of_shared_mlp_over_ball():
    torch.manual_seed(0)
    sa = SetAbstraction(npoint=8, radius=0.3, nsample=6, in_features=2, mlp=[4, 5]).eval()
    xyz, feats = torch.rand(1, 40, 3), torch.randn(1, 2, 40)
    new_xyz, out, grouping = sa(xyz, feats)
    assert new_xyz.shape == (1, 8, 3) and out.shape == (1, 5, 8)
    s = 3
    nb = grouping.ball_idx[0, s]
    x = torch.cat([(xyz[0, nb] - new_xyz[0, s]) / 0.3, feats[0, :, nb].T], dim=1)  # [K, 5]
    h = sa.mlp(x.T[None, :, None, :])[0, :, 0]  # the same shared MLP, applied neighbour by neighbour
    assert torch.allclose(out[0, :, s], h.max(dim=1).values, atol=1e-6)


# ------------------------------------------------------------------------------------------
# encoder views
# ------------------------------------------------------------------------------------------


def scene_batch(n_scenes: int = 1, n_points: int = 256, seed: int = 0):
    """Synthetic scenes: points on two boxes (a bed and a chair) plus a floor patch."""
    g = torch.Generator().manual_seed(seed)
    boxes = torch.tensor([[1.0, 2.0, 0.5, 1.2, 0.8, 1.0, 0.3], [-1.0, 3.0, 0.4, 0.6, 0.6, 0.8, -1.0]])
    labels = torch.tensor([0, 3])
    pts = []
    for bx in boxes:
        loc = (torch.rand(n_points // 3, 3, generator=g) - 0.5) * bx[3:6]
        c, s = math.cos(bx[6]), math.sin(bx[6])
        pts.append(torch.stack([c * loc[:, 0] - s * loc[:, 1] + bx[0], s * loc[:, 0] + c * loc[:, 1] + bx[1],
                                loc[:, 2] + bx[2]], 1))
    rest = n_points - sum(len(p) for p in pts)
    pts.append(torch.rand(rest, 3, generator=g) * torch.tensor([4.0, 4.0, 0.05]) + torch.tensor([-2.0, 1.0, 0.0]))
    p = torch.cat(pts)
    points = p[None].repeat(n_scenes, 1, 1)
    return {
        "names": ["points", "color", "height"],
        "modalities": {"points": points, "color": torch.rand(n_scenes, n_points, 3, generator=g),
                       "height": points[..., 2:3].clone()},
        "target": [{"boxes": boxes.clone(), "labels": labels.clone()} for _ in range(n_scenes)],
    }


def test_encoder_views_are_modality_specific():
    torch.manual_seed(0)
    enc = build("pointnet2", config="tiny").eval()
    batch = scene_batch(2)
    e = enc.embed(batch)
    assert e.shape == (3, 2, enc.num_features) and enc.modalities == ["points", "color", "height"]
    # changing the colours changes only the colour view; changing heights only the height view
    b2 = scene_batch(2)
    b2["modalities"]["color"] = torch.rand_like(b2["modalities"]["color"])
    e2 = enc.embed(b2)
    assert torch.allclose(e2[0], e[0]) and torch.allclose(e2[2], e[2]) and not torch.allclose(e2[1], e[1])
    b3 = scene_batch(2)
    b3["modalities"]["height"] = b3["modalities"]["height"] + 0.5
    e3 = enc.embed(b3)
    assert torch.allclose(e3[0], e[0]) and torch.allclose(e3[1], e[1]) and not torch.allclose(e3[2], e[2])


def test_encoder_bad_input_and_missing_height_fallback():
    enc = PointNet2Encoder(modalities=("points", "height"), config="tiny").eval()
    batch = scene_batch(1)
    del batch["modalities"]["height"]  # computed as z - 1st percentile of z, as VoteNet does
    assert enc.embed(batch).shape == (2, 1, enc.num_features)
    with pytest.raises(ValueError, match="at least 64 points"):
        enc.embed({"modalities": {"points": torch.rand(1, 20, 3)}})
    with pytest.raises(ValueError, match="modalities"):
        PointNet2Encoder(modalities=("points", "depth"), config="tiny")
    with pytest.raises(NotImplementedError, match="votenet"):
        for_backbone(enc, "detection")
    with pytest.raises(ValueError, match="color"):
        PointNet2Encoder(modalities=("points", "color"), config="tiny").embed({"modalities": {"points": torch.rand(1, 256, 3)}})


def test_encoder_has_no_head_and_every_parameter_is_an_encoder_parameter():
    # PointNet2Encoder is a headless backbone: head_parameters() is empty (it used to be unreachable
    # code after synthetic_scenes' return, so the call raised NotImplementedError) and
    # encoder_parameters() is every parameter of the per-modality branches
    enc = PointNet2Encoder(modalities=("points", "height"), config="tiny")
    assert list(enc.head_parameters()) == []
    branch_params = [p for m in ("points", "height") for p in enc.branches[m].parameters()]
    assert len(branch_params) == len(list(enc.parameters()))
    assert [id(p) for p in enc.encoder_parameters()] == [id(p) for p in branch_params]
    # VoteNet's late fusion keeps that split: its head is exactly fuse + vote + aggregation + proposal
    model = for_backbone(VoteNet(config="tiny"))
    head = model.head
    want_head = {id(p) for mod in (head.fuse, head.vote, head.aggregate, head.proposal) for p in mod.parameters()}
    assert {id(p) for p in model.head_parameters()} == want_head
    assert {id(p) for p in model.encoder_parameters()} == {id(p) for p in model.backbone.encoder.parameters()}


# ------------------------------------------------------------------------------------------
# VoteNet
# ------------------------------------------------------------------------------------------


def test_heading_bins_by_hand():
    # 12 bins of 30 degrees centred at 0, 30, 60, ... degrees
    a = torch.tensor([0.0, math.pi / 12 * 0.999, math.pi / 12, -math.pi / 2, math.pi])
    cls, res = angle_to_class(a, 12)
    assert cls.tolist() == [0, 0, 1, 9, 6]
    assert res.tolist() == pytest.approx([0.0, math.pi / 12 * 0.999, -math.pi / 12, 0.0, 0.0], abs=1e-6)
    back = class_to_angle(cls, res, 12)
    assert back.tolist() == pytest.approx([0.0, math.pi / 12 * 0.999, math.pi / 12, -math.pi / 2, -math.pi], abs=1e-6)


def test_votenet_forward_backward_shapes():
    torch.manual_seed(0)
    model = for_backbone(build("votenet", config="tiny"))
    batch = scene_batch(2)
    out = model(batch)
    k = model.head.cfg.num_proposals
    assert out["center"].shape == (2, k, 3) and out["objectness_logits"].shape == (2, k, 2)
    assert out["heading_logits"].shape == (2, k, 12) and out["size_residuals"].shape == (2, k, 10, 3)
    assert out["sem_logits"].shape == (2, k, 10) and out["vote_xyz"].shape == out["seed_xyz"].shape
    loss = model.task_loss(out, batch)
    assert loss.ndim == 0 and torch.isfinite(loss)
    loss.backward()
    head = list(model.head_parameters())
    assert head and all(p.grad is not None for p in head)
    assert all(p.grad is not None for p in model.encoder_parameters())
    assert model.head.mean_sizes[0].tolist() == pytest.approx(SUNRGBD_MEAN_SIZES[0])
    assert model.embed(batch).shape == (3, 2, model.num_features)


def _scene_with_boxes_on_proposals():
    """A tiny VoteNet and one scene whose two ground-truth boxes are centred on two of the model's
    (initial) cluster centres, so that every loss term is active: with random boxes a freshly
    initialised model may have no positive proposal (centre within 0.3 m) and the heading, size and
    semantic terms would all be zero. The cluster centres depend on the points only, not the targets."""
    torch.manual_seed(0)
    model = for_backbone(VoteNet(config="tiny"))
    batch = scene_batch(1)
    with torch.no_grad():
        agg = model(batch)["aggregated_xyz"][0]  # [K, 3]
    far = int(torch.cdist(agg[:1], agg)[0].argmax())  # the cluster centre farthest from centre 0
    boxes = torch.tensor([[*agg[0].tolist(), 2.0, 1.6, 1.8, 0.3],      # heading bin 1, residual 0.3 - pi/6
                          [*agg[far].tolist(), 1.4, 1.2, 1.6, -2.0]])  # heading bin 8 (-2 + 2 pi ~ 4.28 rad)
    batch["target"] = [{"boxes": boxes, "labels": torch.tensor([2, 7])}]
    return model, batch


HEAD_OUTPUTS = {  # the output each loss term reads (the only one it reads that carries gradient)
    "vote": "vote_xyz", "objectness": "objectness_logits", "center": "center", "heading_cls": "heading_logits",
    "heading_reg": "heading_residuals_normalized", "size_cls": "size_logits",
    "size_reg": "size_residuals_normalized", "sem_cls": "sem_logits",
}


def test_votenet_gradient_reaches_every_loss_term():
    model, batch = _scene_with_boxes_on_proposals()
    out = model(batch)
    total = model.task_loss(out, batch)
    terms = {k: float(v) for k, v in model.head.loss_terms.items()}  # 0-dim tensors: read only when asked
    assert terms["positive_ratio"] > 0 and all(terms[t] > 0 for t in HEAD_OUTPUTS), terms
    # L = 10 (L_vote + 0.5 L_obj + L_box + 0.1 L_sem), L_box = L_center + 0.1 L_hcls + L_hres + 0.1 L_scls + L_sres
    box = terms["center"] + 0.1 * terms["heading_cls"] + terms["heading_reg"] + 0.1 * terms["size_cls"] + terms["size_reg"]
    assert total.item() == pytest.approx(10 * (terms["vote"] + 0.5 * terms["objectness"] + box + 0.1 * terms["sem_cls"]),
                                         rel=1e-6)
    # one output at a time carries gradient: each term passes a non-zero gradient to its output
    for term, key in HEAD_OUTPUTS.items():
        live = {k: v.detach() if isinstance(v, torch.Tensor) else v for k, v in out.items()}
        live[key] = out[key].detach().requires_grad_()
        model.task_loss(live, batch).backward()
        assert live[key].grad.abs().sum() > 0, term
        if key == "vote_xyz":
            vote_grad = live[key].grad[0]
    # the vote term by hand (Eq. 1): 10 / (number of seeds on an object) * sign(vote - its box centre),
    # zero for seeds outside every box (box membership worked out in the box frame)
    seeds, votes = out["seed_xyz"][0].detach(), out["vote_xyz"][0].detach()
    want = torch.zeros_like(votes)
    on = []
    for s in range(len(seeds)):
        owners = []
        for g, (cx, cy, cz, dx, dy, dz, yaw) in enumerate(batch["target"][0]["boxes"].tolist()):
            x, y, z = (seeds[s] - torch.tensor([cx, cy, cz])).tolist()
            lx, ly = math.cos(yaw) * x + math.sin(yaw) * y, -math.sin(yaw) * x + math.cos(yaw) * y
            if abs(lx) <= dx / 2 and abs(ly) <= dy / 2 and abs(z) <= dz / 2:
                owners.append(g)
        assert len(owners) <= 1  # the two boxes are disjoint
        if owners:
            on.append(s)
            want[s] = torch.sign(votes[s] - batch["target"][0]["boxes"][owners[0], :3])
    assert len(on) >= 2
    torch.testing.assert_close(vote_grad, want * 10 / len(on), atol=1e-6, rtol=1e-5)
    # the total's gradient reaches every module: the encoder branches and each head stage
    total.backward()
    head = model.head
    for name, module in [*model.backbone.encoder.branches.items(), ("fuse", head.fuse), ("vote", head.vote),
                         ("aggregate", head.aggregate), ("proposal", head.proposal)]:
        assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in module.parameters()), name


def test_votenet_descent_on_the_proposal_layer_lowers_the_loss():
    """Gradient descent on the last proposal layer alone, the rest of the network fixed: the cluster
    centres, their features and hence the positive / negative proposals do not move, and every term
    (cross entropies, squared distances and Huber losses of outputs linear in that layer's weights) is
    convex in those weights, so small SGD steps lower the loss at every step. Measured (1 and 2
    threads): the loss less its constant vote part falls 33.2 -> 15.4 in 10 steps (ratio 0.46), each
    step by more than 0.7; 1 vs 2 threads differ by ~1e-4, far below these margins."""
    model, batch = _scene_with_boxes_on_proposals()
    last = model.head.proposal[-1]
    opt = torch.optim.SGD(last.parameters(), lr=1e-3)
    totals, votes, positives = [], [], []
    for _ in range(10):
        loss = model.task_loss(model(batch), batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
        totals.append(loss.item())
        votes.append(float(model.head.loss_terms["vote"]))
        positives.append(float(model.head.loss_terms["positive_ratio"]))
    assert len(set(positives)) == 1 and positives[0] > 0  # the same proposals stay positive throughout
    assert max(votes) - min(votes) < 1e-4 * votes[0]  # the votes do not depend on the trained layer
    proposal_part = [t - 10 * v for t, v in zip(totals, votes)]
    assert all(b < a - 0.1 for a, b in zip(totals, totals[1:])), totals
    assert proposal_part[-1] < 0.6 * proposal_part[0], proposal_part


def test_votenet_early_fusion_and_empty_scene():
    torch.manual_seed(0)
    model = for_backbone(VoteNet(modalities=("points", "height"), config="tiny", fusion="early"))
    batch = scene_batch(2)
    batch["target"][1] = {"boxes": torch.zeros(0, 7), "labels": torch.zeros(0, dtype=torch.long)}
    loss = model.task_loss(model(batch), batch)
    assert torch.isfinite(loss)
    loss.backward()
    with pytest.raises(ValueError, match="fusion='late'"):
        model.embed(batch)
    with pytest.raises(ValueError, match="labels must be in"):
        bad = scene_batch(2)
        bad["target"][0]["labels"] = torch.tensor([0, 11])
        model.task_loss(model(bad), bad)


def test_votenet_predict_format():
    torch.manual_seed(0)
    model = for_backbone(VoteNet(config="tiny")).eval()
    batch = scene_batch(2)
    with torch.no_grad():
        preds = model.predict(model(batch), batch)
    assert len(preds) == 2
    for p in preds:
        assert p["boxes"].shape[1] == 7 and p["boxes"].shape[0] == p["scores"].shape[0] == p["labels"].shape[0]
        assert bool((p["boxes"][:, 3:6] >= 0).all())
        assert bool(((p["labels"] >= 0) & (p["labels"] < 10)).all())
        # per_class_proposal: each kept proposal gives all 10 classes, in order, the same box and objectness
        assert p["boxes"].shape[0] % 10 == 0 and p["labels"].tolist() == list(range(10)) * (p["boxes"].shape[0] // 10)


def test_votenet_confidence_threshold_is_on_objectness_as_votenet_parse_predictions():
    """VoteNet's ap_helper.parse_predictions keeps a proposal when its objectness exceeds conf_thresh and then gives
    every class its box scored p_obj * p_sem(c), however low: one proposal with p_obj = 0.4 and a uniform semantic
    distribution over 10 classes gives 10 boxes scored 0.04 (below 0.05; a threshold on that score gave none); one
    with p_obj = 0.04 gives none."""
    head = for_backbone(VoteNet(config="tiny", min_points_in_box=0)).head  # every proposal counts here
    assert head.conf_thresh == 0.05 and head.per_class_proposal and head.num_classes == 10
    decoded = {"boxes": torch.tensor([[[0.0, 0, 0, 1, 1, 1, 0], [5.0, 5, 0, 1, 1, 1, 0]]]),
               "objectness": torch.tensor([[0.4, 0.04]]), "sem_prob": torch.full((1, 2, 10), 0.1)}
    head.decode = lambda output: decoded  # the decoded proposals, as given above
    [p] = head.predict({})
    assert p["labels"].tolist() == list(range(10))
    assert torch.allclose(p["scores"], torch.full((10,), 0.04))
    assert torch.equal(p["boxes"], decoded["boxes"][0, :1].repeat(10, 1))


def test_votenet_drops_proposals_with_fewer_than_5_points_inside_before_nms():
    """VoteNet's eval.py (remove_empty_box, its default) drops a proposal with fewer than 5 input points inside
    before NMS, so an empty high-scoring box cannot suppress an overlapping box that has points. A = unit box at the
    origin (objectness 0.9): 4 points inside; B = the same box moved 0.1 m along x (0.8): those 4 points and one at
    x = 0.55 (inside B only, B spans [-0.4, 0.6]), 5 in all; IoU(A, B) = 0.9 / 1.1 > 0.25, both class 0;
    C = a unit box at (5, 5, 0) (0.7) with no point. Kept: B alone (A and C empty). With min_points_in_box 0 (VoteNet's
    --faster_eval): A suppresses B, and C stays."""
    decoded = {"boxes": torch.tensor([[[0.0, 0, 0, 1, 1, 1, 0], [0.1, 0, 0, 1, 1, 1, 0], [5.0, 5, 0, 1, 1, 1, 0]]]),
               "objectness": torch.tensor([[0.9, 0.8, 0.7]]),
               "sem_prob": torch.tensor([[0.5] + [0.5 / 9] * 9]).repeat(1, 3, 1)}
    points = torch.tensor([[[0.0, 0, 0], [0.1, 0, 0], [0.2, 0, 0], [0.3, 0, 0], [0.55, 0, 0], [20.0, 20, 20]]])
    batch = {"modalities": {"points": points}}
    kept = {}
    for min_points in (5, 0):
        head = for_backbone(VoteNet(config="tiny", min_points_in_box=min_points)).head
        head.decode = lambda output: decoded
        [p] = head.predict({}, batch)
        kept[min_points] = {tuple(b.tolist()) for b in p["boxes"]}
    a, b, c = (tuple(x.tolist()) for x in decoded["boxes"][0])
    assert kept[5] == {b}
    assert kept[0] == {a, c}
    # exactly 5 points is enough (VoteNet drops len(pc_in_box) < 5); 4 is not
    head = for_backbone(VoteNet(config="tiny")).head
    head.decode = lambda output: decoded
    [p] = head.predict({}, {"modalities": {"points": points[:, [0, 1, 2, 4, 5]]}})  # B keeps 4 points
    assert len(p["boxes"]) == 0
    with pytest.raises(ValueError, match="min_points_in_box = 5 points inside"):
        head.predict({}, None)
    with pytest.raises(ValueError, match="min_points_in_box must be an integer >= 0"):
        VoteNet(config="tiny", min_points_in_box=-1)


def test_nms_per_class():
    boxes = torch.tensor([
        [0.0, 0, 0, 1, 1, 1, 0],    # 0: class 0, score 0.9 -> kept
        [0.1, 0, 0, 1, 1, 1, 0],    # 1: class 0, IoU 0.9/1.1 with 0 -> suppressed
        [0.1, 0, 0, 1, 1, 1, 0.2],  # 2: class 1, overlaps 0 but another class -> kept
        [5.0, 0, 0, 1, 1, 1, 0],    # 3: class 0, far away -> kept
        [1.25, 5, 0, 1.5, 1, 1, 0],  # 4: class 0, IoU with 5 exactly 1/4 (not > 0.25) -> kept
        [0.5, 5, 0, 1, 1, 1, 0],    # 5: class 0, score 0.95 -> kept
    ], dtype=torch.float64)
    scores = torch.tensor([0.9, 0.8, 0.7, 0.3, 0.2, 0.95], dtype=torch.float64)
    labels = torch.tensor([0, 0, 1, 0, 0, 0])
    keep = nms_3d(boxes, scores, 0.25, labels=labels)
    assert keep.tolist() == [5, 0, 2, 3, 4]
    # without labels, box 2 (IoU with box 0 well above 0.25) is suppressed too
    assert nms_3d(boxes, scores, 0.25).tolist() == [5, 0, 3, 4]


def test_votenet_on_real_sunrgbd_points(fixtures_dir):
    raw = np.fromfile(fixtures_dir / "sunrgbd" / "mmdet3d_tests" / "points" / "000001.bin", dtype=np.float32)
    pts = raw.reshape(-1, 6)
    assert pts.shape == (100, 6)
    rng = np.random.default_rng(0)
    choice = rng.choice(len(pts), 256, replace=True)  # VoteNet samples with replacement below N points
    pts = torch.from_numpy(pts[choice])
    xyz = pts[None, :, :3]
    height = xyz[..., 2:3] - torch.quantile(xyz[..., 2], 0.01)
    # frame 000001's bed / night_stand / dresser boxes (mmdet3d info, labels 0, 7, 6)
    boxes = torch.tensor([[1.047307, 4.168696, -0.246859, 2.30207, 1.887584, 1.969614, -1.6956494],
                          [2.583086, 4.811675, -0.786667, 0.585172, 0.883176, 0.973334, -1.6499951],
                          [-1.086364, 1.904545, -0.147727, 0.71281, 1.563134, 2.104546, -0.1022069]])
    batch = {"modalities": {"points": xyz, "color": pts[None, :, 3:6], "height": height},
             "target": [{"boxes": boxes, "labels": torch.tensor([0, 7, 6])}]}
    torch.manual_seed(0)
    model = for_backbone(VoteNet(config="tiny"))
    out = model(batch)
    loss = model.task_loss(out, batch)
    assert torch.isfinite(loss)
    loss.backward()
    model.eval()
    with torch.no_grad():
        preds = model.predict(model(batch), batch)
    assert preds[0]["boxes"].shape[1] == 7


def test_height_fallback_is_votenet_floor_percentile():
    # VoteNet: floor = np.percentile(z, 0.99) (the 0.99th percentile), height = z - floor
    batch = scene_batch(1)
    del batch["modalities"]["height"]
    _, feats = modality_inputs(batch, ["points", "height"])
    z = batch["modalities"]["points"][0, :, 2].double().numpy()
    assert np.allclose(feats["height"][0, 0].numpy(), z - np.percentile(z, 0.99), atol=1e-5)


def test_example_batch_runs_a_training_step():
    cfg = dict(modalities=["points", "height"], config="tiny", fusion="early")
    batch = VoteNet.example_batch(cfg, batch_size=2, seed=3)
    assert batch["modalities"]["points"].shape == (2, 256, 3) and len(batch["target"]) == 2
    model = for_backbone(VoteNet(**cfg))
    loss = model.task_loss(model(batch), batch)
    assert torch.isfinite(loss)
    loss.backward()


def test_fps_ties_on_a_grid_go_to_the_first_index_with_each_square_rounded():
    """Squared distances are dx^2 + dy^2 + dz^2 with every product rounded (as the Triton kernel and the slow
    loop compute them): on a float32 grid many distances tie exactly and the first index wins. A fused
    multiply-add (``addcmul_`` on CPUs with FMA) rounded one of the tied sums differently and picked 106 for 64."""
    grid = torch.stack(torch.meshgrid(*[torch.arange(7.0)] * 3, indexing="ij"), -1).reshape(1, -1, 3) * 0.1
    pts = grid[0].numpy()  # float32
    want, dist = [0], np.full(len(pts), np.inf, dtype=np.float32)
    for _ in range(1, 30):  # numpy float32 ufuncs: one rounding per product and per sum, no FMA
        diff = pts - pts[want[-1]]
        dist = np.minimum(dist, diff[:, 0] * diff[:, 0] + diff[:, 1] * diff[:, 1] + diff[:, 2] * diff[:, 2])
        want.append(int(np.flatnonzero(dist == dist.max())[0]))
    assert want[21] == 64  # the tie with point 106 (both at squared distance 0.06 in float32)
    assert farthest_point_sample(grid, 30).tolist() == [want]


def test_three_nn_ties_go_to_the_lower_index():
    """Equally near known points: the 3 lowest indices are the neighbours (VoteNet's three_nn kernel and the Triton
    one compare strictly in index order); topk's order among ties took others."""
    known = torch.tensor([[[2.0, 0, 0], [1, 0, 0], [0, 1, 0], [-1, 0, 0], [0, -1, 0], [0, 0, 1], [0, 0, -1]]])
    feats = torch.arange(7.0).view(1, 1, 7)
    # from the origin: index 0 at distance 2, indices 1..6 at distance 1 -> neighbours 1, 2, 3, equal weights
    assert three_nn_interpolate(torch.zeros(1, 1, 3), known, feats).item() == pytest.approx(2.0)
    for m in (4, 8, 40):  # duplicated known points: neighbours 0, 1, 2
        got = three_nn_interpolate(torch.tensor([[[1.0, 0, 0], [0.5, 0.5, 0.5]]]), torch.zeros(1, m, 3),
                                   torch.arange(float(m)).view(1, 1, m))
        assert got.flatten().tolist() == pytest.approx([1.0, 1.0])


def test_pointnet2_preset_checked_when_the_spec_is_loaded():
    """A mistyped or non-name preset is refused by config_problems (the spec loader), as votenet's is."""
    for bad in ("votnet", 5, ["tiny"]):
        problems = PointNet2Encoder.config_problems({"config": bad})
        assert len(problems) == 1 and "encoder.config.config" in problems[0] and "'tiny', 'votenet'" in problems[0]
    assert PointNet2Encoder.config_problems({"config": "tiny"}) == []
    assert PointNet2Encoder.config_problems({}) == []
