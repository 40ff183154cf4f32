"""``fusebench bench objectives --crossover``: M3G's scaling-domain solver strategies and its backends.

Two tables: the per-sweep cost of each strategy of the scaling-domain solver
(:func:`~fusebench.objectives.sinkhorn_scaling.scaling_sinkhorn`: the materialised n^k kernel, or the
pairwise kernels with e views eliminated per stage) against the rule that picks one
(:func:`~fusebench.objectives.sinkhorn_scaling.choose_strategy`), and whole M3G calls with the eager
against the compiled backend (numba, extra ``fast``) against what ``backend="auto"`` picks
(``m3g.COMPILED_MAX_ENTRIES``). Results: docs/benchmarks-objectives.md ("crossover").
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Callable

import torch

from fusebench.perf.timing import fmt_ms, machine_description, make_views

FAST_HINT = "numba is not installed: `pip install -e .[fast]` (the `fast` extra) or `pip install numba`"
#: (k, n) sizes of the strategy table (--quick: every third)
CROSSOVER_GRID = [(3, 8), (3, 16), (3, 24), (3, 32), (3, 48), (3, 64), (3, 128), (4, 8), (4, 12), (4, 16), (4, 24),
                  (4, 32), (5, 6), (5, 8), (5, 12), (5, 16), (6, 4), (6, 6), (6, 8), (6, 12)]


def crossover_strategies(k: int, n: int, budget: int = 2**24) -> list[tuple[str, int, bool]]:
    """(label, eliminated views, dense) for every strategy that fits ``budget`` entries per buffer."""
    out = []
    if n**k <= budget:
        out.append(("dense", 1, True))
    for e in range(1, k // 2 + 1):
        b = k - e
        if max(n ** ((b + 1) // 2 + e), n ** (b - (b + 1) // 2 + e), n**b) <= budget:
            out.append((f"pairwise e={e}", e, False))
    return out


def bench_crossover(grid: list[tuple[int, int]], sweeps: int = 40, rounds: int = 7, dtype: torch.dtype = torch.float32,
                    eps: float = 0.2, emit: Callable[[str], None] = print) -> list[dict]:
    """Per-sweep time of each strategy of :func:`scaling_sinkhorn` (``sweeps`` forced sweeps, ``tol=0``),
    the strategies alternating in each of ``rounds`` rounds; medians. Also which one the rule picks."""
    from fusebench.objectives.m3g import pair_sqdists
    from fusebench.objectives.sinkhorn_scaling import choose_strategy, scaling_sinkhorn

    emit("| k | n | n^k | " + "strategy: us per sweep | " + "fastest | rule picks | rule / fastest |")
    emit("|---|---|---|---|---|---|---|")
    rows = []
    for k, n in grid:
        z = torch.nn.functional.normalize(make_views(k, n, 32, dtype), dim=-1)
        log_k = -pair_sqdists(z) / (k * k * eps)
        strategies = crossover_strategies(k, n)
        times: dict[str, list[float]] = {label: [] for label, _, _ in strategies}
        for r in range(rounds + 1):
            for label, e, dense in strategies:
                t0 = time.perf_counter()
                res = scaling_sinkhorn(log_k, 0.0, sweeps, elim=e, dense=dense)
                if r > 0:  # round 0 builds the plans
                    times[label].append((time.perf_counter() - t0) / sweeps)
                if res.info.get("scaling_domain", 0.0) != 1.0 or res.iterations != sweeps:  # (not an assert: -O)
                    raise RuntimeError(f"crossover k={k} n={n} {label}: the solve left the scaling domain or ran "
                                       f"{res.iterations} sweeps instead of {sweeps}; its time is not a sweep's")
        med = {label: statistics.median(t) for label, t in times.items()}
        fastest = min(med, key=med.get)
        e_rule, dense_rule = choose_strategy(k, n)
        rule = "dense" if dense_rule else f"pairwise e={e_rule}"
        rows.append({"k": k, "n": n, "median": med, "fastest": fastest, "rule": rule})
        cells = ", ".join(f"{label} {t * 1e6:.0f}" for label, t in med.items())
        emit(f"| {k} | {n} | {n**k:,} | {cells} | {fastest} | {rule} | {med[rule] / med[fastest]:.2f} |")
    return rows


BACKEND_GRID = [(2, 64), (2, 128), (2, 256), (3, 16), (3, 24), (3, 32), (3, 40), (3, 48), (4, 8), (4, 12), (4, 16),
                (4, 20), (5, 6), (5, 8), (5, 10), (6, 4), (6, 5), (6, 6)]


def bench_backends(grid: list[tuple[int, int]], eps: float = 0.2, d: int = 32, seconds: float = 2.0,
                   dtype: torch.dtype = torch.float32, emit: Callable[[str], None] = print) -> list[dict]:
    """Whole M3G calls (forward + backward) with ``backend="eager"`` and ``backend="compiled"`` on the same
    views, alternating for ``seconds`` per size; medians, and which one ``backend="auto"`` picks
    (``m3g.COMPILED_MAX_ENTRIES``). Needs numba."""
    from fusebench.objectives import build
    from fusebench.objectives.m3g import compiled_module

    if compiled_module() is None:
        emit(f"(compiled backend not installed: {FAST_HINT})")
        return []
    emit("| k | n | n^k | eager | compiled | compiled / eager | auto picks |")
    emit("|---|---|---|---|---|---|---|")
    rows = []
    for k, n in grid:
        x = make_views(k, n, d, dtype).requires_grad_()
        losses = {b: build("m3g", eps=eps, backend=b) for b in ("eager", "compiled")}

        def call(m) -> None:
            x.grad = None
            v = m(x)
            v.backward()
            float(v.detach())

        times: dict[str, list[float]] = {b: [] for b in losses}
        for m in losses.values():
            call(m)
        stop = time.perf_counter() + seconds
        while time.perf_counter() < stop or not times["eager"]:
            for b, m in losses.items():
                t0 = time.perf_counter()
                call(m)
                times[b].append(time.perf_counter() - t0)
        med = {b: statistics.median(t) for b, t in times.items()}
        auto = build("m3g", eps=eps)  # what backend="auto" runs here, read off its stats
        auto(x.detach())
        picks = "compiled" if auto.stats["compiled"] else "eager"
        rows.append({"k": k, "n": n, "median": med, "picks": picks})
        emit(f"| {k} | {n} | {n**k:,} | {fmt_ms(med['eager'])} | {fmt_ms(med['compiled'])} "
             f"| {med['compiled'] / med['eager']:.2f} | {picks} |")
    return rows


def run(ns: argparse.Namespace) -> int:
    grid = CROSSOVER_GRID[::3] if ns.quick else CROSSOVER_GRID
    print("# fusebench bench objectives --crossover")
    print()
    print(machine_description())
    print()
    print("Scaling-domain Sinkhorn (objectives/sinkhorn_scaling.py, scaling_sinkhorn), float32, eps=0.2, d=32: "
          "microseconds per sweep of each strategy (40 forced sweeps per solve, strategies alternating, median of 7 "
          "rounds): `dense` contracts the materialised n^k kernel (one matrix-vector product per stage), `pairwise e` "
          "eliminates e views per stage by a GEMM on the pairwise kernels.")
    print()
    bench_crossover(grid, emit=lambda line: print(line, flush=True))
    from fusebench.objectives.m3g import COMPILED_MAX_ENTRIES

    print()
    print("Whole M3G calls (forward + backward, eps=0.2, d=32, float32): backend='eager' (the strategies above) "
          "against backend='compiled' (objectives/m3g_compiled.py: the call as one numba function on the "
          "materialised kernel), alternating for 2 s per size, medians. backend='auto' compiles while "
          f"n^k <= {COMPILED_MAX_ENTRIES:,} (m3g.COMPILED_MAX_ENTRIES).")
    print()
    bench_backends(BACKEND_GRID[::3] if ns.quick else BACKEND_GRID, emit=lambda line: print(line, flush=True))
    return 0
