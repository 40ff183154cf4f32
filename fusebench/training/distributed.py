"""Distributed data parallel support.

Launch: ``torchrun --nproc-per-node N -m fusebench run BENCHMARK ...`` (gloo on CPU, nccl on GPU).
Every global batch is split into contiguous per-rank shards; the pretraining losses see the
*global* batch through :func:`gather_with_grad` (an all-gather that passes gradients back to every
rank's shard), so a contrastive or matching loss has the same negatives / couplings as a single
process on the same global batch. With DistributedDataParallel averaging parameter gradients, the
resulting gradients equal the single-process ones (each rank's all-gather backward sums the W
identical loss copies' gradients; DDP divides by W).
"""

from __future__ import annotations

import contextlib
import os
from typing import Iterator

import torch
import torch.distributed as dist
from torch import Tensor


def is_distributed() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def rank() -> int:
    return dist.get_rank() if is_distributed() else 0


def world_size() -> int:
    return dist.get_world_size() if is_distributed() else 1


def shard(indices: list[int]) -> list[int]:
    """This rank's contiguous slice of a global batch of indices (sizes differ by at most one)."""
    w, r = world_size(), rank()
    n = len(indices)
    lo, hi = r * n // w, (r + 1) * n // w
    return indices[lo:hi]


def gather_with_grad(t: Tensor, dim: int = 1) -> Tensor:
    """Concatenate every rank's ``t`` along ``dim`` (rank order), differentiably. Identity when not
    distributed. Shards may differ in size along ``dim`` by at most one."""
    if not is_distributed():
        return t
    from torch.distributed.nn.functional import all_gather

    w = world_size()
    size = torch.tensor([t.shape[dim]], device=t.device)
    sizes = [torch.zeros_like(size) for _ in range(w)]
    dist.all_gather(sizes, size)
    sizes = [int(s) for s in sizes]
    m = max(sizes)
    if t.shape[dim] < m:  # pad to equal size for all_gather, cut after
        pad_shape = list(t.shape)
        pad_shape[dim] = m - t.shape[dim]
        t = torch.cat([t, t.new_zeros(pad_shape)], dim=dim)
    parts = all_gather(t)
    return torch.cat([p.narrow(dim, 0, s) for p, s in zip(parts, sizes)], dim=dim)


@contextlib.contextmanager
def maybe_init(device: str = "auto") -> Iterator[None]:
    """Initialise the process group when launched by torchrun (WORLD_SIZE > 1); tear it down after."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 or dist.is_initialized():
        yield
        return
    backend = "nccl" if (device != "cpu" and torch.cuda.is_available()) else "gloo"
    dist.init_process_group(backend=backend)
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    try:
        yield
    finally:
        dist.destroy_process_group()
