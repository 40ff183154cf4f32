"""``fusebench bench gpu``: training-step time, achieved TFLOP/s and peak memory per encoder and precision,
and (``--cell``) how busy the GPU is during a real cell's pretraining.

One row per (encoder, batch, precision). The model is the encoder at its benchmark configuration
(``benchmark_config()``, or its tiny variant with ``--small``) with the head of its ``default_task``
(:func:`fusebench.components.model.for_backbone`, what ``fusebench bench encoders`` times; ``pointnet2``
has no task head and is trained on ``embed(batch).sum()``), on the synthetic batch of its
``example_batch()`` at the benchmark input size. One *step* is what the downstream phase does per
batch: ``zero_grad``, forward and task loss under the precision policy's autocast
(:mod:`fusebench.spec.precision`, its TF32 switches set for the row), backward, AdamW step (with a
gradient scaler at ``16-mixed``). Per row:

* **step (ms)**: the median over ``--steps`` timed steps after ``--warmup`` warm-up steps. On CUDA each
  step is bracketed by CUDA events, with one synchronisation before the first and one after the last
  timed step (none inside the loop); on the CPU by ``time.perf_counter``.
* **GFLOP/step**: the floating-point operations of one step counted by
  ``torch.utils.flop_counter.FlopCounterMode`` (:func:`count_flops`; once per row, outside the timed
  loop). It counts matrix products, convolutions and attention, 2 per multiply-add, forward and
  backward; element-wise operations, normalisation, pooling and the optimiser update are not counted.
* **TFLOP/s** = GFLOP/step / step time, and **% of peak** against the chip's dense peak for the
  precision (:data:`PEAKS`, NVIDIA data-sheet figures without sparsity; "unknown" for other devices).
* **peak mem (MiB)**: ``torch.cuda.max_memory_allocated`` over the timed steps (reset after the warm-up):
  weights, gradients, optimiser state, the batch and the activations of a step. On the CPU it is
  ``n/a`` (``fusebench bench encoders`` measures process RSS per encoder in a subprocess).

Every row and the cell run with the deterministic settings a ``fusebench run`` uses
(:func:`fusebench.runtime.utils.seed_everything`: deterministic algorithms on, warn only; cuDNN
deterministic, its autotuning off; ``CUBLAS_WORKSPACE_CONFIG=:4096:8``), so a step here is the run's step;
``--deterministic off`` turns them off to show what they cost. The header prints the settings in force.
``--speed KEY=VALUE`` applies a speed option of a spec's ``speed`` section (channels-last, cuDNN autotuning,
the optimiser implementation, ``torch.compile``) to the rows and the cell as a run applies it; each row's JSON
says what was in force (``speed``, as ``numerics.speed`` of a run).

``--cell B`` then measures the busy fraction of the GPU during benchmark B's pretraining
(:mod:`fusebench.perf.gpu_cell`). Results and the issue's H100 table: docs/gpu.md, "Measuring the GPU".

It is longer than ~450 lines because it is one bench: a row's measurement, its two tables and the command line
that checks every option before anything runs (the cell's part is :mod:`fusebench.perf.gpu_cell`).

Usage::

    fusebench bench gpu                                             # CUDA, the five encoders, 32 / tf32 / bf16-mixed
    fusebench bench gpu --encoders esanet --batch 8 --precision bf16-mixed
    fusebench bench gpu --encoders esanet --batch 8 --precision bf16-mixed --speed channels_last=true
    fusebench bench gpu --encoders eeg_conv seq_transformer --cell nyuv2-seg --data-root /data/nyuv2
    fusebench bench gpu --device cpu --small --steps 2 --warmup 1   # tiny CPU run (tests)
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
from typing import TYPE_CHECKING, Any, Callable, Iterator

from fusebench.perf.chip import PEAK_KIND, PEAKS, device_peaks, machine_line, peak_line, peaks_for_name
from fusebench.runtime.terminal_help import Keyed, Once, Parser
from fusebench.spec import precision

if TYPE_CHECKING:  # imported where used: `fusebench bench gpu --help` imports no torch
    import torch

    from fusebench.spec.config import SpeedConfig

#: the encoders of issue #21's table and their benchmark batch sizes
DEFAULT_BATCHES: dict[str, tuple[int, ...]] = {
    "esanet": (8, 16), "votenet": (8,), "pointnet2": (16,), "eeg_conv": (256,), "seq_transformer": (64,),
}
#: ``--small``: (configuration over ``benchmark_config()``, input sizes for ``example_batch``) per encoder
SMALL: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "esanet": ({"size": "tiny"}, {"height": 64, "width": 64}),
    "votenet": ({"config": "tiny"}, {}),
    "pointnet2": ({"config": "tiny"}, {}),
    "eeg_conv": ({"size": "tiny"}, {"num_samples": 300}),
    "seq_transformer": ({"size": "tiny"}, {"seq_len": 16}),
    "mlp": ({}, {}),
    "identity": ({}, {}),
}
SMALL_BATCH = 2
DEFAULT_PRECISIONS = ("32", "tf32", "bf16-mixed")
COLUMNS = ("encoder", "config", "inputs (per sample)", "batch", "precision", "step (ms)", "GFLOP/step", "TFLOP/s",
           "% of peak", "peak mem (MiB)")


def count_flops(fn: Callable[[], Any]) -> int:
    """The floating-point operations ``fn()`` runs, as ``FlopCounterMode`` counts them (matrix products,
    convolutions, attention: 2 per multiply-add, backward included)."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        fn()
    return int(counter.get_total_flops())


def _case(name: str, small: bool) -> tuple[type, dict[str, Any], dict[str, Any]]:
    """(encoder class, constructor configuration, ``example_batch`` sizes) of ``name``."""
    from fusebench.encoders import ENCODERS

    cls = ENCODERS.get(name)
    if not hasattr(cls, "benchmark_config") or not hasattr(cls, "example_batch"):
        raise ValueError(f"encoder {name!r} has no benchmark_config()/example_batch() classmethods")
    cfg = dict(cls.benchmark_config())
    sizes: dict[str, Any] = {}
    if small:
        over, sizes = SMALL.get(name, ({}, {}))
        cfg.update(over)
    return cls, cfg, dict(sizes)


def batches_for(name: str, batch: list[int] | None, small: bool) -> tuple[int, ...]:
    if batch:
        return tuple(batch)
    if small:
        return (SMALL_BATCH,)
    return DEFAULT_BATCHES.get(name, (16,))


def training_step(model: torch.nn.Module, batch: dict, headless: bool, policy: precision.Precision,
                  device: torch.device, optimizer_impl: str = "default") -> Callable[[], None]:
    """One training step of ``model`` on ``batch`` under ``policy`` (see the module docstring), with AdamW in
    PyTorch's ``optimizer_impl`` implementation (``speed.optimizer_impl``)."""
    from fusebench.engine.optim import build_optimizer
    from fusebench.runtime.utils import deferred_value_checks

    opt = build_optimizer(model.parameters(), "adamw", 1e-4, 1e-4, optimizer_impl)
    scaler = precision.grad_scaler(policy, device)
    autocast = precision.autocast(policy, device)
    check = getattr(model, "check_batch", None)
    if not headless and callable(check):
        check(batch)  # once, here, as the training loop checks each batch before its copy (VoteNet's labels)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        with autocast, deferred_value_checks():  # as in the loop's steps: no host read of tensor values
            loss = model.embed(batch).float().sum() if headless else model.task_loss(model(batch), batch)
        precision.backward_step(loss, opt, scaler)

    return step


def time_steps(step: Callable[[], None], n: int, device: torch.device) -> tuple[list[float], float]:
    """(the seconds of each of ``n`` steps, the wall seconds of all of them). On CUDA: CUDA events around
    each step, synchronised only before the first and after the last."""
    import torch

    if device.type != "cuda":
        times = []
        t_all = time.perf_counter()
        for _ in range(n):
            t0 = time.perf_counter()
            step()
            times.append(time.perf_counter() - t0)
        return times, time.perf_counter() - t_all
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    for s, e in zip(starts, ends):
        s.record()
        step()
        e.record()
    torch.cuda.synchronize(device)
    wall = time.perf_counter() - t0
    return [s.elapsed_time(e) / 1e3 for s, e in zip(starts, ends)], wall


@contextlib.contextmanager
def deterministic_settings(on: bool) -> Iterator[None]:
    """The deterministic switches of a run (``on``: as :func:`fusebench.runtime.utils.seed_everything` sets
    them, :func:`~fusebench.runtime.utils.set_deterministic`) or all off, restored afterwards; neither
    imports ``torch._inductor``."""
    import torch

    from fusebench.runtime.utils import set_deterministic, use_deterministic_algorithms

    before = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
              torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark)
    set_deterministic(on)
    try:
        yield
    finally:
        use_deterministic_algorithms(before[0], warn_only=before[1])
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = before[2], before[3]


def settings_line(deterministic: bool) -> str:
    """What decides the kernels of the timed steps (the header's line), read from the switches in force:
    call inside :func:`deterministic_settings`."""
    import torch

    algorithms = torch.are_deterministic_algorithms_enabled()
    warn = " (warn only)" if algorithms and torch.is_deterministic_algorithms_warn_only_enabled() else ""
    return (f"settings: deterministic algorithms {'on' if algorithms else 'off'}{warn}, cudnn.deterministic "
            f"{'on' if torch.backends.cudnn.deterministic else 'off'}, cudnn.benchmark "
            f"{'on' if torch.backends.cudnn.benchmark else 'off'}, CUBLAS_WORKSPACE_CONFIG="
            f"{os.environ.get('CUBLAS_WORKSPACE_CONFIG', 'unset')} — "
            + ("as `fusebench run` (--deterministic off to compare)" if deterministic
               else "NOT a run's settings (--deterministic off)"))


def bench_row(name: str, batch_size: int, precision_name: str, device: torch.device, steps: int, warmup: int,
              small: bool = False, deterministic: bool = True, speed_options: SpeedConfig | None = None
              ) -> dict[str, Any]:
    """One row of the table (see the module docstring); a fresh model, optimiser and batch (seed 0). The speed
    options (``speed_options``: ``--speed``) are applied as a cell applies its spec's ``speed`` section
    (:mod:`fusebench.engine.speed`); the row's ``speed`` says what was in force (``numerics.speed`` of a run)."""
    import torch

    from fusebench.components.model import for_backbone
    from fusebench.engine import speed
    from fusebench.runtime import utils
    from fusebench.spec.config import SpeedConfig

    opts = speed_options or SpeedConfig()
    policy = precision.get(precision_name)
    cls, cfg, sizes = _case(name, small)
    torch.manual_seed(0)
    backbone = cls(**cfg)
    headless = getattr(cls, "default_task", None) is None  # pointnet2: no task head of its own
    model = (backbone if headless else for_backbone(backbone)).to(device).train()
    channels_last = speed.to_channels_last(model, opts)
    host_batch = speed.input_format(channels_last)(cls.example_batch(cfg, batch_size=batch_size, seed=0, **sizes))
    batch = utils.to_device(host_batch, device)
    inputs = ", ".join(f"{k} {'x'.join(map(str, v.shape[1:]))}" for k, v in batch["modalities"].items())
    config = ", ".join(f"{k}={v}" for k, v in cfg.items() if k != "modalities")
    cuda = device.type == "cuda"
    with precision.backend_flags(policy), deterministic_settings(deterministic), speed.backend_scope(opts):
        speed.apply_backend(opts, {})  # cudnn_benchmark: autotuning on, deterministic algorithms off (as a cell)
        step = training_step(model, batch, headless, policy, device, opts.optimizer_impl)
        flops = count_flops(step)  # also the first warm-up step; eager: the FLOPs do not depend on compilation
        compiled = speed.compile_encoder(model, opts)  # the encoder's embed / features compiled from here on
        for _ in range(warmup):
            step()
        if cuda:
            torch.cuda.synchronize(device)
            torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device) if cuda else None
        times, wall = time_steps(step, steps, device)
        peak = torch.cuda.max_memory_allocated(device) if cuda else None
    sec = statistics.median(times)
    peaks = device_peaks(device)
    tflops = flops / sec / 1e12
    peak_tflops = peaks[PEAK_KIND[policy.name]] if peaks else None
    return {
        "encoder": name, "config": config, "inputs": inputs, "batch": batch_size, "precision": policy.name,
        "deterministic": bool(deterministic) and not opts.cudnn_benchmark,
        "speed": speed.record(opts, {}, channels_last, compiled),
        "step_ms": sec * 1e3, "step_ms_min": min(times) * 1e3, "step_ms_max": max(times) * 1e3,
        "wall_ms_per_step": wall / steps * 1e3, "steps": steps, "warmup": warmup,
        "flops": flops, "tflops": tflops, "peak_tflops": peak_tflops,
        "pct_of_peak": 100 * tflops / peak_tflops if peak_tflops else None,
        "peak_mib": peak / 2**20 if peak is not None else None,
        "base_mib": base / 2**20 if base is not None else None,
    }


def _f(v: float | None, digits: int | None = None) -> str:
    """``v`` with ``digits`` decimals, or (None) with about three significant digits."""
    if v is None:
        return "n/a"
    if digits is None:
        digits = 0 if abs(v) >= 100 else 1 if abs(v) >= 10 else 2 if abs(v) >= 1 else None
    return f"{v:.3g}" if digits is None else f"{v:.{digits}f}"


def format_table(rows: list[dict[str, Any]]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "|".join("---" for _ in COLUMNS) + "|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['encoder']} | not measured: {r['error']} | | {r.get('batch', '')} "
                         f"| {r.get('precision', '')} |" + " |" * (len(COLUMNS) - 5))
            continue
        lines.append(f"| {r['encoder']} | {r['config']} | {r['inputs']} | {r['batch']} | {r['precision']} "
                     f"| {_f(r['step_ms'])} | {_f(r['flops'] / 1e9)} | {_f(r['tflops'])} | {_f(r['pct_of_peak'], 1)} "
                     f"| {_f(r['peak_mib'], 0)} |")
    return "\n".join(lines)


def format_issue_table(rows: list[dict[str, Any]]) -> str:
    """The rows in issue #21's layout: one line per (encoder, batch), step times side by side."""
    by = {(r["encoder"], r["batch"], r["precision"]): r for r in rows if "error" not in r}
    keys = list(dict.fromkeys((r["encoder"], r["batch"]) for r in rows))

    def get(enc: str, bs: int, prec: str, key: str, digits: int | None = None) -> str:
        r = by.get((enc, bs, prec))
        return "—" if r is None else _f(r[key], digits)

    def ratio(enc: str, bs: int, prec: str) -> str:  # prec's median step over fp32's, both measured in this run
        a, b = by.get((enc, bs, prec)), by.get((enc, bs, "32"))
        return "—" if a is None or b is None else f"{a['step_ms'] / b['step_ms']:.2f}"

    lines = ["| encoder | batch | fp32 (ms) | TF32 (ms) | bf16 autocast (ms) | TF32 / fp32 | bf16 / fp32 "
             "| achieved TFLOP/s bf16 | peak memory fp32 / bf16 (MiB) |", "|---|---|---|---|---|---|---|---|---|"]
    for enc, bs in keys:
        lines.append(f"| {enc} | {bs} | {get(enc, bs, '32', 'step_ms')} | {get(enc, bs, 'tf32', 'step_ms')} "
                     f"| {get(enc, bs, 'bf16-mixed', 'step_ms')} | {ratio(enc, bs, 'tf32')} "
                     f"| {ratio(enc, bs, 'bf16-mixed')} | {get(enc, bs, 'bf16-mixed', 'tflops')} "
                     f"| {get(enc, bs, '32', 'peak_mib', 0)} / {get(enc, bs, 'bf16-mixed', 'peak_mib', 0)} |")
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    p = Parser(prog="fusebench bench gpu", description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda", help="cuda (default), cuda:N or cpu")
    p.add_argument("--encoders", nargs="+", action=Once, metavar="ID",
                   help=f"encoder ids (default: {' '.join(DEFAULT_BATCHES)}; none with --cell alone: pass --encoders)")
    p.add_argument("--precision", nargs="+", action=Once, default=list(DEFAULT_PRECISIONS), metavar="P",
                   help="precision policies (32, tf32, bf16-mixed, 16-mixed; default: 32 tf32 bf16-mixed)")
    p.add_argument("--steps", type=int, default=10, help="timed steps per row (median; default 10)")
    p.add_argument("--warmup", type=int, default=3, help="warm-up steps before timing (default 3)")
    p.add_argument("--batch", type=int, nargs="+", action=Once, metavar="N", help="batch sizes for every encoder "
                   "(default: the issue's per encoder, e.g. esanet 8 16; with --small 2)")
    p.add_argument("--small", action="store_true", help="tiny encoder variants and inputs (CPU smoke runs, tests)")
    p.add_argument("--threads", type=int, help="torch intra-op threads on the CPU (default: torch's)")
    p.add_argument("--cell", metavar="BENCHMARK", help="also measure the GPU's busy fraction during this "
                   "benchmark's pretraining (e.g. nyuv2-seg)")
    p.add_argument("--data-root", help="the cell's data folder (its prepared cache is used as `fusebench run` uses it)")
    p.add_argument("--synthetic", action="store_true", help="run the cell on its benchmark's synthetic twin")
    p.add_argument("--set", dest="overrides", action=Keyed, default=[], metavar="KEY=VALUE",
                   help="override a key of the cell's spec, as `fusebench run --set`")
    p.add_argument("--objective", help="the cell's objective (default: the benchmark's pretrain.objective)")
    p.add_argument("--cell-steps", type=int, default=20, help="steps per measured window of the cell (default 20)")
    p.add_argument("--speed", action=Keyed, default=[], metavar="KEY=VALUE",
                   help="a speed option for the rows and the cell, as a spec's speed.KEY (channels_last, "
                        "cudnn_benchmark, optimizer_impl, compile, compile_mode; docs/gpu.md), e.g. "
                        "--speed channels_last=true --speed cudnn_benchmark=true")
    p.add_argument("--deterministic", choices=("on", "off"), default="on",
                   help="the deterministic settings of a run (on, the default: a step here is the run's step) or "
                        "off (to compare: what determinism costs)")
    p.add_argument("--json", help="also write the rows (and the cell's figures) to this JSON file")
    return p


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    ns = parser.parse_args(argv)
    import torch  # after parsing: --help imports no torch

    if ns.steps < 1 or ns.warmup < 0 or ns.cell_steps < 1:
        parser.error(f"--steps and --cell-steps must be >= 1 and --warmup >= 0, got --steps {ns.steps}, "
                     f"--cell-steps {ns.cell_steps}, --warmup {ns.warmup}")
    if ns.batch and min(ns.batch) < 1:
        parser.error(f"--batch: batch sizes must be >= 1, got {ns.batch}")
    if ns.threads is not None and ns.threads < 1:
        parser.error(f"--threads must be >= 1, got {ns.threads}")
    from fusebench.perf import json_path_problem

    if ns.json and json_path_problem(ns.json):
        parser.error(json_path_problem(ns.json))
    try:
        precisions = list(dict.fromkeys(precision.check(p, "--precision") for p in ns.precision))
    except ValueError as e:
        parser.error(str(e))
    from fusebench.runtime.utils import resolve_device

    if ns.device == "auto":
        parser.error("--device: expected cuda, cuda:N or cpu, got 'auto'")
    try:
        device = resolve_device(ns.device)
    except ValueError as e:
        parser.error(f"{e}; `--device cpu --small` runs the bench on the CPU")
    from fusebench.encoders import available

    names = ns.encoders if ns.encoders is not None else ([] if ns.cell else list(DEFAULT_BATCHES))
    unknown = [n for n in names if n not in available()]
    if unknown:
        parser.error(f"--encoders: unknown encoder(s) {unknown}; registered: {', '.join(available())}")
    cell_steps = ns.cell_steps != parser.get_default("cell_steps")
    if (ns.data_root or ns.synthetic or ns.overrides or ns.objective or cell_steps) and not ns.cell:
        parser.error("--data-root, --synthetic, --set, --objective and --cell-steps describe the cell: name it with "
                     "--cell BENCHMARK")
    rows_only = [o for o, given in (("--steps", ns.steps != parser.get_default("steps")), ("--batch", ns.batch),
                                    ("--small", ns.small)) if given]
    if not names and rows_only:  # --cell alone: no encoder row, and the cell takes its own batch and --cell-steps
        parser.error(f"{', '.join(rows_only)} describe(s) the encoder rows, and --cell without --encoders measures "
                     f"no row (the cell runs its spec's batch for --cell-steps); add --encoders ID, or drop "
                     f"{', '.join(rows_only)}")
    from fusebench.spec.config import ConfigError, parse_override, speed_config

    bad = [o for o in ns.speed if "=" not in o]
    if bad:
        parser.error(f"--speed {bad[0]!r}: expected KEY=VALUE, e.g. --speed channels_last=true")
    try:
        speed_set = dict(parse_override(o) for o in ns.speed)
        speed_options = speed_config(speed_set, "--speed")
    except ConfigError as e:
        parser.error(str(e))
    overrides: dict[str, Any] = {}
    if ns.cell:  # checked before anything runs
        from fusebench.perf import gpu_cell

        try:
            overrides = dict(parse_override(o) for o in ns.overrides)
            for key, value in speed_set.items():  # --speed K=V is the cell's --set speed.K=V
                if overrides.get(f"speed.{key}", value) != value:
                    parser.error(f"--speed {key}={value!r} and --set speed.{key}={overrides[f'speed.{key}']!r} "
                                 "disagree: give the option once")
                overrides[f"speed.{key}"] = value
            for prec in precisions:
                gpu_cell.load_cell_spec(ns.cell, prec, ns.synthetic, ns.data_root, overrides, ns.objective)
        except (ValueError, KeyError) as e:  # ConfigError, an unknown benchmark: both ValueErrors
            parser.error(str(e))
    if ns.threads is not None:
        torch.set_num_threads(ns.threads)

    deterministic = ns.deterministic == "on"
    print(f"# fusebench bench gpu — {machine_line(device)}")
    print(f"# {peak_line(device)}")
    with deterministic_settings(deterministic):
        print(f"# {settings_line(deterministic)}")
    if speed_set:
        print(f"# speed options: {', '.join(f'{k}={v}' for k, v in speed_set.items())}"
              + (" (cuDNN autotuning: deterministic algorithms and cudnn.deterministic off for the rows and the "
                 "cell, as in a run with it)" if speed_options.cudnn_benchmark else ""))
    print(f"# one step: zero_grad, forward + task loss (autocast per precision), backward, AdamW step; median of "
          f"{ns.steps} after {ns.warmup} warm-up; time: {'CUDA events' if device.type == 'cuda' else 'perf_counter'}; "
          f"FLOPs: FlopCounterMode; memory: {'CUDA max allocated' if device.type == 'cuda' else 'n/a on the CPU'}")
    rows: list[dict[str, Any]] = []
    for name in names:
        for bs in batches_for(name, ns.batch, ns.small):
            for prec in precisions:
                try:
                    rows.append(bench_row(name, bs, prec, device, ns.steps, ns.warmup, ns.small, deterministic,
                                          speed_options))
                except Exception as e:  # noqa: BLE001 - reported in the table (e.g. out of memory)
                    rows.append({"encoder": name, "batch": bs, "precision": prec,
                                 "error": f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"})
                if device.type == "cuda":
                    torch.cuda.empty_cache()
    out: dict[str, Any] = {"machine": machine_line(device), "peaks": device_peaks(device),
                           "deterministic": deterministic, "rows": rows}
    if rows:
        print()
        print(format_table(rows))
        print()
        print("In issue #21's layout:")
        print()
        print(format_issue_table(rows))
    if ns.cell:
        cells = [gpu_cell.measure_cell(ns.cell, prec, device, data_root=ns.data_root, synthetic=ns.synthetic,
                                       overrides=overrides, objective=ns.objective, warmup=ns.warmup,
                                       steps=ns.cell_steps, deterministic=deterministic) for prec in precisions]
        out["cells"] = cells
        print()
        print(gpu_cell.format_cells(cells))
    if ns.json:  # whole or not at all, strict JSON (NaN as null), and said where
        from fusebench.io import atomic_write_json

        print(f"\n# rows written to {atomic_write_json(ns.json, out)}")
    failed = [f"{r['encoder']} batch {r['batch']} {r['precision']}" for r in rows if "error" in r]
    if failed:  # the table says why; the exit status says that something was not measured
        print(f"fusebench bench gpu: {len(failed)} of {len(rows)} row(s) not measured: {', '.join(failed)}",
              file=sys.stderr)
        return 1
    return 0


__all__ = ["COLUMNS", "DEFAULT_BATCHES", "PEAKS", "bench_row", "count_flops", "deterministic_settings", "device_peaks",
           "format_issue_table", "format_table", "main", "peaks_for_name", "settings_line", "training_step"]
