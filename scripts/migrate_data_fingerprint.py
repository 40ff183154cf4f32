"""Migrate run records to data fingerprints of the files read, once (issue #31): ``python
scripts/migrate_data_fingerprint.py DIR...``.

A record's ``dataset.fingerprint`` used to cover every file under the data root: an ``mv-ngs`` run on
``--data-root multiview/`` fingerprinted all four ``.mat`` files of the folder, so adding an unrelated file
to it changed the identity of every record made from it. The fingerprint now covers the files the
adapter reads (``files_read``; :mod:`fusebench.datasets.fingerprint`): for the ``multiview_mat`` datasets
the one ``.mat`` file, the fingerprint ``--data-root multiview/NGs.mat`` gives.

For every ``run.json`` under the given folders (hidden ``.selection`` trial folders included) whose
dataset was read from one ``.mat`` file (``dataset.splits`` holds its ``file`` and ``sha256``) and whose
fingerprint lists more files than that one, this rewrites exactly these fields and nothing else:

* ``dataset.fingerprint``: ``files`` = ``[[name, size]]`` (the file's path relative to the data root and its
  size, both from the old fingerprint's listing), ``num_files`` 1, ``total_bytes`` = size,
  ``content_hashed`` true, ``sha256`` = sha256 of the line ``"{name}\\t{size}\\t{file sha256}\\n"`` with the
  file's sha256 the record holds (``dataset.splits.sha256``, computed by the adapter when it read the file)
  -- :func:`fusebench.datasets.fingerprint.fingerprint` of that one file, without reading it again;
* ``comparability_key``: recomputed (schema-2 records).

The old fingerprint must have hashed contents and must list the file read; otherwise the script stops and
writes nothing. A record already fingerprinting only its file is left alone (the script may be run again).
Nothing is written until every record of every folder has been converted and checked. The boards embed
the fingerprint and the comparability key: regenerate them afterwards (docs/leaderboards.md).
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import sys
from pathlib import Path
from typing import Any

from fusebench.records import comparability_key
from fusebench.records.migration import run_migration


def file_fingerprint(name: str, size: int, sha256: str) -> dict[str, Any]:
    """The fingerprint of one content-hashed file (the format of fusebench.datasets.fingerprint)."""
    return {"files": [[name, size]], "num_files": 1, "total_bytes": size, "content_hashed": True,
            "sha256": hashlib.sha256(f"{name}\t{size}\t{sha256}\n".encode()).hexdigest()}


def migrate(record: dict[str, Any], where: str) -> dict[str, Any] | None:
    """The record with the fingerprint of the file it read (a new dict), or None when there is nothing to do."""
    ds = record.get("dataset") or {}
    fp, splits = ds.get("fingerprint"), ds.get("splits")
    if ds.get("synthetic") or not isinstance(fp, dict) or not isinstance(splits, dict):
        return None
    if not (isinstance(splits.get("file"), str) and isinstance(splits.get("sha256"), str)):
        return None  # not read from one file: the fingerprint still covers the root
    root = ds.get("root") or ""
    name = posixpath.relpath(Path(splits["file"]).as_posix(), Path(root).as_posix()) if root else Path(splits["file"]).name
    if name.startswith("../") or name == ".":  # the root was the file itself
        name = Path(splits["file"]).name
    listed = {str(rel): int(size) for rel, size in fp.get("files") or []}
    if list(listed) == [name]:
        return None  # already the file's fingerprint
    if name not in listed:
        raise ValueError(f"{where}: dataset.fingerprint lists {sorted(listed)[:5]}, not the file read ({name})")
    if not fp.get("content_hashed") or len(listed) != fp.get("num_files"):
        raise ValueError(f"{where}: dataset.fingerprint did not hash every file's content (content_hashed "
                         f"{fp.get('content_hashed')}, {len(listed)} of {fp.get('num_files')} files listed)")
    out = json.loads(json.dumps(record))
    out["dataset"]["fingerprint"] = file_fingerprint(name, listed[name], splits["sha256"])
    if record.get("schema_version", 1) >= 2 and "comparability_key" in record:
        out["comparability_key"] = comparability_key(out)
    return out


def main(argv: list[str] | None = None) -> int:
    return run_migration(__doc__, argv, migrate, "convert and check only; write nothing",
                         lambda seen, todo: f"{seen} record(s): {len(todo)} to migrate, {seen - len(todo)} left as they are")


if __name__ == "__main__":
    sys.exit(main())
