"""``fusebench bench gpu --cell B``: how busy the GPU is while a real cell of benchmark B pretrains.

What runs is the cell's own pretraining, not a copy of it: :class:`fusebench.cells.standard.StandardCell`
is built from the benchmark's spec (``--data-root``: the data folder, read through the dataset adapter
and its prepared cache exactly as ``fusebench run`` reads it; or ``--synthetic``: the benchmark's
synthetic twin; ``--set`` overrides keys as ``fusebench run --set`` does) and its ``pretrain()`` runs the
training loop (:func:`fusebench.engine.loop.run_phase`: the ``DataLoader`` of
:func:`fusebench.engine.data.make_loader`, which reads and collates the batches in the main process,
host-to-device copies, the objective, the optimiser and scheduler, the loss read and NaN check every
``LOSS_READ_EVERY`` steps) into a temporary folder, stopped by the loop's step budget (``RunOptions.max_steps``).
Nothing is written outside that folder and no record is made.

The loop's step-end callback (``on_step_end``: it asks for no loss value, so the loop reads the device as in
a run, not for it; the host may run a few steps ahead of the GPU, the reads every ``LOSS_READ_EVERY`` steps
inside a window bring them together) marks the windows, each ``--cell-steps`` steps long, after
``--warmup`` steps:

1. *unprofiled*: the wall time of each step (``time.perf_counter`` between callbacks), so the step
   time is not inflated by the profiler; the table gives the median, the JSON every step's time;
2. *profiled* (CUDA only): the same number of steps under ``torch.profiler`` with CUDA activity only
   (no CPU operator events, to keep its overhead low). **busy** = the union of the intervals during
   which a kernel ran on the GPU, divided by the wall time of the window; **busy incl. copies** also
   counts memory copies and sets. Overlapping kernels on several streams count once. The window's wall time
   is the sum of its steps, slow ones included (the JSON lists each: ``profiled_step_times_ms``), where the
   table's ``step profiled`` is their median. The same window's kernels grouped by name (:func:`kernel_table`:
   launches and GPU ms per step, mean launch; JSON ``kernel_top``, and a second table) say what a step is
   made of.

Not in the windows: building the data, the model and the optimiser, the warm-up steps and the
downstream phase. What the loop does between steps is in them, as it is in the cell: an epoch's end (a
new loader, a method's per-epoch step) falling inside a window, and a checkpoint (``checkpoint_every``;
the table says when one was written inside a window). On the CPU only the unprofiled window runs and
busy is ``n/a`` (it needs CUDA).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any, Iterable

import torch

from fusebench.spec import precision

COLUMNS = ("benchmark", "objective", "precision", "batch", "data", "loader", "steps", "step (ms)",
           "step profiled (ms)", "GPU busy", "busy incl. copies")


def union_ns(intervals: Iterable[tuple[int, int]]) -> int:
    """The length of the union of ``(start, end)`` intervals (overlaps counted once)."""
    total, cur_start, cur_end = 0, None, None
    for start, end in sorted(intervals):
        if cur_end is None or start > cur_end:
            if cur_end is not None:
                total += cur_end - cur_start
            cur_start, cur_end = start, end
        else:
            cur_end = max(cur_end, end)
    if cur_end is not None:
        total += cur_end - cur_start
    return total


def _gpu_events(prof: Any) -> list[tuple[str, int, int]]:
    """``(name, start_ns, duration_ns)`` of each GPU activity ``prof`` recorded (kernels, copies and sets)."""
    from torch.autograd import DeviceType

    return [(e.name(), int(e.start_ns()), int(e.duration_ns()))
            for e in prof.profiler.kineto_results.events() if e.device_type() == DeviceType.CUDA]


def _is_copy(name: str) -> bool:
    return name.startswith(("Memcpy", "Memset"))


def device_intervals(prof: Any) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(kernel intervals, memory copy / set intervals) in ns of the GPU activities ``prof`` recorded."""
    kernels, copies = [], []
    for name, start, duration in _gpu_events(prof):
        (copies if _is_copy(name) else kernels).append((start, start + duration))
    return kernels, copies


def kernel_table(prof: Any, steps: int, top: int = 15) -> list[dict[str, Any]]:
    """The kernels ``prof`` recorded over ``steps`` steps, grouped by name: per step, how many launches and how
    many ms of GPU time each name took (``calls_per_step``, ``ms_per_step``) and the mean launch in us; the
    ``top`` names by GPU time, then a row ``(other N names)`` with the rest, so the rows add up to every kernel
    of the window. Which kernels a step is made of: a step of many short kernels (``mean_us`` of a few us)
    is bound by the host's launches, one of few long ones by the GPU."""
    by_name: dict[str, list[int]] = {}
    for name, _, duration in _gpu_events(prof):
        if not _is_copy(name):
            got = by_name.setdefault(name, [0, 0])
            got[0] += 1
            got[1] += duration

    def row(name: str, calls: int, ns: int) -> dict[str, Any]:
        return {"kernel": name, "calls_per_step": calls / steps, "ms_per_step": ns / 1e6 / steps,
                "mean_us": ns / 1e3 / calls}

    ranked = sorted(by_name.items(), key=lambda kv: (-kv[1][1], kv[0]))
    rows = [row(name, calls, ns) for name, (calls, ns) in ranked[:top]]
    rest = ranked[top:]
    if rest:
        rows.append(row(f"(other {len(rest)} names)", sum(c for _, (c, _) in rest), sum(n for _, (_, n) in rest)))
    return rows


class _Windows:
    """The tracker the cell's loop calls (``on_step_end``, ``on_epoch_start``): stamps each step's end, starts
    and stops the profiler at the window edges. It asks for no loss value, so the loop reads the device as in a
    run (every ``LOSS_READ_EVERY`` steps and at checkpoints), not after every step."""

    def __init__(self, warmup: int, steps: int, cuda: bool, checkpoint_every: int) -> None:
        self.warmup, self.steps, self.cuda, self.every = warmup, steps, cuda, checkpoint_every
        self.total = warmup + steps * (2 if cuda else 1)
        self.stamps: list[float] = []
        self.checkpoint_in_window = False
        self.prof: Any = None
        self.t0 = self.profiled_wall = 0.0

    def on_epoch_start(self, phase: Any) -> None:
        pass

    def on_step_end(self, phase: Any) -> None:
        from fusebench.perf.timing import quiet_stderr

        now = time.perf_counter()
        self.stamps.append(now)
        done = len(self.stamps)
        if self.warmup <= done < self.total and phase.step % self.every == 0:  # saved before the next step ends
            self.checkpoint_in_window = True
        if self.cuda and done == self.warmup + self.steps:  # the profiled window starts
            from torch.profiler import ProfilerActivity, profile

            self.prof = profile(activities=[ProfilerActivity.CUDA])
            with quiet_stderr():
                self.prof.start()
            self.t0 = time.perf_counter()
        elif self.cuda and done == self.total:  # ... and ends
            self.profiled_wall = now - self.t0
            with quiet_stderr():
                self.prof.stop()


def load_cell_spec(benchmark: str, precision_name: str, synthetic: bool, data_root: str | None,
                   overrides: dict[str, Any] | None = None, objective: str | None = None) -> Any:
    """The cell's spec at ``precision_name``; a ``ValueError`` when it cannot run here."""
    from fusebench import benchmarks, objectives
    from fusebench.pipelines import pipeline_of
    if objective is not None and objective not in objectives.available():  # a reference row pretrains nothing
        raise ValueError(f"--objective {objective!r}: expected an objective that pretrains, one of "
                         f"{', '.join(objectives.available())}")

    spec = benchmarks.load(benchmark, overrides={**(overrides or {}), "precision": precision_name}, synthetic=synthetic)
    if spec.pipeline != "standard":
        raise ValueError(f"--cell {benchmark}: its pipeline is {spec.pipeline!r}; the busy fraction is measured "
                         "on the standard pipeline's pretraining")
    if pipeline_of(spec).reads_dataset and not (synthetic or spec.dataset.synthetic_only or data_root):
        raise ValueError(f"--cell {benchmark}: give its data with --data-root DIR, or --synthetic for its "
                         "synthetic twin")
    return spec


def _data_line(spec: Any, synthetic: bool, data_root: str | None, train: Any) -> str:
    """Where the cell's training samples came from: the synthetic twin, or the data root with or without a
    prepared cache (its manifest hash: ``fusebench data prepare`` with the benchmark's dataset options)."""
    if synthetic or spec.dataset.synthetic_only:
        return "synthetic twin"
    manifest = getattr(train, "manifest_hash", None)
    return f"{data_root}, " + (f"prepared cache {manifest[:12]}" if manifest else "no prepared cache (raw files)")


def measure_cell(benchmark: str, precision_name: str, device: torch.device, data_root: str | None = None,
                 synthetic: bool = False, overrides: dict[str, Any] | None = None, objective: str | None = None,
                 warmup: int = 3, steps: int = 20, seed: int = 0, deterministic: bool = True) -> dict[str, Any]:
    """Run benchmark ``benchmark``'s pretraining for ``warmup`` + ``steps`` (+ ``steps`` profiled, on CUDA)
    steps and measure it (module docstring); with the run's deterministic settings, or without them
    (``deterministic=False``: the cell's switches turned off after it set them)."""
    import statistics

    from fusebench.engine.data import feeding
    from fusebench.spec.request import CellRequest, RunOptions
    from fusebench.cells.standard import StandardCell

    spec = load_cell_spec(benchmark, precision_name, synthetic, data_root, overrides, objective)
    objective = objective or spec.pretrain.objective
    policy = precision.get(precision_name)
    cuda = device.type == "cuda"
    warmup = max(1, warmup)  # the first step's time is measured from the step before it
    probe = _Windows(warmup, steps, cuda, max(1, int(spec.checkpoint_every)))
    # the cell switches on deterministic algorithms (utils.seed_everything): put them back for what runs next
    flags = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
             torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark)
    with tempfile.TemporaryDirectory(prefix="fusebench-bench-gpu-") as tmp, precision.backend_flags(policy):
        request = CellRequest(spec, objective, seed, Path(tmp))
        options = RunOptions(synthetic=synthetic, data_root=data_root, device=str(device), progress=False,
                             max_steps=probe.total)
        cell = None
        try:
            cell = StandardCell(request, options, {"git": None, "fingerprint": None}, probe, policy)
            if not deterministic:  # the cell set a run's switches (utils.seed_everything): off, to compare
                torch.use_deterministic_algorithms(False)
                torch.backends.cudnn.deterministic = False
            with feeding(cell.feed):  # batches fetched as a run fetches them (loader workers, pinned memory)
                cell.pretrain()
        except KeyboardInterrupt:  # the loop's step budget, spent after the last window
            if len(probe.stamps) < probe.total:
                raise
        finally:
            torch.use_deterministic_algorithms(flags[0], warn_only=flags[1])
            torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = flags[2], flags[3]
    if len(probe.stamps) < probe.total:
        raise ValueError(f"--cell {benchmark}: its pretraining has {len(probe.stamps)} steps, fewer than the "
                         f"{probe.total} the windows need; lower --cell-steps / --warmup or raise "
                         "--set pretrain.epochs=N")
    s = probe.stamps  # s[k - 1]: the end of step k; step k's time is s[k - 1] - s[k - 2]
    plain = [b - a for a, b in zip(s[warmup - 1:warmup + steps - 1], s[warmup:warmup + steps])]
    row: dict[str, Any] = {
        "benchmark": benchmark, "objective": objective, "precision": policy.name, "seed": seed,
        "batch": spec.pretrain.settings(objective).batch_size,
        "data": _data_line(spec, synthetic, data_root, cell.data["train"]),
        "feed": cell.feed.record(),  # how the batches were fetched: a busy figure is read against it
        "overrides": dict(overrides or {}), "steps": steps, "warmup": warmup,
        "step_ms": statistics.median(plain) * 1e3,
        "step_times_ms": [t * 1e3 for t in plain],  # each step: an outlier (epoch end, loss read) shows here
        "checkpoint_in_window": probe.checkpoint_in_window,
        "step_profiled_ms": None, "busy": None, "busy_incl_copies": None, "kernel_ms_per_step": None,
    }
    if cuda:
        ends = s[warmup + steps:probe.total]
        prof_steps = [b - a for a, b in zip([probe.t0, *ends[:-1]], ends)]
        kernels, copies = device_intervals(probe.prof)
        wall_ns = probe.profiled_wall * 1e9
        row.update(step_profiled_ms=statistics.median(prof_steps) * 1e3, profiled_wall_s=probe.profiled_wall,
                   profiled_step_times_ms=[t * 1e3 for t in prof_steps],
                   busy=union_ns(kernels) / wall_ns, busy_incl_copies=union_ns(kernels + copies) / wall_ns,
                   kernel_ms_per_step=union_ns(kernels) / 1e6 / steps, kernels=len(kernels),
                   kernel_top=kernel_table(probe.prof, steps))
    return row


def format_cells(rows: list[dict[str, Any]]) -> str:
    def pct(v: float | None) -> str:
        return "n/a (needs CUDA)" if v is None else f"{100 * v:.1f}%"

    def ms(v: float | None) -> str:
        return "n/a" if v is None else f"{v:.1f}"

    def loader(feed: dict[str, Any]) -> str:
        return (f"{feed['num_workers']} workers ({feed['num_workers_from']}), "
                + ("pinned" if feed["pin_memory"] else "not pinned"))

    lines = ["Busy fraction of a real cell's pretraining (its own loop, DataLoader and objective; see docs/gpu.md):",
             "", "| " + " | ".join(COLUMNS) + " |", "|" + "|".join("---" for _ in COLUMNS) + "|"]
    for r in rows:
        sets = " ".join(f"{k}={v}" for k, v in r["overrides"].items())
        data = r["data"] + (f"; --set {sets}" if sets else "")
        lines.append(f"| {r['benchmark']} | {r['objective']} | {r['precision']} | {r['batch']} | {data} "
                     f"| {loader(r['feed'])} | {r['steps']} | {ms(r['step_ms'])} | {ms(r['step_profiled_ms'])} "
                     f"| {pct(r['busy'])} | {pct(r['busy_incl_copies'])} |")
    if any(r["checkpoint_in_window"] for r in rows):
        lines += ["", "(a checkpoint was written inside a measured window: its time counts as idle GPU time)"]
    for r in rows:
        if r.get("kernel_top"):
            lines += ["", f"Kernels of the profiled window, per step ({r['benchmark']}, {r['objective']}, "
                          f"{r['precision']}; {r['kernels'] / r['steps']:.0f} launches per step), by GPU time:", "",
                      "| kernel | launches per step | ms per step | mean (us) |", "|---|---|---|---|"]
            lines += [f"| `{_short(k['kernel'])}` | {k['calls_per_step']:.1f} | {k['ms_per_step']:.2f} "
                      f"| {k['mean_us']:.1f} |" for k in r["kernel_top"]]
    return "\n".join(lines)


def _short(name: str, width: int = 100) -> str:
    """A kernel's name for the table: one line, at most ``width`` characters (the JSON keeps it whole)."""
    name = " ".join(name.split()).replace("|", "/").replace("`", "'")
    return name if len(name) <= width else name[:width - 3] + "..."


__all__ = ["COLUMNS", "device_intervals", "format_cells", "kernel_table", "load_cell_spec", "measure_cell",
           "union_ns"]
