"""The one training-phase loop, shared by pretraining and the downstream protocol.

A phase (:class:`Phase`) owns its counters (step, epoch, step within the epoch), its curves and the
modules whose state goes into ``last.pt``; :func:`run_phase` walks its epochs and steps and does what
every phase needs, in this order per step: move the batch to the device, compute the loss (under
``autocast``), stop on a non-finite loss (checkpoint kept), optimise, count, record the loss curve,
update the progress bar (a tqdm bar or log lines: :mod:`fusebench.training.progress`), checkpoint
every ``every`` steps, and honour the step budget. What differs between phases (how the loss is
computed and optimised, what happens at an epoch's start and end, the extra state saved with a
checkpoint) comes in as :class:`PhaseHooks`.

Resuming restores a phase from ``last.pt`` (:meth:`Phase.restore`, RNG state included) and
:func:`run_phase` continues at the saved step: the loader skips the batches already seen in the
interrupted epoch, so a resumed run equals an uninterrupted one.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import torch

from fusebench.training import distributed, utils


class RunError(RuntimeError):
    """A run cannot go on: diverged loss, unreadable checkpoint, existing record."""


@dataclass
class StepBudget:
    """At most ``max_steps`` optimisation steps over all phases of a run (None: no limit). When the
    budget is spent the phase checkpoints and :class:`KeyboardInterrupt` is raised, as if the run had
    been killed there (``resume`` continues it)."""

    max_steps: int | None = None
    done: int = 0

    def spend(self) -> bool:
        """Count one step; True when the budget is now exhausted."""
        self.done += 1
        return self.max_steps is not None and self.done >= self.max_steps


class Clock:
    """Time spent in segments: the durations of earlier processes' segments (from a checkpoint) plus
    the running one, which started when the clock was made. A resumed run's time is the sum, so a
    kill and ``--resume`` report the time of the work kept, not that of the last process only."""

    def __init__(self, before: Iterable[float] = ()) -> None:
        self.before = [float(t) for t in before]
        self.t0 = time.monotonic()

    def segments(self) -> list[float]:
        return [*self.before, time.monotonic() - self.t0]

    def total(self) -> float:
        return sum(self.segments())


class Phase:
    """A training phase (pretrain or downstream) with step-level checkpointing and resume.
    ``config_hash`` and ``data_fingerprint`` are saved with every checkpoint (a resume on another
    configuration or other data is refused); ``clock`` times the phase across resumed segments."""

    def __init__(self, name: str, cell: Path, every: int, state_modules: dict[str, Any]) -> None:
        self.name, self.cell, self.every, self.mods = name, cell, every, state_modules
        self.step = 0
        self.epoch = 0
        self.step_in_epoch = 0
        self.curves: dict[str, list[float]] = {}
        self.config_hash: str | None = None
        self.data_fingerprint: str | None = None
        self.clock = Clock()

    def state(self) -> dict[str, Any]:
        return {
            "phase": self.name, "step": self.step, "epoch": self.epoch, "step_in_epoch": self.step_in_epoch,
            "curves": self.curves, "rng": utils.rng_state(), "time_segments_s": self.clock.segments(),
            **{k: m.state_dict() for k, m in self.mods.items()},
        }

    def save(self, extra: dict[str, Any] | None = None) -> None:
        if distributed.rank() != 0:  # one writer
            return
        utils.atomic_torch_save({**self.state(), "config_hash": self.config_hash,
                                 "data_fingerprint": self.data_fingerprint, **(extra or {})}, self.cell / "last.pt")

    def restore(self, ckpt: dict[str, Any]) -> None:
        for k, m in self.mods.items():
            m.load_state_dict(ckpt[k])
        self.step, self.epoch, self.step_in_epoch = ckpt["step"], ckpt["epoch"], ckpt["step_in_epoch"]
        self.curves = ckpt["curves"]
        self.clock = Clock(ckpt.get("time_segments_s", ()))  # the segments of the processes before this one
        utils.set_rng_state(ckpt["rng"])


def _nothing() -> None:
    return None


@dataclass
class PhaseHooks:
    """What a phase does that the loop does not know.

    ``loss(batch)``: the loss of one batch (already on the device); ``optimise(loss)``: backward,
    optimiser and scheduler steps and anything tied to the step (an EMA teacher update), called
    before the step counter moves; ``loader(epoch, skip)``: the epoch's batches without the first
    ``skip``; ``on_epoch_start`` / ``on_epoch_end``: called before the first batch and after the last
    one of every epoch (before the epoch counter moves); ``extra()``: state saved with every
    checkpoint besides the phase's modules; ``diverged(value)``: the message of the
    :class:`RunError` raised on a non-finite loss; ``postfix(value)``: progress-bar fields (also the
    fields of the progress lines written when stderr is not a terminal)."""

    loss: Callable[[Any], torch.Tensor]
    optimise: Callable[[torch.Tensor], None]
    loader: Callable[[int, int], Iterable[Any]]
    diverged: Callable[[float], str]
    on_epoch_start: Callable[[], None] = _nothing
    on_epoch_end: Callable[[], None] = _nothing
    extra: Callable[[], dict[str, Any] | None] = _nothing
    postfix: Callable[[float], dict[str, str]] = field(default=lambda v: {"loss": f"{v:.4f}"})


def batch_size(batch: Any) -> int:
    """The number of samples in a collated batch (its targets: a tensor or a list of dicts)."""
    try:
        return len(batch["target"])
    except (KeyError, TypeError):
        return 0


def run_phase(phase: Phase, epochs: int, hooks: PhaseHooks, device: torch.device, autocast: Any, curve: str,
              bar: Any, budget: StepBudget, checkpoint_each_epoch: bool = False,
              on_step: Callable[[Phase, float, int], None] | None = None,
              on_epoch_start: Callable[[Phase], None] | None = None) -> None:
    """Run ``phase`` from where it stands to ``epochs`` epochs (see the module docstring).
    For experiment trackers (they must not touch the training): ``on_step(phase, value, batch_size)``
    is called after every counted step with the loss value just recorded in the curve, and
    ``on_epoch_start(phase)`` just before an epoch's first batch is fetched."""
    while phase.epoch < epochs:
        loader = hooks.loader(phase.epoch, phase.step_in_epoch)
        hooks.on_epoch_start()
        if on_epoch_start is not None:
            on_epoch_start(phase)
        for batch in loader:
            batch = utils.to_device(batch, device)
            with autocast:
                loss = hooks.loss(batch)
            if not torch.isfinite(loss):
                phase.save(hooks.extra())
                raise RunError(hooks.diverged(float(loss.detach())))
            hooks.optimise(loss)
            phase.step += 1
            phase.step_in_epoch += 1
            value = float(loss.detach())
            phase.curves.setdefault(curve, []).append(value)
            if on_step is not None:
                on_step(phase, value, batch_size(batch))
            bar.set_postfix(refresh=False, **hooks.postfix(value))  # then shown (or written) by update
            bar.update(1)
            if phase.step % phase.every == 0:
                phase.save(hooks.extra())
            if budget.spend():
                phase.save(hooks.extra())
                bar.close()
                raise KeyboardInterrupt("max_steps reached (simulated kill)")
        hooks.on_epoch_end()
        phase.epoch += 1
        phase.step_in_epoch = 0
        if checkpoint_each_epoch:
            phase.save(hooks.extra())
