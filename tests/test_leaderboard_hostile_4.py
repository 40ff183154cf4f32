"""Boards from records a careless or hostile hand changed (leaderboard review, round 4): each test copies committed run
records (``leaderboards/runs/quickstart``) into a temporary runs folder, edits them and runs the real regeneration.

- a comparison whose primary metric no run of the table scored is refused (the board ranked by its first metric in
  its place, under the comparison's "why" about the other metric);
"""

from __future__ import annotations

import json
from pathlib import Path

from test_leaderboard_hostile_3 import _one_error_line, _without_spec
from test_records_hostile import _copy


def test_a_primary_metric_no_run_scored_is_refused_not_replaced(tmp_path: Path, capsys) -> None:
    runs = _copy(tmp_path, objectives=("raw", "none", "m3g"))
    folder = _without_spec(runs)
    for path in sorted(folder.glob("*/seed*/run.json")):  # outside the config hash: no rehash needed
        rec = json.loads(path.read_text())
        rec["comparison"] = {"primary": "fs1_best_acc", "reference": "raw",
                             "why": "1-shot accuracy separates the rows best"}
        path.write_text(json.dumps(rec, indent=2))
    first = sorted(folder.glob("*/seed*/run.json"))[:3]
    assert _one_error_line(runs, tmp_path / "out", capsys) == (
        "fusebench leaderboard: benchmark 'qs-nospec': the board ranks by 'fs1_best_acc' (the runs' comparison block) "
        "but no run of this table scored it (they scored 'acc', 'bacc'; e.g. "
        f"{', '.join(map(str, first))} and 6 more): re-run the runs with a config that scores it, or rank by a metric "
        "they scored (comparison.primary)")
