"""Leaderboard generation from hand-written run.json files; expected cells worked out by hand."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from fusebench.leaderboard import benchmark_table, load_runs, write_leaderboards


def _record(obj: str, seed: int, metrics: dict[str, float], synthetic: bool = True) -> dict:
    return {
        "benchmark": "toy", "objective": obj, "seed": seed, "metrics": metrics,
        "metric_directions": {"acc": "higher", "mae": "lower"},
        "config": {"metrics": ["acc", "mae"], "selection_metric": "acc", "description": "toy benchmark"},
        "dataset": {"id": "toy", "synthetic": synthetic},
        "selection": {"rule": "best validation acc"},
        "pretrain_time_s": 10.0 + seed, "peak_memory_mb": 100.0, "suite_version": "0.1.0",
        "protocol": {"acc2": "non0 convention"},
        "curves": {"pretrain_loss": [3.0 - 0.1 * i - 0.01 * seed for i in range(5)]},
    }


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    acc_a = [0.5, 0.6, 0.7]
    acc_b = [0.45, 0.5, 0.65]
    for s in range(3):
        for obj, acc, mae in (("alpha", acc_a[s], 0.9), ("beta", acc_b[s], 0.8)):
            d = tmp_path / "runs" / "toy" / obj / f"seed{s}"
            d.mkdir(parents=True)
            (d / "run.json").write_text(json.dumps(_record(obj, s, {"acc": acc, "mae": mae})))
    d = tmp_path / "runs" / "toy" / "gamma" / "seed0"  # a row with a missing metric
    d.mkdir(parents=True)
    (d / "run.json").write_text(json.dumps(_record("gamma", 0, {"acc": 0.1})))
    return tmp_path / "runs"


def test_table_cells_by_hand(runs: Path) -> None:
    md = benchmark_table("toy", load_runs(runs)["toy"])
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]] for line in md.splitlines()
            if line.startswith("| `")}
    # alpha: mean 0.6, sample std 0.1 -> percent; best acc -> bold
    assert rows["`alpha`"][0] == "**60.00 ± 10.00 (3)**"
    # beta: mean 0.5333.., std sqrt(((.45-.5333)^2+(.5-.5333)^2+(.65-.5333)^2)/2) = 0.104083
    assert rows["`beta`"][0] == "53.33 ± 10.41 (3)"
    # mae is lower-is-better: beta's 0.8 is bold
    assert rows["`beta`"][1] == "**0.8000 ± 0.0000 (3)**"
    assert rows["`gamma`"][1] == "—"
    # cost columns: mean pretraining time (10 + seed over seeds 0..2) = 11.0
    assert rows["`alpha`"][2] == "11.0"
    # paired t-test beta vs alpha: diffs .05,.1,.05, t = 4, df = 2 -> p = 1 - t / sqrt(t^2 + 2)
    p = 1 - 4 / math.sqrt(18)
    assert rows["`beta`"][4] == f"{p:.3f}"
    assert rows["`alpha`"][4] == "—"
    assert rows["`gamma`"][4] == "n/a"  # one shared seed only
    assert "acc ↑" in md and "mae ↓" in md
    assert "Data: **synthetic**" in md
    assert "- acc2: non0 convention" in md


def test_regeneration_is_byte_identical(runs: Path, tmp_path: Path) -> None:
    out1, out2 = tmp_path / "lb1", tmp_path / "lb2"
    write_leaderboards(runs, out1)
    write_leaderboards(runs, out2)
    for name in ("toy.md", "README.md", "toy-curves.png"):
        assert (out1 / name).read_bytes() == (out2 / name).read_bytes(), name
    assert "![training curves](toy-curves.png)" in (out1 / "toy.md").read_text()
    index = (out1 / "README.md").read_text()
    assert "[toy](toy.md)" in index and "`alpha` (acc 60.00 ± 10.00 (3))" in index


def test_bad_run_file(tmp_path: Path) -> None:
    d = tmp_path / "runs" / "x"
    d.mkdir(parents=True)
    (d / "run.json").write_text("{not json")
    with pytest.raises(ValueError, match="run.json is not valid JSON"):
        load_runs(tmp_path / "runs")


def test_committed_leaderboards_regenerate_byte_identically(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[1] / "leaderboards"
    written = write_leaderboards(root / "runs", tmp_path)
    assert {p.name for p in written} == {p.name for p in root.glob("*.md")}
    for p in written:
        assert p.read_bytes() == (root / p.name).read_bytes(), f"{p.name} differs from the committed one"
