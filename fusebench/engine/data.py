"""The data of one cell (engine layer): the spec's dataset splits, deterministic loaders, few-shot subsets,
the input views as arrays. Loaders depend only on (seed, epoch), so a resumed run sees the batches an
uninterrupted one would.

How batches are fetched is a :class:`Feed` (``loader:`` in a spec, ``fusebench run --num-workers``): in this
process (the default), or in DataLoader worker processes, with page-locked (pinned) memory for asynchronous
copies to a GPU, workers kept across epochs. The batches are the same whatever the feed: an epoch's batches
are index lists fixed before it starts (a permutation drawn from (seed, epoch)), each one is fetched as the
item ``(epoch, indices)``, and the worker fetching it first sets the epoch on its own copy of the dataset
(``set_epoch``), so seeded augmentations derived from (seed, epoch, index) are those of the main process. The
workers' global RNGs are seeded from (seed, epoch, worker id) when they start; a dataset must not draw its
augmentations from them (which worker fetches a batch is not fixed), but from a generator of its own.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import random
from dataclasses import dataclass
from functools import partial
from typing import Any, Iterable, Iterator

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from fusebench.runtime import distributed
from fusebench.runtime.progress import cell_track, phase
from fusebench.spec.config import TRAIN_SPLIT, BenchmarkSpec, LoaderConfig

def build_datasets(spec: BenchmarkSpec, synthetic: bool, data_root: str | None, seed: int,
              roles: tuple[str, ...] = ("train", "val", "test"), extra_options: dict[str, Any] | None = None):
    from fusebench import datasets

    ds_cfg = spec.dataset
    synthetic = synthetic or ds_cfg.synthetic_only
    common = dict(modalities=ds_cfg.modalities, synthetic=synthetic, **ds_cfg.options, **(extra_options or {}))
    if ds_cfg.split_per_seed and not synthetic:  # each seed its own stratified split
        common["split_seed"] = int(seed)
    if ds_cfg.outer_test_seed is not None:  # one fixed test split; the seed above draws only train / val
        common["outer_test_seed"] = _outer_test_seed(ds_cfg)
    if synthetic:
        common["synthetic_spec"] = dict(ds_cfg.synthetic_spec)
    out = {}
    for role, split in (("train", TRAIN_SPLIT), ("val", ds_cfg.val_split), ("test", ds_cfg.test_split)):
        if role not in roles:
            continue
        with phase(f"reading the {role} split of {ds_cfg.id}"):  # reading, indexing, standardising: said when slow
            out[role] = datasets.build(ds_cfg.id, root=data_root, split=split, seed=seed, **common)
    return out


def _outer_test_seed(ds_cfg: Any) -> int:
    """``dataset.outer_test_seed``, checked against the adapter: one that draws no outer test split is a
    ConfigError naming the key (before any training: the runner builds the splits first)."""
    from fusebench import datasets
    from fusebench.typed import ConfigError

    cls = datasets.get(ds_cfg.id)
    if "outer_test_seed" not in getattr(cls, "OPTIONS", ()):
        raise ConfigError(f"dataset.outer_test_seed: dataset {ds_cfg.id!r} draws no fixed outer test split (the "
                          "multiview_mat adapters do); drop the key")
    return int(ds_cfg.outer_test_seed)


def make_loader(ds, batch_size: int, shuffle: bool, seed: int, epoch: int, skip: int = 0, shard: bool = False,
                feed: Feed | None = None) -> tuple[Iterable, int]:
    """A deterministic loader: the epoch's order depends only on (seed, epoch); ``skip`` batches are
    dropped from the front (used when resuming inside an epoch). Returns the loader and the epoch's
    number of batches. ``feed``: how the batches are fetched (default: the feed of the enclosing
    :func:`feeding`, else in this process); it never changes them."""
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
    # what each fetch gets: the epoch travels with the indices; with shard, each rank takes its contiguous shard
    # of every global batch and the batch says every rank's shard size (gathers need no size exchange)
    if shard and distributed.is_distributed():
        keys = [(epoch, tuple(distributed.shard(b)), distributed.shard_sizes(len(b))) for b in batches[skip:]]
    else:
        keys = [(epoch, tuple(b)) for b in batches[skip:]]
    pool = _POOL.get()
    feed = feed or (pool.feed if pool is not None else Feed())
    fetch = _BatchFetch(ds, names)
    if feed.num_workers == 0:
        return _loader(fetch, keys, feed, None), len(batches)
    entry = pool.entry(ds, fetch, seed, epoch) if pool is not None and feed is pool.feed and feed.persistent_workers else None
    return _EpochLoader(keys, fetch, feed, partial(_seed_worker, seed=int(seed), epoch=int(epoch)), entry), len(batches)


# ---------------------------------------------------------------------------------------------
# how batches are fetched
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Feed:
    """How a cell's batches are fetched (never what they hold): ``num_workers`` DataLoader worker
    processes (0: in this process), ``pin_memory`` (page-locked batches, so the copy to a GPU is
    asynchronous), ``persistent_workers`` (kept across the epochs of a cell, inside :func:`feeding`),
    ``prefetch_factor`` (batches each worker prepares ahead). ``num_workers_from`` says where the
    worker count came from (``auto``, ``spec`` or ``--num-workers``), for the record."""

    num_workers: int = 0
    pin_memory: bool = False
    persistent_workers: bool = False
    prefetch_factor: int = 2
    num_workers_from: str = "default"

    def record(self) -> dict[str, Any]:
        """The effective settings, for ``run.json`` (``numerics.speed``)."""
        workers = self.num_workers > 0
        return {"num_workers": self.num_workers, "num_workers_from": self.num_workers_from,
                "pin_memory": self.pin_memory, "persistent_workers": self.persistent_workers and workers,
                "prefetch_factor": self.prefetch_factor if workers else None}


def usable_cores() -> int:
    """The CPU cores this process may run on (:func:`fusebench.engine.threads.allowed_cpus` of this process:
    its affinity mask -- a SLURM allocation, ``taskset`` --, its cgroup's CPU quota -- a container -- and
    ``SLURM_CPUS_PER_TASK``), shared between the processes of a ``torchrun`` on this node (``LOCAL_WORLD_SIZE``)."""
    from fusebench.engine.threads import allowed_cpus, read_allowance

    cores = allowed_cpus(read_allowance(), os.environ)
    try:
        local = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    except ValueError:
        local = 1
    return max(1, cores // local)


def auto_num_workers(device: torch.device, cells_at_once: int = 1) -> int:
    """The worker count when none is given: on CUDA every core of the cell's share but one (the share:
    :func:`usable_cores` divided by the ``cells_at_once`` cells this machine runs side by side, ``fusebench run
    --workers``; the one core stays with the training process: a full-resolution image sample costs about
    0.15 s of CPU, so a GPU step of a few tens of ms needs many workers), 0 elsewhere (on the CPU the workers
    would take the cores the training computes on, and the small CPU runs spend little time fetching)."""
    if torch.device(device).type != "cuda":
        return 0
    return max(0, usable_cores() // max(1, int(cells_at_once)) - 1)


def held_in_memory(ds: Any) -> bool:
    """Whether the batches of ``ds`` are sliced from in-memory tensors (:func:`sliced_batch` gives its first
    sample): then a DataLoader worker only adds a process, its start and a copy between processes."""
    base = ds
    while type(base) is Subset:
        base = base.ds
    names = list(getattr(base, "modalities", None) or [])
    return bool(names) and len(ds) > 0 and sliced_batch(ds, [0], names) is not None


def resolve_feed(cfg: LoaderConfig, num_workers: int | None, device: torch.device, in_memory: bool = False,
                 cells_at_once: int = 1) -> Feed:
    """The feed of a cell on ``device``: the spec's ``loader`` section with ``num_workers`` (``fusebench run
    --num-workers``) over its count where given; ``None`` values are worked out here (workers:
    :func:`auto_num_workers` for one of ``cells_at_once`` cells side by side; on CUDA none for data
    ``in_memory`` (:func:`held_in_memory`): a batch is one slice there, and the 15 worker processes a 16-core
    GPU machine would start per loader cost more than all the batches of a small cell; pinned memory: on for
    CUDA)."""
    cuda = torch.device(device).type == "cuda"
    if num_workers is not None:
        workers, source = int(num_workers), "--num-workers"
    elif cfg.num_workers is not None:
        workers, source = int(cfg.num_workers), "spec"
    elif in_memory and cuda:  # (elsewhere the auto count is 0 already)
        workers, source = 0, "auto: in-memory data, sliced in the training process"
    else:
        workers, source = auto_num_workers(device, cells_at_once), "auto"
    pin = cuda if cfg.pin_memory is None else bool(cfg.pin_memory) and cuda  # pinning is for copies to a GPU
    return Feed(num_workers=workers, pin_memory=pin, persistent_workers=bool(cfg.persistent_workers),
                prefetch_factor=int(cfg.prefetch_factor), num_workers_from=source)


class _Pool:
    """The persistent DataLoaders of one :func:`feeding` context, one per dataset (keyed by its identity,
    which the entry keeps alive); their workers are shut down when the context ends."""

    def __init__(self, feed: Feed) -> None:
        self.feed = feed
        self.entries: dict[int, _Pooled] = {}

    def entry(self, ds: Any, fetch: _BatchFetch, seed: int, epoch: int) -> _Pooled:
        got = self.entries.get(id(ds))
        if got is None or got.ds is not ds:
            got = self.entries[id(ds)] = _Pooled(ds, fetch, self.feed, partial(_seed_worker, seed=int(seed), epoch=int(epoch)))
        return got

    def close(self) -> None:
        for entry in self.entries.values():
            entry.shutdown()
        self.entries.clear()


_POOL: contextvars.ContextVar[_Pool | None] = contextvars.ContextVar("fusebench_feed_pool", default=None)


@contextlib.contextmanager
def feeding(feed: Feed) -> Iterator[Feed]:
    """Fetch the batches of every :func:`make_loader` inside with ``feed``; with persistent workers, each
    dataset keeps one set of workers across its epochs (and across its loaders: train, validation...),
    shut down when the context ends."""
    pool = _Pool(feed)
    token = _POOL.set(pool)
    try:
        yield feed
    finally:
        _POOL.reset(token)
        pool.close()


class _BatchFetch(Dataset):
    """The item ``(epoch, indices)``: the collated samples ``indices`` of ``ds`` at ``epoch`` (set on the copy
    of ``ds`` in the process that fetches it: a worker's copy does not see the main process's ``set_epoch``)."""

    def __init__(self, ds: Any, names: list[str]) -> None:
        self.ds, self.names = ds, names

    def __len__(self) -> int:
        return len(self.ds)

    def __getitem__(self, key: tuple[int, tuple[int, ...]]) -> dict[str, Any]:
        from fusebench.datasets.collate import collate

        epoch, indices, *sizes = key
        if hasattr(self.ds, "set_epoch"):
            self.ds.set_epoch(epoch)
        batch = sliced_batch(self.ds, list(indices), self.names)
        if batch is None:
            batch = collate([self.ds[i] for i in indices], self.names)
        if sizes and isinstance(batch, dict):  # a shard of a global batch: every rank's shard size
            batch["shard_sizes"] = sizes[0]
        return batch


def sliced_batch(ds: Any, indices: list[int], names: list[str]) -> dict[str, Any] | None:
    """The samples ``indices`` of ``ds`` as one batch sliced from its in-memory tensors (the adapter's
    ``fetch_batch``: the batch the collated samples make, without touching them one by one), through a
    :class:`Subset`'s indices; None where the adapter cannot (the samples are then fetched one by one). Looked
    up on the class: a wrapper that hands attribute lookups to the dataset it wraps must not hand over this."""
    if type(ds) is Subset:
        return sliced_batch(ds.ds, [ds.indices[i] for i in indices], names)
    fetch = getattr(type(ds), "fetch_batch", None)
    return fetch(ds, indices, names) if fetch is not None else None


class _Keys(Sampler):
    """The items of the epoch being read from a persistent loader (set before each pass)."""

    def __init__(self) -> None:
        self.keys: list[tuple[int, tuple[int, ...]]] = []

    def __iter__(self) -> Iterator[tuple[int, tuple[int, ...]]]:
        return iter(list(self.keys))

    def __len__(self) -> int:
        return len(self.keys)


def _as_is(batch: Any) -> Any:
    return batch


def _seed_worker(worker_id: int, seed: int, epoch: int) -> None:
    """A worker's global RNGs (python, numpy, torch) seeded from (seed, epoch, worker id), never from the
    main process's state."""
    state = np.random.SeedSequence([int(seed), int(epoch), int(worker_id)]).generate_state(2, dtype=np.uint32)
    s = int(state[0]) | (int(state[1]) << 32)
    random.seed(s)
    np.random.seed(int(state[0]))
    torch.manual_seed(s)


def _loader(fetch: _BatchFetch, sampler: Any, feed: Feed, worker_init: Any, persistent: bool = False) -> DataLoader:
    # an own generator: starting the iterator (and its workers' base seed) must not draw from the global RNG
    # (resume exactness, and the same training numbers whatever the feed)
    kw: dict[str, Any] = {}
    if feed.num_workers > 0:
        kw = dict(num_workers=feed.num_workers, worker_init_fn=worker_init, prefetch_factor=feed.prefetch_factor,
                  persistent_workers=persistent)
    return DataLoader(fetch, batch_size=None, sampler=sampler, collate_fn=_as_is, generator=torch.Generator(),
                      pin_memory=feed.pin_memory, **kw)


class _Pooled:
    """A dataset's persistent DataLoader; ``busy`` while a pass over it is under way."""

    def __init__(self, ds: Any, fetch: _BatchFetch, feed: Feed, worker_init: Any) -> None:
        self.ds, self.sampler = ds, _Keys()
        self.loader = _loader(fetch, self.sampler, feed, worker_init, persistent=True)
        self.busy = False

    def shutdown(self) -> None:
        iterator = getattr(self.loader, "_iterator", None)  # the persistent workers, once started
        if iterator is not None and hasattr(iterator, "_shutdown_workers"):
            iterator._shutdown_workers()
        self.loader = None


class _EpochLoader:
    """One epoch's batches fetched by worker processes: through the dataset's persistent loader where there is
    one and no other pass over it is under way, else through a loader of its own."""

    def __init__(self, keys: list, fetch: _BatchFetch, feed: Feed, worker_init: Any, entry: _Pooled | None) -> None:
        self.keys, self.fetch, self.feed, self.worker_init, self.entry = keys, fetch, feed, worker_init, entry

    def __len__(self) -> int:
        return len(self.keys)

    def __iter__(self) -> Iterator[Any]:
        entry = self.entry
        if entry is None or entry.busy or entry.loader is None:
            yield from _loader(self.fetch, self.keys, self.feed, self.worker_init)
            return
        entry.sampler.keys = self.keys
        entry.busy = True
        try:
            yield from entry.loader
        finally:  # also when the pass is left early (the rest is drained when the loader is next reset)
            entry.busy = False


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
    loader, per_epoch = make_loader(ds, spec.downstream.batch_size, False, seed, 0)
    parts: list[list[torch.Tensor]] = [[] for _ in ds.modalities]
    ys = []
    for batch in cell_track(loader, per_epoch, f"input views {getattr(ds, 'split', '')}"):
        n = len(batch["target"])
        for l, m in enumerate(ds.modalities):
            parts[l].append(batch["modalities"][m].reshape(n, -1).double())
        ys.append(batch["target"].reshape(-1).cpu())
    return [torch.cat(p).numpy() for p in parts], torch.cat(ys)

