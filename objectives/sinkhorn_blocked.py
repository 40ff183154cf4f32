"""The blocked-convergence runner of :func:`~fusebench.objectives.sinkhorn_scaling.scaling_sinkhorn`: Algorithm 1
on a device without a host synchronisation per sweep (the default on CUDA; forced anywhere with ``blocked=True``).

The per-sweep loop of ``scaling_sinkhorn`` reads the stopping error on the host after every sweep (one
synchronisation each); on a GPU the device then idles while the host decides and launches the next sweep. Here a
*block* of up to ``B`` sweeps (:data:`BLOCK_SWEEPS`) runs without the host looking. Sweep ``j`` of a block (a
*slot*) first copies the solver's state (the scalings ``u``, ``n s`` and their running maxima: one ``[4, k, n]``
buffer) into slot ``j`` of a history buffer, then runs the per-sweep loop's calls: the first block at the current
scalings, the stopping error (written into slot ``j`` of a record on the device instead of being read), the rest
of the sweep. After the block the running maxima are reduced into the same record, and the record (with, for the
first block, the lower bound of the log-kernels when the caller handed it over as a tensor) comes to the host in
one copy. The host then replays the per-sweep loop's decisions sweep by sweep: a non-finite error or a failed
range check hands the solve to the log domain at that sweep, and the first sweep ``s`` whose error is below
``tol`` (or that reaches ``max_iter``) is where the per-sweep loop stopped. Sweeps the block ran after ``s`` are
discarded: the state of slot ``s`` is copied back and the first block is contracted again at it, which is the
per-sweep loop's state when it stopped. So the iterates, the sweep count, the error, the mass, the pair marginals
and the potentials are the per-sweep loop's (bit for bit with the same calls on the same device,
``tests/test_m3g_blocked.py``).

Block lengths: a plan remembers the sweep count of its last solve (consecutive training steps need about as many)
and ends its blocks there: blocks of ``B`` sweeps, the last one shortened so that it ends at the remembered count,
then, if the solve goes on, blocks of 1, 2, 4, ... sweeps. With a good guess no sweep is wasted and a solve of
``S`` sweeps reads the device ``ceil(S / B)`` times; a plan's first solve runs blocks of ``B`` (at most ``B - 1``
sweeps wasted).

The range guard's running maxima only grow, so the guard passing at the end of a block means it passes at every
check inside it (``RANGE_CHECK_EVERY``); only when it fails at the end are the checks inside the block redone, from
the history slots (one more read each; the solve then usually goes to the log domain anyway).

Why this path, and what it gains: on a GPU the per-sweep loop waits for the device after every sweep (one host
read of the stopping error), and the device idles while the host decides and launches the next sweep; a solve of S
sweeps here reads the device ceil(S / B) times. Measured at the first device check (docs/gpu.md, an H100, time per
forward + backward): blocking alone gains nothing (k = 3: 2.52 ms blocked against 2.31 ms per sweep; k = 6, 133
sweeps: 80.3 against 77.7 ms); with the CUDA graphs below it is 1.55 ms and 13.1 ms (6x where there are many sweeps).
On the CPU it is off by default (the per-sweep loop has no device to wait for).

On CUDA the call lists of a solve (start: the kernels' fixed factors and the initial scalings; each slot; the
block's end; the finish: the first block again, the pair marginals, the maxima and the mass) are captured as CUDA
graphs on a plan's second solve (the first runs them eagerly, which warms the libraries up), so a sweep is one
graph launch, queued without waiting for the device. A plan's graphs are captured again when the float32
matrix-product precision (TF32) differs from the one they were captured under. If capturing fails, the same calls
run eagerly (warned once per process).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from functools import partial
from typing import Callable

import torch
from torch import Tensor

__all__ = ["BLOCK_SWEEPS", "CUDA_GRAPHS", "NonFiniteKernels", "BlockProgram", "BlockedSolve", "solve"]

#: most sweeps run between two reads of the stopping errors (one device-to-host copy per block)
BLOCK_SWEEPS = 8
#: capture a blocked CUDA solve's calls as CUDA graphs (from a plan's second solve on); False: launch them eagerly
CUDA_GRAPHS = True

_Op = Callable[[], object]
#: the range guard: ``(floor, largest u_v per view, largest n s_v per view) -> ok``
Guard = Callable[[float, list[float], list[float]], bool]
_WARNED: list[str] = []


class NonFiniteKernels(ValueError):
    """The lower bound of the log-kernels handed to the solver as a tensor is NaN or infinite (the kernels are)."""


@dataclass
class BlockedSolve:
    """What a blocked solve returns (``fallback_sweep >= 0``: the range guard refused it at that sweep and the
    rest is meaningless)."""

    iterations: int = 0
    marginal_error: float = math.inf
    mass: float = math.nan
    log_u: Tensor | None = None
    pair_marginals: Tensor | None = None
    fallback_sweep: int = -1
    graphs: bool = False
    reads: int = 0  # device-to-host reads of block records


def _run(ops: list[_Op]) -> None:
    for op in ops:
        op()


def _precision_key() -> tuple:
    """What a captured float32 matrix product depends on (whether TF32 may be used), read through the API the
    switches are set with (:func:`fusebench.spec.precision.matmul_precision_key`: under ``--precision tf32``
    PyTorch refuses the legacy getters)."""
    from fusebench.spec.precision import matmul_precision_key

    return matmul_precision_key()


class BlockProgram:
    """The calls of a blocked solve over the buffers of one scaling plan (``_ScalingPlan`` with ``block > 0``:
    torch calls only), run eagerly or as CUDA graphs.

    Buffers: ``hist`` ``[B, 4, k, n]`` (the state each sweep of a block started from), ``raw`` (one byte buffer
    read with one copy: ``B`` errors and the ``2k`` maxima in the plan's dtype, then the floor in float64) and
    ``fin`` (``2k`` maxima and the mass at the end of a solve). ``last``: the sweep count of the last solve."""

    def __init__(self, plan, block: int) -> None:
        k, state = plan.k, plan.state
        dtype, device = state.dtype, state.device
        self.block, self.k, self.n = block, k, plan.n
        # the plan's buffers this program reads and writes (not the plan itself: the plan holds the program)
        self.logk, self.state, self.u, self.pm = plan.logk, state, plan.u, plan.pm
        self.hist = state.new_empty((block,) + tuple(state.shape))
        size = state.element_size()
        self.n_vals = block + 2 * k
        self.off = -(-self.n_vals * size // 8) * 8  # the float64 floor after them, 8-byte aligned
        self.raw = torch.zeros(self.off + 8, dtype=torch.uint8, device=device)
        vals = self.raw[:self.n_vals * size].view(dtype)
        errs, ext = vals[:block], vals[block:]
        self.floor_slot = self.raw[self.off:].view(torch.float64)
        self.host = torch.empty(self.raw.shape, dtype=torch.uint8, pin_memory=True) if device.type == "cuda" else None
        self.fin = state.new_empty(2 * k + 1)
        ones, work = torch.ones_like(plan.u), torch.empty_like(plan.u)
        test = partial(torch.addcmul, ones, plan.u, plan.s, value=-1, out=work)  # 1 - u_v n s_v, as per sweep
        self.lists: dict[str, list[_Op]] = {"start": list(plan.setup) + [partial(state.fill_, 1.0)]}
        for j in range(block):
            self.lists[f"slot{j}"] = [partial(self.hist[j].copy_, state), *plan.head, test,
                                      partial(torch.linalg.vector_norm, work.view(-1), 1, out=errs[j]), *plan.body]
        self.lists["end"] = [partial(torch.amax, plan.run_max, dim=2, out=ext.view(2, k))]
        self.lists["finish"] = [*plan.head, *plan.stages[0].marginal_ops,
                                partial(torch.amax, plan.run_max, dim=2, out=self.fin[:2 * k].view(2, k)),
                                partial(torch.dot, plan.u[0], plan.s[0], out=self.fin[2 * k])]
        self.graphs: dict[str, object] | None = None
        self.graph_key: object = None
        self.replaying = False  # whether the current solve replays the graphs
        self.solves = 0
        self.last: int | None = None

    # ------------------------------------------------------------------------------------------ running
    def run(self, name: str) -> None:
        if self.replaying:
            self.graphs[name].replay()
        else:
            _run(self.lists[name])

    def read(self, floor: bool) -> tuple[list[float], float]:
        """The record (errors and maxima) and, with ``floor``, the floor slot (else NaN), on the host: the one
        synchronisation of a block (one copy to pinned memory on CUDA)."""
        if self.host is not None:
            self.host.copy_(self.raw, non_blocking=True)
            torch.cuda.current_stream(self.raw.device).synchronize()
            raw = self.host
        else:
            raw = self.raw.cpu()
        vals = raw[:self.n_vals * self.state.element_size()].view(self.state.dtype).tolist()
        return vals, raw[self.off:].view(torch.float64).tolist()[0] if floor else math.nan

    def maxima_at(self, j: int) -> tuple[list[float], list[float]]:
        """``(largest u_v, largest n s_v)`` per view of the state sweep ``j`` of the last block started from."""
        hi, s_hi = torch.amax(self.hist[j][2:], dim=2).tolist()
        return hi, s_hi

    def lengths(self):
        """Block lengths for one solve (see the module docstring): up to the last solve's sweep count, then 1, 2, 4."""
        done, grow = 0, 1
        while True:
            if self.last is not None and done <= self.last:
                b = min(self.block, self.last + 1 - done)  # sweeps 0..last are recorded when the block ends
            elif self.last is not None:
                b, grow = min(self.block, grow), grow * 2
            else:
                b = self.block
            yield b
            done += b

    # ------------------------------------------------------------------------------------------ CUDA graphs
    def use_graphs(self) -> bool:
        """Whether this solve replays graphs (captured now if needed: on the plan's second solve, or again when
        the TF32 setting changed since the capture)."""
        self.solves += 1
        if "capture" in _WARNED:  # capturing failed once in this process: eager from then on
            return False
        key = _precision_key()
        if self.graphs is not None and self.graph_key == key:
            return True
        if self.solves < 2:
            return False
        self.graphs = None
        try:
            self.graphs = self._capture()
            self.graph_key = key
        except Exception as exc:  # noqa: BLE001 - the eager calls are the same computation
            _WARNED.append("capture")
            warnings.warn(f"scaling_sinkhorn: capturing the blocked solve as CUDA graphs failed ({type(exc).__name__}: "
                          f"{exc}); its calls are launched eagerly from now on in this process", RuntimeWarning,
                          stacklevel=4)
            return False
        return True

    def _capture(self) -> dict[str, object]:
        """One CUDA graph per call list, after a warm-up on the capture stream; one memory pool for all of them
        (their temporaries die inside each graph and they never run concurrently)."""
        device = self.raw.device
        with torch.cuda.device(device):
            stream = torch.cuda.Stream(device)
            stream.wait_stream(torch.cuda.current_stream(device))
            with torch.cuda.stream(stream):  # library handles and workspaces for this stream
                for ops in self.lists.values():
                    _run(ops)
            torch.cuda.current_stream(device).wait_stream(stream)
            pool = torch.cuda.graph_pool_handle()
            graphs = {}
            for name, ops in self.lists.items():
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g, pool=pool, stream=stream, capture_error_mode="thread_local"):
                    _run(ops)
                graphs[name] = g
        return graphs


def solve(prog: BlockProgram, log_kernels: Tensor, floor: float | Tensor, tol: float, max_iter: int,
          range_every: int, guard: Guard, graphs: bool) -> BlockedSolve:
    """One blocked solve on ``prog``'s plan (see the module docstring). ``floor``: a number, or a 0-dim tensor on
    the device read with the first block (:class:`NonFiniteKernels` when it is not finite; the range guard at
    the start is applied then). ``range_every``: sweeps between two range checks (``RANGE_CHECK_EVERY``)."""
    k, n, block = prog.k, prog.n, prog.block
    used = prog.replaying = prog.use_graphs() if graphs else False
    prog.logk.copy_(log_kernels)
    deferred = isinstance(floor, Tensor)
    if deferred:
        prog.floor_slot.copy_(floor.detach().reshape(1))
    prog.run("start")
    ones = [1.0] * k
    it0 = reads = 0
    for b in prog.lengths():
        for j in range(b):  # launched back to back: no read, no branch on the device's values
            prog.run(f"slot{j}")
        prog.run("end")
        vals, floor_value = prog.read(deferred)
        reads += 1
        if deferred:
            deferred, floor = False, floor_value
            if not math.isfinite(floor):
                raise NonFiniteKernels(f"scaling_sinkhorn: the lower bound of the log-kernels is {floor}")
            if not guard(floor, ones, ones):
                return BlockedSolve(fallback_sweep=0, graphs=used, reads=reads)
        end_ok: bool | None = None
        for j in range(b):
            it = it0 + j
            if it == 0:  # the per-sweep loop tests from the second sweep on
                continue
            err = vals[j] / n
            if not math.isfinite(err):
                return BlockedSolve(fallback_sweep=it, graphs=used, reads=reads)
            if it % range_every == 0:
                if end_ok is None:  # the maxima only grow: passing at the block's end means passing here
                    end_ok = guard(floor, vals[block:block + k], vals[block + k:])
                if not end_ok and not guard(floor, *prog.maxima_at(j)):
                    return BlockedSolve(fallback_sweep=it, graphs=used, reads=reads)
            if err < tol or it >= max_iter:
                return _finish(prog, j, it, err, floor, guard, used, reads)
        it0 += b
    raise AssertionError("unreachable: lengths() never ends")  # pragma: no cover


def _finish(prog: BlockProgram, j: int, it: int, err: float, floor: float, guard: Guard, used: bool,
            reads: int) -> BlockedSolve:
    """Back to the state sweep ``it`` (slot ``j``) started from, the first block at it, and the outputs."""
    k = prog.k
    prog.state.copy_(prog.hist[j])
    prog.run("finish")
    pm = torch.mul(prog.pm, 1.0 / prog.n)  # fresh tensors: the plan's buffers are reused by the next solve
    log_u = prog.u.log()
    fin = prog.fin.tolist()
    if not guard(floor, fin[:k], fin[k:2 * k]):
        return BlockedSolve(fallback_sweep=it, graphs=used, reads=reads)
    prog.last = it
    return BlockedSolve(iterations=it, marginal_error=err, mass=fin[2 * k] / prog.n, log_u=log_u, pair_marginals=pm,
                        graphs=used, reads=reads)
