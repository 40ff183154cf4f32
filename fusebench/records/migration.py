"""The loop the runs-folder migration scripts share (``scripts/migrate_*.py``; records layer): their arguments
(runs folders and ``--check``), every ``run.json`` under a folder read, converted by the script's ``migrate`` and
the result validated, and the converted files written at the end (nothing when one fails or with ``--check``).

A script's own part is its ``migrate(record, where) -> new record | None`` (None: nothing to change) and the summary
it prints; :func:`run_migration` is the whole command for a script that needs nothing more, and
:func:`migrated_records` the loop for one that also converts other files beside the records (hash schema 4's
frozen selections)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Callable, Iterator

from fusebench.io import atomic_write_json
from fusebench.records.schema import read_record_json, validate_record
from fusebench.runtime.terminal_help import Parser

#: ``migrate(record, where)``: the converted record, or None when it is left as it is
Migrate = Callable[[dict[str, Any], str], "dict[str, Any] | None"]


class MigrationError(ValueError):
    """A record that cannot be migrated; the message names the file."""


def parse_args(doc: str | None, argv: list[str] | None, check_help: str) -> argparse.Namespace:
    """``folders`` (one or more runs folders) and ``--check`` (``check_help``); the description is the first
    paragraph of the script's docstring ``doc``."""
    p = Parser(description=(doc or "").split("\n\n")[0])
    p.add_argument("folders", nargs="+", type=Path, help="runs folders (e.g. leaderboards/runs leaderboards/runs-kviews)")
    p.add_argument("--check", action="store_true", help=check_help)
    return p.parse_args(argv)


def missing_folder(folders: list[Path]) -> int:
    """2, said on stderr, when one of ``folders`` is not a folder; else 0."""
    for folder in folders:
        if not folder.is_dir():
            print(f"error: {folder} is not a folder", file=sys.stderr)
            return 2
    return 0


def migrated_records(folder: Path, migrate: Migrate) -> Iterator[tuple[Path, dict[str, Any], dict[str, Any] | None]]:
    """``(path, record, converted or None)`` for every ``run.json`` under ``folder`` (sorted), the converted record
    validated; a :class:`MigrationError` naming the file for one that cannot be read (not a JSON object: the
    :class:`~fusebench.records.schema.RecordError`), converted (the script's ``ValueError``, or a field missing or of
    another type) or validated."""
    for path in sorted(folder.rglob("run.json")):
        try:
            rec = read_record_json(path)
            new = migrate(rec, str(path))
            if new is not None:
                validate_record(new, path)
        except ValueError as e:  # names the file (RecordError, migrate's errors)
            raise MigrationError(str(e)) from None
        except (KeyError, TypeError) as e:
            raise MigrationError(f"{path}: {type(e).__name__} {e}") from None
        yield path, rec, new


def write_all(todo: list[tuple[Path, dict[str, Any]]], check: bool) -> None:
    """Write every converted file of ``todo`` (atomically, one by one), unless ``check``."""
    if not check:
        for path, new in todo:
            atomic_write_json(path, new)


def run_migration(doc: str | None, argv: list[str] | None, migrate: Migrate, check_help: str,
                  summary: Callable[[int, list[tuple[Path, dict[str, Any], dict[str, Any]]]], str]) -> int:
    """The command of a script that migrates records only: parse ``argv``, convert every record of every folder,
    print ``summary(records seen, [(path, old, new) to write])`` and write them (not with ``--check``). Exit status
    0; 1 when a record cannot be migrated (nothing written); 2 when a folder is missing."""
    args = parse_args(doc, argv, check_help)
    if missing_folder(args.folders):
        return 2
    seen, todo = 0, []
    try:
        for folder in args.folders:
            for path, rec, new in migrated_records(folder, migrate):
                seen += 1
                if new is not None:
                    todo.append((path, rec, new))
    except MigrationError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(summary(seen, todo))
    write_all([(path, new) for path, _, new in todo], args.check)
    return 0


__all__ = ["MigrationError", "migrated_records", "missing_folder", "parse_args", "run_migration", "write_all"]
