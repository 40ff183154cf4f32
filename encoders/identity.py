"""``identity``: the input vectors themselves, no parameters -- the encoder of the ``raw`` reference row.

The ``raw`` row asks whether pretraining beats the input features at all: the downstream protocol
(e.g. the linear probe of ``quickstart``) is trained on the raw views instead of learned embeddings.
Each vector modality ``m`` with input ``[n, d_m]`` becomes its own embedding, zero-padded to the
widest modality ``D = max_m d_m``; the classification task's default head (a linear layer on the
concatenated embeddings, :class:`fusebench.tasks.ConcatLinearHead`) is then a linear model of the
concatenated inputs (the padding columns are constant 0 and add nothing a linear map could use).

Shape:
    batch["modalities"][m]: [n, d_m];  embed(batch) = features(batch): [k, n, D]
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from fusebench.encoders import ENCODERS
from fusebench.encoders.base import Backbone, zero_absent


@ENCODERS.register("identity")
class IdentityEncoder(Backbone):
    """The vector inputs, zero-padded to the widest modality (no parameters)."""

    input_kinds = ("vector",)  # the modality kinds it reads (encoders/base.py)

    default_task = "classification"

    def __init__(self, modalities: dict[str, int], num_classes: int = 4) -> None:
        super().__init__()
        if not isinstance(modalities, dict) or not modalities:
            raise ValueError("identity: modalities must be a non-empty mapping name -> input dim")
        self.modalities = list(modalities)
        self.dims = {m: int(d) for m, d in modalities.items()}
        self.num_features = max(self.dims.values())
        self.num_classes = int(num_classes)

    def embed(self, batch: dict[str, Any]) -> Tensor:
        views = []
        for m in self.modalities:
            x = batch["modalities"][m]
            if x.dim() != 2 or x.shape[1] != self.dims[m]:
                raise ValueError(f"identity: modality {m!r} must be a [n, {self.dims[m]}] vector batch, "
                                 f"got shape {tuple(x.shape)}")
            views.append(torch.nn.functional.pad(x, (0, self.num_features - x.shape[1])))
        z = torch.stack(views)  # [k, n, D]
        return zero_absent(z, batch, self.modalities)

    @classmethod
    def benchmark_config(cls) -> dict[str, Any]:
        """The quickstart benchmark's inputs: three 16-dim vector modalities."""
        return dict(modalities={"strong1": 16, "strong2": 16, "weak": 16}, num_classes=4)

    @classmethod
    def example_batch(cls, config: dict[str, Any] | None = None, batch_size: int = 64, seed: int = 0) -> dict[str, Any]:
        from fusebench.encoders.mlp import MLPEncoder

        return MLPEncoder.example_batch(config or cls.benchmark_config(), batch_size, seed)
