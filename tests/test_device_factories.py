"""Tensors an objective makes are made on its inputs' device (issue 33: no host-to-device copy per step).

A GPU is not needed to find a tensor made on the host inside a loss: a ``TorchFunctionMode`` on the CPU
follows every tensor a factory (``torch.tensor``, ``arange``, ``zeros``, ``eye``, ``triu_indices`` ...) made
without ``device=`` (on a GPU run it would be a CPU tensor) and reports, from an objective's second call on (its
first may build what later calls reuse: the cached index tensors, moved once), where such a tensor

* meets a tensor of the inputs (indexing, arithmetic, ``cat``): on CUDA an error, or a blocking copy of an index
  from pageable host memory at every call (0-dim tensors are left out: CUDA takes them as scalars), or
* is moved to a device with ``.to(...)`` / ``.cuda()``: a host-to-device copy at every call.

Every built-in objective is called with its defaults, M3G also with the options that take other paths (the
reference solver, the CSD cost), and M3G and the matching gap also with their device paths forced on the CPU (the
blocked solver, no numpy or compiled binding), the paths a GPU run takes. Before: M3G's reference solver and CSD
cost indexed the pairwise dots with ``torch.triu_indices`` made on the host at every call
(``objectives/m3g.py``, ``diagonal_cost``).
"""

from __future__ import annotations

import traceback
from pathlib import Path

import pytest
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten
from torch.utils.weak import WeakIdKeyDictionary

from fusebench import objectives
from fusebench.runtime.utils import deferred_value_checks

pytestmark = pytest.mark.usefixtures("one_torch_thread")

ROOT = str(Path(__file__).resolve().parents[1])
FACTORIES = {torch.tensor, torch.as_tensor, torch.asarray, torch.from_numpy, torch.arange, torch.zeros, torch.ones,
             torch.full, torch.empty, torch.eye, torch.rand, torch.randn, torch.randint, torch.randperm, torch.linspace,
             torch.logspace, torch.tril_indices, torch.triu_indices, torch.scalar_tensor, torch.empty_strided}


def _where() -> str:
    ours = [f for f in traceback.extract_stack()[:-2]
            if f.filename.startswith(ROOT) and "/tests/" not in f.filename]
    return f"{Path(ours[-1].filename).relative_to(ROOT)}:{ours[-1].lineno} ({ours[-1].name})" if ours else "?"


class HostMade(TorchFunctionMode):
    """Follows the tensors made without ``device=`` while ``active`` (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.made = WeakIdKeyDictionary()  # tensor -> where it was made (and what was computed from it alone)
        self.call = 0
        self.found: list[tuple[int, str, str]] = []  # (call, what, where)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        outs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        if func in FACTORIES:
            if kwargs.get("device") is None:
                for o in outs:
                    self.made[o] = _where()
            return out
        ins = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        made = [t for t in ins if t in self.made]
        if not made:
            return out
        name = getattr(func, "__name__", "")
        if name in ("to", "cuda") and args and args[0] in self.made and (name == "cuda" or any(
                isinstance(a, (torch.device, str, torch.Tensor)) for a in [*args[1:], *kwargs.values()])):
            self.found.append((self.call, "moved to a device", f"{_where()}, made at {self.made[args[0]]}"))
            for t in (args[0], *outs):  # on a GPU run it is a device tensor from here on (a cache keeps it)
                self.made.pop(t, None)
            return out
        if len(made) < len(ins):
            if any(t.dim() > 0 for t in made):
                self.found.append((self.call, f"meets an input's tensor in {name}",
                                   f"{_where()}, made at {self.made[made[0]]}"))
            return out
        for o in outs:
            self.made[o] = self.made[made[0]]
        return out


def _inputs(module, k: int, n: int = 12, d: int = 6):
    g = torch.Generator().manual_seed(k)
    kind = module.input_kind
    if kind == "tuple":
        return (torch.randn(n, d, generator=g, requires_grad=True), torch.randn(n, d, generator=g),
                torch.randn(n, 2 * n, d, generator=g)), {"weights": torch.rand(2 * n, generator=g) + 0.1}
    views = torch.randn(k, n, d, generator=g, requires_grad=True)
    if kind == "pairs":
        return (views, torch.randn(k, n, d, generator=g)), {}
    return (views,), {}


def _host_made(name: str, hparams: dict, masked: bool = False) -> list[str]:
    found = []
    for k in (2, 3):
        module = objectives.build(name, **hparams)
        if not module.accepts_views(k) or (masked and not module.supports_mask):
            continue
        args, kwargs = _inputs(module, k)
        if masked:
            mask = torch.ones(k, args[0].shape[1], dtype=torch.bool)
            mask[0, :3] = False
            kwargs = {**kwargs, "mask": mask}
        mode = HostMade()
        with mode, deferred_value_checks():  # as in a training step
            for call in range(3):
                mode.call = call
                module(*args, **kwargs).backward()
        found += [f"k={k}: {what} at {where}" for call, what, where in mode.found if call >= 1]
    return found


CASES = [(name, {}) for name in objectives.OBJECTIVES.builtin()] + [
    ("m3g", {"solver": "reference"}), ("m3g", {"cost": "csd"})]


@pytest.mark.parametrize("name, hparams", CASES, ids=[f"{n}{h or ''}" for n, h in CASES])
def test_an_objective_makes_its_tensors_on_the_inputs_device(name: str, hparams: dict) -> None:
    for masked in (False, True):
        found = _host_made(name, hparams, masked)
        assert not found, f"{name} {hparams} (mask={masked}): " + "; ".join(found)


@pytest.mark.parametrize("name, hparams", [("m3g", {}), ("m3g", {"solver": "reference"}), ("m3g", {"cost": "csd"}),
                                           ("matching_gap", {})])
def test_the_solvers_device_paths_make_their_tensors_on_the_device(name: str, hparams: dict,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The paths a GPU run takes, forced on the CPU: the blocked scaling solver, no numpy or compiled binding."""
    from fusebench.objectives import m3g, sinkhorn_scaling

    monkeypatch.setattr(sinkhorn_scaling, "blocked_by_default", lambda device: True)
    monkeypatch.setattr(sinkhorn_scaling, "NUMPY_MAX_ENTRIES", 0)
    monkeypatch.setattr(m3g, "COMPILED_MAX_ENTRIES", 0)
    found = _host_made(name, hparams)
    assert not found, f"{name} {hparams}: " + "; ".join(found)


def test_the_mode_sees_what_it_must() -> None:
    """A host-made index meeting an input and a host-made tensor moved to a device are both reported (so the tests
    above cannot pass by seeing nothing); one made with ``device=``, a cache moved once and a 0-dim scalar are not."""
    x = torch.randn(3, 3)
    cache: dict = {}
    mode = HostMade()
    with mode:
        for call in range(2):
            mode.call = call
            x[torch.arange(2)]                                     # reported, each call
            torch.ones(3).to(x.device) + x                         # reported (moved), each call
            x[torch.arange(2, device=x.device)]                    # not: made on the device
            if "i" not in cache:
                cache["i"] = torch.arange(3).to(x.device)          # moved at call 0 only
            x[cache["i"]]                                          # not: the cache lives on the device
            x * torch.tensor(2.0)                                  # not: a 0-dim scalar
    later = [(what.split(" in ")[0], where.split(",")[0]) for call, what, where in mode.found if call == 1]
    assert [w for w, _ in later] == ["meets an input's tensor", "moved to a device"], mode.found
    assert [call for call, what, _ in mode.found if what == "moved to a device"] == [0, 0, 1]
