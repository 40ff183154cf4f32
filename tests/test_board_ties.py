"""Ties said as ties (issue #30, item 6): every row of a ranked board tested against the best row (paired
t-test over shared seeds, Holm over the rows), a "tied" mark where not separable, bold only when the best
row is separable from the second, and a bootstrap rank interval per row (over seeds on a board, over
datasets in the index). Checked against slow, obviously correct implementations written here (loops over
the bootstrap resamples, scipy for the p-values)."""

from __future__ import annotations

import csv
import io
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import rankdata, ttest_rel

from fusebench.leaderboard import ties, write_leaderboards
from fusebench.leaderboard.index import cross_dataset_ranking
from scipy import stats
from fusebench.leaderboard.ties import vs_best


# ------------------------------------------------------------------------------------------------
# slow references
# ------------------------------------------------------------------------------------------------
def _slow_percentiles(samples: list[int], level: float = 0.95) -> tuple[int, int]:
    """The order statistics x_(ceil(B * 0.025)) and x_(ceil(B * 0.975)) of the sorted samples."""
    xs = sorted(samples)
    b = len(xs)
    lo = math.ceil(round(b * (1 - level) / 2, 9))
    hi = math.ceil(round(b * (1 + level) / 2, 9))
    return xs[max(lo, 1) - 1], xs[min(max(hi, 1), b) - 1]


def _slow_rank_intervals(rows: dict, higher: bool, n_boot: int, seed: int) -> dict:
    shared = sorted(set.intersection(*(set(v) for v in rows.values())))
    names = sorted(rows)
    sign = 1 if higher else -1

    def place(means: dict) -> dict:
        return {k: 1 + sum(1 for j in means if round(sign * means[j], 12) > round(sign * means[k], 12))
                for k in means}

    point = place({k: sum(v.values()) / len(v) for k, v in rows.items()})
    # the resamples: row b of one (n_boot, n) draw of seed indices, as the function documents
    draws = np.random.default_rng(seed).integers(0, len(shared), size=(n_boot, len(shared)))
    per_row: dict = {k: [] for k in names}
    for b in range(n_boot):
        picked = [shared[i] for i in draws[b]]
        means = {k: sum(rows[k][s] for s in picked) / len(picked) for k in names}
        for k, r in place(means).items():
            per_row[k].append(r)
    return {k: (point[k], *_slow_percentiles(per_row[k])) for k in names}


def _slow_holm(ps: dict) -> dict:
    order = sorted(ps, key=lambda k: ps[k])
    m, out, running = len(order), {}, 0.0
    for i, k in enumerate(order):
        running = max(running, min(1.0, (m - i) * ps[k]))
        out[k] = running
    return out


# ------------------------------------------------------------------------------------------------
# the statistics
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("higher", [True, False])
def test_rank_intervals_match_a_loop_over_resamples(higher: bool) -> None:
    rng = np.random.default_rng(7)
    base = {"a": 0.80, "b": 0.79, "c": 0.70, "d": 0.795, "e": 0.60}
    rows = {k: {s: float(mu + 0.02 * rng.standard_normal()) for s in range(8)} for k, mu in base.items()}
    got = ties.rank_intervals(rows, higher_is_better=higher, n_boot=1500, seed=3)
    slow = _slow_rank_intervals(rows, higher, 1500, 3)
    # the point rank is the table's mean over the row's seeds (rows with differing seed sets get no interval:
    # tests/test_leaderboard_review.py)
    means = {k: sum(v.values()) / len(v) for k, v in rows.items()}
    sign = 1 if higher else -1
    for k in rows:
        assert got[k]["rank"] == 1 + sum(1 for j in means if sign * means[j] > sign * means[k]), k
        assert (got[k]["low"], got[k]["high"]) == slow[k][1:], k
        assert got[k]["n"] == 8


def test_rank_interval_of_an_obvious_order_is_a_point() -> None:
    rows = {"a": {s: 10.0 + s for s in range(5)}, "b": {s: 0.0 + s for s in range(5)}}
    got = ties.rank_intervals(rows, n_boot=200)
    assert (got["a"]["rank"], got["a"]["low"], got["a"]["high"]) == (1, 1, 1)
    assert (got["b"]["rank"], got["b"]["low"], got["b"]["high"]) == (2, 2, 2)
    one = ties.rank_intervals({"a": {0: 1.0}, "b": {0: 2.0}})
    assert one["a"]["low"] is None and one["b"]["rank"] == 1  # one shared seed: no interval


def test_vs_best_matches_scipy_and_holm_by_hand() -> None:
    rng = np.random.default_rng(11)
    rows = {k: {s: float(mu + 0.03 * rng.standard_normal()) for s in range(6)}
            for k, mu in {"best": 0.9, "close": 0.895, "far": 0.7, "mid": 0.85}.items()}
    del rows["mid"][5]  # paired over the 5 seeds it shares with the best row
    got = ties.vs_best(rows, "best")
    raw = {}
    for k in ("close", "far", "mid"):
        seeds = sorted(set(rows[k]) & set(rows["best"]))
        raw[k] = ttest_rel([rows[k][s] for s in seeds], [rows["best"][s] for s in seeds]).pvalue
    adjusted = _slow_holm(raw)
    for k in raw:
        assert got[k]["p"] == pytest.approx(raw[k], rel=1e-10, abs=1e-15)
        assert got[k]["p_holm"] == pytest.approx(adjusted[k], rel=1e-10, abs=1e-15)
        assert got[k]["tied"] is bool(adjusted[k] > 0.05)
    assert got["mid"]["n"] == 5
    assert got["close"]["tied"] is True and got["far"]["tied"] is False
    lonely = ties.vs_best({"best": {0: 1.0, 1: 2.0}, "x": {0: 0.5}}, "best")
    assert lonely["x"]["tied"] is None and lonely["x"]["p_holm"] is None  # 1 shared seed: untested


def test_dataset_rank_intervals_match_a_loop_over_resampled_datasets() -> None:
    rng = np.random.default_rng(5)
    scores = rng.random((5, 4)) + np.array([0.3, 0.2, 0.0, 0.1])
    methods = ["w", "x", "y", "z"]
    got = ties.dataset_rank_intervals(scores, methods, n_boot=800, seed=2)
    ranks = [rankdata(-row, method="average") for row in scores]  # per dataset, 1 = best

    def place(avg: list[float]) -> list[int]:
        return [1 + sum(1 for b in avg if round(b, 12) < round(a, 12)) for a in avg]

    point = place([sum(r[j] for r in ranks) / len(ranks) for j in range(4)])
    draws = np.random.default_rng(2).integers(0, 5, size=(800, 5))
    places: list[list[int]] = [[] for _ in methods]
    for b in range(800):
        picked = [ranks[i] for i in draws[b]]
        for j, p in enumerate(place([sum(r[j] for r in picked) / len(picked) for j in range(4)])):
            places[j].append(p)
    for j, m in enumerate(methods):
        assert got[m] == {"rank": point[j], "low": _slow_percentiles(places[j])[0],
                          "high": _slow_percentiles(places[j])[1]}, m


# ------------------------------------------------------------------------------------------------
# the board
# ------------------------------------------------------------------------------------------------
def _record(obj: str, seed: int, acc: float, mae: float, bench: str = "toy", synthetic: bool = True) -> dict:
    return {
        "schema_version": 1, "suite_version": "0.1.0", "benchmark": bench, "objective": obj, "seed": seed,
        "metrics": {"acc": acc, "mae": mae}, "metric_directions": {"acc": "higher", "mae": "lower"},
        "config": {"metrics": ["acc", "mae"], "selection_metric": "acc", "seeds": list(range(6)),
                   "dataset": {"id": "toy", "synthetic_only": False}},
        "dataset": {"id": "toy", "synthetic": synthetic, "manifest_hash": "synthetic" if synthetic else "ab12cd34"},
        "selection": {"rule": "best validation acc"}, "pretrain_time_s": 1.0, "peak_memory_mb": 10.0,
        "comparison": {"reference": "gamma", "primary": "acc", "why": "toy"}}


ACC = {"alpha": [0.80, 0.82, 0.79, 0.81, 0.83, 0.80], "beta": [0.805, 0.815, 0.80, 0.80, 0.825, 0.81],
       "gamma": [0.60, 0.62, 0.61, 0.59, 0.60, 0.63]}
MAE = {"alpha": [0.9, 0.91, 0.92, 0.9, 0.93, 0.9], "beta": [0.5, 0.52, 0.5, 0.51, 0.5, 0.5],
       "gamma": [0.95, 0.94, 0.96, 0.95, 0.97, 0.95]}


def _board(tmp_path: Path, acc: dict = ACC) -> tuple[str, dict, list[dict]]:
    runs = tmp_path / "runs"
    for obj in acc:
        for s in range(6):
            d = runs / "toy" / obj / f"seed{s}"
            d.mkdir(parents=True, exist_ok=True)
            (d / "run.json").write_text(json.dumps(_record(obj, s, acc[obj][s], MAE[obj][s])))
    out = tmp_path / "lb"
    write_leaderboards(runs, out, plots=False, formats=("md", "csv", "json"))
    md = (out / "toy.md").read_text()
    return md, json.loads((out / "toy.json").read_text()), list(csv.DictReader(io.StringIO((out / "toy.csv").read_text())))


def _cells(md: str) -> dict[str, list[str]]:
    lines = [ln for ln in md.splitlines() if ln.startswith("| `")]
    return {c[0]: c[1:] for c in ([x.strip() for x in re.split(r"(?<!\\)\|", ln)[1:-1]] for ln in lines)}


def test_board_marks_ties_and_bolds_only_a_separable_best(tmp_path: Path) -> None:
    md, data, rows = _board(tmp_path)
    cells = _cells(md)
    head = next(ln for ln in md.splitlines() if ln.startswith("| objective"))
    cols = [c.strip() for c in head.split("|")[1:-1]][1:]
    rank_col, best_col = cols.index("rank [95%] on acc"), cols.index("vs best on acc (Holm p)")
    # beta has the best acc mean (0.809 vs 0.808) but alpha is not separable from it: no bold in acc
    seeds = range(6)
    p = {k: ttest_rel([ACC[k][s] for s in seeds], [ACC["beta"][s] for s in seeds]).pvalue for k in ("alpha", "gamma")}
    holm = _slow_holm(p)
    assert holm["alpha"] > 0.05 and holm["gamma"] < 0.05
    assert cells["`beta`"][best_col] == "best"
    assert cells["`alpha`"][best_col] == f"tied ({holm['alpha']:.3f})"
    assert cells["`gamma`"][best_col] == "worse (< 0.001)"
    assert not any(c.startswith("**") for c in (cells["`alpha`"][0], cells["`beta`"][0], cells["`gamma`"][0]))
    # mae (lower is better): beta is far ahead of the second: bold
    assert cells["`beta`"][1].startswith("**0.5050")
    slow = _slow_rank_intervals({k: dict(enumerate(v)) for k, v in ACC.items()}, True, 10000, 0)
    for k in ACC:
        rank, lo, hi = slow[k]
        assert cells[f"`{k}`"][rank_col] == f"{rank} [{lo}-{hi}]"
    # CSV and JSON carry the same fields and numbers
    g = data["groups"][0]
    assert g["best"] == "beta" and g["best_separable"] is False and g["rank_resamples"] == 10000
    by = {r["objective"]: r for r in g["rows"]}
    for r in rows:
        j = by[r["objective"]]
        rank, lo, hi = slow[r["objective"]]
        assert (j["rank"], j["rank_interval"]) == (rank, [lo, hi])
        assert (int(r["rank"]), int(r["rank_low"]), int(r["rank_high"])) == (rank, lo, hi)
        if r["objective"] == "beta":
            assert r["tied_with_best"] == r["p_best_holm"] == r["delta_best"] == "" and j["tied_with_best"] is None
        else:
            assert j["p_best_holm"] == pytest.approx(holm[r["objective"]], rel=1e-9)
            assert float(r["p_best_holm"]) == j["p_best_holm"]
            assert r["tied_with_best"] == ("true" if j["tied_with_best"] else "false")
            assert j["tied_with_best"] is bool(holm[r["objective"]] > 0.05)
            assert float(r["delta_best"]) == j["delta_best"]
    # the index's best line says the best is one of several
    index = (tmp_path / "lb" / "README.md").read_text()
    assert "`beta` (acc 80.92 ± 0.97 (6)), tied with `alpha` (not separable)" in index


def test_a_separable_best_is_bold(tmp_path: Path) -> None:
    acc = {**ACC, "beta": [a + 0.05 + 0.001 * i for i, a in enumerate(ACC["alpha"])]}
    md, data, _ = _board(tmp_path, acc)
    assert _cells(md)["`beta`"][0].startswith("**")
    assert data["groups"][0]["best_separable"] is True


def test_index_gives_each_objective_a_place_interval_over_datasets(tmp_path: Path) -> None:
    means = {"d1": {"a": 0.9, "b": 0.8, "raw": 0.7}, "d2": {"a": 0.7, "b": 0.9, "raw": 0.8},
             "d3": {"a": 0.95, "b": 0.85, "raw": 0.5}}
    boards = {n: {"groups": [{"kind": "real", "protocol": "embedding_eval", "direction": "higher", "primary": "acc",
                              "means": m, **({"merged_references": {"raw": ["raw_balanced"]}} if n == "d1" else {})}]}
              for n, m in means.items()}
    ranking = cross_dataset_ranking(boards)
    methods = ["a", "b", "raw"]
    want = ties.dataset_rank_intervals([[means[n][m] for m in methods] for n in sorted(means)], methods)
    assert ranking["places"] == want
    from fusebench.leaderboard.index import build_index

    text = build_index(boards, None, ranking)
    place = want["a"]
    assert f"| `a` | {ranking['avg']['a']:.2f} | {place['rank']} [{place['low']}-{place['high']}] |" in text
    assert ("2 pretrained objective(s) (`a`, `b`) and 1 distinct reference row(s) (`raw` (≡ `raw_balanced`))"
            in text)


def test_index_ranks_each_modality_family_with_three_boards_on_its_own() -> None:
    # issue #31 item 4: three image boards and two text boards. Within the image family, by hand:
    #   i1: a .9 > b .8 > c .7 -> ranks 1, 2, 3;  i2: b .9 > a .8 > c .7 -> 2, 1, 3;  i3: a .9 > c .8 > b .7 -> 1, 3, 2
    #   average ranks a 4/3, b 2, c 8/3; Friedman chi2_F = 12 N / (k (k + 1)) (sum R_j^2 - k (k + 1)^2 / 4)
    #   = 12 * 3 / 12 * (16/9 + 4 + 64/9 - 12) = 3 * 8/9 = 8/3, p = exp(-chi2 / 2) (chi-square, 2 df) = 0.2636
    from fusebench.leaderboard.index import build_index, family_rankings

    means = {"i1": {"a": 0.9, "b": 0.8, "c": 0.7}, "i2": {"a": 0.8, "b": 0.9, "c": 0.7},
             "i3": {"a": 0.9, "b": 0.7, "c": 0.8}, "t1": {"a": 0.1, "b": 0.2, "c": 0.3},
             "t2": {"a": 0.1, "b": 0.3, "c": 0.2}}
    boards = {n: {"groups": [{"kind": "real", "protocol": "embedding_eval", "direction": "higher", "primary": "acc",
                              "means": m, "family": "image" if n[0] == "i" else "text"}]} for n, m in means.items()}
    ranking = cross_dataset_ranking(boards)
    fams = family_rankings(boards, ranking)
    assert set(fams) == {"image", "text"} and fams["text"] == {"boards": ["t1", "t2"]}  # two boards: not ranked
    image = fams["image"]
    assert image["boards"] == ["i1", "i2", "i3"]
    assert image["avg"] == pytest.approx({"a": 4 / 3, "b": 2.0, "c": 8 / 3}, abs=1e-12)
    assert image["friedman"].statistic == pytest.approx(8 / 3, abs=1e-12)
    assert image["friedman"].pvalue == pytest.approx(math.exp(-4 / 3), abs=1e-12)
    md = build_index(boards, None, ranking)
    assert "### Within each modality family" in md
    assert "#### `image`: 3 boards ([i1](i1.md), [i2](i2.md), [i3](i3.md))" in md
    assert "| `a` | 1.33 |" in md and "Friedman chi2_F = 2.667 (2 df)" in md
    assert "`text` ([t1](t1.md), [t2](t2.md))" in md
    # boards without a family: no family section
    for b in boards.values():
        del b["groups"][0]["family"]
    assert "modality family" not in build_index(boards, None, cross_dataset_ranking(boards))


def test_a_family_with_a_plus_is_a_code_span_and_hostile_text_is_not() -> None:
    from fusebench.leaderboard.columns import md_code

    assert md_code("image+text") == "`image+text`"
    assert md_code("a`b") != "`a`b`" and "`" not in md_code("a`b").replace("\\`", "")  # escaped, no code span
    assert md_code("<i>") == "&lt;i&gt;"


def test_a_variant_board_is_compared_with_its_base_and_left_out_of_the_ranking() -> None:
    # issue #31 item 4: "b4x" re-runs "b" at 4x the budget (variant_of). By hand:
    #   b: p .90 > q .80 > r .70 > s .60 -> ranks 1, 2, 3, 4;  b4x: q .85 > p .84 > r .70 > s .50 -> 2, 1, 3, 4
    #   pairs (6): only (p, q) is discordant -> Kendall tau-b = (5 - 1) / 6 = 2/3 (no ties)
    from fusebench.leaderboard.index import build_index, variant_comparisons

    #   the reference row `raw` (the same features on both boards) is ranked but left out of tau
    means = {"a": {"p": 0.5, "q": 0.6, "r": 0.4, "s": 0.3, "raw": 0.2}, "b": {"p": 0.9, "q": 0.8, "r": 0.7, "s": 0.6,
                                                                         "raw": 0.1},
             "b4x": {"p": 0.84, "q": 0.85, "r": 0.7, "s": 0.5, "raw": 0.1}}
    boards = {n: {"groups": [{"kind": "real", "protocol": "embedding_eval", "direction": "higher", "primary": "acc",
                              "means": m, **({"variant_of": "b"} if n == "b4x" else {})}]} for n, m in means.items()}
    ranking = cross_dataset_ranking(boards)
    assert ranking["boards"] == ["a", "b"] and "variant of `b`" in ranking["skipped"]["b4x"]
    (c,) = variant_comparisons(boards)
    assert (c["variant"], c["base"], c["rows"], c["pretrained"]) == ("b4x", "b", ["p", "q", "r", "raw", "s"],
                                                                      ["p", "q", "r", "s"])
    assert c["ranks"]["base"] == {"p": 1.0, "q": 2.0, "r": 3.0, "s": 4.0, "raw": 5.0}
    assert c["ranks"]["variant"] == {"p": 2.0, "q": 1.0, "r": 3.0, "s": 4.0, "raw": 5.0}
    assert c["tau"] == pytest.approx(2 / 3, abs=1e-12)
    md = build_index(boards, None, ranking)
    assert "### Variants" in md and "#### [b4x](b4x.md) against [b](b.md) (`acc` (%))" in md
    assert "| `q` | 80.00 | 2 | 85.00 | 1 | +1 |" in md and "| `p` | 90.00 | 1 | 84.00 | 2 | -1 |" in md
    assert "tau-b between the two boards' means over the 4 pretrained rows" in md and "): 0.667 (p = " in md
    # a base that is not here, or a name that is no id, compares nothing
    boards["b4x"]["groups"][0]["variant_of"] = "gone"
    assert variant_comparisons(boards) == []
    boards["b4x"]["groups"][0]["variant_of"] = "../x"
    assert variant_comparisons(boards) == [] and "### Variants" not in build_index(boards, None)


def test_tied_is_decided_on_the_holm_adjusted_p_not_the_raw_one():
    """Three rows against the best, differences chosen so that one row's raw p is below 0.05 while its Holm-adjusted p
    (3 tests: 3 x the smallest raw p) is above it: that row is *tied* with the best (not separable)."""
    best = {0: 1.00, 1: 1.00, 2: 1.00, 3: 1.00}
    rows = {
        "best": best,
        # differences -0.10, -0.12, -0.09, -0.11: mean -0.105, sd 0.0129; t = -16.3, p ~ 5e-4 (separable even corrected)
        "far": {0: 0.90, 1: 0.88, 2: 0.91, 3: 0.89},
        # differences -0.02, -0.07, -0.03, -0.05: raw p ~ 0.031, Holm-adjusted 2 x 0.031 ~ 0.063 (worked out below)
        "near": {0: 0.98, 1: 0.93, 2: 0.97, 3: 0.95},
        # differences +0.01, -0.01, +0.02, -0.02: p ~ 1
        "same": {0: 1.01, 1: 0.99, 2: 1.02, 3: 0.98},
    }
    raw = {k: float(stats.ttest_rel([rows[k][s] for s in range(4)], [best[s] for s in range(4)]).pvalue)
           for k in ("far", "near", "same")}
    order = sorted(raw, key=raw.get)  # Holm by hand: multipliers 3, 2, 1, running maximum, capped at 1
    holm, running = {}, 0.0
    for j, k in enumerate(order):
        running = max(running, min(1.0, (3 - j) * raw[k]))
        holm[k] = running
    assert raw["near"] < 0.05 < holm["near"]  # the case this test is about
    out = vs_best(rows, "best")
    for k in raw:
        assert out[k]["p"] == pytest.approx(raw[k], rel=1e-9)
        assert out[k]["p_holm"] == pytest.approx(holm[k], rel=1e-9)
        assert out[k]["tied"] is (holm[k] > 0.05)
    assert out["far"]["tied"] is False and out["near"]["tied"] is True and out["same"]["tied"] is True
