"""Migrate run records to hash schema 4, once: ``python scripts/migrate_hash_schema_4.py DIR...``.

Hash schema 4 (``fusebench/spec/config.py``) keeps schema 3's canonical form -- a record's ``config`` does not
change -- and hashes per cell a little less: schema 3's identity without ``pretrain`` for the rows that pretrain
nothing (the reference rows ``raw``, ``raw_*``, ``none``, and weights rows: their cells read no pretraining setting,
so changing the pretraining budget no longer gives them a new hash), and without the values of
``pretrain.hparams.<id>`` that the objective's selection grid ``pretrain.grid.<id>`` replaces (every cell trains at
the frozen choice, not at that value), and without ``pretrain.selection_seed(s)`` for an objective without a grid
(nothing is selected).

For every ``run.json`` under the given folders (hidden ``.selection`` trial folders included) at hash schema 3 this
checks that its stored ``config_hash`` is the schema-3 hash of its own ``config`` (the record is intact), then
rewrites ``config_hash`` (:func:`fusebench.components.identity.config_hash` of the config and the objective,
schema 4) and ``hash_schema`` (``4``), and, in a record of a selected objective, the ``config_hash`` of the frozen
selection it holds (``hparam_selection``, a copy of the selection file) and ``hparam_selection_sha256`` (that file's
sha256 once migrated). Each frozen hyper-parameter selection (``<benchmark>/_selection/
<objective>.json``, whose ``config_hash`` is that of the objective's cells) gets the new hash of the records of
the same benchmark, objective and old hash in the same folder; a selection file none of whose records is there is
an error (its new hash cannot be computed without a config). ``comparability_key`` depends on the config alone
and stays.

Each file is rewritten atomically; a record already at hash schema 4 is left alone (the script may be run again).
Nothing is written until every file of every folder has been converted and validated. The target is schema 4
whatever the code's current ``HASH_SCHEMA_VERSION`` (a later schema has its own script). A file the script cannot
convert is one line ``error: <file>: <what>`` (exit status 1), and nothing is written. ``--check`` converts and
reports only: how many records and selection files there are, how many get a new hash, per benchmark.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from fusebench.components.identity import config_hash, row_known
from fusebench.io import strict_json
from fusebench.records.migration import MigrationError, migrated_records, missing_folder, parse_args, write_all

FROM_SCHEMA = 3
TO_SCHEMA = 4  # what this script writes, whatever fusebench.spec.config.HASH_SCHEMA_VERSION is now


def migrate(record: dict[str, Any], where: str) -> dict[str, Any] | None:
    """The record at hash schema 4 (a new dict), or None when it is there already. ValueError for a record that is
    not at schema 3 or whose stored hash is not the schema-3 hash of its config."""
    schema = record.get("hash_schema")
    if type(schema) is int and schema >= TO_SCHEMA:
        return None
    if schema != FROM_SCHEMA:
        raise ValueError(f"{where}: hash_schema {schema!r}: only schema-{FROM_SCHEMA} records are migrated (run "
                         f"scripts/migrate_hash_schema_{FROM_SCHEMA}.py first)")
    config, objective = record["config"], record["objective"]
    weights = config.get("encoder_weights") if isinstance(config, dict) else None
    if not row_known(objective) and not (isinstance(weights, dict) and objective in weights):
        raise ValueError(f"{where}: row {objective!r} is neither an objective nor a reference row here (a plugin not "
                         "installed?): whether it pretrains decides its schema-4 hash; install the plugin and migrate "
                         "again")
    if record.get("config_hash") != config_hash(config, objective, FROM_SCHEMA):
        raise ValueError(f"{where}: config_hash {record.get('config_hash')!r} is not the schema-{FROM_SCHEMA} hash of "
                         "the record's config (was the record edited?)")
    new_hash = config_hash(config, objective, TO_SCHEMA)
    out = {**record, "config_hash": new_hash, "hash_schema": TO_SCHEMA}
    sel = record.get("hparam_selection")
    if isinstance(sel, dict):  # the frozen selection the cell trained at, copied in whole, and its file's sha256
        if sel.get("config_hash") != record["config_hash"] or record.get("hparam_selection_sha256") != file_sha256(sel):
            raise ValueError(f"{where}: hparam_selection is not the frozen selection of the record's configuration "
                             "(its config_hash or the file's sha256 hparam_selection_sha256 differs; was it edited?)")
        out["hparam_selection"] = {**sel, "config_hash": new_hash}
        out["hparam_selection_sha256"] = file_sha256(out["hparam_selection"])
    return out


def file_sha256(selection: dict[str, Any]) -> str:
    """The sha256 of a frozen selection file holding ``selection``, in the layout the sweep writes it
    (:func:`fusebench.runtime.utils.create_json_once`: indented, sorted-key strict JSON, a final newline)."""
    return hashlib.sha256((strict_json(selection, indent=2, sort_keys=True) + "\n").encode("utf-8")).hexdigest()


def migrate_selection(selection: dict[str, Any], where: str,
                      new_hash: dict[tuple[str, str, str], set[str]]) -> dict[str, Any] | None:
    """A frozen selection file with the schema-4 hash of its objective's cells (a new dict), or None when its hash
    is one already. ``new_hash``: ``{(benchmark, objective, hash before): {hash after}}`` over the migrated
    records (and ``{(benchmark, objective, hash): {hash}}`` for records at schema 4 already). ValueError naming
    the file when no record, or records of two new hashes, stand behind it."""
    key = (selection.get("benchmark"), selection.get("objective"), selection.get("config_hash"))
    if not all(isinstance(k, str) for k in key):
        raise ValueError(f"{where}: expected the string fields benchmark, objective and config_hash of a frozen "
                         "selection")
    after = new_hash.get(key)
    if not after:
        raise ValueError(f"{where}: no record of {key[0]}/{key[1]} with config hash {key[2]} in the migrated folders, "
                         "so its schema-4 hash cannot be computed; migrate it with the runs it was made for, or "
                         "delete it to select again")
    if len(after) > 1:
        raise ValueError(f"{where}: the records of {key[0]}/{key[1]} with config hash {key[2]} get the schema-4 "
                         f"hashes {sorted(after)}")
    (h,) = after
    return None if h == key[2] else {**selection, "config_hash": h}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(__doc__, argv, "convert and report only; write nothing")
    if missing_folder(args.folders):
        return 2
    todo: list[tuple[Path, dict[str, Any]]] = []
    seen = selections = 0
    changed: Counter[str] = Counter()
    for folder in args.folders:
        new_hash: dict[tuple[str, str, str], set[str]] = {}  # per folder: a selection names the cells beside it
        embedded: dict[tuple[str, str], list[tuple[Path, dict[str, Any]]]] = {}  # the records' copies of selections
        try:
            for path, rec, new in migrated_records(folder, migrate):
                seen += 1
                after = rec if new is None else new
                new_hash.setdefault((rec.get("benchmark"), rec.get("objective"), rec.get("config_hash")),
                                    set()).add(after["config_hash"])
                if isinstance(after.get("hparam_selection"), dict):
                    embedded.setdefault((rec.get("benchmark"), rec.get("objective")), []).append(
                        (path, after["hparam_selection"]))
                if new is not None:
                    todo.append((path, new))
                    if new["config_hash"] != rec["config_hash"]:
                        changed[str(rec.get("benchmark"))] += 1
        except MigrationError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        for path in sorted(folder.glob("*/_selection/*.json")):
            selections += 1
            try:
                sel = json.loads(path.read_text(encoding="utf-8"))
                new = migrate_selection(sel if isinstance(sel, dict) else {}, str(path), new_hash)
            except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
                print(f"error: {path}: cannot read it as JSON ({e})", file=sys.stderr)
                return 1
            except ValueError as e:
                print(f"error: {e}", file=sys.stderr)
                return 1
            now = sel if new is None else new
            for rec_path, copy in embedded.get((sel.get("benchmark"), sel.get("objective")), []):
                if copy.get("config_hash") == now["config_hash"] and copy != now:
                    print(f"error: {rec_path}: its hparam_selection is not the selection file {path} once migrated "
                          "(was one of them edited?)", file=sys.stderr)
                    return 1
            if new is not None:
                todo.append((path, new))
                changed[f"{sel.get('benchmark')} (selection files)"] += 1
    print(f"{seen} record(s) and {selections} frozen selection(s): {len(todo)} file(s) to migrate to hash schema "
          f"{TO_SCHEMA}; {sum(changed.values())} get a new config_hash"
          + (" (" + ", ".join(f"{b}: {n}" for b, n in sorted(changed.items())) + ")" if changed else ""))
    write_all(todo, args.check)
    if not args.check:
        print(f"written: {len(todo)} file(s) under {', '.join(str(f) for f in args.folders)}")
    return 0

if __name__ == "__main__":
    sys.exit(main())
