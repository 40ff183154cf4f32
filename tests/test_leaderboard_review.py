"""Review findings on the leaderboard (each test builds the hostile input the finding names; the expected
values are worked out by hand in the comments): rank intervals over differing seed sets, undefined grid
scores in the sensitivity section, the LaTeX bold of a tied best row, who set a board's comparison, the
sensitivity chart's unit, metric ids with '@', the HTML footer's command, --tex-columns without tex, the
per-seed CSV's collisions, the index's ids from other boards, the data-file line and the curve thinning."""

from __future__ import annotations

import copy
import json
import math
import re
from pathlib import Path

import pytest

from fusebench.leaderboard import read_board_meta, ties, write_leaderboards
from fusebench.leaderboard.html_svg import CURVE_POINTS, mean_curve
from fusebench.leaderboard.tex import render_tex
from fusebench.records import RecordError, validate_record

BENCH = "toyrev"  # no benchmark spec of this name is installed


def _record(obj: str, seed: int, metrics: dict, **extra) -> dict:
    rec = {
        "schema_version": 1, "suite_version": "0.1.0", "benchmark": BENCH, "objective": obj, "seed": seed,
        "metrics": metrics, "metric_directions": {"acc": "higher", "mae": "lower"},
        "config": {"metrics": sorted(metrics), "selection_metric": "acc" if "acc" in metrics else "mae",
                   "seeds": [0, 1, 2, 3, 4], "dataset": {"id": "toy", "synthetic_only": False}},
        "dataset": {"id": "toy", "synthetic": False, "manifest_hash": "ab12cd34"},
        "selection": {"rule": "best validation acc"}, "pretrain_time_s": 1.0, "peak_memory_mb": 10.0}
    rec.update(extra)
    return rec


def _write(runs: Path, rec: dict) -> None:
    d = runs / rec["benchmark"] / rec["objective"] / f"seed{rec['seed']}"
    d.mkdir(parents=True, exist_ok=True)
    (d / "run.json").write_text(json.dumps(rec))


@pytest.fixture(autouse=True)
def _no_spec(tmp_path: Path, monkeypatch) -> None:
    """No benchmark spec named ``toyrev`` (unless a test writes one): the records' comparison is used."""
    (tmp_path / "specs").mkdir()
    monkeypatch.setenv("FUSEBENCH_BENCHMARKS", str(tmp_path / "specs"))


def _table(md: str) -> tuple[list[str], dict[str, list[str]]]:
    """The first table of a board: its header cells and {row label: cells}."""
    lines = [ln for ln in md.splitlines() if ln.startswith("| ")]
    cells = [[c.strip() for c in re.split(r"(?<!\\)\|", ln)[1:-1]] for ln in lines]
    return cells[0], {c[0]: c for c in cells[1:]}


# -- 1. a rank interval only where every row was run on the same seeds --------------------------------------------
def test_rank_over_differing_seed_sets_has_no_interval() -> None:
    # A: mean 1.0 over seeds 0-2; B: (3 * 0.9 + 2 * 2.0) / 5 = 1.34 over seeds 0-4, so B ranks 1 and A 2; every
    # resample of the shared seeds {0, 1, 2} has A (1.0) above B (0.9): an interval of them would be A [1-1],
    # B [2-2], which holds neither rank
    rows = {"a": {0: 1.0, 1: 1.0, 2: 1.0}, "b": {0: 0.9, 1: 0.9, 2: 0.9, 3: 2.0, 4: 2.0}}
    got = ties.rank_intervals(rows, n_boot=200)
    assert (got["a"]["rank"], got["b"]["rank"]) == (2, 1)
    for k in rows:
        assert (got[k]["low"], got[k]["high"]) == (None, None), k
        assert got[k]["why"] == "the rows' seed sets differ"
    same = ties.rank_intervals({"a": rows["a"], "b": {s: rows["b"][s] for s in range(3)}}, n_boot=200)
    assert (same["a"]["low"], same["a"]["high"], same["b"]["low"], same["b"]["high"]) == (1, 1, 2, 2)
    assert same["a"]["why"] is None


def test_board_with_differing_seed_sets_shows_bare_ranks_and_says_why(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    for s in range(3):  # acc is a fraction: in [0, 1] (the record schema refuses 2.0)
        _write(runs, _record("alpha", s, {"acc": 0.5}))
    for s, v in enumerate([0.45, 0.45, 0.45, 1.0, 1.0]):
        _write(runs, _record("beta", s, {"acc": v}))
    out = tmp_path / "lb"
    write_leaderboards(runs, out, plots=False, formats=("md", "json"))
    md = (out / f"{BENCH}.md").read_text()
    head, rows = _table(md)
    col = next(i for i, h in enumerate(head) if h.startswith("rank [95%]"))
    assert rows["`alpha`"][col] == "2" and rows["`beta`"][col] == "1"  # bare: no "[low-high]"
    assert "No rank interval here: the rows' seed sets differ" in md
    data = json.loads((out / f"{BENCH}.json").read_text())
    assert [(r["objective"], r["rank"], r["rank_interval"]) for r in data["groups"][0]["rows"]] == \
        [("alpha", 2, None), ("beta", 1, None)]


# -- 2. undefined (null / NaN) grid scores: accepted by the schema, shown as undefined by the board -----------------
SEL = {"metric": "acc", "grid": {"tau": [0.1, 0.5, 1.0]}, "seeds": [1000, 1001], "choice": {"tau": 1.0},
       "at_edge": ["tau"],
       "scores": [{"hparams": {"tau": 0.1}, "val": None, "val_by_seed": {"1000": None, "1001": None}},
                  {"hparams": {"tau": 0.5}, "val": None, "val_by_seed": {"1000": 0.8, "1001": None}},
                  {"hparams": {"tau": 1.0}, "val": 0.7, "val_by_seed": {"1000": 0.7, "1001": 0.7}}]}


def _tuned_runs(tmp_path: Path, sel: dict, metrics: dict | None = None, nan: bool = False) -> Path:
    runs = tmp_path / "runs"
    for obj, base in (("alpha", 0.5), ("raw", 0.4)):
        for s in range(2):
            rec = _record(obj, s, metrics or {"acc": base + 0.01 * s})
            if obj == "alpha":
                rec["hparam_selection"] = copy.deepcopy(sel)
            d = runs / BENCH / obj / f"seed{s}"
            d.mkdir(parents=True, exist_ok=True)
            text = json.dumps(rec)
            if nan:  # the older records' NaN instead of null (json.loads reads it as float('nan'))
                text = text.replace('"val": null', '"val": NaN')
            (d / "run.json").write_text(text)
    return runs


@pytest.mark.parametrize("nan", [False, True])
def test_undefined_grid_scores_are_shown_undefined_and_left_out_of_means(tmp_path: Path, nan: bool) -> None:
    out = tmp_path / "lb"
    write_leaderboards(_tuned_runs(tmp_path, SEL, nan=nan), out, plots=False)
    md = (out / f"{BENCH}.md").read_text()
    sec = md.split("## Hyper-parameter sensitivity")[1].split("\n## ")[0]
    # tau 0.1: no defined seed; tau 0.5: null val, the mean of its one defined seed = 0.8 -> 80.00 (%);
    # tau 1.0: val 0.7 over 2 seeds, the choice. Seeds with a defined score per point: 1 and 2 (0 not counted)
    assert "Grid `tau`; validation `acc` (%), mean over 1/2 selection seed(s):" in sec
    line = next(ln for ln in sec.splitlines() if ln.startswith("| `alpha`"))
    assert [c.strip() for c in line.split("|")[2:-1]] == ["— (undefined)", "80.00", "**70.00 ✓**"]
    assert "— (undefined): no selection seed gave the grid point a defined validation score" in sec
    assert "Chosen on an edge of this grid (the optimum may lie outside it): `alpha` (tau = 1.0, largest)." in sec


def test_undefined_grid_scores_draw_a_plot_and_a_chart(tmp_path: Path) -> None:
    out = tmp_path / "lb"
    write_leaderboards(_tuned_runs(tmp_path, SEL), out, formats=("md", "html"))
    assert (out / f"{BENCH}-sensitivity.png").stat().st_size > 0
    page = (out / f"{BENCH}.html").read_text()
    chart = page[page.index("<title>validation acc per grid point"):]
    chart = chart[:chart.index("</svg>")]
    lines = re.findall(r'<polyline [^>]*points="([^"]*)"', chart)
    assert len(lines) == 1 and len(lines[0].split()) == 2  # alpha's line: tau 0.5 and 1.0; tau 0.1 is undefined


@pytest.mark.parametrize("field, value", [("val", "high"), ("val", math.inf), ("val_by_seed", {"1000": "x"}),
                                          ("val_by_seed", [0.5]), ("hparams", None)])
def test_malformed_grid_scores_are_refused_when_the_record_is_read(field: str, value: object) -> None:
    sel = copy.deepcopy(SEL)
    sel["scores"][1][field] = value
    rec = _record("alpha", 0, {"acc": 0.5}, hparam_selection=sel)
    with pytest.raises(RecordError, match=r"runs/x/run\.json: field 'hparam_selection\.scores\[1\]"):
        validate_record(rec, "runs/x/run.json")


# -- 6. the HTML chart's unit of a selection metric that is no column of the board ---------------------------------
def test_html_sensitivity_chart_scales_a_catalog_fraction_metric(tmp_path: Path) -> None:
    sel = {**SEL, "scores": [{"hparams": {"tau": t}, "val": v} for t, v in ((0.1, 0.6), (0.5, 0.8), (1.0, 0.7))]}
    out = tmp_path / "lb"
    # the board shows mae only; the selection metric acc is a fraction in the metric catalog: 0.8 -> 80, 0.6 -> 60
    # (with plots: the page draws the chart where the markdown links the PNG)
    write_leaderboards(_tuned_runs(tmp_path, sel, metrics={"mae": 0.3}), out, formats=("md", "html"))
    md = (out / f"{BENCH}.md").read_text()
    assert "validation `acc` (%)" in md and "| `alpha` | 60.00 | 80.00 | **70.00 ✓** |" in md
    page = (out / f"{BENCH}.html").read_text()
    chart = page[page.index("<title>validation acc per grid point"):]
    chart = chart[:chart.index("</svg>")]
    assert ">80</text>" in chart and ">60</text>" in chart  # the axis labels: highest and lowest, in percent
    assert ">0.8</text>" not in chart


# -- 9. metric ids with '@' (allowed by the record schema) ---------------------------------------------------------
def test_selection_metric_id_with_at_sign_is_read(tmp_path: Path) -> None:
    from fusebench.records.schema import selection_metric_id as _metric_id

    assert _metric_id("recall@10") == "recall@10"
    assert _metric_id("validation recall@10 (mean over 3 selection seeds)") == "recall@10"
    assert _metric_id("bad id!") is None


# -- 3. LaTeX: bold only for a separable best row ------------------------------------------------------------------
def _tex_data(separable: bool | None) -> dict:
    rows = [{"objective": o, "metrics": {"acc": {"mean": m, "std": 0.01, "n": 3}}} for o, m in (("a", 0.9), ("b", 0.89))]
    return {"benchmark": "toy", "groups": [{"key": "k", "dataset": "toy", "seeds": [0, 1, 2], "primary": "acc",
                                           "metrics": [{"id": "acc", "unit": "raw", "direction": "higher"}],
                                           "rows": rows, "best": "a", "best_separable": separable}]}


@pytest.mark.parametrize("separable, first", [(True, r"a & \textbf{0.9000} $\pm$ 0.0100 \\"),
                                              (False, r"a & 0.9000 $\pm$ 0.0100 \\"),
                                              (None, r"a & 0.9000 $\pm$ 0.0100 \\")])
def test_tex_bolds_the_best_row_only_when_separable(separable: bool | None, first: str) -> None:
    lines = render_tex(_tex_data(separable), ("mean",)).splitlines()
    assert first in lines and r"b & 0.8900 $\pm$ 0.0100 \\" in lines


# -- 4. who set the comparison, said on the board --------------------------------------------------------------------
SPEC = """\
description: toy review board
dataset: {id: quickstart}
encoder: {id: mlp}
metrics: [acc, mae]
objectives: [raw, alpha]
comparison: {reference: raw, primary: acc, why: "Accuracy matters here."}
"""


def _cmp_runs(tmp_path: Path, comparison: dict | None) -> Path:
    runs = tmp_path / "runs"
    for obj, base in (("alpha", 0.6), ("raw", 0.5)):
        for s in range(3):
            extra = {"comparison": comparison} if comparison else {}
            _write(runs, _record(obj, s, {"acc": base + 0.01 * s, "mae": 1 - base}, **extra))
    return runs


def _protocol_line(md: str) -> str:
    return next(ln for ln in md.splitlines() if ln.startswith("- comparison (primary metric, reference row, why): "))


def test_board_says_which_source_set_the_comparison(tmp_path: Path) -> None:
    from fusebench.leaderboard import load_runs
    from fusebench.leaderboard.render import render_board
    from fusebench.leaderboard.groups import make_view

    def board(runs: Path) -> str:
        recs = load_runs(runs)[BENCH]
        return render_board(BENCH, [make_view(BENCH, recs)], [], [None], [None], [None])

    md = board(_cmp_runs(tmp_path / "a", {"reference": "alpha", "primary": "acc", "why": "toy"}))
    assert ("copied into the run records, the same in every record that has one (no spec of this benchmark is "
            "installed)") in _protocol_line(md)
    md = board(_cmp_runs(tmp_path / "b", None))
    assert "neither the benchmark's spec nor the run records have a `comparison`" in _protocol_line(md)
    (tmp_path / "specs" / f"{BENCH}.yaml").write_text(SPEC)  # the spec overrides the records' copy
    md = board(_cmp_runs(tmp_path / "c", {"reference": "alpha", "primary": "acc", "why": "toy"}))
    assert "the `comparison` block of the benchmark's current spec" in _protocol_line(md)
    assert "Primary metric: `acc` (chosen because accuracy matters here)." in md


def test_board_shows_the_specs_current_protocol_notes(tmp_path: Path) -> None:
    # issue 30: the quickstart board kept saying "about 3x" after its spec said "about 5x", because the notes
    # came from the records (outside a cell's identity, so no re-run picks up the change)
    from fusebench.leaderboard import load_runs
    from fusebench.leaderboard.groups import make_view
    from fusebench.leaderboard.render import render_board

    runs = tmp_path / "runs"
    for obj, base in (("alpha", 0.6), ("raw", 0.5)):
        for s in range(3):
            rec = _record(obj, s, {"acc": base + 0.01 * s, "mae": 1 - base})
            rec["protocol"] = {"compute": "about 3x <b>", "gone": "an old note", "<i>|k": "v"}
            _write(runs, rec)

    def board() -> str:
        recs = load_runs(runs)[BENCH]
        return render_board(BENCH, [make_view(BENCH, recs)], [], [None], [None], [None])

    md = board()  # no spec installed: the records' notes, escaped
    assert "- compute: about 3x &lt;b&gt;" in md and "- gone: an old note" in md and "- &lt;i&gt;\\|k: v" in md
    (tmp_path / "specs" / f"{BENCH}.yaml").write_text(SPEC + 'protocol_notes: {compute: "about 5x"}\n')
    md = board()  # the spec's notes, only them
    assert "- compute: about 5x" in md.splitlines() and "3x" not in md and "an old note" not in md


def test_no_text_claims_boards_come_from_run_files_alone(tmp_path: Path) -> None:
    import fusebench.leaderboard as lb
    import fusebench.leaderboard.cli as cli

    assert "alone" not in lb.__doc__.split("\n\n")[0] and "alone" not in cli.__doc__.split("\n\n")[0]
    out = tmp_path / "lb"
    write_leaderboards(_cmp_runs(tmp_path, None), out, plots=False, formats=("html",))
    footer = (out / f"{BENCH}.html").read_text().split("<footer>")[1]
    assert "files alone" not in footer and "current spec" in footer


# -- 14. the HTML footer's command is the one that made the pages ---------------------------------------------------
@pytest.mark.parametrize("kw, command", [
    ({"plots": False, "formats": ("html",)}, "fusebench leaderboard --runs ../runs --out . --no-plots --format html"),
    ({"split": True, "formats": ("md", "json", "html"), "plots": False},
     "fusebench leaderboard --runs ../runs --out . --no-plots --split --format md json html"),
    ({"formats": ("html", "tex"), "plots": False, "tex_columns": ["mean", "n"]},
     "fusebench leaderboard --runs ../runs --out . --no-plots --format html tex --tex-columns mean n")])
def test_html_footer_names_the_options_used(tmp_path: Path, kw: dict, command: str) -> None:
    runs = _cmp_runs(tmp_path, None)
    out = tmp_path / "lb"
    write_leaderboards(runs, out, **kw)
    for page in (f"{BENCH}.html", "index.html"):
        assert f"Generated by <code>{command}</code>" in (out / page).read_text(), page


# -- 11. --tex-columns without tex ----------------------------------------------------------------------------------
def test_tex_columns_without_tex_are_refused_by_the_function(tmp_path: Path) -> None:
    out = tmp_path / "lb"
    with pytest.raises(ValueError, match=r"--tex-columns: the columns of --format tex; add tex to --format"):
        write_leaderboards(_cmp_runs(tmp_path, None), out, plots=False, formats=("md", "csv"), tex_columns=["mean"])
    assert not out.exists()


# -- 12. the per-seed CSV never overwrites a board X-seeds's file -------------------------------------------------
@pytest.mark.parametrize("name, text, refused", [
    ("-seeds.csv", "benchmark,key,kind,dataset\nx,1,real,toy\n", True),  # the aggregate CSV of board toyrev-seeds
    ("-seeds.html", "<!DOCTYPE html>\n", True), ("-seeds.tex", "% fusebench board\n", True),
    ("-seeds.csv", "benchmark,objective,seed,key,acc\ntoyrev,alpha,0,k,0.5\n", False)])  # toyrev's own, earlier
def test_per_seed_csv_collisions(tmp_path: Path, name: str, text: str, refused: bool) -> None:
    runs = _cmp_runs(tmp_path, None)
    out = tmp_path / "lb"
    out.mkdir()
    (out / f"{BENCH}{name}").write_text(text)
    if refused:
        with pytest.raises(ValueError, match=rf"its per-seed CSV {BENCH}-seeds\.csv would overwrite"):
            write_leaderboards(runs, out, plots=False, formats=("md", "csv"))
        assert sorted(p.name for p in out.iterdir()) == [f"{BENCH}{name}"]  # nothing written
        assert (out / f"{BENCH}{name}").read_text() == text
    else:
        write_leaderboards(runs, out, plots=False, formats=("md", "csv"))
        assert (out / f"{BENCH}-seeds.csv").read_text().startswith("benchmark,objective,seed,")


# -- 13. ids read from other boards' metadata; the data file of a record ------------------------------------------
def _board_with_meta(tmp_path: Path, group: dict) -> Path:
    meta = {"benchmark": "other", "format": 2, "groups": [{"kind": "real", **group}]}
    path = tmp_path / "other.md"
    path.write_text(f"# Leaderboard: other\n\n<!-- fusebench-board {json.dumps(meta)} -->\n")
    return path


@pytest.mark.parametrize("group, field", [
    ({"means": {"x`](javascript:alert(1))": 0.5}}, "means"),
    ({"means": {"raw": 0.5}, "merged_references": {"raw": ["a` <b>"]}}, "merged_references"),
    ({"means": {"raw": 0.5}, "merged_references": {"Raw Evil": ["raw_l2"]}}, "merged_references"),
    ({"means": {"raw": 0.5}, "merged_references": {"raw": "raw_l2"}}, "merged_references")])
def test_board_metadata_ids_are_checked(tmp_path: Path, group: dict, field: str) -> None:
    path = _board_with_meta(tmp_path, group)
    with pytest.raises(ValueError, match=rf"{re.escape(str(path))}: board metadata group .*'{field}' must map"):
        read_board_meta(path)
    ok = _board_with_meta(tmp_path, {"means": {"raw": 0.5}, "merged_references": {"raw": ["raw_l2"]}})
    assert read_board_meta(ok)["groups"][0]["merged_references"] == {"raw": ["raw_l2"]}


def test_index_family_labels_are_escaped() -> None:
    from fusebench.leaderboard.index import _family_label, _family_line

    ranking = {"methods": ["raw", "a`b"], "merged_references": {"raw": ["x<y"]}}
    # an id a code span cannot hold is md_text: '<' as an entity, a backtick escaped with a backslash
    assert _family_label(ranking, "raw") == "`raw` (≡ x&lt;y)"
    assert "1 pretrained objective(s) (a\\`b)" in _family_line(ranking)


@pytest.mark.parametrize("data_file, where", [
    ({"name": "NGs.mat"}, "dataset.data_file.sha256"), ({"name": "NGs.mat", "sha256": None}, "dataset.data_file.sha256"),
    ({"name": "NGs.mat", "sha256": "ABC"}, "dataset.data_file.sha256"), ({"sha256": "0" * 64}, "dataset.data_file.name"),
    ({"name": "", "sha256": "0" * 64}, "dataset.data_file.name"), ("NGs.mat", "dataset.data_file")])
def test_data_file_is_validated(data_file: object, where: str) -> None:
    rec = _record("alpha", 0, {"acc": 0.5})
    rec["dataset"]["data_file"] = data_file
    with pytest.raises(RecordError, match=rf"field '{re.escape(where)}'"):
        validate_record(rec, "runs/x/run.json")


def test_data_file_on_the_data_line(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    for s in range(2):
        rec = _record("alpha", s, {"acc": 0.5 + 0.1 * s})
        rec["dataset"]["data_file"] = {"name": "NGs.mat", "sha256": "ab" * 32}
        _write(runs, rec)
    out = tmp_path / "lb"
    write_leaderboards(runs, out, plots=False)
    assert "data file `NGs.mat` (sha256 `abababababababab`)" in (out / f"{BENCH}.md").read_text()


# -- 14. the curve thinning keeps at most CURVE_POINTS points --------------------------------------------------------
@pytest.mark.parametrize("n, points", [(200, 200), (201, 101), (450, 150), (399, 200), (1000, 200)])
def test_mean_curve_has_at_most_curve_points(n: int, points: int) -> None:
    # every k-th step with k = ceil(n / 200): 201 -> k 2, 101 points; 450 -> k 3, 150; 399 -> k 2, 200
    assert CURVE_POINTS == 200
    got = mean_curve([[float(i) for i in range(n)]])
    assert len(got) == points and got[0] == (0, 0.0)
