"""The blocked mode of the reference Sinkhorn solver (``dense_sinkhorn(blocked=True)``, the default off the CPU):
the per-sweep loop's sweeps and answer, bit for bit, with one host read per block of sweeps.

Forced on the CPU here: the same calls on the same device, so every output must be ``torch.equal`` / ``==`` to the
per-sweep loop's (the default on the CPU), including a solve that stops at ``max_iter`` and block lengths that do
and do not divide the sweep count.
"""

from __future__ import annotations

import math
import warnings

import pytest
import torch

import test_host_syncs  # the host-read counter of the training-step test
from fusebench.objectives import build, sinkhorn
from fusebench.objectives.sinkhorn import DENSE_BLOCK_SWEEPS, dense_sinkhorn

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _kernel(k: int, n: int, eps: float, dtype: torch.dtype, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return -torch.rand([n] * k, generator=g, dtype=dtype) / eps


def _same(a, b) -> None:
    assert a.iterations == b.iterations
    assert a.marginal_error == b.marginal_error  # both Python floats, the same sum
    assert a.converged == b.converged
    assert torch.equal(a.log_u, b.log_u)
    assert torch.equal(a.log_p, b.log_p)
    assert isinstance(b.mass, torch.Tensor) and b.mass.dim() == 0 and b.mass.dtype == torch.float64
    assert float(b.mass) == a.mass


@pytest.mark.parametrize("k,n,eps,tol,max_iter,dtype", [
    (2, 6, 0.5, 1e-3, 1000, torch.float64),
    (2, 8, 0.05, 1e-9, 1000, torch.float64),
    (3, 5, 0.2, 1e-6, 1000, torch.float32),
    (3, 4, 0.02, 1e-12, 13, torch.float64),  # stops at max_iter (13: not a multiple of the block)
    (2, 7, 0.01, 1e-12, 16, torch.float32),  # stops at max_iter, a multiple of the block
    (2, 5, 1.0, 1.0, 1000, torch.float64),  # stops after the first sweep
    (2, 5, 0.1, 1e-3, 1, torch.float64),  # max_iter = 1
])
@pytest.mark.parametrize("block", [None, 1, 3])
def test_blocked_matches_the_per_sweep_loop_bit_for_bit(k, n, eps, tol, max_iter, dtype, block) -> None:
    log_k = _kernel(k, n, eps, dtype, seed=k * 100 + n)
    ref = dense_sinkhorn(log_k, tol, max_iter)  # the CPU default: the per-sweep loop
    assert not isinstance(ref.mass, torch.Tensor)
    got = dense_sinkhorn(log_k, tol, max_iter, blocked=True, block=block)
    _same(ref, got)
    if max_iter in (13, 16):
        assert not got.converged and got.iterations == max_iter


def test_blocked_is_the_default_off_the_cpu_only() -> None:
    assert not sinkhorn.dense_blocked_by_default(torch.device("cpu"))
    assert sinkhorn.dense_blocked_by_default(torch.device("cuda"))
    assert sinkhorn.dense_blocked_by_default(torch.device("mps"))


@pytest.mark.parametrize("bad", [dict(blocked=1), dict(block=0), dict(block=True), dict(block=2.0)])
def test_blocked_arguments_are_checked(bad) -> None:
    with pytest.raises(ValueError, match="dense_sinkhorn"):
        dense_sinkhorn(_kernel(2, 4, 0.5, torch.float64, 0), 1e-3, 10, **bad)


@pytest.mark.parametrize("eps,tol,max_iter", [(0.5, 1e-3, 1000), (0.05, 1e-8, 1000), (0.01, 1e-12, 11)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_matching_gap_in_blocked_mode(eps, tol, max_iter, dtype, monkeypatch) -> None:
    """The loss, its gradient and every statistic are the per-sweep path's; the statistics stay 0-dim
    float64 tensors (not read) in blocked mode."""
    g = torch.Generator().manual_seed(7)
    views = torch.randn(2, 9, 5, generator=g, dtype=dtype)
    runs = []
    for blocked in (False, True):
        monkeypatch.setattr(sinkhorn, "dense_blocked_by_default", lambda device, b=blocked: b)
        loss = build("matching_gap", eps=eps, tol=tol, max_iter=max_iter)
        x = views.clone().requires_grad_(True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # max_iter hit
            value = loss(x)
        value.backward()
        runs.append((value.detach(), x.grad, dict(loss.stats)))
    (v0, g0, s0), (v1, g1, s1) = runs
    assert torch.equal(v0, v1) and torch.equal(g0, g1)
    assert set(s0) == set(s1)
    for key in ("cost_J", "cost_P", "dual_value", "gap", "plogp", "mass"):
        assert isinstance(s0[key], float)
        assert isinstance(s1[key], torch.Tensor) and s1[key].dim() == 0 and s1[key].dtype == torch.float64, key
        assert float(s1[key]) == s0[key], key
    for key in ("iterations", "marginal_error", "converged"):
        assert s1[key] == s0[key], key
    # the gap from its parts (independently of the solver's code): <J, C> - eps log n - dual
    assert s0["gap"] == pytest.approx(s0["cost_J"] - eps * math.log(9) - s0["dual_value"], abs=1e-5)


def _reads_per_call(loss, views, monkeypatch) -> tuple[int, int]:
    """Host reads of one call of ``loss`` (none exempt) and its sweep count."""
    monkeypatch.setattr(test_host_syncs, "EXEMPT_FILES", ())
    mode = test_host_syncs.HostReads()
    mode.active = 1
    with mode, warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        loss(views).backward()
    return len(mode.reads), int(loss.stats["iterations"])


@pytest.mark.parametrize("eps,tol,max_iter", [(0.5, 1e-3, 1000), (0.05, 1e-9, 1000), (0.01, 1e-12, 21),
                                              (0.01, 1e-12, 40)])
def test_matching_gap_reads_the_host_once_per_block(eps, tol, max_iter, monkeypatch) -> None:
    """Blocked: ceil(sweeps / B) reads of the stopping errors plus a constant (the views' finiteness check),
    whatever the sweep count; the per-sweep loop reads k per sweep (the baseline the count is told from)."""
    g = torch.Generator().manual_seed(3)
    views = torch.randn(2, 10, 4, generator=g, dtype=torch.float64, requires_grad=True)
    loss = build("matching_gap", eps=eps, tol=tol, max_iter=max_iter)
    monkeypatch.setattr(sinkhorn, "dense_blocked_by_default", lambda device: True)
    blocked, sweeps = _reads_per_call(loss, views, monkeypatch)
    monkeypatch.setattr(sinkhorn, "dense_blocked_by_default", lambda device: False)
    per_sweep, sweeps_again = _reads_per_call(loss, views, monkeypatch)
    assert sweeps == sweeps_again
    constant = 1  # check_views: the NaN / Inf scan of the views
    assert blocked == math.ceil(sweeps / DENSE_BLOCK_SWEEPS) + constant, (blocked, sweeps)
    # per sweep: k marginal errors; then the mass and the four statistics
    assert per_sweep == 2 * sweeps + 1 + 4 + constant, (per_sweep, sweeps)
