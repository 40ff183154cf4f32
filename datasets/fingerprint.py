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


def fingerprint(root: str | os.PathLike, max_bytes: int = MAX_BYTES) -> dict[str, Any]:
    """The fingerprint of every (non-hidden) file under ``root`` (see the module docstring)."""
    root = Path(root)
    if not root.exists():
        raise FileNotFoundError(f"data root {root} does not exist")
    files = [(rel, p, p.stat().st_size) for rel, p in _files(root)]
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
