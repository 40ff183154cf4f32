"""Dataset adapters (``fusebench.datasets``): official on-disk formats, one sample schema.

``build(name, root=None, split="train", modalities=None, synthetic=False, **opts)`` and
``available()``. Third-party adapters register through the entry-point group ``fusebench.datasets``
(value ``"package.module:AdapterClass"``); see docs/adding-a-modality.md.
"""

from __future__ import annotations

if __name__ != "fusebench.datasets":  # this folder is mapped to fusebench.datasets by pyproject.toml
    raise ImportError("import this folder as fusebench.datasets; a bare 'datasets' would shadow other packages")


from typing import TYPE_CHECKING, Any

from fusebench.registry import Registry, UnknownNameError

if TYPE_CHECKING:
    from .base import (
        MODALITY_KINDS,
        DataFile,
        DatasetError,
        DatasetNotFoundError,
        Modality,
        MultimodalDataset,
        SyntheticSpec,
    )

#: the names of :mod:`fusebench.datasets.base` this package exports, imported on first use (``base`` imports
#: torch; importing the package does not, so that ``fusebench data --help`` answers without it)
_BASE_NAMES = ("MODALITY_KINDS", "DataFile", "DatasetError", "DatasetNotFoundError", "Modality", "MultimodalDataset",
               "SyntheticSpec")


def __getattr__(name: str) -> Any:
    if name in _BASE_NAMES:
        from . import base

        value = getattr(base, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_BASE_NAMES))


def _describe(cls: Any) -> dict[str, Any]:
    """Metadata read off an adapter class: task, modalities, classes, options, info text."""
    from fusebench.options import options_of

    return {"task": getattr(cls, "task", None), "modalities": [m.name for m in getattr(cls, "MODALITIES", ())],
            "num_classes": getattr(cls, "num_classes", None), "options": options_of(cls),
            "info": getattr(cls, "INFO", "")}


def _home(name: str) -> str:
    """The adapter module that registers dataset ``name`` (looking one id up imports that module only)."""
    family = "multiview_mat" if name.startswith("mv_") else {"mosi": "mmsa", "mosei": "mmsa", "chsims": "mmsa",
                                                             "physionet2018": "sleep", "sleep_edf": "sleep"}.get(name, name)
    return f"{__name__}.{family}"


# one module per adapter family; importing a module registers its ids (on the first lookup)
DATASETS = Registry("dataset", entry_point_group="fusebench.datasets", describe=_describe, home=_home, modules=tuple(
    f"{__name__}.{m}" for m in ("nyuv2", "sunrgbd", "mmsa", "sleep", "quickstart", "multiview_mat")))


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
