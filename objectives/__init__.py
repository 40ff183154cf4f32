"""Multi-view pretraining objectives (``fusebench.objectives``).

``build(name, **hparams)`` returns an ``nn.Module``; ``available()`` lists the registered ids.
Third-party objectives register through the entry-point group ``fusebench.objectives``.
"""

from __future__ import annotations

if __name__ != "fusebench.objectives":  # this folder is mapped to fusebench.objectives by pyproject.toml
    raise ImportError("import this folder as fusebench.objectives; a bare 'objectives' would shadow other packages")


import importlib
from typing import Any

from fusebench.registry import Registry, UnknownNameError

OBJECTIVES = Registry("objective", entry_point_group="fusebench.objectives")

# one module per loss family; importing a module registers its ids
_MODULES = ("infonce", "multicrop", "polyview", "mv_infonce", "byol", "tuple_infonce", "matching_gap", "m3g")

for _m in _MODULES:
    importlib.import_module(f"{__name__}.{_m}")


def available(pattern: str | None = None) -> list[str]:
    """Sorted ids of every registered objective (optionally filtered by a glob pattern)."""
    return OBJECTIVES.available(pattern)


def build(name: str, **hparams: Any):
    """Instantiate objective ``name`` with hyperparameters ``hparams`` (e.g. ``tau=0.1``)."""
    cls = OBJECTIVES.get(name)
    module = cls(**hparams)
    module.registry_id = name.lower()
    return module


__all__ = ["OBJECTIVES", "UnknownNameError", "available", "build"]
