"""DataLoader workers (fusebench/engine/data.py): the batches are the same with 0, 1 or 2 worker processes,
with persistent workers across epochs, for a dataset with seeded augmentations; the workers' global RNGs are
seeded and the main process's RNG is not drawn from; a real cell gives the same record; the feed's settings
(auto, spec, --num-workers) and their errors.

The expected batches are worked out here without the loader: each sample is read straight from the dataset
(``set_epoch(e)`` then ``ds[i]`` in this process) and each epoch's batches must hold every index once. Worker
processes are started with the platform's default start method; the datasets are a few dozen tiny samples.
Every loader with workers gets a timeout here (:func:`worker_timeout`): a worker that stops answering (a
deadlock after ``fork``, a machine under heavy load) fails the test instead of hanging the suite.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from fusebench import benchmarks
from fusebench.engine import data as D
from fusebench.engine import threads as T
from fusebench.spec.config import ConfigError, LoaderConfig
from fusebench.cells.execute import run_cell
from fusebench.spec.request import CellRequest, RunOptions

ROOT = Path(__file__).resolve().parents[1]
#: seconds a loader waits for one batch from its workers before it raises (generous: a loaded machine is slow)
WORKER_TIMEOUT_S = 120


@pytest.fixture(autouse=True)
def worker_timeout(monkeypatch):
    """The DataLoaders that data.py builds with worker processes raise after WORKER_TIMEOUT_S seconds without
    a batch (DataLoader's ``timeout``) instead of waiting forever."""
    real = D.DataLoader

    def with_timeout(*args, **kwargs):
        if kwargs.get("num_workers", 0) > 0:
            kwargs.setdefault("timeout", WORKER_TIMEOUT_S)
        return real(*args, **kwargs)

    monkeypatch.setattr(D, "DataLoader", with_timeout)


class AugmentedToy(torch.utils.data.Dataset):
    """Two modalities, a label and a seeded augmentation: noise drawn from a generator seeded with
    (seed, epoch, index), as the adapters' ``_augment`` does; ``meta`` carries the index."""

    modalities = ["a", "b"]

    def __init__(self, n: int = 23, seed: int = 5, augment: bool = True) -> None:
        self.n, self.seed, self.augment, self.epoch = n, seed, augment, 0
        g = torch.Generator().manual_seed(1234)
        self.a, self.b = torch.randn(n, 3, generator=g), torch.randn(n, 2, 2, generator=g)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict:
        a, b = self.a[i].clone(), self.b[i].clone()
        if self.augment:
            g = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch * 7_919 + i)
            a = a + torch.randn(3, generator=g)
        return {"modalities": {"a": a, "b": b}, "target": torch.tensor(i % 3), "meta": {"index": i}}


def expected_sample(ds: AugmentedToy, epoch: int, i: int) -> dict:
    ds.set_epoch(epoch)
    return ds[i]


def read_epochs(ds, feed: D.Feed | None, epochs: int = 2, batch_size: int = 4, shuffle: bool = True,
                seed: int = 7) -> list[list[dict]]:
    out = []
    for e in range(epochs):
        loader, n = D.make_loader(ds, batch_size, shuffle, seed, e, feed=feed)
        batches = list(loader)
        assert len(batches) == n
        out.append(batches)
    return out


def assert_same_batches(got: list[list[dict]], ref: list[list[dict]]) -> None:
    assert len(got) == len(ref)
    for epoch_got, epoch_ref in zip(got, ref):
        assert len(epoch_got) == len(epoch_ref)
        for x, y in zip(epoch_got, epoch_ref):
            assert x["names"] == y["names"] and x["meta"] == y["meta"]
            assert set(x["modalities"]) == set(y["modalities"])
            for m in x["modalities"]:
                assert torch.equal(x["modalities"][m], y["modalities"][m])
            assert torch.equal(x["target"], y["target"]) and torch.equal(x["present"], y["present"])


def check_against_dataset(ds: AugmentedToy, epochs: list[list[dict]], batch_size: int = 4) -> None:
    """Every epoch holds each index once (batches of ``batch_size``, the last partial one dropped) and each
    sample is the dataset's own sample at that epoch."""
    for e, batches in enumerate(epochs):
        seen = [m["index"] for b in batches for m in b["meta"]]
        assert len(seen) == len(set(seen)) == (len(ds) // batch_size) * batch_size
        for b in batches:
            for row, meta in enumerate(b["meta"]):
                want = expected_sample(ds, e, meta["index"])
                assert torch.equal(b["modalities"]["a"][row], want["modalities"]["a"])
                assert torch.equal(b["modalities"]["b"][row], want["modalities"]["b"])
                assert int(b["target"][row]) == meta["index"] % 3
    orders = [[m["index"] for b in batches for m in b["meta"]] for batches in epochs]
    assert orders[0] != orders[1]  # the order depends on the epoch


def test_augmentation_really_depends_on_the_epoch() -> None:
    ds = AugmentedToy()
    assert not torch.equal(expected_sample(ds, 0, 3)["modalities"]["a"], expected_sample(ds, 1, 3)["modalities"]["a"])


@pytest.mark.parametrize("workers", [0, 1, 2])
def test_identical_batches_whatever_the_number_of_workers(workers: int) -> None:
    ds = AugmentedToy()
    ref = read_epochs(ds, D.Feed())
    check_against_dataset(ds, ref)
    got = read_epochs(ds, D.Feed(num_workers=workers))
    assert_same_batches(got, ref)
    check_against_dataset(ds, got)


@pytest.mark.parametrize("workers", [1, 2])
def test_persistent_workers_see_each_epoch(workers: int) -> None:
    """The workers keep their copy of the dataset across epochs: the epoch travels with each batch's indices,
    so their augmentations follow the epoch (set_epoch in this process does not reach them)."""
    ds = AugmentedToy()
    ref = read_epochs(ds, D.Feed(), epochs=3)
    feed = D.Feed(num_workers=workers, persistent_workers=True)
    with D.feeding(feed):
        got = []
        for e in range(3):
            loader, _ = D.make_loader(ds, 4, True, 7, e)
            got.append(list(loader))
            ds.set_epoch(99)  # the main process's copy moved on: the workers must not care
        pooled = D._POOL.get().entries[id(ds)]
        assert pooled.loader.persistent_workers and pooled.loader.num_workers == workers
        assert pooled.loader.timeout == WORKER_TIMEOUT_S  # built through the fixture's timeout
        # one pass left early (next(iter(...))) and a validation loader over the same data in between
        first = next(iter(D.make_loader(ds, 5, False, 7, 0)[0]))
        assert [m["index"] for m in first["meta"]] == [0, 1, 2, 3, 4]
        unshuffled = list(D.make_loader(ds, 5, False, 7, 0)[0])
        assert [m["index"] for b in unshuffled for m in b["meta"]] == list(range(len(ds)))
    assert_same_batches(got, ref)
    check_against_dataset(ds, got[:2])
    assert pooled.loader is None  # shut down with the context


def test_nested_passes_over_one_dataset_get_their_own_loader() -> None:
    """A second pass over a dataset while the first is under way does not disturb it."""
    ds = AugmentedToy(augment=False)
    with D.feeding(D.Feed(num_workers=1, persistent_workers=True)):
        outer = iter(D.make_loader(ds, 4, True, 7, 0)[0])
        first = next(outer)
        inner = list(D.make_loader(ds, 5, False, 7, 0)[0])
        rest = list(outer)
    ref = read_epochs(ds, D.Feed(), epochs=1)[0]
    assert_same_batches([[first, *rest]], [ref])
    assert [m["index"] for b in inner for m in b["meta"]] == list(range(len(ds)))


def test_resume_skip_with_workers() -> None:
    ds = AugmentedToy()
    ref = list(D.make_loader(ds, 4, True, 7, 1)[0])
    got, n = D.make_loader(ds, 4, True, 7, 1, skip=2, feed=D.Feed(num_workers=2))
    assert n == len(ref) and len(got) == len(ref) - 2
    assert_same_batches([list(got)], [ref[2:]])


class GlobalRandom(torch.utils.data.Dataset):
    """Draws from the global RNGs (what a dataset should not do): shows how the workers' RNGs are seeded."""

    modalities = ["x"]

    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int) -> dict:
        return {"modalities": {"x": torch.tensor([float(torch.rand(())), float(np.random.rand()), random.random()])},
                "target": torch.tensor(0), "meta": {"worker": torch.utils.data.get_worker_info().id}}


def test_workers_are_seeded_from_seed_epoch_and_worker_and_leave_the_main_rng_alone() -> None:
    ds = GlobalRandom()
    torch.manual_seed(0)
    before = torch.get_rng_state()
    np_before, py_before = np.random.get_state()[1].copy(), random.getstate()
    a = [b["modalities"]["x"] for b in D.make_loader(ds, 2, False, 3, 0, feed=D.Feed(num_workers=2))[0]]
    b = [b["modalities"]["x"] for b in D.make_loader(ds, 2, False, 3, 0, feed=D.Feed(num_workers=2))[0]]
    c = [b["modalities"]["x"] for b in D.make_loader(ds, 2, False, 3, 1, feed=D.Feed(num_workers=2))[0]]
    assert all(torch.equal(x, y) for x, y in zip(a, b))  # the same (seed, epoch): the same draws
    assert not all(torch.equal(x, y) for x, y in zip(a, c))  # another epoch: other draws
    # the main process's RNGs were not drawn from (starting workers draws their base seed from an own generator)
    assert torch.equal(torch.get_rng_state(), before)
    assert np.array_equal(np.random.get_state()[1], np_before) and random.getstate() == py_before
    # worker w of (seed 3, epoch 0) starts from the seed of SeedSequence([3, 0, w]), worked out here
    for w, first in ((0, a[0]), (1, a[1])):
        state = np.random.SeedSequence([3, 0, w]).generate_state(2, dtype=np.uint32)
        torch_seed = int(state[0]) | (int(state[1]) << 32)
        g = torch.Generator().manual_seed(torch_seed)
        want_torch = float(torch.rand((), generator=g))
        want_np = np.random.RandomState(int(state[0])).rand()
        random.seed(torch_seed)
        want_py = random.random()
        assert torch.equal(first[0], torch.tensor([want_torch, want_np, want_py]))  # stored as float32 both ways
    random.setstate(py_before)


def test_nyuv2_seeded_flips_are_the_same_with_workers() -> None:
    """A real adapter with seeded augmentation (NYUv2's horizontal flip from (seed, epoch, index)), read by
    persistent workers over two epochs, against its samples read here at each epoch."""
    from fusebench.datasets import build

    ds = build("nyuv2", synthetic=True, split="train", seed=0,
               synthetic_spec={"num_samples": 16, "seed": 3, "options": {"height": 16, "width": 16}})
    assert ds.augment and hasattr(ds, "set_epoch")
    index = {ds[i]["meta"]["id"]: i for i in range(len(ds))}
    flips = []
    for i in range(len(ds)):
        ds.set_epoch(0)
        x0 = ds[i]["modalities"]["rgb"]
        ds.set_epoch(1)
        flips.append(not torch.equal(x0, ds[i]["modalities"]["rgb"]))
    assert any(flips)  # some sample is flipped at one epoch and not the other
    ref = read_epochs(ds, D.Feed(), batch_size=2)
    with D.feeding(D.Feed(num_workers=2, persistent_workers=True)):
        got = read_epochs(ds, None, batch_size=2)
    assert_same_batches(got, ref)
    for e, batches in enumerate(got):
        for b in batches:
            for row, meta in enumerate(b["meta"]):
                ds.set_epoch(e)
                want = ds[index[meta["id"]]]
                for m in ds.modalities:
                    assert torch.equal(b["modalities"][m][row], want["modalities"][m])
                assert torch.equal(b["target"][row], want["target"])


TINY = {"dataset.synthetic_spec": {"num_samples": 96, "seed": 0}, "pretrain.epochs": 2, "pretrain.batch_size": 16,
        "downstream.epochs": 2, "downstream.batch_size": 32}


def test_a_cell_gives_the_same_record_with_0_1_2_workers(tmp_path: Path) -> None:
    spec = benchmarks.load("quickstart", overrides=TINY)
    recs = {n: run_cell(CellRequest(spec, "infonce_pwe", 0, tmp_path / str(n)), RunOptions(progress=False, num_workers=n))
            for n in (0, 1, 2)}
    for n in (1, 2):
        assert recs[n]["metrics"] == recs[0]["metrics"]
        assert recs[n]["curves"] == recs[0]["curves"]
        assert recs[n]["selection"]["val_metrics"] == recs[0]["selection"]["val_metrics"]
        assert recs[n]["config_hash"] == recs[0]["config_hash"]  # how batches are fetched is not configuration
        assert recs[n]["comparability_key"] == recs[0]["comparability_key"]
    for n, rec in recs.items():
        written = json.loads((tmp_path / str(n) / "quickstart" / "infonce_pwe" / "seed0" / "run.json").read_text())
        assert written["numerics"]["speed"]["num_workers"] == n
        assert written["numerics"]["speed"]["num_workers_from"] == "--num-workers"
        assert written["numerics"]["speed"]["pin_memory"] is False  # no CUDA here
        assert written["numerics"]["speed"]["persistent_workers"] is (n > 0)


# ---- the feed's settings ---------------------------------------------------------------------
def test_feed_resolution(monkeypatch, tmp_path) -> None:
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    usable_cores = D.usable_cores
    auto = D.resolve_feed(LoaderConfig(), None, cpu)
    assert (auto.num_workers, auto.pin_memory, auto.num_workers_from) == (0, False, "auto")
    for cores, want in ((1, 0), (2, 1), (3, 2), (5, 4), (16, 15), (64, 63)):  # every usable core but one
        monkeypatch.setattr(D, "usable_cores", lambda cores=cores: cores)
        feed = D.resolve_feed(LoaderConfig(), None, cuda)
        assert (feed.num_workers, feed.pin_memory) == (want, True)
    assert D.resolve_feed(LoaderConfig(num_workers=3), None, cuda).num_workers == 3
    spec_cfg = D.resolve_feed(LoaderConfig(num_workers=3, pin_memory=False), None, cuda)
    assert (spec_cfg.num_workers_from, spec_cfg.pin_memory) == ("spec", False)
    over = D.resolve_feed(LoaderConfig(num_workers=3), 1, cpu)
    assert (over.num_workers, over.num_workers_from) == (1, "--num-workers")
    assert D.resolve_feed(LoaderConfig(pin_memory=True), 0, cpu).pin_memory is False  # pinning is for a GPU
    assert D.Feed(num_workers=0, persistent_workers=True).record()["persistent_workers"] is False
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    monkeypatch.delenv("SLURM_CPUS_PER_TASK", raising=False)
    monkeypatch.setattr(D.os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    monkeypatch.setattr(T, "CGROUP_ROOT", str(tmp_path / "no-cgroup"))
    assert usable_cores() == 4  # 16 cores shared by 4 processes of a torchrun
    (tmp_path / "cpu.max").write_text("650000 100000\n")
    monkeypatch.setattr(T, "CGROUP_ROOT", str(tmp_path))
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    assert usable_cores() == 6  # a container's quota of 6.5 CPUs on a 16-core affinity mask
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "3")
    assert usable_cores() == 3  # a SLURM task's CPUs (the same count as the cell's threads: threads.allowed_cpus)


def test_auto_workers_share_the_cores_between_the_cells_run_at_once(monkeypatch) -> None:
    """``fusebench run --workers 4`` on a 64-core GPU node: four cells side by side, each with 64 / 4 = 16
    cores, one of them its training process's: 15 workers each (60 in all), not 63 each (252)."""
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    monkeypatch.setattr(D, "usable_cores", lambda: 64)
    for cells, want in ((1, 63), (2, 31), (3, 20), (4, 15), (32, 1), (64, 0), (100, 0)):  # 64 // cells - 1, >= 0
        feed = D.resolve_feed(LoaderConfig(), None, cuda, cells_at_once=cells)
        assert (feed.num_workers, feed.num_workers_from) == (want, "auto"), cells
    assert D.resolve_feed(LoaderConfig(), None, cpu, cells_at_once=4).num_workers == 0
    assert D.resolve_feed(LoaderConfig(), 8, cuda, cells_at_once=4).num_workers == 8  # an explicit count is kept
    assert D.resolve_feed(LoaderConfig(num_workers=8), None, cuda, cells_at_once=4).num_workers == 8


def test_in_memory_data_is_sliced_in_the_training_process_on_a_gpu_too(monkeypatch) -> None:
    """On a 16-core GPU machine the auto count would start 15 worker processes per loader for data that is one
    tensor slice per batch (the quickstart on an H100 then spent over 150 s on 12 cells): none for such data;
    an explicit count still wins, and data loaded sample by sample keeps its workers."""
    cuda = torch.device("cuda")
    monkeypatch.setattr(D, "usable_cores", lambda: 16)
    feed = D.resolve_feed(LoaderConfig(), None, cuda, in_memory=True)
    assert (feed.num_workers, feed.pin_memory) == (0, True) and feed.num_workers_from.startswith("auto: in-memory")
    assert D.resolve_feed(LoaderConfig(), None, cuda, in_memory=False).num_workers == 15
    assert D.resolve_feed(LoaderConfig(num_workers=3), None, cuda, in_memory=True).num_workers == 3
    assert D.resolve_feed(LoaderConfig(), 2, cuda, in_memory=True).num_workers == 2
    data = D.build_datasets(benchmarks.load("quickstart"), False, None, 0)  # synthetic tensors held in memory
    assert D.held_in_memory(data["train"]) and D.held_in_memory(D.Subset(data["train"], [3, 1]))

    class OneByOne(torch.utils.data.Dataset):  # no fetch_batch: samples loaded one by one
        modalities = ["a"]

        def __len__(self) -> int:
            return 4

        def __getitem__(self, i):
            return {"modalities": {"a": torch.zeros(2)}, "target": 0}

    assert not D.held_in_memory(OneByOne())


def test_cgroup_cpu_quota_is_read_from_v2_and_v1_files(monkeypatch, tmp_path) -> None:
    """The workers' cores and the cell's threads read one quota (threads.read_allowance): on a 16-core
    affinity mask, a v2 ``cpu.max`` of 6 CPUs gives 6 cores, a v1 quota of 2.5 CPUs 2, no quota all 16."""
    monkeypatch.setattr(D.os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    monkeypatch.delenv("SLURM_CPUS_PER_TASK", raising=False)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)

    def cores_under(root: Path) -> int:
        monkeypatch.setattr(T, "CGROUP_ROOT", str(root))
        return D.usable_cores()

    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "cpu.max").write_text("600000 100000\n")
    assert cores_under(v2) == 6
    (v2 / "cpu.max").write_text("max 100000\n")
    assert cores_under(v2) == 16  # no quota
    v1 = tmp_path / "v1" / "cpu"
    v1.mkdir(parents=True)
    (v1 / "cpu.cfs_quota_us").write_text("250000\n")
    (v1 / "cpu.cfs_period_us").write_text("100000\n")
    assert cores_under(tmp_path / "v1") == 2
    (v1 / "cpu.cfs_quota_us").write_text("-1\n")
    assert cores_under(tmp_path / "v1") == 16
    assert cores_under(tmp_path / "absent") == 16


@pytest.mark.parametrize("over, key", [
    ({"loader.num_workers": -1}, "loader.num_workers"),
    ({"loader.num_workers": "two"}, "loader.num_workers"),
    ({"loader.num_workers": True}, "loader.num_workers"),
    ({"loader.pin_memory": "yes"}, "loader.pin_memory"),
    ({"loader.prefetch_factor": 0}, "loader.prefetch_factor"),
    ({"loader.persistent_workers": "no"}, "loader.persistent_workers"),
    ({"loader.workers": 2}, "workers"),
])
def test_bad_loader_settings_name_the_key(over: dict, key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        benchmarks.load("quickstart", overrides=over)


def test_default_loader_and_speed_leave_the_spec_form_alone() -> None:
    form = benchmarks.load("quickstart").to_dict()
    assert "loader" not in form and "speed" not in form
    explicit = benchmarks.load("quickstart", overrides={"loader.num_workers": None, "loader.prefetch_factor": 2,
                                                         "speed.optimizer_impl": "default"}).to_dict()
    assert explicit == form


def test_num_workers_option_and_flag_errors() -> None:
    assert RunOptions(num_workers=3).num_workers == 3
    for bad in (-1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="--num-workers"):
            RunOptions(num_workers=bad)
    out = subprocess.run([sys.executable, "-m", "fusebench", "run", "quickstart", "--num-workers", "-2"],
                         capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 2 and "--num-workers" in out.stderr and "integer >= 0" in out.stderr
