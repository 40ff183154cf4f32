"""A ``last.pt`` whose configuration passes but whose tensors do not fit the modules the cell builds
(fusebench/cells/resume_fit.py: resume_misfit; fusebench/sweep/plan.py: check_resumes_fit): a tensor of another
shape, a missing one, an unexpected one -- what a checkpoint of another suite version or of an encoder / objective
whose parameters changed since is. The sweep stops before any cell with one ConfigError naming the file, the tensor
and expected vs found shape (no other cell runs, no file changes), ``--plan`` refuses the cell with the same words,
and ``fusebench status --benchmark`` does not call it resumable.

The checkpoints are real: written by a cell killed by its step budget (one in the pretraining phase, one in the
downstream phase), then edited with ``torch.save``. The expected shapes are read from the unedited file the code
wrote (the shapes of the model that wrote it), not from the check."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

import fusebench
from fusebench import benchmarks
from fusebench.cells.execute import run_cell
from fusebench.components.identity import spec_hash
from fusebench.engine.cell import load_checkpoint
from fusebench.spec.config import ConfigError
from fusebench.spec.request import CellRequest, RunOptions, cell_dir
from fusebench.sweep import status

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # conftest.py

TINY = {"dataset.synthetic_spec": {"num_samples": 64, "seed": 0}, "pretrain.epochs": 1, "pretrain.batch_size": 32,
        "downstream.epochs": 1, "checkpoint_every": 1}
OBJ = "infonce_pwe"
OTHER = "none"  # a cell the sweep would run before OBJ's (a reference row: cheap)
#: the module states each phase's checkpoint holds (a downstream one holds the task model's twice)
STATES = {"pretrain": ("pretrainer",), "downstream": ("model", "pretrained_state")}
BUILT = {"pretrain": "pretrainer (task model, projection heads, objective)", "downstream": "task model"}
TAIL = ("; it was written by other code (an encoder, head or objective whose parameters changed since, another "
        "fusebench version) or edited; the file was left as it is: delete it to start the cell over, or run into "
        "another --out (every cell with a last.pt resumes from it, with or without --resume)")


def _killed(spec, out: Path, steps: int) -> Path:
    with pytest.raises(KeyboardInterrupt):
        run_cell(CellRequest(spec, OBJ, 0, out), RunOptions(progress=False, synthetic=True, max_steps=steps))
    return cell_dir(out, spec.name, OBJ, 0) / "last.pt"


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """{phase: the bytes of a last.pt the code wrote in that phase, under TINY's settings}."""
    spec = benchmarks.load("quickstart", overrides=TINY)
    found = {}
    for steps in (1, 3):  # one step: pretraining; three: past its two steps, in the downstream phase
        last = _killed(spec, tmp_path_factory.mktemp(f"killed{steps}"), steps)
        found[torch.load(last, weights_only=True)["phase"]] = last.read_bytes()
    assert set(found) == {"pretrain", "downstream"}
    return found


def _reshape(state: dict) -> str:
    name = next(k for k, v in state.items() if v.dim() == 2)
    shape = list(state[name].shape)
    assert shape != [3, 5]
    state[name] = torch.zeros(3, 5)
    return f"tensor {name!r}: expected shape {shape}, found [3, 5]"


def _drop(state: dict) -> str:
    name = list(state)[-1]
    return f"tensor {name!r} (shape {list(state.pop(name).shape)}) is missing"


def _add(state: dict) -> str:
    state["model.extra.weight"] = torch.zeros(2, 7)
    return "tensor 'model.extra.weight' (shape [2, 7]) is not one of the model's"


EDITS = {"another shape": _reshape, "a key missing": _drop, "an unexpected key": _add}


def _edited(data: bytes, phase: str, edit, last: Path) -> str:
    """``last`` written as ``data`` with ``edit`` applied to each module state of ``phase`` (a downstream
    checkpoint's two states alike: the structure check wants them the same); returns the problem it names."""
    src = last.with_name("orig.pt")
    last.parent.mkdir(parents=True, exist_ok=True)
    src.write_bytes(data)
    ckpt = torch.load(src, weights_only=True)
    src.unlink()
    said = {edit(ckpt[key]) for key in STATES[phase]}
    assert len(said) == 1
    torch.save(ckpt, last)
    return said.pop()


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("phase", ["pretrain", "downstream"])
@pytest.mark.parametrize("edit", list(EDITS))
def test_a_checkpoint_that_does_not_fit_the_model_is_refused_before_any_cell(
        tmp_path: Path, written: dict[str, bytes], phase: str, edit: str) -> None:
    out = tmp_path / "runs"
    last = cell_dir(out, "quickstart", OBJ, 0) / "last.pt"
    problem = _edited(written[phase], phase, EDITS[edit], last)
    detail = (f"cannot resume {last}: its {STATES[phase][0]!r} state does not fit the {BUILT[phase]} this run builds "
              f"for quickstart/{OBJ} (encoder 'mlp'): {problem}{TAIL}")
    before = _files(out)
    rows = fusebench.run("quickstart", objective=[OTHER, OBJ], seeds=[0], out=out, synthetic=True, overrides=TINY,
                         progress=False, plan=True)
    assert [(r["objective"], r["action"]) for r in rows] == [(OTHER, "run"), (OBJ, "refused")]
    assert rows[1]["detail"] == detail
    with pytest.raises(ConfigError) as err:  # the run stops before any cell (OTHER's comes first), in the plan's words
        fusebench.run("quickstart", objective=[OTHER, OBJ], seeds=[0], out=out, synthetic=True, overrides=TINY,
                      progress=False)
    assert str(err.value) == detail
    assert _files(out) == before and not cell_dir(out, "quickstart", OTHER, 0).exists()


def test_several_misfits_are_named_three_then_counted(tmp_path: Path, written: dict[str, bytes]) -> None:
    out = tmp_path / "runs"
    last = cell_dir(out, "quickstart", OBJ, 0) / "last.pt"

    def edit(state: dict) -> str:
        for name in list(state)[:5]:
            del state[name]
        return ""

    _edited(written["pretrain"], "pretrain", edit, last)
    rows = fusebench.run("quickstart", objective=OBJ, seeds=[0], out=out, synthetic=True, overrides=TINY,
                         progress=False, plan=True)
    (row,) = rows
    assert row["action"] == "refused" and row["detail"].count("is missing") == 3
    assert row["detail"].endswith(f"; and 2 more{TAIL}")


@pytest.mark.parametrize("phase", ["pretrain", "downstream"])
def test_what_the_code_writes_fits_and_resumes(tmp_path: Path, written: dict[str, bytes], phase: str) -> None:
    out = tmp_path / "runs"
    last = cell_dir(out, "quickstart", OBJ, 0) / "last.pt"
    last.parent.mkdir(parents=True)
    last.write_bytes(written[phase])
    (row,) = fusebench.run("quickstart", objective=OBJ, seeds=[0], out=out, synthetic=True, overrides=TINY,
                           progress=False, plan=True)
    assert (row["action"], row["detail"]) == ("resume", f"from {last}")
    (rec,) = fusebench.run("quickstart", objective=OBJ, seeds=[0], out=out, synthetic=True, overrides=TINY,
                           progress=False)
    assert rec["objective"] == OBJ and rec["resumed"] is True


def test_status_does_not_call_a_misfit_resumable(tmp_path: Path) -> None:
    """With ``--benchmark``, status judges a checkpoint of the benchmark's default configuration (checkpoint_every is
    outside the config hash) written on synthetic data by the run's check; without it, by its structure alone."""
    spec = benchmarks.load("quickstart", overrides={"checkpoint_every": 1})
    out = tmp_path / "runs"
    last = _killed(spec, out, 1)
    assert status.collect(out, ["quickstart"])["quickstart"][(OBJ, 0)] == ("interrupted", "resumable from last.pt")
    data = last.read_bytes()
    last.unlink()
    problem = _edited(data, "pretrain", _reshape, last)
    detail = (f"cannot resume {last}: its 'pretrainer' state does not fit the {BUILT['pretrain']} this run builds for "
              f"quickstart/{OBJ} (encoder 'mlp'): {problem}{TAIL}")
    assert status.collect(out, ["quickstart"])["quickstart"][(OBJ, 0)] == ("interrupted", f"not resumable: {detail}")
    assert status.collect(out)["quickstart"][(OBJ, 0)] == ("interrupted", "resumable from last.pt")  # no spec


def test_real_data_sizes_the_model_and_status_leaves_the_fit_to_the_plan(tmp_path: Path, fixtures_dir: Path) -> None:
    """A cell of a real-data benchmark (its input sizes are the file's: 784- and 256-d views): the run builds the
    model for the data it reads and refuses a checkpoint that does not fit it, before the hyper-parameter selection
    writes anything; ``fusebench status --benchmark``, which does not read the data, calls it resumable on that
    condition only."""
    from fusebench.cells.execute import sweep_context

    root = str(fixtures_dir / "multiview" / "HW2sources.mat")
    from fusebench.sweep.runner import resolve_views

    spec = benchmarks.load("mv-hw2sources", overrides={"checkpoint_every": 1})  # outside the config hash
    resolve_views(spec, False, root)  # the views the file has, as the run names them
    out = tmp_path / "runs"
    with pytest.raises(KeyboardInterrupt):
        run_cell(CellRequest(spec, OBJ, 0, out), RunOptions(progress=False, data_root=root, max_steps=1),
                 sweep_context(spec, False, root))
    last = cell_dir(out, "mv-hw2sources", OBJ, 0) / "last.pt"
    conditional = ("resumable from last.pt if its tensors fit the model built for its data (written on real data, "
                   "which status does not read: fusebench run ... --plan judges it)")
    assert status._fit_of(last, load_checkpoint(last, mmap=True), spec) == conditional
    # status.collect loads the spec as the benchmark states it, views unnamed (the run names them from the file): it
    # leaves the checkpoint's configuration to --plan too, rather than refuse it for views it did not read
    assert status.collect(out, ["mv-hw2sources"])["mv-hw2sources"][(OBJ, 0)] == ("interrupted", (
        "resumable from last.pt if it was written under the configuration its data gives (mv-hw2sources's views, and "
        "what follows from them, come from its data file, which status does not read: fusebench run ... --plan "
        "judges it)"))
    # ... but compares the rest of it: the same checkpoint under another learning rate (its views are the file's,
    # taken from the checkpoint) is refused, naming that key alone
    edited = torch.load(last, weights_only=True)
    lr = spec.pretrain.lr
    edited["config"]["pretrain"]["lr"] = lr * 10
    edited["config_hash"] = "0" * 16
    other = cell_dir(out, "mv-hw2sources", OBJ, 1)
    other.mkdir(parents=True)
    torch.save(edited, other / "last.pt")
    state, why = status.collect(out, ["mv-hw2sources"])["mv-hw2sources"][(OBJ, 1)]
    assert state == "interrupted" and why == (
        f"not resumable: cannot resume {other / 'last.pt'}: it was written with another configuration (config hash "
        f"{'0' * 16} != {spec_hash(spec, OBJ)} of the current spec and --set values); changed: pretrain.lr: {lr * 10!r} "
        f"in the checkpoint, now {lr!r}; rerun with the same settings, or move the cell folder away to start over"), why
    shutil.rmtree(other)

    def plan() -> dict:
        rows = fusebench.run("mv-hw2sources", objective=OBJ, seeds=[0], out=out, data_root=root, progress=False,
                             plan=True)
        (row,) = [r for r in rows if not r.get("selection")]
        return row

    assert plan()["action"] == "resume", plan()
    data = last.read_bytes()
    last.unlink()
    problem = _edited(data, "pretrain", _reshape, last)
    assert "expected shape [128, 784], found [3, 5]" in problem  # the first view's first layer, sized by the file
    row = plan()
    assert row["action"] == "refused" and row["detail"] == (
        f"cannot resume {last}: its 'pretrainer' state does not fit the {BUILT['pretrain']} this run builds for "
        f"mv-hw2sources/{OBJ} (encoder 'mlp'): {problem}{TAIL}")
    before = _files(out)
    with pytest.raises(ConfigError) as err:  # before the hyper-parameter selection writes anything
        fusebench.run("mv-hw2sources", objective=OBJ, seeds=[0], out=out, data_root=root, progress=False)
    assert str(err.value) == row["detail"] and _files(out) == before
    assert status._fit_of(last, load_checkpoint(last, mmap=True), spec) == conditional
