"""Distributed data parallel support.

Launch: ``torchrun --nproc-per-node N -m fusebench run BENCHMARK ...`` (gloo on CPU, nccl on GPU).
Every global batch is split into contiguous per-rank shards; the pretraining losses see the
*global* batch through :func:`gather_with_grad` (an all-gather that passes gradients back to every
rank's shard), so a contrastive or matching loss has the same negatives / couplings as a single
process on the same global batch. Every rank computes the same global loss; the gather's backward
multiplies this rank's slice of the gradient by W (the W identical loss copies), and
DistributedDataParallel's gradient averaging divides by W: the parameter gradients equal the
single-process ones (tests/test_distributed.py checks it with 2 gloo processes, for DDP and for the
explicit :func:`average_gradients` used by the TupleInfoNCE candidate updates).

DDP is built with ``find_unused_parameters=True``: parameters the objective does not use (the task
head during pretraining, the predictor of a plain view objective) produce no gradient, and without
that flag their buckets are never reduced, leaving the other gradients in those buckets
un-averaged.
"""

from __future__ import annotations

import contextlib
import datetime
import os
from typing import Any, Iterator

import torch
import torch.distributed as dist
from torch import Tensor


def is_distributed() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def rank() -> int:
    return dist.get_rank() if is_distributed() else 0


def world_size() -> int:
    return dist.get_world_size() if is_distributed() else 1


def from_rank0(value: Any) -> Any:
    """Rank 0's ``value`` on every rank (a picklable object: one broadcast, a host-side decision such as whether
    a cell is to be run); ``value`` itself outside a distributed run."""
    if not is_distributed():
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def shard(indices: list[int]) -> list[int]:
    """This rank's contiguous slice of a global batch of indices (sizes differ by at most one)."""
    w, r = world_size(), rank()
    n = len(indices)
    lo, hi = r * n // w, (r + 1) * n // w
    return indices[lo:hi]


def shard_sizes(n: int, w: int | None = None) -> tuple[int, ...]:
    """The sizes of the ``w`` (default: the world size) shards of a global batch of ``n`` (:func:`shard`'s)."""
    w = world_size() if w is None else w
    return tuple((r + 1) * n // w - r * n // w for r in range(w))


class _GatherWithGrad(torch.autograd.Function):
    """all_gather along dim 0 (equal sizes). Every rank then computes the *same* loss on the global
    batch, so the gradient w.r.t. the gathered tensor is identical on all ranks, and the sum over the
    W loss copies is W times this rank's slice. The backward returns exactly that, with no collective:
    a collective inside the backward would interleave with DDP's asynchronous gradient all-reduces
    (gloo pairs collectives by call order) and corrupt both."""

    @staticmethod
    def forward(ctx, t: Tensor) -> Tensor:  # type: ignore[override]
        ctx.rank, ctx.size = dist.get_rank(), t.shape[0]
        parts = [torch.empty_like(t) for _ in range(dist.get_world_size())]
        dist.all_gather(parts, t.contiguous())
        return torch.cat(parts, dim=0)

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:  # type: ignore[override]
        w = dist.get_world_size()
        return grad[ctx.rank * ctx.size : (ctx.rank + 1) * ctx.size] * w


def gather_with_grad(t: Tensor, dim: int = 1, sizes: tuple[int, ...] | None = None) -> Tensor:
    """Concatenate every rank's ``t`` along ``dim`` (rank order), differentiably. Identity when not
    distributed. Shards may differ in size along ``dim`` by at most one. ``sizes``: every rank's size along
    ``dim``, known on the host (a sharded batch carries them: ``batch["shard_sizes"]``); without them they are
    exchanged first (a collective, and a read of the device per rank)."""
    if not is_distributed():
        return t
    w = world_size()
    if sizes is None:
        size = torch.tensor([t.shape[dim]], device=t.device)
        gathered = [torch.zeros_like(size) for _ in range(w)]
        dist.all_gather(gathered, size)
        sizes = tuple(int(s) for s in gathered)
    elif len(sizes) != w or sizes[rank()] != t.shape[dim]:
        raise ValueError(f"gather_with_grad: shard sizes {sizes} do not fit {w} ranks with this rank's "
                         f"{t.shape[dim]} along dim {dim}")
    m = max(sizes)
    if t.shape[dim] < m:  # pad to equal size for all_gather, cut after
        pad_shape = list(t.shape)
        pad_shape[dim] = m - t.shape[dim]
        t = torch.cat([t, t.new_zeros(pad_shape)], dim=dim)
    full = _GatherWithGrad.apply(t.movedim(dim, 0)).movedim(0, dim)  # [.., w * m, ..]
    parts = full.split(m, dim=dim)
    return torch.cat([p.narrow(dim, 0, s) for p, s in zip(parts, sizes)], dim=dim)


def average_gradients(params) -> None:
    """All-reduce (mean) the gradients of ``params`` over ranks; a no-op when not distributed."""
    if not is_distributed():
        return
    w = world_size()
    for p in params:
        if p.grad is not None:
            dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
            p.grad.div_(w)


#: seconds a rank that ended its sweep waits for the others before it tears the process group down
END_WAIT_S = 600


@contextlib.contextmanager
def maybe_init(device: str = "auto") -> Iterator[None]:
    """Initialise the process group when launched by torchrun (WORLD_SIZE > 1); tear it down after."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 or dist.is_initialized():
        yield
        return
    backend = "nccl" if (device != "cpu" and torch.cuda.is_available()) else "gloo"
    if backend == "nccl":  # before the process group: NCCL binds each rank to the device current at its start
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group(backend=backend)
    try:
        yield
        # the ranks end together (a normal end only: a rank that raised waits for no one): rank 1, done with its
        # share, tore its gloo group down while rank 0 still scored the cell, and aborted ("terminate called
        # without an active exception"); a rank gone meanwhile makes it give up after END_WAIT_S, not hang
        try:
            if backend == "gloo":
                dist.monitored_barrier(timeout=datetime.timedelta(seconds=END_WAIT_S))
            else:
                dist.barrier()
        except RuntimeError:
            pass
    finally:
        dist.destroy_process_group()
