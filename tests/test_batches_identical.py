"""Batches of in-memory datasets are sliced at once (issue #31, item 5), and are the batches the sample-by-sample
path made: for every epoch of a seeded shuffle, the batch of the loader equals ``collate`` of the samples
``ds[i]`` of the epoch's permutation (worked out here from the documented rule: ``torch.randperm`` seeded with
``seed * 100_003 + epoch``, cut in batches, the short last one dropped when shuffling), tensor by tensor with
``torch.equal``, dtypes and meta included; and no sample is read one by one while the loader runs."""

from __future__ import annotations

import pytest
import torch

from fusebench import datasets
from fusebench.datasets.collate import collate
from fusebench.engine import data

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _epoch_indices(n: int, bs: int, shuffle: bool, seed: int, epoch: int) -> list[list[int]]:
    if shuffle:
        order = torch.randperm(n, generator=torch.Generator().manual_seed(seed * 100_003 + epoch)).tolist()
    else:
        order = list(range(n))
    bs = min(bs, n)
    batches = [order[i : i + bs] for i in range(0, n, bs)]
    if shuffle and n >= 2 * bs and len(batches[-1]) < bs:
        batches.pop()
    return [b for b in batches if not shuffle or len(b) >= 2]


def _assert_same(got: dict, want: dict) -> None:
    assert set(got) == set(want)
    assert got["names"] == want["names"]
    assert list(got["modalities"]) == list(want["modalities"])
    for name, t in want["modalities"].items():
        g = got["modalities"][name]
        assert g.dtype == t.dtype and g.shape == t.shape and g.is_contiguous() == t.is_contiguous()
        assert torch.equal(g, t), name
    assert got["masks"].keys() == want["masks"].keys()
    assert got["present"].dtype == want["present"].dtype and torch.equal(got["present"], want["present"])
    assert got["target"].dtype == want["target"].dtype and torch.equal(got["target"], want["target"])
    assert got["extra_targets"].keys() == want["extra_targets"].keys()
    assert got["meta"] == want["meta"]


def _no_sample_reads(monkeypatch, ds) -> None:
    """Reading a sample one by one raises from here on (the sliced path must not)."""
    def refuse(self, index):
        raise AssertionError(f"sample {index} read one by one")
    monkeypatch.setattr(type(ds), "__getitem__", refuse)


def _check_epochs(monkeypatch, ds, bs: int, shuffle: bool, seed: int, epochs=(0, 1, 2)) -> int:
    names = list(ds.modalities)
    want = {e: [collate([ds[i] for i in idx], names) for idx in _epoch_indices(len(ds), bs, shuffle, seed, e)]
            for e in epochs}  # the sample-by-sample batches, made before the reads are refused
    with monkeypatch.context() as m:
        _no_sample_reads(m, ds)
        for e in epochs:
            loader, per_epoch = data.make_loader(ds, bs, shuffle, seed, e)
            got = list(loader)
            assert per_epoch == len(want[e]) == len(got)
            for g, w in zip(got, want[e]):
                _assert_same(g, w)
    return sum(len(w) for w in want.values())


@pytest.mark.parametrize("shuffle,seed", [(True, 0), (True, 7), (False, 3)])
def test_quickstart_batches_identical(monkeypatch, shuffle, seed) -> None:
    ds = datasets.build("quickstart", synthetic=True, split="train", seed=seed, use_cache=False)
    assert ds.augment  # the train split: the identity augmentation of the base class does not block slicing
    assert _check_epochs(monkeypatch, ds, 32, shuffle, seed) >= 3


@pytest.mark.parametrize("name", ["mv_hw2sources", "mv_ngs"])
def test_multiview_batches_identical(monkeypatch, fixtures_dir, name) -> None:
    root = fixtures_dir / "multiview"
    for split in ("train", "test"):
        ds = datasets.build(name, root=root, split=split, seed=5, split_seed=5, use_cache=False)
        _check_epochs(monkeypatch, ds, 64, split == "train", 5)


def test_subset_batches_identical(monkeypatch, fixtures_dir) -> None:
    ds = datasets.build("mv_hw2sources", root=fixtures_dir / "multiview", split="train", seed=1, use_cache=False)
    sub = data.few_shot_subset(ds, 5, seed=1)
    names = list(ds.modalities)
    want = [collate([ds[sub.indices[i]] for i in idx], names) for idx in _epoch_indices(len(sub), 8, True, 1, 4)]
    with monkeypatch.context() as m:
        _no_sample_reads(m, ds)
        got = list(data.make_loader(sub, 8, True, 1, 4)[0])
    assert len(got) == len(want) > 1
    for g, w in zip(got, want):
        _assert_same(g, w)


def test_input_views_sliced(monkeypatch) -> None:
    ds = datasets.build("quickstart", synthetic=True, split="val", seed=0, use_cache=False)
    rows = [ds[i] for i in range(len(ds))]
    from fusebench import benchmarks

    spec = benchmarks.load("quickstart")
    with monkeypatch.context() as m:
        _no_sample_reads(m, ds)
        xs, y = data.input_views(ds, spec, 0)
    for l, name in enumerate(ds.modalities):
        assert torch.equal(torch.from_numpy(xs[l]), torch.stack([r["modalities"][name] for r in rows]).double())
    assert torch.equal(y, torch.stack([r["target"] for r in rows]))


def test_adapters_that_cannot_slice_fall_back(monkeypatch) -> None:
    """An adapter with an augmentation of its own, or a prepared cache attached, is read sample by sample (the
    augmentation and the cache decide what a sample is); the batches are the collated samples."""
    ds = datasets.build("quickstart", synthetic=True, split="train", seed=0, use_cache=False)
    names = list(ds.modalities)
    assert data.sliced_batch(ds, [3, 1], names) is not None

    def shifted(self, sample, rng):
        sample["modalities"] = {k: v + torch.rand(v.shape, generator=rng) for k, v in sample["modalities"].items()}
        return sample

    monkeypatch.setattr(type(ds), "_augment", shifted)
    assert data.sliced_batch(ds, [3, 1], names) is None
    ds.set_epoch(2)
    got = list(data.make_loader(ds, 16, True, 0, 2)[0])[0]
    idx = _epoch_indices(len(ds), 16, True, 0, 2)[0]
    _assert_same(got, collate([ds[i] for i in idx], names))
    monkeypatch.undo()
    ds.attach_cache(object())
    assert data.sliced_batch(ds, [3, 1], names) is None
    ds.attach_cache(None)
    assert data.sliced_batch(ds, [len(ds)], names) is None  # out of range: the per-sample path raises
    with pytest.raises(IndexError):
        ds[len(ds)]
