"""A cell's record is reused only when the code that made it computes as the code now does: the config hash covers
the configuration, the versions of the objective, the encoder and the metrics cover the code (an ESANet decoder that
changed from one to three blocks per module under an unchanged ``size: resnet34`` was reused as it was)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from fusebench import benchmarks
from fusebench import encoders as E
from fusebench import metrics as M
from fusebench import objectives as O
from fusebench.cells.execute import run_cell
from fusebench.engine.cell import ConfigMismatchError, load_checkpoint
from fusebench.records import comparability_fields, comparability_key, validate_record
from fusebench.spec.request import CellRequest, RunOptions, cell_dir

TINY = {
    "dataset.synthetic_spec": {"num_samples": 64, "seed": 0},
    "pretrain.epochs": 1,
    "pretrain.batch_size": 32,
    "downstream.epochs": 1,
    "downstream.batch_size": 64,
}


def _run(spec, objective: str, out: Path) -> dict:
    return run_cell(CellRequest(spec, objective, 0, out), RunOptions(progress=False))


def test_esanet_versions_its_presets_one_at_a_time() -> None:
    esanet = E.ENCODERS.get("esanet")
    # resnet34 / resnet18 changed (three NonBottleneck1D blocks per decoder module, was one): version 2; the default
    # size is resnet34; tiny, the tests' preset, computes as it did
    assert esanet.version_of({"size": "resnet34"}) == "2"
    assert esanet.version_of({"size": "resnet18"}) == "2"
    assert esanet.version_of({}) == "2"
    assert esanet.version_of({"size": "tiny"}) == "1"
    head = esanet(modalities=["rgb"], size="resnet18").task_head(type("T", (), {"id": "segmentation",
                                                                              "classes": lambda self, m: 40})())
    blocks = [len(m.blocks) for m in head.modules() if hasattr(m, "blocks") and hasattr(m.blocks, "__len__")]
    assert blocks and set(blocks) == {3}, blocks  # what version 2 says: three blocks per decoder module
    assert E.ENCODERS.get("mlp").version_of({"num_features": 4}) == "1"  # the base class: its version, any config


def test_a_record_of_another_objective_version_is_not_reused(tmp_path: Path, monkeypatch) -> None:
    spec = benchmarks.load("quickstart", overrides=TINY)
    rec = _run(spec, "infonce_pwe", tmp_path)
    assert rec["versions"]["objective"] == "1" and "encoder" not in rec["versions"]  # mlp: version 1, not written
    assert _run(spec, "infonce_pwe", tmp_path) == rec  # the same code: the record
    monkeypatch.setattr(O.OBJECTIVES.get("infonce_pwe"), "version", "2")  # the loss changed, the spec did not
    with pytest.raises(ConfigMismatchError, match=r"made by other code .*objective 'infonce_pwe' version '1', now '2'"):
        _run(spec, "infonce_pwe", tmp_path)


def test_a_record_of_another_encoder_version_is_not_reused_nor_compared(tmp_path: Path, monkeypatch) -> None:
    spec = benchmarks.load("quickstart", overrides=TINY)
    old = _run(spec, "none", tmp_path / "a")
    monkeypatch.setattr(E.ENCODERS.get("mlp"), "version", "2")
    with pytest.raises(ConfigMismatchError, match=r"encoder 'mlp' version '1', now '2'"):
        _run(spec, "none", tmp_path / "a")
    new = _run(spec, "none", tmp_path / "b")
    validate_record(new, "run.json")  # a valid record, its versions naming the encoder's
    assert new["versions"]["encoder"] == "2" and new["config_hash"] == old["config_hash"]
    assert comparability_fields(new)["encoder_version"] == "2" and "encoder_version" not in comparability_fields(old)
    assert new["comparability_key"] == comparability_key(new) != old["comparability_key"]  # one board each


def test_a_record_of_another_metric_version_is_not_reused(tmp_path: Path, monkeypatch) -> None:
    spec = benchmarks.load("quickstart", overrides=TINY)
    _run(spec, "none", tmp_path)
    real = M.get

    def bumped(mid: str):
        m = real(mid)
        return dataclasses.replace(m, version="2") if mid == "bacc" else m

    monkeypatch.setattr(M, "get", bumped)
    with pytest.raises(ConfigMismatchError, match=r"metric 'bacc' version '1', now '2'"):
        _run(spec, "none", tmp_path)


def test_a_checkpoint_of_another_code_version_is_not_resumed(tmp_path: Path, monkeypatch) -> None:
    spec = benchmarks.load("quickstart", overrides={**TINY, "checkpoint_every": 1})
    with pytest.raises(KeyboardInterrupt):  # a killed run: last.pt written, no run.json
        run_cell(CellRequest(spec, "infonce_pwe", 0, tmp_path), RunOptions(progress=False, max_steps=1))
    cell = cell_dir(tmp_path, "quickstart", "infonce_pwe", 0)
    assert load_checkpoint(cell / "last.pt")["versions"]["objective"] == "1"
    monkeypatch.setattr(E.ENCODERS.get("mlp"), "version", "2")
    with pytest.raises(ConfigMismatchError, match=r"cannot resume .*last\.pt: it was written by other code .*"
                                                  r"encoder 'mlp' version '1', now '2'"):
        run_cell(CellRequest(spec, "infonce_pwe", 0, tmp_path), RunOptions(progress=False, resume=True))
    monkeypatch.undo()  # the same code resumes it and finishes
    rec = run_cell(CellRequest(spec, "infonce_pwe", 0, tmp_path), RunOptions(progress=False, resume=True))
    assert rec["versions"]["objective"] == "1" and (cell / "run.json").exists()
