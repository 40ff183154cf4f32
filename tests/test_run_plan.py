"""``fusebench run ... --plan`` (:mod:`fusebench.sweep.plan`): every cell and selection judged as the run judges it,
with the run's own arguments, nothing run and nothing written; a refusal is listed (exit 2), not the end."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

import fusebench
from fusebench import benchmarks
from fusebench.cells.execute import run_cell
from fusebench.cli import run as cli_run
from fusebench.engine.locks import hostname
from fusebench.spec.request import CellRequest, RunOptions, cell_dir

TINY = {"dataset.synthetic_spec": {"num_samples": 64, "seed": 0}, "pretrain.epochs": 1, "pretrain.batch_size": 32,
        "downstream.epochs": 1}
#: TINY for runs of reference rows only: they read no pretrain.* setting, and one given to them is refused
TINY_REF = {k: v for k, v in TINY.items() if not k.startswith("pretrain.")}
GRID = [0.1, 0.5, 1.0]
FAST = {"pretrain.epochs": 1, "pretrain.batch_size": 32, "metrics": ["fs1_best_acc", "fs1_acc", "knn_acc", "acc"],
        "options.embedding_eval": {"l2_grid": [1.0], "cluster_on": "all", "n_init": 1, "fewshot_shots": [1],
                                   "fewshot_draws": 3, "knn_grid": [1, 5]},
        "pretrain.grid": {"infonce_pwe": {"tau": GRID}}, "pretrain.selection_seeds": [1000, 1001]}


def _files(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in root.rglob("*")} if root.exists() else {}


def _by_cell(rows: list[dict]) -> dict[tuple[str, int], tuple[str, str]]:
    return {(r["objective"], r["seed"]): (r["action"], r["detail"]) for r in rows if not r.get("selection")}


def _sets(overrides: dict) -> list[str]:
    return [x for k, v in overrides.items() for x in ("--set", f"{k}={json.dumps(v)}")]


def test_the_plan_of_cells_says_reuse_resume_run_busy_and_refused_and_writes_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "runs"
    fresh = fusebench.run("quickstart", objective=["none", "infonce_pwe"], seeds=[0, 1], out=out, synthetic=True,
                          overrides=TINY, progress=False, plan=True)
    assert _by_cell(fresh) == {(o, s): ("run", "") for o in ("none", "infonce_pwe") for s in (0, 1)}
    assert not out.exists(), "a plan makes no --out folder"

    spec = benchmarks.load("quickstart", overrides=TINY)
    run_cell(CellRequest(spec, "none", 0, out), RunOptions(progress=False, synthetic=True))  # a finished cell
    ckpt_spec = benchmarks.load("quickstart", overrides={**TINY, "checkpoint_every": 1})
    with pytest.raises(KeyboardInterrupt):  # a killed cell: last.pt, no run.json
        run_cell(CellRequest(ckpt_spec, "infonce_pwe", 0, out), RunOptions(progress=False, synthetic=True,
                                                                            max_steps=1))
    busy = cell_dir(out, "quickstart", "infonce_pwe", 1)
    busy.mkdir(parents=True)
    (busy / ".lock").write_text(json.dumps({"pid": os.getpid(), "host": hostname()}))  # held by a live process
    before = _files(out)

    rows = fusebench.run("quickstart", objective=["none", "infonce_pwe"], seeds=[0, 1], out=out, synthetic=True,
                         overrides=TINY, progress=False, plan=True)
    cells = _by_cell(rows)
    assert cells[("none", 0)] == ("reuse", str(cell_dir(out, "quickstart", "none", 0) / "run.json"))
    assert cells[("none", 1)] == ("run", "")
    assert cells[("infonce_pwe", 0)] == ("resume", f"from {cell_dir(out, 'quickstart', 'infonce_pwe', 0) / 'last.pt'}")
    assert cells[("infonce_pwe", 1)] == ("busy", f"locked by pid {os.getpid()}: another process runs it now")
    assert _files(out) == before, "a plan writes nothing"

    # the same folders under another configuration: the record and the checkpoint are refused, each named (a run
    # stops at the first); the cell without a file would run, the busy one is still busy
    # (hash schema 4: a pretraining setting alone leaves the reference row's record as it is, so the other
    # configuration also changes what the probe of every row reads)
    only_pretraining = fusebench.run("quickstart", objective=["none", "infonce_pwe"], seeds=[0], out=out,
                                     synthetic=True, overrides={**TINY, "pretrain.epochs": 2}, progress=False,
                                     plan=True)
    assert [r["action"] for r in only_pretraining] == ["reuse", "refused"]
    other = {**TINY, "pretrain.epochs": 2, "downstream.epochs": 2}
    rows = fusebench.run("quickstart", objective=["none", "infonce_pwe"], seeds=[0, 1], out=out, synthetic=True,
                         overrides=other, progress=False, plan=True)
    action, detail = _by_cell(rows)[("infonce_pwe", 0)]
    assert action == "refused" and "last.pt: it was written with another configuration (config hash" in detail
    assert [r["action"] for r in rows] == ["refused", "run", "refused", "busy"]
    assert _by_cell(rows)[("none", 0)][1].startswith(f"{cell_dir(out, 'quickstart', 'none', 0) / 'run.json'} was made "
                                                     "with another configuration (config hash ")

    # the CLI: one line per cell, the count, exit 2 where the run would refuse, nothing written
    code = cli_run.main(["quickstart", "--objective", "none", "infonce_pwe", "--seeds", "0", "1", "--out", str(out),
                         "--synthetic", "--plan", "--no-progress", *_sets(other)])
    printed = capsys.readouterr()
    assert code == 2
    none0 = cell_dir(out, "quickstart", "none", 0) / "run.json"
    assert f"quickstart none seed0: refused: {none0} was made" in printed.out
    assert "quickstart infonce_pwe seed0: refused: cannot resume" in printed.out
    assert "plan: 4 cell(s): 1 run, 1 busy, 2 refused; nothing was run, no record written" in printed.out
    assert "the run would stop before any cell: 2 refused" in printed.err
    assert _files(out) == before
    (busy / ".lock").unlink()
    failed = cell_dir(out, "quickstart", "none", 1)
    failed.mkdir(parents=True)
    (failed / "failed.json").write_text(json.dumps({"status": "failed", "error": "OSError: disk full"}))
    rows = fusebench.run("quickstart", objective=["none"], seeds=[1], out=out, synthetic=True, overrides=TINY_REF,
                         progress=False, plan=True)
    assert _by_cell(rows) == {("none", 1): ("run", f"a retry: it failed before ({failed / 'failed.json'})")}
    code = cli_run.main(["quickstart", "--objective", "none", "infonce_pwe", "--seeds", "0", "1", "--out", str(out),
                         "--synthetic", "--plan", "--no-progress", *_sets(TINY)])
    assert code == 0 and "plan: 4 cell(s): 1 reuse, 1 resume, 2 run;" in capsys.readouterr().out


def test_the_plan_of_a_selection_counts_its_trials_and_checks_a_frozen_file_as_the_run_does(
        tmp_path: Path, fixtures_dir: Path) -> None:
    out, ngs = tmp_path / "runs", str(fixtures_dir / "multiview" / "NGs.mat")
    path = out / "mv-ngs" / "_selection" / "infonce_pwe.json"
    plan = fusebench.run("mv-ngs", objective=["none", "infonce_pwe"], seeds=[0], out=out, data_root=ngs,
                         overrides=FAST, progress=False, plan=True)
    sel = [r for r in plan if r.get("selection")]
    # 3 grid points x 2 selection seeds; 'none' selects nothing
    assert sel == [{"status": "plan", "benchmark": "mv-ngs", "objective": "infonce_pwe", "selection": True,
                    "action": "select",
                    "detail": f"6 of 6 trial(s) to run (3 grid point(s) x 2 selection seed(s)) under "
                              f"{out / '.selection' / 'mv-ngs' / 'infonce_pwe'}, then the choice frozen to {path}"}]
    fusebench.run("mv-ngs", objective="infonce_pwe", seeds=[0], out=out, data_root=ngs, overrides=FAST,
                  progress=False)
    frozen = json.loads(path.read_text())
    choice = " ".join(f"{k}={v}" for k, v in frozen["choice"].items())

    plan = fusebench.run("mv-ngs", objective=["infonce_pwe"], seeds=[0, 1], out=out, data_root=ngs,
                         overrides=FAST, progress=False, plan=True)
    (sel,) = [r for r in plan if r.get("selection")]
    assert sel["action"] == "reuse" and sel["detail"].startswith(f"selection mv-ngs/infonce_pwe: chose {choice} ")
    assert f"reused from {path}" in sel["detail"]
    seed0 = cell_dir(out, "mv-ngs", "infonce_pwe", 0) / "run.json"
    assert _by_cell(plan) == {("infonce_pwe", 0): ("reuse", str(seed0)), ("infonce_pwe", 1): ("run", "")}

    # a frozen file whose choice was edited (not the best of its own scores, or not a grid point): refused
    scores = {json.dumps(e["hparams"]): e["val"] for e in frozen["scores"]}
    worst = min(frozen["scores"], key=lambda e: e["val"])["hparams"]
    assert scores[json.dumps(frozen["choice"])] == max(scores.values()) and worst != frozen["choice"]
    for edited, why in ((worst, f"its choice {worst} is not the best of its own scores ({frozen['choice']}"),
                        ({"tau": -5}, "its choice {'tau': -5} is not a point of the grid {'tau': [0.1, 0.5, 1.0]}"),
                        ("tau", "its choice 'tau' is not a point of the grid")):
        path.write_text(json.dumps({**frozen, "choice": edited}))
        (sel,) = [r for r in fusebench.run("mv-ngs", objective=["infonce_pwe"], seeds=[0, 1], out=out, data_root=ngs,
                                           overrides=FAST, progress=False, plan=True) if r.get("selection")]
        assert sel["action"] == "refused" and sel["detail"].startswith(
            f"{path}: the frozen hyper-parameter selection of mv-ngs/infonce_pwe: {why}"), sel["detail"]
    path.write_text(json.dumps([1]))
    (sel,) = [r for r in fusebench.run("mv-ngs", objective=["infonce_pwe"], seeds=[0, 1], out=out, data_root=ngs,
                                       overrides=FAST, progress=False, plan=True) if r.get("selection")]
    assert sel["detail"] == f"{path}: the frozen hyper-parameter selection is not a JSON object; delete it to select again"

    # a frozen file made from another configuration: the plan names it, as the run's refusal does
    frozen["config_hash"] = "0" * 16
    path.write_text(json.dumps(frozen))
    plan = fusebench.run("mv-ngs", objective=["infonce_pwe"], seeds=[0, 1], out=out, data_root=ngs,
                         overrides=FAST, progress=False, plan=True)
    (sel,) = [r for r in plan if r.get("selection")]
    assert sel["action"] == "refused"
    assert sel["detail"].startswith(f"{path}: the frozen hyper-parameter selection of mv-ngs/infonce_pwe was made with "
                                    f"another configuration or other data: config_hash '{'0' * 16}' (now ")
    with pytest.raises(fusebench.engine.cell.ConfigMismatchError, match="frozen hyper-parameter selection"):
        fusebench.run("mv-ngs", objective=["infonce_pwe"], seeds=[0, 1], out=out, data_root=ngs, overrides=FAST,
                      progress=False)


def test_the_plan_of_a_selection_that_could_see_test_samples_is_the_run_s_refusal(tmp_path: Path,
                                                                                 fixtures_dir: Path) -> None:
    """split_per_seed without a fixed test split: the run refuses the selection before its first trial (selection
    seed 1000's train / val would hold test samples of seed 0); the plan said it would run its 6 trials."""
    from fusebench.engine.loop import RunError

    out, ngs = tmp_path / "runs", str(fixtures_dir / "multiview" / "NGs.mat")
    over = {**FAST, "dataset.outer_test_seed": None}
    plan = fusebench.run("mv-ngs", objective=["none", "infonce_pwe"], seeds=[0], out=out, data_root=ngs,
                         overrides=over, progress=False, plan=True)
    (sel,) = [r for r in plan if r.get("selection")]
    why = (r"mv-ngs: dataset.split_per_seed draws a split per seed, so the selection seeds \[1000, 1001\] would train "
           r"and validate on test samples of the evaluation seeds")
    assert sel["action"] == "refused" and re.match(why, sel["detail"]), sel
    assert not out.exists()
    with pytest.raises(RunError, match=why):
        fusebench.run("mv-ngs", objective=["none", "infonce_pwe"], seeds=[0], out=out, data_root=ngs, overrides=over,
                      progress=False)


def test_plan_is_a_flag_of_the_typed_request() -> None:
    from fusebench.spec.config import ConfigError
    from fusebench.spec.request import SweepRequest

    assert SweepRequest.of("quickstart", plan=True).plan is True
    with pytest.raises(ConfigError, match="plan: expected True or False, got 'yes'"):
        SweepRequest.of("quickstart", plan="yes")


def test_an_unreadable_lock_is_judged_by_one_rule_in_the_plan_the_run_and_status(tmp_path: Path) -> None:
    """An empty .lock (a run of an older version between creating and writing it) is another process's for a minute
    after it was last written, then stale: the plan says busy / run, the run skips / takes the cell, status says
    running / pending, all by the run's own rule (engine.cell.lock_holder)."""
    import time

    from fusebench.sweep import status

    cell = cell_dir(tmp_path, "quickstart", "none", 0)
    cell.mkdir(parents=True)
    lock = cell / ".lock"
    lock.write_text("")
    kw = dict(objective="none", seeds=[0], out=tmp_path, synthetic=True, overrides=TINY_REF, progress=False)
    held = ("another process (its lock is unreadable; taken as held for 60 s after it was last written, then as "
            "stale)")
    os.utime(lock)  # written now (before each judgement: no test depends on how fast the one before it ran)
    assert _by_cell(fusebench.run("quickstart", plan=True, **kw)) == {
        ("none", 0): ("busy", f"locked by {held}: another process runs it now")}
    os.utime(lock)
    (row,) = fusebench.run("quickstart", **kw)
    assert row["status"] == "skipped" and "its lock is unreadable" in row["error"]
    os.utime(lock)
    assert status.collect(tmp_path)["quickstart"][("none", 0)] == ("running", held)
    assert lock.read_text() == "" and not (cell / "run.json").exists()
    old = time.time() - 120  # left empty by a run killed two minutes ago: stale
    os.utime(lock, (old, old))
    assert _by_cell(fusebench.run("quickstart", plan=True, **kw)) == {("none", 0): ("run", "")}
    assert status.collect(tmp_path)["quickstart"][("none", 0)] == ("pending", "")
    (rec,) = fusebench.run("quickstart", **kw)
    assert rec["objective"] == "none" and (cell / "run.json").is_file() and not lock.exists()


def test_a_last_pt_that_is_not_a_checkpoint_is_one_refusal_in_the_plan_and_the_run(tmp_path: Path) -> None:
    import torch

    from fusebench.engine.loop import RunError

    cell = cell_dir(tmp_path, "quickstart", "none", 0)
    cell.mkdir(parents=True)
    torch.save(torch.zeros(3), cell / "last.pt")  # loads under weights_only, but holds no checkpoint
    rows = fusebench.run("quickstart", objective="none", seeds=[0], out=tmp_path, synthetic=True, overrides=TINY_REF,
                         progress=False, plan=True)
    assert _by_cell(rows) == {("none", 0): ("refused", f"cannot resume: {cell / 'last.pt'} holds a Tensor, not a "
                                                       "fusebench checkpoint (a mapping); the file was left as it "
                                                       "is — delete it to start over")}
    with pytest.raises(RunError, match="holds a Tensor, not a fusebench checkpoint"):
        fusebench.run("quickstart", objective="none", seeds=[0], out=tmp_path, synthetic=True, overrides=TINY_REF,
                      progress=False)
    assert (cell / "last.pt").is_file() and not (cell / "run.json").exists()
