"""``fusebench bench objectives``: forward+backward time and peak memory of every registered objective.

Three tables, printed as markdown:

1. every objective in ``fusebench.objectives.available()`` (default hyperparameters, float32) at
   (k, n, d) in {(2, 256, 128), (4, 64, 256), (6, 16, 256)}: median forward+backward wall time over
   ``--repeats`` timed calls (after one untimed warm-up call) and peak memory.  ``input_kind``
   decides the call: ``views`` -> ``module(views[k, n, d])``; ``pairs`` -> ``module(pred[k, n, d],
   target[k, n, d])``; ``tuple`` -> ``module(anchor[n, d], positive[n, d], negatives[n, n, d])``.  A
   shape the objective refuses (ValueError, e.g. ``matching_gap`` at k != 2) is shown as ``-``.
2. M3G ``solver="auto"`` vs ``solver="reference"`` in the same run at k = 4, n = 64, d = 256,
   eps = 0.2, float64: both times, their ratio and the absolute difference of the values.
3. M3G auto alone at (k, n) = (4, 128) and (6, 32), d = 256, eps = 0.2, float64 and float32.

Peak memory is measured with the torch profiler (``profile_memory=True``): the largest running sum
of the CPU allocator's allocations minus frees during one forward+backward call, i.e. memory
allocated on top of the inputs (tracemalloc cannot see torch's allocator).  Inputs: a rank-8 shared
per-sample signal plus independent view noise (so that views of a sample agree more than views of
different samples and Sinkhorn needs a few iterations); the seed is fixed.

Shape:
    views / predictions / targets: ``[k, n, d]``; anchor, positive: ``[n, d]``; negatives: ``[n, n, d]``.

Example::

    fusebench bench objectives --repeats 5
    fusebench bench objectives --quick --only 'm3g*'
    fusebench bench objectives --vs ott --device cuda   # our M3G on the GPU against ott-jax on jax's GPU backend

``--vs ott``, ``--crossover`` and ``--step-time`` are separate runs of the same command, each in its own
module (:mod:`fusebench.perf.vs_ott`, :mod:`fusebench.perf.crossover`, :mod:`fusebench.perf.step_time`);
``--pairwise`` (:func:`bench_pairwise`) times the log-domain pairwise Sinkhorn
(:mod:`fusebench.objectives.sinkhorn_pairwise`) against the reference solver on the same kernels; this module
holds the three tables above, that one, and the command line of all five.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from typing import TYPE_CHECKING, Callable

from fusebench.runtime.terminal_help import Once, Parser

if TYPE_CHECKING:  # imported where used: `fusebench bench objectives --help` imports no torch
    import torch

SHAPES = [(2, 256, 128), (4, 64, 256), (6, 16, 256)]
AUTO_ONLY = [(4, 128), (6, 32)]
TARGET_S = 2.0
TARGET_RATIO = 50.0


def _call_factory(module: torch.nn.Module, k: int, n: int, d: int, dtype: torch.dtype) -> Callable[[], float]:
    import torch

    from fusebench.perf.timing import make_views

    kind = getattr(module, "input_kind", "views")
    if kind == "pairs":
        pred = make_views(k, n, d, dtype, seed=1).requires_grad_()
        target = make_views(k, n, d, dtype, seed=2)
        args = (pred, target)
    elif kind == "tuple":
        g = torch.Generator().manual_seed(3)
        args = tuple(torch.randn(*s, generator=g, dtype=dtype).requires_grad_() for s in ((n, d), (n, d), (n, n, d)))
    else:
        args = (make_views(k, n, d, dtype).requires_grad_(),)

    def step() -> float:
        for a in args:
            a.grad = None
        out = module(*args)
        out.backward()
        return float(out.detach())

    return step


def bench_all(names: list[str], repeats: int, dtype: torch.dtype) -> list[str]:
    from fusebench.objectives import build
    from fusebench.perf.timing import fmt_mib, fmt_ms, peak_bytes, time_call

    head = "| objective | " + " | ".join(f"k={k}, n={n}, d={d}" for k, n, d in SHAPES) + " |"
    lines = [head, "|" + "---|" * (len(SHAPES) + 1)]
    for name in names:
        cells = []
        for k, n, d in SHAPES:
            try:
                module = build(name)
                step = _call_factory(module, k, n, d, dtype)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    sec, _ = time_call(step, repeats)
                    mem = peak_bytes(step)
                cells.append(f"{fmt_ms(sec)} / {fmt_mib(mem)}")
            except ValueError:
                cells.append("-")
            except Exception as exc:  # noqa: BLE001 - a broken objective must not hide the others
                cells.append(f"error: {type(exc).__name__}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def bench_m3g(repeats: int, ref_repeats: int) -> tuple[list[str], bool]:
    import torch

    from fusebench.objectives import build
    from fusebench.perf.timing import fmt_mib, fmt_ms, peak_bytes, time_call

    ok = True
    k, n, d, eps = 4, 64, 256, 0.2
    lines = ["| k | n | d | eps | dtype | auto | reference | ratio ref/auto | abs(value diff) | iterations |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    auto = build("m3g", eps=eps, solver="auto")
    ref = build("m3g", eps=eps, solver="reference")
    t_auto, v_auto = time_call(_call_factory(auto, k, n, d, torch.float64), repeats)
    t_ref, v_ref = time_call(_call_factory(ref, k, n, d, torch.float64), ref_repeats)
    ratio, diff = t_ref / t_auto, abs(v_auto - v_ref)
    ok &= ratio >= TARGET_RATIO and diff <= 1e-6
    lines.append(f"| {k} | {n} | {d} | {eps} | float64 | {fmt_ms(t_auto)} | {fmt_ms(t_ref)} | {ratio:.0f}x "
                 f"| {diff:.1e} | {int(auto.stats['iterations'])} / {int(ref.stats['iterations'])} |")
    lines += ["", "| solver | k | n | d | eps | dtype | forward+backward | peak memory | iterations | value | < 2 s |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for kk, nn in AUTO_ONLY:
        for dtype in (torch.float64, torch.float32):
            m = build("m3g", eps=eps, solver="auto")
            step = _call_factory(m, kk, nn, d, dtype)
            sec, val = time_call(step, repeats)
            mem = peak_bytes(step)
            ok &= sec < TARGET_S
            dname = str(dtype).replace("torch.", "")
            lines.append(f"| auto | {kk} | {nn} | {d} | {eps} | {dname} | {fmt_ms(sec)} "
                         f"| {fmt_mib(mem)} | {int(m.stats['iterations'])} | {val:.6f} | {'yes' if sec < TARGET_S else 'NO'} |")
    return lines, ok



#: (k, n) of --pairwise: sizes the reference can still materialise (n^k entries)
PAIRWISE_CASES = ((3, 32), (4, 16), (4, 24), (5, 12))


def bench_pairwise(repeats: int) -> list[str]:
    """The log-domain pairwise Sinkhorn against the reference :func:`~fusebench.objectives.sinkhorn.dense_sinkhorn`
    on the same circular-variance kernels of unit views (d = 32, eps = 0.2, tol 1e-9, float64), in one run: both
    times (median of ``repeats`` after a warm-up), their ratio, the largest difference of the potentials and
    the sweeps (equal: the same iterates)."""
    import torch

    from fusebench.objectives.m3g import dense_cost, pair_sqdists
    from fusebench.objectives.sinkhorn import dense_sinkhorn
    from fusebench.objectives.sinkhorn_pairwise import pairwise_sinkhorn
    from fusebench.perf.timing import fmt_ms, time_call

    eps, tol = 0.2, 1e-9
    lines = ["| k | n | n^k | reference | pairwise | ratio ref/pairwise | max abs(potential diff) | sweeps (ref / pairwise) |",
             "|---|---|---|---|---|---|---|---|"]
    for k, n in PAIRWISE_CASES:
        g = torch.Generator().manual_seed(0)
        z = torch.nn.functional.normalize(torch.randn(k, n, 32, generator=g, dtype=torch.float64), dim=-1)
        log_dense = -dense_cost(z, "cv") / eps
        log_pairs = -pair_sqdists(z) / (k * k * eps)  # c_cv = (1/k^2) sum_{l<m} ||z_l - z_m||^2
        out: dict[str, object] = {}

        def ref() -> float:
            out["ref"] = dense_sinkhorn(log_dense, tol, 10000)
            return 0.0

        def fast() -> float:
            out["fast"] = pairwise_sinkhorn(log_pairs, tol, 10000)
            return 0.0

        t_ref, _ = time_call(ref, repeats)
        t_fast, _ = time_call(fast, repeats)
        a, b = out["ref"], out["fast"]
        diff = float((a.log_u - b.log_u).abs().max())
        lines.append(f"| {k} | {n} | {n ** k:,} | {fmt_ms(t_ref)} | {fmt_ms(t_fast)} | {t_ref / t_fast:.1f}x "
                     f"| {diff:.1e} | {a.iterations} / {b.iterations} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = Parser(
        prog="fusebench bench objectives",
        description="Forward+backward time and peak memory of every registered objective, and M3G solver checks.",
        epilog="Examples: fusebench bench objectives --repeats 5 --threads 2; fusebench bench objectives --vs ott "
               "--quick; fusebench bench objectives --vs ott --device cuda; fusebench bench objectives --step-time",
    )
    parser.add_argument("--repeats", type=int, default=5, help="timed calls per cell (median reported; default 5)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 1 timed call per cell (1 for the reference solver); --vs ott: a few "
                        "configurations; --crossover: a third of the grid; --step-time: 30 rounds")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch intra-op threads (default 2; 1 with --vs and --step-time)")
    parser.add_argument("--only", default=None, help="glob over objective ids for the first table (e.g. 'm3g*')")
    parser.add_argument("--skip-m3g", action="store_true", help="only the per-objective table")
    peer = parser.add_argument_group("--vs ott: our M3G against ott-jax's MMSinkhorn (needs the peers extra)")
    peer.add_argument("--vs", choices=["ott"], default=None, help="run only the side-by-side table against a peer")
    peer.add_argument("--k", type=int, nargs="+", action=Once, default=None,
                      help="views (default 3 4 5 6; --quick: a subset)")
    peer.add_argument("--n", type=int, nargs="+", action=Once, default=None,
                      help="batch sizes (default 16 32 64 128)")
    peer.add_argument("--eps", type=float, nargs="+", action=Once, default=None,
                      help="entropic regularisations (default 0.2 0.05)")
    peer.add_argument("--dtype", choices=["float32", "float64"], default=None, help="(default float32)")
    peer.add_argument("--dim", type=int, default=None, help="embedding dimension d (default 32, the quickstart's)")
    peer.add_argument("--cell-seconds", type=float, default=None,
                      help="time budget of the timed rounds per configuration (default 20; at least 1 round)")
    peer.add_argument("--no-pin", action="store_true", help="do not pin the process to one CPU (with --threads 1)")
    peer.add_argument("--mem-cap-mib", type=float, default=None,
                      help="skip configurations whose n^k tensor (ott) exceeds this (default 256 MiB on the CPU, "
                           "1024 MiB with --device cuda)")
    peer.add_argument("--device", choices=("cpu", "cuda"), default=None,
                      help="where both sides run (default cpu: one pinned core each; cuda: our M3G on the GPU, ott on "
                           "jax's GPU backend; default batch sizes 8 16 32 64 128 256)")
    peer.add_argument("--block-sweeps", type=int, default=None,
                      help="sweeps per read of the stopping errors of our GPU solver (default "
                           "sinkhorn_blocked.BLOCK_SWEEPS, 8; see docs/gpu.md)")
    peer.add_argument("--no-graphs", action="store_true",
                      help="launch our GPU solver's calls eagerly instead of replaying CUDA graphs")
    peer.add_argument("--backend", choices=("auto", "eager", "compiled"), default=None,
                      help="our M3G's backend (default auto: the compiled call for small CPU problems when numba is "
                           "installed, see docs/objectives-ot.md)")
    parser.add_argument("--pairwise", action="store_true",
                        help="run only the log-domain pairwise Sinkhorn against the reference solver (same kernels)")
    parser.add_argument("--crossover", action="store_true",
                        help="run only the per-sweep timing of the M3G solver's strategies (the crossover rule)")
    step = parser.add_argument_group("--step-time: quickstart training step, M3G / InfoNCE-pwe")
    step.add_argument("--step-time", action="store_true", help="run only the step-time comparison")
    step.add_argument("--rounds", type=int, default=None, help="alternating rounds (default 100; --quick: 30)")
    step.add_argument("--profile", action="store_true", help="also print a torch.profiler table of M3G steps")
    ns = parser.parse_args(argv)
    import torch

    from fusebench.perf import crossover, step_time, vs_ott

    special = [name for name, on in (("--vs", ns.vs), ("--step-time", ns.step_time), ("--crossover", ns.crossover),
                                     ("--pairwise", ns.pairwise)) if on]
    if ns.threads is None:
        ns.threads = 1 if special else 2
    if ns.repeats < 1 or ns.threads < 1 or (ns.rounds is not None and ns.rounds < 1):
        parser.error("--repeats, --threads and --rounds must be >= 1")
    # every option of the --vs ott group is used by that run only: given without it, refused (never ignored)
    peer_options = [f"--{a.dest.replace('_', '-')}" for a in peer._group_actions
                    if a.dest != "vs" and getattr(ns, a.dest) not in (None, False)]
    if peer_options and not ns.vs:
        parser.error(f"{', '.join(peer_options)} {'applies' if len(peer_options) == 1 else 'apply'} to --vs ott only "
                     f"(the default tables use fixed shapes; run e.g. fusebench bench objectives --vs ott "
                     f"{' '.join(peer_options)} ...)")
    step_options = [name for name, on in (("--rounds", ns.rounds is not None), ("--profile", ns.profile)) if on]
    if step_options and not ns.step_time:
        parser.error(f"{', '.join(step_options)} {'applies' if len(step_options) == 1 else 'apply'} to --step-time only")
    table_options = [name for name, on in (("--only", ns.only is not None), ("--skip-m3g", ns.skip_m3g)) if on]
    if special and table_options:  # they shape the default tables, which a special run does not print
        parser.error(f"{', '.join(table_options)} {'shapes' if len(table_options) == 1 else 'shape'} the default "
                     f"tables, and {special[0]} runs only its own table; drop {', '.join(table_options)}")
    if ns.repeats != parser.get_default("repeats") and (ns.step_time or ns.crossover):
        parser.error(f"--repeats is not read by {'--step-time (its count is --rounds)' if ns.step_time else '--crossover'}"
                     f"; drop --repeats")
    # --quick picks counts / configurations of its own: an option it would override, or one that leaves --quick
    # nothing to do, is refused (never one of the two silently ignored)
    if ns.quick:
        if ns.vs and (quick_over := [f"--{a}" for a in ("k", "n", "eps") if getattr(ns, a) is not None]):
            parser.error(f"{', '.join(quick_over)} and --quick: --vs ott --quick runs its own configurations (k/n "
                         + ", ".join(f"{k}/{n}" for k, n in vs_ott.VS_QUICK) + f", eps 0.2 and 0.05), so "
                         f"{', '.join(quick_over)} would change nothing; drop one of them")
        if ns.step_time and ns.rounds is not None:
            parser.error(f"--rounds {ns.rounds} and --quick: --quick only sets --step-time's default rounds (30), so "
                         "it would change nothing; drop --quick")
        if not (ns.vs or ns.step_time or ns.crossover) and ns.repeats != parser.get_default("repeats"):
            parser.error(f"--repeats {ns.repeats} and --quick: --quick times 1 call per cell, so --repeats would "
                         "change nothing; drop one of them")
    if ns.vs:  # the --vs ott defaults
        ns.dtype, ns.dim = ns.dtype or "float32", 32 if ns.dim is None else ns.dim
        ns.cell_seconds = 20.0 if ns.cell_seconds is None else ns.cell_seconds
        ns.backend = ns.backend or "auto"
    if ns.rounds is None:  # --step-time's default (--quick: 30); a --rounds given is used as given
        ns.rounds = 30 if ns.quick else 100
    if ns.block_sweeps is not None and ns.block_sweeps < 1:
        parser.error(f"--block-sweeps must be an integer >= 1, got {ns.block_sweeps}")
    if ns.vs:  # options of one kind of --vs ott run: given to the other, they would change nothing
        gpu_only = [o for o, given in (("--block-sweeps", ns.block_sweeps is not None), ("--no-graphs", ns.no_graphs))
                    if given]
        if gpu_only and ns.device != "cuda":
            parser.error(f"{', '.join(gpu_only)} set(s) our GPU solver (blocked, CUDA graphs), which a CPU run does "
                         "not use; add --device cuda, or drop it")
        if ns.no_pin and (ns.device == "cuda" or ns.threads != 1):
            parser.error(f"--no-pin: the process is pinned to one CPU only on the CPU with one thread (here "
                         f"{'--device cuda' if ns.device == 'cuda' else f'--threads {ns.threads}'}), so it would "
                         "change nothing; drop it")
    if ns.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA device here (torch.cuda.is_available() is False)")
    if len(special) > 1:
        parser.error(f"{' and '.join(special)} are separate runs; pick one")
    if special:
        previous_threads = torch.get_num_threads()
        torch.set_num_threads(ns.threads)
        try:
            if ns.vs:
                return vs_ott.run(ns)
            if ns.pairwise:
                from fusebench.perf.timing import machine_description

                print("# fusebench bench objectives --pairwise\n")
                print(machine_description() + "\n")
                print(f"float64, one sweep order, eps 0.2, tol 1e-9; median of {1 if ns.quick else ns.repeats} "
                      f"after a warm-up; {ns.threads} thread(s)\n")
                print("\n".join(bench_pairwise(1 if ns.quick else ns.repeats)))
                return 0
            return step_time.run(ns) if ns.step_time else crossover.run(ns)
        finally:
            torch.set_num_threads(previous_threads)
    from fusebench.objectives import available

    names = available(ns.only)
    if not names:
        parser.error(f"no registered objective matches {ns.only!r}; valid ids: {', '.join(available())}")
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(ns.threads)
    try:
        return _run(ns, names)
    finally:
        torch.set_num_threads(previous_threads)


def _run(ns: argparse.Namespace, names: list[str]) -> int:
    import torch

    from fusebench.perf.timing import machine_description

    repeats = 1 if ns.quick else ns.repeats
    ref_repeats = 1 if ns.quick else min(3, ns.repeats)
    print("# fusebench bench objectives")
    print()
    print(machine_description())
    print()
    print(f"Forward+backward, median of {repeats} (after 1 warm-up), float32, default hyperparameters; "
          "cell = time / peak memory (torch profiler, CPU allocations during one call).")
    print()
    print("\n".join(bench_all(names, repeats, torch.float32)))
    if ns.skip_m3g:
        return 0
    print()
    print(f"M3G auto vs reference (median of {repeats} / {ref_repeats}); targets: ratio >= {TARGET_RATIO:.0f}x, "
          f"values equal to 1e-6, auto under {TARGET_S:.0f} s.")
    print()
    lines, ok = bench_m3g(repeats, ref_repeats)
    print("\n".join(lines))
    print()
    print("targets met" if ok else "TARGETS NOT MET")
    return 0



if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
