"""Per-modality encoders and task heads (``fusebench.encoders``).

``build(name, **cfg)`` returns an ``nn.Module``; ``available()`` lists the ids. Built-ins are
registered lazily (module imported on first use); third-party encoders register through the
entry-point group ``fusebench.encoders``.
"""

from __future__ import annotations

if __name__ != "fusebench.encoders":  # this folder is mapped to fusebench.encoders by pyproject.toml
    raise ImportError("import this folder as fusebench.encoders; a bare 'encoders' would shadow other packages")


from typing import Any

from fusebench.registry import Registry, UnknownNameError

ENCODERS = Registry("encoder", entry_point_group="fusebench.encoders")

for _name, _target in {
    "esanet": "fusebench.encoders.esanet:ESANet",
    "pointnet2": "fusebench.encoders.pointnet2:PointNet2Encoder",
    "votenet": "fusebench.encoders.votenet:VoteNet",
    "seq_transformer": "fusebench.encoders.seq_transformer:SeqTransformer",
    "eeg_conv": "fusebench.encoders.eeg_conv:EEGConvEncoder",
    "mlp": "fusebench.encoders.mlp:MLPEncoder",
}.items():
    ENCODERS.add_lazy(_name, _target)


def available(pattern: str | None = None) -> list[str]:
    return ENCODERS.available(pattern)


def build(name: str, **cfg: Any):
    return ENCODERS.build(name, **cfg)


__all__ = ["ENCODERS", "UnknownNameError", "available", "build"]
