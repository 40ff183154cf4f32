"""Hardening of the runner (third round): records and checkpoints are reused only for the same data,
a resumed cell reports the time of all its segments, and bad devices, component ids, objective
values, --out folders and a scheduler that cannot take jobs are one clear line before any work."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.io

import fusebench
from fusebench import benchmarks
from fusebench.components.identity import spec_hash
from fusebench.sweep import runner
from fusebench.spec.config import ConfigError
from fusebench.cells.execute import run_cell
from fusebench.engine.loop import RunError
from fusebench.spec.request import CellRequest, RunOptions
from fusebench.engine.cell import ConfigMismatchError, check_checkpoint_config

FAST = {"pretrain.epochs": 1, "pretrain.grid": {}, "options.embedding_eval": {"l2_grid": [1.0], "cluster_on": "all",
                                                                               "n_init": 2}}
TINY = {"dataset.synthetic_spec": {"num_samples": 128, "seed": 0}, "pretrain.epochs": 3, "pretrain.batch_size": 32,
        "downstream.epochs": 2, "downstream.batch_size": 64, "checkpoint_every": 1}
#: FAST and TINY for runs of reference rows only: they read no pretrain.* setting, and one given to them is refused
FAST_REF, TINY_REF = ({k: v for k, v in d.items() if not k.startswith("pretrain.")} for d in (FAST, TINY))


@pytest.fixture(scope="module")
def two_files(tmp_path_factory, fixtures_dir: Path) -> tuple[Path, Path]:
    """The real NGs.mat, and a copy of the same shapes whose labels are permuted (other data)."""
    folder = tmp_path_factory.mktemp("mats")
    a = folder / "a" / "NGs.mat"
    a.parent.mkdir()
    shutil.copyfile(fixtures_dir / "multiview" / "NGs.mat", a)
    raw = scipy.io.loadmat(a)
    y = raw["Y"].copy()
    np.random.default_rng(0).shuffle(y)
    b = folder / "b" / "NGs.mat"
    b.parent.mkdir()
    scipy.io.savemat(b, {"X": raw["X"], "Y": y})
    return a, b


def _cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fusebench", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=600)


def test_a_rerun_on_other_data_does_not_reuse_the_record(two_files, tmp_path: Path) -> None:
    a, b = two_files
    first = fusebench.run("multiview", objective="none", seeds=[0], out=tmp_path, data_root=str(a), overrides=FAST_REF,
                          progress=False)[0]
    assert first["dataset"]["fingerprint"]["sha256"]
    with pytest.raises(ConfigMismatchError, match=r"run.json was made from other data \(fingerprint [0-9a-f]{64} of "):
        fusebench.run("multiview", objective="none", seeds=[0], out=tmp_path, data_root=str(b), overrides=FAST_REF,
                      progress=False)
    again = fusebench.run("multiview", objective="none", seeds=[0], out=tmp_path, data_root=str(a), overrides=FAST_REF,
                          progress=False)[0]  # the same file: the record is reused
    assert again == first
    proc = _cli("run", "multiview", "--objective", "none", "--seeds", "0", "--out", str(tmp_path), "--data-root", str(b),
                *[x for k, v in FAST_REF.items() for x in ("--set", f"{k}={json.dumps(v)}")])
    assert proc.returncode == 2 and "was made from other data" in proc.stderr and "Traceback" not in proc.stderr


def test_resume_and_selection_trials_on_other_data_are_refused(two_files, tmp_path: Path) -> None:
    a, b = two_files
    spec = benchmarks.load("multiview", overrides=FAST)
    runner.resolve_views(spec, False, str(a))
    with pytest.raises(KeyboardInterrupt):  # a killed pretraining: last.pt holds the data's fingerprint
        run_cell(CellRequest(spec, "infonce_pwe", 0, tmp_path), RunOptions(data_root=str(a), progress=False, max_steps=1))
    ckpt_path = tmp_path / "multiview" / "infonce_pwe" / "seed0" / "last.pt"
    with pytest.raises(ConfigMismatchError, match="cannot resume .*last.pt: it was written while reading other data"):
        run_cell(CellRequest(spec, "infonce_pwe", 0, tmp_path), RunOptions(data_root=str(b), resume=True, progress=False))
    assert ckpt_path.exists()  # kept: nothing is thrown away

    grid = {**FAST, "pretrain.grid": {"infonce_pwe": {"tau": [0.1, 0.5]}}}
    out = tmp_path / "sel"
    fusebench.run("multiview", objective="infonce_pwe", seeds=[0], out=out, data_root=str(a), overrides=grid,
                  progress=False)
    shutil.rmtree(out / "multiview")  # the cell goes; the selection trials' records stay
    with pytest.raises(ConfigMismatchError, match=r"\.selection/multiview/infonce_pwe/trial0-tau0.1/.*made from other data"):
        fusebench.run("multiview", objective="infonce_pwe", seeds=[0], out=out, data_root=str(b), overrides=grid,
                      progress=False)


def test_a_resumed_cell_records_its_segments_and_their_sum(tmp_path: Path) -> None:
    spec = benchmarks.load("quickstart", overrides=TINY)
    ref = run_cell(CellRequest(spec, "infonce_pwe", 0, tmp_path / "a"), RunOptions(progress=False))
    assert ref["resumed"] is False and len(ref["time_segments_s"]["pretrain"]) == 1
    assert ref["pretrain_time_s"] == ref["time_segments_s"]["pretrain"][0]
    with pytest.raises(KeyboardInterrupt):  # killed after 5 pretraining steps (checkpoint every step)
        run_cell(CellRequest(spec, "infonce_pwe", 0, tmp_path / "b"), RunOptions(progress=False, max_steps=5))
    rec = run_cell(CellRequest(spec, "infonce_pwe", 0, tmp_path / "b"), RunOptions(resume=True, progress=False))
    seg = rec["time_segments_s"]
    assert rec["resumed"] is True and rec["metrics"] == ref["metrics"]
    assert len(seg["pretrain"]) == 2 and len(seg["wall"]) == 2 and all(t > 0 for t in seg["pretrain"] + seg["wall"])
    assert rec["pretrain_time_s"] == pytest.approx(sum(seg["pretrain"]), rel=1e-12)
    assert rec["wall_time_s"] == pytest.approx(sum(seg["wall"]), rel=1e-12)
    assert rec["pretrain_time_s"] > seg["pretrain"][-1]  # not the last process's time alone

    # killed in the downstream phase: the pretraining segments travel through the checkpoint
    pre_steps = len(ref["curves"]["pretrain_loss"])
    with pytest.raises(KeyboardInterrupt):
        run_cell(CellRequest(spec, "infonce_pwe", 0, tmp_path / "c"), RunOptions(progress=False, max_steps=pre_steps + 1))
    rec = run_cell(CellRequest(spec, "infonce_pwe", 0, tmp_path / "c"), RunOptions(resume=True, progress=False))
    assert rec["resumed"] is True and len(rec["time_segments_s"]["pretrain"]) == 1
    assert len(rec["time_segments_s"]["wall"]) == 2 and rec["metrics"] == ref["metrics"]


@pytest.mark.parametrize("overrides, kwargs, message", [
    ({}, {"device": "tpu"}, r"--device 'tpu': expected auto, cpu, cuda, cuda:N or mps"),
    ({}, {"device": "cuda:7"}, r"--device cuda:7: (CUDA is not available|this machine has \d+ CUDA device)"),
    ({"encoder.id": "nosuch"}, {}, r"quickstart: encoder.id: unknown encoder 'nosuch'. Valid encoder ids: .*mlp"),
    ({"pretrain.hparams": {"m3g": {"eps": -1}}}, {},
     r"pretrain.per_objective.m3g.hparams: objective 'm3g' refuses \{'eps': -1\}: m3g: eps must be a finite number > 0"),
    ({"pretrain.grid": {"m3g": {"eps": [0.1, -2.0]}}}, {},
     r"pretrain.per_objective.m3g.hparams / pretrain.per_objective.m3g.grid \{'eps': -2.0\}: objective 'm3g' refuses"),
])
def test_bad_devices_and_component_values_stop_before_any_cell(overrides, kwargs, message, tmp_path: Path) -> None:
    with pytest.raises((ConfigError, ValueError), match=message):
        fusebench.run("quickstart", objective=["m3g", "none"], seeds=[0, 1], out=tmp_path / "out",
                      overrides={**TINY, **overrides}, progress=False, **kwargs)
    assert not (tmp_path / "out").exists()  # no folder, no failed.json: nothing was started


def test_out_that_cannot_be_a_folder_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    for out, says in ((tmp_path / "file", "exists and is not a folder"),
                      (tmp_path / "file" / "sub", "cannot create the folder"),
                      (Path("/proc/fusebench-x"), "cannot create the folder")):
        proc = _cli("run", "quickstart", "--objective", "none", "--seeds", "0", "--out", str(out))
        assert proc.returncode == 2, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"fusebench run: --out {out}: {says}"), proc.stderr


def test_a_scheduler_that_refuses_the_jobs_is_one_line(tmp_path: Path) -> None:
    pytest.importorskip("submitit", reason="submitit is not installed (pip install -e .[slurm])")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in (("sbatch", 'echo "sbatch: error: Batch job submission failed: Unable to contact slurm controller '
                                  '(connect failure)" >&2; exit 1'),
                       ("squeue", 'echo "slurm_load_jobs error: Unable to contact slurm controller" >&2; exit 1'),
                       ("srun", "exit 1"), ("sinfo", "exit 1"), ("scontrol", "exit 1")):
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    proc = _cli("run", "quickstart", "--objective", "none", "--seeds", "0", "--out", str(tmp_path / "out"),
                "--launcher", "slurm", *[x for k, v in TINY_REF.items() for x in ("--set", f"{k}={json.dumps(v)}")],
                env={"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"})
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    line = [x for x in proc.stderr.splitlines() if x.startswith("fusebench run:")]
    assert len(line) == 1 and "--launcher slurm: the 1 job(s) could not be submitted" in line[0]
    assert "Unable to contact slurm controller" in line[0] and "scontrol ping" in line[0]
    # "nothing was submitted": no pickled call or job script of the refused jobs is left in --out
    assert not (tmp_path / "out" / ".submitit").exists(), sorted((tmp_path / "out").rglob("*"))


@pytest.fixture
def tiny_tmpfs(tmp_path):
    """A real 48 KiB tmpfs: room for a cell's folders and lock, not for a 60 KB checkpoint (needs root
    and mount permission; skipped otherwise). Unmounted afterwards."""
    where = tmp_path / "full"
    where.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48k", "tmpfs", str(where)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"mount -t tmpfs is not permitted here: {r.stderr.strip()}")
    yield where
    subprocess.run(["umount", str(where)], capture_output=True)


def test_a_full_disk_while_checkpointing_is_one_line_and_leaves_nothing_half_written(tiny_tmpfs: Path) -> None:
    proc = _cli("run", "quickstart", "--objective", "infonce_pwe", "--seeds", "0", "--out", str(tiny_tmpfs),
                "--no-progress", *[x for k, v in TINY.items() for x in ("--set", f"{k}={json.dumps(v)}")])
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr and "enforce fail" not in proc.stderr
    cell = tiny_tmpfs / "quickstart" / "infonce_pwe" / "seed0"
    assert (f"FAILED quickstart/infonce_pwe/seed0: OSError: [Errno 28] cannot write {cell / 'last.pt'}: no space left "
            "on device (the partial file was removed") in proc.stderr
    assert not [p.name for p in cell.iterdir() if p.name.startswith(".last.pt")]  # no partial checkpoint
    assert not (cell / "last.pt").exists() and not (cell / "run.json").exists()


def test_run_applies_the_leaderboards_rule_of_what_is_a_record(tmp_path: Path) -> None:
    """A symlinked cell folder or a run.json that is a folder: `run` refuses it like `leaderboard` and
    `status` do (fusebench.records.check_record_file), instead of reusing or overwriting it."""
    kw = dict(objective="none", seeds=[0], overrides={**TINY_REF, "downstream.epochs": 1}, progress=False)
    fusebench.run("quickstart", out=tmp_path / "elsewhere", **kw)
    out = tmp_path / "runs"
    (out / "quickstart" / "none").mkdir(parents=True)
    (out / "quickstart" / "none" / "seed0").symlink_to(tmp_path / "elsewhere" / "quickstart" / "none" / "seed0")
    with pytest.raises(RunError, match=r"seed0: field '\(folder\)': expected a folder, found a symbolic link"):
        fusebench.run("quickstart", out=out, **kw)
    out2 = tmp_path / "runs2"
    (out2 / "quickstart" / "none" / "seed0" / "run.json").mkdir(parents=True)
    with pytest.raises(RunError, match=r"run.json: field '\(file\)': expected a regular file, found a folder"):
        fusebench.run("quickstart", out=out2, **kw)


def test_resume_on_another_data_folder_is_refused(tmp_path) -> None:
    spec = benchmarks.load("quickstart")
    # what check_checkpoint_config reads of a checkpoint (load_checkpoint checked the rest of its structure)
    ckpt = {"config_hash": spec_hash(spec, "infonce_pwe"), "data_fingerprint": "a" * 64, "phase": "pretrain",
            "epoch": 0}
    same = {"fingerprint": {"sha256": "a" * 64}}
    other = {"fingerprint": {"sha256": "b" * 64}}  # no "data_file": the sweep reads a folder
    assert check_checkpoint_config(tmp_path / "last.pt", ckpt, spec, "infonce_pwe", same) is ckpt
    with pytest.raises(ConfigMismatchError, match=r"last.pt: it was written while reading other data \(fingerprint "
                                                  r"a{64}, now b{64}\)"):
        check_checkpoint_config(tmp_path / "last.pt", ckpt, spec, "infonce_pwe", other)
    with pytest.raises(ConfigMismatchError, match="now none \\(synthetic data\\)"):
        check_checkpoint_config(tmp_path / "last.pt", ckpt, spec, "infonce_pwe", {"fingerprint": None})
