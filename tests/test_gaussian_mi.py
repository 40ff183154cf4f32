"""Poly-view Gaussian MI pieces against independent derivations."""

from __future__ import annotations

import math

import torch

from fusebench.training import gaussian_mi as G


def test_true_mi_at_two_views_is_the_bivariate_gaussian_mi() -> None:
    # two views of c: corr rho = s0^2 / (s0^2 + s^2); I = -1/2 log(1 - rho^2)
    for s0, s in ((1.0, 0.5), (2.0, 1.0), (1.0, 3.0)):
        rho = s0**2 / (s0**2 + s**2)
        assert math.isclose(G.true_one_vs_rest_mi(2, s0, s), -0.5 * math.log(1 - rho**2), rel_tol=1e-12)


def test_true_mi_one_vs_rest_by_conditional_variance() -> None:
    # I(x_a; rest) = 1/2 log(Var x_a / Var(x_a | rest)); given M - 1 views, c has posterior variance
    # v = 1 / (1/s0^2 + (M-1)/s^2), so Var(x_a | rest) = s^2 + v and Var x_a = s0^2 + s^2.
    s0, s = 1.0, 0.5
    for m in (2, 4, 8, 10):
        v = 1.0 / (1.0 / s0**2 + (m - 1) / s**2)
        expected = 0.5 * math.log((s0**2 + s**2) / (s**2 + v))
        assert math.isclose(G.true_one_vs_rest_mi(m, s0, s), expected, rel_tol=1e-12)


def test_bound_constants() -> None:
    k = 256
    assert math.isclose(G.bound_constant("pvc_geometric", k, 10), math.log(k * 10 - 10 + 1))
    assert math.isclose(G.bound_constant("suff_stats", k, 4), math.log(k * 4 - 4 + 1))
    # multi-crop and pairwise InfoNCE: the two-view bound with 2K - 1 candidates whatever M
    assert math.isclose(G.bound_constant("multicrop", k, 10), math.log(2 * k - 1))
    assert math.isclose(G.bound_constant("infonce_pwe", k, 4), math.log(2 * k - 1))
    # which losses declare the two-view bound: the two that average a two-view loss over view pairs
    from fusebench import objectives

    declared = {name for name in objectives.OBJECTIVES.available()
                if getattr(objectives.OBJECTIVES.get(name), "pairwise_mi_bound", False)}
    assert declared == {"multicrop", "infonce_pwe"}


def test_sampled_views_have_the_model_covariance() -> None:
    g = torch.Generator().manual_seed(0)
    x = G.sample_views(200_000, 3, 1.0, 0.5, g).squeeze(-1).double()  # [M, K]
    cov = torch.cov(x)
    assert torch.allclose(torch.diagonal(cov), torch.full((3,), 1.25, dtype=torch.float64), atol=0.02)
    assert torch.allclose(cov[0, 1:], torch.full((2,), 1.0, dtype=torch.float64), atol=0.02)
