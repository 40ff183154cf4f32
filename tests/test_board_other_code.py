"""A board says where its runs were made by other code than the current one (a version of their objective,
encoder, method or metric: what a rerun would not reuse), and the index names such boards beside the ranking.
The records are copies of committed ones with the version they state edited: what a record of older code states."""

from __future__ import annotations

import json
from pathlib import Path

from fusebench.leaderboard import write_leaderboards

from test_metric_rankings import _copy_runs


def _as_current(rec: dict) -> None:
    """The record as the current code states its versions (the committed ones await a rerun under newer code)."""
    from fusebench import benchmarks, metrics as M
    from fusebench.components.identity import cell_versions
    from fusebench.records.comparability import comparability_key

    now = cell_versions(benchmarks.load(rec["benchmark"]), rec["objective"])
    if "metrics" in rec["versions"]:  # the metric versions in one table (records before schema 4)
        rec["versions"] = {**now, "metrics": {m: M.metadata(m)["version"] for m in rec["versions"]["metrics"]}}
    else:  # each metric entry states its version (schema 4)
        rec["versions"] = now
        for m, entry in rec["metrics"].items():
            entry["version"] = M.metadata(m)["version"]
    rec["comparability_key"] = comparability_key(rec)


def _older_metric(rec: dict) -> None:
    from fusebench.records.comparability import comparability_key

    _as_current(rec)
    if "metrics" in rec["versions"]:
        rec["versions"]["metrics"]["fs1_best_acc"] = "0"  # a schema-2 record's metric versions
    else:
        rec["metrics"]["fs1_best_acc"]["version"] = "0"  # a schema-4 record's metric entry
    rec["comparability_key"] = comparability_key(rec)  # which holds them: as that code would have written it


def test_a_board_of_runs_made_by_other_code_says_what_changed_and_the_index_names_it(tmp_path: Path) -> None:
    from fusebench import metrics as M

    now = M.metadata("fs1_best_acc")["version"]
    runs = _copy_runs(tmp_path, _older_metric)
    write_leaderboards(runs, tmp_path / "lb", plots=False, formats=("md",))
    md = (tmp_path / "lb" / "mv-3sources.md").read_text()
    n = len(list(runs.glob("mv-3sources/*/seed*/run.json")))
    assert n == 20
    assert (f"**Made by other code than the current one**: metric 'fs1_best_acc' version '0', now '{now}' "
            f"({n} of {n} runs)" in md)
    assert "`fusebench run mv-3sources` would not reuse them" in md
    meta = json.loads(md.rsplit("<!-- fusebench-board ", 1)[1].rsplit(" -->", 1)[0])
    assert meta["groups"][0]["other_code"] == [f"metric 'fs1_best_acc' version '0', now '{now}'"]
    # the same runs as the current code states them: no note, no metadata field
    write_leaderboards(_copy_runs(tmp_path / "b", _as_current), tmp_path / "lb2", plots=False, formats=("md",))
    md2 = (tmp_path / "lb2" / "mv-3sources.md").read_text()
    assert "Made by other code" not in md2 and '"other_code"' not in md2


def test_the_index_names_the_boards_made_by_other_code() -> None:
    from fusebench.leaderboard.index import build_index, cross_dataset_ranking

    means = {"b1": {"a": .5, "b": .4}, "b2": {"a": .6, "b": .4}}
    boards = {n: {"groups": [{"kind": "real", "protocol": "embedding_eval", "direction": "higher", "primary": "fs1",
                              "means": m}]} for n, m in means.items()}
    boards["b2"]["groups"][0]["other_code"] = ["metric 'fs1' version '1', now '2'", "<b>x</b>"]
    md = build_index(boards, None, cross_dataset_ranking(boards))
    assert ("**Boards made by other code than the current one** (their runs' numbers, which a rerun would compute "
            "again; each board says what changed): [b2](b2.md) (metric 'fs1' version '1', now '2', &lt;b&gt;x&lt;/b&gt;)"
            in md)
    del boards["b2"]["groups"][0]["other_code"]
    assert "made by other code" not in build_index(boards, None, cross_dataset_ranking(boards))
