"""``fusebench bench encoders``: forward+backward time, peak memory and parameter count per encoder.

Every id of :func:`fusebench.encoders.available` is benchmarked at its *benchmark input size*,
which each encoder class declares through two classmethods (the convention every encoder follows):

* ``benchmark_config() -> dict`` — constructor keyword arguments of the benchmarked variant;
* ``example_batch(config=None, batch_size=..., seed=0, **sizes) -> dict`` — a synthetic collated
  batch (layout of :mod:`fusebench.datasets.collate`) at the benchmark input size, with a target
  for ``task_loss``.

One step is ``loss = model.task_loss(model(batch), batch); loss.backward()`` in training mode, for
the backbone with the head of its ``default_task`` (:func:`fusebench.components.model.for_backbone`; a
backbone without one, ``pointnet2``, is timed on ``embed(batch).sum().backward()``). Each
encoder runs in a fresh subprocess (``python -m fusebench.perf.encoders --worker NAME``) so that
memory figures are not polluted by the others: on CPU, *peak RSS* is the process's maximum resident
set size (``getrusage``) after the timed steps and *Δ RSS* its increase over the resident size just
before the first step (activations, gradients, optimiser-free); on CUDA, peak memory is
``torch.cuda.max_memory_allocated``. Time is the median over ``--repeats`` steps after ``--warmup``
steps. An encoder that cannot be imported or lacks the two classmethods is listed with the reason.

``--pointnet-ops`` times PointNet++'s point-cloud ops instead (farthest point sampling, ball query, grouping
forward+backward, 3-NN interpolation forward+backward, at the sizes of a ``pointnet2`` config's first
levels, ``votenet`` by default) with each backend of :mod:`fusebench.encoders.pointnet2` on ``--device``:
the PyTorch code and, where Triton can run there, the Triton kernels, with whether their results agree.

Usage::

    fusebench bench encoders                       # all encoders, 2 threads, CPU
    fusebench bench encoders --names eeg_conv seq_transformer --repeats 5
    fusebench bench encoders --batch-size 4 --device cuda
    fusebench bench encoders --pointnet-ops --device cuda   # torch vs Triton, per op
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

from fusebench.runtime.terminal_help import Parser

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
        from fusebench.components.model import for_backbone

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


POINTNET_COLUMNS = ("op", "sizes", "torch (ms)", "triton (ms)", "torch / triton", "results")


def pointnet_ops(device: str, batch_size: int, warmup: int, repeats: int, threads: int, config: str) -> list[dict]:
    """Median time of each PointNet++ op per backend at the sizes of ``config``'s first levels."""
    import torch

    from fusebench.encoders import pointnet2 as P
    from fusebench.encoders import pointnet2_triton

    torch.set_num_threads(threads)
    cfg = P.get_config(config)
    b, n = batch_size, cfg.num_points
    (s1, s2, s3), (r1, k2) = cfg.npoints[:3], (cfg.radii[0], cfg.nsamples[1])
    g = torch.Generator().manual_seed(0)
    xyz = P.synthetic_scenes(b, n, seed=0, names=("points",))["modalities"]["points"]
    pick = [torch.randperm(n, generator=g)[:s1].sort().values for _ in range(b)]  # stand-in centroids
    lvl1 = torch.stack([xyz[i, pick[i]] for i in range(b)])
    c1 = cfg.sa_mlps[0][-1]
    group_x = torch.randn(b, s1, c1, generator=g)
    group_idx = torch.randint(0, s1, (b, s2, k2), generator=g)
    fp_c = cfg.sa_mlps[2][-1]
    fp_feats = torch.randn(b, fp_c, s3, generator=g)
    xyz, lvl1, group_x, group_idx, fp_feats = (t.to(device) for t in (xyz, lvl1, group_x, group_idx, fp_feats))
    cuda = device.startswith("cuda")

    def group(backend: str) -> Any:
        x = group_x.clone().requires_grad_()
        out = P.gather_points(x, group_idx, backend=backend)
        out.sum().backward()
        return out.detach()

    def interpolate(backend: str) -> Any:
        f = fp_feats.clone().requires_grad_()
        out = P.three_nn_interpolate(lvl1[:, :s2], lvl1[:, :s3], f, backend=backend)
        out.sum().backward()
        return out.detach()

    ops = [
        ("fps", f"{b}x{n} -> {s1}", lambda bk: P.farthest_point_sample(xyz, s1, backend=bk)),
        ("ball_query", f"{b}x{n}, {s1} centroids, r={r1}, k={cfg.nsamples[0]}",
         lambda bk: P.ball_query(xyz, lvl1, r1, cfg.nsamples[0], backend=bk)),
        ("group fwd+bwd", f"{b}x{s1}x{c1} by {b}x{s2}x{k2}", group),
        ("3-NN interpolate fwd+bwd", f"{s2} from {s3} points, {fp_c} channels, batch {b}", interpolate),
    ]
    reason = pointnet2_triton.unavailable(device)

    def timed(fn: Any, backend: str) -> tuple[float, Any]:
        for _ in range(warmup):
            fn(backend)
        times, out = [], None
        for _ in range(repeats):
            if cuda:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            out = fn(backend)
            if cuda:
                torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) * 1000)
        return statistics.median(times), out

    rows = []
    for name, sizes, fn in ops:
        row: dict[str, Any] = {"op": name, "sizes": sizes}
        row["torch_ms"], ref = timed(fn, "torch")
        if reason is not None:
            row["triton_error"] = reason
        else:
            row["triton_ms"], got = timed(fn, "triton")
            if ref.is_floating_point():
                row["results"] = f"max |diff| {float((ref - got).abs().max()):.2e}"
            else:
                row["results"] = "identical" if torch.equal(ref, got) else f"{int((ref != got).sum())} indices differ"
        rows.append(row)
    return rows


def format_pointnet_table(rows: list[dict]) -> str:
    lines = ["| " + " | ".join(POINTNET_COLUMNS) + " |", "|" + "|".join("---" for _ in POINTNET_COLUMNS) + "|"]
    for r in rows:
        if "triton_ms" in r:
            rest = f"{r['triton_ms']:.2f} | {r['torch_ms'] / r['triton_ms']:.1f}x | {r['results']}"
        else:
            rest = f"n/a | | {r.get('triton_error', '')}"
        lines.append(f"| {r['op']} | {r['sizes']} | {r['torch_ms']:.2f} | {rest} |")
    return "\n".join(lines)


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
    parser = Parser(prog="fusebench bench encoders", description=__doc__.split("\n\n")[0])
    parser.add_argument("--names", nargs="*", help="encoder ids or glob patterns (default: all registered)")
    parser.add_argument("--batch-size", type=int, default=None, help="override each encoder's benchmark batch size")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads (default 2)")
    parser.add_argument("--in-process", action="store_true", help="no subprocess per encoder (memory figures mix)")
    parser.add_argument("--json", help="also write the rows to this JSON file (with the machine line and the "
                        "settings: {machine, device, ..., rows})")
    parser.add_argument("--pointnet-ops", action="store_true",
                        help="time PointNet++'s point-cloud ops, PyTorch code vs Triton kernels, instead of encoders")
    parser.add_argument("--pointnet-config", default="votenet",
                        help="with --pointnet-ops: the pointnet2 config whose sizes are used (votenet, tiny)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    ns = parser.parse_args(argv)
    if ns.repeats < 1 or ns.warmup < 0 or ns.threads < 1 or (ns.batch_size is not None and ns.batch_size < 1):
        parser.error("--repeats and --threads must be >= 1, --warmup >= 0, --batch-size >= 1")
    from fusebench.perf import json_path_problem

    if ns.json and json_path_problem(ns.json):
        parser.error(json_path_problem(ns.json))
    if not ns.worker:  # a device that cannot run is a usage error, said once, not a table of failed rows
        from fusebench.runtime.utils import resolve_device

        try:
            resolve_device(ns.device)
        except ValueError as e:
            parser.error(str(e))

    if ns.pointnet_config != parser.get_default("pointnet_config") and not ns.pointnet_ops:
        parser.error("--pointnet-config sizes the --pointnet-ops timings only; add --pointnet-ops, or drop it")
    encoder_only = [o for o, given in (("--names", ns.names is not None), ("--in-process", ns.in_process)) if given]
    if ns.pointnet_ops and encoder_only:  # the ops table times PointNet++'s ops in this process, no encoder
        parser.error(f"{', '.join(encoder_only)} choose(s) how the encoders are timed, and --pointnet-ops times "
                     f"PointNet++'s point-cloud ops instead of encoders; drop {', '.join(encoder_only)}")
    if ns.pointnet_ops:
        from fusebench.encoders.pointnet2 import CONFIGS

        if ns.pointnet_config not in CONFIGS:
            parser.error(f"--pointnet-config must be one of {sorted(CONFIGS)}, got {ns.pointnet_config!r}")
        print(f"# fusebench bench encoders --pointnet-ops — {machine_description(ns.device, ns.threads)}")
        print(f"# device {ns.device}; config {ns.pointnet_config}; median of {ns.repeats} calls after {ns.warmup} "
              "warm-up (Triton compiles in the first)")
        rows = pointnet_ops(ns.device, ns.batch_size or 2, ns.warmup, ns.repeats, ns.threads, ns.pointnet_config)
        print(format_pointnet_table(rows))
        if ns.json:  # whole or not at all, strict JSON (NaN as null), and said where
            from fusebench.io import atomic_write_json

            doc = {"machine": machine_description(ns.device, ns.threads), "device": ns.device,
                   "config": ns.pointnet_config, "batch_size": ns.batch_size or 2, "warmup": ns.warmup,
                   "repeats": ns.repeats, "rows": rows}
            print(f"\n# rows written to {atomic_write_json(ns.json, doc)}")
        return 0

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
    if ns.json:  # whole or not at all, strict JSON (NaN as null), and said where; the figures with their machine
        from fusebench.io import atomic_write_json

        doc = {"machine": machine_description(ns.device, ns.threads), "device": ns.device, "threads": ns.threads,
               "batch_size": ns.batch_size, "warmup": ns.warmup, "repeats": ns.repeats,
               "memory": "CUDA max allocated" if ns.device.startswith("cuda") else "peak process RSS", "rows": rows}
        print(f"\n# rows written to {atomic_write_json(ns.json, doc)}")
    failed = [r["encoder"] for r in rows if "error" in r]
    if failed:  # the table says why; the exit status says that something was not measured
        print(f"fusebench bench encoders: {len(failed)} of {len(rows)} encoder(s) not benchmarked: "
              f"{', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
