"""Sleep-staging metrics: the F1 of each stage, ``f1_w``, ``f1_n1``, ``f1_n2``, ``f1_n3``, ``f1_rem``.

Call form: ``get(id)(y_pred, y_true) -> float`` with 1-D integer arrays (numpy or torch) of stage ids
0..4 = W, N1, N2, N3, REM (the adapters' mapping). Predictions are pooled over all test subjects
before computing a metric (one confusion matrix), as in the sleep-staging literature (e.g. the M3G
paper's Sec. 4.3 evaluation, Piran et al. 2024, arXiv:2405.19532, via Brüsch et al. 2023,
arXiv:2307.09614). The sleep benchmarks' other metrics, ``acc``, ``bacc``, ``mf1`` and ``kappa``, are the
generic ones of :mod:`fusebench.metrics.classification`.

* ``f1_w`` ... ``f1_rem``: F1 of that stage one-vs-rest, 2 TP / (#predicted + #true)
  (:func:`fusebench.metrics.classification.class_f1`); NaN when the stage occurs in neither array.

Shape: ``y_pred`` [n], ``y_true`` [n]; n >= 1 (empty input raises ValueError).
"""

from __future__ import annotations

from typing import Any

from fusebench.metrics import register
from fusebench.metrics.classification import class_f1

STAGES = ("w", "n1", "n2", "n3", "rem")


def _make_stage_f1(stage: int, name: str) -> None:
    def fn(y_pred: Any, y_true: Any) -> float:
        return class_f1(y_pred, y_true, stage, f"f1_{name}")

    fn.__name__ = f"f1_{name}"
    fn.__doc__ = f"F1 of sleep stage {name.upper()} (class {stage}) one-vs-rest; NaN if absent from both."
    register(f"f1_{name}")(fn)
    globals()[fn.__name__] = fn


for _i, _name in enumerate(STAGES):
    _make_stage_f1(_i, _name)

__all__ = ["STAGES"] + [f"f1_{s}" for s in STAGES]
