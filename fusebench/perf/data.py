"""``fusebench bench data [--quick] [--datasets GLOB]``: samples/s per adapter, raw files vs prepared cache.

For every registered adapter it builds the synthetic twin at a realistic size (the adapter's
``BENCH_SPEC`` class attribute, a dict of :class:`SyntheticSpec` fields, e.g. NYUv2 at 480x640 or
many EEG epochs; default ``{"num_samples": 128}``), reads samples through the official-format reader
(``use_cache=False``), prepares the cache in a temporary folder and reads the same samples through it,
single process, no augmentation. Each timing reads the samples in order until ``--seconds`` elapse
(at least one full pass over ``--max-samples``), after a warm-up read of the first 4 samples (lazily
opened handles; not a full pass, which would cost about a minute for raw NYUv2 at a few samples/s).
The output starts with the machine (CPU model, logical cores, load average). Targets (issue 3, 2 cores):
cached NYUv2 at 480x640 >= 500 samples/s; EEG >= 10 000 epochs/s; an adapter may declare
``BENCH_TARGET`` (samples/s) to appear in the target column.

``--quick`` uses a quarter of the samples (at least 8) and shorter timings: a smoke test of the
command, not a measurement.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import time
from typing import Any

from fusebench.runtime.terminal_help import Parser

DEFAULT_SPEC = {"num_samples": 128}
#: issue 3 targets by id, used when an adapter does not declare BENCH_TARGET
TARGETS = {"nyuv2": 500.0, "sleep_edf": 10_000.0, "physionet2018": 10_000.0}


def _touch(sample: dict[str, Any]) -> float:
    """Reduce every tensor to a number, so lazily mapped pages are really read."""
    s = 0.0
    for t in sample["modalities"].values():
        s += float(t.reshape(-1)[-1])
    return s


def _rate(ds: Any, max_samples: int, seconds: float) -> tuple[float, int]:
    n = min(len(ds), max_samples)
    for i in range(min(n, 4)):  # warm-up (page cache, lazy handles)
        _touch(ds[i])
    count = 0
    t0 = time.perf_counter()
    while True:
        for i in range(n):
            _touch(ds[i])
        count += n
        elapsed = time.perf_counter() - t0
        if elapsed >= seconds:
            return count / elapsed, n


def bench_adapter(cls: type, quick: bool, seconds: float, max_samples: int) -> dict[str, Any]:
    from fusebench.datasets import cache

    spec = dict(getattr(cls, "BENCH_SPEC", None) or DEFAULT_SPEC)
    if quick:
        spec["num_samples"] = max(8, int(spec.get("num_samples", 64)) // 4)
    split = "train" if "train" in cls.SPLITS else cls.SPLITS[0]
    kw = dict(split=split, synthetic=True, synthetic_spec=spec, use_cache=False, augment=False)
    t0 = time.perf_counter()
    raw = cls(**kw)
    t_twin = time.perf_counter() - t0
    shapes = {k: tuple(v.shape) for k, v in raw[0]["modalities"].items()}
    raw_rate, n = _rate(raw, max_samples, seconds)
    with tempfile.TemporaryDirectory(prefix="fusebench-bench-") as tmp:
        t0 = time.perf_counter()
        cache.prepare(raw, base=tmp, progress=False)
        t_prep = time.perf_counter() - t0
        cached = cls(**kw)
        cached.attach_cache(cache.open_cache(cached, base=tmp))
        cached_rate, _ = _rate(cached, max_samples, seconds)
        del cached
    return {"id": cls.id, "split": split, "n": len(raw), "timed": n, "shapes": shapes, "twin_s": t_twin,
            "prepare_s": t_prep, "raw": raw_rate, "cached": cached_rate,
            "target": getattr(cls, "BENCH_TARGET", None) or TARGETS.get(cls.id)}


def format_table(rows: list[dict[str, Any]]) -> str:
    head = ("dataset", "samples", "sample shapes", "raw/s", "cached/s", "speed-up", "prepare s", "target/s", "met")
    lines = [head]
    for r in rows:
        if "error" in r:
            lines.append((r["id"], "-", r["error"][:60], "-", "-", "-", "-", "-", "-"))
            continue
        shp = " ".join(f"{k}{list(v)}" for k, v in r["shapes"].items())
        tgt = r["target"]
        lines.append((r["id"], str(r["n"]), shp[:60], f"{r['raw']:,.0f}", f"{r['cached']:,.0f}",
                      f"{r['cached'] / r['raw']:.1f}x", f"{r['prepare_s']:.1f}",
                      f"{tgt:,.0f}" if tgt else "-", ("yes" if r["cached"] >= tgt else "NO") if tgt else "-"))
    widths = [max(len(row[i]) for row in lines) for i in range(len(head))]
    out = [" | ".join(c.ljust(w) for c, w in zip(row, widths)) for row in lines]
    out.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(out)


def main(argv: list[str]) -> int:
    p = Parser(prog="fusebench bench data", description=__doc__)
    p.add_argument("--quick", action="store_true", help="small twins, short timings (smoke test)")
    p.add_argument("--datasets", default=None, help="glob over adapter ids (default: all)")
    p.add_argument("--seconds", type=float, default=None, help="time per measurement (default 2, quick 0.3)")
    p.add_argument("--max-samples", type=int, default=256, help="distinct samples read per measurement")
    ns = p.parse_args(argv)
    if ns.max_samples < 1 or (ns.seconds is not None and not ns.seconds > 0):
        p.error(f"--max-samples must be >= 1 and --seconds > 0, got --max-samples {ns.max_samples}"
                + (f", --seconds {ns.seconds:g}" if ns.seconds is not None else ""))
    import torch  # after parsing: `fusebench bench data --help` imports no torch

    from fusebench import datasets

    seconds = ns.seconds if ns.seconds is not None else (0.3 if ns.quick else 2.0)
    names = datasets.available(ns.datasets)
    if not names:
        print(f"fusebench bench data: --datasets {ns.datasets!r} matches no dataset adapter; registered: "
              f"{', '.join(datasets.available())}", file=sys.stderr)
        return 2
    # the bench's own settings, given back when it ends: called in a process that goes on (a test, a notebook),
    # it left fusebench's warnings silenced and the torch threads at 2 for whatever ran after it
    log, level, threads = logging.getLogger("fusebench"), logging.getLogger("fusebench").level, torch.get_num_threads()
    torch.set_num_threads(min(2, threads))
    log.setLevel(logging.ERROR)
    try:
        rows = []
        for name in names:
            try:
                rows.append(bench_adapter(datasets.get(name), ns.quick, seconds, ns.max_samples))
            except Exception as e:  # one broken adapter must not hide the others' figures
                rows.append({"id": name, "error": f"{type(e).__name__}: {e}"})
            print(f"  {name}: done", flush=True)
        from fusebench.machine import cpu_model

        load = "; load average %.2f %.2f %.2f" % os.getloadavg() if hasattr(os, "getloadavg") else ""
        print(f"machine: {cpu_model()}; {os.cpu_count()} logical cores{load}")
        print(f"Data loading, single process, torch threads={torch.get_num_threads()}"
              f"{' (--quick: smoke test, not a measurement)' if ns.quick else ''}")
    finally:
        log.setLevel(level)
        torch.set_num_threads(threads)
    print(format_table(rows))
    return 1 if any("error" in r for r in rows) else 0
