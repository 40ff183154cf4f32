"""Per-modality encoders (``fusebench.encoders``): backbones, with the task heads some of them offer.

``build(name, **cfg)`` returns a :class:`fusebench.encoders.base.Backbone`; ``available()`` lists the
ids. The downstream head is built on it by the dataset's task (:mod:`fusebench.tasks`). Built-in
modules are imported on the first lookup; third-party encoders register through the entry-point
group ``fusebench.encoders``.
"""

from __future__ import annotations

if __name__ != "fusebench.encoders":  # this folder is mapped to fusebench.encoders by pyproject.toml
    raise ImportError("import this folder as fusebench.encoders; a bare 'encoders' would shadow other packages")


from typing import Any

from fusebench.registry import Registry, UnknownNameError


def _describe(cls: Any) -> dict[str, Any]:
    """Metadata read off an encoder class: its typed options (``encoder.config``) and the modality kinds it
    reads (``input_kinds``; None: not declared)."""
    from fusebench.options import options_of

    kinds = getattr(cls, "input_kinds", None)
    return {"options": options_of(cls), "input_kinds": list(kinds) if kinds is not None else None}


# one module per encoder; importing a module registers its id (on the first lookup)
ENCODERS = Registry("encoder", entry_point_group="fusebench.encoders", describe=_describe,
                    home=lambda name: f"{__name__}.{name}", modules=tuple(  # looking one id up imports its module only
    f"{__name__}.{m}" for m in ("esanet", "pointnet2", "votenet", "seq_transformer", "eeg_conv", "mlp", "identity")))


def available(pattern: str | None = None) -> list[str]:
    return ENCODERS.available(pattern)


def build(name: str, **cfg: Any):
    return ENCODERS.build(name, **cfg)


__all__ = ["ENCODERS", "UnknownNameError", "available", "build"]
