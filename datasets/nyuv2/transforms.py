"""NYUv2 train-time augmentation (``flip_p`` option)."""

from __future__ import annotations

from typing import Any

import torch


class _Flip:
    """Mixin of :class:`~fusebench.datasets.nyuv2.NYUv2`: the seeded horizontal flip."""

    def _augment(self, sample: dict[str, Any], rng: torch.Generator) -> dict[str, Any]:
        """Seeded horizontal flip with probability ``flip_p`` (normals: x component negated)."""
        if float(torch.rand((), generator=rng)) >= self.flip_p:
            return sample
        mods = {k: torch.flip(v, dims=[-1]) for k, v in sample["modalities"].items()}
        if "normal" in mods:
            mods["normal"] = mods["normal"] * torch.tensor([-1.0, 1.0, 1.0])[:, None, None]
        sample["modalities"] = mods
        sample["target"] = torch.flip(sample["target"], dims=[-1])
        return sample
