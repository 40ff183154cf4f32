"""M3G: the multi-marginal matching gap (Piran et al., 2024, Def. 3.1, Prop. 3.2, Eqs. 12-14).

Piran, Klein, Thornton, Cuturi, "Contrasting Multiple Representations with the Multi-Marginal Matching
Gap", ICML 2024 (PMLR 235), arXiv:2405.19532, https://arxiv.org/abs/2405.19532. The paper gives no
code repository for the loss. Two views: the matching gap (``matching_gap``); solver: Sinkhorn
(Cuturi 2013, arXiv:1306.0895), see :mod:`fusebench.objectives.sinkhorn`.

For k views of n samples the loss is the optimality gap of the ground-truth polymatching ``J``
(the diagonal tensor with entries 1/n) for the entropic multi-marginal matching problem::

    M3G(z) = F(J) - min_{P polystochastic} F(P),     F(P) = <P, C(z)> + eps <P, log P>

with the multiway cost tensor ``C[i_1..i_k] = c(z_1[i_1], ..., z_k[i_k])`` of unit vectors:

* ``cost="cv"`` (circular variance, Eq. 12): ``c = 1 - ||(1/k) sum_l z_l||^2
  = (1/k^2) sum_{l<m} ||z_l - z_m||^2``.  (The paper's Algorithm 2 scales the pairwise sum by
  ``(2/(k-1))^2`` and prints ``R^2 = 1 - 2k/(k-1) sum ||z_l - z_m||^2``; both are wrong, the identity
  above is exact on the sphere.)  It is pairwise-separable, so the fast solver applies.
* ``cost="csd"`` (circular standard deviation, Eq. 13): ``c = -log R^2``, ``R^2 = ||mean_l z_l||^2``,
  not pairwise-separable.  ``R^2`` is computed as ``(k + 2 sum_{l<m} z_l.z_m) / k^2`` and clamped
  from below at ``1e-6`` before the log (cost at most ``6 log 10 ~= 13.8``): a tuple whose mean is
  (numerically) the origin gets a finite, large cost and no gradient instead of ``inf``/NaN.

``F(J) = <J, C> - eps log n``.  The paper's printed Eq. 14 (``<J, C> + eps log n - OT``, with
``OT`` the minimum of ``h = F - eps``) is the same gap plus the constant ``2 eps log n + eps``; the
gradient is the same.  We return the exact gap: it is >= 0 and is 0 only when ``J`` is optimal.
``min F`` is the Sinkhorn dual value (see :mod:`fusebench.objectives.sinkhorn`).

Gradient (Prop. 3.2, Danskin): ``d M3G / d C = J - P*``; the solver runs under ``no_grad`` and the
returned scalar is the surrogate ``<J - P*, C(z)>`` (``P*`` detached) shifted by a detached constant
so that its value is the gap.  No back-propagation through Sinkhorn iterations.

Solvers (same iterates, same answer): ``"reference"`` materialises the n^k cost tensor and runs
Algorithm 1 literally; ``"auto"`` (default) never builds the n^k tensor for ``cv`` (contractions of
the pairwise kernels, see the solver module) and falls back to ``"reference"`` for ``csd``.

Shape:
    views: ``[k, n, d]`` (k >= 2) -> scalar.  Cost tensor (reference only): ``[n] * k``.
    Pairwise kernels (auto): ``[k, k, n, n]``.

Example (the gap is >= 0, and both solvers give the same value)::

    >>> import torch
    >>> from fusebench.objectives import build
    >>> _ = torch.manual_seed(0)
    >>> views = torch.randn(3, 8, 16, dtype=torch.float64)
    >>> loss = build("m3g", eps=0.2)
    >>> value = loss(views)
    >>> bool(value >= 0), loss.stats["converged"]
    (True, 1.0)
    >>> torch.allclose(value, build("m3g", eps=0.2, solver="reference")(views))
    True
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import Tensor

from fusebench.objectives import OBJECTIVES
from fusebench.objectives.base import MultiViewObjective
from fusebench.objectives.sinkhorn import check_ot_hparams, dense_sinkhorn, gap_with_danskin_gradient, pairwise_sinkhorn

#: R^2 floor of the csd cost (documented above)
CSD_R2_FLOOR = 1e-6
#: largest n^k the reference solver may materialise
MAX_DENSE_ENTRIES = 2**26


def pair_sqdists(z: Tensor) -> Tensor:
    """``D[l, m, i, j] = ||z_l[i] - z_m[j]||^2 = 2 - 2 z_l[i].z_m[j]`` for unit rows.  [k,n,d] -> [k,k,n,n]."""
    return 2.0 - 2.0 * torch.einsum("lid,mjd->lmij", z, z)


def dense_cost(z: Tensor, cost: str) -> Tensor:
    """The n^k cost tensor ``C[i_1..i_k]`` (differentiable).  [k, n, d] -> [n]*k."""
    k, n, _ = z.shape
    dots = torch.einsum("lid,mjd->lmij", z, z)
    s = z.new_zeros([1] * k)
    for l in range(k):
        for m in range(l + 1, k):
            shape = [1] * k
            shape[l] = n
            shape[m] = n
            s = s + dots[l, m].reshape(shape)
    s = s.expand([n] * k)
    if cost == "cv":  # (1/k^2) sum_{l<m} (2 - 2 z_l.z_m)
        return (k * (k - 1) - 2.0 * s) / k**2
    r2 = (k + 2.0 * s) / k**2  # ||mean||^2
    return -torch.log(r2.clamp_min(CSD_R2_FLOOR))


def diagonal_cost(z: Tensor, cost: str) -> Tensor:
    """``<J, C> = (1/n) sum_i c(z_1[i], ..., z_k[i])`` (differentiable).  [k, n, d] -> scalar."""
    k = z.shape[0]
    dots = torch.einsum("lid,mid->lmi", z, z)
    iu = torch.triu_indices(k, k, offset=1)
    s = dots[iu[0], iu[1]].sum(dim=0)  # [n]
    if cost == "cv":
        return ((k * (k - 1) - 2.0 * s) / k**2).mean()
    return (-torch.log(((k + 2.0 * s) / k**2).clamp_min(CSD_R2_FLOOR))).mean()


@OBJECTIVES.register("m3g")
class M3G(MultiViewObjective):
    """Multi-marginal matching gap (M3G): exact entropic optimality gap of the ground-truth k-tuples."""

    paper: ClassVar[str] = "Piran et al. 2024 (M3G), Def. 3.1, Eqs. 12-14, Prop. 3.2, Alg. 1, arXiv:2405.19532"
    min_views = 2
    max_views = None
    supports_mask = False

    def __init__(self, eps: float = 0.2, cost: str = "cv", tol: float = 1e-3, max_iter: int = 1000,
                 solver: str = "auto") -> None:
        super().__init__()
        check_ot_hparams("m3g", eps, tol, max_iter)
        if cost not in ("cv", "csd"):
            raise ValueError(f"m3g: cost must be 'cv' or 'csd', got {cost!r}")
        if solver not in ("auto", "reference"):
            raise ValueError(f"m3g: solver must be 'auto' or 'reference', got {solver!r}")
        self.eps, self.cost, self.tol, self.max_iter, self.solver = float(eps), cost, float(tol), max_iter, solver

    def extra_repr(self) -> str:
        return f"eps={self.eps}, cost={self.cost!r}, tol={self.tol}, max_iter={self.max_iter}, solver={self.solver!r}"

    def loss(self, z: Tensor, mask: Tensor | None = None) -> Tensor:
        k, n, _ = z.shape
        eps = self.eps
        use_dense = self.solver == "reference" or self.cost == "csd"
        if use_dense and n**k > MAX_DENSE_ENTRIES:
            raise ValueError(
                f"m3g: the reference solver (used for solver='reference' and cost='csd') materialises n^k = "
                f"{n}^{k} entries, more than {MAX_DENSE_ENTRIES}; use cost='cv' with solver='auto' or a smaller batch"
            )
        cost_j = diagonal_cost(z, self.cost)  # <J, C>, differentiable
        if use_dense:
            with torch.no_grad():
                res = dense_sinkhorn(-dense_cost(z.detach(), self.cost) / eps, self.tol, self.max_iter)
            p = res.log_p.exp()  # [n]*k
            c = dense_cost(z, self.cost)
            cost_p = (p * c).sum()  # <P*, C(z)>, P* detached
        else:
            sq = pair_sqdists(z)  # [k, k, n, n], differentiable; the solver sees it detached
            with torch.no_grad():
                res = pairwise_sinkhorn(-sq.detach() / (k**2 * eps), self.tol, self.max_iter)
            iu = torch.triu_indices(k, k, offset=1)
            pm = res.pair_marginals[iu[0], iu[1]]  # [pairs, n, n]
            cost_p = torch.einsum("pij,pij->", pm, sq[iu[0], iu[1]]) / k**2
        out, self.stats = gap_with_danskin_gradient(self.name, res, cost_j, cost_p, eps, n, self.tol, self.max_iter)
        self.stats.update({"reference_solver": float(use_dense), **{k: float(v) for k, v in res.info.items()}})
        return out


__all__ = ["M3G", "dense_cost", "diagonal_cost", "pair_sqdists"]
