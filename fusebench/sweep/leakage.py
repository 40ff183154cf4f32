"""What a hyper-parameter selection may see (sweep layer): the checks, made before any trial runs, that no selection
run sees a test sample of the evaluation and that no evaluation seed repeats a selection trial
(:mod:`fusebench.sweep.selection` runs the selection; these are its guards against leakage).

* :func:`check_test_split_fixed`: with ``dataset.split_per_seed`` every seed draws its own split; refused where the
  adapter's split seed moves the test split too (a selection seed's train / val would hold the evaluation seeds' test
  samples), as the adapter says (``SPLIT_SEED_MOVES_TEST``) or, where it cannot say, as its test samples' ids show;
* :func:`check_seeds_apart`: an evaluation seed that is a selection seed is refused where a row selects (that cell would
  repeat the winning trial and report the run the choice was made on)."""

from __future__ import annotations

from fusebench.engine.loop import RunError
from fusebench.spec.config import BenchmarkSpec, ConfigError
from fusebench.spec.request import RunOptions


def check_test_split_fixed(spec: BenchmarkSpec, options: RunOptions) -> None:
    """Refuse a selection that could see test samples: with ``dataset.split_per_seed`` every seed passes its own
    ``split_seed`` to the adapter, so where that seed draws the test split too, a selection seed's train / val
    would hold samples of the evaluation seeds' test splits. The adapter says whether it does
    (:attr:`~fusebench.datasets.base.MultimodalDataset.SPLIT_SEED_MOVES_TEST`, else
    :meth:`~fusebench.datasets.base.MultimodalDataset.split_seed_moves_test` of the built test split, e.g. a
    multiview .mat with ``outer_test_seed`` or its own test block: fixed); where it cannot say, the test splits of
    the selection and evaluation seeds are built and their samples' ids compared (:func:`_test_ids`). Checked
    before any trial runs. Synthetic twins are smoke runs: not checked."""
    ds = spec.dataset
    if not ds.split_per_seed or ds.outer_test_seed is not None or options.synthetic or ds.synthetic_only:
        return
    from fusebench import datasets
    from fusebench.engine.data import build_datasets

    cls = datasets.get(ds.id)
    moves = getattr(cls, "SPLIT_SEED_MOVES_TEST", None)
    seeds = list(dict.fromkeys([*spec.selection_seeds, *spec.seeds]))
    if moves is None:
        test = build_datasets(spec, False, options.data_root, seeds[0], roles=("test",))["test"]
        ask = getattr(test, "split_seed_moves_test", None)
        moves = ask() if callable(ask) else None
    how = "the adapter says so"
    if moves is None:  # the adapter cannot say: compare the test samples of the seeds
        if len(seeds) < 2:
            seeds.append(max(seeds) + 1)
        ids = [_test_ids(spec, options, s) for s in seeds]
        moves = any(i != ids[0] for i in ids[1:])
        how = (f"its test splits of split seeds {seeds} hold {'different' if moves else 'the same'} samples (their "
               "ids compared)")
    if not moves:
        return
    fixes = (["set dataset.outer_test_seed (one fixed test split for every run)"]
             if "outer_test_seed" in (getattr(cls, "OPTIONS", None) or ()) else [])
    if getattr(cls, "FIXED_TEST_SPLIT_HINT", ""):
        fixes.append(cls.FIXED_TEST_SPLIT_HINT)
    fixes.append("drop dataset.split_per_seed (every seed then uses the split of dataset.options.split_seed)")
    raise RunError(f"{spec.name}: dataset.split_per_seed draws a split per seed, so the selection seeds "
                   f"{spec.selection_seeds} would train and validate on test samples of the evaluation seeds: the "
                   f"split seed of adapter {ds.id!r} draws its test split too ({how}); {', or '.join(fixes)}")


def _test_ids(spec: BenchmarkSpec, options: RunOptions, seed: int) -> list[str]:
    """The ids of the test samples of run seed ``seed`` (its split seed with ``dataset.split_per_seed``), sorted:
    the adapter's :meth:`~fusebench.datasets.base.MultimodalDataset.sample_keys` where it has them, else every
    sample's ``meta["id"]`` (each sample read). A RunError when a sample has no id: nothing to compare."""
    from fusebench.engine.data import build_datasets

    test = build_datasets(spec, False, options.data_root, seed, roles=("test",))["test"]
    keys = test.sample_keys() if callable(getattr(test, "sample_keys", None)) else None
    if keys is None:
        keys = [(test[i].get("meta") or {}).get("id") for i in range(len(test))]
    if any(not isinstance(k, str) or not k for k in keys):
        raise RunError(f"{spec.name}: adapter {spec.dataset.id!r} does not say whether its split_seed draws the test "
                       "split (SPLIT_SEED_MOVES_TEST, docs/adding-a-modality.md) and its test samples have no ids "
                       "(meta['id']) to compare across split seeds, so a selection with dataset.split_per_seed "
                       "cannot be shown to see no test sample; declare it in the adapter, or drop "
                       "dataset.split_per_seed")
    return sorted(keys)


def check_seeds_apart(spec: BenchmarkSpec, selecting: list[str], seeds: list[int]) -> None:
    """Refuse evaluation ``seeds`` that are selection seeds (``spec.selection_seeds``: ``pretrain.selection_seeds``,
    else ``pretrain.selection_seed``) where a row of the run selects its hyper-parameters (``selecting``: those rows,
    :func:`fusebench.sweep.selection.selects`): the evaluation cell
    of such a seed is, with the chosen point, the very trial that won the validation (the same split of the non-test
    samples, the same initialisation, the same few-shot draws), so its number would be that of the run the choice
    was made on. A ConfigError naming the seeds, before anything runs. The spec's own check covers
    ``pretrain.selection_seeds`` against ``seeds`` alone; this one the resolved selection seeds against the seeds
    a run asks for (``--seeds``)."""
    selecting = list(dict.fromkeys(selecting))
    clash = sorted(set(int(s) for s in seeds) & set(spec.selection_seeds))
    if selecting and clash:
        key = "pretrain.selection_seeds" if spec.pretrain.selection_seeds else "pretrain.selection_seed"
        raise ConfigError(f"{spec.name}: seed(s) {', '.join(map(str, clash))} of this run are selection seeds "
                          f"({key}: {spec.selection_seeds}) of {', '.join(selecting)}, whose hyper-parameters are "
                          "selected on them: an evaluation run of such a seed would repeat the winning selection "
                          "trial (its split, initialisation and few-shot draws) and report the run the choice was "
                          f"made on; evaluate on other seeds, or set {key} apart from the evaluation seeds")


__all__ = ["check_seeds_apart", "check_test_split_fixed"]
