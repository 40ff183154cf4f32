"""Hostile numerical review of the objectives: settings at the edges.

The entropic-OT settings (``eps``, ``tol``, ``max_iter`` of ``m3g`` and ``matching_gap``) take any real /
integer number, as ``tau`` of the contrastive losses does: a numpy ``float32`` eps (a grid built with numpy)
used to be refused with the false message "eps must be a finite number > 0, got np.float32(0.2)".
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from fusebench.objectives import build


@pytest.mark.parametrize("name", ["m3g", "matching_gap"])
def test_ot_settings_take_numpy_numbers(name):
    f = build(name, eps=np.float32(0.25), tol=np.float32(1e-6), max_iter=np.int64(500))
    # stored as Python numbers (0.25 is exact in float32, so the values are the ones given)
    assert type(f.eps) is float and f.eps == 0.25
    assert type(f.tol) is float and f.tol == float(np.float32(1e-6))
    assert type(f.max_iter) is int and f.max_iter == 500
    views = torch.randn(2, 4, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    same = build(name, eps=0.25, tol=float(np.float32(1e-6)), max_iter=500)
    assert float(f(views)) == float(same(views))  # the same computation as with Python numbers


@pytest.mark.parametrize("name", ["m3g", "matching_gap"])
@pytest.mark.parametrize("setting,value", [("eps", -0.1), ("eps", 0), ("eps", math.nan), ("eps", math.inf),
                                           ("eps", "0.1"), ("eps", True), ("eps", 10**400), ("tol", -1e-3),
                                           ("tol", np.float32(math.nan)), ("max_iter", 0), ("max_iter", 10.0),
                                           ("max_iter", np.int64(-3)), ("max_iter", True)])
def test_ot_settings_refused_naming_the_setting(name, setting, value):
    with pytest.raises(ValueError, match=rf"^{name}: {setting} must be "):
        build(name, **{setting: value})


@pytest.mark.parametrize("name", ["infonce_pwe", "infonce_avg", "multicrop", "mv_infonce", "mv_dhel", "dhel",
                                  "pvc_geometric", "pvc_arithmetic", "suff_stats", "tuple_infonce"])
@pytest.mark.parametrize("value", [-0.1, 0, math.nan, math.inf, "0.1", True, 10**400, -(10**400)])
def test_tau_refused_naming_the_setting(name, value):
    """An integer too large for a float raised OverflowError from ``float(tau)`` instead of the ValueError."""
    with pytest.raises(ValueError, match=rf"^{name}: tau must be a finite number > 0"):
        build(name, tau=value)


def test_tau_takes_numpy_numbers():
    f = build("infonce_pwe", tau=np.float32(0.25))
    assert type(f.tau) is float and f.tau == 0.25
