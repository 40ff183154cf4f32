"""The masked losses compute their means on the device (issue 33): no read of a count, no boolean selection.

``masked_mean`` (``infonce_pwe``, ``infonce_avg``) divides the kept sum by ``keep.sum()`` (a tensor) instead of
a count read on the host, and the MV losses (``mv_infonce``, ``mv_dhel``) take the mean over their valid samples
as their sum over their number instead of ``per[valid].mean()``. Checked here against the mean over the valid
entries computed in a loop, in value and gradient (one valid entry included); a mask leaving none: the error of
before in a direct call. Inside the loop's steps the objectives skip that test (it reads the device): the
Pretrainer tests the mask on the CPU batch (``host_batch``, each objective's ``mask_problem``), and the step of a
batch the objective would refuse raises the objective's error before any work, as the objective did.
"""

from __future__ import annotations

import datetime
import itertools
from pathlib import Path

import numpy as np
import pytest
import torch

from fusebench import benchmarks, objectives
from fusebench.cells.execute import run_cell
from fusebench.engine.loop import RunError
from fusebench.engine.pretrain import Pretrainer
from fusebench.objectives.infonce import masked_mean
from fusebench.objectives.mv_infonce import _MVBase
from fusebench.runtime.utils import deferred_value_checks
from fusebench.spec.request import CellRequest, RunOptions

pytestmark = pytest.mark.usefixtures("one_torch_thread")

MASKED = ["infonce_pwe", "infonce_avg", "mv_infonce", "mv_dhel"]
#: the errors of a mask that leaves nothing, as the losses raised them before issue 33 (word for word)
NO_TERM = "{}: the mask leaves no usable term (every view pair needs >= 2 samples present in both views)"
FEW = "{}: the mask leaves {} sample(s) with >= 2 present views; need >= 2"


def _loop_mean(x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """The slow reference: the kept entries collected one by one, summed in order, over their number."""
    kept = [x[idx] for idx in itertools.product(*map(range, x.shape)) if bool(keep[idx])]
    total = kept[0]
    for v in kept[1:]:
        total = total + v
    return total / len(kept)


def _bound(x: torch.Tensor, keep: torch.Tensor) -> float:
    """What two summation orders of the kept terms may differ by, over their number: a few ulps of sum |x|."""
    kept = x.detach().abs()[keep]
    return 4 * torch.finfo(x.dtype).eps * float(kept.sum()) / max(1, kept.numel())


def _keeps(shape: tuple[int, ...], g: torch.Generator) -> list[torch.Tensor]:
    one = torch.zeros(shape, dtype=torch.bool)
    one.view(-1)[int(torch.randint(one.numel(), (1,), generator=g))] = True
    return [torch.rand(shape, generator=g) > 0.4, one, torch.ones(shape, dtype=torch.bool)]


@pytest.mark.parametrize("deferred", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_masked_mean_is_the_mean_over_the_kept_terms(deferred: bool, dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(0)
    for shape in [(2, 3, 5), (2, 1, 40)]:
        for keep in _keeps(shape, g):
            x = (torch.randn(shape, generator=g, dtype=dtype) * 3).requires_grad_(True)
            ref_x = x.detach().clone().requires_grad_(True)
            if deferred:
                with deferred_value_checks():
                    got = masked_mean(x, keep, "infonce_pwe")
            else:
                got = masked_mean(x, keep, "infonce_pwe")
            ref = _loop_mean(ref_x, keep)
            got.backward()
            ref.backward()
            assert got.dtype == dtype and got.shape == ()
            torch.testing.assert_close(got, ref, rtol=0, atol=_bound(x, keep))  # summed in another order
            assert torch.equal(x.grad, ref_x.grad)  # 1 / count on each kept term, 0 elsewhere, exactly
            if int(keep.sum()) == 1:  # one kept term: the loss is that term, exactly
                assert torch.equal(got.detach(), x.detach()[keep][0])


@pytest.mark.parametrize("deferred", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_mv_mean_is_the_mean_over_the_valid_samples(deferred: bool, dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(1)
    for n in (5, 70):
        for valid in _keeps((n,), g):
            per = (torch.randn(n, generator=g, dtype=dtype) * 3).requires_grad_(True)
            ref_per = per.detach().clone().requires_grad_(True)
            mask = torch.ones(2, n, dtype=torch.bool)  # any mask: the masked path
            if deferred:
                with deferred_value_checks():
                    got = _MVBase._mean(per, valid, mask)
            else:
                got = _MVBase._mean(per, valid, mask)
            ref = _loop_mean(ref_per, valid)
            got.backward()
            ref.backward()
            torch.testing.assert_close(got, ref, rtol=0, atol=_bound(per, valid))
            assert torch.equal(per.grad, ref_per.grad)
            if int(valid.sum()) == 1:
                assert torch.equal(got.detach(), per.detach()[valid][0])


def test_no_kept_term_raises_the_error_of_before_in_a_direct_call() -> None:
    x = torch.randn(2, 3, 4, requires_grad=True)
    none = torch.zeros(2, 3, 4, dtype=torch.bool)
    with pytest.raises(ValueError) as err:
        masked_mean(x, none, "infonce_pwe")
    assert str(err.value) == NO_TERM.format("infonce_pwe")
    with deferred_value_checks():  # the loop tested the mask on the host: here 0 / 1, no gradient
        got = masked_mean(x, none, "infonce_pwe")
    got.backward()
    assert got.item() == 0.0 and torch.equal(x.grad, torch.zeros_like(x))
    per = torch.randn(5, requires_grad=True)
    with deferred_value_checks():
        got = _MVBase._mean(per, torch.zeros(5, dtype=torch.bool), torch.ones(2, 5, dtype=torch.bool))
    got.backward()
    assert got.item() == 0.0 and torch.equal(per.grad, torch.zeros_like(per))


@pytest.mark.parametrize("name", MASKED)
def test_objectives_refuse_a_mask_leaving_nothing_with_the_error_of_before(name: str) -> None:
    x = torch.randn(3, 4, 5, dtype=torch.float64)
    single = torch.zeros(3, 4, dtype=torch.bool)
    single[0] = True  # every sample in one view only
    one = single.clone()
    one[1, 2] = True  # sample 2 in two views: still one pair of 1 sample, one valid MV sample
    for mask, count in ((single, 0), (one, 1)):
        with pytest.raises(ValueError) as err:
            objectives.build(name)(x, mask=mask)
        expected = NO_TERM.format(name) if name.startswith("infonce") else FEW.format(name, count)
        assert str(err.value) == expected
        assert objectives.build(name).mask_problem(mask) == expected


@pytest.mark.parametrize("name", MASKED)
def test_mask_problem_is_what_a_direct_call_raises(name: str) -> None:
    """Every mask of k = 2 and 3 views of 3 samples, and random sparse masks of 4 views of 5 samples: the
    objective's ``mask_problem`` (the host's test) is the message of the error a direct call raises, or None
    exactly when the call returns a loss; and inside the deferred checks the loss of an accepted mask is the
    direct call's, bit for bit, gradient too."""
    module = objectives.build(name)
    g = torch.Generator().manual_seed(2)
    masks = [torch.tensor(bits, dtype=torch.bool).reshape(k, 3) for k in (2, 3)
             for bits in itertools.product([False, True], repeat=3 * k)]
    masks += [torch.rand(4, 5, generator=g) > 0.7 for _ in range(60)]
    refused = 0
    for mask in masks:
        x = torch.randn(mask.shape[0], mask.shape[1], 4, generator=g, dtype=torch.float64, requires_grad=True)
        try:
            loss = module(x, mask=mask)
        except ValueError as e:
            assert module.mask_problem(mask) == str(e), mask
            refused += 1
            continue
        assert module.mask_problem(mask) is None, mask
        if bool(mask.all()):
            continue
        loss.backward()
        xd = x.detach().clone().requires_grad_(True)
        with deferred_value_checks():
            deferred = module(xd, mask=mask)
        deferred.backward()
        assert torch.equal(deferred, loss) and torch.equal(xd.grad, x.grad)
    assert refused > 50 and refused < len(masks) - 50  # both kinds are exercised


# ---------------------------------------------------------------------------------------------- the Pretrainer
DIMS = {"a": 5, "b": 6, "c": 7}


def _pretrainer(objective: str, micro_batch: int | None = None) -> Pretrainer:
    from fusebench.encoders.mlp import MLPEncoder
    from fusebench.spec.config import PretrainConfig

    torch.manual_seed(0)
    model = MLPEncoder(DIMS, num_features=8, hidden=16).double()
    conf = PretrainConfig(projection_dim=8, projection_hidden=16)
    return Pretrainer(model, objectives.build(objective), conf, total_steps=10, micro_batch=micro_batch).double()


def _batch(present: torch.Tensor, names: list[str] | None = None) -> dict:
    names = names or list(DIMS)
    n = present.shape[1]
    g = torch.Generator().manual_seed(1)
    return {"names": names, "present": present, "target": torch.zeros(n, dtype=torch.int64),
            "modalities": {m: torch.randn(n, DIMS[m], generator=g, dtype=torch.float64) for m in names}}


def test_the_mask_in_model_order_is_a_stack_of_rows() -> None:
    """The batch's rows put in the model's modality order with integer indices and a stack: the values of
    ``present[list]`` (that made an index tensor on the host at every step)."""
    pre = _pretrainer("infonce_pwe")
    present = torch.rand(3, 8, generator=torch.Generator().manual_seed(3)) > 0.3
    present[:, 0] = False
    for names in (["a", "b", "c"], ["c", "a", "b"]):
        got = pre._mask(_batch(present, names))
        assert torch.equal(got, present[[names.index(m) for m in pre.model.modalities]])


@pytest.mark.parametrize("objective", MASKED)
def test_the_host_finds_what_the_objective_refuses(objective: str) -> None:
    """host_batch tests the CPU batch's mask; the step raises that error first thing, as the direct call does."""
    pre = _pretrainer(objective)
    bad = torch.zeros(3, 6, dtype=torch.bool)
    bad[2] = True  # in the model's order: every sample in view c only
    bad[0, 1] = True
    batch = _batch(bad[[1, 2, 0]], ["b", "c", "a"])  # the batch's own order
    with pytest.raises(ValueError) as direct:
        pre(batch)
    host = pre.host_batch(batch)
    assert host["present_all"] is False and host["mask_checked"] is True
    assert host["mask_problem"] == str(direct.value)
    with deferred_value_checks(), pytest.raises(ValueError) as step:
        pre(host)
    assert str(step.value) == str(direct.value)
    # a batch that skipped host_batch: inside the deferred checks the Pretrainer tests the mask itself
    with deferred_value_checks(), pytest.raises(ValueError) as unchecked:
        pre(batch)
    assert str(unchecked.value) == str(direct.value)
    good = torch.ones(3, 6, dtype=torch.bool)
    good[0, :2] = False
    host = pre.host_batch(_batch(good))
    assert host["mask_checked"] is True and host["mask_problem"] is None
    with deferred_value_checks():
        assert torch.equal(pre(host), pre(_batch(good)))


def test_a_micro_batch_without_a_usable_term_is_left_out_and_the_others_share_its_weight() -> None:
    """With micro-batches the objective is called on chunks of the mask. A chunk it refuses (too few samples with two
    views: common with missing views and small chunks) is left out of the loss, the others weighted by their sizes;
    only a batch none of whose chunks is usable is refused. (A refused chunk stopped the run, although the whole batch
    had many usable samples.) Expected values: the objective called by hand on the kept chunks."""
    pre = _pretrainer("mv_dhel", micro_batch=4)
    present = torch.ones(3, 12, dtype=torch.bool)
    present[1:, 4:7] = False  # the second chunk (samples 4..7) keeps one sample with >= 2 views: refused alone
    batch = _batch(present)
    assert [p is None for p in pre.chunk_problems(present)] == [True, False, True]
    z = pre.project(pre.model.embed(batch), pre.proj)
    obj = objectives.build("mv_dhel")
    want = (obj(z[:, 0:4], mask=present[:, 0:4]).float() * 4 / 8 + obj(z[:, 8:12], mask=present[:, 8:12]).float() * 4 / 8)
    assert torch.equal(pre(batch), want)  # a direct call (the mask tested where it is)
    host = pre.host_batch(batch)  # in the training loop: the host tests the CPU mask, the step reads nothing
    assert host["mask_problem"] is None and host["mask_chunks"] == [True, False, True]
    with deferred_value_checks():
        assert torch.equal(pre(host), want)
        assert torch.equal(pre(batch), want)  # a batch that skipped host_batch: tested on the device, the same
    # every chunk refused: the batch is, with the first chunk's error, on the host and in a direct call
    none = present.clone()
    none[1:, :] = False
    with pytest.raises(ValueError) as direct:
        pre(_batch(none))
    assert pre.host_batch(_batch(none))["mask_problem"] == str(direct.value) == FEW.format("mv_dhel", 0)
    # no chunk left out: the weights are the sizes over the whole batch, as before (bit for bit)
    full = torch.ones(3, 12, dtype=torch.bool)
    full[0, 3] = False
    b = _batch(full)
    z = pre.project(pre.model.embed(b), pre.proj)
    want = sum(obj(z[:, lo:lo + 4], mask=full[:, lo:lo + 4]).float() * (4 / 12) for lo in (0, 4, 8))
    assert "mask_chunks" not in pre.host_batch(b) and torch.equal(pre(b), torch.zeros((), dtype=torch.float32) + want)


def _dist_worker(rank: int, world: int, init_file: str, out_dir: str, present: torch.Tensor) -> None:
    import gc

    import torch.distributed as dist

    from fusebench.runtime.distributed import gather_with_grad, shard_sizes

    torch.set_num_threads(1)
    # a rank left waiting in a collective the other never joins fails after a minute instead of hanging the suite
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    try:
        pre = _pretrainer("mv_dhel")
        full = _batch(present)
        n = present.shape[1]
        lo, hi = rank * n // world, (rank + 1) * n // world
        shard = {**full, "present": present[:, lo:hi], "target": full["target"][lo:hi],
                 "modalities": {m: t[lo:hi] for m, t in full["modalities"].items()}, "shard_sizes": shard_sizes(n, world)}
        host = pre.host_batch(shard)
        out = {"checked": host.get("mask_checked"), "problem": host.get("mask_problem"), "full": host["present_all"]}
        try:
            with deferred_value_checks():
                out["loss"] = pre(host, gather=gather_with_grad).detach()
        except ValueError as e:
            out["error"] = str(e)
        torch.save(out, Path(out_dir) / f"rank{rank}.pt")
        del pre
        gc.collect()
        dist.barrier()
    finally:
        dist.destroy_process_group()


@pytest.mark.slow  # two gloo processes
def test_a_distributed_shard_the_host_cannot_settle_is_tested_on_the_gathered_mask(tmp_path: Path) -> None:
    """The objective sees every rank's shard gathered: a shard that fails alone may pass gathered. Rank 0's shard
    (samples 0..3) keeps one sample with >= 2 views: not settled on its host, the step tests the gathered mask
    (which passes: the loss of the single-process batch); with rank 1's shard as poor, every rank raises the
    single-process error."""
    import torch.multiprocessing as mp

    ok = torch.ones(3, 8, dtype=torch.bool)
    ok[1:, 1:4] = False
    full = ok.clone()  # rank 1's shard complete: it gathers its full mask, as rank 0 gathers its own
    ok[0, 7] = False  # a missing view on rank 1 too
    bad = ok.clone()
    bad[1:, 4:] = False
    for case, present in (("ok", ok), ("full", full), ("bad", bad)):
        folder = tmp_path / case
        folder.mkdir()
        mp.start_processes(_dist_worker, args=(2, str(folder / "init"), str(folder), present), nprocs=2, join=True,
                           start_method="spawn")
        got = [torch.load(folder / f"rank{r}.pt", weights_only=True) for r in range(2)]
        assert got[0]["checked"] is False and got[0]["problem"] is None
        assert got[1]["full"] is (case == "full")
        if case in ("ok", "full"):
            assert got[1]["checked"] is (True if case == "ok" else None)
            ref = _pretrainer("mv_dhel")(_batch(present)).detach()
            for g in got:
                torch.testing.assert_close(g["loss"], ref, rtol=1e-10, atol=1e-12)
        else:
            assert got[1]["checked"] is False
            with pytest.raises(ValueError) as direct:
                _pretrainer("mv_dhel")(_batch(present))
            assert str(direct.value) == FEW.format("mv_dhel", 1)
            assert [g.get("error") for g in got] == [str(direct.value)] * 2


@pytest.mark.parametrize("objective, count", [("infonce_pwe", None), ("mv_dhel", 1)])
def test_a_batch_the_loss_refuses_stops_the_run_naming_its_step(objective: str, count: int | None,
                                                               monkeypatch: pytest.MonkeyPatch,
                                                               tmp_path: Path) -> None:
    """pretrain.missing_rate 0.3, the third batch's mask leaving nothing usable: the run stops at step 3 with the
    objective's error (the same RunError as when the objective raised it inside the step)."""
    from fusebench.probes import missing_views

    real = missing_views.presence_mask
    calls = {"n": 0}

    def third_is_bad(n, k, rate, seed):
        calls["n"] += 1
        mask = real(n, k, rate, seed)
        if calls["n"] == 3:
            mask = np.zeros((n, k), dtype=bool)
            mask[:, 0] = True
            if count:
                mask[0, 1] = True  # one sample in two views
        return mask

    monkeypatch.setattr(missing_views, "presence_mask", third_is_bad)
    tiny = {"dataset.synthetic_spec": {"num_samples": 128, "seed": 0}, "pretrain.epochs": 1,
            "pretrain.batch_size": 32, "downstream.epochs": 1, "checkpoint_every": 1000,
            "pretrain.missing_rate": 0.3}
    spec = benchmarks.load("quickstart", overrides=tiny)
    message = NO_TERM.format(objective) if count is None else FEW.format(objective, count)
    with pytest.raises(RunError) as err:
        run_cell(CellRequest(spec, objective, 0, tmp_path), RunOptions(progress=False))
    assert str(err.value).startswith(f"pretrain step 3 (epoch 0): ValueError: {message}; "), str(err.value)
