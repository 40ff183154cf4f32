"""The downstream model: a backbone, the head its task built on it, and the task.

``TaskModel(backbone, head, task)`` is what the runner trains and scores (a
:class:`fusebench.encoders.base.MultimodalModel`):

* ``embed(batch)`` — the backbone's pooled embeddings ``[k, n, F]`` (the pretraining views);
* ``forward(batch)`` — ``head(backbone.features(batch), batch)``;
* ``task_loss(output, batch)`` / ``predict(output, batch)`` — the task's (:mod:`fusebench.tasks`);
* ``head_parameters()`` / ``encoder_parameters()`` — the head's / the backbone's parameters.

Its state dict holds ``backbone.*`` (the encoder's keys) and ``head.*`` (the head's). Checkpoints
written when an encoder held its head (one flat module: ``encoders.*``, ``fusions.*``, ``fuse.*``, ...)
still load: a flat key is read as ``backbone.<key>`` or ``head.<key>``, whichever the model has.

Build one with :func:`build` (the head comes from ``task.build_head(backbone)``, right after the
backbone was built, so ``torch.manual_seed(s)`` followed by the two gives the initial weights an
encoder with the head in its own constructor had), or with :func:`for_backbone` outside a benchmark
(the backbone's ``default_task``).
"""

from __future__ import annotations

from typing import Any, Iterator

from torch import Tensor, nn

from fusebench.encoders.base import MultimodalModel


class TaskModel(MultimodalModel):
    """``backbone`` + ``head`` (built by ``task`` for it) + ``task``; see the module docstring."""

    def __init__(self, backbone: nn.Module, head: nn.Module, task: Any) -> None:
        super().__init__()
        self.backbone = backbone
        self.head = head
        self.task = task  # a plain object (dataset id and class count), not a module
        self.modalities = list(backbone.modalities)
        self.num_features = int(backbone.num_features)
        self.register_load_state_dict_pre_hook(_flat_keys)

    def embed(self, batch: dict[str, Any]) -> Tensor:
        return self.backbone.embed(batch)

    def forward(self, batch: dict[str, Any]) -> Any:
        return self.head(self.backbone.features(batch), batch)

    def task_loss(self, output: Any, batch: dict[str, Any]) -> Tensor:
        return self.task.loss(output, batch, self.head)

    def check_batch(self, batch: Any) -> Any:
        """``batch`` checked on the host before its copy to the device by the head's ``check_batch`` where it
        has one (e.g. VoteNet's label bounds: read there, they cost no wait for the device); returns it."""
        check = getattr(self.head, "check_batch", None)
        return check(batch) if callable(check) else batch

    def predict(self, output: Any, batch: dict[str, Any] | None = None) -> Any:
        return self.task.predict(output, batch, self.head)

    def head_parameters(self) -> Iterator[nn.Parameter]:
        return self.head.parameters()

    def encoder_parameters(self) -> Iterator[nn.Parameter]:
        return self.backbone.parameters()


def _flat_keys(module: TaskModel, state_dict: dict[str, Any], prefix: str, *_: Any) -> None:
    """Rename the keys of a checkpoint of an encoder that held its head (no ``backbone.`` / ``head.``
    level) to this model's: ``k`` -> ``backbone.k`` or ``head.k``, where that is a key of the model and
    ``k`` is not."""
    names = {n for n, _ in module.named_parameters()} | {n for n, _ in module.named_buffers()}
    for key in [k for k in state_dict if k.startswith(prefix)]:
        rest = key[len(prefix):]
        if rest in names:
            continue
        for part in ("backbone.", "head."):
            if part + rest in names:
                state_dict[prefix + part + rest] = state_dict.pop(key)
                break


def build(backbone: nn.Module, task: Any) -> TaskModel:
    """``backbone`` with the head ``task`` builds for it."""
    return TaskModel(backbone, task.build_head(backbone), task)


def for_backbone(backbone: nn.Module, task: str | None = None, num_classes: int | None = None) -> TaskModel:
    """``backbone`` with the head of task family ``task`` (default: the backbone's ``default_task``),
    outside a benchmark: the class count is ``num_classes``, else the backbone's ``num_classes``."""
    from fusebench import tasks

    task = task or getattr(backbone, "default_task", None)
    if task is None:
        raise NotImplementedError(f"{type(backbone).__name__} has no task head of its own; name a task")
    return build(backbone, tasks.create(task, num_classes=num_classes))


__all__ = ["TaskModel", "build", "for_backbone"]
