"""Matching gap: optimality gap of the ground-truth pairing for entropic optimal matching.

Paper: "Self-Supervised Learning with the Matching Gap", a submission to ICLR 2024, OpenReview
https://openreview.net/forum?id=P50qJuu4IY (Sec. 2.2 Eq. 3; Sec. 3 Eqs. 6-8). The text we follow is the anonymous
double-blind version: it names no authors, arXiv id or code repository, so none is cited here.
Sinkhorn: Cuturi 2013, "Sinkhorn Distances: Lightspeed Computation of Optimal Transport", NeurIPS 2013,
arXiv:1306.0895, https://arxiv.org/abs/1306.0895. ``m3g`` (Piran et al. 2024, arXiv:2405.19532) is the
same gap for k views.

For two views ``x = z_1``, ``y = z_2`` of n samples (unit vectors) with cost matrix
``C[i, j] = c(x_i, y_j)``::

    L_MG = t(C, J_n) - min_{P bistochastic} t(C, P),   t(C, P) = <P, C> + eps <P, log P - 1>

with ``J_n = I_n / n``.  On the bistochastic polytope ``<P, 1> = 1``, so the ``-1`` cancels and this is
the exact gap ``F(J) - min F`` with ``F(P) = <P, C> + eps <P, log P>``, the same definition as
``m3g`` with two marginals: ``F(J) = mean_i C_ii - eps log n``; ``min F`` is the dual value of the
log-domain Sinkhorn solver (run until ``||P 1 - 1/n||_1 + ||P^T 1 - 1/n||_1 < tol``, the paper's
threshold 1e-3 by default).  The gap is >= 0 and convex in ``C`` (paper, Prop. 1).  Off the CPU the solver
reads the device once per block of sweeps (``dense_sinkhorn``'s blocked mode: the same sweeps and answer) and
``stats`` holds 0-dim float64 tensors, read only when a caller reads them.

Costs: ``cost="dot"``: ``c = 1 - x.y``; ``cost="sqeuclid"``: ``c = ||x - y||^2 = 2 - 2 x.y``.

``eps`` below ``sinkhorn.MIN_EPS`` (1e-5) is refused at construction (``check_ot_hparams``): the float32
log-domain potentials, of size cost / eps, lose the plan there (measured: docs/objectives-ot.md).

Gradient (Danskin, Sec. 3): ``d L_MG / d C = J_n - P*``; Sinkhorn runs under ``no_grad`` and the
returned scalar is ``<J_n - P*, C(z)>`` plus a detached constant giving the exact value.

Identity: ``m3g(cost="cv", eps)`` at k = 2 equals ``matching_gap(cost="dot", eps=2 eps) / 2`` (c_cv at
k = 2 is ``(1 - x.y) / 2``).

Shape:
    views: ``[2, n, d]`` -> scalar; cost and coupling: ``[n, n]``.

Example (the gap is >= 0; the M3G identity above)::

    >>> import torch
    >>> from fusebench.objectives import build
    >>> _ = torch.manual_seed(0)
    >>> views = torch.randn(2, 8, 16, dtype=torch.float64)
    >>> loss = build("matching_gap", eps=0.5, cost="sqeuclid")
    >>> value = loss(views)
    >>> bool(value >= 0), loss.stats["converged"]
    (True, 1.0)
    >>> mg = build("matching_gap", eps=0.4, cost="dot", tol=1e-9)(views)
    >>> m3g = build("m3g", eps=0.2, cost="cv", tol=1e-9)(views)
    >>> torch.allclose(m3g, mg / 2)
    True
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import Tensor

from fusebench.objectives import OBJECTIVES
from fusebench.objectives.base import MultiViewObjective
from fusebench.objectives.sinkhorn import check_ot_hparams, dense_sinkhorn, gap_with_danskin_gradient
from fusebench.objectives.solver_tally import SolverTally


@OBJECTIVES.register("matching_gap")
class MatchingGap(MultiViewObjective):
    """Two-view matching gap: exact entropic optimality gap of the identity pairing (Danskin gradient)."""

    paper: ClassVar[str] = ('"Self-Supervised Learning with the Matching Gap" (ICLR 2024 submission), Sec. 3 '
                            "Eq. 6 (Eqs. 3-8), https://openreview.net/forum?id=P50qJuu4IY")
    min_views = 2
    max_views = 2
    supports_mask = False

    def __init__(self, eps: float = 0.5, cost: str = "sqeuclid", tol: float = 1e-3, max_iter: int = 1000) -> None:
        super().__init__()
        eps, tol, max_iter = check_ot_hparams("matching_gap", eps, tol, max_iter)
        if cost not in ("dot", "sqeuclid"):
            raise ValueError(f"matching_gap: cost must be 'dot' or 'sqeuclid', got {cost!r}")
        self.eps, self.cost, self.tol, self.max_iter = eps, cost, tol, max_iter
        self.solver_tally = SolverTally()  # the calls whose Sinkhorn solve stopped at max_iter (solver_tally.py)

    def extra_repr(self) -> str:
        return f"eps={self.eps}, cost={self.cost!r}, tol={self.tol}, max_iter={self.max_iter}"

    def cost_matrix(self, x: Tensor, y: Tensor) -> Tensor:
        """``C[i, j] = c(x_i, y_j)`` for unit rows.  [n, d], [n, d] -> [n, n]."""
        sim = torch.einsum("id,jd->ij", x, y)
        return 1.0 - sim if self.cost == "dot" else 2.0 - 2.0 * sim

    def loss(self, z: Tensor, mask: Tensor | None = None) -> Tensor:
        n = z.shape[1]
        eps = self.eps
        c = self.cost_matrix(z[0], z[1])  # [n, n], differentiable
        with torch.no_grad():
            res = dense_sinkhorn(-c.detach() / eps, self.tol, self.max_iter)
            p = res.log_p.exp()  # [n, n]
        cost_j = torch.diagonal(c).mean()  # <J_n, C>
        cost_p = (p * c).sum()  # <P*, C>, P* detached
        out, self.stats = gap_with_danskin_gradient(self.name, res, cost_j, cost_p, eps, n, self.tol, self.max_iter)
        self.solver_tally.add(self.stats)
        return out


__all__ = ["MatchingGap"]
