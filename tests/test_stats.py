"""fusebench.leaderboard.stats: values worked out by hand, by exact enumeration, or by scipy's own routines."""

from __future__ import annotations

import itertools
import math
import random

import numpy as np
import pytest
import scipy.stats as st

from fusebench.leaderboard import plots, stats


# -- bootstrap_ci ------------------------------------------------------------------------------
def test_bootstrap_single_and_constant_values() -> None:
    assert stats.bootstrap_ci([0.7]) == (0.7, 0.7)
    assert stats.bootstrap_ci([0.97] * 10) == (0.97, 0.97)  # no resampling noise, not 0.97000000000000001


@pytest.mark.parametrize("values", [[0.2, 0.9], [0.5, 0.6, 0.7], [3.0, -1.0, 2.5]])
def test_bootstrap_few_seeds_gives_min_max(values: list[float]) -> None:
    """With n <= 3 seeds, all n resampled values equal to the minimum has probability n^-n (1/4, 1/27)
    > 2.5%, so the 2.5% quantile of the resampled means is the minimum (and the 97.5% one the maximum)."""
    lo, hi = stats.bootstrap_ci(values)
    assert lo == pytest.approx(min(values), abs=1e-12) and hi == pytest.approx(max(values), abs=1e-12)


def _exact_bootstrap_quantiles(x: list[float], q: list[float]) -> list[float]:
    """Quantiles of the exact bootstrap distribution of the mean: every one of the n^n index tuples."""
    n = len(x)
    means = sorted(sum(x[i] for i in idx) / n for idx in itertools.product(range(n), repeat=n))
    return [float(np.quantile(means, p)) for p in q]


def test_bootstrap_matches_the_exact_bootstrap_distribution() -> None:
    x = [0.61, 0.70, 0.78, 0.52, 0.66]  # 5^5 = 3125 equally likely resamples, enumerated
    exact = _exact_bootstrap_quantiles(x, [0.025, 0.975])
    lo, hi = stats.bootstrap_ci(x, n_boot=20000)
    # Monte-Carlo error of a 2.5% quantile with 20,000 draws: well under 0.01 here (spread ~0.2)
    assert lo == pytest.approx(exact[0], abs=0.006) and hi == pytest.approx(exact[1], abs=0.006)
    lo90, hi90 = stats.bootstrap_ci(x, level=0.9, n_boot=20000)
    exact90 = _exact_bootstrap_quantiles(x, [0.05, 0.95])
    assert lo90 == pytest.approx(exact90[0], abs=0.006) and hi90 == pytest.approx(exact90[1], abs=0.006)
    assert lo < lo90 < hi90 < hi


def test_bootstrap_agrees_with_scipy_percentile_bootstrap() -> None:
    rng = np.random.default_rng(7)
    x = rng.normal(0.7, 0.05, size=10)
    ref = st.bootstrap((x,), np.mean, method="percentile", confidence_level=0.95, n_resamples=20000,
                       rng=np.random.default_rng(1)).confidence_interval
    lo, hi = stats.bootstrap_ci(x.tolist(), n_boot=20000)
    assert lo == pytest.approx(ref.low, abs=0.003) and hi == pytest.approx(ref.high, abs=0.003)


def test_bootstrap_is_deterministic() -> None:
    x = [0.61, 0.70, 0.78, 0.52, 0.66, 0.59]
    assert stats.bootstrap_ci(x) == stats.bootstrap_ci(list(x))
    assert stats.bootstrap_ci(x, seed=3) == stats.bootstrap_ci(x, seed=3)
    assert stats.bootstrap_ci(x, seed=3) != stats.bootstrap_ci(x, seed=4)


@pytest.mark.parametrize("kwargs, match", [
    ({"values": [0.5, float("nan")]}, r"values must hold finite numbers .*item 1 is nan"),
    ({"values": [0.5, math.inf]}, r"values must hold finite numbers"),
    ({"values": []}, r"values must hold at least one number"),
    ({"values": "0.5"}, r"values must be a sequence of numbers, got str"),
    ({"values": [0.5, None]}, r"values must hold numbers; item 1 is None"),
    ({"values": [0.5, 0.6], "level": 1.0}, r"level must be a number strictly between 0 and 1, got 1.0"),
    ({"values": [0.5, 0.6], "n_boot": 0}, r"n_boot must be an integer >= 1, got 0"),
    ({"values": [0.5, 0.6], "seed": 1.5}, r"seed must be an integer"),
])
def test_bootstrap_bad_input(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        stats.bootstrap_ci(**kwargs)


# -- holm --------------------------------------------------------------------------------------
def test_holm_hand_worked() -> None:
    # m = 4, sorted: d .005, a .01, c .03, b .04 -> x4 .02, x3 .03, x2 .06, x1 .04 -> running max
    got = stats.holm({"a": 0.01, "b": 0.04, "c": 0.03, "d": 0.005})
    assert got == pytest.approx({"a": 0.03, "b": 0.06, "c": 0.06, "d": 0.02}, abs=1e-15)
    assert list(got) == ["a", "b", "c", "d"]  # the caller's order


def test_holm_caps_at_one_and_handles_ties() -> None:
    # m = 3: .2 x3 = .6; the tied .4, .4 -> x2 = .8 and x1 = .4 -> max .8 for both
    assert stats.holm({"x": 0.4, "y": 0.2, "z": 0.4}) == pytest.approx({"x": 0.8, "y": 0.6, "z": 0.8})
    assert stats.holm({"x": 0.6, "y": 0.7}) == {"x": 1.0, "y": 1.0}  # 1.2, 0.7 -> capped, monotone
    assert stats.holm({"only": 0.03}) == {"only": 0.03}
    assert stats.holm({}) == {}


def test_holm_is_monotone_in_the_raw_p_values() -> None:
    rnd = random.Random(3)
    for _ in range(50):
        p = {f"r{i}": rnd.random() ** 3 for i in range(rnd.randint(1, 9))}
        adj = stats.holm(p)
        order = sorted(p, key=p.get)
        assert all(adj[a] <= adj[b] for a, b in zip(order, order[1:]))
        assert all(p[k] <= adj[k] <= 1.0 for k in p)


@pytest.mark.parametrize("bad", [{"a": 1.5}, {"a": -0.1}, {"a": float("nan")}, {"a": None}, {"a": True}])
def test_holm_bad_input(bad: dict) -> None:
    with pytest.raises(ValueError, match=r"pvalues must map names to numbers in \[0, 1\]; 'a' has"):
        stats.holm(bad)
    with pytest.raises(ValueError, match="pvalues must be a mapping"):
        stats.holm([0.1])


# -- paired_vs_reference -----------------------------------------------------------------------
def test_paired_hand_worked_t4() -> None:
    # differences .05, .1, .05: mean 1/15, sd sqrt(1/1200)... t = 4 exactly, df 2 -> p = 1 - t / sqrt(t^2 + 2)
    rows = {"alpha": {0: 0.5, 1: 0.6, 2: 0.7}, "beta": {0: 0.45, 1: 0.5, 2: 0.65}}
    res = stats.paired_vs_reference(rows, "beta")
    assert set(res) == {"alpha"}
    r = res["alpha"]
    assert r["n"] == 3 and r["mean_diff"] == pytest.approx(0.2 / 3)
    assert r["t"] == pytest.approx(4.0)
    assert r["p"] == pytest.approx(1 - 4 / math.sqrt(18), abs=1e-12)
    assert r["p_holm"] == r["p"] and r["note"] == ""


def test_paired_matches_scipy_ttest_rel() -> None:
    rnd = random.Random(20240611)
    for _ in range(200):
        n = rnd.randint(2, 12)
        x = [rnd.random() for _ in range(n)]
        y = [v + rnd.gauss(rnd.uniform(-0.2, 0.2), 10 ** rnd.uniform(-3, -0.5)) for v in x]
        res = stats.paired_vs_reference({"row": dict(enumerate(x)), "ref": dict(enumerate(y))}, "ref")["row"]
        want = st.ttest_rel(x, y)
        assert res["t"] == pytest.approx(float(want.statistic), rel=1e-9)
        assert res["p"] == pytest.approx(float(want.pvalue), rel=1e-9, abs=1e-15)


def test_paired_uses_only_common_seeds() -> None:
    ref = {0: 0.5, 1: 0.6, 2: 0.7, 3: 0.9}
    row = {1: 0.7, 2: 0.75, 3: 1.1, 7: 0.0}  # seeds 1, 2, 3 shared: differences .1, .05, .2
    r = stats.paired_vs_reference({"ref": ref, "row": row}, "ref")["row"]
    want = st.ttest_rel([0.7, 0.75, 1.1], [0.6, 0.7, 0.9])
    assert r["n"] == 3 and r["p"] == pytest.approx(float(want.pvalue), rel=1e-9)
    assert r["mean_diff"] == pytest.approx((0.1 + 0.05 + 0.2) / 3)


def test_paired_zero_variance_conventions_and_few_seeds() -> None:
    rows = {"ref": {0: 0.5, 1: 0.6, 2: 0.7},
            "same": {0: 0.5, 1: 0.6, 2: 0.7},
            "shifted": {0: 0.6, 1: 0.7, 2: 0.8},  # +0.1 on every seed (equal up to rounding)
            "one": {0: 0.9},
            "none": {5: 0.9}}
    res = stats.paired_vs_reference(rows, "ref")
    assert (res["same"]["t"], res["same"]["p"], res["same"]["mean_diff"]) == (0.0, 1.0, 0.0)
    assert "p = 1" in res["same"]["note"]
    assert res["shifted"]["p"] == 0.0 and res["shifted"]["t"] == math.inf
    assert "zero variance" in res["shifted"]["note"] and res["shifted"]["mean_diff"] == pytest.approx(0.1)
    assert res["one"]["p"] is None and res["one"]["p_holm"] is None and res["one"]["n"] == 1
    assert res["one"]["mean_diff"] == pytest.approx(0.4)
    assert res["none"]["mean_diff"] is None and res["none"]["n"] == 0
    # the Holm family holds the two rows with a p-value: 1 -> 1, 0 -> 0
    assert res["same"]["p_holm"] == 1.0 and res["shifted"]["p_holm"] == 0.0


def test_paired_holm_over_the_family() -> None:
    ref = {0: 0.9, 1: 0.9, 2: 0.9}
    rows = {"ref": ref, "a": {0: 0.5, 1: 0.6, 2: 0.7}, "b": {0: 0.45, 1: 0.5, 2: 0.65}, "c": {0: 0.3, 1: 0.35, 2: 0.4}}
    res = stats.paired_vs_reference(rows, "ref")

    def p2(d: list[float]) -> float:  # df = 2 closed form: p = 1 - |t| / sqrt(t^2 + 2)
        m = sum(d) / 3
        sd = math.sqrt(sum((v - m) ** 2 for v in d) / 2)
        t = m / (sd / math.sqrt(3))
        return 1 - abs(t) / math.sqrt(t * t + 2)

    p = {k: p2([rows[k][s] - ref[s] for s in range(3)]) for k in ("a", "b", "c")}
    assert {k: res[k]["p"] for k in p} == pytest.approx(p, rel=1e-9)
    order = sorted(p, key=p.get)  # c, b, a: multipliers 3, 2, 1 then the running maximum
    adj = {order[0]: 3 * p[order[0]]}
    adj[order[1]] = max(adj[order[0]], 2 * p[order[1]])
    adj[order[2]] = max(adj[order[1]], p[order[2]])
    assert {k: res[k]["p_holm"] for k in p} == pytest.approx(adj, rel=1e-9)


def test_paired_bad_input() -> None:
    with pytest.raises(ValueError, match=r"reference must name one of the rows \['a', 'b'\], got 'raw'"):
        stats.paired_vs_reference({"a": {0: 1.0}, "b": {0: 2.0}}, "raw")
    with pytest.raises(ValueError, match=r"rows\['a'\] must map seeds to finite numbers; seed 1 has nan"):
        stats.paired_vs_reference({"a": {0: 1.0, 1: float("nan")}, "b": {0: 2.0}}, "b")
    with pytest.raises(ValueError, match="rows must be a mapping"):
        stats.paired_vs_reference([1, 2], "a")


# -- friedman ----------------------------------------------------------------------------------
def test_friedman_average_ranks_by_hand() -> None:
    scores = [[0.9, 0.8, 0.7],   # ranks 1 2 3
              [0.6, 0.8, 0.8],   # 3, then the tie 1.5 1.5
              [0.7, 0.9, 0.5]]   # 2 1 3
    res = stats.friedman(scores)
    assert res.avg_ranks == pytest.approx(((1 + 3 + 2) / 3, (2 + 1.5 + 1) / 3, (3 + 1.5 + 3) / 3))
    low = stats.friedman(scores, higher_is_better=False)  # reversed: 3 2 1 / 1 2.5 2.5 / 2 3 1
    assert low.avg_ranks == pytest.approx(((3 + 1 + 2) / 3, (2 + 2.5 + 3) / 3, (1 + 2.5 + 1) / 3))
    assert (res.n_datasets, res.n_methods) == (3, 3)


def test_friedman_matches_scipy_with_and_without_ties() -> None:
    rng = np.random.default_rng(0)
    for trial in range(30):
        n, k = int(rng.integers(2, 9)), int(rng.integers(3, 8))
        scores = rng.integers(0, 4, size=(n, k)).astype(float) if trial % 2 else rng.random((n, k))
        if np.all(scores == scores[:, :1]):
            continue
        res = stats.friedman(scores)
        want = st.friedmanchisquare(*scores.T)  # one sample per method, paired by dataset
        assert res.statistic == pytest.approx(float(want.statistic), rel=1e-10)
        assert res.pvalue == pytest.approx(float(want.pvalue), rel=1e-9)
        # Iman-Davenport from the same statistic, by hand
        if res.statistic < n * (k - 1) - 1e-9:
            f = (n - 1) * res.statistic / (n * (k - 1) - res.statistic)
            assert res.iman_davenport == pytest.approx(f, rel=1e-12)
            assert res.iman_davenport_p == pytest.approx(float(st.f.sf(f, k - 1, (k - 1) * (n - 1))), rel=1e-9)


def test_friedman_hand_statistic_without_ties() -> None:
    # 4 datasets, 3 methods, ranks: (1,2,3) x3 and (2,1,3): R = (1.25, 1.75, 3)
    scores = [[3, 2, 1], [3, 2, 1], [3, 2, 1], [2, 3, 1]]
    res = stats.friedman(scores)
    chi2 = 12 * 4 / (3 * 4) * (1.25 ** 2 + 1.75 ** 2 + 3 ** 2 - 3 * 16 / 4)
    assert res.statistic == pytest.approx(chi2) and chi2 == pytest.approx(6.5)
    assert res.pvalue == pytest.approx(math.exp(-6.5 / 2))  # chi-square with 2 df: survival exp(-x/2)
    assert res.iman_davenport == pytest.approx(3 * 6.5 / (8 - 6.5))


def test_friedman_degenerate_cases() -> None:
    tied = stats.friedman([[1.0, 1.0, 1.0], [2.0, 2.0, 2.0]])
    assert (tied.statistic, tied.pvalue) == (0.0, 1.0)
    same = stats.friedman([[3.0, 2.0, 1.0], [3.0, 2.0, 1.0]])  # perfect agreement: chi2 = N (k - 1)
    assert same.statistic == pytest.approx(4.0) and same.iman_davenport == math.inf and same.iman_davenport_p == 0.0


@pytest.mark.parametrize("scores, match", [
    ([[1.0, 2.0]], r"at least 2 datasets \(rows\) and 2 methods \(columns\), got 1 x 2"),
    ([[1.0], [2.0]], r"got 2 x 1"),
    ([1.0, 2.0], r"2-D"),
    ([[1.0, float("nan")], [1.0, 2.0]], r"finite numbers; row 0, column 1 is nan"),
    ([["a", "b"], ["c", "d"]], r"matrix of numbers"),
])
def test_friedman_bad_input(scores, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        stats.friedman(scores)


# -- nemenyi -----------------------------------------------------------------------------------
def test_nemenyi_q_matches_demsar_table() -> None:
    """Demšar (2006), Table 5(a): critical values q_0.05 of the two-tailed Nemenyi test."""
    printed = [1.960, 2.343, 2.569, 2.728, 2.850, 2.949, 3.031, 3.102, 3.164]
    for k, q in zip(range(2, 11), printed):
        assert stats.nemenyi_q(k) == pytest.approx(q, abs=1e-3), k
    assert stats.nemenyi_q(2) == pytest.approx(st.norm.ppf(0.975), abs=1e-6)  # two means: the normal quantile


def test_nemenyi_cd_demsar_example() -> None:
    # Demšar (2006), Sec. 3.2.4: 4 algorithms, 14 data sets: CD = 2.569 sqrt(4 * 5 / (6 * 14)) = 1.25
    assert stats.nemenyi_cd(4, 14) == pytest.approx(1.25, abs=0.005)
    assert stats.nemenyi_cd(4, 14) == pytest.approx(stats.nemenyi_q(4) * math.sqrt(20 / 84), rel=1e-12)
    assert stats.nemenyi_cd(5, 3, alpha=0.10) < stats.nemenyi_cd(5, 3, alpha=0.05)


@pytest.mark.parametrize("args, match", [
    ((1, 5), r"num_methods must be an integer >= 2, got 1"),
    ((3, 0), r"num_datasets must be an integer >= 1, got 0"),
    ((3.0, 5), r"num_methods must be an integer"),
    ((3, 5, 0.0), r"alpha must be a number strictly between 0 and 1, got 0.0"),
])
def test_nemenyi_bad_input(args: tuple, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        stats.nemenyi_cd(*args)


# -- CD diagram --------------------------------------------------------------------------------
def test_cd_groups_by_hand() -> None:
    ranks = {"a": 1.0, "b": 1.5, "c": 2.2, "d": 3.9, "e": 4.0}
    # cd 1.25: from a: b (0.5), c (1.2) < 1.25 -> [a b c]; from b: c (0.7), d (2.4 no) -> inside;
    # from c: d 1.7 no; from d: e 0.1 -> [d e]
    assert stats.cd_groups(ranks, 1.25) == [["a", "b", "c"], ["d", "e"]]
    assert stats.cd_groups(ranks, 0.05) == []
    assert stats.cd_groups(ranks, 10.0) == [["a", "b", "c", "d", "e"]]
    # a run that starts later but reaches further is its own bar: [a b], [b c]
    assert stats.cd_groups({"a": 1.0, "b": 1.8, "c": 2.6}, 1.0) == [["a", "b"], ["b", "c"]]
    with pytest.raises(ValueError, match="at least 2 methods"):
        stats.cd_groups({"a": 1.0}, 1.0)
    with pytest.raises(ValueError, match=r"cd must be a finite number > 0, got 0"):
        stats.cd_groups(ranks, 0)


def test_cd_diagram_writes_a_deterministic_png(tmp_path) -> None:
    ranks = {"raw": 1.25, "m3g": 2.5, "suff_stats": 3.0, "none": 3.25}
    a = plots.cd_diagram(ranks, 1.5, tmp_path / "a.png", "title", metadata={"fusebench-inputs": "k1"})
    b = plots.cd_diagram(dict(reversed(list(ranks.items()))), 1.5, tmp_path / "sub" / "b.png", "title",
                         metadata={"fusebench-inputs": "k1"})
    data = a.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data == b.read_bytes()
    from PIL import Image  # an independent PNG reader (pillow is a dependency)

    with Image.open(a) as im:
        chunks = dict(im.text)
    assert chunks.get("fusebench-inputs") == "k1" and "Software" not in chunks
    assert not [p for p in tmp_path.rglob("*") if p.name.startswith(".")]  # no temporary file left
    with pytest.raises(ValueError, match=r"avg_ranks must map methods to finite numbers; 'x' has nan"):
        plots.cd_diagram({"x": float("nan"), "y": 1.0}, 1.0, tmp_path / "c.png", "t")
