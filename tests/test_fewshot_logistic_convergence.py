"""The few-shot logistic probe's fit does not reach the stationarity its docstring states at a large L2.

``fit_logistic`` documents "stop at max-abs gradient <= 1e-7"; on a 1-shot batched problem (6 classes, 20
draws) at l2 = 1e4 -- the ceiling the L2 search extends to on mv-3sources -- torch's L-BFGS stops on
``tolerance_change`` (1e-12 on the summed loss, about 36) with the unpenalised bias still far off (its
curvature ~1/C against l2 for W). The iterate is then chaotic in the features: on mv-3sources seed 1 a 1e-12
relative perturbation of the z-scored embeddings moves the 1-shot val accuracy at l2 = 1e4 from 0.4456 to
0.4603, while the exact minimiser gives 0.4191 for every perturbation; this is what flips the logistic /
prototype choice between ``infonce_pwe`` and ``multicrop`` (and, at small l2, between ``raw`` and
``raw_balanced`` on mv-reuters1200). Marked xfail (strict) until the probe's solver converges."""

from __future__ import annotations

import numpy as np
import pytest

from fusebench.probes.logistic import fit_logistic


def _max_grad(x: np.ndarray, y: np.ndarray, l2: float, w: np.ndarray, b: np.ndarray) -> float:
    """max-abs gradient of each problem's mean CE + l2/2 ||W||^2 (the bias not penalised)."""
    z = np.einsum("bnd,bdc->bnc", x, w) + b[:, None]
    p = np.exp(z - z.max(2, keepdims=True))
    p /= p.sum(2, keepdims=True)
    p[np.arange(x.shape[0])[:, None], np.arange(x.shape[1])[None], y] -= 1.0
    p /= x.shape[1]
    return max(np.abs(np.einsum("bnd,bnc->bdc", x, p) + l2 * w).max(), np.abs(p.sum(1)).max())


@pytest.mark.xfail(strict=True, reason="L-BFGS stops on tolerance_change far from stationarity at large l2")
def test_one_shot_fit_reaches_its_gradient_tolerance_at_large_l2() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((20, 6, 48))            # 20 draws of 1 shot x 6 classes, 48-d z-scored-like
    y = np.tile(np.arange(6), (20, 1))
    w, b = fit_logistic(x, y, 6, 1e4)
    assert _max_grad(x, y, 1e4, w, b) <= 1e-6      # the docstring's 1e-7, with a factor 10 of slack
