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

Three solvers, one sequence of iterates:

* :func:`dense_sinkhorn` (``solver="reference"``) materialises the n^k tensor ``log K`` and runs
  Algorithm 1 literally.  Memory and time O(n^k) per marginal, with one exp per entry.
* :func:`~fusebench.objectives.sinkhorn_scaling.scaling_sinkhorn` (``solver="auto"``, M3G's default;
  in :mod:`fusebench.objectives.sinkhorn_scaling`) runs the contractions below on the
  scalings ``u_l = exp(g_l)`` instead of log-potentials: the kernels are exponentiated once per solve,
  a view update is a matrix-vector product and a reciprocal, and every call of a sweep is pre-bound to
  preallocated buffers (a sweep is a flat list of calls; small problems keep them between solves).
  Each stage is either one matrix-vector product with the materialised n^k kernel (``dense``, for
  ``n^k <= DENSE_MAX_ENTRIES``) or the GEMM below.  A range guard (products of kernels and scalings
  must stay inside the dtype's normal range, checked on running extrema of the scalings) decides
  whether the solve is exact; if not, :func:`pairwise_sinkhorn` solves the problem instead.  On CUDA
  its sweeps run in blocks that read the stopping errors once per block instead of once per sweep, as
  CUDA graphs, stopping at the same sweep (:mod:`fusebench.objectives.sinkhorn_blocked`).
* :func:`pairwise_sinkhorn` (log domain; the fallback of the former) is for pairwise-separable costs
  ``C = sum_{l<m} C_lm(i_l, i_m)`` (the circular variance c_cv): ``P`` is the outer product of the
  scalings times the k(k-1)/2 kernels ``K_lm = exp(-C_lm / eps)``, so each marginal is a tensor
  contraction.  The views are split into *stages*: a kept block ``B`` (``k - e`` views) and an
  eliminated set ``E`` (``e`` views).  For a block, split ``B = B1 + B2``; then::

      Q_B(i_B) = [prod of kernels inside B] * sum_{i_E} L(i_B1, i_E) R(i_B2, i_E)
      L = prod_{l in B1, m in E} K_lm * prod_{m<m' in E} K_mm' * prod_{m in E} u_m,
      R = prod_{l in B2, m in E} K_lm

  i.e. one matrix product ``[n^|B1|, n^e] @ [n^e, n^|B2|]`` (n^k multiply-adds, no exp per n^k
  entry), and every view of ``U`` (the views this stage updates, in order) is updated from ``Q_B``
  at O(n^(k-e)) cost.  Memory is O(n^(k-e)) with e >= 1 (e = 2 for k >= 4 at the sizes we use), and
  the iterates are exactly those of Algorithm 1.  Stabilisation: ``L`` and ``R`` are built in the
  log domain (potentials absorbed into the kernels), each row is shifted by its max before the
  exp, the product is taken back to the log domain, and entries of the product too small to be
  exact in the working dtype are recomputed by an exact log-sum-exp over ``i_E``; all marginals are
  log-sum-exps of ``log Q_B``.  This keeps float32 finite down to eps = 0.01.

This module holds the result type (:class:`SinkhornResult`), the hyperparameter check, the dual value,
the two log-domain solvers (:func:`dense_sinkhorn`; :func:`pairwise_sinkhorn` with its block
contractions) and the matching-gap value, Danskin gradient and diagnostics of the losses
(:func:`gap_with_danskin_gradient`, :func:`gap_stats`). The scaling-domain engine (plan compiler,
torch-to-numpy call translator, plan cache, range guard, strategy rule) is
:mod:`fusebench.objectives.sinkhorn_scaling`; it reuses the stages and block helpers defined here
(``_Block``, ``_stages``, ``_side``, ``_pair_sum``, ``_choose_elim``) and hands the solves its range
guard refuses to :func:`pairwise_sinkhorn`. This module is longer than ~450 lines because the
equations above and the contraction code that implements them are kept together.

Shape:
    log_kernel (dense): ``[n] * k``;  log_kernels (pairwise): ``[k, k, n, n]`` with
    ``log_kernels[l, m][i, j] = -C_lm(i, j) / eps`` and ``log_kernels[m, l] = log_kernels[l, m].T``;
    result potentials ``log_u``: ``[k, n]``; ``pair_marginals``: ``[k, k, n, n]`` (l < m filled), or
    with ``scaling_sinkhorn(..., gram=True)`` the Gram layout ``[kn, kn]`` (block (l, m), l < m, filled).

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
import warnings
from dataclasses import dataclass, field

import torch
from torch import Tensor

__all__ = ["SinkhornResult", "check_ot_hparams", "dense_sinkhorn", "pairwise_sinkhorn", "dual_value", "outer_sum",
           "gap_with_danskin_gradient", "gap_stats"]


@dataclass
class SinkhornResult:
    """Output of a solver (all tensors detached)."""

    log_u: Tensor  # [k, n] scaled potentials g_l = f_l / eps
    iterations: int  # completed sweeps over the k views
    marginal_error: float  # sum_l ||m_l(P) - 1/n||_1 at the returned potentials
    mass: float  # sum of P at the returned potentials
    converged: bool
    log_p: Tensor | None = None  # [n]*k, dense solver only
    pair_marginals: Tensor | None = None  # [k, k, n, n] (entries l < m) or [kn, kn]; pairwise solvers only
    info: dict[str, float] = field(default_factory=dict)


def check_ot_hparams(who: str, eps: float, tol: float, max_iter: int) -> None:
    """Shared validation of the entropic-OT hyperparameters (ValueError naming the loss)."""
    for name, val in (("eps", eps), ("tol", tol)):
        if isinstance(val, bool) or not isinstance(val, (int, float)) or not math.isfinite(val) or val <= 0:
            raise ValueError(f"{who}: {name} must be a finite number > 0, got {val!r}")
    if isinstance(max_iter, bool) or not isinstance(max_iter, int) or max_iter < 1:
        raise ValueError(f"{who}: max_iter must be an integer >= 1, got {max_iter!r}")


def outer_sum(vectors: Tensor) -> Tensor:
    """``(+) g``: ``[k, n] -> [n]*k`` with entry (i_1..i_k) = sum_l vectors[l, i_l]."""
    k, n = vectors.shape
    out = vectors.new_zeros([1] * k)
    for l in range(k):
        shape = [1] * k
        shape[l] = n
        out = out + vectors[l].reshape(shape)
    return out


def dual_value(log_u: Tensor, mass: float, eps: float) -> Tensor:
    """``eps * sum_l mean(g_l) - eps * (mass - 1)``, a lower bound of ``min F`` (exact at convergence)."""
    return eps * log_u.mean(dim=1).sum() - eps * (mass - 1.0)


def _marginal_l1(log_marg: Tensor, n: int) -> float:
    return float((log_marg.exp() - 1.0 / n).abs().sum())


# ----------------------------------------------------------------------------------------------
# reference: Algorithm 1 on the materialised tensor
# ----------------------------------------------------------------------------------------------
@torch.no_grad()
def dense_sinkhorn(log_kernel: Tensor, tol: float, max_iter: int) -> SinkhornResult:
    """Literal log-domain multi-marginal Sinkhorn (Algorithm 1) on ``log_kernel = -C / eps`` [n]*k."""
    k = log_kernel.dim()
    n = log_kernel.shape[0]
    log_n = math.log(n)
    g = log_kernel.new_zeros(k, n)
    err = float("inf")
    it = 0
    log_p = log_kernel
    while True:
        it += 1
        for l in range(k):
            log_p = log_kernel + outer_sum(g)
            other = [a for a in range(k) if a != l]
            g[l] = g[l] - (torch.logsumexp(log_p, dim=other) + log_n)
        log_p = log_kernel + outer_sum(g)
        err = sum(
            _marginal_l1(torch.logsumexp(log_p, dim=[a for a in range(k) if a != l]), n) for l in range(k)
        )
        if err < tol or it >= max_iter:
            break
    mass = float(torch.logsumexp(log_p.reshape(-1), dim=0).exp())
    return SinkhornResult(log_u=g, iterations=it, marginal_error=err, mass=mass, converged=err < tol,
                          log_p=log_p)


# ----------------------------------------------------------------------------------------------
# auto: pairwise-separable costs, contractions instead of the n^k tensor
# ----------------------------------------------------------------------------------------------
@dataclass
class _Block:
    b1: list[int]  # kept views, row side of the matrix product
    b2: list[int]  # kept views, column side
    elim: list[int]  # eliminated views (summed out)

    @property
    def kept(self) -> list[int]:
        return self.b1 + self.b2


def _split(kept: list[int], k: int) -> _Block:
    kept = sorted(kept)
    h = (len(kept) + 1) // 2
    return _Block(kept[:h], kept[h:], [v for v in range(k) if v not in kept])


def _choose_elim(k: int, n: int, budget: int) -> int:
    """Number e of eliminated views per stage, from a cost model (GEMM flops vs elementwise passes, memory)."""
    best, best_key = 1, None
    for e in range(1, k // 2 + 1):
        b = k - e
        b1 = (b + 1) // 2
        nl, nr, nq = n ** (b1 + e), n ** (b - b1 + e), n**b
        stages = -(-k // b)
        mem = max(nl, nr, nq)
        cost = stages * (n**k / 16 + 4 * (nl + nr) + 8 * nq) + 2 * k * nq
        key = (mem > budget, mem if mem > budget else cost)
        if best_key is None or key < best_key:
            best, best_key = e, key
    return best


def _place(vec_or_mat: Tensor, axes: list[int], positions: list[int]) -> Tensor:
    """View a vector / matrix on ``positions`` of a tensor with ``len(axes)`` axes (size 1 elsewhere)."""
    shape = [1] * len(axes)
    for p in positions:
        shape[p] = vec_or_mat.shape[0]
    return vec_or_mat.reshape(shape)


def _pair_sum(log_k: Tensor, axes: list[int], pairs: list[tuple[int, int]], acc: Tensor | None = None) -> Tensor:
    """``acc + sum_{(l, m) in pairs} log_k[l, m]`` broadcast on a tensor whose axes are the views ``axes``."""
    acc = log_k.new_zeros([1] * len(axes)) if acc is None else acc
    for l, m in pairs:
        i, j = axes.index(l), axes.index(m)
        mat = log_k[l, m] if i < j else log_k[l, m].T
        acc = acc + _place(mat, axes, sorted((i, j)))
    return acc


def _side(log_k: Tensor, g: Tensor, rows: list[int], el: list[int], with_e: bool) -> Tensor:
    """log of one side of the matrix product: ``[n^|rows|, n^e]``.

    ``sum_{l in rows, m in E} log K_lm`` (+ ``sum_{m<m' in E} log K_mm' + sum_{m in E} g_m`` when
    ``with_e``), grouped per kept view so that only the last broadcast add touches the full size.
    """
    n = log_k.shape[-1]
    axes = rows + el
    e_part = log_k.new_zeros([1] * len(axes))
    if with_e:
        for m in el:
            e_part = e_part + _place(g[m], axes, [axes.index(m)])
        e_part = _pair_sum(log_k, axes, [(a, b) for i, a in enumerate(el) for b in el[i + 1:]], e_part)
    acc = e_part
    for l in rows:  # A_l(i_l, i_E) = sum_{m in E} log K_lm, size n^(1+e); only the last add is full size
        acc = acc + _pair_sum(log_k, axes, [(l, m) for m in el])
    return acc.expand([n] * len(axes)).reshape(n ** len(rows), n ** len(el))


@dataclass
class _Contraction:
    """``log P_B`` of one block at the potentials it was built with, plus what the pair marginals need."""

    blk: _Block
    log_p: Tensor  # [n]*|B| on axes blk.kept: log of sum_{i_E} P
    mat_l: Tensor  # exp(log L - shift_l)  [n^|B1|, n^e]
    mat_r: Tensor  # exp(log R - shift_r)  [n^|B2|, n^e]
    log_prod: Tensor  # log(mat_l @ mat_r.T)  [n^|B1|, n^|B2|]
    bad: Tensor | None  # [nbad, 2] (row, col) entries recomputed exactly
    log_l: Tensor | None = None  # kept only when bad entries exist
    log_r: Tensor | None = None


def _contract(log_k: Tensor, g: Tensor, blk: _Block, stats: dict[str, float]) -> _Contraction:
    """Block contraction ``log P_B(i_B) = log sum_{i_E} P`` at the current potentials (one GEMM)."""
    n = log_k.shape[-1]
    b1, b2, el, kept = blk.b1, blk.b2, blk.elim, blk.kept
    log_l = _side(log_k, g, b1, el, True)
    log_r = _side(log_k, g, b2, el, False)
    shift_l = log_l.amax(dim=1)
    shift_r = log_r.amax(dim=1)
    mat_l = torch.exp(log_l - shift_l[:, None])
    mat_r = torch.exp(log_r - shift_r[:, None])
    prod = mat_l @ mat_r.T  # [n^|B1|, n^|B2|], n^k multiply-adds
    finfo = torch.finfo(prod.dtype)
    # below this, terms lost to underflow could exceed one ulp of the sum: recompute those exactly
    thresh = finfo.tiny * (n ** len(el)) / finfo.eps
    log_prod = prod.clamp_min_(finfo.tiny).log_()
    log_m = log_prod + shift_l[:, None]
    log_m += shift_r[None, :]  # log of sum_{i_E} L R
    bad = None
    if float(log_prod.min()) < math.log(thresh):
        bad = (log_prod < math.log(thresh)).nonzero()
        chunk = max(1, 2**22 // log_l.shape[1])
        for s in range(0, bad.shape[0], chunk):
            r, c = bad[s:s + chunk, 0], bad[s:s + chunk, 1]
            log_m[r, c] = torch.logsumexp(log_l[r] + log_r[c], dim=1)
        stats["underflow_fixes"] = stats.get("underflow_fixes", 0.0) + float(bad.shape[0])
    # kernels inside B and potentials of B: within-B1 / within-B2 terms and the shifts as vectors over
    # rows / columns, cross terms B1 x B2 added in place one B2 view at a time
    row = _pair_sum(log_k, b1, [(a, b) for i, a in enumerate(b1) for b in b1[i + 1:]])
    for v in b1:
        row = row + _place(g[v], b1, [b1.index(v)])
    log_m += row.expand([n] * len(b1)).reshape(-1, 1)
    if b2:
        col = _pair_sum(log_k, b2, [(a, b) for i, a in enumerate(b2) for b in b2[i + 1:]])
        for v in b2:
            col = col + _place(g[v], b2, [b2.index(v)])
        log_m += col.expand([n] * len(b2)).reshape(1, -1)
    log_p = log_m.reshape([n] * len(kept))
    for m in b2:
        log_p += _pair_sum(log_k, kept, [(l, m) for l in b1])
    out = _Contraction(blk, log_p, mat_l, mat_r, log_prod, bad)
    if bad is not None:
        out.log_l, out.log_r = log_l, log_r
    return out


def _reduce_to(x: Tensor, keep: int, weights: dict[int, Tensor]) -> Tensor:
    """Sum ``x`` over every axis but ``keep``, weighting axis a by ``weights[a]`` when given (linear domain)."""
    axis_ids = list(range(x.dim()))
    while x.dim() > 1:
        pos = x.dim() - 1 if axis_ids[-1] != keep else x.dim() - 2
        a = axis_ids.pop(pos)
        x = torch.tensordot(x, weights[a], dims=([pos], [0])) if a in weights else x.sum(dim=pos)
    return x


class _StageState:
    """``P_B`` of one block, exponentiated once, with within-stage potential changes as vector scalings."""

    def __init__(self, con: _Contraction) -> None:
        self.con = con
        self.kept = con.blk.kept
        self.shift = con.log_p.max()
        self.p_hat = torch.exp(con.log_p - self.shift)  # [n]*|B|, entries <= 1
        n = self.p_hat.shape[0]
        self.delta = {v: con.log_p.new_zeros(n) for v in self.kept}  # g_v - g_v(at build time)

    def update(self, g: Tensor, v: int, log_n: float) -> None:
        """Algorithm 1 step for view v: make m_v(P) = 1/n (writes ``g[v]``)."""
        step = -self.log_marginal(v, True) - log_n  # g_v <- g_v - (log m_v + log n)
        self.delta[v] += step
        g[v] += step

    def log_marginal(self, v: int, include_self: bool) -> Tensor:
        """``log m_v(P)`` (``include_self``) or the log of the factor multiplying ``u_v``."""
        pos = self.kept.index(v)
        weights, offset = {}, self.shift
        for a, w in enumerate(self.kept):
            if w != v and bool(self.delta[w].any()):
                top = self.delta[w].max()
                weights[a] = torch.exp(self.delta[w] - top)
                offset = offset + top
        red = _reduce_to(self.p_hat, pos, weights)
        finfo = torch.finfo(red.dtype)
        if float(red.min()) < finfo.tiny * (self.p_hat.numel() / red.numel()) / finfo.eps:
            # a row lost to underflow: exact log-sum-exp on log P_B instead
            log_p = self.con.log_p
            for a, w in enumerate(self.kept):
                if w != v:
                    log_p = log_p + _place(self.delta[w], self.kept, [a])
            dims = [a for a in range(len(self.kept)) if a != pos]
            out = torch.logsumexp(log_p, dim=dims) if dims else log_p
        else:
            out = red.log() + offset
        return out + self.delta[v] if include_self else out


def _stages(k: int, e: int) -> list[tuple[list[int], _Block]]:
    """The stages of one sweep: (views updated, in order; the block whose marginal updates them)."""
    b = k - e
    stages: list[tuple[list[int], _Block]] = []
    for start in range(0, k, b):
        upd = list(range(start, min(start + b, k)))
        lo = max(0, upd[-1] + 1 - b)
        stages.append((upd, _split(list(range(lo, lo + b)), k)))
    return stages


@torch.no_grad()
def pairwise_sinkhorn(log_kernels: Tensor, tol: float, max_iter: int, memory_budget: int = 2**24) -> SinkhornResult:
    """Algorithm 1 for ``log K = sum_{l<m} log_kernels[l, m](i_l, i_m)`` without the n^k tensor (log domain)."""
    k, _, n, _ = log_kernels.shape
    log_n = math.log(n)
    e = _choose_elim(k, n, memory_budget)
    stages = _stages(k, e)
    first_kept = set(stages[0][1].kept)
    tail_views = [v for v in stages[-1][1].kept if v not in first_kept]  # checked at the end of a sweep
    stats: dict[str, float] = {"elim_views": float(e), "stages": float(len(stages))}

    g = log_kernels.new_zeros(k, n)
    it = 0
    tail_err = 0.0
    err = float("inf")
    while True:
        st = _StageState(_contract(log_kernels, g, stages[0][1], stats))
        if it > 0:  # convergence test on the potentials left by the previous sweep (e <= k/2: all views seen)
            err = tail_err + sum(_marginal_l1(st.log_marginal(v, True), n) for v in st.kept)
            if err < tol or it >= max_iter:
                break
        for s, (upd, blk) in enumerate(stages):
            if s > 0:
                st = _StageState(_contract(log_kernels, g, blk, stats))
            for v in upd:
                st.update(g, v, log_n)
        tail_err = sum(_marginal_l1(st.log_marginal(v, True), n) for v in tail_views)
        it += 1

    # at the returned potentials: mass, and every pairwise marginal from the first block's contraction
    mass = float(st.p_hat.sum() * torch.exp(st.shift))
    pm = _pair_marginals(st.con, st.shift, k, n)
    return SinkhornResult(log_u=g, iterations=it, marginal_error=err, mass=mass, converged=err < tol,
                          pair_marginals=pm, info=stats)


def _pair_marginals(con: _Contraction, shift: Tensor, k: int, n: int) -> Tensor:
    """All ``Pi_lm`` from one block: ``P_B`` gives pairs inside B; the (B1, E) and (B2, E) marginals
    ``X = L o ((P_B / M) @ R)``, ``Y = R o ((P_B / M)^T @ L)`` (two more GEMMs) give the rest."""
    blk = con.blk
    b1, b2, el = blk.b1, blk.b2, blk.elim
    p_b = torch.exp(con.log_p).reshape(n ** len(b1), n ** len(b2))
    ratio = torch.exp(con.log_p.reshape_as(p_b) - con.log_prod)  # P_B / (mat_l @ mat_r.T)
    if con.bad is not None:
        ratio[con.bad[:, 0], con.bad[:, 1]] = 0.0
    x = con.mat_l * (ratio @ con.mat_r)  # [n^|B1|, n^e]: marginal of P on B1 + E
    y = con.mat_r * (ratio.T @ con.mat_l)  # [n^|B2|, n^e]: marginal of P on B2 + E
    if con.bad is not None:  # exact contributions of the entries recomputed by log-sum-exp
        r, c = con.bad[:, 0], con.bad[:, 1]
        w = torch.softmax(con.log_l[r] + con.log_r[c], dim=1) * p_b[r, c][:, None]
        x.index_add_(0, r, w)
        y.index_add_(0, c, w)
    pm = p_b.new_zeros(k, k, n, n)
    done: set[tuple[int, int]] = set()
    for tensor, axes in ((p_b, b1 + b2), (x, b1 + el), (y, b2 + el)):
        t = tensor.reshape([n] * len(axes))
        for i, l in enumerate(axes):
            for j in range(i + 1, len(axes)):
                m = axes[j]
                key = (min(l, m), max(l, m))
                if key in done:
                    continue
                dims = [a for a in range(len(axes)) if a not in (i, j)]
                mat = t.sum(dim=dims) if dims else t
                pm[key] = mat if l < m else mat.T
                done.add(key)
    return pm


def gap_with_danskin_gradient(who: str, res, cost_j: Tensor, cost_p: Tensor, eps: float, n: int, tol: float,
                              max_iter: int) -> tuple[Tensor, dict[str, float]]:
    """The matching-gap value and gradient shared by ``matching_gap`` and ``m3g`` (reference solver).

    Value: F(J) - min F = <J, C> - eps log n - (Sinkhorn dual value). Gradient (Danskin, M3G Prop. 3.2):
    that of the surrogate <J, C(z)> - <P*, C(z)> with P* detached; the returned scalar is the surrogate
    shifted by a detached constant. Also returns the solver diagnostics and warns when ``max_iter`` was hit.
    """
    with torch.no_grad():
        dual = dual_value(res.log_u, res.mass, eps)
        gap = cost_j.detach() - eps * math.log(n) - dual
    surrogate = cost_j - cost_p
    out = surrogate + (gap - surrogate).detach()
    stats = gap_stats(who, res, float(cost_j.detach()), float(cost_p.detach()), float(dual), float(gap), eps, tol,
                      max_iter, stacklevel=5)
    return out, stats


def gap_stats(who: str, res, cost_j: float, cost_p: float, dual: float, gap: float, eps: float, tol: float,
              max_iter: int, stacklevel: int = 4) -> dict[str, float]:
    """The diagnostics of a matching-gap call (``module.stats``); warns when ``max_iter`` was hit."""
    stats = {
        "iterations": float(res.iterations),
        "marginal_error": float(res.marginal_error),
        "converged": float(res.converged),
        "cost_J": cost_j,
        "cost_P": cost_p,
        "plogp": (dual - cost_p) / eps,  # <P, log P> implied by the dual value
        "dual_value": dual,
        "gap": gap,
        "mass": float(res.mass),
    }
    if not res.converged:
        warnings.warn(
            f"{who}: Sinkhorn hit max_iter={max_iter} with marginal error {res.marginal_error:.3g} > tol={tol} "
            f"(eps={eps}); the gap and its gradient are approximate. Raise max_iter or eps.",
            RuntimeWarning,
            stacklevel=stacklevel,
        )
    return stats
