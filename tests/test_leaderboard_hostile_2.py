"""Boards say what their runs did, and refuse what no run can hold (the leaderboard review, round 2). Each test
copies committed run records into a temporary runs folder, edits them where it needs to, runs the real
regeneration and checks the result against values worked out here from the run.json files and the spec YAML:

- ``fusebench run --leaderboard DIR`` regenerates every format DIR holds (its HTML pages too) and says which;
- a board whose runs were made with settings other than the current spec's says so, setting by setting;
- a fraction metric outside [0, 1] (a record, a reported.yaml entry) is one error naming the file and field;
  values near the float limit never overflow the statistics;
- the index escapes and type-checks the metadata of every board file it finds (a planted one included);
- rows whose k-means collapsed (NMI below 0.01) are named under the table.
"""

from __future__ import annotations

import fractions
import html.parser
import json
import math
import re
import statistics
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml

import fusebench.leaderboard as lb
from fusebench import benchmarks
from test_records_hostile import _copy, _edit  # committed records copied, edited (and rehashed)
from fusebench.leaderboard import write_leaderboards
from fusebench.records import RecordError, load_record

ROOT = Path(__file__).resolve().parents[1]


def _set_metric(name: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(rec: dict[str, Any]) -> None:  # schema 4: {value, direction, version}; before: the number
        if isinstance(rec["metrics"][name], dict):
            rec["metrics"][name]["value"] = value
        else:
            rec["metrics"][name] = value
    return change


def _metric(path: Path, name: str) -> Any:
    v = json.loads(path.read_text())["metrics"][name]
    return v["value"] if isinstance(v, dict) else v


def _field(path: Path, name: str) -> str:
    """The field a record's metric value is in: ``metrics.<id>.value`` (schema 4), ``metrics.<id>`` before."""
    return f"metrics.{name}.value" if isinstance(json.loads(path.read_text())["metrics"][name], dict) else f"metrics.{name}"


def _one_error_line(runs: Path, out: Path, capsys, *extra: str) -> str:
    status = lb.main(["--runs", str(runs), "--out", str(out), "--no-plots", "--format", "md", "csv", "json", *extra])
    err = capsys.readouterr().err
    assert status == 2, err
    lines = [x for x in err.strip().splitlines() if not x.startswith("[fusebench] ")]  # progress lines aside
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def _cells(line: str) -> int:
    return len(re.split(r"(?<!\\)\|", line.strip().strip("|")))


# -- 1. fusebench run --leaderboard DIR: the formats DIR holds ------------------------------------------------------
def test_run_leaderboard_regenerates_the_html_pages_a_folder_holds(tmp_path: Path) -> None:
    from fusebench.cli.run import _regenerate_boards

    runs = _copy(tmp_path, "quickstart", objectives=("none", "raw"))
    boards = tmp_path / "boards"
    boards.mkdir()
    (boards / "index.html").write_text("<html>stale</html>\n")  # a folder with HTML pages, as leaderboards/ is
    (boards / "quickstart.html").write_text("<html>stale</html>\n")
    lines = _regenerate_boards([], str(runs), str(boards))
    assert lines[0].startswith("formats md, csv, json, html (html: ")
    assert f"wrote {boards / 'quickstart.html'}" in lines and f"wrote {boards / 'index.html'}" in lines
    page = (boards / "quickstart.html").read_text()
    # the page's numbers are the runs' (mean of acc over seeds, by hand), not the stale file
    accs = [_metric(p, "acc") for p in sorted((runs / "quickstart" / "raw").glob("*/run.json"))]
    assert f"{100 * statistics.mean(accs):.2f} ± {100 * statistics.stdev(accs):.2f} ({len(accs)})" in page
    assert "stale" not in (boards / "index.html").read_text()


def test_run_leaderboard_new_folder_gets_md_csv_json_only(tmp_path: Path) -> None:
    from fusebench.cli.run import _board_formats

    assert _board_formats(str(tmp_path / "new")) == ("md", "csv", "json")
    (tmp_path / "new").mkdir()
    (tmp_path / "new" / "notes.html").write_text("x")  # an HTML file that is no board page: not a reason
    assert _board_formats(str(tmp_path / "new")) == ("md", "csv", "json")
    (tmp_path / "new" / "b.md").write_text("# Leaderboard: b\n")
    (tmp_path / "new" / "b.tex").write_text("x")
    assert _board_formats(str(tmp_path / "new")) == ("md", "csv", "json", "tex")
    assert _board_formats(str(ROOT / "leaderboards")) == ("md", "csv", "json", "html")  # the committed folder


# -- 2. the protocol text describes the spec; a run with other settings says so --------------------------------------
def test_runs_made_off_the_spec_are_named_setting_by_setting(tmp_path: Path) -> None:
    spec = yaml.safe_load((ROOT / "benchmarks" / "mv-ngs.yaml").read_text())
    runs = _copy(tmp_path, "mv-ngs", objectives=("raw", "none"), seeds=(0, 1))

    def tiny(rec: dict[str, Any]) -> None:
        rec["config"]["options"]["embedding_eval"].update(n_init=1, fewshot_draws=1)
        rec["config"]["comparison"]["primary"] = "acc"
        rec["comparison"]["primary"] = "acc"

    _edit(runs, tiny, rehash=True)
    write_leaderboards(runs, tmp_path / "out", plots=False)
    md = (tmp_path / "out" / "mv-ngs.md").read_text()
    line = next(x for x in md.splitlines() if x.startswith("- **these runs' config differs"))
    ee = spec["options"]["embedding_eval"]
    assert f"`options.embedding_eval.n_init` `1` (spec: `{ee['n_init']}`)" in line
    assert f"`options.embedding_eval.fewshot_draws` `1` (spec: `{ee['fewshot_draws']}`)" in line
    assert f"`comparison.primary` `acc` (spec: `{spec['comparison']['primary']}`)" in line
    assert "options.embedding_eval.l2_grid" not in line  # unchanged settings are not listed
    assert "100 restarts" in md  # the spec's note is still shown, under that line
    assert md.index("these runs' config differs") < md.index("100 restarts")
    above = next(x for x in md.splitlines() if x.startswith("Primary metric:"))
    assert "settings other than the current spec's" in above
    # runs made under the current spec: no such line (the committed ones are pending a rerun under a wider grid,
    # test_hash_schema.PENDING_RERUN: their grids set to the spec's)
    plain = _copy(tmp_path / "plain", "mv-ngs", objectives=("raw",), seeds=(0, 1))
    current = benchmarks.load("mv-ngs").to_dict()["pretrain"]["grid"]

    def as_spec(rec: dict[str, Any]) -> None:
        rec["config"]["pretrain"]["grid"] = json.loads(json.dumps(current))

    _edit(plain, as_spec, rehash=True)
    write_leaderboards(plain, tmp_path / "o2", plots=False)
    assert "differs from the benchmark's current spec" not in (tmp_path / "o2" / "mv-ngs.md").read_text()


# -- 3. numbers: fractions in range, no overflow -----------------------------------------------------------------------
@pytest.mark.parametrize("value", [-5, 1e308, 1.5, -1e-9])
def test_fraction_metric_outside_0_1_is_refused_naming_file_and_field(tmp_path: Path, capsys, value: float) -> None:
    runs = _copy(tmp_path, "quickstart", objectives=("none", "raw"), seeds=(0, 1))
    (path,) = _edit(runs, _set_metric("acc", value), objective="raw", seed="1")
    with pytest.raises(RecordError) as e:
        load_record(path)
    assert e.value.path == str(path) and e.value.field == _field(path, "acc")
    line = _one_error_line(runs, tmp_path / "out", capsys)
    assert str(path) in line and repr(_field(path, "acc")) in line and "[0, 1]" in line


@pytest.mark.parametrize("value", [0.0, 1.0, None])
def test_fraction_metric_bounds_and_null_are_accepted(tmp_path: Path, value: float | None) -> None:
    runs = _copy(tmp_path, "quickstart", objectives=("raw",), seeds=(0, 1))
    (path,) = _edit(runs, _set_metric("acc", value), objective="raw", seed="1")
    rec = load_record(path)
    assert (math.isnan(rec.metrics["acc"]) if value is None else rec.metrics["acc"] == value)


def test_negative_ari_is_a_valid_clustering_score(tmp_path: Path) -> None:
    """The adjusted Rand index is corrected for chance: a clustering worse than chance scores below 0 (84 committed
    Cora / WebKB records do); below -1 no clustering scores."""
    runs = _copy(tmp_path, "mv-ngs", objectives=("raw",), seeds=(0,))
    (path,) = _edit(runs, _set_metric("ari", -0.25))
    assert load_record(path).metrics["ari"] == -0.25
    _edit(runs, _set_metric("ari", -1.5))
    with pytest.raises(RecordError, match=re.escape(repr(_field(path, "ari")))):
        load_record(path)


def test_reported_fraction_above_1_is_refused_naming_file_and_entry(tmp_path: Path, capsys) -> None:
    runs = _copy(tmp_path, "quickstart", objectives=("raw",), seeds=(0, 1))
    reported = tmp_path / "reported.yaml"
    entry = {"benchmark": "quickstart", "label": "Paper", "metric": "acc", "source": "x", "value": 0.5}
    reported.write_text(yaml.safe_dump([entry, dict(entry, label="Typo", value=1.5)]))
    line = _one_error_line(runs, tmp_path / "out", capsys, "--reported", str(reported))
    assert str(reported) in line and "entry 1" in line and "'Typo'" in line and "1.5" in line
    reported.write_text(yaml.safe_dump([dict(entry, value=10 ** 400)]))  # past the float range: no OverflowError
    line = _one_error_line(runs, tmp_path / "out", capsys, "--reported", str(reported))
    assert str(reported) in line and "entry 0" in line and "finite" in line
    reported.write_text(yaml.safe_dump([dict(entry, metric="mae", value=12.5)]))  # a raw metric: any finite value
    assert lb.main(["--runs", str(runs), "--out", str(tmp_path / "ok"), "--no-plots",
                    "--reported", str(reported)]) == 0


def test_paired_test_near_the_float_limit_matches_scaled_values() -> None:
    from scipy.stats import ttest_rel

    from fusebench.leaderboard.stats import bootstrap_ci, paired_vs_reference

    a = [1e308, -1.2e308, 1.7e308, 0.5e308]
    r = [-1e308, 1.6e308, -0.3e308, 0.4e308]
    res = paired_vs_reference({"a": dict(enumerate(a)), "r": dict(enumerate(r))}, "r")["a"]
    want = ttest_rel([x / 1e300 for x in a], [x / 1e300 for x in r])  # t does not depend on the unit
    assert res["t"] == pytest.approx(float(want.statistic), rel=1e-9)
    assert res["p"] == pytest.approx(float(want.pvalue), rel=1e-9)
    exact = sum(fractions.Fraction(x) - fractions.Fraction(y) for x, y in zip(a, r)) / len(a)
    assert res["mean_diff"] == pytest.approx(float(exact), rel=1e-12)
    lo, hi = bootstrap_ci([1.7e308, 1.6e308, 1.5e308], n_boot=200)  # 3 seeds: [min, max] of the resampled means
    assert math.isfinite(lo) and math.isfinite(hi) and 1.5e308 <= lo <= hi <= 1.7e308


def test_huge_raw_metric_renders_without_a_traceback(tmp_path: Path) -> None:
    runs = _copy(tmp_path, "mosi-sentiment", objectives=("none", "infonce_pwe", "m3g"), seeds=(0, 1))
    huge = {"none": (1e308, 1.7e308), "infonce_pwe": (-1.7e308, 1.6e308), "m3g": (1e308,) * 2}
    for obj, values in huge.items():
        for seed, v in enumerate(values):
            _edit(runs, _set_metric("mae", v), objective=obj, seed=str(seed))
    write_leaderboards(runs, tmp_path / "out", plots=False, formats=("md", "csv", "json"))
    data = (tmp_path / "out" / "mosi-sentiment.json").read_text()
    assert "NaN" not in data and "Infinity" not in data
    rows = {r["objective"]: r for r in json.loads(data)["groups"][0]["rows"]}
    got = rows["none"]["metrics"]["mae"]["mean"]
    assert got == pytest.approx(float(sum(map(fractions.Fraction, huge["none"])) / 2), rel=1e-11)
    # infonce_pwe's std, |a - b| / sqrt(2) = 2.3e308, lies beyond the float range: null, never Infinity
    assert rows["infonce_pwe"]["metrics"]["mae"]["std"] is None
    md = (tmp_path / "out" / "mosi-sentiment.md").read_text()
    assert "inf" not in md.lower().replace("infonce", "")
    assert "1.0000e+308 ± 0.0000 (2)" in md  # m3g: the same value on both seeds
    assert "± > 1.8e+308 (2)" in md  # infonce_pwe's std, beyond the float range


# -- 4. the index trusts no board file it finds ------------------------------------------------------------------------
EVIL_TEXT = "<script>alert(1)</script>\n| a | b |\n[l](javascript:alert(1))"


def _plant(out: Path, group: dict[str, Any], name: str = "evil") -> Path:
    base = {"kind": "real", "dataset": "d", "synthetic": False, "objectives": 2, "seeds": [0, 1], "runs": 4,
            "best": "`raw` (acc 50.00 ± 0.00 (2))", "title": None, "key": "k", "protocol": "task_head",
            "primary": "acc", "reference": None}
    meta = {"benchmark": name, "format": 2, "groups": [base | group]}
    path = out / f"{name}.md"
    path.write_text(f"# Leaderboard: {name}\n\ntext\n\n<!-- fusebench-board {json.dumps(meta)} -->\n")
    return path


class _Rows(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.rows: list[int] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag == "tr":
            self.rows.append(0)
        elif tag in ("td", "th") and self.rows:
            self.rows[-1] += 1


def test_index_escapes_a_planted_boards_title_and_best_line(tmp_path: Path) -> None:
    runs = _copy(tmp_path, "quickstart", objectives=("none", "raw"), seeds=(0, 1))
    out = tmp_path / "out"
    out.mkdir()
    _plant(out, {"title": EVIL_TEXT, "best": "`raw` " + EVIL_TEXT})
    write_leaderboards(runs, out, plots=False, formats=("md", "html"))
    readme = (out / "README.md").read_text()
    assert "<script" not in readme and not re.search(r"(?<!\\)\]\(javascript", readme)  # no tag, no link
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in readme  # shown as text
    row = next(x for x in readme.splitlines() if x.startswith("| [evil](evil.md)"))
    header = next(x for x in readme.splitlines() if x.startswith("| benchmark |"))
    assert _cells(row) == _cells(header) == 6
    assert "`raw`" in row  # the best line's code span is kept
    page = (out / "index.html").read_text()
    assert "<script>alert" not in page and 'href="javascript' not in page
    parser = _Rows()
    parser.feed(page)
    assert parser.rows and max(parser.rows) == 6  # no row of the index table grew cells from the planted text
    evil_rows = [chunk for c in page.split("<tr")[1:] if "evil.md" in (chunk := c.split("</tr>")[0])]
    assert evil_rows and all(chunk.count("<td") + chunk.count("<th") == 6 for chunk in evil_rows)


@pytest.mark.parametrize("field,value", [("objectives", "<script>x</script>"), ("runs", -1), ("seeds", ["0|1"]),
                                         ("dataset", "d|x"), ("primary", "a`b"), ("key", "a|b"), ("reference", 3),
                                         ("direction", "up"), ("title", 5), ("best", ["x"])])
def test_index_refuses_a_board_field_of_the_wrong_type_naming_file_and_field(tmp_path: Path, capsys, field: str,
                                                                              value: Any) -> None:
    runs = _copy(tmp_path, "quickstart", objectives=("raw",), seeds=(0, 1))
    out = tmp_path / "out"
    out.mkdir()
    path = _plant(out, {field: value})
    line = _one_error_line(runs, out, capsys)
    assert str(path) in line and repr(field) in line


def test_index_refuses_nan_means_naming_the_file(tmp_path: Path, capsys) -> None:
    runs = _copy(tmp_path, "quickstart", objectives=("raw",), seeds=(0, 1))
    out = tmp_path / "out"
    out.mkdir()
    path = out / "evil.md"
    path.write_text('# Leaderboard: evil\n\n<!-- fusebench-board {"benchmark": "evil", "format": 2, "groups": '
                    '[{"kind": "real", "means": {"raw": NaN, "none": 0.5}, "protocol": "embedding_eval", '
                    '"direction": "higher", "primary": "acc"}]} -->\n')
    line = _one_error_line(runs, out, capsys)
    assert str(path) in line and "'means'" in line and "finite" in line


# -- 5. collapsed k-means -----------------------------------------------------------------------------------------------
def _nmi_below(runs: Path, bench: str, objective: str, threshold: float = 0.01) -> tuple[int, int]:
    vals = [_metric(p, "nmi") for p in sorted((runs / bench / objective).glob("seed*/run.json"))]
    vals = [v for v in vals if v is not None]
    return sum(v < threshold for v in vals), len(vals)


def test_rows_with_collapsed_kmeans_are_named_under_the_table(tmp_path: Path) -> None:
    rows = ("none", "raw", "raw_l2", "raw_pca", "infonce_pwe")
    runs = _copy(tmp_path, "mv-webkb", objectives=rows)
    write_leaderboards(runs, tmp_path / "out", plots=False)
    md = (tmp_path / "out" / "mv-webkb.md").read_text()
    note = next(x for x in md.splitlines() if x.startswith("**k-means collapsed**"))
    for o in rows:
        low, n = _nmi_below(runs, "mv-webkb", o)
        assert (f"`{o}` {low} of {n}" in note) == (low > 0), (o, low, n)
    assert _nmi_below(runs, "mv-webkb", "raw") == (10, 10)  # the committed raw row: every clustering collapsed
    # seed 0: the collapsed clusterings score the majority-class rate (NMI < 0.01 there)
    seed0 = runs / "mv-webkb" / "raw_pca" / "seed0" / "run.json"
    assert _metric(seed0, "cluster_acc") == pytest.approx(0.781161, abs=1e-6) and _metric(seed0, "nmi") < 0.01


def test_no_collapse_note_where_every_clustering_works(tmp_path: Path) -> None:
    runs = _copy(tmp_path, "mv-webkb", objectives=("raw_l2",))
    assert _nmi_below(runs, "mv-webkb", "raw_l2")[0] == 0
    write_leaderboards(runs, tmp_path / "out", plots=False)
    assert "k-means collapsed" not in (tmp_path / "out" / "mv-webkb.md").read_text()
