"""Skipping a regeneration that cannot change a byte (issue #34: unchanged boards in every format within 1 s).

``fusebench leaderboard`` is a pure function of its inputs (the markdown, CSV, JSON and HTML are byte-identical
on regeneration, a plot is redrawn only when its input hash changes). The inputs are:

* every run record under ``--runs`` (:func:`fusebench.records.find_records`: hidden folders are not read);
* the files directly inside ``--out``: the boards of benchmarks without runs there (their metadata feeds the
  index), ``reported.yaml``, the study boards (``*-kviews.md``), the pages and plots already written;
* every benchmark spec the registry knows (the boards show the spec's current ``comparison`` block) and the
  YAML files beside a spec outside fusebench's own folders;
* fusebench's own code and data files (the packages ``fusebench``, ``fusebench.objectives``, ``.encoders``,
  ``.datasets``, ``.benchmarks``: every ``.py`` / ``.yaml`` / ``.yml`` / ``.json`` / ``.css`` / ``.js`` file);
  the Python version, the versions of the libraries that compute, parse or draw (numpy, scipy, matplotlib,
  Pillow, PyYAML) and every installed distribution that registers a fusebench entry point (a plugin);
* the command's options (formats, plots, split, ``--reported`` and its content, ``--tex-columns``, and where
  ``--runs`` lies as seen from ``--out``: the HTML pages link the records by relative path).

After a regeneration the command writes ``<out>/.fusebench-regen.json`` (:data:`MANIFEST`): the sha256 of the
inputs, the sha256 of every file then in ``--out`` and the files the command reported. Before the next one,
:func:`unchanged` recomputes the inputs' hash and the hashes of the files in ``--out``: when both are what the
manifest says, regenerating would rewrite nothing and report every file unchanged, so the command says that
without reading a record, importing the statistics or drawing. Anything else (a record added, edited or
removed, a file in ``--out`` touched, added or deleted, a code or library change, other options) runs the
full regeneration, which writes the manifest anew. Hashes are of content, never of modification times (a
fresh clone has new times; an edit can keep a file's size and time). ``--force`` skips the check; a plugin
whose code changes without a new version is the case it is there for.
"""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any

from fusebench.io import sha256_file

#: the manifest's file name inside ``--out`` (hidden: never a board, never read as one)
MANIFEST = ".fusebench-regen.json"
#: the manifest's layout; a manifest of another format is ignored (the regeneration runs)
FORMAT = 1
#: fusebench's packages whose files are inputs (the repository maps four of them to top-level folders)
PACKAGES = ("fusebench", "fusebench.objectives", "fusebench.encoders", "fusebench.datasets", "fusebench.benchmarks")
#: what counts as a code or data file of those packages
CODE_SUFFIXES = frozenset({".py", ".yaml", ".yml", ".json", ".css", ".js"})
#: libraries whose versions are inputs (numbers, YAML parsing, plots)
LIBRARIES = ("numpy", "scipy", "matplotlib", "Pillow", "PyYAML")


def _package_dirs() -> list[Path]:
    dirs = []
    for name in PACKAGES:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations:
            dirs.extend(Path(p) for p in spec.submodule_search_locations)
    return sorted(set(dirs))


def code_digest() -> str:
    """sha256 over (path, content) of every code or data file of fusebench's packages (:data:`PACKAGES`,
    :data:`CODE_SUFFIXES`; ``__pycache__`` and hidden folders skipped)."""
    h = hashlib.sha256()
    for root in _package_dirs():
        files = []
        for folder, dirs, names in os.walk(root):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not d.startswith("."))
            files.extend(Path(folder) / n for n in names if Path(n).suffix in CODE_SUFFIXES)
        for f in sorted(files):
            h.update(f"{root.name}/{f.relative_to(root).as_posix()}\0{sha256_file(f)}\n".encode())
    return h.hexdigest()


def environment() -> dict[str, Any]:
    """The Python version, the versions of :data:`LIBRARIES` (None where not installed) and every installed
    fusebench entry point with its distribution's name and version."""
    libs = {}
    for lib in LIBRARIES:
        try:
            libs[lib] = md.version(lib)
        except md.PackageNotFoundError:
            libs[lib] = None
    plugins = []
    for dist in md.distributions():
        for ep in dist.entry_points:
            if ep.group.startswith("fusebench"):
                plugins.append([ep.group, ep.name, ep.value, dist.metadata["Name"], dist.version])
    return {"python": sys.version, "libraries": libs, "plugins": sorted(plugins, key=lambda p: [str(x) for x in p])}


def specs_digest() -> str:
    """sha256 over every benchmark the registry knows (name, spec path, content) and, for a spec outside
    fusebench's own folders, the other YAML files of its folder (a spec may extend them)."""
    from fusebench import benchmarks

    own = set(_package_dirs())
    h = hashlib.sha256()
    try:
        reg = benchmarks.registry()  # once: each lookup through benchmarks.path() reads the folders again
        index = {name: Path(reg.get(name)) for name in reg.available()}
    except Exception as e:  # noqa: BLE001 - e.g. two specs of one id: the regeneration reports it; hash the text
        h.update(f"registry error {type(e).__name__}: {e}\n".encode())
        index = {}
    seen: set[Path] = set()
    for name, path in sorted(index.items()):
        files = [path]
        if path.parent not in own:
            files += sorted(p for p in path.parent.glob("*.y*ml") if p != path and p not in seen)
        for f in files:
            seen.add(f)
            digest = sha256_file(f) if f.is_file() else "absent"
            h.update(f"{name}\0{f}\0{digest}\n".encode())
    return h.hexdigest()


def records_digest(runs: Path) -> str:
    """sha256 over (path under ``runs``, content) of every run record the leaderboard reads."""
    from fusebench.records import find_records

    h = hashlib.sha256()
    for p in find_records(runs):
        h.update(f"{p.relative_to(runs).as_posix()}\0{sha256_file(p)}\n".encode())
    return h.hexdigest()


def out_files(out: Path) -> dict[str, str]:
    """name -> sha256 of every regular file directly inside ``out`` but the manifest (empty when absent). Not the
    temporary files of writes in progress (``.<name>.<random>.tmp``, :func:`fusebench.io.atomic_write`: another
    regeneration into the same folder may be writing), nor a file gone before it was read (renamed away by one)."""
    found = {}
    try:
        entries = sorted(os.scandir(out), key=lambda e: e.name)
    except OSError:
        return found
    for e in entries:
        if e.name == MANIFEST or (e.name.startswith(".") and e.name.endswith(".tmp")):
            continue
        try:
            if e.is_file(follow_symlinks=False):
                found[e.name] = sha256_file(Path(e.path))
        except FileNotFoundError:
            continue
    return found


def inputs_digest(runs: Path, out: Path, options: dict[str, Any]) -> str:
    """The sha256 of everything but ``--out``'s files that a regeneration reads (module docstring)."""
    opts = dict(options)
    reported = opts.get("reported")
    if reported is not None:
        opts["reported"] = [os.path.abspath(reported), sha256_file(Path(reported))]
    opts["runs_from_out"] = Path(os.path.relpath(os.path.abspath(runs), os.path.abspath(out))).as_posix()
    doc = {"format": FORMAT, "options": opts, "environment": environment(), "code": code_digest(),
           "specs": specs_digest(), "records": records_digest(runs)}
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()


def unchanged(out: Path, inputs: str) -> list[str] | None:
    """The names the last regeneration reported, when the manifest in ``out`` says it ran on exactly the inputs
    whose :func:`inputs_digest` is ``inputs`` and every file in ``out`` is still as it left it; else None."""
    try:
        manifest = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        return None
    reported = manifest.get("reported")
    if not isinstance(reported, list) or not all(isinstance(n, str) for n in reported):
        return None
    files = out_files(out)
    if manifest.get("inputs") != inputs or manifest.get("out_files") != files or not set(reported) <= set(files):
        return None  # a reported name is one of the files hashed, never text the manifest made up
    return reported


def save(out: Path, inputs: str, reported: list[Path]) -> None:
    """Write the manifest after a regeneration that reported ``reported`` (files directly inside ``out``).
    ``inputs`` is :func:`inputs_digest` taken **before** the regeneration read anything: a record written
    while it ran is then a changed input next time, never one the boards are wrongly said to include."""
    from fusebench.io import atomic_write_text, remove_stale_temps
    from fusebench.leaderboard.writer import STALE_TEMP_S

    doc = {"format": FORMAT, "inputs": inputs, "reported": [Path(p).name for p in reported],
           "out_files": out_files(out)}
    remove_stale_temps(out / MANIFEST, older_than=STALE_TEMP_S)  # a killed regeneration's, as the boards' own
    atomic_write_text(out / MANIFEST, json.dumps(doc, indent=1, sort_keys=True) + "\n")


def forget(out: Path) -> None:
    """Remove the manifest (before a regeneration writes anything: a run that fails half way leaves none)."""
    try:
        (out / MANIFEST).unlink()
    except FileNotFoundError:
        pass


__all__ = ["MANIFEST", "code_digest", "environment", "forget", "inputs_digest", "out_files", "save", "unchanged"]
