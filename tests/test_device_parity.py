"""Device parity: at precision ``32`` a cell gives the committed CPU record's metrics on every device.

The references are the committed run records under ``leaderboards/runs/`` (made on a 2-core CPU):
the quickstart cells of seed 0 (every objective of its sweep, ``tuple_infonce`` with its disturbed
negatives, noise and dropout included) and two cells of the real multi-view board ``mv-ngs``
(read from ``../shared/fixtures/multiview``, with the hyper-parameters the record says were chosen).
Each cell is rerun from its record's configuration on the CPU and, where CUDA is available, on CUDA, and must give
the record's test metrics to 1e-4 (the 4th decimal) and its final pretraining loss to a relative 1e-3; a metric
whose code changed since the record (its version, or the downstream protocol's) is left out until the board is
re-run (the pretraining loss is still compared).

On a machine without CUDA (our CI) the CUDA half is skipped; run it on a GPU machine with
``pytest tests/test_device_parity.py`` (docs/gpu.md has the figures of the last such run).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from fusebench.components.identity import spec_hash
from fusebench import benchmarks
from fusebench.components import compat
from fusebench.sweep import runner
from fusebench.cells.execute import run_cell, sweep_context
from fusebench.spec.request import CellRequest, RunOptions
from fusebench import metrics as M
from fusebench.metrics import values_of
from fusebench.records.cell_file import record_versions
from fusebench.spec.config import spec_from_dict

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "leaderboards" / "runs"

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no CUDA device on this machine: the GPU half of the parity check "
                                          "runs on a GPU machine (pytest tests/test_device_parity.py)"))]
QUICKSTART = ["none", "infonce_pwe", "mv_dhel", "m3g", "tuple_infonce"]
MULTIVIEW = ["m3g", "infonce_pwe"]


def _rerun(benchmark: str, objective: str, device: str, out: Path, data_root: str | None) -> tuple[dict, dict]:
    committed = json.loads((RUNS / benchmark / objective / "seed0" / "run.json").read_text())
    # the committed run's own configuration (a board pending a rerun under a changed spec keeps its records)
    spec = spec_from_dict(committed["config"])
    runner.resolve_views(spec, False, data_root)
    assert spec_hash(spec, objective) == committed["config_hash"], "the record's config no longer hashes as the record"
    context = sweep_context(spec, False, data_root)
    if committed.get("hparam_selection"):  # the choice the sweep made on the validation split
        context["hparams"] = {objective: committed["hparam_selection"]["choice"]}
        context["hparam_selection"] = {objective: committed["hparam_selection"]}
    rec = run_cell(CellRequest(spec, objective, 0, out), RunOptions(data_root=data_root, device=device, progress=False), context)
    return committed, rec


def _check(committed: dict, rec: dict, device: str) -> None:
    assert rec["config_hash"] == committed["config_hash"] and rec["config"]["precision"] == "32"
    num = rec["numerics"]
    assert num["device_type"] == torch.device(device).type
    assert num["cuda_tf32_matmul"] is False and num["cuda_tf32_conv"] is False and num["autocast_dtype"] is None
    assert set(rec["metrics"]) == set(committed["metrics"])
    made, made_by = record_versions(committed)  # a metric whose code changed since the record computes otherwise now
    same_code = {m for m in committed["metrics"] if made_by.get(m, "1") == M.metadata(m)["version"]}
    if made.get("protocol", "1") != rec["versions"].get("protocol", "1"):  # the protocol scores every metric
        same_code = set()
    assert same_code or committed["curves"].get("pretrain_loss"), "nothing of the record is computed by the same code"
    for name, want in values_of(committed["metrics"]).items():
        if name in same_code:
            assert values_of(rec["metrics"])[name] == pytest.approx(want, abs=1e-4), name
    pre_ref, pre = committed["curves"].get("pretrain_loss"), rec["curves"].get("pretrain_loss")
    assert (pre_ref is None) == (pre is None)
    if pre_ref:
        assert len(pre) == len(pre_ref)
        assert pre[-1] == pytest.approx(pre_ref[-1], rel=1e-3)


@pytest.mark.slow  # five quickstart cells, ~30 s on one CPU thread
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("objective", QUICKSTART)
def test_quickstart_cell_gives_the_committed_cpu_record(objective: str, device: str, tmp_path: Path) -> None:
    committed, rec = _rerun("quickstart", objective, device, tmp_path, None)
    _check(committed, rec, device)


@pytest.mark.slow
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("objective", MULTIVIEW)
def test_multiview_cell_gives_the_committed_cpu_record(objective: str, device: str, tmp_path: Path,
                                                       fixtures_dir: Path) -> None:
    committed, rec = _rerun("mv-ngs", objective, device, tmp_path, str(fixtures_dir / "multiview"))
    _check(committed, rec, device)


TINY = {"dataset.synthetic_spec": {"num_samples": 128, "seed": 0}, "pretrain.epochs": 2, "pretrain.batch_size": 32,
        "downstream.epochs": 2, "downstream.batch_size": 64}


def _compatible() -> list[str]:
    return compat.compatible_objectives(benchmarks.load("quickstart", overrides=TINY))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine: every objective's "
                    "CPU-vs-CUDA cell runs on a GPU machine (the CPU halves above run everywhere)")
@pytest.mark.parametrize("objective", _compatible())
def test_every_objective_gives_the_cpu_numbers_on_cuda(objective: str, tmp_path: Path) -> None:
    """Every registered objective that fits the quickstart, in a tiny cell: CUDA = CPU."""
    spec = benchmarks.load("quickstart", overrides=TINY)
    cpu = run_cell(CellRequest(spec, objective, 0, tmp_path / "cpu"), RunOptions(device="cpu", progress=False))
    gpu = run_cell(CellRequest(spec, objective, 0, tmp_path / "cuda"), RunOptions(device="cuda", progress=False))
    for name, want in values_of(cpu["metrics"]).items():
        assert values_of(gpu["metrics"])[name] == pytest.approx(want, abs=1e-4), name
    assert gpu["curves"]["pretrain_loss"] == pytest.approx(cpu["curves"]["pretrain_loss"], rel=1e-3, abs=1e-5)
