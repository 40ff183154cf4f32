"""Helpers shared by the objective benches (:mod:`fusebench.perf.objectives` and its ``--vs ott``,
``--crossover`` and ``--step-time`` runs): the machine line, the synthetic views every table uses,
median wall time of a call, peak CPU memory of a call (torch profiler) and the cell formats.

Shape:
    views: ``[k, n, d]``.
"""

from __future__ import annotations

import contextlib
import os
import platform
import statistics
import sys
import time
from typing import Callable

import torch

from fusebench.machine import cpu_model


def machine_description() -> str:
    return (f"CPU: {cpu_model()}; logical cores: {os.cpu_count()}; torch threads: {torch.get_num_threads()}; "
            f"torch {torch.__version__}; Python {platform.python_version()}; {platform.system()} {platform.machine()}")


def make_views(k: int, n: int, d: int, dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    """``[k, n, d]``: shared rank-8 per-sample signal + view noise (unnormalised)."""
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(n, 8, generator=g, dtype=torch.float64) @ torch.randn(8, d, generator=g, dtype=torch.float64)
    base = base / 8**0.5
    return (base + 0.3 * torch.randn(k, n, d, generator=g, dtype=torch.float64)).to(dtype)


@contextlib.contextmanager
def quiet_stderr():
    """Silence the C++ profiler's start/stop lines written straight to file descriptor 2."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def peak_bytes(fn: Callable[[], None]) -> int:
    """Largest running total of CPU allocations minus frees while ``fn`` runs (torch profiler)."""
    from torch.profiler import ProfilerActivity, profile

    with quiet_stderr(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events() if e.name() == "[memory]")
    cur = peak = 0
    for _, nbytes in events:
        cur += nbytes
        peak = max(peak, cur)
    return peak


def time_call(step: Callable[[], float], repeats: int) -> tuple[float, float]:
    """(median seconds over ``repeats`` timed calls after one warm-up call, value of the last call)."""
    value = step()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        value = step()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), value


def fmt_ms(sec: float) -> str:
    if sec < 1e-3:
        return f"{sec * 1e3:.2f} ms"
    return f"{sec * 1e3:.1f} ms" if sec < 10 else f"{sec:.1f} s"


def fmt_mib(nbytes: int) -> str:
    return f"{nbytes / 2**20:.1f} MiB"
