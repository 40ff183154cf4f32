"""Benchmark specifications (``fusebench.benchmarks``): one YAML file per benchmark in this folder.

``available()`` lists them (``builtin()``: only the shipped ones; ``index()``: id -> spec path), ``load(name, overrides=None, synthetic=False)`` returns a validated
:class:`fusebench.spec.config.BenchmarkSpec`. Extra spec folders can be added through the
``FUSEBENCH_BENCHMARKS`` environment variable (``os.pathsep``-separated) or the entry-point group
``fusebench.benchmarks`` (value: a folder path or a ``module:attribute`` naming one).

A benchmark's id is its file's stem. A spec file whose stem is not an id (``My Bench.yaml``), a folder
that does not exist, an entry point that cannot be imported, and a spec of an entry point's folder whose id
is taken already (by a shipped spec, a ``FUSEBENCH_BENCHMARKS`` spec or an earlier plugin) are each named in
one :class:`~fusebench.registry.PluginWarning` and left out: the other specs still load, as for every other
kind of plugin. Two files with one stem among the shipped and ``FUSEBENCH_BENCHMARKS`` folders (the folders
this installation or its user chose), or a spec whose ``name:`` key claims another file's id, are a
:class:`DuplicateIdError` naming both files (a ``name:`` that differs from the stem is refused when the spec is read:
:func:`fusebench.spec.config.read_spec`).
"""

from __future__ import annotations

if __name__ != "fusebench.benchmarks":  # this folder is mapped to fusebench.benchmarks by pyproject.toml
    raise ImportError("import this folder as fusebench.benchmarks; a bare 'benchmarks' would shadow other packages")

import importlib
import os
import warnings
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Mapping

from fusebench.registry import (ID_RULE, DuplicateIdError, PluginWarning, Registry, UnknownNameError, closest,
                                describe_entry_point, valid_id)

HERE = Path(__file__).resolve().parent


def _folders() -> list[tuple[Path, str | None]]:
    """The spec folders in the order they are read, each with the entry point it comes from (None: the shipped
    folder or a ``FUSEBENCH_BENCHMARKS`` one)."""
    folders: list[tuple[Path, str | None]] = [(HERE, None)]
    for extra in filter(None, os.environ.get("FUSEBENCH_BENCHMARKS", "").split(os.pathsep)):
        folders.append((Path(extra), None))
    for ep in entry_points(group="fusebench.benchmarks"):
        value = ep.value
        if ":" in value:
            mod, _, attr = value.partition(":")
            try:
                value = str(getattr(importlib.import_module(mod), attr))
            except Exception as e:  # noqa: BLE001 - a broken plugin must not block the other benchmarks
                warnings.warn(f"benchmark plugin left out: {describe_entry_point(ep)}: {type(e).__name__}: "
                              f"{' '.join(str(e).split())}; expected a folder path or 'module:attribute' naming "
                              f"one", PluginWarning, stacklevel=3)
                continue
        folders.append((Path(value), describe_entry_point(ep)))
    return folders


def registry() -> Registry:
    """The benchmark registry, read afresh from the spec folders (cheap: a folder listing); entries
    are spec paths. Two specs with the same id in different folders are a :class:`DuplicateIdError`
    naming both files (a ``FUSEBENCH_BENCHMARKS`` folder never silently shadows a spec); a spec of an entry point's
    folder whose id is taken is left out with a :class:`PluginWarning` naming it, its entry point and distribution,
    and the spec that has the id (an installed plugin never shadows a spec, nor stops the others loading)."""
    reg = Registry("benchmark")
    seen: set[Path] = set()
    where: dict[str, Path] = {}  # id -> its spec file
    for folder, plugin in _folders():
        if folder.resolve() in seen:
            continue
        seen.add(folder.resolve())
        if not folder.is_dir():
            warnings.warn(f"benchmark folder left out: {folder} is not a folder (FUSEBENCH_BENCHMARKS or a "
                          f"fusebench.benchmarks entry point); expected a folder of <id>.yaml spec files",
                          PluginWarning, stacklevel=2)
            continue
        for f in sorted(folder.glob("*.yaml")):
            if not valid_id(f.stem):  # the id is the stem as written: 'My Bench', 'Quickstart' are not ids
                warnings.warn(f"benchmark spec left out: {f}: its file name {f.stem!r} is not a benchmark id "
                              f"({ID_RULE}); rename the file", PluginWarning, stacklevel=2)
                continue
            if plugin is not None and f.stem in where:
                warnings.warn(f"benchmark plugin left out: {f} of {plugin}: benchmark id {f.stem!r} is taken already "
                              f"(by {where[f.stem]}); expected a unique benchmark id (rename the plugin's "
                              f"file)", PluginWarning, stacklevel=2)
                continue
            reg.add(f.stem, f, origin=str(f))
            where[f.stem] = f
    return reg


def index() -> dict[str, Path]:
    """id -> spec path of every benchmark, from one read of the spec folders and entry points (``path`` reads
    them again at every call: a caller describing many benchmarks reads this once)."""
    reg = registry()
    return {name: reg.get(name) for name in reg.available()}


def available(pattern: str | None = None) -> list[str]:
    import fnmatch

    names = sorted(index())
    return [n for n in names if fnmatch.fnmatch(n, pattern.lower())] if pattern else names


def builtin() -> list[str]:
    """The benchmarks shipped with fusebench (this folder only: no FUSEBENCH_BENCHMARKS folder, no
    entry-point plugin). fusebench's own tests iterate these, so an installed plugin spec never
    makes them fail."""
    return sorted(f.stem for f in HERE.glob("*.yaml") if valid_id(f.stem))


def path(name: str) -> Path:
    """The spec file of the benchmark ``name``, an id matched exactly (ids are lowercase, as ``fusebench status
    --benchmark`` and ``--objective`` take them): another name, ``QuickStart`` too, is an :class:`UnknownNameError`
    naming the closest id and the valid ones."""
    if not isinstance(name, str):
        raise TypeError(f"benchmark id must be a string (fusebench list benchmarks), got {type(name).__name__} "
                        f"{name!r}")
    idx = index()
    if name not in idx:
        hint = closest(name, list(idx))
        msg = f"unknown benchmark {name!r}."
        if hint:
            msg += f" Did you mean {hint!r}?"
        raise UnknownNameError(msg + f" Valid benchmark ids: {', '.join(sorted(idx))}")
    return idx[name]


def load(name: str, overrides: Any = None, synthetic: bool = False):
    """The validated :class:`~fusebench.spec.config.BenchmarkSpec` of the benchmark ``name`` (an id,
    :func:`available`), with its ``synthetic:`` part applied when ``synthetic`` is True, then ``overrides``: a
    mapping of dotted spec keys (``{"pretrain.epochs": 2}``) or ``KEY=VALUE`` strings as ``fusebench run --set``
    and :func:`fusebench.run` take them (``["pretrain.epochs=2"]``, each key once). A name that is not a string is a TypeError,
    an unknown one an :class:`UnknownNameError` naming the closest id; overrides of another form, a
    ``synthetic`` that is not a bool, or a spec that does not check out are a ConfigError naming the key; so is
    ``name`` overridden to another benchmark's id (its records would be filed as that benchmark's)."""
    from fusebench.spec.config import ConfigError, SpecNameError
    from fusebench.spec.request import override_mapping
    from fusebench.components.spec_check import load_spec

    if not isinstance(synthetic, bool):
        raise ConfigError(f"synthetic: expected True or False, got {synthetic!r}")
    if overrides is not None and not isinstance(overrides, Mapping):  # KEY=VALUE strings, read as --set reads them
        overrides = override_mapping(overrides)
    spec_path = path(name)
    try:
        spec = load_spec(spec_path, overrides=overrides, synthetic=synthetic)
    except SpecNameError as e:  # its name: key claims another benchmark's id: name both files
        other = index().get(e.claimed)
        if other is None or other == spec_path:
            raise
        raise DuplicateIdError(f"benchmark id {e.claimed!r} is claimed twice: by {other} (its file name) and by "
                               f"{spec_path} (its name: key); a benchmark's id is its file name: drop the name: "
                               f"key or rename the file") from None
    if spec.name != name:  # --set name=...: a run renamed (the k-views study's cells), never onto another benchmark
        taken = index().get(spec.name)
        if taken is not None:
            raise ConfigError(f"--set name={spec.name}: {spec.name!r} is the id of another benchmark ({taken}); "
                              f"the records of {name} would be filed under it, beside its own runs and on its board; "
                              f"rename the run to a name no benchmark has (fusebench list benchmarks)")
    return spec


__all__ = ["DuplicateIdError", "available", "builtin", "index", "load", "path", "registry"]
