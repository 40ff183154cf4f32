"""Optimisers and learning-rate schedules of the training phases (engine layer)."""

from __future__ import annotations

import math

import torch

def build_optimizer(params, name: str, lr: float, weight_decay: float):
    params = [p for p in params if p.requires_grad]
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=0.9, weight_decay=weight_decay)
    return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)


def build_scheduler(opt, name: str, total_steps: int, warmup_steps: int):
    def factor(step: int) -> float:
        if warmup_steps and step < warmup_steps:
            return (step + 1) / warmup_steps
        if name == "constant" or total_steps <= warmup_steps:
            return 1.0
        t = (step - warmup_steps) / max(1, total_steps - warmup_steps)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, t)))

    return torch.optim.lr_scheduler.LambdaLR(opt, factor)
