"""What a run read: a fingerprint of the data files under a dataset root.

Two runs on different copies of a dataset must never be merged in a leaderboard, so every run
record carries ``dataset.fingerprint``::

    {"files": [[relpath, size_bytes], ...],   # sorted; at most MAX_LISTED entries are listed
     "num_files": int, "total_bytes": int,
     "content_hashed": bool,                  # True: sha256 covers every file's bytes
     "sha256": str}                           # over (relpath, size, content digest or '-') lines

Contents are hashed when the root holds at most ``max_bytes`` in all (default 2 GiB: the
multi-view .mat files, the sentiment pickles, the sample EDFs); above it only names and sizes enter
the hash (``content_hashed: false``), which still separates copies that differ in any file's size
or name. Hidden files and folders (``.tmp-*``, ``.complete``) are skipped. A root that is a single
file (e.g. ``--data-root handwritten.mat``) is fingerprinted as that one file.

Only the files the run reads are fingerprinted when its dataset adapter says which they are (the
``files_read`` hook, e.g. the one ``.mat`` file of a ``multiview_mat`` dataset: ``--data-root multiview/``
with ``mv_ngs`` fingerprints ``NGs.mat`` alone, as ``--data-root multiview/NGs.mat`` does), so another file
added to the data folder leaves the records made from it comparable.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from fusebench.io import sha256_file

MAX_LISTED = 200
MAX_BYTES = 2 * 2**30


def _files(root: Path) -> list[tuple[str, Path]]:
    if root.is_file():
        return [(root.name, root)]
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            if name.startswith("."):
                continue
            p = Path(dirpath) / name
            out.append((p.relative_to(root).as_posix(), p))
    return sorted(out)


def _listed(root: Path, paths: list[str | os.PathLike]) -> list[tuple[str, Path]]:
    """The given files, each named by its path relative to a folder root (its name for a file root, or for a
    file outside the root)."""
    out = []
    for p in paths:
        p = Path(p)
        if not p.is_absolute() and not p.exists():
            p = root / p
        if not p.is_file():
            raise FileNotFoundError(f"data file {p} does not exist")
        try:
            rel = p.resolve().relative_to(root.resolve()).as_posix() if root.is_dir() else p.name
        except ValueError:
            rel = p.name
        out.append((rel, p))
    return sorted(set(out))


def fingerprint(root: str | os.PathLike, max_bytes: int = MAX_BYTES,
                files: list[str | os.PathLike] | None = None) -> dict[str, Any]:
    """The fingerprint of every (non-hidden) file under ``root``, or of ``files`` only (the files the
    dataset adapter reads: its ``files_read`` hook) when given (see the module docstring)."""
    root = Path(root)
    if not root.exists():
        raise FileNotFoundError(f"data root {root} does not exist")
    files = [(rel, p, p.stat().st_size) for rel, p in (_files(root) if files is None else _listed(root, files))]
    total = sum(size for _, _, size in files)
    hashed = total <= max_bytes
    h = hashlib.sha256()
    for rel, p, size in files:
        h.update(f"{rel}\t{size}\t{sha256_file(p) if hashed else '-'}\n".encode())
    return {
        "files": [[rel, size] for rel, _, size in files[:MAX_LISTED]],
        "num_files": len(files),
        "total_bytes": total,
        "content_hashed": hashed,
        "sha256": h.hexdigest(),
    }


__all__ = ["fingerprint"]
