"""What machine this is (layer 0): the CPU's name, for run records (``numerics``) and the benches'
machine lines; how much memory this process can still get, and the budget of one loss call
(:func:`memory_budget`: read by the sweep's check, :mod:`fusebench.components.memory_budget`, and by a loss
that refuses a call it cannot finish, :meth:`fusebench.objectives.m3g.M3G.check_memory`)."""

from __future__ import annotations

import math
import os
import platform
from pathlib import Path

from fusebench.typed import ConfigError


def check_device_name(name: object) -> str:
    """``name`` if it is a device this suite runs on (auto, cpu, cuda, cuda:N, mps), else ValueError; whether this
    machine has it is :func:`fusebench.runtime.utils.resolve_device`'s question (no torch imported here)."""
    if not isinstance(name, str) or not (name in ("auto", "cpu", "cuda", "mps")
                                         or (name.startswith("cuda:") and name[5:].isdigit())):
        raise ValueError(f"--device {name!r}: expected auto, cpu, cuda, cuda:N or mps")
    return name


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux, else what :mod:`platform` says), for run records and the
    benches' machine lines."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


__all__ = ["cpu_model"]


ENV_BUDGET = "FUSEBENCH_MEMORY_BUDGET_GB"
#: share of the available memory one loss call may take (the rest is the cell's own)
DEFAULT_FRACTION = 0.5
GIB = 2**30


def _read_int(path: str) -> int | None:
    try:
        raw = Path(path).read_text().split()[0]
    except (OSError, IndexError):
        return None
    return int(raw) if raw.isdigit() else None


def _cgroup_room() -> int | None:
    """What this process's cgroup limit still allows (limit - usage), or None without a limit."""
    for limit_file, usage_file in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                                   ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                                    "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        limit = _read_int(limit_file)  # "max" (no limit) is not a number
        if limit is not None and limit < 2**60:
            return max(0, limit - (_read_int(usage_file) or 0))
    return None


def _mem_available() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def available_memory(device: str = "cpu") -> tuple[int | None, str]:
    """(bytes this process can still get on ``device``, where that number comes from)."""
    if device.startswith("cuda"):
        import torch

        if torch.cuda.is_available():
            free, _ = torch.cuda.mem_get_info(torch.device(device))
            return int(free), f"the free memory of {device}"
    avail, cgroup = _mem_available(), _cgroup_room()
    if cgroup is not None and (avail is None or cgroup < avail):
        return cgroup, "what this process's cgroup memory limit leaves"
    return avail, "MemAvailable of this machine"


def memory_budget(device: str = "cpu", fraction: float | None = None) -> tuple[float, str]:
    """(budget in bytes for one loss call, how it was set); ``math.inf`` when there is none. ``fraction``: the share
    of the available memory (default :data:`DEFAULT_FRACTION`; ``$FUSEBENCH_MEMORY_BUDGET_GB`` wins over it)."""
    fraction = DEFAULT_FRACTION if fraction is None else fraction
    raw = os.environ.get(ENV_BUDGET, "").strip()
    if raw:
        try:
            gib = float(raw)
        except ValueError:
            gib = math.nan
        if not gib > 0:  # NaN, 0, negative
            raise ConfigError(f"{ENV_BUDGET}={raw!r}: expected a number of GiB > 0 (or inf: no memory check)")
        return gib * GIB, f"{ENV_BUDGET}={raw}"
    avail, source = available_memory(device)
    if avail is None:
        return math.inf, "no memory figure readable here"
    share = f"{fraction:g} x " if fraction != 1 else ""
    return fraction * avail, f"{share}{avail / GIB:.1f} GiB, {source}; set {ENV_BUDGET} to change it"
