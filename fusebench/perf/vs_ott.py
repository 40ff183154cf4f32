"""``fusebench bench objectives --vs ott``: our M3G against ott-jax's multi-marginal Sinkhorn, side by side.

One row per configuration (k views, batch n, eps): identical inputs, our M3G forward + backward and
ott's jitted ``value_and_grad`` of the same gap (:func:`ott_m3g`), alternating, with the values, the
gradients and the sweep counts compared (:func:`compare_with_ott`); then the same measurements as one
table with a row per (k, n) and a column per eps (:func:`summary_table`, "ours / ott ms (ratio)", sweep
counts checked equal) and the eager-PyTorch floor of a loss of M3G's shape (:func:`eager_floor`).
``--device cpu`` (default): both peers on one pinned CPU with one thread. ``--device cuda``: our M3G on the
GPU (the blocked solver, CUDA graphs; ``--block-sweeps``, ``--no-graphs``) and ott on jax's GPU backend
when it has one. Without ott-jax (or without a jax backend for the device) the command says so, prints our
side alone (:func:`measure_ours`) and exits 1. Needs the ``peers`` extra (ott-jax, CPU jax; a CUDA jax
for ``--device cuda``); numba (extra ``fast``) enables our compiled CPU backend.
Results: docs/benchmarks-objectives.md (CPU), docs/gpu.md (GPU).

It is longer than ~450 lines because it is one bench: the two sides' measurements, the three tables and the
command that prints them (each part short, all sharing the row format).

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
#: the batch sizes of ``--device cuda`` (the GPU issue's grid: n in 8..256)
VS_GPU_NS = (8, 16, 32, 64, 128, 256)
VS_QUICK = [(3, 16), (3, 32), (3, 64), (4, 16)]
#: ``--mem-cap-mib`` defaults: ott materialises the n^k cost tensor (and a few temporaries of its size)
MEM_CAP_MIB = {"cpu": 256.0, "cuda": 1024.0}
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


def _device_sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _ours(k: int, n: int, eps: float, dtype: torch.dtype, d: int, tol: float, max_iter: int, seed: int,
          backend: str, device: torch.device):
    """``(views [k, n, d] on the CPU, x on the device, module, call)``: ``call()`` is one forward + backward of our
    M3G, finished on the device, returning the value."""
    from fusebench.objectives import build

    views = make_views(k, n, d, dtype, seed=seed)
    x = views.to(device, copy=True).requires_grad_()
    m3g = build("m3g", eps=eps, tol=tol, max_iter=max_iter, backend=backend)

    def call() -> float:
        x.grad = None
        v = m3g(x)
        v.backward()
        _device_sync(device)
        return float(v.detach())

    return views, x, m3g, call


def _stats_fields(m3g) -> dict:
    st = m3g.stats
    return {"sweeps_ours": int(st["iterations"]), "converged_ours": bool(st["converged"]),
            "scaling_domain": bool(st.get("scaling_domain", 0.0)), "compiled": bool(st.get("compiled", 0.0)),
            "block_sweeps": int(st.get("block_sweeps", 0.0)), "cuda_graphs": bool(st.get("cuda_graphs", 0.0))}


def _ran(r: dict) -> str:
    """Which path of ours ran: compiled (CPU), eager (CPU, per-sweep loop) or blocked (B sweeps, graphs or not)."""
    if r["compiled"]:
        return "compiled"
    if not r["scaling_domain"]:
        return "log domain"
    if r["block_sweeps"]:
        return f"blocked {r['block_sweeps']}" + (", graphs" if r["cuda_graphs"] else "")
    return "eager"


def measure_ours(k: int, n: int, eps: float, dtype: torch.dtype, d: int = 32, tol: float = 1e-3,
                 max_iter: int = 1000, repeats: int = 7, cell_seconds: float = 20.0, seed: int = 0,
                 backend: str = "auto", device: str | torch.device = "cpu") -> dict:
    """Our side alone (no ott): forward + backward of our M3G after two untimed calls (the second one captures
    the CUDA graphs), median over the rounds."""
    device = torch.device(device)
    _, _, m3g, ours = _ours(k, n, eps, dtype, d, tol, max_iter, seed, backend, device)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours()
        ours()
        t0 = time.perf_counter()
        value = ours()
        first = time.perf_counter() - t0
        rounds = max(1, min(repeats, int(cell_seconds / max(first, 1e-9))))
        times = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            value = ours()
            times.append(time.perf_counter() - t0)
    return {"k": k, "n": n, "eps": eps, "dtype": str(dtype).replace("torch.", ""), "d": d, "device": str(device),
            "value_ours": value, **_stats_fields(m3g), "rounds": rounds, "t_ours": statistics.median(times)}


def compare_with_ott(k: int, n: int, eps: float, dtype: torch.dtype, d: int = 32, tol: float = 1e-3,
                     max_iter: int = 1000, repeats: int = 7, cell_seconds: float = 20.0, seed: int = 0,
                     backend: str = "auto", device: str | torch.device = "cpu", ott_device=None) -> dict:
    """One configuration: identical inputs, our M3G forward+backward (on ``device``) and ott's jitted
    value_and_grad (on the jax device ``ott_device``, default jax's CPU) alternating, after jit compilation and
    two untimed calls each. Returns a dict of the measurements."""
    jax, jnp, _ = import_ott()
    device = torch.device(device)
    jax.config.update("jax_enable_x64", dtype == torch.float64)
    views, x_ours, m3g, ours = _ours(k, n, eps, dtype, d, tol, max_iter, seed, backend, device)
    x_ott = jax.device_put(jnp.asarray(views.numpy()), ott_device or jax.devices("cpu")[0])
    f_ott = ott_m3g(k, n, eps, tol, max_iter).lower(x_ott).compile()

    def ott():
        (v, aux), g = f_ott(x_ott)
        g.block_until_ready()
        return v, aux, g

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(2):  # first calls: jit / load of compiled code, caches, our CUDA graphs
            ours()
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
    g_ours = x_ours.grad.detach().double().cpu().numpy()
    g_ott = np.asarray(g_ott, dtype=np.float64)
    v_ott = float(v_ott)
    per_round = [a / b for a, b in zip(t_ours, t_ott)]
    return {
        "k": k, "n": n, "eps": eps, "dtype": str(dtype).replace("torch.", ""), "d": d, "device": str(device),
        "value_ours": v_ours, "value_ott": v_ott,
        "value_rel_diff": abs(v_ours - v_ott) / max(abs(v_ott), 1e-300),
        "grad_rel_diff": float(np.abs(g_ours - g_ott).max() / max(np.abs(g_ott).max(), 1e-300)),
        **_stats_fields(m3g), "sweeps_ott": int(sweeps_ott), "converged_ott": bool(conv_ott),
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


def eager_floor(k: int, n: int, d: int, dtype: torch.dtype, rounds: int = 400,
                device: str | torch.device = "cpu") -> dict[str, float]:
    """Seconds (medians, alternating) of what a PyTorch loss of M3G's shape costs before any solving:
    an autograd node that does nothing, forward + backward (``empty``), and the fast path's shell, i.e.
    normalisation, Gram matrix and the Danskin backward of :class:`_CvGap` with no Sinkhorn solve and no
    dual value (``shell``). A whole call of ours can be no faster than ``shell``. On CUDA each call ends with
    a device synchronisation."""
    from fusebench.objectives.m3g import _CvGap

    device = torch.device(device)
    x = make_views(k, n, d, dtype).to(device).requires_grad_()
    shell = _ShellOnly(k, n, dtype)
    shell.w = shell.w.to(device)

    def run_empty() -> None:
        x.grad = None
        _Empty.apply(x).backward()
        _device_sync(device)

    def run_shell() -> None:
        x.grad = None
        v = _CvGap.apply(x, shell, True)
        v.backward()
        float(v.detach())
        _device_sync(device)

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


def _mib(k: int, n: int, dtype: torch.dtype) -> float:
    return n**k * (torch.finfo(dtype).bits // 8) / 2**20


def bench_vs_ott(configs: list[tuple[int, int, float]], dtype: torch.dtype, repeats: int, cell_seconds: float,
                 mem_cap_mib: float, d: int = 32, emit: Callable[[str], None] = print,
                 backend: str = "auto", device: str | torch.device = "cpu", ott_device=None) -> list[dict]:
    """The side-by-side table, one markdown row per configuration as it is measured."""
    emit("| k | n | eps | ours ran | sweeps ours / ott | value (ours) | rel. value diff | rel. grad diff "
         "| ours fwd+bwd | ott fwd+grad | ratio ours/ott (min-max) | rounds | CPU use ours / ott |")
    emit("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    rows = []
    for k, n, eps in configs:
        mib = _mib(k, n, dtype)
        if mib > mem_cap_mib:
            emit(f"| {k} | {n} | {eps} | - | - | - | - | - | - | - | skipped: ott's n^k tensor is {mib:,.0f} MiB "
                 f"(> {mem_cap_mib:,.0f} MiB cap) | - | - |")
            continue
        r = compare_with_ott(k, n, eps, dtype, d=d, repeats=repeats, cell_seconds=cell_seconds, backend=backend,
                             device=device, ott_device=ott_device)
        rows.append(r)
        emit(f"| {k} | {n} | {eps} | {_ran(r)} | {r['sweeps_ours']} / {r['sweeps_ott']} | {r['value_ours']:.7f} "
             f"| {r['value_rel_diff']:.1e} | {r['grad_rel_diff']:.1e} | {fmt_ms(r['t_ours'])} | {fmt_ms(r['t_ott'])} "
             f"| **{r['ratio']:.2f}x** ({r['ratio_min']:.2f}-{r['ratio_max']:.2f}) | {r['rounds']} "
             f"| {r['cpu_ours']:.2f} / {r['cpu_ott']:.2f} |")
    return rows


def bench_ours(configs: list[tuple[int, int, float]], dtype: torch.dtype, repeats: int, cell_seconds: float,
               d: int = 32, emit: Callable[[str], None] = print, backend: str = "auto",
               device: str | torch.device = "cpu") -> list[dict]:
    """Our side alone (ott-jax missing), one markdown row per configuration as it is measured."""
    emit("| k | n | eps | ours ran | sweeps | converged | value (ours) | ours fwd+bwd | rounds |")
    emit("|---|---|---|---|---|---|---|---|---|")
    rows = []
    for k, n, eps in configs:
        r = measure_ours(k, n, eps, dtype, d=d, repeats=repeats, cell_seconds=cell_seconds, backend=backend,
                         device=device)
        rows.append(r)
        emit(f"| {k} | {n} | {eps} | {_ran(r)} | {r['sweeps_ours']} | {'yes' if r['converged_ours'] else 'NO'} "
             f"| {r['value_ours']:.7f} | {fmt_ms(r['t_ours'])} | {r['rounds']} |")
    return rows


def summary_table(rows: list[dict], epss: list[float]) -> list[str]:
    """The measured rows as one table: a row per (k, n), a column per eps, cells "ours / ott ms (ratio)" (or
    "ours ms" without ott), and whether the sweep counts agree in every cell of the row."""
    with_ott = any("t_ott" in r for r in rows)
    cells: dict[tuple[int, int], dict[float, dict]] = {}
    for r in rows:
        cells.setdefault((r["k"], r["n"]), {})[r["eps"]] = r
    what = "ours / ott ms (ratio)" if with_ott else "ours ms (sweeps)"
    out = ["| k | n | " + " | ".join(f"eps {e:g}: {what}" for e in epss)
           + (" | same sweep counts |" if with_ott else " |"),
           "|---|---|" + "---|" * (len(epss) + (1 if with_ott else 0))]
    for (k, n), by_eps in cells.items():
        line, same = [], []
        for e in epss:
            r = by_eps.get(e)
            if r is None:
                line.append("-")
            elif "t_ott" in r:
                line.append(f"{r['t_ours'] * 1e3:.2f} / {r['t_ott'] * 1e3:.2f} ({r['ratio']:.2f}x)")
                if r["sweeps_ours"] != r["sweeps_ott"]:
                    same.append(f"eps {e:g}: {r['sweeps_ours']} vs {r['sweeps_ott']}")
            else:
                line.append(f"{r['t_ours'] * 1e3:.2f} ({r['sweeps_ours']})")
        tail = (" | " + ("yes" if not same else "NO (" + "; ".join(same) + ")") + " |") if with_ott else " |"
        out.append(f"| {k} | {n} | " + " | ".join(line) + tail)
    return out


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


def _ott_device(jax, device: torch.device):
    """The jax device ott runs on for our ``device`` (jax's CPU, or its first GPU), or None when jax has none."""
    for platform in (("gpu", "cuda") if device.type == "cuda" else ("cpu",)):
        try:
            return jax.devices(platform)[0]
        except RuntimeError:
            continue
    return None


@contextlib.contextmanager
def _solver_settings(block_sweeps: int | None, graphs: bool):
    """``sinkhorn_blocked.BLOCK_SWEEPS`` / ``CUDA_GRAPHS`` for the run, restored after it."""
    from fusebench.objectives import sinkhorn_blocked as sb

    before = sb.BLOCK_SWEEPS, sb.CUDA_GRAPHS
    sb.BLOCK_SWEEPS = block_sweeps or before[0]
    sb.CUDA_GRAPHS = graphs
    try:
        yield sb.BLOCK_SWEEPS
    finally:
        sb.BLOCK_SWEEPS, sb.CUDA_GRAPHS = before


def run(ns: argparse.Namespace) -> int:
    """The ``--vs ott`` run: 0 when both sides were measured, 1 when only ours could be (the reason is printed)."""
    device = torch.device(getattr(ns, "device", None) or "cpu")
    if device.type == "cuda" and "jax" not in sys.modules:  # jax must not take most of the GPU's memory up front
        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    peers = import_ott(ns.threads)
    ott_device, missing = None, None
    if peers is None:
        missing = PEERS_HINT
    else:
        ott_device = _ott_device(peers[0], device)
        if ott_device is None:
            missing = ("jax has no GPU backend here, so ott-jax cannot run on the GPU: `pip install \"jax[cuda12]\"` "
                       "(or the CUDA build matching the driver)")
    if missing is not None:
        print(f"fusebench bench objectives --vs ott: {missing}; printing our side alone")
    pin = ns.threads == 1 and not ns.no_pin and device.type == "cpu"
    with pinned_to_one_cpu(pin) as cpu, _solver_settings(getattr(ns, "block_sweeps", None),
                                                         not getattr(ns, "no_graphs", False)) as block:
        _vs_ott_tables(ns, cpu, device, ott_device, block)
    return 0 if missing is None else 1


def _vs_ott_tables(ns: argparse.Namespace, cpu: int | None, device: torch.device, ott_device, block: int) -> int:
    dtype = {"float32": torch.float32, "float64": torch.float64}[ns.dtype]
    gpu = device.type == "cuda"
    if ns.quick:
        configs = [(k, n, eps) for k, n in VS_QUICK for eps in VS_EPSS]
    else:
        ns_default = VS_GPU_NS if gpu else VS_NS
        configs = [(k, n, eps) for k in (ns.k or VS_KS) for n in (ns.n or ns_default) for eps in (ns.eps or VS_EPSS)]
    mem_cap = ns.mem_cap_mib if ns.mem_cap_mib is not None else MEM_CAP_MIB[device.type]
    epss = list(dict.fromkeys(eps for _, _, eps in configs))
    print("# fusebench bench objectives --vs ott")
    print()
    print(machine_description())
    fast = importlib.util.find_spec("numba") is not None
    numba_version = importlib.metadata.version("numba") if fast else "not installed (no compiled backend)"
    if gpu:
        print(f"GPU: {torch.cuda.get_device_name(device)}; CUDA {torch.version.cuda}; our solver on the GPU: blocked, "
              f"{block} sweeps per read of the stopping errors, CUDA graphs {'on' if not ns.no_graphs else 'off'}")
    if ott_device is not None:
        import jax

        import ott as ott_pkg

        print(f"jax {jax.__version__} ({ott_device.platform}: {ott_device.device_kind}), "
              f"ott-jax {ott_pkg.__version__}, numba {numba_version}, our backend {ns.backend}, "
              f"XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}; "
              + (f"process pinned to CPU {cpu} (both peers on one core)" if cpu is not None else "process not pinned"))
    else:
        print(f"ott-jax not measured; numba {numba_version}, our backend {ns.backend}; "
              + (f"process pinned to CPU {cpu}" if cpu is not None else "process not pinned"))
    print()
    where = f"on {'the GPU' if gpu else 'the CPU'} ({device})"
    sync = "; each call ends with torch.cuda.synchronize()" if gpu else ""
    inputs = (f"views [k, n, d={ns.dim}] ({ns.dtype}), L2-normalised, eps as in the rows, tol = 1e-3 on the sum over "
              "views of the L1 marginal errors checked after every sweep, max 1000 sweeps")
    if ott_device is None:
        print(f"Our M3G (`m3g`, cost cv, solver auto) {where} alone: {inputs}. Timed: forward + backward of the M3G "
              f"loss (Danskin gradient w.r.t. the views{sync}), after two untimed calls; medians over the rounds (at "
              f"most {ns.repeats}, fewer when a round exceeds {ns.cell_seconds:g} s / rounds).")
    else:
        print(f"Our M3G (`m3g`, cost cv, solver auto) {where} against ott-jax's `MMSinkhorn` "
              f"(ott.experimental.mmsinkhorn) on {ott_device.platform} on identical inputs: {inputs} (ott: views "
              "divided by k, its summed squared Euclidean cost is then our c_cv; threshold=1e-3, norm_error=1, "
              "inner_iterations=1). Timed: ours = forward + backward of the M3G loss (Danskin gradient w.r.t. the "
              f"views{sync}); ott = one call of jax.jit(jax.value_and_grad(gap)) with use_danskin=True (value and "
              "gradient w.r.t. the views), compiled ahead of time, until block_until_ready. After two untimed calls "
              "each, the two alternate (order swapped every round); medians over the rounds (at most "
              f"{ns.repeats}, fewer when a round exceeds {ns.cell_seconds:g} s / rounds); ratio = median ours / median "
              "ott, min-max over the per-round ratios. CPU use = process CPU time / wall time during the calls (1.0 = "
              f"one busy core). ott materialises the n^k cost tensor: configurations where it exceeds {mem_cap:g} "
              "MiB are skipped.")
    print()
    emit = lambda line: print(line, flush=True)  # noqa: E731
    if ott_device is not None:
        rows = bench_vs_ott(configs, dtype, ns.repeats, ns.cell_seconds, mem_cap, d=ns.dim, emit=emit,
                            backend=ns.backend, device=device, ott_device=ott_device)
    else:
        rows = bench_ours(configs, dtype, ns.repeats, ns.cell_seconds, d=ns.dim, emit=emit, backend=ns.backend,
                          device=device)
    if not rows:
        return 0
    print()
    print("\n".join(summary_table(rows, epss)))
    print()
    if ott_device is not None:
        worst = max(rows, key=lambda r: r["ratio"])
        agree = max(r["value_rel_diff"] for r in rows)
        same = all(r["sweeps_ours"] == r["sweeps_ott"] for r in rows)
        faster = sum(r["ratio"] <= 1.0 for r in rows)
        print(f"target ours <= 1.0x ott at every configuration: {'met' if worst['ratio'] <= 1.0 else 'NOT MET'} "
              f"({faster} of {len(rows)} at or below 1.0x; largest ratio {worst['ratio']:.2f}x at k={worst['k']}, "
              f"n={worst['n']}, eps={worst['eps']}); largest relative value difference {agree:.1e}; same sweep "
              f"counts: {'yes' if same else 'NO'}")
    small = min(rows, key=lambda r: r.get("t_ott", r["t_ours"]))
    floor = eager_floor(small["k"], small["n"], ns.dim, dtype, device=device)
    msg = (f"eager-PyTorch floor at k={small['k']}, n={small['n']} on {device} (no solve): an autograd node that does "
           f"nothing {floor['empty'] * 1e3:.2f} ms, the fast path's shell (normalisation, Gram matrix, Danskin "
           f"backward) {floor['shell'] * 1e3:.2f} ms; ")
    if "t_ott" in small:
        msg += f"there ott's whole call takes {small['t_ott'] * 1e3:.2f} ms, "
    print(msg + f"ours ({_ran(small)}) {small['t_ours'] * 1e3:.2f} ms")
    return 0
