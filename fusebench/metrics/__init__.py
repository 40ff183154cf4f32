"""Evaluation metrics (``fusebench.metrics``): ``get(id)``, ``available()``.

Every metric is a callable carrying ``higher_is_better`` (bool) and ``task``; values are fractions
(x100 only when rendering). Call forms:

* sentiment / sleep: ``get(id)(y_pred, y_true) -> float`` on 1-D arrays (numpy or torch);
* segmentation: ``get(id)(pred, target, num_classes, ignore_index=-1) -> float``;
* detection: ``get(id)(detections, ground_truths, num_classes=10) -> float``.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable

from fusebench.registry import Registry, UnknownNameError

METRICS = Registry("metric", entry_point_group="fusebench.metrics")


@dataclass(frozen=True)
class Metric:
    """A metric function with its metadata."""

    id: str
    fn: Callable[..., float]
    higher_is_better: bool
    task: str
    description: str = ""

    def __call__(self, *args: Any, **kwargs: Any) -> float:
        return self.fn(*args, **kwargs)


def register(id: str, *, higher_is_better: bool, task: str, description: str = ""):
    """Decorator: register ``fn`` as metric ``id``."""

    def deco(fn: Callable[..., float]) -> Callable[..., float]:
        METRICS.add(id, Metric(id, fn, higher_is_better, task, description or (fn.__doc__ or "").strip()))
        return fn

    return deco


_MODULES = ("segmentation", "sentiment", "sleep", "detection")
_loaded = False


def _load() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    for m in _MODULES:
        importlib.import_module(f"{__name__}.{m}")


def available(pattern: str | None = None) -> list[str]:
    _load()
    return METRICS.available(pattern)


def get(id: str) -> Metric:
    _load()
    return METRICS.get(id)


__all__ = ["METRICS", "Metric", "UnknownNameError", "available", "get", "register"]
