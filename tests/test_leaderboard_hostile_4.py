"""Boards from records a careless or hostile hand changed (leaderboard review, round 4): each test copies committed run
records (``leaderboards/runs/quickstart``) into a temporary runs folder, edits them and runs the real regeneration.

- a comparison whose primary metric no run of the table scored is refused (the board ranked by its first metric in
  its place, under the comparison's "why" about the other metric);
- a tuned row's grid names and values are drawn on the sensitivity plot as text, never parsed as mathtext;
- values near the float limit (a curve's, a selection score's) are left out of the plots, which are drawn.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

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


def test_a_grid_name_with_dollar_signs_is_drawn_as_text_not_mathtext(tmp_path: Path) -> None:
    """A tuned row's grid name and values are the records' text: the sensitivity plot shows them as they are. A "$"
    pair was parsed as mathtext, and a bad one ("$\\bad{$") stopped the regeneration with a pyparsing traceback
    after the curves plot was written."""
    from PIL import Image

    from fusebench.leaderboard import write_leaderboards
    from fusebench.leaderboard.plots import PLOT_KEY
    from test_records_hostile import _edit

    name = "$\\bad{$"
    runs = _copy(tmp_path, "mv-3sources", objectives=("raw", "m3g"), seeds=(0, 1))

    def rename(rec: dict) -> None:  # the selection's grid key eps renamed (hparam_selection is outside the hash)
        hs = rec["hparam_selection"]
        hs["grid"] = {name: hs["grid"]["eps"] + ["$x^$"]}
        hs["choice"] = {name: hs["choice"]["eps"]}
        for s in hs["scores"]:
            s["hparams"] = {name: s["hparams"]["eps"]}
        hs["scores"].append({"hparams": {name: "$x^$"}, "val": 0.25})
        hs.pop("at_edge", None)

    _edit(runs, rename, objective="m3g")
    out = tmp_path / "out"
    write_leaderboards(runs, out, plots=True, formats=("md",))
    with Image.open(out / "mv-3sources-sensitivity.png") as im:
        assert im.format == "PNG" and PLOT_KEY in im.info
    md = (out / "mv-3sources.md").read_text()
    # the board's table: md_text of the name and the value, by hand ("$" and "\\" escaped with a backslash)
    assert "Grid \\$\\\\bad{\\$; validation `fs1_best_acc` (%)" in md
    assert "| 1.0 | 2.0 | \\$x^\\$ |" in md and "| 36.57 | 25.00 |" in md


def test_values_near_the_float_limit_leave_the_plots_drawn(tmp_path: Path, capsys) -> None:
    """A record's curves may hold any finite value (and NaN, infinities: a plot skips them); one near the float limit
    (1e308 beside -1e308) and a selection score of 1.7e308 (of a metric of unit raw, as a plugin's is) made matplotlib
    fail to lay out the axis ("arange: cannot compute length") while the boards were being written: one line naming
    no file, after the files written before it. Such values are left out of the plots as non-finite ones are."""
    from PIL import Image

    from fusebench.leaderboard import main
    from fusebench.leaderboard.plots import PLOT_KEY, drawable
    from test_records_hostile import _edit

    assert [drawable(x) for x in (1e300, -1e300, 1.0000001e300, 1e308, float("inf"), float("nan"))] == [
        True, True, False, False, False, False]
    runs = _copy(tmp_path, "mv-3sources", objectives=("raw", "m3g"), seeds=(0, 1))

    def huge(rec: dict) -> None:  # curves and hparam_selection are outside the config hash
        loss = rec["curves"]["pretrain_loss"]
        loss[:2] = [1e308, -1e308]
        rec["hparam_selection"]["metric"] = "plugin_score"  # no metric of the registry: unit raw, any number
        rec["hparam_selection"]["scores"][0]["val"] = 1.7e308
        rec["hparam_selection"]["scores"][0].pop("val_by_seed", None)

    _edit(runs, huge, objective="m3g")
    out = tmp_path / "out"
    assert main(["--runs", str(runs), "--out", str(out), "--format", "md", "--no-progress"]) == 0, capsys.readouterr()
    for plot in ("mv-3sources-curves.png", "mv-3sources-sensitivity.png"):
        with Image.open(out / plot) as im:
            assert im.format == "PNG" and PLOT_KEY in im.info


def test_a_selection_score_outside_its_fraction_metrics_range_is_refused(tmp_path: Path, capsys) -> None:
    """A tuned row's validation scores (``hparam_selection.scores``) of a metric of unit fraction lie in [0, 1], as
    the record's own value of that metric must: the board showed a score of 1e20 as a 23-digit percentage and a seed's
    -3.0 inside a mean of -66.67 %. Undefined scores (null, NaN) stay accepted."""
    from test_records_hostile import _edit

    runs = _copy(tmp_path, "mv-3sources", objectives=("raw", "m3g"), seeds=(0,))
    path = runs / "mv-3sources" / "m3g" / "seed0" / "run.json"
    committed = json.loads(path.read_text())
    assert committed["hparam_selection"]["metric"] == "fs1_best_acc"

    def scores(val: object, by_seed: object) -> None:
        def change(rec: dict) -> None:
            rec["hparam_selection"]["scores"][0]["val"] = val
            rec["hparam_selection"]["scores"][1]["val_by_seed"]["1001"] = by_seed
        path.write_text(json.dumps(committed))
        _edit(runs, change, objective="m3g")

    scores(1.5, 0.5)
    assert _one_error_line(runs, tmp_path / "out", capsys) == (
        f"fusebench leaderboard: {path}: field 'hparam_selection.scores[0].val': expected a number in [0, 1] (metric "
        "'fs1_best_acc' has unit 'fraction' in the metric registry), or null / NaN when undefined, got number 1.5")
    scores(0.5, -3.0)
    assert _one_error_line(runs, tmp_path / "out", capsys) == (
        f"fusebench leaderboard: {path}: field 'hparam_selection.scores[1].val_by_seed.1001': expected a number in "
        "[0, 1] (metric 'fs1_best_acc' has unit 'fraction' in the metric registry), or null / NaN when undefined, got "
        "number -3.0")
    scores(None, float("nan"))  # undefined: accepted, the board is written
    from fusebench.leaderboard import write_leaderboards

    write_leaderboards(runs, tmp_path / "out", plots=False, formats=("md",))
    assert (tmp_path / "out" / "mv-3sources.md").is_file()


def test_board_metadata_giving_a_key_twice_is_refused_naming_the_board(tmp_path: Path) -> None:
    """A board's metadata comment is read as strictly as a record: two equal keys in one object (json keeps the last
    silently, so the board would say what its second copy says) are one error naming the file and the key."""
    from fusebench.leaderboard.meta import read_board_meta

    text = (Path(__file__).resolve().parents[1] / "leaderboards" / "quickstart.md").read_text(encoding="utf-8")
    assert read_board_meta(_write(tmp_path / "quickstart.md", text))  # as committed: read
    doubled = text.replace('"primary": "acc",', '"primary": "acc", "primary": "bacc",', 1)
    assert doubled != text
    with pytest.raises(ValueError, match=r"quickstart\.md: board metadata: key 'primary' given twice in one object"):
        read_board_meta(_write(tmp_path / "quickstart.md", doubled))


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_a_plot_that_fails_to_draw_leaves_the_folder_as_it_was(tmp_path: Path, monkeypatch) -> None:
    """The plots are drawn into memory before the first file is written: a plot that fails (here, after the curves
    plot was drawn) stops the regeneration with no file written. They were drawn and written board by board, so a
    failure left the folder part new, part old (the PNGs drawn before it written, the boards not)."""
    import fusebench.leaderboard.plots as plotting
    from fusebench.leaderboard.writer import write_leaderboards

    runs = _copy(tmp_path)
    real = plotting.plot_curves

    def draws_then_fails(view, path):
        assert real(view, path)  # drawn (into memory while staged)
        raise RuntimeError("the next plot failed")

    monkeypatch.setattr(plotting, "plot_curves", draws_then_fails)
    out = tmp_path / "boards"
    with pytest.raises(RuntimeError, match="the next plot failed"):
        write_leaderboards(runs, out)
    assert not out.exists() or not any(out.iterdir())
    monkeypatch.setattr(plotting, "plot_curves", real)
    written = write_leaderboards(runs, out)
    assert {p.name for p in written} >= {"quickstart.md", "quickstart-curves.png", "README.md"}
    assert (out / "quickstart-curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
