"""Engine review: what a researcher hits when resuming (a refused resume names what changed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fusebench import benchmarks
from fusebench.cells.execute import run_cell
from fusebench.engine.cell import ConfigMismatchError
from fusebench.spec.request import CellRequest, RunOptions

TINY = {"dataset.synthetic_spec": {"num_samples": 128, "seed": 0}, "pretrain.epochs": 2, "pretrain.batch_size": 32,
        "downstream.epochs": 1, "checkpoint_every": 1}


def test_resume_with_changed_set_values_names_what_changed(tmp_path: Path) -> None:
    spec = benchmarks.load("quickstart", overrides=TINY)
    with pytest.raises(KeyboardInterrupt):  # a kill after 2 steps: last.pt written with the spec's lr (0.002)
        run_cell(CellRequest(spec, "infonce_pwe", 0, tmp_path), RunOptions(progress=False, max_steps=2))
    other = benchmarks.load("quickstart", overrides={**TINY, "pretrain.lr": 0.01, "downstream.lr": 0.5})
    with pytest.raises(ConfigMismatchError) as err:
        run_cell(CellRequest(other, "infonce_pwe", 0, tmp_path), RunOptions(progress=False, resume=True))
    msg = str(err.value)
    assert "changed: downstream.lr: 0.01 in the checkpoint, now 0.5; pretrain.lr: 0.002 in the checkpoint, now 0.01;" \
        in msg, msg
    # another objective's setting is not this cell's: not named (it is not in the cell's identity)
    third = benchmarks.load("quickstart", overrides={**TINY, "pretrain.epochs": 3,
                                                     "pretrain.per_objective.m3g.hparams": {"eps": 0.5}})
    with pytest.raises(ConfigMismatchError, match=r"changed: pretrain\.epochs: 2 in the checkpoint, now 3; rerun"):
        run_cell(CellRequest(third, "infonce_pwe", 0, tmp_path), RunOptions(progress=False, resume=True))
