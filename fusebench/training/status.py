"""``fusebench status --out DIR [--benchmark B ...]``: where a sweep stands.

Every cell folder ``DIR/<benchmark>/<objective>/seed<k>/`` is in one state:

* ``done``: ``run.json`` exists, a regular file (the record is final);
* ``running``: a ``.lock`` held by a live process (``fusebench run`` is on it now), or the cell's
  SLURM job is running and has not taken the lock yet (it is starting);
* ``failed``: ``failed.json`` exists and no ``run.json`` (rerunning the sweep retries it);
* ``interrupted``: a ``last.pt`` checkpoint and no live lock (rerunning resumes it where it stopped);
* ``pending``: nothing yet; with ``--benchmark``, every cell of the benchmark's default sweep
  (objectives x seeds of its spec) without a folder counts as pending too;
* ``unreadable``: the cell breaks the rule of what counts as a record file, which the leaderboard
  shares (:func:`fusebench.records.check_record_file`): its ``run.json`` is a folder, a symbolic
  link or a special file, or the cell folder (or a folder above it, below ``--out``) is a symbolic
  link. The leaderboard refuses such a cell; the detail says why. Shown only when there is one.

The lock (``.lock``) holds JSON: the owner's pid, host and, inside a SLURM job, the job id. Whether
its owner still lives is judged by the pid only on the host that wrote it; a lock written on another
host by a SLURM job is live while ``squeue`` lists that job as running, and one written on another
host outside SLURM cannot be checked from here, so it is taken as live. A cell submitted with
``--launcher slurm`` also has ``.launcher.json`` (the job id and its log files): a queued job is
named in the pending / interrupted detail, a running one that has not locked the cell yet counts as
running (docs/cluster.md).

Hidden folders (``.selection``: hyper-parameter trials, ``.submitit``: job files) are not cells and
are skipped.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fusebench.records import RecordError, check_record_file

STATES = ("done", "running", "failed", "interrupted", "pending")
UNREADABLE = "unreadable"  # a cell the leaderboard refuses (see the module docstring); listed only when present
_SEED = re.compile(r"^seed(\d+)$")


LOCK = ".lock"  # the per-cell lock (cell.CellLock)
MARKER = ".launcher.json"  # written when a cell is submitted to a scheduler (fusebench.training.launchers)

# squeue job states in which the job's processes exist (the lock's owner may be alive)
SLURM_ACTIVE = frozenset({"RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "STOPPED", "SIGNALING",
                          "STAGE_OUT", "RESIZING"})
GONE = "GONE"  # the job is not in the queue (finished, cancelled, or never there)
UNKNOWN = "UNKNOWN"  # squeue is not available or failed: nothing can be said


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this host (used for cell locks; see cell.CellLock)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def hostname() -> str:
    return socket.gethostname()


def same_host(a: str | None, b: str | None) -> bool:
    """Host names equal, or equal up to the domain (``node1`` and ``node1.cluster``)."""
    if not a or not b:
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


def lock_payload() -> str:
    """What a cell lock holds: the owner's pid, host and SLURM job (if any)."""
    return json.dumps({"pid": os.getpid(), "host": hostname(), **current_slurm_job()}, sort_keys=True)


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

    @property
    def owner(self) -> str:
        """The holder, for a message (``process 123``, ``slurm job 7_1 on node3 (pid 123)``)."""
        if self.slurm_job:
            return f"slurm job {self.slurm_job} on {self.host} (pid {self.pid})"
        return f"process {self.pid}" if self.local else f"process {self.pid} on {self.host}"

    @property
    def detail(self) -> str:
        """``fusebench status``'s detail of a running cell."""
        if self.slurm_job:
            return f"running on {self.host} (slurm job {self.slurm_job})"
        if self.local:
            return f"pid {self.pid}"
        return f"running on {self.host} (pid {self.pid}; another host, not checked from {hostname()})"


def read_lock(path: Path, queue: SlurmQueue | None = None) -> LockHolder | None:
    """The holder of the lock file ``path`` (None when there is none or it is unreadable).

    A lock written on this host is alive while its pid is; one written on another host by a SLURM
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
    if local:
        alive = pid > 0 and pid_alive(pid)
    elif job_id and str(job_id) == os.environ.get("SLURM_JOB_ID"):
        alive = False  # our own job ran the cell before it was requeued (on another node)
    elif job:
        state, _ = (queue or SlurmQueue()).state(str(job))
        alive = state in SLURM_ACTIVE or state == UNKNOWN
    else:
        alive = True
    return LockHolder(pid, host, job, job_id, alive, local)


def read_marker(cell: Path) -> dict[str, Any] | None:
    """The cell's ``.launcher.json`` (its scheduler job), or None."""
    try:
        data = json.loads((cell / MARKER).read_text())
    except (OSError, ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) and data.get("job_id") else None


def _queued_job(cell: Path, queue: SlurmQueue | None) -> tuple[dict[str, Any], str, str] | None:
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
    job = _queued_job(cell, queue)
    if job is not None and job[1] not in (GONE, UNKNOWN):
        return f"slurm job {job[0]['job_id']} is on it ({job[1]})", str(job[0]["job_id"])
    return None


def cell_state(cell: Path, queue: SlurmQueue | None = None, root: Path | None = None) -> tuple[str, str]:
    """(state, detail) of one cell folder; ``root``: the runs folder it lies in (``--out``), whose
    folders down to the cell must not be symbolic links (default: only the cell's own run.json is
    judged)."""
    try:
        if check_record_file(cell / "run.json", root if root is not None else cell):
            return "done", ""
    except RecordError as e:  # the leaderboard refuses it for the same reason
        return UNREADABLE, str(e)
    holder = read_lock(cell / LOCK, queue)
    if holder is not None and holder.alive:
        return "running", holder.detail
    job = _queued_job(cell, queue)
    note = ""
    if job is not None:
        marker, state, node = job
        failed = cell / "failed.json"  # written by this job (it is ending) rather than by an earlier run
        failed_now = failed.is_file() and failed.stat().st_mtime >= float(marker.get("submitted", 0))
        if state in SLURM_ACTIVE and not failed_now:
            return "running", f"starting on {node or '?'} (slurm job {marker['job_id']})"
        if state not in (GONE, UNKNOWN, *SLURM_ACTIVE):
            note = f"queued: slurm job {marker['job_id']} ({state})"
        elif state == GONE:
            note = f"slurm job {marker['job_id']} ended without a record (log: {marker.get('stderr', '?')})"
    if (cell / "failed.json").is_file():
        try:
            error = str(json.loads((cell / "failed.json").read_text()).get("error", ""))
        except (OSError, ValueError, AttributeError, RecursionError):
            error = "failed.json unreadable"
        return "failed", error.splitlines()[0] if error else ""
    if (cell / "last.pt").is_file():
        return "interrupted", "resumable from last.pt" + (f"; {note}" if note else "")
    return "pending", note


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


def collect(out: Path, benchmarks: list[str] | None = None) -> dict[str, dict[tuple[str, int], tuple[str, str]]]:
    """``{benchmark: {(objective, seed): (state, detail)}}`` for the cells under ``out`` (and, for
    the named ``benchmarks``, the pending cells of their default sweep)."""
    found: dict[str, dict[tuple[str, int], tuple[str, str]]] = {}
    queue = SlurmQueue()
    if benchmarks:
        names = list(benchmarks)
    elif out.is_dir():
        names = sorted(p.name for p in out.iterdir() if p.is_dir() and not p.name.startswith("."))
    else:
        names = []
    for bench in names:
        cells: dict[tuple[str, int], tuple[str, str]] = {}
        root = out / bench
        if root.is_dir():
            folders = {}
            for obj_dir in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
                for seed_dir in sorted(p for p in obj_dir.iterdir() if p.is_dir()):
                    m = _SEED.match(seed_dir.name)
                    if m:
                        folders[(obj_dir.name, int(m.group(1)))] = seed_dir
            queue.prefetch(slurm_jobs(list(folders.values())))
            for key, seed_dir in folders.items():
                cells[key] = cell_state(seed_dir, queue, root=out)
        if benchmarks:  # the default sweep of the spec: cells without a folder are pending
            from fusebench import benchmarks as B

            spec = B.load(bench)
            for o in spec.objectives or [spec.pretrain.objective]:
                for s in spec.seeds:
                    cells.setdefault((o, s), ("pending", ""))
        found[bench] = cells
    return found


def render(found: dict[str, dict[tuple[str, int], tuple[str, str]]]) -> str:
    lines = []
    for bench, cells in found.items():
        states = STATES + ((UNREADABLE,) if any(v[0] == UNREADABLE for v in cells.values()) else ())
        totals = {st: sum(1 for v in cells.values() if v[0] == st) for st in states}
        lines.append(f"{bench}: " + ", ".join(f"{totals[st]} {st}" for st in states) + f" ({len(cells)} cells)")
        objs = sorted({o for o, _ in cells})
        width = max([len(o) for o in objs] + [9])
        lines.append(f"  {'objective':<{width}}  " + "  ".join(f"{st:>11}" for st in states))
        for o in objs:
            counts = [sum(1 for (oo, _), v in cells.items() if oo == o and v[0] == st) for st in states]
            lines.append(f"  {o:<{width}}  " + "  ".join(f"{c:>11}" for c in counts))
        for (o, s), (st, detail) in sorted(cells.items()):
            if st in ("running", "failed", "interrupted", UNREADABLE):
                lines.append(f"  {st}: {o}/seed{s}" + (f": {detail}" if detail else ""))
    return "\n".join(lines) if lines else "no cells"


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="fusebench status", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="runs", help="folder of run records (default runs/)")
    p.add_argument("--benchmark", nargs="+", default=None,
                   help="only these benchmarks; their default sweep's missing cells count as pending")
    p.add_argument("--json", action="store_true", help="print JSON: {benchmark: {objective: {seed: state}}}")
    ns = p.parse_args(argv)
    out = Path(ns.out)
    if not out.is_dir() and not ns.benchmark:
        print(f"fusebench status: --out {out} is not a folder of run records", file=sys.stderr)
        return 2
    try:
        found = collect(out, ns.benchmark)
    except (KeyError, ValueError) as e:
        print(f"fusebench status: {e}", file=sys.stderr)
        return 2
    if ns.json:
        data: dict[str, Any] = {}
        for bench, cells in found.items():
            for (o, s), (st, detail) in sorted(cells.items()):
                data.setdefault(bench, {}).setdefault(o, {})[str(s)] = {"state": st, "detail": detail}
        print(json.dumps(data, indent=2, sort_keys=True))
    else:
        print(render(found))
    return 0
