"""Boards from records a careless or hostile hand changed (leaderboard review, round 4): each test copies committed run
records (``leaderboards/runs/quickstart``) into a temporary runs folder, edits them and runs the real regeneration.

- a comparison whose primary metric no run of the table scored is refused (the board ranked by its first metric in
  its place, under the comparison's "why" about the other metric);
- a tuned row's grid names and values are drawn on the sensitivity plot as text, never parsed as mathtext;
- values near the float limit (a curve's, a selection score's) are left out of the plots, which are drawn;
- hostile text in the fields a board shows (a table-breaking newline and pipe, a tag, a ``</script>``, mathtext, a
  spreadsheet formula, a path) is in every format in its escaped form, worked out by hand, never raw; the HTML page,
  parsed, has no element or attribute from a record; a path as a benchmark or objective id is refused; the config keys
  a split board (and the refusal without ``--split``) names are escaped.
"""

from __future__ import annotations

import csv
import io
import json
from html.parser import HTMLParser
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


# -- text from records in every board format: the escaped form worked out by hand, never the raw one -----------------
#: hostile values, each put into a record field a board shows (``_hostile_runs``)
PIPE = "a|b\n# H"
IMG = "<img src=x onerror=alert(1)>"
SCRIPT = "</script><script>alert(1)"
MATH = "$\\alpha$"
FORMULA = "=cmd|' /C calc'!A0"
TRAVERSAL = "../../etc/passwd"
LINE_SEP = "\u2028"  # a JavaScript line terminator inside the page's JSON before ES2019


def _hostile_runs(tmp_path: Path) -> Path:
    """The quickstart runs as benchmark ``qs-nospec`` (no spec installed: the records' own comparison "why" and
    protocol notes are shown), with the hostile values in the fields the board renders. ``comparison``,
    ``selection``, ``device``, ``numerics``, ``protocol`` and ``validity`` are outside the config hash; the
    description is hashed with the config (:func:`test_leaderboard_hostile_3._rehash`)."""
    from test_leaderboard_hostile_3 import _rehash
    from test_records_hostile import _edit

    runs = _copy(tmp_path, objectives=("raw", "none", "m3g"))
    folder = _without_spec(runs)

    def hostile(rec: dict) -> None:
        rec["config"]["description"] = f"{PIPE} {IMG}"
        rec["comparison"]["why"] = f"{SCRIPT} {MATH}"
        rec["selection"]["rule"] = f"{IMG} [x](javascript:alert(1)) `code` *em*"
        rec["device"] = SCRIPT
        rec["numerics"]["device_name"] = MATH
        rec["protocol"] = {"probe": TRAVERSAL, PIPE: IMG}
        if rec["objective"] == "m3g":
            rec["validity"] = {"valid": False, "why": f"{FORMULA}{LINE_SEP}{SCRIPT}"}
        _rehash(rec)

    _edit(runs, hostile)
    assert len(list(folder.glob("*/seed*/run.json"))) == 9
    return runs


class _Tags(HTMLParser):
    """Every start tag with its attributes, and the text between tags (entities decoded)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, list[tuple[str, str | None]]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, attrs))

    handle_startendtag = handle_starttag

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def test_hostile_record_text_is_escaped_in_the_markdown_csv_json_and_html(tmp_path: Path) -> None:
    from test_leaderboard_hostile_3 import _board

    files = _board(_hostile_runs(tmp_path), tmp_path / "out", ("md", "csv", "json", "html", "tex"))
    md = files["qs-nospec.md"]
    lines = md.splitlines()
    # markdown: md_text by hand: whitespace runs (the newline, U+2028) one space; "|", "$", "\\", "`", "[", "]", "*"
    # after a backslash; "<" and ">" as entities; "#" escaped only where it would start a block
    assert lines[2] == "a\\|b # H &lt;img src=x onerror=alert(1)&gt;"
    assert ("Primary metric: `acc` (chosen because &lt;/script&gt;&lt;script&gt;alert(1) \\$\\\\alpha\\$). "
            "Reference row of the tests: `raw`") in md
    assert "- model selection: &lt;img src=x onerror=alert(1)&gt; \\[x\\](javascript:alert(1)) \\`code\\` \\*em\\*" in lines
    assert "- probe: ../../etc/passwd" in lines and "- a\\|b # H: &lt;img src=x onerror=alert(1)&gt;" in lines
    assert "runs on &lt;/script&gt;&lt;script&gt;alert(1) (\\$\\\\alpha\\$) x9" in md
    why = "=cmd\\|' /C calc'!A0 &lt;/script&gt;&lt;script&gt;alert(1)"
    assert f"| `m3g` (invalid: {why}) |" in md and f"- `m3g`: {why}" in lines
    assert [ln for ln in lines if ln.startswith("#")] == ["# Leaderboard: qs-nospec", "## Protocol"]  # no plots
    for raw in (IMG, SCRIPT, "a|b", "<script", "[x](javascript", LINE_SEP):
        assert raw not in md, raw
    assert md.count("<!--") == 1  # the board's own metadata comment

    # CSV: the reason on one line (U+2028 is whitespace), its formula start quoted ("'"); JSON: strict, the text as
    # it is (data)
    row = next(r for r in csv.DictReader(io.StringIO(files["qs-nospec.csv"])) if r["objective"] == "m3g")
    assert row["invalid"] == f"'{FORMULA} {SCRIPT}"
    data = json.loads(files["qs-nospec.json"])
    assert next(r for r in data["groups"][0]["rows"] if r["objective"] == "m3g")["invalid"] == f"{FORMULA} {SCRIPT}"
    assert "alert" not in files["qs-nospec.tex"]  # LaTeX shows ids and numbers only (the row flagged by a dagger)

    # HTML: parsed, no element or attribute came from a record; each hostile text is shown as text
    page = files["qs-nospec.html"]
    parser = _Tags()
    parser.feed(page)
    names = [t for t, _ in parser.tags]
    assert "img" not in names and names.count("script") == 2
    assert [a for _, a in parser.tags if ("type", "application/json") in a] == [[("type", "application/json"),
                                                                                ("id", "board-data")]]
    for tag, attrs in parser.tags:
        for key, value in attrs:
            assert not key.startswith("on") and "alert" not in (value or ""), (tag, key, value)
            assert not (key == "href" and value and ":" in value), (tag, key, value)
    text = "".join(parser.text)
    assert "a|b # H <img src=x onerror=alert(1)>" in text  # the markdown's escapes read back as the record's text
    assert f"{SCRIPT} $\\alpha$" in text and "runs on </script><script>alert(1) ($\\alpha$)" in text
    assert "[x](javascript:alert(1)) `code` *em*" in text
    # the board data: its script element holds no "</script", "<!--" or raw U+2028, and reads back as the JSON file
    body = page.split('<script type="application/json" id="board-data">', 1)[1].split("</script>", 1)[0]
    assert "<" not in body and ">" not in body and LINE_SEP not in body
    assert "=cmd|' /C calc'!A0 \\u003c/script\\u003e\\u003cscript\\u003ealert(1)" in body  # "<", ">" as \\u escapes
    assert json.loads(body)["groups"][0]["rows"] == data["groups"][0]["rows"]


def test_a_record_naming_a_path_as_its_benchmark_or_objective_is_refused(tmp_path: Path, capsys) -> None:
    """File names come from ids: a record whose benchmark or objective is a path is refused before anything is
    written (the board would be ``<benchmark>.md``), naming the file and the field."""
    from test_records_hostile import _edit

    for field in ("benchmark", "objective"):
        runs = _copy(tmp_path / field, objectives=("raw", "m3g"))
        (bad,) = _edit(runs, lambda r: r.__setitem__(field, TRAVERSAL), "m3g", "0")
        line = _one_error_line(runs, tmp_path / field / "out", capsys)
        assert line.startswith(f"fusebench leaderboard: {bad}: field '{field}': expected an id (lowercase"), line
        assert "'../../etc/passwd'" in line
    assert not (tmp_path / "etc").exists() and not (tmp_path.parent / "etc").exists()


def test_config_keys_a_split_board_names_are_escaped(tmp_path: Path, capsys) -> None:
    """A split board says in which settings its groups differ, and the refusal without ``--split`` names them: a
    config key is a record's text. It reached the markdown raw (a "#" line after its newline, a tag) and the
    terminal with its newline and escape sequence."""
    from test_leaderboard_hostile_3 import _rehash
    from test_records_hostile import _edit

    key = "a|b\n# H <img src=x>\x1b[2J"
    runs = _copy(tmp_path, objectives=("raw", "m3g"))

    def odd(rec: dict) -> None:
        rec["config"]["pretrain"][key] = 1 if rec["seed"] < 2 else 2
        _rehash(rec)

    _edit(runs, odd)
    from fusebench.leaderboard import main, write_leaderboards

    status = main(["--runs", str(runs), "--out", str(tmp_path / "refused"), "--no-plots", "--no-progress",
                   "--format", "md"])
    err = capsys.readouterr().err
    assert status == 2 and not (tmp_path / "refused").exists()
    assert ("2 comparability groups differing in 'config.pretrain.a|b\\n# H <img src=x>\\x1b[2J':\n  group "
            in err), err
    assert "\x1b" not in err
    write_leaderboards(runs, tmp_path / "out", plots=False, split=True, formats=("md", "html"))
    files = {p.name: p.read_text(encoding="utf-8") for p in (tmp_path / "out").iterdir()}
    md = files["quickstart.md"]
    assert ("one table each; they differ in config.pretrain.a\\|b # H &lt;img src=x&gt;\ufffd\\[2J.\n" in md)
    assert not [ln for ln in md.splitlines() if ln.startswith("# H")] and "<img" not in md and "\x1b" not in md
    parser = _Tags()
    parser.feed(files["quickstart.html"])
    assert "img" not in [t for t, _ in parser.tags]
