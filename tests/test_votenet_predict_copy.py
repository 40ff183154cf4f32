"""VoteNet's ``predict`` copies what NMS needs to the host in one copy (issue 33): the decoded boxes, objectness,
class probabilities and point counts were four ``.cpu()`` copies per batch (each a wait for the device)."""

from __future__ import annotations

import traceback

import pytest
import torch
from torch.overrides import TorchFunctionMode

from fusebench.components.model import for_backbone
from fusebench.encoders import votenet

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_votenet_predict_copies_to_the_host_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The decoded boxes, scores, class probabilities and point counts reach the host in one copy (were four),
    each with its dtype and values bit for bit: what NMS receives is the decoded proposals themselves."""
    g = torch.Generator().manual_seed(4)
    b, k = 2, 12
    center = torch.randn(b, k, 3, generator=g, dtype=torch.float64)
    decoded = {"boxes": torch.cat([center, torch.rand(b, k, 3, generator=g, dtype=torch.float64) + 0.5,
                                   torch.rand(b, k, 1, generator=g, dtype=torch.float64)], -1),
               "objectness": torch.rand(b, k, generator=g).to(torch.float16),
               "sem_prob": torch.rand(b, k, 10, generator=g).softmax(-1).to(torch.bfloat16)}
    points = torch.cat([center.float().repeat_interleave(6, 1) + 0.01 * torch.randn(b, 6 * k, 3, generator=g),
                        torch.randn(b, 40, 3, generator=g)], 1)
    seen = []
    real_nms = votenet.nms_3d

    def nms(boxes, scores, iou, labels=None):
        seen.append((boxes, scores))
        return real_nms(boxes, scores, iou, labels=labels)

    monkeypatch.setattr(votenet, "nms_3d", nms)

    class Copies(TorchFunctionMode):
        n = 0

        def __torch_function__(self, func, types, args=(), kwargs=None):
            if getattr(func, "__name__", "") == "cpu" and traceback.extract_stack()[-2].name == "predict":
                Copies.n += 1  # predict's own copies (NMS then works on host tensors)
            return func(*args, **(kwargs or {}))

    for min_points in (5, 0):
        head = for_backbone(votenet.VoteNet(config="tiny", min_points_in_box=min_points)).head
        head.decode = lambda output: decoded
        seen.clear()
        Copies.n = 0
        with Copies():
            preds = head.predict({}, {"modalities": {"points": points}})
        assert Copies.n == 1 and len(preds) == b
        inside = [votenet.points_in_boxes(points[i:i + 1], decoded["boxes"][i:i + 1].float())[0].sum(0)
                  for i in range(b)]
        for i, (boxes, scores) in enumerate(seen):
            cand = torch.nonzero(inside[i] >= min_points).flatten() if min_points else torch.arange(k)
            assert boxes.dtype == torch.float64 and scores.dtype == torch.float16
            assert torch.equal(boxes, decoded["boxes"][i][cand]) and torch.equal(scores, decoded["objectness"][i][cand])
        assert len(seen) == b
