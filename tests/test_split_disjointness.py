"""No selection trial of any real multi-view board trains or validates on a test sample (issue #30), pinned for
every ``mv-*`` spec, checked against the raw ``.mat`` files read here with scipy (not through the adapter).

For each board, evaluation seeds and every selection seed build its splits through the real code path
(:func:`fusebench.engine.data.build_datasets` -> the adapter; a trial builds train and val only, as
:class:`fusebench.cells.standard.StandardCell` does with ``selection_trial``), and the file rows of each split
are read back sample by sample (``meta.index`` of the batches). Worked out from the raw file alone:

* the file's row count N and its labels (``Y`` / ``y`` / ``gt`` / the ``truelabel`` cell, or ``gt_train`` then
  ``gt_test`` for a file with a shipped split); every sample's label is the raw label of its row;
* the three splits of a seed are disjoint and cover the N rows;
* one test split for every seed: for a drawn outer test split, per class ``floor(0.2 n_c)`` or one more
  (stratified at 0.6 / 0.2 / 0.2); for a shipped split, exactly the rows of the ``*_test`` block (after the
  ``*_train`` rows);
* no selection seed's train or val row is a test row of any evaluation seed.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import scipy.io as sio

from fusebench import benchmarks
from fusebench.components.spec_check import load_spec
from fusebench.engine.data import build_datasets

#: board -> (fixture folder, file)
FILES = {
    "mv-ngs": ("multiview", "NGs.mat"), "mv-handwritten": ("multiview", "handwritten.mat"),
    "mv-hw2sources": ("multiview", "HW2sources.mat"), "mv-hw2sources-4x": ("multiview", "HW2sources.mat"),
    "mv-leaves100": ("multiview", "100Leaves.mat"), "mv-3sources": ("multiview2", "3Sources.mat"),
    "mv-bbc": ("multiview2", "BBC.mat"), "mv-cub": ("multiview2", "CUB.mat"), "mv-cub-4x": ("multiview2", "CUB.mat"),
    "mv-cora": ("multiview2", "Cora.mat"), "mv-movies": ("multiview2", "Movies.mat"),
    "mv-prokaryotic": ("multiview2", "Prokaryotic.mat"), "mv-proteinfold": ("multiview2", "ProteinFold.mat"),
    "mv-reuters1200": ("multiview2", "Reuters-1200.mat"), "mv-scene15": ("multiview2", "Scene15.mat"),
    "mv-webkb": ("multiview2", "WebKB.mat"), "mv-wikipedia": ("multiview2", "Wikipedia.mat"),
}


def test_every_real_multiview_board_is_covered() -> None:
    boards = {n for n in benchmarks.builtin() if n.startswith("mv-")}
    assert boards == set(FILES)


def _raw_labels(path: Path) -> tuple[np.ndarray, int | None]:
    """The file's labels in row order and, for a file with a shipped split, the number of ``*_train`` rows
    (its test rows follow them); read with scipy, nothing of the adapter."""
    m = sio.loadmat(str(path))
    if "gt_train" in m:
        train, test = np.ravel(m["gt_train"]), np.ravel(m["gt_test"])
        return np.concatenate([train, test]).astype(np.int64), train.size
    for key in ("Y", "y", "gt"):
        if key in m:
            return np.ravel(m[key]).astype(np.int64), None
    cell = m["truelabel"]  # a cell of identical label vectors (BBC)
    first = np.ravel(cell.flat[0])
    assert all(np.array_equal(np.ravel(c), first) for c in cell.flat)
    return first.astype(np.int64), None


def _rows_and_labels(ds) -> tuple[list[int], list[int]]:
    """The file row (``meta.index``) and the class id of every sample, as the training batches carry them (the
    whole split as one batch of its first view: what the loader slices)."""
    batch = ds.fetch_batch(list(range(len(ds))), [list(ds.modalities)[0]])
    assert batch is not None
    return [int(m["index"]) for m in batch["meta"]], [int(t) for t in batch["target"]]


@pytest.mark.parametrize("name", sorted(FILES))
def test_no_selection_trial_sees_a_test_row_of_the_raw_file(name: str, fixtures_dir: Path) -> None:
    folder, file = FILES[name]
    path = fixtures_dir / folder / file
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    y, n_shipped_train = _raw_labels(path)
    n = y.size
    ids = {v: i for i, v in enumerate(np.unique(y))}  # the adapter's class ids: the label values in ascending order
    spec = load_spec(benchmarks.path(name))
    assert spec.dataset.split_per_seed  # every seed its own train / val: the case where a leak could happen
    selection_seeds = spec.selection_seeds
    assert not set(selection_seeds) & set(spec.seeds)
    splits: dict[int, dict[str, set[int]]] = {}
    # the first three evaluation seeds and the last (every one of them on two boards: tests/test_outer_split.py; a
    # seed of Cora's costs 2 s), every selection seed
    evaluation = [*spec.seeds[:3], *spec.seeds[3:][-1:]]
    for seed in [*evaluation, *selection_seeds]:
        roles = ("train", "val") if seed in selection_seeds else ("train", "val", "test")  # a trial reads no test
        built = build_datasets(spec, False, str(path), seed, roles=roles)
        splits[seed] = {}
        for role, ds in built.items():
            rows, labels = _rows_and_labels(ds)
            assert len(set(rows)) == len(rows) and all(0 <= r < n for r in rows)
            assert labels == [ids[int(y[r])] for r in rows], f"{name} seed {seed} {role}: labels are not the file's"
            splits[seed][role] = set(rows)
    tests = {frozenset(parts["test"]) for s, parts in splits.items() if s not in selection_seeds}
    assert len(tests) == 1, f"{name}: the evaluation seeds have {len(tests)} different test splits"
    test = set(next(iter(tests)))
    if n_shipped_train is not None:  # the file's own *_test block
        assert test == set(range(n_shipped_train, n))
    else:  # stratified 20% per class
        for c in np.unique(y):
            n_c = int((y == c).sum())
            got = sum(1 for r in test if y[r] == c)
            assert got in (math.floor(0.2 * n_c + 1e-9), math.floor(0.2 * n_c + 1e-9) + 1), (name, c, n_c, got)
    for seed, parts in splits.items():
        assert not parts["train"] & parts["val"]
        assert parts["train"] | parts["val"] == set(range(n)) - test, f"{name} seed {seed}: train / val is not the rest"
        if seed in selection_seeds:
            assert not (parts["train"] | parts["val"]) & test
    # the seeds do vary the train / val partition (the split is drawn per seed)
    assert len({frozenset(p["val"]) for p in splits.values()}) == len(splits)


def test_the_held_out_splits_under_each_other_s_role_are_refused(fixtures_dir: Path) -> None:
    """``val_split: test, test_split: val`` was accepted: on a board whose train / val partition is drawn per seed,
    the evaluation's "test" is then each seed's validation part of the non-test samples, which the selection seeds'
    trials train on (shown here from the rows), while the selection validates on the fixed held-out split."""
    from fusebench.spec.config import ConfigError

    path = fixtures_dir / "multiview" / "NGs.mat"
    swapped = {"dataset.val_split": "test", "dataset.test_split": "val"}
    spec = load_spec(benchmarks.path("mv-ngs"))
    spec.dataset.val_split, spec.dataset.test_split = "test", "val"  # as the spec was taken before
    tested = set().union(*(_rows_and_labels(build_datasets(spec, False, str(path), s, roles=("test",))["test"])[0]
                           for s in spec.seeds[:3]))
    trained = set().union(*(_rows_and_labels(build_datasets(spec, False, str(path), s, roles=("train",))["train"])[0]
                            for s in spec.selection_seeds))
    assert len(tested & trained) > 0.9 * len(tested)
    with pytest.raises(ConfigError, match=r"dataset.val_split is 'test', the adapter's held-out test split, while "
                                          r"dataset.test_split is 'val': the test score would be measured on another "
                                          r"split than the held-out one"):
        load_spec(benchmarks.path("mv-ngs"), overrides=swapped)
    shared = load_spec(benchmarks.path("sunrgbd-det-real20"))  # val and test one split (nothing chosen): as before
    assert shared.dataset.val_split == shared.dataset.test_split == "test"
