"""Hostile objective plugins (issue #29, item 8), installed for real: a ``.dist-info`` folder with an
``entry_points.txt`` and a plugin module written to a temporary folder on ``sys.path``, read by
``importlib.metadata`` as after ``pip install`` (no registry is monkeypatched with entries; only its
plugin cache is reset so that it reads the entry points again).

Every broken plugin is one line naming its distribution and entry point and what was expected;
``fusebench list`` still lists everything else; a loss that is not a scalar float tensor with a gradient is
refused where the loss is called, before PyTorch's own message."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import pytest
import torch

from fusebench import objectives

PLUGIN = '''
import torch
from torch import nn


class Good(nn.Module):
    """A well-behaved plugin loss: mean squared norm of the views."""

    def forward(self, views, mask=None):
        return (views ** 2).mean()


class Vector(nn.Module):
    """One loss per view instead of a scalar."""

    def forward(self, views, mask=None):
        return (views ** 2).mean(dim=(1, 2))


class Number(nn.Module):
    """A Python float instead of a tensor."""

    def forward(self, views, mask=None):
        return 1.5


class Detached(nn.Module):
    """A scalar cut from the graph."""

    def forward(self, views, mask=None):
        return (views ** 2).mean().detach()


class Half(nn.Module):
    """A bfloat16 loss."""

    def forward(self, views, mask=None):
        return (views ** 2).mean().to(torch.bfloat16)


def not_a_module():
    return "a string"
'''
#: the losses: a good one, four bad ones, a factory that builds no module (distribution fb-hostile-plugin)
LOSSES = {
    "good": "fb_hostile_plugin:Good",
    "vector": "fb_hostile_plugin:Vector",
    "number": "fb_hostile_plugin:Number",
    "detached": "fb_hostile_plugin:Detached",
    "half": "fb_hostile_plugin:Half",
    "factory": "fb_hostile_plugin:not_a_module",
}
#: entry points that cannot be used (distribution fb-broken-plugin)
BROKEN = {
    "missing_module": "fb_hostile_no_such_module:Loss",
    "missing_attr": "fb_hostile_plugin:Nope",
    "raises": "fb_hostile_raises:Loss",
    "infonce_pwe": "fb_hostile_plugin:Good",  # a built-in id
    "Bad Name": "fb_hostile_plugin:Good",  # not an id
}
DISTS = {"fb-hostile-plugin": LOSSES, "fb-broken-plugin": BROKEN}


@pytest.fixture
def install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """``install(*names)``: those distributions written into a folder on sys.path, with the plugin modules;
    the objective registry then reads its entry points again (its state is restored after the test)."""
    reg = objectives.OBJECTIVES
    reg.available()  # the built-ins (and any plugin installed before) first, as always
    for attr in ("_entries", "_meta", "_lazy", "_origin", "_plugin_of"):  # restored after the test
        monkeypatch.setattr(reg, attr, dict(getattr(reg, attr, {})), raising=False)
    for name in list(reg._plugin_of):  # a plugin installed on this machine is read again below with the test's
        for attr in ("_entries", "_meta", "_lazy", "_origin", "_plugin_of"):  # (else: 'taken already' by itself)
            getattr(reg, attr).pop(name, None)
    for mod in ("fb_hostile_plugin", "fb_hostile_raises"):
        monkeypatch.delitem(sys.modules, mod, raising=False)

    def _install(*names: str) -> None:
        site = tmp_path / "site"
        site.mkdir()
        (site / "fb_hostile_plugin.py").write_text(PLUGIN)
        (site / "fb_hostile_raises.py").write_text("raise RuntimeError('the plugin fails at import\\non two lines')\n")
        for name in names:
            info = site / f"{name.replace('-', '_')}-0.1.dist-info"
            info.mkdir()
            (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
            (info / "entry_points.txt").write_text("[fusebench.objectives]\n" + "".join(
                f"{ep} = {value}\n" for ep, value in DISTS[name].items()))
        monkeypatch.syspath_prepend(str(site))
        importlib.invalidate_caches()
        monkeypatch.setattr(reg, "_plugins_loaded", False)
        monkeypatch.setattr(reg, "_plugin_names", None)

    return _install


@pytest.fixture
def installed(install) -> None:
    """The loss plugins only (fb-hostile-plugin)."""
    install("fb-hostile-plugin")


def _ep(name: str) -> str:
    dist = "fb-hostile-plugin" if name in LOSSES else "fb-broken-plugin"
    value = {**LOSSES, **BROKEN}[name]
    return f"entry point '{name} = {value}' (group fusebench.objectives) of distribution {dist} 0.1"


def test_fusebench_list_reports_each_broken_plugin_in_one_line_and_lists_the_rest(install, capsys) -> None:
    from importlib.metadata import entry_points

    from fusebench.cli import main
    from fusebench.registry import describe_entry_point

    install("fb-hostile-plugin", "fb-broken-plugin")
    assert main(["list", "objectives"]) == 0
    out, err = capsys.readouterr()
    listed = [line.split(":")[0] for line in out.splitlines() if not line.startswith(" ")]
    builtin = {"infonce_pwe", "m3g", "mv_dhel", "byol_avg", "tuple_infonce", "matching_gap", "dhel"}
    assert builtin <= set(listed)
    assert {"good", "vector", "number", "detached", "half", "factory"} <= set(listed)  # plugins that import
    assert not {"missing_module", "missing_attr", "raises", "Bad Name", "bad name"} & set(listed)
    assert listed.count("infonce_pwe") == 1
    block = out[out.index("\ninfonce_pwe:") + 1:].splitlines()[0]
    assert "mean squared norm" not in block  # the built-in kept its id
    # a plugin installed on this machine before the test may warn too: its lines name its own entry points
    before = [describe_entry_point(ep) for ep in entry_points(group="fusebench.objectives")
              if getattr(ep.dist, "name", None) not in DISTS]
    lines = [line for line in err.strip().splitlines() if not any(where in line for where in before)]
    assert len(lines) == 5, lines
    assert all(line.startswith("warning: ") and "of distribution fb-broken-plugin 0.1" in line for line in lines)
    expect = {
        "missing_module": "ModuleNotFoundError: No module named 'fb_hostile_no_such_module'",
        "missing_attr": "AttributeError: module 'fb_hostile_plugin' has no attribute 'Nope'",
        "raises": "RuntimeError: the plugin fails at import on two lines",
        "infonce_pwe": "objective id 'infonce_pwe' is taken already",
        "Bad Name": "its name 'Bad Name' is not a valid objective id",
    }
    for name, why in expect.items():
        hits = [line for line in lines if _ep(name) in line and why in line and "expected" in line]
        assert len(hits) == 1, (name, lines)


def test_running_a_broken_plugin_objective_is_one_line(install, tmp_path: Path, capsys) -> None:
    from fusebench.cli import main

    install("fb-broken-plugin")
    rc = main(["run", "quickstart", "--objective", "missing_module", "--seeds", "0", "--out", str(tmp_path / "o"),
               "--no-progress"])
    err = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("warning: ")]
    assert rc == 2 and len(err) == 1, err
    assert err[0].startswith("fusebench run: ") and _ep("missing_module") in err[0]
    assert "expected 'module:attribute' naming an object of an importable module" in err[0]


def test_a_factory_that_builds_no_module_is_named(installed) -> None:
    with pytest.raises(ValueError, match=r"objective 'factory' \(" + _ep("factory").replace("(", r"\(")
                       .replace(")", r"\)") + r"\) built a str; expected a torch.nn.Module"):
        objectives.build("factory")


@pytest.mark.parametrize("name, problem", [
    ("vector", "returned a tensor of shape (3,), not a scalar"),
    ("number", "returned a float"),
    ("detached", "returned a tensor without a gradient"),
    ("half", "returned a torch.bfloat16 tensor"),
])
def test_a_bad_loss_is_one_error_naming_the_objective_and_its_distribution(installed, name: str,
                                                                          problem: str) -> None:
    views = torch.randn(3, 8, 4, requires_grad=True)
    loss = objectives.build(name)
    with pytest.raises(TypeError) as e:  # at the call, not later in backward()
        loss(views)
    msg = str(e.value)
    assert type(e.value).__name__ == "ObjectiveOutputError"
    assert msg.startswith(f"objective {name!r} ({_ep(name)}) {problem}") and "\n" not in msg
    assert msg.endswith("expected a scalar float32 tensor (shape ()) differentiable with respect to the views")


def test_the_loss_check_fires_where_training_calls_the_loss(installed, tmp_path: Path) -> None:
    import fusebench

    tiny = {"dataset.synthetic_spec": {"num_samples": 64, "seed": 0}, "pretrain.epochs": 1,
            "pretrain.batch_size": 32, "downstream.epochs": 1}
    records = fusebench.run("quickstart", objective="vector", seeds=[0], out=tmp_path / "o", overrides=tiny,
                            progress=False)
    assert [r["status"] for r in records] == ["failed"]
    failure = json.loads((tmp_path / "o" / "quickstart" / "vector" / "seed0" / "failed.json").read_text())
    assert failure["error"] == (f"ObjectiveOutputError: objective 'vector' ({_ep('vector')}) returned a tensor of "
                                f"shape (3,), not a scalar; expected a scalar float32 tensor (shape ()) "
                                f"differentiable with respect to the views")
    assert not (tmp_path / "o" / "quickstart" / "vector" / "seed0" / "run.json").exists()


def test_good_losses_pass_and_the_check_reads_no_value(installed) -> None:
    good = objectives.build("good")
    views = torch.randn(3, 8, 4, requires_grad=True)
    loss = good(views)
    loss.backward()
    assert torch.allclose(views.grad, 2 * views.detach() / views.numel())  # d mean(v^2) / dv, by hand
    with torch.no_grad():  # evaluation: no gradient expected
        assert good(views).requires_grad is False
    assert objectives.build("detached")(views.detach()).dim() == 0  # inputs without grad: none expected
    # tensors on the meta device have no values: the check must pass or fail on metadata alone
    meta_views = torch.empty(3, 8, 4, device="meta", requires_grad=True)
    objectives.check_loss_output(good, (meta_views,), {}, (meta_views ** 2).mean())
    with pytest.raises(objectives.ObjectiveOutputError, match=r"shape \(3,\)"):
        objectives.check_loss_output(good, (meta_views,), {}, (meta_views ** 2).mean(dim=(1, 2)))
    # every built-in loss passes the same check on its own call
    m3g = objectives.build("infonce_pwe")
    assert m3g(views).requires_grad
