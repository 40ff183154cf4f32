"""Optimisers and learning-rate schedules of the training phases (engine layer)."""

from __future__ import annotations

import math

import torch

from fusebench.runtime.utils import optimizer_class


def build_optimizer(params, name: str, lr: float, weight_decay: float, impl: str = "default"):
    """AdamW (``name`` ``adamw``) or SGD with momentum 0.9 (``sgd``) over the parameters that require a
    gradient. ``impl`` (``speed.optimizer_impl``) picks PyTorch's implementation: ``default`` (PyTorch's
    choice: the multi-tensor one on CUDA, the per-parameter loop on the CPU), ``foreach`` (multi-tensor)
    or ``fused`` (one fused kernel; where PyTorch has it for the parameters' device and dtype: CUDA, and
    the CPU in recent versions; elsewhere a ValueError naming the option, never a silent fallback, since
    the config hash says ``fused``)."""
    if impl not in ("default", "foreach", "fused"):
        raise ValueError(f"speed.optimizer_impl: expected default, foreach or fused, got {impl!r}")
    params = [p for p in params if p.requires_grad]
    kw = {} if impl == "default" else {impl: True}
    try:
        if name == "sgd":
            return optimizer_class(torch.optim.SGD)(params, lr=lr, momentum=0.9, weight_decay=weight_decay, **kw)
        return optimizer_class(torch.optim.AdamW)(params, lr=lr, weight_decay=weight_decay, **kw)
    except RuntimeError as e:
        if impl == "default":
            raise
        devices = sorted({str(p.device) for p in params})
        raise ValueError(f"speed.optimizer_impl={impl}: PyTorch {torch.__version__} refuses it for these parameters "
                         f"(devices {devices}): {e}; use speed.optimizer_impl=default or foreach") from e


def build_scheduler(opt, name: str, total_steps: int, warmup_steps: int):
    def factor(step: int) -> float:
        if warmup_steps and step < warmup_steps:
            return (step + 1) / warmup_steps
        if name == "constant" or total_steps <= warmup_steps:
            return 1.0
        t = (step - warmup_steps) / max(1, total_steps - warmup_steps)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, t)))

    return torch.optim.lr_scheduler.LambdaLR(opt, factor)
