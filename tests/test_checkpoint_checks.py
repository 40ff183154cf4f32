"""A damaged but loadable ``last.pt`` (engine/cell.py: check_checkpoint, check_checkpoint_bounds; engine/loop.py:
Phase.restore): one error naming the file, the key and what was expected, the same in ``--plan`` and in the run
(which stops before any cell), never a bare KeyError in the training code; the file is left as it is. ``fusebench
status`` judges a ``last.pt`` with the same checks ("not resumable: " and the run's message), with ``--benchmark``
also by the spec (configuration, code, epochs).

The checkpoints are real: written by a cell killed by its step budget (one in the pretraining phase, one in the
downstream phase), then edited as a user or a disk might."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import fusebench
from fusebench import benchmarks
from fusebench.cells.execute import run_cell
from fusebench.engine.cell import load_checkpoint
from fusebench.engine.loop import RunError
from fusebench.components.identity import spec_hash
from fusebench.spec.request import CellRequest, RunOptions, cell_dir
from fusebench.sweep import status

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # conftest.py

TINY = {"dataset.synthetic_spec": {"num_samples": 64, "seed": 0}, "pretrain.epochs": 1, "pretrain.batch_size": 32,
        "downstream.epochs": 1, "checkpoint_every": 1}
OBJ = "infonce_pwe"
TAIL = "(a damaged or edited checkpoint?); the file was left as it is — delete it to start over"


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """{phase: the bytes of a last.pt the code wrote in that phase}."""
    spec = benchmarks.load("quickstart", overrides=TINY)
    found = {}
    for steps in (1, 3):  # one step: pretraining; three: past its steps (one epoch of two batches at most)
        out = tmp_path_factory.mktemp(f"killed{steps}")
        with pytest.raises(KeyboardInterrupt):
            run_cell(CellRequest(spec, OBJ, 0, out), RunOptions(progress=False, synthetic=True, max_steps=steps))
        last = cell_dir(out, "quickstart", OBJ, 0) / "last.pt"
        found[torch.load(last, weights_only=True)["phase"]] = last.read_bytes()
    assert set(found) == {"pretrain", "downstream"}
    return found


def _cell_with(tmp_path: Path, data: bytes) -> tuple[Path, Path]:
    out = tmp_path / "runs"
    cell = cell_dir(out, "quickstart", OBJ, 0)
    cell.mkdir(parents=True)
    (cell / "last.pt").write_bytes(data)
    return out, cell / "last.pt"


def _edited(tmp_path: Path, data: bytes, edit) -> tuple[Path, Path]:
    ckpt = torch.load(_cell_with(tmp_path / "src", data)[1], weights_only=True)
    edit(ckpt)
    out = tmp_path / "runs"
    cell = cell_dir(out, "quickstart", OBJ, 0)
    cell.mkdir(parents=True)
    torch.save(ckpt, cell / "last.pt")
    return out, cell / "last.pt"


def _plan(out: Path) -> tuple[str, str]:
    rows = fusebench.run("quickstart", objective=OBJ, seeds=[0], out=out, synthetic=True, overrides=TINY,
                         progress=False, plan=True)
    (row,) = [r for r in rows if not r.get("selection")]
    return row["action"], row["detail"]


def _module(ckpt: dict) -> str:
    return "pretrainer" if ckpt["phase"] == "pretrain" else "model"


def _first_matrix(sd: dict) -> str:
    return next(k for k, v in sd.items() if v.dim() == 2)


def _set(key, value):
    return lambda c: c.__setitem__(key, value)


# (edit, the key named, what the message says after "expected ")
DAMAGES = {
    "module deleted": (lambda c: c.pop(_module(c)), None, "state_dict (a mapping of names to tensors), it is missing"),
    "rng emptied": (_set("rng", {}), "rng", "the RNG states of python, numpy and torch, the generators refuse it "
                                            "(KeyError: 'python')"),
    "optimizer emptied": (_set("optimizer", {}), "optimizer", "an optimizer state_dict ({state, param_groups}), got "
                                                              "a dict of 0"),
    "scheduler emptied": (_set("scheduler", {}), "scheduler", "a LambdaLR scheduler's state_dict"),
    "epoch a string": (_set("epoch", "x"), "epoch", "an integer >= 0, got string 'x'"),
    "step a boolean": (_set("step", True), "step", "an integer >= 0, got True"),
    "step out of reach": (_set("step", 10 ** 9), "step", "{losses}, the number of losses in curves[{curve!r}] (one "
                                                         "per step), got int 1000000000"),
    "phase unknown": (_set("phase", "finetune"), "phase", "'pretrain' or 'downstream', got string 'finetune'"),
    "curves not lists": (_set("curves", {"pretrain_loss": "1.0"}), "curves", "a mapping of curve names to lists "
                                                                             "of numbers, got a dict of 1"),
}


@pytest.mark.parametrize("phase", ["pretrain", "downstream"])
@pytest.mark.parametrize("damage", list(DAMAGES))
def test_a_damaged_checkpoint_is_one_refusal_naming_file_and_key_in_the_plan_and_the_run(
        tmp_path: Path, written: dict[str, bytes], phase: str, damage: str) -> None:
    edit, key, said = DAMAGES[damage]
    original = torch.load(_cell_with(tmp_path / "orig", written[phase])[1], weights_only=True)
    key = key or _module(original)
    said = said.replace("{losses}", str(original["step"])).replace("{curve!r}", repr(f"{phase}_loss"))
    out, last = _edited(tmp_path, written[phase], edit)
    before = last.read_bytes()
    action, detail = _plan(out)
    assert action == "refused"
    assert detail.startswith(f"cannot resume: {last}: key {key!r}: expected ") and said in detail, detail
    assert detail.endswith(TAIL) and "\n" not in detail
    with pytest.raises(RunError) as err:  # the run stops before any cell, with the plan's words
        fusebench.run("quickstart", objective=OBJ, seeds=[0], out=out, synthetic=True, overrides=TINY, progress=False)
    assert str(err.value) == detail
    assert status.collect(out)["quickstart"][(OBJ, 0)] == ("interrupted", f"not resumable: {detail}")
    assert last.read_bytes() == before and sorted(p.name for p in last.parent.iterdir()) == ["last.pt"]


@pytest.mark.parametrize("phase", ["pretrain", "downstream"])
def test_what_the_code_writes_passes_and_resumes_to_a_record(tmp_path: Path, written: dict[str, bytes],
                                                            phase: str) -> None:
    out, last = _cell_with(tmp_path, written[phase])
    assert _plan(out) == ("resume", f"from {last}")
    assert status.collect(out)["quickstart"][(OBJ, 0)] == ("interrupted", "resumable from last.pt")
    (rec,) = fusebench.run("quickstart", objective=OBJ, seeds=[0], out=out, synthetic=True, overrides=TINY,
                           progress=False)
    assert rec["objective"] == OBJ and (last.parent / "run.json").is_file()


def test_epochs_beyond_the_runs_are_refused_by_its_configuration(tmp_path: Path, written: dict[str, bytes]) -> None:
    """TINY has 1 pretraining epoch (a pretraining checkpoint is written within it: epoch 0) and 1 downstream epoch
    (a downstream checkpoint is written within or at the end of it: epoch <= 1)."""
    out, last = _edited(tmp_path / "pre", written["pretrain"], _set("epoch", 1))
    assert _plan(out) == ("refused", f"cannot resume: {last}: key 'epoch': expected below 1, the pretraining epochs "
                                     f"of '{OBJ}' (a pretraining checkpoint is written within an epoch), got int 1 "
                                     f"{TAIL}")
    out, last = _edited(tmp_path / "down", written["downstream"], _set("epoch", 2))
    assert _plan(out) == ("refused", f"cannot resume: {last}: key 'epoch': expected at most 1, the downstream "
                                     f"epochs, got int 2 {TAIL}")
    with pytest.raises(RunError, match="key 'epoch': expected at most 1, the downstream epochs"):
        fusebench.run("quickstart", objective=OBJ, seeds=[0], out=out, synthetic=True, overrides=TINY, progress=False)


def test_the_downstream_pretrained_state_must_match_the_model(tmp_path: Path, written: dict[str, bytes]) -> None:
    """Both are the task model's state_dict: a tensor of another shape in one is refused before any cell."""
    def reshape(c: dict) -> None:
        c["pretrained_state"][_first_matrix(c["model"])] = torch.zeros(3, 5)

    out, last = _edited(tmp_path, written["downstream"], reshape)
    action, detail = _plan(out)
    assert action == "refused" and detail.startswith(f"cannot resume: {last}: key 'pretrained_state': expected the "
                                                     "names and shapes of the model's state_dict")


def test_an_optimizer_state_of_another_shape_fails_the_cell_naming_file_and_key(tmp_path: Path,
                                                                              written: dict[str, bytes]) -> None:
    """An optimizer moment of another shape than its parameter (which torch's load_state_dict takes) is known only
    to the cell's optimizer: the cell refuses the state when it restores it, with one message naming the file and
    the key, before any step. (A module state of another shape is refused before any cell: tests/test_resume_fit.py.)"""
    def reshape(c: dict) -> None:
        state = c["optimizer"]["state"]
        state[next(iter(state))]["exp_avg"] = torch.zeros(7)

    out, last = _edited(tmp_path, written["pretrain"], reshape)
    (row,) = fusebench.run("quickstart", objective=OBJ, seeds=[0], out=out, synthetic=True, overrides=TINY,
                           progress=False)
    assert row["status"] == "failed" and not (last.parent / "run.json").exists()
    error = json.loads((last.parent / "failed.json").read_text())["error"]
    assert error.startswith(f"RunError: cannot resume: {last}: key 'optimizer': expected the state of the pretrain "
                            f"phase's AdamW, which it does not fit: "), error
    assert "exp_avg of shape [7]" in error
    assert error.endswith(TAIL)


def test_load_checkpoint_accepts_what_the_code_writes(tmp_path: Path, written: dict[str, bytes]) -> None:
    for phase, data in written.items():
        _, last = _cell_with(tmp_path / phase, data)
        assert load_checkpoint(last)["phase"] == phase


def test_status_and_plan_map_the_weights_instead_of_reading_them(tmp_path: Path, written: dict[str, bytes],
                                                                 monkeypatch) -> None:
    """``mmap=True`` (status, --plan): torch.load maps the file (its ``mmap`` flag) and gives the same checkpoint; a
    legacy-format file, which cannot be mapped, is read and judged as the run judges it; status asks for the
    mapped load."""
    _, last = _cell_with(tmp_path / "zip", written["pretrain"])
    loads = []
    real_load = torch.load

    def spy_load(*args, **kwargs):
        loads.append(kwargs.get("mmap"))
        return real_load(*args, **kwargs)

    monkeypatch.setattr(torch, "load", spy_load)
    read, mapped = load_checkpoint(last), load_checkpoint(last, mmap=True)
    assert loads == [False, True]
    state = read["pretrainer"]  # a pretraining checkpoint: the encoder and projection heads' weights
    assert state and set(mapped["pretrainer"]) == set(state)
    assert all(torch.equal(t, state[name]) for name, t in mapped["pretrainer"].items())
    assert mapped["curves"] == read["curves"] and mapped["step"] == read["step"]
    legacy = tmp_path / "legacy.pt"
    torch.save(read, legacy, _use_new_zipfile_serialization=False)
    assert load_checkpoint(legacy, mmap=True)["step"] == read["step"] and loads[-1] is False
    asked = []
    real = load_checkpoint

    def spy(path, mmap=False):
        asked.append(mmap)
        return real(path, mmap)

    import fusebench.engine.cell as cell_module
    monkeypatch.setattr(cell_module, "load_checkpoint", spy)
    assert status._resumable(last, None) == "resumable from last.pt" and asked == [True]


class _Evil:
    """Pickled with a reduce that would create a file when unpickled."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def test_status_calls_resumable_only_what_the_run_resumes(tmp_path: Path, written: dict[str, bytes]) -> None:
    """A pickle with code, a dict of tensors, a checkpoint of another configuration or benchmark: "not resumable"
    with the run's message (the spec's checks with --benchmark alone); a checkpoint of the benchmark's default
    configuration, written by the code: resumable, with and without --benchmark."""
    out = tmp_path / "runs"
    cells = {name: cell_dir(out, "quickstart", name, 0) for name in ("m3g", "mv_dhel", "infonce_pwe")}
    for cell in cells.values():
        cell.mkdir(parents=True)
    marker = tmp_path / "ran"
    torch.save({"phase": "pretrain", "payload": _Evil(marker)}, cells["m3g"] / "last.pt")
    torch.save({"weight": torch.zeros(2, 2)}, cells["mv_dhel"] / "last.pt")
    (cells["infonce_pwe"] / "last.pt").write_bytes(written["pretrain"])  # made under TINY's settings
    found = status.collect(out)["quickstart"]
    assert found[("m3g", 0)] == ("interrupted", (
        f"not resumable: cannot resume: checkpoint {cells['m3g'] / 'last.pt'} is unreadable (it holds a pickled Python "
        "object (getattr) that loading would have to run; fusebench never unpickles code (torch.load "
        "weights_only=True): save tensors and plain containers only); the file was left as it is — delete it to start "
        "over"))
    assert not marker.exists()
    assert found[("mv_dhel", 0)] == ("interrupted", (
        f"not resumable: cannot resume: {cells['mv_dhel'] / 'last.pt'}: key 'phase': expected 'pretrain' or "
        f"'downstream', it is missing (a damaged or edited checkpoint?); the file was left as it is — delete it to "
        "start over"))
    assert found[("infonce_pwe", 0)] == ("interrupted", "resumable from last.pt")  # no spec: its structure only
    # with the spec: written under other settings than the benchmark's defaults (a run with TINY's --set resumes it)
    tiny, default = (spec_hash(benchmarks.load("quickstart", overrides=o), OBJ) for o in (TINY, {}))
    assert tiny != default
    judged = status.collect(out, ["quickstart"])["quickstart"]
    assert judged[("infonce_pwe", 0)] == ("interrupted", (
        f"not resumable: cannot resume {cells['infonce_pwe'] / 'last.pt'}: it was written with another configuration "
        f"(config hash {tiny} != {default} of the current spec and --set values); changed: "
        "dataset.synthetic_spec.num_samples: 64 in the checkpoint, now 1024; downstream.epochs: 1 in the checkpoint, "
        "now 10; pretrain.batch_size: 32 in the checkpoint, now 64; pretrain.epochs: 1 in the checkpoint, now 20; "
        "rerun with the same settings, or move the cell folder away to start over"))
    assert judged[("m3g", 0)] == found[("m3g", 0)] and judged[("mv_dhel", 0)] == found[("mv_dhel", 0)]
    # another benchmark's checkpoint under this one's folders
    other = cell_dir(out, "mv-hw2sources", OBJ, 0)
    other.mkdir(parents=True)
    (other / "last.pt").write_bytes(written["pretrain"])
    mv = spec_hash(benchmarks.load("mv-hw2sources"), OBJ)
    state, why = status.collect(out, ["mv-hw2sources"])["mv-hw2sources"][(OBJ, 0)]
    assert state == "interrupted" and why.startswith(
        f"not resumable: cannot resume {other / 'last.pt'}: it was written with another configuration (config hash "
        f"{tiny} != {mv} of the current spec and --set values); changed: dataset.id: 'quickstart' in the checkpoint, "
        "now 'mv_hw2sources'; ") and why.endswith("; rerun with the same settings, or move the cell folder away to "
                                                 "start over"), why
    # one the default sweep resumes: written by the code under the benchmark's own settings
    spec = benchmarks.load("quickstart", overrides={"checkpoint_every": 1})  # not in the config hash
    assert spec_hash(spec, OBJ) == default
    (cells["infonce_pwe"] / "last.pt").unlink()
    with pytest.raises(KeyboardInterrupt):
        run_cell(CellRequest(spec, OBJ, 0, out), RunOptions(progress=False, synthetic=True, max_steps=1))
    assert status.collect(out, ["quickstart"])["quickstart"][(OBJ, 0)] == ("interrupted", "resumable from last.pt")
    assert status.collect(out)["quickstart"][(OBJ, 0)] == ("interrupted", "resumable from last.pt")
