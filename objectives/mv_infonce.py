"""Multi-view InfoNCE, multi-view DHEL and two-view DHEL (Koromilas et al. 2025).

Koromilas, Georgiou, Bouritsas, Giannakopoulos, Nicolaou, Panagakis, "A Principled Framework for
Multi-View Contrastive Learning", 2025, arXiv:2507.06979, https://arxiv.org/abs/2507.06979 (the MV
paper: MV-InfoNCE / MV-DHEL). Notation: N = k views, M = n samples,
K(u, v) = e^{<u, v>/tau} (the paper's Gaussian kernel on unit vectors), s(u, v) = <u, v>/tau,
s_i = s(z_i1, z_i2) at k = 2, and U_il = log sum_{j != i} K(z_il, z_jl) (uniformity of (i, l) in its
own view l).

- ``mv_infonce`` (Sec. IV-B1, Eq. 11): one term per sample i,
      -log sum_{l} sum_{l' != l} K(z_il, z_il') + log sum_{l} sum_{m != l} sum_{j} K(z_il, z_jm).
  Positives: ordered pairs l != l' of sample i, inside one log. Negatives of (i, l): every (j, m) with
  m != l, j = i included (so the positives are in the denominator, as in InfoNCE).
  ``variant="reference_code"``: the MV paper's released code (https://github.com/pakoromilas/Multi-View-CL,
  ``models/losses.py``, class ``MVINFONCE``; the repository is named in the paper) keeps the same-view
  negatives and drops only the self-similarity, i.e. the negatives of (i, l) are all (j, m) != (i, l).
- ``mv_dhel`` (Sec. IV-B2, Eq. 12): the alignment of Eq. 8 (all views of sample i inside one log) plus
  the per-view uniformity of Eq. 9 (one log per view), as printed (summed, not averaged, over views):
      -log sum_{l} sum_{l' != l} K(z_il, z_il') + sum_l U_il.
  ``variant="reference_code"``: the same released code (``models/losses.py``, class ``MVDHEL``) sums
  the positives over unordered pairs l < l'; its value is ours + log 2 (same gradient).
- ``dhel``: the two-view DHEL (Decoupled Hyperspherical Energy Loss, Koromilas et al. 2024,
  arXiv:2405.18045) in the form the MV paper extends: Eq. 12 at N = 2, one term per sample with one
  alignment term and both uniformity terms,
      1/n sum_i [ -log( K(z_i1, z_i2) + K(z_i2, z_i1) ) + U_i1 + U_i2 ]
    = 1/n sum_i [ -s_i + U_i1 + U_i2 ] - log 2,
  so ``dhel == mv_dhel`` at k = 2 (and likewise for ``variant="reference_code"``, the DHEL authors'
  two-view code: the same without the - log 2, i.e. the positive pair counted once; this is class
  ``DHEL`` with ``include_augs=True`` in ``losses.py`` of https://github.com/pakoromilas/DHEL-KCL, the
  DHEL paper's repository, and class ``MVDHEL`` of the MV code above at k = 2; the MV paper itself
  names only the Multi-View-CL repository).
  Why not the one-sided form: Sec. III-C writes DHEL per view of interest l, as Eq. 1 with
  N(i, l) = {(j, l): j != i}: L_l = 1/n sum_i [ -s_i + U_il ]. No sum or mean of L_1 and L_2 equals
  Eq. 12 at N = 2, because Eq. 12 counts the alignment once per sample (Eq. 8) but the uniformity once
  per view (Eq. 9):  Eq. 12 (N = 2) = L_1 + L_2 + 1/n sum_i s_i - log 2.  The mean (L_1 + L_2)/2 of
  the one-sided terms (which is also the MV paper's MV-CL2, Eq. 20, at N = 2) doubles the weight of
  alignment relative to uniformity; it is kept as ``variant="one_sided_mean"``.

Mask (``mv_infonce`` and ``mv_dhel``; ``mask[l, i]`` True = present): absent entries are never
anchors, positives or negatives. A sample enters the loss (as an anchor term) when at least 2 of its
views are present; the loss is the mean over those samples; present entries of other samples are
negatives whatever their number of views. In ``mv_dhel`` a uniformity term (i, l) with no other
present sample in view l is empty and skipped. At least 2 samples with >= 2 present views are needed
(ValueError otherwise). A sample absent from every view is therefore exactly dropped.
``dhel`` refuses masks (use ``mv_dhel``, equal to it at k = 2, for missing views).

References:
    - Koromilas, Georgiou, Bouritsas, Giannakopoulos, Nicolaou, Panagakis, "A Principled Framework
      for Multi-View Contrastive Learning", 2025, arXiv:2507.06979, https://arxiv.org/abs/2507.06979;
      code https://github.com/pakoromilas/Multi-View-CL (``models/losses.py``)
    - Koromilas, Bouritsas, Giannakopoulos, Nicolaou, Panagakis, "Bridging Mini-Batch and Asymptotic
      Analysis in Contrastive Learning: From InfoNCE to Kernel-Based Losses" (DHEL), ICML 2024,
      arXiv:2405.18045, https://arxiv.org/abs/2405.18045; code https://github.com/pakoromilas/DHEL-KCL
      (``losses.py``)

Shape:
    views: [k, n, d] (L2-normalised inside; ``dhel``: k = 2), mask: Bool[k, n] or None -> scalar.

Example (the identities stated above)::

    >>> import math
    >>> import torch
    >>> from fusebench.objectives import build
    >>> _ = torch.manual_seed(0)
    >>> views = torch.randn(4, 8, 16, dtype=torch.float64)
    >>> loss = build("mv_dhel", tau=0.1)(views)
    >>> loss.shape
    torch.Size([])
    >>> ref = build("mv_dhel", tau=0.1, variant="reference_code")(views)
    >>> math.isclose(float(ref - loss), math.log(2), rel_tol=1e-9)
    True
    >>> two = views[:2]
    >>> torch.allclose(build("dhel")(two), build("mv_dhel")(two))
    True
"""

from __future__ import annotations

import math
from typing import ClassVar

import torch
from einops import rearrange
from torch import Tensor

from fusebench.objectives import OBJECTIVES
from fusebench.objectives.base import MultiViewObjective
from fusebench.objectives.infonce import check_tau, check_variant, masked_logsumexp
from fusebench.runtime.utils import value_checks

__all__ = ["MVInfoNCE", "MVDHEL", "DHEL", "DHEL_VARIANTS"]


def _alignment(g: Tensor, present: Tensor, unordered: bool) -> Tensor:
    """log sum over positive view pairs (l, l') of sample i of e^{g[l, i, l', i]} -> [n]."""
    k = g.shape[0]
    pos = torch.diagonal(g, dim1=1, dim2=3)  # [l, l', i] = g[l, i, l', i]
    pairs = torch.triu(torch.ones(k, k, dtype=torch.bool, device=g.device), 1) if unordered else (
        ~torch.eye(k, dtype=torch.bool, device=g.device)
    )
    keep = pairs.unsqueeze(-1) & present.unsqueeze(1) & present.unsqueeze(0)  # [l, l', i]
    return masked_logsumexp(rearrange(pos, "l m i -> i (l m)"), rearrange(keep, "l m i -> i (l m)"), -1)


def _few_samples(valid: Tensor, who: str) -> str | None:
    """The error of a mask whose ``valid`` [n] samples (>= 2 present views) are fewer than 2 (one read), or None."""
    count = int(valid.sum())
    return f"{who}: the mask leaves {count} sample(s) with >= 2 present views; need >= 2" if count < 2 else None


def _samples(present: Tensor, who: str, full: bool = False) -> Tensor:
    """Bool [n]: the samples with >= 2 present views; ``full`` (no mask): all of them, known without a read.
    Fewer than 2 of them: ``ValueError`` in a direct call (``value_checks()``: one read); inside the training
    loop's steps the Pretrainer tested the mask on the host before the copy (``mask_problem``)."""
    valid = present.sum(0) >= 2  # [n]
    if not full and value_checks():
        problem = _few_samples(valid, who)
        if problem:
            raise ValueError(problem)
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
        valid = _samples(present, self.name, full=mask is None)
        g = torch.einsum("lid,mjd->limj", z, z) / self.tau  # [k, n, k, n]
        off = ~torch.eye(k, dtype=torch.bool, device=z.device)
        cos = torch.diagonal(g, dim1=1, dim2=3) * self.tau  # [l, l', i]
        pk = off.unsqueeze(-1) & present.unsqueeze(1) & present.unsqueeze(0)
        self.stats = {"pos_cos": ((cos * pk).sum() / pk.sum().clamp_min(1)).detach()}
        return g, present, valid

    def mask_problem(self, mask: Tensor) -> str | None:
        """The error a call with ``mask`` [k, n] raises (fewer than 2 samples with >= 2 present views), or None.
        Computed where ``mask`` is: the Pretrainer asks on the CPU batch before its copy, so the loop's steps
        (which skip the test) raise what a direct call does, before the step."""
        return _few_samples(mask.sum(0) >= 2, self.name)

    @staticmethod
    def _mean(per: Tensor, valid: Tensor, mask: Tensor | None) -> Tensor:
        """The mean of ``per`` [n] over the ``valid`` samples, on the device: their sum over their number (no
        boolean selection: its size is data-dependent, a wait for the device); the gradient is 1 / count on each
        valid sample and 0 elsewhere, as for ``per[valid].mean()``. Without a mask every sample is valid: the
        plain mean. (No valid sample, a call that skipped the checks: 0.)"""
        if mask is None:
            return per.mean()
        return torch.where(valid, per, torch.zeros_like(per)).sum() / valid.sum().clamp_min(1)


@OBJECTIVES.register("mv_infonce")
class MVInfoNCE(_MVBase):
    """Multi-view InfoNCE (Koromilas et al. 2025, Sec. IV-B1, Eq. 11); see the module docstring."""

    registry_id: ClassVar[str] = "mv_infonce"
    paper: ClassVar[str] = ("Koromilas et al. 2025 (A Principled Framework for Multi-View Contrastive Learning), "
                            "Sec. IV-B1, Eq. 11 (MV-InfoNCE), arXiv:2507.06979")

    def loss(self, z: Tensor, mask: Tensor | None = None) -> Tensor:
        k, n, _ = z.shape
        g, present, valid = self._setup(z, mask)
        if self.variant == "paper":  # negatives of (i, l): (j, m), m != l
            views_ok = ~torch.eye(k, dtype=torch.bool, device=z.device)  # [l, m]
            keep = views_ok[:, None, :, None] & present[:, :, None, None] & present[None, None, :, :]
        else:  # released code (Multi-View-CL, models/losses.py, MVINFONCE): every (j, m) != (i, l)
            not_self = ~(torch.eye(k, dtype=torch.bool, device=z.device)[:, None, :, None]
                         & torch.eye(n, dtype=torch.bool, device=z.device)[None, :, None, :])
            keep = not_self & present[:, :, None, None] & present[None, None, :, :]
        neg = masked_logsumexp(rearrange(g, "l i m j -> i (l m j)"), rearrange(keep, "l i m j -> i (l m j)"), -1)
        pos = _alignment(g, present, unordered=False)
        per = neg - pos
        return self._mean(per, valid, mask)


@OBJECTIVES.register("mv_dhel")
class MVDHEL(_MVBase):
    """Multi-view DHEL (Koromilas et al. 2025, Sec. IV-B2, Eq. 12); see the module docstring."""

    registry_id: ClassVar[str] = "mv_dhel"
    paper: ClassVar[str] = ("Koromilas et al. 2025 (A Principled Framework for Multi-View Contrastive Learning), "
                            "Sec. IV-B2, Eq. 12 (MV-DHEL), arXiv:2507.06979")

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
        return self._mean(per, valid, mask)


#: ``variant`` names of ``dhel``: the two of the other losses plus the mean of the one-sided terms
DHEL_VARIANTS = ("paper", "reference_code", "one_sided_mean")


@OBJECTIVES.register("dhel")
class DHEL(MultiViewObjective):
    """Two-view DHEL as MV-DHEL at N = 2 (Koromilas et al. 2025, Eq. 12); see the module docstring.

    ``variant``: ``"paper"`` (Eq. 12 at N = 2, equal to ``mv_dhel``), ``"reference_code"`` (the DHEL
    authors' code, https://github.com/pakoromilas/DHEL-KCL ``losses.py`` class ``DHEL``, = paper +
    log 2) or ``"one_sided_mean"`` (mean of the two one-sided Eq. 1 terms).
    """

    registry_id: ClassVar[str] = "dhel"
    paper: ClassVar[str] = ("Koromilas et al. 2024 (DHEL, ICML), arXiv:2405.18045, as MV-DHEL at N = 2: "
                            "Koromilas et al. 2025, Sec. IV-B2, Eq. 12, arXiv:2507.06979 "
                            "(one-sided DHEL terms: Sec. III-C, Eq. 1)")
    min_views: ClassVar[int] = 2
    max_views: ClassVar[int | None] = 2
    #: "2": the default became Eq. 12 at N = 2 ("1": the mean of the one-sided terms, now "one_sided_mean")
    version: ClassVar[str] = "2"
    #: Eq. 12 at N = 2, for both shared variants (fusebench.objectives.equivalence)
    same_loss_as: ClassVar[dict[str, int | str]] = {"mv_dhel": 2}

    def __init__(self, tau: float = 0.1, variant: str = "paper") -> None:
        super().__init__()
        self.tau = check_tau(tau, self.registry_id)
        self.variant = check_variant(variant, self.registry_id, DHEL_VARIANTS)

    def loss(self, z: Tensor, mask: Tensor | None = None) -> Tensor:
        n = z.shape[1]
        pos = torch.einsum("id,id->i", z[0], z[1]) / self.tau  # [n], s_i
        same = torch.einsum("lid,ljd->lij", z, z) / self.tau  # [2, n, n]
        other = ~torch.eye(n, dtype=torch.bool, device=z.device)
        unif = masked_logsumexp(same, other.unsqueeze(0), -1)  # [2, n], U_il
        self.stats = {"pos_cos": (pos.detach() * self.tau).mean()}
        if self.variant == "one_sided_mean":  # (L_1 + L_2) / 2, L_l = Eq. 1 with view of interest l
            return (unif - pos.unsqueeze(0)).mean()
        per = unif.sum(0) - pos  # one alignment term, both uniformity terms (Eq. 12 at N = 2)
        if self.variant == "paper":  # Eq. 12 sums K over the ordered pairs (1, 2), (2, 1): -log(2 e^{s_i})
            per = per - math.log(2)
        return per.mean()
