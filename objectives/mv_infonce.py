"""Multi-view InfoNCE, multi-view DHEL and two-view DHEL (Koromilas et al. 2025).

Koromilas, Bouritsas, Giannakopoulos, Nicolaou, Panagakis, "Principled Multi-View Contrastive
Learning" (MV-InfoNCE / MV-DHEL). Notation: N = k views, M = n samples, K(u, v) = e^{<u, v>/tau}
(the paper's Gaussian kernel on unit vectors), g[l, i, m, j] = <z[l, i], z[m, j]> / tau.

- ``mv_infonce`` (Eq. 11): one term per sample i,
      -log sum_{l} sum_{l' != l} K(z_il, z_il') + log sum_{l} sum_{m != l} sum_{j} K(z_il, z_jm).
  Positives: ordered pairs l != l' of sample i, inside one log. Negatives of (i, l): every (j, m) with
  m != l, j = i included (so the positives are in the denominator, as in InfoNCE).
  ``variant="reference_code"``: the official code keeps the same-view negatives and drops only the
  self-similarity, i.e. the negatives of (i, l) are all (j, m) != (i, l).
- ``mv_dhel`` (Eq. 12): the same alignment term plus, for each view l, the log of the sum over the
  other samples of the same view:
      -log sum_{l} sum_{l' != l} K(z_il, z_il') + sum_l log sum_{j != i} K(z_il, z_jl).
  ``variant="reference_code"``: the official code sums the positives over unordered pairs l < l';
  its value is ours + log 2 (same gradient).
- ``dhel``: the two-view DHEL (Decoupled Hyperspherical Energy Loss, Koromilas et al. 2024), Eq. 1 of
  the MV paper with the negative set N(i, l) = {(j, l): j != i}, averaged over the two anchor views:
      1/(2n) sum_l sum_i [ -<z_il, z_il'>/tau + log sum_{j != i} K(z_il, z_jl) ],  l' = the other view.
  ``variant="reference_code"``: the official two-view code (one alignment term per sample, the two
  uniformity terms added): 1/n sum_i [ -<z_i1, z_i2>/tau + sum_l log sum_{j != i} K(z_il, z_jl) ],
  which equals ``mv_dhel(variant="reference_code")`` at k = 2.

Mask (``mv_infonce`` and ``mv_dhel``; ``mask[l, i]`` True = present): absent entries are never
anchors, positives or negatives. A sample enters the loss (as an anchor term) when at least 2 of its
views are present; the loss is the mean over those samples; present entries of other samples are
negatives whatever their number of views. In ``mv_dhel`` a uniformity term (i, l) with no other
present sample in view l is empty and skipped. At least 2 samples with >= 2 present views are needed
(ValueError otherwise). A sample absent from every view is therefore exactly dropped.
``dhel`` refuses masks.

Shape:
    views: [k, n, d] (L2-normalised inside; ``dhel``: k = 2), mask: Bool[k, n] or None -> scalar.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from einops import rearrange
from torch import Tensor

from fusebench.objectives import OBJECTIVES
from fusebench.objectives.base import MultiViewObjective
from fusebench.objectives.infonce import check_tau, check_variant, masked_logsumexp

__all__ = ["MVInfoNCE", "MVDHEL", "DHEL"]


def _alignment(g: Tensor, present: Tensor, unordered: bool) -> Tensor:
    """log sum over positive view pairs (l, l') of sample i of e^{g[l, i, l', i]} -> [n]."""
    k = g.shape[0]
    pos = torch.diagonal(g, dim1=1, dim2=3)  # [l, l', i] = g[l, i, l', i]
    pairs = torch.triu(torch.ones(k, k, dtype=torch.bool, device=g.device), 1) if unordered else (
        ~torch.eye(k, dtype=torch.bool, device=g.device)
    )
    keep = pairs.unsqueeze(-1) & present.unsqueeze(1) & present.unsqueeze(0)  # [l, l', i]
    return masked_logsumexp(rearrange(pos, "l m i -> i (l m)"), rearrange(keep, "l m i -> i (l m)"), -1)


def _samples(present: Tensor, who: str) -> Tensor:
    valid = present.sum(0) >= 2  # [n]
    if int(valid.sum()) < 2:
        raise ValueError(f"{who}: the mask leaves {int(valid.sum())} sample(s) with >= 2 present views; need >= 2")
    return valid


class _MVBase(MultiViewObjective):
    supports_mask: ClassVar[bool] = True

    def __init__(self, tau: float = 0.1, variant: str = "paper") -> None:
        super().__init__()
        self.tau = check_tau(tau, self.registry_id)
        self.variant = check_variant(variant, self.registry_id)

    def _setup(self, z: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
        k, n, _ = z.shape
        present = torch.ones(k, n, dtype=torch.bool, device=z.device) if mask is None else mask
        valid = _samples(present, self.name)
        g = torch.einsum("lid,mjd->limj", z, z) / self.tau  # [k, n, k, n]
        off = ~torch.eye(k, dtype=torch.bool, device=z.device)
        cos = torch.diagonal(g, dim1=1, dim2=3) * self.tau  # [l, l', i]
        pk = off.unsqueeze(-1) & present.unsqueeze(1) & present.unsqueeze(0)
        self.stats = {"pos_cos": float(((cos * pk).sum() / pk.sum().clamp_min(1)).detach())}
        return g, present, valid


@OBJECTIVES.register("mv_infonce")
class MVInfoNCE(_MVBase):
    """Multi-view InfoNCE (Koromilas et al. Eq. 11); see the module docstring for ``variant`` and masks."""

    registry_id: ClassVar[str] = "mv_infonce"
    paper: ClassVar[str] = "Koromilas et al. 2025 (Principled Multi-View Contrastive Learning), Eq. 11 (MV-InfoNCE)"

    def loss(self, z: Tensor, mask: Tensor | None = None) -> Tensor:
        k, n, _ = z.shape
        g, present, valid = self._setup(z, mask)
        if self.variant == "paper":  # negatives of (i, l): (j, m), m != l
            views_ok = ~torch.eye(k, dtype=torch.bool, device=z.device)  # [l, m]
            keep = views_ok[:, None, :, None] & present[:, :, None, None] & present[None, None, :, :]
        else:  # official code: every (j, m) != (i, l)
            not_self = ~(torch.eye(k, dtype=torch.bool, device=z.device)[:, None, :, None]
                         & torch.eye(n, dtype=torch.bool, device=z.device)[None, :, None, :])
            keep = not_self & present[:, :, None, None] & present[None, None, :, :]
        neg = masked_logsumexp(rearrange(g, "l i m j -> i (l m j)"), rearrange(keep, "l i m j -> i (l m j)"), -1)
        pos = _alignment(g, present, unordered=False)
        per = neg - pos
        return per[valid].mean()


@OBJECTIVES.register("mv_dhel")
class MVDHEL(_MVBase):
    """Multi-view DHEL (Koromilas et al. Eq. 12); see the module docstring for ``variant`` and masks."""

    registry_id: ClassVar[str] = "mv_dhel"
    paper: ClassVar[str] = "Koromilas et al. 2025 (Principled Multi-View Contrastive Learning), Eq. 12 (MV-DHEL)"

    def loss(self, z: Tensor, mask: Tensor | None = None) -> Tensor:
        k, n, _ = z.shape
        g, present, valid = self._setup(z, mask)
        same = torch.diagonal(g, dim1=0, dim2=2).permute(2, 0, 1)  # [l, i, j] = g[l, i, l, j]
        other = ~torch.eye(n, dtype=torch.bool, device=z.device)
        keep = other.unsqueeze(0) & present.unsqueeze(1)  # candidate (l, j): j != i, present
        unif = masked_logsumexp(same, keep, -1)  # [l, i]
        has = present & keep.any(-1)  # term (l, i) defined
        unif = torch.where(has, unif, torch.zeros_like(unif)).sum(0)  # sum over views -> [n]
        pos = _alignment(g, present, unordered=self.variant == "reference_code")
        per = unif - pos
        return per[valid].mean()


@OBJECTIVES.register("dhel")
class DHEL(MultiViewObjective):
    """Two-view Decoupled Hyperspherical Energy Loss; see the module docstring for ``variant``."""

    registry_id: ClassVar[str] = "dhel"
    paper: ClassVar[str] = ("Koromilas et al. 2024 (DHEL, Bridging Mini-Batch and Asymptotic Analysis in Contrastive "
                            "Learning); Koromilas et al. 2025 Eq. 1 with N(i,l) = {(j,l): j != i}")
    min_views: ClassVar[int] = 2
    max_views: ClassVar[int | None] = 2

    def __init__(self, tau: float = 0.1, variant: str = "paper") -> None:
        super().__init__()
        self.tau = check_tau(tau, self.registry_id)
        self.variant = check_variant(variant, self.registry_id)

    def loss(self, z: Tensor, mask: Tensor | None = None) -> Tensor:
        n = z.shape[1]
        pos = torch.einsum("id,id->i", z[0], z[1]) / self.tau  # [n]
        same = torch.einsum("lid,ljd->lij", z, z) / self.tau  # [2, n, n]
        other = ~torch.eye(n, dtype=torch.bool, device=z.device)
        unif = masked_logsumexp(same, other.unsqueeze(0), -1)  # [2, n]
        self.stats = {"pos_cos": float((pos.detach() * self.tau).mean())}
        if self.variant == "paper":
            return (unif - pos.unsqueeze(0)).mean()
        return (unif.sum(0) - pos).mean()
