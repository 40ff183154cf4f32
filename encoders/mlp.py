"""``mlp``: one MLP per vector modality.

The smallest :class:`fusebench.encoders.base.Backbone`; used by the ``quickstart`` benchmark (vector
modalities). Each modality ``m`` with input ``[n, d_m]`` is encoded by Linear -> GELU -> Linear to
``num_features``. It declares no head: the classification task's default head (a linear layer on the
concatenated embeddings, :class:`fusebench.tasks.ConcatLinearHead`) is its probe.

Shape:
    batch["modalities"][m]: [n, d_m];  embed(batch) = features(batch): [k, n, num_features]
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from fusebench.encoders import ENCODERS
from fusebench.encoders.base import Backbone, zero_absent


@ENCODERS.register("mlp")
class MLPEncoder(Backbone):
    """Per-modality MLP encoders for vector features.

    ``num_classes``: the classes of the classification head a task builds on it where the dataset
    does not say (tests, benches)."""

    default_task = "classification"
    input_kinds = ("vector",)  # [n, d_m] per modality
    width_options = ("num_features", "hidden")  # checked when a spec is loaded (Backbone.config_problems)

    def __init__(self, modalities: dict[str, int], num_features: int = 32, hidden: int = 64, num_classes: int = 4) -> None:
        super().__init__()
        if not isinstance(modalities, dict) or not modalities:
            raise ValueError("mlp: modalities must be a non-empty mapping name -> input dim")
        self.modalities = list(modalities)
        self.num_features = int(num_features)
        self.encoders = nn.ModuleDict({
            m: nn.Sequential(nn.Linear(int(d), hidden), nn.GELU(), nn.Linear(hidden, num_features))
            for m, d in modalities.items()
        })
        self.num_classes = int(num_classes)

    def embed(self, batch: dict[str, Any]) -> Tensor:
        """Per-modality embeddings [k, n, f]; a modality absent from a sample (``batch["present"]``) is 0."""
        z = torch.stack([self.encoders[m](batch["modalities"][m]) for m in self.modalities])
        return zero_absent(z, batch, self.modalities)

    @classmethod
    def benchmark_config(cls) -> dict[str, Any]:
        """The quickstart benchmark's model: three 16-dim vector modalities."""
        return dict(modalities={"strong1": 16, "strong2": 16, "weak": 16}, num_features=4, hidden=64, num_classes=4)

    @classmethod
    def example_batch(cls, config: dict[str, Any] | None = None, batch_size: int = 64, seed: int = 0) -> dict[str, Any]:
        config = dict(config or cls.benchmark_config())
        g = torch.Generator().manual_seed(seed)
        mods = {m: torch.randn(batch_size, d, generator=g) for m, d in config["modalities"].items()}
        names = list(mods)
        return {"names": names, "modalities": mods, "masks": {},
                "present": torch.ones(len(names), batch_size, dtype=torch.bool),
                "target": torch.randint(0, config.get("num_classes", 4), (batch_size,), generator=g),
                "extra_targets": {}, "meta": [{} for _ in range(batch_size)]}
