"""Tests of the contrastive objectives (InfoNCE family, poly-view, MV-InfoNCE/DHEL, BYOL, TupleInfoNCE).

Every expected value comes from a slow reference written here with explicit Python loops over
samples, views and candidates (plain floats, math.exp/log), or from a closed form worked out by hand;
never from the code under test.
"""

from __future__ import annotations

import math

import pytest
import torch

from fusebench.objectives import available, build
from fusebench.objectives.tuple_infonce import (
    assemble_negatives,
    cross_modal_discrimination_accuracy,
    cross_modal_discrimination_reward,
    disturbed_negatives,
    mixture_weights,
    random_derangement,
)

torch.set_num_threads(1)

MINE = [
    "infonce_pwe", "infonce_avg", "multicrop", "pvc_geometric", "pvc_arithmetic", "suff_stats",
    "mv_infonce", "mv_dhel", "dhel", "byol_pwe", "byol_avg", "tuple_infonce",
]
MASKED = ["infonce_pwe", "infonce_avg", "mv_infonce", "mv_dhel"]
TAU = 0.3


# --------------------------------------------------------------------------------------------------
# slow references: nested python lists, explicit loops
# --------------------------------------------------------------------------------------------------
def unit(v):
    norm = math.sqrt(sum(c * c for c in v))
    return [c / norm for c in v]


def dot(u, v):
    return sum(a * b for a, b in zip(u, v))


def lse(vals):
    m = max(vals)
    return m + math.log(sum(math.exp(v - m) for v in vals))


def to_lists(x):
    """[k, n, d] tensor -> z[l][i] = unit vector (python list)."""
    return [[unit(row) for row in view] for view in x.tolist()]


def mean(vals):
    return sum(vals) / len(vals)


def ntxent_anchor_terms(a, b, tau):
    """Terms of both directions of SimCLR's NT-Xent for aligned lists of unit vectors a, b."""
    n = len(a)
    out = []
    for x, y in ((a, b), (b, a)):
        for i in range(n):
            cands = [dot(x[i], x[j]) / tau for j in range(n) if j != i] + [dot(x[i], y[j]) / tau for j in range(n)]
            out.append(lse(cands) - dot(x[i], y[i]) / tau)
    return out


def ref_pwe(z, tau, mask=None):
    k, n = len(z), len(z[0])
    terms = []
    for l in range(k):
        for m in range(l + 1, k):
            keep = [i for i in range(n) if mask is None or (mask[l][i] and mask[m][i])]
            if len(keep) >= 2:
                terms += ntxent_anchor_terms([z[l][i] for i in keep], [z[m][i] for i in keep], tau)
    return mean(terms)


def ref_avg(z, tau, mask=None, renormalise=False):
    """M3G Eq. 4 / MV Eq. 5 as printed: NT-Xent(X^l, plain mean of the present other views), the mean
    NOT put back on the sphere (``renormalise=True``: the re-normalised option)."""
    k, n, d = len(z), len(z[0]), len(z[0][0])
    pres = [[True] * n for _ in range(k)] if mask is None else mask
    terms = []
    for l in range(k):
        keep, a, b = [], [], []
        for i in range(n):
            others = [m for m in range(k) if m != l and pres[m][i]]
            if pres[l][i] and others:
                keep.append(i)
                a.append(z[l][i])
                avg = [sum(z[m][i][c] for m in others) / len(others) for c in range(d)]
                b.append(unit(avg) if renormalise else avg)
        if len(keep) >= 2:
            terms += ntxent_anchor_terms(a, b, tau)  # scores are plain dot products / tau
    return mean(terms)


def ref_multicrop(z, tau):
    k, n = len(z), len(z[0])
    terms = []
    for al in range(k):
        for be in range(k):
            if al == be:
                continue
            for i in range(n):
                cands = [dot(z[al][i], z[al][j]) / tau for j in range(n) if j != i]
                cands += [dot(z[al][i], z[be][j]) / tau for j in range(n)]
                terms.append(lse(cands) - dot(z[al][i], z[be][i]) / tau)
    return mean(terms)


def pvc_loglik(z, tau, i, a, b):
    k, n = len(z), len(z[0])
    pos = dot(z[a][i], z[b][i]) / tau
    cands = [pos] + [dot(z[a][i], z[g][j]) / tau for j in range(n) if j != i for g in range(k)]
    return pos - lse(cands)


def ref_pvc(z, tau, mode):
    k, n = len(z), len(z[0])
    per = []
    for a in range(k):
        for i in range(n):
            lls = [pvc_loglik(z, tau, i, a, b) for b in range(k) if b != a]
            if mode == "geometric":
                per.append(-mean(lls))
            elif mode == "arithmetic":
                per.append(-math.log(mean([math.exp(v) for v in lls])))
            elif mode == "reference":  # Algorithm 1 per sample: logsumexp of the cross-entropies - log(batch)
                per.append(math.log(sum(math.exp(-v) for v in lls)) - math.log(n))
    if mode == "port":  # public port: F.cross_entropy's batch mean per (a, b), then logsumexp over b
        for a in range(k):
            ces = [mean([-pvc_loglik(z, tau, i, a, b) for i in range(n)]) for b in range(k) if b != a]
            per.append(math.log(sum(math.exp(c) for c in ces)) - math.log(n))
    return mean(per)


def ref_suff(z, tau):
    k, n, d = len(z), len(z[0]), len(z[0][0])
    q = [[unit([sum(z[b][i][c] for b in range(k) if b != a) / (k - 1) for c in range(d)]) for i in range(n)]
         for a in range(k)]
    terms = []
    for a in range(k):
        for i in range(n):
            pos = dot(z[a][i], q[a][i]) / tau
            cands = [pos] + [dot(z[a][i], q[g][j]) / tau for j in range(n) if j != i for g in range(k)]
            terms.append(lse(cands) - pos)
    return mean(terms)


def ref_mv(z, tau, kind, variant="paper", mask=None):
    k, n = len(z), len(z[0])
    pres = [[True] * n for _ in range(k)] if mask is None else mask
    per = []
    for i in range(n):
        views = [l for l in range(k) if pres[l][i]]
        if len(views) < 2:
            continue
        if kind == "dhel" and variant == "reference_code":
            pos = [dot(z[l][i], z[m][i]) / tau for l in views for m in views if l < m]
        else:
            pos = [dot(z[l][i], z[m][i]) / tau for l in views for m in views if l != m]
        if kind == "infonce":
            neg = []
            for l in views:
                for j in range(n):
                    for m in range(k):
                        if not pres[m][j]:
                            continue
                        if variant == "paper" and m == l:
                            continue
                        if variant == "reference_code" and (m, j) == (l, i):
                            continue
                        neg.append(dot(z[l][i], z[m][j]) / tau)
            per.append(lse(neg) - lse(pos))
        else:
            unif = 0.0
            for l in views:
                same = [dot(z[l][i], z[l][j]) / tau for j in range(n) if j != i and pres[l][j]]
                if same:
                    unif += lse(same)
            per.append(unif - lse(pos))
    return mean(per)


def ref_dhel_one_sided(z, tau, l):
    """MV paper Sec. III-C, Eq. 1 with DHEL's negatives N(i, l) = {(j, l): j != i}, view of interest l:
    L_l = -1/n sum_i log( e^{s(z_il, z_il')} / sum_{j != i} e^{s(z_il, z_jl)} )."""
    n, other = len(z[0]), 1 - l
    return mean([-(dot(z[l][i], z[other][i]) / tau
                   - math.log(sum(math.exp(dot(z[l][i], z[l][j]) / tau) for j in range(n) if j != i)))
                 for i in range(n)])


def ref_dhel(z, tau, variant):
    """Two-view DHEL: paper = MV Eq. 12 written out at N = 2; reference_code = the positive pair counted
    once; one_sided_mean = (L_1 + L_2) / 2."""
    n = len(z[0])
    if variant == "one_sided_mean":
        return (ref_dhel_one_sided(z, tau, 0) + ref_dhel_one_sided(z, tau, 1)) / 2
    per = []
    for i in range(n):
        if variant == "paper":  # sum over the ordered pairs (l, l') = (1, 2), (2, 1) inside the log
            align = -math.log(sum(math.exp(dot(z[l][i], z[m][i]) / tau) for l in range(2) for m in range(2) if l != m))
        else:
            align = -dot(z[0][i], z[1][i]) / tau
        unif = sum(math.log(sum(math.exp(dot(z[l][i], z[l][j]) / tau) for j in range(n) if j != i)) for l in range(2))
        per.append(align + unif)
    return mean(per)


def ref_byol(p, t, kind):
    k, n, d = len(p), len(p[0]), len(p[0][0])
    vals = []
    if kind == "pwe":
        for l in range(k):
            for m in range(k):
                if l != m:
                    vals.append(2 - 2 * mean([dot(p[l][i], t[m][i]) for i in range(n)]))
    else:
        for l in range(k):
            rest = [unit([sum(t[m][i][c] for m in range(k) if m != l) for c in range(d)]) for i in range(n)]
            vals.append(2 - 2 * mean([dot(p[l][i], rest[i]) for i in range(n)]))
    return mean(vals)


def ref_tuple(anchor, positive, negatives, weights, tau):
    """anchor/positive: [n][d]; negatives: [n][m][d]; weights: [n][m] (python lists)."""
    out = []
    for i in range(len(anchor)):
        a = unit(anchor[i])
        pos = dot(a, unit(positive[i])) / tau
        denom = math.exp(pos) + sum(w * math.exp(dot(a, unit(v)) / tau) for v, w in zip(negatives[i], weights[i]))
        out.append(-math.log(math.exp(pos) / denom))
    return mean(out)


def reference(name, x, tau=TAU, variant="paper", y=None):
    z = to_lists(x)
    if name == "infonce_pwe":
        return ref_pwe(z, tau)
    if name == "infonce_avg":
        return ref_avg(z, tau)
    if name == "multicrop":
        return ref_multicrop(z, tau)
    if name == "pvc_geometric":
        return ref_pvc(z, tau, "geometric")
    if name == "pvc_arithmetic":
        return ref_pvc(z, tau, {"paper": "arithmetic", "reference_code": "reference", "public_port": "port"}[variant])
    if name == "suff_stats":
        return ref_suff(z, tau)
    if name == "mv_infonce":
        return ref_mv(z, tau, "infonce", variant)
    if name == "mv_dhel":
        return ref_mv(z, tau, "dhel", variant)
    if name == "dhel":
        return ref_dhel(z, tau, variant)
    raise KeyError(name)


# --------------------------------------------------------------------------------------------------
# calling any registered objective the way its input_kind says
# --------------------------------------------------------------------------------------------------
def make_input(name, k=3, n=5, d=4, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    if name == "dhel":
        k = 2
    return torch.randn(k, n, d, generator=g, dtype=dtype)


def call(module, x, y=None, **kw):
    kind = module.input_kind
    if kind == "views":
        return module(x, **kw)
    if kind == "pairs":
        y = x.flip(0).detach() * 1.3 + 0.1 if y is None else y
        return module(x, y, **kw)
    assert kind == "tuple"
    return module(x[0], x[1], x[2:].reshape(-1, x.shape[-1]), **kw)


def test_all_ids_registered():
    assert set(MINE) <= set(available())


# --------------------------------------------------------------------------------------------------
# hand-checked values
# --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name,k", [(name, k) for name in ["infonce_pwe", "infonce_avg", "multicrop", "pvc_geometric",
                                                            "pvc_arithmetic", "suff_stats", "mv_infonce", "mv_dhel"]
                                    for k in (2, 3, 4)] + [("dhel", 2)])
def test_matches_slow_reference(name, k):
    x = torch.randn(k, 5, 3, generator=torch.Generator().manual_seed(10 + k), dtype=torch.float64)
    got = build(name, tau=TAU)(x).item()
    assert got == pytest.approx(reference(name, x), abs=1e-10, rel=1e-10)


@pytest.mark.parametrize("name,k,variant", [(name, k, "reference_code") for name in ["pvc_arithmetic", "mv_infonce", "mv_dhel"]
                                            for k in (2, 3, 4)]
                         + [("pvc_arithmetic", k, "public_port") for k in (2, 3, 4)]
                         + [("dhel", 2, "reference_code"), ("dhel", 2, "one_sided_mean")])
def test_other_variants_match_slow_reference(name, k, variant):
    x = torch.randn(k, 4, 3, generator=torch.Generator().manual_seed(20 + k), dtype=torch.float64)
    got = build(name, tau=TAU, variant=variant)(x).item()
    assert got == pytest.approx(reference(name, x, variant=variant), abs=1e-10, rel=1e-10)


@pytest.mark.parametrize("k", [2, 3, 4])
def test_infonce_avg_renormalised_option_matches_slow_reference(k):
    x = torch.randn(k, 5, 3, generator=torch.Generator().manual_seed(40 + k), dtype=torch.float64)
    z = to_lists(x)
    got = build("infonce_avg", tau=TAU, renormalise=True)(x).item()
    assert got == pytest.approx(ref_avg(z, TAU, renormalise=True), abs=1e-10, rel=1e-10)
    mask = partial_mask(k, 5) if k == 3 else None
    if mask is not None:
        got = build("infonce_avg", tau=TAU, renormalise=True)(x, mask=mask).item()
        assert got == pytest.approx(ref_avg(z, TAU, mask.tolist(), renormalise=True), abs=1e-10)
    if k >= 3:  # the plain mean (default, as printed) is a different loss from k = 3 on
        assert abs(build("infonce_avg", tau=TAU)(x).item() - got) > 1e-3


def test_infonce_avg_hand_value_plain_and_renormalised_mean():
    """k = 3, n = 2: views 1 and 2 are (e1, e2), view 3 is (e2, e1). Worked out by hand, c = 1/sqrt(2).

    l = 1 (and l = 2 by symmetry): the mean of the other two views is b = (1/2, 1/2) for both samples.
      anchor e1: positive <e1, b> = 1/2, candidates e2 (0), b, b (1/2 each) -> -1/(2 tau) + log(1 + 2 e^{1/(2 tau)});
      anchor b:  positive <b, e1> = 1/2, candidates b (<b, b> = 1/2), e1, e2 (1/2 each) -> log 3.
      Both samples alike: NT-Xent = (-1/(2 tau) + log(1 + 2 e^{1/(2 tau)}) + log 3) / 2.
    l = 3: anchors (e2, e1) against the mean (e1, e2) of views 1, 2 (unit already): each of the 4
      anchors has positive score 0 and candidates 0, 0, 1/tau -> log(2 + e^{1/tau}).
    Re-normalised option: b = (c, c): anchor e1 -> -c/tau + log(1 + 2 e^{c/tau}); anchor b: positive
      c/tau, candidates b (1/tau), e1, e2 (c/tau) -> -c/tau + log(e^{1/tau} + 2 e^{c/tau}); l = 3 unchanged.
    """
    tau = 0.5
    e1, e2 = [1.0, 0.0], [0.0, 1.0]
    x = torch.tensor([[e1, e2], [e1, e2], [e2, e1]], dtype=torch.float64) * 3.0  # any scale
    third = math.log(2 + math.exp(1 / tau))
    plain = (-0.5 / tau + math.log(1 + 2 * math.exp(0.5 / tau)) + math.log(3)) / 2
    assert build("infonce_avg", tau=tau)(x).item() == pytest.approx((2 * plain + third) / 3, abs=1e-12)
    c = 1 / math.sqrt(2)
    renorm = (-c / tau + math.log(1 + 2 * math.exp(c / tau)) - c / tau + math.log(math.exp(1 / tau) + 2 * math.exp(c / tau))) / 2
    got = build("infonce_avg", tau=tau, renormalise=True)(x).item()
    assert got == pytest.approx((2 * renorm + third) / 3, abs=1e-12)


def test_closed_form_orthogonal_aligned_two_views():
    """z^1 = z^2 = (e1, e2), n = 2: worked out by hand.

    NT-Xent anchor e1 (view 1): positive e1 (view 2, score 1/tau), candidates e2, e2 (score 0) ->
    log(1 + 2 e^{-1/tau}). MV-InfoNCE: log(2(e^{1/tau} + 1)) - log(2 e^{1/tau}) = log(1 + e^{-1/tau}).
    MV-DHEL: -log(2 e^{1/tau}) + 2 log(e^0) = -1/tau - log 2, and DHEL (MV-DHEL at k = 2) the same;
    the mean of the one-sided DHEL terms: -1/tau + log e^0 = -1/tau.
    BYOL: perfectly aligned -> 0.
    """
    tau = 0.5
    e = torch.eye(2, dtype=torch.float64)
    x = torch.stack([e, e]) * torch.tensor([[[2.0], [0.5]], [[1.0], [3.0]]], dtype=torch.float64)  # scaled rows
    ntxent = math.log(1 + 2 * math.exp(-1 / tau))
    for name in ["infonce_pwe", "infonce_avg", "multicrop", "pvc_geometric", "pvc_arithmetic", "suff_stats"]:
        assert build(name, tau=tau)(x).item() == pytest.approx(ntxent, abs=1e-12)
    assert build("mv_infonce", tau=tau)(x).item() == pytest.approx(math.log(1 + math.exp(-1 / tau)), abs=1e-12)
    assert build("mv_dhel", tau=tau)(x).item() == pytest.approx(-1 / tau - math.log(2), abs=1e-12)
    assert build("dhel", tau=tau)(x).item() == pytest.approx(-1 / tau - math.log(2), abs=1e-12)
    assert build("dhel", tau=tau, variant="reference_code")(x).item() == pytest.approx(-1 / tau, abs=1e-12)
    assert build("dhel", tau=tau, variant="one_sided_mean")(x).item() == pytest.approx(-1 / tau, abs=1e-12)
    assert build("byol_pwe")(x, x).item() == pytest.approx(0.0, abs=1e-12)
    assert build("byol_avg")(x, x).item() == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize("kind", ["pwe", "avg"])
@pytest.mark.parametrize("k", [2, 3, 4])
def test_byol_matches_slow_reference(kind, k):
    g = torch.Generator().manual_seed(30 + k)
    p = torch.randn(k, 5, 3, generator=g, dtype=torch.float64)
    t = torch.randn(k, 5, 3, generator=g, dtype=torch.float64)
    got = build(f"byol_{kind}")(p, t).item()
    assert got == pytest.approx(ref_byol(to_lists(p), to_lists(t), kind), abs=1e-12)


def test_byol_hand_value():
    # k = 2, n = 1 sample would be refused; n = 2: predictions e1, e2 in both views, targets rotated 90 deg
    # in view 2 only: cos(p^1, t^2) = (0, 0); cos(p^2, t^1) = (1, 1) -> mean over both directions of
    # 2 - 2 mean cos = (2 + 0) / 2 = 1.
    e = torch.eye(2, dtype=torch.float64)
    p = torch.stack([e, e])
    t = torch.stack([e, e.flip(1)])
    assert build("byol_pwe")(p, t).item() == pytest.approx(1.0, abs=1e-12)
    assert build("byol_avg")(p, t).item() == pytest.approx(1.0, abs=1e-12)


def test_tuple_infonce_matches_slow_reference():
    g = torch.Generator().manual_seed(5)
    n, m, d = 4, 3, 5
    a = torch.randn(n, d, generator=g, dtype=torch.float64)
    p = torch.randn(n, d, generator=g, dtype=torch.float64)
    neg = torch.randn(n, m, d, generator=g, dtype=torch.float64)
    w = torch.rand(n, m, generator=g, dtype=torch.float64) * 2
    w[0, 1] = 0.0
    mod = build("tuple_infonce")
    assert mod.tau == 0.07
    for weights, wl in ((None, [[1.0] * m] * n), (w, w.tolist()), (w[1], [w[1].tolist()] * n)):
        got = mod(a, p, neg, weights).item() if weights is not None else mod(a, p, neg).item()
        assert got == pytest.approx(ref_tuple(a.tolist(), p.tolist(), neg.tolist(), wl, 0.07), rel=1e-10)
    shared = neg[0]  # [m, d] shared by every anchor
    got = mod(a, p, shared).item()
    assert got == pytest.approx(ref_tuple(a.tolist(), p.tolist(), [shared.tolist()] * n, [[1.0] * m] * n, 0.07), rel=1e-10)


# --------------------------------------------------------------------------------------------------
# identities
# --------------------------------------------------------------------------------------------------
def test_two_view_identities_equal_ntxent():
    x = torch.randn(2, 6, 4, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    z = to_lists(x)
    nt = mean(ntxent_anchor_terms(z[0], z[1], TAU))  # SimCLR NT-Xent written out directly
    for name in ["pvc_geometric", "pvc_arithmetic", "suff_stats", "infonce_pwe", "infonce_avg", "multicrop"]:
        assert build(name, tau=TAU)(x).item() == pytest.approx(nt, abs=1e-10), name


@pytest.mark.parametrize("k", [3, 4])
def test_documented_identities_and_orderings(k):
    x = torch.randn(k, 5, 3, generator=torch.Generator().manual_seed(2 + k), dtype=torch.float64)
    # Eq. 1 with the SimCLR pair loss is the all-pairs mean of NT-Xent
    assert build("multicrop", tau=TAU)(x).item() == pytest.approx(build("infonce_pwe", tau=TAU)(x).item(), abs=1e-10)
    # official MV-DHEL code (unordered pairs) = Eq. 12 + log 2
    diff = build("mv_dhel", tau=TAU, variant="reference_code")(x) - build("mv_dhel", tau=TAU)(x)
    assert diff.item() == pytest.approx(math.log(2), abs=1e-10)
    # Jensen: -log(mean l) <= mean(-log l)
    assert build("pvc_arithmetic", tau=TAU)(x).item() < build("pvc_geometric", tau=TAU)(x).item()
    # the reference-code arithmetic PVC is a different number; the public port's batch mean inside the
    # log-sum-exp puts it below the per-sample pseudocode (log-sum-exp is convex: Jensen)
    ref_code = build("pvc_arithmetic", tau=TAU, variant="reference_code")(x).item()
    port = build("pvc_arithmetic", tau=TAU, variant="public_port")(x).item()
    assert abs(ref_code - build("pvc_arithmetic", tau=TAU)(x).item()) > 1e-3
    assert port < ref_code - 1e-6
    # the official MV-InfoNCE keeps same-view negatives: larger denominator -> larger loss
    assert build("mv_infonce", tau=TAU, variant="reference_code")(x).item() > build("mv_infonce", tau=TAU)(x).item()


def test_two_view_identities_of_the_reference_variants():
    x = torch.randn(2, 5, 3, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    y = torch.randn(2, 5, 3, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    z = to_lists(x)
    # at M = 2 there is one beta per alpha: pseudocode and port both give NT-Xent - log(batch size)
    nt = mean(ntxent_anchor_terms(z[0], z[1], TAU))
    for variant in ("reference_code", "public_port"):
        got = build("pvc_arithmetic", tau=TAU, variant=variant)(x).item()
        assert got == pytest.approx(nt - math.log(5), abs=1e-10)
    assert build("byol_avg")(x, y).item() == pytest.approx(build("byol_pwe")(x, y).item(), abs=1e-12)


@pytest.mark.parametrize("seed", [3, 4])
def test_dhel_is_mv_dhel_at_two_views(seed):
    """dhel is MV-DHEL (Eq. 12) at N = 2, for both variants; against the loop references, its relation to
    the one-sided DHEL terms L_l of MV Eq. 1 is  dhel = L_1 + L_2 + mean_i s_i - log 2."""
    x = torch.randn(2, 6, 3, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    z = to_lists(x)
    mv_paper = ref_mv(z, TAU, "dhel", "paper")  # Eq. 12 loop, general k, here k = 2
    mv_code = ref_mv(z, TAU, "dhel", "reference_code")
    assert build("dhel", tau=TAU)(x).item() == pytest.approx(mv_paper, abs=1e-10)
    assert build("mv_dhel", tau=TAU)(x).item() == pytest.approx(mv_paper, abs=1e-10)
    assert build("dhel", tau=TAU, variant="reference_code")(x).item() == pytest.approx(mv_code, abs=1e-10)
    assert build("mv_dhel", tau=TAU, variant="reference_code")(x).item() == pytest.approx(mv_code, abs=1e-10)
    l1, l2 = ref_dhel_one_sided(z, TAU, 0), ref_dhel_one_sided(z, TAU, 1)
    s_mean = mean([dot(z[0][i], z[1][i]) / TAU for i in range(6)])
    assert mv_paper == pytest.approx(l1 + l2 + s_mean - math.log(2), abs=1e-10)
    assert build("dhel", tau=TAU, variant="one_sided_mean")(x).item() == pytest.approx((l1 + l2) / 2, abs=1e-10)


# --------------------------------------------------------------------------------------------------
# generic contract, over every id of this slice
# --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", MINE)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_scalar_dtype_and_gradient(name, dtype):
    x = make_input(name, dtype=dtype).requires_grad_(True)
    mod = build(name)
    out = call(mod, x)
    assert out.dim() == 0 and out.dtype == dtype and torch.isfinite(out)
    out.backward()
    assert x.grad is not None and torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0
    # statistics stay 0-dim tensors until read (no wait for the device in a training step)
    assert isinstance(mod.stats, dict) and all(isinstance(v, torch.Tensor) and v.dim() == 0 and not v.requires_grad
                                               and math.isfinite(float(v)) for v in mod.stats.values())


@pytest.mark.parametrize("name", MINE)
def test_scale_invariance(name):
    x = make_input(name)
    mod = build(name)
    scale = torch.tensor([3.7, 0.2, 11.0], dtype=x.dtype)[: x.shape[0], None, None]
    y = x.flip(0) * 1.3 + 0.1
    a = call(mod, x, y=y)
    b = call(mod, x * scale * torch.linspace(0.5, 2, x.shape[1], dtype=x.dtype)[None, :, None], y=y * 4.2)
    assert a.item() == pytest.approx(b.item(), abs=1e-10)


@pytest.mark.parametrize("name", MINE)
def test_bad_inputs_raise(name):
    mod = build(name)
    x = make_input(name)
    if mod.input_kind == "tuple":
        with pytest.raises(ValueError, match="tuple_infonce"):
            mod(x, x[1], x[2])  # anchor of rank 3
        with pytest.raises(ValueError, match="tuple_infonce"):
            mod(x[0], x[1], x[2][:, :2])  # negatives with another d
        with pytest.raises(ValueError, match="n >= 2"):
            mod(x[0, :1], x[1, :1], x[2])
        bad = x[2].clone()
        bad[0, 0] = float("nan")
        with pytest.raises(ValueError, match="NaN"):
            mod(x[0], x[1], bad)
        with pytest.raises(ValueError, match="weights"):
            mod(x[0], x[1], x[2], -torch.ones(x.shape[1], dtype=x.dtype))
        with pytest.raises(ValueError, match="weights"):
            mod(x[0], x[1], x[2], torch.ones(x.shape[1] + 1, dtype=x.dtype))
        return
    with pytest.raises(ValueError, match=name):
        call(mod, x[0])  # rank 2
    with pytest.raises(ValueError, match=name):
        call(mod, x[:1], y=x[:1])  # k = 1
    with pytest.raises(ValueError, match="n >= 2"):
        call(mod, x[:, :1], y=x[:, :1])
    for bad_value in (float("nan"), float("inf")):
        bad = x.clone()
        bad[0, 1, 2] = bad_value
        with pytest.raises(ValueError, match="NaN or Inf"):
            call(mod, bad, y=x)
    with pytest.raises(ValueError, match=name):
        call(mod, x.long())
    mask = torch.ones(x.shape[:2], dtype=torch.bool)
    mask[0, 1] = False
    if name in MASKED:
        call(mod, x, mask=mask)  # honoured
    else:
        with pytest.raises(ValueError, match="does not support missing views"):
            call(mod, x, mask=mask)
        assert call(mod, x, mask=torch.ones_like(mask)).item() == pytest.approx(call(mod, x).item())
    with pytest.raises(ValueError, match="mask must be a BoolTensor"):
        call(mod, x, mask=mask.float())


def test_dhel_refuses_three_views():
    with pytest.raises(ValueError, match="exactly 2"):
        build("dhel")(torch.randn(3, 4, 2))


def test_byol_targets_get_no_gradient_and_shapes_checked():
    p = torch.randn(3, 4, 5, requires_grad=True)
    t = torch.randn(3, 4, 5, requires_grad=True)
    build("byol_pwe")(p, t).backward()
    assert t.grad is None and p.grad is not None
    with pytest.raises(ValueError, match="same shape"):
        build("byol_avg")(p, t[:, :3])


@pytest.mark.parametrize("name", [n for n in MINE if n not in ("byol_pwe", "byol_avg")])
@pytest.mark.parametrize("bad", [0, -0.1, float("nan"), float("inf"), True, "0.1"])
def test_bad_tau(name, bad):
    with pytest.raises(ValueError, match="tau"):
        build(name, tau=bad)


@pytest.mark.parametrize("name", ["pvc_arithmetic", "mv_infonce", "mv_dhel", "dhel"])
def test_bad_variant(name):
    for bad in ("official", None, 1):
        with pytest.raises(ValueError, match="variant"):
            build(name, variant=bad)
    with pytest.raises(ValueError, match="variant"):  # each loss only takes its own variant names
        build(name, variant="one_sided_mean" if name != "dhel" else "public_port")


@pytest.mark.parametrize("bad", ["yes", 1, None])
def test_infonce_avg_bad_renormalise(bad):
    with pytest.raises(ValueError, match="infonce_avg: renormalise must be True or False"):
        build("infonce_avg", renormalise=bad)


# --------------------------------------------------------------------------------------------------
# masks
# --------------------------------------------------------------------------------------------------
def partial_mask(k, n):
    m = torch.ones(k, n, dtype=torch.bool)
    m[0, 1] = False
    m[1, 3] = False
    m[2, 3] = False  # sample 3 present in view 0 only (k = 3)
    m[2, 0] = False
    return m


@pytest.mark.parametrize("name", MASKED)
def test_masked_sample_equals_dropping_it(name):
    x = torch.randn(3, 6, 4, generator=torch.Generator().manual_seed(8), dtype=torch.float64)
    mask = torch.ones(3, 6, dtype=torch.bool)
    mask[:, 2] = False
    mod = build(name, tau=TAU)
    keep = [0, 1, 3, 4, 5]
    assert mod(x, mask=mask).item() == pytest.approx(mod(x[:, keep]).item(), abs=1e-10)
    assert mod(x, mask=torch.ones_like(mask)).item() == pytest.approx(mod(x).item(), abs=1e-12)


@pytest.mark.parametrize("name", MASKED)
def test_partial_mask_matches_slow_reference(name):
    x = torch.randn(3, 5, 3, generator=torch.Generator().manual_seed(9), dtype=torch.float64)
    mask = partial_mask(3, 5)
    z, ml = to_lists(x), mask.tolist()
    expected = {
        "infonce_pwe": lambda: ref_pwe(z, TAU, ml),
        "infonce_avg": lambda: ref_avg(z, TAU, ml),
        "mv_infonce": lambda: ref_mv(z, TAU, "infonce", "paper", ml),
        "mv_dhel": lambda: ref_mv(z, TAU, "dhel", "paper", ml),
    }[name]()
    assert build(name, tau=TAU)(x, mask=mask).item() == pytest.approx(expected, abs=1e-10)
    if name in ("mv_infonce", "mv_dhel"):
        kind = name.split("_")[1]
        got = build(name, tau=TAU, variant="reference_code")(x, mask=mask).item()
        assert got == pytest.approx(ref_mv(z, TAU, kind, "reference_code", ml), abs=1e-10)


@pytest.mark.parametrize("name", MASKED)
def test_absent_entries_have_no_influence(name):
    x = torch.randn(3, 5, 3, generator=torch.Generator().manual_seed(11), dtype=torch.float64)
    mask = partial_mask(3, 5)
    x2 = x.clone()
    x2[~mask] = torch.randn(int((~mask).sum()), 3, dtype=torch.float64) * 5  # change absent entries only
    xr = x.clone().requires_grad_(True)
    mod = build(name, tau=TAU)
    out = mod(xr, mask=mask)
    out.backward()
    assert out.item() == pytest.approx(mod(x2, mask=mask).item(), abs=1e-12)
    assert torch.isfinite(xr.grad).all()
    assert (xr.grad[~mask] == 0).all()


@pytest.mark.parametrize("name", MASKED)
def test_mask_leaving_nothing_raises(name):
    x = torch.randn(3, 4, 3, dtype=torch.float64)
    mask = torch.zeros(3, 4, dtype=torch.bool)
    mask[0] = True  # every sample seen in one view only
    with pytest.raises(ValueError, match=name):
        build(name)(x, mask=mask)


# --------------------------------------------------------------------------------------------------
# TupleInfoNCE helpers
# --------------------------------------------------------------------------------------------------
def test_derangement_has_no_fixed_point_and_is_deterministic():
    for n in range(2, 12):
        for seed in range(5):
            perm = random_derangement(n, torch.Generator().manual_seed(seed))
            assert sorted(perm.tolist()) == list(range(n))
            assert all(perm[i].item() != i for i in range(n))
            again = random_derangement(n, torch.Generator().manual_seed(seed))
            assert torch.equal(perm, again)
    draws = {tuple(random_derangement(6, torch.Generator().manual_seed(s)).tolist()) for s in range(20)}
    assert len(draws) > 5  # random, not a fixed shift
    with pytest.raises(ValueError, match="n >= 2"):
        random_derangement(1)


def test_disturbed_negatives():
    g = torch.Generator().manual_seed(0)
    mods = {"rgb": torch.arange(5.0)[:, None].repeat(1, 3), "depth": torch.arange(5.0) + 100, "text": torch.randn(5, 2)}
    out, perm = disturbed_negatives(mods, "depth", torch.Generator().manual_seed(3), return_permutation=True)
    assert out["rgb"] is mods["rgb"] and out["text"] is mods["text"]
    for j in range(5):
        assert perm[j].item() != j
        assert out["depth"][j].item() == 100 + perm[j].item()  # another sample's depth
    again = disturbed_negatives(mods, "depth", torch.Generator().manual_seed(3))
    assert torch.equal(again["depth"], out["depth"])
    lst = disturbed_negatives([mods["rgb"], mods["depth"]], 0, g)
    assert isinstance(lst, list) and lst[1] is mods["depth"]
    assert all(lst[0][j, 0].item() != j for j in range(5))
    with pytest.raises(ValueError, match="not a modality"):
        disturbed_negatives(mods, "audio")
    with pytest.raises(ValueError, match="number of samples"):
        disturbed_negatives([torch.zeros(3), torch.zeros(4)], 0)


def test_mixture_weights_hand_example():
    # alpha (2, 1, 1) -> (1/2, 1/4, 1/4); counts (3, 4, 4); D = 3:
    # type 0: 3 * 1/2 / 3 = 0.5; types 1, 2: 3 * 1/4 / 4 = 0.1875
    w = mixture_weights([2.0, 1.0, 1.0], [3, 4, 4], num_draws=3)
    assert w.tolist() == pytest.approx([0.5] * 3 + [0.1875] * 8)
    assert mixture_weights([1.0, 0.0], [2, 0]).tolist() == pytest.approx([1.0, 1.0])
    with pytest.raises(ValueError, match="no negative of type 1"):
        mixture_weights([1.0, 1.0], [2, 0])
    with pytest.raises(ValueError, match="alpha"):
        mixture_weights([-1.0, 2.0], [2, 2])


def test_assemble_negatives_alpha0_is_plain_infonce():
    g = torch.Generator().manual_seed(4)
    n, d = 4, 3
    a = torch.randn(n, d, generator=g, dtype=torch.float64)
    p = torch.randn(n, d, generator=g, dtype=torch.float64)
    dist = [torch.randn(n, d, generator=g, dtype=torch.float64) for _ in range(2)]
    neg, w = assemble_negatives(p, dist, [1.0, 0.0, 0.0])
    assert neg.shape == (n, (n - 1) + 2 * n, d) and w.shape == ((n - 1) + 2 * n,)
    got = build("tuple_infonce", tau=0.2)(a, p, neg, w).item()
    # plain one-directional InfoNCE over the batch, by hand: candidates are every positive p_j
    al, pl = to_lists(a[None])[0], to_lists(p[None])[0]
    expected = mean([lse([dot(al[i], pl[j]) / 0.2 for j in range(n)]) - dot(al[i], pl[i]) / 0.2 for i in range(n)])
    assert got == pytest.approx(expected, abs=1e-10)
    # with alpha (1, 1, 2) the k-disturbed tuples enter with weights 3 * alpha_k / 4
    neg, w = assemble_negatives(p, dist, [1.0, 1.0, 2.0])
    got = build("tuple_infonce", tau=0.2)(a, p, neg, w).item()
    wl = [1 / 4] * (n - 1) + [3 * 0.25 / 4] * n + [3 * 0.5 / 4] * n
    negl = [[p[j].tolist() for j in range(n) if j != i] + dist[0].tolist() + dist[1].tolist() for i in range(n)]
    assert got == pytest.approx(ref_tuple(a.tolist(), p.tolist(), negl, [wl] * n, 0.2), abs=1e-10)


def test_cross_modal_discrimination_reward_hand_example():
    # modality 1: row 0 -> rest 0 (cos .995 best), row 1 -> rest 2 (cos 1 beats .995): miss,
    # row 2 = (-1, 0) -> rest 2 (cos 0 beats -.0995, -.995): hit  -> A^1 = 2/3
    s1 = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
    r1 = torch.tensor([[1.0, 0.1], [0.1, 1.0], [0.0, 1.0]])
    # modality 2: every row retrieves itself -> A^2 = 1
    s2 = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
    assert cross_modal_discrimination_accuracy(s1, r1) == pytest.approx(2 / 3)
    reward, acc = cross_modal_discrimination_reward({"a": s1, "b": s2}, {"a": r1, "b": s2 * 3})
    assert acc == pytest.approx({"a": 2 / 3, "b": 1.0}) and reward == pytest.approx(5 / 3)
    reward, acc = cross_modal_discrimination_reward([s1, s2], [r1, s2])
    assert reward == pytest.approx(5 / 3)
    # a tie with the correct candidate is a miss
    assert cross_modal_discrimination_accuracy(torch.tensor([[1.0, 0.0], [1.0, 0.0]]), torch.tensor([[1.0, 0.0], [1.0, 0.0]])) == 0.0
    with pytest.raises(ValueError, match="same modality keys"):
        cross_modal_discrimination_reward({"a": s1}, {"b": r1})
