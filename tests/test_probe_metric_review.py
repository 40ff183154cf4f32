"""Hostile review of the probes and metrics on adversarial inputs, each checked against a value worked out
independently (by hand, scikit-learn or scipy)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from fusebench import metrics as M
from fusebench.metrics.arrays import to_numpy
from fusebench.probes.embedding_eval import probe_and_cluster


def test_sparse_inputs_are_made_dense_exactly():
    dense = np.array([[0.0, 2.5, 0.0], [1.0, 0.0, -3.0]])
    for given in (sp.csr_matrix(dense), sp.coo_array(dense), torch.tensor(dense).to_sparse(),
                  torch.tensor(dense).to_sparse_csr()):
        got = to_numpy(given)
        assert got.dtype == np.float64 and np.array_equal(got, dense)
    # a sparse 1-D tensor of class ids scores as its dense values: 2 of 4 right, by hand
    assert M.get("acc")(torch.tensor([0, 2, 0, 1]).to_sparse(), np.array([0, 2, 1, 0])) == 0.5
    # a sparse [1, n] matrix is no 1-D array: the metric says so (it was "got shape ()")
    with pytest.raises(ValueError, match=r"1-D array, got shape \(1, 3\)"):
        M.get("mae")(sp.csr_matrix(np.array([[1.0, 0.0, 2.0]])), np.zeros(3))


def test_probe_and_cluster_takes_sparse_embeddings_as_their_dense_values():
    rng = np.random.default_rng(0)
    y = np.arange(24) % 2
    x = np.where(rng.random((24, 6)) < 0.6, 0.0, rng.normal(size=(24, 6))) + y[:, None] * np.eye(6)[0]
    kw = dict(n_init=2, fewshot_shots=(1,), fewshot_draws=2, knn_grid=(1, 3))
    dense = probe_and_cluster(x, y, x, y, x, y, 2, 0, **kw)
    # the scipy matrix raised "setting an array element with a sequence", naming nothing
    sparse = probe_and_cluster(sp.csr_matrix(x), y, sp.csr_matrix(x), y, sp.csr_matrix(x), y, 2, 0, **kw)
    keys = [k for k, v in dense.items() if isinstance(v, float)]
    assert keys and all(sparse[k] == dense[k] for k in keys)


def _head_run_with_val_acc(tmp_path, monkeypatch, values):
    """A quickstart reference-row cell (linear_probe, 3 downstream epochs) whose validation ``acc`` at epoch e is
    ``values[e]`` (NaN: undefined there); -> run_cell's record."""
    import math

    import fusebench.cells.head_protocol as head_protocol
    from fusebench import benchmarks
    from fusebench.cells.execute import run_cell
    from fusebench.spec.request import CellRequest, RunOptions

    real, epochs = head_protocol.evaluate, iter(values)

    def evaluate(model, ds, spec, dev, seed):
        out = real(model, ds, spec, dev, seed)
        if getattr(ds, "split", None) == "val" and spec.validation_metric == "acc":
            out["acc"] = next(epochs, math.nan)  # after the epochs: the zero-epoch path would read one more
        return out

    monkeypatch.setattr(head_protocol, "evaluate", evaluate)
    spec = benchmarks.load("quickstart", overrides={"dataset.synthetic_spec": {"num_samples": 128, "seed": 0},
                                                    "downstream.epochs": 3, "downstream.batch_size": 64})
    return run_cell(CellRequest(spec, "none", 0, tmp_path), RunOptions(progress=False))


def test_head_selection_skips_an_undefined_validation_value(tmp_path, monkeypatch):
    rec = _head_run_with_val_acc(tmp_path, monkeypatch, [float("nan"), 0.25, float("nan")])
    assert rec["selection"]["best_epoch"] == 1 and rec["selection"]["val_metrics"]["acc"] == 0.25


def test_head_selection_with_no_finite_validation_value_is_an_error(tmp_path, monkeypatch):
    from fusebench.engine.loop import RunError

    # it scored the last epoch's model and recorded best_epoch -1, the mark of zero downstream epochs, under the rule
    # "best validation acc over downstream epochs ... test scored once with the selected weights"
    with pytest.raises(RunError, match=r"validation acc was not a finite number at any of the 3 downstream epoch"):
        _head_run_with_val_acc(tmp_path, monkeypatch, [float("nan")] * 3)
    assert not (tmp_path / "quickstart" / "none" / "seed0" / "run.json").exists()


def test_probe_grids_refuse_booleans_and_repeated_weights() -> None:
    """True == 1 passed as a kNN k / a shot count / an L2 weight of 1.0; a weight given twice (1e-3 and 0.001) made
    a grid of one value that the record showed as searched."""
    rng = np.random.default_rng(0)
    z, y = rng.normal(size=(12, 3)), np.arange(12) % 2
    for key, value in (("knn_grid", [True, 3]), ("l2_grid", [True]), ("l2_grid", [1e-3, 0.001]),
                       ("fewshot_shots", [np.True_])):
        with pytest.raises(ValueError, match=rf"probe_and_cluster: {key}"):
            probe_and_cluster(z, y, z, y, z, y, num_classes=2, seed=0, **{key: value})
