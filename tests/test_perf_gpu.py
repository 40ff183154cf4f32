"""``fusebench bench gpu`` (fusebench/perf/gpu.py, gpu_cell.py): FLOP counts against hand-computed values, the
busy-interval union against hand-worked intervals, a tiny CPU run of the bench and of the cell measurement
(columns present, numbers positive; no timing assertions), bad arguments; on a GPU machine also a tiny CUDA
run with its memory and busy figures."""

from __future__ import annotations

import json
import re

import pytest
import torch
from torch import nn

from fusebench.perf import gpu, gpu_cell
from fusebench.spec import precision


class _Linear(nn.Module):
    """A model with the interface the bench's step uses: ``model(batch)`` and ``task_loss``."""

    def __init__(self, *layers: nn.Module) -> None:
        super().__init__()
        self.net = nn.Sequential(*layers)

    def forward(self, batch: dict) -> torch.Tensor:
        return self.net(batch["x"])

    def task_loss(self, out: torch.Tensor, batch: dict) -> torch.Tensor:
        return out.sum()


def test_flops_of_one_linear_step_by_hand() -> None:
    n = 5
    model = _Linear(nn.Linear(8, 4))
    batch = {"x": torch.randn(n, 8, requires_grad=True)}
    step = gpu.training_step(model, batch, False, precision.get("32"), torch.device("cpu"))
    forward = 2 * n * 8 * 4  # one multiply-add per (sample, input, output); the bias add is not counted
    # backward: the input's gradient (n x 4 @ 4 x 8) and the weight's (4 x n @ n x 8), each as many as forward;
    # the AdamW update is element-wise and not counted
    assert gpu.count_flops(step) == forward + 2 * forward


def test_flops_of_two_layers_without_input_gradient_by_hand() -> None:
    n = 3
    model = _Linear(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    batch = {"x": torch.randn(n, 8)}  # no gradient for the input: the first layer computes its weight's only
    step = gpu.training_step(model, batch, False, precision.get("32"), torch.device("cpu"))
    fwd1, fwd2 = 2 * n * 8 * 16, 2 * n * 16 * 4
    assert gpu.count_flops(step) == (fwd1 + fwd2) + (fwd1) + (2 * fwd2)


def test_flops_of_a_convolution_by_hand() -> None:
    conv = nn.Conv2d(3, 4, kernel_size=3, padding=1, bias=False)
    x = torch.randn(2, 3, 5, 5)
    # 2 x (outputs: 2 x 4 x 5 x 5) x (multiply-adds per output: 3 x 3 x 3)
    assert gpu.count_flops(lambda: conv(x)) == 2 * (2 * 4 * 5 * 5) * (3 * 3 * 3)


def test_union_of_busy_intervals_by_hand() -> None:
    assert gpu_cell.union_ns([]) == 0
    assert gpu_cell.union_ns([(0, 10)]) == 10
    # [0, 10] and [5, 12] overlap (-> 12), [20, 25] apart (+5), [21, 22] inside it, [12, 14] touches the first (+2)
    assert gpu_cell.union_ns([(20, 25), (5, 12), (0, 10), (21, 22), (12, 14)]) == 12 + 2 + 5


class _Event:
    def __init__(self, name: str, device: str, start: int, duration: int) -> None:
        self._name, self._device, self._start, self._duration = name, device, start, duration

    def name(self) -> str:
        return self._name

    def device_type(self):
        from torch.autograd import DeviceType

        return DeviceType.CUDA if self._device == "cuda" else DeviceType.CPU

    def start_ns(self) -> int:
        return self._start

    def duration_ns(self) -> int:
        return self._duration


def test_device_intervals_sorts_kernels_and_copies() -> None:
    class Prof:  # the attribute path device_intervals reads: prof.profiler.kineto_results.events()
        class profiler:
            class kineto_results:
                @staticmethod
                def events():
                    return [_Event("aten::mm", "cpu", 0, 50), _Event("sm90_xmma_gemm", "cuda", 10, 5),
                            _Event("Memcpy HtoD (Pageable -> Device)", "cuda", 0, 4),
                            _Event("Memset (Device)", "cuda", 30, 1), _Event("elementwise_kernel", "cuda", 12, 8)]

    kernels, copies = gpu_cell.device_intervals(Prof())
    assert sorted(kernels) == [(10, 15), (12, 20)]
    assert sorted(copies) == [(0, 4), (30, 31)]
    assert gpu_cell.union_ns(kernels) == 10 and gpu_cell.union_ns(kernels + copies) == 15


def test_kernel_table_groups_by_name_per_step() -> None:
    """Launches and GPU time per step by kernel name, the largest first, the rest in one row; copies left out."""
    class Prof:
        class profiler:
            class kineto_results:
                @staticmethod
                def events():
                    return [_Event("gemm", "cuda", 0, 3000), _Event("add", "cuda", 0, 500), _Event("gemm", "cuda", 5, 1000),
                            _Event("add", "cuda", 9, 700), _Event("add", "cuda", 9, 800), _Event("relu", "cuda", 1, 100),
                            _Event("Memcpy HtoD (Pinned -> Device)", "cuda", 0, 9000), _Event("aten::mm", "cpu", 0, 9000)]

    rows = gpu_cell.kernel_table(Prof(), steps=2, top=2)
    # gemm: 2 launches, 4000 ns -> 1 launch and 0.002 ms per step, 2 us each; add: 3 launches, 2000 ns
    assert rows[0] == {"kernel": "gemm", "calls_per_step": 1.0, "ms_per_step": 0.002, "mean_us": 2.0}
    assert rows[1] == {"kernel": "add", "calls_per_step": 1.5, "ms_per_step": 0.001, "mean_us": 2000 / 3 / 1e3}
    assert rows[2] == {"kernel": "(other 1 names)", "calls_per_step": 0.5, "ms_per_step": 0.00005, "mean_us": 0.1}
    assert gpu_cell.kernel_table(Prof(), steps=1, top=5)[-1]["kernel"] == "relu"  # no rest row when all fit
    row = {"benchmark": "b", "objective": "m3g", "precision": "32", "batch": 8, "data": "synthetic twin",
           "feed": {"num_workers": 0, "num_workers_from": "default", "pin_memory": False}, "overrides": {},
           "steps": 2, "step_ms": 1.0, "step_profiled_ms": 1.0, "busy": 0.5, "busy_incl_copies": 0.6,
           "checkpoint_in_window": False, "kernels": 6, "kernel_top": rows}
    text = gpu_cell.format_cells([row])
    assert "3 launches per step" in text and "| `gemm` | 1.0 | 0.00 | 2.0 |" in text
    assert "| `(other 1 names)` | 0.5 | 0.00 | 0.1 |" in text


def test_device_intervals_reads_a_real_profile() -> None:
    """The profiler's own events have the methods device_intervals calls; a CPU-only profile has no GPU time."""
    from torch.profiler import ProfilerActivity, profile

    from fusebench.perf.timing import quiet_stderr

    a = torch.randn(16, 16)
    with quiet_stderr(), profile(activities=[ProfilerActivity.CPU]) as prof:
        (a @ a).sum()
    events = list(prof.profiler.kineto_results.events())
    assert events and all(callable(getattr(e, m, None)) for e in events
                          for m in ("name", "device_type", "start_ns", "duration_ns"))
    assert gpu_cell.device_intervals(prof) == ([], [])


def test_known_peaks_by_device_name() -> None:
    assert gpu.peaks_for_name("NVIDIA H100 80GB HBM3")["bf16"] == 989.4  # SXM
    assert gpu.peaks_for_name("NVIDIA H100 PCIe")["bf16"] == 756.0  # not the SXM figure
    assert gpu.peaks_for_name("NVIDIA H200")["bf16"] == 989.4
    assert gpu.peaks_for_name("NVIDIA A100-SXM4-80GB")["tf32"] == 156.0
    assert gpu.peaks_for_name("NVIDIA GeForce GTX 1080") is None


def _table(text: str, first_column: str) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the markdown table of ``text`` whose header starts with ``first_column``."""
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith(f"| {first_column} |"))
    rows = []
    for ln in lines[start + 2:]:
        if not ln.startswith("|"):
            break
        rows.append([c.strip() for c in ln.strip("|").split("|")])
    return [c.strip() for c in lines[start].strip("|").split("|")], rows


def test_cpu_run_of_two_tiny_encoders(tmp_path, capsys) -> None:
    out = tmp_path / "gpu.json"
    assert gpu.main(["--device", "cpu", "--small", "--encoders", "eeg_conv", "seq_transformer", "--precision", "32",
                     "bf16-mixed", "--steps", "2", "--warmup", "1", "--threads", "1", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert text.startswith("# fusebench bench gpu — device cpu")
    assert "dense peak: unknown" in text
    header, rows = _table(text, "encoder")
    assert tuple(header) == gpu.COLUMNS
    assert [(r[0], r[3], r[4]) for r in rows] == [
        ("eeg_conv", "2", "32"), ("eeg_conv", "2", "bf16-mixed"),
        ("seq_transformer", "2", "32"), ("seq_transformer", "2", "bf16-mixed")]
    col = {name: i for i, name in enumerate(header)}
    for r in rows:
        for name in ("step (ms)", "GFLOP/step", "TFLOP/s"):
            assert float(r[col[name]]) > 0, (name, r)
        assert r[col["% of peak"]] == "n/a" and r[col["peak mem (MiB)"]] == "n/a"  # no known peak, no CUDA memory
    data = json.loads(out.read_text())
    flops = {(r["encoder"], r["precision"]): r["flops"] for r in data["rows"]}
    assert all(v > 0 for v in flops.values())
    # the same multiply-adds whatever the precision: autocast changes their dtype, not their number
    assert flops["eeg_conv", "32"] == flops["eeg_conv", "bf16-mixed"]
    assert flops["seq_transformer", "32"] == flops["seq_transformer", "bf16-mixed"]
    for r in data["rows"]:
        assert r["tflops"] == pytest.approx(r["flops"] / (r["step_ms"] / 1e3) / 1e12)
    assert len(_table(text.split("In issue #21's layout:")[1], "encoder")[1]) == 2


def test_cpu_run_of_a_real_cell(capsys) -> None:
    assert gpu.main(["--device", "cpu", "--cell", "quickstart", "--precision", "32", "--cell-steps", "2",
                     "--warmup", "1", "--threads", "1"]) == 0
    text = capsys.readouterr().out
    header, rows = _table(text, "benchmark")
    assert tuple(header) == gpu_cell.COLUMNS
    assert len(rows) == 1
    r = dict(zip(header, rows[0]))
    assert (r["benchmark"], r["objective"], r["precision"], r["batch"], r["steps"]) == \
        ("quickstart", "m3g", "32", "64", "2")
    assert float(r["step (ms)"]) > 0
    assert r["GPU busy"] == "n/a (needs CUDA)"
    assert r["loader"] == "0 workers (auto), not pinned"  # on the CPU: no loader workers, nothing to pin for


def test_a_cell_row_lists_each_step_time_and_the_table_gives_their_median() -> None:
    """A slow step inside a window (an epoch end, a loss read) shows in the row's per-step list; the median
    (the table's figure) is of that list."""
    import statistics

    row = gpu_cell.measure_cell("quickstart", "32", torch.device("cpu"), warmup=1, steps=3)
    assert len(row["step_times_ms"]) == 3 and all(t > 0 for t in row["step_times_ms"])
    assert row["step_ms"] == statistics.median(row["step_times_ms"])
    assert "profiled_step_times_ms" not in row  # the profiled window runs on CUDA only


@pytest.mark.parametrize("argv, message", [
    (["--device", "cpu", "--precision", "fp8"], r"--precision: unknown precision 'fp8'"),
    (["--device", "cpu", "--encoders", "no_such_encoder"], r"--encoders: unknown encoder"),
    (["--device", "cpu", "--steps", "0"], r"--steps and --cell-steps must be >= 1"),
    (["--device", "cpu", "--batch", "0"], r"--batch: batch sizes must be >= 1"),
    (["--device", "cpu", "--data-root", "/x"], r"name it with --cell"),
    (["--device", "cpu", "--cell", "nyuv2-seg"], r"--cell nyuv2-seg: give its data with --data-root"),
    (["--device", "cpu", "--cell", "no-such-benchmark", "--synthetic"], r"unknown benchmark 'no-such-benchmark'"),
    (["--device", "auto"], r"--device: expected cuda, cuda:N or cpu"),
    (["--device", "cpu", "--cell", "quickstart", "--objective", "raw"], r"--objective 'raw': expected an objective"),
    (["--device", "cpu", "--cell", "quickstart", "--set", "pretrain.no_such_key=1"], r"no_such_key"),
    (["--device", "cpu", "--speed", "channels_lst=true"], r"--speed: speed: unknown key\(s\) \['channels_lst'\] "
                                                          r"\(did you mean 'channels_last'\?\)"),
    (["--device", "cpu", "--speed", "channels_last=3"], r"--speed: speed.channels_last: expected bool"),
    (["--device", "cpu", "--speed", "optimizer_impl=fast"], r"--speed: speed.optimizer_impl must be one of"),
    (["--device", "cpu", "--speed", "compile_mode=max-autotune"],
     r"--speed: speed.compile_mode 'max-autotune' is used only with speed.compile: true"),
    (["--device", "cpu", "--speed", "channels_last"], r"--speed 'channels_last': expected KEY=VALUE"),
    (["--device", "cpu", "--cell", "quickstart", "--speed", "channels_last=true", "--set", "speed.channels_last=false"],
     r"--speed channels_last=True and --set speed.channels_last=False disagree"),
])
def test_bad_arguments_are_named(argv, message, capsys) -> None:
    with pytest.raises(SystemExit) as e:
        gpu.main(argv)
    assert e.value.code == 2
    assert re.search(message, capsys.readouterr().err)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_without_cuda_says_so(capsys) -> None:
    with pytest.raises(SystemExit):
        gpu.main(["--device", "cuda"])
    assert "CUDA is not available" in capsys.readouterr().err


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (runs on a GPU machine)")
def test_cuda_run_memory_and_busy_fraction(tmp_path) -> None:
    out = tmp_path / "gpu.json"
    assert gpu.main(["--device", "cuda", "--small", "--encoders", "eeg_conv", "--precision", "32", "bf16-mixed",
                     "--steps", "3", "--warmup", "1", "--cell", "quickstart", "--cell-steps", "3",
                     "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    for r in data["rows"]:
        assert r["peak_mib"] > 0 and r["flops"] > 0 and r["step_ms"] > 0
    (cell,) = [c for c in data["cells"] if c["precision"] == "32"]
    assert 0 < cell["busy"] <= cell["busy_incl_copies"] <= 1.0


def test_the_bench_runs_with_a_runs_deterministic_settings_and_says_so(capsys, monkeypatch) -> None:
    """A row's step is timed under the settings of `fusebench run` (deterministic algorithms on), printed in the
    header; --deterministic off turns them off; the process's own switches are back afterwards."""
    seen = []
    real = gpu.training_step

    def spying(*args, **kwargs):
        seen.append((torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.deterministic))
        return real(*args, **kwargs)

    monkeypatch.setattr(gpu, "training_step", spying)
    before = (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.deterministic)
    argv = ["--device", "cpu", "--small", "--encoders", "eeg_conv", "--precision", "32", "--steps", "1",
            "--warmup", "0", "--threads", "1"]
    assert gpu.main(argv) == 0
    text = capsys.readouterr().out
    assert "# settings: deterministic algorithms on (warn only), cudnn.deterministic on, cudnn.benchmark off" in text
    assert "as `fusebench run`" in text
    assert gpu.main(argv + ["--deterministic", "off"]) == 0
    text = capsys.readouterr().out
    assert "# settings: deterministic algorithms off, cudnn.deterministic off" in text and "NOT a run's" in text
    assert seen == [(True, True), (False, False)]
    assert (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.deterministic) == before


def test_speed_options_are_applied_to_the_rows_as_a_cell_applies_them(tmp_path, capsys, monkeypatch) -> None:
    """--speed: the model and its image inputs in channels-last format, cuDNN autotuning on with the
    deterministic switches off, AdamW's multi-tensor implementation -- seen from inside the step -- and the
    row's JSON says so; the process's switches are back afterwards; without --speed, none of it."""
    seen = []
    real = gpu.training_step

    def spying(model, batch, headless, policy, device, optimizer_impl="default"):
        convs = [m.weight for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
        seen.append({
            "weights_channels_last": all(w.is_contiguous(memory_format=torch.channels_last) for w in convs),
            "rgb_channels_last": batch["modalities"]["rgb"].is_contiguous(memory_format=torch.channels_last),
            "cudnn_benchmark": torch.backends.cudnn.benchmark,
            "deterministic": (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.deterministic),
            "optimizer_impl": optimizer_impl,
        })
        return real(model, batch, headless, policy, device, optimizer_impl)

    monkeypatch.setattr(gpu, "training_step", spying)
    before = (torch.backends.cudnn.benchmark, torch.are_deterministic_algorithms_enabled())
    out = tmp_path / "rows.json"
    argv = ["--device", "cpu", "--small", "--encoders", "esanet", "--precision", "32", "--steps", "1",
            "--warmup", "0", "--threads", "1", "--json", str(out)]
    assert gpu.main(argv + ["--speed", "channels_last=true", "--speed", "cudnn_benchmark=true",
                            "--speed", "optimizer_impl=foreach"]) == 0
    text = capsys.readouterr().out
    assert "# speed options: channels_last=True, cudnn_benchmark=True, optimizer_impl=foreach" in text
    (row,) = json.loads(out.read_text())["rows"]
    assert row["speed"]["channels_last"] is True and row["speed"]["cudnn_benchmark"] is True
    assert row["speed"]["optimizer_impl"] == "foreach" and row["deterministic"] is False
    assert gpu.main(argv) == 0
    assert "# speed options" not in capsys.readouterr().out
    (plain,) = json.loads(out.read_text())["rows"]
    assert plain["speed"]["channels_last"] is False and plain["deterministic"] is True
    assert seen == [
        {"weights_channels_last": True, "rgb_channels_last": True, "cudnn_benchmark": True,
         "deterministic": (False, False), "optimizer_impl": "foreach"},
        {"weights_channels_last": False, "rgb_channels_last": False, "cudnn_benchmark": False,
         "deterministic": (True, True), "optimizer_impl": "default"},
    ]
    assert (torch.backends.cudnn.benchmark, torch.are_deterministic_algorithms_enabled()) == before
