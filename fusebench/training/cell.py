"""One cell's folder (engine layer): its path, its lock, its checkpoint and its immutable record.

A cell is only ever continued or returned for the configuration and the data that made it: a
``run.json`` or ``last.pt`` with another config hash or data fingerprint is a
:class:`ConfigMismatchError`, never mixed."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch

from fusebench.training import utils
from fusebench.training.config import BenchmarkSpec
from fusebench.training.loop import RunError
from fusebench.training.status import lock_payload, read_lock


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


def record_there(run_json: Path, out: Path) -> bool:
    """Whether the cell has a record, by the one rule the leaderboard and ``status`` apply
    (:func:`fusebench.records.check_record_file`): a regular ``run.json`` reached from ``out`` through
    real folders; a link, a folder or a special file there is a RunError naming it."""
    from fusebench.records import RecordError, check_record_file

    try:
        return check_record_file(run_json, out)
    except RecordError as e:
        raise RunError(f"{e}; move it away to rerun the cell") from None


def data_fingerprint(context: dict[str, Any] | None) -> str | None:
    """The sha256 of the data files a sweep reads (its context's fingerprint; None for synthetic data)."""
    fp = (context or {}).get("fingerprint")
    return fp.get("sha256") if isinstance(fp, dict) else None


def existing_record(run_json: Path, spec: BenchmarkSpec, context: dict[str, Any] | None = None) -> dict[str, Any]:
    """The finished cell's record, if it was made with ``spec``'s configuration and, when ``context``
    is given, from the same data (the fingerprint of the files read: a rerun on another file of the
    same shapes must not return the first file's record)."""
    try:
        rec = json.loads(run_json.read_text())
    except (OSError, json.JSONDecodeError, RecursionError) as e:
        raise RunError(f"{run_json} is unreadable ({type(e).__name__}: {str(e)[:200]}); move it away to rerun the "
                       "cell") from None
    if not isinstance(rec, dict):
        raise RunError(f"{run_json} is not a run record (a JSON object expected); move it away to rerun the cell")
    if rec.get("config_hash") != spec.hash():
        raise ConfigMismatchError(f"{run_json} was made with another configuration (config hash {rec.get('config_hash')} "
                       f"!= {spec.hash()} of the current spec and --set values); records are immutable: "
                       "write to another --out, or move that cell's folder away to rerun it")
    if context is not None:
        ds = rec.get("dataset") if isinstance(rec.get("dataset"), dict) else {}
        fp = ds.get("fingerprint")
        made_from = fp.get("sha256") if isinstance(fp, dict) else None
        if made_from != data_fingerprint(context):
            raise ConfigMismatchError(
                f"{run_json} was made from other data (fingerprint {made_from or 'none (synthetic data)'} of "
                f"{ds.get('root') or 'the synthetic generator'}, now {data_fingerprint(context) or 'none (synthetic data)'}"
                f"); records are immutable: write to another --out, or move that cell's folder away to rerun it")
    return rec


def check_checkpoint_config(path: Path, ckpt: dict[str, Any], spec: BenchmarkSpec,
                             context: dict[str, Any] | None = None) -> dict[str, Any]:
    if ckpt.get("config_hash") != spec.hash():
        raise ConfigMismatchError(
            f"cannot resume {path}: it was written with another configuration (config hash {ckpt.get('config_hash')} "
            f"!= {spec.hash()} of the current spec and --set values); rerun with the same settings, or move the cell "
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
    over (judged by pid on its own host, by squeue for a SLURM job elsewhere: status.read_lock)."""

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


def write_record(cell: Path, record: dict[str, Any]) -> Path:
    """Write run.json once (immutable): written to a temporary file, then hard-linked into place,
    which fails if another process created run.json first — concurrent runs never overwrite."""
    from fusebench.records import comparability_key, validate_record, versions_block

    path = cell / "run.json"
    if path.exists():
        raise RunError(f"{path} exists already; run records are immutable")
    if record.get("schema_version", 1) >= 2:
        record.setdefault("versions", versions_block(record["objective"], list(record["config"].get("metrics") or [])))
        record["comparability_key"] = comparability_key(record)
    validate_record(record, path)  # never write a record the leaderboard would refuse
    tmp = cell / f".run.json.{os.getpid()}.tmp"
    utils.atomic_write_json(tmp, record)
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise RunError(f"{path} exists already; run records are immutable") from None
    finally:
        tmp.unlink(missing_ok=True)
    (cell / "failed.json").unlink(missing_ok=True)
    return path
