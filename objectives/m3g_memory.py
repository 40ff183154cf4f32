"""What one M3G loss call allocates: the cost declaration behind :meth:`fusebench.objectives.m3g.M3G.memory_bytes`.

M3G's cost grows as n^k (n samples, k views), so a batch that is cheap at k = 3 can need tens of GB at
k = 10. The runner checks this estimate against a memory budget before any cell starts
(:mod:`fusebench.components.memory_budget`). The estimate is worked out from the buffers each solver path
allocates, counted in entries of the compute dtype; ``tests/test_hostile_budget.py`` checks it on small sizes
in fresh processes: the counted buffers against the bytes alive at once (the resident peak with glibc's mmap
threshold fixed, the same in every run: never below it, at most 4x above), the whole declaration, heap
allowance included, against the resident peak with the default allocator (never below it).

* ``solver="reference"`` or ``cost="csd"``: the materialised n^k cost tensor and its working copies
  (:func:`~fusebench.objectives.m3g.dense_cost`, the log-kernel, :func:`~fusebench.objectives.sinkhorn.dense_sinkhorn`'s
  ``log_p`` and log-sum-exp temporaries, ``P*``, the cost with its autograd graph and the backward's
  gradients): :data:`DENSE_COPIES` (cv) / :data:`DENSE_COPIES_CSD` (csd, whose clamp and log keep two more),
  plus :data:`HEAP_COPIES` more of them up to 32 MiB each: glibc serves blocks under its mmap threshold (at
  most 32 MiB) from the heap, where the freed temporaries of the Sinkhorn loop fragment it (measured: up to
  19 copies of a 24 MiB tensor resident at once, 5 to 7 of a 64 MiB one).
  Above ``MAX_DENSE_ENTRIES`` the loss refuses the call (a ValueError, raised here too).
* ``cost="cv"``, ``solver="auto"``: the scaling-domain plan of :mod:`fusebench.objectives.sinkhorn_scaling`
  (every buffer its stages bind: the block marginal ``q`` [n^|B|], the fixed factors ``L`` [n^(|B1|+e)],
  ``R`` [n^(|B2|+e)], ``n K_{B,B}``, the outer-product and contraction buffers, the first block's marginal
  buffers), plus the temporaries of filling it, plus -- because the range guard can hand any solve to it
  while the plan is alive -- the working set of the log-domain :func:`~fusebench.objectives.sinkhorn_pairwise.pairwise_sinkhorn`
  (two block contractions at once: the one being built and the previous one), plus the Gram-layout
  matrices ``[kn, kn]`` and the views' copies ``[k, n, d]`` around the solve. Small CPU problems
  (n^k <= ``COMPILED_MAX_ENTRIES``) may run compiled (float64 kernel of n^k entries); both are counted.

Shape:
    ``n`` samples per loss call (the batch, or the micro-batch), ``k`` views, ``d`` embedding width.
"""

from __future__ import annotations

from fusebench.objectives.sinkhorn_pairwise import _stages
from fusebench.objectives.sinkhorn_scaling import choose_strategy

#: n^k-sized tensors alive at once on the reference path (cv cost); see the module docstring
DENSE_COPIES = 8
#: the same for the csd cost (its clamp and log keep two more n^k tensors for backward)
DENSE_COPIES_CSD = 10
#: extra n^k-sized blocks resident on the heap (blocks of at most HEAP_BLOCK bytes; see the module docstring)
HEAP_COPIES = 12
HEAP_BLOCK = 32 * 2**20
#: [kn, kn] matrices around the auto solve (Gram matrix, log-kernels, pair marginals and their copy, the
#: diagonal weights, W + W^T) and [k, n, d] copies of the views (input, unit vectors, gradients)
GRAM_COPIES = 6
VIEW_COPIES = 6


def _outer(count: int, n: int) -> int:
    """Entries of the buffers of an outer product of ``count`` vectors of length n (n^2 + ... + n^count)."""
    return sum(n**j for j in range(2, count + 1))


def _block_sizes(blk, n: int) -> tuple[int, int, int]:
    """(L, R, Q): entries of ``[n^|B1|, n^e]``, ``[n^|B2|, n^e]`` and ``[n^|B1|, n^|B2|]`` of a block."""
    e = len(blk.elim)
    return n ** (len(blk.b1) + e), n ** (len(blk.b2) + e), n ** len(blk.kept)


def scaling_plan_entries(k: int, n: int, e: int, dense: bool) -> int:
    """Entries of every buffer a scaling-domain plan of (k, n, e, dense) allocates (Gram layout)."""
    total = 2 * k * k * n * n + 6 * k * n + (k * n) ** 2  # log-kernels, kernels, state and work, pair marginals
    for s, (_, blk) in enumerate(_stages(k, e)):
        big_l, big_r, q = _block_sizes(blk, n)
        kept, el = blk.kept, blk.elim
        total += q + _outer(len(el), n)  # n Q_B, (x) u_E
        if dense:
            total += n**k
        elif len(blk.b1) == len(blk.b2) == len(el) == 1:
            total += 2 * n * n  # n K_{B,B} and the product buffer (the factors are kernels)
        else:
            total += k * n + 2 * big_l + big_r + q  # zeros, L_fix and its product buffer, R_fix^T, n K_{B,B}
        for p in range(len(kept)):  # contraction of each kept view
            total += _outer(p, n) + _outer(len(kept) - p - 1, n) + (n ** (p + 1) if 0 < p < len(kept) - 1 else 0)
        if s == 0:  # the pair marginals at the end of a solve
            if dense:
                total += _outer(len(kept), n) + n**k
            else:
                total += _outer(len(blk.b1), n) + _outer(len(blk.b2), n) + 2 * q + big_l + big_r
    return total


def _setup_entries(k: int, n: int, e: int, dense: bool) -> int:
    """Temporaries of filling the plan's fixed factors (one stage at a time): a log-side and its exp."""
    if dense:
        return 0
    return max(2 * max(_block_sizes(blk, n)) for _, blk in _stages(k, e))


def _log_domain_entries(k: int, n: int, e: int) -> int:
    """The log-domain fallback's working set: the previous block contraction (exp factors, log product,
    log P_B, P_B) while the next is built (log and exp factors, product, log marginal, P_B and its temporary)."""
    worst = 0
    for _, blk in _stages(k, e):
        big_l, big_r, q = _block_sizes(blk, n)
        worst = max(worst, 5 * big_l + 4 * big_r + 6 * q)
    return worst + 2 * k * k * n * n


def auto_entries(k: int, n: int, d: int) -> int:
    """Peak entries of one ``cost="cv"``, ``solver="auto"`` call on the eager path."""
    e, dense = choose_strategy(k, n)
    plan = scaling_plan_entries(k, n, e, dense)
    extra = max(_setup_entries(k, n, e, dense), _log_domain_entries(k, n, e))
    return plan + extra + GRAM_COPIES * (k * n) ** 2 + VIEW_COPIES * k * n * d


def compiled_bytes(k: int, n: int, d: int) -> int:
    """Bytes of the compiled call (float64): the n^k kernel, two n^(k-1) contraction buffers, [kn, kn]
    distances, marginals and gradient weights, [k, k, n, n] kernels and [kn, d] copies."""
    return 8 * (n**k + 2 * n ** (k - 1) + 4 * (k * n) ** 2 + 2 * k * k * n * n + 4 * k * n * d)


def dense_bytes(k: int, n: int, d: int, itemsize: int, csd: bool) -> int:
    """Bytes of one reference-solver call: the n^k tensors plus the [k, k, n, n] dot products and views."""
    copies = DENSE_COPIES_CSD if csd else DENSE_COPIES
    return itemsize * (copies * n**k + 2 * k * k * n * n + VIEW_COPIES * k * n * d) + \
        HEAP_COPIES * min(itemsize * n**k, HEAP_BLOCK)


__all__ = ["DENSE_COPIES", "DENSE_COPIES_CSD", "auto_entries", "compiled_bytes", "dense_bytes", "scaling_plan_entries"]
