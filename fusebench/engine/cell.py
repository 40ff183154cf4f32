"""One cell's folder (engine layer): its path, its lock, its checkpoint and its immutable record.

A cell is only ever continued or returned for the configuration, the code and the data that made it: a
``run.json`` or ``last.pt`` with another config hash, other code versions or another data fingerprint is a
:class:`ConfigMismatchError`, never mixed."""

from __future__ import annotations

import math
import os
import random
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fusebench.components.identity import (cell_identity, code_changes, frozen_choice, same_config_hashes,
                                          spec_hash)
from fusebench.io import create_once
from fusebench.spec.config import BenchmarkSpec
from fusebench.engine.loop import RunError, checkpoint_error, shown_value
from fusebench.engine.locks import LockHolder, SlurmQueue, lock_payload, read_lock


class ConfigMismatchError(RunError):
    """An existing record or checkpoint of the cell was made with another configuration or other data."""


class CellBusyError(RunError):
    """Another live process holds the cell's lock."""


def load_checkpoint(path: Path, mmap: bool = False) -> dict[str, Any]:
    """The checkpoint ``path`` loaded safely (``weights_only``) and its structure checked (:func:`check_checkpoint`),
    else the :class:`RunError` a resuming run stops with. ``mmap=True`` (``fusebench status``, ``--plan``: they judge
    the file, never compute with it) maps the tensors' bytes instead of reading them: a large checkpoint costs its
    metadata, not a read of every weight. PyTorch checks no checksum when it loads either way, so the verdict is the
    same; a file of the legacy (non-zip) format, which cannot be mapped, is read as it is."""
    import zipfile

    try:
        mapped = mmap and zipfile.is_zipfile(path)
        ckpt = torch.load(path, map_location="cpu", weights_only=True, mmap=mapped)  # never unpickle arbitrary objects
    except Exception as e:  # corrupt / truncated / not a checkpoint / a pickle of code (refused, in our own words)
        from fusebench.components.encoder_weights import load_problem

        raise RunError(f"cannot resume: checkpoint {path} is unreadable ({load_problem(e)}); "
                       "the file was left as it is — delete it to start over") from None
    if not isinstance(ckpt, dict):  # e.g. a bare tensor or state list saved under the name
        raise RunError(f"cannot resume: {path} holds a {type(ckpt).__name__}, not a fusebench checkpoint (a mapping); "
                       "the file was left as it is — delete it to start over")
    check_checkpoint(path, ckpt)
    return ckpt


#: the loss curve of each phase, one value per counted step (``run_phase``'s ``curve``; read before every checkpoint)
LOSS_CURVES = {"pretrain": "pretrain_loss", "downstream": "downstream_loss"}


def _count(v: Any) -> bool:
    return type(v) is int and v >= 0


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _seconds(v: Any) -> bool:
    return isinstance(v, (list, tuple)) and all(_number(t) and math.isfinite(t) and t >= 0 for t in v)


def _curves(v: Any) -> bool:
    return isinstance(v, dict) and all(isinstance(k, str) and isinstance(c, list) and all(_number(x) for x in c)
                                       for k, c in v.items())


def _state_dict(v: Any) -> bool:  # a module's state_dict: names to tensors (a module's own extra state aside)
    return isinstance(v, dict) and all(isinstance(k, str) and (torch.is_tensor(t) or k.endswith("_extra_state"))
                                       for k, t in v.items())


def _optimizer_state(v: Any) -> bool:
    return (isinstance(v, dict) and isinstance(v.get("state"), dict) and isinstance(v.get("param_groups"), list)
            and all(isinstance(g, dict) and isinstance(g.get("params"), list) for g in v["param_groups"]))


def _scheduler_state(v: Any) -> bool:  # what build_scheduler makes: a LambdaLR
    return (isinstance(v, dict) and type(v.get("last_epoch")) is int and isinstance(v.get("base_lrs"), list)
            and isinstance(v.get("lr_lambdas"), list))


_SCHEDULER = "a LambdaLR scheduler's state_dict ({last_epoch, base_lrs, lr_lambdas, ...})"


def _rng_problem(state: Any) -> str | None:
    """Why ``state`` is not RNG states :func:`fusebench.runtime.utils.set_rng_state` restores (tried on fresh
    generators, as it converts them: the process's own are left alone), or None."""
    if not isinstance(state, dict):
        return f"got {shown_value(state)}"
    from fusebench.runtime.utils import rng_states

    try:
        py, npy, tor = rng_states(state)  # converted as set_rng_state converts them
        random.Random().setstate(py)
        np.random.RandomState().set_state(npy)
        torch.Generator().set_state(tor)
        if not all(torch.is_tensor(t) and t.dtype == torch.uint8 for t in state.get("cuda", [])):
            return "its 'cuda' entry is not a list of byte tensors"
    except Exception as e:  # noqa: BLE001 - whatever the generators refuse
        return f"the generators refuse it ({type(e).__name__}: {' '.join(str(e).split())[:120]})"
    return None


def _solver_tally(v: Any) -> bool:
    from fusebench.objectives.solver_tally import SolverTally

    try:
        SolverTally().load_state_dict(v)
    except ValueError:
        return False
    return True


#: what each phase's checkpoint holds besides the counters, the curves and the RNG states, as the cells write it
#: (fusebench.cells.standard: the pretraining phase; fusebench.cells.head_protocol: the downstream one); a module
#: only some cells have (a gradient scaler, a pretraining method's state) is checked when it is restored
#: (:meth:`fusebench.engine.loop.Phase.restore`)
PHASE_KEYS: dict[str, dict[str, tuple[Any, str]]] = {
    "pretrain": {"pretrainer": (_state_dict, "the pretrainer's state_dict (a mapping of names to tensors)"),
                 "optimizer": (_optimizer_state, "an optimizer state_dict ({state, param_groups})"),
                 "scheduler": (_scheduler_state, _SCHEDULER)},
    "downstream": {"model": (_state_dict, "the model's state_dict (a mapping of names to tensors)"),
                   "optimizer": (_optimizer_state, "an optimizer state_dict ({state, param_groups})"),
                   "scheduler": (_scheduler_state, _SCHEDULER),
                   "pretrained_state": (_state_dict, "the pretrained model's state_dict (a mapping of names to "
                                                     "tensors)"),
                   "pretrain_curves": (_curves, "a mapping of curve names to lists of numbers"),
                   "pretrain_time": (lambda v: _number(v) and math.isfinite(v) and v >= 0, "seconds (a number >= 0)"),
                   "best": (lambda v: isinstance(v, dict) and type(v.get("epoch")) is int and v["epoch"] >= -1
                            and _number(v.get("score")) and (v.get("val") is None or isinstance(v.get("val"), dict)),
                            "the best epoch so far ({epoch: an integer >= -1, score: a number, val: a mapping or "
                            "None})")},
}
#: optional keys, checked where present
OPTIONAL_KEYS: dict[str, tuple[Any, str]] = {
    "time_segments_s": (_seconds, "a list of seconds (numbers >= 0)"),
    "wall_segments_s": (_seconds, "a list of seconds (numbers >= 0)"),
    "pretrain_time_segments_s": (_seconds, "a list of seconds (numbers >= 0)"),
    "pretrain_budget": (lambda v: isinstance(v, dict), "a mapping (the pretraining budget)"),
    "grad_scaler": (lambda v: isinstance(v, dict), "a gradient scaler state_dict (a mapping)"),
    "config_hash": (lambda v: isinstance(v, str), "a string"),
    "versions": (lambda v: v is None or isinstance(v, dict), "a mapping of code versions"),
    "data_fingerprint": (lambda v: v is None or isinstance(v, str), "a string or None"),
    "config": (lambda v: isinstance(v, dict), "a mapping (the spec's canonical form)"),
    "solver_tally": (_solver_tally, "the epoch's running solver tally ({calls, not_converged: integers >= 0, worst: "
                                    "a number >= 0}: fusebench.objectives.solver_tally)"),
}


def check_checkpoint(path: Path, ckpt: dict[str, Any]) -> None:
    """A :class:`RunError` (:func:`checkpoint_error`: the file, the key, what was expected) unless ``ckpt`` holds
    what resuming reads, of the types the loop and the cells read, as they write it: the phase, its counters
    (integers >= 0; the step count is the length of the phase's loss curve, one loss per step, and at least the
    step within the epoch), its curves, RNG states the generators take, the state of each of its modules, and the
    optional keys where present. Needs no spec (``fusebench status`` judges a ``last.pt`` with it);
    :func:`check_checkpoint_config` adds the bounds of the run's configuration, and
    :meth:`fusebench.engine.loop.Phase.restore` the fit of each state into the cell's modules."""
    def need(key: str, ok: Any, expected: str) -> Any:
        if key not in ckpt:
            raise checkpoint_error(path, key, expected)
        if not ok(ckpt[key]):
            raise checkpoint_error(path, key, expected, ckpt[key])
        return ckpt[key]

    phase = need("phase", lambda v: isinstance(v, str) and v in LOSS_CURVES, " or ".join(map(repr, LOSS_CURVES)))
    step = need("step", _count, "an integer >= 0")
    need("epoch", _count, "an integer >= 0")
    in_epoch = need("step_in_epoch", _count, "an integer >= 0")
    if in_epoch > step:
        raise checkpoint_error(path, "step_in_epoch", f"at most the step count, {step}", in_epoch)
    curves = need("curves", _curves, "a mapping of curve names to lists of numbers")
    losses = len(curves.get(LOSS_CURVES[phase], []))
    if step != losses:
        raise checkpoint_error(path, "step", f"{losses}, the number of losses in curves[{LOSS_CURVES[phase]!r}] "
                                             "(one per step)", step)
    rng = need("rng", lambda v: True, "the RNG states of python, numpy and torch")
    problem = _rng_problem(rng)
    if problem:
        raise checkpoint_error(path, "rng", "the RNG states of python, numpy and torch", problem=problem)
    for key, (ok, expected) in PHASE_KEYS[phase].items():
        need(key, ok, expected)
    for key, (ok, expected) in OPTIONAL_KEYS.items():
        if key in ckpt and not ok(ckpt[key]):
            raise checkpoint_error(path, key, expected, ckpt[key])
    if phase == "downstream":
        best, epoch = ckpt["best"], ckpt["epoch"]
        if best["epoch"] >= epoch:
            raise checkpoint_error(path, "best", f"an epoch before the checkpoint's epoch {epoch}", best["epoch"])
        model, pre = ckpt["model"], ckpt["pretrained_state"]
        odd = sorted(set(model) ^ set(pre)) or sorted(k for k in model if torch.is_tensor(model[k])
                                                        and model[k].shape != getattr(pre[k], "shape", None))
        if odd:
            raise checkpoint_error(path, "pretrained_state", f"the names and shapes of the model's state_dict (both "
                                   f"are the task model's), differing at {odd[:3]}", pre)


def check_checkpoint_bounds(path: Path, ckpt: dict[str, Any], spec: BenchmarkSpec, objective: str) -> None:
    """The checkpoint's epoch within the run's (``spec``'s, for ``objective``): a pretraining checkpoint is written
    within an epoch (epoch < the objective's pretraining epochs; none for a row that pretrains nothing), a downstream
    one within or at the end of one (epoch <= ``downstream.epochs``)."""
    from fusebench.components.rows import row_of

    epoch = ckpt["epoch"]
    if ckpt["phase"] == "pretrain":
        epochs = spec.pretrain.settings(objective).epochs if row_of(spec, objective).pretrains else 0
        if epoch >= epochs:
            raise checkpoint_error(path, "epoch", f"below {epochs}, the pretraining epochs of {objective!r} (a "
                                                  "pretraining checkpoint is written within an epoch)", epoch)
    elif epoch > spec.downstream.epochs:
        raise checkpoint_error(path, "epoch", f"at most {spec.downstream.epochs}, the downstream epochs", epoch)


def data_fingerprint(context: dict[str, Any] | None) -> str | None:
    """The sha256 of the data files a sweep reads (its context's fingerprint; None for synthetic data)."""
    fp = (context or {}).get("fingerprint")
    return fp.get("sha256") if isinstance(fp, dict) else None


def _flat(tree: Any, prefix: str = "") -> dict[str, Any]:
    """``tree``'s leaves by dotted key (a mapping's entries; anything else, lists included, is a leaf)."""
    if not isinstance(tree, dict):  # (an empty mapping has no leaf: {} and no entry read alike)
        return {prefix: tree}
    out: dict[str, Any] = {}
    for k, v in tree.items():
        out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def config_changes(saved: Any, spec: BenchmarkSpec, objective: str, most: int = 8,
                   where: str = "the checkpoint") -> str | None:
    """What differs between the configuration a checkpoint saved (``saved``: the spec's canonical form, as
    :meth:`fusebench.engine.loop.Phase.save` writes it; or a record's ``config``, ``where="the record"``) and ``spec``,
    for ``objective``'s cell: the dotted keys of the cell's identity (:func:`fusebench.components.identity.cell_identity`)
    with the saved value and the current one (``pretrain.lr: 0.001 in the checkpoint, now 0.01``); None when none was
    saved (a checkpoint written before checkpoints carried it) or no key of the identity differs."""
    if not isinstance(saved, dict):
        return None
    try:
        old, new = _flat(cell_identity(saved, objective)), _flat(cell_identity(spec.to_dict(), objective))
    except Exception:  # noqa: BLE001 - a saved form this code cannot read: the hashes alone say it differs
        return None
    absent = "(not set)"
    def shown(d: dict[str, Any], k: str) -> str:
        if k not in d:
            return absent
        r = repr(d[k])
        return r if len(r) <= 60 else r[:57] + "..."

    try:  # (a saved value that does not compare as one bool, e.g. a tensor a hostile last.pt put there: no list)
        diff = [f"{k}: {shown(old, k)} in {where}, now {shown(new, k)}" for k in sorted(set(old) | set(new))
                if bool(old.get(k, absent) != new.get(k, absent))]
    except Exception:  # noqa: BLE001 - the hashes alone say it differs
        return None
    if not diff:
        return None
    return "; ".join(diff[:most]) + (f"; and {len(diff) - most} more" if len(diff) > most else "")


def check_checkpoint_config(path: Path, ckpt: dict[str, Any], spec: BenchmarkSpec, objective: str,
                             context: dict[str, Any] | None = None) -> dict[str, Any]:
    """``ckpt`` (as :func:`load_checkpoint` returned it: its structure checked) when the run of ``spec`` for
    ``objective`` (and, with ``context``, its data) continues it: made with the same data, configuration and code,
    its epoch within the run's (:func:`check_checkpoint_bounds`); else the error that says which differs."""
    named = (context or {}).get("data_file")  # one data file read: another file is said first (issue #32)
    if named and "data_fingerprint" in ckpt and ckpt["data_fingerprint"] != data_fingerprint(context):
        raise ConfigMismatchError(
            f"cannot resume {path}: it was written while reading other data (fingerprint "
            f"{ckpt['data_fingerprint'] or 'none (synthetic data)'}): a different data file, now {named['name']} "
            f"(sha256 {named['sha256']}); "
            "resume with the same --data-root, or move the cell folder away to start over")
    if ckpt.get("config_hash") not in same_config_hashes(spec, objective):  # a last.pt written before a migration too
        weights = (getattr(spec, "encoder_weights", None) or {}).get(objective)
        why = (f" (the row {objective!r} scores a weights file and its hash covers the file's content: now sha256 "
               f"{weights.get('sha256')} of {weights.get('path')}; a file changed since is another configuration)"
               if isinstance(weights, dict) else "")
        changed = config_changes(ckpt.get("config"), spec, objective)
        raise ConfigMismatchError(
            f"cannot resume {path}: it was written with another configuration (config hash {ckpt.get('config_hash')} "
            f"!= {spec_hash(spec, objective)} of the current spec and --set values){why}"
            f"{'; changed: ' + changed if changed else ''}; rerun with the same settings, or move the cell folder "
            "away to start over")
    if isinstance(ckpt.get("versions"), dict):
        changed = code_changes(spec, objective, ckpt["versions"])
        if changed:
            raise ConfigMismatchError(f"cannot resume {path}: it was written by other code under the same "
                                      f"configuration ({'; '.join(changed)}: it computes differently now); move the "
                                      "cell folder away to start over")
    else:  # written before checkpoints stated versions: made by version 1 of each (code_changes' rule for what
        # states none, as for a schema-1 record), the only code it is resumed under
        changed = code_changes(spec, objective, {})
        if changed:
            raise ConfigMismatchError(f"cannot resume {path}: it states no code versions (written before checkpoints "
                                      "recorded them), so only code at version 1 of each resumes it, and the code now "
                                      f"is not ({'; '.join(changed)}); delete {path.name} (or move the cell folder "
                                      "away) to start the cell over")
    if context is not None and "data_fingerprint" in ckpt and ckpt["data_fingerprint"] != data_fingerprint(context):
        raise ConfigMismatchError(
            f"cannot resume {path}: it was written while reading other data (fingerprint "
            f"{ckpt['data_fingerprint'] or 'none (synthetic data)'}, now {data_fingerprint(context) or 'none (synthetic data)'}); "
            "resume with the same --data-root, or move the cell folder away to start over")
    now = frozen_choice(context, objective)
    if now is not None and "hparam_choice" in ckpt and ckpt["hparam_choice"] != now:  # (older ones do not say)
        raise ConfigMismatchError(
            f"cannot resume {path}: it was written at the point {ckpt['hparam_choice']!r} of another frozen "
            f"hyper-parameter selection, this sweep's chose {now!r} (the config hash does not cover the chosen point); "
            "move the cell folder away to start over with this selection")
    check_checkpoint_bounds(path, ckpt, spec, objective)
    return ckpt


#: seconds an unreadable (empty) lock file counts as its owner's before it is taken as stale
UNREADABLE_LOCK_S = 60.0


def lock_holder(path: Path, queue: SlurmQueue | None = None) -> tuple[bool, LockHolder | None]:
    """Whether the cell lock ``path`` is held now, by the one rule the run (:class:`CellLock`), ``--plan``
    (:func:`fusebench.sweep.plan.cell_plan`) and ``fusebench status`` apply, and its holder as read
    (:func:`fusebench.engine.locks.read_lock`; None: no lock, or one that names no owner). A lock naming a live
    process is held; one that names no owner (empty, unreadable, pid 0: one of an older suite version being written)
    is held for :data:`UNREADABLE_LOCK_S` after it was last written, then stale; any other is stale (its owner is
    gone: the run takes it over). Only the process taking the lock knows one thing more: a lock naming its own pid
    is not its own (it is taking it now): an earlier run's under the same pid (a requeued job in a container), stale
    (:class:`CellLock`)."""
    holder = read_lock(path, queue)
    if holder is not None and holder.pid <= 0 and not holder.slurm_job:
        holder = None  # an empty lock names no owner (not a dead one)
    if holder is None:
        try:
            return time.time() - os.stat(path).st_mtime < UNREADABLE_LOCK_S, None
        except FileNotFoundError:
            return False, None
    return holder.alive, holder


def lock_detail(holder: LockHolder | None) -> str:
    """Who holds a lock that :func:`lock_holder` judged held (``holder``: as it returned it), as ``--plan`` and
    ``fusebench status`` say it."""
    if holder is not None:
        return holder.detail
    return (f"another process (its lock is unreadable; taken as held for {UNREADABLE_LOCK_S:.0f} s after it was last "
            "written, then as stale)")


def busy_error(path: Path) -> "CellBusyError | None":
    """The :class:`CellBusyError` this process, taking the cell lock ``path`` now, would stop at (another process
    holds it: :func:`lock_holder`; a lock naming this process's own pid on this host is no rival's, see there), else
    None. :class:`CellLock` and ``--plan``'s judgement of a selection trial ask it."""
    held, holder = lock_holder(path)
    if not held or (holder is not None and holder.local and not holder.elsewhere and holder.pid == os.getpid()):
        return None
    who = holder.owner if holder is not None else "another process (its lock is unreadable)"
    return CellBusyError(f"{path.parent} is being run by {who} (lock {path}); not starting it twice")


class CellLock:
    """An exclusive per-cell lock file (``.lock``, holding the owner's pid, host and SLURM job): two
    processes never run one cell at once. A lock left by a process that no longer exists is taken
    over (judged by pid on its own host, by squeue for a SLURM job elsewhere: locks.read_lock)."""

    def __init__(self, cell: Path) -> None:
        self.path = cell / ".lock"
        self.inode: int | None = None
        self.payload = b""

    def __enter__(self) -> "CellLock":
        # the lock appears with its content at once (fusebench.io.create_once: never over a lock that is there), so
        # no process ever reads a half-written lock as a dead owner's
        payload = lock_payload(uuid.uuid4().hex).encode("utf-8")
        for _ in range(2):
            if create_once(self.path, payload):
                self.inode, self.payload = os.stat(self.path).st_ino, payload
                return self
            try:  # the lock judged: its inode and its content (a later lock may be given the same inode number)
                judged = (os.stat(self.path).st_ino, self.path.read_bytes())
            except FileNotFoundError:
                continue
            busy = busy_error(self.path)  # the rule --plan and status apply too
            if busy is not None:
                raise busy from None
            self._take_over(judged)  # the stale lock of a killed run (or none: gone meanwhile, the loop retries)
        raise CellBusyError(f"cannot lock {self.path}")

    def _take_over(self, judged: tuple[int, bytes]) -> None:
        """Move the stale lock (``judged``: its inode and content) aside; one that is no longer it (another process
        took the lock over meanwhile and holds it now, maybe under the same inode number, never with the same
        token) is put back, never removed."""
        aside = self.path.with_name(f".lock.stale.{os.getpid()}.{id(self)}")
        try:
            os.rename(self.path, aside)
        except FileNotFoundError:
            return
        try:
            if (os.stat(aside).st_ino, aside.read_bytes()) != judged:  # live: back in place (unless a third is there)
                try:
                    os.link(aside, self.path)
                except FileExistsError:
                    pass
        finally:
            aside.unlink(missing_ok=True)

    def __exit__(self, *exc: Any) -> None:
        if self.inode is None:
            return
        try:  # ours: never another process's lock (nor a later one that got our inode number)
            if os.stat(self.path).st_ino == self.inode and self.path.read_bytes() == self.payload:
                self.path.unlink()
        except FileNotFoundError:
            pass
        self.inode = None


