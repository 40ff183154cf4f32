"""The log-domain pairwise Sinkhorn: M3G's Algorithm 1 without the n^k tensor (a fast path).

The reference is :func:`fusebench.objectives.sinkhorn.dense_sinkhorn` (Algorithm 1 of Piran et al. 2024 on the
materialised tensor ``log K``); this module takes the same iterates for pairwise-separable costs, and is the
fallback of :func:`~fusebench.objectives.sinkhorn_scaling.scaling_sinkhorn` when its scalings could leave the
dtype's range (small eps in float32).

Why, and what it gains: the reference holds n^k entries and takes one exp per entry and marginal, so M3G at
k = 4 views of a batch of 32 (about 10^6 entries) is at its limit and k = 5 beyond it (``MAX_DENSE_ENTRIES``);
here memory is O(n^(k-e)) and a marginal is a matrix product of n^k multiply-adds, no exp per entry. Measured
with ``fusebench bench objectives --pairwise`` (CPU, float64, one thread, eps 0.2, tol 1e-9, the same kernels in
one run, while a 2-worker sweep loaded the 2-core machine): the same iterates (potentials equal to 4e-15, the same
sweeps) 1.7x faster at k = 3, n = 32, 2.8x at k = 4, n = 16, 16x at k = 4, n = 24 and 12x at k = 5, n = 12; the
gain grows with n^k (docs/speed.md).

The method: for pairwise-separable costs
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
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from fusebench.objectives.sinkhorn import SinkhornResult, marginal_l1

__all__ = ["pairwise_sinkhorn"]


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
            err = tail_err + sum(marginal_l1(st.log_marginal(v, True), n) for v in st.kept)
            if err < tol or it >= max_iter:
                break
        for s, (upd, blk) in enumerate(stages):
            if s > 0:
                st = _StageState(_contract(log_kernels, g, blk, stats))
            for v in upd:
                st.update(g, v, log_n)
        tail_err = sum(marginal_l1(st.log_marginal(v, True), n) for v in tail_views)
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
