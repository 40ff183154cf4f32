"""Evaluation metrics (``fusebench.metrics``): ``get(id)``, ``available()``.

Every metric is a callable carrying ``higher_is_better`` (bool), ``task``, ``unit`` and ``version``.
``unit`` says how a value is shown: ``"fraction"`` (a value in [0, 1], rendered x100 as a percent by
the leaderboard) or ``"raw"`` (rendered as is: errors, correlations, kappa). ``version`` is bumped
when a metric's definition changes, so runs scored with different definitions are never compared
(it is part of a run record's comparability key). Call forms:

* sentiment / sleep: ``get(id)(y_pred, y_true) -> float`` on 1-D arrays (numpy or torch);
* segmentation: ``get(id)(pred, target, num_classes, ignore_index=-1) -> float``;
* detection: ``get(id)(detections, ground_truths, num_classes=10) -> float``.

Inputs may be of any dtype, half precision included (bfloat16 / float16 outputs of a mixed-precision
model): :func:`fusebench.metrics.arrays.to_numpy` widens them exactly, and every metric reduces in
float64 (counts in exact integers), whatever the caller's autocast.

``metadata(id)`` gives a metric's task, direction, unit and version without importing the metric
modules (numpy, scipy, torch) when the id is built in: the table in :mod:`fusebench.metrics.catalog`,
which every built-in ``register`` call is checked against.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from fusebench.metrics.catalog import CATALOG
from fusebench.registry import Registry, UnknownNameError, closest


def _describe(m: Any) -> dict[str, Any]:
    """Metadata of a :class:`Metric` entry: task, direction, unit, version, description."""
    if not isinstance(m, Metric):
        return {}
    return {"task": m.task, "direction": m.direction, "unit": m.unit, "version": m.version,
            "description": m.description}


# one module per task family; importing a module registers its ids (on the first lookup)
METRICS = Registry("metric", entry_point_group="fusebench.metrics", describe=_describe, modules=tuple(
    f"{__name__}.{m}" for m in ("segmentation", "sentiment", "sleep", "detection", "clustering")))
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
        return self.fn(*args, **kwargs)


def register(id: str, *, higher_is_better: bool, task: str, description: str = "", unit: str = "raw",
             version: str = "1"):
    """Decorator: register ``fn`` as metric ``id`` (``unit``: "fraction" or "raw"; see the module doc)."""

    def deco(fn: Callable[..., float]) -> Callable[..., float]:
        metric = Metric(id, fn, higher_is_better, task, description or (fn.__doc__ or "").strip(), unit, version)
        if getattr(fn, "__module__", None) in METRICS.modules:
            _check_catalog(metric)
        METRICS.add(id, metric)
        return fn

    return deco


def _check_catalog(metric: Metric) -> None:
    """A built-in registration must match its entry in :data:`fusebench.metrics.catalog.CATALOG`."""
    declared = CATALOG.get(metric.id)
    if declared is None:
        raise ValueError(f"built-in metric {metric.id!r} ({metric.fn.__module__}) is not declared in "
                         f"fusebench/metrics/catalog.py; add it there (task, direction, unit, version)")
    stated = (metric.task, metric.higher_is_better, metric.unit, metric.version)
    if tuple(declared) != stated:
        raise ValueError(f"built-in metric {metric.id!r}: register(...) in {metric.fn.__module__} says "
                         f"(task, higher_is_better, unit, version) = {stated} but fusebench/metrics/catalog.py "
                         f"says {tuple(declared)}; change both")


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


__all__ = ["CATALOG", "METRICS", "UNITS", "Metric", "UnknownNameError", "available", "get", "metadata", "register"]
