"""``fusebench bench encoders``: forward+backward time, peak memory and parameter count per encoder.

Every id of :func:`fusebench.encoders.available` is benchmarked at its *benchmark input size*,
which each encoder class declares through two classmethods (the convention every encoder follows):

* ``benchmark_config() -> dict`` — constructor keyword arguments of the benchmarked variant;
* ``example_batch(config=None, batch_size=..., seed=0, **sizes) -> dict`` — a synthetic collated
  batch (layout of :mod:`fusebench.datasets.collate`) at the benchmark input size, with a target
  for ``task_loss``.

One step is ``loss = model.task_loss(model(batch), batch); loss.backward()`` in training mode, for
the backbone with the head of its ``default_task`` (:func:`fusebench.training.model.for_backbone`; a
backbone without one, ``pointnet2``, is timed on ``embed(batch).sum().backward()``). Each
encoder runs in a fresh subprocess (``python -m fusebench.perf.encoders --worker NAME``) so that
memory figures are not polluted by the others: on CPU, *peak RSS* is the process's maximum resident
set size (``getrusage``) after the timed steps and *Δ RSS* its increase over the resident size just
before the first step (activations, gradients, optimiser-free); on CUDA, peak memory is
``torch.cuda.max_memory_allocated``. Time is the median over ``--repeats`` steps after ``--warmup``
steps. An encoder that cannot be imported or lacks the two classmethods is listed with the reason.

Usage::

    fusebench bench encoders                       # all encoders, 2 threads, CPU
    fusebench bench encoders --names eeg_conv seq_transformer --repeats 5
    fusebench bench encoders --batch-size 4 --device cuda
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from typing import Any

COLUMNS = ("encoder", "config", "inputs (batch)", "params (M)", "fwd+bwd (ms)", "peak mem (MiB)", "Δ mem (MiB)")


def machine_description(device: str, threads: int) -> str:
    import torch

    from fusebench.machine import cpu_model

    cpu = cpu_model()
    desc = (f"{cpu}, {os.cpu_count()} logical cores, torch {torch.__version__}, {threads} threads, "
            f"Python {platform.python_version()}, {platform.system()} {platform.release()}")
    if device.startswith("cuda") and torch.cuda.is_available():
        desc += f", GPU {torch.cuda.get_device_name(0)}"
    return desc


def _rss_mib() -> float:
    with open("/proc/self/statm", encoding="utf-8") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def run_one(name: str, batch_size: int | None, warmup: int, repeats: int, device: str, threads: int) -> dict:
    """Benchmark encoder ``name`` in this process; returns a row dict."""
    import torch

    from fusebench.encoders import ENCODERS
    from fusebench.encoders.base import count_parameters

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    cls = ENCODERS.get(name)
    if not hasattr(cls, "benchmark_config") or not hasattr(cls, "example_batch"):
        return {"encoder": name, "error": "no benchmark_config()/example_batch() classmethods"}
    cfg = cls.benchmark_config()
    backbone = cls(**cfg)
    headless = getattr(cls, "default_task", None) is None  # no task head (pointnet2): time its embeddings
    if headless:
        model = backbone.to(device).train()
    else:  # the backbone with its own task's head, as the runner builds it
        from fusebench.training.model import for_backbone

        model = for_backbone(backbone).to(device).train()
    kwargs: dict[str, Any] = {} if batch_size is None else {"batch_size": batch_size}
    batch = cls.example_batch(cfg, seed=0, **kwargs)
    batch = _to_device(batch, device)
    inputs = ", ".join(f"{k} {'x'.join(map(str, v.shape))}" for k, v in batch["modalities"].items())
    cuda = device.startswith("cuda")

    def step() -> None:
        if headless:
            model.embed(batch).sum().backward()
        else:
            out = model(batch)
            model.task_loss(out, batch).backward()
        model.zero_grad(set_to_none=True)
        if cuda:
            torch.cuda.synchronize()

    base = _rss_mib()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated() / 2**20
    for _ in range(warmup):
        step()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        step()
        times.append((time.perf_counter() - t0) * 1000)
    if cuda:
        peak = torch.cuda.max_memory_allocated() / 2**20
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    config = {k: v for k, v in cfg.items() if k != "modalities"}
    return {
        "encoder": name,
        "config": ", ".join(f"{k}={v}" for k, v in config.items()),
        "inputs": inputs,
        "params_m": count_parameters(model) / 1e6,
        "ms": statistics.median(times),
        "peak_mib": peak,
        "delta_mib": peak - base,
    }


def _to_device(batch: dict, device: str) -> dict:
    import torch

    if device == "cpu":
        return batch
    out = dict(batch)
    out["modalities"] = {k: v.to(device) for k, v in batch["modalities"].items()}
    out["masks"] = {k: v.to(device) for k, v in batch.get("masks", {}).items()}
    out["present"] = batch["present"].to(device)
    if isinstance(batch.get("target"), torch.Tensor):
        out["target"] = batch["target"].to(device)
    return out


def format_table(rows: list[dict]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "|".join("---" for _ in COLUMNS) + "|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['encoder']} | not benchmarked: {r['error']} |" + " |" * (len(COLUMNS) - 2))
            continue
        lines.append(f"| {r['encoder']} | {r['config']} | {r['inputs']} | {r['params_m']:.2f} | {r['ms']:.1f} "
                     f"| {r['peak_mib']:.0f} | {r['delta_mib']:.0f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fusebench bench encoders", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--names", nargs="*", help="encoder ids or glob patterns (default: all registered)")
    parser.add_argument("--batch-size", type=int, default=None, help="override each encoder's benchmark batch size")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads (default 2)")
    parser.add_argument("--in-process", action="store_true", help="no subprocess per encoder (memory figures mix)")
    parser.add_argument("--json", help="also write the rows to this JSON file")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    ns = parser.parse_args(argv)
    if ns.repeats < 1 or ns.warmup < 0 or ns.threads < 1 or (ns.batch_size is not None and ns.batch_size < 1):
        parser.error("--repeats and --threads must be >= 1, --warmup >= 0, --batch-size >= 1")

    if ns.worker:
        row = run_one(ns.worker, ns.batch_size, ns.warmup, ns.repeats, ns.device, ns.threads)
        print("ROW " + json.dumps(row))
        return 0

    from fusebench.encoders import available

    names = available()
    if ns.names:
        unknown = [p for p in ns.names if not fnmatch.filter(names, p)]
        if unknown:
            parser.error(f"no encoder matches {unknown}; registered: {', '.join(names)}")
        names = [n for n in names if any(fnmatch.fnmatch(n, p) for p in ns.names)]
    print(f"# fusebench bench encoders — {machine_description(ns.device, ns.threads)}")
    print(f"# device {ns.device}; median of {ns.repeats} fwd+bwd steps after {ns.warmup} warm-up; "
          f"memory: {'CUDA max allocated' if ns.device.startswith('cuda') else 'peak process RSS'}")
    rows = []
    for name in names:
        if ns.in_process:
            try:
                rows.append(run_one(name, ns.batch_size, ns.warmup, ns.repeats, ns.device, ns.threads))
            except Exception as e:  # noqa: BLE001 - reported in the table
                rows.append({"encoder": name, "error": f"{type(e).__name__}: {e}"})
            continue
        cmd = [sys.executable, "-m", "fusebench.perf.encoders", "--worker", name, "--warmup", str(ns.warmup),
               "--repeats", str(ns.repeats), "--device", ns.device, "--threads", str(ns.threads)]
        if ns.batch_size is not None:
            cmd += ["--batch-size", str(ns.batch_size)]
        env = dict(os.environ, OMP_NUM_THREADS=str(ns.threads), MKL_NUM_THREADS=str(ns.threads))
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        row_lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("ROW ")]
        if proc.returncode != 0 or not row_lines:
            err = (proc.stderr.strip().splitlines() or ["unknown error"])[-1]
            rows.append({"encoder": name, "error": err[:200]})
        else:
            rows.append(json.loads(row_lines[-1][4:]))
    print(format_table(rows))
    if ns.json:
        with open(ns.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=2)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
