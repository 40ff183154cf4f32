"""Segmentation, sentiment, classification and sleep metrics on small hand-worked cases (expected values derived in
the comments). Detection metrics are tested elsewhere; the few-shot probes of frozen embeddings in
tests/test_probes.py and tests/test_prototype_probe.py."""

from __future__ import annotations

import ast
import importlib
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from fusebench import metrics

M = metrics.get

SEGMENTATION = ("miou", "miou_nanmean", "pixel_acc")
SENTIMENT = ("mae", "corr", "acc7", "acc5", "acc2_has0", "f1_has0", "acc2_non0", "f1_non0", "acc2_nonpos",
             "sims_acc2", "sims_acc3", "sims_acc5", "sims_f1", "sims_mae", "sims_corr")
SLEEP = ("acc", "bacc", "mf1", "kappa", "f1_w", "f1_n1", "f1_n2", "f1_n3", "f1_rem")


def test_registered_with_direction_and_task():
    for name in SEGMENTATION + SENTIMENT + SLEEP:
        assert name in metrics.available()
    assert metrics.get("mae").higher_is_better is False and metrics.get("sims_mae").higher_is_better is False
    for name in SEGMENTATION + SLEEP + ("acc7", "corr", "f1_non0", "sims_f1"):
        assert metrics.get(name).higher_is_better is True
    assert metrics.get("miou").task == "segmentation"
    assert metrics.get("kappa").task == "classification" and metrics.get("acc7").task == "regression"


# -- metadata: written once ------------------------------------------------------------------
METADATA_FIELDS = {"higher_is_better", "task", "unit", "version"}


def _register_keywords(path: Path) -> list[tuple[int, set[str]]]:
    """(line, keyword names) of every ``register(...)`` call in the module at ``path``."""
    calls = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "register":
            calls.append((node.lineno, {k.arg for k in node.keywords if k.arg}))
    return calls


def test_every_registered_metric_has_one_source_of_its_metadata() -> None:
    from fusebench.metrics.catalog import CATALOG

    builtin = set()
    for i in metrics.available():
        m = metrics.get(i)
        if m.fn.__module__ in metrics.METRICS.modules:  # built in: the catalog's row, field for field
            builtin.add(i)
            assert (m.task, m.higher_is_better, m.unit, m.version) == tuple(CATALOG[i]), i
        else:  # a plugin states its own, and never under an id of the catalog
            assert i not in CATALOG, i
        assert metrics.metadata(i) == {"task": m.task, "direction": m.direction, "unit": m.unit, "version": m.version}
    assert builtin == set(CATALOG)
    # and the built-in modules' register(...) calls state none of it again
    for module in metrics.METRICS.modules:
        path = Path(importlib.import_module(module).__file__)
        calls = _register_keywords(path)
        assert calls, module
        for line, keywords in calls:
            assert not keywords & METADATA_FIELDS, f"{path.name}:{line} states {sorted(keywords & METADATA_FIELDS)}"


def test_register_takes_a_builtin_metrics_metadata_from_the_catalog_only(monkeypatch: pytest.MonkeyPatch) -> None:
    def fn(y_pred, y_true):
        """A test metric."""
        return 0.0

    monkeypatch.setattr(metrics.METRICS, "_entries", dict(metrics.METRICS._entries))
    monkeypatch.setattr(metrics.METRICS, "_meta", dict(metrics.METRICS._meta))
    monkeypatch.setattr(metrics.METRICS, "_origin", dict(metrics.METRICS._origin))
    fn.__module__ = "fusebench.metrics.sleep"  # as if defined in a built-in module
    with pytest.raises(ValueError, match=r"states higher_is_better, unit.*catalog.py holds"):
        metrics.register("acc", higher_is_better=True, unit="fraction")(fn)
    with pytest.raises(ValueError, match="not declared in fusebench/metrics/catalog.py"):
        metrics.register("acc_new")(fn)
    fn.__module__ = "my_plugin.metrics"  # a plugin states its metadata, and must state direction and task
    with pytest.raises(TypeError, match="states higher_is_better and task"):
        metrics.register("zz_plugin_metric")(fn)
    metrics.register("zz_plugin_metric", higher_is_better=False, task="regression", version="2")(fn)
    got = metrics.get("zz_plugin_metric")
    assert (got.higher_is_better, got.task, got.unit, got.version, got.description) == \
        (False, "regression", "raw", "2", "A test metric.")


# -- segmentation ------------------------------------------------------------------------------
def test_segmentation_hand_worked():
    # valid (true, pred) pairs: (0,0) (0,1) (1,1) (1,1) (2,0); the last pixel is void (-1)
    # M = [[1,1,0],[0,2,0],[1,0,0]]; IoU = 1/(2+2-1), 2/(3+2-2), 0/(0+1-0) = 1/3, 2/3, 0
    target = np.array([0, 0, 1, 1, 2, -1])
    pred = np.array([0, 1, 1, 1, 0, 2])
    assert M("miou")(pred, target, 3) == pytest.approx(1 / 3)
    assert M("miou_nanmean")(pred, target, 3) == pytest.approx(1 / 3)
    assert M("pixel_acc")(pred, target, 3) == pytest.approx(3 / 5)
    # any shape, torch input, one confusion matrix over everything passed
    t2 = torch.tensor(np.concatenate([target, target]).reshape(2, 2, 3))
    p2 = torch.tensor(np.concatenate([pred, pred]).reshape(2, 2, 3))
    assert M("miou")(p2, t2, 3) == pytest.approx(1 / 3)
    assert isinstance(M("miou")(p2, t2, 3), float)
    # another ignore value
    assert M("pixel_acc")(pred, np.where(target == -1, 255, target), 3, ignore_index=255) == pytest.approx(0.6)


def test_segmentation_class_absent_from_ground_truth():
    # class 3 predicted once but absent from the target; class 2 neither present nor predicted
    # IoU0 = 1/(1+2-1) = 1/2, IoU1 = 2/(2+2-2) = 1, IoU3 = 0/(1+0-0) = 0, IoU2 undefined
    target = np.array([0, 0, 1, 1])
    pred = np.array([0, 3, 1, 1])
    assert M("miou")(pred, target, 4) == pytest.approx((0.5 + 1) / 2)  # ESANet: only gt classes
    assert M("miou_nanmean")(pred, target, 4) == pytest.approx((0.5 + 1 + 0) / 3)  # mmseg: predicted counts 0
    assert M("pixel_acc")(pred, target, 4) == pytest.approx(3 / 4)


def test_segmentation_bad_input():
    for name in SEGMENTATION:
        with pytest.raises(ValueError, match="empty"):
            M(name)(np.array([], dtype=int), np.array([], dtype=int), 3)
        with pytest.raises(ValueError, match="ignore_index"):
            M(name)(np.array([0, 1]), np.array([-1, -1]), 3)
        with pytest.raises(ValueError, match="outside 0..2"):
            M(name)(np.array([0, 1]), np.array([0, 3]), 3)
        with pytest.raises(ValueError, match="pred holds"):
            M(name)(np.array([0, 5]), np.array([0, 1]), 3)
        with pytest.raises(ValueError, match="shape"):
            M(name)(np.zeros((2, 2), int), np.zeros(4, int), 3)
        with pytest.raises(ValueError, match="num_classes"):
            M(name)(np.zeros(4, int), np.zeros(4, int), 0)
        with pytest.raises(ValueError, match="integer"):
            M(name)(np.array([0.5, 1.0]), np.array([0, 1]), 3)


# -- sentiment (MOSI / MOSEI) ------------------------------------------------------------------
Y_TRUE = [2.6, -0.4, 0.0, 1.5, -3.4, 0.5]
Y_PRED = [3.2, 0.3, -0.2, 2.4, -2.5, 0.6]


def test_mae_and_acc7_round_half_to_even():
    # |errors| = 0.6, 0.7, 0.2, 0.9, 0.9, 0.1 -> 3.4 / 6 (no clipping)
    assert M("mae")(Y_PRED, Y_TRUE) == pytest.approx(3.4 / 6)
    # clip [-3,3] then round half to even: true -> 3, -0, 0, 2, -3, 0 (0.5 -> 0, 1.5 -> 2)
    #                                       pred -> 3, 0, -0, 2, -2, 1 (-2.5 -> -2)
    # matches 1,1,1,1,0,0. (Rounding half away from zero would give 6/6: 0.5 -> 1, -2.5 -> -3.)
    assert M("acc7")(Y_PRED, Y_TRUE) == pytest.approx(4 / 6)
    # clip [-2,2]: true -> 2, -0, 0, 2, -2, 0; pred -> 2, 0, -0, 2, -2, 1 -> 5/6
    assert M("acc5")(Y_PRED, Y_TRUE) == pytest.approx(5 / 6)
    assert M("acc7")(torch.tensor(Y_PRED), torch.tensor(Y_TRUE)) == pytest.approx(4 / 6)


def test_binary_variants_with_zero_labels():
    y_true = [0.0, 1.2, -0.7, 0.0, 2.0]
    y_pred = [-0.4, 0.9, 0.3, -1.0, -0.1]
    # has0 (>= 0, all): true T,T,F,T,T  pred F,T,T,F,F -> 1/5
    assert M("acc2_has0")(y_pred, y_true) == pytest.approx(1 / 5)
    # non0 (drop y_true == 0, > 0): indices 1,2,4: true T,F,T  pred T,T,F -> 1/3
    assert M("acc2_non0")(y_pred, y_true) == pytest.approx(1 / 3)
    # nonpos (> 0, all): true F,T,F,F,T  pred F,T,T,F,F -> 3/5
    assert M("acc2_nonpos")(y_pred, y_true) == pytest.approx(3 / 5)
    # f1_non0 on true T,F,T / pred T,T,F: F1(T) = 2*1/(2+2) = 1/2 (support 2), F1(F) = 0 (support 1)
    assert M("f1_non0")(y_pred, y_true) == pytest.approx((2 * 0.5 + 1 * 0) / 3)
    # has0 on the first example: true T,F,T,T,F,T  pred T,T,F,T,F,T -> 4/6
    # F1(T) = 2*3/(4+4) = 3/4 (support 4), F1(F) = 2*1/(2+2) = 1/2 (support 2) -> (3 + 1)/6
    assert M("acc2_has0")(Y_PRED, Y_TRUE) == pytest.approx(4 / 6)
    assert M("f1_has0")(Y_PRED, Y_TRUE) == pytest.approx(4 / 6)
    with pytest.raises(ValueError, match="every y_true is 0"):
        M("acc2_non0")([0.3, -0.2], [0.0, 0.0])


def test_weighted_f1_is_called_as_true_pred():
    # true > 0: T,T,T,F,F,F,F,F (support 3 / 5); pred > 0: T,F,F,F,F,F,F,T
    # F1(T) = 2*1/(3+2) = 2/5; F1(F) = 2*4/(5+6) = 8/11
    # weighted by TRUE support: (3*2/5 + 5*8/11)/8 = 133/220; by predicted support (swapped) it would be
    # (2*2/5 + 6*8/11)/8 = 142/220
    y_true = [1, 2, 0.5, -1, -2, -0.5, -1, -3]
    y_pred = [0.5, -1, -0.5, -1, -2, -1, -0.2, 1]
    assert M("f1_non0")(y_pred, y_true) == pytest.approx(133 / 220)
    assert M("f1_has0")(y_pred, y_true) == pytest.approx(133 / 220)


def test_corr():
    # dp = -1,0,1; dt = -1,1,0: sum dp*dt = 1, sqrt(2*2) = 2
    assert M("corr")([1, 2, 3], [1, 3, 2]) == pytest.approx(0.5)
    assert M("corr")(np.array([1.0, 2, 3]), np.array([2.0, 4, 6])) == pytest.approx(1.0)
    assert math.isnan(M("corr")([1, 1, 1], [1, 2, 3]))
    # constant float64 arrays whose centred values are rounding noise, not 0: undefined, never 0.0 or 1.0
    assert (np.full(7, 0.1) - np.full(7, 0.1).mean()).any()
    assert math.isnan(M("corr")(np.full(7, 0.1), np.full(7, 0.1)))
    assert math.isnan(M("corr")(np.full(686, 0.3), np.linspace(-3, 3, 686)))
    assert math.isnan(M("sims_corr")(np.full(7, 0.1), np.linspace(-1, 1, 7)))


def test_kappa_near_but_not_at_full_chance_agreement():
    """One sample of class 1 among n = 200,000 and every prediction 0: p_o = p_e = (n - 1) / n, so kappa = 0 by hand
    (sklearn's cohen_kappa_score agrees); p_e is within 1e-5 of 1, which used to give NaN. Both raters constant on
    one class: p_e = 1 exactly, undefined."""
    n = 200_000
    y_true = np.zeros(n, dtype=np.int64)
    y_true[17] = 1
    assert M("kappa")(np.zeros(n, dtype=np.int64), y_true) == pytest.approx(0.0, abs=1e-12)
    assert math.isnan(M("kappa")(np.zeros(5, dtype=np.int64), np.zeros(5, dtype=np.int64)))


def test_sims_metrics():
    y_true = [-1.5, -0.7, -0.1, 0.0, 0.1, 0.7, 0.8]
    y_pred = [-0.69, -0.75, 0.05, 0.1, 0.12, 1.4, 0.7]
    # clipped true: -1, -0.7, -0.1, 0, 0.1, 0.7, 0.8; clipped pred: -0.69, -0.75, 0.05, 0.1, 0.12, 1, 0.7
    # acc2 bins (-1.01,0],(0,1.01]: true 0,0,0,0,1,1,1  pred 0,0,1,1,1,1,1 -> 5/7
    assert M("sims_acc2")(y_pred, y_true) == pytest.approx(5 / 7)
    # acc3 cuts -0.1, 0.1 (right-closed): true 0,0,0,1,1,2,2  pred 0,0,1,1,2,2,2 -> 5/7
    assert M("sims_acc3")(y_pred, y_true) == pytest.approx(5 / 7)
    # acc5 cuts -0.7,-0.1,0.1,0.7: true 0,0,1,2,2,3,4  pred 1,0,2,2,3,4,3 -> 2/7
    assert M("sims_acc5")(y_pred, y_true) == pytest.approx(2 / 7)
    # |clipped errors| = 0.31, 0.05, 0.15, 0.1, 0.02, 0.3, 0.1 -> 1.03/7
    assert M("sims_mae")(y_pred, y_true) == pytest.approx(1.03 / 7)
    # F1 on the acc2 bins: class 0 support 4, 2*2/(4+2) = 2/3; class 1 support 3, 2*3/(3+5) = 3/4
    assert M("sims_f1")(y_pred, y_true) == pytest.approx((4 * 2 / 3 + 3 * 3 / 4) / 7)
    # Pearson on the clipped values, by explicit loops
    t = [-1, -0.7, -0.1, 0, 0.1, 0.7, 0.8]
    p = [-0.69, -0.75, 0.05, 0.1, 0.12, 1.0, 0.7]
    mt, mp = sum(t) / 7, sum(p) / 7
    cov = sum((a - mp) * (b - mt) for a, b in zip(p, t))
    r = cov / math.sqrt(sum((a - mp) ** 2 for a in p) * sum((b - mt) ** 2 for b in t))
    assert M("sims_corr")(y_pred, y_true) == pytest.approx(r)
    assert M("sims_corr")(y_pred, y_true) != pytest.approx(M("corr")(y_pred, y_true))


def test_sentiment_bad_input():
    for name in SENTIMENT:
        with pytest.raises(ValueError, match="empty"):
            M(name)([], [])
        with pytest.raises(ValueError, match="must match"):
            M(name)([0.1, 0.2], [0.1])
        with pytest.raises(ValueError, match="NaN"):
            M(name)([float("nan"), 0.2], [0.1, 0.3])
        with pytest.raises(ValueError, match="1-D"):
            M(name)(np.zeros((2, 2)), np.zeros((2, 2)))


# -- classification ----------------------------------------------------------------------------
def test_generic_classification_ids_keep_their_metadata_and_are_found_where_registered():
    from fusebench.metrics import classification, clustering, sleep

    for mid in ("acc", "bacc", "mf1", "kappa"):
        assert metrics.get(mid).fn is getattr(classification, mid)
    for stage in sleep.STAGES:
        assert metrics.get(f"f1_{stage}").fn.__module__ == "fusebench.metrics.sleep"
    want = {m: {"task": "classification", "direction": "higher", "unit": "fraction", "version": "1"}
            for m in ("acc", "bacc", "mf1", "f1_w", "f1_n1", "f1_n2", "f1_n3", "f1_rem")}
    want["kappa"] = {**want["acc"], "unit": "raw"}
    assert {m: metrics.metadata(m) for m in want} == want
    # looking an id up imports the module that registers it (the probe ids reuse acc from the clustering module)
    for mid in metrics.CATALOG:
        registered_by = "fusebench.metrics.clustering" if mid in clustering.PROBE_ACCURACIES else metrics.get(mid).fn.__module__
        assert metrics.METRICS.home(mid) == registered_by, mid


def _slow_classification(y_pred, y_true):
    """acc, bacc, mf1, kappa by counting, one class at a time (the classification module's formulas)."""
    n = len(y_true)
    labels = sorted(set(y_true) | set(y_pred))
    tp = {c: sum(1 for p, t in zip(y_pred, y_true) if p == t == c) for c in labels}
    true_n = {c: y_true.count(c) for c in labels}
    pred_n = {c: y_pred.count(c) for c in labels}
    acc = sum(tp.values()) / n
    recalls = [tp[c] / true_n[c] for c in labels if true_n[c]]
    f1 = [2 * tp[c] / (true_n[c] + pred_n[c]) for c in labels]
    pe = sum(true_n[c] * pred_n[c] for c in labels) / n ** 2
    return {"acc": acc, "bacc": sum(recalls) / len(recalls), "mf1": sum(f1) / len(f1), "kappa": (acc - pe) / (1 - pe)}


@pytest.mark.parametrize("seed", range(3))
def test_classification_metrics_against_a_slow_count(seed):
    rng = np.random.default_rng(seed)
    y_true = rng.integers(0, 5, 60)
    y_pred = np.where(rng.random(60) < 0.6, y_true, rng.integers(0, 6, 60))  # class 5: predicted, never true
    slow = _slow_classification(y_pred.tolist(), y_true.tolist())
    for mid, value in slow.items():
        assert M(mid)(y_pred, y_true) == pytest.approx(value, rel=1e-12), mid


# -- sleep staging -----------------------------------------------------------------------------
def test_sleep_hand_worked():
    y_true = [0, 0, 0, 1, 2, 2, 3, 4]
    y_pred = [0, 0, 1, 1, 2, 3, 3, 2]
    # M rows (true) = [2,1,0,0,0], [0,1,0,0,0], [0,0,1,1,0], [0,0,0,1,0], [0,0,1,0,0]
    assert M("acc")(y_pred, y_true) == pytest.approx(5 / 8)
    # recalls 2/3, 1, 1/2, 1, 0
    assert M("bacc")(y_pred, y_true) == pytest.approx((2 / 3 + 1 + 0.5 + 1 + 0) / 5)
    # F1 = 2TP/(support + predicted): 4/5, 2/3, 2/4, 2/3, 0
    f1 = [0.8, 2 / 3, 0.5, 2 / 3, 0.0]
    assert M("mf1")(y_pred, y_true) == pytest.approx(sum(f1) / 5)
    for name, v in zip(("f1_w", "f1_n1", "f1_n2", "f1_n3", "f1_rem"), f1):
        assert M(name)(y_pred, y_true) == pytest.approx(v)
    # p_o = 5/8; rows 3,1,2,1,1 and columns 2,2,2,2,0 -> p_e = 14/64; kappa = (20/32 - 7/32)/(25/32) = 13/25
    assert M("kappa")(y_pred, y_true) == pytest.approx(13 / 25)
    assert M("kappa")(torch.tensor(y_pred), torch.tensor(y_true)) == pytest.approx(0.52)


def test_sleep_edge_cases():
    # a stage absent from both arrays: its F1 is undefined (NaN); macro F1 runs over classes seen
    assert math.isnan(M("f1_rem")([0, 1], [0, 1]))
    assert M("mf1")([0, 1], [0, 1]) == 1.0
    # a predicted class absent from y_true lowers macro F1 (counted, F1 = 0) but not balanced accuracy
    assert M("mf1")([0, 2], [0, 1]) == pytest.approx((1 + 0 + 0) / 3)
    assert M("bacc")([0, 2], [0, 1]) == pytest.approx((1 + 0) / 2)
    assert math.isnan(M("kappa")([1, 1], [1, 1]))  # p_e = 1
    for name in SLEEP:
        with pytest.raises(ValueError, match="empty"):
            M(name)(np.array([], dtype=int), np.array([], dtype=int))
        with pytest.raises(ValueError, match="integer"):
            M(name)([0.5, 1.0], [0, 1])


def test_non0_a_prediction_of_zero_is_not_positive():
    y_pred = [0.0, 1.0, -1.0, 0.5]
    y_true = [1.0, 1.0, -1.0, 0.0]  # the last sample (y_true == 0) is dropped
    # kept: (0.0 vs +), (1.0 vs +), (-1.0 vs -): the first is wrong -> 2/3
    assert metrics.get("acc2_non0")(y_pred, y_true) == pytest.approx(2 / 3)
    # F1(y_true, y_pred) on true = [1, 1, 0], pred = [0, 1, 0]: class 1 F1 = 2*1/(2+1) = 2/3 (support 2),
    # class 0 F1 = 2*1/(1+2) = 2/3 (support 1): weighted 2/3
    assert metrics.get("f1_non0")(y_pred, y_true) == pytest.approx(2 / 3)
