"""Optimal-transport objectives: ``matching_gap`` and ``m3g`` (and the ``bench objectives`` command).

Expected values come from computations written here: closed forms (k = 2, n = 2), explicit-loop
cost tensors and a plain (non-log) Sinkhorn with Python loops, scipy's LP solver, and central finite
differences — never from the solvers under test.
"""

from __future__ import annotations

import importlib.util
import itertools
import math
import threading
import warnings

import numpy as np
import pytest
import torch

from fusebench.objectives import build
from fusebench.objectives.sinkhorn import dense_sinkhorn

DT = torch.float64
#: the backends of m3g's cv fast path; "compiled" needs numba (the `fast` extra, installed by scripts/setup.sh)
BACKENDS = ["eager", pytest.param("compiled", marks=pytest.mark.skipif(
    importlib.util.find_spec("numba") is None, reason="numba is not installed (extra `fast`): no compiled backend"))]


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # conftest.py


def unit(x: torch.Tensor) -> torch.Tensor:
    return x / x.norm(dim=-1, keepdim=True)


def loop_cost(z: torch.Tensor, cost: str) -> np.ndarray:
    """C[i_1..i_k] by explicit loops from the definitions c_cv = 1 - R^2, c_csd = -log R^2."""
    z = unit(z.detach().to(DT)).numpy()
    k, n, _ = z.shape
    c = np.zeros([n] * k)
    for idx in itertools.product(range(n), repeat=k):
        mean = sum(z[l, idx[l]] for l in range(k)) / k
        r2 = float(mean @ mean)
        c[idx] = 1.0 - r2 if cost == "cv" else -math.log(max(r2, 1e-6))
    return c


def loop_sinkhorn(c: np.ndarray, eps: float, iters: int = 5000) -> np.ndarray:
    """Plain scaling Sinkhorn for k marginals with explicit loops (slow, obviously correct)."""
    k, n = c.ndim, c.shape[0]
    kern = {idx: math.exp(-c[idx] / eps) for idx in itertools.product(range(n), repeat=k)}
    u = [[1.0] * n for _ in range(k)]
    for _ in range(iters):
        for l in range(k):
            marg = [0.0] * n
            for idx, kv in kern.items():
                prod = kv
                for m in range(k):
                    if m != l:
                        prod *= u[m][idx[m]]
                marg[idx[l]] += prod
            u[l] = [1.0 / (n * marg[i]) for i in range(n)]
    p = np.zeros_like(c)
    for idx, kv in kern.items():
        p[idx] = kv * math.prod(u[m][idx[m]] for m in range(k))
    return p


def entropic_f(p: np.ndarray, c: np.ndarray, eps: float) -> float:
    pos = p > 0
    return float((p * c).sum() + eps * (p[pos] * np.log(p[pos])).sum())


def gap_from_p(p: np.ndarray, c: np.ndarray, eps: float) -> float:
    n = c.shape[0]
    diag = np.mean([c[(i,) * c.ndim] for i in range(n)])
    return float(diag - eps * math.log(n) - entropic_f(p, c, eps))


def rand_views(k: int, n: int, d: int, seed: int, noise: float = 0.7, dtype=DT) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(n, d, generator=g, dtype=DT)
    return (base + noise * torch.randn(k, n, d, generator=g, dtype=DT)).to(dtype)


# ------------------------------------------------------------------------------------------ identities
@pytest.mark.parametrize("solver,backend", [("auto", "eager"), ("auto", "compiled"), ("reference", "auto")])
def test_m3g_at_k2_is_half_matching_gap_with_double_eps(solver, backend):
    if backend == "compiled":
        pytest.importorskip("numba", reason="numba is not installed (extra `fast`): no compiled backend")
    x = rand_views(2, 7, 5, seed=0).requires_grad_()
    m3g = build("m3g", eps=0.3, cost="cv", tol=1e-11, solver=solver, backend=backend)
    mg = build("matching_gap", eps=0.6, cost="dot", tol=1e-11)
    a = m3g(x)
    (ga,) = torch.autograd.grad(a, x)
    b = mg(x)
    (gb,) = torch.autograd.grad(b, x)
    a, b = a.detach(), b.detach()
    assert float(a) == pytest.approx(float(b) / 2, abs=1e-9)
    torch.testing.assert_close(ga, gb / 2, atol=1e-8, rtol=1e-6)


def test_hand_checked_two_by_two_closed_form():
    # n = 2: bistochastic P = [[a, 1/2 - a], [1/2 - a, a]]; dF/da = 0 gives a = 1/2 / (1 + exp(D / 2eps)),
    # D = C11 + C22 - C12 - C21
    x = unit(torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], dtype=DT))
    y = unit(torch.tensor([[0.8, 0.6, 0.0], [0.6, 0.0, 0.8]], dtype=DT))
    eps = 0.25
    for cost, name, kw, scale, e_used in (
        ("sqeuclid", "matching_gap", {"cost": "sqeuclid", "eps": eps}, 1.0, eps),
        ("dot", "matching_gap", {"cost": "dot", "eps": eps}, 1.0, eps),
        ("cv", "m3g", {"cost": "cv", "eps": eps}, 1.0, eps),
    ):
        c = np.zeros((2, 2))
        for i in range(2):
            for j in range(2):
                dot = float(x[i] @ y[j])
                c[i, j] = {"sqeuclid": 2 - 2 * dot, "dot": 1 - dot, "cv": (1 - dot) / 2}[cost]
        delta = c[0, 0] + c[1, 1] - c[0, 1] - c[1, 0]
        a = 0.5 / (1 + math.exp(delta / (2 * e_used)))
        p = np.array([[a, 0.5 - a], [0.5 - a, a]])
        expected = (c[0, 0] + c[1, 1]) / 2 + e_used * math.log(0.5) - entropic_f(p, c, e_used)
        got = build(name, tol=1e-12, **kw)(torch.stack([x, y]))
        assert float(got) * scale == pytest.approx(expected, abs=1e-10), name


@pytest.mark.parametrize("cost", ["cv", "csd"])
def test_m3g_matches_explicit_loop_sinkhorn_k3(cost):
    x = rand_views(3, 3, 4, seed=1)
    eps = 0.4
    c = loop_cost(x, cost)
    expected = gap_from_p(loop_sinkhorn(c, eps, iters=400), c, eps)
    got = build("m3g", eps=eps, cost=cost, tol=1e-12, max_iter=10000)(x)
    assert float(got) == pytest.approx(expected, abs=1e-9)


# ------------------------------------------------------------------------------------------ properties
@pytest.mark.parametrize("cost", ["cv", "csd"])
def test_m3g_positive_for_random_views_and_equal_to_loop_sinkhorn_gap(cost):
    # random views (no shared signal): the ground-truth matching J is far from optimal, so the gap is
    # clearly positive; its value is F(J) - F(P*) with P* from the explicit-loop Sinkhorn, run until
    # its marginals are exact (checked, so the reference is converged rather than assumed)
    eps, n = 0.1, 4
    for seed in (0, 2, 3):
        x = torch.randn(3, n, 4, dtype=DT, generator=torch.Generator().manual_seed(seed))
        c = loop_cost(x, cost)
        p = loop_sinkhorn(c, eps, iters=2000)
        marg_err = sum(np.abs(p.sum(axis=tuple(a for a in range(3) if a != l)) - 1 / n).sum() for l in range(3))
        assert marg_err < 1e-10
        expected = gap_from_p(p, c, eps)
        assert expected > 0.2
        v = float(build("m3g", eps=eps, cost=cost, tol=1e-11, max_iter=100000)(x))
        assert v == pytest.approx(expected, abs=1e-9), (cost, seed)


def test_m3g_zero_for_identical_well_separated_views():
    x = torch.eye(4, dtype=DT).expand(3, 4, 4).clone()  # three identical copies of 4 orthogonal points
    for solver in ("auto", "reference"):
        m = build("m3g", eps=0.02, tol=1e-10, solver=solver)
        v = float(m(x))
        assert -1e-10 <= v < 1e-8
    # and clearly positive once two samples swap places in one view
    y = x.clone()
    y[2, [0, 1]] = y[2, [1, 0]]
    assert float(build("m3g", eps=0.02, tol=1e-10)(y)) > 0.05


def test_m3g_tends_to_lp_gap_as_eps_to_zero():
    from scipy.optimize import linprog

    k, n = 3, 4
    x = rand_views(k, n, 3, seed=5, noise=1.5)
    c = loop_cost(x, "cv")
    # LP over the polystochastic polytope: P >= 0, every marginal 1/n
    idx = list(itertools.product(range(n), repeat=k))
    a_eq = np.zeros((k * n, len(idx)))
    for col, t in enumerate(idx):
        for l in range(k):
            a_eq[l * n + t[l], col] = 1.0
    lp = linprog(np.array([c[t] for t in idx]), A_eq=a_eq, b_eq=np.full(k * n, 1.0 / n), bounds=(0, None),
                 method="highs")
    assert lp.status == 0
    lp_gap = np.mean([c[(i,) * k] for i in range(n)]) - lp.fun
    assert lp_gap > 0.01
    errs = []
    for eps in (0.1, 0.05, 0.02):
        v = float(build("m3g", eps=eps, tol=1e-9, max_iter=20000)(x))
        # min F lies in [LP - eps k log n, LP - eps log n] (entropy of a polystochastic tensor)
        assert lp_gap - 1e-7 <= v <= lp_gap + eps * (k - 1) * math.log(n) + 1e-7
        errs.append(v - lp_gap)
    assert errs[0] >= errs[1] >= errs[2]


def test_sinkhorn_marginals_and_value_equals_direct_f_gap():
    k, n, eps = 3, 5, 0.15
    x = rand_views(k, n, 4, seed=2)
    c = loop_cost(x, "cv")
    for tol in (1e-3, 1e-10):
        res = dense_sinkhorn(torch.from_numpy(-c / eps), tol, 10000)
        p = res.log_p.exp().numpy()
        err = sum(np.abs(p.sum(axis=tuple(a for a in range(k) if a != l)) - 1 / n).sum() for l in range(k))
        assert err < tol and res.marginal_error == pytest.approx(err, abs=1e-12)
        m = build("m3g", eps=eps, tol=tol)
        v = float(m(x))
        assert m.stats["marginal_error"] < tol and m.stats["iterations"] == res.iterations
        # the dual value is a lower bound of min F, so the gap is never below the exact one;
        # at tight tol it equals F(J) - F(P) evaluated directly on the returned P
        if tol < 1e-6:
            assert v == pytest.approx(gap_from_p(p, c, eps), abs=1e-9)
        else:
            assert v >= gap_from_p(loop_sinkhorn(c, eps, iters=300), c, eps) - 1e-12


# ------------------------------------------------------------------------------------------ gradients
@pytest.mark.parametrize(
    "name,kw,k",
    [
        ("m3g", {"cost": "cv", "solver": "auto", "backend": "eager"}, 3),
        pytest.param("m3g", {"cost": "cv", "solver": "auto", "backend": "compiled"}, 3, marks=BACKENDS[1].marks),
        ("m3g", {"cost": "cv", "solver": "reference"}, 4),
        ("m3g", {"cost": "csd"}, 3),
        pytest.param("matching_gap", {"cost": "sqeuclid"}, 2, marks=pytest.mark.slow),  # ~6 s: 24 x 2 solves of 444 sweeps
        ("matching_gap", {"cost": "dot"}, 2),
    ],
)
def test_danskin_gradient_matches_finite_differences(name, kw, k):
    m = build(name, eps=0.5, tol=1e-13, max_iter=100000, **kw)
    x = rand_views(k, 4, 3, seed=3).requires_grad_()
    (grad,) = torch.autograd.grad(m(x), x)
    h = 1e-6
    fd = torch.zeros_like(x)
    with torch.no_grad():
        for idx in itertools.product(*map(range, x.shape)):
            xp, xm = x.detach().clone(), x.detach().clone()
            xp[idx] += h
            xm[idx] -= h
            fd[idx] = (m(xp) - m(xm)) / (2 * h)
    torch.testing.assert_close(grad, fd, atol=1e-7, rtol=1e-5)


# ------------------------------------------------------------------------------------------ solvers
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("k,n", [(2, 8), (3, 7), (4, 6), (5, 6)])
def test_auto_solver_equals_reference(k, n, backend):
    x = rand_views(k, n, 5, seed=10 + k).requires_grad_()
    out = {}
    for solver in ("auto", "reference"):
        m = build("m3g", eps=0.1, tol=1e-9, solver=solver, backend=backend)
        v = m(x)
        (g,) = torch.autograd.grad(v, x)
        out[solver] = (float(v.detach()), g, m.stats["iterations"])
    assert out["auto"][0] == pytest.approx(out["reference"][0], abs=1e-6)
    torch.testing.assert_close(out["auto"][1], out["reference"][1], atol=1e-8, rtol=1e-6)
    assert out["auto"][2] == out["reference"][2]  # same iterates, same stopping sweep


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("k,n,eps", [(3, 8, 0.01), (5, 4, 0.01), (3, 6, 0.002)])
def test_auto_float32_finite_at_small_eps(k, n, eps, backend):
    x = torch.randn(k, n, 3, generator=torch.Generator().manual_seed(k))
    m = build("m3g", eps=eps, max_iter=20000, backend=backend)
    xr = x.clone().requires_grad_()
    v = m(xr)
    v.backward()
    assert v.dtype == torch.float32 and torch.isfinite(v) and torch.isfinite(xr.grad).all()
    ref = float(build("m3g", eps=eps, max_iter=20000, solver="reference")(x.double()))
    assert float(v.detach()) == pytest.approx(ref, abs=1e-4)
    if eps < 0.005 and backend == "eager":  # the exact log-sum-exp repair of underflowed products is exercised
        assert m.stats.get("underflow_fixes", 0) > 0
    if backend == "compiled" and eps >= 0.005:  # float64 inside: the scaling domain holds, float32 gets the float64 answer
        assert m.stats["compiled"] == 1.0 and float(v.detach()) == pytest.approx(ref, abs=1e-6)
    elif backend == "compiled":  # even float64's range is left at eps = 0.002: handed to the eager path mid-solve
        assert m.stats["compiled"] == 0.0 and m.stats["compiled_fallback_sweep"] > 0


# ------------------------------------------------------------------------------------------ scaling domain
def _log_kernels(k: int, n: int, eps: float, seed: int, dtype=DT) -> torch.Tensor:
    from fusebench.objectives.m3g import pair_sqdists

    return -pair_sqdists(unit(rand_views(k, n, 5, seed=seed, dtype=dtype))) / (k * k * eps)


def _dense_reference(log_kernels: torch.Tensor, tol: float, max_iter: int = 100000):
    """Algorithm 1 on the materialised log-kernel sum_{l<m} log K_lm (the literal reference)."""
    k, _, n, _ = log_kernels.shape
    full = torch.zeros([n] * k, dtype=log_kernels.dtype)
    for l in range(k):
        for m in range(l + 1, k):
            full = full + log_kernels[l, m].reshape([n if a in (l, m) else 1 for a in range(k)])
    res = dense_sinkhorn(full, tol, max_iter)
    p = res.log_p.exp()
    pairs = {(l, m): p.sum(dim=[a for a in range(k) if a not in (l, m)]) if k > 2 else p
             for l in range(k) for m in range(l + 1, k)}
    return res, pairs


def _strategies(k: int) -> list[tuple[int, bool]]:
    return [(1, True)] + [(e, False) for e in range(1, k // 2 + 1)]


@pytest.mark.parametrize("k,n", [(2, 7), (3, 6), (4, 5), (5, 4), (6, 3)])
@pytest.mark.parametrize("eps,tol,max_iter", [(0.1, 1e-10, 100000), (0.01, 0.0, 300)])
def test_scaling_solver_every_strategy_equals_log_domain_and_reference(k, n, eps, tol, max_iter):
    """Same iterates as the literal dense reference and the log-domain solver: to convergence at eps=0.1,
    and after exactly 300 sweeps at eps=0.01 (where these tiny problems need 10^5 sweeps to converge)."""
    from fusebench.objectives.sinkhorn import dual_value
    from fusebench.objectives.sinkhorn_pairwise import pairwise_sinkhorn
    from fusebench.objectives.sinkhorn_scaling import scaling_sinkhorn

    lk = _log_kernels(k, n, eps, seed=20 + k)
    ref, ref_pairs = _dense_reference(lk, tol, max_iter)
    log = pairwise_sinkhorn(lk, tol, max_iter)
    assert log.iterations == ref.iterations and ref.converged == (tol > 0)
    for e, dense in _strategies(k):
        res = scaling_sinkhorn(lk, tol, max_iter, elim=e, dense=dense)
        assert res.info["scaling_domain"] == 1.0 and res.info["dense_stages"] == float(dense)
        assert res.iterations == ref.iterations, (e, dense)  # same iterates, same stopping sweep
        assert res.converged == ref.converged
        assert res.marginal_error == pytest.approx(ref.marginal_error, rel=1e-6, abs=1e-14)
        assert float(dual_value(res.log_u, res.mass, eps)) == pytest.approx(float(dual_value(ref.log_u, ref.mass, eps)),
                                                                            abs=1e-12)
        assert res.mass == pytest.approx(ref.mass, abs=1e-13)
        for (l, m), pair in ref_pairs.items():
            torch.testing.assert_close(res.pair_marginals[l, m], pair, atol=1e-13, rtol=1e-9)
        gram = scaling_sinkhorn(lk, tol, max_iter, elim=e, dense=dense, gram=True).pair_marginals
        torch.testing.assert_close(gram, res.pair_marginals.transpose(1, 2).reshape(k * n, k * n), atol=1e-15,
                                   rtol=1e-12)  # same iterates; BLAS may sum in another order


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("k,n", [(3, 9), (4, 6), (5, 4), (6, 4)])
@pytest.mark.parametrize("eps", [0.2, 0.03])
def test_auto_equals_reference_value_and_gradient_k3_to_6(k, n, eps, backend):
    x = rand_views(k, n, 5, seed=30 + k).requires_grad_()
    out = {}
    for solver in ("auto", "reference"):
        m = build("m3g", eps=eps, tol=1e-9, solver=solver, max_iter=100000, backend=backend)
        v = m(x)
        (g,) = torch.autograd.grad(v, x)
        out[solver] = (float(v.detach()), g, m.stats)
    assert out["auto"][2]["scaling_domain"] == 1.0  # the scaling-domain path ran
    assert out["auto"][2]["compiled"] == float(backend == "compiled")
    assert out["auto"][0] == pytest.approx(out["reference"][0], abs=1e-6)
    torch.testing.assert_close(out["auto"][1], out["reference"][1], atol=1e-8, rtol=1e-6)
    assert out["auto"][2]["iterations"] == out["reference"][2]["iterations"]
    for key in ("cost_J", "cost_P", "dual_value", "gap", "mass", "marginal_error"):
        assert out["auto"][2][key] == pytest.approx(out["reference"][2][key], abs=1e-9, rel=1e-6), key


@pytest.mark.parametrize("k,n", [(3, 8), (4, 6), (5, 4), (6, 4)])
def test_auto_float32_scaling_domain_at_eps_005_and_fallback_at_001(k, n):
    """The eager path solves float32 views in float32: at eps = 0.01 its range guard hands the solve to the
    log domain (the compiled backend works in float64 and keeps the scaling domain: tests/test_m3g_compiled.py)."""
    x = torch.randn(k, n, 3, generator=torch.Generator().manual_seed(40 + k))
    for eps, scaling in ((0.05, 1.0), (0.01, 0.0)):
        m = build("m3g", eps=eps, max_iter=20000, backend="eager")
        xr = x.clone().requires_grad_()
        v = m(xr)
        v.backward()
        assert v.dtype == torch.float32 and torch.isfinite(v) and torch.isfinite(xr.grad).all()
        assert m.stats["scaling_domain"] == scaling, (eps, m.stats)
        ref = build("m3g", eps=eps, max_iter=20000, solver="reference")
        xd = x.double().requires_grad_()
        vd = ref(xd)
        (gd,) = torch.autograd.grad(vd, xd)
        assert float(v.detach()) == pytest.approx(float(vd.detach()), abs=1e-4)
        assert m.stats["iterations"] == pytest.approx(ref.stats["iterations"], abs=2)  # float32 rounding may shift the stop
        torch.testing.assert_close(xr.grad.double(), gd, atol=2e-3, rtol=1e-2)


def test_scaling_fallback_in_the_middle_of_a_solve(monkeypatch):
    """Force the range guard to fail after a few sweeps: the answer is then the log-domain solver's."""
    from fusebench.objectives import sinkhorn_scaling as sk
    from fusebench.objectives.sinkhorn_pairwise import pairwise_sinkhorn

    lk = _log_kernels(3, 6, 0.05, seed=3)
    floor = sk.kernel_floor(lk)
    # margin such that the check before the first sweep (floor alone) passes and a later one cannot
    monkeypatch.setattr(sk, "LOG_MARGIN", floor - math.log(torch.finfo(DT).tiny) - 1e-3)
    monkeypatch.setattr(sk, "RANGE_CHECK_EVERY", 1)
    res = sk.scaling_sinkhorn(lk, 1e-10, 100000, floor=floor)
    log = pairwise_sinkhorn(lk, 1e-10, 100000)
    assert res.info["scaling_domain"] == 0.0 and res.info["scaling_fallback_sweep"] >= 1
    assert res.iterations == log.iterations
    torch.testing.assert_close(res.pair_marginals, log.pair_marginals, atol=0, rtol=0)
    torch.testing.assert_close(res.log_u, log.log_u, atol=0, rtol=0)
    # and with the guard at its default, the same problem stays in the scaling domain
    monkeypatch.undo()
    assert sk.scaling_sinkhorn(lk, 1e-10, 100000).info["scaling_domain"] == 1.0


def test_scaling_range_guard():
    from fusebench.objectives.sinkhorn_scaling import LOG_MARGIN, scaling_range_ok

    f32 = torch.float32
    log_tiny, log_max = math.log(torch.finfo(f32).tiny), math.log(torch.finfo(f32).max)
    assert scaling_range_ok(-10.0, [1.0] * 3, [1.0] * 3, 3, 16, f32)
    assert not scaling_range_ok(log_tiny, [1.0] * 3, [1.0] * 3, 3, 16, f32)  # the kernels alone
    edge = log_tiny + LOG_MARGIN + 1.0  # one unit of log left: the smallest scalings may use it
    assert scaling_range_ok(edge, [math.exp(-0.3)] * 3, [1.0] * 3, 3, 16, f32)
    assert not scaling_range_ok(edge, [math.exp(-0.4)] * 3, [1.0] * 3, 3, 16, f32)
    top = (log_max - LOG_MARGIN - 3 * math.log(16)) / 3
    assert scaling_range_ok(-1.0, [1.0] * 3, [math.exp(top - 0.01)] * 3, 3, 16, f32)
    assert not scaling_range_ok(-1.0, [1.0] * 3, [math.exp(top + 0.01)] * 3, 3, 16, f32)
    for bad in (float("nan"), 0.0):
        assert not scaling_range_ok(-1.0, [1.0, bad, 1.0], [1.0] * 3, 3, 16, f32)
    assert not scaling_range_ok(-1.0, [1.0] * 3, [1.0, float("inf"), 1.0], 3, 16, f32)
    assert not scaling_range_ok(-1.0, [1.0] * 3, [1.0, float("nan"), 1.0], 3, 16, f32)


def test_scaling_plans_are_reused_without_aliasing_results():
    """Small plans (buffers, pre-bound calls) are kept between solves: results must not alias them and
    solves of other shapes / dtypes in between must not change an answer."""
    from fusebench.objectives.sinkhorn_scaling import scaling_sinkhorn

    a = _log_kernels(3, 6, 0.1, seed=1)
    b = _log_kernels(4, 5, 0.1, seed=2)
    first = scaling_sinkhorn(a, 1e-9, 10000)
    kept = (first.pair_marginals.clone(), first.log_u.clone(), first.mass, first.iterations)
    others = [scaling_sinkhorn(b, 1e-9, 10000), scaling_sinkhorn(a.float(), 1e-6, 10000),
              scaling_sinkhorn(_log_kernels(3, 6, 0.3, seed=5), 1e-9, 10000)]
    again = scaling_sinkhorn(a, 1e-9, 10000)
    torch.testing.assert_close(first.pair_marginals, kept[0], atol=0, rtol=0)
    torch.testing.assert_close(first.log_u, kept[1], atol=0, rtol=0)
    torch.testing.assert_close(again.pair_marginals, kept[0], atol=0, rtol=0)
    assert (again.mass, again.iterations) == kept[2:]
    assert all(o.converged for o in others)


def test_csd_finite_when_resultant_vanishes():
    x = torch.tensor([[[1.0, 0.0], [0.0, 1.0]], [[-1.0, 0.0], [0.0, 1.0]]], dtype=DT, requires_grad=True)
    v = build("m3g", cost="csd", eps=0.5)(x)  # sample 0: antipodal views, R^2 = 0
    v.backward()
    assert torch.isfinite(v) and torch.isfinite(x.grad).all()
    assert build("m3g", cost="csd", eps=0.5).stats == {}  # fresh module: no stats before a call


def test_stats_and_max_iter_warning():
    x = rand_views(3, 6, 4, seed=4)
    m = build("m3g", eps=0.01, max_iter=2)
    with pytest.warns(RuntimeWarning, match="max_iter"):
        m(x)
    assert m.stats["iterations"] == 2 and m.stats["converged"] == 0.0 and m.stats["marginal_error"] > 1e-3
    mg = build("matching_gap", eps=0.01, max_iter=1)
    with pytest.warns(RuntimeWarning, match="max_iter"):
        mg(x[:2])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m2 = build("m3g")
        m2(x)
    for key in ("iterations", "marginal_error", "cost_J", "cost_P", "dual_value", "gap"):
        assert key in m2.stats
    assert m2.stats["cost_J"] == pytest.approx(np.mean([loop_cost(x, "cv")[(i,) * 3] for i in range(6)]), abs=1e-12)


def test_output_dtype_follows_input():
    x = rand_views(3, 5, 4, seed=6, dtype=torch.float32)
    assert build("m3g")(x).dtype == torch.float32
    assert build("matching_gap")(x[:2]).dtype == torch.float32


# ------------------------------------------------------------------------------------------ bad input
@pytest.mark.parametrize("name", ["m3g", "matching_gap"])
def test_bad_inputs(name):
    m = build(name)
    with pytest.raises(ValueError, match=name):
        m(torch.randn(5, 4))  # wrong rank
    with pytest.raises(ValueError, match=name):
        m(torch.randn(2, 1, 4))  # n < 2
    bad = torch.randn(2, 4, 3)
    bad[1, 2, 0] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        m(bad)
    with pytest.raises(ValueError, match=name):
        m(torch.randn(1, 4, 3))  # k = 1
    mask = torch.ones(2, 4, dtype=torch.bool)
    m(torch.randn(2, 4, 3), mask=mask)  # all present: accepted
    mask[0, 1] = False
    with pytest.raises(ValueError, match="mask"):
        m(torch.randn(2, 4, 3), mask=mask)


def test_matching_gap_refuses_k_not_2():
    with pytest.raises(ValueError, match="matching_gap.*exactly 2"):
        build("matching_gap")(torch.randn(3, 4, 5))


@pytest.mark.parametrize(
    "name,kw",
    [
        ("m3g", {"eps": 0}), ("m3g", {"eps": -1.0}), ("m3g", {"eps": float("nan")}), ("m3g", {"eps": True}),
        ("m3g", {"cost": "dot"}), ("m3g", {"solver": "fast"}), ("m3g", {"tol": 0.0}), ("m3g", {"max_iter": 0}),
        ("m3g", {"max_iter": 2.5}), ("matching_gap", {"cost": "cv"}), ("matching_gap", {"eps": float("inf")}),
        ("matching_gap", {"tol": -1e-3}), ("matching_gap", {"max_iter": "10"}),
    ],
)
def test_bad_hyperparameters(name, kw):
    with pytest.raises(ValueError, match=name):
        build(name, **kw)


def test_reference_solver_refuses_huge_tensor():
    with pytest.raises(ValueError, match="n\\^k"):
        build("m3g", solver="reference")(torch.randn(6, 30, 4))


# ------------------------------------------------------------------------------------------ bench command
def test_bench_command_prints_table(capsys):
    from fusebench.perf import main

    assert main(["objectives", "--quick", "--only", "matching_gap", "--skip-m3g", "--threads", "1"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("| matching_gap |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1].endswith("MiB") and cells[2] == "-" and cells[3] == "-"
    assert "torch" in out and "CPU" in out


def test_bench_vs_ott_without_the_extra_says_how_to_get_it(monkeypatch, capsys):
    from fusebench.perf import main, vs_ott

    monkeypatch.setattr(vs_ott, "import_ott", lambda threads=1: None)
    assert main(["objectives", "--vs", "ott", "--quick"]) == 1
    assert "pip install -e .[peers]" in capsys.readouterr().out


def test_bench_eager_floor_times_the_shell_without_a_solve():
    from fusebench.perf import vs_ott

    calls = []
    real = vs_ott._ShellOnly._cv_gap
    shell_only = vs_ott._ShellOnly

    class Counting(shell_only):
        def _cv_gap(self, z):
            calls.append(tuple(z.shape))
            return real(self, z)

    vs_ott._ShellOnly = Counting
    try:
        t = vs_ott.eager_floor(3, 4, 5, torch.float64, rounds=2)
    finally:
        vs_ott._ShellOnly = shell_only
    assert set(t) == {"empty", "shell"} and all(v > 0 for v in t.values())
    assert calls and all(c == (3, 4, 5) for c in calls)  # the shell ran _CvGap on the views, 22 times
    assert len(calls) == 22


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("bad_value", [float("nan"), float("inf"), -float("inf")])
def test_m3g_fast_path_refuses_non_finite_views_and_keeps_huge_finite_ones(bad_value, backend):
    """The fast path finds NaN / Inf through the Gram matrix instead of scanning the views first: the error
    is the same as every objective's; finite views whose norm overflows still run (as F.normalize: z = 0)."""
    x = rand_views(3, 5, 4, seed=3).float()
    bad = x.clone()
    bad[1, 2, 3] = bad_value
    with pytest.raises(ValueError, match="m3g: views contains NaN or Inf"):
        build("m3g", eps=0.3, backend=backend)(bad.requires_grad_())
    huge = x.clone()
    huge[0, 1] = 3e38  # finite, its squared norm overflows float32
    v = build("m3g", eps=0.3, backend=backend)(huge)
    ref = build("m3g", eps=0.3, solver="reference")(huge)
    assert math.isfinite(float(v)) and float(v) == pytest.approx(float(ref), rel=1e-5, abs=1e-6)


def test_bench_crossover_table():
    from fusebench.perf.crossover import bench_crossover

    lines: list[str] = []
    rows = bench_crossover([(3, 4), (4, 3)], sweeps=3, rounds=1, emit=lines.append)
    assert len(rows) == 2 and len(lines) == 4
    for row in rows:
        assert row["rule"] in row["median"] and row["fastest"] in row["median"]
        assert all(t > 0 for t in row["median"].values())


def test_bench_step_time_ratio():
    from fusebench.perf.step_time import bench_step_time

    r = bench_step_time(rounds=2, warmup=1)
    assert set(r["median"]) == {"m3g", "infonce_pwe"} and r["ratio"] > 0


@pytest.mark.parametrize("k,n", [(3, 6), (4, 5), (6, 3)])
def test_scaling_solver_numpy_and_torch_bindings_agree(k, n, monkeypatch):
    """Small CPU plans run their calls through numpy on the same buffers; larger ones through torch. Both
    are the same iterates (compared with the literal dense reference's pair marginals)."""
    import fusebench.objectives.sinkhorn_scaling as sk

    lk = _log_kernels(k, n, 0.1, seed=40 + k)
    ref, ref_pairs = _dense_reference(lk, 1e-10)
    out = {}
    for limit in (2**16, 0):
        monkeypatch.setattr(sk, "NUMPY_MAX_ENTRIES", limit)
        monkeypatch.setattr(sk, "_PLANS", threading.local())  # no cached plan of the other binding
        for e, dense in _strategies(k):
            res = sk.scaling_sinkhorn(lk, 1e-10, 100000, elim=e, dense=dense)
            plan = next(iter(sk._PLANS.cache.values()))
            assert plan.numpy == (limit > 0)
            assert res.iterations == ref.iterations and res.converged
            for (l, m), pair in ref_pairs.items():
                torch.testing.assert_close(res.pair_marginals[l, m], pair, atol=1e-13, rtol=1e-9)
            out[limit, e, dense] = res
            sk._PLANS.cache.clear()
    for (limit, e, dense), res in out.items():
        torch.testing.assert_close(res.log_u, out[0, e, dense].log_u, atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("numpy_limit,backend", [(2**16, "eager"), (0, "eager"), pytest.param(
    2**16, "compiled", marks=BACKENDS[1].marks)], ids=["numpy", "torch", "compiled"])
def test_m3g_fast_path_gradient_through_the_normalisation_matches_autograd(numpy_limit, backend, monkeypatch):
    """The fast path is one autograd node (normalisation, Gram matrix, Danskin gradient): its gradient
    equals autograd through F.normalize of the generic path, also for a row of zeros (clamped norm)
    and for a rescaled row, and an upstream gradient is applied; with its elementwise work in numpy (small
    CPU problems) and in torch."""
    import fusebench.objectives.sinkhorn_scaling as sk

    monkeypatch.setattr(sk, "NUMPY_MAX_ENTRIES", numpy_limit)
    monkeypatch.setattr(sk, "_PLANS", threading.local())
    x = rand_views(3, 6, 5, seed=7)
    x[1, 2] *= 1e-14  # norm below 1e-12: F.normalize clamps it (z = x / 1e-12, no projection)
    x[2, 4] *= 1e-3
    x.requires_grad_()
    m = build("m3g", eps=0.3, tol=1e-11, max_iter=100000, backend=backend)
    v = m(x)
    assert m.stats["compiled"] == float(backend == "compiled")
    (g_fast,) = torch.autograd.grad(3.0 * v, x)
    z = torch.nn.functional.normalize(x, dim=-1)
    v_slow = build("m3g", eps=0.3, tol=1e-11, max_iter=100000, solver="reference").loss(z)
    (g_slow,) = torch.autograd.grad(3.0 * v_slow, x)
    assert float(v.detach()) == pytest.approx(float(v_slow.detach()), abs=1e-12)
    torch.testing.assert_close(g_fast, g_slow, atol=1e-9, rtol=1e-7)
    assert float(g_fast[1, 2].abs().max()) > 0  # the clamped row gets g / 1e-12, as F.normalize's autograd
