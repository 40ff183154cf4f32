"""Benchmark specifications (``fusebench.benchmarks``): one YAML file per benchmark in this folder.

``available()`` lists them (``builtin()``: only the shipped ones), ``load(name, overrides=None, synthetic=False)`` returns a validated
:class:`fusebench.training.config.BenchmarkSpec`. Extra spec folders can be added through the
``FUSEBENCH_BENCHMARKS`` environment variable (``os.pathsep``-separated) or the entry-point group
``fusebench.benchmarks`` (value: a folder path or a ``module:attribute`` naming one).
"""

from __future__ import annotations

if __name__ != "fusebench.benchmarks":  # this folder is mapped to fusebench.benchmarks by pyproject.toml
    raise ImportError("import this folder as fusebench.benchmarks; a bare 'benchmarks' would shadow other packages")

import importlib
import os
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from fusebench.registry import DuplicateIdError, Registry, UnknownNameError, closest

HERE = Path(__file__).resolve().parent


def _folders() -> list[Path]:
    folders = [HERE]
    for extra in filter(None, os.environ.get("FUSEBENCH_BENCHMARKS", "").split(os.pathsep)):
        folders.append(Path(extra))
    for ep in entry_points(group="fusebench.benchmarks"):
        value = ep.value
        if ":" in value:
            mod, _, attr = value.partition(":")
            value = str(getattr(importlib.import_module(mod), attr))
        folders.append(Path(value))
    return folders


def registry() -> Registry:
    """The benchmark registry, read afresh from the spec folders (cheap: a folder listing); entries
    are spec paths. Two specs with the same id in different folders are a :class:`DuplicateIdError`
    naming both files (a plugin or ``FUSEBENCH_BENCHMARKS`` folder never silently shadows a spec)."""
    reg = Registry("benchmark")
    seen: set[Path] = set()
    for folder in _folders():
        if folder.resolve() in seen:
            continue
        seen.add(folder.resolve())
        for f in sorted(folder.glob("*.yaml")):
            reg.add(f.stem.lower(), f, origin=str(f))
    return reg


def _index() -> dict[str, Path]:
    reg = registry()
    return {name: reg.get(name) for name in reg.available()}


def available(pattern: str | None = None) -> list[str]:
    import fnmatch

    names = sorted(_index())
    return [n for n in names if fnmatch.fnmatch(n, pattern.lower())] if pattern else names


def builtin() -> list[str]:
    """The benchmarks shipped with fusebench (this folder only: no FUSEBENCH_BENCHMARKS folder, no
    entry-point plugin). fusebench's own tests iterate these, so an installed plugin spec never
    makes them fail."""
    return sorted(f.stem.lower() for f in HERE.glob("*.yaml"))


def path(name: str) -> Path:
    idx = _index()
    if name.lower() not in idx:
        hint = closest(name, list(idx))
        msg = f"unknown benchmark {name!r}."
        if hint:
            msg += f" Did you mean {hint!r}?"
        raise UnknownNameError(msg + f" Valid benchmark ids: {', '.join(sorted(idx))}")
    return idx[name.lower()]


def load(name: str, overrides: dict[str, Any] | None = None, synthetic: bool = False):
    from fusebench.training.spec_check import load_spec

    return load_spec(path(name), overrides=overrides, synthetic=synthetic)


__all__ = ["DuplicateIdError", "available", "builtin", "load", "path", "registry"]
