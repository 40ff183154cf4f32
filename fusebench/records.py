"""Typed schema of run records (the ``run.json`` a run writes) and their comparability key.

:func:`validate_record` turns the parsed JSON of one ``run.json`` into a :class:`RunRecord`, or
raises :class:`RecordError` (a ``ValueError``) naming the file, the field and what was expected.
The leaderboard reads records only through it; the runner validates what it is about to write.

Schema versions
---------------

* **1** — the records committed under ``leaderboards/runs/``. Required: ``schema_version``,
  ``suite_version``, ``benchmark``, ``objective``, ``seed``, ``config``, ``dataset`` (``id``,
  ``synthetic``, ``manifest_hash``), ``metrics``, ``pretrain_time_s``, ``peak_memory_mb``.
  Optional: ``metric_directions``, ``curves``, ``selection``, ``protocol``, ``config_hash`` and the
  provenance fields (``git``, ``host``, ``device``, ...), which are kept in :attr:`RunRecord.raw`.
  Versions default to ``"1"`` (versions did not exist yet) and the dataset has no fingerprint.
* **2** — version 1 plus ``versions: {"suite": str, "objective": str, "metrics": {id: str}}``
  (``suite`` equals ``suite_version``; ``metrics`` covers every id in ``config.metrics``),
  ``comparability_key: str`` (:func:`comparability_key` of the record) and a dataset identity
  ``dataset: {"id", "synthetic": bool, "manifest_hash": str, "fingerprint": null |
  {"files": [[relpath, size], ...], "sha256": str}}``.

Both versions may carry ``precision`` (the run's precision policy, one of
:data:`fusebench.training.precision.PRECISIONS`; it must equal ``config.precision``, which a spec at
the default ``32`` leaves out) and ``numerics`` (a mapping: device name, CUDA / cuDNN versions,
deterministic settings, TF32 switches; :func:`fusebench.training.precision.numerics`). A record
without them was made at ``32``: every record before the precision policy was made on the CPU.

Types: ids (``benchmark``, ``objective``, ``dataset.id``) follow the registry id rule
(:data:`fusebench.registry.ID_RULE`), so they are safe as one path component; ``seed`` is an
integer (not a string, not a boolean); every metric value is a finite JSON number or ``NaN`` (a
metric undefined for the run, e.g. a correlation of constant predictions, Cohen's kappa when chance
agreement is 1, the F1 of a class absent from the split; the leaderboard counts these in the cell);
``Infinity``, ``null``, strings and lists are refused (a run that failed has ``failed.json``, not a
``run.json``); curves are lists of numbers; metric and curve names are ``[A-Za-z0-9][A-Za-z0-9_.@-]*``.

What counts as a record file (:func:`find_records`, :func:`check_record_file`; the leaderboard and
``fusebench status`` share the rule): a regular file named ``run.json`` reached from the runs folder
through real folders. A ``run.json`` that is a folder, a symbolic link or a special file, a symbolic
link to a folder anywhere under the runs folder (hidden folders aside), and a folder that cannot be
listed are errors naming the path, never skipped: a record is never counted from outside the runs
folder, nor silently left out. The runs folder itself may be a link.

Files written for records and boards get mode ``0o666 & ~umask`` (:func:`fusebench.io.new_file_mode`).

Comparability
-------------

Two runs may share a leaderboard row / table only if their :func:`comparability_key` is equal. The
key hashes :func:`comparability_fields`: the benchmark id; a hash of ``config`` without the keys that
do not change what one run computes (:data:`CONFIG_KEYS_IGNORED`: the seed list, the objective
sweep list, the protocol notes, the description, the ``synthetic:`` override block itself, and
``options.board``); the suite version; the versions of the metrics in
``config.metrics``; and the dataset identity (id, synthetic flag, manifest hash, fingerprint hash).
A precision other than ``32`` is in ``config``, so runs of different precisions never share a key.
The objective's version is not in the key (one table compares objectives of different versions);
the leaderboard requires it to be the same within each objective's row instead.
"""

from __future__ import annotations

import copy
import json
import math
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from fusebench.io import canonical_json, sha256_hex
from fusebench.registry import ID_RULE, valid_id

SCHEMA_VERSIONS = (1, 2)
#: what a run writes today (the runner sets its SCHEMA_VERSION to this)
CURRENT_SCHEMA_VERSION = 2
#: config keys left out of the comparability hash (they do not change what one run computes)
CONFIG_KEYS_IGNORED = ("seeds", "objectives", "protocol_notes", "description", "synthetic")
#: leaderboard section of a board (``config.options.board``); see docs/leaderboards.md
BOARD_KINDS = ("study", "pipeline_check")
DIRECTIONS = ("higher", "lower")

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@\-]*$")


class RecordError(ValueError):
    """A run record that does not follow the schema; the message names the file and the field."""

    def __init__(self, path: str | Path, field_name: str, expected: str, got: Any = ...) -> None:
        self.path = str(path)
        self.field = field_name
        msg = f"{path}: field {field_name!r}: expected {expected}"
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


@dataclass(frozen=True)
class Versions:
    suite: str
    objective: str
    metrics: dict[str, str]


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
    def primary_metric(self) -> str:
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
METRIC_EXPECTED = ("a finite number or NaN (NaN: the metric is undefined for this run; a failed run has "
                   "failed.json, not run.json)")


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


def _mapping(value: Any, path: str, name: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise RecordError(path, name, "a mapping", value)
    return value


_GOOD_NAMES: set[str] = set()  # names that passed _NAME (metric and curve names repeat in every record)


def _name(value: Any, path: str, name: str) -> str:
    if type(value) is str and value in _GOOD_NAMES:
        return value
    if not isinstance(value, str) or not _NAME.match(value):
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
    for key in ("synthetic", "protocol_notes"):
        if cfg.get(key) is not None:
            _mapping(cfg[key], path, f"config.{key}")
    ds = cfg.get("dataset")
    if ds is not None:
        _mapping(ds, path, "config.dataset")
        if "synthetic_only" in ds and not isinstance(ds["synthetic_only"], bool):
            raise RecordError(path, "config.dataset.synthetic_only", "a boolean", ds["synthetic_only"])


def _validate_precision(obj: Mapping[str, Any], cfg: Mapping[str, Any], path: str) -> str:
    """The record's precision: ``config.precision`` (absent: ``32``), which a top-level ``precision``
    must repeat; ``numerics``, where present, is a mapping."""
    from fusebench.training.precision import DEFAULT, PRECISIONS

    configured = cfg.get("precision", DEFAULT)
    if configured not in PRECISIONS:
        raise RecordError(path, "config.precision", f"one of {list(PRECISIONS)}", configured)
    if "precision" in obj and obj["precision"] != configured:
        raise RecordError(path, "precision", f"{configured!r}, the precision in config (was the record edited?)",
                          obj["precision"])
    if obj.get("numerics") is not None:
        _mapping(obj["numerics"], path, "numerics")
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
    return DatasetIdentity(did, syn, mh, fp)


def _validate_versions(raw: dict[str, Any], path: str, suite: str, cfg: dict[str, Any]) -> Versions:
    v = _mapping(_need(raw, "versions", path), path, "versions")
    s = _str(_need(v, "suite", path, "versions."), path, "versions.suite")
    if s != suite:
        raise RecordError(path, "versions.suite", f"the suite_version {suite!r}", s)
    o = _str(_need(v, "objective", path, "versions."), path, "versions.objective")
    ms = _mapping(_need(v, "metrics", path, "versions."), path, "versions.metrics")
    for k, val in ms.items():
        _name(k, path, "versions.metrics key")
        _str(val, path, f"versions.metrics.{k}")
    missing = [m for m in cfg.get("metrics") or [] if m not in ms]
    if missing:
        raise RecordError(path, "versions.metrics", f"a version for every metric in config.metrics (missing {missing})")
    return Versions(s, o, dict(sorted(ms.items())))


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
    for k, v in raw_metrics.items():
        _name(k, path, "metrics key")
        x = _fast_float(v)
        metrics[k] = x if x is not None else _number(v, path, f"metrics.{k}", allow_nan=True,
                                                     expected=METRIC_EXPECTED)
    pretrain_time = _number(_need(obj, "pretrain_time_s", path), path, "pretrain_time_s", nonneg=True)
    peak = _number(_need(obj, "peak_memory_mb", path), path, "peak_memory_mb", nonneg=True)
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
        # the slow path names the first bad element; curves may hold NaN and infinities (a plot skips them)
        curves[k] = fast if fast is not None else [
            _number(x, path, f"curves.{k}[{i}]", allow_nan=True, allow_inf=True, expected="a number")
            for i, x in enumerate(c)]
    selection = _mapping(obj.get("selection") or {}, path, "selection")
    if "rule" in selection:
        _str(selection["rule"], path, "selection.rule")
    protocol = _mapping(obj.get("protocol") or {}, path, "protocol")
    for k, v in protocol.items():
        _str(v, path, f"protocol.{k}")
    config_hash = obj.get("config_hash")
    if config_hash is not None:
        _str(config_hash, path, "config_hash")
    precision = _validate_precision(obj, cfg, path)
    if version >= 2:
        versions = _validate_versions(obj, path, suite, cfg)
    else:
        versions = Versions(suite, "1", {m: "1" for m in cfg.get("metrics") or []})
    key = comparability_key(obj)
    if version >= 2:
        stored = _str(_need(obj, "comparability_key", path), path, "comparability_key")
        if stored != key:
            raise RecordError(path, "comparability_key",
                              f"{key!r}, the key of the record's content (was the record edited?)", stored)
    return RunRecord(
        path=path, schema_version=version, suite_version=suite, benchmark=benchmark, objective=objective,
        seed=seed, config=cfg, dataset=dataset, metrics=metrics, pretrain_time_s=pretrain_time,
        peak_memory_mb=peak, versions=versions, comparability_key=key, config_hash=config_hash,
        metric_directions=dict(directions), curves=curves, selection=dict(selection), protocol=dict(protocol),
        precision=precision, raw=obj,
    )


def load_record(path: str | Path) -> RunRecord:
    """Read and validate one run.json."""
    path = Path(path)
    try:
        obj = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as e:  # ValueError: JSONDecodeError, a too long integer
        raise RecordError(path, "(file)", f"a readable JSON file ({e})") from None
    except RecursionError:
        raise RecordError(path, "(file)", "a run record, found JSON nested too deeply to read") from None
    try:
        return validate_record(obj, path)
    except RecursionError:  # e.g. hashing a config nested nearly as deep as the parser allows
        raise RecordError(path, "(file)", "a run record, found JSON nested too deeply to check") from None


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


# ---------------------------------------------------------------------------------------------
# comparability
# ---------------------------------------------------------------------------------------------
def _comparable_view(config: Mapping[str, Any]) -> dict[str, Any]:
    """:func:`comparable_config` without the deep copy: only the top level and ``options`` are new
    mappings, every other value is shared with ``config``. For reading only (hashing, flattening);
    copying every nested value was most of the cost of validating a record."""
    cfg = {k: v for k, v in config.items() if k not in CONFIG_KEYS_IGNORED}
    if isinstance(cfg.get("options"), dict):
        cfg["options"] = {k: v for k, v in cfg["options"].items() if k != "board"}
    return cfg


def comparable_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` without :data:`CONFIG_KEYS_IGNORED` and ``options.board`` (a deep copy)."""
    return copy.deepcopy(_comparable_view(config))


def comparability_fields(record: Mapping[str, Any] | RunRecord) -> dict[str, Any]:
    """What must be equal for two runs to be compared (a v1 record gets the version defaults)."""
    raw = record.raw if isinstance(record, RunRecord) else record
    cfg = raw.get("config") or {}
    cfg = cfg if isinstance(cfg, dict) else {}
    ds = raw.get("dataset") or {}
    ds = ds if isinstance(ds, dict) else {}
    metric_ids = [m for m in cfg.get("metrics") or [] if isinstance(m, str)]
    if raw.get("schema_version", 1) >= 2 and isinstance(raw.get("versions"), dict):
        v = raw["versions"]
        objective_version = v.get("objective", "1")
        mv = v.get("metrics") if isinstance(v.get("metrics"), dict) else {}
        metric_versions = {m: mv.get(m) for m in metric_ids} if metric_ids else dict(mv)
    else:
        objective_version = "1"
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
    import fusebench
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
    return {"suite": fusebench.__version__, "objective": obj_version, "metrics": dict(sorted(mv.items()))}


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

    1. ``config.options.board`` when set (explicit: ``"study"`` or ``"pipeline_check"``);
    2. ``"real"`` when ``dataset.synthetic`` is false;
    3. ``"pipeline_check"`` for a synthetic twin: the spec's ``synthetic:`` override block was applied
       (:func:`synthetic_overrides_applied`) to a benchmark whose dataset is not synthetic-only;
    4. otherwise ``"study"`` (data synthetic by design, e.g. quickstart, polyview-gaussian-mi).
    """
    options = record.config.get("options") or {}
    board = options.get("board") if isinstance(options, dict) else None
    if board == "pipeline_check":
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


__all__ = ["BOARD_KINDS", "CONFIG_KEYS_IGNORED", "CURRENT_SCHEMA_VERSION", "DatasetIdentity", "Fingerprint",
           "METRIC_EXPECTED", "RECORD_FILE", "RecordError", "RunRecord", "SCHEMA_VERSIONS", "Versions", "board_kind",
           "check_record_file", "comparability_fields", "comparability_key", "comparable_config", "differing_fields",
           "find_records", "load_record", "synthetic_overrides_applied", "validate_record",
           "versions_block"]
