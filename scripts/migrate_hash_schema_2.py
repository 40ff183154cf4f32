"""Migrate run records to hash schema 2, once (issue #20): ``python scripts/migrate_hash_schema_2.py DIR...``.

Hash schema 1 hashed the whole spec, with the built-in methods' options as the flat ``pretrain`` keys
they had before methods had options (``tuple_*``, ``embedding_noise``, ``ema_teacher``, ``ema_momentum``,
``m3g_view_rotation``), fields added later written only when set, and a precision of ``32`` left out.
Hash schema 2 (``fusebench/spec/config.py``) stores the spec with ``pretrain.methods.<id>`` holding
the options that differ from their defaults, every field written, and hashes per cell what determines
the cell (``cell_identity``: no board text, sweep lists or checkpoint spacing; the per-objective tables
of ``pretrain`` cut to the cell's objective).

For every ``run.json`` under the given folders (hidden ``.selection`` trial folders included) this
rewrites exactly these fields and nothing else:

* ``config``: the record's configuration in the schema-2 canonical form: read back into a spec
  (``spec_from_dict``, which maps the flat method keys onto the method options) and written out again.
  The script checks that the rewrite changes no setting: every value of the old form is found in the
  new one at its path, or, for a flat method key, at ``pretrain.methods.<id>.<option>`` (absent there
  when it is the option's default); what the new form adds is a default (a field the spec gained after
  the run: the behaviour it names was the default's) or ``precision: "32"``.
* ``config_hash``: :func:`fusebench.components.identity.config_hash` of the new config and the objective, schema 2.
* ``hash_schema``: ``2``.
* ``comparability_key``: recomputed from the new config (schema-2 records).

Schema 3 came later (``scripts/migrate_hash_schema_3.py``, run after this one): this script writes schema 2.

Each file is rewritten atomically; a record already at hash schema 2 is left alone (the script may be
run again). Nothing is written until every record of every folder has been converted and checked.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from fusebench.records import comparability_key
from fusebench.records.migration import run_migration
from fusebench.spec import methods as M
from fusebench.components.identity import config_hash
from fusebench.spec.config import RENAMED_PRETRAIN_KEYS, BenchmarkSpec, spec_from_dict

HASH_SCHEMA_VERSION = 2  # what this script writes (a record at schema 2 or later is left alone)

_ABSENT = object()


def _get(node: Any, path: list[str]) -> Any:
    for p in path:
        if not isinstance(node, dict) or p not in node:
            return _ABSENT
        node = node[p]
    return node


def _leaves(node: Any, prefix: list[str]) -> list[tuple[list[str], Any]]:
    if isinstance(node, dict) and node:
        out = []
        for k in node:
            out += _leaves(node[k], prefix + [k])
        return out
    return [(prefix, node)]


def _defaults() -> dict[str, Any]:
    return BenchmarkSpec().to_dict()


def check_same_settings(old: dict[str, Any], new: dict[str, Any], where: str) -> None:
    """Raise ValueError unless ``new`` holds every setting of ``old`` (see the module docstring)."""
    defaults = _defaults()
    for path, value in _leaves(old, []):
        if path[:1] == ["pretrain"] and len(path) == 2 and path[1] in RENAMED_PRETRAIN_KEYS:
            mid, opt = RENAMED_PRETRAIN_KEYS[path[1]]
            default = getattr(M.METHODS.get(mid).Options(), opt)
            got = _get(new, ["pretrain", "methods", mid, opt])
            if not ((got is _ABSENT and value == default) or got == value):
                raise ValueError(f"{where}: pretrain.{path[1]} = {value!r} became pretrain.methods.{mid}.{opt} = "
                                 f"{'(default)' if got is _ABSENT else repr(got)}")
            continue
        got = _get(new, path)
        if got != value or type(got) is not type(value):
            raise ValueError(f"{where}: {'.'.join(path)} = {value!r} became {got!r}")
    for path, value in _leaves(new, []):
        if _get(old, path) is not _ABSENT or (path[:2] == ["pretrain", "methods"]):
            continue
        if path == ["precision"] and value == "32":
            continue
        if _get(defaults, path) != value:
            raise ValueError(f"{where}: the new form adds {'.'.join(path)} = {value!r}, which is not its default")


def migrate(record: dict[str, Any], where: str) -> dict[str, Any] | None:
    """The record at hash schema 2 (a new dict), or None when it is there already."""
    if isinstance(record.get("hash_schema"), int) and record["hash_schema"] >= HASH_SCHEMA_VERSION:
        return None
    old = record["config"]
    new = json.loads(json.dumps(spec_from_dict(old, where).to_dict()))  # JSON types, as a record holds them
    check_same_settings(old, new, where)
    out = dict(record)
    out["config"] = new
    out["config_hash"] = config_hash(new, record["objective"], HASH_SCHEMA_VERSION)
    out["hash_schema"] = HASH_SCHEMA_VERSION
    if record.get("schema_version", 1) >= 2:
        out["comparability_key"] = comparability_key(out)
    return out


def main(argv: list[str] | None = None) -> int:
    return run_migration(__doc__, argv, migrate, "convert and check only; write nothing",
                         lambda seen, todo: f"{seen} record(s): {len(todo)} to migrate, {seen - len(todo)} at hash schema "
                                            f"{HASH_SCHEMA_VERSION} already")


if __name__ == "__main__":
    sys.exit(main())
