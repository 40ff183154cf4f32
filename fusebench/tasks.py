"""Downstream tasks (``fusebench.tasks``): how a dataset's predictions are gathered and scored.

A dataset adapter names its task (``MultimodalDataset.task``); the task turns the model's per-batch
predictions and the batch targets into the arrays its metrics take, and calls each metric in the
form that task family uses (see :mod:`fusebench.metrics`):

* ``classification`` / ``regression``: flat ``(y_pred, y_true)`` arrays;
* ``segmentation``: flat per-pixel arrays, ``num_classes`` of the dataset, ``ignore_index=-1``;
* ``detection``: per-scene lists of ``{"boxes", "scores", "labels"}`` and ground truths, with the
  dataset's ``num_classes``.

Tasks are registered like every other component (lowercase ids, entry-point group
``fusebench.tasks``), so a new task family is a new entry, not an if-branch in the runner.
"""

from __future__ import annotations

from typing import Any

from fusebench.registry import Registry

TASKS = Registry("task", entry_point_group="fusebench.tasks")


class Task:
    """Gathers predictions batch by batch (:meth:`add`) and scores them (:meth:`score`)."""

    def __init__(self, ds: Any) -> None:
        self.ds = ds
        self.preds: list[Any] = []
        self.targets: list[Any] = []

    def add(self, pred: Any, target: Any) -> None:
        self.preds.append(pred.detach().cpu())
        self.targets.append(target.detach().cpu())

    def score(self, metric_ids: list[str]) -> dict[str, float]:  # pragma: no cover - abstract
        raise NotImplementedError


@TASKS.register("classification")
@TASKS.register("regression")
class FlatTask(Task):
    """One value (class id or score) per sample."""

    def score(self, metric_ids: list[str]) -> dict[str, float]:
        import torch

        from fusebench import metrics as M

        yp, yt = torch.cat(self.preds).reshape(-1), torch.cat(self.targets).reshape(-1)
        return {mid: float(M.get(mid)(yp.numpy(), yt.numpy())) for mid in metric_ids}


@TASKS.register("segmentation")
class SegmentationTask(Task):
    """One class id per pixel; ``-1`` pixels are unlabelled."""

    def score(self, metric_ids: list[str]) -> dict[str, float]:
        import torch

        from fusebench import metrics as M

        yp = torch.cat([p.reshape(-1) for p in self.preds])
        yt = torch.cat([t.reshape(-1) for t in self.targets])
        return {mid: float(M.get(mid)(yp.numpy(), yt.numpy(), num_classes=self.ds.num_classes, ignore_index=-1))
                for mid in metric_ids}


@TASKS.register("detection")
class DetectionTask(Task):
    """A list of detections per scene against a list of ground-truth boxes per scene."""

    def add(self, pred: Any, target: Any) -> None:
        self.preds.extend({k: v.detach().cpu() for k, v in d.items()} for d in pred)
        self.targets.extend({k: v.detach().cpu() for k, v in t.items()} for t in target)

    def score(self, metric_ids: list[str]) -> dict[str, float]:
        from fusebench import metrics as M

        if not self.ds.num_classes:
            raise ValueError(f"{self.ds.id}: a detection dataset must declare num_classes")
        return {mid: float(M.get(mid)(self.preds, self.targets, num_classes=self.ds.num_classes))
                for mid in metric_ids}


def for_dataset(ds: Any) -> Task:
    """A fresh :class:`Task` for ``ds`` (its ``task`` id; an unknown id lists the valid ones)."""
    return TASKS.get(ds.task)(ds)


__all__ = ["TASKS", "DetectionTask", "FlatTask", "SegmentationTask", "Task", "for_dataset"]
