"""Issue #32, item 7: ``fusebench leaderboard --format tex`` writes ``<board>.tex``, a booktabs table per
comparability group with the primary metric (mean ± std), its interval and the budget, columns selectable,
ready for ``\\input``; text from records is escaped for LaTeX. Values are checked against the board's JSON
numbers formatted by hand (fractions x100, two decimals)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from fusebench.leaderboard import main as leaderboard_main
from fusebench.leaderboard.tex import check_columns, render_tex, tex_text

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = ROOT / "leaderboards" / "runs"


@pytest.fixture
def quickstart_runs(tmp_path: Path) -> Path:
    runs = tmp_path / "runs"
    shutil.copytree(COMMITTED / "quickstart", runs / "quickstart")
    return runs


def _table_rows(text: str) -> dict[str, list[str]]:
    body = text.split("\\midrule\n", 1)[1].split("\\bottomrule", 1)[0]
    rows = [line.removesuffix(" \\\\").split(" & ") for line in body.strip().splitlines()]
    return {r[0]: r[1:] for r in rows}


def test_tex_board_has_primary_interval_and_budget(quickstart_runs: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "boards"
    assert leaderboard_main(["--runs", str(quickstart_runs), "--out", str(out), "--format", "json", "tex"]) == 0
    assert f"wrote {out / 'quickstart.tex'}" in capsys.readouterr().out
    tex = (out / "quickstart.tex").read_text()
    assert tex.count("\\begin{tabular}{lrrrr}") == 1 and "\\toprule" in tex and tex.endswith("\\end{tabular}\n")
    assert "Objective & acc (\\%) $\\uparrow$ & 95\\% CI & $n$ & Steps \\\\" in tex
    data = json.loads((out / "quickstart.json").read_text())["groups"][0]
    rows = _table_rows(tex)
    assert set(rows) == {"infonce\\_pwe", "m3g", "mv\\_dhel", "none", "raw", "tuple\\_infonce"}  # ids escaped
    for row in data["rows"]:
        acc = row["metrics"]["acc"]
        mean = f"{100 * acc['mean']:.2f}"
        # bold: the best row, only when it is separable from the second (as on the markdown board)
        shown = f"\\textbf{{{mean}}}" if row["objective"] == data["best"] and data["best_separable"] else mean
        ci = f"[{100 * row['ci'][0]:.2f}, {100 * row['ci'][1]:.2f}]"
        steps = row["budget"]["steps"]
        assert rows[tex_text(row["objective"])] == [f"{shown} $\\pm$ {100 * acc['std']:.2f}", ci, str(acc["n"]),
                                                    str(steps[0])]
    # m3g by hand from the committed board: 56.64 ± 11.37, 320 steps
    assert rows["m3g"][0] == "56.64 $\\pm$ 11.37" and rows["m3g"][3] == "320"


def test_tex_columns_are_selectable_and_checked(quickstart_runs: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "boards"
    assert leaderboard_main(["--runs", str(quickstart_runs), "--out", str(out), "--format", "tex",
                             "--tex-columns", "bacc", "samples", "delta"]) == 0
    tex = (out / "quickstart.tex").read_text()
    assert "Objective & bacc (\\%) $\\uparrow$ & Samples seen & $\\Delta$ vs raw \\\\" in tex
    assert _table_rows(tex)["raw"][1:] == ["0", "--"]  # the reference row: no samples seen, no difference
    assert _table_rows(tex)["m3g"][1] == "20480"
    capsys.readouterr()
    assert leaderboard_main(["--runs", str(quickstart_runs), "--out", str(tmp_path / "b2"), "--format", "tex",
                             "--tex-columns", "mean", "bac"]) == 2
    err = capsys.readouterr().err
    assert "unknown column 'bac'" in err and "did you mean 'bacc'" in err and "Traceback" not in err
    assert not (tmp_path / "b2").exists()  # nothing written
    assert leaderboard_main(["--runs", str(quickstart_runs), "--out", str(tmp_path / "b3"), "--format", "md",
                             "--tex-columns", "mean"]) == 2
    assert "add tex to --format" in capsys.readouterr().err


def _group(objective: str, dataset: str = "toy") -> dict:
    return {"benchmark": "toy", "groups": [{
        "key": "k1", "dataset": dataset, "synthetic": True, "seeds": [0], "primary": "acc", "reference": "raw",
        "best": None, "metrics": [{"id": "acc", "unit": "fraction", "direction": "higher"}],
        "rows": [{"objective": objective, "aliases": ["a_b"], "invalid": None, "ci": None, "delta": None,
                  "p_holm": None, "budget": None, "cost": {"pretrain_time_s": 1.0, "peak_memory_mb": 2.0},
                  "metrics": {"acc": {"mean": 0.5, "std": 0.0, "n": 1, "undefined": 0}}}]}]}


def test_text_from_records_is_escaped() -> None:
    hostile = "x}\\input{/etc/passwd}&%$#_~^<>|"
    assert tex_text(hostile) == ("x\\}\\textbackslash{}input\\{/etc/passwd\\}\\&\\%\\$\\#\\_\\textasciitilde{}"
                                 "\\textasciicircum{}\\textless{}\\textgreater{}\\textbar{}")
    assert tex_text("two\nlines\tand  spaces") == "two lines and spaces"
    text = render_tex(_group(hostile, dataset="d\\x"))
    assert "\\input{" not in text and "x\\}\\textbackslash{}input\\{/etc/passwd\\}" in text
    assert "($\\equiv$ a\\_b)" in text and "dataset d\\textbackslash{}x" in text
    assert "\\\\\n" in text and text.count("\\begin{tabular}") == 1


def test_check_columns() -> None:
    assert check_columns(["mean", "ci", "nmi"], ["nmi"]) == ("mean", "ci", "nmi")
    with pytest.raises(ValueError, match="^--tex-columns: 'mean' given twice; a table has each column once$"):
        check_columns(["mean", "ci", "mean", "nmi"], ["nmi"])
    for bad in ("mean", [], ["nmi2"]):
        with pytest.raises(ValueError, match="--tex-columns"):
            check_columns(bad, ["nmi"])


def test_a_std_beyond_the_float_range_is_shown_as_its_bound(tmp_path: Path) -> None:
    """The std of -1.7e308 and 1.6e308 is |a - b| / sqrt(2) = 2.33e308, past the float range: the JSON holds null
    (strict JSON has no infinity) beside a finite mean, and the table shows the bound it exceeds, as the markdown
    board does ("> 1.8e+308", with LaTeX's escape for '>'); it stopped the regeneration with a TypeError."""
    from test_leaderboard_hostile_2 import _set_metric
    from test_records_hostile import _copy, _edit

    runs = _copy(tmp_path, "mosi-sentiment", objectives=("none", "infonce_pwe"), seeds=(0, 1))
    for seed, v in enumerate((-1.7e308, 1.6e308)):
        _edit(runs, _set_metric("mae", v), objective="infonce_pwe", seed=str(seed))
    out = tmp_path / "boards"
    assert leaderboard_main(["--runs", str(runs), "--out", str(out), "--no-plots", "--no-progress",
                             "--format", "json", "tex", "--tex-columns", "mae"]) == 0
    entry = json.loads((out / "mosi-sentiment.json").read_text())["groups"][0]["rows"]
    entry = next(r for r in entry if r["objective"] == "infonce_pwe")["metrics"]["mae"]
    assert entry["std"] is None and entry["mean"] == pytest.approx(-5e306, rel=1e-9)  # (-1.7e308 + 1.6e308) / 2
    rows = _table_rows((out / "mosi-sentiment.tex").read_text())
    assert rows["infonce\\_pwe"] == ["-5.0000e+306 $\\pm$ \\textgreater{} 1.8e+308"]
