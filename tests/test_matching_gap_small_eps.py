"""matching_gap at small entropic eps: float32 against a float64 log-domain Sinkhorn written here, and the eps floor.

Measured before the floor (2 views, n = 6, 16, 64, random views, 300 sweeps, both costs): the float32 plan's mass
was off from the float64 plan's (the same sweeps) by up to 2.4e-3 at eps = 1e-5, 2.8e-2 at 1e-6, 0.16 at 1e-7, 23 at
1e-8 and 79 at 1e-10 (entries off by up to 1). On views with a unique optimum (noisy shifted one-hot, float64
converged in one sweep at every eps) the float32 solve converged down to 1e-5 with the Danskin gradient within 6e-6
of float64's, and from 1e-6 / 1e-7 it stopped at max_iter with the gradient off by 2.4e-4 (1e-6), 1.5e-3 (1e-7),
0.49 (1e-9): the same cause and floor as m3g's (``tests/test_m3g_small_eps.py``; the log-domain potentials are of size
cost / eps and float32 resolves them to (cost / eps) * 6e-8). ``check_ot_hparams`` now refuses eps < ``MIN_EPS`` =
1e-5 for both objectives.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from fusebench.objectives import build
from fusebench.objectives.sinkhorn import MIN_EPS, dense_sinkhorn


def cost_of(x: torch.Tensor, y: torch.Tensor, cost: str) -> torch.Tensor:
    """``C[i, j]`` of L2-normalised rows: ``1 - x.y`` (dot) or ``||x - y||^2 = 2 - 2 x.y`` (sqeuclid)."""
    x, y = torch.nn.functional.normalize(x, dim=-1), torch.nn.functional.normalize(y, dim=-1)
    sim = x @ y.T
    return 1.0 - sim if cost == "dot" else 2.0 - 2.0 * sim


def reference(views: torch.Tensor, eps: float, cost: str, sweeps: int = 200) -> tuple[float, torch.Tensor, float]:
    """Plain two-marginal log-domain Sinkhorn in float64 (rows, then columns): the gap F(J) - F(P*) with
    F(P) = <P, C> + eps <P, log P>, its Danskin gradient d<J - P*, C(z)> / d views, and the plan's mass."""
    c = cost_of(views[0].double(), views[1].double(), cost)
    n = c.shape[0]
    f = torch.zeros(n, dtype=torch.float64)
    g = torch.zeros(n, dtype=torch.float64)
    for _ in range(sweeps):
        f = -(torch.logsumexp(-c / eps + g[None, :], dim=1) + math.log(n))
        g = -(torch.logsumexp(-c / eps + f[:, None], dim=0) + math.log(n))
    plan = (-c / eps + f[:, None] + g[None, :]).exp()
    uniform = torch.full((n,), 1 / n, dtype=torch.float64)
    assert torch.allclose(plan.sum(1), uniform, atol=1e-12) and torch.allclose(plan.sum(0), uniform, atol=1e-12)
    entropy = (plan * plan.clamp_min(1e-300).log()).sum()
    gap = float(c.diagonal().mean() - eps * math.log(n) - ((plan * c).sum() + eps * entropy))
    x = views.double().clone().requires_grad_(True)
    cz = cost_of(x[0], x[1], cost)
    (cz.diagonal().mean() - (plan * cz).sum()).backward()
    return gap, x.grad, float(plan.sum())


def shifted_one_hot(n: int, noise: float = 0.0, seed: int = 0) -> torch.Tensor:
    """Two views e_i and e_{i-1 mod n} (+ noise): the pairs (i, i+1) cost 0, every other pair the most."""
    eye = torch.eye(n, dtype=torch.float64)
    views = torch.stack([eye, eye.roll(1, dims=0)])
    return views + noise * torch.randn(views.shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


@pytest.mark.parametrize("cost,worst", [("sqeuclid", 2.0), ("dot", 1.0)])
def test_hand_worked_gap_at_the_floor(cost, worst):
    """One-hot views, the second shifted by one: every diagonal pair is orthogonal (cost 2 for sqeuclid, 1 for dot),
    the shift (i, i+1) costs 0 and every other pair the same as the diagonal, so at eps = 1e-5 the plan is that
    permutation / n (to exp(-worst / 1e-5)) and the gap = (worst - eps log n) - (0 - eps log n) = worst."""
    views = shifted_one_hot(4)
    gap64, _, _ = reference(views, MIN_EPS, cost)
    assert gap64 == pytest.approx(worst, abs=1e-12)
    loss = build("matching_gap", eps=MIN_EPS, cost=cost)
    assert float(loss(views.float())) == pytest.approx(worst, abs=1e-6)
    assert loss.stats["converged"] == 1.0


@pytest.mark.parametrize("cost", ["sqeuclid", "dot"])
@pytest.mark.parametrize("n,seed", [(5, 0), (5, 1), (16, 0), (16, 1)])
def test_float32_at_the_floor_matches_the_float64_reference(cost, n, seed):
    """Noisy shifted one-hot views (a unique optimum the entropic plan concentrates on): the float32 gap and gradient
    at eps = MIN_EPS equal the float64 Sinkhorn above's (measured: within 2.5e-7 / 6.1e-6)."""
    views = shifted_one_hot(n, noise=0.05, seed=seed)
    gap64, grad64, _ = reference(views, MIN_EPS, cost)
    x = views.float().requires_grad_(True)
    loss = build("matching_gap", eps=MIN_EPS, cost=cost)
    value = loss(x)
    value.backward()
    assert loss.stats["converged"] == 1.0
    assert float(value.detach()) == pytest.approx(gap64, abs=1e-6)
    assert torch.allclose(x.grad.double(), grad64, atol=1e-5), (x.grad.double() - grad64).abs().max()


@pytest.mark.parametrize("cost", ["sqeuclid", "dot"])
def test_float32_far_below_the_floor_loses_the_plan(cost):
    """Why the floor (the solver called directly, as the objective did before it): at eps = 1e-10 the float32
    log-kernel and potentials (~ 1e10) are resolved to ~ 1e3, and the plan of the same solve is not a coupling (its
    mass was n = 16 for both costs and seeds), where the float64 plan's is 1."""
    views = shifted_one_hot(16, noise=0.05, seed=0)
    _, _, mass64 = reference(views, 1e-10, cost)
    assert mass64 == pytest.approx(1.0, abs=1e-12)
    c32 = cost_of(views[0].float(), views[1].float(), cost)
    res = dense_sinkhorn(-c32 / 1e-10, tol=1e-3, max_iter=50, blocked=False)
    assert not res.converged and res.mass > 2.0


@pytest.mark.parametrize("eps,shown", [(9.99e-6, "9.99e-06"), (1e-7, "1e-07"), (1e-10, "1e-10"),
                                       (np.float32(1e-6), "9.999999974752427e-07")])  # float32 1e-6's value
def test_eps_below_the_floor_is_refused(eps, shown):
    with pytest.raises(ValueError, match=rf"^matching_gap: eps = {shown} is below 1e-05, the smallest "
                                         r"eps the float32 Sinkhorn solver honours .*; use eps >= 1e-05$"):
        build("matching_gap", eps=eps)


def test_the_plan_refuses_a_grid_eps_below_the_floor_before_any_cell(fixtures_dir: Path, tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture) -> None:
    """mv-hw2sources selects matching_gap's eps on a grid: ``--set`` one below the floor and ``--plan`` stops with one
    error naming the grid key and the value (the runner builds every grid point before any cell)."""
    from fusebench.cli import main

    out = tmp_path / "runs"
    key = "pretrain.per_objective.matching_gap.grid"
    argv = ["run", "mv-hw2sources", "--data-root", str(fixtures_dir / "multiview"), "--objective", "matching_gap",
            "--seeds", "0", "--out", str(out), "--plan", "--set", f"{key}.eps=[0.1,1e-9]"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("fusebench run:") == 1, err
    assert (f"{key} {{'eps': 1e-09}}: objective 'matching_gap' refuses {{'eps': 1e-09}}: matching_gap: eps = 1e-09 "
            "is below 1e-05") in err, err
    assert not out.exists()
