"""What every built-in metric is, without its code: task, direction, unit and version per id.

This table is the one place the built-in metrics' metadata is written. The metric modules register
their functions by id only (``register("miou")``), and :func:`fusebench.metrics.register` takes the
metadata from here: a built-in id missing from the table, or a built-in ``register`` call stating any
of these fields again, is an error when the module is imported; ``tests/test_metrics.py`` checks that
the table lists exactly the ids the built-in modules register. Importing this module imports nothing
else (no numpy, scipy or torch), so the leaderboard reads the units and directions of its columns
from here (:func:`fusebench.metrics.metadata`) without loading the metric functions. A plugin metric
(entry point ``fusebench.metrics``) states its metadata in its own ``register`` call and is never
listed here.
"""

from __future__ import annotations

from typing import NamedTuple


class Declared(NamedTuple):
    """Metadata of one built-in metric (the fields of :class:`fusebench.metrics.Metric` but the function)."""

    task: str
    higher_is_better: bool
    unit: str  # "fraction" | "raw"
    version: str

    @property
    def direction(self) -> str:
        return "higher" if self.higher_is_better else "lower"


#: the smallest value of a "fraction" metric where it is not 0: a chance-adjusted index that a clustering worse than
#: chance scores below 0 (the adjusted Rand index: its minimum is -1/2, Chacon & Rastrojo 2023; -1 leaves room);
#: read by the record schema's range check (``fusebench.records.schema.fraction_floor``)
FRACTION_LOWER: dict[str, float] = {"ari": -1.0}

#: the SUN RGB-D classes in label order (``fusebench.datasets.sunrgbd.classes.CLASSES``, which imports
#: the dataset package; the detection module registers one AP per class, each declared here)
SUNRGBD_CLASSES = ("bed", "table", "sofa", "chair", "toilet", "desk", "dresser", "night_stand", "bookshelf", "bathtub")
#: the sleep stages of ``fusebench.metrics.sleep.STAGES`` (one F1 per stage)
SLEEP_STAGES = ("w", "n1", "n2", "n3", "rem")


def _table() -> dict[str, Declared]:
    frac = "fraction"
    out: dict[str, Declared] = {}
    # segmentation.py
    for m in ("miou", "miou_nanmean", "pixel_acc"):
        out[m] = Declared("segmentation", True, frac, "1")
    # sentiment.py
    out["mae"] = Declared("regression", False, "raw", "1")
    out["corr"] = Declared("regression", True, "raw", "1")
    for m in ("acc7", "acc5", "acc2_has0", "f1_has0", "acc2_non0", "f1_non0", "acc2_nonpos",
              "sims_acc2", "sims_acc3", "sims_acc5", "sims_f1"):
        out[m] = Declared("regression", True, frac, "1")
    out["sims_mae"] = Declared("regression", False, "raw", "1")
    out["sims_corr"] = Declared("regression", True, "raw", "1")
    # classification.py
    for m in ("acc", "bacc", "mf1"):
        out[m] = Declared("classification", True, frac, "1")
    out["kappa"] = Declared("classification", True, "raw", "1")
    # sleep.py
    for m in tuple(f"f1_{s}" for s in SLEEP_STAGES):
        out[m] = Declared("classification", True, frac, "1")
    # detection.py; version 2: scored on VoteNet's predictions as its parse_predictions makes them (the confidence
    # threshold on objectness, then every class of a kept proposal), where version 1 thresholded p_obj * p_sem(c);
    # version 3: proposals with fewer than 5 input points inside are dropped before NMS (VoteNet's eval.py default
    # remove_empty_box), where version 2 kept them
    for tag in ("0.25", "0.50"):
        out[f"map_{tag}"] = Declared("detection", True, frac, "3")
        out[f"mar_{tag}"] = Declared("detection", True, frac, "3")
        for c in SUNRGBD_CLASSES:
            out[f"ap_{tag}_{c}"] = Declared("detection", True, frac, "3")
    # clustering.py
    for m in ("cluster_acc", "nmi", "ari"):
        out[m] = Declared("clustering", True, frac, "1")
    # clustering.py: the probe accuracies of the frozen-embedding evaluation (few-shot: the logistic probe
    # fs<s>_acc, the prototype probe fs<s>_proto_acc, and the one chosen on validation, fs<s>_best_acc)
    for m in ("knn_acc", "fs1_proto_acc", "fs5_proto_acc", "fs10_proto_acc"):
        out[m] = Declared("classification", True, frac, "1")
    # version 2: the few-shot logistic probe's batched fit is solved to its optimum (damped Newton-CG, stopped at
    # gradient <= 1e-12 max(1, gradient at 0), probes/logistic.py); version 1 scored an unconverged L-BFGS fit
    # (absolute tolerances on the sum of the draws' objectives, stopped far from the optimum at large and small l2).
    # fs<s>_best_acc takes the logistic probe's val score and, when chosen, its test score
    for m in ("fs1_acc", "fs5_acc", "fs10_acc", "fs1_best_acc", "fs5_best_acc", "fs10_best_acc"):
        out[m] = Declared("classification", True, frac, "2")
    return dict(sorted(out.items()))


#: id -> metadata of every metric the built-in modules register
CATALOG: dict[str, Declared] = _table()

__all__ = ["CATALOG", "Declared", "SLEEP_STAGES", "SUNRGBD_CLASSES"]
