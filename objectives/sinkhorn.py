"""(Multi-marginal) Sinkhorn solvers shared by ``matching_gap`` and ``m3g``.

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
* :func:`scaling_sinkhorn` (``solver="auto"``, M3G's default) runs the contractions below on the
  scalings ``u_l = exp(g_l)`` instead of log-potentials: the kernels are exponentiated once per solve,
  a view update is a matrix-vector product and a reciprocal, and every call of a sweep is pre-bound to
  preallocated buffers (a sweep is a flat list of calls; small problems keep them between solves).
  Each stage is either one matrix-vector product with the materialised n^k kernel (``dense``, for
  ``n^k <= DENSE_MAX_ENTRIES``) or the GEMM below.  A range guard (products of kernels and scalings
  must stay inside the dtype's normal range, checked on running extrema of the scalings) decides
  whether the solve is exact; if not, :func:`pairwise_sinkhorn` solves the problem instead.
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

import functools
import math
import threading
import warnings
from collections import OrderedDict
from dataclasses import dataclass, field
from functools import partial
from typing import Callable

import numpy as np
import torch
from torch import Tensor

__all__ = ["SinkhornResult", "check_ot_hparams", "dense_sinkhorn", "pairwise_sinkhorn", "scaling_sinkhorn", "dual_value",
           "outer_sum"]


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


# ----------------------------------------------------------------------------------------------
# scaling domain: contractions on u_l = exp(g_l), pre-bound calls, falling back to the log domain
# ----------------------------------------------------------------------------------------------
#: a solve stays in the scaling domain only while every product it forms is at least exp(LOG_MARGIN)
#: above the smallest normal number of the dtype and every sum exp(LOG_MARGIN) below the largest
LOG_MARGIN = 4.0
#: sweeps between two range checks of a scaling-domain solve (it is also checked when it stops)
RANGE_CHECK_EVERY = 32
#: largest n^k for which a stage contracts the materialised n^k kernel (one matrix-vector product)
#: instead of the pairwise kernels (elementwise product, GEMM, Hadamard product); measured, see
#: docs/benchmarks-objectives.md ("crossover")
DENSE_MAX_ENTRIES = 2**14
#: scaling-domain plans (buffers and pre-bound calls) with at most this many entries in all are kept
#: between calls, per thread and per (k, n, strategy, dtype, device); larger ones are rebuilt every call
PLAN_CACHE_MAX_ENTRIES = 2**21
PLAN_CACHE_SIZE = 8

_Op = Callable[[], object]

#: CPU plans with at most this many entries in all run their per-sweep calls through numpy on the same
#: buffers (numpy's call overhead is a third of torch's; for larger plans the work itself dominates).
#: Measured, see docs/benchmarks-objectives.md ("crossover")
NUMPY_MAX_ENTRIES = 2**16
#: Only elementwise calls move to numpy: matrix products stay torch calls (numpy's BLAS keeps its own
#: thread pool, which would compete with torch's threads for the same cores)
_NUMPY_EQUIVALENT = {torch.mul: np.multiply, torch.reciprocal: np.reciprocal, torch.maximum: np.maximum,
                     torch.exp: np.exp}


def _np_outer(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    np.multiply(a[:, None], b[None, :], out=out)  # np.outer's own Python wrapper costs 3x this


def _as_numpy(x):
    return x.numpy() if isinstance(x, Tensor) else x


def _numpy_program(ops: list[_Op], strict: bool = True) -> list[_Op]:
    """``ops`` (partials of torch functions over CPU buffers) as partials of their numpy equivalents over
    numpy views of the same memory (``Tensor.copy_`` / ``mul_`` become ``np.copyto`` / ``np.multiply``,
    ``torch.sum(dim=)`` ``np.add.reduce(axis=)``); same arguments, same order. Calls without an
    equivalent raise (``strict``) or stay torch calls on the same memory."""
    out: list[_Op] = []
    for op in ops:
        if not isinstance(op, partial):  # a function of its own (e.g. a dense kernel's fill): kept as it is
            if strict:
                raise TypeError(f"scaling plan: no numpy equivalent of {op!r}")
            out.append(op)
            continue
        func, args, kw = op.func, op.args, dict(op.keywords)
        target = getattr(func, "__self__", None)
        if isinstance(target, Tensor) and func.__name__ in ("copy_", "mul_"):
            np_func = np.copyto if func.__name__ == "copy_" else partial(np.multiply, out=target.numpy())
            out.append(partial(np_func, target.numpy(), _as_numpy(args[0])))
        elif func is torch.sum and set(kw) == {"dim", "out"}:
            out.append(partial(np.add.reduce, _as_numpy(args[0]), axis=tuple(kw["dim"]), out=kw["out"].numpy()))
        elif func is torch.outer:
            out.append(partial(_np_outer, *map(_as_numpy, args), out=kw["out"].numpy()))
        elif func in (torch.mv, torch.mm):
            out.append(op)
        elif func in _NUMPY_EQUIVALENT:
            out.append(partial(_NUMPY_EQUIVALENT[func], *map(_as_numpy, args), **{k: _as_numpy(v) for k, v in kw.items()}))
        elif strict:
            raise TypeError(f"scaling plan: no numpy equivalent of {func!r}")  # a new kind of call: add it above
        else:
            out.append(op)
    return out


def _outer_program(vecs: list[Tensor], ops: list[_Op]) -> Tensor | None:
    """Append to ``ops`` the calls that write ``(x) vecs`` (first vector slowest) into a buffer; return it flat."""
    if not vecs:
        return None
    out = vecs[0]
    for v in vecs[1:]:
        buf = out.new_empty(out.shape[0], v.shape[0])
        ops.append(partial(torch.outer, out, v, out=buf))
        out = buf.view(-1)
    return out


def _pair_sums(axes: list[int]) -> list[tuple[int, int, list[int], bool]]:
    """For a tensor on the views ``axes``: (l, m, dims summed out, transpose) for each pair l < m."""
    out = []
    for i, a in enumerate(axes):
        for j in range(i + 1, len(axes)):
            b = axes[j]
            out.append((min(a, b), max(a, b), [x for x in range(len(axes)) if x not in (i, j)], a > b))
    return out


class _ScalingStage:
    """One stage of a plan: buffers, the calls that fill its fixed factors from the log-kernels (once per
    solve), build ``n Q_B`` at the current ``u_E`` (every sweep) and contract it for each kept view.

    * ``dense``: ``K_stage = n exp(log K)`` on axes (kept, eliminated) as ``[n^|B|, n^e]``; ``n Q_B =
      K_stage @ (x) u_E``: one matrix-vector product.
    * pairwise: ``n Q_B = n K_{B,B} o ((L_fix o u_E) @ R_fix^T)`` with ``L_fix = K_{B1,E} K_{E,E}``
      ``[n^|B1|, n^e]``, ``R_fix = K_{B2,E}`` ``[n^|B2|, n^e]`` (for k = 3 these are kernels themselves).
    """

    def __init__(self, plan: "_ScalingPlan", upd: list[int], blk: _Block, dense: bool) -> None:
        k, n, logk, kern = plan.k, plan.n, plan.logk, plan.kern
        urows, srows = plan.urows, plan.srows
        self.upd, self.blk, self.n, self.dense, self.urows = upd, blk, n, dense, urows
        b1, b2, el, kept = blk.b1, blk.b2, blk.elim, blk.kept
        self.q = logk.new_empty(n ** len(b1), n ** len(b2))  # n Q_B: kernels and u_E, no u_B
        self.build: list[_Op] = []
        u_e = _outer_program([urows[m] for m in el], self.build)
        self.u_e = u_e
        if dense:
            axes = kept + el
            self.k_full = logk.new_empty(n ** len(kept), n ** len(el))
            first = plan.stages[0] if plan.stages else None
            if first is None:  # n K on axes 0..k-1 (the first block's kept views come first, in order)
                terms = [logk[l, m].reshape([n if a in (l, m) else 1 for a in range(k)])
                         for l in range(k) for m in range(l + 1, k)]
                full = self.k_full.view([n] * k)

                def fill(terms=terms, full=full) -> None:  # exp(log n + sum_{l<m} log K_lm)
                    if plan.numpy:  # the same sums, broadcast by numpy (a quarter of torch's cost here)
                        f = full.numpy()
                        np.add(terms[0].numpy(), math.log(n), out=f)
                        for t in terms[1:]:
                            np.add(f, t.numpy(), out=f)
                        np.exp(f, out=f)
                        return
                    torch.add(terms[0].expand(full.shape), math.log(n), out=full)
                    for t in terms[1:]:
                        full.add_(t)
                    full.exp_()

                plan.setup.append(fill)
            else:  # the same tensor, axes permuted
                plan.setup.append(partial(self.k_full.view([n] * k).copy_, first.k_full.view([n] * k).permute(axes)))
            self.build.append(partial(torch.mv, self.k_full, u_e, out=self.q.view(-1)))
        else:
            if len(b1) == 1 and len(b2) == 1 and len(el) == 1:  # k = 3: the factors are kernels themselves
                a, b, c = b1[0], b2[0], el[0]
                self.l_fix, self.r_fix_t = kern[a, c], kern[c, b]
                self.k_in = logk.new_empty(n, n)
                plan.setup.append(partial(torch.mul, kern[a, b], float(n), out=self.k_in))
            else:
                zeros = logk.new_zeros(k, n)
                self.l_fix = logk.new_empty(n ** len(b1), n ** len(el))
                self.r_fix_t = logk.new_empty(n ** len(el), n ** len(b2))
                self.k_in = logk.new_empty(n ** len(b1), n ** len(b2))
                in_pairs = [(x, y) for i, x in enumerate(kept) for y in kept[i + 1:]]

                def fill(b1=b1, b2=b2, el=el, kept=kept, in_pairs=in_pairs) -> None:
                    torch.exp(_side(logk, zeros, b1, el, True), out=self.l_fix)  # K_{B1,E}, K_{E,E}
                    self.r_fix_t.copy_(torch.exp(_side(logk, zeros, b2, el, False)).T)  # K_{B2,E}
                    log_in = _pair_sum(logk, kept, in_pairs).expand([n] * len(kept)).reshape(self.k_in.shape)
                    torch.exp(log_in + math.log(n), out=self.k_in)  # n K_{B,B}

                plan.setup.append(fill)
            self.l_buf = torch.empty_like(self.l_fix)
            self.build += [partial(torch.mul, self.l_fix, u_e, out=self.l_buf),
                           partial(torch.mm, self.l_buf, self.r_fix_t, out=self.q),
                           partial(torch.mul, self.q, self.k_in, out=self.q)]
        # contraction of view v (position p in B): srows[v] = n sum_{i_B \ v} Q_B prod_{w in B \ v} u_w
        self.contract: dict[int, list[_Op]] = {}
        for p, v in enumerate(kept):
            ops: list[_Op] = []
            left = _outer_program([urows[w] for w in kept[:p]], ops)
            right = _outer_program([urows[w] for w in kept[p + 1:]], ops)
            nl, nr = n**p, n ** (len(kept) - p - 1)
            if left is None and right is None:  # k = 2: the block is one view
                ops.append(partial(srows[v].copy_, self.q.view(-1)))
            elif left is None:
                ops.append(partial(torch.mv, self.q.view(n, nr), right, out=srows[v]))
            elif right is None:
                ops.append(partial(torch.mv, self.q.view(nl, n).t(), left, out=srows[v]))
            else:
                part = self.q.new_empty(nl * n)
                ops += [partial(torch.mv, self.q.view(nl * n, nr), right, out=part),
                        partial(torch.mv, part.view(nl, n).t(), left, out=srows[v])]
            self.contract[v] = ops
        self.marginal_ops = self._marginal_program(plan) if plan.stages == [] else []

    def _marginal_program(self, plan: "_ScalingPlan") -> list[_Op]:
        """Calls that write ``n Pi_lm`` (l < m) into ``plan.pm`` from this block at the current scalings."""
        n, k, blk, urows = self.n, plan.k, self.blk, self.urows
        ops: list[_Op] = []
        if self.dense:  # n P itself on axes (kept, elim): K_stage o ((x) u_B (x) u_E)
            u_b = _outer_program([urows[v] for v in blk.kept], ops)
            full = self.k_full.new_empty(self.k_full.shape)
            ops += [partial(torch.outer, u_b, self.u_e, out=full), partial(full.mul_, self.k_full)]
            srcs = [full.view([n] * k)]
            items = [(0, *x) for x in _pair_sums(blk.kept + blk.elim)]
        else:
            u_b1 = _outer_program([urows[v] for v in blk.b1], ops)
            u_b2 = _outer_program([urows[v] for v in blk.b2], ops)
            scale = self.q.new_empty(self.q.shape)
            p_b, x, y = torch.empty_like(self.q), torch.empty_like(self.l_buf), self.l_buf.new_empty(self.r_fix_t.T.shape)
            ops.append(partial(torch.outer, u_b1, u_b2, out=scale) if u_b2 is not None else partial(scale.copy_, u_b1[:, None]))
            ops += [partial(torch.mul, self.q, scale, out=p_b),  # n P_B
                    partial(scale.mul_, self.k_in),  # n P_B / (L @ R^T)
                    partial(torch.mm, scale, self.r_fix_t.t(), out=x), partial(x.mul_, self.l_buf),  # n P on B1 + E
                    partial(torch.mm, scale.t(), self.l_buf, out=y), partial(y.mul_, self.r_fix_t.t())]  # on B2 + E
            srcs = [t.view([n] * len(ax)) for t, ax in ((p_b, blk.b1 + blk.b2), (x, blk.b1 + blk.elim),
                                                        (y, blk.b2 + blk.elim))]
            items = [(src, *x) for src, ax in enumerate((blk.b1 + blk.b2, blk.b1 + blk.elim, blk.b2 + blk.elim))
                     for x in _pair_sums(ax)]
        seen: set[tuple[int, int]] = set()
        for src, l, m, dims, transpose in items:
            if (l, m) in seen:
                continue
            seen.add((l, m))
            out = plan.pm_block(l, m)
            t = srcs[src]
            if transpose:  # not for the first block, whose axes are in increasing order
                ops.append(partial(lambda t, dims, out: out.copy_(t.sum(dim=dims).T if dims else t.T), t, dims, out))
            elif not dims:
                ops.append(partial(out.copy_, t))
            else:
                ops.append(partial(torch.sum, t, dim=dims, out=out))
        return ops


class _ScalingPlan:
    """Everything a scaling-domain solve of one (k, n, e, strategy, dtype, device) needs: buffers and
    the pre-bound calls of a sweep (``head``: the first block at the current potentials; ``test``: the
    stopping error; ``body``: the rest of the sweep), so that a sweep is a flat list of calls."""

    def __init__(self, k: int, n: int, e: int, dense: bool, gram: bool, dtype: torch.dtype,
                 device: torch.device) -> None:
        self.k, self.n, self.e, self.dense, self.gram = k, n, e, dense, gram
        kw = {"dtype": dtype, "device": device}
        self.logk = torch.empty(k, k, n, n, **kw)
        self.kern = torch.empty(k, k, n, n, **kw)
        # u and n s side by side (u_v = 1 / (n s_v) at its update), and their elementwise maxima over the solve
        self.us = torch.ones(2, k, n, **kw)
        self.u, self.s = self.us.unbind(0)
        self.run_max = torch.ones(2, k, n, **kw)
        self.urows, self.srows = list(self.u.unbind(0)), list(self.s.unbind(0))
        self.setup: list[_Op] = [] if dense else [partial(torch.exp, self.logk, out=self.kern)]
        # n Pi_lm (l < m) at the end of a solve: [k, k, n, n], or the Gram layout [kn, kn] (block (l, m))
        self.pm = torch.zeros(k * n, k * n, **kw) if gram else torch.zeros(k, k, n, n, **kw)
        self.stages: list[_ScalingStage] = []
        for upd, blk in _stages(k, e):
            self.stages.append(_ScalingStage(self, upd, blk, dense))
        first, last = self.stages[0], self.stages[-1]
        first_kept = list(first.blk.kept)
        tail = [v for v in last.blk.kept if v not in first_kept and v != last.upd[-1]]
        self.head = first.build + [op for v in first_kept for op in first.contract[v]]
        ones, work = torch.ones_like(self.u), torch.empty_like(self.u)
        self.err = torch.empty((), **kw)
        self.test = [partial(torch.addcmul, ones, self.u, self.s, value=-1, out=work),  # 1 - u_v n s_v = 1 - n m_v
                     partial(torch.linalg.vector_norm, work.view(-1), 1, out=self.err)]
        v0 = first.upd[0]
        self.body: list[_Op] = [partial(torch.reciprocal, self.srows[v0], out=self.urows[v0])]  # s_v0 from head
        for st in self.stages:
            if st is not first:
                self.body += st.build
            for v in st.upd:
                if not (st is first and v == v0):
                    self.body += st.contract[v]
                    self.body.append(partial(torch.reciprocal, self.srows[v], out=self.urows[v]))  # m_v = 1/n
        # every scaling of the sweep is now in u (its value) or s (n s_v = 1 / u_v when it was set): one maximum
        # tracks the largest u_v and the smallest (1 / largest n s_v) of the solve
        self.body.append(partial(torch.maximum, self.run_max, self.us, out=self.run_max))
        self.body += [op for v in tail for op in last.contract[v]]  # the last block's other views, for the test
        self.entries = sum(t.numel() for t in self._buffers())
        self.numpy = device.type == "cpu" and self.entries <= NUMPY_MAX_ENTRIES
        self.err_value: Callable[[], float] = self.err.item
        if self.numpy:  # the same calls on numpy views of the same buffers: a third of torch's per-call cost
            self.head, self.body = _numpy_program(self.head), _numpy_program(self.body)
            self.setup = _numpy_program(self.setup, strict=False)
            first.marginal_ops = _numpy_program(first.marginal_ops, strict=False)
            work_np, err_np = work.view(-1).numpy(), self.err.numpy()
            self.test = [partial(np.multiply, self.u.view(-1).numpy(), self.s.view(-1).numpy(), out=work_np),
                         partial(np.subtract, ones.view(-1).numpy(), work_np, out=work_np),
                         partial(np.abs, work_np, out=work_np), partial(np.add.reduce, work_np, out=err_np)]
            self.err_value = err_np.item

    def pm_block(self, l: int, m: int) -> Tensor:
        n = self.n
        return self.pm[l * n:(l + 1) * n, m * n:(m + 1) * n] if self.gram else self.pm[l, m]

    def marginals(self) -> tuple[Tensor, float]:
        """``(Pi, mass)`` at the current scalings, after :attr:`head` (a fresh tensor)."""
        for op in self.stages[0].marginal_ops:
            op()
        if self.numpy:
            u0, s0 = self.u[0].numpy(), self.s[0].numpy()
            mass = float(np.add.reduce(u0 * s0, dtype=np.float64)) / self.n  # sum_i m_0(P)_i, s from the head
            return torch.from_numpy(np.multiply(self.pm.numpy(), 1.0 / self.n)), mass
        mass = float(torch.dot(self.u[0], self.s[0])) / self.n
        return torch.mul(self.pm, 1.0 / self.n), mass

    def _buffers(self) -> list[Tensor]:
        out = [self.logk, self.kern, self.pm]
        for st in self.stages:
            out += [st.q] + ([st.k_full] if st.dense else [st.l_buf, st.k_in])
        return out

    def start(self, log_kernels: Tensor) -> None:
        if self.numpy and log_kernels.device.type == "cpu":
            np.copyto(self.logk.numpy(), log_kernels.detach().numpy())
            for op in self.setup:
                op()
            self.us.numpy().fill(1.0)
            self.run_max.numpy().fill(1.0)
            return
        self.logk.copy_(log_kernels)
        for op in self.setup:
            op()
        self.us.fill_(1.0)
        self.run_max.fill_(1.0)

    def range_ok(self, floor: float) -> bool:
        extrema = self.run_max.numpy().max(axis=2) if self.numpy else self.run_max.amax(dim=2)
        hi, s_hi = extrema.tolist()
        return scaling_range_ok(floor, [1.0 / x if x > 0 else math.inf for x in s_hi], hi, self.k, self.n, self.u.dtype)


_PLANS = threading.local()


def _plan(k: int, n: int, e: int, dense: bool, gram: bool, dtype: torch.dtype, device: torch.device) -> _ScalingPlan:
    """A plan from this thread's cache (small plans only), else a new one."""
    cache: OrderedDict = getattr(_PLANS, "cache", None) or OrderedDict()
    _PLANS.cache = cache
    key = (k, n, e, dense, gram, dtype, device)
    plan = cache.get(key)
    if plan is not None:
        cache.move_to_end(key)
        return plan
    plan = _ScalingPlan(k, n, e, dense, gram, dtype, device)
    if plan.entries <= PLAN_CACHE_MAX_ENTRIES:
        cache[key] = plan
        while len(cache) > PLAN_CACHE_SIZE:
            cache.popitem(last=False)
    return plan


def kernel_floor(log_kernels: Tensor) -> float:
    """``-lambda = sum_{l<m} min log K_lm``: every product of pairwise kernel entries is >= exp(-lambda)."""
    mins = log_kernels.amin(dim=(2, 3))  # [k, k], symmetric
    return float((mins.sum() - mins.diagonal().sum()) / 2)


def scaling_range_ok(floor: float, lo: list[float], hi: list[float], k: int, n: int, dtype: torch.dtype) -> bool:
    """The exactness guard of :func:`scaling_sinkhorn`: ``lo[v]`` / ``hi[v]`` are the smallest / largest
    scaling ``u_v`` used (not logs); ``floor = -lambda`` (:func:`kernel_floor`)."""
    log_tiny, log_max = _log_range(dtype)
    p_lo = p_hi = 1.0
    for x in lo:
        p_lo *= min(1.0, x) if x == x else 0.0  # NaN: fail
    for x in hi:
        p_hi *= max(1.0, x) if x == x else math.inf
    if not (p_lo > 0.0 and p_hi < math.inf):
        return False
    return (floor + math.log(p_lo) >= log_tiny + LOG_MARGIN
            and math.log(p_hi) + k * math.log(n) <= log_max - LOG_MARGIN)


@functools.lru_cache(maxsize=None)
def _log_range(dtype: torch.dtype) -> tuple[float, float]:
    """``(log smallest normal, log largest finite)`` of a floating dtype."""
    finfo = torch.finfo(dtype)
    return math.log(finfo.tiny), math.log(finfo.max)


@functools.lru_cache(maxsize=256)
def choose_strategy(k: int, n: int, budget: int = 2**24) -> tuple[int, bool]:
    """(eliminated views per stage, dense) for :func:`scaling_sinkhorn`: the materialised n^k kernel up to
    ``DENSE_MAX_ENTRIES``, else the pairwise contractions with the log-domain solver's ``e`` (measured,
    see docs/benchmarks-objectives.md)."""
    e = _choose_elim(k, n, budget)
    return e, n**k <= DENSE_MAX_ENTRIES


@torch.no_grad()
def scaling_sinkhorn(log_kernels: Tensor, tol: float, max_iter: int, memory_budget: int = 2**24,
                     elim: int | None = None, dense: bool | None = None, floor: float | None = None,
                     gram: bool = False) -> SinkhornResult:
    """Algorithm 1 for pairwise-separable costs on the scalings ``u_l = exp(g_l)``: the iterates of
    :func:`pairwise_sinkhorn`, which it hands the solve to (log domain, from the start) when the scalings
    could have left the dtype's normal range.

    Stages as in :func:`pairwise_sinkhorn`. Per sweep and stage, ``n Q_B`` (the block marginal without
    the block's own scalings, ``n`` folded in) is one matrix-vector product with the materialised kernel
    (``dense``, small n^k) or an elementwise product, a GEMM and a Hadamard product on the pairwise
    kernels; the fixed factors are exponentiated once per solve. Each view update is one or two
    matrix-vector products and a reciprocal, ``u_v = 1 / (n s_v)``. All calls are pre-bound
    (``functools.partial`` over preallocated buffers, kept between solves for small problems), so a sweep
    is a flat list of calls. The stopping test is that of :func:`pairwise_sinkhorn` (the first block's
    marginals at the potentials the sweep left, the last block's for its other views),
    ``sum_v ||1 - n u_v o s_v||_1 / n``: one number to the host per sweep.

    Exactness guard (:func:`scaling_range_ok`): every number a solve forms is a product of pairwise
    kernel entries (>= exp(-lambda) all together, ``floor = -lambda``, :func:`kernel_floor`) and of at
    most one scaling per view, or a sum of at most n^k such products. Two elementwise running extrema per
    sweep give ``lo[v]`` / ``hi[v]``, the smallest / largest ``u_v`` of the whole solve; nothing
    underflowed or overflowed when ``-lambda + sum_v min(0, log lo[v]) >= log(tiny) + LOG_MARGIN`` and
    ``sum_v max(0, log hi[v]) + k log n <= log(max) - LOG_MARGIN``, and then only relative rounding
    errors occurred, as in the log domain. The guard is evaluated before the first sweep (``-lambda``
    alone), every ``RANGE_CHECK_EVERY`` sweeps, on a non-finite error and when the solve stops; if it
    fails, :func:`pairwise_sinkhorn` solves the problem instead (``info["scaling_domain"] = 0``,
    ``info["scaling_fallback_sweep"]`` = the sweep count when it failed), so the answer is that of
    Algorithm 1 either way.

    ``elim`` / ``dense``: the strategy (default :func:`choose_strategy`); ``floor``: a lower bound of
    ``sum_{l<m} min log K_lm`` known to the caller (default: computed).
    """
    k, _, n, _ = log_kernels.shape
    e_auto, dense_auto = choose_strategy(k, n, memory_budget)
    e = e_auto if elim is None else elim
    dense = dense_auto if dense is None else dense
    floor = kernel_floor(log_kernels) if floor is None else floor
    info = {"elim_views": float(e), "stages": 0.0, "scaling_domain": 1.0, "dense_stages": float(dense)}

    def fallback(sweep: int) -> SinkhornResult:
        res = pairwise_sinkhorn(log_kernels, tol, max_iter, memory_budget)
        res.info.update({"scaling_domain": 0.0, "scaling_fallback_sweep": float(sweep)})
        if gram:
            res.pair_marginals = res.pair_marginals.transpose(1, 2).reshape(k * n, k * n)
        return res

    if not scaling_range_ok(floor, [1.0] * k, [1.0] * k, k, n, log_kernels.dtype):
        return fallback(0)
    plan = _plan(k, n, e, dense, gram, log_kernels.dtype, log_kernels.device)
    info["stages"] = float(len(plan.stages))
    plan.start(log_kernels)
    head, test, body = plan.head, plan.test, plan.body
    it = 0
    err = math.inf
    while True:
        for op in head:
            op()
        if it > 0:
            for op in test:
                op()
            err = plan.err_value() / n
            if not math.isfinite(err) or (it % RANGE_CHECK_EVERY == 0 and not plan.range_ok(floor)):
                return fallback(it)
            if err < tol or it >= max_iter:
                break
        for op in body:
            op()
        it += 1
    if not plan.range_ok(floor):
        return fallback(it)
    pm, mass = plan.marginals()
    log_u = torch.from_numpy(np.log(plan.u.numpy())) if plan.numpy else plan.u.log()
    return SinkhornResult(log_u=log_u, iterations=it, marginal_error=err, mass=mass, converged=err < tol,
                          pair_marginals=pm, info=info)


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
