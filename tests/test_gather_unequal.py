"""gather_with_grad with unequal shards (the last batch of an epoch, a batch not divisible by the world size):
values and gradients equal a single-process computation on the whole tensor (2 and 3 gloo processes)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def _full(n: int) -> torch.Tensor:  # [k=2, n, d=3], float64, the same on every rank
    return torch.arange(2 * n * 3, dtype=torch.float64).reshape(2, n, 3).div(7.0).sin()


def _loss(g: torch.Tensor) -> torch.Tensor:
    # a loss that mixes samples (every output depends on every sample) and weights each position differently, so a
    # gradient sent to the wrong sample, the padding, or scaled wrongly shows
    w = torch.arange(1, g.numel() + 1, dtype=g.dtype).reshape(g.shape).cos()
    return (w * g).sum() + (g.sum(dim=1) ** 2).sum() + torch.logsumexp(g.flatten(), 0)


def _worker(rank: int, world: int, init_file: str, out_dir: str, n: int, pass_sizes: bool) -> None:
    from fusebench.runtime.distributed import gather_with_grad, shard_sizes

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        lo, hi = rank * n // world, (rank + 1) * n // world
        x = _full(n)[:, lo:hi].clone().requires_grad_(True)
        g = gather_with_grad(x, dim=1, sizes=shard_sizes(n, world) if pass_sizes else None)
        loss = _loss(g)
        loss.backward()
        grad = x.grad.clone()
        dist.all_reduce(grad.new_zeros(1))  # a collective after backward: both ranks are done
        # what DDP / average_gradients do to a parameter's gradient: the mean over ranks; for the input itself
        # the gradient of this rank's shard is W x its slice of the single-process gradient
        torch.save({"gathered": g.detach(), "loss": loss.detach(), "grad": grad, "lo": lo, "hi": hi},
                   Path(out_dir) / f"rank{rank}.pt")
        dist.barrier()
    finally:
        dist.destroy_process_group()


@pytest.mark.slow  # a few seconds: gloo processes
@pytest.mark.parametrize("world,n,pass_sizes", [(2, 7, True), (2, 7, False), (3, 8, True), (3, 4, False)])
def test_gather_with_grad_unequal_shards_matches_single_process(tmp_path: Path, world: int, n: int,
                                                                pass_sizes: bool) -> None:
    full = _full(n).requires_grad_(True)
    loss = _loss(full)
    loss.backward()
    mp.start_processes(_worker, args=(world, str(tmp_path / "init"), str(tmp_path), n, pass_sizes), nprocs=world,
                       join=True, start_method="spawn")
    sizes = []
    for rank in range(world):
        got = torch.load(tmp_path / f"rank{rank}.pt", weights_only=True)
        sizes.append(got["hi"] - got["lo"])
        assert torch.equal(got["gathered"], full.detach())  # values: the whole tensor, in rank order, no padding
        torch.testing.assert_close(got["loss"], loss.detach(), rtol=1e-12, atol=1e-12)
        # every rank computes the same loss; its shard's gradient is W times the single-process slice, which the
        # mean over ranks of a parameter's gradient (DDP) turns back into the single-process value
        torch.testing.assert_close(got["grad"], world * full.grad[:, got["lo"]:got["hi"]], rtol=1e-12, atol=1e-12)
    assert len(set(sizes)) == 2  # the shards really differ in size
