"""Which records may be compared (records layer): the comparability fields and key of a record, the
version block a run writes, the fields in which records differ, and the board a record belongs on."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any, Mapping

from fusebench.io import canonical_json, sha256_hex
from fusebench.training.config import NOT_IDENTITY, PER_OBJECTIVE
from fusebench.version import __version__

if TYPE_CHECKING:  # annotations only: the schema module imports this one
    from fusebench.records.schema import RunRecord

#: config keys left out of the comparability hash: those that do not change what a cell computes (the
#: config hash's :data:`~fusebench.training.config.NOT_IDENTITY`)
CONFIG_KEYS_IGNORED = NOT_IDENTITY


# ---------------------------------------------------------------------------------------------
# comparability
# ---------------------------------------------------------------------------------------------
def _comparable_view(config: Mapping[str, Any]) -> dict[str, Any]:
    """:func:`comparable_config` without the deep copy: only the top level and ``options`` are new
    mappings, every other value is shared with ``config``. For reading only (hashing, flattening);
    copying every nested value was most of the cost of validating a record."""
    # encoder_weights (issue #32): each weights row's own file, like the per-objective tables of pretrain
    cfg = {k: v for k, v in config.items() if k not in CONFIG_KEYS_IGNORED and k != "encoder_weights"}
    if isinstance(cfg.get("options"), dict):
        cfg["options"] = {k: v for k, v in cfg["options"].items() if k != "board"}
    if isinstance(cfg.get("pretrain"), dict):  # each row's own settings (hash schema 2): not the board's
        cfg["pretrain"] = {k: v for k, v in cfg["pretrain"].items() if k not in PER_OBJECTIVE and k != "objective"}
    return cfg


def comparable_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` without :data:`CONFIG_KEYS_IGNORED`, ``options.board`` and what is each row's own: the
    per-objective tables of ``pretrain`` (hyper-parameters, grid, batch, epochs, micro-batch; the budget each
    row got is a column of the board) and the default objective (a deep copy)."""
    return copy.deepcopy(_comparable_view(config))


def comparability_fields(record: Mapping[str, Any] | RunRecord) -> dict[str, Any]:
    """What must be equal for two runs to be compared (a v1 record gets the version defaults)."""
    raw = record if isinstance(record, Mapping) else record.raw  # a mapping or a RunRecord
    cfg = raw.get("config") or {}
    cfg = cfg if isinstance(cfg, dict) else {}
    ds = raw.get("dataset") or {}
    ds = ds if isinstance(ds, dict) else {}
    metric_ids = [m for m in cfg.get("metrics") or [] if isinstance(m, str)]
    # the objective's version is not a field: rows of one board are different objectives (the leaderboard
    # requires it to be the same within each objective's row instead)
    if raw.get("schema_version", 1) >= 2 and isinstance(raw.get("versions"), dict):
        mv = raw["versions"].get("metrics") if isinstance(raw["versions"].get("metrics"), dict) else {}
        metric_versions = {m: mv.get(m) for m in metric_ids} if metric_ids else dict(mv)
    else:
        metric_versions = {m: "1" for m in metric_ids}
    fp = ds.get("fingerprint")
    return {
        "benchmark": raw.get("benchmark"),
        "config": sha256_hex(canonical_json(_comparable_view(cfg)), 16),
        "suite_version": raw.get("suite_version"),
        "metric_versions": dict(sorted(metric_versions.items())),
        "dataset": {"id": ds.get("id"), "synthetic": ds.get("synthetic"), "manifest_hash": ds.get("manifest_hash"),
                    "fingerprint": fp.get("sha256") if isinstance(fp, dict) else None},
    }


def comparability_key(record: Mapping[str, Any] | RunRecord) -> str:
    """16 hex digits identifying the comparability group of ``record`` (a run.json mapping).

    The runner writes it into every schema-2 record as ``comparability_key`` (computed on the record
    it is about to write; the ``comparability_key`` field itself is not an input)."""
    return sha256_hex(canonical_json(comparability_fields(record)), 16)


def versions_block(objective: str, metric_ids: list[str]) -> dict[str, Any]:
    """The ``versions`` field of a schema-2 record: suite, objective and metric versions from the
    registries (``"1"`` for an id that is not registered, e.g. ``none`` or pipeline-computed metrics)."""
    from fusebench import metrics as M
    from fusebench import objectives as O
    from fusebench.registry import UnknownNameError

    try:
        obj_version = str(getattr(O.OBJECTIVES.get(objective), "version", "1"))
    except (UnknownNameError, KeyError):
        obj_version = "1"
    mv = {}
    for m in metric_ids:
        try:
            mv[m] = str(M.get(m).version)
        except (UnknownNameError, KeyError):
            mv[m] = "1"
    return {"suite": __version__, "objective": obj_version, "metrics": dict(sorted(mv.items()))}


def _flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    """``{dotted key: leaf}`` of nested mappings, without recursion: a config nested nearly as deep as
    the JSON reader allows must not overflow the stack when two groups' configs are compared."""
    out: dict[str, Any] = {}
    stack = [(prefix, obj)]
    while stack:
        key, node = stack.pop()
        if isinstance(node, dict) and node:
            stack.extend((f"{key}.{k}" if key else str(k), node[k]) for k in sorted(node, reverse=True))
        else:
            out[key] = node
    return out


def differing_fields(records: list[RunRecord]) -> list[str]:
    """Comparability fields (config ones as ``config.<dotted key>``) whose values differ among ``records``."""
    flat = [_flatten(comparability_fields(r)) for r in records]
    cfgs = [_flatten(_comparable_view(r.config)) for r in records]
    out = []
    for k in sorted(set().union(*flat)):
        if k == "config":
            continue
        if len({canonical_json(f.get(k)) for f in flat}) > 1:
            out.append(k)
    for k in sorted(set().union(*cfgs)):
        if len({canonical_json(c.get(k, "<absent>")) for c in cfgs}) > 1:
            out.append(f"config.{k}")
    return out


# ---------------------------------------------------------------------------------------------
# board kind
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


def board_kind(record: RunRecord) -> str:
    """Where the record's board goes in the index: ``"pipeline_check"``, ``"real"`` or ``"study"``.

    1. ``config.options.board`` when set (explicit: ``"study"`` or ``"pipeline_check"``); ``"pipeline_check"``
       too when the run's splits share samples (``dataset.data_check``, e.g. the one-subject smoke recipe);
    2. ``"real"`` when ``dataset.synthetic`` is false;
    3. ``"pipeline_check"`` for a synthetic twin: the spec's ``synthetic:`` override block was applied
       (:func:`synthetic_overrides_applied`) to a benchmark whose dataset is not synthetic-only;
    4. otherwise ``"study"`` (data synthetic by design, e.g. quickstart, polyview-gaussian-mi).
    """
    options = record.config.get("options") or {}
    board = options.get("board") if isinstance(options, dict) else None
    if board == "pipeline_check" or record.dataset.data_check:  # or its splits share samples
        return "pipeline_check"
    if not record.dataset.synthetic:
        return "real"
    if board == "study":
        return "study"
    ds_cfg = record.config.get("dataset") or {}
    synthetic_only = bool(ds_cfg.get("synthetic_only")) if isinstance(ds_cfg, dict) else False
    if not synthetic_only and synthetic_overrides_applied(record.config):
        return "pipeline_check"
    return "study"
