"""The reference (log-domain) multi-marginal Sinkhorn solvers shared by ``matching_gap`` and ``m3g``.

Both solve the entropic polymatching problem of the M3G paper (Piran, Klein, Thornton, Cuturi,
"Contrasting Multiple Representations with the Multi-Marginal Matching Gap", ICML 2024,
arXiv:2405.19532, https://arxiv.org/abs/2405.19532; Eqs. 8-11, Algorithm 1), the multi-marginal form
of the Sinkhorn algorithm of Cuturi 2013 ("Sinkhorn Distances: Lightspeed Computation of Optimal
Transport", NeurIPS 2013, arXiv:1306.0895, https://arxiv.org/abs/1306.0895), written with scaled
potentials ``g_l = f_l / eps``::

    min_P  F(P) = <P, C> + eps <P, log P>      over P >= 0 with every marginal m_l(P) = 1/n
    P = exp(g_1 (+) ... (+) g_k + log K),      log K = -C / eps   (Eq. 10)

Algorithm 1 (block coordinate ascent on the dual, one view at a time, views in order 1..k)::

    g_l <- g_l - ( LSE_{axes != l}(g_1 (+) ... (+) g_k + log K) + log n )

(the paper prints ``f_l <- -eps (LSE((+)F - C)/eps) + log n)``; with f_l itself inside (+)F that
line is only right if f_l is left out of the sum, which is what the update above does.)  After each
sweep the stopping test is ``sum_l ||m_l(P) - 1/n||_1 < tol``.

Dual value (used for the optimality gap).  The Lagrangian dual of ``min F`` is
``D(F) = sum_l <f_l, 1/n> - eps * sum exp((+)F - C)/eps - 1)``; evaluated at the Sinkhorn
potentials with ``f_1`` shifted by ``eps`` (which absorbs the ``-1``) it reads::

    min F  >=  D = eps * sum_l mean(g_l) - eps * (mass - 1),    mass = sum_{i_1..i_k} P

with equality at convergence (mass = 1, marginals 1/n).  Weak duality makes ``D`` a lower bound of
``min F`` for any potentials, so a gap computed with it is never below the exact gap.

Three solvers, one sequence of iterates. This module is the reference: :func:`dense_sinkhorn`
(``solver="reference"``, and ``matching_gap``) materialises the n^k tensor ``log K`` and runs Algorithm 1
literally (memory and time O(n^k) per marginal, with one exp per entry; off the CPU its stopping errors are
read once per block of sweeps, the same sweeps and answer), and the gap and its Danskin gradient are computed
from its result. Behind it, for M3G's pairwise-separable cost, two fast paths take the same
iterates without the n^k tensor: :func:`~fusebench.objectives.sinkhorn_scaling.scaling_sinkhorn`
(``solver="auto"``, M3G's default; the scalings ``u_l = exp(g_l)``, GEMMs and pre-bound buffers; on CUDA its
sweeps run in blocks, :mod:`fusebench.objectives.sinkhorn_blocked`) and its log-domain fallback
:func:`~fusebench.objectives.sinkhorn_pairwise.pairwise_sinkhorn` (:mod:`fusebench.objectives.sinkhorn_pairwise`:
the block contractions, stated there with the reason and the measured gain).

This module holds the result type (:class:`SinkhornResult`), the hyperparameter check, the dual value,
the reference solver (:func:`dense_sinkhorn`) and the matching-gap value, Danskin gradient and diagnostics of
the losses (:func:`gap_with_danskin_gradient`, :func:`gap_stats`): with :mod:`fusebench.objectives.m3g`'s
equation and cost tensor, the whole reference computation of M3G.

Shape:
    log_kernel: ``[n] * k``; result potentials ``log_u``: ``[k, n]``; ``log_p``: ``[n] * k``. (The fast paths'
    ``pair_marginals``: ``[k, k, n, n]`` (l < m filled), or the Gram layout ``[kn, kn]``.)

Example (k = 3 views of n = 4 points: every marginal of the coupling is 1/n at convergence)::

    >>> import torch
    >>> from fusebench.objectives.sinkhorn import dense_sinkhorn
    >>> _ = torch.manual_seed(0)
    >>> cost = torch.rand(4, 4, 4, dtype=torch.float64)
    >>> res = dense_sinkhorn(-cost / 0.5, tol=1e-9, max_iter=1000)
    >>> res.converged, res.log_p.shape
    (True, torch.Size([4, 4, 4]))
    >>> p = res.log_p.exp()
    >>> quarter = torch.full((4,), 0.25, dtype=torch.float64)
    >>> [torch.allclose(p.sum(dim=other), quarter) for other in ((1, 2), (0, 2), (0, 1))]
    [True, True, True]
"""

from __future__ import annotations

import math
import numbers
import warnings
from dataclasses import dataclass, field

import torch
from torch import Tensor

__all__ = ["SinkhornResult", "MIN_EPS", "check_ot_hparams", "DENSE_BLOCK_SWEEPS", "dense_blocked_by_default",
           "dense_sinkhorn", "dual_value", "marginal_l1", "outer_sum", "gap_with_danskin_gradient", "gap_stats"]


@dataclass
class SinkhornResult:
    """Output of a solver (all tensors detached)."""

    log_u: Tensor  # [k, n] scaled potentials g_l = f_l / eps
    iterations: int  # completed sweeps over the k views
    marginal_error: float  # sum_l ||m_l(P) - 1/n||_1 at the returned potentials
    mass: float | Tensor  # sum of P at the returned potentials (a 0-dim float64 tensor from a blocked dense solve)
    converged: bool
    log_p: Tensor | None = None  # [n]*k, dense solver only
    pair_marginals: Tensor | None = None  # [k, k, n, n] (entries l < m) or [kn, kn]; pairwise solvers only
    info: dict[str, float] = field(default_factory=dict)


#: the smallest ``eps`` ``m3g`` and ``matching_gap`` take (:func:`check_ot_hparams`). Every solver keeps log-domain
#: potentials of size up to ``max C / eps`` (C <= 2 for m3g's ``cv`` and matching_gap's ``dot``, <= 4 for ``sqeuclid``,
#: <= 13.8 for m3g's ``csd``) that cancel to O(1) exponents, and float32 (the precision the loss computes in during
#: training, whatever the encoders' precision) resolves them only to ``(C / eps) * 6e-8``. Measured against the same
#: solve in float64 (300 sweeps, random views): m3g (k = 3, 4; n = 6, 8; both costs and solvers): the float32 plan's
#: mass was off by up to 2.2e-3 at eps = 1e-5, 1.5e-2 at 1e-6, 0.14 at 1e-7, 5.0 at 1e-8, 8.9e6 at 1e-9, and the
#: loss inf at 1e-10; matching_gap (n = 6, 16, 64; both costs): 2.4e-3 at 1e-5, 2.8e-2 at 1e-6, 0.16 at 1e-7, 23 at
#: 1e-8, 79 at 1e-10 (the plan's entries off by up to 1 from 1e-8). The Danskin gradient ``J - P`` is off by as
#: much: matching_gap on views with a unique optimum (float64 converges in one sweep at any eps) converges in float32
#: with the gradient within 6e-6 of float64's at 1e-5, and stops at max_iter with it off by 2.4e-4 at 1e-6, 1.5e-3 at
#: 1e-7, 0.49 at 1e-9. Below it the objectives refuse ``eps`` when built (no dtype is known there; float64 views are
#: refused too: at such eps no Sinkhorn converges in any practical number of sweeps on views without a clear optimum)
MIN_EPS = 1e-5


def check_ot_hparams(who: str, eps: float, tol: float, max_iter: int) -> tuple[float, float, int]:
    """Shared validation of the entropic-OT hyperparameters (ValueError naming the loss and the setting).

    Any real number (``numbers.Real``: a Python or numpy float / int, not a bool) is taken for ``eps`` and
    ``tol``, any integer (``numbers.Integral``: Python or numpy, not a bool) for ``max_iter``, as ``tau``
    of the contrastive losses is (:func:`fusebench.objectives.infonce.check_tau`); returns them as
    ``(float, float, int)``. ``eps`` below :data:`MIN_EPS` is refused (the float32 solve loses the plan there;
    the objectives call this in ``__init__`` and the runner builds them before any cell, so a run stops there)."""
    out = []
    for name, val in (("eps", eps), ("tol", tol)):
        num = None
        if not isinstance(val, bool) and isinstance(val, numbers.Real):
            try:
                num = float(val)
            except OverflowError:  # an integer too large for a float
                num = math.inf
        if num is None or not math.isfinite(num) or num <= 0:
            raise ValueError(f"{who}: {name} must be a finite number > 0, got {val!r}")
        out.append(num)
    if isinstance(max_iter, bool) or not isinstance(max_iter, numbers.Integral) or max_iter < 1:
        raise ValueError(f"{who}: max_iter must be an integer >= 1, got {max_iter!r}")
    if out[0] < MIN_EPS:
        raise ValueError(f"{who}: eps = {eps} is below {MIN_EPS:g}, the smallest eps the float32 Sinkhorn solver "
                         f"honours (its log-domain potentials, of size cost / eps, lose the precision the plan needs: "
                         f"measured against a float64 solve, the plan's mass was off by about 15% at eps 1e-7); use "
                         f"eps >= {MIN_EPS:g}")
    return out[0], out[1], int(max_iter)


def outer_sum(vectors: Tensor) -> Tensor:
    """``(+) g``: ``[k, n] -> [n]*k`` with entry (i_1..i_k) = sum_l vectors[l, i_l]."""
    k, n = vectors.shape
    out = vectors.new_zeros([1] * k)
    for l in range(k):
        shape = [1] * k
        shape[l] = n
        out = out + vectors[l].reshape(shape)
    return out


def dual_value(log_u: Tensor, mass: float | Tensor, eps: float) -> Tensor:
    """``eps * sum_l mean(g_l) - eps * (mass - 1)``, a lower bound of ``min F`` (exact at convergence).

    ``mass`` a float, or a 0-dim float64 tensor (not read): ``eps * (mass - 1)`` is then formed in float64 and
    rounded to ``log_u``'s dtype, the arithmetic the float takes (a Python number in a tensor operation)."""
    if isinstance(mass, Tensor):
        return eps * log_u.mean(dim=1).sum() - (eps * (mass.double() - 1.0)).to(log_u.dtype)
    return eps * log_u.mean(dim=1).sum() - eps * (mass - 1.0)


def marginal_l1(log_marg: Tensor, n: int) -> float:
    """``|| exp(log_marg) - 1/n ||_1``: how far one marginal of the plan is from the uniform one (the solvers'
    stopping error; a host read)."""
    return float((log_marg.exp() - 1.0 / n).abs().sum())


# ----------------------------------------------------------------------------------------------
# reference: Algorithm 1 on the materialised tensor
# ----------------------------------------------------------------------------------------------
#: most sweeps :func:`dense_sinkhorn` runs between two reads of the stopping errors in its blocked mode
DENSE_BLOCK_SWEEPS = 8


def dense_blocked_by_default(device: torch.device) -> bool:
    """Whether :func:`dense_sinkhorn` runs blocked (one host read per block of sweeps) on ``device`` unless told:
    off the CPU yes (a read there waits for the device), on the CPU no (the per-sweep loop waits for nothing)."""
    return device.type != "cpu"


@torch.no_grad()
def dense_sinkhorn(log_kernel: Tensor, tol: float, max_iter: int, blocked: bool | None = None,
                   block: int | None = None) -> SinkhornResult:
    """Literal log-domain multi-marginal Sinkhorn (Algorithm 1) on ``log_kernel = -C / eps`` [n]*k.

    ``blocked`` (default :func:`dense_blocked_by_default`: off the CPU): run up to ``block`` sweeps
    (:data:`DENSE_BLOCK_SWEEPS`) with every sweep's potentials ``[block, k, n]`` and per-view marginal errors
    ``[block, k]`` kept on the device, read the errors once per block, and stop at the first sweep the per-sweep
    loop would have stopped at (its error summed the same way: the Python sum of the per-view values in view
    order), whose potentials are restored. Iterations, error, convergence, ``log_u``, ``log_p`` and the mass are
    the per-sweep loop's, bit for bit (``tests/test_matching_gap_blocked.py``); the mass is then a 0-dim float64
    tensor on the device (not read), the per-sweep loop's is a float.
    """
    if blocked is not None and not isinstance(blocked, bool):
        raise ValueError(f"dense_sinkhorn: blocked must be True, False or None, got {blocked!r}")
    if block is not None and (isinstance(block, bool) or not isinstance(block, int) or block < 1):
        raise ValueError(f"dense_sinkhorn: block must be an integer >= 1 (sweeps per block), got {block!r}")
    if dense_blocked_by_default(log_kernel.device) if blocked is None else blocked:
        return _dense_sinkhorn_blocked(log_kernel, tol, max_iter, DENSE_BLOCK_SWEEPS if block is None else block)
    k = log_kernel.dim()
    n = log_kernel.shape[0]
    log_n = math.log(n)
    g = log_kernel.new_zeros(k, n)
    err = float("inf")
    it = 0
    log_p = log_kernel
    while True:
        it += 1
        g, log_p = _dense_sweep(log_kernel, g, log_n)
        err = sum(
            marginal_l1(torch.logsumexp(log_p, dim=[a for a in range(k) if a != l]), n) for l in range(k)
        )
        if err < tol or it >= max_iter:
            break
    mass = float(torch.logsumexp(log_p.reshape(-1), dim=0).exp())
    return SinkhornResult(log_u=g, iterations=it, marginal_error=err, mass=mass, converged=err < tol,
                          log_p=log_p)


def _dense_sweep(log_kernel: Tensor, g: Tensor, log_n: float) -> tuple[Tensor, Tensor]:
    """One sweep of Algorithm 1 over the views in order (``g`` [k, n] updated in place); returns ``g`` and
    ``log_p = log K + (+) g`` at the updated potentials."""
    k = log_kernel.dim()
    for l in range(k):
        log_p = log_kernel + outer_sum(g)
        other = [a for a in range(k) if a != l]
        g[l] = g[l] - (torch.logsumexp(log_p, dim=other) + log_n)
    return g, log_kernel + outer_sum(g)


def _dense_sinkhorn_blocked(log_kernel: Tensor, tol: float, max_iter: int, block: int) -> SinkhornResult:
    """:func:`dense_sinkhorn`'s blocked mode: the same sweeps, the stopping errors read once per block."""
    k = log_kernel.dim()
    n = log_kernel.shape[0]
    log_n = math.log(n)
    g = log_kernel.new_zeros(k, n)
    hist = log_kernel.new_empty(block, k, n)  # [B, k, n]: the potentials at the end of each sweep of a block
    errs = log_kernel.new_empty(block, k)  # [B, k]: each sweep's per-view marginal L1 errors (as marginal_l1)
    done = 0
    while True:
        b = min(block, max_iter - done)  # never past max_iter
        for j in range(b):  # queued back to back: no read, no branch on the device's values
            g, log_p = _dense_sweep(log_kernel, g, log_n)
            for l in range(k):
                errs[j, l] = (torch.logsumexp(log_p, dim=[a for a in range(k) if a != l]).exp() - 1.0 / n).abs().sum()
            hist[j] = g
        vals = errs[:b].tolist()  # the one read of this block
        for j in range(b):
            it = done + j + 1
            err = sum(vals[j])  # the per-sweep loop's sum: Python floats, views in order
            if err < tol or it >= max_iter:
                g = hist[j].clone()
                log_p = log_kernel + outer_sum(g)
                mass = torch.logsumexp(log_p.reshape(-1), dim=0).exp().double()
                return SinkhornResult(log_u=g, iterations=it, marginal_error=err, mass=mass, converged=err < tol,
                                      log_p=log_p)
        done += b


def gap_with_danskin_gradient(who: str, res, cost_j: Tensor, cost_p: Tensor, eps: float, n: int, tol: float,
                              max_iter: int) -> tuple[Tensor, dict[str, float]]:
    """The matching-gap value and gradient shared by ``matching_gap`` and ``m3g`` (reference solver).

    Value: F(J) - min F = <J, C> - eps log n - (Sinkhorn dual value). Gradient (Danskin, M3G Prop. 3.2):
    that of the surrogate <J, C(z)> - <P*, C(z)> with P* detached; the returned scalar is the surrogate
    shifted by a detached constant. Also returns the solver diagnostics and warns when ``max_iter`` was hit.

    The diagnostics are floats after a per-sweep solve (a float ``res.mass``: the CPU), and 0-dim float64
    tensors, not read, after a blocked one (a tensor ``res.mass``: off the CPU; ``float()`` of each gives the
    float the per-sweep path would hold for the same values).
    """
    with torch.no_grad():
        dual = dual_value(res.log_u, res.mass, eps)
        gap = cost_j.detach() - eps * math.log(n) - dual
    surrogate = cost_j - cost_p
    out = surrogate + (gap - surrogate).detach()
    values = (cost_j.detach(), cost_p.detach(), dual, gap)
    if isinstance(res.mass, Tensor):  # kept on the device until read (objectives/base.py: ``stats``)
        cj, cp, d, gp = (v.double() for v in values)
    else:
        cj, cp, d, gp = (float(v) for v in values)
    stats = gap_stats(who, res, cj, cp, d, gp, eps, tol, max_iter, stacklevel=5)
    return out, stats


def gap_stats(who: str, res, cost_j: float | Tensor, cost_p: float | Tensor, dual: float | Tensor,
              gap: float | Tensor, eps: float, tol: float, max_iter: int,
              stacklevel: int = 4) -> dict[str, float | Tensor]:
    """The diagnostics of a matching-gap call (``module.stats``); warns when ``max_iter`` was hit. The values
    given as 0-dim tensors (and a tensor ``res.mass``) stay tensors, on their device."""
    stats = {
        "iterations": float(res.iterations),
        "marginal_error": float(res.marginal_error),
        "converged": float(res.converged),
        "cost_J": cost_j,
        "cost_P": cost_p,
        "plogp": (dual - cost_p) / eps,  # <P, log P> implied by the dual value
        "dual_value": dual,
        "gap": gap,
        "mass": res.mass if isinstance(res.mass, Tensor) else float(res.mass),
    }
    if not res.converged:
        warnings.warn(
            f"{who}: Sinkhorn hit max_iter={max_iter} with marginal error {res.marginal_error:.3g} > tol={tol} "
            f"(eps={eps}); the gap and its gradient are approximate. Raise max_iter or eps.",
            RuntimeWarning,
            stacklevel=stacklevel,
        )
    return stats
