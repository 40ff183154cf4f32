"""Per-batch results gathered on the host in blocks (:class:`HostGather`): how an evaluation loop keeps its
predictions, targets and embeddings without waiting for the device at every batch.

A copy from a GPU to the host (``.cpu()``, ``.numpy()``, ``.item()``) waits until the device has finished
everything queued before it, so a loop that copies each batch's result cannot queue the next batch while the
device computes this one. :class:`HostGather` keeps what it is given where it was made and copies it to the host
once per :data:`~fusebench.runtime.utils.LOSS_READ_EVERY` batches (or sooner when the kept tensors pass
:data:`MAX_PENDING_BYTES`): all tensors of one device and dtype in one copy (flattened, concatenated, copied,
split back to their shapes). The values are those of a per-batch ``.cpu()``, bit for bit (a copy, no arithmetic).

What it takes: a tensor, or lists / tuples / dicts of them (a detector's per-scene dicts of boxes, scores and
labels); other leaves are kept as given. The same code runs on the CPU, where a copy waits for nothing, so a test
on the CPU counts the copies a GPU run makes (``tests/test_eval_host_reads.py``).
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from fusebench.runtime.utils import LOSS_READ_EVERY

#: kept tensors of more bytes than this are copied to the host before the block is full (a segmentation batch's
#: label maps at full resolution are megabytes: a block of them must not fill the device's memory)
MAX_PENDING_BYTES = 256 * 2**20


def _leaves(tree: Any, out: list[torch.Tensor]) -> Callable[[Any], Any]:
    """Append the tensors of ``tree`` to ``out`` (in order); return the function that rebuilds ``tree`` from an
    iterator over replacements of those tensors."""
    if isinstance(tree, torch.Tensor):
        out.append(tree)
        return lambda it: next(it)
    if isinstance(tree, dict):
        builds = {k: _leaves(v, out) for k, v in tree.items()}
        return lambda it: {k: b(it) for k, b in builds.items()}
    if isinstance(tree, (list, tuple)):
        builds_seq = [_leaves(v, out) for v in tree]
        kind = type(tree) if type(tree) in (list, tuple) else list
        return lambda it: kind(b(it) for b in builds_seq)
    return lambda it: tree


def to_host(trees: list[Any]) -> list[Any]:
    """``trees`` with every tensor detached and on the CPU: one copy per (device, dtype) of the tensors in them."""
    leaves: list[torch.Tensor] = []
    builds = [_leaves(t, leaves) for t in trees]
    groups: dict[tuple[torch.device, torch.dtype], list[int]] = {}
    for i, t in enumerate(leaves):
        groups.setdefault((t.device, t.dtype), []).append(i)
    host: list[torch.Tensor | None] = [None] * len(leaves)
    for idx in groups.values():
        parts = [leaves[i].detach().reshape(-1) for i in idx]
        flat = (parts[0] if len(parts) == 1 else torch.cat(parts)).cpu()  # the block's one copy of this dtype
        for i, piece in zip(idx, torch.split(flat, [p.numel() for p in parts])):
            host[i] = piece.reshape(leaves[i].shape)
    it = iter(host)
    return [b(it) for b in builds]


class HostGather:
    """Collects per-batch results (:meth:`add`) and hands them back on the host, in order (:meth:`result`).
    See the module doc."""

    def __init__(self, every: int = LOSS_READ_EVERY, max_bytes: int = MAX_PENDING_BYTES) -> None:
        self.every, self.max_bytes = max(1, int(every)), int(max_bytes)
        self._host: list[Any] = []
        self._pending: list[Any] = []
        self._bytes = 0

    def add(self, tree: Any) -> None:
        """Keep one batch's result (detached; on the host after the next block's copy)."""
        self._pending.append(tree)
        leaves: list[torch.Tensor] = []
        _leaves(tree, leaves)
        self._bytes += sum(t.numel() * t.element_size() for t in leaves)
        if len(self._pending) >= self.every or self._bytes > self.max_bytes:
            self.flush()

    def flush(self) -> None:
        """Copy what is kept to the host now."""
        if self._pending:
            self._host.extend(to_host(self._pending))
            self._pending, self._bytes = [], 0

    def result(self) -> list[Any]:
        """Every result added so far, on the host, in the order added."""
        self.flush()
        return self._host

    def __len__(self) -> int:
        return len(self._host) + len(self._pending)


__all__ = ["HostGather", "MAX_PENDING_BYTES", "to_host"]
