"""The small interface every multimodal model in ``fusebench.encoders`` follows.

A model built by ``fusebench.encoders.build(name, **cfg)`` consumes the collated batch of
:mod:`fusebench.datasets.collate` and offers:

* ``modalities: list[str]`` — the modalities it encodes, in view order;
* ``num_features: int`` — width of each per-modality pooled embedding;
* ``embed(batch) -> Tensor[k, n, num_features]`` — one pooled embedding per modality: the views fed
  (through a projection head owned by the trainer) to the pretraining objectives;
* ``forward(batch) -> output`` — the task head's output (segmentation logits ``[n, C, H, W]``,
  detection end points dict, regression ``[n]``, classification logits ``[n, C]``);
* ``task_loss(output, batch) -> Tensor`` — the supervised loss of the downstream task;
* ``predict(output, batch)`` — predictions in the form the task's metrics take (label maps, a list of
  per-scene detection dicts, 1-D regression values, 1-D class ids);
* ``encoder_parameters()`` / ``head_parameters()`` — for linear probing (freeze the former).
"""

from __future__ import annotations

from typing import Any, Iterator

import torch
from torch import Tensor, nn


class MultimodalModel(nn.Module):
    modalities: list[str]
    num_features: int

    def embed(self, batch: dict[str, Any]) -> Tensor:  # pragma: no cover - interface
        raise NotImplementedError

    def task_loss(self, output: Any, batch: dict[str, Any]) -> Tensor:  # pragma: no cover
        raise NotImplementedError

    def predict(self, output: Any, batch: dict[str, Any]) -> Any:  # pragma: no cover
        raise NotImplementedError

    def head_parameters(self) -> Iterator[nn.Parameter]:  # pragma: no cover
        raise NotImplementedError

    def encoder_parameters(self) -> Iterator[nn.Parameter]:
        head = {id(p) for p in self.head_parameters()}
        return (p for p in self.parameters() if id(p) not in head)


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


__all__ = ["MultimodalModel", "count_parameters", "torch"]
