"""The hyper-parameter sensitivity section of a ranked board (issue #30, item 2): every grid point's
validation score per tuned objective (mean over the selection seeds), the chosen point marked, grid edges
said, as a table and a plot; read from the records' ``hparam_selection`` in both layouts (the committed
records' and the frozen selection files of fusebench/sweep/selection.py); test scores never shown."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from fusebench.leaderboard import write_leaderboards
from fusebench.leaderboard.plots import PLOT_KEY, png_text
from fusebench.grids import at_edge
from fusebench.records import RecordError

# the committed records' layout (before issue #30): "metric" is a text, no "at_edge"; a "test" number that the
# board must never show (written into the fixture as a trap)
OLD = {"choice": {"tau": 0.1}, "grid": {"tau": [0.1, 0.5]}, "metric": "validation acc (mean over 3 selection seeds)",
       "scores": [{"hparams": {"tau": 0.1}, "val": 0.75, "val_by_seed": {"1000": 0.7, "1001": 0.8, "1002": 0.75},
                   "test": 0.1234},
                  {"hparams": {"tau": 0.5}, "val": 0.70, "val_by_seed": {"1000": 0.7, "1001": 0.7, "1002": 0.7},
                   "test": 0.5678}],
       "seed": 1000, "seeds": [1000, 1001, 1002]}
# a frozen selection file's layout (fusebench.sweep.selection): metric id, rule, at_edge, identity fields
NEW = {"benchmark": "toy", "objective": "m3g", "metric": "acc", "rule": "mean validation acc ...",
       "grid": {"eps": [0.05, 0.1, 0.2]}, "seed": 1000, "seeds": [1000, 1001],
       "scores": [{"hparams": {"eps": 0.05}, "val": 0.6, "val_by_seed": {"1000": 0.6, "1001": 0.6}},
                  {"hparams": {"eps": 0.1}, "val": 0.8125, "val_by_seed": {"1000": 0.8, "1001": 0.825}},
                  {"hparams": {"eps": 0.2}, "val": 0.7, "val_by_seed": {"1000": 0.7, "1001": 0.7}}],
       "choice": {"eps": 0.1}, "at_edge": [], "config_hash": "abc", "synthetic": False, "data_sha256": None}


def _record(obj: str, seed: int, acc: float, selection: dict | None, synthetic: bool = False) -> dict:
    rec = {
        "schema_version": 1, "suite_version": "0.1.0", "benchmark": "toy", "objective": obj, "seed": seed,
        "metrics": {"acc": acc}, "config": {"metrics": ["acc"], "selection_metric": "acc", "seeds": [0, 1],
                                            "dataset": {"id": "toy", "synthetic_only": False}},
        "dataset": {"id": "toy", "synthetic": synthetic, "manifest_hash": "ab12cd34"},
        "selection": {"rule": "best validation acc"}, "pretrain_time_s": 1.0, "peak_memory_mb": 10.0}
    if selection is not None:
        rec["hparam_selection"] = selection
    return rec


def _runs(tmp_path: Path, selections: dict, **kw) -> Path:
    runs = tmp_path / "runs"
    for i, (obj, sel) in enumerate(selections.items()):
        for s in range(2):
            d = runs / "toy" / obj / f"seed{s}"
            d.mkdir(parents=True, exist_ok=True)
            (d / "run.json").write_text(json.dumps(_record(obj, s, 0.5 + 0.1 * i + 0.01 * s, sel, **kw)))
    return runs


def _section(md: str) -> str:
    return md.split("## Hyper-parameter sensitivity")[1].split("\n## ")[0]


def _table(section: str, first: str) -> dict[str, list[str]]:
    lines = section.split(first)[1].split("\n\n")[1].splitlines()
    return {c[0]: c[1:] for c in ([x.strip() for x in re.split(r"(?<!\\)\|", ln)[1:-1]] for ln in lines)}


def test_section_from_both_layouts_marks_choice_and_edges_never_test(tmp_path: Path) -> None:
    runs = _runs(tmp_path, {"infonce_avg": OLD, "m3g": NEW, "raw": None})
    out = tmp_path / "lb"
    write_leaderboards(runs, out)
    md = (out / "toy.md").read_text()
    sec = _section(md)
    tau = _table(sec, "Grid `tau`; validation `acc` (%), mean over 3 selection seed(s):")
    assert tau["objective"] == ["0.1", "0.5"]
    assert tau["`infonce_avg`"] == ["**75.00 ✓**", "70.00"]
    eps = _table(sec, "Grid `eps`; validation `acc` (%), mean over 2 selection seed(s):")
    assert eps["objective"] == ["0.05", "0.1", "0.2"] and eps["`m3g`"] == ["60.00", "**81.25 ✓**", "70.00"]
    # tau 0.1 is the smallest of [0.1, 0.5] (computed: the old record has no at_edge); eps 0.1 is inside
    assert "Chosen on an edge of this grid (the optimum may lie outside it): `infonce_avg` (tau = 0.1, smallest)." in sec
    assert "`m3g` (eps" not in sec
    assert "12.34" not in md and "56.78" not in md  # the selection runs' test scores are never shown
    assert "`raw`" not in sec  # an untuned row has no line
    # the plot: written, its inputs' hash in a text chunk, linked; unchanged runs: not redrawn
    png = out / "toy-sensitivity.png"
    assert "![hyper-parameter sensitivity](toy-sensitivity.png)" in sec
    key = png_text(png)[PLOT_KEY]
    before = png.stat()
    write_leaderboards(runs, out)
    after = png.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert png_text(png)[PLOT_KEY] == key
    assert not list(out.glob(".*"))  # no temporary file left behind


def test_no_edge_says_so_and_no_plots_links_nothing(tmp_path: Path) -> None:
    out = tmp_path / "lb"
    write_leaderboards(_runs(tmp_path, {"m3g": NEW}), out, plots=False)
    sec = _section((out / "toy.md").read_text())
    assert "Every chosen point lies inside its grid." in sec
    assert "sensitivity.png" not in sec and not (out / "toy-sensitivity.png").exists()


def test_boards_without_tuned_rows_or_pipeline_checks_have_no_section(tmp_path: Path) -> None:
    out = tmp_path / "lb"
    write_leaderboards(_runs(tmp_path / "a", {"raw": None}), out)
    assert "Hyper-parameter sensitivity" not in (out / "toy.md").read_text()
    assert not (out / "toy-sensitivity.png").exists()
    check = {**NEW}
    runs = _runs(tmp_path / "b", {"m3g": check}, synthetic=True)
    for p in runs.rglob("run.json"):  # a pipeline check ranks nothing: no sensitivity either
        rec = json.loads(p.read_text())
        rec["config"]["options"] = {"board": "pipeline_check"}
        p.write_text(json.dumps(rec))
    write_leaderboards(runs, tmp_path / "lb2")
    md = (tmp_path / "lb2" / "toy.md").read_text()
    assert "**Pipeline check**" in md and "Hyper-parameter sensitivity" not in md


def test_malformed_score_is_one_error_and_nothing_is_written(tmp_path: Path) -> None:
    bad = json.loads(json.dumps(NEW))
    bad["scores"][1]["val"] = "high"
    out = tmp_path / "lb"
    with pytest.raises(RecordError, match=r"hparam_selection\.scores\[1\]\.val"):
        write_leaderboards(_runs(tmp_path, {"m3g": bad}), out)
    assert not out.exists() or not any(out.iterdir())


@pytest.mark.parametrize("grid, choice, edge", [
    ({"tau": [0.05, 0.1, 0.2, 0.5, 1.0]}, {"tau": 0.05}, ["tau"]),
    ({"tau": [0.05, 0.1, 0.2, 0.5, 1.0]}, {"tau": 0.2}, []),
    ({"eps": [0.5]}, {"eps": 0.5}, []), ({"m": ["a", "b"]}, {"m": "a"}, []),
    ({"m": [0.99, 0.996], "h": [128, 512]}, {"m": 0.996, "h": 128}, ["h", "m"]),
    ({"b": [True, False]}, {"b": True}, []), ({"x": [1, 1]}, {"x": 1}, []), ({"x": [1, 2]}, {}, [])])
def test_edge_rule_is_one_function_for_the_selection_and_the_board(grid: dict, choice: dict, edge: list) -> None:
    from fusebench.leaderboard import sensitivity
    from fusebench.sweep import selection

    assert at_edge(grid, choice) == edge  # worked out by hand
    assert selection.at_edge is at_edge and sensitivity.at_edge is at_edge  # one rule (fusebench.grids)
