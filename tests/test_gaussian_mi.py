"""Poly-view Gaussian MI pieces against independent derivations: the closed-form MI, the bound
constants, the sufficient-statistics loss against the paper's formula (a slow loop over Eqs. 21-22
with Q of Algorithm 2) and a literal transcription of Algorithm 2, and the bound-validity rule against
scipy's one-sample t-test."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from fusebench.spec.config import ConfigError
import torch
from scipy import stats

from fusebench import benchmarks, objectives
from fusebench.cells import gaussian_mi as G
from fusebench.pipelines import gaussian_mi_options_problems
from fusebench.spec.request import CellRequest
from fusebench.metrics import values_of

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "leaderboards" / "runs" / "polyview-gaussian-mi"


# ---------------------------------------------------------------------------------------------
# the true MI, the constants, the generator
# ---------------------------------------------------------------------------------------------
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


@pytest.mark.parametrize("s0,s", [(1.0, 0.5), (2.0, 1.0), (0.7, 1.3)])
def test_true_mi_by_log_determinants_and_monte_carlo(s0: float, s: float) -> None:
    # Gaussian MI from the covariance alone, no posterior algebra: Sigma = s^2 I + s0^2 11^T (M x M);
    # I(x_a; rest) = 1/2 log(det Sigma_aa det Sigma_rest / det Sigma). Then the same with Sigma estimated from
    # 400k draws of G.sample_views (the generator): the closed form, the generator and the formula agree.
    g = torch.Generator().manual_seed(11)
    for m in (2, 4, 8, 10):
        cov = s**2 * np.eye(m) + s0**2 * np.ones((m, m))

        def mi(c: np.ndarray) -> float:
            return 0.5 * (math.log(c[0, 0]) + np.linalg.slogdet(c[1:, 1:])[1] - np.linalg.slogdet(c)[1])

        assert G.true_one_vs_rest_mi(m, s0, s) == pytest.approx(mi(cov), rel=1e-10)
        x = G.sample_views(400_000, m, s0, s, g).squeeze(-1).double().numpy()  # [M, K]
        assert G.true_one_vs_rest_mi(m, s0, s) == pytest.approx(mi(np.cov(x)), abs=0.01)


@pytest.mark.parametrize("name", ["pvc_geometric", "pvc_arithmetic", "suff_stats", "multicrop", "infonce_pwe"])
@pytest.mark.parametrize("k,m", [(5, 2), (6, 3), (4, 5)])
def test_a_constant_network_estimates_zero_nats(name: str, k: int, m: int) -> None:
    # a constant representation carries no information, and every candidate of an anchor scores alike: each loss is
    # then log(number of candidates), so c - loss = 0 exactly when the constant counts the objective's own candidates
    # (PVC / suff_stats: 1 + (K - 1) M = B - M + 1; the NT-Xent pair losses: 2K - 1)
    views = torch.ones(m, k, 3, dtype=torch.float64)
    loss = float(objectives.build(name, tau=0.3)(views))
    assert G.bound_constant(name, k, m) - loss == pytest.approx(0.0, abs=1e-9)


def test_bound_constants() -> None:
    k = 256
    assert math.isclose(G.bound_constant("pvc_geometric", k, 10), math.log(k * 10 - 10 + 1))
    assert math.isclose(G.bound_constant("suff_stats", k, 4), math.log(k * 4 - 4 + 1))
    # multi-crop and pairwise InfoNCE: the two-view bound with 2K - 1 candidates whatever M
    assert math.isclose(G.bound_constant("multicrop", k, 10), math.log(2 * k - 1))
    assert math.isclose(G.bound_constant("infonce_pwe", k, 4), math.log(2 * k - 1))
    # which losses declare the two-view bound: the two that average a two-view loss over view pairs
    declared = {name for name in objectives.OBJECTIVES.builtin()
                if getattr(objectives.OBJECTIVES.get(name), "pairwise_mi_bound", False)}
    assert declared == {"multicrop", "infonce_pwe"}


def test_sampled_views_have_the_model_covariance() -> None:
    g = torch.Generator().manual_seed(0)
    x = G.sample_views(200_000, 3, 1.0, 0.5, g).squeeze(-1).double()  # [M, K]
    cov = torch.cov(x)
    assert torch.allclose(torch.diagonal(cov), torch.full((3,), 1.25, dtype=torch.float64), atol=0.02)
    assert torch.allclose(cov[0, 1:], torch.full((2,), 1.0, dtype=torch.float64), atol=0.02)


# ---------------------------------------------------------------------------------------------
# suff_stats against the paper (Sec. 2.4, Eqs. 21, 22, 24; Algorithm 2 of App. F.3.2)
# ---------------------------------------------------------------------------------------------
def _suff_stats_slow(views: np.ndarray, tau: float) -> tuple[float, int]:
    """Eq. 22 by explicit loops: L = 1/(K M) sum_{i, a} -log l~_{i,a},
    l~_{i,a} = e^{t(ia, ia)} / (e^{t(ia, ia)} + sum_{j != i} sum_g e^{t(ia, jg)}), t(ia, jg) = T_{i,a} . Q_{j,g} / tau,
    T = the unit-normalised view (Algorithm 2: Z = l2_normalize(net(X))), Q_{j,g} = the mean of T over the
    views of sample j other than g (Eq. 24), unit-normalised as Algorithm 2 does. The sum over j != i is
    Eq. 21's (Eq. 22 prints j = 1..K; Algorithm 2's mask removes sample i's other rest-sets). Returns the
    loss and the number of candidates per anchor. views: [M, K, d]."""
    m, k, _ = views.shape
    t = [[views[a, i] / math.sqrt(sum(float(v) ** 2 for v in views[a, i])) for i in range(k)] for a in range(m)]

    def q(j: int, g: int) -> np.ndarray:
        s = sum(t[b][j] for b in range(m) if b != g) / (m - 1)
        return s / math.sqrt(sum(float(v) ** 2 for v in s))

    def dot(u: np.ndarray, v: np.ndarray) -> float:
        return sum(float(x) * float(y) for x, y in zip(u, v))

    total, candidates = 0.0, None
    for i in range(k):
        for a in range(m):
            pos = math.exp(dot(t[a][i], q(i, a)) / tau)
            den, count = pos, 1
            for j in range(k):
                if j == i:
                    continue
                for g in range(m):
                    den += math.exp(dot(t[a][i], q(j, g)) / tau)
                    count += 1
            total += -math.log(pos / den)
            candidates = count
    return total / (k * m), candidates


def _algorithm2(views: torch.Tensor, tau: float) -> torch.Tensor:
    """Algorithm 2 (App. F.3.2) transcribed line by line; its layout is [k, m, d] (samples first)."""
    large_num = 1e9
    z = torch.nn.functional.normalize(views.transpose(0, 1), dim=-1)  # Z [k, m, d]
    k, m, d = z.shape

    def get_mask(beta: int) -> torch.Tensor:
        mask_sample = torch.eye(k, dtype=z.dtype).reshape(k, 1, k)  # "ka kb -> ka 1 kb"
        mask_beta = torch.ones(m, dtype=z.dtype).reshape(1, m, 1)
        mask_beta[:, beta] = 0
        return mask_beta * mask_sample  # [k, m, k]

    z_tilde = z.unsqueeze(2).expand(k, m, m, d)  # repeat "k m1 d -> k m1 m2 d"
    diagonal_one = torch.eye(m, dtype=z.dtype).reshape(1, m, m, 1)
    diagonal_zero = torch.ones(k, m, m, d, dtype=z.dtype) - diagonal_one
    z_tilde = m / (m - 1) * z_tilde * diagonal_zero
    z_tilde = z_tilde.mean(1)  # [k, m, d]
    z_tilde = torch.nn.functional.normalize(z_tilde, dim=-1)
    scores = torch.einsum("jmd,knd->jmnk", z, z_tilde) / tau  # [k, m, m, k]
    losses_alpha = []
    for alpha in range(m):
        losses_alpha_beta = []
        for beta in range(m):
            if alpha == beta:  # only the diagonal term: the positive is Q of the anchor's own rest-set
                logits = scores[:, alpha]  # [k, m, k]
                labels = torch.arange(k) + beta * k
                logits = (logits - get_mask(beta) * large_num).reshape(k, m * k)
                losses_alpha_beta.append(torch.nn.functional.cross_entropy(logits, labels, reduction="none"))
        losses_alpha.append(torch.stack(losses_alpha_beta, -1).mean(-1))  # [k]
    return torch.stack(losses_alpha, -1).mean(-1).mean()


@pytest.mark.parametrize("m,k,d,tau,seed", [(3, 4, 5, 0.1, 0), (4, 3, 6, 0.5, 1), (5, 5, 3, 0.2, 2), (2, 6, 4, 1.0, 3)])
def test_suff_stats_is_equation_22_by_loops(m: int, k: int, d: int, tau: float, seed: int) -> None:
    views = torch.randn(m, k, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    want, candidates = _suff_stats_slow(views.numpy(), tau)
    assert candidates == k * m - m + 1  # B - M + 1: the count inside c(B, M) = log(B - M + 1) of Theorem 2.4
    got = objectives.build("suff_stats", tau=tau)(views)
    assert float(got) == pytest.approx(want, rel=1e-6, abs=1e-9)
    got32 = objectives.build("suff_stats", tau=tau)(views.float())  # the training dtype
    assert float(got32) == pytest.approx(want, rel=1e-4, abs=1e-5)


@pytest.mark.parametrize("m,k,d,tau,seed", [(3, 4, 5, 0.1, 4), (4, 6, 8, 0.2, 5), (6, 3, 4, 0.5, 6)])
def test_suff_stats_is_algorithm_2(m: int, k: int, d: int, tau: float, seed: int) -> None:
    views = torch.randn(m, k, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    want = _algorithm2(views, tau)
    assert float(objectives.build("suff_stats", tau=tau)(views)) == pytest.approx(float(want), rel=1e-6, abs=1e-9)
    # and the two references agree with each other (the transcription is not circular)
    assert float(want) == pytest.approx(_suff_stats_slow(views.numpy(), tau)[0], rel=1e-9)


def test_suff_stats_gradient_matches_the_slow_formula() -> None:
    # the training signal, not just the value: finite differences of the loop against autograd
    m, k, d, tau = 3, 3, 4, 0.3
    views = torch.randn(m, k, d, generator=torch.Generator().manual_seed(7), dtype=torch.float64,
                        requires_grad=True)
    objectives.build("suff_stats", tau=tau)(views).backward()
    base = views.detach().numpy().copy()
    eps = 1e-6
    for idx in [(0, 0, 0), (1, 2, 3), (2, 1, 1)]:
        up, down = base.copy(), base.copy()
        up[idx] += eps
        down[idx] -= eps
        fd = (_suff_stats_slow(up, tau)[0] - _suff_stats_slow(down, tau)[0]) / (2 * eps)
        assert float(views.grad[idx]) == pytest.approx(fd, rel=1e-5, abs=1e-8)


# ---------------------------------------------------------------------------------------------
# the validity rule
# ---------------------------------------------------------------------------------------------
def test_excess_test_by_hand() -> None:
    # e = [1, 2, 3, 4]: mean 2.5, s^2 = (2.25 + 0.25 + 0.25 + 2.25) / 3 = 5/3, SE = sqrt(5/3 / 4);
    # t_{0.99, 3} = 4.5407 (t table)
    r = G.bound_excess_test([1.0, 2.0, 3.0, 4.0], 1.0, alpha=0.01)
    se = math.sqrt(5 / 3 / 4)
    assert r["bound"] == pytest.approx(2.5) and r["excess"] == pytest.approx(1.5) and r["batches"] == 4
    assert r["se"] == pytest.approx(se, rel=1e-12)
    assert r["t_quantile"] == pytest.approx(4.5407, abs=1e-4)
    assert r["tolerance"] == pytest.approx(4.5407 * se, rel=1e-4)
    assert r["exceeds"] is False  # 1.5 < 2.93
    assert G.bound_excess_test([1.0, 2.0, 3.0, 4.0], -1.0, alpha=0.01)["exceeds"] is True  # 3.5 > 2.93


@pytest.mark.parametrize("shift", [-0.05, -0.004, 0.0, 0.003, 0.006, 0.02])
def test_excess_test_is_scipys_one_sided_t_test(shift: float) -> None:
    rng = np.random.default_rng(int(1000 * (shift + 1)))
    true = 0.6706
    for alpha in (0.01, 0.05):
        for _ in range(20):
            e = true + shift + 0.02 * rng.standard_normal(64)
            r = G.bound_excess_test(e.tolist(), true, alpha=alpha)
            p = stats.ttest_1samp(e, true, alternative="greater").pvalue
            assert r["exceeds"] == (p < alpha)
            assert r["se"] == pytest.approx(stats.sem(e), rel=1e-9)


def test_excess_test_flags_non_finite_and_refuses_bad_input() -> None:
    assert G.bound_excess_test([0.1, float("nan"), 0.2], 0.5)["exceeds"] is True
    with pytest.raises(ValueError, match=r"batch_bounds: expected at least 2 .* got 1"):
        G.bound_excess_test([0.3], 0.5)
    with pytest.raises(ValueError, match=r"alpha: expected a level in \(0, 1\), got 1.5"):
        G.bound_excess_test([0.3, 0.4], 0.5, alpha=1.5)
    with pytest.raises(ValueError, match=r"true_mi: expected a finite number"):
        G.bound_excess_test([0.3, 0.4], float("inf"))


def _check(bound: float, true: float, tol: float = 0.01) -> dict:
    return {"bound": bound, "true_mi": true, "excess": bound - true, "se": tol / 2.4, "batches": 64,
            "alpha": 0.01, "t_quantile": 2.4, "tolerance": tol, "exceeds": bound - true > tol}


def test_validity_of_a_record() -> None:
    ok = {2: _check(0.50, 0.5108), 4: _check(0.675, 0.6706)}  # +0.0044 at M = 4: within the tolerance
    v = G.bound_validity("suff_stats", {}, ok)
    assert v["valid"] is True and "Theorem 2.4" in v["why"] and "M=4" in v["why"]
    bad = {2: _check(0.50, 0.5108), 4: _check(0.69, 0.6706), 8: _check(0.76, 0.7401)}
    v = G.bound_validity("suff_stats", {}, bad)
    assert v["valid"] is False
    assert "M=4: estimate 0.6900 > true MI 0.6706" in v["why"] and "M=8" in v["why"] and "M=2" not in v["why"]
    # no proven bound: invalid whatever the numbers
    v = G.bound_validity("mv_infonce", {}, ok)
    assert v["valid"] is False and "no MI lower bound is proven for mv_infonce" in v["why"]
    assert G.bound_validity("pvc_arithmetic", {"variant": "paper"}, ok)["valid"] is True
    v = G.bound_validity("pvc_arithmetic", {"variant": "public_port"}, ok)
    assert v["valid"] is False and "public_port" in v["why"]
    for name in ("pvc_geometric", "multicrop", "infonce_pwe"):
        assert G.bound_validity(name, None, ok)["valid"] is True
    with pytest.raises(ValueError, match="checks: expected"):
        G.bound_validity("suff_stats", {}, {})


def test_bad_options_are_refused_before_training(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"options.eval_batches: expected an integer >= 2, got 1"):
        benchmarks.load("polyview-gaussian-mi", overrides={"options.eval_batches": 1})  # refused when loaded
    spec = benchmarks.load("polyview-gaussian-mi")
    spec.options = {**spec.options, "eval_batches": 1}  # a spec changed after loading: refused before training
    with pytest.raises(ValueError, match=r"options.eval_batches: expected an integer >= 2, got 1"):
        G.run_gaussian_mi(CellRequest(spec, "suff_stats", 0, tmp_path), device="cpu", progress=False)
    assert not list(tmp_path.rglob("run.json"))
    assert gaussian_mi_options_problems({"multiplicities": [2, 1], "sigma": 0.0, "validity_alpha": 0}) == [
        "options.multiplicities: expected a non-empty list of integers >= 2, got [2, 1]",
        "options.sigma: expected a positive number, got 0.0",
        "options.validity_alpha: expected a level in (0, 1), got 0"]
    assert gaussian_mi_options_problems(benchmarks.load("polyview-gaussian-mi").options) == []


def test_a_tiny_run_records_its_checks(tmp_path: Path) -> None:
    spec = benchmarks.load("polyview-gaussian-mi", overrides={
        "pretrain.epochs": 3, "options.samples_per_batch": 16, "options.multiplicities": [2, 3],
        "options.eval_batches": 5, "metrics": ["mi_gap_M2", "mi_gap_M3"], "selection_metric": "mi_gap_M3"})
    request = CellRequest(spec, "suff_stats", 0, tmp_path)
    rec = G.run_gaussian_mi(request, device="cpu", progress=False)
    assert json.loads((request.cell / "run.json").read_text())["validity"] == rec["validity"]
    for m in (2, 3):
        c = rec["mi_bound_checks"][f"M{m}"]
        e = np.array(c["batch_bounds"])
        assert len(e) == 5
        assert values_of(rec["metrics"])[f"mi_bound_M{m}"] == pytest.approx(e.mean(), rel=1e-12)
        assert values_of(rec["metrics"])[f"mi_gap_M{m}"] == pytest.approx(G.true_one_vs_rest_mi(m, 1.0, 0.5) - e.mean(), abs=1e-12)
        p = stats.ttest_1samp(e, c["true_mi"], alternative="greater").pvalue
        assert c["exceeds"] == (p < 0.01)
    assert rec["validity"]["valid"] == (not any(c["exceeds"] for c in rec["mi_bound_checks"].values()))
    # 3 steps for each of the 2 multiplicities, 16 samples a step
    assert rec["budget"] == {"optimizer_steps": 6, "samples_seen": 96, "batch_size": 16, "micro_batch": None,
                             "epochs": 3}


# ---------------------------------------------------------------------------------------------
# the spec and the committed study
# ---------------------------------------------------------------------------------------------
def test_spec_has_at_least_8_seeds_and_enough_evaluation_batches() -> None:
    spec = benchmarks.load("polyview-gaussian-mi")
    assert len(set(spec.seeds)) >= 8
    assert int(spec.options["eval_batches"]) >= 32
    assert spec.options["multiplicities"] == [2, 4, 8, 10]  # the paper's grid


def test_committed_records_carry_a_validity_that_scipy_reproduces() -> None:
    paths = sorted(RUNS.glob("*/seed*/run.json"))
    if not paths:
        pytest.skip(f"no committed runs under {RUNS}")
    spec = benchmarks.load("polyview-gaussian-mi")
    seen = {}
    for p in paths:
        rec = json.loads(p.read_text())
        assert rec["config"]["options"] == json.loads(json.dumps(spec.options)), p  # made with the shipped spec
        alpha = rec["config"]["options"]["validity_alpha"]
        flags = []
        for m in rec["config"]["options"]["multiplicities"]:
            c = rec["mi_bound_checks"][f"M{m}"]
            e = np.array(c["batch_bounds"])
            assert values_of(rec["metrics"])[f"mi_bound_M{m}"] == pytest.approx(e.mean(), rel=1e-12), p
            true = G.true_one_vs_rest_mi(m, 1.0, 0.5)
            flags.append(stats.ttest_1samp(e, true, alternative="greater").pvalue < alpha)
        proven = rec["objective"] in {"pvc_geometric", "pvc_arithmetic", "suff_stats", "multicrop"}
        assert rec["validity"]["valid"] == (proven and not any(flags)), p
        assert rec["budget"]["optimizer_steps"] == 200 * 4 and rec["budget"]["samples_seen"] == 200 * 4 * 192, p
        seen.setdefault(rec["objective"], set()).add(rec["seed"])
    assert all(len(s) >= 8 for s in seen.values()) and len(seen) == 4
