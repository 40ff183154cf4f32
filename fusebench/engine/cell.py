"""One cell's folder (engine layer): its path, its lock, its checkpoint and its immutable record.

A cell is only ever continued or returned for the configuration, the code and the data that made it: a
``run.json`` or ``last.pt`` with another config hash, other code versions or another data fingerprint is a
:class:`ConfigMismatchError`, never mixed."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Any

import torch

from fusebench.components.identity import code_changes, spec_hash
from fusebench.io import create_once
from fusebench.spec.config import BenchmarkSpec
from fusebench.engine.loop import RunError
from fusebench.engine.locks import lock_payload, read_lock


class ConfigMismatchError(RunError):
    """An existing record or checkpoint of the cell was made with another configuration or other data."""


class CellBusyError(RunError):
    """Another live process holds the cell's lock."""


def load_checkpoint(path: Path) -> dict[str, Any]:
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)  # never unpickle arbitrary objects
    except Exception as e:  # corrupt / truncated / not a checkpoint / a pickle of code (refused, in our own words)
        from fusebench.components.encoder_weights import load_problem

        raise RunError(f"cannot resume: checkpoint {path} is unreadable ({load_problem(e)}); "
                       "the file was left as it is — delete it to start over") from None
    if not isinstance(ckpt, dict):  # e.g. a bare tensor or state list saved under the name
        raise RunError(f"cannot resume: {path} holds a {type(ckpt).__name__}, not a fusebench checkpoint (a mapping); "
                       "the file was left as it is — delete it to start over")
    return ckpt


def data_fingerprint(context: dict[str, Any] | None) -> str | None:
    """The sha256 of the data files a sweep reads (its context's fingerprint; None for synthetic data)."""
    fp = (context or {}).get("fingerprint")
    return fp.get("sha256") if isinstance(fp, dict) else None


def check_checkpoint_config(path: Path, ckpt: dict[str, Any], spec: BenchmarkSpec, objective: str,
                             context: dict[str, Any] | None = None) -> dict[str, Any]:
    named = (context or {}).get("data_file")  # one data file read: another file is said first (issue #32)
    if named and "data_fingerprint" in ckpt and ckpt["data_fingerprint"] != data_fingerprint(context):
        raise ConfigMismatchError(
            f"cannot resume {path}: it was written while reading other data (fingerprint "
            f"{ckpt['data_fingerprint'] or 'none (synthetic data)'}): a different data file, now {named['name']} "
            f"(sha256 {named['sha256']}); "
            "resume with the same --data-root, or move the cell folder away to start over")
    if ckpt.get("config_hash") != spec_hash(spec, objective):
        raise ConfigMismatchError(
            f"cannot resume {path}: it was written with another configuration (config hash {ckpt.get('config_hash')} "
            f"!= {spec_hash(spec, objective)} of the current spec and --set values); rerun with the same settings, or move the cell "
            "folder away to start over")
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
    return ckpt


#: seconds an unreadable (empty) lock file counts as its owner's before it is taken as stale
UNREADABLE_LOCK_S = 60.0


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
            holder = read_lock(self.path)
            if holder is not None and holder.pid <= 0 and not holder.slurm_job:
                holder = None  # an empty lock names no owner (not a dead one)
            # an unreadable lock is a live owner's for a minute (one of an older suite version being written), then
            # stale
            try:
                young = holder is None and time.time() - os.stat(self.path).st_mtime < UNREADABLE_LOCK_S
            except FileNotFoundError:
                continue
            if young or (holder is not None and holder.alive and not (holder.local and holder.pid == os.getpid())):
                who = holder.owner if holder is not None else "another process (its lock is unreadable)"
                raise CellBusyError(f"{self.path.parent} is being run by {who} "
                                    f"(lock {self.path}); not starting it twice") from None
            self._take_over(judged)  # the stale lock of a killed run
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


