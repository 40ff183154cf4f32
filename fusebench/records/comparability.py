"""Which records may be compared (records layer): the comparability fields and key of a record (a run.json
mapping, or a :class:`~fusebench.records.schema.RunRecord` through its ``raw`` mapping), and whether a config
ran with its spec's synthetic overrides (the version block a run writes: :mod:`fusebench.components.identity`).
This module reads mappings only and sits below the schema: what needs the typed record (the fields in which
records differ, the board a record belongs on) is :mod:`fusebench.records.schema`'s."""

from __future__ import annotations

import copy
from typing import Any, Mapping, Protocol

from fusebench.components.protocols import without_width_option
from fusebench.io import canonical_json, sha256_hex
from fusebench.spec.config import NOT_IDENTITY, PER_OBJECTIVE


class HasRaw(Protocol):
    """A record read from its file (:class:`fusebench.records.schema.RunRecord`): the parsed JSON as ``raw``."""

    raw: Mapping[str, Any]

#: config keys left out of the comparability hash: those that do not change what a cell computes (the
#: config hash's :data:`~fusebench.spec.config.NOT_IDENTITY`)
CONFIG_KEYS_IGNORED = NOT_IDENTITY


# ---------------------------------------------------------------------------------------------
# comparability
# ---------------------------------------------------------------------------------------------
def comparable_view(config: Mapping[str, Any]) -> dict[str, Any]:
    """:func:`comparable_config` without the deep copy: only the top level and ``options`` are new
    mappings, every other value is shared with ``config``. For reading only (hashing, flattening);
    copying every nested value was most of the cost of validating a record."""
    # encoder_weights (issue #32): each weights row's own file, like the per-objective tables of pretrain
    cfg = {k: v for k, v in config.items() if k not in CONFIG_KEYS_IGNORED and k != "encoder_weights"}
    if isinstance(cfg.get("options"), dict):  # and raw_pca's own widths, like an objective's grid
        cfg["options"] = without_width_option({k: v for k, v in cfg["options"].items() if k != "board"})
    if isinstance(cfg.get("pretrain"), dict):  # each row's own settings (hash schema 2): not the board's
        cfg["pretrain"] = {k: v for k, v in cfg["pretrain"].items() if k not in PER_OBJECTIVE and k != "objective"}
    return cfg


def comparable_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` without :data:`CONFIG_KEYS_IGNORED`, ``options.board`` and what is each row's own: the
    per-objective tables of ``pretrain`` (hyper-parameters, grid, batch, epochs, micro-batch; the budget each
    row got is a column of the board), ``raw_pca``'s widths (``options.<protocol>.pca_widths``) and the default
    objective (a deep copy)."""
    return copy.deepcopy(comparable_view(config))


def comparable_manifest(ds: Mapping[str, Any], legacy: bool = False) -> Any:
    """The ``dataset.manifest_hash`` of a record as a comparability field: ``"unprepared"`` for any real-data run,
    whether it read the official files or a prepared cache of them (a cache holds what the adapter's raw reader
    gives for the same source files, options and ``PREPROCESS_VERSION``: its manifest names them; what the data
    was is the ``fingerprint`` field). ``legacy``: the hash as written (the key of records written before
    2026-11-29, when a run that read a cache did not compare with one that did not)."""
    mh = ds.get("manifest_hash")
    if legacy or ds.get("synthetic") or mh in (None, "synthetic", "unprepared"):
        return mh
    return "unprepared"


def comparability_fields(record: Mapping[str, Any] | HasRaw, legacy: bool = False) -> dict[str, Any]:
    """What must be equal for two runs to be compared (a v1 record gets the version defaults); ``legacy``: the
    manifest hash as written (:func:`comparable_manifest`)."""
    raw = record if isinstance(record, Mapping) else record.raw  # a mapping or a RunRecord
    cfg = raw.get("config") or {}
    cfg = cfg if isinstance(cfg, dict) else {}
    ds = raw.get("dataset") or {}
    ds = ds if isinstance(ds, dict) else {}
    metric_ids = [m for m in cfg.get("metrics") or [] if isinstance(m, str)]
    # the objective's version is not a field: rows of one board are different objectives (the leaderboard
    # requires it to be the same within each objective's row instead)
    entries = raw.get("metrics") if raw.get("schema_version", 1) >= 4 else None
    if isinstance(entries, dict):  # schema 4: each metric's version is in its entry
        mv = {m: e.get("version") for m, e in entries.items() if isinstance(e, dict)}
        metric_versions = {m: mv.get(m) for m in metric_ids} if metric_ids else mv
    elif raw.get("schema_version", 1) >= 2 and isinstance(raw.get("versions"), dict):
        mv = raw["versions"].get("metrics") if isinstance(raw["versions"].get("metrics"), dict) else {}
        metric_versions = {m: mv.get(m) for m in metric_ids} if metric_ids else dict(mv)
    else:
        metric_versions = {m: "1" for m in metric_ids}
    fp = ds.get("fingerprint")
    versions = raw.get("versions") if isinstance(raw.get("versions"), dict) else {}
    # the encoder's version where it is not "1" (a field only then: records of version 1 keep their key)
    encoder = {"encoder_version": versions["encoder"]} if versions.get("encoder", "1") != "1" else {}
    # likewise the downstream protocol's (how the rows are scored: a board never mixes two)
    protocol = {"protocol_version": versions["protocol"]} if versions.get("protocol", "1") != "1" else {}
    return {
        "benchmark": raw.get("benchmark"),
        **encoder,
        **protocol,
        "config": sha256_hex(canonical_json(comparable_view(cfg)), 16),
        "suite_version": raw.get("suite_version"),
        "metric_versions": dict(sorted(metric_versions.items())),
        "dataset": {"id": ds.get("id"), "synthetic": ds.get("synthetic"),
                    "manifest_hash": comparable_manifest(ds, legacy),
                    "fingerprint": fp.get("sha256") if isinstance(fp, dict) else None},
    }


def comparability_key(record: Mapping[str, Any] | HasRaw, legacy: bool = False) -> str:
    """16 hex digits identifying the comparability group of ``record`` (a run.json mapping).

    The runner writes it into every schema-2 record as ``comparability_key`` (computed on the record
    it is about to write; the ``comparability_key`` field itself is not an input). ``legacy``: the key a record
    that read a prepared cache was written with before 2026-11-29 (:func:`comparable_manifest`)."""
    return sha256_hex(canonical_json(comparability_fields(record, legacy)), 16)


# ---------------------------------------------------------------------------------------------
# synthetic overrides
# ---------------------------------------------------------------------------------------------
_MISSING = object()


def _get_dotted(cfg: Mapping[str, Any], key: str) -> Any:
    node: Any = cfg
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return _MISSING
        node = node[part]
    return node



def synthetic_overrides_applied(config: Mapping[str, Any]) -> bool:
    """True when the spec's ``synthetic:`` override block is non-empty and every one of its dotted
    keys has that value in ``config`` (the run was made with ``--synthetic``)."""
    block = config.get("synthetic") or {}
    if not isinstance(block, dict) or not block:
        return False
    return all(_get_dotted(config, k) == v for k, v in block.items())
