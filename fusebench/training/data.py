"""The data of one cell (engine layer): the spec's dataset splits, deterministic loaders, few-shot subsets,
the input views as arrays. Loaders depend only on (seed, epoch), so a resumed run sees the batches an
uninterrupted one would."""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np
import torch
from torch.utils.data import DataLoader

from fusebench.training import distributed
from fusebench.training.config import BenchmarkSpec

def build_datasets(spec: BenchmarkSpec, synthetic: bool, data_root: str | None, seed: int,
              roles: tuple[str, ...] = ("train", "val", "test"), extra_options: dict[str, Any] | None = None):
    from fusebench import datasets

    ds_cfg = spec.dataset
    synthetic = synthetic or ds_cfg.synthetic_only
    common = dict(modalities=ds_cfg.modalities, synthetic=synthetic, **ds_cfg.options, **(extra_options or {}))
    if ds_cfg.split_per_seed and not synthetic:  # each seed its own stratified split
        common["split_seed"] = int(seed)
    if synthetic:
        common["synthetic_spec"] = dict(ds_cfg.synthetic_spec)
    out = {}
    for role, split in (("train", "train"), ("val", ds_cfg.val_split), ("test", ds_cfg.test_split)):
        if role not in roles:
            continue
        out[role] = datasets.build(ds_cfg.id, root=data_root, split=split, seed=seed, **common)
    return out


def make_loader(ds, batch_size: int, shuffle: bool, seed: int, epoch: int, skip: int = 0, shard: bool = False) -> Iterable:
    """A deterministic loader: the epoch's order depends only on (seed, epoch); ``skip`` batches are
    dropped from the front (used when resuming inside an epoch)."""
    from fusebench.datasets.collate import collate

    names = list(ds.modalities)
    if hasattr(ds, "set_epoch"):
        ds.set_epoch(epoch)
    if shuffle:
        g = torch.Generator().manual_seed(seed * 100_003 + epoch)
        order = torch.randperm(len(ds), generator=g).tolist()
    else:
        order = list(range(len(ds)))
    bs = min(batch_size, len(ds))
    drop_last = shuffle and len(ds) >= 2 * bs  # contrastive batches need >= 2 samples
    batches = [order[i : i + bs] for i in range(0, len(order), bs)]
    if drop_last and len(batches[-1]) < bs:
        batches.pop()
    batches = [b for b in batches if not shuffle or len(b) >= 2]
    if shard and distributed.is_distributed():  # each rank takes its contiguous shard of every global batch
        batches = [distributed.shard(b) for b in batches]
    # an own generator: building the iterator must not draw from the global RNG (resume exactness)
    loader = DataLoader(batches[skip:], batch_size=None, shuffle=False, generator=torch.Generator(),
                        collate_fn=lambda idx: collate([ds[i] for i in idx], names))
    return loader, len(batches)


class Subset(torch.utils.data.Dataset):
    """``indices`` of an adapter, keeping its attributes (modalities, task, num_classes, ...)."""

    def __init__(self, ds, indices: list[int]) -> None:
        self.ds, self.indices = ds, list(indices)

    def __getattr__(self, name: str) -> Any:
        if name in ("ds", "indices"):
            raise AttributeError(name)
        return getattr(self.ds, name)

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return self.ds[self.indices[i]]


def few_shot_subset(ds, shots: int, seed: int):
    """The M3G paper's few-shot probe set: ``shots`` samples per class drawn with ``seed`` (all of a
    class's samples where it has fewer). Classification datasets only."""
    if ds.task != "classification":
        raise ValueError(f"downstream.shots needs a classification dataset, {ds.id} is {ds.task}")
    labels = [int(ds[i]["target"]) for i in range(len(ds))]
    order = torch.randperm(len(ds), generator=torch.Generator().manual_seed(seed + 12_345)).tolist()
    taken: dict[int, list[int]] = {}
    for i in order:
        bucket = taken.setdefault(labels[i], [])
        if len(bucket) < shots:
            bucket.append(i)
    return Subset(ds, sorted(i for idx in taken.values() for i in idx))


def input_dims(ds) -> dict[str, int]:
    return {m.name: m.channels for m in ds.MODALITIES if m.name in ds.modalities}


@torch.no_grad()
def input_views(ds, spec: BenchmarkSpec, seed: int) -> tuple[list[np.ndarray], torch.Tensor]:
    """The input views of all of ``ds`` as float64 arrays, one [n, d_v] per modality (in order), and
    the labels [n]."""
    loader, _ = make_loader(ds, spec.downstream.batch_size, False, seed, 0)
    parts: list[list[torch.Tensor]] = [[] for _ in ds.modalities]
    ys = []
    for batch in loader:
        n = len(batch["target"])
        for l, m in enumerate(ds.modalities):
            parts[l].append(batch["modalities"][m].reshape(n, -1).double())
        ys.append(batch["target"].reshape(-1).cpu())
    return [torch.cat(p).numpy() for p in parts], torch.cat(ys)


def pretrain_batch_size(spec: BenchmarkSpec, objective: str) -> int:
    """``pretrain.objective_batch_size[objective]`` where given (e.g. M3G at k >= 5, whose cost grows as
    n^k), else ``pretrain.batch_size``."""
    return int(spec.pretrain.objective_batch_size.get(objective, spec.pretrain.batch_size))
