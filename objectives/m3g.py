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
Algorithm 1 literally; ``"auto"`` (default) for ``cv`` runs it on the scalings ``exp(f_l / eps)``
through contractions of the pairwise kernels (:func:`~fusebench.objectives.sinkhorn_scaling.scaling_sinkhorn`:
a kernel of n^k entries only when n^k <= 2^14, never the cost tensor with gradients), handing over to
the log-domain :func:`~fusebench.objectives.sinkhorn_pairwise.pairwise_sinkhorn` when the scalings could leave
the dtype's range (small eps in float32), and falls back to ``"reference"`` for ``csd``.  ``auto``
works on the Gram matrix ``G = Z Z^T`` of the stacked views: ``||z_l[i] - z_m[j]||^2 = 2 - 2 G``, and
the Danskin surrogate is the single inner product ``<-2 W, G>``, ``W = (J - Pi) / k^2`` on the pairs.
``backend`` (``auto`` solver, ``cv`` cost): ``"auto"`` runs small CPU problems (n^k <= 2^16) as one
compiled call (:mod:`fusebench.objectives.m3g_compiled`, numba, extra ``fast``; the same iterates in
float64) and the rest eagerly; ``"eager"`` never compiles; ``"compiled"`` always does.
Cost declaration: :meth:`M3G.memory_bytes` (the runner checks it against a memory budget before any cell
starts); the module is longer than ~450 lines because it keeps that declaration beside the paths it describes.

Shape:
    views: ``[k, n, d]`` (k >= 2) -> scalar.  Cost tensor (reference only): ``[n] * k``.
    Gram matrix and pairwise marginals (auto): ``[kn, kn]`` (block (l, m) for views l, m).

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

import importlib
import math
import warnings
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from fusebench.objectives import OBJECTIVES
from fusebench.objectives.base import MultiViewObjective
from fusebench.objectives import sinkhorn_scaling
from fusebench.objectives.sinkhorn import check_ot_hparams, dense_sinkhorn, gap_stats, gap_with_danskin_gradient
from fusebench.objectives.sinkhorn_scaling import NonFiniteKernels, scaling_sinkhorn
from fusebench.objectives.solver_tally import SolverTally

#: R^2 floor of the csd cost (documented above)
CSD_R2_FLOOR = 1e-6
#: largest n^k the reference solver may materialise
MAX_DENSE_ENTRIES = 2**26
#: ``backend`` of the ``cv`` / ``auto`` fast path: ``"auto"`` runs a small CPU problem (n^k <=
#: ``COMPILED_MAX_ENTRIES``) as one compiled call (:mod:`fusebench.objectives.m3g_compiled`, needs numba,
#: extra ``fast``) and everything else eagerly; ``"eager"`` never compiles; ``"compiled"`` always
#: uses the compiled call (CPU, n^k <= ``MAX_DENSE_ENTRIES``; an error without numba)
BACKENDS = ("auto", "eager", "compiled")
#: largest n^k for which ``backend="auto"`` uses the compiled call (measured: ``fusebench bench
#: objectives --crossover``, docs/benchmarks-objectives.md)
COMPILED_MAX_ENTRIES = 2**16
#: a loss call whose declared memory (:meth:`M3G.memory_bytes`) reaches this many bytes is checked against the
#: memory this process can still get (:func:`fusebench.machine.memory_budget`) before it allocates anything
#: (:meth:`M3G.check_memory`)
MEMORY_CHECK_FROM = 2**30


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
    iu = torch.triu_indices(k, k, offset=1, device=z.device)  # made on the device: no host-to-device copy a call
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
                 solver: str = "auto", backend: str = "auto") -> None:
        super().__init__()
        eps, tol, max_iter = check_ot_hparams("m3g", eps, tol, max_iter)  # eps >= sinkhorn.MIN_EPS: see there
        if cost not in ("cv", "csd"):
            raise ValueError(f"m3g: cost must be 'cv' or 'csd', got {cost!r}")
        if solver not in ("auto", "reference"):
            raise ValueError(f"m3g: solver must be 'auto' or 'reference', got {solver!r}")
        if backend not in BACKENDS:
            raise ValueError(f"m3g: backend must be one of {', '.join(map(repr, BACKENDS))}, got {backend!r}")
        self.eps, self.cost, self.tol, self.max_iter, self.solver = eps, cost, tol, max_iter, solver
        self.backend = backend
        self.solver_tally = SolverTally()  # the calls whose Sinkhorn solve stopped at max_iter (solver_tally.py)

    def extra_repr(self) -> str:
        return (f"eps={self.eps}, cost={self.cost!r}, tol={self.tol}, max_iter={self.max_iter}, "
                f"solver={self.solver!r}, backend={self.backend!r}")

    def memory_bytes(self, n: int, k: int, dtype: torch.dtype = torch.float32, d: int = 128) -> int:
        """The cost declaration: peak bytes one loss call (forward and backward) allocates on ``k`` views of
        ``n`` samples of width ``d`` in ``dtype`` (half precision is computed in float32), from the buffers of
        the solver path this configuration takes (:mod:`fusebench.objectives.m3g_memory`). Raises the
        ValueError the call itself would raise when the reference solver would materialise more than
        ``MAX_DENSE_ENTRIES`` entries. The runner checks it against a memory budget before any cell starts
        (:mod:`fusebench.components.memory_budget`)."""
        from fusebench.objectives import m3g_memory

        itemsize = torch.empty((), dtype=torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype).element_size()
        if self.solver == "reference" or self.cost == "csd":
            if n**k > MAX_DENSE_ENTRIES:
                raise ValueError(f"m3g: the reference solver (used for solver='reference' and cost='csd') "
                                 f"materialises n^k = {n}^{k} entries, more than {MAX_DENSE_ENTRIES}")
            return m3g_memory.dense_bytes(k, n, d, itemsize, self.cost == "csd")
        out = itemsize * m3g_memory.auto_entries(k, n, d)
        if self.backend != "eager" and n**k <= (MAX_DENSE_ENTRIES if self.backend == "compiled" else COMPILED_MAX_ENTRIES):
            out = max(out, m3g_memory.compiled_bytes(k, n, d))
        return int(out)

    @staticmethod
    def joint_entries(n: int, k: int) -> int:
        """The work declaration: the entries of the joint plan one loss call on ``k`` views of ``n`` samples solves
        over, n^k (every Sinkhorn sweep visits each, stored or not). The sweep's memory refusal uses it to show
        what a suggested micro-batch costs per step (:mod:`fusebench.components.memory_budget`)."""
        return n**k

    def check_memory(self, views: Tensor) -> None:
        """Refuse (ValueError) a call on ``views`` [k, n, d] whose declared memory exceeds what this process can
        still get (``$FUSEBENCH_MEMORY_BUDGET_GB`` when set): its n^k cost would otherwise allocate until the
        machine runs out. The sweep refuses a configuration over half of that before any cell starts
        (:mod:`fusebench.components.memory_budget`); this is the backstop for a direct call. Calls declared below
        :data:`MEMORY_CHECK_FROM` bytes read nothing (no file, no device query); larger ones read the figure once per
        device."""
        from fusebench.machine import memory_budget

        k, n, d = views.shape
        need = self.memory_bytes(n, k, views.dtype, d)
        if need < MEMORY_CHECK_FROM:
            return
        # read once per device and module (a backstop: not a device query every step of a run of large calls)
        known = self.__dict__.setdefault("_memory_budgets", {})
        if views.device not in known:
            known[views.device] = memory_budget(str(views.device), fraction=1.0)
        budget, source = known[views.device]
        if need > budget:
            raise ValueError(f"m3g: one loss call on k = {k} views of n = {n} samples (d = {d}) needs about "
                             f"{need / 2**30:.1f} GiB (its cost grows as n^k), more than the {budget / 2**30:.1f} GiB "
                             f"it can get ({source}); call it on micro-batches (a run's "
                             f"pretrain.per_objective.m3g.micro_batch) or with fewer views")

    def loss(self, z: Tensor, mask: Tensor | None = None) -> Tensor:
        k, n, _ = z.shape
        eps = self.eps
        use_dense = self.solver == "reference" or self.cost == "csd"
        if use_dense and n**k > MAX_DENSE_ENTRIES:
            raise ValueError(
                f"m3g: the reference solver (used for solver='reference' and cost='csd') materialises n^k = "
                f"{n}^{k} entries, more than {MAX_DENSE_ENTRIES}; use cost='cv' with solver='auto' or a smaller batch"
            )
        if not use_dense:
            return self._loss_pairwise(z)
        cost_j = diagonal_cost(z, self.cost)  # <J, C>, differentiable
        with torch.no_grad():
            res = dense_sinkhorn(-dense_cost(z.detach(), self.cost) / eps, self.tol, self.max_iter)
        p = res.log_p.exp()  # [n]*k
        c = dense_cost(z, self.cost)
        cost_p = (p * c).sum()  # <P*, C(z)>, P* detached
        out, self.stats = gap_with_danskin_gradient(self.name, res, cost_j, cost_p, eps, n, self.tol, self.max_iter)
        self.stats.update({"reference_solver": 1.0, **{k: float(v) for k, v in res.info.items()}})
        self.solver_tally.add(self.stats)
        return out

    def forward(self, views: Tensor, mask: Tensor | None = None) -> Tensor:
        self.check_views(views, finite=False)  # the shape first: then what it would allocate
        self.check_memory(views)
        if self.solver != "auto" or self.cost != "cv":
            return super().forward(views, mask)
        # the fast path: normalisation, Gram matrix, solve and Danskin gradient in one autograd node; NaN / Inf
        # in the views are caught there (a non-finite Gram matrix), without a separate scan of the views (the shape
        # was checked above)
        self.check_mask(mask, views)
        object.__setattr__(self, "stats", {})  # a plain dict (see _cv_gap_compiled)
        dtype = self.compute_dtype(views)
        # (the base class's wrapper has already upcast half precision and turned autocast off; the loss is
        # returned in the compute dtype)
        return _CvGap.apply(views if views.dtype == dtype else views.to(dtype), self, True, self._compiled(views))

    def _loss_pairwise(self, z: Tensor) -> Tensor:
        """``cost="cv"``, ``solver="auto"`` on unit vectors ``z`` (see :class:`_CvGap`)."""
        return _CvGap.apply(z, self, False, self._compiled(z))

    def _compiled(self, x: Tensor):
        """:mod:`~fusebench.objectives.m3g_compiled` when this call runs compiled (see :data:`BACKENDS`), else None."""
        if self.backend == "eager":
            return None
        k, n, _ = x.shape
        if self.backend == "auto":
            if n**k > COMPILED_MAX_ENTRIES or x.device.type != "cpu" or x.dtype not in _COMPILED_DTYPES:
                return None
            return _COMPILED[0] if _COMPILED else compiled_module()
        if x.device.type != "cpu" or x.dtype not in _COMPILED_DTYPES:
            raise ValueError(f"m3g: backend='compiled' takes float16 / bfloat16 / float32 / float64 views on the CPU; "
                             f"got {x.dtype} on {x.device}")
        if n**k > MAX_DENSE_ENTRIES:
            raise ValueError(f"m3g: backend='compiled' materialises n^k = {n}^{k} entries, more than "
                             f"{MAX_DENSE_ENTRIES}; use backend='auto' or a smaller batch")
        mod = compiled_module()
        if mod is None:
            raise ImportError("m3g: backend='compiled' needs a working numba: pip install 'fusebench[fast]' "
                              "(or pip install numba)")
        return mod

    def _cv_gap_compiled(self, mod, x: Tensor, normalise: bool, need_grad: bool) -> tuple[float, Tensor | None, int]:
        """``(gap, d gap / d x or None, -1)`` from the compiled call (the gradient only if ``need_grad``), or
        ``(nan, None, sweep)`` when its range guard handed the solve back after ``sweep`` sweeps, or
        ``(nan, None, -2)`` when the call failed (``backend="auto"`` only; warned once); in both cases the
        caller runs the eager path. Raises :class:`_NonFinite` like :meth:`_cv_gap`. Called inside
        :meth:`_CvGap.forward` (no autograd there)."""
        xv = x.detach().numpy()
        if not xv.flags.c_contiguous:
            xv = np.ascontiguousarray(xv)
        k, n, d = xv.shape
        mode = mod.NO_GRAD if not need_grad else mod.GRAD if (k * n) ** 2 * d <= mod.GRAD_MAX_MACS else mod.SYM
        try:
            status, gap, grad, it, err, mass, cost_j, cost_p, dual, fallback_sweep, sym, z, norms = mod.cv_gap(
                xv, self.eps, self.tol, self.max_iter, normalise, mode, sinkhorn_scaling.LOG_MARGIN,
                sinkhorn_scaling.RANGE_CHECK_EVERY)
        except Exception as exc:  # numba could not compile here (a broken installation): auto goes on eagerly
            if self.backend != "auto":
                raise
            warnings.warn(f"m3g: the compiled backend failed ({type(exc).__name__}: {exc}); backend='auto' uses the "
                          "eager path from now on in this process", RuntimeWarning, stacklevel=7)
            _COMPILED[:] = [None]
            return math.nan, None, -2
        if status == mod.NON_FINITE:
            raise _NonFinite
        if status == mod.FALLBACK:
            return math.nan, None, fallback_sweep
        res = _Solve(iterations=it, marginal_error=err, mass=mass, converged=err < self.tol)
        stats = gap_stats(self.name, res, cost_j, cost_p, dual, gap, self.eps, self.tol, self.max_iter, stacklevel=8)
        stats.update(reference_solver=0.0, scaling_domain=1.0, dense_stages=1.0, compiled=1.0)
        object.__setattr__(self, "stats", stats)  # a plain dict; nn.Module.__setattr__'s checks cost more than a solve
        self.solver_tally.add(stats)
        if mode != mod.SYM:
            return gap, (torch.from_numpy(grad) if need_grad else None), -1
        gz = torch.mm(torch.from_numpy(sym), torch.from_numpy(z))  # -2 (W + W^T) Z in torch's BLAS (its threads)
        mod.finish_grad(gz.numpy(), z, norms, normalise, grad)
        return gap, torch.from_numpy(grad), -1

    @torch.no_grad()
    def _cv_gap(self, z: Tensor) -> tuple[float | Tensor, Tensor]:
        """The gap and ``W`` for unit vectors ``z`` [k, n, d]: :func:`scaling_sinkhorn` on the Gram matrix.

        With ``G = Z Z^T`` ([kn, kn], ``Z`` the stacked views) the pairwise squared distances are
        ``D_lm = 2 - 2 G_lm`` and ``<J - P*, C(z)> = sum_{l<m} <J_lm - Pi_lm, D_lm> / k^2 = <-2 W, G>`` plus
        a constant, ``W`` = ``(J_lm - Pi_lm) / k^2`` in the blocks l < m (0 elsewhere).  The gap is
        ``<J, C> - eps log n - D`` (dual value ``D = eps sum_l mean(g_l) - eps (mass - 1)``), computed in
        float64 from the solver's output; its Danskin gradient with respect to ``Z`` is ``-2 (W + W^T) Z``.
        Raises :class:`_NonFinite` when the Gram matrix is not finite (NaN / Inf in ``z``).

        Small CPU problems do their elementwise work and reductions through numpy on the same memory
        (a fraction of torch's per-call cost; no BLAS call moves to numpy, see
        ``sinkhorn_scaling.NUMPY_MAX_ENTRIES``). On CUDA the floor stays on the device (read with the first block)."""
        k, n, d = z.shape
        eps, kn = self.eps, k * n
        zf = z.reshape(kn, d)
        sq = torch.mm(zf, zf.T)
        small = _small(sq)
        if small:  # 2 - 2 G: D_lm in block (l, m)
            sq_np = sq.numpy()
            np.multiply(sq_np, -2.0, out=sq_np)
            np.add(sq_np, 2.0, out=sq_np)
            sq_max = float(sq_np.max())
        elif sinkhorn_scaling.blocked_by_default(sq.device):  # no synchronisation before the solve
            sq_max = sq.mul_(-2.0).add_(2.0).max()
        else:
            sq_max = float(sq.mul_(-2.0).add_(2.0).max())
        if not isinstance(sq_max, Tensor) and not math.isfinite(sq_max):
            raise _NonFinite
        # every sum over the pairs l < m of log-kernels is >= -(k (k - 1) / 2) max D / (k^2 eps) (a float64 product)
        floor = (sq_max.double() if isinstance(sq_max, Tensor) else sq_max) * (-(k - 1) / (2 * k * eps))
        res = scaling_sinkhorn(sq.view(k, n, k, n).transpose(1, 2) * (-1.0 / (k**2 * eps)), self.tol,
                               self.max_iter, floor=floor, gram=True)
        pm = res.pair_marginals  # [kn, kn]: Pi_lm in block (l, m), l < m
        j_w = _diagonal_weights(k, n, z.dtype, z.device)  # J / k^2 in the blocks l < m
        if small:  # the same sums, accumulated in float64
            pm_np, jw_np = pm.numpy(), j_w.numpy()
            cost_j = float(np.add.reduce(np.multiply(jw_np, sq_np).ravel(), dtype=np.float64))
            cost_p = float(np.add.reduce(np.multiply(pm_np, sq_np).ravel(), dtype=np.float64))
            sum_g = float(np.add.reduce(res.log_u.numpy().ravel(), dtype=np.float64))
        else:  # float64 0-dim tensors on the device, never read here (the arithmetic below is the same IEEE
            # binary64 arithmetic Python's floats would do); the stats keep them as tensors until read
            cost_j, cost_p, sum_g = torch.stack([torch.vdot(j_w.view(-1), sq.view(-1)),
                                                 torch.vdot(pm.view(-1), sq.view(-1)), res.log_u.sum()]).double().unbind()
        cost_p = cost_p / k**2
        dual = eps * sum_g / n - eps * (res.mass - 1.0)
        gap = cost_j - eps * math.log(n) - dual
        self.stats = gap_stats(self.name, res, cost_j, cost_p, dual, gap, eps, self.tol, self.max_iter, stacklevel=9)
        self.stats["reference_solver"] = 0.0
        self.stats.update(res.info)
        self.solver_tally.add(self.stats)
        if small:  # W (pm is the solver's fresh tensor)
            np.multiply(pm_np, -1.0 / k**2, out=pm_np)
            np.add(pm_np, jw_np, out=pm_np)
            return gap, pm
        return gap, pm.mul_(-1.0 / k**2).add_(j_w)


#: the ``eps`` of :func:`torch.nn.functional.normalize` (norms are clamped from below at it)
NORM_EPS = 1e-12


class _NonFinite(Exception):
    """The Gram matrix of the views is not finite (raised inside :meth:`M3G._cv_gap`)."""


def _small(t: Tensor) -> bool:
    """Whether elementwise work on ``t`` goes through numpy (a small CPU tensor)."""
    return t.device.type == "cpu" and t.numel() <= sinkhorn_scaling.NUMPY_MAX_ENTRIES


class _CvGap(torch.autograd.Function):
    """``M3G`` with ``cost="cv"``, ``solver="auto"`` as one autograd node: forward = the gap (of
    ``x / max(||x||, NORM_EPS)`` when ``normalise``), backward = its Danskin gradient ``-2 (W + W^T) Z``
    (:meth:`M3G._cv_gap`) taken through the normalisation, ``(I - z z^T) g / ||x||`` (``g / NORM_EPS`` where
    the norm was clamped), as :func:`torch.nn.functional.normalize`'s autograd would. The gradient is
    formed in the forward (when the input needs one), so that the backward is one multiplication. With
    ``compiled`` (:meth:`M3G._compiled`) the forward is one call of :mod:`~fusebench.objectives.m3g_compiled`
    unless that hands the problem back."""

    @staticmethod
    def forward(ctx, x: Tensor, module: "M3G", normalise: bool, compiled=None) -> Tensor:
        fallback_sweep = -1
        try:
            if compiled is not None:  # the whole call compiled (M3G._compiled), unless its range guard hands it back
                gap, gx, fallback_sweep = module._cv_gap_compiled(compiled, x, normalise, ctx.needs_input_grad[0])
                if fallback_sweep == -1:
                    if gx is not None:
                        ctx.save_for_backward(gx)
                    return torch.scalar_tensor(gap, dtype=x.dtype)
            norms = torch.linalg.vector_norm(x, dim=-1, keepdim=True) if normalise else None
            z = x / norms.clamp_min(NORM_EPS) if normalise else x
            gap, w = module._cv_gap(z)
        except (_NonFinite, NonFiniteKernels):  # the latter: the floor read on CUDA with the solver's first block
            module.check_views(x)  # names the NaN / Inf
            raise ValueError(f"{module.name}: the Gram matrix of the views is not finite") from None
        module.stats["compiled"] = 0.0
        if fallback_sweep >= 0:
            module.stats["compiled_fallback_sweep"] = float(fallback_sweep)
        if ctx.needs_input_grad[0]:
            ctx.save_for_backward(_danskin_grad(z, w, norms))
        if isinstance(gap, Tensor):  # computed on the device (float64, 0-dim): no read, no copy
            return gap.to(x.dtype)
        return torch.full((), gap, dtype=x.dtype, device=x.device)  # no host-to-device copy on CUDA

    @staticmethod
    def backward(ctx, grad: Tensor):
        if torch.is_grad_enabled():  # create_graph=True: no second derivative (an error if one is taken)
            return _scale_saved_once(ctx, grad)
        return _scale_saved(ctx, grad)


def _scale_saved(ctx, grad: Tensor):
    """The backward of :class:`_CvGap`: the gradient formed in the forward, times the upstream one."""
    (gx,) = ctx.saved_tensors
    return gx * grad, None, None, None


#: :func:`_scale_saved` for ``create_graph=True`` (its wrapper costs more than the rest of a small backward)
_scale_saved_once = once_differentiable(_scale_saved)


def _danskin_grad(z: Tensor, w: Tensor, norms: Tensor | None) -> Tensor:
    """``d gap / d x`` for unit ``z`` [k, n, d] (``x = z`` when ``norms`` is None, else ``z = x / ||x||``)."""
    k, n, d = z.shape
    zf = z.detach().reshape(k * n, d)
    small = _small(w)
    if small:
        w_np = w.numpy()
        sym = torch.from_numpy(np.add(w_np, w_np.T))
    else:
        sym = torch.add(w, w.T)
    gz = torch.mm(sym, zf)  # -(d gap / d z) / 2, [kn, d]
    if small:
        g, zn = gz.numpy(), zf.numpy()
        np.multiply(g, -2.0, out=g)
        if norms is not None:
            nrm = norms.reshape(k * n, 1).numpy()
            radial = np.add.reduce(zn * g, axis=1, keepdims=True)
            radial *= nrm > NORM_EPS
            g -= zn * radial
            g /= np.maximum(nrm, NORM_EPS)
        return gz.view(k, n, d)
    gz.mul_(-2.0)
    if norms is None:
        return gz.view(k, n, d)
    nrm = norms.reshape(k * n, 1)
    radial = (zf * gz).sum(dim=-1, keepdim=True).mul_(nrm > NORM_EPS)
    return gz.sub_(zf * radial).div_(nrm.clamp_min(NORM_EPS)).view(k, n, d)


@dataclass
class _Solve:
    """What :func:`~fusebench.objectives.sinkhorn.gap_stats` reads of a solve (the compiled call's)."""

    iterations: int
    marginal_error: float
    mass: float
    converged: bool


_COMPILED: list = []
#: view dtypes the compiled call takes (half precision is widened to float32 first, as on the eager path)
_COMPILED_DTYPES = frozenset({torch.float16, torch.bfloat16, torch.float32, torch.float64})


def compiled_module():
    """:mod:`fusebench.objectives.m3g_compiled` (imported on first use), or None when numba is not installed or
    cannot be set up here (e.g. no writable folder for its cache: warned once)."""
    if not _COMPILED:
        try:
            mod = importlib.import_module("fusebench.objectives.m3g_compiled")
        except ImportError:
            mod = None
        except Exception as exc:  # numba is there but refuses (cache locator, LLVM): the eager path
            warnings.warn(f"m3g: the compiled backend is unavailable ({type(exc).__name__}: {exc}); using the eager "
                          "path", RuntimeWarning, stacklevel=2)
            mod = None
        _COMPILED.append(mod)
    return _COMPILED[0]


_DIAGONAL_WEIGHTS: dict[tuple, Tensor] = {}


def _diagonal_weights(k: int, n: int, dtype: torch.dtype, device: torch.device) -> Tensor:
    """``[kn, kn]``: ``1 / (n k^2)`` on the diagonal of every block (l, m), l < m, 0 elsewhere (cached)."""
    key = (k, n, dtype, device)
    out = _DIAGONAL_WEIGHTS.get(key)
    if out is None:
        if len(_DIAGONAL_WEIGHTS) > 64:
            _DIAGONAL_WEIGHTS.clear()
        out = torch.zeros(k, n, k, n, dtype=dtype, device=device)
        for l in range(k):
            for m in range(l + 1, k):
                out[l, :, m, :].diagonal().fill_(1.0 / (n * k**2))
        out = out.view(k * n, k * n)
        _DIAGONAL_WEIGHTS[key] = out
    return out


__all__ = ["M3G", "dense_cost", "diagonal_cost", "pair_sqdists"]
