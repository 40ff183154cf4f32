"""Markdown leaderboards (and their results as CSV / JSON) generated from run.json files, with how each table
compares its rows (primary metric, reference row) from the benchmark's current spec where one is installed,
else from the records' copy (:func:`fusebench.leaderboard.groups.spec_comparison`; the board says which)
(``fusebench leaderboard``; what the command does, table by table: :mod:`fusebench.leaderboard.cli` and
docs/leaderboards.md).

One concept per module, each importing only those above it:

- :mod:`~fusebench.leaderboard.columns`: a metric's unit, direction and header; how numbers print;
- :mod:`~fusebench.leaderboard.stats`: bootstrap CIs, Holm, paired tests, Friedman, Nemenyi CD (numpy, scipy);
- :mod:`~fusebench.leaderboard.grouping`: which run records share a table (comparability groups, one config
  per row); :mod:`~fusebench.leaderboard.differences`: where the runs differ from the current spec and code;
- :mod:`~fusebench.leaderboard.groups`: one comparability group's view (rows with aliases merged, reference row,
  tests);
- :mod:`~fusebench.leaderboard.meta`: the metadata comment a board ends with, read back by the index;
- :mod:`~fusebench.leaderboard.table`: one group's table and the notes under it;
- :mod:`~fusebench.leaderboard.reported`: numbers printed in the papers (``reported.yaml``) and their section;
- :mod:`~fusebench.leaderboard.render`: the board markdown of one benchmark;
- :mod:`~fusebench.leaderboard.export`: the same board's results as data (CSV, JSON);
- :mod:`~fusebench.leaderboard.plots`: training curves, the CD diagram, the PNGs' input hash;
- :mod:`~fusebench.leaderboard.index`: the index README and the cross-dataset ranking;
- :mod:`~fusebench.leaderboard.writer`: writing a leaderboards folder; the repository's boards;
- :mod:`~fusebench.leaderboard.fingerprint`: whether a regeneration can change anything (its manifest);
- :mod:`~fusebench.leaderboard.cli`: the command line.

Nothing here imports torch; matplotlib only to draw a plot.
"""

from __future__ import annotations

import importlib
from typing import Any

#: public name -> the module that defines it, imported on first use (PEP 562): ``fusebench leaderboard`` on
#: unchanged inputs (:mod:`~fusebench.leaderboard.fingerprint`) must not pay for the statistics and renderers
_LAZY = {"main": "cli", "group_runs": "grouping", "load_runs": "groups",
         "make_view": "groups", "build_index": "index", "BOARD_FORMAT": "meta", "read_board_meta": "meta",
         "benchmark_table": "render", "repository_boards": "writer", "write_leaderboards": "writer"}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"fusebench.leaderboard.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'fusebench.leaderboard' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
