"""TupleInfoNCE's sample optimisation (Algorithm 1) trains B candidates per epoch outside the phase loop: those steps
must not wait for the device either (issue #33, item 3; a review counted about 6 reads per candidate step): the
batch's mask is checked on the host, the objective's scans deferred, and the losses read once per
LOSS_READ_EVERY steps, where a non-finite one still stops the cell naming its candidate and step."""

from __future__ import annotations

import math

import numpy as np
from pathlib import Path

import pytest
import torch

from fusebench import benchmarks
from fusebench.cells.execute import run_cell
from fusebench.components import tuple_optim
from fusebench.runtime import utils
from fusebench.spec.request import CellRequest, RunOptions
from test_host_syncs import HostReads  # the counting mode of tests/test_host_syncs.py

STEPS = 20  # candidate steps: one read after 16, one at the end
TINY = {"dataset.synthetic_spec": {"num_samples": 128, "seed": 0}, "pretrain.epochs": 2, "pretrain.batch_size": 4,
        "downstream.epochs": 1, "checkpoint_every": 1000,
        "pretrain.methods.tuple_infonce": {"sample_optimisation": True, "candidates": 2, "candidate_steps": STEPS}}


def test_candidate_steps_read_the_device_once_per_block_of_steps(tmp_path: Path, monkeypatch) -> None:
    mode, trained = HostReads(), []
    real = tuple_optim.TupleSampleOptimiser._train

    def fetched(batches):  # data loading is left out of the count (the loader's own draws), as in test_host_syncs
        it = None
        while True:
            mode.active -= 1
            try:
                it = iter(batches) if it is None else it  # a loader draws its base seed here
                batch = next(it)
            except StopIteration:
                return
            finally:
                mode.active += 1
            yield batch

    def counted(self, opt, batches, *args, **kwargs):
        mode.step += 1  # one count per candidate
        mode.active += 1
        try:
            taken = real(self, opt, fetched(batches), *args, **kwargs)
        finally:
            mode.active -= 1
        trained.append(taken)
        return taken

    monkeypatch.setattr(tuple_optim.TupleSampleOptimiser, "_train", counted)
    spec = benchmarks.load("quickstart", overrides=TINY)
    with mode:
        run_cell(CellRequest(spec, "tuple_infonce", 0, tmp_path), RunOptions(progress=False, synthetic=True))
    assert trained and set(trained) == {STEPS}, trained  # every candidate trained its steps
    loss_reads = [r for r in mode.reads if "read_losses" in r[2]]
    # left out, as in test_host_syncs: the presence mask read on the host batch before its copy, and what a
    # candidate's first step builds for the later ones (the mixture weights of its alpha, from Python numbers on the
    # CPU: one build per candidate, none in its later steps)
    built = [r for r in mode.reads if "(mixture_weights)" in r[2]]
    others = [r for r in mode.reads if not any(f in r[2] for f in ("read_losses", "(host_batch)", "(mixture_weights)"))]
    assert others == [], others[:5]
    per_build = {"__bool__": 2, "__float__": 1, "tolist": 1}  # isfinite(a).all(), (a < 0).any(); a.sum(); a.tolist()
    for cand in set(r[0] for r in built):
        mine = [r[1] for r in built if r[0] == cand]
        assert {w: mine.count(w) for w in set(mine)} in ({}, per_build), (cand, mine)
    per_candidate = math.ceil(STEPS / utils.LOSS_READ_EVERY)  # 16 steps, then the 4 left at the end
    assert len(loss_reads) == per_candidate * len(trained), loss_reads


def test_a_non_finite_candidate_loss_stops_the_cell_naming_the_candidate_and_step(tmp_path: Path,
                                                                                  monkeypatch) -> None:
    from fusebench.engine import pretrain

    real = pretrain.Pretrainer.forward
    calls = {"n": 0}

    def forward(self, batch, gather=None):
        loss = real(self, batch, gather)
        if self.training and getattr(self, "_candidate", False):
            calls["n"] += 1
            if calls["n"] == 3:  # the third step of the first candidate
                return loss * torch.tensor(float("nan"))
        return loss

    real_train = tuple_optim.TupleSampleOptimiser._train

    def train(self, *args, **kwargs):
        self.pre._candidate = True
        try:
            return real_train(self, *args, **kwargs)
        finally:
            self.pre._candidate = False

    monkeypatch.setattr(pretrain.Pretrainer, "forward", forward)
    monkeypatch.setattr(tuple_optim.TupleSampleOptimiser, "_train", train)
    spec = benchmarks.load("quickstart", overrides=TINY)
    with pytest.raises(RuntimeError, match=r"tuple_infonce sample optimisation: loss nan at candidate 0 step 2 "
                                           r"\(epoch 0, alpha="):
        run_cell(CellRequest(spec, "tuple_infonce", 0, tmp_path), RunOptions(progress=False, synthetic=True))


# ------------------------------------------------------------------------------------- the rewards' accuracies
class _SumFusion(torch.nn.Module):
    """Identity projections, fusion = the sum of the slots: g(v'^j) = e_j (augmented), g(v_bar^j) = sum_{l != j} e_l."""

    def __init__(self, emb: torch.Tensor) -> None:
        super().__init__()
        k, _, d = emb.shape
        self.model = type("Fixed", (), {"embed": lambda _, batch: emb})()
        self.proj = torch.nn.ModuleDict({str(l): torch.nn.Identity() for l in range(k)})
        self.fusion = torch.nn.Linear(k * d, d, bias=False)
        with torch.no_grad():
            self.fusion.weight.copy_(torch.cat([torch.eye(d)] * k, dim=1))

    def project(self, emb, heads):
        return torch.stack([heads[str(l)](emb[l]) for l in range(emb.shape[0])])


def _slow_accuracies(emb: torch.Tensor, zetas: torch.Tensor, seed: int) -> list[list[float]]:
    """A^j (Eqs. 3-4) by loops in float64: the share of rows n whose augmented e_j[n] is strictly closer (cosine)
    to rest_j[n] = sum_{l != j} e_l[n] than to every other rest_j[m]; the noise eps drawn as the docstring says
    (randn of emb's shape from a generator seeded with ``seed``; no dropout)."""
    eps = torch.randn(emb.shape, generator=torch.Generator().manual_seed(seed)).double().numpy()
    e = emb.double().numpy()
    k, n, _ = e.shape
    cos = lambda a, b: float(a @ b) / float(np.linalg.norm(a) * np.linalg.norm(b))  # noqa: E731
    out = []
    for zeta in zetas.tolist():
        row = []
        for j in range(k):
            single = e[j] + zeta[j] * eps[j]
            rest = sum(e[l] for l in range(k) if l != j)
            hits = sum(all(cos(single[i], rest[i]) > cos(single[i], rest[m]) for m in range(n) if m != i) for i in range(n))
            row.append(hits / n)
        out.append(row)
    return out


def test_the_rewards_accuracies_are_read_in_one_copy_and_are_the_slow_ones() -> None:
    """``discrimination_accuracies`` over a grid of G zetas and K modalities reads the device once (before: 3 reads
    per accuracy, 3 G K: two finiteness tests and the value, each a wait on a GPU), and gives the accuracies a
    slow float64 loop gives."""
    g = torch.Generator().manual_seed(5)
    emb = torch.randn(3, 16, 4, generator=g) + 0.8 * torch.randn(1, 16, 4, generator=g)  # K = 3 correlated views
    zetas = torch.tensor([[0.0, 0.0, 0.0], [0.3, 0.1, 0.6], [1.5, 0.0, 3.0], [0.05, 2.0, 0.2]], dtype=torch.float64)
    mode = HostReads()
    mode.active = 1
    with mode:
        acc = tuple_optim.discrimination_accuracies(_SumFusion(emb), {}, zetas, seed=7, dropout=0.0)
    assert [w for _, w, _ in mode.reads] == ["tolist"], mode.reads
    assert acc.dtype == torch.float64 and acc.shape == (4, 3)
    want = _slow_accuracies(emb, zetas, seed=7)
    assert len({v for row in want for v in row}) > 3  # the grid moves the accuracies
    assert acc.tolist() == want


def test_non_finite_embeddings_still_stop_the_rewards() -> None:
    emb = torch.randn(2, 8, 4, generator=torch.Generator().manual_seed(0))
    emb[1, 3, 0] = float("nan")
    with pytest.raises(ValueError, match="^cross_modal_discrimination_accuracy: embeddings contain NaN or Inf$"):
        tuple_optim.discrimination_accuracies(_SumFusion(emb), {}, torch.zeros(2, 2), seed=0, dropout=0.0)
