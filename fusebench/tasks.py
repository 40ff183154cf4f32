"""Downstream tasks (``fusebench.tasks``): the head, loss and predictions of a dataset's task, and how
its predictions are gathered and scored.

A dataset adapter names its task (``MultimodalDataset.task``); :func:`for_dataset` gives the
:class:`Task` of that family for the dataset (its id and class count). The task

* builds the downstream head on a backbone (:meth:`Task.build_head`): the backbone's own head for the
  task where it declares one (``backbone.task_head(task)``: ESANet's decoder, VoteNet's voting and
  proposal module, ...), else the task's default head (classification / regression: a linear layer
  on the concatenated per-modality embeddings);
* owns the supervised loss (:meth:`Task.loss`) and the predictions in its metric form
  (:meth:`Task.predict`); a head that defines ``loss`` / ``predict`` itself (VoteNet's) is asked
  instead;
* turns the per-batch predictions and the batch targets into the arrays its metrics take
  (:meth:`Task.add`, :meth:`Task.score`), calling each metric in the form that task family uses
  (see :mod:`fusebench.metrics`):

  * ``classification`` / ``regression``: flat ``(y_pred, y_true)`` arrays;
  * ``segmentation``: flat per-pixel arrays, ``num_classes`` of the dataset, ``ignore_index=-1``;
  * ``detection``: per-scene lists of ``{"boxes", "scores", "labels"}`` and ground truths, with the
    dataset's ``num_classes``.

Precision: under a mixed-precision policy (autocast) a head's outputs are bfloat16 / float16. The
task losses widen them to float32 first (exact; a float32 / float64 output is used as is, so results
in full precision are unchanged), the regression target is never rounded to the output's dtype, and
gathered predictions are widened to float32 as they are added, so a metric never reduces in half
precision (the metrics themselves reduce in float64, :mod:`fusebench.metrics.arrays`).

Tasks are registered like every other component (lowercase ids, entry-point group
``fusebench.tasks``), so a new task family is a new entry, not an if-branch in the runner.
:class:`fusebench.components.model.TaskModel` puts a backbone, its head and the task together.
"""

from __future__ import annotations

import inspect
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor, nn

from fusebench.metrics.arrays import to_numpy, widen
from fusebench.registry import Registry
from fusebench.runtime.gather import HostGather

TASKS = Registry("task", entry_point_group="fusebench.tasks")


class ConcatLinearHead(nn.Linear):
    """The default head of classification and regression: a linear layer on the concatenated
    per-modality embeddings, ``[k, n, f] -> [n, out]`` (``[n]`` with ``squeeze=True``)."""

    def __init__(self, in_features: int, out_features: int, squeeze: bool = False) -> None:
        super().__init__(in_features, out_features)
        self.squeeze = squeeze

    def forward(self, features: Tensor, batch: Any = None) -> Tensor:
        out = super().forward(rearrange(features, "k n f -> n (k f)"))
        return out.squeeze(-1) if self.squeeze else out


class Task:
    """One task of a dataset: its head, loss and predictions; gathers predictions batch by batch
    (:meth:`add`) and scores them (:meth:`score`).

    ``Task(ds)`` reads the dataset's ``id`` and ``num_classes``; without a dataset (tests, benches)
    ``Task(num_classes=...)``. Only those two facts are kept, so a model holding its task stays cheap
    to copy (the EMA teacher deep-copies the model)."""

    id: ClassVar[str] = ""
    #: its targets are class ids: a dataset of this task must declare ``num_classes`` (datasets/conformance.py)
    has_classes: ClassVar[bool] = True
    #: the spec's encoder is built with the dataset's class count (its ``num_classes`` option, where it takes one
    #: and ``encoder.config`` does not set it; ``fusebench.cells.standard.encoder_config``). False by default: a
    #: task whose encoder's class count comes with other settings (a detector's per-class mean box sizes) or that
    #: has no classes
    encoder_takes_classes: ClassVar[bool] = False

    @classmethod
    def gives_classes(cls, encoder: Any) -> bool:
        """Whether the encoder class ``encoder`` is built with the dataset's class count under this task, where
        ``encoder.config`` does not set ``num_classes``: :attr:`encoder_takes_classes`, and its constructor takes
        ``num_classes`` (or ``**kwargs``). The cell builds it so (``fusebench.cells.standard.encoder_config``), and
        the spec loader checks it so (``fusebench.components.spec_check.encoder_data_problems``)."""
        if not cls.encoder_takes_classes:
            return False
        params = inspect.signature(encoder).parameters
        return "num_classes" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())

    @classmethod
    def target_problem(cls, target: Any, num_classes: int | None) -> str | None:
        """What is wrong with one sample's ``target`` for this task (None: nothing), for the dataset conformance
        suite (``datasets/conformance.py``, check ``schema``); ``num_classes``: the dataset's. The base class
        checks nothing (a plugin task says what its targets are by overriding this)."""
        return None

    # -- the metrics ----------------------------------------------------------------------------
    @classmethod
    def metric_families(cls, added: tuple[str, ...] = ()) -> tuple[str, ...]:
        """The metric families (``task`` of :func:`fusebench.metrics.metadata`) this task scores: its own,
        plus those the downstream protocol's scoring ``added`` (its
        :attr:`~fusebench.components.protocols.Protocol.metric_families`, e.g. ``clustering``)."""
        return (cls.id, *(f for f in added if f != cls.id))

    @classmethod
    def describe_metrics(cls, metric_ids: list[str], added: tuple[str, ...] = ()) -> list[tuple[str, str, str]]:
        """``(id, unit, direction)`` of each metric the task reports, with the metric families the protocol
        ``added`` (unit ``fraction`` or ``raw``, direction ``higher`` or ``lower``), read from the metric metadata
        without importing the metric code. A metric of another family (e.g. ``miou`` for a regression task) or an
        unknown id raises ``ValueError`` naming it, the task and the family it belongs to."""
        from fusebench import metrics as M

        families = cls.metric_families(added)
        out = []
        for mid in metric_ids:
            try:
                meta = M.metadata(mid)
            except KeyError as e:
                raise ValueError(str(e).strip("'\"")) from None
            if meta["task"] not in families:
                raise ValueError(f"metric {mid!r} scores {meta['task']} and task {cls.id!r} reports "
                                 f"{' or '.join(families)} metrics")
            out.append((mid, meta["unit"], meta["direction"]))
        return out

    def __init__(self, ds: Any = None, *, num_classes: int | None = None, dataset_id: str | None = None) -> None:
        self.dataset_id = getattr(ds, "id", dataset_id)
        self.num_classes = getattr(ds, "num_classes", num_classes)
        self._gathered = HostGather()  # (predictions, targets) of each batch, copied to the host in blocks

    # -- the head -------------------------------------------------------------------------------
    def build_head(self, backbone: nn.Module) -> nn.Module:
        """The downstream head on ``backbone``: its own head for this task where it declares one
        (``backbone.task_head(self)``), else :meth:`default_head`. Built right after the backbone, it
        draws its initial weights from the same point of the RNG stream as an encoder that built its
        head in its own constructor."""
        factory = getattr(backbone, "task_head", None)
        head = factory(self) if factory is not None else None
        if head is None:
            head = self.default_head(backbone)
        if head is None:
            raise ValueError(f"encoder {type(backbone).__name__} declares no head for task {self.id!r}, and the "
                             f"{self.id} task has no default head (declare one with task_head(task))")
        return head

    def default_head(self, backbone: nn.Module) -> nn.Module | None:
        """The task's own head for a backbone that declares none (None: the task has none)."""
        return None

    def classes(self, backbone: nn.Module | None = None) -> int:
        """The number of classes a head predicts: the dataset's, else the backbone's ``num_classes``
        option; the two must agree where both are given."""
        own, declared = self.num_classes, getattr(backbone, "num_classes", None)
        if own and declared and int(own) != int(declared):
            raise ValueError(f"{self.dataset_id or self.id}: the dataset has {own} classes but the encoder "
                             f"{type(backbone).__name__} was built for num_classes={declared}")
        n = own or declared
        if not n:
            raise ValueError(f"task {self.id!r}: the number of classes is unknown (the dataset declares no "
                             "num_classes and the encoder has none)")
        return int(n)

    # -- loss and predictions -------------------------------------------------------------------
    def loss(self, output: Any, batch: dict[str, Any], head: nn.Module | None = None) -> Tensor:
        """The supervised loss of ``output`` against ``batch["target"]`` (``head.loss`` where it has one)."""
        own = getattr(head, "loss", None)
        if own is not None:
            return own(output, batch)
        return self.task_loss(output, batch)

    def predict(self, output: Any, batch: dict[str, Any] | None = None, head: nn.Module | None = None) -> Any:
        """Predictions in the form the task's metrics take (``head.predict`` where it has one)."""
        own = getattr(head, "predict", None)
        if own is not None:
            return own(output, batch)
        return self.predictions(output, batch)

    def task_loss(self, output: Any, batch: dict[str, Any]) -> Tensor:  # pragma: no cover - abstract
        raise NotImplementedError(f"task {self.id!r} has no loss of its own: its head must define loss()")

    def predictions(self, output: Any, batch: dict[str, Any] | None) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError(f"task {self.id!r} has no predictions of its own: its head must define predict()")

    # -- gathering and scoring ------------------------------------------------------------------
    def add(self, pred: Any, target: Any) -> None:
        """Keep one batch of predictions and targets (tensors, or lists / dicts of them: detached, half precision
        widened to float32), on the host after the next block's copy: the evaluation loop never waits for the
        device at a batch (:class:`fusebench.runtime.gather.HostGather`)."""
        self._gathered.add((_detached_wide(pred), _detached_wide(target)))

    @property
    def preds(self) -> list[Any]:
        """The predictions added so far, on the host: one entry per batch."""
        return [p for p, _ in self._gathered.result()]

    @property
    def targets(self) -> list[Any]:
        """The targets added so far, on the host: one entry per batch."""
        return [t for _, t in self._gathered.result()]

    def score(self, metric_ids: list[str]) -> dict[str, float]:  # pragma: no cover - abstract
        raise NotImplementedError


class FlatTask(Task):
    """One value (class id or score) per sample."""

    def score(self, metric_ids: list[str]) -> dict[str, float]:
        from fusebench import metrics as M

        yp, yt = torch.cat(self.preds).reshape(-1), torch.cat(self.targets).reshape(-1)
        return {mid: float(M.get(mid)(to_numpy(yp), to_numpy(yt))) for mid in metric_ids}


@TASKS.register("classification")
class ClassificationTask(FlatTask):
    """Class logits ``[n, C]``; cross entropy against class ids ``[n]``; predictions: argmax."""

    id: ClassVar[str] = "classification"
    encoder_takes_classes: ClassVar[bool] = True

    @classmethod
    def target_problem(cls, target: Any, num_classes: int | None) -> str | None:
        if not isinstance(target, torch.Tensor) or target.dtype != torch.int64 or target.dim() != 0:
            return f"classification target must be a long scalar tensor, got {_desc(target)}"
        if num_classes is not None and not 0 <= int(target) < num_classes:
            return f"class {int(target)} outside 0..{num_classes - 1}"
        return None

    def default_head(self, backbone: nn.Module) -> nn.Module:
        return ConcatLinearHead(backbone.num_features * len(backbone.modalities), self.classes(backbone))

    def task_loss(self, output: Tensor, batch: dict[str, Any]) -> Tensor:
        target = torch.as_tensor(batch["target"], device=output.device)
        if target.dim() != 1 or target.shape[0] != output.shape[0]:
            raise ValueError(f"classification: target must be [n] class ids, got shape {tuple(target.shape)} "
                             f"for {output.shape[0]} samples")
        return F.cross_entropy(widen(output), target.long())  # float32 for half-precision logits

    def predictions(self, output: Tensor, batch: dict[str, Any] | None) -> Tensor:
        return output.argmax(dim=-1)


@TASKS.register("regression")
class RegressionTask(FlatTask):
    """One score per sample ``[n]``; L1 loss (MMSA's default for sentiment regression)."""

    id: ClassVar[str] = "regression"
    has_classes: ClassVar[bool] = False

    @classmethod
    def target_problem(cls, target: Any, num_classes: int | None) -> str | None:
        if not isinstance(target, torch.Tensor) or not target.is_floating_point() or target.dim() != 0:
            return f"regression target must be a float scalar tensor, got {_desc(target)}"
        if not torch.isfinite(target):
            return "regression target is not finite"
        return None

    def default_head(self, backbone: nn.Module) -> nn.Module:
        return ConcatLinearHead(backbone.num_features * len(backbone.modalities), 1, squeeze=True)

    def task_loss(self, output: Tensor, batch: dict[str, Any]) -> Tensor:
        output = widen(output)  # half precision -> float32; the target is cast to that, never to bf16
        target = torch.as_tensor(batch["target"], device=output.device).to(output.dtype).reshape(-1)
        if target.shape != output.shape:
            raise ValueError(f"regression: target must be [n] = {tuple(output.shape)} scores, "
                             f"got shape {tuple(torch.as_tensor(batch['target']).shape)}")
        return F.l1_loss(output, target)

    def predictions(self, output: Tensor, batch: dict[str, Any] | None) -> Tensor:
        return widen(output.detach()).reshape(-1)


@TASKS.register("segmentation")
class SegmentationTask(Task):
    """Logits ``[n, C, H, W]``; one class id per pixel, ``-1`` pixels are unlabelled. Logits are
    upsampled bilinearly (``align_corners=False``) to the target's resolution where it differs, for
    the loss and the predicted label maps."""

    id: ClassVar[str] = "segmentation"
    encoder_takes_classes: ClassVar[bool] = True  # the decoder's classes (ESANet)

    @classmethod
    def target_problem(cls, target: Any, num_classes: int | None) -> str | None:
        if not isinstance(target, torch.Tensor) or target.dtype != torch.int64 or target.dim() != 2:
            return f"segmentation target must be a LongTensor [H, W], got {_desc(target)}"
        if num_classes is not None and target.numel() and (target.min() < -1 or target.max() >= num_classes):
            return f"segmentation labels in [{target.min()}, {target.max()}], expected -1..{num_classes - 1}"
        return None

    def task_loss(self, output: Tensor, batch: dict[str, Any]) -> Tensor:
        target = torch.as_tensor(batch["target"], device=output.device)
        if target.dim() != 3 or target.shape[0] != output.shape[0]:
            raise ValueError(f"segmentation: target must be [n, H, W] label maps (-1 = void), got shape "
                             f"{tuple(target.shape)} for logits {tuple(output.shape)}")
        output = widen(output)  # upsample and score half-precision logits in float32
        if output.shape[-2:] != target.shape[-2:]:
            output = F.interpolate(output, size=target.shape[-2:], mode="bilinear", align_corners=False)
        return F.cross_entropy(output, target.long(), ignore_index=-1)

    def predictions(self, output: Tensor, batch: dict[str, Any] | None) -> Tensor:
        """Label maps ``[n, H', W']`` at the target's resolution when a target is given (half-precision
        logits are upsampled in float32)."""
        output = widen(output)
        if batch is not None and isinstance(batch.get("target"), Tensor) and batch["target"].dim() == 3 \
                and output.shape[-2:] != batch["target"].shape[-2:]:
            output = F.interpolate(output, size=batch["target"].shape[-2:], mode="bilinear", align_corners=False)
        return output.argmax(dim=1)

    def score(self, metric_ids: list[str]) -> dict[str, float]:
        from fusebench import metrics as M

        yp = torch.cat([p.reshape(-1) for p in self.preds])
        yt = torch.cat([t.reshape(-1) for t in self.targets])
        return {mid: float(M.get(mid)(to_numpy(yp), to_numpy(yt), num_classes=self.num_classes, ignore_index=-1))
                for mid in metric_ids}


@TASKS.register("detection")
class DetectionTask(Task):
    """A list of detections per scene against a list of ground-truth boxes per scene. The loss and
    the decoding of a detector's output belong to its head (VoteNet's: ``loss`` / ``predict``)."""

    id: ClassVar[str] = "detection"
    #: VoteNet's class count comes with its per-class mean box sizes (``encoder.config`` sets both)
    encoder_takes_classes: ClassVar[bool] = False

    @classmethod
    def target_problem(cls, target: Any, num_classes: int | None) -> str | None:
        if not isinstance(target, dict) or not {"boxes", "labels"} <= set(target):
            return f"detection target must be a dict with boxes and labels, got {_desc(target)}"
        b, lab = target["boxes"], target["labels"]
        if not isinstance(b, torch.Tensor) or b.dtype != torch.float32 or b.dim() != 2 or b.shape[1] != 7:
            return f"boxes must be float32 [G, 7], got {_desc(b)}"
        if not isinstance(lab, torch.Tensor) or lab.dtype != torch.int64 or tuple(lab.shape) != (b.shape[0],):
            return f"labels must be int64 [G] with G = {b.shape[0]}, got {_desc(lab)}"
        if num_classes is not None and lab.numel() and (lab.min() < 0 or lab.max() >= num_classes):
            return f"detection labels outside 0..{num_classes - 1}"
        if b.numel() and (b[:, 3:6] <= 0).any():
            return "box sizes (dx, dy, dz) must be positive"
        return None

    @property
    def preds(self) -> list[dict[str, Tensor]]:
        """The detections added so far, one dict per scene (the batches' lists joined), on the host."""
        return [d for p, _ in self._gathered.result() for d in p]

    @property
    def targets(self) -> list[dict[str, Tensor]]:
        """The ground truths added so far, one dict per scene, on the host."""
        return [t for _, ts in self._gathered.result() for t in ts]

    def score(self, metric_ids: list[str]) -> dict[str, float]:
        from fusebench import metrics as M

        if not self.num_classes:
            raise ValueError(f"{self.dataset_id}: a detection dataset must declare num_classes")
        preds, targets = self.preds, self.targets
        return {mid: float(M.get(mid)(preds, targets, num_classes=self.num_classes)) for mid in metric_ids}


def _detached_wide(tree: Any) -> Any:
    """``tree`` (a tensor, or lists / tuples / dicts of tensors) detached, half precision widened to float32."""
    if isinstance(tree, Tensor):
        return widen(tree.detach())
    if isinstance(tree, dict):
        return {k: _detached_wide(v) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return [_detached_wide(v) for v in tree]
    return tree


def _desc(t: Any) -> str:
    return f"{t.dtype} {tuple(t.shape)}" if isinstance(t, torch.Tensor) else type(t).__name__


def for_dataset(ds: Any) -> Task:
    """A fresh :class:`Task` for ``ds`` (its ``task`` id; an unknown id lists the valid ones)."""
    return TASKS.get(ds.task)(ds)


def create(task_id: str, num_classes: int | None = None) -> Task:
    """A :class:`Task` of family ``task_id`` without a dataset (``num_classes`` where it has classes)."""
    return TASKS.get(task_id)(num_classes=num_classes)


__all__ = ["TASKS", "ClassificationTask", "ConcatLinearHead", "DetectionTask", "FlatTask", "RegressionTask",
           "SegmentationTask", "Task", "create", "for_dataset"]
