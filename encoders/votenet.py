"""VoteNet for the 10 SUN RGB-D classes: voting, vote aggregation, proposals, losses, 3D NMS.

This module is longer than ~450 lines because it is the paper's one model: the backbone's options, voting,
aggregation, the proposal head, its losses and NMS share their shapes and conventions, as in the reference code.

Implements Qi, Litany, He & Guibas, "Deep Hough Voting for 3D Object Detection in Point Clouds"
(ICCV 2019, arXiv:1904.09664, https://arxiv.org/abs/1904.09664; reference code
https://github.com/facebookresearch/votenet), Sec. 4 and supplementary A.1 / A.2, on top of
:mod:`fusebench.encoders.pointnet2` (PointNet++, Qi et al. NeurIPS 2017, arXiv:1706.02413):

* voting (Sec. 4.1): a shared MLP maps each seed ``(x_i, f_i)`` to an offset and a feature residual,
  vote ``v_i = (x_i + dx_i, f_i + df_i)``; vote features are L2-normalised (reference code);
* vote loss (Eq. 1): ``L_vote = 1/M_pos sum_i ||dx_i - dx*_i||_1 [s_i on object]``, the target the
  offset to the centre of a ground-truth box containing the seed (the closest one when several do);
* vote aggregation (Sec. 4.2): FPS on the votes (K proposals), ball query r = 0.3, nsample 16,
  shared MLP [128, 128, 128] on ``[(z_i - z_j) / r, h_i]``, max-pool (Eq. 2); then two
  Conv1d-BN-ReLU and a Conv1d to ``2 + 3 + 2 NH + 4 NS + NC`` outputs;
* proposal decoding: objectness (2), centre = cluster centre + residual (3), heading class (NH = 12
  bins centred at ``b * 2pi / NH``) + normalised residual (x pi/NH), size class (NS = 10: one
  mean-size cluster per class) + residual normalised by the cluster's mean size, semantic class (10);
* losses (supp. A.2): objectness CE with weights (0.2, 0.8) on proposals whose centre is within
  0.3 m (positive) or farther than 0.6 m (negative) of the nearest ground-truth centre; centre:
  chamfer-like squared distance (proposal -> nearest GT on positives, GT -> nearest proposal);
  heading / size class CE and Huber (delta 1) residuals; semantic CE, all on positives against the
  nearest GT box; ``L = 10 (L_vote + 0.5 L_obj + L_box + 0.1 L_sem)``,
  ``L_box = L_center + 0.1 L_hcls + L_hres + 0.1 L_scls + L_sres``;
* prediction: boxes decoded; proposals with fewer than 5 input points inside are dropped (VoteNet's
  ``eval.py`` default ``remove_empty_box``; ``min_points_in_box``, 0 keeps every proposal); per-class rotated 3D NMS
  (IoU 0.25) over the rest, scored by objectness; then the proposals whose objectness exceeds ``conf_thresh`` = 0.05 are kept and (VoteNet's SUN RGB-D evaluation
  setting ``per_class_proposal``) each emits one box per class with score ``p_obj * p_sem(c)``, however low
  (VoteNet's ``ap_helper.parse_predictions``: the low-scoring class boxes are the tail of the precision-recall
  curve; a threshold on ``p_obj * p_sem(c)`` cut it off and lowered mAP and recall).

Boxes are ``[cx, cy, cz, dx, dy, dz, yaw]`` (full sizes, yaw counter-clockwise about +z; see
:mod:`fusebench.geometry3d`). Mean sizes (``dx, dy, dz``, metres) are VoteNet's
``sunrgbd_utils.type_mean_size`` (the same numbers as mmdet3d's SUN RGB-D VoteNet config).
``SUNRGBD_CLASSES`` is :data:`fusebench.datasets.sunrgbd.classes.CLASSES` (one definition, owned by
the dataset package).

Backbone and head: :class:`VoteNet` (the ``votenet`` encoder) is the backbone — ``fusion="late"``
(default) uses :class:`PointNet2Encoder`, one PointNet++ branch per modality sharing the sampling
geometry, so a pretrained ``pointnet2`` encoder transfers as its ``encoder``; ``fusion="early"`` is the
paper's architecture (one backbone, colour / height as input channels). Its ``features(batch)`` are the
seeds (``seed_xyz``, ``seed_inds``, ``seed_features``: one ``[n, C, S]`` per modality (late) or one
tensor (early)). Its head for the detection task, :class:`VoteNetHead` (built by ``task_head``), fuses
the branches' seed features with a 1x1 Conv-BN-ReLU (late fusion), votes, aggregates and proposes,
and owns the detection loss (``loss``, components in ``loss_terms``) and the decoding (``predict``).

Shape:
    batch["modalities"]: ``points [n, N, 3]``, optional ``color [n, N, 3]``, ``height [n, N, 1]``;
    batch["target"]: list of n dicts ``{"boxes": [G, 7], "labels": [G]}``;
    output: ``seed_xyz [n, S, 3]``, ``vote_xyz [n, S, 3]``, ``aggregated_xyz [n, K, 3]``,
    ``objectness_logits [n, K, 2]``, ``center [n, K, 3]``, ``heading_logits [n, K, NH]``,
    ``heading_residuals_normalized [n, K, NH]``, ``size_logits [n, K, NS]``,
    ``size_residuals_normalized [n, K, NS, 3]``, ``sem_logits [n, K, NC]``;
    predict: list of n dicts ``{"boxes": [K', 7], "scores": [K'], "labels": [K']}``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor, nn

from fusebench.datasets.sunrgbd.classes import CLASSES as SUNRGBD_CLASSES
from fusebench.encoders import ENCODERS
from fusebench.encoders.base import Backbone
from fusebench.encoders.pointnet2 import (
    MODALITY_CHANNELS,
    BackboneConfig,
    PointNet2Backbone,
    PointNet2Encoder,
    SetAbstraction,
    get_config,
    modality_inputs,
    preset_key,
    scene_points_problems,
    synthetic_scenes,
)
from fusebench.geometry3d import nms_3d, points_in_boxes
from fusebench.runtime.utils import value_checks

#: VoteNet sunrgbd_utils.type_mean_size, in SUNRGBD_CLASSES order: full sizes (dx, dy, dz) in metres
SUNRGBD_MEAN_SIZES = (
    (2.114256, 1.620300, 0.927272),  # bed
    (0.791118, 1.279516, 0.718182),  # table
    (0.923508, 1.867419, 0.845495),  # sofa
    (0.591958, 0.552978, 0.827272),  # chair
    (0.699104, 0.454178, 0.756250),  # toilet
    (0.695190, 1.346299, 0.736364),  # desk
    (0.528526, 1.002642, 1.172878),  # dresser
    (0.500618, 0.632163, 0.683424),  # night_stand
    (0.404671, 1.071108, 1.688889),  # bookshelf
    (0.765840, 1.398258, 0.472728),  # bathtub
)

NEAR_THRESHOLD, FAR_THRESHOLD = 0.3, 0.6
OBJECTNESS_WEIGHTS = (0.2, 0.8)


@dataclass(frozen=True)
class VoteNetConfig:
    backbone: str | BackboneConfig = "votenet"
    num_proposals: int = 256
    vote_radius: float = 0.3
    vote_nsample: int = 16
    proposal_mlp: tuple[int, ...] = (128, 128, 128)
    num_heading_bins: int = 12


CONFIGS = {
    "votenet": VoteNetConfig(),
    "tiny": VoteNetConfig(backbone="tiny", num_proposals=16, vote_nsample=8, proposal_mlp=(32, 32, 32)),
}


def angle_to_class(angle: Tensor, num_bins: int) -> tuple[Tensor, Tensor]:
    """Heading bin (centred at ``b * 2pi / NH``) and residual in ``[-pi/NH, pi/NH)``."""
    w = 2 * math.pi / num_bins
    shifted = torch.remainder(torch.remainder(angle, 2 * math.pi) + w / 2, 2 * math.pi)
    cls = torch.floor(shifted / w).long().clamp(max=num_bins - 1)
    return cls, shifted - (cls.to(angle.dtype) * w + w / 2)


def class_to_angle(cls: Tensor, residual: Tensor, num_bins: int) -> Tensor:
    """Inverse of :func:`angle_to_class`, wrapped to ``[-pi, pi)``."""
    a = cls.to(residual.dtype) * (2 * math.pi / num_bins) + residual
    return torch.remainder(a + math.pi, 2 * math.pi) - math.pi


def _conv_bn_relu(i: int, o: int) -> list[nn.Module]:
    return [nn.Conv1d(i, o, 1, bias=False), nn.BatchNorm1d(o), nn.ReLU(inplace=True)]


class VoteNetHead(nn.Module):
    """VoteNet's detection head on the backbone's seeds (module docstring): late-fusion of the branch
    seed features (``fuse``), voting, vote aggregation, proposals; the detection loss (:meth:`loss`)
    and the decoded, NMS-filtered boxes (:meth:`predict`)."""

    def __init__(self, modalities: Sequence[str], config: VoteNetConfig, fusion: str, num_features: int,
                 num_classes: int, mean_sizes: Tensor, nms_iou: float = 0.25, per_class_proposal: bool = True,
                 conf_thresh: float = 0.05, min_points_in_box: int = 5) -> None:
        super().__init__()
        self.register_buffer("mean_sizes", mean_sizes)
        self.cfg, self.fusion, self.num_classes = config, fusion, num_classes
        self.nms_iou, self.per_class_proposal, self.conf_thresh = nms_iou, per_class_proposal, conf_thresh
        self.min_points_in_box = min_points_in_box
        self.modalities = list(modalities)
        c, k = num_features, len(self.modalities)
        self.fuse = nn.Sequential(*_conv_bn_relu(k * c, c)) if fusion == "late" and k > 1 else nn.Identity()
        self.vote = nn.Sequential(*_conv_bn_relu(c, c), *_conv_bn_relu(c, c), nn.Conv1d(c, 3 + c, 1))
        self.aggregate = SetAbstraction(config.num_proposals, config.vote_radius, config.vote_nsample, c,
                                        config.proposal_mlp, use_xyz=True, normalize_xyz=True)
        p = config.proposal_mlp[-1]
        nh, ns, nc = config.num_heading_bins, num_classes, num_classes
        self.proposal = nn.Sequential(*_conv_bn_relu(p, p), *_conv_bn_relu(p, p),
                                      nn.Conv1d(p, 2 + 3 + 2 * nh + 4 * ns + nc, 1))
        #: the terms of the last loss, 0-dim tensors (detached; read only by whoever wants them)
        self.loss_terms: dict[str, Tensor] = {}

    # ---------------------------------------------------------------------------------------
    def forward(self, seeds: dict[str, Any], batch: Any = None) -> dict[str, Tensor]:
        seed_xyz, seed_feat, seed_inds = seeds["seed_xyz"], seeds["seed_features"], seeds["seed_inds"]
        if isinstance(seed_feat, dict):  # late fusion: one branch per modality
            seed_feat = self.fuse(torch.cat([seed_feat[m] for m in self.modalities], dim=1))
        v = self.vote(seed_feat)  # [B, 3 + C, S]
        vote_xyz = seed_xyz + rearrange(v[:, :3], "b c s -> b s c")
        vote_feat = seed_feat + v[:, 3:]
        vote_feat = vote_feat / vote_feat.norm(dim=1, keepdim=True).clamp(min=1e-12)
        agg_xyz, agg_feat, _ = self.aggregate(vote_xyz, vote_feat)  # FPS on the votes
        net = rearrange(self.proposal(agg_feat), "b c k -> b k c")
        nh, ns = self.cfg.num_heading_bins, self.num_classes
        i = 0

        def take(n: int) -> Tensor:
            nonlocal i
            out = net[..., i : i + n]
            i += n
            return out

        obj, ctr, hcls, hres = take(2), take(3), take(nh), take(nh)
        scls, sres = take(ns), rearrange(take(3 * ns), "b k (s c) -> b k s c", c=3)
        sem = take(self.num_classes)
        return {
            "seed_xyz": seed_xyz, "seed_inds": seed_inds, "vote_xyz": vote_xyz, "aggregated_xyz": agg_xyz,
            "objectness_logits": obj, "center": agg_xyz + ctr,
            "heading_logits": hcls, "heading_residuals_normalized": hres,
            "heading_residuals": hres * (math.pi / nh),
            "size_logits": scls, "size_residuals_normalized": sres,
            "size_residuals": sres * self.mean_sizes, "sem_logits": sem,
        }

    # ---------------------------------------------------------------------------------------
    def check_batch(self, batch: Any) -> Any:
        """The class labels of ``batch``'s targets checked (in ``[0, num_classes)``), on the host before the
        batch's copy to the device (the training loop's ``host`` hook), where the check reads no device;
        returns ``batch``. Inside the loop's steps :meth:`loss` leaves the check to this."""
        tgt = batch.get("target") if isinstance(batch, dict) else None
        if isinstance(tgt, (list, tuple)):
            for i, t in enumerate(tgt):
                if isinstance(t, dict) and "labels" in t:
                    lb = t["labels"]
                    self._check_labels(i, lb.long().reshape(-1) if isinstance(lb, Tensor) else
                                       torch.as_tensor(np.asarray(lb)).long().reshape(-1))
        return batch

    def _check_labels(self, i: int, lb: Tensor) -> None:
        if len(lb) and (int(lb.min()) < 0 or int(lb.max()) >= self.num_classes):
            raise ValueError(f"votenet: target {i} labels must be in [0, {self.num_classes}), got {lb.tolist()}")

    def _targets(self, batch: dict[str, Any], b: int, device: torch.device) -> tuple[Tensor, Tensor, Tensor]:
        """Padded ``boxes [B, G, 7]``, ``labels [B, G]``, ``valid [B, G]`` (G >= 1); the labels' bounds are
        checked here unless the caller checked them on the host (:meth:`check_batch`, the training loop)."""
        tgt = batch.get("target") if isinstance(batch, dict) else None
        if not isinstance(tgt, (list, tuple)) or len(tgt) != b:
            raise ValueError(f"votenet: batch['target'] must be a list of {b} dicts {{'boxes': [G, 7], 'labels': [G]}}")
        g = max([1] + [len(t["boxes"]) for t in tgt])
        boxes = torch.zeros(b, g, 7, device=device)
        boxes[..., 3:6] = 1.0
        labels = torch.zeros(b, g, dtype=torch.long, device=device)
        valid = torch.zeros(b, g, dtype=torch.bool, device=device)
        for i, t in enumerate(tgt):
            if not isinstance(t, dict) or "boxes" not in t or "labels" not in t:
                raise ValueError("votenet: each target must be a dict with 'boxes' [G, 7] and 'labels' [G]")
            bx = torch.as_tensor(np.asarray(t["boxes"], dtype=np.float32)).reshape(-1, 7) if not isinstance(
                t["boxes"], Tensor) else t["boxes"].float().reshape(-1, 7)
            lb = torch.as_tensor(np.asarray(t["labels"])).long().reshape(-1) if not isinstance(
                t["labels"], Tensor) else t["labels"].long().reshape(-1)
            if len(lb) != len(bx):
                raise ValueError(f"votenet: target {i} has {len(bx)} boxes but {len(lb)} labels")
            if value_checks():
                self._check_labels(i, lb)
            n = len(lb)
            boxes[i, :n], labels[i, :n], valid[i, :n] = bx.to(device), lb.to(device), True
        return boxes, labels, valid

    def loss(self, output: dict[str, Tensor], batch: dict[str, Any]) -> Tensor:
        """The detection loss (module docstring); its terms are kept in ``loss_terms``."""
        b = output["center"].shape[0]
        gt, lab, valid = self._targets(batch, b, output["center"].device)
        inf = torch.finfo(output["center"].dtype).max
        # vote loss (Eq. 1)
        inside = points_in_boxes(output["seed_xyz"].detach(), gt) & valid[:, None, :]  # [B, S, G]
        l1 = (output["vote_xyz"][:, :, None, :] - gt[:, None, :, :3]).abs().sum(-1)  # [B, S, G]
        vmin = torch.where(inside, l1, torch.full_like(l1, inf)).amin(-1)
        on_obj = inside.any(-1)
        vote_loss = torch.where(on_obj, vmin, torch.zeros_like(vmin)).sum() / (on_obj.sum() + 1e-6)
        # objectness targets from the distance of cluster centres to GT centres
        d = torch.cdist(output["aggregated_xyz"].detach(), gt[..., :3])
        d = torch.where(valid[:, None, :], d, torch.full_like(d, inf))
        dmin, assign = d.min(-1)  # [B, K]
        pos = (dmin < NEAR_THRESHOLD).float()
        obj_mask = ((dmin < NEAR_THRESHOLD) | (dmin > FAR_THRESHOLD)).float()
        # class-weighted CE, -w[y] log p_y, with the weight picked per element: no weight tensor copied from the
        # host in each step, and the weights in float32 whatever the autocast dtype
        w = torch.where(pos > 0, OBJECTNESS_WEIGHTS[1], OBJECTNESS_WEIGHTS[0])
        ce = F.cross_entropy(rearrange(output["objectness_logits"], "b k c -> b c k").float(), pos.long(),
                             reduction="none") * w
        obj_loss = (ce * obj_mask).sum() / (obj_mask.sum() + 1e-6)
        # centre: chamfer-like squared distances
        sq = ((output["center"][:, :, None, :] - gt[:, None, :, :3]) ** 2).sum(-1)  # [B, K, G]
        big = torch.full_like(sq, inf)
        d1 = torch.where(valid[:, None, :], sq, big).amin(-1)
        d2 = sq.amin(1)  # [B, G]
        c1 = torch.where(pos > 0, d1, torch.zeros_like(d1)).sum() / (pos.sum() + 1e-6)
        c2 = torch.where(valid, d2, torch.zeros_like(d2)).sum() / (valid.sum() + 1e-6)
        center_loss = c1 + c2
        # heading, size, semantics against the assigned (nearest) GT box, on positives
        agt = torch.gather(gt, 1, assign[..., None].expand(-1, -1, 7))  # [B, K, 7]
        alab = torch.gather(lab, 1, assign)
        nh = self.cfg.num_heading_bins
        hcls, hres = angle_to_class(agt[..., 6], nh)
        npos = pos.sum() + 1e-6

        def wmean(x: Tensor) -> Tensor:
            return (x * pos).sum() / npos

        hcls_loss = wmean(F.cross_entropy(rearrange(output["heading_logits"], "b k c -> b c k"), hcls, reduction="none"))
        hpred = torch.gather(output["heading_residuals_normalized"], 2, hcls[..., None])[..., 0]
        hres_loss = wmean(F.huber_loss(hpred, hres / (math.pi / nh), delta=1.0, reduction="none"))
        scls_loss = wmean(F.cross_entropy(rearrange(output["size_logits"], "b k c -> b c k"), alab, reduction="none"))
        mean = self.mean_sizes[alab]  # [B, K, 3]
        spred = torch.gather(output["size_residuals_normalized"], 2, alab[..., None, None].expand(-1, -1, 1, 3))[:, :, 0]
        sres_loss = wmean(F.huber_loss(spred, (agt[..., 3:6] - mean) / mean, delta=1.0, reduction="none").mean(-1))
        sem_loss = wmean(F.cross_entropy(rearrange(output["sem_logits"], "b k c -> b c k"), alab, reduction="none"))
        box_loss = center_loss + 0.1 * hcls_loss + hres_loss + 0.1 * scls_loss + sres_loss
        loss = 10.0 * (vote_loss + 0.5 * obj_loss + box_loss + 0.1 * sem_loss)
        self.loss_terms = {k: v.detach() for k, v in {
            "vote": vote_loss, "objectness": obj_loss, "center": center_loss, "heading_cls": hcls_loss,
            "heading_reg": hres_loss, "size_cls": scls_loss, "size_reg": sres_loss, "sem_cls": sem_loss,
            "positive_ratio": pos.mean(), "total": loss}.items()}
        return loss

    # ---------------------------------------------------------------------------------------
    _DECODED = ("center", "heading_logits", "heading_residuals", "size_logits", "size_residuals",
                "objectness_logits", "sem_logits")  # the network outputs decode reads

    @classmethod
    def _nonfinite_error(cls, output: dict[str, Tensor], finite: list[bool]) -> ValueError:
        """The error for the outputs of :attr:`_DECODED` (those in ``output``) whose ``finite`` flag is False."""
        keys = [k for k in cls._DECODED if k in output]
        bad = [f"'{k}' ({int((~torch.isfinite(output[k])).sum())} of {output[k].numel()} values)"
               for k, ok in zip(keys, finite) if not ok]
        return ValueError(f"votenet: NaN or Inf in the network output {', '.join(bad)}: the model diverged; "
                          "no boxes are decoded from it")

    @torch.no_grad()
    def decode(self, output: dict[str, Tensor]) -> dict[str, Tensor]:
        """Decoded ``boxes [B, K, 7]``, ``objectness [B, K]`` probability, ``sem_prob [B, K, NC]`` (finite
        outputs assumed: :meth:`predict` refuses the others)."""
        nh = self.cfg.num_heading_bins
        hcls = output["heading_logits"].argmax(-1)
        hres = torch.gather(output["heading_residuals"], 2, hcls[..., None])[..., 0]
        yaw = class_to_angle(hcls, hres, nh)
        scls = output["size_logits"].argmax(-1)
        sres = torch.gather(output["size_residuals"], 2, scls[..., None, None].expand(-1, -1, 1, 3))[:, :, 0]
        size = (self.mean_sizes[scls] + sres).clamp(min=0.0)  # a negative residual cannot flip a box
        boxes = torch.cat([output["center"], size, yaw[..., None]], dim=-1)
        return {"boxes": boxes, "objectness": output["objectness_logits"].softmax(-1)[..., 1],
                "sem_prob": output["sem_logits"].softmax(-1)}

    @torch.no_grad()
    def predict(self, output: dict[str, Tensor], batch: dict[str, Any] | None = None) -> list[dict[str, Tensor]]:
        """VoteNet's ``ap_helper.parse_predictions`` with its SUN RGB-D evaluation settings: proposals with fewer
        than ``min_points_in_box`` points of ``batch["modalities"]["points"]`` inside (``remove_empty_box``) are
        dropped, per-class NMS runs over the rest, then the objectness threshold and one box per class.

        Network outputs (:attr:`_DECODED`) with NaN or Inf raise one ValueError naming them: the model diverged.
        Decoded as they were, a NaN box had no point inside and was dropped by ``min_points_in_box`` without a
        word, a NaN logit won its ``argmax``, a -Inf size residual was clamped to a flat box, and the rest failed
        later in NMS or the metric without naming the cause. (The flags ride the one copy to the host.)"""
        dec = self.decode(output)
        finite = [torch.isfinite(output[k]).all() for k in self._DECODED if k in output]  # (a test's decode: none)
        finite = torch.stack(finite) if finite else torch.ones(0, dtype=torch.bool)
        inside = None  # [n, K]: the points of each scene inside each proposal, counted where the model ran
        if self.min_points_in_box > 0:
            if batch is None or "points" not in batch.get("modalities", {}):
                raise ValueError("votenet: predict needs batch['modalities']['points'] to drop the proposals with fewer "
                                 f"than min_points_in_box = {self.min_points_in_box} points inside (VoteNet's "
                                 "remove_empty_box); set min_points_in_box: 0 to keep every proposal")
            points = batch["modalities"]["points"][..., :3].detach().float()
            boxes_all = dec["boxes"].float().to(points.device)
            # one scene at a time ([N, K] membership; a batch at once would hold n x N x K x 3 floats), one copy back
            inside = torch.stack([points_in_boxes(points[i:i + 1], boxes_all[i:i + 1])[0].sum(0)
                                  for i in range(points.shape[0])])
        # one copy to the host (NMS runs there): the bytes of the boxes, scores, class probabilities, finite flags
        # and point counts concatenated, widest element first (each piece then starts aligned for its dtype), copied once,
        # split and viewed back as their dtypes and shapes: the values of one .cpu() each, bit for bit
        parts = [dec["boxes"], dec["objectness"], dec["sem_prob"], finite] + ([inside] if inside is not None else [])
        order = sorted(range(len(parts)), key=lambda j: -parts[j].element_size())
        dev = parts[0].device  # (the point counts were made where the points are: normally the same device)
        raw = [parts[j].detach().to(dev).contiguous().reshape(-1).view(torch.uint8) for j in order]
        pieces = torch.split(torch.cat(raw).cpu(), [r.numel() for r in raw])
        host = {j: piece.view(parts[j].dtype).reshape(parts[j].shape) for j, piece in zip(order, pieces)}
        if not bool(host[3].all()):
            raise self._nonfinite_error(output, host[3].tolist())
        inside = host.get(4)
        results = []
        for i, (boxes, obj, sem) in enumerate(zip(host[0], host[1], host[2])):
            cls = sem.argmax(-1)
            candidates = torch.arange(len(boxes))
            if inside is not None:
                candidates = torch.nonzero(inside[i] >= self.min_points_in_box).flatten()
            keep = candidates[nms_3d(boxes[candidates], obj[candidates], self.nms_iou, labels=cls[candidates])]
            boxes, obj, sem, cls = boxes[keep], obj[keep], sem[keep], cls[keep]
            confident = obj > self.conf_thresh  # VoteNet's parse_predictions: the threshold is on objectness
            if self.per_class_proposal:  # then every class of a kept proposal, however low its score
                k = len(keep)
                scores = rearrange(obj[:, None] * sem, "k c -> (k c)")
                labels = torch.arange(self.num_classes).repeat(k)
                boxes = boxes.repeat_interleave(self.num_classes, dim=0)
                m = confident.repeat_interleave(self.num_classes)
            else:
                scores, labels, m = obj, cls, confident
            results.append({"boxes": boxes[m], "scores": scores[m], "labels": labels[m]})
        return results


@ENCODERS.register("votenet")
class VoteNet(Backbone):
    """VoteNet's backbone (PointNet++ seeds); its detection head is VoteNetHead (module docstring).

    ``config``: "votenet" (paper) or "tiny" (tests); ``num_classes``, ``mean_sizes``, ``nms_iou``,
    ``per_class_proposal``, ``conf_thresh`` and ``min_points_in_box`` (VoteNet's ``remove_empty_box``: 5; 0 keeps
    every proposal) configure the head."""

    input_kinds = ("points", "point_features")  # the modality kinds it reads (encoders/base.py)
    large_model = True  # convolutions on images / point sets: intra-op threads pay (engine/threads.py)

    default_task = "detection"
    default_num_classes_is_the_heads = True  # its head's count (its mean box sizes are per class), checked at load

    @classmethod
    def config_problems(cls, config: Mapping[str, Any]) -> list[str]:
        """The base checks, and ``config`` (the preset) one of :data:`CONFIGS` by name (not a mapping)."""
        out, preset = super().config_problems(config), config.get("config", "votenet")
        if not isinstance(preset, str) or preset not in CONFIGS:
            out.append(f"encoder.config.config = {preset!r}: expected a VoteNet preset's name, one of {sorted(CONFIGS)}")
        return out

    @classmethod
    def data_problems(cls, config: Mapping[str, Any], data: Mapping[str, Any]) -> list[str]:
        """The base checks (the class count; another count than SUN RGB-D's 10 needs ``mean_sizes``, the per-class
        box sizes, which the advice and a count the dataset agrees with both say), and the points of a scene against
        the centres the first set-abstraction layer of the preset's backbone samples
        (:func:`.pointnet2.scene_points_problems`)."""
        out, preset = super().data_problems(config, data), config.get("config", "votenet")
        classes, builtin = data.get("num_classes"), len(SUNRGBD_MEAN_SIZES)  # the built-in sizes' class count
        n = config.get("num_classes", builtin)
        if out and classes is not None and classes.value != builtin and config.get("mean_sizes") is None:
            out[-1] += (f", with encoder.config.mean_sizes: one [l, w, h] per class ({classes.value} rows; the built-in "
                        f"mean sizes are SUN RGB-D's {builtin} classes)")
        elif (not out and isinstance(n, int) and not isinstance(n, bool) and n != builtin
              and config.get("mean_sizes") is None):
            out.append(f"encoder.config.num_classes = {n} needs encoder.config.mean_sizes: one [l, w, h] per class "
                       f"({n} rows; the built-in mean sizes are SUN RGB-D's {builtin} classes)")
        if isinstance(preset, str) and preset in CONFIGS:
            backbones = {name: get_config(c.backbone) for name, c in CONFIGS.items()}
            out += scene_points_problems(preset_key(config, "votenet"), backbones[preset], backbones, data)
        return out

    def __init__(self, modalities: Sequence[str] = ("points", "color", "height"), config: str | VoteNetConfig = "votenet",
                 fusion: str = "late", num_classes: int = 10, mean_sizes: Sequence[Sequence[float]] | None = None,
                 nms_iou: float = 0.25, per_class_proposal: bool = True, conf_thresh: float = 0.05,
                 min_points_in_box: int = 5) -> None:
        super().__init__()
        if isinstance(config, str):
            if config not in CONFIGS:
                raise ValueError(f"votenet: unknown config {config!r}; expected one of {sorted(CONFIGS)}")
            config = CONFIGS[config]
        if fusion not in ("late", "early"):
            raise ValueError(f"votenet: fusion must be 'late' or 'early', got {fusion!r}")
        modalities = list(modalities)
        if "points" not in modalities:
            raise ValueError(f"votenet: modalities must include 'points', got {modalities}")
        if mean_sizes is None:
            if num_classes != len(SUNRGBD_MEAN_SIZES):
                raise ValueError(f"votenet: mean_sizes [num_classes, 3] is required for num_classes={num_classes} != 10")
            mean_sizes = SUNRGBD_MEAN_SIZES
        ms = torch.as_tensor(np.asarray(mean_sizes, dtype=np.float32))
        if ms.shape != (num_classes, 3) or bool((ms <= 0).any()):
            raise ValueError(f"votenet: mean_sizes must be positive with shape [{num_classes}, 3], got {tuple(ms.shape)}")
        self.cfg, self.fusion, self.num_classes = config, fusion, num_classes
        self.modalities = modalities
        #: what the detection head is built with besides the class count (task_head)
        if isinstance(min_points_in_box, bool) or not isinstance(min_points_in_box, int) or min_points_in_box < 0:
            raise ValueError(f"votenet: min_points_in_box must be an integer >= 0, got {min_points_in_box!r}")
        self.head_options = dict(mean_sizes=ms, nms_iou=nms_iou, per_class_proposal=per_class_proposal,
                                 conf_thresh=conf_thresh, min_points_in_box=min_points_in_box)
        bcfg = get_config(config.backbone)
        if fusion == "late":
            self.encoder: nn.Module = PointNet2Encoder(modalities, bcfg)
        else:
            self.encoder = PointNet2Backbone(sum(MODALITY_CHANNELS[m] for m in modalities), bcfg, use_xyz=True)
        self.num_features = bcfg.fp_mlps[-1][-1]

    def task_head(self, task: Any) -> nn.Module | None:
        """Detection: :class:`VoteNetHead` (fusion of the branches, voting, proposals, loss, decoding)."""
        if task.id != "detection":
            raise NotImplementedError(f"votenet has a detection head only, not one for task {task.id!r}")
        opts = self.head_options
        return VoteNetHead(self.modalities, self.cfg, self.fusion, self.num_features, task.classes(self),
                           opts["mean_sizes"].clone(), opts["nms_iou"], opts["per_class_proposal"], opts["conf_thresh"],
                           opts["min_points_in_box"])

    def features(self, batch: dict[str, Any]) -> dict[str, Any]:
        """The seeds: ``seed_xyz [n, S, 3]``, ``seed_inds [n, S]`` and ``seed_features`` (late fusion: one
        ``[n, C, S]`` per modality, fused by the head; early fusion: one ``[n, C, S]``)."""
        if self.fusion == "late":
            return self.encoder(batch)
        xyz, feats = modality_inputs(batch, self.modalities)
        extra = [feats[m] for m in self.modalities if m != "points"]
        return self.encoder(xyz, torch.cat(extra, dim=1) if extra else None)

    def embed(self, batch: dict[str, Any]) -> Tensor:
        if self.fusion != "late":
            raise ValueError("votenet: per-modality embeddings need fusion='late' (one branch per modality)")
        return self.encoder.embed(batch)

    @classmethod
    def benchmark_config(cls) -> dict[str, Any]:
        """The paper's SUN RGB-D network (20k points, 256 proposals), late fusion of 3 branches."""
        return dict(modalities=["points", "color", "height"], config="votenet", fusion="late")

    @classmethod
    def example_batch(cls, config: dict[str, Any] | None = None, batch_size: int = 2, seed: int = 0,
                      num_points: int | None = None) -> dict[str, Any]:
        """Synthetic collated scenes with box targets (see :func:`pointnet2.synthetic_scenes`)."""
        config = dict(config or cls.benchmark_config())
        vcfg = config.get("config", "votenet")
        vcfg = CONFIGS[vcfg] if isinstance(vcfg, str) else vcfg
        n = num_points or get_config(vcfg.backbone).num_points
        return synthetic_scenes(batch_size, n, seed, list(config.get("modalities") or ("points", "color", "height")),
                                num_classes=int(config.get("num_classes", 10)))


__all__ = ["CONFIGS", "SUNRGBD_CLASSES", "SUNRGBD_MEAN_SIZES", "VoteNet", "VoteNetConfig", "VoteNetHead",
           "angle_to_class", "class_to_angle"]
