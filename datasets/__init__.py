"""Dataset adapters (``fusebench.datasets``): official on-disk formats, one sample schema.

``build(name, root=None, split="train", modalities=None, synthetic=False, **opts)`` and
``available()``. Third-party adapters register through the entry-point group ``fusebench.datasets``
(value ``"package.module:AdapterClass"``); see docs/adding-a-modality.md.
"""

from __future__ import annotations

if __name__ != "fusebench.datasets":  # this folder is mapped to fusebench.datasets by pyproject.toml
    raise ImportError("import this folder as fusebench.datasets; a bare 'datasets' would shadow other packages")


import importlib
from typing import Any

from fusebench.registry import Registry, UnknownNameError

from .base import (
    MODALITY_KINDS,
    DataFile,
    DatasetError,
    DatasetNotFoundError,
    Modality,
    MultimodalDataset,
    SyntheticSpec,
)

DATASETS = Registry("dataset", entry_point_group="fusebench.datasets")

# one module per adapter family; importing a module registers its ids
_MODULES = ("nyuv2", "sunrgbd", "mmsa", "sleep", "quickstart", "multiview_mat")

for _m in _MODULES:
    importlib.import_module(f"{__name__}.{_m}")


def available(pattern: str | None = None) -> list[str]:
    return DATASETS.available(pattern)


def get(name: str) -> type[MultimodalDataset]:
    """The adapter class registered as ``name``."""
    return DATASETS.get(name)


def build(
    name: str,
    root: Any = None,
    split: str = "train",
    modalities: list[str] | None = None,
    synthetic: bool = False,
    **opts: Any,
) -> MultimodalDataset:
    return DATASETS.get(name)(root=root, split=split, modalities=modalities, synthetic=synthetic, **opts)


__all__ = [
    "DATASETS", "MODALITY_KINDS", "DataFile", "DatasetError", "DatasetNotFoundError", "Modality",
    "MultimodalDataset", "SyntheticSpec", "UnknownNameError", "available", "build", "get",
]
