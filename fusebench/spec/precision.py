"""The precision policy of a run: which dtype the encoders and heads compute in.

A spec's ``precision:`` (``fusebench run --precision``) takes the names users know from Lightning:

============== ============================================================================================
``32``         float32 everywhere (the default; every committed record was made with it). On CUDA the TF32
               matrix units are switched *off* for matrix products and convolutions (PyTorch turns them on
               for cuDNN convolutions by default), so a GPU run computes what a CPU run computes.
``tf32``       float32 storage, TF32 matrix units for matrix products and convolutions on CUDA (about 10
               mantissa bits in the products). On the CPU it is the same computation as ``32``.
``bf16-mixed`` ``torch.autocast`` with bfloat16 around the encoders and heads (forward and loss of a step);
               parameters, optimiser state and gradients stay float32.
``16-mixed``   ``torch.autocast`` with float16 and a gradient scaler (``torch.amp.GradScaler``: the loss is
               scaled before the backward pass, steps whose gradients overflow are skipped, and the scale
               adapts); its state goes into ``last.pt`` so a resumed run is the same run.
============== ============================================================================================

The policy applies to encoders and heads only: every objective runs with autocast disabled and
half-precision inputs upcast (:class:`fusebench.objectives.base.MultiViewObjective`), and metrics
reduce in float64 (:mod:`fusebench.metrics`). The precision is part of the spec, so it enters the
config hash and the comparability key when it is not the default: runs of different precisions are
never averaged together (the default ``32`` is left out of the hashed form, so every existing record
keeps its hash). Each record says what decided its numerics (:func:`numerics`).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator

if TYPE_CHECKING:  # torch is imported where it is used: records and boards read the names without it
    import torch

DEFAULT = "32"


@dataclass(frozen=True)
class Precision:
    """One precision policy (see the module docstring)."""

    name: str
    autocast_dtype: str | None  # a torch dtype's name; None: no autocast
    tf32: bool  # TF32 matrix units on CUDA
    grad_scaler: bool
    summary: str


PRECISIONS: dict[str, Precision] = {p.name: p for p in (
    Precision("32", None, False, False, "float32 everywhere; TF32 off on CUDA"),
    Precision("tf32", None, True, False, "float32 storage, TF32 matrix units on CUDA (no effect on the CPU)"),
    Precision("bf16-mixed", "bfloat16", False, False, "bfloat16 autocast for encoders and heads"),
    Precision("16-mixed", "float16", False, True, "float16 autocast for encoders and heads, gradient scaler"),
)}


def check(name: Any, where: str = "precision") -> str:
    """The canonical name of precision ``name`` (``32`` may be given as an integer, as YAML reads it);
    anything else is a ``ValueError`` naming ``where`` and the valid names."""
    text = str(name) if isinstance(name, int) and not isinstance(name, bool) else name
    if not isinstance(text, str) or text not in PRECISIONS:
        raise ValueError(f"{where}: unknown precision {name!r}; valid: {', '.join(PRECISIONS)} "
                         "(32 = float32, tf32 = TF32 matrix units on CUDA, bf16-mixed / 16-mixed = autocast "
                         "for encoders and heads)")
    return text


def get(name: Any) -> Precision:
    return PRECISIONS[check(name)]


def autocast(policy: Precision, device: torch.device) -> Any:
    """The autocast context of the encoders and heads (a disabled one for ``32`` / ``tf32``)."""
    import torch

    if policy.autocast_dtype is None:
        return torch.autocast(device.type if device.type in ("cuda", "cpu") else "cpu", enabled=False)
    if device.type not in ("cuda", "cpu", "mps", "xpu"):
        raise ValueError(f"precision {policy.name!r}: autocast is not available on device {device}")
    return torch.autocast(device.type, dtype=getattr(torch, policy.autocast_dtype))


def grad_scaler(policy: Precision, device: torch.device) -> torch.amp.GradScaler | None:
    """A gradient scaler for ``16-mixed`` (None otherwise)."""
    import torch

    return torch.amp.GradScaler(device.type) if policy.grad_scaler else None


def backward_step(loss: Any, optimizer: Any, scaler: Any) -> None:
    """``loss.backward()`` then ``optimizer.step()``; at ``16-mixed`` through the gradient ``scaler`` (scaled
    backward, a step skipped when the gradients overflowed, the scale updated)."""
    if scaler is None:
        loss.backward()
        optimizer.step()
        return
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()


def step_scheduler(scheduler: Any, scaler: Any) -> None:
    """``scheduler.step()``; with a gradient scaler, without PyTorch's warning that the optimiser did
    not step first (the scaler skips the steps whose gradients overflowed, the first ones among them
    while it finds its scale; the schedule counts them like every training loop with a scaler does)."""
    if scaler is None:
        scheduler.step()
        return
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"Detected call of `lr_scheduler.step\(\)` before")
        scheduler.step()


def _tf32_state() -> dict[str, Any]:
    import torch

    if hasattr(torch.backends.cuda.matmul, "fp32_precision"):  # the fp32_precision API (PyTorch >= 2.9)
        return {"matmul": torch.backends.cuda.matmul.fp32_precision,
                "conv": torch.backends.cudnn.conv.fp32_precision,
                "rnn": torch.backends.cudnn.rnn.fp32_precision}
    return {"matmul": torch.backends.cuda.matmul.allow_tf32, "conv": torch.backends.cudnn.allow_tf32}


def _set_tf32(state: dict[str, Any]) -> None:
    import torch

    if hasattr(torch.backends.cuda.matmul, "fp32_precision"):
        torch.backends.cuda.matmul.fp32_precision = state["matmul"]
        torch.backends.cudnn.conv.fp32_precision = state["conv"]
        torch.backends.cudnn.rnn.fp32_precision = state["rnn"]
    else:  # pragma: no cover - older PyTorch
        torch.backends.cuda.matmul.allow_tf32 = state["matmul"]
        torch.backends.cudnn.allow_tf32 = state["conv"]


def _tf32_for(on: bool) -> dict[str, Any]:
    import torch

    if hasattr(torch.backends.cuda.matmul, "fp32_precision"):
        v = "tf32" if on else "ieee"
        return {"matmul": v, "conv": v, "rnn": v}
    return {"matmul": on, "conv": on}  # pragma: no cover - older PyTorch


def tf32_enabled() -> dict[str, bool]:
    """Whether CUDA matrix products / cuDNN convolutions may use TF32 now."""
    s = _tf32_state()
    on = (lambda v: v == "tf32") if isinstance(s["matmul"], str) else bool
    return {"matmul": on(s["matmul"]), "conv": on(s["conv"])}


@contextlib.contextmanager
def backend_flags(policy: Precision) -> Iterator[None]:
    """Set the process-wide TF32 switches for ``policy`` and restore the previous ones afterwards.
    The switches act on CUDA kernels only; they are set on every machine, so the record says the same
    thing whatever the device."""
    before = _tf32_state()
    _set_tf32(_tf32_for(policy.tf32))
    try:
        yield
    finally:
        _set_tf32(before)


def _new_api() -> bool:
    import torch

    return hasattr(torch.backends.cuda.matmul, "fp32_precision")  # the fp32_precision API (PyTorch >= 2.9)


def matmul_precision_key() -> tuple:
    """What a float32 matrix product on CUDA may compute in now (whether TF32 may be used), read through the
    API the process sets the switches with: the ``fp32_precision`` settings where PyTorch has them (after a
    setting through that API, PyTorch refuses to read the legacy getters), else the legacy ones."""
    import torch

    if _new_api():
        return ("fp32_precision", torch.backends.fp32_precision, torch.backends.cuda.matmul.fp32_precision)
    return ("legacy", torch.backends.cuda.matmul.allow_tf32,  # pragma: no cover - older PyTorch
            torch.get_float32_matmul_precision())


@contextlib.contextmanager
def full_float32() -> Iterator[None]:
    """Full float32 matrix products and convolutions on CUDA inside (``fp32_precision = "ieee"`` for cuBLAS
    and cuDNN; the legacy ``allow_tf32`` pair on older PyTorch), the previous switches restored afterwards:
    objectives and metrics compute in float32 whatever the precision policy (``tf32`` included). Nothing is
    set when the switches are already off (precision ``32``: the common case costs three reads)."""
    before = _tf32_state()
    off = _tf32_for(False)
    if before == off:
        yield
        return
    _set_tf32(off)
    try:
        yield
    finally:
        _set_tf32(before)


def device_name(device: torch.device) -> str:
    import torch

    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    if device.type == "cpu":
        from fusebench.machine import cpu_model

        return cpu_model()
    return device.type


def numerics(policy: Precision, device: torch.device) -> dict[str, Any]:
    """What decides a run's numbers on its device, for ``run.json``: the precision and how it was
    applied, the device's name, the CUDA / cuDNN versions (None on the CPU), the deterministic
    settings and the TF32 switches in force (measured, not assumed: call inside :func:`backend_flags`)."""
    import torch

    cuda = device.type == "cuda"
    tf32 = tf32_enabled()
    return {
        "precision": policy.name,
        "autocast_dtype": policy.autocast_dtype,
        "grad_scaler": policy.grad_scaler,
        "objectives_dtype": "float32 or wider (autocast disabled inside every objective)",
        "device_type": device.type,
        "device_name": device_name(device),
        "cuda_version": torch.version.cuda if cuda else None,
        "cudnn_version": torch.backends.cudnn.version() if cuda and torch.backends.cudnn.is_available() else None,
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "deterministic_warn_only": torch.is_deterministic_algorithms_warn_only_enabled(),
        "cudnn_deterministic": bool(torch.backends.cudnn.deterministic),
        "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
        "cuda_tf32_matmul": tf32["matmul"],  # the CUDA switches (no effect on other devices)
        "cuda_tf32_conv": tf32["conv"],
        "fp32_precision": _fp32_precision_settings(),
    }


def _fp32_precision_settings() -> dict[str, Any]:
    """The float32 precision switch of every backend, as PyTorch reports it (``none`` = the backend's
    default, ``ieee`` = full float32, ``tf32`` / ``bf16`` = reduced-precision products). Read per
    backend: after a per-backend setting, PyTorch refuses the global getter."""
    import torch

    if not hasattr(torch.backends.cuda.matmul, "fp32_precision"):  # pragma: no cover - older PyTorch
        return {"float32_matmul_precision": torch.get_float32_matmul_precision()}
    out: dict[str, Any] = {"cuda.matmul": torch.backends.cuda.matmul.fp32_precision,
                           "cudnn.conv": torch.backends.cudnn.conv.fp32_precision,
                           "cudnn.rnn": torch.backends.cudnn.rnn.fp32_precision}
    mkldnn = getattr(torch.backends, "mkldnn", None)
    for name in ("matmul", "conv", "rnn"):  # the CPU's oneDNN kernels
        sub = getattr(mkldnn, name, None)
        if sub is not None and hasattr(sub, "fp32_precision"):
            out[f"mkldnn.{name}"] = sub.fp32_precision
    return out


__all__ = ["DEFAULT", "PRECISIONS", "Precision", "autocast", "backend_flags", "backward_step", "check", "full_float32", "get",
           "grad_scaler", "matmul_precision_key", "step_scheduler", "numerics", "tf32_enabled"]
