"""Poly-view contrastive losses: geometric / arithmetic PVC and the sufficient-statistics loss.

Shidani et al. 2024, "Poly-View Contrastive Learning", ICLR 2024, arXiv:2403.05490,
https://arxiv.org/abs/2403.05490 (M = k views, K = n samples, s = cos / tau).

Code: the paper gives no code repository. ``variant="reference_code"`` therefore follows the paper's
own PyTorch-style pseudocode (Algorithm 1, App. F.3.2), and ``variant="public_port"`` a third-party
public PyTorch port of that pseudocode, whose repository is not recorded in this project: that
variant is defined by the formula below, not by a citable source.

PVC (Sec. 2.3, Eqs. 12-14; Algorithm 1 of App. F.3.2). For anchor (i, a) and positive (i, b), b != a,
the candidates are the positive and every view of every other sample; the other copies of sample i
(the anchor included) are masked out:

    log l[i, a, b] = s(ia, ib) - log( e^{s(ia, ib)} + sum_{j != i} sum_g e^{s(ia, jg)} )

- ``pvc_geometric`` (Eq. 13): mean over i, a of  -1/(M-1) sum_{b != a} log l[i, a, b].
- ``pvc_arithmetic`` (Eq. 12): mean over i, a of  -log( 1/(M-1) sum_{b != a} l[i, a, b] ),
  computed as log(M-1) - logsumexp_b log l.
  ``variant="reference_code"``: Algorithm 1's pseudocode (App. F.3.2) taken per sample, as its shape
  comments say (``cross_entropy`` -> ``[k]``, one cross-entropy per sample): per (i, a),
  logsumexp_{b != a}( -log l[i, a, b] ) - log(K), a log-sum-exp of the per-pair cross-entropies minus
  the log of the batch size, then the mean over i, a. Not the paper's bound (the sign inside the
  log-sum-exp and the constant differ from Eq. 12); kept only for comparison.
  ``variant="public_port"``: what the third-party PyTorch port of Algorithm 1 (see Code above) computes. Its
  ``F.cross_entropy`` uses the default ``reduction="mean"``, so each (a, b) cross-entropy is averaged
  over the batch *before* the log-sum-exp: mean over a of
  logsumexp_{b != a}( 1/K sum_i -log l[i, a, b] ) - log(K). This couples the samples inside the
  log-sum-exp; log-sum-exp being convex, it is never above ``reference_code`` (Jensen), with equality
  only when the cross-entropies of different samples differ by a constant over b (e.g. at M = 2,
  where both are the NT-Xent value minus log(K)).

Eq. 14 as printed scores the negatives against the positive x_{i,b}; we follow Algorithm 1 (and the
M = 2 reduction of App. E.2 to SimCLR), which scores every candidate against the anchor x_{i,a}.
At M = 2 both PVC losses equal SimCLR's NT-Xent.

Sufficient statistics, ``suff_stats`` (Sec. 2.4, Eq. 22 with Q from Eq. 24; Algorithm 2 of App. F.3.2).
T = z, Q[i, a] = normalise( mean_{b != a} z[i, b] ). For anchor T[i, a] the positive is Q[i, a] and the
negatives are Q[j, g] for every other sample j and every view g (Q of sample i at other views is
masked, as in Algorithm 2):

    L = mean_{i, a} -[ t(ia, ia) - log( e^{t(ia, ia)} + sum_{j != i} sum_g e^{t(ia, jg)} ) ],
    t(ia, jg) = <T[i, a], Q[j, g]> / tau.

At M = 2, Q[i, a] is the other view and the loss is NT-Xent.

Mask: not supported (refused).

Shape:
    views: [k, n, d] (L2-normalised inside) -> scalar.

Example (at k = 2 every loss here is SimCLR's NT-Xent; for k > 2, arithmetic <= geometric)::

    >>> import torch
    >>> from fusebench.objectives import build
    >>> _ = torch.manual_seed(0)
    >>> two = torch.randn(2, 8, 16)
    >>> ntxent = build("infonce_pwe")(two)
    >>> all(torch.allclose(build(name)(two), ntxent) for name in ("pvc_geometric", "pvc_arithmetic", "suff_stats"))
    True
    >>> views = torch.randn(4, 8, 16)
    >>> bool(build("pvc_arithmetic")(views) <= build("pvc_geometric")(views))
    True
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor

from fusebench.objectives import OBJECTIVES
from fusebench.objectives.base import MultiViewObjective
from fusebench.objectives.infonce import check_tau, check_variant, masked_logsumexp, off_diagonal

__all__ = ["PVCGeometric", "PVCArithmetic", "SufficientStatistics", "pvc_log_likelihoods", "PVC_ARITHMETIC_VARIANTS"]

#: ``variant`` names of ``pvc_arithmetic``
PVC_ARITHMETIC_VARIANTS = ("paper", "reference_code", "public_port")


def _other_sample_lse(scores: Tensor) -> Tensor:
    """log sum_{j != i} sum_g e^{scores[a, i, g, j]} for every anchor (a, i) -> [k, n]."""
    n = scores.shape[1]
    other = ~torch.eye(n, dtype=torch.bool, device=scores.device)  # [i, j]
    flat = rearrange(scores, "a i g j -> a i (g j)")
    keep = rearrange(other.unsqueeze(1).expand(n, scores.shape[2], n), "i g j -> 1 i (g j)")
    return masked_logsumexp(flat, keep, -1)


def pvc_log_likelihoods(z: Tensor, tau: float) -> Tensor:
    """log l[a, b, i] of poly-view Eq. 14 (anchor (i, a), positive (i, b)); diagonal a == b is unused.

    z: unit vectors [k, n, d] -> [k, k, n].
    """
    g = torch.einsum("aid,gjd->aigj", z, z) / tau  # [k, n, k, n]
    neg = _other_sample_lse(g)  # [a, i]
    pos = torch.diagonal(g, dim1=1, dim2=3)  # [a, b, i] = g[a, i, b, i]
    return pos - torch.logaddexp(pos, neg.unsqueeze(1))


class _PolyView(MultiViewObjective):
    supports_mask: ClassVar[bool] = False

    def __init__(self, tau: float = 0.1) -> None:
        super().__init__()
        self.tau = check_tau(tau, self.registry_id)

    def _loglik(self, z: Tensor) -> tuple[Tensor, Tensor]:
        k = z.shape[0]
        ll = pvc_log_likelihoods(z, self.tau)
        off = ~torch.eye(k, dtype=torch.bool, device=z.device)
        pos_cos = off_diagonal(torch.einsum("aid,bid->abi", z, z)).mean()
        self.stats = {"pos_cos": pos_cos.detach()}
        return ll, off


@OBJECTIVES.register("pvc_geometric")
class PVCGeometric(_PolyView):
    """Geometric poly-view contrastive loss (poly-view Sec. 2.3, Eq. 13; Algorithm 1)."""

    registry_id: ClassVar[str] = "pvc_geometric"
    mi_bound_proven: ClassVar[str | None] = "Theorem 2.2, Eq. 13"
    paper: ClassVar[str] = ("Shidani et al. 2024 (Poly-View Contrastive Learning, ICLR), "
                            "Sec. 2.3 Eqs. 13-14, Algorithm 1 (App. F.3.2), arXiv:2403.05490")
    #: at k = 2 the loss is SimCLR's NT-Xent (fusebench.objectives.equivalence)
    same_loss_as: ClassVar[dict[str, int | str]] = {"infonce_pwe": 2}

    def loss(self, z: Tensor, mask: Tensor | None = None) -> Tensor:
        ll, off = self._loglik(z)
        return -off_diagonal(ll).mean()  # mean over a, b != a, i == mean over (i, a) of the 1/(M-1) average


@OBJECTIVES.register("pvc_arithmetic")
class PVCArithmetic(_PolyView):
    """Arithmetic poly-view contrastive loss (poly-view Sec. 2.3, Eq. 12); see the module docstring.

    ``variant``: ``"paper"`` (Eq. 12), ``"reference_code"`` (the paper's Algorithm 1 pseudocode, per
    sample; no code repository is given in the paper) or ``"public_port"`` (a third-party port of
    Algorithm 1, repository not recorded: batch-mean cross-entropies before the log-sum-exp).
    """

    registry_id: ClassVar[str] = "pvc_arithmetic"
    mi_bound_proven: ClassVar[str | None] = "Theorem 2.2, Eq. 12"
    paper: ClassVar[str] = ("Shidani et al. 2024 (Poly-View Contrastive Learning, ICLR), "
                            "Sec. 2.3 Eqs. 12 and 14, Algorithm 1 (App. F.3.2), arXiv:2403.05490")
    #: at k = 2 the default variant is SimCLR's NT-Xent (fusebench.objectives.equivalence)
    same_loss_as: ClassVar[dict[str, int | str]] = {"infonce_pwe": 2}

    def __init__(self, tau: float = 0.1, variant: str = "paper") -> None:
        super().__init__(tau)
        self.variant = check_variant(variant, self.registry_id, PVC_ARITHMETIC_VARIANTS)

    @classmethod
    def mi_bound_proof(cls, hparams: "dict[str, Any] | None" = None) -> str | None:
        """Theorem 2.2 bounds Eq. 12 only: the pseudocode variants are not it."""
        return cls.mi_bound_proven if (hparams or {}).get("variant", "paper") == "paper" else None

    def loss(self, z: Tensor, mask: Tensor | None = None) -> Tensor:
        k, n, _ = z.shape
        ll, off = self._loglik(z)  # [a, b, i]
        fill = torch.full_like(ll, float("-inf"))
        if self.variant == "paper":  # Eq. 12
            per = math.log(k - 1) - torch.where(off.unsqueeze(-1), ll, fill).logsumexp(1)  # [a, i]
        elif self.variant == "reference_code":  # Algorithm 1 per sample: logsumexp_b of the cross-entropies
            per = torch.where(off.unsqueeze(-1), -ll, fill).logsumexp(1) - math.log(n)  # [a, i]
        else:  # public port: batch-mean cross-entropy per (a, b) first, then logsumexp_b
            ce = -ll.mean(-1)  # [a, b]
            per = torch.where(off, ce, torch.full_like(ce, float("-inf"))).logsumexp(1) - math.log(n)  # [a]
        return per.mean()


@OBJECTIVES.register("suff_stats")
class SufficientStatistics(MultiViewObjective):
    """Sufficient-statistics loss, Q = re-normalised mean of the other views (poly-view Sec. 2.4, Eqs. 22, 24)."""

    registry_id: ClassVar[str] = "suff_stats"
    mi_bound_proven: ClassVar[str | None] = "Theorem 2.4, Eq. 25"
    paper: ClassVar[str] = ("Shidani et al. 2024 (Poly-View Contrastive Learning, ICLR), "
                            "Sec. 2.4 Eqs. 22 and 24, Algorithm 2 (App. F.3.2), arXiv:2403.05490")
    #: at k = 2 Q is the other view and the loss is SimCLR's NT-Xent (fusebench.objectives.equivalence)
    same_loss_as: ClassVar[dict[str, int | str]] = {"infonce_pwe": 2}

    def __init__(self, tau: float = 0.1) -> None:
        super().__init__()
        self.tau = check_tau(tau, self.registry_id)

    def loss(self, z: Tensor, mask: Tensor | None = None) -> Tensor:
        q = F.normalize(z.sum(0, keepdim=True) - z, dim=-1)  # [k, n, d]: mean of the other views, normalised
        t = torch.einsum("aid,gjd->aigj", z, q) / self.tau  # [k, n, k, n]
        neg = _other_sample_lse(t)  # [a, i]
        pos = torch.diagonal(torch.diagonal(t, dim1=1, dim2=3), dim1=0, dim2=1).T  # [a, i] = t[a, i, a, i]
        self.stats = {"pos_cos": (pos.detach() * self.tau).mean()}
        return (torch.logaddexp(pos, neg) - pos).mean()
