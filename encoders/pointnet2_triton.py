"""Triton kernels for PointNet++'s point-cloud ops, used by :mod:`fusebench.encoders.pointnet2` on CUDA.

The same operations as the PyTorch code of ``pointnet2.py`` (which stays the CPU path, and the reference),
one kernel launch each instead of one PyTorch step per sampled centroid or a ``[B, S, N]`` distance buffer:

* :func:`farthest_point_sample`: one program per scene keeps each point's squared distance to the chosen
  set in a scratch row and takes the next centroid as the **first** index of the largest distance (the
  rule of ``torch.argmax``), starting from point 0; the squared distance is summed in PyTorch's order
  (``dx^2``, then ``+ dy^2``, then ``+ dz^2``), so on the CPU (interpreter) the indices are PyTorch's;
* :func:`ball_query`: for each centroid the first ``nsample`` points in index order with
  ``||x - c||^2 < r^2`` (``r^2`` rounded to the coordinates' dtype, as PyTorch compares), padded with the
  first one found, and with index 0 where the ball is empty; a tile of centroids scans the points in
  blocks (a running count and a prefix sum place each hit) and stops once every ball of the tile is full;
* :func:`three_nn`: the 3 nearest known points of each unknown point by squared distance, ties to the
  lower index, as ``(squared distances, indices)``; ``pointnet2.three_nn_interpolate`` weights them with
  the same PyTorch code on either backend (distances recomputed from the gathered coordinates, so
  gradients reach the coordinates);
* :func:`gather_points` (grouping): ``x [B, N, C]`` rows gathered by ``idx [B, ...]``; its backward (a
  scatter-add of the output gradient into the gathered rows) is ``Tensor.index_add_`` in a custom autograd
  Function, deterministic under ``torch.use_deterministic_algorithms`` as ``torch.gather``'s backward is.

Coordinates are computed in their own dtype when float32 or float64, in float32 otherwise; indices come
back as int64, as from the PyTorch code. Indices given to :func:`gather_points` are not checked on CUDA
(that would wait for the GPU); an out-of-range one reads zeros rather than memory outside ``x``.

Triton is imported when this module is imported, guarded: without it every function raises with the
reason, and :func:`unavailable` says why (``pointnet2`` then keeps the PyTorch code and logs it).
``@triton.jit`` reads ``TRITON_INTERPRET`` when it is applied, here at import, and Triton's own library
functions read it when ``triton`` is imported: to run these kernels on CPU tensors (the tests do, in CI),
set ``TRITON_INTERPRET=1`` in the environment before ``triton`` is first imported in the process
(``tests/test_pointnet2_triton.py`` starts a subprocess for it).
"""

from __future__ import annotations

import contextlib
from numbers import Integral
from typing import Any

import torch
from torch import Tensor

try:  # guarded: the PyTorch code needs none of this
    import triton
    import triton.language as tl

    _IMPORT_ERROR = ""
except Exception as e:  # noqa: BLE001 - ImportError, or a broken install; the reason is reported
    triton = None
    tl = None
    _IMPORT_ERROR = f"{type(e).__name__}: {e}"


def _jit(fn: Any) -> Any:
    return triton.jit(fn) if triton is not None else fn


# --------------------------------------------------------------------------------------------
# kernels (coordinates in structure-of-arrays layout [B, 3, N]: element (b, c, n) at b*s_b + c*s_c + n)
# --------------------------------------------------------------------------------------------


@_jit
def _sq_dist(x, y, z, cx, cy, cz):
    """``(x - cx)^2 + (y - cy)^2 + (z - cz)^2`` summed in PyTorch's order (``dx^2``, ``+ dy^2``, ``+ dz^2``), for
    the three kernels below (which side is subtracted does not matter: ``a - b`` is exactly ``-(b - a)``); the
    operands broadcast (a ``[S, 1]`` column of centres against a ``[1, N]`` row of points in the tiled kernels)."""
    dx = x - cx
    d = dx * dx
    dy = y - cy
    d = d + dy * dy
    dz = z - cz
    return d + dz * dz


@_jit
def _fps_kernel(xyz_ptr, dist_ptr, out_ptr, N, npoint, s_b, s_c, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    base = xyz_ptr + pid.to(tl.int64) * s_b
    drow = dist_ptr + pid.to(tl.int64) * N
    orow = out_ptr + pid.to(tl.int64) * npoint
    lanes = tl.arange(0, BLOCK)
    last = pid * 0  # the first centroid is point 0 (out is zero-filled)
    for j in range(1, npoint):
        cx = tl.load(base + last)
        cy = tl.load(base + s_c + last)
        cz = tl.load(base + 2 * s_c + last)
        best = tl.full([BLOCK], float("-inf"), cx.dtype)  # per lane: largest distance seen, and where
        best_i = lanes * 0
        for start in range(0, N, BLOCK):
            offs = start + lanes
            ok = offs < N
            d = _sq_dist(tl.load(base + offs, mask=ok, other=0.0), tl.load(base + s_c + offs, mask=ok, other=0.0),
                         tl.load(base + 2 * s_c + offs, mask=ok, other=0.0), cx, cy, cz)
            nd = tl.minimum(tl.load(drow + offs, mask=ok, other=0.0), d)
            tl.store(drow + offs, nd, mask=ok)
            nd = tl.where(ok, nd, float("-inf"))
            take = nd > best  # strict: a lane keeps its earliest index among equal distances
            best = tl.where(take, nd, best)
            best_i = tl.where(take, offs, best_i)
        top = tl.max(best, 0)
        last = tl.min(tl.where(best == top, best_i, N), 0)  # the first index of the largest distance
        tl.store(orow + j, last.to(tl.int64))


@_jit
def _ball_query_kernel(xyz_ptr, ctr_ptr, r2_ptr, out_ptr, N, S, K, sx_b, sx_c, sc_b, sc_c,
                       BLOCK_S: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    b = tl.program_id(1).to(tl.int64)
    rows = tl.program_id(0) * BLOCK_S + tl.arange(0, BLOCK_S)
    row_ok = rows < S
    cbase = ctr_ptr + b * sc_b
    cx = tl.load(cbase + rows, mask=row_ok, other=0.0)
    cy = tl.load(cbase + sc_c + rows, mask=row_ok, other=0.0)
    cz = tl.load(cbase + 2 * sc_c + rows, mask=row_ok, other=0.0)
    r2 = tl.load(r2_ptr)
    xbase = xyz_ptr + b * sx_b
    orow = out_ptr + b * S * K + rows.to(tl.int64) * K  # [BLOCK_S] row starts
    lanes = tl.arange(0, BLOCK_N)
    cnt = tl.where(row_ok, 0, K)  # hits so far (rows past S count as full)
    first = rows * 0 + N  # the first hit (N: none yet)
    start = tl.program_id(0) * 0
    while (start < N) & (tl.min(cnt, 0) < K):
        offs = start + lanes
        ok = offs < N
        d2 = _sq_dist(cx[:, None], cy[:, None], cz[:, None], tl.load(xbase + offs, mask=ok, other=0.0)[None, :],
                      tl.load(xbase + sx_c + offs, mask=ok, other=0.0)[None, :],
                      tl.load(xbase + 2 * sx_c + offs, mask=ok, other=0.0)[None, :])
        hit = (d2 < r2) & ok[None, :] & row_ok[:, None]
        hits = hit.to(tl.int32)
        pos = cnt[:, None] + tl.cumsum(hits, 1) - 1  # where each hit goes in its row
        tl.store(orow[:, None] + pos, (offs[None, :] + pos * 0).to(tl.int64), mask=hit & (pos < K))
        first = tl.minimum(first, tl.min(tl.where(hit, offs[None, :], N), 1))
        cnt = cnt + tl.sum(hits, 1)
        start = start + BLOCK_N
    ks = tl.arange(0, BLOCK_K)
    fill = tl.where(first < N, first, 0)
    pad = row_ok[:, None] & (ks[None, :] >= cnt[:, None]) & (ks[None, :] < K)
    tl.store(orow[:, None] + ks[None, :], (fill[:, None] + ks[None, :] * 0).to(tl.int64), mask=pad)


@_jit
def _three_nn_kernel(unk_ptr, kn_ptr, d_ptr, i_ptr, n, m, su_b, su_c, sk_b, sk_c,
                     BLOCK_U: tl.constexpr, BLOCK_M: tl.constexpr):
    b = tl.program_id(1).to(tl.int64)
    rows = tl.program_id(0) * BLOCK_U + tl.arange(0, BLOCK_U)
    row_ok = rows < n
    ubase = unk_ptr + b * su_b
    ux = tl.load(ubase + rows, mask=row_ok, other=0.0)
    uy = tl.load(ubase + su_c + rows, mask=row_ok, other=0.0)
    uz = tl.load(ubase + 2 * su_c + rows, mask=row_ok, other=0.0)
    kbase = kn_ptr + b * sk_b
    d1 = tl.full([BLOCK_U], float("inf"), ux.dtype)  # the running 3 nearest, sorted by (distance, index)
    d2 = d1
    d3 = d1
    i1 = rows * 0
    i2 = i1
    i3 = i1
    lanes = tl.arange(0, BLOCK_M)
    for start in range(0, m, BLOCK_M):
        offs = start + lanes
        ok = offs < m
        d = _sq_dist(ux[:, None], uy[:, None], uz[:, None], tl.load(kbase + offs, mask=ok, other=0.0)[None, :],
                     tl.load(kbase + sk_c + offs, mask=ok, other=0.0)[None, :],
                     tl.load(kbase + 2 * sk_c + offs, mask=ok, other=0.0)[None, :])
        d = tl.where(ok[None, :], d, float("inf"))
        for _ in tl.static_range(3):  # the block's 3 nearest, in order, each merged into the running 3
            v = tl.min(d, 1)
            j = tl.min(tl.where(d == v[:, None], offs[None, :], m), 1)  # first index of the block minimum
            lt1 = v < d1  # strict: an earlier (lower) index stays ahead on equal distances
            lt2 = v < d2
            lt3 = v < d3
            d3 = tl.where(lt2, d2, tl.where(lt3, v, d3))
            i3 = tl.where(lt2, i2, tl.where(lt3, j, i3))
            d2 = tl.where(lt1, d1, tl.where(lt2, v, d2))
            i2 = tl.where(lt1, i1, tl.where(lt2, j, i2))
            d1 = tl.where(lt1, v, d1)
            i1 = tl.where(lt1, j, i1)
            d = tl.where(offs[None, :] == j[:, None], float("inf"), d)
    out = b * n * 3 + rows.to(tl.int64) * 3
    tl.store(d_ptr + out, d1, mask=row_ok)
    tl.store(d_ptr + out + 1, d2, mask=row_ok)
    tl.store(d_ptr + out + 2, d3, mask=row_ok)
    tl.store(i_ptr + out, i1.to(tl.int64), mask=row_ok)
    tl.store(i_ptr + out + 1, i2.to(tl.int64), mask=row_ok)
    tl.store(i_ptr + out + 2, i3.to(tl.int64), mask=row_ok)


@_jit
def _gather_kernel(x_ptr, idx_ptr, out_ptr, N, M, C, BLOCK_M: tl.constexpr, BLOCK_C: tl.constexpr):
    b = tl.program_id(1).to(tl.int64)
    rows = (tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    cols = tl.program_id(2) * BLOCK_C + tl.arange(0, BLOCK_C)
    row_ok = rows < M
    col_ok = cols < C
    i = tl.load(idx_ptr + b * M + rows, mask=row_ok, other=0)
    src_ok = row_ok & (i >= 0) & (i < N)  # an out-of-range index reads zeros, never outside x
    v = tl.load(x_ptr + b * N * C + i[:, None] * C + cols[None, :], mask=src_ok[:, None] & col_ok[None, :], other=0)
    tl.store(out_ptr + b * M * C + rows[:, None] * C + cols[None, :], v, mask=row_ok[:, None] & col_ok[None, :])


# --------------------------------------------------------------------------------------------
# availability
# --------------------------------------------------------------------------------------------


def interpreted() -> bool:
    """Whether the kernels were built for Triton's interpreter (``TRITON_INTERPRET=1`` at import)."""
    return triton is not None and type(_fps_kernel).__name__ == "InterpretedFunction"


def unavailable(device: torch.device | str) -> str | None:
    """Why the kernels cannot run on tensors of ``device``; ``None`` when they can."""
    if triton is None:
        return f"triton is not importable ({_IMPORT_ERROR})"
    kind = torch.device(device).type
    if interpreted() or kind == "cuda":
        return None
    return (f"Triton compiles for CUDA devices; {kind} tensors need its interpreter (TRITON_INTERPRET=1 in the "
            "environment before triton is imported)")


def _require(t: Tensor) -> None:
    reason = unavailable(t.device)
    if reason is not None:
        raise RuntimeError(f"pointnet2_triton: {reason}")


def _on(t: Tensor) -> Any:
    """Launch on ``t``'s GPU (Triton launches on the current device)."""
    return torch.cuda.device(t.device) if t.is_cuda else contextlib.nullcontext()


# --------------------------------------------------------------------------------------------
# ops
# --------------------------------------------------------------------------------------------


def _check_points(xyz: Any, arg: str) -> None:
    if not isinstance(xyz, Tensor) or xyz.dim() != 3 or xyz.shape[-1] != 3 or not xyz.is_floating_point():
        shape = f"{xyz.dtype} {tuple(xyz.shape)}" if isinstance(xyz, Tensor) else type(xyz).__name__
        raise ValueError(f"pointnet2_triton: {arg} must be a float tensor [B, N, 3], got {shape}")


def _compute_dtype(*ts: Tensor) -> torch.dtype:
    dtype = ts[0].dtype
    for t in ts[1:]:
        dtype = torch.promote_types(dtype, t.dtype)
    return dtype if dtype in (torch.float32, torch.float64) else torch.float32


def _soa(xyz: Tensor, dtype: torch.dtype) -> Tensor:
    """``[B, N, 3]`` -> contiguous ``[B, 3, N]`` of ``dtype`` (coalesced loads of each coordinate)."""
    return xyz.detach().to(dtype).transpose(1, 2).contiguous()


def _pow2(n: int, lo: int, hi: int) -> int:
    return max(lo, min(hi, triton.next_power_of_2(max(int(n), 1))))


def _block(value: int | None, default: int, arg: str) -> int:
    if value is None:
        return default
    if not isinstance(value, int) or value < 1 or value & (value - 1):
        raise ValueError(f"pointnet2_triton: {arg} must be a power of two >= 1, got {value!r}")
    return value


def farthest_point_sample(xyz: Tensor, npoint: int, block: int | None = None) -> Tensor:
    """``xyz [B, N, 3]`` -> ``LongTensor[B, npoint]``: farthest point sampling from point 0, ties to the
    first index (``pointnet2.farthest_point_sample``). ``block``: points per step (a power of two)."""
    _check_points(xyz, "xyz")
    _require(xyz)
    b, n, _ = xyz.shape
    if not isinstance(npoint, Integral) or not 0 < npoint <= n:
        raise ValueError(f"farthest_point_sample: npoint must be in [1, N={n}], got {npoint!r}")
    npoint = int(npoint)
    pts = _soa(xyz, _compute_dtype(xyz))
    block = _block(block, _pow2(n, 16, 1024), "block")
    dist = torch.full((b, n), float("inf"), dtype=pts.dtype, device=pts.device)
    out = torch.zeros((b, npoint), dtype=torch.long, device=pts.device)
    if b and npoint > 1:
        with _on(pts):
            _fps_kernel[(b,)](pts, dist, out, n, npoint, pts.stride(0), pts.stride(1), BLOCK=block,
                              num_warps=8 if block >= 1024 else 4)
    return out


def ball_query(xyz: Tensor, new_xyz: Tensor, radius: float, nsample: int, block_s: int | None = None,
               block_n: int | None = None) -> Tensor:
    """``xyz [B, N, 3]``, ``new_xyz [B, S, 3]`` -> ``LongTensor[B, S, nsample]``: the first ``nsample``
    points (index order) with ``||x - c||^2 < radius^2``, padded with the first one (0 for an empty ball).
    ``block_s`` centroids by ``block_n`` points per step (powers of two)."""
    _check_points(xyz, "xyz")
    _check_points(new_xyz, "new_xyz")
    _require(xyz)
    b, n, _ = xyz.shape
    s = new_xyz.shape[1]
    if new_xyz.shape[0] != b or new_xyz.device != xyz.device:
        raise ValueError(f"ball_query: new_xyz must have the batch size ({b}) and device ({xyz.device}) of xyz, got "
                         f"{new_xyz.shape[0]} on {new_xyz.device}")
    if not isinstance(nsample, Integral) or nsample < 1:
        raise ValueError(f"ball_query: nsample must be an int >= 1, got {nsample!r}")
    if n == 0:
        raise ValueError("ball_query: xyz has no points (N = 0)")
    nsample = int(nsample)
    dtype = _compute_dtype(xyz, new_xyz)
    pts, ctr = _soa(xyz, dtype), _soa(new_xyz, dtype)
    r2 = torch.full((1,), float(radius) ** 2, dtype=dtype, device=pts.device)  # rounded as PyTorch compares
    out = torch.empty((b, s, nsample), dtype=torch.long, device=pts.device)
    if b and s:
        bs, bn = _block(block_s, 16, "block_s"), _block(block_n, 64, "block_n")
        with _on(pts):
            _ball_query_kernel[(triton.cdiv(s, bs), b)](
                pts, ctr, r2, out, n, s, nsample, pts.stride(0), pts.stride(1), ctr.stride(0), ctr.stride(1),
                BLOCK_S=bs, BLOCK_N=bn, BLOCK_K=_pow2(nsample, 1, 1 << 20), num_warps=4)
    return out


def three_nn(unknown: Tensor, known: Tensor, block_u: int | None = None, block_m: int | None = None
             ) -> tuple[Tensor, Tensor]:
    """``unknown [B, n, 3]``, ``known [B, m, 3]`` -> ``(squared distances [B, n, k], LongTensor[B, n, k])``,
    ``k = min(3, m)``: each unknown point's nearest known points, nearest first, ties to the lower index.
    ``block_u`` unknown by ``block_m`` known points per step (powers of two)."""
    _check_points(unknown, "unknown")
    _check_points(known, "known")
    _require(unknown)
    b, n, _ = unknown.shape
    m = known.shape[1]
    if known.shape[0] != b or known.device != unknown.device:
        raise ValueError(f"three_nn: known must have the batch size ({b}) and device ({unknown.device}) of unknown, "
                         f"got {known.shape[0]} on {known.device}")
    if m == 0:
        raise ValueError("three_nn: known has no points (m = 0)")
    dtype = _compute_dtype(unknown, known)
    unk, kn = _soa(unknown, dtype), _soa(known, dtype)
    d2 = torch.empty((b, n, 3), dtype=dtype, device=unk.device)
    idx = torch.empty((b, n, 3), dtype=torch.long, device=unk.device)
    if b and n:
        bu, bm = _block(block_u, 32, "block_u"), _block(block_m, 64, "block_m")
        with _on(unk):
            _three_nn_kernel[(triton.cdiv(n, bu), b)](unk, kn, d2, idx, n, m, unk.stride(0), unk.stride(1),
                                                      kn.stride(0), kn.stride(1), BLOCK_U=bu, BLOCK_M=bm, num_warps=4)
    k = min(3, m)
    return d2[..., :k], idx[..., :k]


class _Gather(torch.autograd.Function):
    """``out[b, j] = x[b, idx[b, j]]`` (Triton); backward ``grad_x[b, idx[b, j]] += grad_out[b, j]``."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, idx: Tensor) -> Tensor:  # x [B, N, C], idx [B, M] int64 contiguous
        b, n, c = x.shape
        m = idx.shape[1]
        xc = x.contiguous()
        out = torch.empty((b, m, c), dtype=x.dtype, device=x.device)
        if out.numel():
            bm, bc = 32, _pow2(c, 1, 128)
            with _on(xc):
                _gather_kernel[(triton.cdiv(m, bm), b, triton.cdiv(c, bc))](xc, idx, out, n, m, c, BLOCK_M=bm,
                                                                              BLOCK_C=bc, num_warps=4)
        ctx.save_for_backward(idx)
        ctx.n = n
        return out

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, None]:
        if not ctx.needs_input_grad[0]:
            return None, None
        (idx,) = ctx.saved_tensors
        b, m, c = grad.shape
        n = ctx.n
        rows = (idx + torch.arange(b, device=idx.device)[:, None] * n).reshape(-1)
        gx = grad.new_zeros((b * n, c)).index_add_(0, rows, grad.reshape(b * m, c))
        return gx.view(b, n, c), None


def gather_points(x: Tensor, idx: Tensor) -> Tensor:
    """``x [B, N, C]`` indexed by ``idx [B, ...]`` -> ``[B, ..., C]`` (``pointnet2.gather_points``),
    differentiable in ``x``."""
    if not isinstance(x, Tensor) or x.dim() != 3:
        raise ValueError(f"gather_points: x must be a tensor [B, N, C], got "
                         f"{tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__}")
    if not isinstance(idx, Tensor) or idx.dim() < 1 or idx.shape[0] != x.shape[0] or idx.is_floating_point() \
            or idx.is_complex() or idx.dtype == torch.bool:
        raise ValueError(f"gather_points: idx must be an integer tensor [B, ...] with B = {x.shape[0]}, got "
                         f"{(idx.dtype, tuple(idx.shape)) if isinstance(idx, Tensor) else type(idx).__name__}")
    _require(x)
    b, n, c = x.shape
    flat = idx.reshape(b, -1).to(device=x.device, dtype=torch.long).contiguous()
    if flat.device.type != "cuda" and flat.numel() and (int(flat.min()) < 0 or int(flat.max()) >= n):
        raise ValueError(f"gather_points: idx must be in [0, N={n}), got values in [{int(flat.min())}, "
                         f"{int(flat.max())}]")
    return _Gather.apply(x, flat).reshape(*idx.shape, c)


__all__ = [
    "ball_query",
    "farthest_point_sample",
    "gather_points",
    "interpreted",
    "three_nn",
    "unavailable",
]
