"""Reproducibility and bookkeeping helpers: seeds, RNG states, devices, atomic writes, git info."""

from __future__ import annotations

import os
import random
from contextlib import contextmanager
from contextvars import ContextVar
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import torch

from fusebench import io
from fusebench.machine import check_device_name  # the one device-name rule (re-exported here)


def seed_everything(seed: int, deterministic: bool = True) -> dict[str, Any]:
    """Seed python, numpy and torch; switch on deterministic algorithms. Returns the flags set."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)
    flags = {"seed": seed, "deterministic_algorithms": False, "cudnn_benchmark": False}
    if deterministic:
        set_deterministic(True)
        flags.update(deterministic_algorithms=True, cudnn_deterministic=True)
    return flags


def set_deterministic(on: bool) -> None:
    """A run's deterministic switches (``on``: ``CUBLAS_WORKSPACE_CONFIG`` set unless given, deterministic
    algorithms in warn-only mode, ``cudnn.deterministic``) or those switches off; cuDNN autotuning off either
    way. Through :func:`use_deterministic_algorithms`: no ``torch._inductor`` import."""
    if on:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    use_deterministic_algorithms(on, warn_only=True)
    torch.backends.cudnn.deterministic = on
    torch.backends.cudnn.benchmark = False


#: the deterministic mode set while ``torch._inductor`` was not imported: given to inductor's config by
#: :func:`sync_inductor_determinism` before anything is compiled
_INDUCTOR_DETERMINISTIC: list[bool] = []


def use_deterministic_algorithms(mode: bool, warn_only: bool = False) -> None:
    """``torch.use_deterministic_algorithms`` without importing ``torch._inductor`` (and ``torch._dynamo``,
    sympy, triton: seconds of CPU) when nothing has imported it yet: the switch itself is set in the C core
    as torch's function sets it, and inductor's own flag (``torch._inductor.config.deterministic``, which
    torch's function also sets, and which only compiled code reads) is set by
    :func:`sync_inductor_determinism` when something is compiled."""
    if "torch._inductor.config" in sys.modules:
        torch.use_deterministic_algorithms(mode, warn_only=warn_only)
        _INDUCTOR_DETERMINISTIC.clear()
        return
    torch._C._set_deterministic_algorithms(mode, warn_only=warn_only)
    _INDUCTOR_DETERMINISTIC[:] = [bool(mode)]


def sync_inductor_determinism() -> None:
    """Before ``torch.compile``: give inductor the deterministic mode :func:`use_deterministic_algorithms`
    set while it was not imported (what ``torch.use_deterministic_algorithms`` would have set)."""
    if _INDUCTOR_DETERMINISTIC:
        import torch._inductor.config as inductor_config

        inductor_config.deterministic = _INDUCTOR_DETERMINISTIC.pop()


class _WithoutDynamo:
    """Mixin of :func:`optimizer_class`: the methods ``torch.optim.Optimizer`` wraps so that a compiled graph
    breaks around them (``torch._disable_dynamo``; ``step`` in ``_use_grad_for_differentiable``) import
    ``torch._dynamo`` at their first call (2 s of CPU, and sympy, triton...) although eager code never needs
    it. While nothing has imported ``torch._dynamo``, each runs unwrapped here: the same function (followed
    through ``__wrapped__``), and ``step`` with grad mode off, as its wrappers set it for a non-differentiable
    optimiser (``_use_grad_for_differentiable``, ``torch.no_grad``), so the parameters it computes are
    PyTorch's to the last bit (the step hooks run in this class's own ``step``, which PyTorch wraps as it wraps
    any optimiser's). Once ``torch._dynamo`` is imported (``speed.compile``), for a differentiable optimiser,
    or where there is nothing to unwrap (another PyTorch), PyTorch's own method runs."""

    def _torch_method(self, name: str) -> tuple[Callable[..., Any], Callable[..., Any] | None]:
        """(PyTorch's method ``name`` as a function, its unwrapped function or None where it is to run as it is).
        The step hooks' wrapper of a PyTorch class's ``step`` is left out of both: the hooks run in this class's
        own ``step``, once."""
        fn = getattr(super(), name).__func__
        while getattr(fn, "hooked", False) and hasattr(fn, "__wrapped__"):  # Optimizer.profile_hook_step
            fn = fn.__wrapped__
        if "torch._dynamo" in sys.modules:
            return fn, None
        raw = fn
        while hasattr(raw, "__wrapped__"):
            raw = raw.__wrapped__
        return fn, None if raw is fn else raw

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        fn, raw = self._torch_method("add_param_group")
        return (raw or fn)(self, param_group)

    def zero_grad(self, set_to_none: bool = True) -> None:
        fn, raw = self._torch_method("zero_grad")
        return (raw or fn)(self, set_to_none)

    def state_dict(self) -> dict[str, Any]:
        fn, raw = self._torch_method("state_dict")
        return (raw or fn)(self)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        fn, raw = self._torch_method("load_state_dict")
        return (raw or fn)(self, state_dict)

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        fn, raw = self._torch_method("step")
        if raw is None or self.defaults.get("differentiable", False):
            return fn(self, closure)
        with torch.no_grad():
            return raw(self, closure)


_OPTIMIZER_CLASSES: dict[type, type] = {}


def optimizer_class(cls: type) -> type:
    """``cls`` (a ``torch.optim`` optimiser class) with :class:`_WithoutDynamo`'s methods: the same
    optimiser and numbers, without importing ``torch._dynamo`` in an eager run. Anything else (a factory
    function) is returned as it is."""
    if not (isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer)):
        return cls
    got = _OPTIMIZER_CLASSES.get(cls)
    if got is None:
        got = _OPTIMIZER_CLASSES[cls] = type(cls.__name__, (_WithoutDynamo, cls), {"__module__": __name__})
    return got


def rng_state() -> dict[str, Any]:
    """RNG states as tensors and plain containers only, so checkpoints load with ``weights_only=True``."""
    name, keys, pos, has_gauss, cached = np.random.get_state()
    numpy_state = (name, torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss), float(cached))
    state = {"python": random.getstate(), "numpy": numpy_state, "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def rng_states(state: dict[str, Any]) -> tuple[tuple, tuple, torch.Tensor]:
    """The python, numpy and torch states of a checkpoint's ``rng`` entry (:func:`get_rng_state`) in the forms
    ``random.setstate``, ``np.random.set_state`` and ``torch.set_rng_state`` take (a checkpoint holds lists and
    tensors, what ``torch.load(weights_only=True)`` reads back)."""
    py = state["python"]
    name, keys, pos, has_gauss, cached = state["numpy"]
    return (tuple(py[:1]) + (tuple(py[1]),) + tuple(py[2:]),
            (name, keys.numpy().astype(np.uint32), pos, has_gauss, cached), state["torch"])


def set_rng_state(state: dict[str, Any]) -> None:
    py, npy, tor = rng_states(state)
    random.setstate(py)
    np.random.set_state(npy)
    torch.set_rng_state(tor)
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def resolve_device(name: str = "auto") -> torch.device:
    """``auto`` picks cuda, then mps, then cpu."""
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    check_device_name(name)
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"--device {name}: CUDA is not available on this machine")
    if name.startswith("cuda:") and int(name[5:]) >= torch.cuda.device_count():
        n = torch.cuda.device_count()
        raise ValueError(f"--device {name}: this machine has {n} CUDA device(s) (cuda:0..cuda:{n - 1})")
    if name == "mps" and not (getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()):
        raise ValueError("--device mps: Apple's MPS backend is not available on this machine")
    return torch.device(name)


def atomic_write_json(path: Path, data: Any) -> None:
    """:func:`fusebench.io.atomic_write_json`, numpy scalars / arrays, tensors and paths converted."""
    io.atomic_write_json(path, data, default=_json_default)


def create_json_once(path: Path, data: Any) -> bool:
    """:func:`fusebench.io.create_once` of ``data`` in :func:`atomic_write_json`'s layout: True when this call
    created ``path``, False when it was there (kept as it is)."""
    return io.create_once(path, (io.strict_json(data, indent=2, sort_keys=True, default=_json_default) + "\n")
                          .encode("utf-8"))


def _json_default(obj: Any) -> Any:
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.floating,)):
        return float(obj)
    if isinstance(obj, (np.ndarray, torch.Tensor)):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def atomic_torch_save(obj: Any, path: Path) -> None:
    """``torch.save`` to ``path`` whole or not at all (:func:`fusebench.io.atomic_write`)."""
    io.atomic_write(path, lambda name: torch.save(obj, name), by_name=True)


#: tracked paths that runs and leaderboard regeneration write to; they never make a checkout "dirty"
GENERATED_PATHS = ("leaderboards",)


def git_info(repo: str | Path | None = None) -> dict[str, Any]:
    """The suite's git sha and dirty flag (None where not a git checkout).

    ``dirty`` is True when a tracked source file differs from the commit; the generated outputs under
    :data:`GENERATED_PATHS` (leaderboard markdown, plots, committed run records) are excluded, since a
    sweep rewrites them itself and must not mark its own later cells dirty. ``dirty_files`` lists the
    first 20 modified paths so a dirty record says why."""
    here = Path(repo) if repo is not None else Path(__file__).resolve().parents[2]
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=10)
        if sha.returncode != 0:
            return {"sha": None, "dirty": None}
        excludes = [f":(exclude){p}" for p in GENERATED_PATHS]
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".", *excludes],
                               cwd=here, capture_output=True, text=True, timeout=10)
        files = [line[3:] for line in dirty.stdout.splitlines() if line.strip()]
        return {"sha": sha.stdout.strip(), "dirty": bool(files), "dirty_files": files[:20]}
    except (OSError, subprocess.SubprocessError):
        return {"sha": None, "dirty": None}


def peak_memory_mb(device: torch.device) -> float:
    """Peak memory of this process: CUDA allocator peak on GPU, max RSS on CPU (MiB)."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def to_device(batch: Any, device: torch.device) -> Any:
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, dict):
        return {k: to_device(v, device) for k, v in batch.items()}
    if isinstance(batch, list):
        return [to_device(v, device) for v in batch]
    return batch


#: whether the per-step checks that read tensor values on the host are deferred (:func:`deferred_value_checks`)
_DEFERRED_CHECKS: ContextVar[bool] = ContextVar("fusebench_deferred_value_checks", default=False)


@contextmanager
def deferred_value_checks() -> Iterator[None]:
    """Inside, the per-step code skips the checks that read tensor values on the host (each one a wait for the
    device on a GPU): the NaN / Inf scans of an objective's inputs, the test whether a presence mask is full,
    VoteNet's label bounds. The training loop (:func:`fusebench.engine.loop.run_phase`) runs its steps in
    it: it checks the batch on the host before the copy (masks, labels) and the loss for NaN / Inf itself,
    every few steps and before every checkpoint. Outside (a direct call) every check runs."""
    token = _DEFERRED_CHECKS.set(True)
    try:
        yield
    finally:
        _DEFERRED_CHECKS.reset(token)


#: steps between two reads of the losses on the host (loss curve, progress bar, non-finite guard)
LOSS_READ_EVERY = 16


def read_losses(losses: list[Any]) -> list[float]:
    """The values of the 0-dim tensors ``losses`` as Python floats, in one copy from the device (widened to their
    common dtype first: exact, so each value is ``float(loss)``): how a training loop reads its losses every
    :data:`LOSS_READ_EVERY` steps instead of waiting for the device at every step."""
    if not losses:
        return []
    import functools

    dtype = functools.reduce(torch.promote_types, [v.dtype for v in losses])
    return torch.stack([v.reshape(()).to(dtype) for v in losses]).tolist()


def value_checks() -> bool:
    """False inside :func:`deferred_value_checks` (the caller checks on the host), True otherwise."""
    return not _DEFERRED_CHECKS.get()


@contextmanager
def single_thread() -> Iterator[None]:
    """Run torch ops on one intra-op thread (restored afterwards): these matrices are small, so threads
    only add overhead (and contention on a busy machine), and one thread fixes the reduction order."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)
