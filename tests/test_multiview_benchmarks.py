"""Issue #8: the multi-view benchmarks on real .mat files — the embedding_eval protocol (frozen
features -> linear probe + k-means), the 'raw' reference row, views resolved from the file."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import scipy.io as sio
import torch

import fusebench
from fusebench import benchmarks
from fusebench.components import compat
from fusebench.sweep import runner
from fusebench.engine.data import build_datasets
from fusebench.engine.evaluate import features
from fusebench.metrics import values_of

FAST = {"pretrain.epochs": 1, "pretrain.batch_size": 32, "options.embedding_eval": {"l2_grid": [0.01, 1.0], "n_init": 2}}
#: the generic benchmark selects tau / eps on validation first (as the mv-* boards); these tests check the reading
NO_SELECTION = {"pretrain.grid": {}, "pretrain.selection_seeds": []}


def _write_mat(path: Path, dims: tuple[int, ...], n: int = 120, classes: int = 3, seed: int = 0) -> tuple[list, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = np.repeat(np.arange(classes), n // classes)
    views = [rng.normal(size=(classes, d))[y] * 2 + rng.normal(size=(n, d)) for d in dims]
    cell = np.empty((1, len(dims)), dtype=object)
    for i, v in enumerate(views):
        cell[0, i] = v
    sio.savemat(path, {"X": cell, "Y": (y + 1).reshape(-1, 1).astype(np.uint8)})
    return views, y


def test_generic_benchmark_reads_views_from_an_unseen_file(tmp_path: Path) -> None:
    two = tmp_path / "two.mat"
    four = tmp_path / "four.mat"
    _write_mat(two, (7, 5))
    _write_mat(four, (6, 3, 4, 9))
    spec2, spec4 = benchmarks.load("multiview"), benchmarks.load("multiview")
    runner.resolve_views(spec2, False, str(two))
    runner.resolve_views(spec4, False, str(four))
    assert spec2.dataset.modalities == ["view0", "view1"]
    assert spec4.dataset.modalities == ["view0", "view1", "view2", "view3"]
    # the 2-view-only objectives apply to the 2-view file, not to the 4-view one
    assert "matching_gap" in compat.compatible_objectives(spec2)
    assert "matching_gap" not in compat.compatible_objectives(spec4)
    with pytest.raises(ValueError, match="matching_gap"):
        fusebench.run("multiview", objective="matching_gap", data_root=str(four), out=tmp_path / "R", overrides=FAST,
                      progress=False)
    recs = fusebench.run("multiview", objective=["none", "m3g"], seeds=[0], data_root=str(four), out=tmp_path / "R",
                         overrides={"options.embedding_eval": FAST["options.embedding_eval"], **NO_SELECTION,
                                    # m3g's own budget:
                                    "pretrain.objective_batch_size": {"m3g": 8}, "pretrain.objective_epochs": {"m3g": 1}},
                         progress=False)
    for rec in recs:
        assert set(rec["metrics"]) == {"fs1_best_acc", "fs1_acc", "fs1_proto_acc", "knn_acc", "acc", "mf1",
                                       "cluster_acc", "nmi", "ari"}
        assert all(0.0 <= v <= 1.0 for v in values_of(rec["metrics"]).values())
        assert rec["config"]["dataset"]["modalities"] == ["view0", "view1", "view2", "view3"]
        assert rec["dataset"]["synthetic"] is False
        assert rec["dataset"]["fingerprint"]["files"] == [["four.mat", four.stat().st_size]]
        assert rec["dataset"]["splits"]["counts"] == {"train": 72, "val": 24, "test": 24}
        assert rec["selection"]["probe"]["l2"] in (0.01, 1.0)
        assert rec["clustering"]["num_samples"] == 120
    m3g = json.loads((tmp_path / "R" / "multiview" / "m3g" / "seed0" / "run.json").read_text())
    steps_per_epoch = 72 // 8  # objective_batch_size 8 over 72 train samples, 1 epoch
    assert len(m3g["curves"]["pretrain_loss"]) == steps_per_epoch
    assert m3g["config"]["pretrain"]["objective_batch_size"] == {"m3g": 8}


def test_raw_reference_features_are_the_train_standardised_views(tmp_path: Path) -> None:
    path = tmp_path / "d.mat"
    views, y = _write_mat(path, (4, 3), n=90)
    spec = benchmarks.load("multiview", overrides=FAST)
    runner.resolve_views(spec, False, str(path))
    data = build_datasets(spec, False, str(path), 0)
    rows = {role: np.asarray(ds._rows) for role, ds in data.items()}  # which file rows each split holds
    assert sorted(np.concatenate(list(rows.values())).tolist()) == list(range(90))
    # independent: z-score each raw view with the mean / population std of the train rows, concatenate
    raw = np.concatenate(views, axis=1)
    mu, sd = raw[rows["train"]].mean(0), raw[rows["train"]].std(0)
    for role in ("train", "test"):
        x, t = features(None, data[role], spec, torch.device("cpu"), 0)
        np.testing.assert_allclose(x.numpy(), (raw[rows[role]] - mu) / sd, rtol=1e-4, atol=1e-5)
        assert t.tolist() == y[rows[role]].tolist()


def test_generic_benchmark_caps_its_batch_at_a_tiny_file(tmp_path: Path, fixtures_dir: Path, capsys) -> None:
    """Issue #23: `multiview` on a public file of a few dozen samples runs (its batch of 32 capped at the
    train split, recorded and said once); on one of a few thousand nothing changes. The tiny file is 45
    real samples (15 per class of 3) of the handwritten digits file, written in the same convention."""
    real = sio.loadmat(str(fixtures_dir / "multiview" / "handwritten.mat"))
    y = np.asarray(real["Y"]).reshape(-1)
    keep = np.concatenate([np.flatnonzero(y == c)[:15] for c in np.unique(y)[:3]])
    cell = np.empty((1, real["X"].shape[1]), dtype=object)
    for v in range(real["X"].shape[1]):
        cell[0, v] = np.asarray(real["X"][0, v])[keep]
    tiny = tmp_path / "tiny.mat"
    sio.savemat(tiny, {"X": cell, "Y": y[keep].reshape(-1, 1)})
    fast = {"pretrain.epochs": 1, "options.embedding_eval": {"l2_grid": [1.0], "n_init": 2}, **NO_SELECTION}
    recs = fusebench.run("multiview", objective=["none", "infonce_pwe"], seeds=[0], data_root=str(tiny),
                         out=tmp_path / "R", overrides=fast, progress=False)
    n_train = len(build_datasets(benchmarks.load("multiview"), False, str(tiny), 0, roles=("train",))["train"])
    assert n_train < 32  # the spec's batch does not fit: 75% of the 80% of 45 outside the test split
    err = capsys.readouterr().err
    line = f"multiview: pretrain.batch_size 32 capped at {n_train}, the size of the train split of {tiny}"
    assert err.count(line) == 1, err
    assert all("status" not in r for r in recs)
    pre = next(r for r in recs if r["objective"] == "infonce_pwe")
    assert pre["config"]["pretrain"]["batch_size"] == n_train and pre["budget"]["batch_size"] == n_train
    assert pre["config"]["pretrain"]["objective_batch_size"] == {}  # the same batch for every pretrained row
    # a file of a few thousand samples: the batch fits, nothing is capped or said
    big = fixtures_dir / "multiview" / "handwritten.mat"
    recs = fusebench.run("multiview", objective=["none"], seeds=[0], data_root=str(big), out=tmp_path / "B",
                         overrides={"options.embedding_eval": fast["options.embedding_eval"]}, progress=False)
    assert "capped" not in capsys.readouterr().err
    assert recs[0]["config"]["pretrain"]["batch_size"] == 32
