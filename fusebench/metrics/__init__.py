"""Evaluation metrics (``fusebench.metrics``): ``get(id)``, ``available()``.

Every metric is a callable carrying ``higher_is_better`` (bool), ``task``, ``unit`` and ``version``.
``unit`` says how a value is shown: ``"fraction"`` (a value in [0, 1], rendered x100 as a percent by
the leaderboard) or ``"raw"`` (rendered as is: errors, correlations, kappa). ``version`` is bumped
when a metric's definition changes, so runs scored with different definitions are never compared
(it is part of a run record's comparability key). Call forms:

* sentiment / classification / sleep: ``get(id)(y_pred, y_true) -> float`` on 1-D arrays (numpy or torch);
* segmentation: ``get(id)(pred, target, num_classes, ignore_index=-1) -> float``;
* detection: ``get(id)(detections, ground_truths, num_classes=10) -> float``.

Inputs may be of any dtype, half precision included (bfloat16 / float16 outputs of a mixed-precision
model) and sparse arrays (``scipy.sparse``, torch sparse layouts): :func:`fusebench.metrics.arrays.to_numpy`
widens half precision and makes sparse input dense, both exactly, and every metric reduces in
float64 (counts in exact integers), whatever the caller's autocast; a metric's CUDA matrix products run in
full float32 (the TF32 switches set to ``ieee`` for the call: :func:`fusebench.spec.precision.full_float32`).

A built-in metric's task, direction, unit and version are written once, in the table of
:mod:`fusebench.metrics.catalog`; its ``register`` call names the id and takes them from there (stating
any of them again is an error). ``metadata(id)`` reads that table without importing the metric modules
(numpy, scipy, torch) when the id is built in. A plugin metric states them in its ``register`` call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from fusebench.metrics.catalog import CATALOG, SLEEP_STAGES
from fusebench.registry import Registry, UnknownNameError, closest


def _describe(m: Any) -> dict[str, Any]:
    """Metadata of a :class:`Metric` entry: task, direction, unit, version, description."""
    if not isinstance(m, Metric):
        return {}
    return {"task": m.task, "direction": m.direction, "unit": m.unit, "version": m.version,
            "description": m.description}


_TASK_MODULE = {"segmentation": "segmentation", "regression": "sentiment", "detection": "detection",
                "clustering": "clustering", "classification": "classification"}
#: the per-stage F1 ids of the sleep module (the other classification ids are the generic module's)
_SLEEP_IDS = frozenset(f"f1_{s}" for s in SLEEP_STAGES)


def _home(name: str) -> str | None:
    """The metric module that registers built-in metric ``name``, from its task in the catalog (of the
    classification task, the probe metrics ``fs*`` / ``knn*`` are the clustering module's and the per-stage
    F1s ``f1_<stage>`` the sleep module's); looking one id up imports that module only."""
    declared = CATALOG.get(name)
    if declared is None:
        return None
    module = _TASK_MODULE.get(declared.task, "")
    if declared.task == "classification" and name.startswith(("fs", "knn")):
        module = "clustering"
    elif declared.task == "classification" and name in _SLEEP_IDS:
        module = "sleep"
    return f"{__name__}.{module}"


# one module per task family; importing a module registers its ids (on the first lookup)
METRICS = Registry("metric", entry_point_group="fusebench.metrics", describe=_describe, home=_home, modules=tuple(
    f"{__name__}.{m}" for m in ("segmentation", "sentiment", "classification", "sleep", "detection", "clustering")))
UNITS = ("fraction", "raw")


@dataclass(frozen=True)
class Metric:
    """A metric function with its metadata."""

    id: str
    fn: Callable[..., float]
    higher_is_better: bool
    task: str
    description: str = ""
    unit: str = "raw"  # "fraction" (rendered as a percent) or "raw"
    version: str = "1"  # bump when the definition changes

    def __post_init__(self) -> None:
        if self.unit not in UNITS:
            raise ValueError(f"metric {self.id!r}: unit {self.unit!r} is not one of {list(UNITS)}")
        if not isinstance(self.version, str) or not self.version:
            raise ValueError(f"metric {self.id!r}: version must be a non-empty string, got {self.version!r}")

    @property
    def direction(self) -> str:
        return "higher" if self.higher_is_better else "lower"

    def __call__(self, *args: Any, **kwargs: Any) -> float:
        from fusebench.spec.precision import full_float32

        with full_float32():  # CUDA matrix products in full float32 whatever the precision policy (no TF32)
            return self.fn(*args, **kwargs)


def register(id: str, *, higher_is_better: bool | None = None, task: str | None = None, description: str = "",
             unit: str | None = None, version: str | None = None):
    """Decorator: register ``fn`` as metric ``id``.

    A metric's task, direction, unit and version are written in one place. For a built-in metric (``fn``
    defined in a module of :data:`METRICS`' ``modules``) that place is :mod:`fusebench.metrics.catalog`:
    its ``register`` call names the id (and optionally a ``description``) and states none of them. Any
    other metric (a plugin, one registered at run time) states them here: ``higher_is_better`` and
    ``task`` (required), ``unit`` ("fraction" or "raw", default "raw") and ``version`` (default "1")."""
    stated = {"higher_is_better": higher_is_better, "task": task, "unit": unit, "version": version}

    def deco(fn: Callable[..., float]) -> Callable[..., float]:
        fields = _metadata_of(id, fn, {k: v for k, v in stated.items() if v is not None})
        metric = Metric(id, fn, description=description or (fn.__doc__ or "").strip(), **fields)
        METRICS.add(id, metric)
        return fn

    return deco


def _metadata_of(id: str, fn: Callable[..., float], stated: dict[str, Any]) -> dict[str, Any]:
    """The metadata fields of a new :class:`Metric`: a built-in one's from the catalog (and none stated at
    its ``register``), any other's as stated (``higher_is_better`` and ``task`` required)."""
    module = getattr(fn, "__module__", None)
    if module in METRICS.modules:
        declared = CATALOG.get(id)
        if declared is None:
            raise ValueError(f"built-in metric {id!r} ({module}) is not declared in fusebench/metrics/catalog.py; "
                             "add it there (task, direction, unit, version)")
        if stated:
            raise ValueError(f"built-in metric {id!r}: register(...) in {module} states {', '.join(sorted(stated))}, "
                             "which fusebench/metrics/catalog.py holds; state them only there")
        return declared._asdict()
    missing = [k for k in ("higher_is_better", "task") if k not in stated]
    if missing:
        raise TypeError(f"register({id!r}): a metric that is not built in states {' and '.join(missing)} "
                        "(and optionally unit, version)")
    return {"unit": "raw", "version": "1", **stated}


def metadata(id: str) -> dict[str, str]:
    """``{"task", "direction", "unit", "version"}`` of metric ``id``. A built-in id is answered from
    :mod:`fusebench.metrics.catalog` without importing any metric module; an id registered in this
    process or named by a plugin entry point through the registry (which imports it). Raises
    :class:`UnknownNameError` (a KeyError) for an id that is not a metric."""
    if not isinstance(id, str):
        raise TypeError(f"metric id must be a string, got {type(id).__name__}")
    key = id.lower()
    declared = CATALOG.get(key)
    if declared is not None:
        return {"task": declared.task, "direction": declared.direction, "unit": declared.unit,
                "version": declared.version}
    if not METRICS.registered(key):  # not built in, not registered at run time, not a plugin
        hint = closest(key, sorted(CATALOG))
        raise UnknownNameError(f"unknown metric {id!r}." + (f" Did you mean {hint!r}?" if hint else ""))
    m = get(key)
    return {"task": m.task, "direction": m.direction, "unit": m.unit, "version": m.version}


def available(pattern: str | None = None) -> list[str]:
    return METRICS.available(pattern)


def get(id: str) -> Metric:
    return METRICS.get(id)


def entries(values: dict[str, Any], directions: dict[str, str] | None = None) -> dict[str, dict[str, Any]]:
    """A run record's ``metrics`` block (record schema 4): ``{id: {"value", "direction", "version"}}`` for each
    computed value, the direction from ``directions`` (the dataset's task, a pipeline's own metrics), else the
    metric's metadata, else null; the version the metric's (``"1"`` for an id that is not a registered metric,
    e.g. a pipeline's own ``mi_bound_M2``). Values are kept as given (NaN: undefined, written as null)."""
    out: dict[str, dict[str, Any]] = {}
    for mid, value in values.items():
        try:
            meta = metadata(mid)
        except (UnknownNameError, TypeError):
            meta = {"direction": None, "version": "1"}
        out[mid] = {"value": value, "direction": (directions or {}).get(mid, meta["direction"]),
                    "version": str(meta["version"])}
    return out


def values_of(block: Any) -> dict[str, Any]:
    """``{id: value}`` of a run record's ``metrics`` block: a schema-4 entry's ``value``, a number of schemas 1-3
    as it is (null stays None); ``{}`` for anything that is not a mapping."""
    if not isinstance(block, dict):
        return {}
    return {k: v.get("value") if isinstance(v, dict) else v for k, v in block.items()}


__all__ = ["CATALOG", "METRICS", "UNITS", "Metric", "UnknownNameError", "available", "entries", "get", "metadata",
           "register", "values_of"]
