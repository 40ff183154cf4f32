"""The run record's schema (records layer): the typed view of a ``run.json`` (:class:`RunRecord`) and
:func:`validate_record`, which checks every field and names the file and the field of the first
problem (:class:`RecordError`). The fields are listed in the package docstring (:mod:`fusebench.records`).

This module is longer than ~450 lines because it is the record's one schema: a check per field, the
optional fields a board reads included (:func:`_validate_board_fields`), read top to bottom beside the
typed view they build; split, a field's type would live in two places."""

from __future__ import annotations

import datetime
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from fusebench.io import canonical_json, shown_path, unique_keys
from fusebench.records.comparability import (comparability_fields, comparability_key, comparable_view,
                                             synthetic_overrides_applied)
from fusebench.spec.config import HASH_SCHEMAS as _READABLE_HASH_SCHEMAS
from fusebench.components.identity import config_hash as cell_config_hash, row_known
from fusebench.registry import ID_RULE, valid_id

SCHEMA_VERSIONS = (1, 2, 3, 4)
#: ``hash_schema`` values a record may state (records without the field predate the migration to schema 2)
HASH_SCHEMAS = _READABLE_HASH_SCHEMAS  # each record's hash is checked under its own schema
#: what a run writes today (the runner sets its SCHEMA_VERSION to this)
CURRENT_SCHEMA_VERSION = 4
#: fields a schema-3 record does not have because they repeat another (issue #35): dotted field -> the field that
#: holds the value (the record's seed seeds python, numpy and torch, the determinism switches and k-means)
REPEATED_FIELDS = {"precision": "config.precision", "numerics.precision": "config.precision",
                   "protocol": "config.protocol_notes", "seeds": "seed", "determinism.seed": "seed",
                   "clustering.seed": "seed"}
#: fields a schema-4 record does not have: each metric's direction and version are in its ``metrics`` entry
METRIC_FIELDS_OF_4 = {"metric_directions": "metrics.<id>.direction", "versions.metrics": "metrics.<id>.version"}
#: the keys of a schema-4 metric entry
METRIC_ENTRY = ("value", "direction", "version")
#: leaderboard section of a board (``config.options.board``); see docs/leaderboards.md
BOARD_KINDS = ("study", "pipeline_check")
DIRECTIONS = ("higher", "lower")

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@\-]*$")


class RecordError(ValueError):
    """A run record that does not follow the schema; the message names the file and the field."""

    def __init__(self, path: str | Path, field_name: str, expected: str, got: Any = ...) -> None:
        self.path = str(path)
        self.field = field_name
        msg = f"{shown_path(path)}: field {field_name!r}: expected {expected}"  # a control character escaped
        if got is not ...:
            msg += f", got {_describe(got)}"
        super().__init__(msg)


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, int) and abs(value) >= 10 ** 30:
        return f"an integer of {len(str(abs(value)))} digits"
    if isinstance(value, (int, float)):
        return f"number {value!r}"
    if isinstance(value, str):
        text = value if len(value) <= 60 else value[:57] + "..."
        return f"string {text!r}"
    if isinstance(value, list):
        return f"a list of {len(value)}"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


@dataclass(frozen=True)
class Fingerprint:
    """Sizes of the dataset files a run read, and one hash over them."""

    files: tuple[tuple[str, int], ...]
    sha256: str


@dataclass(frozen=True)
class DatasetIdentity:
    id: str
    synthetic: bool
    manifest_hash: str
    fingerprint: Fingerprint | None = None
    #: why the run is only a pipeline check (its splits share samples: ``dataset.data_check.reason``), or None
    data_check: str | None = None


@dataclass(frozen=True)
class Versions:
    suite: str
    objective: str
    metrics: dict[str, str]
    encoder: str = "1"  # written where it is not "1"
    methods: dict[str, str] = field(default_factory=dict)  # the pretraining methods not at "1" (absent: all at "1")
    protocol: str = "1"  # the downstream protocol's, written where it is not "1"

    @property
    def row(self) -> str:
        """What one row of a board must share: the objective's version and its methods' (``"2"``,
        ``"1 (tuple_infonce 2)"``)."""
        return self.objective + (f" ({', '.join(f'{m} {v}' for m, v in sorted(self.methods.items()))})"
                                 if self.methods else "")


@dataclass(frozen=True)
class RunRecord:
    """One validated run record. ``raw`` is the parsed JSON as read (provenance fields live there)."""

    path: str
    schema_version: int
    suite_version: str
    benchmark: str
    objective: str
    seed: int
    config: dict[str, Any]
    dataset: DatasetIdentity
    metrics: dict[str, float]
    pretrain_time_s: float
    peak_memory_mb: float
    versions: Versions
    comparability_key: str
    config_hash: str | None = None
    metric_directions: dict[str, str] = field(default_factory=dict)
    curves: dict[str, list[float]] = field(default_factory=dict)
    selection: dict[str, Any] = field(default_factory=dict)
    protocol: dict[str, str] = field(default_factory=dict)
    precision: str = "32"
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    # -- config fields the leaderboard uses ---------------------------------------------------
    @property
    def metric_order(self) -> list[str]:
        return list(self.config.get("metrics") or [])

    @property
    def validation_metric(self) -> str:
        """The metric the run selected on (its config's ``selection_metric``, else its first metric); a board ranks
        on ``comparison.primary``, which defaults to it."""
        order = self.metric_order
        return self.config.get("selection_metric") or (order[0] if order else "")

    @property
    def description(self) -> str:
        return self.config.get("description") or ""

    @property
    def board(self) -> str:
        """'real', 'study' or 'pipeline_check' (see :func:`board_kind`)."""
        return board_kind(self)


# ---------------------------------------------------------------------------------------------
# what needs the typed record: the fields in which records differ, the board a record belongs on
# ---------------------------------------------------------------------------------------------
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
    cfgs = [_flatten(comparable_view(r.config)) for r in records]
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


# ---------------------------------------------------------------------------------------------
# validation
# ---------------------------------------------------------------------------------------------
def _need(obj: Mapping[str, Any], key: str, path: str, prefix: str = "") -> Any:
    if key not in obj:
        raise RecordError(path, prefix + key, "a value (the field is missing)")
    return obj[key]


def _str(value: Any, path: str, name: str, what: str = "a string") -> str:
    if not isinstance(value, str):
        raise RecordError(path, name, what, value)
    return value


def _id(value: Any, path: str, name: str) -> str:
    if not valid_id(value):
        raise RecordError(path, name, f"an id ({ID_RULE})", value)
    return value


def _int(value: Any, path: str, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise RecordError(path, name, "an integer", value)
    return value


#: what a metric value must be (the message of a refused one)
METRIC_EXPECTED = ("a finite number or NaN / null (NaN or null: the metric is undefined for this run; a failed run "
                   "has failed.json, not run.json)")


def _number(value: Any, path: str, name: str, allow_nan: bool = False, nonneg: bool = False,
            allow_inf: bool = False, expected: str = "a finite number") -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RecordError(path, name, "a number", value)
    try:
        x = float(value)
    except OverflowError:  # an integer beyond the float range: infinite in effect
        x = math.inf if value > 0 else -math.inf
    if math.isnan(x):
        if allow_nan:
            return x
        raise RecordError(path, name, expected, value)
    if math.isinf(x) and not allow_inf:
        raise RecordError(path, name, expected, value)
    if nonneg and x < 0:
        raise RecordError(path, name, "a number >= 0", value)
    return x


#: the exact types ``json.loads`` gives numbers (bool, an int subclass, is not one of them): a finite
#: value of these types passes ``_number``, so the per-element check can be skipped
_JSON_NUMBER = frozenset((int, float))


def fraction_floor(metric: str) -> float:
    """The smallest value a metric of unit ``fraction`` may hold: 0, but for the chance-adjusted ARI
    (:data:`fusebench.metrics.catalog.FRACTION_LOWER`, beside the built-in metrics' other metadata)."""
    from fusebench.metrics.catalog import FRACTION_LOWER

    return FRACTION_LOWER.get(metric.lower(), 0.0)


def fraction_range_problem(metric: str, unit: str | None, x: float) -> str | None:
    """What a value ``x`` of ``metric`` must be, when its ``unit`` is ``fraction`` and the finite ``x`` lies outside
    ``[fraction_floor(metric), 1]`` (None otherwise: in range, NaN for undefined, or another unit). The one rule of
    the record schema (built-in metrics) and the boards (a plugin's metric, by its registered unit)."""
    if unit != "fraction" or not math.isfinite(x):
        return None
    low = fraction_floor(metric)
    if low <= x <= 1.0:
        return None
    return (f"a number in [{low:g}, 1] (metric {metric!r} has unit 'fraction' in the metric registry), or null when "
            "undefined")


def _unit(metric: str) -> str | None:
    """The unit of a built-in metric (``fusebench.metrics.catalog``, which imports nothing), else None: a metric of
    unit ``fraction`` (accuracies, F1, NMI, ARI, ...) must lie in [0, 1]. A plugin metric's unit is checked when a
    board reads it (``fusebench.leaderboard.columns.metric_info``)."""
    from fusebench.metrics.catalog import CATALOG

    declared = CATALOG.get(metric.lower())
    return declared.unit if declared is not None else None


def _fast_float(value: Any) -> float | None:
    """``float(value)`` for a JSON number that converts to a finite float or NaN, else None (the slow
    path, :func:`_number`, then says what is wrong)."""
    if type(value) not in _JSON_NUMBER:
        return None
    try:
        x = float(value)
    except OverflowError:
        return None
    return None if math.isinf(x) else x


def _mapping(value: Any, path: str, name: str, what: str = "a mapping") -> dict[str, Any]:
    if not isinstance(value, dict):
        raise RecordError(path, name, what, value)
    return value


def _list(value: Any, path: str, name: str, what: str = "a list") -> list[Any]:
    if not isinstance(value, list):
        raise RecordError(path, name, what, value)
    return value


def _optional_number(obj: Mapping[str, Any], key: str, path: str, name: str, nonneg: bool = False) -> None:
    """``obj[key]``, when present and not null, is a finite number (``>= 0`` with ``nonneg``)."""
    if obj.get(key) is not None:
        _number(obj[key], path, name, nonneg=nonneg)


_GOOD_NAMES: set[str] = set()  # names that passed _NAME (metric and curve names repeat in every record)


def _name(value: Any, path: str, name: str) -> str:
    if type(value) is str and value in _GOOD_NAMES:
        return value
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise RecordError(path, name, "a name of letters, digits, '_', '.', '@', '-'", value)
    if len(_GOOD_NAMES) < 4096:
        _GOOD_NAMES.add(value)
    return value


def _validate_config(cfg: dict[str, Any], path: str) -> None:
    metrics = cfg.get("metrics")
    if metrics is not None:
        if not isinstance(metrics, list):
            raise RecordError(path, "config.metrics", "a list of metric names", metrics)
        for i, m in enumerate(metrics):
            _name(m, path, f"config.metrics[{i}]")
    sel = cfg.get("selection_metric")
    if sel is not None and sel != "":
        _name(sel, path, "config.selection_metric")
    if cfg.get("description") is not None:
        _str(cfg["description"], path, "config.description")
    options = cfg.get("options")
    if options is not None:
        _mapping(options, path, "config.options")
        board = options.get("board")
        if board is not None and board not in BOARD_KINDS:
            raise RecordError(path, "config.options.board", f"one of {list(BOARD_KINDS)}", board)
    for key in ("synthetic", "protocol_notes", "pretrain", "downstream"):
        if cfg.get(key) is not None:
            _mapping(cfg[key], path, f"config.{key}")
    _optional_number(cfg.get("pretrain") or {}, "missing_rate", path, "config.pretrain.missing_rate", nonneg=True)
    protocol = (cfg.get("downstream") or {}).get("protocol")
    if protocol is not None:
        _str(protocol, path, "config.downstream.protocol")
    if cfg.get("objectives") is not None:
        _list(cfg["objectives"], path, "config.objectives", "a list of objective ids")
    ds = cfg.get("dataset")
    if ds is not None:
        _mapping(ds, path, "config.dataset")
        if "synthetic_only" in ds and not isinstance(ds["synthetic_only"], bool):
            raise RecordError(path, "config.dataset.synthetic_only", "a boolean", ds["synthetic_only"])


def _validate_board_fields(obj: Mapping[str, Any], path: str) -> None:
    """The optional fields the leaderboard reads besides the typed ones (each, where present and not
    null, of the type it is read as): ``wall_time_s`` (a number >= 0), ``device`` (a string), ``host``
    (a mapping; ``cpu_count`` an integer), ``hparams`` (a mapping), ``hparam_selection`` (a mapping:
    ``scores`` a list of :func:`_validate_selection_score` entries, ``seeds`` a list, ``choice`` and ``grid``
    mappings), ``missing_views``
    (:func:`_validate_missing_views`), ``validity`` (``{"valid": bool, "why": str}``) and ``budget``
    (:func:`_validate_budget`)."""
    _cost(obj, "wall_time_s", path, MAX_SECONDS, required=False)
    if obj.get("device") is not None:
        _str(obj["device"], path, "device")
    if obj.get("host") is not None:
        host = _mapping(obj["host"], path, "host")
        if host.get("cpu_count") is not None:
            _int(host["cpu_count"], path, "host.cpu_count")
    if obj.get("hparams") is not None:
        _mapping(obj["hparams"], path, "hparams")
    if obj.get("hparam_selection") is not None:
        sel = _mapping(obj["hparam_selection"], path, "hparam_selection",
                       'a mapping {"scores": [...], "choice": {...}, "grid": {...}, ...}')
        for key in ("scores", "seeds"):
            if sel.get(key) is not None:
                _list(sel[key], path, f"hparam_selection.{key}")
        for key in ("choice", "grid"):
            if sel.get(key) is not None:
                _mapping(sel[key], path, f"hparam_selection.{key}")
        metric = selection_metric_id(sel.get("metric"))  # a built-in fraction metric's scores lie in its range
        for i, score in enumerate(sel.get("scores") or []):
            _validate_selection_score(score, path, f"hparam_selection.scores[{i}]", metric)
    if obj.get("missing_views") is not None:
        _validate_missing_views(obj["missing_views"], path)
    if obj.get("git") is not None:  # the checkout's state: the boards show its sha
        git = _mapping(obj["git"], path, "git", 'a mapping {"sha": ..., "dirty": ..., ...}')
        if git.get("sha") is not None:
            _str(git["sha"], path, "git.sha")
    if obj.get("validity") is not None:
        v = obj["validity"]
        if not isinstance(v, dict) or not isinstance(v.get("valid"), bool) or not isinstance(v.get("why", ""), str):
            raise RecordError(path, "validity", 'a mapping {"valid": true|false, "why": text}', v)
    if obj.get("budget") is not None:
        _validate_budget(obj["budget"], path)


#: what a grid point's validation score must be (undefined like a metric: null or NaN)
SCORE_EXPECTED = "a number, or null / NaN (undefined: left out of the board's means)"
#: ``hparam_selection.metric`` of a record written before issue #30: a text naming the metric id
_OLD_SELECTION_METRIC = re.compile(r"validation ([A-Za-z0-9][A-Za-z0-9_.@\-]*) \(mean over")


def selection_metric_id(text: Any) -> str | None:
    """The metric id of a frozen selection's ``metric``: the id itself, or the id a pre-#30 record's text
    ``"validation acc (mean over 3 selection seeds)"`` names; None for anything else."""
    if not isinstance(text, str):
        return None
    m = _OLD_SELECTION_METRIC.match(text)
    return m.group(1) if m else (text if _NAME.fullmatch(text) else None)


def _validate_selection_score(e: Any, path: str, where: str, metric: str | None = None) -> None:
    """One grid point of ``hparam_selection.scores``: a mapping with ``hparams`` (a mapping), ``val`` (the
    mean validation score over the selection seeds), ``val_by_seed`` (where present and not null, a
    mapping seed -> score) and ``solver`` (where present and not null, :func:`_validate_solver_tally`). A score is a
    finite number, or null / NaN: undefined, as a metric value is; a score of a built-in ``metric`` of unit
    ``fraction`` lies in its range (:func:`fraction_range_problem`), as the record's value of that metric does."""
    if not isinstance(e, dict) or not isinstance(e.get("hparams"), dict):
        raise RecordError(path, where, 'a mapping {"hparams": {...}, "val": number, "val_by_seed": {...}}', e)
    unit = _unit(metric) if metric else None

    def score(v: Any, at: str) -> None:
        x = _fast_float(v)
        if x is None:
            x = _number(v, path, at, allow_nan=True, expected=SCORE_EXPECTED)
        expected = fraction_range_problem(metric, unit, x) if metric else None
        if expected:
            raise RecordError(path, at, expected.replace("null when undefined", "null / NaN when undefined"), v)

    if e.get("val") is not None:
        score(e["val"], f"{where}.val")
    by_seed = e.get("val_by_seed")
    if by_seed is not None:
        _mapping(by_seed, path, f"{where}.val_by_seed", f"a mapping seed -> score ({SCORE_EXPECTED})")
        for seed, v in by_seed.items():
            if v is not None:
                score(v, f"{where}.val_by_seed.{seed}")
    if e.get("solver") is not None:
        _validate_solver_tally(e["solver"], path, f"{where}.solver")


def _validate_solver_tally(t: Any, path: str, where: str) -> None:
    """A grid point's solver tally over its trials (:func:`fusebench.objectives.solver_tally.merged`): ``calls``
    and ``not_converged`` integers >= 0, ``not_converged <= calls``, ``worst_marginal_error`` a finite number >= 0."""
    t = _mapping(t, path, where, 'a mapping {"calls": int, "not_converged": int, "worst_marginal_error": number}')
    for key in ("calls", "not_converged"):
        if _int(t.get(key), path, f"{where}.{key}") < 0:
            raise RecordError(path, f"{where}.{key}", "an integer >= 0", t[key])
    if t["not_converged"] > t["calls"]:
        raise RecordError(path, f"{where}.not_converged", f"at most calls ({t['calls']})", t["not_converged"])
    _number(t.get("worst_marginal_error"), path, f"{where}.worst_marginal_error", nonneg=True)


def _validate_budget(b: Any, path: str) -> None:
    """``budget``: ``optimizer_steps`` and ``samples_seen`` integers >= 0; ``batch_size``, ``micro_batch``,
    ``epochs`` and (a method's own per-epoch training, TupleInfoNCE's candidates) ``candidate_steps`` integers >= 0
    or null."""
    b = _mapping(b, path, "budget", "a mapping {optimizer_steps, samples_seen, batch_size, micro_batch, epochs}")
    for key in ("optimizer_steps", "samples_seen"):
        v = b.get(key)
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < MAX_COUNT:
            raise RecordError(path, f"budget.{key}", "an integer in [0, 2**63)", v)
    for key in ("batch_size", "micro_batch", "epochs", "candidate_steps"):
        v = b.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < MAX_COUNT):
            raise RecordError(path, f"budget.{key}", "an integer in [0, 2**63) or null", v)


#: the largest counts and costs a run can have recorded (a counter of int64; a run of 300 years; an exabyte): a
#: record past them was not written by a run, and the boards would print it in full or as inf
MAX_COUNT = 2 ** 63
MAX_SECONDS = 1e10
MAX_MEGABYTES = 1e12


def _cost(obj: Mapping[str, Any], key: str, path: str, upper: float, required: bool = True) -> float | None:
    """``obj[key]``: a number in [0, ``upper``) (``required``: present; else null or absent allowed)."""
    if not required and obj.get(key) is None:
        return None
    x = _number(_need(obj, key, path) if required else obj[key], path, key, nonneg=True)
    if x >= upper:
        raise RecordError(path, key, f"a number in [0, {upper:g})", obj[key])
    return x


def _scored_metric(key: str) -> str | None:
    """The built-in metric a missing-view metric id ends with (``miss10_cluster_acc`` -> ``cluster_acc``,
    ``only_view_0_acc`` -> ``acc``: the longest suffix after an ``_`` that the metric catalog names), else None."""
    from fusebench.metrics.catalog import CATALOG

    parts = key.lower().split("_")
    for i in range(1, len(parts)):
        if "_".join(parts[i:]) in CATALOG:
            return "_".join(parts[i:])
    return None


def _validate_missing_views(mv: Any, path: str) -> None:
    """``missing_views`` (:mod:`fusebench.probes.missing_views`): ``metrics`` a mapping of metric names
    to numbers (null / NaN: undefined; in the range of the metric each scores, a fraction in [0, 1]), ``rates``
    a list of numbers in [0, 1), ``views`` a list of strings, ``shown`` a list of metric names, ``single_view`` a
    boolean, ``protocol`` a string, ``clustering.n_init`` an integer."""
    mv = _mapping(mv, path, "missing_views", 'a mapping {"metrics": {id: value}, "rates": [...], "views": [...], '
                                             '"shown": [...], ...}')
    metrics = _mapping(_need(mv, "metrics", path, "missing_views."), path, "missing_views.metrics")
    for k, v in metrics.items():
        _name(k, path, "missing_views.metrics key")
        if v is None:
            continue
        x = _fast_float(v)
        if x is None:
            x = _number(v, path, f"missing_views.metrics.{k}", allow_nan=True, expected=METRIC_EXPECTED)
        base = _scored_metric(k)  # miss10_acc, only_<view>_nmi: the metric scored under the mask
        expected = fraction_range_problem(base, _unit(base), x) if base is not None else None
        if expected:
            raise RecordError(path, f"missing_views.metrics.{k}", expected, v)
    for i, r in enumerate(_list(mv.get("rates", []), path, "missing_views.rates", "a list of missing rates")):
        if _number(r, path, f"missing_views.rates[{i}]", nonneg=True) >= 1.0:
            raise RecordError(path, f"missing_views.rates[{i}]", "a missing rate in [0, 1)", r)
    for i, v in enumerate(_list(mv.get("views", []), path, "missing_views.views", "a list of view names")):
        _str(v, path, f"missing_views.views[{i}]", "a view name (a string)")
    for i, m in enumerate(_list(mv.get("shown", []), path, "missing_views.shown", "a list of metric names")):
        _name(m, path, f"missing_views.shown[{i}]")
    if "single_view" in mv and not isinstance(mv["single_view"], bool):
        raise RecordError(path, "missing_views.single_view", "a boolean", mv["single_view"])
    if mv.get("protocol") is not None:
        _str(mv["protocol"], path, "missing_views.protocol")
    if mv.get("clustering") is not None:
        clustering = _mapping(mv["clustering"], path, "missing_views.clustering")
        if clustering.get("n_init") is not None:
            _int(clustering["n_init"], path, "missing_views.clustering.n_init")


def _validate_precision(obj: Mapping[str, Any], cfg: Mapping[str, Any], path: str) -> str:
    """The record's precision: ``config.precision`` (absent: ``32``), which a top-level ``precision``
    must repeat; ``numerics``, where present, is a mapping."""
    from fusebench.spec.precision import DEFAULT, PRECISIONS

    configured = cfg.get("precision", DEFAULT)
    if configured not in PRECISIONS:
        raise RecordError(path, "config.precision", f"one of {list(PRECISIONS)}", configured)
    if "precision" in obj and obj["precision"] != configured:
        raise RecordError(path, "precision", f"{configured!r}, the precision in config (was the record edited?)",
                          obj["precision"])
    if obj.get("numerics") is not None:
        numerics = _mapping(obj["numerics"], path, "numerics")
        if numerics.get("device_name") is not None:
            _str(numerics["device_name"], path, "numerics.device_name")
    return configured


def _validate_dataset(ds: Any, path: str, version: int) -> DatasetIdentity:
    ds = _mapping(ds, path, "dataset")
    did = _id(_need(ds, "id", path, "dataset."), path, "dataset.id")
    syn = _need(ds, "synthetic", path, "dataset.")
    if not isinstance(syn, bool):
        raise RecordError(path, "dataset.synthetic", "a boolean", syn)
    mh = _str(_need(ds, "manifest_hash", path, "dataset."), path, "dataset.manifest_hash")
    fp = None
    if version >= 2:
        raw_fp = _need(ds, "fingerprint", path, "dataset.")
        if raw_fp is not None:
            raw_fp = _mapping(raw_fp, path, "dataset.fingerprint")
            files = _need(raw_fp, "files", path, "dataset.fingerprint.")
            if not isinstance(files, list):
                raise RecordError(path, "dataset.fingerprint.files", "a list of [relpath, size] pairs", files)
            pairs = []
            for i, f in enumerate(files):
                where = f"dataset.fingerprint.files[{i}]"
                if (not isinstance(f, list) or len(f) != 2 or not isinstance(f[0], str) or not f[0]
                        or isinstance(f[1], bool) or not isinstance(f[1], int) or f[1] < 0):
                    raise RecordError(path, where, "a [relative path, size in bytes] pair", f)
                pairs.append((f[0], f[1]))
            sha = _str(_need(raw_fp, "sha256", path, "dataset.fingerprint."), path, "dataset.fingerprint.sha256")
            if not re.fullmatch(r"[0-9a-f]{64}", sha):
                raise RecordError(path, "dataset.fingerprint.sha256", "64 lowercase hex digits", sha)
            fp = Fingerprint(tuple(pairs), sha)
    named = ds.get("data_file")
    if named is not None:  # the one data file a run read, by name and content (fusebench.cells.execute.data_file)
        named = _mapping(named, path, "dataset.data_file", 'a mapping {"name": file name, "sha256": hex digest}')
        if not _str(_need(named, "name", path, "dataset.data_file."), path, "dataset.data_file.name"):
            raise RecordError(path, "dataset.data_file.name", "a non-empty file name", named["name"])
        sha = _str(_need(named, "sha256", path, "dataset.data_file."), path, "dataset.data_file.sha256")
        if not re.fullmatch(r"[0-9a-f]{64}", sha):
            raise RecordError(path, "dataset.data_file.sha256", "64 lowercase hex digits", sha)
    check = ds.get("data_check")
    if check is not None:  # written by a run whose splits share samples (records.builder.split_overlap)
        check = _mapping(check, path, "dataset.data_check")
        if check.get("kind") != "pipeline_check":
            raise RecordError(path, "dataset.data_check.kind", "'pipeline_check'", check.get("kind"))
        check = _str(_need(check, "reason", path, "dataset.data_check."), path, "dataset.data_check.reason")
    return DatasetIdentity(did, syn, mh, fp, check)


def _validate_versions(raw: dict[str, Any], path: str, suite: str, cfg: dict[str, Any],
                       entries: Mapping[str, str] | None = None) -> Versions:
    """``versions``: suite and objective; the metrics' versions from ``versions.metrics`` (schemas 2-3: one for every
    metric of ``config.metrics``) or from the metric entries (``entries``, schema 4: one per metric computed)."""
    v = _mapping(_need(raw, "versions", path), path, "versions")
    s = _str(_need(v, "suite", path, "versions."), path, "versions.suite")
    if s != suite:
        raise RecordError(path, "versions.suite", f"the suite_version {suite!r}", s)
    o = _str(_need(v, "objective", path, "versions."), path, "versions.objective")
    e = _str(v.get("encoder", "1"), path, "versions.encoder")  # absent: version 1
    methods = _mapping(v.get("methods", {}), path, "versions.methods")  # absent: every method at version 1
    for k, val in methods.items():
        _name(k, path, "versions.methods key")
        _str(val, path, f"versions.methods.{k}")
    methods = dict(sorted(methods.items()))
    protocol = _str(v.get("protocol", "1"), path, "versions.protocol")  # absent: version 1
    if entries is not None:  # schema 4: a metric's version is in its entry (a metric not computed has none)
        return Versions(s, o, dict(sorted(entries.items())), e, methods, protocol)
    ms = _mapping(_need(v, "metrics", path, "versions."), path, "versions.metrics")
    for k, val in ms.items():
        _name(k, path, "versions.metrics key")
        _str(val, path, f"versions.metrics.{k}")
    missing = [m for m in cfg.get("metrics") or [] if m not in ms]
    if missing:
        raise RecordError(path, "versions.metrics", f"a version for every metric in config.metrics (missing {missing})")
    return Versions(s, o, dict(sorted(ms.items())), e, methods, protocol)


def _validate_plugins(plugins: Any, path: str) -> None:
    """``plugins`` (optional): component kind -> where its entry point came from (distribution, version, module
    file hash; ``fusebench.registry.plugin_provenance``)."""
    if plugins is None:
        return
    for kind, info in _mapping(plugins, path, "plugins").items():
        info = _mapping(info, path, f"plugins.{kind}")
        for key in ("entry_point", "distribution", "version", "module", "module_sha256"):
            if info.get(key) is not None:
                _str(info[key], path, f"plugins.{kind}.{key}")


def _validate_repeated_seeds(obj: Mapping[str, Any], seed: int, path: str, version: int) -> None:
    """Schemas 1-2 state the run's seed again where it was used (:data:`REPEATED_FIELDS`: ``seeds.<library>``,
    ``determinism.seed``, ``clustering.seed``); each, where present, must be ``seed``. Without this check a run copied
    into another seed's folder with only ``seed`` edited would count as a new seed (schema 3 on has no such field)."""
    for dotted, source in REPEATED_FIELDS.items():
        if source != "seed":
            continue
        head, _, leaf = dotted.partition(".")
        if head not in obj:
            continue
        if not leaf:  # seeds: {library: seed}
            for lib, v in _mapping(obj[head], path, head, "a mapping library -> seed").items():
                if type(v) is not int or v != seed:
                    raise RecordError(path, f"{head}.{lib}", f"the record's seed {seed} (a schema-{version} record "
                                      "states it here again; a copy of another seed's run?)", v)
        elif isinstance(obj[head], dict) and leaf in obj[head]:
            v = obj[head][leaf]
            if type(v) is not int or v != seed:
                raise RecordError(path, dotted, f"the record's seed {seed} (a schema-{version} record states it here "
                                  "again; a copy of another seed's run?)", v)


def finished_time(value: Any, path: str | Path = "<record>") -> datetime.datetime:
    """A record's ``finished_at`` (ISO 8601, as :func:`datetime.datetime.fromisoformat` reads it) as an aware
    datetime: the builder writes UTC with its offset; a time without an offset is read as UTC. The boards order
    records by it (:func:`fusebench.leaderboard.grouping.oldest_first`): as text, ``+05:00`` would sort wrong."""
    if isinstance(value, str):
        try:
            t = datetime.datetime.fromisoformat(value)
        except ValueError:
            pass
        else:
            return t if t.tzinfo is not None else t.replace(tzinfo=datetime.timezone.utc)
    raise RecordError(path, "finished_at", "an ISO 8601 time (e.g. '2026-11-29T04:52:51+00:00')", value)


def validate_record(obj: Any, path: str | Path = "<record>") -> RunRecord:
    """Check ``obj`` (the parsed JSON of a run.json) against the schema; see the module docstring."""
    path = str(path)
    if not isinstance(obj, dict):
        raise RecordError(path, "(top level)", "a JSON object", obj)
    version = _need(obj, "schema_version", path)
    if isinstance(version, bool) or not isinstance(version, int) or version not in SCHEMA_VERSIONS:
        raise RecordError(path, "schema_version", f"one of {list(SCHEMA_VERSIONS)}", version)
    suite = _str(_need(obj, "suite_version", path), path, "suite_version")
    if not suite:
        raise RecordError(path, "suite_version", "a non-empty string", suite)
    benchmark = _id(_need(obj, "benchmark", path), path, "benchmark")
    objective = _id(_need(obj, "objective", path), path, "objective")
    seed = _int(_need(obj, "seed", path), path, "seed")
    cfg = _mapping(_need(obj, "config", path), path, "config")
    _validate_config(cfg, path)
    dataset = _validate_dataset(_need(obj, "dataset", path), path, version)
    raw_metrics = _mapping(_need(obj, "metrics", path), path, "metrics")
    metrics: dict[str, float] = {}
    entry_directions: dict[str, str] = {}
    entry_versions: dict[str, str] = {}
    for k, v in raw_metrics.items():
        _name(k, path, "metrics key")
        where = f"metrics.{k}"
        if version >= 4:  # {value, direction, version}: the metric's meaning travels with its number
            v = _mapping(v, path, where)
            extra = sorted(set(v) - set(METRIC_ENTRY))
            if extra or "value" not in v or "version" not in v:
                raise RecordError(path, where, "an entry {value, direction, version}",
                                  f"keys {sorted(v)}" if extra else v)
            direction = v.get("direction")
            if direction is not None and direction not in DIRECTIONS:
                raise RecordError(path, f"{where}.direction", "'higher', 'lower' or null", direction)
            if direction is not None:
                entry_directions[k] = direction
            entry_versions[k] = _str(v["version"], path, f"{where}.version")
            v, where = v["value"], f"{where}.value"
        x = _fast_float(v)
        if x is None:  # null: undefined, as NaN is (strict JSON writes NaN as null)
            x = math.nan if v is None else _number(v, path, where, allow_nan=True, expected=METRIC_EXPECTED)
        expected = fraction_range_problem(k, _unit(k), x)
        if expected:
            raise RecordError(path, where, expected, v)
        metrics[k] = x
    pretrain_time = _cost(obj, "pretrain_time_s", path, MAX_SECONDS)
    peak = _cost(obj, "peak_memory_mb", path, MAX_MEGABYTES)
    if version >= 4:
        for dotted, source in METRIC_FIELDS_OF_4.items():
            head, _, leaf = dotted.partition(".")
            if (head in obj) if not leaf else (isinstance(obj.get(head), dict) and leaf in obj[head]):
                raise RecordError(path, dotted, f"no such field in a schema-{version} record: it repeats {source}")
        directions: Mapping[str, str] = entry_directions
    else:
        directions = _mapping(obj.get("metric_directions") or {}, path, "metric_directions")
    for k, v in directions.items():
        _name(k, path, "metric_directions key")
        if v not in DIRECTIONS:
            raise RecordError(path, f"metric_directions.{k}", "'higher' or 'lower'", v)
    curves_raw = _mapping(obj.get("curves") or {}, path, "curves")
    curves: dict[str, list[float]] = {}
    for k, c in curves_raw.items():
        _name(k, path, "curves key")
        if not isinstance(c, list):
            raise RecordError(path, f"curves.{k}", "a list of numbers", c)
        fast = None
        if all(type(x) in _JSON_NUMBER for x in c):  # the common case, checked in one pass
            try:
                fast = [float(x) for x in c]
            except OverflowError:  # an integer beyond the float range: the slow path makes it infinite
                pass
        # the slow path names the first bad element; curves may hold NaN and infinities (a plot skips them, and
        # values past fusebench.leaderboard.plots.DRAWABLE),
        # and null (a non-finite value, as strict JSON writes it): read as NaN
        curves[k] = fast if fast is not None else [
            math.nan if x is None else
            _number(x, path, f"curves.{k}[{i}]", allow_nan=True, allow_inf=True, expected="a number or null")
            for i, x in enumerate(c)]
    selection = _mapping(obj.get("selection") or {}, path, "selection")
    if "rule" in selection:
        _str(selection["rule"], path, "selection.rule")
    if version >= 3:
        for dotted, source in REPEATED_FIELDS.items():
            head, _, leaf = dotted.partition(".")
            there = head in obj if not leaf else isinstance(obj.get(head), dict) and leaf in obj[head]
            if there:
                raise RecordError(path, dotted, f"no such field in a schema-{version} record: it repeats {source}")
        protocol = _mapping(cfg.get("protocol_notes") or {}, path, "config.protocol_notes")
        where = "config.protocol_notes"
    else:
        protocol, where = _mapping(obj.get("protocol") or {}, path, "protocol"), "protocol"
        _validate_repeated_seeds(obj, seed, path, version)
    for k, v in protocol.items():
        _str(v, path, f"{where}.{k}")
    config_hash = obj.get("config_hash")
    if config_hash is not None and (not isinstance(config_hash, str) or not re.fullmatch(r"[0-9a-f]{16}", config_hash)):
        raise RecordError(path, "config_hash", "16 lowercase hex digits (the config hash)", config_hash)
    if obj.get("finished_at") is not None:
        finished_time(obj["finished_at"], path)
    if version >= 3 and "hash_schema" not in obj:  # the builder has written it since hash schema 2, before schema 3
        raise RecordError(path, "hash_schema", f"one of {list(HASH_SCHEMAS)} (every schema-{version} record is written "
                          "with it, and its config hash is checked under it; the field is missing)")
    hash_schema = obj.get("hash_schema")
    if hash_schema is not None or version >= 3:
        if type(hash_schema) is not int or hash_schema not in HASH_SCHEMAS:
            raise RecordError(path, "hash_schema", f"one of {list(HASH_SCHEMAS)}", hash_schema)
        want = cell_config_hash(cfg, objective, hash_schema)  # reproduced from the record's own config
        if config_hash != want and hash_schema >= 4 and not row_known(objective):
            # a row of a plugin not installed here: whether it pretrains (and so reads pretrain) is its plugin's to
            # say; the hash of a row that pretrains nothing is the other one
            want = config_hash if config_hash == cell_config_hash(cfg, objective, hash_schema, True) else want
        if config_hash != want:
            raise RecordError(path, "config_hash", f"{want!r}, the hash schema {hash_schema} hash of the record's "
                              "config (was the record edited?)", config_hash)
    precision = _validate_precision(obj, cfg, path)
    _validate_board_fields(obj, path)
    _validate_plugins(obj.get("plugins"), path)  # optional (issue #32): old records have none
    if version >= 2:
        versions = _validate_versions(obj, path, suite, cfg, entry_versions if version >= 4 else None)
    else:
        versions = Versions(suite, "1", {m: "1" for m in cfg.get("metrics") or []})
    key = comparability_key(obj)
    if version >= 2:
        stored = _str(_need(obj, "comparability_key", path), path, "comparability_key")
        if stored != key and stored != comparability_key(obj, legacy=True):  # legacy: a cache's manifest hash
            raise RecordError(path, "comparability_key",
                              f"{key!r}, the key of the record's content (was the record edited?)", stored)
    return RunRecord(
        path=path, schema_version=version, suite_version=suite, benchmark=benchmark, objective=objective,
        seed=seed, config=cfg, dataset=dataset, metrics=metrics, pretrain_time_s=pretrain_time,
        peak_memory_mb=peak, versions=versions, comparability_key=key, config_hash=config_hash,
        metric_directions=dict(directions), curves=curves, selection=dict(selection), protocol=dict(protocol),
        precision=precision, raw=obj,
    )


def read_record_json(path: str | Path) -> dict[str, Any]:
    """The parsed JSON object of a run.json, not validated (what a migration script converts); a file that
    cannot be read, is not JSON or is not a JSON object is a :class:`RecordError` naming it."""
    path = Path(path)
    try:  # (two equal keys in one object are refused: json keeps the last one silently)
        obj = json.loads(path.read_text(encoding="utf-8"), object_pairs_hook=unique_keys)
    except (OSError, UnicodeDecodeError, ValueError) as e:  # ValueError: JSONDecodeError, a too long integer
        raise RecordError(path, "(file)", f"a readable JSON file ({e})") from None
    except RecursionError:
        raise RecordError(path, "(file)", "a run record, found JSON nested too deeply to read") from None
    if not isinstance(obj, dict):
        raise RecordError(path, "(top level)", "a JSON object", obj)
    return obj


def load_record(path: str | Path) -> RunRecord:
    """Read and validate one run.json."""
    path = Path(path)
    obj = read_record_json(path)
    try:
        rec = validate_record(obj, path)
    except RecursionError:  # e.g. hashing a config nested nearly as deep as the parser allows
        raise RecordError(path, "(file)", "a run record, found JSON nested too deeply to check") from None
    cell = path.parent
    if re.fullmatch(r"seed[0-9]+", cell.name) and cell.name != f"seed{rec.seed}":
        # a record in a cell folder seed<k> is that seed's (the config hash does not cover the seed: a copy would
        # count one run twice); the objective's folder may be renamed (two sweeps of one objective kept side by side)
        raise RecordError(path, "seed", f"the seed of its cell folder ({cell.parent.name}/{cell.name}); the record "
                          f"says seed {rec.seed} (copied or edited?)")
    return rec
