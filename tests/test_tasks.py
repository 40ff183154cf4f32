"""Downstream tasks gather predictions batch by batch and score them in their metric form."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from fusebench import tasks
from fusebench.registry import UnknownNameError


def test_flat_task_scores_all_batches_together() -> None:
    t = tasks.for_dataset(SimpleNamespace(task="classification", num_classes=3, id="toy"))
    t.add(torch.tensor([0, 1, 2]), torch.tensor([0, 1, 1]))
    t.add(torch.tensor([2]), torch.tensor([2]))
    # by hand: 3 of 4 right; the macro-F1 of classes {0: 1, 1: 2/3, 2: 2/3}
    out = t.score(["acc", "mf1"])
    assert out["acc"] == pytest.approx(0.75) and out["mf1"] == pytest.approx((1 + 2 / 3 + 2 / 3) / 3)


def test_segmentation_task_ignores_unlabelled_pixels() -> None:
    t = tasks.for_dataset(SimpleNamespace(task="segmentation", num_classes=2, id="toy"))
    t.add(torch.tensor([[[0, 1], [1, 1]]]), torch.tensor([[[0, 1], [-1, 0]]]))
    # labelled pixels: (0,0) right, (1,1) right, (0,1) wrong -> pixel accuracy 2/3
    assert t.score(["pixel_acc"])["pixel_acc"] == pytest.approx(2 / 3)


def test_detection_task_needs_the_class_count_and_unknown_tasks_are_named() -> None:
    t = tasks.for_dataset(SimpleNamespace(task="detection", num_classes=None, id="toy"))
    with pytest.raises(ValueError, match="toy: a detection dataset must declare num_classes"):
        t.score(["map_0.25"])
    with pytest.raises(UnknownNameError, match=r"unknown task 'clustering'.*Valid task ids: classification, "
                                               r"detection, regression, segmentation"):
        tasks.for_dataset(SimpleNamespace(task="clustering"))
