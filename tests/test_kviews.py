"""The k-views study (issue #8 item 4): seeded view subsets, per-k runs, table and plot."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
import scipy.io as sio

from fusebench.training import kviews


def test_view_subsets_are_seeded_distinct_and_of_size_k() -> None:
    for k in range(2, 7):
        got = kviews.view_subsets(6, k, 3, subset_seed=0)
        assert got == kviews.view_subsets(6, k, 3, subset_seed=0)  # fixed choice
        assert len(got) == min(3, len(list(itertools.combinations(range(6), k))))
        assert all(len(s) == k and s == sorted(set(s)) and set(s) <= set(range(6)) for s in got)
        assert len({tuple(s) for s in got}) == len(got)
    assert kviews.view_subsets(6, 6, 3, 0) == [[0, 1, 2, 3, 4, 5]]


def test_study_runs_each_k_and_renders_mean_std(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    n, classes = 90, 3
    y = np.repeat(np.arange(classes), n // classes)
    cell = np.empty((1, 4), dtype=object)
    for v, d in enumerate((5, 4, 6, 3)):
        cell[0, v] = rng.normal(size=(classes, d))[y] * 2 + rng.normal(size=(n, d))
    mat = tmp_path / "four.mat"
    sio.savemat(mat, {"X": cell, "Y": (y + 1).reshape(-1, 1)})
    runs = tmp_path / "runs"

    recs = []
    for k in (2, 4):
        views = kviews.view_subsets(4, k, 1, 0)[0]
        import fusebench

        recs += fusebench.run("multiview", objective=["raw", "mv_infonce"], seeds=[0, 1], out=runs,
                              data_root=str(mat), progress=False,
                              overrides={**kviews.study_overrides(k, views, "multiview", 0), "pretrain.epochs": 1,
                                         "pretrain.batch_size": 16,
                                         "options.embedding_eval": {"l2_grid": [1.0], "n_init": 2}})
    assert len(recs) == 8 and all(r["config"]["pretrain"]["grid"] == {} for r in recs)
    md, png = kviews.render(runs, tmp_path / "board", "multiview")
    text = md.read_text()
    assert png.exists() and png.stat().st_size > 1000
    # independent mean ± std (sample std) of the records' test accuracy for raw at k = 2
    vals = [json.loads(p.read_text())["metrics"]["acc"] for p in sorted(runs.glob("multiview-k2s0/raw/seed*/run.json"))]
    mean, std = float(np.mean(vals)), float(np.std(vals, ddof=1))
    row = next(line for line in text.splitlines() if line.startswith("| `raw` |"))
    assert row.split(" | ")[1] == f"{100 * mean:.2f} ± {100 * std:.2f} (2)"
    assert "| objective | k = 2 | k = 4 |" in text


def test_render_without_runs_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no run records of mv-handwritten-k"):
        kviews.render(tmp_path, tmp_path / "b")
