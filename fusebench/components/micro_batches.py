"""How a batch splits into the objective's loss calls when ``pretrain.per_objective.<id>.micro_batch`` is set: the
one rule that the pretraining step (:meth:`fusebench.engine.pretrain.Pretrainer.chunks`) and the memory budget's
estimates (:mod:`fusebench.components.memory_budget`) share. Consecutive chunks of ``micro`` samples; a last chunk of
one sample joins the one before (a one-sample contrastive call has no negatives)."""

from __future__ import annotations


def chunk_bounds(n: int, micro: int | None) -> list[tuple[int, int]]:
    """The ``(lo, hi)`` sample ranges of the loss calls on a batch of ``n`` samples: the whole batch when ``micro`` is
    None or not below ``n``, else its micro-batches of ``micro`` (a last one of one sample joined to the one before)."""
    if micro is None or n <= micro:
        return [(0, n)]
    out = []
    for lo in range(0, n, micro):
        hi = n if n - (lo + micro) < 2 else lo + micro
        out.append((lo, hi))
        if hi == n:
            break
    return out


def chunk_sizes(n: int, micro: int | None) -> list[int]:
    """The sample counts of :func:`chunk_bounds`."""
    return [hi - lo for lo, hi in chunk_bounds(n, micro)]


__all__ = ["chunk_bounds", "chunk_sizes"]
