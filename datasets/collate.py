"""Collate samples of the common schema into a batch.

Batch layout (what encoders, objectives and the runner consume)::

    {
        "names": [modality names, in the adapter's declaration order],
        "modalities": {name: Tensor[n, ...]},   # sequences padded to the longest: [n, T_max, d]
        "masks": {name: BoolTensor[n, T_max]},  # only for variable-length modalities; True = valid step
        "present": BoolTensor[k, n],            # False where a sample lacks modality names[l]
        "target": Tensor[n, ...] | list[dict],  # detection targets stay a list of per-scene dicts
        "extra_targets": {name: Tensor[n, ...]},
        "meta": [dict, ...],
    }

A missing modality is filled with zeros shaped like the other samples' entries and marked absent in
``present`` (the objectives that honour masks take ``present`` as their ``mask``).
"""

from __future__ import annotations

from typing import Any, Sequence

import torch
from torch import Tensor


def _pad_stack(items: list[Tensor]) -> tuple[Tensor, Tensor | None]:
    """Stack equal shapes; pad along dim 0 (time / points) where the first dims differ."""
    if all(t.shape == items[0].shape for t in items):
        return torch.stack(items), None
    if any(t.dim() == 0 or t.shape[1:] != items[0].shape[1:] for t in items):
        shapes = sorted({tuple(t.shape) for t in items})
        raise ValueError(f"collate: cannot batch tensors of shapes {shapes}: only the first dim may vary")
    lengths = torch.tensor([t.shape[0] for t in items])
    t_max = int(lengths.max())
    out = items[0].new_zeros((len(items), t_max, *items[0].shape[1:]))
    for i, t in enumerate(items):
        out[i, : t.shape[0]] = t
    mask = torch.arange(t_max)[None, :] < lengths[:, None]
    return out, mask


def collate(samples: Sequence[dict[str, Any]], names: Sequence[str] | None = None) -> dict[str, Any]:
    """Batch ``samples`` (see module docstring). ``names`` fixes the modality order (default: union
    of the samples' modalities in first-seen order)."""
    if len(samples) == 0:
        raise ValueError("collate: empty list of samples")
    if names is None:
        seen: dict[str, None] = {}
        for s in samples:
            for k in s["modalities"]:
                seen.setdefault(k, None)
        names = list(seen)
    n = len(samples)
    present = torch.zeros(len(names), n, dtype=torch.bool)
    modalities: dict[str, Tensor] = {}
    masks: dict[str, Tensor] = {}
    for l, name in enumerate(names):
        got = [s["modalities"].get(name) for s in samples]
        ref = next((t for t in got if t is not None), None)
        if ref is None:
            raise ValueError(f"collate: modality {name!r} is missing from every sample of the batch")
        for i, t in enumerate(got):
            present[l, i] = t is not None
        items = [t if t is not None else torch.zeros_like(ref) for t in got]
        stacked, mask = _pad_stack(items)
        modalities[name] = stacked
        if mask is not None:
            masks[name] = mask & present[l][:, None]
    targets = [s.get("target") for s in samples]
    if all(isinstance(t, Tensor) for t in targets):
        target: Any = _pad_stack(targets)[0] if targets[0].dim() else torch.stack(targets)
    else:
        target = targets
    extra: dict[str, Tensor] = {}
    for key in samples[0].get("extra_targets", {}) or {}:
        extra[key] = torch.stack([torch.as_tensor(s["extra_targets"][key]) for s in samples])
    return {
        "names": list(names),
        "modalities": modalities,
        "masks": masks,
        "present": present,
        "target": target,
        "extra_targets": extra,
        "meta": [s.get("meta", {}) for s in samples],
    }
