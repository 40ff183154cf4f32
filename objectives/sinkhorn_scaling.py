"""The scaling-domain Sinkhorn engine: M3G's default solver, :func:`scaling_sinkhorn`.

Algorithm 1 of :mod:`fusebench.objectives.sinkhorn` (same stages, same iterates as its
:func:`~fusebench.objectives.sinkhorn_pairwise.pairwise_sinkhorn`) run on the scalings ``u_l = exp(g_l)``
instead of log-potentials: the kernels are exponentiated once per solve, a view update is a
matrix-vector product and a reciprocal, and every call of a sweep is pre-bound to preallocated
buffers, so a sweep is a flat list of calls. Each stage is either one matrix-vector product with the
materialised n^k kernel (``dense``, for ``n^k <= DENSE_MAX_ENTRIES``) or an elementwise product, a GEMM
and a Hadamard product on the pairwise kernels. A range guard (products of kernels and scalings must
stay inside the dtype's normal range, checked on running extrema of the scalings) decides whether the
solve is exact; if not, :func:`~fusebench.objectives.sinkhorn_pairwise.pairwise_sinkhorn` solves the problem
instead, so the answer is that of Algorithm 1 either way.

Why this path, and what it gains: the reference solver (:func:`~fusebench.objectives.sinkhorn.dense_sinkhorn`,
Algorithm 1 on the materialised n^k cost tensor, the equation of :mod:`fusebench.objectives.m3g` as written)
takes one exp per entry per marginal; this path runs the same iterates through GEMMs over ``n^(k-2)``-sized
factors of the pairwise kernels. Measured (``fusebench bench objectives``, docs/benchmarks-objectives.md): at
k = 4, n = 64, d = 256, float64 a call takes 13.2 ms here against 4088 ms for the reference (310x),
values equal to 2.2e-16, the same iteration count; k = 6, n = 32 (32^6, about 1.1e9 cost entries for the
reference) runs in 0.5-0.7 s here.

What it holds:

* the plan compiler: :class:`_ScalingStage` / :class:`_ScalingPlan` turn (k, n, strategy, dtype,
  device, block) into buffers and the pre-bound calls of a sweep (``head``, ``test``, ``body``) and of the
  pair marginals;
* the torch-to-numpy call translator (:func:`_numpy_program`): small CPU plans
  (``NUMPY_MAX_ENTRIES``) run the same calls through numpy on the same memory;
* the caches: small plans per thread (``PLAN_CACHE_MAX_ENTRIES``, ``PLAN_CACHE_SIZE``), the strategy
  rule (:func:`choose_strategy`) and the dtype ranges;
* the exactness guard (:func:`kernel_floor`, :func:`scaling_range_ok`, ``LOG_MARGIN``,
  ``RANGE_CHECK_EVERY``; the compiled backend of ``m3g`` reads the last two from here);
* the solver itself, :func:`scaling_sinkhorn`: the per-sweep loop (one stopping error read per sweep; the CPU's
  default), or, on CUDA by default (:func:`blocked_by_default`) or with ``blocked=True``, the blocked solve of
  :mod:`~fusebench.objectives.sinkhorn_blocked` over a plan built with ``block > 0`` (the same sweeps and answer,
  the errors read once per block, the calls replayed as CUDA graphs).

It is longer than ~450 lines because the compiler, the translator and the solver form one unit: the
translator rewrites exactly the calls the compiler binds, and the solver runs them.

Shape:
    log_kernels: ``[k, k, n, n]`` as in :mod:`fusebench.objectives.sinkhorn`; result ``pair_marginals``
    ``[k, k, n, n]`` (l < m filled), or with ``gram=True`` the Gram layout ``[kn, kn]`` (block (l, m)).

Example (k = 3 views of n = 4 points: the scaling-domain iterates are the log-domain solver's)::

    >>> import torch
    >>> from fusebench.objectives.sinkhorn_pairwise import pairwise_sinkhorn
    >>> from fusebench.objectives.sinkhorn_scaling import scaling_sinkhorn
    >>> _ = torch.manual_seed(0)
    >>> z = torch.nn.functional.normalize(torch.randn(3, 4, 8, dtype=torch.float64), dim=-1)
    >>> log_kernels = -((z[:, None, :, None] - z[None, :, None, :]) ** 2).sum(-1) / (9 * 0.5)
    >>> res = scaling_sinkhorn(log_kernels, tol=1e-9, max_iter=1000)
    >>> ref = pairwise_sinkhorn(log_kernels, tol=1e-9, max_iter=1000)
    >>> res.info["scaling_domain"], res.converged, res.iterations == ref.iterations
    (1.0, True, True)
    >>> torch.allclose(res.log_u, ref.log_u)
    True
"""

from __future__ import annotations

import functools
import math
import threading
from collections import OrderedDict
from functools import partial
from typing import Callable

import numpy as np
import torch
from torch import Tensor

from fusebench.objectives import sinkhorn_blocked
from fusebench.objectives.sinkhorn import SinkhornResult
from fusebench.objectives.sinkhorn_pairwise import _Block, _choose_elim, _pair_sum, _side, _stages, pairwise_sinkhorn
from fusebench.objectives.sinkhorn_blocked import NonFiniteKernels

__all__ = ["scaling_sinkhorn", "choose_strategy", "kernel_floor", "scaling_range_ok", "blocked_by_default",
           "NonFiniteKernels"]


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
    stopping error; ``body``: the rest of the sweep), so that a sweep is a flat list of calls. With
    ``block > 0`` also the calls of a blocked solve (``program``, :mod:`~fusebench.objectives.sinkhorn_blocked`;
    torch calls only, no numpy bindings)."""

    def __init__(self, k: int, n: int, e: int, dense: bool, gram: bool, dtype: torch.dtype,
                 device: torch.device, block: int = 0) -> None:
        self.k, self.n, self.e, self.dense, self.gram = k, n, e, dense, gram
        kw = {"dtype": dtype, "device": device}
        self.logk = torch.empty(k, k, n, n, **kw)
        self.kern = torch.empty(k, k, n, n, **kw)
        # u and n s side by side (u_v = 1 / (n s_v) at its update), and their elementwise maxima over the solve:
        # one buffer, the whole state of a solve between two sweeps
        self.state = torch.ones(4, k, n, **kw)
        self.us, self.run_max = self.state[:2], self.state[2:]
        self.u, self.s = self.us.unbind(0)
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
        self.numpy = device.type == "cpu" and self.entries <= NUMPY_MAX_ENTRIES and not block
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
        self.program = sinkhorn_blocked.BlockProgram(self, block) if block else None

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
        return self.guard(floor, hi, s_hi)

    def guard(self, floor: float, hi: list[float], s_hi: list[float]) -> bool:
        """The range guard from the largest ``u_v`` (``hi``) and the largest ``n s_v`` (``s_hi``) of each view."""
        return scaling_range_ok(floor, [1.0 / x if x > 0 else math.inf for x in s_hi], hi, self.k, self.n, self.u.dtype)


_PLANS = threading.local()


def _plan(k: int, n: int, e: int, dense: bool, gram: bool, dtype: torch.dtype, device: torch.device,
          block: int = 0) -> _ScalingPlan:
    """A plan from this thread's cache (small plans only), else a new one (``block``: sweeps per block of a
    blocked solve, 0 for the per-sweep loop)."""
    cache: OrderedDict = getattr(_PLANS, "cache", None) or OrderedDict()
    _PLANS.cache = cache
    key = (k, n, e, dense, gram, dtype, device, block)
    plan = cache.get(key)
    if plan is not None:
        cache.move_to_end(key)
        return plan
    plan = _ScalingPlan(k, n, e, dense, gram, dtype, device, block)
    if plan.entries <= PLAN_CACHE_MAX_ENTRIES:
        cache[key] = plan
        while len(cache) > PLAN_CACHE_SIZE:
            cache.popitem(last=False)
    return plan


def kernel_floor(log_kernels: Tensor) -> float:
    """``-lambda = sum_{l<m} min log K_lm``: every product of pairwise kernel entries is >= exp(-lambda)."""
    return float(_kernel_floor_tensor(log_kernels))


def _kernel_floor_tensor(log_kernels: Tensor) -> Tensor:
    """:func:`kernel_floor` as a 0-dim tensor on the kernels' device (no synchronisation)."""
    mins = log_kernels.amin(dim=(2, 3))  # [k, k], symmetric
    return (mins.sum() - mins.diagonal().sum()) / 2


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


def blocked_by_default(device: torch.device) -> bool:
    """Whether :func:`scaling_sinkhorn` runs blocked (no host synchronisation per sweep) on ``device`` unless told:
    on CUDA yes, elsewhere no (the CPU keeps the per-sweep loop and its numpy bindings)."""
    return device.type == "cuda"


def _block_sweeps(device: torch.device, blocked: bool | None, block: int | None, graphs: bool | None) -> int:
    """Sweeps per block of this solve (0: the per-sweep loop), the arguments checked."""
    if blocked is not None and not isinstance(blocked, bool):
        raise ValueError(f"scaling_sinkhorn: blocked must be True, False or None, got {blocked!r}")
    if block is not None and (isinstance(block, bool) or not isinstance(block, int) or block < 1):
        raise ValueError(f"scaling_sinkhorn: block must be an integer >= 1 (sweeps per block), got {block!r}")
    if graphs and device.type != "cuda":
        raise ValueError(f"scaling_sinkhorn: graphs=True needs log_kernels on a CUDA device, got {device}")
    on = blocked_by_default(device) if blocked is None else blocked
    if graphs and not on:
        raise ValueError("scaling_sinkhorn: graphs=True needs the blocked solve (blocked=True or None)")
    return (sinkhorn_blocked.BLOCK_SWEEPS if block is None else block) if on else 0


@torch.no_grad()
def scaling_sinkhorn(log_kernels: Tensor, tol: float, max_iter: int, memory_budget: int = 2**24,
                     elim: int | None = None, dense: bool | None = None, floor: float | Tensor | None = None,
                     gram: bool = False, blocked: bool | None = None, block: int | None = None,
                     graphs: bool | None = None) -> SinkhornResult:
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

    Blocked solve (``blocked``; default on CUDA, :func:`blocked_by_default`): the same sweeps with the stopping
    errors recorded on the device and read once per ``block`` sweeps (default ``sinkhorn_blocked.BLOCK_SWEEPS``),
    the state of every sweep of a block kept so that the solve returns exactly where the per-sweep loop stops
    (:mod:`~fusebench.objectives.sinkhorn_blocked`); on CUDA its calls are replayed as CUDA graphs (``graphs``,
    default ``sinkhorn_blocked.CUDA_GRAPHS``). ``info["block_sweeps"]``, ``info["cuda_graphs"]`` and
    ``info["host_reads"]`` (device-to-host reads of the errors) say how it ran.

    ``elim`` / ``dense``: the strategy (default :func:`choose_strategy`); ``floor``: a lower bound of
    ``sum_{l<m} min log K_lm`` known to the caller (default: computed), or a 0-dim tensor holding it, which a
    blocked solve reads with its first block instead of synchronising for it (:class:`NonFiniteKernels` when it
    is NaN or infinite).
    """
    k, _, n, _ = log_kernels.shape
    block = _block_sweeps(log_kernels.device, blocked, block, graphs)
    e_auto, dense_auto = choose_strategy(k, n, memory_budget)
    e = e_auto if elim is None else elim
    dense = dense_auto if dense is None else dense
    if isinstance(floor, Tensor) and not block:
        floor = float(floor)
        if not math.isfinite(floor):
            raise NonFiniteKernels(f"scaling_sinkhorn: the lower bound of the log-kernels is {floor}")
    if floor is None:
        floor = _kernel_floor_tensor(log_kernels) if block else kernel_floor(log_kernels)
    info = {"elim_views": float(e), "stages": 0.0, "scaling_domain": 1.0, "dense_stages": float(dense)}

    def fallback(sweep: int) -> SinkhornResult:
        res = pairwise_sinkhorn(log_kernels, tol, max_iter, memory_budget)
        res.info.update({"scaling_domain": 0.0, "scaling_fallback_sweep": float(sweep)})
        if gram:
            res.pair_marginals = res.pair_marginals.transpose(1, 2).reshape(k * n, k * n)
        return res

    if not isinstance(floor, Tensor) and not scaling_range_ok(floor, [1.0] * k, [1.0] * k, k, n, log_kernels.dtype):
        return fallback(0)
    plan = _plan(k, n, e, dense, gram, log_kernels.dtype, log_kernels.device, block)
    info["stages"] = float(len(plan.stages))
    if block:
        graphs = (sinkhorn_blocked.CUDA_GRAPHS if graphs is None else graphs) and log_kernels.device.type == "cuda"
        out = sinkhorn_blocked.solve(plan.program, log_kernels, floor, tol, max_iter, RANGE_CHECK_EVERY, plan.guard,
                                     graphs)
        if out.fallback_sweep >= 0:
            return fallback(out.fallback_sweep)
        info.update(block_sweeps=float(block), cuda_graphs=float(out.graphs), host_reads=float(out.reads))
        return SinkhornResult(log_u=out.log_u, iterations=out.iterations, marginal_error=out.marginal_error,
                              mass=out.mass, converged=out.marginal_error < tol, pair_marginals=out.pair_marginals,
                              info=info)
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
