"""Every registered dataset adapter passes every conformance check (fusebench.datasets.conformance).

Parametrised over ``fusebench.datasets.available()`` at collection time, so a new adapter (in-tree or
from an entry point) is tested automatically, on its small synthetic twin: declaration, schema
(layouts of base.MODALITY_LAYOUT, dtypes, target type by task, meta id), determinism, length and
index errors, collate layout, missing-modality handling, synthetic twin round-trip through the real
reader, and prepared-cache round-trip. That the checks can fail is tested in test_dataset_cache.py.
"""

from __future__ import annotations

import pytest

from fusebench import datasets
from fusebench.datasets.conformance import CHECKS, check_adapter

ADAPTERS = datasets.available()


def test_some_adapter_is_registered():
    assert "quickstart" in ADAPTERS


@pytest.mark.parametrize("check", list(CHECKS))
@pytest.mark.parametrize("name", ADAPTERS)
def test_conformance(name, check):
    assert check_adapter(name, checks=[check]) == [check]


# -- an empty split is an error for every adapter (base-class check) ------------------------------
def test_empty_split_raises_in_the_base_class(tmp_path):
    import torch

    from fusebench.datasets.base import DatasetError, Modality, MultimodalDataset

    class Toy(MultimodalDataset):
        id = "toy_empty"
        task = "classification"
        MODALITIES = (Modality("x", "vector", 2),)
        OPTIONS = frozenset({"listing", "n"})

        def _index(self):
            if self._opts_rest.get("listing"):
                self._split_file = self.root / self._opts_rest["listing"]
            return list(range(int(self._opts_rest.get("n", 0))))

        def _load_raw(self, index):
            return {"modalities": {"x": torch.zeros(2)}, "target": torch.tensor(0), "meta": {"id": str(index)}}

    with pytest.raises(DatasetError) as err:
        Toy(root=tmp_path, split="val", use_cache=False)
    msg = str(err.value)
    assert msg.startswith(f"toy_empty: split 'val' is empty (0 samples) under root {tmp_path}")
    assert "defined by" not in msg
    with pytest.raises(DatasetError, match=rf"toy_empty: split 'test' is empty.*defined by {tmp_path / 'test.txt'}"):
        Toy(root=tmp_path, split="test", listing="test.txt", use_cache=False)
    assert len(Toy(root=tmp_path, split="test", n=3, use_cache=False)) == 3
    empty = Toy(root=tmp_path, split="val", allow_empty=True, use_cache=False)
    assert len(empty) == 0 and "allow_empty" not in empty.opts and "allow_empty" not in empty._opts_rest


def test_empty_sunrgbd_val_listing(fixtures_dir, tmp_path):
    """SUN RGB-D's val_data_idx.txt (its test split) emptied in a copy of the real v0 fixture."""
    import shutil

    from fusebench.datasets import DatasetError, build

    root = tmp_path / "sunrgbd"
    shutil.copytree(fixtures_dir / "sunrgbd" / "mmdet3d_v0_trainval", root, copy_function=shutil.copyfile,
                    ignore=shutil.ignore_patterns("depth", "image", "*.pkl"))
    (root / "val_data_idx.txt").write_text("")
    kw = dict(root=root, use_cache=False, augment=False, val_fraction=0.0)
    with pytest.raises(DatasetError) as err:
        build("sunrgbd", split="test", **kw)
    msg = str(err.value)
    assert msg.startswith(f"sunrgbd: split 'test' is empty (0 samples) under root {root}")
    assert "val_data_idx.txt" in msg
    train = build("sunrgbd", split="train", **kw)
    assert [f.frame for f in train.samples] == [1, 2]  # train_data_idx.txt of the fixture: 1, 2


def test_an_adapter_declaring_no_options_refuses_every_option(tmp_path):
    """The default ``OPTIONS`` is empty: an adapter that reads no option (like the guide's) refuses a
    ``dataset.options`` key, naming it and the options every adapter takes, where it used to accept it, record it
    in the run and change its hash while reading nothing."""
    from fusebench.datasets.base import DatasetError, Modality, MultimodalDataset

    class Plain(MultimodalDataset):
        id = "toy_plain"
        task = "classification"
        MODALITIES = (Modality("x", "vector", 2),)

        def _index(self):
            return [0]

    assert Plain.OPTIONS == frozenset()
    with pytest.raises(DatasetError, match=r"toy_plain: unknown options \['window_sz'\] .*valid options: \[.*'seed'"
                                           r".*\] \(an adapter declares the options it reads in its OPTIONS\)"):
        Plain(root=tmp_path, window_sz=5)


def test_the_declared_task_is_checked_against_the_task_registry(monkeypatch):
    """A dataset may name any registered task family, a plugin's too (the conformance check held a fixed tuple of the
    four built-in ids, so a plugin task's dataset failed it); classes are asked of a task with classes only. Checked
    with the spec (fusebench.components.spec_check), where the task registry is reachable."""
    from fusebench import tasks
    from fusebench.components.spec_check import check_dataset_task
    from fusebench.datasets.base import Modality, MultimodalDataset
    from fusebench.datasets.conformance import ConformanceError, check_declaration
    from fusebench.typed import ConfigError

    def dataset(task_id, classes):
        return type("Toy", (MultimodalDataset,), {"id": "toy_task", "task": task_id, "num_classes": classes,
                                                  "MODALITIES": (Modality("x", "vector", 2),),
                                                  "INFO": "a toy", "_index": lambda self: [0]})

    with pytest.raises(ConfigError, match=r"toy: task 'ranking' is not a registered task family \(registered: "
                                          r"classification, detection, regression, segmentation"):
        check_dataset_task(dataset("ranking", None), "toy")
    with pytest.raises(ConformanceError, match=r"toy_task: task must be a lowercase task-family id"):
        check_declaration(dataset("Ranking", None))

    class Ranking(tasks.RegressionTask):  # a plugin's task family: no classes
        id = "ranking"

    monkeypatch.setattr(tasks.TASKS, "_entries", {**tasks.TASKS._entries, "ranking": Ranking})
    for ok in (dataset("ranking", None), dataset("regression", None), dataset("classification", 3)):
        check_declaration(ok)
        check_dataset_task(ok, "toy")
    for none in (None, 0):
        with pytest.raises(ConfigError, match=r"toy: task 'classification' predicts classes, so the adapter must "
                                              r"declare num_classes"):
            check_dataset_task(dataset("classification", none), "toy")


def test_loading_a_spec_checks_its_dataset_s_task(monkeypatch):
    from fusebench import benchmarks
    from fusebench.typed import ConfigError

    monkeypatch.setattr(datasets.get("quickstart"), "task", "ranking")
    with pytest.raises(ConfigError, match=r"quickstart.yaml: dataset quickstart: task 'ranking' is not a registered "
                                          r"task family"):
        benchmarks.load("quickstart")
    monkeypatch.setattr(datasets.get("quickstart"), "task", "classification")
    monkeypatch.setattr(datasets.get("quickstart"), "num_classes", None)
    with pytest.raises(ConfigError, match=r"dataset quickstart: task 'classification' predicts classes"):
        benchmarks.load("quickstart")


@pytest.mark.parametrize("name", datasets.DATASETS.builtin())
def test_every_adapter_names_a_registered_task_with_its_classes(name):
    from fusebench.components.spec_check import check_dataset_task

    check_dataset_task(datasets.get(name), name)


def test_the_collate_check_follows_collate_not_the_task_id():
    """collate keeps targets that are not all tensors as a list, whatever the task; the conformance check asked a list
    of the task id ``detection`` only, so a plugin task's dataset with dict targets failed ``collate`` ("target batch
    must be a tensor") though collate and the run handle it."""
    import torch

    from fusebench.datasets.collate import collate
    from fusebench.datasets.conformance import ConformanceError, _check_batch

    class Toy:
        id, task = "toy_rank", "ranking"  # a plugin task family's id

    samples = [{"modalities": {"x": torch.full((2,), float(i))}, "target": {"order": torch.tensor([i, 0])}, "meta": {}}
               for i in range(3)]
    batch = collate(samples, names=["x"])
    assert isinstance(batch["target"], list) and len(batch["target"]) == 3
    _check_batch(Toy, batch, samples, ["x"])
    with pytest.raises(ConformanceError, match=r"toy_rank: collate: targets that are not all tensors must stay a "
                                               r"list of 3, got list"):
        _check_batch(Toy, {**batch, "target": batch["target"][:2]}, samples, ["x"])
    # tensor targets are still required stacked, [n, ...]
    flat = [{**s, "target": torch.tensor(i)} for i, s in enumerate(samples)]
    good = collate(flat, names=["x"])
    _check_batch(Toy, good, flat, ["x"])
    with pytest.raises(ConformanceError, match=r"target batch must be a tensor \[n, \.\.\.\] with n = 3"):
        _check_batch(Toy, {**good, "target": list(good["target"])}, flat, ["x"])


def test_the_target_check_is_the_task_family_s_own(monkeypatch):
    """The schema check asks the dataset's task (Task.target_problem) what a target must be; it branched on the four
    built-in ids, so a plugin task's targets were never checked. Expected verdicts worked out by hand."""
    import torch

    from fusebench import tasks
    from fusebench.datasets.conformance import ConformanceError, _check_target

    class Ranking(tasks.Task):  # a plugin task family: its targets are permutations
        id = "ranking_t"

        @classmethod
        def target_problem(cls, target, num_classes):
            ok = isinstance(target, torch.Tensor) and sorted(target.tolist()) == list(range(target.numel()))
            return None if ok else f"ranking target must be a permutation, got {target!r}"

    tasks.TASKS.get("classification")  # the built-ins registered before the table is replaced
    monkeypatch.setattr(tasks.TASKS, "_entries", {**tasks.TASKS._entries, "ranking_t": Ranking})
    Toy = type("Toy", (), {"id": "toy", "task": "ranking_t", "num_classes": None})
    _check_target(Toy, torch.tensor([2, 0, 1]), "train[0]")
    with pytest.raises(ConformanceError, match=r"toy: train\[0\]: ranking target must be a permutation"):
        _check_target(Toy, torch.tensor([2, 2, 1]), "train[0]")
    # the built-in families, one wrong target each
    Cls = type("Cls", (), {"id": "c", "task": "classification", "num_classes": 3})
    _check_target(Cls, torch.tensor(2), "s")
    for bad, message in ((torch.tensor(3), r"class 3 outside 0\.\.2"), (torch.tensor(1.0), r"long scalar tensor")):
        with pytest.raises(ConformanceError, match=message):
            _check_target(Cls, bad, "s")
    Det = type("Det", (), {"id": "d", "task": "detection", "num_classes": 2})
    boxes = torch.tensor([[0, 0, 0, 1, 1, 1, 0.0]])
    _check_target(Det, {"boxes": boxes, "labels": torch.tensor([1])}, "s")
    with pytest.raises(ConformanceError, match=r"box sizes \(dx, dy, dz\) must be positive"):
        _check_target(Det, {"boxes": boxes * torch.tensor([1, 1, 1, 1, 0, 1, 1]), "labels": torch.tensor([1])}, "s")
    Seg = type("Seg", (), {"id": "g", "task": "segmentation", "num_classes": 4})
    with pytest.raises(ConformanceError, match=r"segmentation labels in \[-2, 1\], expected -1\.\.3"):
        _check_target(Seg, torch.tensor([[-2, 1]]), "s")
