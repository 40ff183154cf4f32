"""Who holds a cell (engine layer): the per-cell lock file (``.lock``: the owner's pid, host and SLURM
job), whether its owner still lives (by pid on the host that wrote it, by ``squeue`` for a SLURM job
elsewhere, taken as live when neither can be checked), the scheduler marker of a submitted cell
(``.launcher.json``), and the SLURM queue as seen from here. Used by the cell lock
(:class:`fusebench.engine.cell.CellLock`), the launchers and ``fusebench status``."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fusebench.runtime.processes import OTHER, REBOOTED, SAME, boot_time, pid_alive, process_space, space_relation

LOCK = ".lock"  # the per-cell lock (cell.CellLock)
MARKER = ".launcher.json"  # written when a cell is submitted to a scheduler (fusebench.sweep.launchers)
# squeue job states in which the job's processes exist (the lock's owner may be alive)
SLURM_ACTIVE = frozenset({"RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "STOPPED", "SIGNALING",
                          "STAGE_OUT", "RESIZING"})
GONE = "GONE"  # the job is not in the queue (finished, cancelled, or never there)
UNKNOWN = "UNKNOWN"  # squeue is not available or failed: nothing can be said


def hostname() -> str:
    return socket.gethostname()


def same_host(a: str | None, b: str | None) -> bool:
    """Host names equal, or equal up to the domain (``node1`` and ``node1.cluster``)."""
    if not isinstance(a, str) or not isinstance(b, str) or not a or not b:  # a lock's host of another type: not ours
        return False
    return a == b or a.split(".")[0] == b.split(".")[0]


def current_slurm_job() -> dict[str, str]:
    """This process's SLURM job: ``slurm_job`` as squeue shows it (``ARRAY_TASK`` for an array
    task) and the raw ``slurm_job_id``; empty outside SLURM."""
    raw = os.environ.get("SLURM_JOB_ID")
    if not raw:
        return {}
    array, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    return {"slurm_job": f"{array}_{task}" if array and task else raw, "slurm_job_id": raw}


def lock_payload(token: str | None = None) -> str:
    """What a cell lock holds: the owner's pid, host, process space (``boot_id``, ``pid_ns``:
    :func:`fusebench.runtime.processes.process_space`) and SLURM job (if any), and ``token`` when given (what tells
    one lock from another of the same process: a file system may give a new file the inode a removed one had)."""
    extra = {"token": token} if token else {}
    return json.dumps({"pid": os.getpid(), "host": hostname(), **process_space(), **current_slurm_job(), **extra},
                      sort_keys=True)


class SlurmQueue:
    """The states of SLURM jobs, read with ``squeue`` (no accounting database needed) and cached:
    ``state(job)`` is ``(state, node)`` with state e.g. ``RUNNING`` / ``PENDING``, :data:`GONE`
    when the job is not in the queue, :data:`UNKNOWN` when squeue cannot be asked."""

    def __init__(self) -> None:
        self._cache: dict[str, tuple[str, str]] = {}

    def _squeue(self, ids: list[str]) -> dict[str, tuple[str, str]] | None:
        if shutil.which("squeue") is None:
            return None
        try:
            res = subprocess.run(["squeue", "-h", "-r", "-o", "%i|%A|%T|%N", "-j", ",".join(ids)],
                                 capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.SubprocessError):
            return None
        if res.returncode != 0:
            if "invalid job id" in (res.stderr or "").lower() and len(ids) == 1:
                return {}  # older squeue: an id that left the queue is an error
            return None
        found: dict[str, tuple[str, str]] = {}
        for line in res.stdout.splitlines():
            parts = line.strip().split("|")
            if len(parts) == 4:
                shown, raw, state, node = parts
                found[shown] = found[raw] = (state.split()[0].upper(), node)
        return found

    def prefetch(self, ids: list[str]) -> None:
        ids = sorted({i for i in ids if i and i not in self._cache})
        if not ids:
            return
        found = self._squeue(ids)
        if found is None and len(ids) > 1:  # one unreadable id must not hide the others
            for i in ids:
                self.prefetch([i])
            return
        for i in ids:
            self._cache[i] = (UNKNOWN, "") if found is None else found.get(i, (GONE, ""))

    def state(self, job: str) -> tuple[str, str]:
        self.prefetch([job])
        return self._cache[job]


@dataclass
class LockHolder:
    """Who holds a cell lock, and whether it is still alive."""

    pid: int
    host: str | None
    slurm_job: str | None
    slurm_job_id: str | None
    alive: bool
    local: bool  # written on this host
    #: written under this host's name in another process space (another container sharing the host name, or another
    #: machine of that name since this host booted): its pid is not checked here
    elsewhere: bool = False

    @property
    def owner(self) -> str:
        """The holder, for a message (``process 123``, ``slurm job 7_1 on node3 (pid 123)``)."""
        if self.slurm_job:
            return f"slurm job {self.slurm_job} on {self.host} (pid {self.pid})"
        if self.elsewhere:
            return f"process {self.pid} of another process space on {self.host} (another container or machine of that name)"
        return f"process {self.pid}" if self.local else f"process {self.pid} on {self.host}"

    @property
    def detail(self) -> str:
        """``fusebench status``'s detail of a running cell."""
        if self.slurm_job:
            return f"running on {self.host} (slurm job {self.slurm_job})"
        if self.elsewhere:
            return (f"running on {self.host} (pid {self.pid} of another process space: another container or machine "
                    f"of that name, not checked from here; delete the lock if that process is gone)")
        if self.local:
            return f"pid {self.pid}"
        return f"running on {self.host} (pid {self.pid}; another host, not checked from {hostname()})"


def read_lock(path: Path, queue: SlurmQueue | None = None) -> LockHolder | None:
    """The holder of the lock file ``path`` (None when there is none or it is unreadable).

    A lock written on this host is alive while its pid is -- in the same process space (boot and pid namespace,
    :func:`fusebench.runtime.processes.space_relation`): one of another boot id written before this host last
    booted is dead; one of another pid namespace (another container sharing the host name), or of another boot id
    written since (another machine of the same name), is judged as a lock of another host: one written on another host by a SLURM
    job is alive while squeue lists the job as running (when squeue cannot be asked it is taken as
    alive), except when that job is this process's own job: an earlier run of a requeued job; one
    written on another host outside SLURM cannot be checked and is taken as alive."""
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    try:
        data = json.loads(text) if text.startswith("{") else {"pid": int(text or 0)}  # a bare pid: older locks
        pid = int(data.get("pid") or 0)
    except (ValueError, TypeError, AttributeError, RecursionError):
        return None
    host, job, job_id = data.get("host"), data.get("slurm_job"), data.get("slurm_job_id")
    local = host is None or same_host(host, hostname())
    space = space_relation(data) if local else SAME
    if space == REBOOTED:  # an earlier boot of this host, or another machine of the same name
        booted = boot_time()
        try:
            earlier = booted is not None and path.stat().st_mtime < booted
        except OSError:
            earlier = False
        if earlier:
            return LockHolder(pid, host, job, job_id, False, local)  # its process is gone with that boot
        space = OTHER  # written since this boot by another machine: its pid cannot be checked here
    if local and space == SAME:
        alive = pid > 0 and pid_alive(pid)
    elif job_id and str(job_id) == os.environ.get("SLURM_JOB_ID"):
        alive = False  # our own job ran the cell before it was requeued (on another node, or in another container)
    elif job:
        state, _ = (queue or SlurmQueue()).state(str(job))
        alive = state in SLURM_ACTIVE or state == UNKNOWN
    else:
        alive = True  # another host, or another pid namespace of this one, outside SLURM: cannot be checked
    return LockHolder(pid, host, job, job_id, alive, local, space == OTHER)


def read_marker(cell: Path) -> dict[str, Any] | None:
    """The cell's ``.launcher.json`` (its scheduler job), or None."""
    try:
        data = json.loads((cell / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) and data.get("job_id") else None


def queued_job(cell: Path, queue: SlurmQueue | None) -> tuple[dict[str, Any], str, str] | None:
    """(marker, state, node) of the cell's SLURM job, when it has one."""
    marker = read_marker(cell)
    if not marker or marker.get("launcher") != "slurm":
        return None
    state, node = (queue or SlurmQueue()).state(str(marker["job_id"]))
    return marker, state, node


def busy(cell: Path, queue: SlurmQueue | None = None) -> tuple[str, str | None] | None:
    """Why the cell must not be started now: ``(reason, slurm job or None)`` when a live process
    holds its lock or its SLURM job is queued or running; None when it may be started."""
    holder = read_lock(cell / LOCK, queue)
    if holder is not None and holder.alive:
        return f"it is being run by {holder.owner}", holder.slurm_job
    job = queued_job(cell, queue)
    if job is not None and job[1] not in (GONE, UNKNOWN):
        return f"slurm job {job[0]['job_id']} is on it ({job[1]})", str(job[0]["job_id"])
    return None


def slurm_jobs(cells: list[Path]) -> list[str]:
    """The SLURM jobs named by the cells' locks (other hosts) and markers, to ask squeue once."""
    ids = []
    for cell in cells:
        if (cell / "run.json").is_file():
            continue
        marker = read_marker(cell)
        if marker and marker.get("launcher") == "slurm":
            ids.append(str(marker["job_id"]))
        try:
            text = (cell / LOCK).read_text().strip()
            data = json.loads(text) if text.startswith("{") else {}
        except (OSError, ValueError, RecursionError):
            data = {}
        if isinstance(data, dict) and data.get("slurm_job") and not same_host(data.get("host"), hostname()):
            ids.append(str(data["slurm_job"]))
    return ids


__all__ = ["GONE", "LOCK", "MARKER", "SLURM_ACTIVE", "UNKNOWN", "LockHolder", "SlurmQueue", "busy",
           "current_slurm_job", "hostname", "lock_payload", "pid_alive", "queued_job", "read_lock", "read_marker",
           "same_host", "slurm_jobs"]
