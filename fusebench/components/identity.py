"""A cell's identity and its config hash: what of a canonical spec determines the cells of one objective.

The canonical form is ``BenchmarkSpec.to_dict()`` (the ``config`` of a run record); a cell's identity is that
form cut to what the cell computes with (:func:`cell_identity`: without :data:`~fusebench.spec.config.NOT_IDENTITY`,
the other objectives' per-objective entries, the fields the cell's pipeline does not apply, the pretraining methods
that do not join the objective's runs), and its config hash the sha256 of that identity (:func:`config_hash`,
:func:`spec_hash`). The identity reads the pipelines' ``applied_form``, the reference rows and the objectives'
method declarations, so it lives here, above the spec (layer 1), beside the components it reads.
docs/benchmarks.md ("The config hash").
"""

from __future__ import annotations

from typing import Any

from fusebench.io import canonical_json, sha256_hex
from fusebench.pipelines import applied_form
from fusebench.spec.config import HASH_SCHEMA_VERSION, HASH_SCHEMAS, NOT_IDENTITY, PER_OBJECTIVE, BenchmarkSpec
from fusebench.typed import ConfigError


def cell_identity(canonical: dict[str, Any], objective: str, schema: int = HASH_SCHEMA_VERSION) -> dict[str, Any]:
    """What determines the cells of ``objective`` in a canonical spec (``BenchmarkSpec.to_dict()``, a
    record's ``config``): the form without :data:`NOT_IDENTITY` and ``pretrain.objective`` (the default
    objective of a run that names none), the :data:`PER_OBJECTIVE` tables cut to ``objective``'s entry,
    and ``objective`` itself; from hash ``schema`` 3 on, also without what the cell does not compute with
    (:func:`_unused_by_the_cell`). Read-only view: nested values are shared with ``canonical``."""
    if schema not in HASH_SCHEMAS:
        raise ValueError(f"hash schema {schema!r} is not one of {list(HASH_SCHEMAS)}")
    out = {k: v for k, v in canonical.items() if k not in NOT_IDENTITY}
    pre = canonical.get("pretrain")
    if isinstance(pre, dict):
        pre = {k: v for k, v in pre.items() if k != "objective"}
        for key in PER_OBJECTIVE:
            table = pre.get(key)
            if isinstance(table, dict):
                pre[key] = {objective: table[objective]} if objective in table else {}
        out["pretrain"] = pre
    if schema >= 3:
        out = _unused_by_the_cell(out, objective)
    _weights_identity(out, objective)
    out["objective"] = objective
    return out


def _weights_identity(ident: dict[str, Any], objective: str) -> None:
    """Issue #32: ``encoder_weights`` cut to ``objective``'s own entry, and that entry to its ``sha256`` (the
    file's content is the row's identity, not where it lies); absent for every other row, so a sweep naming
    weights leaves the other rows' hashes as they were."""
    weights = ident.pop("encoder_weights", None)
    entry = weights.get(objective) if isinstance(weights, dict) else None
    if isinstance(entry, dict):
        ident["encoder_weights"] = {"sha256": entry.get("sha256")}


def _unused_by_the_cell(ident: dict[str, Any], objective: str) -> dict[str, Any]:
    """Hash schema 3: ``ident`` (an identity of schema 2's cuts) without the fields the cell's pipeline does
    not apply (``fusebench.pipelines.applied_form``), without ``pretrain.selection_seed`` when
    ``pretrain.selection_seeds`` is set, and with ``pretrain.methods`` cut to the methods that join
    ``objective``'s runs (:func:`methods_used`)."""
    ident = applied_form(ident, ident.get("pipeline", "standard"))
    pre = ident.get("pretrain")
    if not isinstance(pre, dict):
        return ident
    pre = dict(pre)
    if pre.get("selection_seeds"):
        pre.pop("selection_seed", None)
    methods = pre.get("methods")
    if isinstance(methods, dict) and methods:  # the canonical form holds only options off their defaults
        used = methods_used(objective, pre)
        if used is not None:
            kept = {m: v for m, v in methods.items() if m in used}
            if kept:
                pre["methods"] = kept
            else:
                del pre["methods"]
    ident["pretrain"] = pre
    return ident


def methods_used(objective: str, pretrain: dict[str, Any]) -> frozenset[str] | None:
    """The pretraining methods whose options ``objective``'s cells compute with, given a canonical
    ``pretrain`` (global ``methods`` + the objective's own ``methods.<id>.<option>`` keys in ``hparams`` and
    ``grid``; a grid's method values each tried): those that join its runs
    (:func:`fusebench.spec.methods.joining`). Empty for a reference row (nothing is pretrained); None
    (every method counts) for an id not registered here, or options that cannot be read."""
    import itertools
    from types import SimpleNamespace

    from fusebench.spec import methods as M

    from fusebench import objectives  # the objective classes (torch): imported when first needed
    from fusebench.components.rows import is_reference

    if is_reference(objective):
        return frozenset()
    registry = objectives.OBJECTIVES
    if objective not in registry.available():
        return None
    cls = registry.get(objective)
    try:
        base = {m: dict(v) for m, v in (pretrain.get("methods") or {}).items()}
        _, fixed = M.split_method_keys((pretrain.get("hparams") or {}).get(objective) or {})
        grid = (pretrain.get("grid") or {}).get(objective) or {}
        searched = [k for k in grid if isinstance(k, str) and k.startswith(M.METHOD_KEY_PREFIX)]
        used: set[str] = set()
        for values in itertools.product(*(grid[k] for k in searched)):
            _, point = M.split_method_keys(dict(zip(searched, values)))
            merged = {m: {**base.get(m, {}), **fixed.get(m, {}), **point.get(m, {})}
                      for m in {*base, *fixed, *point}}
            used.update(M.joining(cls, SimpleNamespace(methods=merged)))
    except (ConfigError, ValueError, TypeError, KeyError):
        return None
    return frozenset(used)


def config_hash(canonical: dict[str, Any], objective: str, schema: int = HASH_SCHEMA_VERSION) -> str:
    """sha256 (16 hex digits) of :func:`cell_identity` of a canonical spec dict (``BenchmarkSpec.to_dict()``,
    a record's ``config``) for ``objective``'s cells, under hash ``schema`` (a record's ``hash_schema``)."""
    return sha256_hex(canonical_json(cell_identity(canonical, objective, schema)), 16)


def spec_hash(spec: BenchmarkSpec, objective: str) -> str:
    """The config hash of ``objective``'s cells of ``spec``: :func:`config_hash` of its canonical form. What another
    objective's cells are given (its hyper-parameters, grid, budget) does not enter it."""
    return config_hash(spec.to_dict(), objective)


__all__ = ["cell_identity", "config_hash", "methods_used", "spec_hash"]
