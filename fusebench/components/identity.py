"""A cell's identity and its config hash: what of a canonical spec determines the cells of one objective.

The canonical form is ``BenchmarkSpec.to_dict()`` (the ``config`` of a run record); a cell's identity is that
form cut to what the cell computes with (:func:`cell_identity`: without :data:`~fusebench.spec.config.NOT_IDENTITY`,
the other objectives' per-objective entries, the fields the cell's pipeline does not apply, the pretraining methods
that do not join the objective's runs), and its config hash the sha256 of that identity (:func:`config_hash`,
:func:`spec_hash`). The identity reads the pipelines' ``applied_form``, the reference rows and the objectives'
method declarations, so it lives here, above the spec (layer 1), beside the components it reads.
docs/benchmarks.md ("The config hash").

The config hash covers the configuration, not the code: the versions of the objective, the encoder and the metrics
do (:func:`cell_versions`, a record's ``versions``); a record or a checkpoint is reused only where they are the
versions the code computes now (:func:`code_changes`). docs/benchmarks.md ("Reuse needs the same code").
"""

from __future__ import annotations

from typing import Any, Mapping

from fusebench.io import canonical_json, sha256_hex
from fusebench.pipelines import applied_form
from fusebench.spec.config import HASH_SCHEMA_VERSION, HASH_SCHEMAS, NOT_IDENTITY, PER_OBJECTIVE, BenchmarkSpec
from fusebench.typed import ConfigError
from fusebench.version import __version__


def cell_identity(canonical: dict[str, Any], objective: str, schema: int = HASH_SCHEMA_VERSION,
                  reference: bool | None = None) -> dict[str, Any]:
    """What determines the cells of ``objective`` in a canonical spec (``BenchmarkSpec.to_dict()``, a
    record's ``config``): the form without :data:`NOT_IDENTITY` and ``pretrain.objective`` (the default
    objective of a run that names none), the :data:`PER_OBJECTIVE` tables cut to ``objective``'s entry,
    and ``objective`` itself; from hash ``schema`` 3 on, also without what the cell does not compute with
    (:func:`_unused_by_the_cell`); from schema 4 on, also without what the row does not read
    (:func:`_unread_by_the_row`; ``reference``: whether ``objective`` is a reference row, None: as the row registry
    says). Read-only view: nested values are shared with ``canonical``."""
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
    if schema >= 4:
        out = _unread_by_the_row(out, objective, reference)
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


def _unread_by_the_row(ident: dict[str, Any], objective: str, reference: bool | None = None) -> dict[str, Any]:
    """Hash schema 4: ``ident`` (an identity of schema 3's cuts) without ``pretrain`` for a row that pretrains
    nothing (a reference row, or a weights row: a name of ``encoder_weights``; its cells read no pretraining
    setting), and, for an objective's row, without the values of ``pretrain.hparams.<id>`` that its selection grid
    ``pretrain.grid.<id>`` replaces (every cell trains at the grid point frozen by the selection, so the spec's
    value is not what it computes with), and without the selection seeds when it has no grid (nothing is
    selected); an objective's empty ``hparams`` entry counts as none. The protocol option
    :data:`~fusebench.components.protocols.WIDTH_OPTION` is read by a width-selecting row (``raw_pca``) alone: left
    out of every other row's identity; that row, when its width is selected, keeps the selection seeds of
    ``pretrain`` (no other ``pretrain`` setting)."""
    from fusebench.components.rows import reads_no_pretraining, width_grid_of

    ident = _without_width_grid(ident, objective)
    if reads_no_pretraining(objective, ident, reference):
        out = {k: v for k, v in ident.items() if k != "pretrain"}
        pre = ident.get("pretrain")
        if width_grid_of(objective, ident) and isinstance(pre, dict):  # selected on the selection seeds
            seeds = {k: pre[k] for k in ("selection_seed", "selection_seeds") if k in pre}
            if seeds:
                out["pretrain"] = seeds
        return out
    pre = ident.get("pretrain")
    if not isinstance(pre, dict):
        return ident
    grid = pre.get("grid") if isinstance(pre.get("grid"), dict) else {}
    searched = grid.get(objective) if isinstance(grid.get(objective), dict) else {}
    pre = dict(pre)
    if not searched:  # nothing is selected (fusebench.sweep.selection.selects): no selection seed is used
        pre.pop("selection_seed", None)
        pre.pop("selection_seeds", None)
    own = pre["hparams"].get(objective) if isinstance(pre.get("hparams"), dict) else None
    if isinstance(own, dict):
        kept = {h: v for h, v in own.items() if h not in searched}
        pre["hparams"] = {objective: kept} if kept else {}
    return {**ident, "pretrain": pre}


def _without_width_grid(ident: dict[str, Any], objective: str) -> dict[str, Any]:
    """``ident`` without :data:`~fusebench.components.protocols.WIDTH_OPTION` in its protocol options, unless
    ``objective`` is a width-selecting row (a copy where anything is left out; ``ident`` itself is not changed)."""
    from fusebench.components.protocols import without_width_option
    from fusebench.components.rows import ROWS

    if objective in ROWS and ROWS.get(objective).selects_width or "options" not in ident:
        return ident
    return {**ident, "options": without_width_option(ident["options"])}


def methods_used(objective: str, pretrain: dict[str, Any]) -> frozenset[str] | None:
    """The pretraining methods whose options ``objective``'s cells compute with, given a canonical
    ``pretrain`` (global ``methods`` + the objective's own ``methods.<id>.<option>`` keys in ``hparams`` and
    ``grid``; a grid's method values each tried): those that join its runs
    (:func:`fusebench.spec.methods.joining`). Empty for a reference row (nothing is pretrained); None
    (every method counts) for an id not registered here, or options that cannot be read."""
    from types import SimpleNamespace

    from fusebench.spec import methods as M

    from fusebench import objectives  # the objective classes (torch): imported when first needed
    from fusebench.components.rows import is_reference

    if is_reference(objective):
        return frozenset()
    from fusebench.registry import UnknownNameError

    try:  # the objective's own module (its registry's home), not every objective's
        cls = objectives.OBJECTIVES.get(objective)
    except (UnknownNameError, KeyError):
        return None
    try:
        used: set[str] = set()
        for merged in _method_option_points(objective, pretrain):
            used.update(M.joining(cls, SimpleNamespace(methods=merged)))
    except (ConfigError, ValueError, TypeError, KeyError):
        return None
    return frozenset(used)


def _method_option_points(objective: str, pretrain: dict[str, Any]) -> list[dict[str, dict[str, Any]]]:
    """The method options (``{method id: {option: value}}``, the values given, not yet typed) ``objective``'s runs
    are made with under a canonical ``pretrain``: the global ``methods``, then the objective's own
    ``methods.<id>.<option>`` keys in ``hparams``, then, one mapping per point, those its ``grid`` searches."""
    import itertools

    from fusebench.spec import methods as M

    base = {m: dict(v) for m, v in (pretrain.get("methods") or {}).items()}
    _, fixed = M.split_method_keys((pretrain.get("hparams") or {}).get(objective) or {})
    grid = (pretrain.get("grid") or {}).get(objective) or {}
    searched = [k for k in grid if isinstance(k, str) and k.startswith(M.METHOD_KEY_PREFIX)]
    points = []
    for values in itertools.product(*(grid[k] for k in searched)):
        _, point = M.split_method_keys(dict(zip(searched, values)))
        points.append({m: {**base.get(m, {}), **fixed.get(m, {}), **point.get(m, {})} for m in {*base, *fixed, *point}})
    return points


def config_hash(canonical: dict[str, Any], objective: str, schema: int = HASH_SCHEMA_VERSION,
                reference: bool | None = None) -> str:
    """sha256 (16 hex digits) of :func:`cell_identity` of a canonical spec dict (``BenchmarkSpec.to_dict()``,
    a record's ``config``) for ``objective``'s cells, under hash ``schema`` (a record's ``hash_schema``);
    ``reference``: :func:`cell_identity`'s."""
    return sha256_hex(canonical_json(cell_identity(canonical, objective, schema, reference)), 16)


def row_known(objective: str) -> bool:
    """Whether ``objective`` is a registered objective or reference row here (else, e.g., a row of a plugin not
    installed: whether it pretrains, which hash schema 4 reads, cannot be told)."""
    from fusebench import objectives
    from fusebench.components.rows import ROWS

    return objective in ROWS.available() or objective in objectives.OBJECTIVES.available()


def same_config_hashes(spec: BenchmarkSpec, objective: str) -> set[str]:
    """The hashes under every readable hash schema (:data:`HASH_SCHEMAS`) of ``objective``'s cells of ``spec``: a
    checkpoint written before its runs folder was migrated to the current schema carries one of the older ones.
    Each schema's identity is a function of the older one's on the same canonical form (it only leaves more out),
    so a checkpoint whose hash is the older schema's hash of the current spec was made with the same
    configuration."""
    canonical = spec.to_dict()
    return {config_hash(canonical, objective, s) for s in HASH_SCHEMAS}


def frozen_choice(context: Mapping[str, Any] | None, objective: str) -> dict[str, Any] | None:
    """The grid point the sweep's frozen hyper-parameter selection chose for ``objective``
    (``context["hparam_selection"][objective]["choice"]``, :func:`fusebench.sweep.selection.freeze_selections`), None
    where the sweep selects nothing for it. Part of what a cell computes that its config hash does not cover (the
    grid replaces the value), so a record or a checkpoint made at another point is never continued or reused."""
    outcome = ((context or {}).get("hparam_selection") or {}).get(objective)
    choice = outcome.get("choice") if isinstance(outcome, Mapping) else None
    return dict(choice) if isinstance(choice, Mapping) else None


def spec_hash(spec: BenchmarkSpec, objective: str) -> str:
    """The config hash of ``objective``'s cells of ``spec``: :func:`config_hash` of its canonical form. What another
    objective's cells are given (its hyper-parameters, grid, budget) does not enter it."""
    return config_hash(spec.to_dict(), objective)


# ---------------------------------------------------------------------------------------------
# the code's identity: versions
# ---------------------------------------------------------------------------------------------
def encoder_version(encoder: str, config: Mapping[str, Any]) -> str:
    """The version of what encoder ``encoder`` computes under ``config`` (a spec's ``encoder.config``): its
    class's ``version_of(config)`` (:class:`fusebench.encoders.base.Backbone`); ``"1"`` for an id that is not
    registered or a class that declares none."""
    from fusebench import encoders as E
    from fusebench.registry import UnknownNameError

    try:
        cls = E.ENCODERS.get(encoder)
    except (UnknownNameError, KeyError):
        return "1"
    version_of = getattr(cls, "version_of", None)
    version = version_of(dict(config)) if callable(version_of) else getattr(cls, "version", "1")
    if isinstance(version, bool) or not isinstance(version, (str, int)):  # e.g. a plugin's instance property
        raise ConfigError(f"encoder {encoder!r}: its version must be a string (a class attribute, or what "
                          f"version_of(config) returns), got {type(version).__name__}")
    return str(version)


def versions_block(objective: str, metric_ids: list[str] | None = None, encoder: str = "1") -> dict[str, Any]:
    """The ``versions`` field of a schema-2 record: suite, objective and metric versions from the
    registries (a reference row's ``objective`` version is the row's own, :attr:`fusebench.components.rows.Row.version`;
    ``"1"`` for an id that is not registered, e.g. pipeline-computed metrics); a
    schema-4 record keeps suite and objective here and each metric's version in its ``metrics`` entry
    (``metric_ids`` None: no ``metrics`` key). ``encoder``, the encoder's version (:func:`encoder_version`),
    is written where it is not ``"1"`` (a record without it was made by version 1)."""
    from fusebench import metrics as M
    from fusebench import objectives as O
    from fusebench.registry import UnknownNameError

    from fusebench.components.rows import ROWS

    try:
        obj_version = str(getattr(O.OBJECTIVES.get(objective), "version", "1"))
    except (UnknownNameError, KeyError):  # a reference row states its own version (Row.version)
        obj_version = str(getattr(ROWS.get(objective), "version", "1")) if objective in ROWS else "1"
    mv = {}
    for m in metric_ids or []:
        try:
            mv[m] = str(M.get(m).version)
        except (UnknownNameError, KeyError):
            mv[m] = "1"
    out: dict[str, Any] = {"suite": __version__, "objective": obj_version}
    if encoder != "1":
        out["encoder"] = encoder
    if metric_ids is not None:
        out["metrics"] = dict(sorted(mv.items()))
    return out


def cell_versions(spec: BenchmarkSpec, objective: str) -> dict[str, Any]:
    """The ``versions`` of ``objective``'s cells of ``spec`` (:func:`versions_block`): the suite's, the objective's
    and the encoder's under ``spec.encoder.config``; a row of ``encoder_weights`` (issue #32) has its file's hash as
    its objective version, so a board never averages two files under one row name."""
    versions = versions_block(objective, encoder=encoder_version(spec.encoder.id, spec.encoder.config))
    entry = spec.encoder_weights.get(objective)
    if entry is not None:
        versions["objective"] = "sha256:" + entry["sha256"][:16]
    methods = method_versions(spec, objective)
    if methods:  # where a method that joins the runs is not at version 1 (records of version 1 keep their form)
        versions["methods"] = methods
    protocol = protocol_version(spec)
    if protocol != "1":  # the downstream protocol's (records of version 1 keep their form)
        versions["protocol"] = protocol
    return versions


def protocol_version(spec: BenchmarkSpec) -> str:
    """The version of the downstream protocol ``spec``'s cells are scored by
    (:attr:`fusebench.components.protocols.Protocol.version`); ``"1"`` where the pipeline has no downstream protocol
    or names one that is not registered here."""
    from fusebench.components.protocols import PROTOCOLS
    from fusebench.pipelines import PIPELINES

    pipeline = PIPELINES.get(spec.pipeline) if spec.pipeline in PIPELINES else None
    protocol = spec.downstream.protocol
    if pipeline is None or not getattr(pipeline, "downstream", True) or protocol not in PROTOCOLS:
        return "1"
    version = PROTOCOLS.get(protocol).version
    if isinstance(version, bool) or not isinstance(version, (str, int)):
        raise ConfigError(f"downstream protocol {protocol!r}: its version must be a string, got {type(version).__name__}")
    return str(version)


def method_versions(spec: BenchmarkSpec, objective: str) -> dict[str, str]:
    """``{method id: version}`` of the pretraining methods that join ``objective``'s runs under ``spec``
    (:func:`methods_used`) and are not at version ``"1"``: each method's version under the options the runs are made
    with (:func:`fusebench.spec.methods.method_version`, ``PretrainMethod.version_of(options)``: e.g. TupleInfoNCE's
    is "2" with ``sample_optimisation: true``, "1" without). Where the objective's selection grid searches a method's
    options and its points give the method two versions, both count, sorted and joined by "+" (``"1+2"``): the
    selection trains at every point, so a change to either marks the cell's records stale."""
    from types import SimpleNamespace

    from fusebench import objectives
    from fusebench.components.rows import row_of
    from fusebench.spec.config import canonical_pretrain
    from fusebench.spec.methods import METHODS, joining, make_options, method_version

    if not row_of(spec, objective).pretrains:  # a reference or a weights row: no method computes anything
        return {}
    pretrain = canonical_pretrain(spec.pretrain)
    found: dict[str, set[str]] = {}

    def add(m: str, given: Any) -> None:
        cls = METHODS.get(m)
        found.setdefault(m, set()).add(method_version(cls, make_options(cls, given, f"pretrain.methods.{m}")))

    used = methods_used(objective, pretrain)
    if used is None:  # an objective not registered here, or options that cannot be read: every method, as given
        for m in METHODS.available():
            try:
                add(m, (pretrain.get("methods") or {}).get(m))
            except ConfigError:  # options this code cannot read: the method's defaults
                add(m, None)
    else:
        cls = objectives.OBJECTIVES.get(objective)
        for merged in _method_option_points(objective, pretrain):
            for m in joining(cls, SimpleNamespace(methods=merged)):
                add(m, merged.get(m))
    out = {}
    for m in sorted(found):
        version = "+".join(sorted(found[m]))
        if version != "1":
            out[m] = version
    return out


def code_changes(spec: BenchmarkSpec, objective: str, made: Mapping[str, Any],
                 metrics: Mapping[str, Any] | None = None) -> list[str]:
    """What of the code that made a record or a checkpoint of ``objective``'s cell computes differently now: the
    objective's and the encoder's versions in ``made`` (a ``versions`` mapping; no ``encoder``: version 1) and the
    metrics' (``metrics``: id -> the version it was computed with) against :func:`cell_versions` and the metric
    registry; each as ``"<kind> '<id>' version 'A', now 'B'"``; an absent version is "1" (what a record made
    before versions were recorded, schema 1, was made by). Empty: the same code."""
    now = cell_versions(spec, objective)
    changed = []
    if made.get("objective", "1") != now["objective"]:
        changed.append(f"objective {objective!r} version {made.get('objective', '1')!r}, now {now['objective']!r}")
    if made.get("encoder", "1") != now.get("encoder", "1"):
        changed.append(f"encoder {spec.encoder.id!r} version {made.get('encoder', '1')!r}, "
                       f"now {now.get('encoder', '1')!r}")
    made_methods = made.get("methods") if isinstance(made.get("methods"), Mapping) else {}
    now_methods = now.get("methods") or {}
    changed += [f"pretraining method {m!r} version {made_methods.get(m, '1')!r}, now {now_methods.get(m, '1')!r}"
                for m in sorted({*made_methods, *now_methods}) if made_methods.get(m, "1") != now_methods.get(m, "1")]
    if made.get("protocol", "1") != now.get("protocol", "1"):
        changed.append(f"downstream protocol {spec.downstream.protocol!r} version {made.get('protocol', '1')!r}, "
                       f"now {now.get('protocol', '1')!r}")
    if metrics:
        current = versions_block(objective, sorted(metrics))["metrics"]
        changed += [f"metric {m!r} version {v!r}, now {current[m]!r}" for m, v in sorted(metrics.items())
                    if v != current[m]]
    return changed


__all__ = ["cell_identity", "cell_versions", "code_changes", "config_hash", "encoder_version", "frozen_choice",
           "method_versions",
           "methods_used", "protocol_version", "spec_hash", "versions_block"]
