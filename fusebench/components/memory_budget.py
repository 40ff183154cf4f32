"""Nothing starts that cannot finish (spec layer): an objective's declared memory cost against a budget.

An objective whose cost grows steeply with the batch (M3G: n^k for k views) declares what one loss call
allocates, ``memory_bytes(n, k, dtype, d)`` (:meth:`fusebench.objectives.m3g.M3G.memory_bytes`).
:func:`check_memory_budget` evaluates it for every objective of a sweep at the size its loss is called on
(``pretrain.per_objective.<id>.batch_size`` / ``pretrain.batch_size``, times the ranks of a distributed run,
or the largest chunk of ``pretrain.per_objective.<id>.micro_batch``), for every hyper-parameter combination of
its grid, once the view count k is known (the spec's modalities, or the data file's views) and before any cell
starts. Over budget, the whole sweep is refused with one :class:`~fusebench.spec.config.ConfigError` per sweep
naming, for each such objective, the estimate, the budget and the largest micro-batch that fits (the
``--set pretrain.per_objective.<id>.micro_batch=M`` that makes it run, recorded and shown on the board like
any micro-batch; for an objective that declares the work of a call, ``joint_entries(n, k)``, also the work per
step there and at a micro-batch of 2, since the largest that fits is the slowest), or that no micro-batch fits;
leaving the objective out (``--objective ...``) is the other way on.

The budget (:func:`fusebench.machine.memory_budget`, re-exported here): ``$FUSEBENCH_MEMORY_BUDGET_GB`` (GiB;
``inf`` turns the check off), else :data:`DEFAULT_FRACTION` of the memory this process can still get -- on a CUDA
device its free memory,
elsewhere the smaller of ``MemAvailable`` (``/proc/meminfo``) and what the process's cgroup limit leaves
(``memory.max`` - ``memory.current``, or cgroup v1's ``memory.limit_in_bytes`` - ``memory.usage_in_bytes``).
The rest of the cell (data, encoders, optimiser state, DataLoader workers) lives in the other half.
"""

from __future__ import annotations

import math
from typing import Any

from fusebench.components.micro_batches import chunk_sizes
from fusebench.machine import DEFAULT_FRACTION, ENV_BUDGET, GIB, available_memory, memory_budget
from fusebench.spec.config import BenchmarkSpec, ConfigError, setting_key

def _size(nbytes: float) -> str:
    return f"{nbytes / GIB:.2f} GiB" if nbytes >= GIB / 10 else f"{nbytes / 2**20:.1f} MiB"


def largest_chunk(n: int, micro: int | None) -> int:
    """The most samples one loss call sees on a batch of ``n`` with micro-batches of ``micro``: the largest of
    :func:`fusebench.components.micro_batches.chunk_sizes` (the pretraining step's rule), computed without listing
    the chunks (a batch of 1e8 samples in micro-batches of 2 would list 5e7): chunks of ``micro`` from sample 0, the
    last one starting at the first multiple of ``micro`` that leaves at most ``micro + 1`` samples (a lone last
    sample joins the chunk before)."""
    if micro is None or n <= micro:
        return n
    last_lo = -(-(n - micro - 1) // micro) * micro  # ceil((n - micro - 1) / micro) chunks of micro before the last
    return max(micro if last_lo > 0 else 0, n - last_lo)


def _work_note(obj: Any, batch: int, fits: int, k: int) -> str:
    """How much a step solves at micro-batch ``fits`` and at 2, for an objective that declares the work of one
    loss call (``joint_entries(n, k)``: M3G's joint plan of n^k entries, each visited by every Sinkhorn sweep);
    "" for one that does not. The largest micro-batch that fits the memory is also the slowest: the work per step
    grows about as m^(k-1) with the micro-batch m."""
    entries = getattr(obj, "joint_entries", None)
    if not callable(entries) or fits <= 2:
        return ""

    def per_step(m: int) -> int:
        return sum(entries(c, k) for c in chunk_sizes(batch, m))

    return (f"; at {fits} a step solves over {per_step(fits):.3g} joint-plan entries, each visited by every Sinkhorn "
            f"sweep, at 2 over {per_step(2):.3g} (the work per step grows about as m^{k - 1} with the micro-batch m: "
            f"a smaller one trains faster, on smaller groups of samples)")


def _instances(spec: BenchmarkSpec, objective: str) -> list[Any]:
    """The objective built with its hyper-parameters and with every combination of its grid."""
    from fusebench import objectives
    from fusebench.spec.methods import split_method_keys

    own = spec.pretrain.settings(objective)
    out = []
    for point in own.points():
        kwargs, _ = split_method_keys(own.at(point), f"{spec.name}: {setting_key(objective, 'grid')}")
        out.append(objectives.build(objective, **kwargs))
    return out


def _need(instances: list[Any], n: int, k: int, d: int) -> tuple[float, str | None]:
    """(largest declared bytes over ``instances`` at n samples, the refusal of a call that cannot run)."""
    import torch

    worst = 0.0
    for obj in instances:
        try:
            worst = max(worst, float(obj.memory_bytes(n, k, torch.float32, d)))
        except ValueError as e:
            return math.inf, str(e)
    return worst, None


def _largest_fitting_micro(instances: list[Any], batch: int, top: int, k: int, d: int,
                           budget: float) -> int | None:
    """The largest micro-batch m in [2, top] whose loss calls fit ``budget`` (None: none does). Bisection:
    the largest chunk of m (m or m + 1, :func:`largest_chunk`) never decreases with m, nor does a declared
    cost with the samples, so "fits" holds for every m up to the answer and for none above it (a batch of
    1e8 samples takes ~27 cost evaluations, not 1e8)."""
    def fits(m: int) -> bool:
        return _need(instances, largest_chunk(batch, m), k, d)[0] <= budget

    if top < 2 or not fits(2):
        return None
    lo, hi = 2, top  # fits(lo) holds
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    return lo


def objective_problem(spec: BenchmarkSpec, objective: str, k: int, budget: float, source: str,
                      ranks: int = 1) -> str | None:
    """Why ``objective``'s loss calls do not fit ``budget`` on ``spec`` at k views (None: they fit, or
    the objective declares no cost)."""
    from fusebench import objectives

    own = spec.pretrain.settings(objective)
    # reference rows and encoder-weights rows (issue #32) are no registered objective: no loss to pay for
    if (objective not in objectives.OBJECTIVES or objective in (getattr(spec, "encoder_weights", None) or {})
            or own.epochs <= 0):
        return None
    cls = objectives.OBJECTIVES.get(objective)
    if not callable(getattr(cls, "memory_bytes", None)):
        return None
    instances = _instances(spec, objective)
    batch, micro = own.batch_size * ranks, own.micro_batch
    n, d = largest_chunk(batch, micro), int(spec.pretrain.projection_dim)
    need, refused = _need(instances, n, k, d)
    if need <= budget:
        return None
    size = f"micro-batch {micro} of the batch of {batch}" if micro and micro < batch else f"batch {batch}"
    head = (f"objective {objective!r} on k = {k} views at {size}: "
            + (f"{refused}" if refused else f"one loss call needs about {_size(need)} (its declared cost, "
               f"{type(instances[0]).__name__}.memory_bytes), over the memory budget of {_size(budget)} ({source})"))
    fits = _largest_fitting_micro(instances, batch, min(batch, micro or batch) - 1, k, d, budget)
    if fits is None:
        at_two, why = _need(instances, 2, k, d)
        return head + ("; no micro-batch fits (2 samples already need " +
                       (why if why else _size(at_two)) + f"): leave {objective} out (--objective ...) "
                       f"or give it a larger budget")
    return (head + f"; the largest micro-batch that fits is {fits}: --set {setting_key(objective, 'micro_batch')}={fits} "
            f"(the loss on chunks of {fits} of each batch; steps and samples seen unchanged, recorded in the budget)"
            f"{_work_note(instances[0], batch, fits, k)}; or leave {objective} out (--objective ...)")


def check_memory_budget(spec: BenchmarkSpec, objs: list[str], device: str = "auto", ranks: int = 1) -> None:
    """Refuse the sweep (one ConfigError naming every objective over budget) before any cell starts when an
    objective's declared cost at its batch exceeds the memory budget of ``device`` (see the module docstring).
    Needs the view count: call it once ``dataset.modalities`` is resolved (``runner.resolve_views``)."""
    from fusebench.pipelines import pipeline_of
    from fusebench.components.compat import num_views

    pipeline = pipeline_of(spec)
    if not pipeline.builds_encoder:  # pretraining batches are the standard cell's
        return
    budget, source = memory_budget(_device_kind(device))
    if math.isinf(budget):
        return
    k = num_views(spec)
    problems = [p for o in dict.fromkeys(objs) if (p := objective_problem(spec, o, k, budget, source, ranks))]
    if problems:
        raise ConfigError(f"{spec.name}: nothing started, the memory would not suffice: " + "; ".join(problems))


def _device_kind(device: str) -> str:
    """``cuda[:N]`` where the cells run on a CUDA device (``auto`` with one present), else ``cpu``."""
    if device == "auto":
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    return device if device.startswith("cuda") else "cpu"


__all__ = ["DEFAULT_FRACTION", "ENV_BUDGET", "available_memory", "check_memory_budget", "largest_chunk",
           "memory_budget", "objective_problem"]
