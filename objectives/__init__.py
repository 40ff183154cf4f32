"""Multi-view pretraining objectives (``fusebench.objectives``).

``build(name, **hparams)`` returns an ``nn.Module``; ``available()`` lists the registered ids.
Third-party objectives register through the entry-point group ``fusebench.objectives``.
"""

from __future__ import annotations

if __name__ != "fusebench.objectives":  # this folder is mapped to fusebench.objectives by pyproject.toml
    raise ImportError("import this folder as fusebench.objectives; a bare 'objectives' would shadow other packages")


from typing import Any

from fusebench.registry import Registry, UnknownNameError


def _describe(cls: Any) -> dict[str, Any]:
    """Metadata read off an objective class: paper, input kind, view limits, mask support, version, the
    pretraining methods it builds on (``fusebench.training.methods``), options."""
    from fusebench.options import options_of

    meta = {k: getattr(cls, k) for k in ("paper", "input_kind", "min_views", "max_views", "supports_mask", "version",
                                         "pretrain_methods") if hasattr(cls, k)}
    meta["options"] = options_of(cls)
    return meta


# one module per loss family; importing a module registers its ids (on the first lookup)
OBJECTIVES = Registry("objective", entry_point_group="fusebench.objectives", describe=_describe, modules=tuple(
    f"{__name__}.{m}" for m in ("infonce", "multicrop", "polyview", "mv_infonce", "byol", "tuple_infonce",
                                "matching_gap", "m3g")))


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
