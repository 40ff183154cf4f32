"""The evaluation loops copy their results to the host once per block of batches, never at every batch
(issue 33, item 3, for evaluation: ``fusebench.runtime.gather``).

The reads are counted on the CPU with the conversion counter of ``tests/test_host_syncs.py`` (a ``.cpu()`` of a
CPU tensor is the same call a GPU run makes). The gathered values are checked against a per-batch ``.cpu()`` of
the same tensors (what the loops did before), bit for bit, and the scores against the metrics computed on those.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from fusebench import benchmarks, metrics as M, tasks
from fusebench.runtime.gather import HostGather

from test_host_syncs import HostReads

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _gather_reads(mode: HostReads) -> list[tuple[int, str, str]]:
    return [r for r in mode.reads if r[2].startswith("gather.py")]


def _batches(n: int, seed: int = 0) -> list[dict]:
    """``n`` batches of mixed trees: float32, int64 and bfloat16 tensors of varying shapes, a dict, a list."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        rows = 1 + i % 4
        out.append({"x": torch.randn(rows, 3, generator=g), "ids": torch.randint(0, 9, (rows,), generator=g),
                    "h": torch.randn(rows, 2, generator=g).to(torch.bfloat16),
                    "scenes": [{"boxes": torch.randn(j + 1, 7, generator=g), "labels": torch.arange(j + 1)}
                               for j in range(i % 3)], "tag": f"b{i}"})
    return out


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


@pytest.mark.parametrize("n, every", [(1, 4), (7, 3), (9, 3), (40, 16)])
def test_a_gather_holds_each_batch_bit_for_bit_with_one_copy_per_dtype_per_block(n: int, every: int) -> None:
    batches = _batches(n)
    mode, gather = HostReads(), HostGather(every=every)
    mode.active = 1
    with mode:
        for b in batches:
            gather.add(b)
        got = gather.result()
    assert len(got) == n and all(_same(g, b) for g, b in zip(got, batches))
    reads = _gather_reads(mode)
    assert reads == [r for r in mode.reads], mode.reads  # nothing else read
    # per block: one copy for each dtype present in it (float32, int64, bfloat16; a block of 1-row
    # batches without scenes still holds all three)
    assert [w for _, w, _ in reads] == ["cpu"] * (3 * math.ceil(n / every))


def test_a_gather_copies_early_when_its_block_grows_past_the_byte_limit() -> None:
    mode, gather = HostReads(), HostGather(every=100, max_bytes=1000)
    mode.active = 1
    with mode:
        for _ in range(4):
            gather.add(torch.zeros(100, dtype=torch.float32))  # 400 bytes each: copied at the third add
        assert len(_gather_reads(mode)) == 1 and len(gather) == 4
        out = gather.result()
    assert len(_gather_reads(mode)) == 2 and len(out) == 4


# ---------------------------------------------------------------------------------------- the tasks' gathering
def _task_batches(task_id: str, n: int, seed: int = 1) -> list[tuple]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        rows = 2 + i % 3
        if task_id == "classification":
            out.append((torch.randn(rows, 4, generator=g).to(torch.bfloat16), torch.randint(0, 4, (rows,), generator=g)))
        elif task_id == "regression":
            out.append((torch.randn(rows, generator=g).to(torch.float16), torch.randn(rows, generator=g)))
        elif task_id == "segmentation":
            out.append((torch.randn(rows, 3, 5, 6, generator=g), torch.randint(-1, 3, (rows, 5, 6), generator=g)))
        else:
            def scene(m):
                centre = torch.rand(m, 3, generator=g) * 4
                return {"boxes": torch.cat([centre, torch.rand(m, 3, generator=g) + 0.5, torch.zeros(m, 1)], 1),
                        "labels": torch.randint(0, 2, (m,), generator=g)}
            truth = [scene(1 + j) for j in range(rows)]
            pred = [{**t, "scores": torch.rand(len(t["labels"]), generator=g)} for t in truth]
            out.append((pred, truth))
    return out


METRICS = {"classification": ["acc", "mf1"], "regression": ["mae", "corr"],
           "segmentation": ["miou", "pixel_acc"], "detection": ["map_0.25"]}
CLASSES = {"classification": 4, "regression": None, "segmentation": 3, "detection": 2}


@pytest.mark.parametrize("task_id", sorted(METRICS))
def test_a_task_reads_the_device_once_per_block_and_scores_what_per_batch_copies_score(task_id: str) -> None:
    n = 37
    task = tasks.create(task_id, num_classes=CLASSES[task_id])
    raw = _task_batches(task_id, n)
    mode = HostReads()
    mode.active = 1
    with mode:
        for out, target in raw:
            pred = out if task_id == "detection" else task.predictions(out, {"target": target})
            task.add(pred, target)
        adds = list(mode.reads)
        got = task.score(METRICS[task_id])
    # during the adds: the two full blocks' copies only (16 batches each), from the gather
    assert adds == _gather_reads(mode)[:len(adds)] and len(adds) == 2 * len({*_dtypes(task_id)})
    # the reference: each batch copied on its own (the old per-batch .cpu()), widened, then the metric
    if task_id == "detection":
        preds = [d for out, _ in raw for d in out]
        truth = [t for _, ts in raw for t in ts]
        want = {m: float(M.get(m)(preds, truth, num_classes=2)) for m in METRICS[task_id]}
    else:
        yp = torch.cat([_reference_pred(task_id, out, t).cpu().reshape(-1) for out, t in raw])
        yt = torch.cat([t.cpu().reshape(-1) for _, t in raw])
        kw = {"num_classes": 3, "ignore_index": -1} if task_id == "segmentation" else {}
        want = {m: float(M.get(m)(yp.numpy(), yt.numpy(), **kw)) for m in METRICS[task_id]}
    assert got == want


def _dtypes(task_id: str) -> list[torch.dtype]:
    """The dtypes of one batch's (prediction, target) pair after widening: one copy each per block."""
    return {"classification": [torch.int64], "regression": [torch.float32],
            "segmentation": [torch.int64], "detection": [torch.float32, torch.int64]}[task_id]


def _reference_pred(task_id: str, out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    if task_id == "classification":
        return out.float().argmax(dim=-1)
    if task_id == "regression":
        return out.float()
    return out.argmax(dim=1)


# ---------------------------------------------------------------------------------------- a model's evaluation
def test_evaluating_and_featurising_a_model_reads_once_per_block_of_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    from fusebench.cells.standard import build_model
    from fusebench.engine import evaluate as E
    from fusebench.engine.data import build_datasets, make_loader
    from fusebench.engine.evaluate import evaluate, features

    spec = benchmarks.load("quickstart", synthetic=True, overrides={"downstream.batch_size": 4})
    ds = build_datasets(spec, True, None, 0, roles=("test",))["test"]
    torch.manual_seed(0)
    model = build_model(spec, ds).eval()
    dev = torch.device("cpu")
    batches = math.ceil(len(ds) / 4)
    assert batches > 16  # more than one block

    mode = HostReads()

    def loader(*args):  # the loader's own draws and the scoring on the host are not counted
        it, per_epoch = make_loader(*args)
        return mode.paused(lambda: list(it))(), per_epoch

    monkeypatch.setattr(E, "make_loader", loader)
    for cls in {type(tasks.for_dataset(ds))}:
        monkeypatch.setattr(cls, "score", mode.paused(cls.score))
    mode.active = 1
    with mode:
        scores = evaluate(model, ds, spec, dev, 0)
        x, y = features(model, ds, spec, dev, 0)
    blocks = math.ceil(batches / 16)
    # evaluate: one copy per block (the class ids and the labels are int64); features: one (float32)
    assert [w for _, w, _ in mode.reads] == ["cpu"] * 2 * blocks and mode.reads == _gather_reads(mode), mode.reads

    # the reference: per-batch copies
    loader, _ = make_loader(ds, 4, False, 0, 0)
    preds, targets, xs = [], [], []
    with torch.no_grad():
        for batch in loader:
            preds.append(model.predict(model(batch), batch).cpu())
            targets.append(batch["target"].cpu())
            z = model.embed(batch).float().cpu()
            xs.append(z.permute(1, 0, 2).reshape(z.shape[1], -1))
    yp, yt = torch.cat(preds).numpy(), torch.cat(targets).numpy()
    assert scores == {m: float(M.get(m)(yp, yt)) for m in spec.metrics}
    assert torch.equal(x, torch.cat(xs)) and torch.equal(y, torch.cat(targets)) and np.isfinite(x.numpy()).all()
