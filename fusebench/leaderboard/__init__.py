"""Markdown leaderboards (and their results as CSV / JSON) generated from run.json files, with how each table
compares its rows (primary metric, reference row) from the benchmark's current spec where one is installed,
else from the records' copy (:func:`fusebench.leaderboard.groups.spec_comparison`; the board says which)
(``fusebench leaderboard``; what the command does, table by table: :mod:`fusebench.leaderboard.cli` and
docs/leaderboards.md).

One concept per module, each importing only those above it:

- :mod:`~fusebench.leaderboard.columns`: a metric's unit, direction and header; how numbers print;
- :mod:`~fusebench.leaderboard.stats`: bootstrap CIs, Holm, paired tests, Friedman, Nemenyi CD (numpy, scipy);
- :mod:`~fusebench.leaderboard.groups`: run records -> comparability groups -> one group's view (rows with
  aliases merged, reference row, tests);
- :mod:`~fusebench.leaderboard.meta`: the metadata comment a board ends with, read back by the index;
- :mod:`~fusebench.leaderboard.table`: one group's table and the notes under it;
- :mod:`~fusebench.leaderboard.reported`: numbers printed in the papers (``reported.yaml``) and their section;
- :mod:`~fusebench.leaderboard.render`: the board markdown of one benchmark;
- :mod:`~fusebench.leaderboard.export`: the same board's results as data (CSV, JSON);
- :mod:`~fusebench.leaderboard.plots`: training curves, the CD diagram, the PNGs' input hash;
- :mod:`~fusebench.leaderboard.index`: the index README and the cross-dataset ranking;
- :mod:`~fusebench.leaderboard.writer`: writing a leaderboards folder; the repository's boards;
- :mod:`~fusebench.leaderboard.cli`: the command line.

Nothing here imports torch; matplotlib only to draw a plot.
"""

from __future__ import annotations

from fusebench.leaderboard.cli import main
from fusebench.leaderboard.groups import REFERENCE_ROWS, group_runs, load_runs, make_view
from fusebench.leaderboard.index import build_index
from fusebench.leaderboard.meta import BOARD_FORMAT, read_board_meta
from fusebench.leaderboard.render import benchmark_table
from fusebench.leaderboard.writer import repository_boards, write_leaderboards

__all__ = ["BOARD_FORMAT", "REFERENCE_ROWS", "benchmark_table", "build_index", "group_runs", "load_runs", "main",
           "make_view", "read_board_meta", "repository_boards", "write_leaderboards"]
