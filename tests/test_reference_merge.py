"""Reference rows that are the same features (issue #30, item 5): the identity rule of
fusebench/components/reference_features.py checked on real data (the NGs bag-of-words views), and the board
merging them into one row, ``raw (≡ raw_balanced)``, with both clustering numbers kept."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import numpy as np
import pytest
import scipy.io

from fusebench.leaderboard import write_leaderboards
from fusebench.probes.logistic import standardize
from fusebench.components.reference_features import (CLUSTER_METRICS, REFERENCE_KINDS, cluster_identical,
                                                   probe_identical_groups, reference_features)


def _split_views(fixtures_dir: Path) -> dict[str, list[np.ndarray]]:
    m = scipy.io.loadmat(str(fixtures_dir / "multiview" / "NGs.mat"))
    views = [np.asarray(v, dtype=np.float64) for v in m["X"][0]]
    order = np.random.default_rng(0).permutation(views[0].shape[0])
    parts = {"train": order[:300], "val": order[300:400], "test": order[400:]}
    return {s: [v[idx] for v in views] for s, idx in parts.items()}


def _probe_inputs(kind: str, views: dict) -> np.ndarray:
    """What every probe sees: the features z-scored per column with train statistics, all splits stacked."""
    feats, _, _ = reference_features(kind, views, width=20)
    return np.vstack(standardize(feats["train"], feats["train"], feats["val"], feats["test"]))


def _kmeans_inputs(kind: str, views: dict) -> np.ndarray:
    """What k-means sees (cluster_on = all): z-scored over the clustered samples, or as given."""
    feats, _, how = reference_features(kind, views, width=20)
    x = np.vstack([feats["train"], feats["val"], feats["test"]])
    return standardize(x, x)[0] if how == "zscore" else x


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=0, atol=1e-9))


def test_merged_reference_rows_are_the_same_features_and_the_others_differ(fixtures_dir: Path) -> None:
    views = _split_views(fixtures_dir)
    probe = {k: _probe_inputs(k, views) for k in REFERENCE_KINDS}
    groups = probe_identical_groups(list(REFERENCE_KINDS))
    assert groups == [["raw", "raw_balanced"]]
    together = {frozenset(p) for g in groups for p in itertools.combinations(g, 2)}
    for a, b in itertools.combinations(REFERENCE_KINDS, 2):
        if frozenset((a, b)) in together:
            assert _same(probe[a], probe[b]), (a, b)  # the per-column affine map is cancelled by the z-score
        else:  # every pair the board keeps apart: different features for the probes
            assert not _same(probe[a], probe[b]), (a, b)
            if probe[a].shape == probe[b].shape:
                assert np.abs(probe[a] - probe[b]).max() > 0.1, (a, b)
    # k-means clusters raw z-scored and raw_balanced as given: different inputs, so both numbers are kept
    assert not cluster_identical("raw", "raw_balanced")
    assert not _same(_kmeans_inputs("raw", views), _kmeans_inputs("raw_balanced", views))


def test_identity_groups_keep_the_base_first_and_skip_other_ids() -> None:
    assert probe_identical_groups(["raw_balanced", "m3g", "none", "raw"]) == [["raw", "raw_balanced"]]
    assert probe_identical_groups(["raw_balanced", "raw_l2"]) == []
    assert cluster_identical("raw_l2", "raw_l2") and not cluster_identical("raw", "raw_l2")


# ------------------------------------------------------------------------------------------------
# the board
# ------------------------------------------------------------------------------------------------
def _record(obj: str, seed: int, metrics: dict) -> dict:
    return {
        "schema_version": 1, "suite_version": "0.1.0", "benchmark": "toy", "objective": obj, "seed": seed,
        "metrics": metrics,
        "config": {"metrics": ["acc", "cluster_acc", "nmi"], "selection_metric": "acc", "seeds": [0, 1, 2],
                   "objectives": ["m3g", "raw", "raw_balanced", "raw_l2"],
                   "dataset": {"id": "toy", "synthetic_only": False}},
        "dataset": {"id": "toy", "synthetic": False, "manifest_hash": "ab12cd34"},
        "selection": {"rule": "best validation acc"}, "pretrain_time_s": 1.0, "peak_memory_mb": 10.0,
        "comparison": {"reference": "raw_balanced", "primary": "acc", "why": "toy"}}


ACC = {"m3g": [0.70, 0.74, 0.72], "raw": [0.60, 0.62, 0.61], "raw_balanced": [0.60, 0.62, 0.61],
       "raw_l2": [0.55, 0.50, 0.52]}
CLUSTER = {"m3g": [0.5, 0.5, 0.5], "raw": [0.30, 0.32, 0.34], "raw_balanced": [0.40, 0.41, 0.45],
           "raw_l2": [0.6, 0.6, 0.6]}


def test_board_merges_identical_reference_rows_and_keeps_both_clusterings(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    for obj in ACC:
        for s in range(3):
            d = runs / "toy" / obj / f"seed{s}"
            d.mkdir(parents=True)
            rec = _record(obj, s, {"acc": ACC[obj][s], "cluster_acc": CLUSTER[obj][s], "nmi": 0.1})
            (d / "run.json").write_text(json.dumps(rec))
    out = tmp_path / "lb"
    write_leaderboards(runs, out, plots=False, formats=("md", "json"))
    md = (out / "toy.md").read_text()
    rows = {c[0]: c[1:] for c in ([x.strip() for x in re.split(r"(?<!\\)\|", ln)[1:-1]]
                                  for ln in md.splitlines() if ln.startswith("| `"))}
    assert set(rows) == {"`m3g`", "`raw` (≡ `raw_balanced`)", "`raw_l2`"}
    merged = rows["`raw` (≡ `raw_balanced`)"]
    assert merged[0] == "61.00 ± 1.00 (3)"  # acc: raw's runs (the same as raw_balanced's)
    # cluster_acc: raw 0.32 ± 0.02, raw_balanced mean 0.42, std sqrt((0.02^2 + 0.01^2 + 0.03^2) / 2) = 0.0265
    assert merged[1] == "32.00 ± 2.00 (3); `raw_balanced`: 42.00 ± 2.65 (3)"
    assert merged[2] == "10.00 ± 0.00 (3); `raw_balanced`: 10.00 ± 0.00 (3)"  # nmi is a k-means metric too
    # the named reference raw_balanced is shown as its row; the tests' family: m3g and raw_l2 only
    assert ("Reference row of the tests: `raw_balanced` (shown as `raw`), set by the run records' `comparison` (no "
            "spec of this benchmark is installed).") in md
    assert "Holm-adjusted over the 2 row(s) tested" in md
    assert ("- `raw_balanced` gives the same features as `raw` for every probe: identical probe numbers on every "
            "shared seed. k-means clusters them differently") in md
    data = json.loads((out / "toy.json").read_text())
    row = next(r for r in data["groups"][0]["rows"] if r["objective"] == "raw")
    assert row["aliases"] == ["raw_balanced"]
    assert set(row["alias_metrics"]["raw_balanced"]) == {"cluster_acc", "nmi"} <= set(CLUSTER_METRICS)
    assert row["alias_metrics"]["raw_balanced"]["cluster_acc"]["mean"] == pytest.approx(0.42)
    meta = json.loads(md.rstrip().splitlines()[-1][len("<!-- fusebench-board "):-len(" -->")])
    assert meta["groups"][0]["merged_references"] == {"raw": ["raw_balanced"]}
    assert "raw_balanced" not in meta["groups"][0]["means"]  # the index counts the row once
