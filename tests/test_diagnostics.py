"""Representation diagnostics recorded in run.json, on hand-worked cases."""

from __future__ import annotations

import math

import torch

from fusebench.components.diagnostics import alignment, effective_rank, representation_diagnostics, uniformity


def test_alignment() -> None:
    z = torch.randn(1, 5, 3)
    assert alignment(torch.cat([z, z])) == 0.0
    assert math.isclose(alignment(torch.cat([z, -z])), 4.0, rel_tol=1e-12)  # antipodal unit vectors
    # orthogonal unit vectors: ||a - b||^2 = 2; three views, pairs (0,1)=0, (0,2)=2, (1,2)=2 -> mean 4/3
    e = torch.eye(3)
    views = torch.stack([e[[0, 0]], e[[0, 0]], e[[1, 1]]]).double()  # [k=3, n=2, d=3]
    assert math.isclose(alignment(views), 4 / 3, rel_tol=1e-12)


def test_uniformity_two_points() -> None:
    # n = 2 orthogonal unit vectors: squared distance 2 -> log exp(-2 * 2) = -4
    views = torch.eye(2).unsqueeze(0)
    assert math.isclose(uniformity(views), -4.0, rel_tol=1e-12)
    # antipodal: squared distance 4 -> -8; mean over views of (-4, -8) = -6
    both = torch.stack([torch.eye(2), torch.tensor([[1.0, 0.0], [-1.0, 0.0]])])
    assert math.isclose(uniformity(both), -6.0, rel_tol=1e-12)


def test_effective_rank() -> None:
    # centred rows along two orthogonal axes with equal spread: 2 equal singular values -> rank 2
    x = torch.tensor([[1.0, 0, 0], [-1.0, 0, 0], [0, 1.0, 0], [0, -1.0, 0]]).unsqueeze(0)
    assert math.isclose(effective_rank(x), 2.0, rel_tol=1e-9)
    # singular values (3, 1): p = (3/4, 1/4), rank = exp(H)
    y = torch.tensor([[3.0, 0], [-3.0, 0], [0, 1.0], [0, -1.0]]).unsqueeze(0)
    h = -(0.75 * math.log(0.75) + 0.25 * math.log(0.25))
    assert math.isclose(effective_rank(y), math.exp(h), rel_tol=1e-9)


def test_tiny_split_gives_nan_instead_of_failing() -> None:
    d = representation_diagnostics(torch.randn(3, 1, 4))
    assert math.isnan(d["uniformity"]) and math.isnan(d["effective_rank"])
