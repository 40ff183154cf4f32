"""The precision policy (fusebench/spec/precision.py): names, spec and CLI, hashing and the
comparability key, what a record says, what a board shows, and runs under each policy on the CPU."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

import fusebench
from fusebench.components.identity import config_hash, spec_hash
from fusebench import benchmarks
from fusebench.records import comparability_key, validate_record, RecordError
from fusebench.metrics import values_of
from fusebench.records.schema import REPEATED_FIELDS
from fusebench.spec import precision
from fusebench.spec.config import ConfigError
from fusebench.cells.execute import run_cell
from fusebench.spec.request import CellRequest, RunOptions

TINY = {
    "dataset.synthetic_spec": {"num_samples": 128, "seed": 0},
    "pretrain.epochs": 2,
    "pretrain.batch_size": 32,
    "downstream.epochs": 2,
    "downstream.batch_size": 64,
    "checkpoint_every": 1,
}


def test_names_and_errors() -> None:
    assert list(precision.PRECISIONS) == ["32", "tf32", "bf16-mixed", "16-mixed"]
    assert precision.check(32) == "32" and precision.check("bf16-mixed") == "bf16-mixed"
    for bad in ("bf16", "16", 16, True, None, "fp32"):
        with pytest.raises(ValueError, match=r"unknown precision .*valid: 32, tf32, bf16-mixed, 16-mixed"):
            precision.check(bad)


def test_spec_precision_is_in_the_hash() -> None:
    base = benchmarks.load("quickstart")
    assert base.precision == "32" and base.to_dict()["precision"] == "32"  # hash schema 2 writes it out
    explicit = benchmarks.load("quickstart", overrides={"precision": 32})  # YAML reads `precision: 32` as an int
    assert explicit.precision == "32" and spec_hash(explicit, "m3g") == spec_hash(base, "m3g")
    hashes = {spec_hash(base, "m3g")}
    for name in ("tf32", "bf16-mixed", "16-mixed"):
        spec = benchmarks.load("quickstart", overrides={"precision": name})
        assert spec.to_dict()["precision"] == name
        hashes.add(spec_hash(spec, "m3g"))
    assert len(hashes) == 4
    with pytest.raises(ConfigError, match=r"quickstart.yaml: precision: unknown precision 'bf16'"):
        benchmarks.load("quickstart", overrides={"precision": "bf16"})


def test_a_pipeline_refuses_a_precision_it_does_not_apply() -> None:
    with pytest.raises(ConfigError, match="the 'gaussian_mi' pipeline applies only 32"):
        benchmarks.load("polyview-gaussian-mi", overrides={"precision": "bf16-mixed"})


def test_cli_flag_and_set_must_agree(tmp_path: Path, capsys) -> None:
    from fusebench.cli import main

    rc = main(["run", "quickstart", "--precision", "bf16-mixed", "--set", "precision=16-mixed", "--out", str(tmp_path)])
    assert rc == 2
    assert "--precision bf16-mixed and --set precision=16-mixed disagree" in capsys.readouterr().err
    rc = main(["run", "quickstart", "--precision", "fp8", "--out", str(tmp_path)])
    assert rc == 2 and "unknown precision 'fp8'" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())  # refused before any cell


def test_backend_flags_are_set_for_the_cell_and_restored() -> None:
    before = precision.tf32_enabled()
    with precision.backend_flags(precision.get("tf32")):
        assert precision.tf32_enabled() == {"matmul": True, "conv": True}
    with precision.backend_flags(precision.get("32")):  # PyTorch's default leaves cuDNN convolutions on TF32
        assert precision.tf32_enabled() == {"matmul": False, "conv": False}
    assert precision.tf32_enabled() == before


def _capture_objective_inputs(monkeypatch) -> list[torch.dtype]:
    """The dtypes of the embeddings handed to the objective (a forward pre-hook sees them before the
    objective upcasts them), and the autocast state around each call."""
    seen: list[torch.dtype] = []
    build = fusebench.objectives.build

    def hooked(name, **hp):
        module = build(name, **hp)
        module.register_forward_pre_hook(lambda mod, args: seen.append(args[0].dtype))
        return module

    monkeypatch.setattr(fusebench.objectives, "build", hooked)
    return seen


@pytest.mark.parametrize("name, dtype", [("32", torch.float32), ("bf16-mixed", torch.bfloat16),
                                         ("16-mixed", torch.float16)])
def test_autocast_reaches_the_encoders_and_the_record_says_so(name, dtype, tmp_path: Path, monkeypatch) -> None:
    seen = _capture_objective_inputs(monkeypatch)
    spec = benchmarks.load("quickstart", overrides={**TINY, "precision": name})
    rec = run_cell(CellRequest(spec, "m3g", 0, tmp_path), RunOptions(device="cpu", progress=False))  # CPU autocast
    assert seen and set(seen) == {dtype}  # the encoders' (projection heads') outputs in the policy's dtype
    assert rec["config"]["precision"] == name and "precision" not in rec  # stated once (schema 3)
    num = rec["numerics"]
    assert "precision" not in num and num["device_type"] == "cpu" and num["cuda_version"] is None
    assert num["autocast_dtype"] == (None if name == "32" else str(dtype).removeprefix("torch."))
    assert num["grad_scaler"] is (name == "16-mixed")
    assert num["deterministic_algorithms"] is True and num["cudnn_benchmark"] is False
    assert num["cuda_tf32_matmul"] is False and num["cuda_tf32_conv"] is False
    assert all(torch.isfinite(torch.tensor(rec["curves"]["pretrain_loss"])))
    validated = validate_record(json.loads((tmp_path / "quickstart" / "m3g" / "seed0" / "run.json").read_text()))
    assert validated.precision == name
    # m3g converged at every step under autocast: no Sinkhorn max_iter warning was turned into a failure,
    # and the loss moved (a bf16 solve used to stall at max_iter with an approximate gradient)
    assert rec["curves"]["pretrain_loss"][0] != rec["curves"]["pretrain_loss"][-1]


def test_tf32_on_the_cpu_is_the_float32_computation(tmp_path: Path) -> None:
    cpu = RunOptions(device="cpu", progress=False)  # on CUDA tf32 is another computation (the encoders' products)
    a = run_cell(CellRequest(benchmarks.load("quickstart", overrides=TINY), "infonce_pwe", 0, tmp_path / "a"), cpu)
    b = run_cell(CellRequest(benchmarks.load("quickstart", overrides={**TINY, "precision": "tf32"}), "infonce_pwe", 0, tmp_path / "b"), cpu)
    assert b["metrics"] == a["metrics"]
    assert b["curves"]["pretrain_loss"] == pytest.approx(a["curves"]["pretrain_loss"], rel=1e-6)
    assert a["config_hash"] != b["config_hash"] and a["comparability_key"] != b["comparability_key"]
    assert b["numerics"]["cuda_tf32_matmul"] is True and b["numerics"]["fp32_precision"]["cuda.matmul"] == "tf32"


def test_16_mixed_resume_restores_the_gradient_scaler(tmp_path: Path) -> None:
    spec = benchmarks.load("quickstart", overrides={**TINY, "precision": "16-mixed"})
    ref = run_cell(CellRequest(spec, "infonce_pwe", 0, tmp_path / "a"), RunOptions(progress=False))
    with pytest.raises(KeyboardInterrupt):  # stop inside pretraining
        run_cell(CellRequest(spec, "infonce_pwe", 0, tmp_path / "b"), RunOptions(progress=False, max_steps=5))
    ckpt = torch.load(tmp_path / "b" / "quickstart" / "infonce_pwe" / "seed0" / "last.pt", weights_only=True)
    assert ckpt["phase"] == "pretrain" and "grad_scaler" in ckpt and ckpt["grad_scaler"]["scale"] > 0
    resumed = run_cell(CellRequest(spec, "infonce_pwe", 0, tmp_path / "b"), RunOptions(resume=True, progress=False))
    assert resumed["metrics"] == ref["metrics"]
    assert resumed["curves"]["pretrain_loss"] == pytest.approx(ref["curves"]["pretrain_loss"], rel=1e-6)


def _record_pair(tmp_path: Path) -> tuple[dict, dict]:
    spec = benchmarks.load("quickstart", overrides={**TINY, "pretrain.epochs": 0, "downstream.epochs": 1})
    cpu = RunOptions(device="cpu", progress=False)  # the boards' check below reads "runs on cpu"
    a = run_cell(CellRequest(spec, "none", 0, tmp_path / "runs"), cpu)
    spec_b = benchmarks.load("quickstart", overrides={**TINY, "pretrain.epochs": 0, "downstream.epochs": 1,
                                                      "precision": "bf16-mixed"})
    b = run_cell(CellRequest(spec_b, "none", 1, tmp_path / "runs"), cpu)
    return a, b


def test_runs_of_different_precisions_are_never_one_group(tmp_path: Path) -> None:
    from fusebench.leaderboard import write_leaderboards

    a, b = _record_pair(tmp_path)
    assert comparability_key(a) != comparability_key(b)
    with pytest.raises(ValueError, match=r"mixes runs that must not be compared: 2 comparability groups.*config\.precision"):
        write_leaderboards(tmp_path / "runs", tmp_path / "board")
    write_leaderboards(tmp_path / "runs", tmp_path / "board", split=True, plots=False)
    md = (tmp_path / "board" / "quickstart.md").read_text()
    assert "- precision: `32` (float32 everywhere; TF32 off on CUDA)" in md
    assert "- precision: `bf16-mixed` (bfloat16 autocast for encoders and heads)" in md
    assert "runs on cpu (" in md


def test_an_edited_precision_is_refused(tmp_path: Path) -> None:
    a, _ = _record_pair(tmp_path)
    assert a["schema_version"] == 4 and "precision" not in a  # stated once, in config (issue #35)
    # the same record as schema 2 wrote it (plain metric values, their versions in versions.metrics), repeating the
    # precision: it must agree
    old = {**a, "schema_version": 2, "precision": "bf16-mixed", "metrics": values_of(a["metrics"]),
           "versions": {**a["versions"], "metrics": {m: e["version"] for m, e in a["metrics"].items()}}}
    with pytest.raises(RecordError, match=r"field 'precision': expected '32', the precision in config"):
        validate_record(old, "run.json")
    bad_cfg = {**a, "config": {**a["config"], "precision": "fp8"}}
    # rehashed (else the stored hash no longer matching the config is found first; a schema-4 record must state
    # its hash schema, so the check cannot be switched off by leaving it out)
    bad_cfg["config_hash"] = config_hash(bad_cfg["config"], bad_cfg["objective"], bad_cfg["hash_schema"])
    with pytest.raises(RecordError, match=r"config\.precision"):
        validate_record(bad_cfg, "run.json")


@pytest.mark.parametrize("dotted", sorted(REPEATED_FIELDS))
def test_a_schema_3_record_states_each_value_once(dotted: str, tmp_path: Path) -> None:
    """Issue #35: the precision, the protocol notes and the seed are fields of a schema-3 record once; a copy
    of one is refused, naming the field it repeats. The board reads the notes from config (the same text)."""
    a, _ = _record_pair(tmp_path)
    rec = validate_record(a, "run.json")
    assert rec.protocol == a["config"]["protocol_notes"] and rec.precision == a["config"]["precision"]
    head, _, leaf = dotted.partition(".")
    edited = json.loads(json.dumps(a))
    if leaf:
        edited.setdefault(head, {})[leaf] = a["seed"] if leaf == "seed" else "32"
    else:
        edited[head] = {"python": 0} if head == "seeds" else ({} if head == "protocol" else "32")
    with pytest.raises(RecordError, match=rf"field '{re.escape(dotted)}': expected no such field in a schema-\d "
                                          rf"record: it repeats {re.escape(REPEATED_FIELDS[dotted])}"):
        validate_record(edited, "run.json")


# ---- issue 33: the TF32 switches inside objectives and metrics; the blocked solver's key -------------------------
def test_the_blocked_solvers_precision_key_reads_under_every_policy() -> None:
    """The real ``_precision_key`` (no stand-in) under each policy's switches: under ``tf32`` PyTorch refuses the
    legacy getters once the new API set the switch ("mix of the legacy and new APIs"), which stopped every M3G
    cell at its first CUDA step. The key tells TF32 from full float32 and nothing else."""
    from fusebench.objectives import sinkhorn_blocked as sb

    keys = {}
    for name, policy in precision.PRECISIONS.items():
        with precision.backend_flags(policy):
            keys[name] = sb._precision_key()
    assert keys["32"] == keys["bf16-mixed"] == keys["16-mixed"] != keys["tf32"]
    if hasattr(torch.backends.cuda.matmul, "fp32_precision"):
        assert keys["tf32"][-1] == "tf32" and keys["32"][-1] == "ieee"


#: the calls whose CUDA kernels the TF32 switches govern
MATRIX_OPS = frozenset({"matmul", "mm", "bmm", "einsum", "linear", "addmm", "baddbmm", "__matmul__", "tensordot",
                        "cdist", "conv1d", "conv2d", "dot", "mv", "inner", "outer"})


class _SwitchesAtMatrixProducts(torch.overrides.TorchFunctionMode):
    """Records the TF32 switches in force at every matrix product."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, dict]] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in MATRIX_OPS:
            self.seen.append((name, precision.tf32_enabled()))
        return func(*args, **(kwargs or {}))


#: what every objective calls from inside its forward (patched on the instance to read the switches there)
INNER = "check_views"


def _objective_inputs(module):
    g = torch.Generator().manual_seed(0)
    kind = getattr(module, "input_kind", "views")
    k = 2 if module.max_views == 2 else 3
    if kind == "tuple":
        return (torch.randn(6, 4, generator=g), torch.randn(6, 4, generator=g), torch.randn(6, 5, 4, generator=g))
    views = torch.randn(k, 6, 4, generator=g)
    return (views, torch.randn(k, 6, 4, generator=g)) if kind == "pairs" else (views,)


@pytest.mark.parametrize("policy", list(precision.PRECISIONS))
def test_every_objective_computes_with_full_float32_matrix_products(policy: str) -> None:
    """Inside every registered objective's forward the TF32 switches are off (``fp32_precision = "ieee"``)
    whatever the policy, and the policy's switches are back after the call."""
    from fusebench import objectives

    with precision.backend_flags(precision.get(policy)):
        outside = precision.tf32_enabled()
        assert outside == {"matmul": policy == "tf32", "conv": policy == "tf32"}
        for name in objectives.OBJECTIVES.builtin():  # fusebench's own (a plugin installed here is its author's)
            module = objectives.build(name)
            inputs = _objective_inputs(module)
            mode = _SwitchesAtMatrixProducts()
            inner = getattr(module, INNER)

            def reading(*args, inner=inner, mode=mode, **kwargs):  # called from inside forward
                mode.seen.append(("forward", precision.tf32_enabled()))
                return inner(*args, **kwargs)

            setattr(module, INNER, reading)
            with mode:
                module(*inputs)
            assert mode.seen and mode.seen[0][0] == "forward", f"{name}: the switches were not read inside forward"
            on = [(op, s) for op, s in mode.seen if s != {"matmul": False, "conv": False}]
            assert not on, f"{name} under {policy}: TF32 on at {on[:3]}"
            assert precision.tf32_enabled() == outside, name


def test_metrics_compute_with_full_float32_matrix_products() -> None:
    from fusebench.metrics import Metric

    seen = []
    metric = Metric("probe", lambda: seen.append(precision.tf32_enabled()) or 0.0, True, "classification")
    with precision.backend_flags(precision.get("tf32")):
        metric()
        assert precision.tf32_enabled() == {"matmul": True, "conv": True}
    assert seen == [{"matmul": False, "conv": False}]


def test_full_float32_restores_the_switches_it_found() -> None:
    with precision.backend_flags(precision.get("tf32")):
        with precision.full_float32():
            assert precision.tf32_enabled() == {"matmul": False, "conv": False}
            with precision.full_float32():  # nested: nothing to change
                assert precision.tf32_enabled() == {"matmul": False, "conv": False}
        assert precision.tf32_enabled() == {"matmul": True, "conv": True}
