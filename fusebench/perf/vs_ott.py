"""``fusebench bench objectives --vs ott``: our M3G against ott-jax's multi-marginal Sinkhorn, side by side.

One row per configuration (k views, batch n, eps): identical inputs, our M3G forward + backward and
ott's jitted ``value_and_grad`` of the same gap (:func:`ott_m3g`), alternating, with the values, the
gradients and the sweep counts compared (:func:`compare_with_ott`); then the eager-PyTorch floor of a
loss of M3G's shape (:func:`eager_floor`). Both peers run on one pinned CPU with one thread by default.
Needs the ``peers`` extra (ott-jax, CPU jax); numba (extra ``fast``) enables our compiled backend.
Results: docs/benchmarks-objectives.md.

Shape:
    views: ``[k, n, d]``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import importlib.util
import os
import statistics
import sys
import time
import warnings
from typing import Callable

import numpy as np
import torch

from fusebench.perf.timing import fmt_ms, machine_description, make_views

VS_KS, VS_NS, VS_EPSS = (3, 4, 5, 6), (16, 32, 64, 128), (0.2, 0.05)
VS_QUICK = [(3, 16), (3, 32), (3, 64), (4, 16)]
PEERS_HINT = ("ott-jax is not installed: `pip install -e .[peers]` (the `peers` extra: ott-jax>=0.4 and CPU jax) "
              "or `pip install \"ott-jax>=0.4\" \"jax[cpu]>=0.4\"`")
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
             f"| {r['value_rel_diff']:.1e} | {r['grad_rel_diff']:.1e} | {fmt_ms(r['t_ours'])} | {fmt_ms(r['t_ott'])} "
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


def run(ns: argparse.Namespace) -> int:
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
