"""Pairwise InfoNCE extended to k views: all view pairs (``infonce_pwe``) or one vs average-of-rest
(``infonce_avg``).

Piran et al. 2024 ("M3G"), Sec. 2.2, Eqs. 3-4; the same two extensions are Eqs. 4-5 of Koromilas et
al. 2025 (Sec. III-E). Both use the SimCLR pair loss NT-Xent (Chen et al. 2020) with the scores
s(u, v) = <u, v> / tau of M3G Eq. 1 (embeddings on the unit sphere, so s is the cosine over tau for two
embeddings): for a pair of views (A, B) of n samples, every one of the 2n rows is an anchor; its
positive is the other view of the same sample and the candidates are all 2n - 1 other rows of the pair
(both views, itself excluded):

    l(A, B; a_i) = -s(a_i, b_i) + log( sum_{j != i} e^{s(a_i, a_j)} + sum_j e^{s(a_i, b_j)} ),
    NT-Xent(A, B) = 1/(2n) sum_i [ l(A, B; a_i) + l(B, A; b_i) ].

This pair loss is *not* the one printed as M3G Eq. 1 (and the MV paper's Table I, row "pwe"), which has one
direction (anchors in A only) and n cross-view candidates, -s(a_i, b_i) + log sum_j e^{s(a_i, b_j)}, without the
same-view negatives: the two differ in value (each NT-Xent term has n - 1 more negatives in its log-sum-exp, so
it is the larger). NT-Xent is what the MV paper's released code computes (the ``NTXent`` class referenced below)
and what SimCLR-style pairwise baselines use; the k = 2 identities (``same_loss_as``) and the log(2n - 1) bound of
the two-view MI estimate hold for it.

- ``infonce_pwe`` (M3G Eq. 3): 2/(k(k-1)) sum_{l<m} NT-Xent(X^l, X^m).
- ``infonce_avg`` (M3G Eq. 4, MV paper Eq. 5): 1/k sum_l NT-Xent(X^l, Xbar^{-l}) with the plain mean
  Xbar^{-l} = 1/(k-1) sum_{m != l} X^m of the (unit) other views, as printed and as in the MV paper's
  released code (https://github.com/pakoromilas/Multi-View-CL, ``models/losses.py``, class ``NTXent``
  with ``average=True``; the M3G paper gives no code repository): the mean is *not* re-normalised, so
  its norm is <= 1 and the scores that involve it are inner products, not cosines.
  ``renormalise=True`` projects the mean back onto the unit sphere first (NT-Xent(X^l,
  normalise(Xbar^{-l})), all scores cosines); this is not the printed loss. At k = 2 the mean is the
  other view and both forms are NT-Xent.

Mask (``mask[l, i]`` True = sample i present in view l). A pair term only uses the samples present in
both of its views (absent entries are never anchors, positives or negatives); the loss is the mean
over every remaining anchor term (without a mask this is exactly the mean over pairs); pair terms with
fewer than 2 common samples are skipped. For ``infonce_avg`` the mean of the rest is over the present
other views of each sample. A mask that leaves no usable term raises ``ValueError``.

References:
    - Piran, Klein, Thornton, Cuturi, "Contrasting Multiple Representations with the Multi-Marginal
      Matching Gap", ICML 2024, arXiv:2405.19532, https://arxiv.org/abs/2405.19532
    - Koromilas, Georgiou, Bouritsas, Giannakopoulos, Nicolaou, Panagakis, "A Principled Framework
      for Multi-View Contrastive Learning", 2025, arXiv:2507.06979, https://arxiv.org/abs/2507.06979
      (code: https://github.com/pakoromilas/Multi-View-CL)
    - Chen, Kornblith, Norouzi, Hinton, "A Simple Framework for Contrastive Learning of Visual
      Representations" (SimCLR, NT-Xent), ICML 2020, arXiv:2002.05709, https://arxiv.org/abs/2002.05709
    - van den Oord, Li, Vinyals, "Representation Learning with Contrastive Predictive Coding"
      (InfoNCE), 2018, arXiv:1807.03748, https://arxiv.org/abs/1807.03748

Shape:
    views: [k, n, d] (any scale; L2-normalised inside), mask: Bool[k, n] or None -> scalar.

Example (at k = 2 the mean of the rest is the other view, so both losses are NT-Xent)::

    >>> import torch
    >>> from fusebench.objectives import build
    >>> _ = torch.manual_seed(0)
    >>> views = torch.randn(3, 8, 16)                      # k = 3 views, n = 8 samples, d = 16
    >>> loss = build("infonce_pwe", tau=0.1)(views)
    >>> loss.shape, bool(loss > 0)
    (torch.Size([]), True)
    >>> two = views[:2]
    >>> torch.allclose(build("infonce_pwe")(two), build("infonce_avg")(two))
    True
    >>> mask = torch.ones(3, 8, dtype=torch.bool); mask[2, :4] = False   # view 2 missing for 4 samples
    >>> bool(torch.isfinite(build("infonce_pwe")(views, mask=mask)))
    True
"""

from __future__ import annotations

import math
from itertools import combinations
from numbers import Real
from typing import ClassVar

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor

from fusebench.objectives import OBJECTIVES
from fusebench.objectives.base import MultiViewObjective
from fusebench.runtime.utils import value_checks

__all__ = ["InfoNCEPairwise", "InfoNCEAverage", "check_tau", "masked_logsumexp", "ntxent_terms", "VARIANTS"]

#: names accepted by the ``variant`` argument of the losses whose authors' released code differs from
#: the paper (each loss's docstring names the repository and file)
VARIANTS = ("paper", "reference_code")


#: the smallest temperature taken. The scores <u, v> / tau of unit vectors are at most 1 / tau = 1e30 in size, so
#: the sums a loss forms over its terms (each a few scores; up to ~1e8 of them) stay finite in float32 (the losses'
#: compute dtype, largest value 3.4e38) and far above the masked entries' stand-in :func:`neg_fill`. A tau near
#: float32's smallest normal number made 1 / tau or those sums overflow: a NaN / inf loss
MIN_TAU = 1e-30


def check_tau(tau: object, who: str) -> float:
    """Validate a temperature: a finite real number > 0, at least :data:`MIN_TAU`."""
    value = None
    if not isinstance(tau, bool) and isinstance(tau, Real):
        try:
            value = float(tau)
        except OverflowError:  # an integer too large for a float
            value = math.inf
    if value is None or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{who}: tau must be a finite number > 0, got {tau!r}")
    if value < MIN_TAU:
        raise ValueError(f"{who}: tau must be >= {MIN_TAU:g}, got {tau!r}: the scores <u, v> / tau of unit vectors "
                         f"and their sums would overflow float32, the dtype the losses compute in")
    return value


def check_variant(variant: object, who: str, allowed: tuple[str, ...] = VARIANTS) -> str:
    """Validate a ``variant`` argument against the names ``allowed`` for loss ``who``."""
    if not isinstance(variant, str) or variant not in allowed:
        raise ValueError(f"{who}: variant must be one of {allowed}, got {variant!r}")
    return variant


def neg_fill(dtype: torch.dtype) -> float:
    """A finite stand-in for log(0): exp(neg_fill - anything finite) underflows to exactly 0.

    Finite (not -inf) so that fully masked rows stay finite and never produce NaN gradients.
    """
    return torch.finfo(dtype).min / 4


def masked_logsumexp(x: Tensor, keep: Tensor, dim: int) -> Tensor:
    """log sum_{keep} exp(x) along ``dim``; entries with ``keep`` False contribute exactly 0."""
    return x.masked_fill(~keep, neg_fill(x.dtype)).logsumexp(dim)


def ntxent_terms(a: Tensor, b: Tensor, valid: Tensor, tau: float) -> tuple[Tensor, Tensor, Tensor]:
    """Per-anchor NT-Xent terms for a batch of p view pairs.

    Args:
        a, b: [p, n, d] (pair q compares a[q] with b[q]); scores are inner products / tau, so a and b are
            unit vectors except for ``infonce_avg``'s plain mean of the rest (norm <= 1).
        valid: Bool[p, n], samples usable in pair q (present in both views).
        tau: temperature.

    Returns:
        terms [2, p, n]: -log likelihood of the positive for anchors a[q, i] (row 0) and b[q, i] (row 1);
        keep  [2, p, n]: which terms are defined (valid anchor in a pair with >= 2 valid samples);
        pos   [p, n]: inner product <a_i, b_i> of the positive pairs.
    """
    n = a.shape[1]
    eye = torch.eye(n, dtype=torch.bool, device=a.device)
    s_ab = torch.einsum("pid,pjd->pij", a, b) / tau
    s_aa = torch.einsum("pid,pjd->pij", a, a) / tau
    s_bb = torch.einsum("pid,pjd->pij", b, b) / tau
    cand = rearrange(valid, "p j -> p 1 j")  # candidate j must be valid in the pair
    same = cand & ~eye  # same-view candidates exclude the anchor itself
    pos = torch.diagonal(s_ab, dim1=1, dim2=2)  # [p, n]
    lse_a = torch.logaddexp(masked_logsumexp(s_aa, same, -1), masked_logsumexp(s_ab, cand, -1))
    lse_b = torch.logaddexp(masked_logsumexp(s_bb, same, -1), masked_logsumexp(s_ab.transpose(1, 2), cand, -1))
    terms = torch.stack([lse_a - pos, lse_b - pos])
    enough = valid.sum(-1, keepdim=True) >= 2  # [p, 1]
    keep = (valid & enough).expand(2, -1, -1)
    return terms, keep, pos * tau


def pair_stats(pos: Tensor, valid: Tensor, keep: Tensor) -> dict[str, Tensor]:
    """Diagnostics of the NT-Xent pair losses: mean positive cosine over valid samples, number of terms (0-dim
    tensors on the device, read only by whoever wants them: no wait for the device in a training step)."""
    return {"pos_cos": ((pos * valid).sum() / valid.sum().clamp_min(1)).detach(), "terms": keep.sum().to(pos.dtype)}


def pair_index(k: int, device: torch.device) -> tuple[Tensor, Tensor]:
    """The view indices ``(l, m)`` of the k(k-1)/2 pairs l < m (itertools order) as tensors on ``device``,
    made once per (k, device): a tensor built from a Python list every call is a blocking copy to a GPU."""
    key = (k, torch.device(device))
    got = _PAIRS.get(key)
    if got is None:
        pairs = list(combinations(range(k), 2))
        got = _PAIRS[key] = (torch.tensor([p[0] for p in pairs], device=device),
                             torch.tensor([p[1] for p in pairs], device=device))
    return got


_PAIRS: dict[tuple[int, torch.device], tuple[Tensor, Tensor]] = {}
_OFF: dict[tuple[int, torch.device], Tensor] = {}


def off_diagonal(x: Tensor) -> Tensor:
    """``x[~torch.eye(k, dtype=torch.bool)]`` for ``x`` [k, k, ...]: the entries (a, b) with a != b in row-major
    order, as one gather with an index made once per (k, device) instead of a boolean selection (its size is
    data-dependent, so it waits for the device); the same values and gradients."""
    k = x.shape[0]
    key = (k, x.device)
    idx = _OFF.get(key)
    if idx is None:
        idx = _OFF[key] = torch.nonzero(~torch.eye(k, dtype=torch.bool).flatten()).squeeze(1).to(x.device)
    return x.reshape(k * k, *x.shape[2:])[idx]


def no_term_message(who: str) -> str:
    """The error of a masked NT-Xent loss (``infonce_pwe``, ``infonce_avg``) whose mask leaves no usable term."""
    return f"{who}: the mask leaves no usable term (every view pair needs >= 2 samples present in both views)"


def masked_mean(terms: Tensor, keep: Tensor, who: str, count: int | None = None) -> Tensor:
    """The mean of ``terms`` where ``keep``, computed on the device: the kept sum over the number of kept terms
    (a 0-dim tensor, never read: no wait for the device). ``count``: the number of kept terms when the caller
    knows it (no mask: every term). No kept term: ``ValueError`` (:func:`no_term_message`) in a direct call
    (``value_checks()``: one read of ``keep``); inside the training loop's steps the Pretrainer tested the
    mask on the host before the copy (the loss's ``mask_problem``), and a call that skipped that test gets 0
    (0 / 1, no gradient) instead of the error."""
    kept = torch.where(keep, terms, torch.zeros_like(terms)).sum()
    if count is not None:
        return kept / count
    if value_checks() and not bool(keep.any()):
        raise ValueError(no_term_message(who))
    return kept / keep.sum().clamp_min(1)


@OBJECTIVES.register("infonce_pwe")
class InfoNCEPairwise(MultiViewObjective):
    """Mean over the k(k-1)/2 view pairs of symmetric NT-Xent (M3G Eq. 3). See the module docstring."""

    pairwise_mi_bound = True  # a two-view loss averaged over view pairs (poly-view paper, Prop. 2.1)
    mi_bound_proven = "Proposition 2.1, two-view bound"

    registry_id: ClassVar[str] = "infonce_pwe"
    paper: ClassVar[str] = ("Piran et al. 2024 (M3G), Sec. 2.2 Eq. 3 (L_pwe), arXiv:2405.19532; SimCLR NT-Xent pairs "
                            "(Chen et al. 2020, arXiv:2002.05709); Koromilas et al. 2025, Sec. III-E1 Eq. 4, "
                            "arXiv:2507.06979")
    supports_mask: ClassVar[bool] = True

    def __init__(self, tau: float = 0.1) -> None:
        super().__init__()
        self.tau = check_tau(tau, self.registry_id)

    def loss(self, z: Tensor, mask: Tensor | None = None) -> Tensor:
        k, n, _ = z.shape
        li, mi = pair_index(k, z.device)
        if mask is None:
            valid = torch.ones(len(li), n, dtype=torch.bool, device=z.device)
        else:
            valid = mask[li] & mask[mi]
        terms, keep, pos = ntxent_terms(z[li], z[mi], valid, self.tau)
        self.stats = pair_stats(pos, valid, keep)
        return masked_mean(terms, keep, self.name, count=terms.numel() if mask is None else None)

    def mask_problem(self, mask: Tensor) -> str | None:
        """The error a call with ``mask`` [k, n] raises (no view pair with >= 2 samples present in both views:
        no usable term), or None. Computed where ``mask`` is: the Pretrainer asks on the CPU batch before its
        copy, so the loop's steps (which skip the test) raise what a direct call does, before the step."""
        k = mask.shape[0]
        li, mi = pair_index(k, mask.device)
        return None if bool(((mask[li] & mask[mi]).sum(-1) >= 2).any()) else no_term_message(self.name)


@OBJECTIVES.register("infonce_avg")
class InfoNCEAverage(MultiViewObjective):
    """Each view against the mean of the other views, NT-Xent (M3G Eq. 4). See the module docstring.

    Args:
        tau: temperature (> 0).
        renormalise: project the mean of the other views onto the unit sphere before the pair loss
            (not the printed Eq. 4; kept for comparison). Default False: the plain mean, as printed.
    """

    registry_id: ClassVar[str] = "infonce_avg"
    paper: ClassVar[str] = ("Piran et al. 2024 (M3G), Sec. 2.2 Eq. 4 (L_ave, one vs plain mean of the rest), "
                            "arXiv:2405.19532, with NT-Xent pairs; Koromilas et al. 2025, Sec. III-E2 Eq. 5, "
                            "arXiv:2507.06979")
    supports_mask: ClassVar[bool] = True
    #: "2": the plain (not re-normalised) mean of Eq. 4 became the default ("1": re-normalised)
    version: ClassVar[str] = "2"
    #: at k = 2 the mean of the rest is the other view: NT-Xent (fusebench.objectives.equivalence)
    same_loss_as: ClassVar[dict[str, int | str]] = {"infonce_pwe": 2}

    def __init__(self, tau: float = 0.1, renormalise: bool = False) -> None:
        super().__init__()
        self.tau = check_tau(tau, self.registry_id)
        if not isinstance(renormalise, bool):
            raise ValueError(f"{self.registry_id}: renormalise must be True or False, got {renormalise!r}")
        self.renormalise = renormalise

    def loss(self, z: Tensor, mask: Tensor | None = None) -> Tensor:
        k, n, _ = z.shape
        present = torch.ones(k, n, dtype=torch.bool, device=z.device) if mask is None else mask
        w = present.to(z.dtype)  # [k, n]
        total = torch.einsum("ln,lnd->nd", w, z)  # sum over present views
        rest_sum = total.unsqueeze(0) - w.unsqueeze(-1) * z  # [k, n, d], the present views m != l
        rest_count = w.sum(0, keepdim=True) - w  # [k, n]
        valid = present & (rest_count > 0)
        if self.renormalise:
            rest = F.normalize(rest_sum, dim=-1)  # the mean's direction (the 1/(k-1) scale cancels)
        else:  # Eq. 4: Xbar^{-l} = 1/(k-1) sum_{m != l} X^m, norm <= 1
            rest = rest_sum / rest_count.clamp_min(1).unsqueeze(-1)
        terms, keep, pos = ntxent_terms(z, rest, valid, self.tau)
        cos = pos / rest.norm(dim=-1).clamp_min(torch.finfo(z.dtype).tiny)  # cosine, for the diagnostics
        self.stats = pair_stats(cos, valid, keep)
        return masked_mean(terms, keep, self.name, count=terms.numel() if mask is None else None)

    @staticmethod
    def _valid(present: Tensor) -> Tensor:
        """Bool [k, n]: sample i takes part in term l (present in l and in at least one other view)."""
        w = present.to(torch.int64)
        return present & (w.sum(0, keepdim=True) - w > 0)

    def mask_problem(self, mask: Tensor) -> str | None:
        """The error a call with ``mask`` [k, n] raises (no view l with >= 2 samples present in l and in
        another view: no usable term), or None; computed where ``mask`` is (see ``InfoNCEPairwise``)."""
        return None if bool((self._valid(mask).sum(-1) >= 2).any()) else no_term_message(self.name)
