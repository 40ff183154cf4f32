"""Issue #12, runner side: ids that become paths, config drift on resume, bad --set / --seeds values,
concurrent runs of one cell, one data check per sweep, git state, progress bars in logs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import fusebench
from fusebench.components.identity import spec_hash
from fusebench import benchmarks
from fusebench.datasets.base import DatasetError
from fusebench.cells import execute
from fusebench.sweep import runner
from fusebench.runtime import utils
from fusebench.spec.config import ConfigError
from fusebench.engine.cell import CellBusyError
from fusebench.engine.loop import RunError
from fusebench.engine.data import Subset, build_datasets
from fusebench.cells.execute import run_cell
from fusebench.spec.request import CellRequest, RunOptions, cell_dir

TINY = {
    "dataset.synthetic_spec": {"num_samples": 128, "seed": 0},
    "pretrain.epochs": 1,
    "pretrain.batch_size": 32,
    "downstream.epochs": 1,
    "downstream.batch_size": 64,
    "checkpoint_every": 1,
}
#: TINY for runs of reference rows only: they read no pretrain.* setting, and one given to them is refused
TINY_REF = {k: v for k, v in TINY.items() if not k.startswith("pretrain.")}


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def test_name_override_cannot_escape_out(tmp_path: Path) -> None:
    out = tmp_path / "R"
    before = _files(tmp_path)
    with pytest.raises(ConfigError, match="name '../../escape' is not a valid benchmark id"):
        fusebench.run("quickstart", out=out, overrides={**TINY, "name": "../../escape"}, progress=False)
    assert _files(tmp_path) == before  # nothing written, inside or outside R


def test_cli_bad_name_one_line_no_traceback(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "fusebench", "run", "quickstart", "--out", str(tmp_path / "R"),
                           "--set", "name=../../escape"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and "not a valid benchmark id" in proc.stderr
    assert not (tmp_path / "escape").exists() and not (tmp_path.parent / "escape").exists()


@pytest.mark.parametrize("seed", [99999999999999999999999, -1, 2**32])
def test_seed_out_of_range_names_the_argument(tmp_path: Path, seed: int) -> None:
    with pytest.raises(ConfigError, match=r"--seeds: seed .* is not an integer in 0\.\.4294967295"):
        fusebench.run("quickstart", seeds=[seed], out=tmp_path, overrides=TINY, progress=False)
    assert not (tmp_path / "quickstart").exists()


def test_unknown_hparam_lists_the_valid_ones(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as e:
        fusebench.run("quickstart", objective="m3g", out=tmp_path, progress=False,
                      overrides={**TINY, "pretrain.hparams.m3g.epsilon": 0.1})
    msg = str(e.value)
    assert "pretrain.per_objective.m3g.hparams" in msg and "'epsilon'" in msg and "eps" in msg
    assert not (tmp_path / "quickstart").exists()


def test_batch_larger_than_train_split_is_an_error_not_a_silent_clamp(tmp_path: Path) -> None:
    # quickstart at 128 samples: 2/3 train... whatever the split sizes, 10**8 exceeds them all
    with pytest.raises(ConfigError, match=r"pretrain\.batch_size=100000000 exceeds the \d+ samples of the train split"):
        fusebench.run("quickstart", objective="m3g", out=tmp_path, progress=False,
                      overrides={**TINY, "pretrain.batch_size": 100_000_000})
    assert not any(tmp_path.rglob("*.json"))


def test_a_checkpoint_written_before_the_schema_4_migration_resumes(tmp_path: Path) -> None:
    """A ``last.pt`` carries its cell's config hash but no schema: one written before its runs folder was migrated to
    hash schema 4 holds the schema-3 hash of the same spec (quickstart selects nothing, so the selection seed is
    in schema 3's identity and not in schema 4's: the two differ), and resumes; a schema-3 hash of another spec
    does not."""
    from fusebench.components.identity import config_hash

    spec = benchmarks.load("quickstart", overrides=TINY)
    with pytest.raises(KeyboardInterrupt):
        run_cell(CellRequest(spec, "infonce_pwe", 0, tmp_path), RunOptions(progress=False, max_steps=2))
    ckpt_path = cell_dir(tmp_path, "quickstart", "infonce_pwe", 0) / "last.pt"
    ckpt = torch.load(ckpt_path, weights_only=True)
    old = config_hash(spec.to_dict(), "infonce_pwe", 3)
    assert ckpt["config_hash"] == spec_hash(spec, "infonce_pwe") != old
    other = benchmarks.load("quickstart", overrides={**TINY, "pretrain.lr": 0.05})
    torch.save({**ckpt, "config_hash": config_hash(other.to_dict(), "infonce_pwe", 3)}, ckpt_path)
    with pytest.raises(RunError, match="written with another configuration"):
        run_cell(CellRequest(spec, "infonce_pwe", 0, tmp_path), RunOptions(progress=False, resume=True))
    torch.save({**ckpt, "config_hash": old}, ckpt_path)
    rec = run_cell(CellRequest(spec, "infonce_pwe", 0, tmp_path), RunOptions(progress=False, resume=True))
    assert rec["config_hash"] == spec_hash(spec, "infonce_pwe") and rec["hash_schema"] == 4


def test_resume_with_another_config_is_refused(tmp_path: Path) -> None:
    spec = benchmarks.load("quickstart", overrides=TINY)
    with pytest.raises(KeyboardInterrupt):  # a killed run: last.pt written, no run.json
        run_cell(CellRequest(spec, "infonce_pwe", 0, tmp_path), RunOptions(progress=False, max_steps=2))
    cell = cell_dir(tmp_path, "quickstart", "infonce_pwe", 0)
    assert (cell / "last.pt").exists() and not (cell / "run.json").exists()
    other = benchmarks.load("quickstart", overrides={**TINY, "pretrain.lr": 0.05})
    with pytest.raises(RunError, match="written with another configuration"):
        run_cell(CellRequest(other, "infonce_pwe", 0, tmp_path), RunOptions(progress=False, resume=True))
    with pytest.raises(RunError, match="another configuration"):  # the sweep does not record it as failed
        fusebench.run("quickstart", objective="infonce_pwe", seeds=[0], out=tmp_path, progress=False,
                      overrides={**TINY, "pretrain.lr": 0.05})
    assert not (cell / "run.json").exists()
    # the same config resumes and finishes
    rec = run_cell(CellRequest(spec, "infonce_pwe", 0, tmp_path), RunOptions(progress=False, resume=True))
    assert rec["config_hash"] == spec_hash(spec, "infonce_pwe") and rec["config"]["pretrain"]["lr"] == spec.pretrain.lr


def test_existing_record_of_another_config_is_not_returned(tmp_path: Path) -> None:
    spec = benchmarks.load("quickstart", overrides=TINY)
    rec = run_cell(CellRequest(spec, "none", 0, tmp_path), RunOptions(progress=False))
    assert run_cell(CellRequest(spec, "none", 0, tmp_path), RunOptions(progress=False)) == rec  # same config: the record
    other = benchmarks.load("quickstart", overrides={**TINY, "downstream.lr": 0.5})
    with pytest.raises(RunError, match="made with another configuration"):
        run_cell(CellRequest(other, "none", 0, tmp_path), RunOptions(progress=False))


def test_cell_lock_refuses_a_live_owner_and_takes_over_a_dead_ones(tmp_path: Path) -> None:
    spec = benchmarks.load("quickstart", overrides=TINY_REF)
    cell = cell_dir(tmp_path, "quickstart", "none", 0)
    cell.mkdir(parents=True)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (cell / ".lock").write_text(str(sleeper.pid))
        with pytest.raises(CellBusyError, match=f"being run by process {sleeper.pid}"):
            run_cell(CellRequest(spec, "none", 0, tmp_path), RunOptions(progress=False))
        recs = fusebench.run("quickstart", objective="none", seeds=[0], out=tmp_path, overrides=TINY_REF,
                             progress=False)
        assert recs[0]["status"] == "skipped"
        assert not (cell / "failed.json").exists() and not (cell / "run.json").exists()
    finally:
        sleeper.kill()
        sleeper.wait()
    # the owner is gone: its stale lock is taken over, the cell runs, the lock is removed
    rec = run_cell(CellRequest(spec, "none", 0, tmp_path), RunOptions(progress=False))
    assert rec["objective"] == "none" and not (cell / ".lock").exists()


def test_losing_a_race_leaves_no_failed_json_beside_the_winner(tmp_path: Path, monkeypatch) -> None:
    spec = benchmarks.load("quickstart", overrides=TINY_REF)
    winner = run_cell(CellRequest(spec, "none", 0, tmp_path / "w"), RunOptions(progress=False))
    cell = cell_dir(tmp_path, "quickstart", "none", 0)

    def loser(*args, **kwargs):  # the other process writes run.json just before this one tries to
        cell.mkdir(parents=True, exist_ok=True)
        (cell / "run.json").write_text(json.dumps(winner))
        raise RunError(f"{cell / 'run.json'} exists already; run records are immutable")

    monkeypatch.setattr(execute, "run_cell", loser)
    recs = fusebench.run("quickstart", objective="none", seeds=[0], out=tmp_path, overrides=TINY_REF, progress=False)
    assert recs == [winner]
    assert not (cell / "failed.json").exists()


def test_missing_data_is_reported_once_before_any_cell(tmp_path: Path, capsys) -> None:
    empty = tmp_path / "EMPTY"
    empty.mkdir()
    out = tmp_path / "R"
    with pytest.raises(DatasetError) as e:
        fusebench.run("nyuv2-seg", objective=["none", "m3g"], seeds=[0, 1, 2], out=out, data_root=str(empty),
                      progress=False)
    assert "nyuv2" in str(e.value)
    assert not list(out.rglob("failed.json")) and not list(out.rglob("run.json"))
    assert "FAILED" not in capsys.readouterr().err


def test_empty_validation_split_is_named_before_training(tmp_path: Path, monkeypatch) -> None:
    real = build_datasets

    def no_val(spec, synthetic, data_root, seed, **kwargs):
        data = real(spec, synthetic, data_root, seed, **kwargs)
        data["val"] = Subset(data["val"], [])
        return data

    monkeypatch.setattr(runner, "build_datasets", no_val)
    trained = []
    monkeypatch.setattr(execute, "run_cell", lambda *a, **k: trained.append(a))  # what every launcher calls
    with pytest.raises(DatasetError, match=r"the val split \('quickstart' split 'val'.*has no samples; the benchmark needs it for model selection"):
        fusebench.run("quickstart", objective="m3g", seeds=[0], out=tmp_path, overrides=TINY, progress=False)
    assert trained == []


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True,
                   env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@e"})


def test_git_dirty_ignores_generated_leaderboards_but_not_sources(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "leaderboards").mkdir(parents=True)
    (repo / "src.py").write_text("x = 1\n")
    (repo / "leaderboards" / "README.md").write_text("# boards\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "init")
    assert utils.git_info(repo)["dirty"] is False
    (repo / "leaderboards" / "README.md").write_text("# regenerated by a sweep\n")  # what a run itself writes
    (repo / "untracked.txt").write_text("new\n")
    info = utils.git_info(repo)
    assert info["dirty"] is False and info["dirty_files"] == []
    (repo / "src.py").write_text("x = 2\n")
    info = utils.git_info(repo)
    assert info["dirty"] is True and info["dirty_files"] == ["src.py"]


def test_git_state_is_measured_once_before_the_sweep_writes(tmp_path: Path, monkeypatch) -> None:
    calls = []
    monkeypatch.setattr(utils, "git_info", lambda repo=None: calls.append(1) or {"sha": "abc", "dirty": False})
    recs = fusebench.run("quickstart", objective="none", seeds=[0, 1], out=tmp_path, overrides=TINY_REF, progress=False)
    assert len(calls) == 1 and all(r["git"] == {"sha": "abc", "dirty": False} for r in recs)


def test_no_progress_bars_but_whole_lines_when_stderr_is_not_a_terminal(tmp_path: Path) -> None:
    args = [a for k, v in TINY.items() for a in ("--set", f"{k}={json.dumps(v)}")]
    proc = subprocess.run([sys.executable, "-m", "fusebench", "run", "quickstart", "--objective", "m3g", "--seeds", "0",
                           "--out", str(tmp_path), *args], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "\r" not in proc.stderr  # no tqdm bar redrawing itself in a log file
    progress = [line for line in proc.stderr.splitlines() if line.startswith("[fusebench] ")]
    assert progress[0].startswith("[fusebench] start quickstart/m3g/seed0") and "it/s" in "\n".join(progress)
    assert progress[-1].startswith("[fusebench] done quickstart/m3g/seed0 in ")


def test_unknown_dataset_option_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match=r"quickstart: unknown options \['bogus'\]"):
        fusebench.run("quickstart", objective="none", seeds=[0], out=tmp_path, progress=False,
                      overrides={**TINY, "dataset.options.bogus": 1})
    from fusebench import datasets

    for name in ("nyuv2", "sunrgbd", "mosi", "sleep_edf", "mv_handwritten"):  # checked before any file is read
        with pytest.raises(DatasetError, match=r"unknown option(s|\(s\)) \['bogus'\]"):
            datasets.build(name, root=str(tmp_path), split="train", bogus=1)
