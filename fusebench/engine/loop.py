"""The one training-phase loop, shared by pretraining and the downstream protocol.

A phase (:class:`Phase`) owns its counters (step, epoch, step within the epoch), its curves and the
modules whose state goes into ``last.pt``; :func:`run_phase` walks its epochs and steps and does what
every phase needs, in this order per step: prepare the batch on the host (``hooks.host``: its format,
the checks of masks and labels) and move it to the device, compute the loss (under ``autocast``),
optimise, count, update the progress bar (a tqdm bar or log lines: :mod:`fusebench.runtime.progress`),
checkpoint every ``every`` steps, and honour the step budget. What differs between phases (how the loss is
computed and optimised, what happens at an epoch's start and end, the extra state saved with a
checkpoint) comes in as :class:`PhaseHooks`.

No step waits for the device: the losses stay on it and are read in one copy every
:data:`LOSS_READ_EVERY` steps, before every checkpoint and at an epoch's end (every step when an
experiment tracker logs each step, or progress lines are asked for every step with
``FUSEBENCH_LOG_EVERY=0``); then they go into the loss curve and a non-finite one stops the phase
with a :class:`RunError` naming its step. A checkpoint is written only after the losses of every step
before it were read and found finite, so the parameters a non-finite loss damaged never reach ``last.pt``
(it keeps the last checkpoint written before). The per-step checks that would read the device are
deferred to the loop inside the steps (:func:`fusebench.runtime.utils.deferred_value_checks`).

Resuming restores a phase from ``last.pt`` (:meth:`Phase.restore`, RNG state included) and
:func:`run_phase` continues at the saved step: the loader skips the batches already seen in the
interrupted epoch, so a resumed run equals an uninterrupted one.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import torch

from fusebench.components.identity import cell_versions, frozen_choice, spec_hash
from fusebench.datasets.errors import DatasetError
from fusebench.runtime import distributed, utils
from fusebench.typed import ConfigError


#: steps between two reads of the losses on the host (loss curve, progress bar, non-finite guard)
LOSS_READ_EVERY = utils.LOSS_READ_EVERY
read_losses = utils.read_losses  # the one copy of the losses to the host (also TupleInfoNCE's candidate training)


class RunError(RuntimeError):
    """A run cannot go on: diverged loss, unreadable checkpoint, existing record."""


_MISSING = object()


def checkpoint_error(path: Path, key: str, expected: str, got: Any = _MISSING, problem: str | None = None) -> RunError:
    """The one error of a checkpoint that is not as this code writes it: the file, the key, what was expected (and
    what was found; or ``problem``: why what was found does not do)."""
    found = problem or ("it is missing" if got is _MISSING else f"got {shown_value(got)}")
    return RunError(f"cannot resume: {path}: key {key!r}: expected {expected}, {found} (a damaged or edited "
                    "checkpoint?); the file was left as it is — delete it to start over")


def shown_value(v: Any) -> str:
    """``v`` as a checkpoint error shows what was found: its type and, for a scalar, its value."""
    if v is None or isinstance(v, bool):
        return repr(v)
    if isinstance(v, (int, float)):
        return f"{type(v).__name__} {v!r}"
    if isinstance(v, str):
        return f"string {v[:60]!r}"
    if torch.is_tensor(v):
        return f"a tensor of shape {list(v.shape)} ({v.dtype})"
    if isinstance(v, (dict, list, tuple)):
        return f"a {type(v).__name__} of {len(v)}"
    return f"a {type(v).__name__}"


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
    ``config_hash``, ``versions`` (the code's: :func:`fusebench.components.identity.cell_versions`) and
    ``data_fingerprint`` are saved with every checkpoint (a resume on another configuration, other code or other
    data is refused: :func:`fusebench.engine.cell.check_checkpoint_config`); ``clock`` times the phase across
    resumed segments."""

    def __init__(self, name: str, cell: Path, every: int, state_modules: dict[str, Any]) -> None:
        self.name, self.cell, self.every, self.mods = name, cell, every, state_modules
        self.step = 0
        self.epoch = 0
        self.step_in_epoch = 0
        self.curves: dict[str, list[float]] = {}
        self.config_hash: str | None = None
        self.versions: dict[str, Any] | None = None
        self.data_fingerprint: str | None = None
        self.config: dict[str, Any] | None = None  # the spec's canonical form: a refused resume names what changed
        self.hparam_choice: dict[str, Any] | None = None  # the frozen selection's point the cell runs at (None: none)
        self.clock = Clock()
        self.finite_at: int | None = None  # the step whose weights check_finite_state found finite

    def identify(self, spec: Any, objective: str, data_fingerprint: str | None,
                 context: Mapping[str, Any] | None = None) -> None:
        """What the checkpoints say made them: ``objective``'s config hash and code versions under ``spec``, the
        fingerprint of the data read, and the grid point the sweep's frozen selection chose for it (``context``'s
        ``hparam_selection``: the config hash does not cover it)."""
        self.config_hash, self.versions = spec_hash(spec, objective), cell_versions(spec, objective)
        self.data_fingerprint = data_fingerprint
        self.config = spec.to_dict()
        self.hparam_choice = frozen_choice(context, objective)

    def state(self) -> dict[str, Any]:
        return {
            "phase": self.name, "step": self.step, "epoch": self.epoch, "step_in_epoch": self.step_in_epoch,
            "curves": self.curves, "rng": utils.rng_state(), "time_segments_s": self.clock.segments(),
            **{k: m.state_dict() for k, m in self.mods.items()},
        }

    def save(self, extra: dict[str, Any] | None = None) -> None:
        """Write ``last.pt``, unless the weights hold a NaN or an infinity (:func:`check_finite_state`: a
        :class:`RunError`, and the checkpoint before stays the cell's)."""
        if distributed.rank() != 0:  # one writer
            return
        check_finite_state(self, f"checkpoint {self.cell / 'last.pt'}")
        utils.atomic_torch_save({**self.state(), "config_hash": self.config_hash, "versions": self.versions,
                                 "data_fingerprint": self.data_fingerprint, "hparam_choice": self.hparam_choice,
                                 **({"config": self.config} if self.config is not None else {}), **(extra or {})},
                                self.cell / "last.pt")

    def restore(self, ckpt: dict[str, Any]) -> None:
        """Continue from ``ckpt`` (``last.pt`` as :func:`fusebench.engine.cell.load_checkpoint` returned it, its
        structure checked): each module's state loaded into this phase's (strictly: a missing state, a name or a
        shape that does not fit, an optimizer state of another parameter's shape is a :class:`RunError` naming the
        file and the key, never a bare KeyError or a failure in a later step), then the counters, the curves, the
        clock and the RNG states."""
        path = self.cell / "last.pt"
        for k, m in self.mods.items():
            expected = f"the state of the {self.name} phase's {type(m).__name__}"
            if k not in ckpt:
                raise checkpoint_error(path, k, expected)
            try:
                m.load_state_dict(ckpt[k])
                problem = _optimizer_shapes(m) if isinstance(m, torch.optim.Optimizer) else None
            except Exception as e:  # noqa: BLE001 - a state that does not fit, whatever the module says of it
                problem = f"{type(e).__name__}: {' '.join(str(e).split())[:400]}"
            if problem:
                raise checkpoint_error(path, k, expected, problem=f"which it does not fit: {problem}")
        self.step, self.epoch, self.step_in_epoch = ckpt["step"], ckpt["epoch"], ckpt["step_in_epoch"]
        self.curves = ckpt["curves"]
        self.clock = Clock(ckpt.get("time_segments_s", ()))  # the segments of the processes before this one
        utils.set_rng_state(ckpt["rng"])


def _optimizer_shapes(opt: torch.optim.Optimizer) -> str | None:
    """Where a loaded optimizer state holds a tensor (other than a scalar: a step count) of another shape than its
    parameter (AdamW's moments, SGD's momentum are the parameter's shape; ``load_state_dict`` does not check), or
    None."""
    bad = [f"parameter {i} of group {g} (shape {list(p.shape)}): {name} of shape {list(v.shape)}"
           for g, group in enumerate(opt.param_groups) for i, p in enumerate(group["params"])
           for name, v in opt.state.get(p, {}).items() if torch.is_tensor(v) and v.dim() and v.shape != p.shape]
    return f"state of another shape than its parameter: {'; '.join(bad[:3])}" if bad else None


def nonfinite_tensors(modules: dict[str, Any]) -> list[str]:
    """The names (``<module>.<tensor>``) of the floating-point parameters and buffers of the ``nn.Module`` values of
    ``modules`` that hold a NaN or an infinity: one device read for all of them (a norm per tensor, stacked; a
    non-finite entry makes its norm non-finite). What a checkpoint must not keep: a finite loss can come with a
    non-finite gradient, and the weights it leaves are then NaN."""
    named = [(f"{k}.{n}", t) for k, m in modules.items() if isinstance(m, torch.nn.Module)
             for n, t in m.state_dict().items() if torch.is_tensor(t) and t.is_floating_point() and t.numel()]
    if not named:
        return []
    by_device: dict[torch.device, list[int]] = {}
    for i, (_, t) in enumerate(named):
        by_device.setdefault(t.device, []).append(i)
    bad: list[str] = []
    for idx in by_device.values():
        norms = torch._foreach_norm([named[i][1].detach().float() for i in idx])
        finite = torch.isfinite(torch.stack(norms)).cpu().tolist()  # one read per device, at a checkpoint only
        bad += [named[i][0] for i, ok in zip(idx, finite) if not ok]
    return bad


def check_finite_state(phase: "Phase", what: str) -> None:
    """A :class:`RunError` naming the phase, the step and the first tensors when the phase's modules hold non-finite
    values; called before ``what`` (a checkpoint, ``best.pt``) is written, so none is ever written with them."""
    if phase.finite_at == phase.step:  # checked at this step already (a downstream epoch's end, then its save)
        return
    bad = nonfinite_tensors(phase.mods)
    if not bad:
        phase.finite_at = phase.step
    else:
        shown = ", ".join(bad[:3]) + (f" and {len(bad) - 3} more" if len(bad) > 3 else "")
        last = phase.cell / "last.pt"
        kept = (f"the checkpoint {last} is from before (resuming repeats the same steps: change the setting that "
                f"diverges)" if last.exists() else "no checkpoint was kept")
        raise RunError(f"{phase.cell}: the {phase.name} weights are not finite after step {phase.step} (epoch "
                       f"{phase.epoch}) although its losses were: a non-finite gradient ({shown}); {what} not "
                       f"written; {kept}")


def _nothing() -> None:
    return None


def _as_is(batch: Any) -> Any:
    return batch


@dataclass
class PhaseHooks:
    """What a phase does that the loop does not know.

    ``host(batch)``: the batch as the step wants it, made on the host before the copy to the device (its
    format; checks of masks and labels, which then cost no wait for the device);
    ``loss(batch)``: the loss of one batch (already on the device); ``optimise(loss)``: backward,
    optimiser and scheduler steps and anything tied to the step (an EMA teacher update), called
    before the step counter moves; ``loader(epoch, skip)``: the epoch's batches without the first
    ``skip``; ``on_epoch_start`` / ``on_epoch_end``: called before the first batch and after the last
    one of every epoch (before the epoch counter moves); ``extra()``: state saved with every
    checkpoint besides the phase's modules; ``diverged(value, step, epoch)``: the message of the
    :class:`RunError` raised on a non-finite loss at step ``step`` (counted from 1, as the loop's other messages,
    the checkpoint's step count and the trackers' x count steps) of epoch ``epoch`` (the loop adds which checkpoint
    was kept); ``postfix(value)``: progress-bar fields (also the fields of the progress lines written when stderr is
    not a terminal)."""

    loss: Callable[[Any], torch.Tensor]
    optimise: Callable[[torch.Tensor], None]
    loader: Callable[[int, int], Iterable[Any]]
    diverged: Callable[[float, int, int], str]
    host: Callable[[Any], Any] = _as_is
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


class _Unread:
    """The losses of the steps not read yet (on the device) and what the loop does once they are read."""

    def __init__(self, phase: Phase, hooks: PhaseHooks, curve: str, bar: Any,
                 on_step: Callable[[Phase, float, int], None] | None) -> None:
        self.phase, self.hooks, self.curve, self.bar, self.on_step = phase, hooks, curve, bar, on_step
        self.steps: list[tuple[int, int, int]] = []  # (step, epoch, batch size)
        self.losses: list[torch.Tensor] = []
        self.saved: int | None = None  # the step count of the last checkpoint this process wrote

    def add(self, loss: torch.Tensor, size: int) -> None:
        self.steps.append((self.phase.step, self.phase.epoch, size))
        self.losses.append(loss.detach())

    def __len__(self) -> int:
        return len(self.steps)

    def read(self) -> None:
        """Read the pending losses (one copy): into the curve, the trackers and the progress bar; a
        :class:`RunError` at the first non-finite one."""
        if not self.steps:
            return
        values, steps = read_losses(self.losses), self.steps
        self.steps, self.losses = [], []
        curve = self.phase.curves.setdefault(self.curve, [])
        for (step, epoch, size), value in zip(steps, values):
            if not math.isfinite(value):
                raise RunError(f"{self.hooks.diverged(value, step + 1, epoch)}; {self.kept()}")  # counted from 1
            curve.append(value)
            if self.on_step is not None:
                self.on_step(self.phase, value, size)
        self.bar.set_postfix(refresh=False, **self.hooks.postfix(values[-1]))  # shown (or written) by update

    def kept(self, before: str = "the loss diverged") -> str:
        """Which checkpoint the cell keeps, written before ``before`` happened."""
        last = self.phase.cell / "last.pt"
        if self.saved is not None:
            return f"checkpoint kept at {last} (step {self.saved}, written before {before})"
        if last.exists():
            return f"checkpoint kept at {last} (written before {before})"
        return f"no checkpoint written yet (the first at step {self.phase.every})"

    def save(self) -> None:
        """Checkpoint the phase, after reading (and checking) every loss before it and checking its weights."""
        self.read()
        self.phase.save(self.hooks.extra())  # refused when the weights are not finite (Phase.save)
        self.saved = self.phase.step


def run_phase(phase: Phase, epochs: int, hooks: PhaseHooks, device: torch.device, autocast: Any, curve: str,
              bar: Any, budget: StepBudget, checkpoint_each_epoch: bool = False,
              on_step: Callable[[Phase, float, int], None] | None = None,
              on_epoch_start: Callable[[Phase], None] | None = None,
              on_step_end: Callable[[Phase], None] | None = None) -> None:
    """Run ``phase`` from where it stands to ``epochs`` epochs (see the module docstring).
    For experiment trackers (they must not touch the training): ``on_step(phase, value, batch_size)``
    is called after every counted step with the loss value just recorded in the curve (the loss is then
    read every step), ``on_step_end(phase)`` after every counted step without its value (no read: what a
    timer needs, ``fusebench bench gpu --cell``), and ``on_epoch_start(phase)`` just before an epoch's first
    batch is fetched."""
    # every step when something shows each step's loss: a tracker logging each step, progress lines asked for
    # every step (FUSEBENCH_LOG_EVERY=0: a LineReporter with interval 0); else every LOSS_READ_EVERY steps
    read_every = 1 if on_step is not None or getattr(bar, "interval", None) == 0 else LOSS_READ_EVERY
    unread = _Unread(phase, hooks, curve, bar, on_step)
    while phase.epoch < epochs:
        loader = hooks.loader(phase.epoch, phase.step_in_epoch)
        hooks.on_epoch_start()
        if on_epoch_start is not None:
            on_epoch_start(phase)
        for batch in loader:
            batch = utils.to_device(hooks.host(batch), device)
            try:
                with utils.deferred_value_checks():
                    with autocast:
                        loss = hooks.loss(batch)
                    hooks.optimise(loss)
            except Exception as e:  # a step after a non-finite loss may fail on what it left: say where it began
                unread.read()
                if isinstance(e, (ValueError, FloatingPointError)) and not isinstance(e, (ConfigError, DatasetError)):
                    # a value refused in the step (often numerical: a loss refusing non-finite embeddings; the losses
                    # before it were finite, read above): where it happened, the cause chained
                    raise RunError(f"{phase.name} step {phase.step + 1} (epoch {phase.epoch}): {type(e).__name__}: "
                                   f"{e}; {unread.kept('this step')}") from e
                raise
            unread.add(loss, batch_size(batch))
            phase.step += 1
            phase.step_in_epoch += 1
            exhausted = budget.spend()
            if exhausted or phase.step % phase.every == 0:
                unread.save()
            elif len(unread) >= read_every:
                unread.read()
            bar.update(1)
            if on_step_end is not None:
                on_step_end(phase)
            if exhausted:
                bar.close()
                raise KeyboardInterrupt("max_steps reached (simulated kill)")
        unread.read()
        hooks.on_epoch_end()
        phase.epoch += 1
        phase.step_in_epoch = 0
        if checkpoint_each_epoch:
            unread.save()
