"""Migrate run records to hash schema 3, once (issue #29): ``python scripts/migrate_hash_schema_3.py DIR...``.

Hash schema 3 (``fusebench/spec/config.py``) keeps schema 2's canonical form and hashes per cell only
what the cell computes with: schema 2's identity without the fields the cell's pipeline does not apply
(``Pipeline.applies``: for ``gaussian_mi`` e.g. ``pretrain.batch_size``), without the options of the
pretraining methods that do not join the objective's runs, and without ``pretrain.selection_seed`` when
``pretrain.selection_seeds`` is set. The spec loader also stops recording ``dataset.synthetic_spec`` for
runs on real data (the generator is not used).

For every ``run.json`` under the given folders (hidden ``.selection`` trial folders included) at hash
schema 2 this checks that its stored ``config_hash`` is the schema-2 hash of its own ``config`` (the record
is intact), then rewrites exactly these fields and nothing else:

* ``config.dataset.synthetic_spec``: ``{}`` when the record was made on real data (``dataset.synthetic``
  false, the spec not ``synthetic_only``); unchanged otherwise;
* ``config_hash``: :func:`fusebench.components.identity.config_hash` of the config and the objective, schema 3;
* ``hash_schema``: ``3``;
* ``comparability_key``: recomputed (schema-2 records; it changes only where the config did).

Each file is rewritten atomically; a record already at hash schema 3 or later is left alone (the script may be
run again). Nothing is written until every record of every folder has been converted and validated. The
target is schema 3 whatever the code's current ``HASH_SCHEMA_VERSION`` (a later schema has its own script).
A file that is not a JSON object, or a record the script cannot convert, is one line ``error: <file>: <what>``
(exit status 1), and nothing is written.
``--check`` converts and reports only: how many records there are, how many of them get a new hash (the
old and new hash differ), per benchmark.
"""

from __future__ import annotations

import copy
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from fusebench.records import comparability_key
from fusebench.records.migration import run_migration
from fusebench.components.identity import config_hash

FROM_SCHEMA = 2
TO_SCHEMA = 3  # what this script writes, whatever fusebench.spec.config.HASH_SCHEMA_VERSION is now


def migrate(record: dict[str, Any], where: str) -> dict[str, Any] | None:
    """The record at hash schema 3 (a new dict), or None when it is there (or later) already. ValueError for a
    record that is not at schema 2 or whose stored hash is not the schema-2 hash of its config."""
    schema = record.get("hash_schema")
    if type(schema) is int and schema >= TO_SCHEMA:
        return None
    if schema != FROM_SCHEMA:
        raise ValueError(f"{where}: hash_schema {schema!r}: only schema-{FROM_SCHEMA} records are migrated (run "
                         "scripts/migrate_hash_schema_2.py first)")
    config, objective = record["config"], record["objective"]
    if record.get("config_hash") != config_hash(config, objective, FROM_SCHEMA):
        raise ValueError(f"{where}: config_hash {record.get('config_hash')!r} is not the schema-{FROM_SCHEMA} hash of "
                         "the record's config (was the record edited?)")
    out = dict(record)
    new = copy.deepcopy(config)
    ds_cfg, ds = new.get("dataset"), record.get("dataset")
    real = isinstance(ds, dict) and ds.get("synthetic") is False
    if real and isinstance(ds_cfg, dict) and not ds_cfg.get("synthetic_only") and ds_cfg.get("synthetic_spec"):
        ds_cfg["synthetic_spec"] = {}  # the generator was not used: not part of what the run computed
    out["config"] = new
    out["config_hash"] = config_hash(new, objective, TO_SCHEMA)
    out["hash_schema"] = TO_SCHEMA
    if record.get("schema_version", 1) >= 2:
        out["comparability_key"] = comparability_key(out)
    return out


def main(argv: list[str] | None = None) -> int:
    def summary(seen: int, todo: list[tuple[Path, dict[str, Any], dict[str, Any]]]) -> str:
        changed = Counter(str(old.get("benchmark")) for _, old, new in todo if new["config_hash"] != old["config_hash"])
        return (f"{seen} record(s): {len(todo)} to migrate to hash schema {TO_SCHEMA}, {seen - len(todo)} there "
                f"already; {sum(changed.values())} get a new config_hash"
                + (" (" + ", ".join(f"{b}: {n}" for b, n in sorted(changed.items())) + ")" if changed else ""))

    return run_migration(__doc__, argv, migrate, "convert and report only; write nothing", summary)


if __name__ == "__main__":
    sys.exit(main())
