"""Experiment trackers (``--logger csv tensorboard mlflow``): what they write, read back, and that a
run's results do not depend on them."""

from __future__ import annotations

import csv
import json
import re
import sys
import types
from pathlib import Path

import numpy as np
import pytest

import fusebench
from fusebench.engine import trackers
from fusebench.engine.trackers import TrackerError
from fusebench.cells.execute import run_cell
from fusebench.spec.request import CellRequest, RunOptions
from fusebench.metrics import values_of

TINY = {"dataset.synthetic_spec": {"num_samples": 128, "seed": 0}, "pretrain.epochs": 1, "pretrain.batch_size": 32,
        "downstream.epochs": 2}
EXTRA = "the trackers extra (pip install -e .[trackers])"


def _run(out: Path, loggers=None, **kw) -> dict:
    return fusebench.run("quickstart", objective=["infonce_pwe"], seeds=[0], out=out, overrides=TINY, progress=False,
                         loggers=loggers, **kw)[0]


def _cell(out: Path) -> Path:
    return out / "quickstart" / "infonce_pwe" / "seed0"


def _same_results(a: dict, b: dict) -> None:
    for key in ("metrics", "curves", "selection", "diagnostics", "config_hash", "parameters"):
        assert a[key] == b[key], key


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict:
    return _run(tmp_path_factory.mktemp("plain"))


def test_csv_and_tensorboard_read_back_and_results_unchanged(tmp_path: Path, reference: dict) -> None:
    pytest.importorskip("tensorboard", reason=f"tensorboard is not installed: {EXTRA}")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    rec = _run(tmp_path, ["csv", "tensorboard"])
    _same_results(rec, reference)  # bit-identical with and without loggers
    curves = rec["curves"]
    cell = _cell(tmp_path)
    assert rec == json.loads((cell / "run.json").read_text())

    # CSV: one loss row per training step, equal to run.json's curves; val rows per epoch; final rows
    with open(cell / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["phase", "step", "epoch", "name", "value"]
    for phase in ("pretrain", "downstream"):
        losses = [r for r in rows if r["phase"] == phase and r["name"] == "loss"]
        assert len(losses) == len(curves[f"{phase}_loss"]) > 0
        assert [float(r["value"]) for r in losses] == curves[f"{phase}_loss"]
        assert [int(r["step"]) for r in losses] == list(range(1, len(losses) + 1))
        speeds = [float(r["value"]) for r in rows if r["phase"] == phase and r["name"] == "samples_per_s"]
        assert len(speeds) == len(losses) and all(v > 0 for v in speeds)
    for name in ("val_acc", "val_bacc"):
        val = [r for r in rows if r["name"] == name]
        assert [float(r["value"]) for r in val] == curves[name]
        assert [int(r["epoch"]) for r in val] == list(range(TINY["downstream.epochs"]))
    final = {r["name"]: float(r["value"]) for r in rows if r["phase"] == "final"}
    assert final == {**{f"test/{k}": v for k, v in values_of(rec["metrics"]).items()},
                     **{f"val/{k}": v for k, v in rec["selection"]["val_metrics"].items()}}

    # TensorBoard: the same values (stored as float32) under <phase>/loss, downstream/val_*, test/*
    acc = EventAccumulator(str(cell / "tb"), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"pretrain/loss", "pretrain/samples_per_s", "downstream/loss", "downstream/samples_per_s",
            "downstream/val_acc", "test/acc", "test/bacc", "val/acc"} <= tags

    def values(tag: str) -> list[float]:
        return [e.value for e in acc.Scalars(tag)]

    def f32(xs: list[float]) -> list[float]:
        return [float(np.float32(x)) for x in xs]

    for phase in ("pretrain", "downstream"):
        assert values(f"{phase}/loss") == f32(curves[f"{phase}_loss"])
        assert [e.step for e in acc.Scalars(f"{phase}/loss")] == list(range(1, len(curves[f"{phase}_loss"]) + 1))
    assert values("downstream/val_acc") == f32(curves["val_acc"])
    assert values("test/acc") == f32([values_of(rec["metrics"])["acc"]])
    assert "config" in " ".join(acc.Tags().get("tensors", []))  # the resolved config as text


def test_docs_csv_pivot_example_gives_each_phase_its_own_rows(tmp_path: Path) -> None:
    """docs/trackers.md's pandas line, run on a cell's metrics.csv: each (phase, step) row holds that phase's loss
    of that step (run.json's curves), never a mean of the pretraining and downstream losses of one step number."""
    pd = pytest.importorskip("pandas")
    doc = (Path(__file__).resolve().parents[1] / "docs" / "trackers.md").read_text()
    expr = re.search(r"`(pandas\.read_csv\(path\)\.pivot_table\([^`]*\))`", doc).group(1)
    rec = _run(tmp_path, ["csv"])
    table = eval(expr, {"pandas": pd, "path": _cell(tmp_path) / "metrics.csv"})
    for phase in ("pretrain", "downstream"):
        losses = rec["curves"][f"{phase}_loss"]
        assert [table.loc[(phase, float(i + 1)), "loss"] for i in range(len(losses))] == losses


def test_mlflow_file_store(tmp_path: Path, reference: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("mlflow", reason=f"mlflow is not installed: {EXTRA}")
    import mlflow
    from mlflow.tracking import MlflowClient

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow >= 3 asks for it to open a file: store
    uri = (tmp_path / "mlruns").as_uri()
    rec = _run(tmp_path / "runs", ["mlflow"], mlflow_uri=uri)
    _same_results(rec, reference)
    mlflow.set_tracking_uri(uri)
    try:
        df = mlflow.search_runs(experiment_names=["quickstart"])
    finally:
        mlflow.set_tracking_uri(None)
    assert len(df) == 1
    run = df.iloc[0]
    assert run["tags.mlflow.runName"] == "infonce_pwe/seed0" and run["status"] == "FINISHED"
    assert run["params.pretrain.epochs"] == "1" and run["params.name"] == "quickstart"
    assert json.loads(run["params.dataset.synthetic_spec.num_samples"]) == 128
    for k, v in values_of(rec["metrics"]).items():
        assert run[f"metrics.test/{k}"] == v
    client = MlflowClient(tracking_uri=uri)
    history = client.get_metric_history(run["run_id"], "pretrain/loss")
    assert [m.value for m in sorted(history, key=lambda m: m.step)] == rec["curves"]["pretrain_loss"]
    assert [m.value for m in client.get_metric_history(run["run_id"], "downstream/val_acc")] == rec["curves"]["val_acc"]
    artifact = Path(run["artifact_uri"].removeprefix("file://")) / "run.json"
    assert json.loads(artifact.read_text()) == rec


def test_mlflow_default_uri_is_hidden_under_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert trackers.default_mlflow_uri(tmp_path) == (tmp_path.resolve() / ".mlruns").as_uri()
    assert trackers.default_mlflow_uri(tmp_path, "sqlite:///x.db") == "sqlite:///x.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://localhost:5000")
    assert trackers.default_mlflow_uri(tmp_path) == "http://localhost:5000"


def test_mlflow_params_are_flattened_and_bounded() -> None:
    params, skipped = trackers.mlflow_params({"pretrain": {"epochs": 1, "grid": {}}, "a b!": "x" * 7000,
                                              "k" * 300: 1, "metrics": ["acc", "bacc"]})
    assert params["pretrain.epochs"] == "1" and params["pretrain.grid"] == "{}"
    assert params["metrics"] == '["acc", "bacc"]'
    assert len(params["a b_"]) == 6000 and params["a b_"].endswith("...")
    assert skipped == ["k" * 300]


def test_unknown_logger_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(TrackerError, match=r"unknown logger\(s\) 'wandb'; valid: csv, mlflow, tensorboard"):
        _run(tmp_path, ["csv", "wandb"])
    assert not (tmp_path / "quickstart").exists()  # refused before any training


def test_trackers_are_a_registry_with_an_entry_point_group(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from importlib import metadata as md

    from fusebench import registry as R

    assert isinstance(trackers.TRACKERS, R.Registry) and trackers.TRACKERS.entry_point_group == "fusebench.trackers"
    assert trackers.TRACKERS.meta("mlflow")["requires"] == "mlflow" and "requires" not in trackers.TRACKERS.meta("csv")
    with pytest.raises(R.DuplicateIdError, match="tracker id 'csv' is registered twice"):
        trackers.TRACKERS.register("csv")(lambda cell, out, mlflow_uri: trackers.CsvTracker(cell))

    class Mine(trackers.Tracker):
        def __init__(self, cell: Path, out: Path, uri: str | None) -> None:
            self.where = (cell, out, uri)

    plugin = types.ModuleType("fb_fake_tracker")
    plugin.Mine = Mine
    monkeypatch.setitem(sys.modules, "fb_fake_tracker", plugin)
    for attr in ("_entries", "_meta", "_lazy", "_origin"):  # read the plugins again, restored afterwards
        monkeypatch.setattr(trackers.TRACKERS, attr, dict(getattr(trackers.TRACKERS, attr)))
    monkeypatch.setattr(trackers.TRACKERS, "_plugins_loaded", False)
    eps = [md.EntryPoint("mine", "fb_fake_tracker:Mine", "fusebench.trackers")]
    monkeypatch.setattr(R, "entry_points", lambda group: [e for e in eps if e.group == group])
    assert trackers.check_trackers(["mine", "csv", "mine"]) == ["mine", "csv"]
    built = trackers.build_trackers(["mine"], tmp_path, tmp_path / "c", "sqlite:///x.db")
    assert [type(t) for t in built.trackers] == [Mine] and built.trackers[0].where == (tmp_path / "c", tmp_path, "sqlite:///x.db")
    with pytest.raises(TrackerError, match=r"unknown logger\(s\) 'wandb'; valid: csv, mine, mlflow, tensorboard"):
        trackers.check_trackers(["wandb"])


def test_missing_package_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "mlflow", None)  # import mlflow -> ImportError
    with pytest.raises(TrackerError, match=r"pip install -e \.\[trackers\]"):
        _run(tmp_path, ["mlflow"])
    assert not (tmp_path / "quickstart").exists()


def test_no_logger_imports_nothing_optional() -> None:
    import subprocess

    code = ("import sys, fusebench\nfrom fusebench.sweep import runner\nfrom fusebench.cli import run as cli\nfrom fusebench.engine import trackers\n"
            "t = trackers.build_trackers(None, 'runs', 'runs/c')\n"
            "assert not t and not any(m.split('.')[0] in ('mlflow', 'tensorboard') for m in sys.modules), 'imported'\n"
            "assert 'torch.utils.tensorboard' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_resumed_run_appends_to_its_csv(tmp_path: Path, reference: dict) -> None:
    from fusebench import benchmarks
    from fusebench.sweep import runner

    spec = benchmarks.load("quickstart", overrides=TINY)
    with pytest.raises(KeyboardInterrupt):
        run_cell(CellRequest(spec, "infonce_pwe", 0, tmp_path), RunOptions(progress=False, max_steps=2, loggers=["csv"]))
    rec = run_cell(CellRequest(spec, "infonce_pwe", 0, tmp_path), RunOptions(progress=False, resume=True, loggers=["csv"]))
    with open(_cell(tmp_path) / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))  # one header: the resumed run appended
    assert [float(r["value"]) for r in rows if r["phase"] == "pretrain" and r["name"] == "loss"] == \
        rec["curves"]["pretrain_loss"] == reference["curves"]["pretrain_loss"]


def test_cli_logger_option(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from fusebench.cli import run as cli

    with pytest.raises(SystemExit) as e:
        cli.main(["quickstart", "--logger", "wandb"])
    assert e.value.code == 2 and "invalid choice: 'wandb'" in capsys.readouterr().err
    sets = [a for k, v in TINY.items() for a in ("--set", f"{k}={json.dumps(v)}")]
    argv = ["quickstart", "--objective", "infonce_pwe", "--seeds", "0", "--out", str(tmp_path), "--no-progress",
            "--logger", "csv", *sets]
    assert cli.main(argv) == 0
    assert (_cell(tmp_path) / "metrics.csv").is_file() and not (_cell(tmp_path) / "tb").exists()
