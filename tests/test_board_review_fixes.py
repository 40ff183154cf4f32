"""A hostile review of the boards (2026-12-01), each finding reproduced on committed records copied and edited:
a ``git`` field that is no mapping crashed the HTML page; a benchmark named ``index`` overwrote the index page; a
folder where a board file goes left half the boards written; missing-view metrics were not range-checked; control
characters reached the CSV and the HTML page."""

from __future__ import annotations

import csv
import io
import json
import shutil

import pytest

import fusebench.leaderboard as lb
from test_records_hostile import COMMITTED, _copy, _edit, _one_error_line


def test_a_git_field_that_is_no_mapping_is_one_line_naming_the_file(tmp_path, capsys):
    runs = _copy(tmp_path, objectives=("m3g",))
    [path, *_] = _edit(runs, lambda r: r.__setitem__("git", "deadbeef"), objective="m3g", seed="0")
    line = _one_error_line(runs, tmp_path / "out", capsys)
    assert str(path) in line and "git" in line and "a mapping" in line
    _edit(runs, lambda r: r.__setitem__("git", {"sha": 5}), objective="m3g", seed="0")
    assert "git.sha" in _one_error_line(runs, tmp_path / "out", capsys)


@pytest.mark.parametrize("value", [7.5, -3.0, 1e308])
def test_a_missing_view_metric_out_of_its_range_is_refused(tmp_path, capsys, value):
    runs = tmp_path / "runs"
    src = COMMITTED / "mv-handwritten" / "m3g" / "seed0"
    (runs / "mv-handwritten" / "m3g" / "seed0").mkdir(parents=True)
    shutil.copy(src / "run.json", runs / "mv-handwritten" / "m3g" / "seed0" / "run.json")
    rec = json.loads((src / "run.json").read_text())
    assert rec["missing_views"]["metrics"]["miss10_acc"] is not None  # the committed record has the metric

    def change(r):
        r["missing_views"]["metrics"]["miss10_acc"] = value

    [path] = _edit(runs, change)
    line = _one_error_line(runs, tmp_path / "out", capsys)
    assert str(path) in line and "missing_views.metrics.miss10_acc" in line and "[0, 1]" in line


def test_control_characters_are_shown_as_the_replacement_character_in_csv_and_html(tmp_path):
    runs = _copy(tmp_path, objectives=("m3g", "raw"))

    def change(r):
        r["device"] = "cp\x00u\x1b[2J"
        r["validity"] = {"valid": False, "why": "a\x00b\x1b[31m"}

    _edit(runs, change, objective="m3g", seed="0")
    out = tmp_path / "out"
    assert lb.main(["--runs", str(runs), "--out", str(out), "--no-plots", "--format", "md", "csv", "json",
                    "html"]) == 0
    for name in ("quickstart.csv", "quickstart-seeds.csv", "quickstart.html", "quickstart.md"):
        text = (out / name).read_text(encoding="utf-8")
        assert "\x00" not in text and "\x1b" not in text, name
    rows = list(csv.reader(io.StringIO((out / "quickstart.csv").read_text(encoding="utf-8"))))
    assert any("a\ufffdb\ufffd[31m" in cell for row in rows for cell in row)
    assert "a\ufffdb\ufffd[31m" in (out / "quickstart.html").read_text(encoding="utf-8")
    json.loads((out / "quickstart.json").read_text())  # the JSON keeps the text, escaped as JSON does


def test_a_benchmark_named_index_or_a_folder_in_a_files_place_is_refused_before_anything_is_written(tmp_path, capsys):
    runs = _copy(tmp_path, objectives=("m3g", "raw"))
    shutil.move(runs / "quickstart", runs / "index")  # the same records as benchmark 'index', rehashed

    def rename(r):
        r["benchmark"] = r["config"]["name"] = "index"

    _edit(runs, rename, rehash=True)
    _copy(tmp_path, objectives=("m3g", "raw"))  # and quickstart's own beside them
    out = tmp_path / "out"
    status = lb.main(["--runs", str(runs), "--out", str(out), "--no-plots", "--format", "md", "html"])
    err = capsys.readouterr().err
    assert status == 2 and "index.html would be written by both the board 'index' and the index" in err, err
    assert not out.exists() or not any(out.iterdir())
    # a folder where a board's file goes: one line, and none of the other files written before it
    shutil.rmtree(runs / "index")
    (out / "quickstart.json").mkdir(parents=True)
    status = lb.main(["--runs", str(runs), "--out", str(out), "--no-plots", "--format", "md", "csv", "json"])
    err = capsys.readouterr().err
    assert status == 2 and f"{out / 'quickstart.json'} is a folder" in err, err
    assert sorted(p.name for p in out.iterdir()) == ["quickstart.json"]


def test_a_weights_row_has_its_own_family_and_an_unknown_id_is_not_put_in_a_loss_family():
    """The HTML page's family filter: ``enc.infonce`` (a weights row) was filed under the InfoNCE family because
    the registry names a module for any id."""
    from types import SimpleNamespace

    from fusebench.leaderboard.html import WEIGHTS_FAMILY, family

    weights = SimpleNamespace(objective="enc.infonce", config={"encoder_weights": {"enc.infonce": {"sha256": "0"}}})
    assert family("enc.infonce", [weights]) == WEIGHTS_FAMILY
    assert family("enc.infonce") == "enc.infonce" and family("mine.v2-x") == "mine.v2-x"
    assert [family(o) for o in ("infonce_pwe", "mv_dhel", "suff_stats", "raw")] == \
        ["infonce", "mv_infonce", "polyview", "reference"]


@pytest.mark.parametrize("field,value,expected", [
    ("pretrain_time_s", 1.7e308, "field 'pretrain_time_s': expected a number in [0, 1e+10)"),
    ("peak_memory_mb", 1e12, "field 'peak_memory_mb': expected a number in [0, 1e+12)"),
    ("wall_time_s", 1e300, "field 'wall_time_s': expected a number in [0, 1e+10)"),
    ("budget.optimizer_steps", 10 ** 400, "field 'budget.optimizer_steps': expected an integer in [0, 2**63)"),
])
def test_costs_and_counts_no_run_can_have_are_refused(tmp_path, capsys, field, value, expected):
    """A 309-digit time or a 400-digit step count was printed in full on the board (its mean as inf)."""
    runs = _copy(tmp_path, objectives=("m3g",))

    def change(r):
        head, _, leaf = field.partition(".")
        if leaf:
            r[head][leaf] = value
        else:
            r[head] = value

    [path, *_] = _edit(runs, change, objective="m3g", seed="0")
    line = _one_error_line(runs, tmp_path / "out", capsys)
    assert str(path) in line and expected in line, line
