"""Objectives compute in float32 (or better) whatever the caller's autocast (objectives/base.py).

The training runner wraps pretraining in ``torch.autocast(..., dtype=torch.bfloat16)`` (or float16);
the objectives run inside it. ``MultiViewObjective`` runs every subclass's ``forward`` with autocast off
and half-precision floating inputs upcast to float32, so a loss called under autocast on bfloat16 inputs
is the float32 computation on the same (bf16-rounded) values.

The reference of every check is independent of the code path under test: the same objective called
without autocast on ``x_bf.float()`` (the bf16 values, exactly representable in float32). Tolerances:

* value: ``rtol=1e-5, atol=1e-6``. Both sides are the same float32 computation on the same values; only
  a thread-count-dependent reduction order could separate them (a few float32 ulps).
* gradient: the bf16 input's gradient is the float32 gradient rounded to bf16 by the cast's backward.
  bf16 keeps 8 significant bits (relative spacing 2^-8..2^-7 ~ 4e-3..8e-3), so a float32 gradient that
  moves by a few ulps can round to the neighbouring bf16 value: ``rtol=1e-2`` (> one bf16 ulp) and
  ``atol=1e-3 * max|g_ref|`` for entries near 0.
"""

from __future__ import annotations

import copy
import inspect
import io
import pickle
import warnings

import pytest
import torch
import torch.nn.functional as F

from fusebench import objectives
from fusebench.objectives.base import MultiViewObjective

# one intra-op thread (conftest): a fixed reduction order for the float64 references
pytestmark = pytest.mark.usefixtures("one_torch_thread")


NAMES = objectives.OBJECTIVES.builtin()  # fusebench's own (a plugin installed here is its author's to test)
K, N, D = 3, 64, 128
VALUE_TOL = {"rtol": 1e-5, "atol": 1e-6}


def _numba_ok() -> bool:
    try:
        import numba  # noqa: F401
    except ImportError:
        return False
    from fusebench.objectives import m3g as m3g_module

    return m3g_module.compiled_module() is not None


def aligned(shape: tuple[int, ...], seed: int, base_shape: tuple[int, ...] | None = None) -> torch.Tensor:
    """float32 ``base + 0.05 * noise`` (views of the same samples strongly aligned), seeded."""
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(base_shape or shape[-2:], generator=g)
    return base + 0.05 * torch.randn(shape, generator=g)


def make_inputs(module, dtype: torch.dtype = torch.bfloat16, n: int = N):
    """``(args, kwargs, grad_positions)`` of one call of ``module`` in ``dtype`` (float32 values rounded)."""
    kind = module.input_kind
    if kind == "pairs":  # BYOL: predictions [k, n, d] (gradient), targets [k, n, d] (detached inside)
        k = min(K, module.max_views or K)
        x = aligned((2, k, n, D), seed=1, base_shape=(n, D))
        return (x[0].to(dtype), x[1].to(dtype)), {}, (0,)
    if kind == "tuple":  # TupleInfoNCE: anchor [n, d], positive [n, d], negatives [m, d], weights [m]
        x = aligned((2, n, D), seed=2)
        g = torch.Generator().manual_seed(3)
        negatives = x[1][torch.randperm(n, generator=g)] + 0.05 * torch.randn(n, D, generator=g)
        weights = torch.rand(n, generator=g) + 0.5
        return (x[0].to(dtype), x[1].to(dtype), negatives.to(dtype)), {"weights": weights.to(dtype)}, (0, 1, 2)
    assert kind == "views", kind
    k = max(module.min_views, min(K, module.max_views or K))
    views = aligned((k, n, D), seed=0)
    return (views.to(dtype),), {"mask": torch.ones(k, n, dtype=torch.bool)}, (0,)


def leaves(args, kwargs, grad_positions, to=None):
    """Fresh leaf copies of the inputs (``to``: dtype of the copies, default unchanged), gradients on."""
    out = []
    for i, a in enumerate(args):
        a = a.detach().to(to or a.dtype)
        out.append(a.requires_grad_() if i in grad_positions else a)
    kw = {key: (v.detach().to(to) if to is not None and v.is_floating_point() else v) for key, v in kwargs.items()}
    return tuple(out), kw


def call(module, args, kwargs, grad_positions, autocast: torch.dtype | None):
    """value, gradients w.r.t. ``args[grad_positions]`` and a copy of ``module.stats``."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # e.g. Sinkhorn hitting max_iter fails the test
        if autocast is None:
            out = module(*args, **kwargs)
        else:
            with torch.autocast("cpu", dtype=autocast):
                out = module(*args, **kwargs)
    grads = torch.autograd.grad(out, [args[i] for i in grad_positions])
    return out, grads, dict(module.stats)


def check_against_float32_reference(name: str, autocast_dtype: torch.dtype, n: int = N,
                                    **hparams) -> tuple[dict, dict]:
    module = objectives.build(name, **hparams)
    args, kwargs, pos = make_inputs(module, autocast_dtype, n)
    half_args, half_kw = leaves(args, kwargs, pos)
    out, grads, stats = call(module, half_args, half_kw, pos, autocast_dtype)
    ref_args, ref_kw = leaves(args, kwargs, pos, to=torch.float32)  # the same values in float32
    ref, ref_grads, ref_stats = call(objectives.build(name, **hparams), ref_args, ref_kw, pos, None)

    assert ref.dtype == torch.float32 and out.shape == ()
    value, ref_value = float(out.detach()), float(ref.detach())
    if abs(ref_value) > 1e-4:  # the bf16 InfoNCE bug: 0.000 where the float32 loss is 0.024
        assert abs(value) > 0.5 * abs(ref_value), (name, value, ref_value)
    torch.testing.assert_close(out.detach().float(), ref.detach(), **VALUE_TOL)
    assert out.dtype == torch.float32, f"{name}: loss in {out.dtype}, not the float32 compute dtype"
    for g, g_ref, a in zip(grads, ref_grads, (half_args[i] for i in pos)):
        assert g.dtype == a.dtype == autocast_dtype  # the gradient flows back to the half-precision leaf
        assert torch.isfinite(g.float()).all()
        scale = float(g_ref.abs().max())
        assert scale > 0, name
        torch.testing.assert_close(g.float(), g_ref.to(autocast_dtype).float(), rtol=1e-2, atol=1e-3 * scale)
    return stats, ref_stats


@pytest.mark.parametrize("name", NAMES)
def test_bf16_autocast_is_the_float32_computation(name: str) -> None:
    stats, ref_stats = check_against_float32_reference(name, torch.bfloat16)
    if "iterations" in ref_stats:  # m3g, matching_gap: the same Sinkhorn solve (float32 converges in a few sweeps)
        assert stats["iterations"] == ref_stats["iterations"] and stats["converged"] == ref_stats["converged"] == 1.0


M3G_BACKENDS = ["eager", pytest.param("compiled", marks=pytest.mark.skipif(
    not _numba_ok(), reason="numba is not installed (extra `fast`): no compiled backend"))]


@pytest.mark.parametrize("backend", M3G_BACKENDS)
def test_m3g_sinkhorn_converges_in_the_same_sweeps_under_autocast(backend: str) -> None:
    stats, ref_stats = check_against_float32_reference("m3g", torch.bfloat16, backend=backend)
    assert stats["compiled"] == ref_stats["compiled"] == (1.0 if backend == "compiled" else 0.0)
    assert stats["converged"] == ref_stats["converged"] == 1.0
    assert stats["iterations"] == ref_stats["iterations"]
    assert stats["iterations"] < 20  # strongly aligned views: a couple of sweeps (a bf16 solve ran 1000)


@pytest.mark.parametrize("hparams", [{"solver": "reference"}, {"cost": "csd"}], ids=["reference", "csd"])
def test_m3g_dense_paths_under_autocast(hparams: dict) -> None:
    """The reference solver (the base class's forward, then the n^k cost tensor) on a smaller batch."""
    stats, ref_stats = check_against_float32_reference("m3g", torch.bfloat16, n=12, **hparams)
    assert stats["reference_solver"] == 1.0 and stats["converged"] == ref_stats["converged"] == 1.0
    assert stats["iterations"] == ref_stats["iterations"]


@pytest.mark.parametrize("name", ["infonce_pwe", "mv_infonce", "byol_pwe", "tuple_infonce", "m3g"])
def test_fp16_autocast_is_the_float32_computation(name: str) -> None:
    stats, ref_stats = check_against_float32_reference(name, torch.float16)
    if name == "m3g":
        assert stats["iterations"] == ref_stats["iterations"] and stats["converged"] == 1.0


@pytest.mark.parametrize("name", ["infonce_pwe", "pvc_geometric", "byol_avg", "tuple_infonce", "m3g"])
def test_float64_input_stays_float64_under_autocast(name: str) -> None:
    module = objectives.build(name)
    args, kwargs, pos = make_inputs(module, torch.float64)
    a, kw = leaves(args, kwargs, pos)
    out, grads, _ = call(module, a, kw, pos, torch.bfloat16)
    a_ref, kw_ref = leaves(args, kwargs, pos)
    ref, ref_grads, _ = call(objectives.build(name), a_ref, kw_ref, pos, None)
    assert out.dtype == torch.float64 and all(g.dtype == torch.float64 for g in grads)
    torch.testing.assert_close(out.detach(), ref.detach(), rtol=1e-12, atol=1e-12)
    for g, g_ref in zip(grads, ref_grads):
        torch.testing.assert_close(g, g_ref, rtol=1e-10, atol=1e-12)


class ThirdParty(MultiViewObjective):
    """A third-party loss (as registered through the entry point group): its own ``forward``, a matmul,
    no ``compute_dtype`` / ``normalise`` of its own."""

    min_views = 2
    max_views = 2

    def forward(self, views: torch.Tensor, mask: torch.Tensor | None = None, *, scale: torch.Tensor | None = None):
        self.seen = {"views": views.dtype, "scale": None if scale is None else scale.dtype,
                     "mask": None if mask is None else mask.dtype}
        z = F.normalize(views, dim=-1)
        logits = z[0] @ z[1].T / 0.1  # under a live autocast this matmul would run in bf16
        self.seen["logits"] = logits.dtype
        out = F.cross_entropy(logits, torch.arange(views.shape[1]))
        return out if scale is None else out * scale


class ThirdPartyChild(ThirdParty):
    """A subclass of a subclass that overrides ``forward`` again and calls ``super().forward``."""

    def forward(self, views, mask=None, *, scale=None):
        self.child_seen = views.dtype
        return 2.0 * super().forward(views, mask, scale=scale)


@pytest.mark.parametrize("cls", [ThirdParty, ThirdPartyChild])
def test_third_party_subclass_with_its_own_forward_computes_in_float32(cls) -> None:
    x = aligned((2, N, D), seed=5).bfloat16()
    scale = torch.tensor(1.5).bfloat16()
    mask = torch.ones(2, N, dtype=torch.bool)
    module = cls()
    pre, post = [], []
    module.register_forward_pre_hook(lambda mod, args: pre.append(args[0].dtype))
    module.register_forward_hook(lambda mod, args, out: post.append(out.dtype))

    xb = x.clone().requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = module(xb, mask, scale=scale)
    (g,) = torch.autograd.grad(out, xb)
    assert module.seen == {"views": torch.float32, "scale": torch.float32, "mask": torch.bool,
                           "logits": torch.float32}
    if cls is ThirdPartyChild:
        assert module.child_seen == torch.float32
    assert pre == [torch.bfloat16] and post == [torch.float32]  # hooks still run, around the upcast call
    assert "scale" in inspect.signature(cls.forward).parameters  # the wrapper keeps the signature
    assert out.dtype == torch.float32 and g.dtype == torch.bfloat16

    xf = x.float().requires_grad_()
    ref = cls()(xf, mask, scale=scale.float())
    (g_ref,) = torch.autograd.grad(ref, xf)
    torch.testing.assert_close(out.detach(), ref.detach(), **VALUE_TOL)
    assert float(ref.detach()) > 1e-3 and float(out.detach()) > 0.5 * float(ref.detach())
    torch.testing.assert_close(g.float(), g_ref.bfloat16().float(), rtol=1e-2, atol=1e-3 * float(g_ref.abs().max()))
    # autocast is back on after the call (the objective turned it off for itself only)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        module(xb, mask)
        assert torch.is_autocast_enabled("cpu") and (x[0] @ x[1].T.float()).dtype == torch.bfloat16


@pytest.mark.parametrize("name", NAMES)
def test_built_objectives_still_pickle_copy_and_state_dict(name: str) -> None:
    module = objectives.build(name)
    assert isinstance(module.state_dict(), dict)
    buf = io.BytesIO()
    torch.save(module, buf)
    clones = [pickle.loads(pickle.dumps(module)), copy.deepcopy(module)]
    buf.seek(0)
    clones.append(torch.load(buf, weights_only=False))
    args, kwargs, pos = make_inputs(module, torch.bfloat16)
    ref, _, _ = call(module, *leaves(args, kwargs, pos, to=torch.float32), pos, None)
    for clone in clones:
        assert type(clone) is type(module) and clone.name == module.name
        clone.load_state_dict(module.state_dict())
        out, _, _ = call(clone, *leaves(args, kwargs, pos), pos, torch.bfloat16)
        assert out.dtype == torch.float32
        torch.testing.assert_close(out.detach(), ref.detach(), **VALUE_TOL)
