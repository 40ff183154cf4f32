"""The speed options (fusebench/engine/speed.py, optim.py; the spec's ``speed`` section) on the CPU:
channels-last gives the loss of the default layout within float tolerance, the foreach / fused optimisers
the default one's steps, a failing ``torch.compile`` falls back to eager with the reason logged and recorded,
cuDNN autotuning switches determinism off for the cell only, and each option enters the config hash when on.

References: the same model in the default layout, PyTorch's default (per-parameter loop) optimiser, the
eager encoder; ``torch.compile`` is replaced by stand-ins (a real compilation takes minutes on a loaded CPU).
"""

from __future__ import annotations

import copy
import json
import logging
from pathlib import Path

import pytest
import torch
from torch import nn

from fusebench import benchmarks
from fusebench.encoders import build
from fusebench.encoders.esanet import ESANet
from fusebench.engine import speed
from fusebench.spec.config import ConfigError, SpeedConfig
from fusebench.cells.execute import run_cell
from fusebench.components.model import for_backbone
from fusebench.engine.optim import build_optimizer
from fusebench.spec.request import CellRequest, RunOptions


def esanet_case() -> tuple[nn.Module, dict]:
    torch.manual_seed(0)
    model = for_backbone(ESANet(modalities=["rgb", "depth"], size="tiny", num_classes=4))
    batch = ESANet.example_batch({"size": "tiny", "modalities": ["rgb", "depth"], "num_classes": 4}, batch_size=3,
                                 height=32, width=32)
    return model, batch


def train_losses(model: nn.Module, batch: dict, steps: int, impl: str = "default", name: str = "adamw") -> list[float]:
    opt = build_optimizer(model.parameters(), name, 1e-3, 1e-4, impl)
    model.train()
    out = []
    for _ in range(steps):
        loss = model.task_loss(model(batch), batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        out.append(float(loss.detach()))
    return out


# ---- channels last --------------------------------------------------------------------------
def test_channels_last_esanet_gives_the_same_loss_and_gradients() -> None:
    ref_model, batch = esanet_case()
    model = copy.deepcopy(ref_model)
    assert speed.to_channels_last(model, SpeedConfig(channels_last=True)) is True
    conv = next(m for m in model.modules() if isinstance(m, nn.Conv2d) and m.weight.shape[-1] > 1)
    assert conv.weight.is_contiguous(memory_format=torch.channels_last) and not conv.weight.is_contiguous()
    converted = speed.channels_last_inputs(batch)
    rgb = converted["modalities"]["rgb"]
    assert rgb.is_contiguous(memory_format=torch.channels_last) and torch.equal(rgb, batch["modalities"]["rgb"])
    assert converted["target"] is batch["target"] and batch["modalities"]["rgb"].is_contiguous()  # batch untouched
    assert speed.input_format(False)(batch) is batch
    ref_model.train()
    model.train()
    ref = ref_model.task_loss(ref_model(batch), batch)
    got = model.task_loss(model(converted), converted)
    assert float(got.detach()) == pytest.approx(float(ref.detach()), rel=1e-5)
    ref.backward()
    got.backward()
    g_ref = torch.cat([p.grad.flatten() for p in ref_model.parameters()])
    g_got = torch.cat([p.grad.flatten() for p in model.parameters()])
    # float32 convolutions summed in another order: the gradient agrees to float tolerance as a whole (single
    # entries may not: the biases before a batch norm have a gradient of zero up to rounding)
    assert float((g_got - g_ref).norm() / g_ref.norm()) < 1e-3


def test_channels_last_leaves_models_without_2d_convolutions_alone() -> None:
    mlp = for_backbone(build("mlp", modalities={"a": 5, "b": 4}, num_classes=3))
    assert not speed.has_conv2d(mlp)
    assert speed.to_channels_last(mlp, SpeedConfig(channels_last=True)) is False
    assert speed.to_channels_last(esanet_case()[0], SpeedConfig()) is False  # off by default


# ---- optimiser implementations ----------------------------------------------------------------
@pytest.mark.parametrize("name", ["adamw", "sgd"])
def test_foreach_optimiser_takes_the_default_steps(name: str) -> None:
    ref_model, batch = esanet_case()
    model = copy.deepcopy(ref_model)
    ref = train_losses(ref_model, batch, 4, "default", name)
    got = train_losses(model, batch, 4, "foreach", name)
    assert got == pytest.approx(ref, rel=0, abs=1e-6)
    for p, q in zip(model.parameters(), ref_model.parameters()):
        assert torch.allclose(p, q, rtol=0, atol=1e-6)
    assert build_optimizer(model.parameters(), name, 1e-3, 0.0, "foreach").defaults["foreach"] is True


@pytest.mark.parametrize("name", ["adamw", "sgd"])
def test_fused_optimiser_takes_the_default_step(name: str) -> None:
    """One step (PyTorch has fused AdamW / SGD on the CPU too): the parameters agree to 1e-6 (lr 1e-3). Over
    several steps the tiny ESANet drifts apart (Adam divides near-zero gradients by their own size)."""
    ref_model, batch = esanet_case()
    model = copy.deepcopy(ref_model)
    assert train_losses(model, batch, 1, "fused", name) == train_losses(ref_model, batch, 1, "default", name)
    moved = 0.0
    for p, q, p0 in zip(model.parameters(), ref_model.parameters(), esanet_case()[0].parameters()):
        assert torch.allclose(p, q, rtol=0, atol=1e-6)
        moved = max(moved, float((q - p0).detach().abs().max()))
    assert moved > 1e-4  # the step did move the parameters
    assert build_optimizer(model.parameters(), name, 1e-3, 0.0, "fused").defaults["fused"] is True


def test_optimizer_impl_errors(monkeypatch) -> None:
    params = [nn.Parameter(torch.zeros(2))]
    with pytest.raises(ValueError, match="speed.optimizer_impl: expected default, foreach or fused, got 'turbo'"):
        build_optimizer(params, "adamw", 1e-3, 0.0, "turbo")

    def refuse(*args, **kwargs):
        raise RuntimeError("`fused=True` requires all the params to be floating point Tensors of supported devices")

    monkeypatch.setattr(torch.optim, "AdamW", refuse)
    with pytest.raises(ValueError, match=r"speed.optimizer_impl=fused: PyTorch .* refuses it .*devices \['cpu'\]"):
        build_optimizer(params, "adamw", 1e-3, 0.0, "fused")


# ---- torch.compile --------------------------------------------------------------------------
def test_compile_falls_back_to_eager_when_compiling_raises(monkeypatch, caplog) -> None:
    model, batch = esanet_case()
    model.eval()
    with torch.no_grad():
        want_embed, want_out = model.embed(batch), model(batch)
    keys = list(model.state_dict())

    def no_compiler(fn, **kwargs):
        raise RuntimeError("no C++ compiler found\nmore detail")

    monkeypatch.setattr(torch, "compile", no_compiler)
    status = speed.compile_encoder(model, SpeedConfig(compile=True))
    assert list(model.state_dict()) == keys  # checkpoints keep their keys
    with caplog.at_level(logging.WARNING, logger="fusebench.engine.speed"), torch.no_grad():
        got_embed, got_out = model.embed(batch), model(batch)
    assert torch.equal(got_embed, want_embed) and torch.equal(got_out, want_out)
    assert status.fallback == "ESANet.embed: RuntimeError: no C++ compiler found" and not status.ran_compiled
    assert "runs eagerly" in caplog.text and "no C++ compiler found" in caplog.text
    rec = speed.record(SpeedConfig(compile=True), {}, False, status)
    assert rec["compile"] is True and rec["compiled"] is False and rec["compile_fallback"] == status.fallback


def test_compile_falls_back_when_the_first_compiled_call_fails(monkeypatch) -> None:
    model, batch = esanet_case()
    model.eval()
    calls = []

    def lazy_failure(fn, **kwargs):  # torch.compile compiles at the first call: its errors come from there
        def compiled(*args, **kw):
            from torch._dynamo import exc as dynamo_exc

            calls.append(fn)
            raise dynamo_exc.BackendCompilerFailed(fn, RuntimeError("inductor raised"), None)
        return compiled

    monkeypatch.setattr(torch, "compile", lazy_failure)
    status = speed.compile_encoder(model, SpeedConfig(compile=True, compile_mode="max-autotune"))
    with torch.no_grad():
        first = model.embed(batch)
        second = model.embed(batch)
    assert torch.equal(first, second) and len(calls) == 1  # after the failure, no further compilation is tried
    assert status.fallback == "ESANet.embed: BackendCompilerFailed: backend='embed' raised:"


def test_compiled_encoder_runs_compiled_and_copies_compile_their_own(monkeypatch) -> None:
    model, batch = esanet_case()
    model.eval()
    compiled_for, modes = [], []

    def stand_in(fn, mode=None):  # a "compiler" that returns the function as it is, and says what it was given
        compiled_for.append(fn)
        modes.append(mode)
        return fn

    monkeypatch.setattr(torch, "compile", stand_in)
    status = speed.compile_encoder(model, SpeedConfig(compile=True))
    with torch.no_grad():
        want = type(model.backbone).embed(model.backbone, batch)
        assert torch.equal(model.embed(batch), want)
        model(batch)  # features
    assert status.ran_compiled and status.fallback is None and modes == [None, None]
    assert [f.__self__ for f in compiled_for] == [model.backbone, model.backbone]
    # an EMA teacher's deep copy: its wrappers call the copy's own methods
    teacher = copy.deepcopy(model)
    with torch.no_grad():
        for p in teacher.parameters():
            p.add_(0.5)
        got = teacher.embed(batch)
        assert torch.equal(got, type(teacher.backbone).embed(teacher.backbone, batch))
        assert not torch.equal(got, want)
    assert compiled_for[-1].__self__ is teacher.backbone
    # inside another function being compiled, the wrapper runs the eager method (the tracer follows it)
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    other = for_backbone(ESANet(modalities=["rgb", "depth"], size="tiny", num_classes=4))
    speed.compile_encoder(other, SpeedConfig(compile=True))
    n = len(compiled_for)
    with torch.no_grad():
        other.embed(batch)
    assert len(compiled_for) == n
    assert speed.compile_encoder(other, SpeedConfig()) is None


# ---- cells ------------------------------------------------------------------------------------
TINY = {"dataset.synthetic_spec": {"num_samples": 96, "seed": 0}, "pretrain.epochs": 2, "pretrain.batch_size": 16,
        "downstream.epochs": 2, "downstream.batch_size": 32}


def cell(tmp_path: Path, name: str, over: dict, objective: str = "infonce_pwe", bench: str = "quickstart",
         synthetic: bool = False, device: str = "auto") -> dict:
    spec = benchmarks.load(bench, overrides={**(TINY if bench == "quickstart" else {}), **over}, synthetic=synthetic)
    rec = run_cell(CellRequest(spec, objective, 0, tmp_path / name),
                   RunOptions(device=device, progress=False, synthetic=synthetic))
    written = json.loads((tmp_path / name / bench / objective / "seed0" / "run.json").read_text())
    assert written["numerics"] == rec["numerics"]
    return rec


def test_default_cell_records_the_speed_block(tmp_path: Path) -> None:
    rec = cell(tmp_path, "plain", {}, device="cpu")  # on CUDA the defaults pin memory
    assert rec["numerics"]["speed"] == {
        "num_workers": 0, "num_workers_from": "auto", "pin_memory": False, "persistent_workers": False,
        "prefetch_factor": None, "channels_last": False, "cudnn_benchmark": False, "optimizer_impl": "default",
        "compile": False, "compile_mode": None, "compiled": False, "compile_fallback": None}
    assert "speed" not in rec["config"] and "loader" not in rec["config"]


def test_compile_fallback_in_a_cell_is_recorded_and_computes_the_eager_numbers(tmp_path: Path, monkeypatch) -> None:
    plain = cell(tmp_path, "plain", {})

    def no_compiler(fn, **kwargs):
        raise RuntimeError("torch.compile is not supported here")

    monkeypatch.setattr(torch, "compile", no_compiler)
    rec = cell(tmp_path, "compiled", {"speed.compile": True})
    sp = rec["numerics"]["speed"]
    assert sp["compile"] is True and sp["compile_mode"] == "default" and sp["compiled"] is False
    assert sp["compile_fallback"] == "MLPEncoder.embed: RuntimeError: torch.compile is not supported here"
    assert rec["metrics"] == plain["metrics"] and rec["curves"] == plain["curves"]
    assert rec["config"]["speed"] == {"compile": True}
    assert rec["config_hash"] != plain["config_hash"] and rec["comparability_key"] != plain["comparability_key"]


def test_compile_fallback_is_recorded_by_the_embedding_protocol_too(tmp_path: Path, monkeypatch) -> None:
    def no_compiler(fn, **kwargs):
        raise RuntimeError("no compiler")

    monkeypatch.setattr(torch, "compile", no_compiler)
    rec = cell(tmp_path, "mv", {"speed.compile": True}, objective="none", bench="mv-ngs", synthetic=True)
    assert rec["numerics"]["speed"]["compile_fallback"] == "MLPEncoder.embed: RuntimeError: no compiler"


def test_foreach_cell_matches_the_default_cell(tmp_path: Path) -> None:
    plain = cell(tmp_path, "plain", {})
    rec = cell(tmp_path, "foreach", {"speed.optimizer_impl": "foreach"})
    assert rec["numerics"]["speed"]["optimizer_impl"] == "foreach"
    for key in ("pretrain_loss", "downstream_loss"):
        assert rec["curves"][key] == pytest.approx(plain["curves"][key], rel=0, abs=1e-6)
    assert rec["config_hash"] != plain["config_hash"]


def test_cudnn_benchmark_turns_determinism_off_for_the_cell_only(tmp_path: Path) -> None:
    torch.use_deterministic_algorithms(True, warn_only=True)
    before = (torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic,
              torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled())
    rec = cell(tmp_path, "bench", {"speed.cudnn_benchmark": True})
    num = rec["numerics"]
    assert num["cudnn_benchmark"] is True and num["speed"]["cudnn_benchmark"] is True
    assert num["deterministic_algorithms"] is False and num["cudnn_deterministic"] is False
    assert rec["determinism"]["deterministic_algorithms"] is False and rec["determinism"]["cudnn_benchmark"] is True
    after = (torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic,
             torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled())
    assert after == before


def test_channels_last_cell_on_a_convolutional_encoder(tmp_path: Path) -> None:
    plain = cell(tmp_path, "plain", {}, bench="nyuv2-seg", synthetic=True)
    rec = cell(tmp_path, "cl", {"speed.channels_last": True}, bench="nyuv2-seg", synthetic=True)
    assert plain["numerics"]["speed"]["channels_last"] is False and rec["numerics"]["speed"]["channels_last"] is True
    for key in ("pretrain_loss", "downstream_loss"):
        assert rec["curves"][key] == pytest.approx(plain["curves"][key], rel=1e-3, abs=1e-4)
    # an encoder without 2-D convolutions is left as it is, and the record says so
    mlp = cell(tmp_path, "mlp", {"speed.channels_last": True})
    assert mlp["numerics"]["speed"]["channels_last"] is False


# ---- the spec ---------------------------------------------------------------------------------
@pytest.mark.parametrize("over, key", [
    ({"speed.optimizer_impl": "turbo"}, r"speed.optimizer_impl must be one of default, foreach, fused, got 'turbo'"),
    ({"speed.compile_mode": "fast"}, "speed.compile_mode"),
    ({"speed.channels_last": "yes"}, "speed.channels_last"),
    ({"speed.compile": 1}, "speed.compile"),
    ({"speed.cudnn": True}, "cudnn"),
    ({"speed.compile_mode": "max-autotune"},
     r"speed.compile_mode 'max-autotune' is used only with speed.compile: true"),
])
def test_bad_speed_settings_name_the_key(over: dict, key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        benchmarks.load("quickstart", overrides=over)


@pytest.mark.parametrize("over", [{"speed.channels_last": True}, {"speed.cudnn_benchmark": True},
                                  {"speed.optimizer_impl": "foreach"}, {"speed.optimizer_impl": "fused"},
                                  {"speed.compile": True},
                                  {"speed.compile": True, "speed.compile_mode": "max-autotune"}])
def test_each_speed_option_is_written_into_the_spec_form_only_when_set(over: dict) -> None:
    base = benchmarks.load("quickstart").to_dict()
    form = benchmarks.load("quickstart", overrides=over).to_dict()
    assert form["speed"] == {key.split(".")[1]: value for key, value in over.items()}
    assert {k: v for k, v in form.items() if k != "speed"} == base


def test_the_gaussian_mi_pipeline_refuses_speed_options() -> None:
    """Its cell applies none of them: a set option is refused at spec load, not silently ignored."""
    with pytest.raises(ConfigError, match="speed.optimizer_impl = 'foreach': the gaussian_mi pipeline does not apply it"):
        benchmarks.load("polyview-gaussian-mi", overrides={"speed.optimizer_impl": "foreach"})
    benchmarks.load("polyview-gaussian-mi")  # defaults: fine



@pytest.mark.parametrize("objective, over, message", [
    ("raw", {"speed.compile": True}, r"speed\.compile=true: no row of this run runs an encoder .*: raw"),
    ("raw", {"speed.channels_last": True}, r"speed\.channels_last=true: no row of this run runs an encoder"),
    ("none", {"speed.optimizer_impl": "foreach"}, r"speed\.optimizer_impl='foreach': no row of this run trains "
                                                  r"anything with an optimiser .*: none"),
    ("raw", {"speed.optimizer_impl": "fused"}, r"speed\.optimizer_impl='fused': no row of this run trains")])
def test_speed_options_no_row_of_the_run_applies_are_refused_before_any_cell(
        tmp_path: Path, objective: str, over: dict, message: str) -> None:
    """mv-ngs scores frozen features: its raw row runs no encoder (the input views are its features) and neither
    it nor the none row runs an optimiser (the probes fit without one), so these settings would be hashed into
    the records and change no number."""
    import fusebench

    with pytest.raises(ConfigError, match=message):
        fusebench.run("mv-ngs", objective=objective, seeds=[0], out=tmp_path / "out", synthetic=True,
                      progress=False, overrides=over)
    assert not (tmp_path / "out").exists()  # refused before anything was written


def test_speed_options_a_row_of_the_run_applies_pass_the_check() -> None:
    from fusebench.sweep.runner import check_speed_settings_used

    spec = benchmarks.load("mv-ngs", overrides={"speed.compile": True, "speed.optimizer_impl": "foreach"})
    check_speed_settings_used(spec, ["raw", "m3g"])  # m3g's cells pretrain and score the encoder
    check_speed_settings_used(benchmarks.load("mv-ngs", overrides={"speed.compile": True}), ["none"])  # an encoder
    with pytest.raises(ConfigError, match="optimizer_impl"):
        check_speed_settings_used(spec, ["none"])

# ---- issue 33 ---------------------------------------------------------------------------------------------------------
def test_ema_teacher_update_with_foreach_equals_the_per_parameter_loop() -> None:
    """The EMA update as multi-tensor kernels gives bit for bit what the loop of the earlier code gave: per
    parameter ``t.mul_(tau).add_(s, alpha=1 - tau)``, buffers copied."""
    from fusebench.encoders.heads import EMATeacher

    torch.manual_seed(0)
    student = nn.Sequential(nn.Linear(5, 7), nn.BatchNorm1d(7), nn.Linear(7, 3))
    teacher = EMATeacher(student, 0.9, total_steps=10)
    reference = copy.deepcopy(teacher.module)
    for step in range(4):
        with torch.no_grad():  # the student moves (and its batch-norm statistics with it)
            for p in student.parameters():
                p.add_(torch.randn_like(p) * 0.1)
        student.train()(torch.randn(6, 5))
        tau = teacher.update(student, step)
        with torch.no_grad():  # the loop the update replaced
            for (_, t), (_, s) in zip(reference.named_parameters(), student.named_parameters()):
                t.mul_(tau).add_(s.detach(), alpha=1.0 - tau)
            for (_, t), (_, s) in zip(reference.named_buffers(), student.named_buffers()):
                t.copy_(s)
        for (name, got), want in zip(teacher.module.state_dict().items(), reference.state_dict().values()):
            assert torch.equal(got, want), (step, name)
    assert not torch.equal(teacher.module[0].weight, student[0].weight)  # an average, not a copy


def test_compile_falls_back_when_a_later_recompilation_fails(monkeypatch, caplog) -> None:
    """A compiled call that fails after earlier ones ran compiled (a recompilation for a new input shape) falls
    back to eager too: that call's result is the eager one, the fallback is recorded once, nothing raises."""
    model, batch = esanet_case()
    model.eval()
    calls = []

    def fails_on_the_third_call(fn, **kwargs):
        def compiled(*args, **kw):
            calls.append(len(calls))
            if len(calls) == 3:
                from torch._dynamo import exc as dynamo_exc

                raise dynamo_exc.InternalTorchDynamoError("recompiling for a new shape")
            return fn(*args, **kw)
        return compiled

    monkeypatch.setattr(torch, "compile", fails_on_the_third_call)
    status = speed.compile_encoder(model, SpeedConfig(compile=True))
    with torch.no_grad(), caplog.at_level(logging.WARNING, logger="fusebench.engine.speed"):
        want = type(model.backbone).embed(model.backbone, batch)
        outs = [model.embed(batch) for _ in range(5)]
    assert all(torch.equal(o, want) for o in outs)
    assert calls == [0, 1, 2]  # compiled twice, failed once, eager from then on
    assert status.ran_compiled and status.fallback == "ESANet.embed: InternalTorchDynamoError: recompiling for a new shape"
    assert caplog.text.count("torch.compile failed") == 1


def test_a_models_own_error_in_a_compiled_call_is_raised_not_recorded(monkeypatch) -> None:
    model, batch = esanet_case()

    monkeypatch.setattr(torch, "compile", lambda fn, **kwargs: fn)  # "compiled" = the method itself
    status = speed.compile_encoder(model, SpeedConfig(compile=True))
    with pytest.raises((KeyError, ValueError, RuntimeError)):
        model.embed({"modalities": {}, "names": []})  # fails compiled and eagerly: the model's own error
    assert status.fallback is None


def _batchnorm_step(bn: nn.BatchNorm1d, ran: list[str]) -> speed.CompiledOrEager:
    """A training-mode BatchNorm wrapped as a compiled method; ``ran`` lists the runs that updated its statistics."""

    def eager(x: torch.Tensor) -> torch.Tensor:
        ran.append("eager")
        return bn(x)

    return speed.CompiledOrEager(eager, "Net.embed", speed.CompileStatus())


def test_a_runtime_error_of_a_compiled_call_is_raised_not_rerun_eagerly(monkeypatch) -> None:
    """A compiled call that ran (BatchNorm statistics updated) and then failed on the device (a CUDA
    out-of-memory) is not a compilation failure: the error is raised, the step is not repeated eagerly (which
    would update the statistics twice) and no fallback is recorded."""
    bn, ran = nn.BatchNorm1d(2), []
    x = torch.tensor([[1.0, 2.0], [3.0, 6.0]])

    def runs_then_fails(fn, **kwargs):
        def compiled(*args, **kw):
            fn(*args, **kw)
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return compiled

    monkeypatch.setattr(torch, "compile", runs_then_fails)
    step = _batchnorm_step(bn, ran)
    with pytest.raises(RuntimeError, match="CUDA out of memory"):
        step(x)
    assert ran == ["eager"] and step.status.fallback is None and not step.status.ran_compiled
    # one update with momentum 0.1 from (0, 0): 0.1 * batch mean (2, 4); a second one would give (0.38, 0.76)
    assert int(bn.num_batches_tracked) == 1
    assert torch.allclose(bn.running_mean, torch.tensor([0.2, 0.4]))


def test_a_compiler_error_of_a_compiled_call_falls_back_once_and_is_recorded(monkeypatch) -> None:
    from torch._dynamo import exc as dynamo_exc

    bn, ran = nn.BatchNorm1d(2), []
    x = torch.tensor([[1.0, 2.0], [3.0, 6.0]])
    compilations = []

    def fails_to_compile(fn, **kwargs):
        def compiled(*args, **kw):
            compilations.append(1)
            raise dynamo_exc.TorchRuntimeError("fake tensor propagation failed\nmore")
        return compiled

    monkeypatch.setattr(torch, "compile", fails_to_compile)
    step = _batchnorm_step(bn, ran)
    out = step(x)
    step(x)
    assert ran == ["eager", "eager"] and compilations == [1]  # the compiled call is tried once, eager after that
    assert step.status.fallback == "Net.embed: TorchRuntimeError: fake tensor propagation failed"
    # eager output of a training-mode BatchNorm: (x - mean) / sqrt(var + eps), biased var: columns (1, 4)
    eps = bn.eps
    want = torch.tensor([[-1 / (1 + eps) ** 0.5, -2 / (4 + eps) ** 0.5], [1 / (1 + eps) ** 0.5, 2 / (4 + eps) ** 0.5]])
    assert torch.allclose(out, want)
    assert int(bn.num_batches_tracked) == 2  # two calls, one update each


def test_channels_last_is_applied_to_the_host_batch_before_the_copy() -> None:
    """The training loop's host hook converts the batch on the CPU (pinned when the feed pins: on CUDA only)."""
    _, batch = esanet_case()
    fmt = speed.input_format(True)
    out = fmt(batch)
    assert out["modalities"]["rgb"].device.type == "cpu"
    assert out["modalities"]["rgb"].is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(out["modalities"]["rgb"], batch["modalities"]["rgb"])
    assert fmt(out)["modalities"]["rgb"] is out["modalities"]["rgb"]  # already channels-last: no copy
    if torch.cuda.is_available():
        pinned = speed.input_format(True, pin=True)(batch)["modalities"]["rgb"]
        assert pinned.is_pinned() and pinned.is_contiguous(memory_format=torch.channels_last)
