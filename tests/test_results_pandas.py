"""Issue #32, item 5: per-seed results as data. ``fusebench.results.load(runs_dir)`` is a pandas DataFrame with
one row per record, read through the validated record reader; ``fusebench leaderboard --format csv`` writes
the same rows per board as ``<board>-seeds.csv``. Values are checked against two committed records read by
hand (the literals below were copied from the run.json files, not computed by the code under test)."""

from __future__ import annotations

import csv
import io
import json
import math
import re
import shutil
import sys
from pathlib import Path

import pytest

pd = pytest.importorskip("pandas")

import fusebench.results as results  # noqa: E402
from fusebench.leaderboard import main as leaderboard_main  # noqa: E402
from fusebench.leaderboard.fingerprint import MANIFEST  # noqa: E402
from fusebench.records import RecordError  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = ROOT / "leaderboards" / "runs"
QS = "quickstart/m3g/seed0/run.json"
HW = "mv-handwritten/mv_infonce/seed3/run.json"


@pytest.fixture
def two_runs(tmp_path: Path) -> Path:
    """A runs folder holding two committed records, copied as they are."""
    runs = tmp_path / "runs"
    for rel in (QS, HW):
        (runs / rel).parent.mkdir(parents=True)
        shutil.copyfile(COMMITTED / rel, runs / rel)
    return runs


def test_load_matches_two_committed_records_read_by_hand(two_runs: Path) -> None:
    df = results.load(two_runs)
    assert isinstance(df, pd.DataFrame) and len(df) == 2
    assert list(df.columns[:4]) == ["benchmark", "objective", "seed", "key"]
    # sorted by benchmark: mv-handwritten before quickstart
    hw, qs = df.iloc[0], df.iloc[1]
    assert (hw.benchmark, hw.objective, hw.seed, hw.key) == ("mv-handwritten", "mv_infonce", 3, "82ab96908e7f82d8")
    assert (hw.fs1_acc, hw.nmi, hw.acc, hw.ari) == (0.8538749999999998, 0.8366248792835518, 0.9825, 0.7661086077208816)
    assert (hw.budget_steps, hw.budget_samples_seen, hw.budget_epochs, hw.budget_batch_size) == (370, 11840, 10, 32)
    assert (hw.pretrain_time_s, hw.peak_memory_mb, hw.wall_time_s) == (2.2014955429986003, 781.2109375, 8.44594219999999)
    assert (hw.config_hash, hw.precision, hw.dataset, bool(hw.synthetic)) == ("e29eb76aa88d15fb", "32", "mv_handwritten", False)
    assert (qs.benchmark, qs.objective, qs.seed, qs.key) == ("quickstart", "m3g", 0, "2582fca86893a865")
    assert (qs.acc, qs.bacc) == (0.435546875, 0.4510813851890233)
    assert (qs.budget_steps, qs.budget_samples_seen) == (320, 20480)
    assert (qs.pretrain_time_s, qs.peak_memory_mb, qs.config_hash) == (1.2812310019999131, 746.06640625, "d248c487ebf6bd9e")
    assert math.isnan(qs.fs1_acc) and math.isnan(hw.bacc)  # a metric the other board has: NaN, not 0
    assert qs.path.endswith(QS)
    only = results.load(two_runs, benchmark="quickstart")
    assert list(only.benchmark) == ["quickstart"]


def test_load_refuses_bad_input_with_one_clear_error(two_runs: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="does not exist"):
        results.load(tmp_path / "nowhere")
    with pytest.raises(ValueError, match="did you mean 'quickstart'"):
        results.load(two_runs, benchmark="quickstrat")
    bad = json.loads((two_runs / QS).read_text())
    bad["seed"] = "0"  # a string: the validated reader refuses it, naming the file and field
    (two_runs / QS).write_text(json.dumps(bad))
    with pytest.raises(RecordError, match="seed"):
        results.load(two_runs)


def test_undefined_metric_and_a_metric_named_like_a_column(two_runs: Path) -> None:
    rec = json.loads((two_runs / QS).read_text())
    rec["metrics"]["bacc"] = None  # undefined for this run (strict JSON null)
    rec["metrics"]["seed"] = 0.25  # a metric whose id is a fixed column's name
    rec["schema_version"] = 1  # a free metric set (schema 2 pins the versions of config.metrics)
    (two_runs / QS).write_text(json.dumps(rec))
    df = results.load(two_runs, benchmark="quickstart")
    row = df.iloc[0]
    assert math.isnan(row.bacc) and row.seed == 0 and row.metric_seed == 0.25


def test_leaderboard_csv_writes_a_per_seed_csv_beside_the_aggregate_one(two_runs: Path, tmp_path: Path,
                                                                       capsys) -> None:
    out = tmp_path / "boards"
    assert leaderboard_main(["--runs", str(two_runs), "--out", str(out), "--format", "csv", "--no-plots"]) == 0
    names = sorted(p.name for p in out.iterdir() if p.name != MANIFEST)  # the regeneration manifest aside
    assert names == ["mv-handwritten-seeds.csv", "mv-handwritten.csv", "quickstart-seeds.csv", "quickstart.csv"]
    rows = list(csv.DictReader(io.StringIO((out / "quickstart-seeds.csv").read_text())))
    assert len(rows) == 1 and "path" not in rows[0]  # the runs folder's location is not part of the board
    r = rows[0]
    assert (r["benchmark"], r["objective"], r["seed"], r["key"]) == ("quickstart", "m3g", "0", "2582fca86893a865")
    assert (r["acc"], r["bacc"], r["budget_steps"], r["config_hash"]) == ("0.435546875", "0.451081385189", "320",
                                                                         "d248c487ebf6bd9e")  # 12 significant digits
    hw = list(csv.DictReader(io.StringIO((out / "mv-handwritten-seeds.csv").read_text())))[0]
    assert (hw["fs1_acc"], hw["nmi"], hw["budget_samples_seen"]) == ("0.853875", "0.836624879284", "11840")
    text = capsys.readouterr().out
    assert f"wrote {out / 'quickstart-seeds.csv'}" in text
    # regenerated from the same records: byte-identical, left unchanged, and said so
    before = (out / "quickstart-seeds.csv").read_bytes()
    assert leaderboard_main(["--runs", str(two_runs), "--out", str(out), "--format", "csv", "--no-plots"]) == 0
    assert (out / "quickstart-seeds.csv").read_bytes() == before
    assert f"unchanged {out / 'quickstart-seeds.csv'}" in capsys.readouterr().out


def test_per_seed_csv_never_overwrites_another_board(two_runs: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "boards"
    out.mkdir()
    (out / "quickstart-seeds.md").write_text("# the board of a benchmark named quickstart-seeds\n")
    (out / "quickstart-seeds.csv").write_text("its aggregate CSV\n")
    assert leaderboard_main(["--runs", str(two_runs), "--out", str(out), "--format", "csv", "--no-plots"]) == 2
    assert "would overwrite the CSV of the board 'quickstart-seeds'" in capsys.readouterr().err
    assert (out / "quickstart-seeds.csv").read_text() == "its aggregate CSV\n"
    assert sorted(p.name for p in out.iterdir()) == ["quickstart-seeds.csv", "quickstart-seeds.md"]  # nothing written


def test_the_readme_example_runs(two_runs: Path) -> None:
    """README "Using it": the pandas example as printed there, run on the copied records (its folder swapped for
    theirs); it groups by the comparability key and the objective."""
    readme = (ROOT / "README.md").read_text()
    block = next(b for b in re.findall(r"^```python\n(.*?)^```", readme, re.M | re.S) if "fusebench.results.load(" in b)
    assert '"leaderboards/runs"' in block
    lines = block.replace('"leaderboards/runs"', repr(str(two_runs))).strip().splitlines()
    namespace: dict = {}
    exec("\n".join(lines[:-1]), namespace)
    table = eval(lines[-1], namespace)  # the last line is the expression the README shows
    assert list(table.index.names) == ["key", "objective"]
    assert table.loc[("2582fca86893a865", "m3g"), "mean"] == 0.435546875
    assert table.loc[("2582fca86893a865", "m3g"), "count"] == 1
    # the module docstring shows the same grouping
    assert 'groupby(["key", "objective"])' in results.__doc__


def test_load_refuses_wrong_argument_types_and_a_file(two_runs: Path) -> None:
    with pytest.raises(TypeError, match="runs_dir: expected the path of a runs folder"):
        results.load(3)
    with pytest.raises(TypeError, match="benchmark: expected a benchmark id"):
        results.load(two_runs, benchmark=3)
    with pytest.raises(ValueError, match="run.json is not a folder"):
        results.load(two_runs / QS)


def test_load_imports_pandas_only_when_called() -> None:
    import subprocess

    code = "import sys, fusebench.results; print('pandas' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "False"
