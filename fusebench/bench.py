"""``fusebench bench objectives|data|encoders|leaderboard``: speed and memory figures printed as tables.

Each target lives with its package (``fusebench.objectives.bench`` ...); this only dispatches.
"""

from __future__ import annotations

import argparse
import importlib

TARGETS = {
    "objectives": "fusebench.objectives.bench",
    "data": "fusebench.datasets.bench",
    "encoders": "fusebench.encoders.bench",
    "leaderboard": "fusebench.leaderboard_bench",
}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="fusebench bench", description=__doc__)
    parser.add_argument("target", choices=sorted(TARGETS))
    parser.add_argument("args", nargs=argparse.REMAINDER)
    ns = parser.parse_args(argv)
    return int(importlib.import_module(TARGETS[ns.target]).main(ns.args) or 0)
