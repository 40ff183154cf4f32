"""Multi-Crop: the all-ordered-pairs average of a two-view contrastive loss (``multicrop``).

Shidani et al. 2024, "Poly-View Contrastive Learning" (ICLR 2024, arXiv:2403.05490,
https://arxiv.org/abs/2403.05490), Eq. 1 (Sec. 2.2); the name comes from the multi-crop strategy of
SwAV (Caron et al. 2020, arXiv:2006.09882):

    L_MultiCrop = 1/(M(M-1)) sum_alpha sum_{beta != alpha} L_Pair(x_alpha, x_beta)

with M = k views. L_Pair(x_alpha, x_beta) is the SimCLR term of the anchors in view alpha: for anchor
(i, alpha) the positive is (i, beta) and the candidates are the 2n - 1 other embeddings of the pair
of views {alpha, beta}:

    L_Pair(alpha, beta) = 1/n sum_i [ -s(i alpha, i beta)
                          + log( sum_{j != i} e^{s(i alpha, j alpha)} + sum_j e^{s(i alpha, j beta)} ) ],
    s(u, v) = cos(u, v) / tau.

Because the ordered pair (beta, alpha) supplies the other direction, Eq. 1 with this pair loss equals
the mean over unordered pairs of symmetric NT-Xent, i.e. ``infonce_pwe`` (M3G Eq. 3), for every k;
at k = 2 both are SimCLR's NT-Xent. (The poly-view paper's point, Prop. 2.1, is that this average
keeps the two-view bound while lowering its variance.) The computation here is independent of
``infonce_pwe``: one Gram tensor over all k*n embeddings, anchors indexed by ordered pairs.

Mask: not supported (a mask with False entries is refused; use ``infonce_pwe``).

References:
    - Shidani, Hjelm, Ramapuram, Webb, Dhekane, Busbridge, "Poly-View Contrastive Learning",
      ICLR 2024, arXiv:2403.05490, https://arxiv.org/abs/2403.05490
    - Caron, Misra, Mairal, Goyal, Bojanowski, Joulin, "Unsupervised Learning of Visual Features by
      Contrasting Cluster Assignments" (SwAV, multi-crop), NeurIPS 2020, arXiv:2006.09882,
      https://arxiv.org/abs/2006.09882
    - Chen et al. 2020 (SimCLR), arXiv:2002.05709, https://arxiv.org/abs/2002.05709

Shape:
    views: [k, n, d] (L2-normalised inside) -> scalar.

Example (equal to ``infonce_pwe`` for every k, by a different computation)::

    >>> import torch
    >>> from fusebench.objectives import build
    >>> _ = torch.manual_seed(0)
    >>> views = torch.randn(4, 8, 16)
    >>> torch.allclose(build("multicrop", tau=0.1)(views), build("infonce_pwe", tau=0.1)(views))
    True
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import Tensor

from fusebench.objectives import OBJECTIVES
from fusebench.objectives.base import MultiViewObjective
from fusebench.objectives.infonce import check_tau, masked_logsumexp, off_diagonal

__all__ = ["MultiCrop"]


@OBJECTIVES.register("multicrop")
class MultiCrop(MultiViewObjective):
    """Average over ordered view pairs of the directional SimCLR loss (poly-view Eq. 1)."""

    pairwise_mi_bound = True  # a two-view loss averaged over view pairs (poly-view paper, Prop. 2.1)
    mi_bound_proven = "Proposition 2.1, two-view bound"

    registry_id: ClassVar[str] = "multicrop"
    paper: ClassVar[str] = ("Shidani et al. 2024 (Poly-View Contrastive Learning, ICLR), Eq. 1 (Sec. 2.2), "
                            "arXiv:2403.05490; SimCLR pair loss (arXiv:2002.05709)")
    #: same value and gradient as infonce_pwe for every k (fusebench.objectives.equivalence)
    same_loss_as: ClassVar[dict[str, int | str]] = {"infonce_pwe": "all"}

    def __init__(self, tau: float = 0.1) -> None:
        super().__init__()
        self.tau = check_tau(tau, self.registry_id)

    def loss(self, z: Tensor, mask: Tensor | None = None) -> Tensor:
        k, n, _ = z.shape
        g = torch.einsum("aid,bjd->aibj", z, z) / self.tau  # [k, n, k, n]
        eye_n = torch.eye(n, dtype=torch.bool, device=z.device)
        # same-view candidates of anchor (a, i): (a, j), j != i  -> [k, n]
        same = torch.diagonal(g, dim1=0, dim2=2).permute(2, 0, 1)  # [a, i, j] = g[a, i, a, j]
        lse_same = masked_logsumexp(same, ~eye_n, -1)  # [k, n]
        lse_other = g.logsumexp(-1)  # [a, i, b]: sum_j e^{g[a, i, b, j]}
        pos = torch.diagonal(g, dim1=1, dim2=3)  # [a, b, i] = g[a, i, b, i]
        lse = torch.logaddexp(lse_same.unsqueeze(-1), lse_other)  # [a, i, b]
        terms = lse.permute(0, 2, 1) - pos  # [a, b, i]
        out = off_diagonal(terms).mean()
        self.stats = {"pos_cos": off_diagonal(pos).detach().mean() * self.tau}
        return out
