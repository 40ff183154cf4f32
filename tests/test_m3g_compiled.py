"""M3G's compiled backend (objectives/m3g_compiled.py, ``backend="compiled"`` / ``"auto"``).

Expected values come from the literal dense reference solver (``solver="reference"``: the n^k cost tensor
and Algorithm 1 in the log domain, its gradient by autograd) and from the eager fast path; the range guard's
floor is worked out here from the views.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

pytest.importorskip("numba", reason="numba is not installed (extra `fast`): no compiled backend")

from fusebench.objectives import build  # noqa: E402
from fusebench.objectives import m3g as m3g_module  # noqa: E402
from fusebench.objectives import sinkhorn_scaling  # noqa: E402


def views(k: int, n: int, d: int = 5, seed: int = 0, dtype=torch.float64) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(n, d, generator=g, dtype=torch.float64)
    return (base + 0.7 * torch.randn(k, n, d, generator=g, dtype=torch.float64)).to(dtype)


def value_and_grad(x: torch.Tensor, **kw) -> tuple[float, torch.Tensor, dict]:
    m = build("m3g", **kw)
    xr = x.detach().clone().requires_grad_()
    v = m(xr)
    (g,) = torch.autograd.grad(v, xr)
    return float(v.detach()), g, m.stats


@pytest.mark.parametrize("product", ["in the compiled call", "torch GEMM"])
@pytest.mark.parametrize("k,n", [(2, 9), (3, 7), (4, 5), (5, 4), (6, 3)])
def test_compiled_equals_reference_to_convergence(k, n, product, monkeypatch):
    from fusebench.objectives import m3g_compiled

    monkeypatch.setattr(m3g_compiled, "GRAD_MAX_MACS", 2**40 if product == "in the compiled call" else 0)
    x = views(k, n, seed=k)
    v, g, st = value_and_grad(x, eps=0.1, tol=1e-10, max_iter=100000, backend="compiled")
    v_ref, g_ref, st_ref = value_and_grad(x, eps=0.1, tol=1e-10, max_iter=100000, solver="reference")
    assert st["compiled"] == 1.0 and st["reference_solver"] == 0.0
    assert st["iterations"] == st_ref["iterations"]  # same iterates, same stopping sweep
    assert v == pytest.approx(v_ref, abs=1e-10)
    torch.testing.assert_close(g, g_ref, atol=1e-10, rtol=1e-8)
    for key in ("cost_J", "cost_P", "dual_value", "gap", "mass", "marginal_error", "plogp"):
        assert st[key] == pytest.approx(st_ref[key], abs=1e-10, rel=1e-7), key


def test_compiled_after_a_fixed_number_of_sweeps_equals_reference():
    """tol = 0: both stop at max_iter (a warning each), at the same iterate."""
    x = views(3, 6, seed=11)
    with pytest.warns(RuntimeWarning, match="max_iter"):
        v, g, st = value_and_grad(x, eps=0.01, tol=1e-300, max_iter=37, backend="compiled")
    with pytest.warns(RuntimeWarning, match="max_iter"):
        v_ref, g_ref, st_ref = value_and_grad(x, eps=0.01, tol=1e-300, max_iter=37, solver="reference")
    assert st["iterations"] == st_ref["iterations"] == 37 and st["converged"] == 0.0
    assert v == pytest.approx(v_ref, abs=1e-9)
    assert st["marginal_error"] == pytest.approx(st_ref["marginal_error"], rel=1e-6)
    torch.testing.assert_close(g, g_ref, atol=1e-9, rtol=1e-6)


@pytest.mark.parametrize("eps", [0.05, 0.01])
def test_compiled_float32_keeps_the_scaling_domain_and_returns_float32(eps):
    """float32 views are solved in float64 inside: where the eager float32 solve falls back to the log
    domain (eps = 0.01), the compiled one does not, and its answer is the float64 one."""
    x = views(3, 8, d=3, seed=40, dtype=torch.float32)
    v, g, st = value_and_grad(x, eps=eps, max_iter=20000, backend="compiled")
    v_ref, g_ref, st_ref = value_and_grad(x.double(), eps=eps, max_iter=20000, solver="reference")
    assert g.dtype == torch.float32 and math.isfinite(v) and torch.isfinite(g).all()
    assert st["compiled"] == 1.0 and st["scaling_domain"] == 1.0 and st["iterations"] == st_ref["iterations"]
    assert v == pytest.approx(v_ref, abs=1e-7)
    torch.testing.assert_close(g.double(), g_ref, atol=1e-6, rtol=1e-5)


def test_range_guard_before_the_first_sweep_hands_the_solve_back(monkeypatch):
    """A margin no problem can meet: the compiled call refuses before sweeping and the eager path (log
    domain, since its own guard fails as well) gives the reference answer."""
    monkeypatch.setattr(sinkhorn_scaling, "LOG_MARGIN", 1e4)
    x = views(3, 6, seed=5)
    v, g, st = value_and_grad(x, eps=0.2, tol=1e-10, max_iter=100000)
    v_ref, g_ref, _ = value_and_grad(x, eps=0.2, tol=1e-10, max_iter=100000, solver="reference")
    assert st["compiled"] == 0.0 and st["compiled_fallback_sweep"] == 0.0 and st["scaling_domain"] == 0.0
    assert v == pytest.approx(v_ref, abs=1e-10)
    torch.testing.assert_close(g, g_ref, atol=1e-10, rtol=1e-8)


def test_range_guard_in_the_middle_of_a_solve_hands_it_back(monkeypatch):
    """A margin that the kernels alone meet but the first sweep's scalings do not (checked every sweep):
    the compiled call stops after sweep 1 and the eager path solves the problem from the start."""
    eps, k = 0.05, 3
    x = views(k, 6, seed=3)
    z = torch.nn.functional.normalize(x, dim=-1)
    dist = 2.0 - 2.0 * torch.einsum("lid,mjd->lmij", z, z)
    floor = -sum(float(dist[l, m].max()) for l in range(k) for m in range(l + 1, k)) / (k * k * eps)
    log_tiny = math.log(np.finfo(np.float64).tiny)
    monkeypatch.setattr(sinkhorn_scaling, "LOG_MARGIN", floor - log_tiny - 1e-6)
    monkeypatch.setattr(sinkhorn_scaling, "RANGE_CHECK_EVERY", 1)
    v, g, st = value_and_grad(x, eps=eps, tol=1e-10, max_iter=100000)
    monkeypatch.undo()
    v_ref, g_ref, st_ref = value_and_grad(x, eps=eps, tol=1e-10, max_iter=100000, solver="reference")
    assert st["compiled"] == 0.0 and st["compiled_fallback_sweep"] == 1.0
    assert st["iterations"] == st_ref["iterations"] and v == pytest.approx(v_ref, abs=1e-10)
    torch.testing.assert_close(g, g_ref, atol=1e-10, rtol=1e-8)
    assert value_and_grad(x, eps=eps, tol=1e-10, max_iter=100000)[2]["compiled"] == 1.0  # default margin: compiled


def test_non_contiguous_half_precision_and_upstream_gradient():
    x = views(3, 5, d=4, seed=8, dtype=torch.float32)
    strided = x.transpose(0, 1).contiguous().transpose(0, 1)  # same values, not C-contiguous
    assert not strided.is_contiguous()
    v, g, st = value_and_grad(strided, eps=0.2, backend="compiled")
    v2, g2, _ = value_and_grad(x, eps=0.2, backend="compiled")
    assert st["compiled"] == 1.0 and v == v2
    torch.testing.assert_close(g, g2, atol=0, rtol=0)
    half = x.to(torch.bfloat16).requires_grad_()
    out = build("m3g", eps=0.2, backend="compiled")(half)
    out.backward()
    assert out.dtype == torch.float32 and half.grad.dtype == torch.bfloat16 and torch.isfinite(half.grad.float()).all()
    v_half, g_half, _ = value_and_grad(half.detach().double(), eps=0.2, solver="reference")  # the same, in float64
    assert float(out.detach().float()) == pytest.approx(v_half, rel=1e-2)
    torch.testing.assert_close(half.grad.double(), g_half, atol=1e-2, rtol=2e-2)
    xr = x.clone().requires_grad_()
    loss = build("m3g", eps=0.2, backend="compiled")(xr)
    (g3,) = torch.autograd.grad(-2.5 * loss, xr)
    torch.testing.assert_close(g3, -2.5 * g2)


def test_retained_graph_accumulates_and_second_derivative_is_refused():
    x = views(3, 5, seed=2).requires_grad_()
    m = build("m3g", eps=0.2, backend="compiled")
    v = m(x)
    v.backward(retain_graph=True)
    first = x.grad.clone()
    v.backward()
    torch.testing.assert_close(x.grad, 2 * first, atol=0, rtol=0)  # the saved gradient is not aliased by .grad
    x.grad = None
    (g,) = torch.autograd.grad(m(x), x, create_graph=True)
    torch.testing.assert_close(g.detach(), first)
    with pytest.raises(RuntimeError, match="does not require grad"):  # no second derivative, not a silent zero
        torch.autograd.grad(g.sum(), x)


def test_auto_picks_compiled_for_small_cpu_problems_only(monkeypatch):
    small = views(3, 5, seed=1, dtype=torch.float32)
    m = build("m3g", eps=0.2)
    m(small)
    assert m.stats["compiled"] == 1.0
    monkeypatch.setattr(m3g_module, "COMPILED_MAX_ENTRIES", 5**3 - 1)
    m(small)
    assert m.stats["compiled"] == 0.0
    build("m3g", eps=0.2, backend="compiled")(small)  # "compiled" ignores the size rule
    m_eager = build("m3g", eps=0.2, backend="eager")
    m_eager(small)
    assert m_eager.stats["compiled"] == 0.0


def test_backend_errors(monkeypatch):
    with pytest.raises(ValueError, match="backend must be one of 'auto', 'eager', 'compiled', got 'numba'"):
        build("m3g", backend="numba")
    with pytest.raises(ValueError, match="backend='compiled' materialises n\\^k = 30\\^6"):
        build("m3g", backend="compiled")(torch.randn(6, 30, 4))
    monkeypatch.setattr(m3g_module, "_COMPILED", [None])  # as without numba
    with pytest.raises(ImportError, match=r"pip install 'fusebench\[fast\]'"):
        build("m3g", backend="compiled")(torch.randn(3, 4, 4))
    m = build("m3g")  # auto: the eager path, silently
    m(torch.randn(3, 4, 4))
    assert m.stats["compiled"] == 0.0


def test_compiled_nan_is_named_like_every_objective():
    x = views(3, 4, seed=0)
    x[2, 1, 0] = float("nan")
    with pytest.raises(ValueError, match="m3g: views contains NaN or Inf"):
        build("m3g", backend="compiled")(x)


def test_bench_backends_table():
    from fusebench.perf.crossover import bench_backends

    lines: list[str] = []
    rows = bench_backends([(3, 4), (2, 300)], seconds=0.05, emit=lines.append)
    assert len(lines) == 4 and [r["picks"] for r in rows] == ["compiled", "eager"]
    assert all(t > 0 for r in rows for t in r["median"].values())


def test_auto_goes_on_eagerly_when_the_compiled_call_fails(monkeypatch):
    """A numba that cannot compile here (a broken installation): backend='auto' warns once and uses the eager
    path from then on; backend='compiled' raises."""
    from fusebench.objectives import m3g_compiled

    def broken(*args):
        raise RuntimeError("no LLVM here")

    monkeypatch.setattr(m3g_module, "_COMPILED", [m3g_compiled])
    monkeypatch.setattr(m3g_compiled, "cv_gap", broken)
    x = views(3, 5, seed=4)
    with pytest.raises(RuntimeError, match="no LLVM here"):
        build("m3g", backend="compiled")(x)
    with pytest.warns(RuntimeWarning, match="compiled backend failed .RuntimeError: no LLVM here.; backend='auto' uses"):
        v, g, st = value_and_grad(x, eps=0.2, tol=1e-10)
    v_ref, g_ref, _ = value_and_grad(x, eps=0.2, tol=1e-10, solver="reference")
    assert st["compiled"] == 0.0 and "compiled_fallback_sweep" not in st and v == pytest.approx(v_ref, abs=1e-10)
    torch.testing.assert_close(g, g_ref, atol=1e-10, rtol=1e-8)
    assert m3g_module.compiled_module() is None  # and no second attempt


def test_numba_that_cannot_be_set_up_means_the_eager_path(monkeypatch):
    """numba installed but refusing at import (e.g. no writable cache folder): auto warns once and runs eagerly,
    'compiled' says numba is needed."""
    def refuse(name):
        raise RuntimeError("cannot cache function: no locator available")

    monkeypatch.setattr(m3g_module, "_COMPILED", [])
    monkeypatch.setattr(m3g_module.importlib, "import_module", refuse)
    with pytest.warns(RuntimeWarning, match="compiled backend is unavailable .RuntimeError: cannot cache"):
        assert m3g_module.compiled_module() is None
    m = build("m3g", eps=0.2)
    m(views(3, 4, seed=1))
    assert m.stats["compiled"] == 0.0
    with pytest.raises(ImportError, match="needs a working numba"):
        build("m3g", backend="compiled")(views(3, 4, seed=1))
