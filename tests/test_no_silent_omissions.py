"""No silent omissions (issue #32, item 6).

* The published rows are found without ``--reported``: ``fusebench leaderboard --out NEW`` keeps each board's
  "Published results" section, with every label the shipped list (read here with yaml) has for the board.
* An encoder declares the modality kinds it reads; a spec pairing it with a dataset of another kind is refused
  when the spec is loaded, naming the encoder, its kinds and the modalities with theirs (it used to fail inside
  the first cell: ``mat1 and mat2 shapes cannot be multiplied``).
* The generic ``multiview`` benchmark names the data file it read (basename, sha256 computed here with hashlib)
  in the record, the cell's start line and the board; a second file run into the same ``--out`` is refused as
  "a different data file", naming both files (it used to say "another configuration").
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import shutil
import tomllib
from pathlib import Path

import pytest
import yaml

from fusebench import benchmarks, encoders
from fusebench.leaderboard.reported import PUBLISHED_TITLE
from fusebench.spec.config import ConfigError

ROOT = Path(__file__).resolve().parents[1]
PUBLISHED = ROOT / "benchmarks" / "published" / "reported.yaml"

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # conftest.py


# -- published rows ------------------------------------------------------------------------------------------
def test_published_rows_need_no_reported_option(tmp_path: Path, capsys) -> None:
    entries = yaml.safe_load(PUBLISHED.read_text())
    by_bench: dict[str, set[str]] = {}
    for e in entries:
        by_bench.setdefault(e["benchmark"], set()).add(e["label"])
    runs = ROOT / "leaderboards" / "runs"
    bench = next(b for b in sorted(by_bench) if (runs / b).is_dir())  # a committed board with published rows
    snapshot = tmp_path / "runs"
    shutil.copytree(runs / bench, snapshot / bench, ignore=shutil.ignore_patterns(".*"))
    from fusebench.cli import main

    new = tmp_path / "NEW"  # no reported.yaml there, no --reported
    assert main(["leaderboard", "--runs", str(snapshot), "--out", str(new), "--no-plots"]) == 0
    board = (new / f"{bench}.md").read_text()
    assert PUBLISHED_TITLE in board
    section = board[board.index(PUBLISHED_TITLE):]
    for label in by_bench[bench]:
        assert label.split(" (")[0] in section, label


def test_the_published_list_is_package_data() -> None:
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    shipped = patterns["fusebench.benchmarks"]
    assert any(fnmatch.fnmatch(str(PUBLISHED.relative_to(ROOT / "benchmarks")), p) for p in shipped)
    assert "reported" not in benchmarks.available()  # a subfolder: never read as a benchmark spec


# -- encoder kinds -------------------------------------------------------------------------------------------
#: the kinds each built-in encoder reads, from the layouts its forward takes (encoders/*.py docstrings)
KINDS = {"mlp": {"vector"}, "identity": {"vector"}, "eeg_conv": {"signal"}, "seq_transformer": {"sequence", "vector"},
         "esanet": {"image", "depth", "normal"}, "pointnet2": {"points", "point_features"},
         "votenet": {"points", "point_features"}}


@pytest.mark.parametrize("name", encoders.ENCODERS.builtin())  # a plugin installed here is not in KINDS
def test_every_encoder_declares_its_kinds(name: str) -> None:
    declared = encoders.ENCODERS.get(name).input_kinds
    assert declared is not None, f"encoder {name!r} declares no input_kinds"
    assert set(declared) == KINDS[name]
    assert encoders.ENCODERS.meta(name)["input_kinds"] == list(declared)  # fusebench list encoders --details


@pytest.mark.parametrize("bench,encoder,dataset_kind", [("sleep-edf-staging", "mlp", "signal"),
                                                       ("quickstart", "eeg_conv", "vector"),
                                                       ("mosi-sentiment", "mlp", "sequence")])
def test_an_encoder_paired_with_another_kind_is_refused_at_load(bench: str, encoder: str, dataset_kind: str) -> None:
    with pytest.raises(ConfigError) as e:
        benchmarks.load(bench, overrides={"encoder.id": encoder, "encoder.config": {}})
    msg = str(e.value)
    assert f"encoder {encoder!r} reads modality kinds {sorted(KINDS[encoder])}" in msg
    assert f"({dataset_kind})" in msg and "mat1 and mat2" not in msg


def test_every_shipped_benchmark_pairs_readable_kinds() -> None:
    for name in benchmarks.builtin():
        benchmarks.load(name)  # no spec of ours is refused


# -- the generic multiview board names its data file -----------------------------------------------------------
def test_multiview_names_its_data_file_and_refuses_another(fixtures_dir: Path, tmp_path: Path, capsys) -> None:
    from fusebench.cli.run import main

    ngs, hw = fixtures_dir / "multiview" / "NGs.mat", fixtures_dir / "multiview" / "HW2sources.mat"
    sha = hashlib.sha256(ngs.read_bytes()).hexdigest()
    out = tmp_path / "runs"
    argv = ["multiview", "--objective", "none", "--seeds", "0", "--out", str(out)]
    assert main([*argv, "--data-root", str(ngs), "--leaderboard", str(tmp_path / "boards")]) == 0
    err = capsys.readouterr().err
    assert f"data=NGs.mat (sha256 {sha[:12]})" in err  # the cell's start line
    rec = json.loads((out / "multiview" / "none" / "seed0" / "run.json").read_text())
    assert rec["dataset"]["data_file"] == {"name": "NGs.mat", "sha256": sha}
    data_line = next(ln for ln in (tmp_path / "boards" / "multiview.md").read_text().splitlines()
                     if ln.startswith("Data: "))
    assert "data file `NGs.mat`" in data_line and sha[:16] in data_line
    # another file into the same --out: refused before any work, naming the data, not "another configuration"
    assert main([*argv, "--data-root", str(hw)]) == 2
    err = capsys.readouterr().err
    hw_sha = hashlib.sha256(hw.read_bytes()).hexdigest()
    assert "different data file" in err and f"NGs.mat (sha256 {sha})" in err and f"HW2sources.mat (sha256 {hw_sha})" in err
    assert "another configuration" not in err
