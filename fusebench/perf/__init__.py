"""``fusebench bench objectives|data|encoders|leaderboard``: speed and memory figures printed as tables.

Every speed / memory benchmark lives in this package, one module per target: ``objectives`` (its
``--vs ott``, ``--crossover`` and ``--step-time`` runs in ``vs_ott``, ``crossover`` and ``step_time``,
helpers shared by them in ``timing``), ``data``, ``encoders`` and ``leaderboard``. This module only
dispatches, and holds :func:`cpu_model` (the CPU's name for the benches' machine lines and run records).
"""

from __future__ import annotations

import argparse
import importlib
import platform

TARGETS = {
    "objectives": "fusebench.perf.objectives",
    "data": "fusebench.perf.data",
    "encoders": "fusebench.perf.encoders",
    "leaderboard": "fusebench.perf.leaderboard",
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
    parser = argparse.ArgumentParser(prog="fusebench bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("target", choices=sorted(TARGETS))
    parser.add_argument("args", nargs=argparse.REMAINDER)
    ns = parser.parse_args(argv)
    return int(importlib.import_module(TARGETS[ns.target]).main(ns.args) or 0)
