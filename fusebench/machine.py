"""What machine this is (layer 0): the CPU's name, for run records (``numerics``) and the benches'
machine lines."""

from __future__ import annotations

import platform


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
