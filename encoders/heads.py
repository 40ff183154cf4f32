"""Shared pieces of the encoders: projection head, predictor, EMA teacher, batch helpers.

* :class:`ProjectionHead` — ``Linear -> GELU -> Linear`` mapping an encoder's pooled embedding to the
  space the pretraining objective works in (SimCLR, Chen et al. 2020, arXiv:2002.05709,
  https://arxiv.org/abs/2002.05709, Sec. 2.1 uses the same two-layer MLP; we use GELU as in the
  M3G / poly-view setups).
* :class:`Predictor` — the same MLP used as BYOL's predictor ``q_theta`` (Grill et al., "Bootstrap
  Your Own Latent", NeurIPS 2020, arXiv:2006.07733, https://arxiv.org/abs/2006.07733, Sec. 3.1);
  :class:`MultiViewHead` bundles a projection head with an optional predictor.
* :class:`EMATeacher` — a frozen copy of a module updated as an exponential moving average of the
  student, ``xi <- tau * xi + (1 - tau) * theta`` (BYOL, Eq. 1), with the cosine momentum schedule
  of BYOL Sec. 3.2::

      tau(t) = 1 - (1 - tau_base) * (cos(pi * t / T) + 1) / 2,     t = 0 .. T

  so ``tau(0) = tau_base`` and ``tau(T) = 1``; :func:`cosine_momentum` computes it.
* :func:`parse_modalities` and :func:`presence` — how every model of this package reads its
  ``modalities`` argument and the ``present`` rows of a collated batch (see
  :mod:`fusebench.datasets.collate`).

Shape:
    ProjectionHead / Predictor input ``[..., in_dim]`` -> ``[..., out_dim]`` (``[k, n, d]`` works);
    ``presence(batch, names)`` -> ``BoolTensor[k, n]`` in the order of ``names``.

Example::

    head = ProjectionHead(512, hidden_dim=2048, out_dim=128)
    z = head(model.embed(batch))                       # [k, n, 128]
    teacher = EMATeacher(model, base_momentum=0.996, total_steps=10_000)
    teacher.update(model, step)                        # after each optimiser step
"""

from __future__ import annotations

import copy
import math
from typing import Any, Mapping, Sequence

import torch
from torch import Tensor, nn


def parse_modalities(
    who: str, modalities: Sequence[str] | Mapping[str, int] | None, defaults: Mapping[str, int]
) -> dict[str, int]:
    """Normalise a model's ``modalities`` argument to an ordered ``{name: input dim}``.

    ``modalities`` is a list of names (dims taken from ``defaults``) or a dict ``name -> dim``;
    ``None`` means every entry of ``defaults``.
    """
    if modalities is None:
        modalities = list(defaults)
    if isinstance(modalities, str):
        raise ValueError(f"{who}: modalities must be a list of names or a dict name -> input dim, got the "
                         f"string {modalities!r} (write [{modalities!r}])")
    if isinstance(modalities, Mapping):
        out = {}
        for name, dim in modalities.items():
            if not isinstance(dim, int) or isinstance(dim, bool) or dim < 1:
                raise ValueError(f"{who}: input dim of modality {name!r} must be a positive int, got {dim!r}")
            out[str(name)] = dim
    else:
        out = {}
        for name in modalities:
            if name not in defaults:
                raise ValueError(
                    f"{who}: no default input dim for modality {name!r} (known: {sorted(defaults)}); "
                    f"pass modalities as a dict name -> dim, e.g. {{{name!r}: 64}}"
                )
            out[str(name)] = int(defaults[name])
    if not out:
        raise ValueError(f"{who}: at least one modality is needed")
    if len(out) != len(list(modalities)):
        raise ValueError(f"{who}: duplicate modality names in {list(modalities)}")
    return out


def presence(batch: Mapping[str, Any], names: Sequence[str], n: int, device: torch.device) -> Tensor:
    """``BoolTensor[k, n]``: ``present`` rows of ``batch`` for ``names`` (all True if not recorded)."""
    present = batch.get("present")
    if present is None:
        return torch.ones(len(names), n, dtype=torch.bool, device=device)
    order = list(batch.get("names") or [])
    rows = []
    for name in names:
        if name not in order:
            raise ValueError(f"batch['present'] has no row for modality {name!r}: batch['names'] is {order}")
        rows.append(present[order.index(name)])
    out = torch.stack(rows).to(device=device, dtype=torch.bool)
    if out.shape[1] != n:
        raise ValueError(f"batch['present'] has {out.shape[1]} columns, the batch has {n} samples")
    return out


def get_modality(who: str, batch: Mapping[str, Any], name: str) -> Tensor:
    """``batch['modalities'][name]`` with a clear error when it is missing."""
    mods = batch.get("modalities")
    if not isinstance(mods, Mapping) or name not in mods:
        have = sorted(mods) if isinstance(mods, Mapping) else None
        raise ValueError(f"{who}: batch['modalities'] has no {name!r} (has {have})")
    return mods[name]


class ProjectionHead(nn.Module):
    """``Linear(in_dim, hidden_dim) -> GELU -> Linear(hidden_dim, out_dim)``.

    Shape: ``[..., in_dim] -> [..., out_dim]``.
    """

    def __init__(self, in_dim: int, hidden_dim: int = 2048, out_dim: int = 128) -> None:
        super().__init__()
        for arg, v in (("in_dim", in_dim), ("hidden_dim", hidden_dim), ("out_dim", out_dim)):
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"{type(self).__name__}: {arg} must be a positive int, got {v!r}")
        self.in_dim, self.hidden_dim, self.out_dim = in_dim, hidden_dim, out_dim
        self.net = nn.Sequential(nn.Linear(in_dim, hidden_dim), nn.GELU(), nn.Linear(hidden_dim, out_dim))

    def forward(self, x: Tensor) -> Tensor:
        if x.shape[-1] != self.in_dim:
            raise ValueError(f"{type(self).__name__}: expected last dim {self.in_dim}, got shape {tuple(x.shape)}")
        return self.net(x)


class Predictor(ProjectionHead):
    """BYOL's predictor: the same two-layer MLP, ``[..., dim] -> [..., dim]`` by default."""

    def __init__(self, dim: int, hidden_dim: int = 2048, out_dim: int | None = None) -> None:
        super().__init__(dim, hidden_dim, dim if out_dim is None else out_dim)


class MultiViewHead(nn.Module):
    """Projection head applied to every view, plus an optional predictor.

    ``forward(h[k, n, d]) -> (z[k, n, out_dim], p[k, n, out_dim] | None)``.
    """

    def __init__(self, in_dim: int, hidden_dim: int = 2048, out_dim: int = 128, predictor: bool = False,
                 predictor_hidden_dim: int | None = None) -> None:
        super().__init__()
        self.projector = ProjectionHead(in_dim, hidden_dim, out_dim)
        self.predictor = Predictor(out_dim, predictor_hidden_dim or hidden_dim) if predictor else None

    def forward(self, h: Tensor) -> tuple[Tensor, Tensor | None]:
        z = self.projector(h)
        return z, (self.predictor(z) if self.predictor is not None else None)


def cosine_momentum(step: int, total_steps: int, base_momentum: float) -> float:
    """BYOL's schedule ``1 - (1 - base) * (cos(pi * step / total) + 1) / 2``; ``step`` clamped to
    ``[0, total_steps]``."""
    if total_steps < 1:
        raise ValueError(f"cosine_momentum: total_steps must be >= 1, got {total_steps}")
    if not 0.0 <= base_momentum <= 1.0:
        raise ValueError(f"cosine_momentum: base_momentum must lie in [0, 1], got {base_momentum}")
    t = min(max(step, 0), total_steps)
    return 1.0 - (1.0 - base_momentum) * (math.cos(math.pi * t / total_steps) + 1.0) / 2.0


class EMATeacher(nn.Module):
    """A frozen copy of ``student`` tracking it by exponential moving average.

    ``update(student, step)`` applies ``xi <- tau(step) * xi + (1 - tau(step)) * theta`` to every
    parameter and copies buffers (BatchNorm statistics) as they are. Calling the teacher runs the
    copy under ``torch.no_grad()``.
    """

    def __init__(self, student: nn.Module, base_momentum: float = 0.996, total_steps: int = 1000) -> None:
        super().__init__()
        cosine_momentum(0, total_steps, base_momentum)  # validates the arguments
        self.base_momentum = float(base_momentum)
        self.total_steps = int(total_steps)
        self.module = copy.deepcopy(student)
        for p in self.module.parameters():
            p.requires_grad_(False)

    def momentum(self, step: int) -> float:
        return cosine_momentum(step, self.total_steps, self.base_momentum)

    @torch.no_grad()
    def update(self, student: nn.Module, step: int) -> float:
        """EMA step; returns the momentum used."""
        tau = self.momentum(step)
        teacher_params = dict(self.module.named_parameters())
        student_params = dict(student.named_parameters())
        if teacher_params.keys() != student_params.keys():
            raise ValueError("EMATeacher.update: the student's parameters differ from the teacher's")
        # one multi-tensor kernel per operation (torch._foreach_*) instead of two launches per parameter; the
        # same arithmetic as p_t.mul_(tau).add_(p_s, alpha=1 - tau) on each (tests/test_speed_options.py)
        names = list(student_params)
        teacher = [teacher_params[name] for name in names]
        torch._foreach_mul_(teacher, tau)
        torch._foreach_add_(teacher, [student_params[name].detach() for name in names], alpha=1.0 - tau)
        teacher_buffers = dict(self.module.named_buffers())
        pairs = [(teacher_buffers[name], b) for name, b in student.named_buffers()]
        if pairs and hasattr(torch, "_foreach_copy_"):
            torch._foreach_copy_([t for t, _ in pairs], [b for _, b in pairs])
        else:
            for t, b in pairs:
                t.copy_(b)
        return tau

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        with torch.no_grad():
            return self.module(*args, **kwargs)

    def embed(self, batch: Any) -> Tensor:
        """The teacher's ``embed(batch)`` (for a :class:`MultimodalModel` student), without gradients."""
        with torch.no_grad():
            return self.module.embed(batch)


__all__ = [
    "EMATeacher",
    "MultiViewHead",
    "Predictor",
    "ProjectionHead",
    "cosine_momentum",
    "get_modality",
    "parse_modalities",
    "presence",
]
