"""M3G at small entropic eps: float32 against a float64 log-domain Sinkhorn written here, and the eps floor.

Measured before the floor (k = 3, n = 6, random views, 1000 sweeps): the float32 ``auto`` solver returned 0.2614
at eps = 1e-9 (float64: 0.2525, plan mass 8.9e6 instead of 1) and inf at eps = 1e-10; its log-domain potentials are
of size cost / eps and float32 resolves them to (cost / eps) * 6e-8. ``M3G`` now refuses eps < ``MIN_EPS`` = 1e-5.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

import fusebench
from fusebench.objectives import build
from fusebench.objectives.sinkhorn import MIN_EPS
from fusebench.spec.config import ConfigError


def reference_plan(views: torch.Tensor, eps: float, sweeps: int = 200) -> tuple[torch.Tensor, torch.Tensor]:
    """Plain log-domain Sinkhorn (Algorithm 1) in float64 on the dense cv cost: (cost tensor, plan)."""
    k, n, _ = views.shape
    z = torch.nn.functional.normalize(views.double(), dim=-1)
    grids = torch.meshgrid(*[torch.arange(n)] * k, indexing="ij")
    mean = sum(z[l][grids[l]] for l in range(k)) / k  # [n]*k x d
    cost = 1.0 - (mean * mean).sum(-1)  # circular variance 1 - ||mean||^2
    g = torch.zeros(k, n, dtype=torch.float64)

    def log_p() -> torch.Tensor:
        out = -cost / eps
        for l in range(k):
            out = out + g[l].reshape([n if a == l else 1 for a in range(k)])
        return out

    for _ in range(sweeps):
        for l in range(k):
            g[l] -= torch.logsumexp(log_p(), dim=[a for a in range(k) if a != l]) + math.log(n)
    return cost, log_p().exp()


def reference_gap(views: torch.Tensor, eps: float) -> tuple[float, torch.Tensor]:
    """M3G = F(J) - F(P*), F(P) = <P, C> + eps <P, log P>, and its Danskin gradient d<J - P*, C(z)> / d views."""
    k, n, _ = views.shape
    cost, plan = reference_plan(views, eps)
    marg = [plan.sum(dim=[a for a in range(k) if a != l]) for l in range(k)]
    assert all(torch.allclose(m, torch.full((n,), 1 / n, dtype=torch.float64), atol=1e-12) for m in marg)
    diag = cost[tuple([torch.arange(n)] * k)]
    entropy = (plan * plan.clamp_min(1e-300).log()).sum()
    gap = float(diag.mean() - eps * math.log(n) - ((plan * cost).sum() + eps * entropy))
    x = views.double().clone().requires_grad_(True)
    z = torch.nn.functional.normalize(x, dim=-1)
    grids = torch.meshgrid(*[torch.arange(n)] * k, indexing="ij")
    mean = sum(z[l][grids[l]] for l in range(k)) / k
    c = 1.0 - (mean * mean).sum(-1)
    (c[tuple([torch.arange(n)] * k)].mean() - (plan * c).sum()).backward()
    return gap, x.grad


def shifted_one_hot(n: int = 4, noise: float = 0.0, seed: int = 0) -> torch.Tensor:
    """k = 3 views: e_i, e_{i+1 mod n}, e_i (+ noise): the tuples (i, i-1, i) cost 0, the diagonal 4/9 each."""
    eye = torch.eye(n, dtype=torch.float64)
    views = torch.stack([eye, eye.roll(1, dims=0), eye])
    return views + noise * torch.randn(views.shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def test_hand_worked_gap_at_the_floor():
    """One-hot views, the second shifted by one: each diagonal tuple has two pairs at squared distance 2, cost
    (2 + 2) / 3^2 = 4/9; the permutation (i, i-1, i) costs 0 and every other tuple >= 2/9, so at eps = 1e-5 the plan
    is that permutation (to exp(-2/9 / 1e-5)) and M3G = (4/9 - eps log n) - (0 - eps log n) = 4/9."""
    views = shifted_one_hot()
    gap64, _ = reference_gap(views, MIN_EPS)
    assert gap64 == pytest.approx(4 / 9, abs=1e-12)
    for kw in ({"backend": "eager"}, {"solver": "reference"}):
        loss = build("m3g", eps=MIN_EPS, **kw)
        assert float(loss(views.float())) == pytest.approx(4 / 9, abs=1e-6), kw
        assert loss.stats["converged"] == 1.0


@pytest.mark.parametrize("kw", [{"backend": "eager"}, {"solver": "reference"}])
@pytest.mark.parametrize("seed", [0, 1])
def test_float32_at_the_floor_matches_the_float64_reference(kw, seed):
    """Noisy one-hot views (a unique optimum the entropic plan concentrates on): the float32 gap and gradient at
    eps = MIN_EPS equal the float64 Sinkhorn above's."""
    views = shifted_one_hot(n=5, noise=0.05, seed=seed)
    gap64, grad64 = reference_gap(views, MIN_EPS)
    x = views.float().requires_grad_(True)
    loss = build("m3g", eps=MIN_EPS, **kw)
    value = loss(x)
    value.backward()
    assert loss.stats["converged"] == 1.0
    assert float(value.detach()) == pytest.approx(gap64, abs=1e-6)
    assert torch.allclose(x.grad.double(), grad64, atol=1e-5), (x.grad.double() - grad64).abs().max()


@pytest.mark.parametrize("eps,shown", [(9.99e-6, "9.99e-06"), (1e-7, "1e-07"), (1e-9, "1e-09"), (1e-10, "1e-10")])
def test_eps_below_the_floor_is_refused(eps, shown):
    with pytest.raises(ValueError, match=rf"m3g: eps = {shown} is below 1e-05, the smallest eps the float32 "
                                         r"Sinkhorn solver honours .*; use eps >= 1e-05"):
        build("m3g", eps=eps)


def test_a_run_with_eps_below_the_floor_stops_before_any_cell(tmp_path: Path):
    tiny = {"dataset.synthetic_spec": {"num_samples": 128, "seed": 0}, "pretrain.epochs": 1,
            "pretrain.batch_size": 32, "downstream.epochs": 1, "downstream.batch_size": 64}
    with pytest.raises(ConfigError, match=r"pretrain.per_objective.m3g.hparams: objective 'm3g' refuses "
                                          r"\{'eps': 1e-09\}: m3g: eps = 1e-09 is below 1e-05"):
        fusebench.run("quickstart", objective=["m3g"], seeds=[0], out=tmp_path / "out",
                      overrides={**tiny, "pretrain.hparams": {"m3g": {"eps": 1e-9}}}, progress=False)
    assert not (tmp_path / "out").exists()
