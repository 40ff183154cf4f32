"""What counts as a record file (records layer): a regular ``run.json`` reached from the runs folder
through real folders; :func:`find_records` lists them, :func:`check_record_file` judges one; and what counts
as one run: :func:`duplicate_runs` finds two records of one (benchmark, comparability key, objective, seed)."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Iterable

from fusebench.records.schema import RecordError, RunRecord


# ---------------------------------------------------------------------------------------------
# what counts as a record file
# ---------------------------------------------------------------------------------------------
RECORD_FILE = "run.json"


def _link_text(path: Path) -> str:
    try:
        return f" (to {os.readlink(path)})"
    except OSError:
        return ""


def check_record_file(path: str | Path, root: str | Path) -> bool:
    """Whether a run record is at ``path`` (``<root>/.../run.json``, ``root`` the runs folder), by the
    one rule of what counts as a record, shared by the leaderboard (:func:`find_records`) and
    ``fusebench status``: True for a regular file reached from ``root`` through real folders, False
    when nothing is there. Anything else raises :class:`RecordError` naming the path: a folder on
    the way that is a symbolic link (records are never read from outside the runs folder), a
    ``run.json`` that is a symbolic link, a folder or a special file. ``root`` itself may be a link."""
    path, root = Path(path), Path(root)
    folder = root
    for part in path.relative_to(root).parts[:-1]:
        folder = folder / part
        if folder.is_symlink():
            raise RecordError(folder, "(folder)", f"a folder, found a symbolic link{_link_text(folder)}; run records "
                              f"are read only from inside the runs folder {root}, never through a link: copy the "
                              "records in instead")
    try:
        mode = os.lstat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError as e:
        raise RecordError(path, "(file)", f"a readable file ({e.strerror})") from None
    if stat.S_ISREG(mode):
        return True
    if stat.S_ISLNK(mode):
        found = f"a symbolic link{_link_text(path)}; run records are read only from inside the runs folder {root}, " \
                "never through a link: copy the record in instead"
    elif stat.S_ISDIR(mode):
        found = "a folder"
    else:
        found = "a special file (FIFO, socket or device)"
    raise RecordError(path, "(file)", f"a regular file, found {found}")


def find_records(root: str | Path) -> list[Path]:
    """Every run record file under the runs folder ``root``, sorted; hidden folders (``.selection/``:
    hyper-parameter trials, ``.submitit/``) are not entered. Each ``run.json`` and each symbolic link
    to a folder found is judged by :func:`check_record_file`, so an entry that breaks the rule is a
    :class:`RecordError`, never skipped; so is a folder that cannot be listed."""
    root = Path(root)
    found = []

    def unlistable(e: OSError) -> None:
        raise RecordError(e.filename, "(folder)", f"a readable folder ({e.strerror})")

    for folder, dirs, files in os.walk(root, onerror=unlistable):  # never follows a link below root
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        here = Path(folder)
        for d in dirs:  # links to folders are listed here (os.walk does not enter them); so is a run.json folder
            if d == RECORD_FILE:
                check_record_file(here / d, root)
            elif (here / d).is_symlink():
                check_record_file(here / d / RECORD_FILE, root)
        if RECORD_FILE in files and check_record_file(here / RECORD_FILE, root):
            found.append(here / RECORD_FILE)
    return sorted(found)


def duplicate_runs(records: Iterable[RunRecord]) -> tuple[RunRecord, RunRecord] | None:
    """The first two records of one run -- the same benchmark, comparability key, objective and seed: one table
    (a board's, a per-seed one) counts each (objective, seed) of a comparable group once -- in ``records``' order,
    or None when every run has one record."""
    seen: dict[tuple[str, str, str, int], RunRecord] = {}
    for r in records:
        other = seen.setdefault((r.benchmark, r.comparability_key, r.objective, r.seed), r)
        if other is not r:
            return other, r
    return None
