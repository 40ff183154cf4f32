"""M3G (cost ``cv``) as one compiled call for small problems on the CPU (numba; extra ``fast``).

The same computation as the eager fast path of :class:`fusebench.objectives.m3g.M3G` (Piran et al.,
ICML 2024, arXiv:2405.19532, Def. 3.1, Eq. 12, Prop. 3.2, Algorithm 1), for ``n^k`` small enough to
materialise the kernel, written as one machine-code function so that a forward costs one call instead
of the few hundred small tensor calls of the eager path (their fixed cost, not arithmetic, is what a
problem of this size spends its time on; docs/benchmarks-objectives.md)::

    z_r = x_r / max(||x_r||, 1e-12)                       (normalisation, rows r of the stacked views)
    D_lm[i, j] = ||z_l[i] - z_m[j]||^2 = 2 - 2 z_l[i].z_m[j]                      (l < m)
    n K[i_1..i_k] = n exp(-sum_{l<m} D_lm[i_l, i_m] / (k^2 eps))       (kernel of c_cv, Eq. 12)
    Algorithm 1 on the scalings u_v = exp(f_v / eps):  u_v <- 1 / (n sum_{i_-v} K prod_{w != v} u_w)
    stop when sum_v ||m_v(P) - 1/n||_1 < tol (checked after every sweep), P = K (x) u
    gap = <J, C> - eps log n - (eps sum_v mean(log u_v) - eps (mass - 1))
    d gap / d z = -2 (W + W^T) Z,  W = (J - Pi) / k^2 on the pairs l < m              (Danskin, Prop. 3.2)
    d gap / d x_r = (g_r - z_r <z_r, g_r>) / ||x_r||   (g_r / 1e-12 where the norm was clamped)

Why this path, and what it gains: at the sizes of the CPU benchmarks (k = 3, n = 16-32) a solve takes about 4
sweeps and the eager path's few hundred small tensor / numpy calls (2-5 us each, plus its 0.26-0.42 ms shell of
normalisation, Gram matrix and gradient) cost more than the arithmetic. Measured (``fusebench bench objectives
--vs ott``, docs/benchmarks-objectives.md): at k = 3, n = 16 the eager path took 2.18x ott-jax's time and 1.03x at
n = 32; compiled, about 45 us of kernel and 0.30-0.37 ms per forward + backward in the side-by-side bench, below
ott-jax at both (at most 0.87x over the 20 configurations both libraries run).

Everything is computed in float64 whatever the input dtype (the result is cast back to the views' dtype,
float32 for half-precision inputs, which the objective base class upcasts), so the range
guard below is that of float64 and float32 inputs keep the scaling domain at eps where the eager
float32 solve has to hand over to the log domain. The guard is the eager one
(:func:`fusebench.objectives.sinkhorn_scaling.scaling_range_ok`): every product the solve forms must stay
``exp(LOG_MARGIN)`` inside float64's normal range, judged from the running maxima of the scalings
before the first sweep, every ``RANGE_CHECK_EVERY`` sweeps, on a non-finite error and at the end. When
it fails the function returns ``FALLBACK`` and the caller solves the problem on the eager path (log
domain), so the answer is Algorithm 1's either way. A non-finite squared distance (NaN / Inf in the
views) returns ``NON_FINITE``.

Summation order differs from the eager path's (reductions may be reassociated for vector
instructions), so values agree to rounding, not bit for bit; the iterates are the same.
"""

from __future__ import annotations

import math

import numba
import numpy as np

#: status codes of :func:`cv_gap`
OK, NON_FINITE, FALLBACK = 0, 1, 2
#: its ``grad_mode``: no gradient, the whole gradient, the weights of the gradient's product for the caller
NO_GRAD, GRAD, SYM = 0, 1, 2
#: largest ``(k n)^2 d`` for which ``GRAD`` (the product written here) beats ``SYM`` + torch's GEMM (measured)
GRAD_MAX_MACS = 2**18
#: the ``eps`` of :func:`torch.nn.functional.normalize`
NORM_EPS = 1e-12
_LOG_TINY = math.log(np.finfo(np.float64).tiny)
_LOG_MAX = math.log(np.finfo(np.float64).max)

_jit = numba.njit(cache=True, nogil=True, fastmath={"reassoc", "contract"})


@_jit
def _outer(u, first, stop, n, out):  # pragma: no cover - compiled
    """``out[:n^(stop - first)]`` = the outer product of the rows ``u[first:stop]`` (first view slowest)."""
    out[0] = 1.0
    size = 1
    for w in range(first, stop):
        for a in range(size - 1, -1, -1):
            la = out[a]
            for i in range(n - 1, -1, -1):
                out[a * n + i] = la * u[w, i]
        size *= n
    return size


@_jit
def _step_up(idx, j, n):  # pragma: no cover - compiled
    """``idx[:j]``, the indices over ``j`` views of a flat position (first view slowest), to the next one."""
    p = j - 1
    while p >= 0:
        idx[p] += 1
        if idx[p] < n:
            return
        idx[p] = 0
        p -= 1


@_jit
def _step_down(idx, j, n):  # pragma: no cover - compiled
    """``idx[:j]`` to the previous flat position."""
    p = j - 1
    while p >= 0:
        idx[p] -= 1
        if idx[p] >= 0:
            return
        idx[p] = n - 1
        p -= 1


@_jit
def _contract(kern, u, v, k, n, left, right, out):  # pragma: no cover - compiled
    """``out[i] = sum_{i_-v} (n K)[.., i, ..] prod_{w != v} u_w[i_w]``, i.e. ``n S_v`` (m_v = u_v S_v)."""
    na = _outer(u, 0, v, n, left)
    nb = _outer(u, v + 1, k, n, right)
    for i in range(n):
        out[i] = 0.0
    if nb == 1:
        for a in range(na):
            la = left[a]
            base = a * n
            for i in range(n):
                out[i] += la * kern[base + i]
        return
    for a in range(na):
        la = left[a]
        for i in range(n):
            base = (a * n + i) * nb
            acc = 0.0
            for b in range(nb):
                acc += kern[base + b] * right[b]
            out[i] += la * acc


@_jit
def _range_ok(floor, umax, smax, k, n, margin):  # pragma: no cover - compiled
    """:func:`fusebench.objectives.sinkhorn_scaling.scaling_range_ok` in float64: ``lo[v] = 1 / max(n S_v)``,
    ``hi[v] = max u_v`` over the solve."""
    log_lo = 0.0
    log_hi = 0.0
    for v in range(k):
        hi = 0.0
        s_hi = 0.0
        for i in range(n):
            if not (umax[v, i] <= np.inf and smax[v, i] <= np.inf):  # NaN
                return False
            hi = max(hi, umax[v, i])
            s_hi = max(s_hi, smax[v, i])
        if hi == np.inf or s_hi == np.inf or s_hi <= 0.0:
            return False
        log_lo += min(0.0, -math.log(s_hi))
        log_hi += max(0.0, math.log(hi))
    return floor + log_lo >= _LOG_TINY + margin and log_hi + k * math.log(n) <= _LOG_MAX - margin


@_jit
def cv_gap(views, eps, tol, max_iter, normalise, grad_mode, margin, check_every):  # pragma: no cover - compiled
    """The M3G gap (cost ``cv``) of ``views`` [k, n, d] (C-contiguous float32 or float64) and its gradient.

    ``grad_mode``: ``NO_GRAD``; ``GRAD``: ``out`` (the shape and dtype of ``views``) is the gradient with
    respect to the views; ``SYM``: the product ``-2 (W + W^T) Z`` is left to the caller (a BLAS GEMM: for
    larger problems several times faster than the loops here), ``finish_grad(sym @ z, z, norms,
    normalise, out)`` then writes the gradient into ``out``.

    Returns ``(status, gap, out, iterations, marginal_error, mass, cost_J, cost_P, dual, fallback_sweep,
    sym, z, norms)`` (``sym`` [k n, k n] is filled for ``SYM`` only, ``z`` [k n, d] are the unit rows,
    float64). The numbers are only meaningful when ``status == OK``."""
    k, n, d = views.shape
    kn = k * n
    x = views.reshape(kn, d)
    out = np.zeros_like(views)
    empty = out
    no_sym = np.zeros((0, 0))
    kk = float(k * k)
    # normalisation
    z = np.empty((kn, d))
    nrm = np.empty(kn)
    for r in range(kn):
        s = 0.0
        for c in range(d):
            s += x[r, c] * x[r, c]
        nrm[r] = math.sqrt(s)
        inv = 1.0 / max(nrm[r], NORM_EPS) if normalise else 1.0
        for c in range(d):
            z[r, c] = x[r, c] * inv
    # squared distances of the pairs l < m (rows l n + i, columns m n + j), the log kernels' floor
    dist = np.zeros((kn, kn))
    dist_kern = np.empty((k, k, n, n))
    floor = 0.0
    for l in range(k):
        for m in range(l + 1, k):
            dmax = -np.inf
            for i in range(n):
                zi = z[l * n + i]
                for j in range(n):
                    zj = z[m * n + j]
                    dot = 0.0
                    for c in range(d):
                        dot += zi[c] * zj[c]
                    dv = 2.0 - 2.0 * dot
                    if not (abs(dv) < np.inf):  # NaN or Inf
                        return NON_FINITE, 0.0, empty, 0, 0.0, 0.0, 0.0, 0.0, 0.0, 0, no_sym, z, nrm
                    dist[l * n + i, m * n + j] = dv
                    dmax = max(dmax, dv)
            floor -= dmax / (kk * eps)
    # the guard before the first sweep (the kernels alone)
    if not (floor >= _LOG_TINY + margin and k * math.log(n) <= _LOG_MAX - margin):
        return FALLBACK, 0.0, empty, 0, 0.0, 0.0, 0.0, 0.0, 0.0, 0, no_sym, z, nrm
    # pairwise kernels K_lm = exp(-D_lm / (k^2 eps)) (l < m), then n K, flat (first view slowest), one view
    # at a time: level j holds n prod_{l<m<j} K_lm over the first j views; a row of level j + 1 is an entry
    # of level j times the rows K_{l,j}[i_l, :] (elementwise, contiguous)
    scale = -1.0 / (kk * eps)
    log_n = math.log(n)
    for l in range(k):
        for m in range(l + 1, k):
            for i in range(n):
                for j in range(n):
                    dist_kern[l, m, i, j] = math.exp(scale * dist[l * n + i, m * n + j])
    total = n**k
    kern = np.empty(total)
    kern[:n] = float(n)
    size = n
    idx = np.zeros(k, dtype=np.int64)
    for j in range(1, k):
        idx[:j] = n - 1
        for a in range(size - 1, -1, -1):  # in place, from the top (rows a n.. never overwrite entries < a)
            if a < size - 1:
                _step_down(idx, j, n)
            val = kern[a]
            row = kern[a * n:(a + 1) * n]
            for i in range(n):
                row[i] = val
            for l in range(j):
                kl = dist_kern[l, j, idx[l]]
                for i in range(n):
                    row[i] *= kl[i]
        size *= n
    # Algorithm 1 on the scalings
    u = np.ones((k, n))
    s_rows = np.ones((k, n))  # n S_v (u_v = 1 / n S_v at its update)
    umax = np.ones((k, n))
    smax = np.ones((k, n))
    left = np.empty(max(n ** (k - 1), 1))
    right = np.empty(max(n ** (k - 1), 1))
    it = 0
    err = np.inf
    while True:
        if it == 0:
            _contract(kern, u, 0, k, n, left, right, s_rows[0])
        else:
            for v in range(k - 1):  # the last view's S is current from its update
                _contract(kern, u, v, k, n, left, right, s_rows[v])
            err = 0.0
            for v in range(k):
                for i in range(n):
                    err += abs(1.0 - u[v, i] * s_rows[v, i])
            err /= n
            if not (err < np.inf) or (it % check_every == 0 and not _range_ok(floor, umax, smax, k, n, margin)):
                return FALLBACK, 0.0, empty, 0, 0.0, 0.0, 0.0, 0.0, 0.0, it, no_sym, z, nrm
            if err < tol or it >= max_iter:
                break
        for v in range(k):
            if v > 0:
                _contract(kern, u, v, k, n, left, right, s_rows[v])
            for i in range(n):
                u[v, i] = 1.0 / s_rows[v, i]
                umax[v, i] = max(umax[v, i], u[v, i])
                smax[v, i] = max(smax[v, i], s_rows[v, i])
        it += 1
    if not _range_ok(floor, umax, smax, k, n, margin):
        return FALLBACK, 0.0, empty, 0, 0.0, 0.0, 0.0, 0.0, 0.0, it, no_sym, z, nrm
    # pair marginals Pi_lm (l < m, Gram layout), the mass: P row by row over the last view
    pm = np.zeros((kn, kn))
    mass = 0.0
    inv_n = 1.0 / n
    prefix = left
    _outer(u, 0, k - 1, n, prefix)
    last = k - 1
    prow = np.empty(n)
    idx[:] = 0
    for a in range(n ** (k - 1)):
        if a > 0:
            _step_up(idx, k - 1, n)
        w = prefix[a] * inv_n
        rsum = 0.0
        for i in range(n):
            prow[i] = kern[a * n + i] * w * u[last, i]
            rsum += prow[i]
        mass += rsum
        for l in range(last):
            target = pm[l * n + idx[l], last * n:(last + 1) * n]
            for i in range(n):
                target[i] += prow[i]
            for m in range(l + 1, last):
                pm[l * n + idx[l], m * n + idx[m]] += rsum
    # gap: <J, C> - eps log n - dual;  <P, C> for the diagnostics
    cost_j = 0.0
    cost_p = 0.0
    for l in range(k):
        for m in range(l + 1, k):
            for i in range(n):
                cost_j += dist[l * n + i, m * n + i]
                for j in range(n):
                    cost_p += pm[l * n + i, m * n + j] * dist[l * n + i, m * n + j]
    cost_j /= n * kk
    cost_p /= kk
    sum_g = 0.0
    for v in range(k):
        for i in range(n):
            sum_g += math.log(u[v, i])
    dual = eps * sum_g / n - eps * (mass - 1.0)
    gap = cost_j - eps * log_n - dual
    if grad_mode == NO_GRAD:
        return OK, gap, out, it, err, mass, cost_j, cost_p, dual, 0, no_sym, z, nrm
    # Danskin gradient: -2 (W + W^T) Z with W = (J - Pi) / k^2 on the blocks l < m, through the normalisation
    sym = np.zeros((kn, kn))  # -2 (W + W^T), W = (J - Pi) / k^2 on the blocks l < m
    for l in range(k):
        for m in range(l + 1, k):
            for i in range(n):
                for j in range(n):
                    w = -pm[l * n + i, m * n + j]
                    if i == j:
                        w += inv_n
                    w *= -2.0 / kk
                    sym[l * n + i, m * n + j] = w
                    sym[m * n + j, l * n + i] = w
    if grad_mode == SYM:
        return OK, gap, out, it, err, mass, cost_j, cost_p, dual, 0, sym, z, nrm
    gz = np.zeros((kn, d))
    for l in range(k):  # rows of view l, four at a time: axpys over the rows c of the other views
        for r0 in range(l * n, (l + 1) * n, 4):
            r1 = min(r0 + 4, (l + 1) * n)
            for c in range(kn):
                if l * n <= c < (l + 1) * n:  # the block (l, l) of sym is 0
                    continue
                zc = z[c]
                for r in range(r0, r1):
                    w = sym[r, c]
                    g = gz[r]
                    for t in range(d):
                        g[t] += w * zc[t]
    finish_grad(gz, z, nrm, normalise, out)
    return OK, gap, out, it, err, mass, cost_j, cost_p, dual, 0, no_sym, z, nrm


@_jit
def finish_grad(gz, z, nrm, normalise, out):  # pragma: no cover - compiled
    """``out`` [k, n, d] (the views' dtype) = ``d gap / d x`` from ``gz = -2 (W + W^T) Z`` [k n, d] (float64):
    ``(g_r - z_r <z_r, g_r>) / ||x_r||`` when the views were normalised (no radial part where the norm was
    clamped), else ``gz`` itself."""
    kn, d = gz.shape
    grad = out.reshape(kn, d)
    for r in range(kn):
        if not normalise:
            for t in range(d):
                grad[r, t] = gz[r, t]
            continue
        radial = 0.0
        if nrm[r] > NORM_EPS:
            for t in range(d):
                radial += z[r, t] * gz[r, t]
        inv = 1.0 / max(nrm[r], NORM_EPS)
        for t in range(d):
            grad[r, t] = (gz[r, t] - z[r, t] * radial) * inv
