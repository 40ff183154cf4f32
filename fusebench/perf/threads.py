"""``fusebench bench threads``: the thread trap, measured (issue #32).

Runs one quickstart cell (``--objective``, default ``infonce_pwe``, seed 0, the benchmark's full budget
unless ``--set`` says otherwise) as ``fusebench run`` in a fresh process, with **default settings** (no
``OMP_NUM_THREADS``, no ``--threads``: the thread rule of :mod:`fusebench.engine.threads`) and with
``OMP_NUM_THREADS=1``, ``--repeat`` times each in ABBA order, while another process it starts keeps one core
busy (``--no-busy``: without it). It prints each cell's time (the record's ``wall_time_s``: the cell alone,
not the interpreter start), the ratio *default / one thread* of the best times and whether the two
settings gave the same metrics; the exit status is 1 when the ratio exceeds ``--limit`` (default 1.1) or
the metrics differ. ``--torch-default`` adds a run at PyTorch's own default (``--threads`` = the cores of
the machine), the trap this rule avoids (slow: about 8x on a loaded 2-core machine). Numbers: docs/cluster.md.

Example::

    fusebench bench threads
    fusebench bench threads --repeat 2 --set pretrain.epochs=5
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from fusebench.runtime.terminal_help import Keyed, Parser

THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


def settings_env(mode: str, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a timed run: ``default`` without any thread variable (the rule decides),
    ``one`` with ``OMP_NUM_THREADS=1``, ``torch`` without them (``--threads`` gives the count)."""
    env = {k: v for k, v in (os.environ if base is None else base).items() if k not in THREAD_VARS}
    if mode == "one":
        env["OMP_NUM_THREADS"] = "1"
    return env


def run_cell(mode: str, out: Path, objective: str, overrides: list[str]) -> tuple[float, dict, str]:
    """One fresh ``fusebench run quickstart`` cell in ``out``: (the cell's wall_time_s, its metrics, its
    start line's thread count)."""
    cmd = [sys.executable, "-m", "fusebench", "run", "quickstart", "--objective", objective, "--seeds", "0",
           "--out", str(out)]
    if mode == "torch":
        cmd += ["--threads", str(os.cpu_count() or 1)]
    for o in overrides:
        cmd += ["--set", o]
    env = settings_env(mode)
    env["FUSEBENCH_LOG_EVERY"] = "3600"
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited with {proc.returncode}:\n{proc.stderr[-2000:]}")
    record = json.loads((out / "quickstart" / objective / "seed0" / "run.json").read_text(encoding="utf-8"))
    threads = next((w.split("=", 1)[1] for line in proc.stderr.splitlines() if " start quickstart/" in line
                    for w in line.split() if w.startswith("threads=")), "?")
    from fusebench.metrics import values_of

    return float(record["wall_time_s"]), values_of(record["metrics"]), threads


def main(argv: list[str]) -> int:
    p = Parser(prog="fusebench bench threads", description=__doc__)
    p.add_argument("--objective", default="infonce_pwe", help="the quickstart objective of the cell (default infonce_pwe)")
    p.add_argument("--set", dest="overrides", action=Keyed, default=[], metavar="KEY=VALUE",
                   help="override a spec value of the cell, as fusebench run --set (repeatable)")
    p.add_argument("--repeat", type=int, default=2, help="timed cells per setting (best time kept; default 2)")
    p.add_argument("--limit", type=float, default=1.1, help="the largest ratio default / one thread accepted")
    p.add_argument("--no-busy", dest="busy", action="store_false", help="no busy process beside the cells")
    p.add_argument("--torch-default", action="store_true",
                   help="also time PyTorch's own default (a thread per core: the trap; slow)")
    ns = p.parse_args(argv)
    if ns.repeat < 1:
        print("fusebench bench threads: --repeat must be >= 1", file=sys.stderr)
        return 2
    if not ns.limit > 0:  # a ratio of two times: at most 0 fails every run whatever it measures
        print(f"fusebench bench threads: --limit must be a ratio > 0, got {ns.limit:g}", file=sys.stderr)
        return 2
    from fusebench.machine import cpu_model

    modes = ["default", "one"] + (["torch"] if ns.torch_default else [])
    times: dict[str, list[float]] = {m: [] for m in modes}
    metrics: dict[str, dict] = {}
    threads: dict[str, str] = {}
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if ns.busy else None
    try:
        with tempfile.TemporaryDirectory(prefix="fusebench-bench-threads-") as tmp:
            for i in range(ns.repeat):
                for m in (modes if i % 2 == 0 else modes[::-1]):  # ABBA: a drift in the machine's load cancels
                    t, metrics[m], threads[m] = run_cell(m, Path(tmp) / f"{m}{i}", ns.objective, ns.overrides)
                    times[m].append(t)
    except (RuntimeError, OSError, ValueError, KeyError) as e:
        print(f"fusebench bench threads: {e}", file=sys.stderr)
        return 2
    finally:
        if busy is not None:
            busy.kill()
            busy.wait()
    load = " load average %.2f %.2f %.2f;" % os.getloadavg() if hasattr(os, "getloadavg") else ""
    print(f"quickstart cell {ns.objective} seed 0 ({' '.join(ns.overrides) or 'full budget'}); {cpu_model()}, "
          f"{os.cpu_count()} logical cores;{load} {'one busy process beside it' if ns.busy else 'no busy process'}")
    names = {"default": "default settings", "one": "OMP_NUM_THREADS=1", "torch": "PyTorch default"}
    for m in modes:
        print(f"  {names[m]:<18} threads={threads[m]:<3} cell {min(times[m]):8.2f} s (best of {len(times[m])})")
    ratio = min(times["default"]) / min(times["one"])
    same = all(metrics[m] == metrics["one"] for m in modes)
    print(f"ratio default / one thread: {ratio:.3f} (limit {ns.limit:g}); metrics identical across settings: "
          f"{'yes' if same else 'NO'}")
    if ns.torch_default:
        print(f"ratio PyTorch default / one thread: {min(times['torch']) / min(times['one']):.2f}")
    return 0 if ratio <= ns.limit and same else 1


__all__ = ["main", "run_cell", "settings_env"]
