"""How many intra-op threads (``torch.set_num_threads``) a cell computes with (issue #32: no thread trap).

PyTorch's default is one thread per core of the machine. For the small models of most boards (MLPs on
vectors, a 4-d bottleneck per modality) more threads do not pay, and on a machine where any other
process is busy they are a trap: the threads of one operation wait for each other and for the busy
cores (a quickstart cell took 130.6 s at PyTorch's default of 2 threads with one other busy process,
17.2 s with one thread, the same metrics). Measured for this rule on a 2-core machine loaded by other
processes (step time of forward + backward + AdamW, best of two, 1 thread vs 2; docs/cluster.md, "Threads
of a cell"): quickstart MLPs 6.0 ms vs 111 ms, mv-handwritten MLPs 11.9 ms vs 209 ms, a 2-layer
convolution on 8 images of 64 x 64 247 ms vs 500 ms; with one more busy process the quickstart MLPs
took 18 ms vs 455 ms. Hence the rule of :func:`threads_for`:

* ``--threads N`` (``fusebench run``), else ``OMP_NUM_THREADS``, is used as given;
* else a cell of a *small* model computes with **one** thread;
* a cell of a *large* model (an encoder that declares ``large_model = True``: the convolutions of ESANet,
  PointNet++ and VoteNet) or a cell on a GPU (its CPU work: batches, metrics) gets its share of the CPUs
  the process may use: ``cpus // cells run at once`` (``--workers``, the processes of a ``torchrun`` on
  the node), at least 1.

The CPUs a process may use (:func:`allowed_cpus`) are the fewest of its affinity mask
(``os.sched_getaffinity``: ``taskset``, a SLURM allocation with task affinity), its cgroup's CPU quota
(v2 ``cpu.max``, v1 ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``: a container) and
``SLURM_CPUS_PER_TASK``. The choice never changes a result (the probes run single-threaded, the
pretraining reductions do not depend on the thread count; ``tests/test_threads.py`` checks a cell at 1
and 2 threads), so it is not part of the config hash; the start line of every cell says it
(``threads=N``), and the sweep says it once with the reason.
"""

from __future__ import annotations

import math
import os
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator, Mapping

from fusebench.typed import ConfigError

SMALL, LARGE = "small", "large"
MODEL_KINDS = (SMALL, LARGE)
CGROUP_ROOT = "/sys/fs/cgroup"


@dataclass(frozen=True)
class CpuAllowance:
    """What the operating system lets a process use: ``affinity`` (the CPU ids of
    ``os.sched_getaffinity(0)``, or their count; None: unknown, ``cpu_count`` then) and ``cgroup_quota``
    (the text of cgroup v2's ``cpu.max``, ``"<quota> <period>"`` or ``"max <period>"``, or v1's
    ``"<cfs_quota_us> <cfs_period_us>"``; None: no cgroup file)."""

    affinity: frozenset[int] | int | None = None
    cgroup_quota: str | None = None
    cpu_count: int = 1


def quota_cpus(text: str | None) -> float | None:
    """The CPUs a cgroup quota allows (``"250000 100000"``: 2.5), None for no quota (``max``, ``-1``, no
    text) or a text that is not a quota."""
    parts = (text or "").split()
    if not parts or parts[0] in ("max", "-1"):
        return None
    try:
        quota, period = float(parts[0]), float(parts[1]) if len(parts) > 1 else 100000.0
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 and math.isfinite(quota / period) else None


def _positive_int(env: Mapping[str, str], name: str) -> int | None:
    """``env[name]`` as a positive integer (``OMP_NUM_THREADS=4,2``, OpenMP's nested form: its first level);
    None when unset or empty; a ValueError naming the variable otherwise."""
    raw = (env.get(name) or "").strip()
    if not raw:
        return None
    first = raw.split(",")[0].strip()
    if not first.isdigit() or int(first) < 1:
        raise ValueError(f"{name}={raw!r}: expected a positive integer (a number of threads / CPUs)")
    return int(first)


def allowed_cpus(cpus: CpuAllowance | int, env: Mapping[str, str]) -> int:
    """The CPUs a process may compute on: the fewest of its affinity mask, its cgroup quota (rounded down,
    at least 1) and ``SLURM_CPUS_PER_TASK``; ``cpus`` as an int is that count already."""
    if isinstance(cpus, int) and not isinstance(cpus, bool):
        n = cpus
    else:
        aff = cpus.affinity
        n = (len(aff) if not isinstance(aff, int) else aff) if aff is not None else cpus.cpu_count
        quota = quota_cpus(cpus.cgroup_quota)
        if quota is not None:
            n = min(n, max(1, int(quota)))
    slurm = _positive_int(env, "SLURM_CPUS_PER_TASK")
    if slurm is not None:
        n = min(n, slurm)
    return max(1, int(n))


def thread_plan(cpus_allowed: CpuAllowance | int, workers: int, model_kind: str, env: Mapping[str, str],
                requested: int | None = None, bounded: bool = True) -> tuple[int, str]:
    """:func:`threads_for` with the reason, as the sweep's start line says it. ``requested`` (``--threads``) above
    the CPUs allowed is a ConfigError when ``bounded`` (more threads than CPUs never pays, and thousands crash
    OpenMP); not bounded where the cells run on other machines (a scheduler's nodes: each job checks its own)."""
    if model_kind not in MODEL_KINDS:
        raise ValueError(f"model kind {model_kind!r}: expected one of {', '.join(MODEL_KINDS)}")
    if requested is not None:
        if isinstance(requested, bool) or not isinstance(requested, int) or requested < 1:
            raise ValueError(f"--threads: expected a positive integer, got {requested!r}")
        cpus = allowed_cpus(cpus_allowed, env) if bounded else requested
        if requested > cpus:
            raise ConfigError(f"--threads: {requested} torch threads per cell, but this process may use {cpus} "
                              f"CPU(s) (affinity, cgroup quota, SLURM_CPUS_PER_TASK); give at most {cpus}")
        return requested, "--threads"
    omp = _positive_int(env, "OMP_NUM_THREADS")
    if omp is not None:
        return omp, "OMP_NUM_THREADS"
    if model_kind == SMALL:
        return 1, "a small model: more threads do not pay, docs/cluster.md"
    cpus = allowed_cpus(cpus_allowed, env)
    local = _positive_int(env, "LOCAL_WORLD_SIZE") or 1  # the processes of a torchrun on this node
    share = max(1, int(workers)) * local
    n = max(1, cpus // share)
    return n, f"a large model: {cpus} CPU(s) allowed / {share} cell process(es) at once"


def threads_for(cpus_allowed: CpuAllowance | int, workers: int, model_kind: str, env: Mapping[str, str],
                requested: int | None = None) -> int:
    """The intra-op threads of a cell (the rule in the module docstring): ``requested`` (``--threads``), else
    ``OMP_NUM_THREADS`` from ``env``, else 1 for a ``small`` model, else ``allowed_cpus(cpus_allowed, env)
    // (workers x LOCAL_WORLD_SIZE)``, at least 1. Pure: every input is an argument."""
    return thread_plan(cpus_allowed, workers, model_kind, env, requested)[0]


def read_allowance(root: str | None = None) -> CpuAllowance:
    """The live :class:`CpuAllowance` of this process (affinity mask, cgroup v2 or v1 quota under ``root``,
    :data:`CGROUP_ROOT` when None)."""
    root = CGROUP_ROOT if root is None else root
    try:
        affinity: frozenset[int] | None = frozenset(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        affinity = None
    quota = None
    for quota_file, period_file in (("cpu.max", None), ("cpu/cpu.cfs_quota_us", "cpu/cpu.cfs_period_us"),
                                    ("cpu,cpuacct/cpu.cfs_quota_us", "cpu,cpuacct/cpu.cfs_period_us")):
        try:
            with open(os.path.join(root, quota_file)) as fh:
                quota = fh.read().strip()
            if period_file is not None:
                with open(os.path.join(root, period_file)) as fh:
                    quota = f"{quota} {fh.read().strip()}"
            break
        except OSError:
            quota = None
    return CpuAllowance(affinity=affinity, cgroup_quota=quota, cpu_count=os.cpu_count() or 1)


def model_kind(encoder_id: str, device: Any = "cpu") -> str:
    """``large`` for a cell on a GPU or with an encoder that declares ``large_model = True``
    (:class:`fusebench.encoders.base.Backbone`), else ``small`` (a plugin encoder that says nothing is small:
    ``--threads`` gives it more)."""
    import torch

    if torch.device(device).type != "cpu":
        return LARGE
    if not encoder_id:
        return SMALL
    from fusebench import encoders

    return LARGE if getattr(encoders.ENCODERS.get(encoder_id), "large_model", False) else SMALL


def cell_threads(encoder_id: str, device: Any, requested: int | None = None, cells_at_once: int = 1,
                 env: Mapping[str, str] | None = None, bounded: bool = True) -> tuple[int, str]:
    """The threads of a cell of ``encoder_id`` on ``device`` here (:func:`thread_plan` on this process's
    :func:`read_allowance` and ``os.environ``; ``bounded``: ``requested`` checked against its CPUs), with the
    reason. An unknown encoder or device counts as small (the pipeline says what is wrong with it)."""
    from fusebench.runtime.utils import resolve_device

    try:
        kind = model_kind(encoder_id, resolve_device(device))
    except (ValueError, RuntimeError, TypeError):
        kind = SMALL
    return thread_plan(read_allowance(), cells_at_once, kind, os.environ if env is None else env, requested, bounded)


@contextmanager
def using_threads(n: int) -> Iterator[None]:
    """``torch.set_num_threads(n)`` inside the block, and the BLAS pools of numpy / scipy (OpenBLAS, MKL:
    through threadpoolctl where it is installed) at ``n`` too; the previous counts restored after."""
    from contextlib import nullcontext

    import torch

    try:
        from threadpoolctl import threadpool_limits

        blas: Any = threadpool_limits(limits=int(n), user_api="blas")
    except ImportError:  # optional: torch's own pool is the one the cells compute in
        blas = nullcontext()
    before = torch.get_num_threads()
    torch.set_num_threads(int(n))
    try:
        with blas:
            yield
    finally:
        torch.set_num_threads(before)


__all__ = ["CpuAllowance", "LARGE", "MODEL_KINDS", "SMALL", "allowed_cpus", "cell_threads", "model_kind", "quota_cpus",
           "read_allowance", "thread_plan", "threads_for", "using_threads"]
