"""``fusebench bench objectives|data|encoders|leaderboard``: speed and memory figures printed as tables.

Each target lives with its package (``fusebench.objectives.bench`` ...); this only dispatches.
"""

from __future__ import annotations

import argparse
import importlib
import platform

TARGETS = {
    "objectives": "fusebench.objectives.bench",
    "data": "fusebench.datasets.bench",
    "encoders": "fusebench.encoders.bench",
    "leaderboard": "fusebench.leaderboard_bench",
}


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux, else what :mod:`platform` says), for the benches'
    machine lines."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="fusebench bench", description=__doc__)
    parser.add_argument("target", choices=sorted(TARGETS))
    parser.add_argument("args", nargs=argparse.REMAINDER)
    ns = parser.parse_args(argv)
    return int(importlib.import_module(TARGETS[ns.target]).main(ns.args) or 0)
