"""``fusebench run ... --plan`` and the run judge every cell and every hyper-parameter selection by one function
(:mod:`fusebench.sweep.plan`: ``cell_plan``, ``check_resumes_fit``, ``selection_plan``; the plan collects each
refusal, the run stops at the first). For each situation below the plan's action and detail and the run's behaviour
(its refusal's message, what it reused or resumed, what it left unrun) agree, with the expected messages written out.

Found disagreeing before (measured with these tests on the code before the change):
- a finished cell made at another point of a frozen selection, of an objective whose cells were all finished: the
  plan refused it, the run reused it (the run judged the choice only for objectives with cells still to run);
- a selection trial's record made under another configuration: the plan said ``select`` (0 of 2 trials to run), the
  run refused it, and only once the trials before it had run;
- a trial's ``last.pt`` whose tensors do not fit the trial's modules, or a trial another process holds: the plan said
  ``select``, the run failed in that trial after running those before it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
from pathlib import Path

import pytest
import torch

import fusebench
from fusebench.cells.resume_fit import STATE_KEYS
from fusebench.engine.cell import CellBusyError, ConfigMismatchError
from fusebench.engine.locks import hostname
from fusebench.spec.config import ConfigError
from fusebench.spec.request import RunOptions
from fusebench.sweep import runner

FAST = {"pretrain.epochs": 1, "pretrain.batch_size": 32, "metrics": ["fs1_best_acc", "fs1_acc", "knn_acc", "acc"],
        "options.embedding_eval": {"l2_grid": [1.0], "cluster_on": "all", "n_init": 1, "fewshot_shots": [1],
                                   "fewshot_draws": 3, "knn_grid": [1, 5]},
        "pretrain.grid": {"infonce_pwe": {"tau": [0.1, 0.5]}}, "pretrain.selection_seeds": [1000],
        "checkpoint_every": 1}
OBJ = "infonce_pwe"


def _files(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in root.rglob("*")}


def _common(out: Path, fixtures_dir: Path, **over) -> dict:
    return dict(objective=OBJ, out=out, data_root=str(fixtures_dir / "multiview" / "NGs.mat"),
                overrides={**FAST, **over}, progress=False)


def _trial(out: Path, i: int, tau: float) -> Path:
    """A trial's cell folder: one selection seed, so the trial folder holds the run directly."""
    return out / ".selection" / "mv-ngs" / OBJ / f"trial{i}-tau{tau}" / "mv-ngs" / OBJ / "seed1000"


def _plan(common: dict, seeds: list[int]) -> dict:
    """The plan's entries by seed (None: the selection's)."""
    return {r.get("seed"): (r["action"], r["detail"]) for r in fusebench.run("mv-ngs", seeds=seeds, plan=True,
                                                                             **common)}


def _killed_cell(common: dict, seed: int) -> Path:
    """A sweep killed after one pretraining step of the evaluation cell ``seed`` (its trials run whole): the
    selection frozen, both trials recorded, the cell's last.pt written."""
    with pytest.MonkeyPatch.context() as m:
        m.setattr(runner, "RunOptions", functools.partial(RunOptions, max_steps=1))
        with pytest.raises(KeyboardInterrupt):
            fusebench.run("mv-ngs", seeds=[seed], **common)
    last = common["out"] / "mv-ngs" / OBJ / f"seed{seed}" / "last.pt"
    assert last.is_file()
    return last


def _choose_other_point(path: Path) -> tuple[dict, dict]:
    """The frozen file rewritten so that its other grid point is the best of its scores (a selection made again
    elsewhere with another outcome); returns (old choice, new choice)."""
    frozen = json.loads(path.read_text())
    old = frozen["choice"]
    new = next(e["hparams"] for e in frozen["scores"] if e["hparams"] != old)
    scores = [{**e, "val": 0.9 if e["hparams"] == new else 0.1,
               "val_by_seed": {"1000": 0.9 if e["hparams"] == new else 0.1}} for e in frozen["scores"]]
    path.write_text(json.dumps({**frozen, "scores": scores, "choice": new}))
    return old, new


def test_a_finished_cell_at_another_frozen_point_is_refused_by_both_whether_or_not_a_cell_is_left(
        tmp_path: Path, fixtures_dir: Path) -> None:
    out = tmp_path / "runs"
    common = _common(out, fixtures_dir)
    (rec,) = fusebench.run("mv-ngs", seeds=[0], **common)
    path = out / "mv-ngs" / "_selection" / f"{OBJ}.json"
    old, new = _choose_other_point(path)
    run_json = out / "mv-ngs" / OBJ / "seed0" / "run.json"
    want = (f"{run_json} was made with the hyper-parameters of another frozen selection (choice {old!r}, selection "
            f"file sha256 {rec['hparam_selection_sha256']}; this sweep's: choice {new!r}, sha256 "
            f"{hashlib.sha256(path.read_bytes()).hexdigest()}); records are immutable: write to another --out, or "
            f"move that cell's folder away to rerun it with this selection")
    assert rec["hparam_selection_sha256"] != hashlib.sha256(path.read_bytes()).hexdigest()

    # every cell of the objective finished: no selection to make, the record still judged against the frozen file
    assert _plan(common, [0]) == {0: ("refused", want)}
    before = _files(out)
    with pytest.raises(ConfigMismatchError) as err:  # (the run reused it before)
        fusebench.run("mv-ngs", seeds=[0], **common)
    assert str(err.value) == want and _files(out) == before

    # a cell left to run: the selection file reused, the finished cell refused, the new one never started
    plan = _plan(common, [1, 0])
    assert plan[None][0] == "reuse" and plan[1] == ("run", "") and plan[0] == ("refused", want)
    with pytest.raises(ConfigMismatchError) as err:
        fusebench.run("mv-ngs", seeds=[1, 0], **common)
    assert str(err.value) == want and _files(out) == before


def test_a_trial_record_made_under_another_configuration_is_refused_by_both_before_any_trial(
        tmp_path: Path, fixtures_dir: Path) -> None:
    out = tmp_path / "runs"
    fusebench.run("mv-ngs", seeds=[0], **_common(out, fixtures_dir))
    # the selection made again under another learning rate into the same --out: the frozen file and the evaluation
    # cell moved away, trial 0's folder too (it would run first), trial 1's record kept from the old configuration
    (out / "mv-ngs" / "_selection" / f"{OBJ}.json").unlink()
    shutil.rmtree(out / "mv-ngs" / OBJ)
    shutil.rmtree(out / ".selection" / "mv-ngs" / OBJ / "trial0-tau0.1")
    stale = _trial(out, 1, 0.5) / "run.json"
    made = json.loads(stale.read_text())
    assert made["config"]["pretrain"]["lr"] == 0.001
    common = _common(out, fixtures_dir, **{"pretrain.lr": 0.002})
    pattern = (rf"{re.escape(str(stale))} was made with another configuration \(config hash "
               rf"{made['config_hash']} != ([0-9a-f]{{16}}) of the current spec and --set values; changed: "
               r"pretrain\.lr: 0\.001 in the record, now 0\.002\); records are immutable: write to another --out, "
               r"or move that cell's folder away to rerun it")

    plan = _plan(common, [0])
    assert plan[0] == ("run", "") and plan[None][0] == "refused"  # (the plan said: select, 1 of 2 trials to run)
    m = re.fullmatch(pattern, plan[None][1])
    assert m and m.group(1) != made["config_hash"], plan[None][1]
    before = _files(out)
    with pytest.raises(ConfigMismatchError) as err:
        fusebench.run("mv-ngs", seeds=[0], **common)
    assert str(err.value) == plan[None][1]
    assert _files(out) == before, "refused before trial 0 ran (it ran first, then trial 1 was refused)"


def test_a_trial_last_pt_of_another_configuration_or_that_does_not_fit_is_refused_by_both_before_any_trial(
        tmp_path: Path, fixtures_dir: Path) -> None:
    out = tmp_path / "runs"
    common = _common(out, fixtures_dir)
    kept = tmp_path / "kept-last.pt"
    shutil.copyfile(_killed_cell(common, 2), kept)
    # trial 1 killed during its pretraining (its last.pt: the cell's, of the same configuration and data), trial 0
    # still to run, the selection not frozen yet
    (out / "mv-ngs" / "_selection" / f"{OBJ}.json").unlink()
    shutil.rmtree(out / "mv-ngs" / OBJ)
    shutil.rmtree(out / ".selection" / "mv-ngs" / OBJ / "trial0-tau0.1")
    trial = _trial(out, 1, 0.5)
    (trial / "run.json").unlink()
    trial_last = trial / "last.pt"
    shutil.copyfile(kept, trial_last)

    # the same configuration: trial 1 resumed, trial 0 run (and nothing refused)
    sel = f"under {out / '.selection' / 'mv-ngs' / OBJ}, then the choice frozen to " \
          f"{out / 'mv-ngs' / '_selection' / f'{OBJ}.json'}"
    assert _plan(common, [0])[None] == ("select", f"2 of 2 trial(s) to run (1 resumed from last.pt) (2 grid point(s) "
                                                  f"x 1 selection seed(s)) {sel}")

    # another learning rate: the checkpoint refused by both, in the same words, before trial 0 runs
    other = _common(out, fixtures_dir, **{"pretrain.lr": 0.002})
    plan = _plan(other, [0])
    assert plan[None][0] == "refused" and plan[None][1].startswith(
        f"cannot resume {trial_last}: it was written with another configuration (config hash ")
    assert plan[None][1].endswith("; changed: pretrain.lr: 0.001 in the checkpoint, now 0.002; rerun with the same "
                                  "settings, or move the cell folder away to start over")
    before = _files(out)
    with pytest.raises(ConfigMismatchError) as err:
        fusebench.run("mv-ngs", seeds=[0], **other)
    assert str(err.value) == plan[None][1] and _files(out) == before

    # the same configuration, a tensor of another shape: the plan said "select (1 resumed)", the run ran trial 0 and
    # failed in trial 1; now both refuse it, in the same words, before trial 0 runs
    ckpt = torch.load(trial_last, weights_only=True)
    key = STATE_KEYS[ckpt["phase"]][0]
    name = next(k for k, v in ckpt[key].items() if torch.is_tensor(v) and v.dim() == 2)
    shape = tuple(ckpt[key][name].shape)
    ckpt[key][name] = torch.zeros(shape[0] + 1, shape[1])
    torch.save(ckpt, trial_last)
    want = (f"cannot resume {trial_last}: its {key!r} state does not fit the pretrainer (task model, projection "
            f"heads, objective) this run builds for mv-ngs/{OBJ} (encoder 'mlp'): tensor {name!r}: expected shape "
            f"[{shape[0]}, {shape[1]}], found [{shape[0] + 1}, {shape[1]}]; it was written by other code (an encoder, "
            f"head or objective whose parameters changed since, another fusebench version) or edited; the file was "
            f"left as it is: delete it to start the cell over, or run into another --out (every cell with a last.pt "
            f"resumes from it, with or without --resume)")
    assert ckpt["phase"] == "pretrain" and _plan(common, [0]) == {None: ("refused", want), 0: ("run", "")}
    before = _files(out)
    with pytest.raises(ConfigError) as err:
        fusebench.run("mv-ngs", seeds=[0], **common)
    assert str(err.value) == want and _files(out) == before


def test_a_trial_another_process_holds_is_refused_by_both_before_any_trial(tmp_path: Path, fixtures_dir: Path) -> None:
    out = tmp_path / "runs"
    common = _common(out, fixtures_dir)
    trial = _trial(out, 1, 0.5)
    trial.mkdir(parents=True)
    other = os.getppid()  # a live process of this host, not this one
    (trial / ".lock").write_text(json.dumps({"pid": other, "host": hostname()}))
    want = f"{trial} is being run by process {other} (lock {trial / '.lock'}); not starting it twice"
    plan = _plan(common, [0])
    assert plan[None] == ("refused", want) and plan[0] == ("run", "")  # (the plan said: select, 2 of 2 to run)
    before = _files(out)
    with pytest.raises(CellBusyError) as err:  # (the run ran trial 0, then stopped at trial 1)
        fusebench.run("mv-ngs", seeds=[0], **common)
    assert str(err.value) == want and _files(out) == before
