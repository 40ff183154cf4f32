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
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import importlib.util
import os
import platform
import statistics
import sys
import time
import warnings
from typing import Callable

import numpy as np
import torch

SHAPES = [(2, 256, 128), (4, 64, 256), (6, 16, 256)]
AUTO_ONLY = [(4, 128), (6, 32)]
TARGET_S = 2.0
TARGET_RATIO = 50.0


def machine_description() -> str:
    from fusebench.bench import cpu_model

    return (f"CPU: {cpu_model()}; logical cores: {os.cpu_count()}; torch threads: {torch.get_num_threads()}; "
            f"torch {torch.__version__}; Python {platform.python_version()}; {platform.system()} {platform.machine()}")


def make_views(k: int, n: int, d: int, dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    """``[k, n, d]``: shared rank-8 per-sample signal + view noise (unnormalised)."""
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(n, 8, generator=g, dtype=torch.float64) @ torch.randn(8, d, generator=g, dtype=torch.float64)
    base = base / 8**0.5
    return (base + 0.3 * torch.randn(k, n, d, generator=g, dtype=torch.float64)).to(dtype)


@contextlib.contextmanager
def _quiet_stderr():
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

    with _quiet_stderr(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events() if e.name() == "[memory]")
    cur = peak = 0
    for _, nbytes in events:
        cur += nbytes
        peak = max(peak, cur)
    return peak


def _call_factory(module: torch.nn.Module, k: int, n: int, d: int, dtype: torch.dtype) -> Callable[[], float]:
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


def time_call(step: Callable[[], float], repeats: int) -> tuple[float, float]:
    """(median seconds over ``repeats`` timed calls after one warm-up call, value of the last call)."""
    value = step()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        value = step()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), value


def _fmt_ms(sec: float) -> str:
    if sec < 1e-3:
        return f"{sec * 1e3:.2f} ms"
    return f"{sec * 1e3:.1f} ms" if sec < 10 else f"{sec:.1f} s"


def _fmt_mib(nbytes: int) -> str:
    return f"{nbytes / 2**20:.1f} MiB"


def bench_all(names: list[str], repeats: int, dtype: torch.dtype) -> list[str]:
    from fusebench.objectives import build

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
                cells.append(f"{_fmt_ms(sec)} / {_fmt_mib(mem)}")
            except ValueError:
                cells.append("-")
            except Exception as exc:  # noqa: BLE001 - a broken objective must not hide the others
                cells.append(f"error: {type(exc).__name__}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def bench_m3g(repeats: int, ref_repeats: int) -> tuple[list[str], bool]:
    from fusebench.objectives import build

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
    lines.append(f"| {k} | {n} | {d} | {eps} | float64 | {_fmt_ms(t_auto)} | {_fmt_ms(t_ref)} | {ratio:.0f}x "
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
            lines.append(f"| auto | {kk} | {nn} | {d} | {eps} | {dname} | {_fmt_ms(sec)} "
                         f"| {_fmt_mib(mem)} | {int(m.stats['iterations'])} | {val:.6f} | {'yes' if sec < TARGET_S else 'NO'} |")
    return lines, ok


# ------------------------------------------------------------------------------------------------
# --vs ott: our M3G against ott-jax's multi-marginal Sinkhorn, side by side
# ------------------------------------------------------------------------------------------------
VS_KS, VS_NS, VS_EPSS = (3, 4, 5, 6), (16, 32, 64, 128), (0.2, 0.05)
VS_QUICK = [(3, 16), (3, 32), (3, 64), (4, 16)]
PEERS_HINT = ("ott-jax is not installed: `pip install -e .[peers]` (the `peers` extra: ott-jax>=0.4 and CPU jax) "
              "or `pip install \"ott-jax>=0.4\" \"jax[cpu]>=0.4\"`")
FAST_HINT = "numba is not installed: `pip install -e .[fast]` (the `fast` extra) or `pip install numba`"
#: 1 thread for XLA's CPU backend (set before jax is imported)
XLA_ONE_THREAD = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"


def import_ott(threads: int = 1):
    """``(jax, jax.numpy, MMSinkhorn)``, or None when the ``peers`` extra is missing. With ``threads == 1``
    XLA's CPU backend is limited to one thread (only effective if jax was not imported before)."""
    if threads == 1 and "jax" not in sys.modules:
        flags = os.environ.get("XLA_FLAGS", "")
        if "xla_cpu_multi_thread_eigen" not in flags:
            os.environ["XLA_FLAGS"] = (flags + " " + XLA_ONE_THREAD).strip()
    try:
        import jax
        import jax.numpy as jnp
        from ott.experimental.mmsinkhorn import MMSinkhorn
    except ImportError:
        return None
    return jax, jnp, MMSinkhorn


def ott_m3g(k: int, n: int, eps: float, tol: float, max_iter: int):
    """The M3G loss (value, Danskin gradient) on ott's ``MMSinkhorn``, as a jitted ``value_and_grad``.

    Views ``[k, n, d]`` are L2-normalised as in ours, then scaled by 1/k: ott's cost is the sum over pairs
    of squared Euclidean distances, ``sum_{l<m} ||z_l / k - z_m / k||^2 = c_cv``. Its ``ent_reg_cost``
    (with ``use_danskin=True``: potentials detached) is the Sinkhorn dual value ``sum_l <f_l, 1/n> +
    eps (1 - mass)``, our ``min F``; the gap is ``<J, C> - eps log n - ent_reg_cost``. Convergence:
    ``threshold=tol``, ``inner_iterations=1`` (the sum over views of the L1 marginal errors, after every
    sweep, as ours), ``norm_error=1``. Returns ``f(views) -> ((value, (sweeps, converged)), grad)``.
    """
    jax, jnp, mm_sinkhorn = import_ott()
    solver = mm_sinkhorn(threshold=tol, norm_error=1.0, inner_iterations=1, min_iterations=0,
                         max_iterations=max_iter, use_danskin=True)

    def loss(views):
        z = views / jnp.linalg.norm(views, axis=-1, keepdims=True) / k
        xs = tuple(z[l] for l in range(k))
        out = solver(xs, epsilon=eps)
        diag = sum(jnp.sum((xs[l] - xs[m]) ** 2, axis=-1) for l in range(k) for m in range(l + 1, k)).mean()
        return diag - eps * jnp.log(n) - out.ent_reg_cost, (out.n_iters, out.converged)

    return jax.jit(jax.value_and_grad(loss, has_aux=True))


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(q * (len(xs) - 1))))]


def compare_with_ott(k: int, n: int, eps: float, dtype: torch.dtype, d: int = 32, tol: float = 1e-3,
                     max_iter: int = 1000, repeats: int = 7, cell_seconds: float = 20.0, seed: int = 0,
                     backend: str = "auto") -> dict:
    """One configuration: identical inputs, our M3G forward+backward and ott's jitted value_and_grad
    alternating (after jit compilation and one untimed call each). Returns a dict of the measurements."""
    jax, jnp, _ = import_ott()
    from fusebench.objectives import build

    jax.config.update("jax_enable_x64", dtype == torch.float64)
    views = make_views(k, n, d, dtype, seed=seed)
    x_ours = views.clone().requires_grad_()
    x_ott = jnp.asarray(views.numpy())
    m3g = build("m3g", eps=eps, tol=tol, max_iter=max_iter, backend=backend)
    f_ott = ott_m3g(k, n, eps, tol, max_iter).lower(x_ott).compile()

    def ours() -> float:
        x_ours.grad = None
        v = m3g(x_ours)
        v.backward()
        return float(v.detach())

    def ott():
        (v, aux), g = f_ott(x_ott)
        g.block_until_ready()
        return v, aux, g

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours()  # first calls: jit / load of compiled code, caches
        ott()
        t0 = time.perf_counter()
        v_ours = ours()
        v_ott, (sweeps_ott, conv_ott), g_ott = ott()
        pair = time.perf_counter() - t0
        rounds = max(1, min(repeats, int(cell_seconds / max(pair, 1e-9))))
        t_ours, t_ott, cpu_ours, cpu_ott = [], [], [], []
        for r in range(rounds):
            order = (0, 1) if r % 2 == 0 else (1, 0)
            for which in order:
                w0, c0 = time.perf_counter(), time.process_time()
                ours() if which == 0 else ott()
                w1, c1 = time.perf_counter(), time.process_time()
                (t_ours if which == 0 else t_ott).append(w1 - w0)
                (cpu_ours if which == 0 else cpu_ott).append((c1 - c0) / max(w1 - w0, 1e-12))
    g_ours = x_ours.grad.detach().double().numpy()
    g_ott = np.asarray(g_ott, dtype=np.float64)
    v_ott = float(v_ott)
    per_round = [a / b for a, b in zip(t_ours, t_ott)]
    return {
        "k": k, "n": n, "eps": eps, "dtype": str(dtype).replace("torch.", ""), "d": d,
        "value_ours": v_ours, "value_ott": v_ott,
        "value_rel_diff": abs(v_ours - v_ott) / max(abs(v_ott), 1e-300),
        "grad_rel_diff": float(np.abs(g_ours - g_ott).max() / max(np.abs(g_ott).max(), 1e-300)),
        "sweeps_ours": int(m3g.stats["iterations"]), "sweeps_ott": int(sweeps_ott),
        "converged_ours": bool(m3g.stats["converged"]), "converged_ott": bool(conv_ott),
        "scaling_domain": bool(m3g.stats.get("scaling_domain", 0.0)),
        "compiled": bool(m3g.stats.get("compiled", 0.0)),
        "rounds": rounds, "t_ours": statistics.median(t_ours), "t_ott": statistics.median(t_ott),
        "ratio": statistics.median(t_ours) / statistics.median(t_ott),
        "ratio_min": min(per_round), "ratio_max": max(per_round),
        "cpu_ours": statistics.median(cpu_ours), "cpu_ott": statistics.median(cpu_ott),
    }


class _ShellOnly:
    """A stand-in for the M3G module in :class:`~fusebench.objectives.m3g._CvGap` that does everything of
    the fast path except the solve and the dual value: the Gram matrix, a ``W`` of the right shape."""

    def __init__(self, k: int, n: int, dtype: torch.dtype) -> None:
        self.w = torch.zeros(k * n, k * n, dtype=dtype)
        self.stats: dict[str, float] = {}

    def _cv_gap(self, z: torch.Tensor) -> tuple[float, torch.Tensor]:
        zf = z.reshape(-1, z.shape[-1])
        torch.mm(zf, zf.T).mul_(-2.0).add_(2.0)
        return 0.0, self.w


class _Empty(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.new_zeros(())

    @staticmethod
    def backward(ctx, grad):
        return None


def eager_floor(k: int, n: int, d: int, dtype: torch.dtype, rounds: int = 400) -> dict[str, float]:
    """Seconds (medians, alternating) of what a PyTorch loss of M3G's shape costs before any solving:
    an autograd node that does nothing, forward + backward (``empty``), and the fast path's shell, i.e.
    normalisation, Gram matrix and the Danskin backward of :class:`_CvGap` with no Sinkhorn solve and no
    dual value (``shell``). A whole call of ours can be no faster than ``shell``."""
    from fusebench.objectives.m3g import _CvGap

    x = make_views(k, n, d, dtype).requires_grad_()
    shell = _ShellOnly(k, n, dtype)

    def run_empty() -> None:
        x.grad = None
        _Empty.apply(x).backward()

    def run_shell() -> None:
        x.grad = None
        v = _CvGap.apply(x, shell, True)
        v.backward()
        float(v.detach())

    fns = {"empty": run_empty, "shell": run_shell}
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(20):
        for fn in fns.values():
            fn()
    for _ in range(rounds):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(ts) for name, ts in times.items()}


def bench_vs_ott(configs: list[tuple[int, int, float]], dtype: torch.dtype, repeats: int, cell_seconds: float,
                 mem_cap_mib: float, d: int = 32, emit: Callable[[str], None] = print,
                 backend: str = "auto") -> list[dict]:
    """The side-by-side table, one markdown row per configuration as it is measured."""
    itemsize = torch.finfo(dtype).bits // 8
    emit("| k | n | eps | ours ran | sweeps ours / ott | value (ours) | rel. value diff | rel. grad diff "
         "| ours fwd+bwd | ott fwd+grad | ratio ours/ott (min-max) | rounds | CPU use ours / ott |")
    emit("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    rows = []
    for k, n, eps in configs:
        mib = n**k * itemsize / 2**20
        if mib > mem_cap_mib:
            emit(f"| {k} | {n} | {eps} | - | - | - | - | - | - | - | skipped: ott's n^k tensor is {mib:,.0f} MiB "
                 f"(> {mem_cap_mib:,.0f} MiB cap) | - | - |")
            continue
        r = compare_with_ott(k, n, eps, dtype, d=d, repeats=repeats, cell_seconds=cell_seconds, backend=backend)
        rows.append(r)
        ran = "compiled" if r["compiled"] else "eager"
        emit(f"| {k} | {n} | {eps} | {ran} | {r['sweeps_ours']} / {r['sweeps_ott']} | {r['value_ours']:.7f} "
             f"| {r['value_rel_diff']:.1e} | {r['grad_rel_diff']:.1e} | {_fmt_ms(r['t_ours'])} | {_fmt_ms(r['t_ott'])} "
             f"| **{r['ratio']:.2f}x** ({r['ratio_min']:.2f}-{r['ratio_max']:.2f}) | {r['rounds']} "
             f"| {r['cpu_ours']:.2f} / {r['cpu_ott']:.2f} |")
    return rows


def _current_cpu() -> int | None:
    """The CPU this process last ran on (Linux), or None."""
    with contextlib.suppress(OSError, IndexError, ValueError):
        with open("/proc/self/stat") as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[36])
    return None


@contextlib.contextmanager
def pinned_to_one_cpu(enabled: bool = True):
    """Pin the process (every thread: torch's, XLA's) to one CPU while inside; yields the CPU or None.
    XLA's CPU backend does not honour a thread limit reliably, so this is what makes both peers use
    one core."""
    cpu = _current_cpu() if enabled and hasattr(os, "sched_setaffinity") else None
    if cpu is None:
        yield None
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})
    try:
        yield cpu
    finally:
        os.sched_setaffinity(0, before)


def _run_vs_ott(ns: argparse.Namespace) -> int:
    if import_ott(ns.threads) is None:
        print(f"fusebench bench objectives --vs ott: {PEERS_HINT}")
        return 1
    with pinned_to_one_cpu(ns.threads == 1 and not ns.no_pin) as cpu:
        return _vs_ott_tables(ns, cpu)


def _vs_ott_tables(ns: argparse.Namespace, cpu: int | None) -> int:
    import jax

    import ott as ott_pkg

    dtype = {"float32": torch.float32, "float64": torch.float64}[ns.dtype]
    if ns.quick:
        configs = [(k, n, eps) for k, n in VS_QUICK for eps in VS_EPSS]
    else:
        configs = [(k, n, eps) for k in (ns.k or VS_KS) for n in (ns.n or VS_NS) for eps in (ns.eps or VS_EPSS)]
    print("# fusebench bench objectives --vs ott")
    print()
    print(machine_description())
    fast = importlib.util.find_spec("numba") is not None
    numba_version = importlib.metadata.version("numba") if fast else "not installed (no compiled backend)"
    print(f"jax {jax.__version__}, ott-jax {ott_pkg.__version__}, numba {numba_version}, our backend {ns.backend}, "
          f"XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}; "
          + (f"process pinned to CPU {cpu} (both peers on one core)" if cpu is not None else "process not pinned"))
    print()
    print(f"Our M3G (`m3g`, cost cv, solver auto) against ott-jax's `MMSinkhorn` (ott.experimental.mmsinkhorn) on "
          f"identical inputs: views [k, n, d={ns.dim}] ({ns.dtype}), L2-normalised, divided by k for ott (its summed "
          "squared Euclidean cost is then our c_cv); same eps, tol = 1e-3 on the sum over views of the L1 marginal "
          "errors checked after every sweep (ott: threshold=1e-3, norm_error=1, inner_iterations=1), max 1000 "
          "sweeps. Timed: ours = forward + backward of the M3G loss (Danskin gradient w.r.t. the views); ott = one "
          "call of jax.jit(jax.value_and_grad(gap)) with use_danskin=True (value and gradient w.r.t. the views), "
          "compiled ahead of time. After one untimed call each, the two alternate (order swapped every round); "
          f"medians over the rounds (at most {ns.repeats}, fewer when a round exceeds {ns.cell_seconds:g} s / "
          "rounds); ratio = median ours / median ott, min-max over the per-round ratios. CPU use = process CPU "
          "time / wall time during the calls (1.0 = one busy core). ott materialises the n^k cost tensor: "
          f"configurations where it exceeds {ns.mem_cap_mib:g} MiB are skipped.")
    print()
    rows = bench_vs_ott(configs, dtype, ns.repeats, ns.cell_seconds, ns.mem_cap_mib, d=ns.dim,
                        emit=lambda line: print(line, flush=True), backend=ns.backend)
    if rows:
        worst = max(rows, key=lambda r: r["ratio"])
        agree = max(r["value_rel_diff"] for r in rows)
        same = all(r["sweeps_ours"] == r["sweeps_ott"] for r in rows)
        print()
        print(f"target ours <= 1.0x ott at every configuration: {'met' if worst['ratio'] <= 1.0 else 'NOT MET'} "
              f"(largest ratio {worst['ratio']:.2f}x at k={worst['k']}, n={worst['n']}, eps={worst['eps']}); "
              f"largest relative value difference {agree:.1e}; same sweep counts: {'yes' if same else 'NO'}")
        small = min(rows, key=lambda r: r["t_ott"])
        floor = eager_floor(small["k"], small["n"], ns.dim, dtype)
        ran = "compiled" if small["compiled"] else "eager"
        print(f"eager-PyTorch floor at k={small['k']}, n={small['n']} (no solve): an autograd node that does nothing "
              f"{floor['empty'] * 1e3:.2f} ms, the eager fast path's shell (normalisation, Gram matrix, Danskin "
              f"backward) {floor['shell'] * 1e3:.2f} ms; there ott's whole call takes {small['t_ott'] * 1e3:.2f} ms, "
              f"ours ({ran}) {small['t_ours'] * 1e3:.2f} ms")
    return 0


# ------------------------------------------------------------------------------------------------
# --crossover: per-sweep cost of each scaling-domain strategy (the rule in sinkhorn.choose_strategy)
# ------------------------------------------------------------------------------------------------
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
    from fusebench.objectives.sinkhorn import choose_strategy, scaling_sinkhorn

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
                assert res.info.get("scaling_domain", 0.0) == 1.0 and res.iterations == sweeps
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
        emit(f"| {k} | {n} | {n**k:,} | {_fmt_ms(med['eager'])} | {_fmt_ms(med['compiled'])} "
             f"| {med['compiled'] / med['eager']:.2f} | {picks} |")
    return rows


def _run_crossover(ns: argparse.Namespace) -> int:
    grid = CROSSOVER_GRID[::3] if ns.quick else CROSSOVER_GRID
    print("# fusebench bench objectives --crossover")
    print()
    print(machine_description())
    print()
    print("Scaling-domain Sinkhorn (objectives/sinkhorn.py, scaling_sinkhorn), float32, eps=0.2, d=32: microseconds "
          "per sweep of each strategy (40 forced sweeps per solve, strategies alternating, median of 7 rounds): "
          "`dense` contracts the materialised n^k kernel (one matrix-vector product per stage), `pairwise e` "
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


# ------------------------------------------------------------------------------------------------
# --step-time: a quickstart pretraining step, M3G against InfoNCE-pwe
# ------------------------------------------------------------------------------------------------
STEP_TARGET = 1.5


def quickstart_steps(objectives: tuple[str, ...] = ("m3g", "infonce_pwe"), benchmark: str = "quickstart",
                     seed: int = 0) -> dict[str, Callable[[], float]]:
    """One pretraining step per objective in ``benchmark``'s configuration (its encoder, heads, batch size,
    optimiser and objective hyperparameters), each with its own model built from the same seed, on the
    same first training batch: ``loss = Pretrainer(batch)``, backward, optimiser step (what the training
    loop does per step, without data loading, scheduler and logging)."""
    from fusebench import benchmarks
    from fusebench import objectives as objs
    from fusebench.training import runner
    from fusebench.training.pretrain import Pretrainer

    spec = benchmarks.load(benchmark)
    data = runner._datasets(spec, False, None, seed, roles=("train",))
    loader, per_epoch = runner._loader(data["train"], runner.pretrain_batch_size(spec, objectives[0]), True, seed, 0)
    batch = next(iter(loader))
    steps = {}
    for name in objectives:
        torch.manual_seed(seed)
        model = runner.build_model(spec, data["train"])
        obj = objs.build(name, **runner.objective_hparams(spec, name))
        pre = Pretrainer(model, obj, spec.pretrain, total_steps=per_epoch * spec.pretrain.epochs)
        opt = runner._optimizer(pre.student_parameters(), spec.pretrain.optimizer, spec.pretrain.lr,
                                spec.pretrain.weight_decay)
        pre.train()

        def step(pre=pre, opt=opt) -> float:
            loss = pre(batch)
            pre.optimise(loss, opt, all_reduce=False)
            return float(loss.detach())

        steps[name] = step
    return steps


def bench_step_time(rounds: int = 100, warmup: int = 10, benchmark: str = "quickstart") -> dict:
    """Median step times (alternating, after ``warmup`` steps each) and the M3G / InfoNCE-pwe ratio."""
    steps = quickstart_steps(benchmark=benchmark)
    for _ in range(warmup):
        for f in steps.values():
            f()
    times: dict[str, list[float]] = {name: [] for name in steps}
    for r in range(rounds):
        names = list(steps) if r % 2 == 0 else list(reversed(steps))
        for name in names:
            t0 = time.perf_counter()
            steps[name]()
            times[name].append(time.perf_counter() - t0)
    med = {name: statistics.median(t) for name, t in times.items()}
    per_round = [a / b for a, b in zip(times["m3g"], times["infonce_pwe"])]
    return {"median": med, "ratio": med["m3g"] / med["infonce_pwe"], "ratio_p10": _pct(per_round, 0.1),
            "ratio_p90": _pct(per_round, 0.9), "rounds": rounds}


def profile_step(objective: str = "m3g", steps: int = 50, rows: int = 15, benchmark: str = "quickstart") -> str:
    """torch.profiler table (self CPU time) of ``steps`` quickstart pretraining steps of ``objective``."""
    from torch.profiler import ProfilerActivity, profile

    step = quickstart_steps((objective,), benchmark=benchmark)[objective]
    for _ in range(5):
        step()
    with _quiet_stderr(), profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            step()
    return prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows)


def _run_step_time(ns: argparse.Namespace) -> int:
    rounds = 30 if ns.quick else ns.rounds
    print("# fusebench bench objectives --step-time")
    print()
    print(machine_description())
    print()
    print(f"Quickstart pretraining step (benchmarks/quickstart.yaml: 3 modalities, MLP encoders, projection 32, "
          f"batch 64; M3G eps=0.2, InfoNCE-pwe tau=0.2): forward (encoders, heads, loss), backward, AdamW step, "
          f"same first batch; the two alternate, {rounds} rounds after 10 warm-up steps each; medians.")
    print()
    r = bench_step_time(rounds=rounds)
    med = r["median"]
    print("| objective | step (median) |")
    print("|---|---|")
    for name, t in med.items():
        print(f"| {name} | {_fmt_ms(t)} |")
    print()
    met = r["ratio"] <= STEP_TARGET
    print(f"M3G / InfoNCE-pwe step time: **{r['ratio']:.2f}x** (per-round ratios p10-p90 {r['ratio_p10']:.2f}-"
          f"{r['ratio_p90']:.2f}); target <= {STEP_TARGET}x: {'met' if met else 'NOT MET'}")
    if ns.profile:
        print()
        print("torch.profiler, 50 M3G steps, top operators by self CPU time:")
        print()
        print(profile_step())
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="fusebench bench objectives",
        description="Forward+backward time and peak memory of every registered objective, and M3G solver checks.",
        epilog="Examples: fusebench bench objectives --repeats 5 --threads 2; fusebench bench objectives --vs ott "
               "--quick; fusebench bench objectives --step-time",
    )
    parser.add_argument("--repeats", type=int, default=5, help="timed calls per cell (median reported; default 5)")
    parser.add_argument("--quick", action="store_true", help="1 timed call per cell, 1 for the reference solver")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch intra-op threads (default 2; 1 with --vs and --step-time)")
    parser.add_argument("--only", default=None, help="glob over objective ids for the first table (e.g. 'm3g*')")
    parser.add_argument("--skip-m3g", action="store_true", help="only the per-objective table")
    peer = parser.add_argument_group("--vs ott: our M3G against ott-jax's MMSinkhorn (needs the peers extra)")
    peer.add_argument("--vs", choices=["ott"], default=None, help="run only the side-by-side table against a peer")
    peer.add_argument("--k", type=int, nargs="+", default=None, help="views (default 3 4 5 6; --quick: a subset)")
    peer.add_argument("--n", type=int, nargs="+", default=None, help="batch sizes (default 16 32 64 128)")
    peer.add_argument("--eps", type=float, nargs="+", default=None, help="entropic regularisations (default 0.2 0.05)")
    peer.add_argument("--dtype", choices=["float32", "float64"], default="float32", help="(default float32)")
    peer.add_argument("--dim", type=int, default=32, help="embedding dimension d (default 32, the quickstart's)")
    peer.add_argument("--cell-seconds", type=float, default=20.0,
                      help="time budget of the timed rounds per configuration (default 20; at least 1 round)")
    peer.add_argument("--no-pin", action="store_true", help="do not pin the process to one CPU (with --threads 1)")
    peer.add_argument("--mem-cap-mib", type=float, default=256.0,
                      help="skip configurations whose n^k tensor (ott) exceeds this (default 256 MiB)")
    peer.add_argument("--backend", choices=("auto", "eager", "compiled"), default="auto",
                      help="our M3G's backend (default auto: the compiled call for small CPU problems when numba is "
                           "installed, see docs/objectives-ot.md)")
    parser.add_argument("--crossover", action="store_true",
                        help="run only the per-sweep timing of the M3G solver's strategies (the crossover rule)")
    step = parser.add_argument_group("--step-time: quickstart training step, M3G / InfoNCE-pwe")
    step.add_argument("--step-time", action="store_true", help="run only the step-time comparison")
    step.add_argument("--rounds", type=int, default=100, help="alternating rounds (default 100; --quick: 30)")
    step.add_argument("--profile", action="store_true", help="also print a torch.profiler table of M3G steps")
    ns = parser.parse_args(argv)
    special = [name for name, on in (("--vs", ns.vs), ("--step-time", ns.step_time), ("--crossover", ns.crossover)) if on]
    if ns.threads is None:
        ns.threads = 1 if special else 2
    if ns.repeats < 1 or ns.threads < 1 or ns.rounds < 1:
        parser.error("--repeats, --threads and --rounds must be >= 1")
    if len(special) > 1:
        parser.error(f"{' and '.join(special)} are separate runs; pick one")
    if special:
        previous_threads = torch.get_num_threads()
        torch.set_num_threads(ns.threads)
        try:
            if ns.vs:
                return _run_vs_ott(ns)
            return _run_step_time(ns) if ns.step_time else _run_crossover(ns)
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
