"""Hostile input, round 5: each test fails on 50aacc00 and passes with hostile-round5.patch."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

import fusebench
import fusebench.benchmarks
import fusebench.results
from fusebench.engine.loop import RunError
from fusebench.cli import main as cli_main
from fusebench.spec.config import ConfigError
from fusebench.typed import load_yaml

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # conftest.py
TINY = {"pretrain.epochs": 1, "downstream.epochs": 1}


# --- specs -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text", ["seeds: [0]\nseeds: [5]\n", "pretrain:\n  epochs: 1\n  epochs: 3\n",
                                  "h: {eps: 0.2, eps: 0.5}\n"])
def test_a_key_given_twice_is_refused_naming_both_lines(text: str) -> None:
    with pytest.raises(ConfigError, match=r"spec\.yaml: key '\w+' given twice in one mapping \(lines \d+ and \d+\)"):
        load_yaml(text, "spec.yaml")


def test_a_merge_key_may_still_be_overridden() -> None:
    assert load_yaml("a: &x {k: 1, j: 2}\nb: {<<: *x, k: 3}\n", "s")["b"] == {"k": 3, "j": 2}


def test_protocol_notes_values_are_typed_at_load() -> None:  # not after a whole cell, when the record is written
    with pytest.raises(ConfigError, match=r"protocol_notes\.a: expected str, got list"):
        fusebench.benchmarks.load("quickstart", overrides={"protocol_notes": {"a": [1, 2]}})


@pytest.mark.parametrize("key", ["pretrain.lr", "downstream.lr", "pretrain.weight_decay", "downstream.weight_decay"])
def test_an_infinite_rate_is_refused_at_load(key: str) -> None:  # `1e400` and `.inf` read as inf; inf > 0
    with pytest.raises(ConfigError, match=rf"{key} must be a finite number"):
        fusebench.benchmarks.load("quickstart", overrides={key: float("inf")})


# --- encoder weights ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def enc_state(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("lp")
    fusebench.run("quickstart", objective="m3g", seeds=[0], out=out, overrides=TINY, progress=False)
    model = torch.load(out / "quickstart/m3g/seed0/best.pt", weights_only=True)["model"]
    return {k[len("backbone."):]: v for k, v in model.items() if k.startswith("backbone.")}


def _nan(s):
    s = {k: v.clone() for k, v in s.items()}
    next(iter(s.values()))[0, 0] = float("nan")
    return s


@pytest.mark.parametrize("make, expected", [
    (_nan, "NaN or infinite values"),
    (lambda s: {k: (v * 100).long() for k, v in s.items()}, "dtype mismatch"),
    (lambda s: {k: v.to(torch.complex64) for k, v in s.items()}, "dtype mismatch"),
    (lambda s: {**s, 3: torch.zeros(1)}, "parameter names that are not strings"),
    (lambda s: {k: (v.to_sparse() if v.dim() == 2 else v) for k, v in s.items()}, "meta or sparse"),
    (lambda s: {k: torch.empty(v.shape, device="meta") for k, v in s.items()}, "meta or sparse"),
])
def test_weights_that_cannot_be_loaded_as_they_are_are_refused_before_any_cell(enc_state, tmp_path: Path, make,
                                                                                expected: str) -> None:
    torch.save(make(enc_state), tmp_path / "w.pt")
    with pytest.raises(ConfigError, match=expected):
        fusebench.run("quickstart", objective="mine", seeds=[0], out=tmp_path / "out",
                      overrides={"downstream.epochs": 1},
                      encoder_weights={"mine": str(tmp_path / "w.pt")}, progress=False)
    assert not (tmp_path / "out" / "quickstart").exists()


# --- records -----------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("runs")
    fusebench.run("quickstart", objective="m3g", seeds=[0, 1], out=out, overrides=TINY, progress=False)
    return out


def test_a_record_copied_into_another_seed_folder_is_refused_by_results_and_the_board(runs: Path,
                                                                                     tmp_path: Path) -> None:
    shutil.copytree(runs, tmp_path / "r")
    shutil.copytree(tmp_path / "r/quickstart/m3g/seed0", tmp_path / "r/quickstart/m3g/seed9")
    with pytest.raises(ValueError, match=r"seed9/run.json: field .seed.: expected the seed of its cell folder"):
        fusebench.results.load(tmp_path / "r")
    assert cli_main(["leaderboard", "--runs", str(tmp_path / "r"), "--out", str(tmp_path / "b")]) == 2


def test_a_json_key_given_twice_in_a_record_is_refused(runs: Path, tmp_path: Path) -> None:
    shutil.copytree(runs, tmp_path / "r")
    p = tmp_path / "r/quickstart/m3g/seed0/run.json"
    p.write_text(p.read_text().rstrip()[:-1] + ', "seed": 5}')
    with pytest.raises(ValueError, match="given twice"):
        fusebench.results.load(tmp_path / "r")


def test_a_reused_record_must_be_its_cells(runs: Path, tmp_path: Path) -> None:  # the hash does not cover the seed
    shutil.copytree(runs, tmp_path / "r")
    p = tmp_path / "r/quickstart/m3g/seed0/run.json"
    rec = json.loads(p.read_text())
    rec["seed"] = 4
    p.write_text(json.dumps(rec))
    with pytest.raises(RunError, match=r"not of its cell"):
        fusebench.run("quickstart", objective="m3g", seeds=[0], out=tmp_path / "r", overrides=TINY, progress=False)


# --- options -----------------------------------------------------------------------------------------------------
def test_more_threads_than_cpus_is_refused_not_a_segfault(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--threads: 100000"):
        fusebench.run("quickstart", objective="m3g", seeds=[0], out=tmp_path, overrides=TINY, threads=100000,
                      progress=False)


def test_a_leaderboard_folder_that_is_a_file_is_refused_before_the_sweep(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_text("keep")
    assert cli_main(["run", "quickstart", "--objective", "m3g", "--seeds", "0", "--set", "pretrain.epochs=1",
                     "--out", str(tmp_path / "out"), "--leaderboard", str(tmp_path / "f.txt"), "--no-progress"]) == 2
    assert not (tmp_path / "out").exists()


def test_an_objective_that_is_not_a_string_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--objective"):
        fusebench.run("quickstart", objective=5, out=tmp_path, progress=False)


def test_an_mlflow_uri_without_the_mlflow_logger_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--mlflow-uri"):
        fusebench.run("quickstart", objective="m3g", seeds=[0], out=tmp_path / "o", overrides=TINY,
                      mlflow_uri="file:/tmp/x", progress=False)
    assert not (tmp_path / "o").exists()


# --- data files --------------------------------------------------------------------------------------------------
def test_a_v73_view_declaring_more_than_memory_is_one_error(tmp_path: Path, monkeypatch) -> None:
    from fusebench.datasets.base import DatasetError
    from fusebench.datasets.multiview_mat.formats import read_mat

    path = tmp_path / "bomb.mat"
    with h5py.File(path, "w", userblock_size=512) as f:  # a few hundred KB on disk, 1.7 TiB once read
        refs = f.create_group("#refs#")
        big = refs.create_dataset("v0", shape=(300_000_000, 784), dtype="f8", chunks=True, compression="gzip")
        small = refs.create_dataset("v1", data=np.random.default_rng(0).normal(size=(16, 300)))
        r = np.empty((2, 1), dtype=h5py.ref_dtype)
        r[0, 0], r[1, 0] = big.ref, small.ref
        f.create_dataset("X", data=r).attrs["MATLAB_class"] = np.bytes_("cell")
        f.create_dataset("Y", data=np.arange(300.0).reshape(1, -1) % 3).attrs["MATLAB_class"] = np.bytes_("double")
    from fusebench.datasets.multiview_mat import formats

    # 20 GiB free, as this machine has: the check must not depend on the machine reporting its memory
    monkeypatch.setattr(formats, "available_memory", lambda: (20 * 2**30, "a stated figure"))
    with pytest.raises(DatasetError, match=r"bomb\.mat: X\{1\}: .*GiB to read"):
        read_mat(path)


@pytest.mark.parametrize("name, data, expected", [
    ("val_data_idx.txt", b"3\n4\xe9\n", "cannot read the frame list"),
    ("calib.txt", b"0.9\xe9 0 0 0 1 0 0 0 1\n529.5 0 0 0 529.5 0 365 265 1\n", "cannot read calib file"),
    ("calib.txt", b"nan 0 0 0 1 0 0 0 1\n529.5 0 0 0 529.5 0 365 265 1\n", "NaN or Inf"),
])
def test_sunrgbd_text_files_name_the_file(tmp_path: Path, name: str, data: bytes, expected: str) -> None:
    from fusebench.datasets.base import DatasetError
    from fusebench.datasets.sunrgbd import read_calib, read_index_file

    (tmp_path / name).write_bytes(data)
    with pytest.raises(DatasetError, match=rf"{name}: {expected}"):
        (read_index_file if name.endswith("idx.txt") else read_calib)(tmp_path / name)


def test_running_out_of_memory_is_one_line_naming_what_to_ask_less_of(tmp_path: Path, capsys, monkeypatch) -> None:
    """A synthetic twin of 10^12 samples: numpy refuses the 7 TiB array (on a machine that overcommits memory it
    might not at once, so the writer raises what numpy raises here); the command says so in one line."""
    from fusebench.datasets.quickstart import Quickstart

    def too_large(cls, root, spec):
        raise MemoryError(f"Unable to allocate 7.28 TiB for an array with shape ({spec.num_samples},) and data "
                          f"type int64")

    monkeypatch.setattr(Quickstart, "write_synthetic", classmethod(too_large))
    assert cli_main(["run", "quickstart", "--synthetic", "--objective", "none", "--seeds", "0", "--set",
                     "dataset.synthetic_spec.num_samples=1000000000000", "--out", str(tmp_path / "o"),
                     "--no-progress"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fusebench run: out of memory (MemoryError") and "num_samples" in err[0]
