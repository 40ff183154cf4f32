"""One cell's folder (engine layer): its path, its lock, its checkpoint and its immutable record.

A cell is only ever continued or returned for the configuration and the data that made it: a
``run.json`` or ``last.pt`` with another config hash or data fingerprint is a
:class:`ConfigMismatchError`, never mixed."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from fusebench.spec.config import BenchmarkSpec
from fusebench.engine.loop import RunError
from fusebench.engine.locks import lock_payload, read_lock


class ConfigMismatchError(RunError):
    """An existing record or checkpoint of the cell was made with another configuration or other data."""


class CellBusyError(RunError):
    """Another live process holds the cell's lock."""


def load_checkpoint(path: Path) -> dict[str, Any]:
    try:
        return torch.load(path, map_location="cpu", weights_only=True)  # never unpickle arbitrary objects
    except Exception as e:  # corrupt / truncated / not a checkpoint
        raise RunError(f"cannot resume: checkpoint {path} is unreadable ({type(e).__name__}: {e}); "
                       "the file was left as it is — delete it to start over") from None


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
    if ckpt.get("config_hash") != spec.hash(objective):
        raise ConfigMismatchError(
            f"cannot resume {path}: it was written with another configuration (config hash {ckpt.get('config_hash')} "
            f"!= {spec.hash(objective)} of the current spec and --set values); rerun with the same settings, or move the cell "
            "folder away to start over")
    if context is not None and "data_fingerprint" in ckpt and ckpt["data_fingerprint"] != data_fingerprint(context):
        raise ConfigMismatchError(
            f"cannot resume {path}: it was written while reading other data (fingerprint "
            f"{ckpt['data_fingerprint'] or 'none (synthetic data)'}, now {data_fingerprint(context) or 'none (synthetic data)'}); "
            "resume with the same --data-root, or move the cell folder away to start over")
    return ckpt


class CellLock:
    """An exclusive per-cell lock file (``.lock``, holding the owner's pid, host and SLURM job): two
    processes never run one cell at once. A lock left by a process that no longer exists is taken
    over (judged by pid on its own host, by squeue for a SLURM job elsewhere: locks.read_lock)."""

    def __init__(self, cell: Path) -> None:
        self.path = cell / ".lock"
        self.fd: int | None = None

    def __enter__(self) -> "CellLock":
        for _ in range(2):
            try:
                self.fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
                os.write(self.fd, lock_payload().encode())
                return self
            except FileExistsError:
                holder = read_lock(self.path)
                if holder is not None and holder.alive and not (holder.local and holder.pid == os.getpid()):
                    raise CellBusyError(f"{self.path.parent} is being run by {holder.owner} "
                                        f"(lock {self.path}); not starting it twice") from None
                self.path.unlink(missing_ok=True)  # stale lock of a killed run
        raise CellBusyError(f"cannot lock {self.path}")

    def __exit__(self, *exc: Any) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.path.unlink(missing_ok=True)


