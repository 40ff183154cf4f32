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


GRID = {**TINY, "pretrain.per_objective.infonce_pwe.grid": {"tau": [0.1, 0.2]}}


def test_a_selection_trial_killed_midway_resumes_from_its_last_pt(tmp_path: Path) -> None:
    import json

    import fusebench
    from fusebench.cells.execute import sweep_context
    from fusebench.sweep import selection

    ref = fusebench.run("quickstart", objective="infonce_pwe", seeds=[0], out=tmp_path / "a", overrides=GRID,
                        progress=False)[0]
    spec = benchmarks.load("quickstart", overrides=GRID)
    out = tmp_path / "b"
    trial = selection.trials_of(spec, "infonce_pwe", out, sweep_context(spec, False, None))[1]  # tau 0.2
    ctx = {**sweep_context(spec, False, None), "hparams": {"infonce_pwe": {"tau": 0.2}}}
    with pytest.raises(KeyboardInterrupt):  # the sweep killed 5 steps into trial 1 (the trial run_cell call)
        run_cell(trial, RunOptions(progress=False, max_steps=5, selection_trial=True), ctx)
    assert (trial.cell / "last.pt").exists() and not (trial.cell / "run.json").exists()
    plan = fusebench.run("quickstart", objective="infonce_pwe", seeds=[0], out=out, overrides=GRID, plan=True)
    sel = [r for r in plan if r.get("selection")]
    assert sel[0]["action"] == "select" and sel[0]["detail"].startswith("2 of 2 trial(s) to run (1 resumed from "
                                                                        "last.pt) "), sel
    got = fusebench.run("quickstart", objective="infonce_pwe", seeds=[0], out=out, overrides=GRID, progress=False)[0]
    rec = json.loads((trial.cell / "run.json").read_text())
    assert rec["resumed"] is True  # continued from the kill, not started over
    want = json.loads(next((tmp_path / "a").rglob("trial1-tau0.2/**/run.json")).read_text())
    assert rec["metrics"] == want["metrics"] and rec["curves"] == want["curves"]
    assert got["metrics"] == ref["metrics"] and got["curves"] == ref["curves"]
    assert got["hparam_selection"] == ref["hparam_selection"]


def test_config_changes_of_a_checkpoint_with_a_tensor_in_its_config_is_no_crash() -> None:
    """A last.pt loads under weights_only with tensors anywhere, its ``config`` too: a tensor of several values there
    made config_changes raise 'Boolean value of Tensor ... is ambiguous' instead of the refusal naming the hashes."""
    import copy

    import torch

    from fusebench.engine.cell import config_changes

    spec = benchmarks.load("quickstart", overrides=TINY)
    saved = copy.deepcopy(spec.to_dict())
    saved["pretrain"]["lr"] = torch.tensor([1.0, 2.0])
    assert config_changes(saved, spec, "infonce_pwe") is None
    saved["pretrain"]["lr"] = 0.5  # a plain difference is still named
    assert "pretrain.lr: 0.5 in the checkpoint" in config_changes(saved, spec, "infonce_pwe")
