"""The runner: resume after a real kill, corrupt checkpoints, NaN losses, immutable records, sweeps."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import fusebench
from fusebench import benchmarks
from fusebench.engine.loop import RunError
from fusebench.records.cell_file import write_record
from fusebench.engine.data import few_shot_subset
from fusebench.cells.execute import run_cell
from fusebench.spec.request import CellRequest, RunOptions
import fusebench.cells.head_protocol as head_protocol

TINY = {
    "dataset.synthetic_spec": {"num_samples": 128, "seed": 0},
    "pretrain.epochs": 6,
    "pretrain.batch_size": 32,
    "downstream.epochs": 3,
    "downstream.batch_size": 64,
    "checkpoint_every": 1,
}
#: TINY for runs of reference rows only: they read no pretrain.* setting, and one given to them is refused
TINY_REF = {k: v for k, v in TINY.items() if not k.startswith("pretrain.")}


def _cli_set(overrides: dict) -> list[str]:
    out = []
    for k, v in overrides.items():
        out += ["--set", f"{k}={json.dumps(v)}"]
    return out


def _metrics(out: Path, objective: str, seed: int = 0) -> dict:
    rec = json.loads((out / "quickstart" / objective / f"seed{seed}" / "run.json").read_text())
    return rec


@pytest.mark.slow  # ~6 s with one thread
def test_resume_after_kill_matches_uninterrupted(tmp_path: Path) -> None:
    ref = fusebench.run("quickstart", objective="infonce_pwe", seeds=[0], out=tmp_path / "a", overrides=TINY,
                        progress=False)[0]
    out = tmp_path / "b"
    cmd = [sys.executable, "-m", "fusebench", "run", "quickstart", "--objective", "infonce_pwe", "--seeds", "0",
           "--out", str(out), "--no-progress", *_cli_set(TINY)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    last = out / "quickstart" / "infonce_pwe" / "seed0" / "last.pt"
    deadline = time.time() + 240
    while not last.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    killed = proc.poll() is None
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert killed, "the run finished before it could be killed"
    assert not (out / "quickstart" / "infonce_pwe" / "seed0" / "run.json").exists()
    resumed = fusebench.run("quickstart", objective="infonce_pwe", seeds=[0], out=out, overrides=TINY,
                            resume=True, progress=False)[0]
    assert resumed["metrics"] == ref["metrics"]
    assert resumed["curves"]["pretrain_loss"] == pytest.approx(ref["curves"]["pretrain_loss"], rel=1e-6)
    assert resumed["curves"]["val_acc"] == ref["curves"]["val_acc"]


def test_resume_from_simulated_kill_in_downstream(tmp_path: Path) -> None:
    spec = benchmarks.load("quickstart", overrides=TINY)
    ref = run_cell(CellRequest(spec, "mv_dhel", 0, tmp_path / "a"), RunOptions(progress=False))
    pre_steps = len(ref["curves"]["pretrain_loss"])
    with pytest.raises(KeyboardInterrupt):  # stop two steps into the downstream phase
        run_cell(CellRequest(spec, "mv_dhel", 0, tmp_path / "b"), RunOptions(progress=False, max_steps=pre_steps + 2))
    ckpt = torch.load(tmp_path / "b" / "quickstart" / "mv_dhel" / "seed0" / "last.pt", weights_only=True)
    assert ckpt["phase"] == "downstream" and ckpt["step"] == 2
    resumed = run_cell(CellRequest(spec, "mv_dhel", 0, tmp_path / "b"), RunOptions(resume=True, progress=False))
    assert resumed["metrics"] == ref["metrics"]
    assert resumed["diagnostics"] == pytest.approx(ref["diagnostics"])


def test_corrupt_checkpoint_is_reported_and_left_intact(tmp_path: Path) -> None:
    cell = tmp_path / "quickstart" / "infonce_pwe" / "seed0"
    cell.mkdir(parents=True)
    (cell / "last.pt").write_bytes(b"not a checkpoint")
    spec = benchmarks.load("quickstart", overrides=TINY)
    with pytest.raises(RunError, match="last.pt is unreadable"):
        run_cell(CellRequest(spec, "infonce_pwe", 0, tmp_path), RunOptions(resume=True, progress=False))
    assert (cell / "last.pt").read_bytes() == b"not a checkpoint"


def test_nan_loss_stops_with_step_and_objective(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fusebench.engine import pretrain

    calls = {"n": 0}
    real = pretrain.Pretrainer.forward

    def sometimes_nan(self, batch, gather=None):
        calls["n"] += 1
        loss = real(self, batch, gather)
        return loss * float("nan") if calls["n"] == 3 else loss

    monkeypatch.setattr(pretrain.Pretrainer, "forward", sometimes_nan)
    spec = benchmarks.load("quickstart", overrides=TINY)
    with pytest.raises(RunError, match=r"objective 'm3g' is nan at pretraining step 3"):
        run_cell(CellRequest(spec, "m3g", 0, tmp_path), RunOptions(progress=False))
    assert (tmp_path / "quickstart" / "m3g" / "seed0" / "last.pt").exists()


def test_records_are_immutable_and_sweeps_skip_finished_cells(tmp_path: Path) -> None:
    recs = fusebench.run("quickstart", objective=["none"], seeds=[0], out=tmp_path, overrides=TINY_REF, progress=False)
    path = tmp_path / "quickstart" / "none" / "seed0" / "run.json"
    before = path.read_bytes()
    with pytest.raises(RunError, match="immutable"):
        write_record(path.parent, {"x": 1})
    again = fusebench.run("quickstart", objective=["none"], seeds=[0], out=tmp_path, overrides=TINY_REF, progress=False)
    assert again == recs and path.read_bytes() == before
    rec = recs[0]
    for key in ("suite_version", "git", "seed", "config", "config_hash", "dataset", "device", "determinism",
                "curves", "metrics", "selection", "wall_time_s", "peak_memory_mb", "parameters", "diagnostics"):
        assert key in rec, key
    for key in ("seeds", "precision", "protocol"):  # each value once (schema 3): seed, config.precision / notes
        assert key not in rec, key
    assert rec["dataset"]["manifest_hash"] == "synthetic"
    assert set(rec["diagnostics"]) == {"alignment", "uniformity", "effective_rank"}
    assert not list(path.parent.glob(".run.json*"))


def test_a_sweep_says_which_cells_it_skipped(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A rerun into the same --out says, before anything else, how many cells it did not run (issue #23)."""
    fusebench.run("quickstart", objective=["none"], seeds=[0], out=tmp_path, overrides=TINY_REF, progress=True)
    assert "already have run.json" not in capsys.readouterr().err
    fusebench.run("quickstart", objective=["none"], seeds=[0, 1], out=tmp_path, overrides=TINY_REF, progress=True)
    err = capsys.readouterr().err
    line = f"1 of 2 cell(s) of quickstart already have run.json under {tmp_path}: skipped, their records reused"
    assert line in err
    assert err.index(line) < err.index("start quickstart/none/seed1")  # said before the cell that does run


def test_failed_cell_is_recorded_and_sweep_goes_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fusebench.engine import pretrain

    def boom(self, batch, gather=None):
        raise RuntimeError("boom")

    monkeypatch.setattr(pretrain.Pretrainer, "forward", boom)
    recs = fusebench.run("quickstart", objective=["m3g", "none"], seeds=[0], out=tmp_path, overrides=TINY,
                         progress=False)
    assert recs[0]["status"] == "failed" and "boom" in recs[0]["error"]
    assert (tmp_path / "quickstart" / "m3g" / "seed0" / "failed.json").exists()
    assert "metrics" in recs[1]


def test_incompatible_objective_fails_before_training(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="matching_gap.*k = 3"):
        fusebench.run("quickstart", objective="matching_gap", out=tmp_path, overrides=TINY, progress=False)
    assert not any(tmp_path.iterdir())


def test_unknown_names_list_the_valid_ones(tmp_path: Path) -> None:
    with pytest.raises(KeyError, match="Did you mean 'quickstart'"):
        fusebench.run("quickstrat", out=tmp_path)
    with pytest.raises(KeyError, match="Did you mean 'infonce_pwe'.*Valid objective ids"):
        fusebench.run("quickstart", objective="infonce_pw", out=tmp_path)


def test_cell_names_that_are_not_ids_are_refused_before_any_output(tmp_path: Path) -> None:
    from fusebench.spec.config import ConfigError
    from fusebench.spec.request import cell_dir

    # objectives are looked up case-insensitively: 'INFONCE_PWE' used to train the cell, then fail at run.json
    with pytest.raises(ConfigError, match=r"objective 'INFONCE_PWE' is not an id.*did you mean 'infonce_pwe'"):
        fusebench.run("quickstart", objective="INFONCE_PWE", out=tmp_path, overrides=TINY, progress=False)
    assert not any(tmp_path.iterdir())
    for bench, obj in (("quickstart", "../x"), ("quickstart", "/"), ("../x", "m3g"), ("", "m3g"), ("quickstart", ".")):
        with pytest.raises(ConfigError, match="is not an id"):
            cell_dir(tmp_path, bench, obj, 0)
    assert cell_dir(tmp_path, "quickstart", "m3g", 2) == tmp_path / "quickstart" / "m3g" / "seed2"


def test_few_shot_subset_takes_s_per_class(tmp_path: Path) -> None:
    from fusebench import datasets

    ds = datasets.build("quickstart", synthetic=True, synthetic_spec={"num_samples": 64, "seed": 0}, use_cache=False)
    labels = [int(ds[i]["target"]) for i in range(len(ds))]
    sub = few_shot_subset(ds, 3, seed=0)
    got = [int(sub[i]["target"]) for i in range(len(sub))]
    assert sorted(got) == sorted([c for c in set(labels) for _ in range(min(3, labels.count(c)))])
    assert sub.indices == few_shot_subset(ds, 3, seed=0).indices
    assert sub.indices != few_shot_subset(ds, 3, seed=1).indices
    rec = fusebench.run("quickstart", objective="none", seeds=[0], out=tmp_path,
                        overrides={**TINY_REF, "downstream.shots": 2}, progress=False)[0]
    assert rec["config"]["downstream"]["shots"] == 2 and "acc" in rec["metrics"]


def test_set_overrides_parse_yaml_values_and_keep_text() -> None:
    from fusebench.spec.config import ConfigError, parse_override

    assert parse_override("pretrain.epochs=3") == ("pretrain.epochs", 3)
    assert parse_override("pretrain.ema_teacher=true") == ("pretrain.ema_teacher", True)
    assert parse_override("dataset.synthetic_spec={num_samples: 8}") == ("dataset.synthetic_spec", {"num_samples": 8})
    assert parse_override("seeds=[0, 1]") == ("seeds", [0, 1])
    assert parse_override("protocol_notes.x=K = 256 (paper: 1024)") == ("protocol_notes.x", "K = 256 (paper: 1024)")
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        parse_override("pretrain.epochs")
    with pytest.raises(ConfigError, match="not valid YAML"):
        parse_override("seeds=[0, 1")


def test_real_data_path_records_the_prepared_cache(tmp_path: Path) -> None:
    """A run on data given by --data-root (here the Sleep-EDF twin written in the official EDF format)
    reads the prepared cache and records its manifest hash, not 'synthetic'."""
    from fusebench import datasets
    from fusebench.datasets import cache
    from fusebench.datasets.base import SyntheticSpec

    root = tmp_path / "sleep-edf"
    root.mkdir()
    cls = datasets.get("sleep_edf")
    cls.write_synthetic(root, SyntheticSpec(num_samples=40, seed=0, options={"n_subjects": 5}))
    opts = dict(benchmarks.load("sleep-edf-staging").dataset.options, sfreq_hz=50.0)
    hashes = {}
    for split in ("train", "val", "test"):
        ds = datasets.build("sleep_edf", root=root, split=split, use_cache=False, **opts)
        folder = cache.prepare(ds, progress=False)
        hashes[split] = cache.CacheReader(folder).manifest_hash
    over = {"dataset.options.sfreq_hz": 50.0, "encoder.config": {"size": "tiny", "dropout": 0.0},
            "pretrain.epochs": 1, "pretrain.batch_size": 4, "downstream.epochs": 1, "downstream.batch_size": 8}
    rec = fusebench.run("sleep-edf-staging", objective="infonce_pwe", seeds=[0], out=tmp_path / "runs",
                        data_root=str(root), overrides=over, progress=False)[0]
    assert rec["dataset"]["synthetic"] is False
    assert rec["dataset"]["manifest_hash"] == hashes["train"]
    assert rec["dataset"]["manifest_hashes"] == hashes
    assert "acc" in rec["metrics"]


def _spy(monkeypatch: pytest.MonkeyPatch, metric: str, val_sequence: list[float]) -> list[dict]:
    """Wrap head_protocol.evaluate: the first dataset it sees is the validation split (scored at every epoch's end);
    its ``metric`` is replaced by ``val_sequence[epoch]``. Every call is logged with a copy of the weights."""
    real = head_protocol.evaluate
    calls: list[dict] = []
    state = {"val": None, "epoch": 0}

    def spy(model, ds, spec, device, seed):
        out = dict(real(model, ds, spec, device, seed))
        if state["val"] is None:
            state["val"] = ds
        is_val = ds is state["val"]
        if is_val:
            out[metric] = val_sequence[state["epoch"]]
            state["epoch"] += 1
        calls.append({"val": is_val, "weights": {k: v.detach().clone() for k, v in model.state_dict().items()},
                      "out": out})
        return out

    monkeypatch.setattr(head_protocol, "evaluate", spy)
    return calls


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("bench,objective,metric,vals,best", [
    # higher is better (acc): epoch 1 is the best; the last epoch (2) is not
    ("quickstart", "none", "acc", [0.50, 0.90, 0.70], 1),
    # lower is better (mae): epoch 1 is the best (smallest); the largest is epoch 0
    ("mosi-sentiment", "none", "mae", [0.90, 0.40, 0.70], 1),
    # a tie of the best value keeps the earlier epoch (docs/benchmarks.md, "on a tie the earliest epoch")
    ("quickstart", "none", "acc", [0.50, 0.90, 0.90], 1),
])
def test_the_head_protocol_keeps_the_best_validation_epoch_and_scores_test_with_it(
        bench, objective, metric, vals, best, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    overrides = {"downstream.epochs": len(vals), "checkpoint_every": 1}
    if bench == "quickstart":
        overrides.update({"dataset.synthetic_spec": {"num_samples": 128, "seed": 0}, "downstream.batch_size": 64})
    spec = benchmarks.load(bench, overrides=overrides, synthetic=True)  # the synthetic run's tiny sizes
    assert spec.validation_metric == metric
    calls = _spy(monkeypatch, metric, vals)
    rec = run_cell(CellRequest(spec, objective, 0, tmp_path), RunOptions(progress=False, synthetic=True))
    val_calls = [c for c in calls if c["val"]]
    test_calls = [c for c in calls if not c["val"]]
    assert len(val_calls) == len(vals) and len(test_calls) == 1  # the test split is scored once
    assert rec["selection"]["best_epoch"] == best
    assert rec["selection"]["val_metrics"][metric] == vals[best]
    # the weights scored on test are the weights of the chosen epoch, not the last one
    assert not _same(val_calls[best]["weights"], val_calls[-1]["weights"])  # precondition: training moved them
    assert _same(test_calls[0]["weights"], val_calls[best]["weights"])
