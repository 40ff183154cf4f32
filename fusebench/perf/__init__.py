"""``fusebench bench objectives|data|encoders|leaderboard|gpu|cells|threads``: speed and memory figures printed as tables.

Every speed / memory benchmark lives in this package, one module per target: ``objectives`` (its
``--vs ott``, ``--crossover`` and ``--step-time`` runs in ``vs_ott``, ``crossover`` and ``step_time``,
helpers shared by them in ``timing``), ``data``, ``encoders``, ``leaderboard``, ``gpu`` (its ``--cell``
busy fraction in ``gpu_cell``), ``cells`` (CPU seconds of whole cells, one checkout against another) and ``threads``
(a quickstart cell at default settings against one thread, beside a busy process). This module only dispatches.
"""

from __future__ import annotations

import argparse
import importlib

from fusebench.runtime.terminal_help import Parser

TARGETS = {
    "objectives": "fusebench.perf.objectives",
    "data": "fusebench.perf.data",
    "encoders": "fusebench.perf.encoders",
    "leaderboard": "fusebench.perf.leaderboard",
    "gpu": "fusebench.perf.gpu",
    "cells": "fusebench.perf.cells",
    "threads": "fusebench.perf.threads",
}


def json_path_problem(path: str) -> str | None:
    """Why the ``--json`` file ``path`` could not be written, checked before a bench measures anything (else the
    error came as a traceback after the whole run); None when it can be: not a folder, and its nearest existing
    folder above is a folder this user may write in."""
    import os
    from pathlib import Path

    target = Path(path).expanduser().absolute()
    if target.is_dir():
        return f"--json {path} is a folder; expected the JSON file to write"
    if target.exists():
        return None if os.access(target, os.W_OK) else f"--json {path}: the file is not writable by this user"
    above = next(q for q in target.parents if q.exists())
    if not above.is_dir():
        return f"--json {path}: cannot be made ({above} is a file, not a folder)"
    if not os.access(above, os.W_OK | os.X_OK):
        return f"--json {path}: cannot be made ({above} is not writable by this user)"
    return None


def main(argv: list[str]) -> int:
    parser = Parser(prog="fusebench bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("target", choices=sorted(TARGETS))
    parser.add_argument("args", nargs=argparse.REMAINDER)
    ns = parser.parse_args(argv)
    return int(importlib.import_module(TARGETS[ns.target]).main(ns.args) or 0)
