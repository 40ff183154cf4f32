"""The few-shot prototype probe and the row's choice between the two few-shot probes (issue #30 item 3,
fusebench/probes/fewshot.py): the prototype probe against a slow loop written here, a hand-worked
case where it and the logistic probe disagree (a query with the right direction but a small norm), the
per-run choice on validation, the L2 search that leaves the grid's edge and the record of an edge, the
metric ids and what a tiny run records."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

import fusebench
from fusebench import metrics
from fusebench.probes import embedding_eval as E
from fusebench.probes import fewshot as FS
from fusebench.probes import logistic as LR
from fusebench.metrics import values_of


def _slow_prototype(support: list[list[float]], labels: list[int], query: list[list[float]], num_classes: int
                    ) -> list[int]:
    """The documented rule with loops: normalise every row, average a class's normalised support rows,
    predict the prototype of largest cosine similarity, ties to the lower class id."""
    def unit(v):
        n = math.sqrt(sum(a * a for a in v))
        return [a / n for a in v] if n > 0 else [0.0] * len(v)

    d = len(query[0])
    protos = []
    for c in range(num_classes):
        rows = [unit(support[i]) for i in range(len(labels)) if labels[i] == c]
        protos.append([sum(r[j] for r in rows) / len(rows) if rows else 0.0 for j in range(d)])
    out = []
    for q in query:
        u = unit(q)
        sims = []
        for p in protos:
            n = math.sqrt(sum(a * a for a in p))
            sims.append(sum(a * b for a, b in zip(u, p)) / n if n > 0 else 0.0)
        best = 0
        for c in range(1, num_classes):
            if sims[c] > sims[best]:
                best = c
        out.append(best)
    return out


def _classes(seed: int, n_per: int, num_classes: int = 4, d: int = 6) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = np.repeat(np.arange(num_classes), n_per)
    centres = np.random.default_rng(99).normal(size=(num_classes, d)) * 1.5
    scale = rng.uniform(0.2, 3.0, size=(y.size, 1))  # rows of very different norms
    return (centres[y] + rng.normal(size=(y.size, d))) * scale, y


def test_prototype_predict_matches_a_slow_loop() -> None:
    rng = np.random.default_rng(0)
    support = rng.normal(size=(3, 8, 5))                       # 3 support sets of 8 rows
    labels = np.array([[0, 0, 1, 1, 2, 2, 3, 3], [0, 1, 2, 3, 0, 1, 2, 3], [3, 3, 3, 1, 1, 0, 0, 0]])
    support[1, 2] = 0.0                                        # a zero support row stays zero
    query = rng.normal(size=(11, 5))
    query[4] = 0.0                                             # a zero query: every similarity 0 -> class 0
    got = FS.prototype_predict(support, labels, query, 5)       # class 4 absent: a zero prototype
    for b in range(3):
        assert got[b].tolist() == _slow_prototype(support[b].tolist(), labels[b].tolist(), query.tolist(), 5)
    assert got[0, 4] == 0


def test_prototype_probe_in_probe_and_cluster_against_the_slow_loop_on_the_same_draws() -> None:
    (xtr, ytr), (xva, yva), (xte, yte) = _classes(1, 12), _classes(2, 8), _classes(3, 8)
    r = E.probe_and_cluster(xtr, ytr, xva, yva, xte, yte, 4, seed=4, fewshot_shots=(1, 3), fewshot_draws=3,
                            knn_grid=(), n_init=1, l2_grid=(0.1, 1.0))
    mean, std = xtr.mean(0), xtr.std(0)
    z = {s: (a - mean) / std for s, a in (("tr", xtr), ("va", xva), ("te", xte))}
    for s in (1, 3):
        rng = np.random.default_rng(np.random.SeedSequence([4, s]))  # the logistic probe's draws
        val, test = [], []
        for _ in range(3):
            idx = [i for c in range(4) for i in rng.choice(np.flatnonzero(ytr == c), s, replace=False)]
            sup, lab = z["tr"][idx].tolist(), ytr[idx].tolist()
            val.append(np.mean(np.array(_slow_prototype(sup, lab, z["va"].tolist(), 4)) == yva))
            test.append(np.mean(np.array(_slow_prototype(sup, lab, z["te"].tolist(), 4)) == yte))
        proto = r["fewshot"]["per_shot"][str(s)]["prototype"]
        assert proto["val_acc_per_draw"] == pytest.approx(val, abs=1e-12)
        assert proto["test_acc_per_draw"] == pytest.approx(test, abs=1e-12)
        assert r[f"test_fs{s}_proto_acc"] == pytest.approx(np.mean(test), abs=1e-12)
        assert r[f"val_fs{s}_proto_acc"] == pytest.approx(np.mean(val), abs=1e-12)
        # the row's probe: the higher mean val accuracy, ties to the logistic probe
        logistic_val = r[f"val_fs{s}_acc"]
        want = "prototype" if np.mean(val) > logistic_val else "logistic"
        assert r["fewshot_probe"]["per_shot"][str(s)] == {
            "chosen": want, "metric": f"fs{s}_best_acc",
            "val": {"logistic": logistic_val, "prototype": proto["val_acc"]}}
        pick = "proto_" if want == "prototype" else ""
        assert r[f"test_fs{s}_best_acc"] == r[f"test_fs{s}_{pick}acc"]
        assert r[f"val_fs{s}_best_acc"] == r[f"val_fs{s}_{pick}acc"] == FS.chosen_fewshot_val(r, s)


# ---------------------------------------------------------------------------------------------
# a hand-worked case: the probes disagree on a query of the right direction and a small norm
# ---------------------------------------------------------------------------------------------
# One labelled sample per class, already centred: s0 = (4, 0) (class 0), s1 = (0, 1) (class 1). With two
# samples the L2-penalised logistic regression (any l2 > 0) puts its boundary on the perpendicular bisector
# of s0 and s1 (its weight difference is parallel to s0 - s1, the two margins are equal): class 0 iff
# 8 x1 - 2 x2 > 15, i.e. the nearer support point. The prototype probe compares directions: class 0 iff
# x1 / ||x|| > x2 / ||x||, i.e. x1 > x2.
SUPPORT = np.array([[4.0, 0.0], [0.0, 1.0]])
#            (1, .5): a short class-0 row   (0, 3)       (8, 1)       (.5, .2): short class 0
QUERIES = np.array([[1.0, 0.5], [0.0, 3.0], [8.0, 1.0], [0.5, 0.2]])
LOGISTIC = [1, 1, 0, 1]   # 8 - 1 = 7 < 15; -6 < 15; 62 > 15; 3.6 < 15
PROTOTYPE = [0, 1, 0, 0]  # 1 > .5; 0 < 3; 8 > 1; .5 > .2


@pytest.mark.parametrize("l2", [1e-3, 1e-1, 1.0, 10.0])
def test_hand_worked_logistic_and_prototype_disagree(l2) -> None:
    w, b = LR.fit_logistic(SUPPORT[None], np.array([[0, 1]]), 2, l2)
    assert (QUERIES @ w[0] + b[0]).argmax(axis=1).tolist() == LOGISTIC
    assert FS.prototype_predict(SUPPORT[None], np.array([[0, 1]]), QUERIES, 2)[0].tolist() == PROTOTYPE


def _fewshot(val_rows: list[int]):
    """fewshot_probe on the hand-worked case (every train row of a class equal to its support point, so
    every draw is the same), val = the chosen queries with labels 0, 1, 0, 0, test = all four."""
    ztr = np.repeat(SUPPORT, 3, axis=0)                          # 3 rows of each class
    ytr = np.array([0, 0, 0, 1, 1, 1])
    yq = np.array([0, 1, 0, 0])
    return FS.fewshot_probe(ztr, ytr, QUERIES[val_rows], yq[val_rows], QUERIES, yq, 2, seed=0, shots=(1,), draws=2,
                            l2_grid=(1e-4, 1e-3, 1e-2, 1e-1, 1.0))["per_shot"]["1"]


def test_the_row_takes_the_probe_with_the_higher_validation_score() -> None:
    per = _fewshot([0, 1, 2, 3])
    # val: logistic right on queries 1 and 2 (2/4 at every l2), prototype right on all four
    assert per["val_acc"] == 0.5 and per["prototype"]["val_acc"] == 1.0
    assert per["chosen"] == "prototype" and per["best_val_acc"] == 1.0 and per["best_test_acc"] == 1.0
    assert per["test_acc"] == 0.5                                 # the logistic number stays in the record
    # the logistic val score is 0.5 at every l2: the grid's largest value, 1.0, is taken (ties to the larger);
    # the search tries 10, equal, not better: it stops, and 1.0 is no longer at the edge
    assert per["l2"] == 1.0 and per["l2_searched"] == [1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0]
    assert per["l2_extended"] == [10.0] and per["l2_edge"] is None


def test_a_tie_on_validation_keeps_the_logistic_probe() -> None:
    per = _fewshot([1, 2])                                        # both probes right on both val queries
    assert per["val_acc"] == per["prototype"]["val_acc"] == 1.0
    assert per["chosen"] == "logistic" and per["best_test_acc"] == per["test_acc"] == 0.5


# ---------------------------------------------------------------------------------------------
# the L2 search and the record of an edge
# ---------------------------------------------------------------------------------------------
def _peaked(at: float):
    calls: list[float] = []

    def score(l2: float) -> float:
        calls.append(l2)
        return -abs(math.log10(l2) - math.log10(at))
    return score, calls


def test_search_extends_below_the_grid_until_the_optimum_is_inside() -> None:
    score, calls = _peaked(1e-6)
    out = LR.search_l2([1e-4, 1e-3, 1e-2, 1e-1, 1.0], score)
    # 1e-4 is the grid's best and its edge: 1e-5 better, 1e-6 better, 1e-7 worse -> stop at 1e-6, inside
    assert out["l2"] == 1e-6 and out["extended"] == [1e-5, 1e-6, 1e-7] and out["edge"] is None
    assert out["searched"] == [1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0]
    assert sorted(calls) == out["searched"] and len(calls) == len(set(calls))  # each value scored once


def test_search_records_the_edge_when_a_bound_stops_it() -> None:
    out = LR.search_l2([1e-4, 1e-2], lambda l2: -l2)               # smaller is always better
    assert out["l2"] == LR.L2_FLOOR == 1e-8 and out["edge"] == "lower"
    assert out["extended"] == [1e-5, 1e-6, 1e-7, 1e-8]
    out = LR.search_l2([0.1, 1.0], lambda l2: l2)                  # larger is always better
    assert out["l2"] == LR.L2_CEILING == 1e4 and out["edge"] == "upper" and out["extended"] == [10.0, 100.0, 1e3, 1e4]
    out = LR.search_l2([0.0, 1.0], lambda l2: -l2)                 # 0: nothing below it
    assert out == {"l2": 0.0, "scores": {0.0: 0.0, 1.0: -1.0}, "searched": [0.0, 1.0], "extended": [], "edge": "lower"}
    out = LR.search_l2([0.5], lambda l2: 1.0)                      # one value: a fixed weight, not searched
    assert out == {"l2": 0.5, "scores": {0.5: 1.0}, "searched": [0.5], "extended": [], "edge": None}
    score, _ = _peaked(1e-2)
    out = LR.search_l2([1e-4, 1e-3, 1e-2, 1e-1, 1.0], score)      # inside the grid: nothing added
    assert out["l2"] == 1e-2 and out["extended"] == [] and out["edge"] is None


def test_the_full_probe_records_its_search() -> None:
    (xtr, ytr), (xva, yva), (xte, yte) = _classes(5, 10), _classes(6, 6), _classes(7, 6)
    r = E.probe_and_cluster(xtr, ytr, xva, yva, xte, yte, 4, seed=0, fewshot_shots=(), knn_grid=(), n_init=1,
                            l2_grid=(1e-2, 1.0))
    p = r["probe"]
    assert p["l2"] in p["l2_searched"] and set(p["l2_grid"]) <= set(p["l2_searched"])
    assert p["l2_searched"] == sorted([*p["l2_grid"], *p["l2_extended"]])
    assert list(p["val_acc_by_l2"]) == [repr(v) for v in p["l2_searched"]]
    edge = "lower" if p["l2"] == p["l2_searched"][0] else "upper" if p["l2"] == p["l2_searched"][-1] else None
    assert p["l2_edge"] == edge


# ---------------------------------------------------------------------------------------------
# metric ids, records
# ---------------------------------------------------------------------------------------------
def test_new_metric_ids_are_registered_accuracies() -> None:
    for s in (1, 5, 10):
        for mid in (f"fs{s}_proto_acc", f"fs{s}_best_acc"):
            # fs<s>_best_acc version 2: the logistic probe it may take is fitted to its optimum (version 1: not)
            assert metrics.metadata(mid) == {"task": "classification", "direction": "higher", "unit": "fraction",
                                             "version": "2" if mid.endswith("_best_acc") else "1"}
            assert metrics.get(mid)([0, 1, 1], [0, 1, 0]) == pytest.approx(2 / 3)


def test_a_tiny_run_records_both_probes_and_the_choice(tmp_path) -> None:
    rec = fusebench.run("mv-ngs", objective="raw", seeds=[0], out=tmp_path, synthetic=True, progress=False)[0]
    for mid in ("fs1_acc", "fs1_proto_acc", "fs1_best_acc"):
        assert mid in rec["metrics"] and mid in rec["selection"]["val_metrics"]
    choice = rec["fewshot_probe"]["per_shot"]["1"]
    val = rec["selection"]["val_metrics"]
    assert choice["val"] == {"logistic": val["fs1_acc"], "prototype": val["fs1_proto_acc"]}
    assert choice["chosen"] == ("prototype" if val["fs1_proto_acc"] > val["fs1_acc"] else "logistic")
    key = "fs1_proto_acc" if choice["chosen"] == "prototype" else "fs1_acc"
    assert values_of(rec["metrics"])["fs1_best_acc"] == values_of(rec["metrics"])[key] and val["fs1_best_acc"] == val[key]
    assert FS.chosen_fewshot_val(rec) == val["fs1_best_acc"]
    on_disk = json.loads(next(Path(tmp_path).rglob("run.json")).read_text())
    fusebench.records.validate_record(on_disk)


def test_the_primary_val_of_a_record_written_before_the_prototype_probe() -> None:
    """A record written before the prototype probe has the logistic probe alone: its few-shot validation score is
    that probe's. Made from a committed record by removing what the prototype probe added (the committed mv-ngs
    records are of the current protocol)."""
    path = next(iter(sorted(Path(__file__).resolve().parents[1].glob("leaderboards/runs/mv-ngs/raw/seed0/run.json"))),
                None)
    if path is None:
        pytest.skip("no committed mv-ngs record")
    rec = json.loads(path.read_text())
    val = rec["selection"]["val_metrics"]
    for key in [k for k in val if k.endswith(("_best_acc", "_proto_acc"))]:
        del val[key]
    rec["selection"].pop("fewshot_probe", None)
    for per in rec["selection"]["fewshot"]["per_shot"].values():
        for key in ("prototype", "chosen", "best_val_acc", "best_test_acc"):
            per.pop(key, None)
    assert "fs1_best_acc" not in rec["selection"]["val_metrics"]
    assert FS.chosen_fewshot_val(rec) == rec["selection"]["val_metrics"]["fs1_acc"]
    assert FS.chosen_fewshot_val(rec, 5) == rec["selection"]["fewshot"]["per_shot"]["5"]["val_acc"]
    with pytest.raises(ValueError, match="no few-shot probe with 2 label"):
        FS.chosen_fewshot_val(rec, 2)
