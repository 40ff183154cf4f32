"""A run imports only what it needs (issue #31, item 5): no ``torch._dynamo`` / ``torch._inductor`` (seconds of
CPU: ``torch.use_deterministic_algorithms`` and every ``torch.optim`` optimiser import them), and of each
registry only the modules of the ids the run looks up. Each check runs ``fusebench run`` in a fresh
interpreter and reads its ``sys.modules`` when it exits. The optimiser wrapper that keeps ``torch._dynamo`` out
is checked against PyTorch's own optimisers, bit for bit."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]

DRIVER = """
import atexit, json, runpy, sys
out = sys.argv[1]
atexit.register(lambda: open(out, "w").write(json.dumps(sorted(sys.modules))))
sys.argv = ["fusebench"] + sys.argv[2:]
runpy.run_module("fusebench", run_name="__main__")
"""

TINY = ["--set", "pretrain.epochs=1", "--set", "downstream.epochs=1",
        "--set", 'dataset.synthetic_spec={"num_samples": 96, "seed": 0}']


def _modules_of_run(tmp_path: Path, *args: str) -> set[str]:
    driver, listing = tmp_path / "driver.py", tmp_path / "modules.json"
    driver.write_text(DRIVER)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, str(driver), str(listing), "run", *args, "--out", str(tmp_path / "runs"),
                           "--no-progress"], cwd=ROOT, capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return set(json.loads(listing.read_text()))


def test_a_quickstart_run_imports_no_compiler_and_no_unused_component(tmp_path: Path) -> None:
    mods = _modules_of_run(tmp_path, "quickstart", "--objective", "infonce_pwe", "--seeds", "0", *TINY)
    assert "fusebench.datasets.quickstart" in mods and "fusebench.objectives.infonce" in mods  # it did run
    compiler = sorted(m for m in mods if m.split(".")[:2] in (["torch", "_dynamo"], ["torch", "_inductor"]))
    assert not compiler, f"a run imported the compiler stack: {compiler[:5]}"
    assert "sympy" not in mods
    unused = {"fusebench.datasets.nyuv2", "fusebench.datasets.sunrgbd", "fusebench.datasets.mmsa",
              "fusebench.datasets.sleep", "fusebench.datasets.multiview_mat",
              "fusebench.encoders.esanet", "fusebench.encoders.pointnet2", "fusebench.encoders.votenet",
              "fusebench.encoders.seq_transformer", "fusebench.encoders.eeg_conv",
              "fusebench.metrics.segmentation", "fusebench.metrics.detection", "fusebench.metrics.sentiment",
              "fusebench.objectives.byol", "fusebench.objectives.polyview", "fusebench.objectives.multicrop",
              "fusebench.cells.gaussian_mi"}
    assert not sorted(unused & mods), f"modules of components the run does not use: {sorted(unused & mods)}"


def test_a_multiview_run_imports_no_compiler(tmp_path: Path) -> None:
    mods = _modules_of_run(tmp_path, "mv-hw2sources", "--objective", "infonce_pwe", "--seeds", "0", "--synthetic")
    assert "fusebench.datasets.multiview_mat" in mods and "fusebench.metrics.clustering" in mods
    assert not [m for m in mods if m.startswith(("torch._dynamo", "torch._inductor"))]
    assert not {"fusebench.datasets.nyuv2", "fusebench.datasets.mmsa", "fusebench.encoders.esanet"} & mods


# ---------------------------------------------------------------------------------------------
# the optimiser classes without torch._dynamo compute PyTorch's numbers
# ---------------------------------------------------------------------------------------------
def _train(opt_cls, steps: int, **kw) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    net = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3)).double()
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64))
    x, y = torch.randn(40, 6, generator=g, dtype=torch.float64), torch.randint(0, 3, (40,), generator=g)
    opt = opt_cls(net.parameters(), **kw)
    for _ in range(steps):
        def closure():
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(net(x), y)
            loss.backward()
            return loss
        opt.step(closure)
    state = opt.state_dict()  # a checkpoint round trip keeps the numbers
    opt.load_state_dict(state)
    opt.step(closure)
    return [p.detach().clone() for p in net.parameters()]


@pytest.mark.parametrize("name,kw", [("AdamW", {"lr": 0.01, "weight_decay": 0.1}),
                                     ("SGD", {"lr": 0.05, "momentum": 0.9, "weight_decay": 1e-3}),
                                     ("LBFGS", {"lr": 1.0, "max_iter": 5, "line_search_fn": "strong_wolfe"})])
def test_optimizer_class_is_pytorchs_to_the_last_bit(name: str, kw: dict) -> None:
    from fusebench.runtime.utils import optimizer_class

    torch_cls = getattr(torch.optim, name)
    want = _train(torch_cls, 7, **kw)
    got = _train(optimizer_class(torch_cls), 7, **kw)
    assert all(torch.equal(a, b) for a, b in zip(got, want))
    assert optimizer_class(torch_cls).__name__ == name and issubclass(optimizer_class(torch_cls), torch_cls)


@pytest.mark.parametrize("dynamo", [False, True])
def test_optimizer_class_keeps_step_hooks(dynamo: bool) -> None:
    """The step hooks run once, whether the unwrapped step runs or (torch._dynamo imported) PyTorch's own, also
    when PyTorch's class was used (and its step wrapped with the hooks) before."""
    from fusebench.runtime.utils import optimizer_class

    torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=0.1)  # wraps SGD.step with the hooks' wrapper
    if dynamo:
        importlib.import_module("torch._dynamo")
    p = torch.nn.Parameter(torch.ones(3))
    opt = optimizer_class(torch.optim.SGD)([p], lr=0.1)
    seen = []
    opt.register_step_pre_hook(lambda o, a, k: seen.append("pre"))
    opt.register_step_post_hook(lambda o, a, k: seen.append("post"))
    p.grad = torch.ones(3)
    opt.step()
    assert seen == ["pre", "post"] and torch.equal(p.detach(), torch.full((3,), 0.9))


def test_deterministic_switch_without_inductor() -> None:
    """``seed_everything`` sets PyTorch's deterministic mode (and warn-only) without importing inductor; a
    compile later gives inductor the mode torch's own function would have set."""
    code = ("import sys, torch\nfrom fusebench.runtime.utils import seed_everything, sync_inductor_determinism\n"
            "seed_everything(0)\n"
            "print(torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),"
            " 'torch._inductor' in sys.modules)\n"
            "sync_inductor_determinism()\nimport torch._inductor.config as c\nprint(c.deterministic)\n")
    assert _fresh_python(code, unset="TORCHINDUCTOR_DETERMINISTIC").split() == ["True", "True", "False", "True"]


def test_the_gpu_bench_sets_a_runs_deterministic_switches_without_the_compiler() -> None:
    """``fusebench bench``'s switches (perf.gpu.deterministic_settings) are seed_everything's (deterministic
    algorithms warn-only, cudnn.deterministic, autotuning off, CUBLAS_WORKSPACE_CONFIG :4096:8), set without
    importing torch._inductor / torch._dynamo; the process's own switches are back afterwards."""
    code = ("import os, sys, torch\nfrom fusebench.perf.gpu import deterministic_settings\n"
            "torch.backends.cudnn.benchmark = True\n"
            "with deterministic_settings(True):\n"
            "    print(torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),"
            " torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark, os.environ['CUBLAS_WORKSPACE_CONFIG'])\n"
            "print(torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.deterministic,"
            " torch.backends.cudnn.benchmark)\n"
            "print(sorted(m for m in sys.modules if m.startswith(('torch._inductor', 'torch._dynamo')))[:3])\n")
    assert _fresh_python(code, unset="CUBLAS_WORKSPACE_CONFIG").splitlines() == [
        "True True True False :4096:8", "False False True", "[]"]


def _fresh_python(code: str, unset: str) -> str:
    """The standard output of ``code`` run by a fresh interpreter (one thread, ``unset`` not in its environment)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop(unset, None)
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout


# ---------------------------------------------------------------------------------------------
# a registry's home: one lookup imports one module; a wrong or missing home costs time, never an answer
# ---------------------------------------------------------------------------------------------
def _registry_with_modules(tmp_path: Path, monkeypatch, home):
    from fusebench.registry import Registry

    pkg = tmp_path / "homepkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from fusebench.registry import Registry\nREG = None\n")
    for mod, ids in (("a", ["alpha", "apple"]), ("b", ["beta"])):
        (pkg / f"{mod}.py").write_text("import homepkg\n" + "".join(
            f"homepkg.REG.add({i!r}, lambda: {i!r})\n" for i in ids))
    monkeypatch.syspath_prepend(str(tmp_path))
    for m in ("homepkg", "homepkg.a", "homepkg.b"):
        monkeypatch.delitem(sys.modules, m, raising=False)
    import homepkg

    homepkg.REG = Registry("thing", modules=("homepkg.a", "homepkg.b"), home=home)
    return homepkg.REG


def test_a_lookup_imports_the_home_module_only(tmp_path: Path, monkeypatch) -> None:
    reg = _registry_with_modules(tmp_path, monkeypatch, lambda name: "homepkg." + name[0])
    assert reg.get("beta")() == "beta"
    assert "homepkg.b" in sys.modules and "homepkg.a" not in sys.modules
    assert "apple" in reg and "homepkg.a" in sys.modules
    assert reg.available() == ["alpha", "apple", "beta"]


@pytest.mark.parametrize("home", [lambda name: "homepkg.b", lambda name: None, lambda name: "elsewhere.module"])
def test_a_wrong_home_still_finds_the_id(tmp_path: Path, monkeypatch, home) -> None:
    reg = _registry_with_modules(tmp_path, monkeypatch, home)
    assert reg.get("alpha")() == "alpha" and "alpha" in reg and "gamma" not in reg
    from fusebench.registry import UnknownNameError

    with pytest.raises(UnknownNameError, match="Did you mean 'alpha'"):
        reg.get("alpho")
