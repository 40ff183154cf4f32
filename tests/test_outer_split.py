"""Issue #30 item 4: a test set no selection run ever sees.

With ``dataset.outer_test_seed`` every dataset has one fixed, stratified outer test split; the run seed
(``split_per_seed``) draws only the train / val partition of the other samples, for evaluation and
selection seeds alike. Proven on the real fixture files through the real split code path
(:func:`fusebench.engine.data.build_datasets` -> the adapter), with the sample rows compared as sets."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import fusebench
from fusebench import benchmarks
from fusebench.datasets.base import DatasetError
from fusebench.datasets.multiview_mat.splits import outer_split, stratified_split
from fusebench.spec.config import ConfigError
from fusebench.engine.data import build_datasets
from fusebench.components.spec_check import load_spec

FILES = {"mv-hw2sources": "HW2sources.mat", "mv-handwritten": "handwritten.mat"}


def _rows(ds) -> set[int]:
    """The file rows of a split, read sample by sample (``meta.index``: the row in the file)."""
    return {int(ds[i]["meta"]["index"]) for i in range(len(ds))}


def _splits(spec, root: str, seed: int) -> dict[str, set[int]]:
    return {role: _rows(ds) for role, ds in build_datasets(spec, False, root, seed).items()}


@pytest.mark.parametrize("name", sorted(FILES))
def test_no_sample_of_an_evaluation_test_split_is_in_a_selection_trial(name: str, fixtures_dir: Path) -> None:
    root = str(fixtures_dir / "multiview" / FILES[name])
    spec = load_spec(benchmarks.path(name))
    assert spec.dataset.outer_test_seed is not None and spec.dataset.split_per_seed
    evaluation = {s: _splits(spec, root, s) for s in spec.seeds}  # the board's 10 evaluation seeds
    trials = {s: _splits(spec, root, s) for s in spec.selection_seeds}  # every selection trial's data
    assert len(evaluation) == 10 and len(trials) == 3
    n = 2000
    for parts in [*evaluation.values(), *trials.values()]:  # three disjoint splits covering the file
        assert not (parts["train"] & parts["val"]) and not (parts["train"] & parts["test"]) \
            and not (parts["val"] & parts["test"])
        assert len(parts["train"] | parts["val"] | parts["test"]) == n
    tested = set().union(*(p["test"] for p in evaluation.values()))
    seen_by_selection = set().union(*(p["train"] | p["val"] for p in trials.values()))
    assert not tested & seen_by_selection
    # one test split for every seed (20% of the 200 samples of each digit), and the seeds still vary train / val
    assert len({frozenset(p["test"]) for p in [*evaluation.values(), *trials.values()]}) == 1 and len(tested) == 400
    assert len({frozenset(p["val"]) for p in evaluation.values()}) == 10
    assert all(len(p["train"]) == 1200 and len(p["val"]) == 400 for p in evaluation.values())

    # the protocol before issue #30 (a test split per seed) lets the trials see evaluation test samples: the
    # check above is one that can fail
    old = load_spec(benchmarks.path(name), overrides={"dataset.outer_test_seed": None})
    old_tested = set().union(*(_splits(old, root, s)["test"] for s in spec.seeds[:3]))
    old_seen = set().union(*(_splits(old, root, s)["train"] | _splits(old, root, s)["val"] for s in spec.selection_seeds[:1]))
    assert len(old_tested & old_seen) > 200


def test_outer_split_by_hand() -> None:
    """Class sizes 10, 7 and 5 at 0.6/0.2/0.2: the test part is stratified_split's test part with the test seed
    (per class 2, 1 or 2, 1: floor(0.2 n_c) plus the leftovers), the rest is split 0.75 / 0.25 per class."""
    y = np.array([0] * 10 + [1] * 7 + [2] * 5)
    fr = (0.6, 0.2, 0.2)
    for seed in range(20):
        parts = outer_split(y, fr, 7, seed)
        assert np.array_equal(parts["test"], stratified_split(y, fr, 7)["test"])
        assert set(parts["train"]) | set(parts["val"]) | set(parts["test"]) == set(range(22))
        assert not set(parts["train"]) & set(parts["val"])
        for c in range(3):
            n_c = int((y == c).sum())
            t = int((y[parts["test"]] == c).sum())
            assert t in (int(0.2 * n_c), int(0.2 * n_c) + 1)
            v = int((y[parts["val"]] == c).sum())
            assert v in (int(0.25 * (n_c - t)), int(0.25 * (n_c - t)) + 1) and v >= 1
    assert len({tuple(outer_split(y, fr, 7, s)["val"]) for s in range(20)}) > 1  # the seed varies train / val
    shipped = np.array([0, 1, 10, 11, 17, 18])  # a file's own test rows are taken as they are
    parts = outer_split(y, fr, 7, 3, test=shipped)
    assert np.array_equal(parts["test"], shipped) and not set(parts["train"]) & set(shipped)


def test_records_carry_the_outer_test_seed(tmp_path: Path, fixtures_dir: Path) -> None:
    over = {"metrics": ["acc"], "comparison": {},
            "options.embedding_eval": {"l2_grid": [1.0], "cluster_on": "all", "n_init": 1, "knn_grid": []}}
    recs = fusebench.run("mv-ngs", objective="raw", seeds=[0, 1], out=tmp_path, overrides=over, progress=False,
                         data_root=str(fixtures_dir / "multiview" / "NGs.mat"))
    for r, seed in zip(recs, (0, 1)):
        assert r["config"]["dataset"]["outer_test_seed"] == 0
        assert r["dataset"]["splits"]["outer_test_seed"] == 0 and r["dataset"]["splits"]["seed"] == seed
        assert r["dataset"]["splits"]["counts"] == {"train": 300, "val": 100, "test": 100}


def test_an_outer_test_seed_is_refused_where_it_cannot_apply(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"quickstart\.yaml: dataset\.outer_test_seed: the runner passes the seed "
                       r"of the one fixed test split to adapter 'quickstart' as its option 'outer_test_seed', which "
                       r"the adapter does not declare"):
        load_spec(benchmarks.path("quickstart"), overrides={"dataset.outer_test_seed": 3})
    spec = load_spec(benchmarks.path("quickstart"))
    spec.dataset.outer_test_seed = 3  # a spec built around the loader: the runner refuses it too
    with pytest.raises(ConfigError, match="dataset.outer_test_seed: dataset 'quickstart' draws no fixed outer test"):
        build_datasets(spec, True, None, 0)
    for bad in (-1, "x", True, 2**32):
        with pytest.raises(ConfigError, match=r"mv-ngs\.yaml: dataset\.outer_test_seed(: expected int| must be null)"):
            load_spec(benchmarks.path("mv-ngs"), overrides={"dataset.outer_test_seed": bad})
    from fusebench import datasets

    with pytest.raises(DatasetError, match="outer_test_seed"):
        datasets.build("mv_ngs", synthetic=True, split="train", outer_test_seed=-2)


def test_split_keys_the_adapter_does_not_read_are_refused_when_the_spec_loads(monkeypatch) -> None:
    """``dataset.split_per_seed`` / ``outer_test_seed`` reach the adapter as its options ``split_seed`` /
    ``outer_test_seed``: an adapter (a plugin's) that declares neither was refused only when the first split was
    built, as unknown options "(dataset.options / --set dataset.options.NAME)" the user never wrote. Now the spec
    is refused when it loads (``--plan``, ``fusebench list``), naming the spec key and the option to declare."""
    from fusebench import datasets

    cls = datasets.get("mv_ngs")
    assert load_spec(benchmarks.path("mv-ngs")).dataset.split_per_seed  # declares both: loads
    monkeypatch.setattr(cls, "OPTIONS", cls.OPTIONS - {"split_seed"})
    with pytest.raises(ConfigError, match=r"mv-ngs\.yaml: dataset\.split_per_seed: the runner passes each run's "
                       r"seed to adapter 'mv_ngs' as its option 'split_seed', which the adapter does not declare "
                       r"\(its OPTIONS: \['allow_fractional_labels', .*'outer_test_seed', .*\]\); declare "
                       r"'split_seed' in the adapter's OPTIONS .* or drop dataset\.split_per_seed"):
        load_spec(benchmarks.path("mv-ngs"))
    load_spec(benchmarks.path("mv-ngs"), overrides={"dataset.split_per_seed": False})  # nothing passed: loads
    monkeypatch.setattr(cls, "OPTIONS", cls.OPTIONS - {"outer_test_seed"})
    with pytest.raises(ConfigError, match=r"dataset\.outer_test_seed: .* option 'outer_test_seed', which the adapter "
                       r"does not declare"):
        load_spec(benchmarks.path("mv-ngs"), overrides={"dataset.split_per_seed": False})
    load_spec(benchmarks.path("mv-ngs"), overrides={"dataset.split_per_seed": False, "dataset.outer_test_seed": None})
    # a synthetic_only dataset is given no split seed: split_per_seed passes nothing to refuse
    load_spec(benchmarks.path("quickstart"), overrides={"dataset.split_per_seed": True})
    monkeypatch.setattr(cls, "OPTIONS", None)  # open-ended options: not checked
    load_spec(benchmarks.path("mv-ngs"))
