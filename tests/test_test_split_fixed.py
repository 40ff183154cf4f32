"""A hyper-parameter selection with ``dataset.split_per_seed`` is refused only where the split seed draws the test
split too (:func:`fusebench.sweep.selection.check_test_split_fixed`), as the adapter says
(``MultimodalDataset.SPLIT_SEED_MOVES_TEST`` / ``split_seed_moves_test``), else by comparing the test samples' ids
of several split seeds. NYUv2's split seed only carves val out of the official train frames: its selection used to be
refused with a message suggesting ``dataset.outer_test_seed``, which the adapter rejects. Real fixtures
(../shared/fixtures, PROVENANCE.md): NYUv2's official ``splits.mat`` and MTAN's val frame, multiview NGs.mat."""

from __future__ import annotations

from pathlib import Path

import pytest

from fusebench import benchmarks, datasets
from fusebench.engine.data import build_datasets
from fusebench.engine.loop import RunError
from fusebench.spec.request import RunOptions
from fusebench.sweep import selection

SEEDS = {"pretrain.selection_seeds": [1000, 1001], "seeds": [0, 1]}
#: nyuv2-seg with a split per seed and a grid to select, on MTAN's layout (the fixture's val/ folder: one frame)
NYU_MTAN = {**SEEDS, "dataset.split_per_seed": True, "pretrain.grid": {"m3g": {"eps": [0.1, 0.2]}},
            "dataset.options.layout": "mtan", "dataset.options.classes": 13, "dataset.options.use_cache": False}


def _no_trial(*args, **kwargs):
    raise AssertionError("a selection trial started")


def test_nyuv2_with_a_split_per_seed_selects_its_official_test_split_being_fixed(
        tmp_path: Path, fixtures_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The selection of an NYUv2 spec with split_per_seed is accepted: its first trial starts (refused before)."""
    spec = benchmarks.load("nyuv2-seg", overrides=NYU_MTAN)
    assert spec.dataset.split_per_seed and spec.dataset.outer_test_seed is None and selection.selects(spec, "m3g")
    opts = RunOptions(data_root=str(fixtures_dir / "nyuv2" / "mtan"))
    selection.check_test_split_fixed(spec, opts)
    monkeypatch.setattr(selection, "run_cell", _no_trial)
    with pytest.raises(AssertionError, match="a selection trial started"):
        selection.select_hparams(spec, "m3g", tmp_path, opts, {})
    # the official layout too (declared: nothing to read, so no labeled .mat needed)
    official = benchmarks.load("nyuv2-seg", overrides={k: v for k, v in NYU_MTAN.items() if "options" not in k})
    selection.check_test_split_fixed(official, RunOptions(data_root=str(fixtures_dir / "nyuv2")))


def test_nyuv2_test_ids_are_the_official_test_frames_whatever_the_split_seed(fixtures_dir: Path) -> None:
    """The declaration is true: the test split of every split seed is splits.mat's testNdxs (read here with scipy),
    while val moves with the seed; the sample id is the frame number (meta['id'] of frame 1, whose label PNG the
    fixture holds, is '0001')."""
    import scipy.io

    assert datasets.get("nyuv2").SPLIT_SEED_MOVES_TEST is False
    official = sorted(int(f) for f in scipy.io.loadmat(fixtures_dir / "nyuv2" / "meta" / "splits.mat")["testNdxs"].ravel())
    assert len(official) == 654 and official[:5] == [1, 2, 9, 14, 15]
    kw = dict(root=fixtures_dir / "nyuv2", modalities=[], label_source="png", use_cache=False)
    vals = []
    for seed in (0, 1000, 1001, 7):
        test = datasets.build("nyuv2", split="test", split_seed=seed, **kw)
        assert [f.frame for f in test.samples] == official
        vals.append([f.frame for f in datasets.build("nyuv2", split="val", split_seed=seed, **kw).samples])
    assert len({tuple(v) for v in vals}) == 4  # the seed does move val
    first = datasets.build("nyuv2", split="test", split_seed=1000, **kw)[0]
    assert first["meta"]["id"] == "0001" and first["meta"]["frame"] == 1


def test_an_adapter_that_cannot_say_is_judged_by_its_test_ids(
        fixtures_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a declaration the test splits of the selection and evaluation seeds are built and their ids compared:
    NYUv2 (MTAN's real frame, read through the run's own path) holds the same frame for every seed: accepted."""
    nyu = datasets.get("nyuv2")
    monkeypatch.setattr(nyu, "SPLIT_SEED_MOVES_TEST", None)
    spec = benchmarks.load("nyuv2-seg", overrides=NYU_MTAN)
    opts = RunOptions(data_root=str(fixtures_dir / "nyuv2" / "mtan"))
    ids = {s: [build_datasets(spec, False, opts.data_root, s, roles=("test",))["test"][0]["meta"]["id"]]
           for s in (1000, 1001, 0, 1)}
    assert all(v == ["val/0"] for v in ids.values())  # MTAN's val/0.npy, no splits.mat beside it: no frame number
    selection.check_test_split_fixed(spec, opts)


def test_a_multiview_mat_without_a_fixed_test_split_is_still_refused(
        tmp_path: Path, fixtures_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """NGs.mat ships no test split: split_per_seed without outer_test_seed moves the test split with the seed (its
    test ids differ between a selection and an evaluation seed), so the selection is refused, naming what works for
    this adapter; with outer_test_seed it is accepted. An adapter that does not declare (simulated) is refused by the
    id comparison."""
    ngs = str(fixtures_dir / "multiview" / "NGs.mat")
    opts = RunOptions(data_root=ngs)
    spec = benchmarks.load("mv-ngs", overrides={**SEEDS, "dataset.outer_test_seed": None})
    ids = {s: {d["meta"]["id"] for d in build_datasets(spec, False, ngs, s, roles=("test",))["test"]} for s in (1000, 0)}
    assert ids[1000] != ids[0] and len(ids[0]) == len(ids[1000])  # the refusal is warranted
    monkeypatch.setattr(selection, "run_cell", _no_trial)
    why = (r"mv-ngs: dataset.split_per_seed draws a split per seed, so the selection seeds \[1000, 1001\] would train "
           r"and validate on test samples of the evaluation seeds: the split seed of adapter 'mv_ngs' draws its test "
           r"split too \(the adapter says so\); set dataset.outer_test_seed \(one fixed test split for every run\), or "
           r"use a file that ships its test split \(\*_train / \*_test variables; shipped_split not false\), or drop "
           r"dataset.split_per_seed")
    with pytest.raises(RunError, match=why):
        selection.select_hparams(spec, "infonce_pwe", tmp_path, opts, {})
    mv = type(build_datasets(spec, False, ngs, 0, roles=("test",))["test"])
    monkeypatch.setattr(mv, "split_seed_moves_test", lambda self: None)
    with pytest.raises(RunError, match=r"draws its test split too \(its test splits of split seeds \[1000, 1001, 0, "
                                       r"1\] hold different samples \(their ids compared\)\)"):
        selection.check_test_split_fixed(spec, opts)
    fixed = benchmarks.load("mv-ngs", overrides=SEEDS)
    assert fixed.dataset.outer_test_seed is not None
    selection.check_test_split_fixed(fixed, opts)


def test_every_builtin_adapter_declares_whether_its_split_seed_moves_the_test_split() -> None:
    """Each built-in adapter declares it; only multiview_mat leaves it to the opened file (outer_test_seed, a shipped
    test block). An adapter that takes no split_seed cannot move its test split with it."""
    for name in datasets.DATASETS.builtin():
        cls = datasets.get(name)
        declared = cls.SPLIT_SEED_MOVES_TEST
        if cls.__name__ == "MultiviewMat" or issubclass(cls, datasets.get("multiview_mat")):
            assert declared is None, name
        else:
            assert declared is False, name
            # NYUv2's split_seed carves val only (tested above); the others take none
            assert name == "nyuv2" or "split_seed" not in (cls.OPTIONS or ()), name


def test_a_multiview_mat_that_ships_its_test_split_is_accepted_unless_shipped_split_is_off(fixtures_dir: Path) -> None:
    """CUB.mat ships x<v>_test / gt_test (its last 120 of 600 rows, read with scipy here): that block is the test
    split of every split seed, so mv-cub's selection with split_per_seed is accepted; shipped_split=false draws the
    test split with the split seed again, and the selection is refused."""
    import scipy.io

    cub = fixtures_dir / "multiview2" / "CUB.mat"
    n_test = scipy.io.loadmat(cub)["gt_test"].size
    assert n_test == 120
    opts = RunOptions(data_root=str(cub))
    spec = benchmarks.load("mv-cub", overrides=SEEDS)
    assert spec.dataset.split_per_seed and spec.dataset.outer_test_seed is None
    for s in (1000, 0):
        rows = [d["meta"]["index"] for d in build_datasets(spec, False, str(cub), s, roles=("test",))["test"]]
        assert sorted(rows) == list(range(600 - n_test, 600))
    selection.check_test_split_fixed(spec, opts)
    off = benchmarks.load("mv-cub", overrides={**SEEDS, "dataset.options.shipped_split": False})
    with pytest.raises(RunError, match=r"the split seed of adapter 'mv_cub' draws its test split too .*shipped_split "
                                       r"not false"):
        selection.check_test_split_fixed(off, opts)
