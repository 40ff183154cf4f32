"""The objectives under presence masks, extreme inputs and repeated calls.

Expected values and gradients come from slow references written here (explicit loops over samples and
views in float64, each term built with torch so that ``torch.autograd`` gives its gradient), never from the
code under test. Covered: every mask-honouring objective against its documented equation on random masks,
including a sample with one view present, a view absent for every sample and a full mask (which must give the
unmasked loss bit for bit); masks of the wrong dtype refused naming the dtype; temperatures too small for
float32 refused instead of a NaN loss; duplicate / zero / antipodal embeddings, n = 2 and k = 2 / 10 give a
finite loss and gradient; two calls give bit-identical results and leave the global RNG alone.
"""

from __future__ import annotations

import math
import warnings

import pytest
import torch

from fusebench.objectives import available, build
from fusebench.objectives.infonce import MIN_TAU
from fusebench.runtime.utils import deferred_value_checks

torch.set_num_threads(1)

TAU = 0.3
MASKED = ["infonce_pwe", "infonce_avg", "mv_infonce", "mv_dhel"]


# --------------------------------------------------------------------------------------------------
# slow references (float64, loops; each term a torch scalar so autograd differentiates the reference)
# --------------------------------------------------------------------------------------------------
def _unit(x):
    return x / x.norm(dim=-1, keepdim=True)


def _lse(vals):
    return torch.logsumexp(torch.stack(vals), 0)


def _ntxent_terms(a, b, tau):
    """Both directions of NT-Xent for aligned lists of vectors a, b (candidates: the 2n - 1 others)."""
    out = []
    for x, y in ((a, b), (b, a)):
        for i in range(len(x)):
            cands = [x[i] @ x[j] / tau for j in range(len(x)) if j != i] + [x[i] @ y[j] / tau for j in range(len(x))]
            out.append(_lse(cands) - x[i] @ y[i] / tau)
    return out


def ref_pwe(x, mask, tau=TAU):
    """M3G Eq. 3 under a mask: each pair (l, m) over the samples present in both (>= 2 of them), mean of the terms."""
    k, n, _ = x.shape
    z, terms = _unit(x), []
    for l in range(k):
        for m in range(l + 1, k):
            keep = [i for i in range(n) if mask[l][i] and mask[m][i]]
            if len(keep) >= 2:
                terms += _ntxent_terms([z[l, i] for i in keep], [z[m, i] for i in keep], tau)
    return torch.stack(terms).mean()


def ref_avg(x, mask, tau=TAU, renormalise=False):
    """M3G Eq. 4 under a mask: view l against the plain mean of the present other views of each sample."""
    k, n, _ = x.shape
    z, terms = _unit(x), []
    for l in range(k):
        a, b = [], []
        for i in range(n):
            others = [m for m in range(k) if m != l and mask[m][i]]
            if mask[l][i] and others:
                a.append(z[l, i])
                avg = sum(z[m, i] for m in others) / len(others)
                b.append(_unit(avg) if renormalise else avg)
        if len(a) >= 2:
            terms += _ntxent_terms(a, b, tau)
    return torch.stack(terms).mean()


def ref_mv(x, mask, kind, variant="paper", tau=TAU):
    """MV paper Eqs. 11 / 12 under a mask: one term per sample with >= 2 present views, absent entries nowhere."""
    k, n, _ = x.shape
    z, per = _unit(x), []
    for i in range(n):
        views = [l for l in range(k) if mask[l][i]]
        if len(views) < 2:
            continue
        if kind == "dhel" and variant == "reference_code":
            pos = [z[l, i] @ z[m, i] / tau for l in views for m in views if l < m]
        else:
            pos = [z[l, i] @ z[m, i] / tau for l in views for m in views if l != m]
        if kind == "infonce":
            neg = [z[l, i] @ z[m, j] / tau for l in views for m in range(k) for j in range(n)
                   if mask[m][j] and ((m != l) if variant == "paper" else ((m, j) != (l, i)))]
            per.append(_lse(neg) - _lse(pos))
        else:
            unif = x.new_zeros(())
            for l in views:
                same = [z[l, i] @ z[l, j] / tau for j in range(n) if j != i and mask[l][j]]
                if same:
                    unif = unif + _lse(same)
            per.append(unif - _lse(pos))
    return torch.stack(per).mean()


CASES = [  # (objective id, build kwargs, reference)
    ("infonce_pwe", {}, ref_pwe),
    ("infonce_avg", {}, ref_avg),
    ("infonce_avg", {"renormalise": True}, lambda x, m: ref_avg(x, m, renormalise=True)),
    ("mv_infonce", {}, lambda x, m: ref_mv(x, m, "infonce")),
    ("mv_infonce", {"variant": "reference_code"}, lambda x, m: ref_mv(x, m, "infonce", "reference_code")),
    ("mv_dhel", {}, lambda x, m: ref_mv(x, m, "dhel")),
    ("mv_dhel", {"variant": "reference_code"}, lambda x, m: ref_mv(x, m, "dhel", "reference_code")),
]


def _masks(k: int, n: int, seed: int) -> list[torch.Tensor]:
    """Random masks with the corner cases: a sample seen in one view, a view absent for every sample."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for t in range(4):
        m = torch.rand(k, n, generator=g) > 0.25
        if t % 2 == 0:  # sample 0 present in view 1 only
            m[:, 0] = False
            m[1, 0] = True
        if t >= 2 and k > 2:  # the last view absent for every sample
            m[k - 1] = False
        m[:2, 1:4] = True  # enough samples present in views 0 and 1 for every loss to have terms
        out.append(m)
    return out


@pytest.mark.parametrize("name, kw, ref", CASES, ids=[f"{c[0]}-{'-'.join(map(str, c[1].values())) or 'default'}"
                                                     for c in CASES])
@pytest.mark.parametrize("k", [2, 3, 4])
def test_masked_value_and_gradient_match_the_slow_reference(name, kw, ref, k):
    n, d = 6, 3
    x = torch.randn(k, n, d, generator=torch.Generator().manual_seed(10 * k), dtype=torch.float64)
    mod = build(name, tau=TAU, **kw)
    for mask in _masks(k, n, seed=k):
        got_x = x.clone().requires_grad_(True)
        got = mod(got_x, mask=mask)
        got.backward()
        exp_x = x.clone().requires_grad_(True)
        exp = ref(exp_x, mask.tolist())
        exp.backward()
        assert got.item() == pytest.approx(exp.item(), abs=1e-11), mask.int().tolist()
        torch.testing.assert_close(got_x.grad, exp_x.grad, rtol=0, atol=1e-11)
        assert (got_x.grad[~mask] == 0).all()  # absent entries get no gradient


@pytest.mark.parametrize("name", MASKED)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_full_mask_is_the_unmasked_loss_bit_for_bit(name, dtype):
    x = torch.randn(3, 7, 5, generator=torch.Generator().manual_seed(1)).to(dtype)
    full = torch.ones(3, 7, dtype=torch.bool)
    mod = build(name, tau=TAU)
    plain_x = x.clone().requires_grad_(True)
    plain = mod(plain_x)
    plain.backward()
    for deferred in (False, True):  # inside the training loop's steps a full mask is not tested on the host
        masked_x = x.clone().requires_grad_(True)
        if deferred:
            with deferred_value_checks():
                masked = mod(masked_x, mask=full)
        else:
            masked = mod(masked_x, mask=full)
        masked.backward()
        assert masked.item() == plain.item()
        assert torch.equal(masked_x.grad, plain_x.grad)


def _views_call(mod, x, **kw):
    if mod.input_kind == "views":
        return mod(x, **kw)
    if mod.input_kind == "pairs":
        return mod(x, x.flip(0).detach() * 1.5, **kw)
    return mod(x[0], x[1], x[1:].reshape(-1, x.shape[-1]))


@pytest.mark.parametrize("name", [o for o in available() if o != "tuple_infonce"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.uint8, torch.int64])
def test_a_mask_of_another_dtype_is_refused_naming_its_dtype(name, dtype):
    k = 2 if name in ("dhel", "matching_gap") else 3
    x = torch.randn(k, 5, 4)
    mask = torch.ones(k, 5, dtype=dtype)
    mask[0, 0] = 0
    dt = str(dtype).removeprefix("torch.")
    with pytest.raises(ValueError, match=rf"^{name}: mask must be a BoolTensor .* got a {dt} tensor of shape "
                                         rf"\({k}, 5\); a 0/1 mask is passed as mask.bool\(\)"):
        _views_call(build(name), x, mask=mask)
    with pytest.raises(ValueError, match=rf"^{name}: mask must be a BoolTensor .* got a bool tensor of shape \(5, {k}\)$"):
        _views_call(build(name), x, mask=torch.ones(5, k, dtype=torch.bool))


TAU_LOSSES = [o for o in available() if "tau" in build(o).__dict__]


@pytest.mark.parametrize("name", TAU_LOSSES)
@pytest.mark.parametrize("tau", [1e-44, 1e-38, 5e-31])
def test_a_temperature_too_small_for_float32_is_refused(name, tau):
    # these used to give a NaN loss and NaN gradients without a word (1 / tau or the loss's sums overflow float32)
    with pytest.raises(ValueError, match=rf"^{name}: tau must be >= 1e-30, got {tau!r}: .*overflow float32"):
        build(name, tau=tau)


@pytest.mark.parametrize("name", TAU_LOSSES)
def test_the_smallest_temperature_taken_gives_a_finite_loss(name):
    g = torch.Generator().manual_seed(3)
    k = 2 if name == "dhel" else 10
    x = torch.randn(k, 64, 8, generator=g)
    x[:, 1] = x[:, 0]  # a duplicate sample: ties
    mask = torch.rand(k, 64, generator=g) > 0.3
    mod = build(name, tau=MIN_TAU)
    for kw in ([{}, {"mask": mask}] if mod.supports_mask else [{}]):
        xr = x.clone().requires_grad_(True)
        out = _views_call(mod, xr, **kw)
        out.backward()
        assert math.isfinite(out.item()) and torch.isfinite(xr.grad).all()
        assert out.item() >= 0 and out.item() < 10 / MIN_TAU  # scores are at most 1 / tau in size


def _extreme_inputs() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(4)
    base = torch.randn(3, 6, 5, generator=g)
    dup = base.clone()
    dup[:, 1] = dup[:, 0]
    zero = base.clone()
    zero[:, 2] = 0
    anti = base.clone()
    anti[1] = -anti[0]
    return {"duplicate sample": dup, "all samples equal": base[:, :1].expand(3, 6, 5).clone(),
            "zero sample": zero, "all zero": torch.zeros(3, 6, 5), "antipodal views": anti,
            "n = 2": base[:, :2].clone(), "k = 10": torch.randn(10, 4, 5, generator=g)}


@pytest.mark.parametrize("case", list(_extreme_inputs()))
@pytest.mark.parametrize("name", available())
def test_extreme_inputs_give_a_finite_loss_and_gradient(name, case):
    x = _extreme_inputs()[case]
    if name in ("dhel", "matching_gap"):
        x = x[:2]
    xr = x.clone().requires_grad_(True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a Sinkhorn solve on degenerate costs may warn about max_iter
        out = _views_call(build(name), xr)
        out.backward()
    assert math.isfinite(out.item())
    assert torch.isfinite(xr.grad).all()


@pytest.mark.parametrize("name", available())
def test_two_calls_are_bit_identical_and_leave_the_global_rng_alone(name):
    k = 2 if name in ("dhel", "matching_gap") else 3
    x = torch.randn(k, 7, 6, generator=torch.Generator().manual_seed(5))
    mod = build(name)
    results = []
    for _ in range(2):
        before = torch.random.get_rng_state()
        xr = x.clone().requires_grad_(True)
        out = _views_call(mod, xr)
        out.backward()
        assert torch.equal(torch.random.get_rng_state(), before)
        results.append((out.detach(), xr.grad))
    assert torch.equal(results[0][0], results[1][0])
    assert torch.equal(results[0][1], results[1][1])
