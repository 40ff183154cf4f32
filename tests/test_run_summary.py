"""Issue #32, item 2: say where and what. ``fusebench run`` ends with the records folder, the board files with
``--leaderboard`` (each written or unchanged) and a compact table (objective, primary metric mean ± std, n)
of what it ran or reused; ``fusebench leaderboard`` ends with the files it wrote or left unchanged. On a tiny
real quickstart run; the table's numbers are recomputed here from the run.json files (statistics module)."""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

from fusebench.cli import main
from fusebench.cli.run_summary import primary_of, summary_rows, tracker_lines

TINY = ["--set", "pretrain.epochs=1", "--set", "downstream.epochs=1",
        "--set", "dataset.synthetic_spec={num_samples: 128, seed: 0}"]


def _run(tmp_path: Path, capsys, *extra: str) -> list[str]:
    args = ["run", "quickstart", "--objective", "none", "m3g", "--seeds", "0", "1", "--out", str(tmp_path / "runs"),
            "--no-progress", *TINY, *extra]
    assert main(args) == 0
    return capsys.readouterr().out.splitlines()


def _by_hand(runs: Path, objective: str) -> tuple[str, int]:
    accs = [json.loads((runs / "quickstart" / objective / f"seed{s}" / "run.json").read_text())["metrics"]["acc"]["value"]
            for s in (0, 1)]
    return f"{statistics.mean(accs):.4f} ± {statistics.stdev(accs):.4f}", len(accs)


def test_run_ends_with_records_boards_and_a_table(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("FUSEBENCH_CACHE", str(tmp_path / "cache"))  # this test's own: the twin is generated here
    runs, boards = tmp_path / "runs", tmp_path / "boards"
    lines = _run(tmp_path, capsys, "--leaderboard", str(boards))
    tail = lines[lines.index(next(x for x in lines if x.startswith("records: "))):]
    assert tail[0] == f"records: {runs} (4 cell(s) of quickstart)"
    wrote = [x for x in tail if x.startswith("boards: ")]
    # the formats line first (a new folder holds no html page: md, csv, json), then the files
    assert wrote[0] == (f"boards: formats md, csv, json (no html page in {boards}: add one with fusebench "
                        f"leaderboard --format md csv json html)")
    assert wrote[1:] == [f"boards: wrote {boards / n}" for n in
                     ("quickstart-curves.png", "quickstart.md", "quickstart.csv", "quickstart.json",
                      "quickstart-seeds.csv", "README.md")]
    # the synthetic twin this run generated (in the test's own cache folder) is said after the boards
    data = [x for x in tail if x.startswith("data: ")]
    assert len(data) == 1 and data[0].startswith("data: synthetic twin written to "), data
    assert Path(data[0].split(" written to ")[1].split(" (made once")[0], ".complete").is_file()
    assert tail[1 + len(wrote)] == data[0]
    table = tail[1 + len(wrote) + len(data):]
    assert re.split(r"\s{2,}", table[0]) == ["benchmark", "objective", "metric", "mean ± std", "n"]
    rows = {re.split(r"\s{2,}", x)[1]: re.split(r"\s{2,}", x) for x in table[1:]}
    assert set(rows) == {"none", "m3g"} and len(table) == 3
    for obj in ("none", "m3g"):
        shown, n = _by_hand(runs, obj)
        assert rows[obj] == ["quickstart", obj, "acc", shown, str(n)]
    # the same command again: every cell reused, every board file unchanged, the same table
    again = _run(tmp_path, capsys, "--leaderboard", str(boards))
    assert [x for x in again if x.startswith("boards: ")] == [wrote[0]] + [x.replace("wrote", "unchanged")
                                                                          for x in wrote[1:]]
    assert again[-3:] == table


def test_run_without_leaderboard_names_the_records_folder_only(tmp_path: Path, capsys) -> None:
    lines = _run(tmp_path, capsys)
    assert any(x == f"records: {tmp_path / 'runs'} (4 cell(s) of quickstart)" for x in lines)
    assert not any(x.startswith("boards: ") for x in lines)


def test_leaderboard_ends_with_the_files_written_or_unchanged(tmp_path: Path, capsys) -> None:
    _run(tmp_path, capsys)
    runs, boards = tmp_path / "runs", tmp_path / "boards"
    args = ["leaderboard", "--runs", str(runs), "--out", str(boards), "--no-plots", "--format", "md", "json"]
    assert main(args) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [f"wrote {boards / 'quickstart.md'}", f"wrote {boards / 'quickstart.json'}",
                   f"wrote {boards / 'README.md'}", f"3 file(s) written, 0 unchanged in {boards}"]
    (boards / "quickstart.json").write_text("stale\n")  # one file out of date: rewritten, the others left alone
    assert main(args) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [f"unchanged {boards / 'quickstart.md'}", f"wrote {boards / 'quickstart.json'}",
                   f"unchanged {boards / 'README.md'}", f"1 file(s) written, 2 unchanged in {boards}"]


def test_summary_rows_skip_entries_without_a_record_and_count_undefined_values() -> None:
    recs = [{"benchmark": "b", "objective": "o", "seed": 0, "metrics": {"acc": 0.5}, "comparison": {"primary": "acc"}},
            {"benchmark": "b", "objective": "o", "seed": 1, "metrics": {"acc": 0.7}, "comparison": {"primary": "acc"}},
            {"benchmark": "b", "objective": "o", "seed": 2, "metrics": {"acc": None}, "comparison": {"primary": "acc"}},
            {"status": "failed", "benchmark": "b", "objective": "p", "seed": 0, "error": "x"}]
    # mean 0.6, sample std sqrt(((0.1)^2 + (0.1)^2) / 1) = 0.1414
    assert summary_rows(recs) == [("b", "o", "acc", "0.6000 ± 0.1414", 2, 1)]
    assert primary_of({"metrics": {"mae": 1.0, "corr": 0.2}, "selection": {"metric": "corr"}}) == "corr"
    assert primary_of({"metrics": {"mae": 1.0, "corr": 0.2}}) == "corr"  # first in sorted order


def test_the_run_says_where_each_tracker_wrote(tmp_path: Path, monkeypatch) -> None:
    """--logger csv tensorboard mlflow: one line each naming where its output is (the trackers' own layout: a cell's
    metrics.csv and tb/, mlflow's default store file:<out>/.mlruns), and both files exist after a run."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    out = tmp_path / "runs"
    assert tracker_lines(["csv", "tensorboard", "mlflow"], str(out)) == [
        f"logs (csv): metrics.csv in each cell folder under {out}",
        f"logs (tensorboard): tb/ in each cell folder under {out} (tensorboard --logdir {out})",
        f"logs (mlflow): tracking URI file://{out.resolve()}/.mlruns (MLFLOW_ALLOW_FILE_STORE=true mlflow ui "
        f"--backend-store-uri file://{out.resolve()}/.mlruns)"]
    assert tracker_lines(["mlflow"], str(out), "http://host:5000") == [
        "logs (mlflow): tracking URI http://host:5000 (open it in a browser)"]
    assert tracker_lines(["mlflow"], str(out), "sqlite:///runs/mlflow.db") == [
        "logs (mlflow): tracking URI sqlite:///runs/mlflow.db (mlflow ui --backend-store-uri sqlite:///runs/mlflow.db)"]
    assert tracker_lines(None, str(out)) == []
    assert main(["run", "quickstart", "--objective", "none", "--seeds", "0", "--set", "downstream.epochs=1",
                 "--out", str(out), "--logger", "csv", "tensorboard", "--no-progress"]) == 0
    cell = out / "quickstart" / "none" / "seed0"
    assert (cell / "metrics.csv").is_file() and (cell / "tb").is_dir()
