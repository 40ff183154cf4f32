"""Whether a process of this host is alive: the one check behind a cell's lock (:mod:`fusebench.engine.locks`) and
the work folders a killed ``fusebench data prepare`` left (:func:`fusebench.datasets.cache.remove_stale_work_folders`).
Layer 0: the dataset layer may import it.

A pid names a process only within one **pid namespace** of one **boot** of a kernel: two containers that share a
host name (host networking, the same ``--hostname``) each number their processes from 1, and after a reboot an
old pid may be a new, unrelated process. So an owner records :func:`process_space` beside its pid and host, and a
reader checks the pid only in the same space (:func:`space_relation`): an owner of an earlier boot is gone, one of
another namespace on this host cannot be checked from here."""

from __future__ import annotations

import hashlib
import os
from typing import Any, Mapping

SAME, REBOOTED, OTHER = "same", "rebooted", "other"


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this host: a signal 0 reaches it, or it exists and is another user's
    (PermissionError). A pid no process can have (negative, beyond the platform's range) is not alive."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except (OverflowError, OSError):  # e.g. a pid read from a folder's name, beyond pid_t
        return False
    return True


def process_space() -> dict[str, str]:
    """Where this process's pid means something: ``boot_id`` (the kernel's, ``/proc/sys/kernel/random/boot_id``;
    containers on one host share it) and ``pid_ns`` (this process's pid namespace, ``pid:[4026531836]``); a key is
    left out where the platform does not tell it (no ``/proc``: macOS, Windows)."""
    out = {}
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            out["boot_id"] = f.read().strip()
    except OSError:
        pass
    try:
        out["pid_ns"] = os.readlink("/proc/self/ns/pid")
    except (OSError, AttributeError):
        pass
    return {k: v for k, v in out.items() if v}


def space_relation(recorded: Mapping[str, Any]) -> str:
    """How the process space an owner recorded (``boot_id`` / ``pid_ns`` of :func:`process_space`; a record
    written before they were recorded has neither) stands to this process's, on the same host: :data:`REBOOTED`
    (another boot id: written in an earlier boot of this host -- or on another machine of the same name, which only
    the time it was written can tell apart, :func:`boot_time`), :data:`OTHER` (another pid namespace of this boot,
    e.g. another container: its pids cannot be checked from here), else :data:`SAME` (the pid can be checked; also
    when either side does not tell)."""
    here = process_space()
    boot = recorded.get("boot_id")
    if isinstance(boot, str) and boot and here.get("boot_id") and boot != here["boot_id"]:
        return REBOOTED
    ns = recorded.get("pid_ns")
    if isinstance(ns, str) and ns and here.get("pid_ns") and ns != here["pid_ns"]:
        return OTHER
    return SAME


def boot_time() -> float | None:
    """When this host last booted (seconds since the epoch: ``btime`` of ``/proc/stat``); None where the platform
    does not tell it."""
    try:
        with open("/proc/stat") as f:
            for line in f:
                if line.startswith("btime "):
                    return float(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def space_tag() -> str:
    """:func:`process_space` in 8 hex digits, for a file name (empty where the platform tells neither)."""
    space = process_space()
    if not space:
        return ""
    return hashlib.sha256(f"{space.get('boot_id', '')}|{space.get('pid_ns', '')}".encode()).hexdigest()[:8]


__all__ = ["OTHER", "REBOOTED", "SAME", "boot_time", "pid_alive", "process_space", "space_relation", "space_tag"]
