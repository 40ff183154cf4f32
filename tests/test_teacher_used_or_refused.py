"""An EMA teacher (``pretrain.methods.ema_teacher: {enabled: true}``) is used or refused, never recorded and ignored:
TupleInfoNCE's loss is on the student's fused tuples alone, so a teacher attached to its runs was built, updated
after every step, recorded in the config and its hash, and never read. The objectives say it
(``uses_teacher``, read through the method's ``read_by``); here every registered objective's answer is measured
directly (does the loss move when the teacher's weights move?) and the runner's check before any cell is compared
with it through ``fusebench run --plan``."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import fusebench
from fusebench import benchmarks, encoders, objectives
from fusebench.cli import main
from fusebench.components.compat import compatible_objectives
from fusebench.engine.pretrain import Pretrainer
from fusebench.spec.config import ConfigError, PretrainConfig
from fusebench.spec.methods import check_methods

TINY = {"dataset.synthetic_spec": {"num_samples": 64, "seed": 0}, "pretrain.epochs": 1, "pretrain.batch_size": 32,
        "downstream.epochs": 1}
ON = "pretrain.methods.ema_teacher.enabled"


def _reads_teacher(name: str) -> bool:
    """Whether objective ``name``'s pretraining loss changes when the attached EMA teacher's weights change (the
    same batch, the same RNG state for the augmentations): measured, not read from the objective."""
    cls = objectives.OBJECTIVES.get(name)
    k = next(k for k in (3, 2, 4) if objectives.accepts_views(cls, k))
    mods = [f"m{i}" for i in range(k)]
    cfg = PretrainConfig(objective=name, projection_dim=8, projection_hidden=16,
                         methods=check_methods({"ema_teacher": {"enabled": True}}))
    torch.manual_seed(0)
    model = encoders.build("mlp", modalities={m: 3 for m in mods}, num_features=4, hidden=8)
    pre = Pretrainer(model, objectives.build(name), cfg)
    g = torch.Generator().manual_seed(1)
    batch = {"names": mods, "modalities": {m: torch.randn(16, 3, generator=g) for m in mods}}
    torch.manual_seed(5)
    before = pre(batch).detach()
    with torch.no_grad():
        for p in pre.teacher.parameters():
            p.add_(torch.randn(p.shape, generator=g))
    torch.manual_seed(5)
    after = pre(batch).detach()
    return not torch.equal(before, after)


@pytest.mark.parametrize("name", objectives.available())
def test_every_objective_says_whether_its_loss_reads_the_teacher(name: str) -> None:
    cls = objectives.OBJECTIVES.get(name)
    assert getattr(cls, "uses_teacher", True) is _reads_teacher(name)


def test_only_tuple_infonce_ignores_the_teacher() -> None:
    assert [n for n in objectives.available() if not objectives.OBJECTIVES.get(n).uses_teacher] == ["tuple_infonce"]


@pytest.mark.parametrize("name", compatible_objectives(benchmarks.load("quickstart", synthetic=True)))
def test_the_plan_refuses_the_teacher_exactly_for_the_objectives_that_do_not_read_it(name: str, tmp_path: Path) -> None:
    run = dict(objective=name, seeds=[0], out=tmp_path, synthetic=True, progress=False, plan=True)
    if _reads_teacher(name):
        rows = fusebench.run("quickstart", overrides={**TINY, ON: True}, **run)
        assert [r["action"] for r in rows] == ["run"]
    else:
        with pytest.raises(ConfigError, match=rf"^quickstart: {ON}=True: the ema_teacher method is not used by {name} "
                                              r"\(the objective's uses_teacher is false"):
            fusebench.run("quickstart", overrides={**TINY, ON: True}, **run)
    assert not (tmp_path / "quickstart").exists()


@pytest.mark.parametrize("key, value, named", [
    # a point of the objective's own grid (its hparams take no method keys)
    ("pretrain.per_objective.tuple_infonce.grid", {"methods.ema_teacher.enabled": [False, True]},
     "pretrain.per_objective.tuple_infonce.grid.methods.ema_teacher.enabled=True"),
    # the global block with another option beside the switch: both named
    ("pretrain.methods.ema_teacher", {"enabled": True, "momentum": 0.9},
     "pretrain.methods.ema_teacher.enabled=True, pretrain.methods.ema_teacher.momentum=0.9"),
])
def test_each_way_of_attaching_a_teacher_to_tuple_infonce_is_refused_naming_its_key(
        key: str, value: dict, named: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as e:
        fusebench.run("quickstart", objective=["m3g", "tuple_infonce"], seeds=[0], out=tmp_path, synthetic=True,
                      overrides={**TINY, key: value}, progress=False, plan=True)
    assert str(e.value).startswith(f"quickstart: {named}: the ema_teacher method is not used by tuple_infonce ")
    assert str(e.value).endswith("drop it, or run tuple_infonce apart from the objectives that read it (--objective)")


def test_a_teacher_for_the_objectives_that_read_it_is_accepted_beside_tuple_infonce(tmp_path: Path) -> None:
    # m3g's own grid: the teacher joins m3g's runs (in the view rotation), not tuple_infonce's
    rows = fusebench.run("quickstart", objective=["m3g", "tuple_infonce"], seeds=[0], out=tmp_path, synthetic=True,
                         overrides={**TINY, "pretrain.per_objective.m3g.grid": {"methods.ema_teacher.enabled": [False,
                                                                                                              True]}},
                         progress=False, plan=True)
    assert [(r["objective"], r["action"]) for r in rows] == [("m3g", "select"), ("m3g", "run"), ("tuple_infonce", "run")]
    # the global switch in a run without tuple_infonce: every objective of the run reads it
    rows = fusebench.run("quickstart", objective=["m3g", "byol_pwe"], seeds=[0], out=tmp_path, synthetic=True,
                         overrides={**TINY, ON: True}, progress=False, plan=True)
    assert [r["action"] for r in rows] == ["run", "run"]


def test_the_command_line_refuses_it_in_one_error(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "runs"
    argv = ["run", "quickstart", "--synthetic", "--seeds", "0", "--out", str(out), "--plan", "--objective"]
    assert main([*argv, "tuple_infonce", "--set", f"{ON}=true"]) == 2
    err = capsys.readouterr().err
    assert err.count("fusebench run:") == 1
    assert f"fusebench run: quickstart: {ON}=True: the ema_teacher method is not used by tuple_infonce" in err
    assert not out.exists()
    assert main([*argv, "m3g", "--set", f"{ON}=true"]) == 0
