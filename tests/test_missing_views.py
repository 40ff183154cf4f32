"""Missing-view robustness (issue #23, fusebench/probes/missing_views.py): the presence-mask convention,
the masked evaluation of the embedding_eval protocol against a hand-worked case, single-view tests, the
metric ids of a tiny run, the board section and plot from hand-made records, pretraining with missing
views (the objective's masks), and the options checked when a spec loads."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

import fusebench
from fusebench import benchmarks
from fusebench.leaderboard import write_leaderboards
from fusebench.components import compat
from fusebench.spec.config import ConfigError
from fusebench.probes.kmeans import kmeans
from fusebench.probes.missing_views import (PROBE_STREAM, FeatureSource, drop_views, embedding_missing_views,
                                              presence_mask, with_missing_views)
from types import SimpleNamespace
from fusebench.leaderboard.robustness import section_lines


# ---------------------------------------------------------------------------------------------
# the mask convention
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("n, k, rate, absent", [
    (10, 3, 0.3, 9),     # 0.3 * 30 = 9
    (7, 2, 0.5, 7),      # every sample keeps exactly one of its two views
    (5, 3, 0.1, 2),      # 1.5 rounds half up to 2
    (4, 6, 0.7, 17),     # 16.8 -> 17
    (13, 6, 0.1, 8),     # 7.8 -> 8
    (9, 4, 0.0, 0),
])
def test_mask_has_the_documented_number_of_absent_entries_and_keeps_a_view(n, k, rate, absent) -> None:
    for seed in range(20):
        mask = presence_mask(n, k, rate, seed)
        assert mask.shape == (n, k) and mask.dtype == bool
        assert int((~mask).sum()) == absent
        assert mask.any(axis=1).all()


def test_mask_is_reproducible_and_seeded_by_seed_and_rate() -> None:
    a = presence_mask(50, 4, 0.3, (3, 0))
    assert np.array_equal(a, presence_mask(50, 4, 0.3, (3, 0)))
    assert not np.array_equal(a, presence_mask(50, 4, 0.3, (4, 0)))   # another seed
    assert not np.array_equal(a, presence_mask(50, 4, 0.3, (3, 1)))   # another stream
    b = presence_mask(50, 4, 0.31, (3, 0))                             # another rate: another draw
    assert int((~b).sum()) == 62 and not np.array_equal(a, b)


def test_mask_follows_the_documented_recipe() -> None:
    """The docstring's recipe written out with loops: keep one view per sample, then choose the absent
    entries among the others listed sample by sample."""
    n, k, rate, seed = 11, 3, 0.4, (7, 2, 5)
    rng = np.random.default_rng(np.random.SeedSequence([7, 2, 5, 400000]))
    keep = rng.integers(0, k, size=n)
    others = [(i, j) for i in range(n) for j in range(k) if j != keep[i]]
    m = math.floor(rate * n * k + 0.5)
    expected = np.ones((n, k), dtype=bool)
    for idx in rng.choice(len(others), size=m, replace=False):
        expected[others[idx]] = False
    assert np.array_equal(presence_mask(n, k, rate, seed), expected)


def test_absent_entries_are_spread_over_views_and_samples() -> None:
    counts = np.zeros(4)
    for seed in range(400):
        counts += (~presence_mask(30, 4, 0.5, seed)).sum(axis=0)
    share = counts / counts.sum()
    assert np.allclose(share, 0.25, atol=0.01)


@pytest.mark.parametrize("k, rate", [(2, 0.6), (3, 0.7), (1, 0.1)])
def test_a_rate_that_cannot_keep_a_view_is_refused(k, rate) -> None:
    with pytest.raises(ValueError, match=rf"rate {rate:g} cannot keep a view of every sample with k = {k} views"):
        presence_mask(10, k, rate, 0)


@pytest.mark.parametrize("kwargs, match", [
    ({"n": -1}, "n must be an integer >= 0"), ({"k": 0}, "k must be an integer >= 1"),
    ({"rate": 1.0}, r"must be a number in \[0, 1\)"), ({"seed": -3}, "seed must be an integer >= 0"),
])
def test_bad_mask_arguments_are_refused(kwargs, match) -> None:
    args = {"n": 5, "k": 3, "rate": 0.2, "seed": 0, **kwargs}
    with pytest.raises(ValueError, match=match):
        presence_mask(**args)


def test_drop_views_zeroes_the_input_and_clears_presence_and_step_masks() -> None:
    batch = {"names": ["b", "a"], "modalities": {"a": torch.ones(3, 2), "b": torch.full((3, 4, 2), 2.0)},
             "masks": {"b": torch.ones(3, 4, dtype=torch.bool)}, "present": torch.ones(2, 3, dtype=torch.bool),
             "target": torch.zeros(3)}
    batch["present"][0, 2] = False  # the data's own absence stays
    keep = torch.tensor([[True, False, True], [False, True, True]])  # rows: names a, b
    out = drop_views(batch, keep, ["a", "b"])
    assert out["present"].tolist() == [[False, True, False], [True, False, True]]  # rows b, a
    assert out["modalities"]["a"][:, 0].tolist() == [1.0, 0.0, 1.0]
    assert out["modalities"]["b"][:, 0, 0].tolist() == [0.0, 2.0, 2.0]
    assert out["masks"]["b"][:, 0].tolist() == [False, True, True]
    assert batch["present"].all(dim=0).tolist() == [True, True, False]  # the input batch is not changed
    assert batch["modalities"]["a"].eq(1.0).all()


def test_pretraining_batches_get_a_mask_per_epoch_and_batch_and_rate_zero_is_the_loader_itself() -> None:
    def batches():
        for _ in range(3):
            yield {"names": ["u", "v", "w"], "modalities": {m: torch.ones(8, 2) for m in "uvw"}, "masks": {},
                   "present": torch.ones(3, 8, dtype=torch.bool), "target": torch.zeros(8)}

    loader = list(batches())
    assert with_missing_views(loader, 0.0, 5, 0) is loader
    got = [b["present"] for b in with_missing_views(batches(), 0.5, 5, 2, skip=4)]
    for i, present in enumerate(got):
        assert int((~present).sum()) == 12
        assert torch.equal(present, torch.from_numpy(presence_mask(8, 3, 0.5, (5, 2, 2, 4 + i, 0)).T.copy()))


# ---------------------------------------------------------------------------------------------
# the masked evaluation, worked by hand
# ---------------------------------------------------------------------------------------------
# Two 1-d views. Train: (-1, -1) twice (class 0), (1, 1) twice (class 1): column means 0, stds 1, so the
# z-scores are the values, and the L2-penalised logistic probe is symmetric in the two views (w_1 = w_2 > 0,
# b = 0): it predicts class 1 iff the sum of the present views' z-scores is > 0 (an absent view is 0).
TRAIN = np.array([[-1.0, -1.0], [-1.0, -1.0], [1.0, 1.0], [1.0, 1.0]])
Y_TRAIN = np.array([0, 0, 1, 1])
TEST = np.array([[-2.0, 0.5], [-2.0, -0.5], [-2.0, 0.5], [2.0, -0.5], [2.0, 0.5], [2.0, -0.5]])
Y_TEST = np.array([0, 0, 0, 1, 1, 1])
RESULT = {"probe": {"l2": 1.0, "max_iter": 300},
          "clustering": {"on": "test", "n_init": 10, "standardize": "zscore_clustered_samples"}}


def _hand(source: FeatureSource, rates=(), single=True, seed=3):
    xs = {"train": TRAIN, "val": TRAIN, "test": TEST}
    ys = {"train": Y_TRAIN, "val": Y_TRAIN, "test": Y_TEST}
    return embedding_missing_views(source, xs, ys, 2, seed, RESULT, list(rates), single)


def test_single_view_probe_and_clustering_worked_by_hand() -> None:
    out = _hand(FeatureSource(["a", "b"], [1, 1]))["metrics"]
    # view a alone: sign(x_a) = [0,0,0,1,1,1], every prediction right; clusters {0,1,2} and {3,4,5}: perfect
    assert out["only_a_acc"] == 1.0 and out["only_a_cluster_acc"] == 1.0 and out["only_a_nmi"] == pytest.approx(1.0)
    # view b alone: sign(x_b) = [1,0,1,0,1,0] -> right on samples 1 and 4: 2/6; clusters {0,2,4} and {1,3,5}:
    # the best matching puts 2 + 2 of 6 samples right
    assert out["only_b_acc"] == pytest.approx(2 / 6) and out["only_b_cluster_acc"] == pytest.approx(4 / 6)


def test_single_view_is_the_mask_with_that_view_alone() -> None:
    seen = []

    def masked(split, mask):
        seen.append((split, mask.copy()))
        return {"train": TRAIN, "val": TRAIN, "test": TEST}[split]

    out = _hand(FeatureSource(["a", "b"], [1, 1], masked))
    assert out["metrics"]["only_b_acc"] == pytest.approx(2 / 6)
    masks = [m for s, m in seen if s == "test"]
    assert [m.tolist() for m in masks] == [[[True, False]] * 6, [[True, False]] * 6, [[False, True]] * 6,
                                           [[False, True]] * 6]  # probe then clustering, per view


def _slow_cluster_features(x: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """The documented rule with loops: per column, mean / population std over the samples where its view is
    present (1-d views here), absent entries 0."""
    out = np.zeros_like(x)
    for j in range(x.shape[1]):
        vals = [x[i, j] for i in range(x.shape[0]) if mask[i, j]]
        if len(vals) == 0 or max(vals) == min(vals):
            continue
        mean = sum(vals) / len(vals)
        std = math.sqrt(sum((v - mean) ** 2 for v in vals) / len(vals))
        for i in range(x.shape[0]):
            out[i, j] = (x[i, j] - mean) / std if mask[i, j] else 0.0
    return out


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_masked_probe_and_clustering_against_the_hand_rule(seed) -> None:
    from fusebench.metrics.clustering import cluster_acc

    out = _hand(FeatureSource(["a", "b"], [1, 1]), rates=(0.25, 0.5), single=False, seed=seed)
    for r in (0.25, 0.5):
        mask = presence_mask(6, 2, r, (seed, PROBE_STREAM))
        pred = (np.where(mask, TEST, 0.0).sum(axis=1) > 0).astype(int)
        assert out["metrics"][f"miss{round(100 * r)}_acc"] == pytest.approx(float((pred == Y_TEST).mean()))
        assert out["absent"][f"miss{round(100 * r)}"]["test"] == int((~mask).sum()) == round(r * 12)
        cmask = presence_mask(6, 2, r, (seed, 1))  # the clustered samples' stream (cluster_on = test)
        labels, _, _ = kmeans(_slow_cluster_features(TEST, cmask), 2, seed, n_init=10)
        assert out["metrics"][f"miss{round(100 * r)}_cluster_acc"] == pytest.approx(cluster_acc(labels, Y_TEST))


def test_raw_pca_like_sources_impute_before_the_features() -> None:
    """widths None: the source computes the masked features itself and nothing is zeroed after it."""
    def masked(split, mask):
        x = {"train": TRAIN, "val": TRAIN, "test": TEST}[split]
        return np.where(mask, x, 5.0)  # a visible stand-in: absent entries 5 (a z-score of 5 after the probe's)

    out = _hand(FeatureSource(["a", "b"], None, masked))["metrics"]
    # view b alone, a replaced by 5: sum 5 + x_b > 0 for every sample -> class 1 -> 3/6
    assert out["only_b_acc"] == pytest.approx(0.5)


# ---------------------------------------------------------------------------------------------
# a tiny run of the embedding protocol, then its board
# ---------------------------------------------------------------------------------------------
RATES = [0.1, 0.5]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory) -> tuple[Path, list[dict]]:
    out = tmp_path_factory.mktemp("mv-runs")
    recs = fusebench.run("mv-handwritten", objective=["none", "raw_pca"], seeds=[0], out=out, synthetic=True,
                         progress=False, overrides={"options.embedding_eval.missing_rates": RATES,
                                                    "options.embedding_eval.single_view": True})
    return out, recs


def test_a_tiny_run_records_the_missing_view_metrics(tiny_run) -> None:
    _, recs = tiny_run
    views = [f"view{i}" for i in range(6)]
    for rec in recs:
        mv = rec["missing_views"]
        assert mv["rates"] == RATES and mv["views"] == views and mv["shown"] == ["acc", "cluster_acc"]
        ids = {f"{p}_{m}" for p in ["miss10", "miss50", *(f"only_{v}" for v in views)]
               for m in ("acc", "present_acc", "cluster_acc", "nmi", "ari")}
        assert set(mv["metrics"]) == ids | {"present_acc"}  # the present-view probe beside mean imputation
        assert mv["rules"] == ["entry"]
        assert all(0.0 <= v <= 1.0 for k, v in mv["metrics"].items() if not k.endswith("_ari"))
        n_test, n_all = _split_sizes("mv-handwritten")  # the test split; every sample is clustered
        for r in RATES:
            assert mv["absent"][f"miss{round(100 * r)}"] == {"test": math.floor(r * n_test * 6 + 0.5),
                                                            "clustered": math.floor(r * n_all * 6 + 0.5)}
        assert set(rec["metrics"]) == {"fs1_acc", "fs1_proto_acc", "fs1_best_acc", "knn_acc", "acc", "mf1",
                                       "cluster_acc", "nmi", "ari"}


def _split_sizes(name: str, overrides: dict | None = None) -> tuple[int, int]:
    """(test samples, all samples) of the synthetic twin of benchmark ``name`` at seed 0."""
    from fusebench.engine.data import build_datasets

    data = build_datasets(benchmarks.load(name, overrides=overrides, synthetic=True), True, None, 0)
    return len(data["test"]), sum(len(d) for d in data.values())


def test_selection_trials_skip_it_and_missing_n_init_sets_the_restarts(tmp_path) -> None:
    over = {"options.embedding_eval.missing_rates": [0.5], "options.embedding_eval.missing_n_init": 3,
            "pretrain.grid": {"infonce_pwe": {"tau": [0.1, 0.5]}}}
    rec = fusebench.run("mv-handwritten", objective="infonce_pwe", seeds=[0], out=tmp_path, synthetic=True,
                        progress=False, overrides=over)[0]
    assert rec["missing_views"]["clustering"]["n_init"] == 3 and set(rec["missing_views"]["metrics"]) >= {"miss50_acc"}
    trials = sorted((tmp_path / ".selection").rglob("run.json"))
    assert len(trials) == 2  # one per grid point
    for t in trials:  # scored by their validation metric only
        assert "missing_views" not in json.loads(t.read_text())
    with pytest.raises(ConfigError, match="missing_n_init: expected a number of k-means restarts >= 1"):
        benchmarks.load("mv-handwritten", overrides={"options.embedding_eval.missing_n_init": 0})


def test_without_the_options_nothing_is_computed(tmp_path) -> None:
    rec = fusebench.run("mv-ngs", objective="raw", seeds=[0], out=tmp_path, synthetic=True, progress=False)[0]
    assert "missing_views" not in rec


def _hand_records(template: dict) -> list[dict]:
    """Four records (two objectives x two seeds) with chosen values, from a real record's frame."""
    out = []
    values = {("alpha", 0): (0.9, 0.8, 0.6), ("alpha", 1): (0.7, 0.6, 0.4), ("beta", 0): (0.8, 0.5, 0.5),
              ("beta", 1): (0.8, 0.7, 0.1)}
    for (obj, seed), (acc, m10, m50) in values.items():
        rec = json.loads(json.dumps(template))
        rec.update(objective=obj, seed=seed)
        # a ranked board (bold best cells), not the pipeline check a --synthetic run's overrides make it
        rec["config"]["synthetic"] = {}
        if rec.get("hash_schema") is not None:  # the record's hash is reproduced from its config and objective
            from fusebench.components.identity import config_hash

            rec["config_hash"] = config_hash(rec["config"], obj)
        rec["metrics"]["acc"]["value"], rec["metrics"]["cluster_acc"]["value"] = acc, acc - 0.1  # schema-4 entries
        rec["missing_views"] = {"protocol": "embedding_eval", "rates": [0.1, 0.5], "single_view": True,
                                "views": ["left", "right"], "shown": ["acc", "cluster_acc"],
                                "metrics": {"miss10_acc": m10, "miss50_acc": m50, "miss10_cluster_acc": m10 - 0.1,
                                            "miss50_cluster_acc": m50 - 0.1, "only_left_acc": 0.5,
                                            "only_right_acc": 0.25 + 0.5 * seed, "only_left_cluster_acc": 0.3,
                                            "only_right_cluster_acc": 0.2}}
        if (obj, seed) == ("beta", 1):  # undefined for this run: counted in the cell, left out of the mean
            rec["missing_views"]["metrics"]["only_left_acc"] = float("nan")
        out.append(rec)
    return out


def test_the_board_section_and_plot_from_hand_made_records(tiny_run, tmp_path) -> None:
    from fusebench.records import comparability_key

    runs, _ = tiny_run
    template = json.loads(next(Path(runs).rglob("run.json")).read_text())
    for rec in _hand_records(template):
        rec["comparability_key"] = comparability_key(rec)
        cell = tmp_path / "runs" / rec["benchmark"] / rec["objective"] / f"seed{rec['seed']}"
        cell.mkdir(parents=True)
        (cell / "run.json").write_text(json.dumps(rec))
    boards = tmp_path / "boards"
    write_leaderboards(tmp_path / "runs", boards, formats=("md", "csv", "json"))
    md = (boards / "mv-handwritten.md").read_text()
    section = md[md.index("## Missing-view robustness"):md.index("## Protocol")]
    lines = section.splitlines()
    acc_table = lines[lines.index("`acc (%) ↑`:") + 2:lines.index("`acc (%) ↑`:") + 6]
    assert acc_table[0] == ("| objective | r = 0 | r = 0.1 | r = 0.5 | `left` alone | `right` alone |")
    # alpha: acc (0.9, 0.7) -> 80 ± 14.14; miss10 (0.8, 0.6) -> 70 ± 14.14; miss50 (0.6, 0.4) -> 50 ± 14.14;
    # right alone (0.25, 0.75) -> 50 ± 35.36. beta: acc 80 ± 0; miss10 (0.5, 0.7) -> 60 ± 14.14; miss50 (0.5, 0.1)
    # -> 30 ± 28.28. No bold: alpha's larger means are not separable from beta's (paired differences miss10
    # (0.3, -0.1): t = 0.5; miss50 (0.1, 0.3): t = 2, 1 degree of freedom, p = 0.295), as in the main table.
    assert acc_table[2] == ("| `alpha` | 80.00 ± 14.14 (2) | 70.00 ± 14.14 (2) | 50.00 ± 14.14 (2) | "
                            "50.00 ± 0.00 (2) | 50.00 ± 35.36 (2) |")
    assert acc_table[3] == ("| `beta` | 80.00 ± 0.00 (2) | 60.00 ± 14.14 (2) | 30.00 ± 28.28 (2) | "
                            "50.00 ± 0.00 (1; 1 undefined) | 50.00 ± 35.36 (2) |")
    assert "`cluster_acc (%) ↑`:" in section and "![missing-view robustness](mv-handwritten-missing.png)" in section
    png = (boards / "mv-handwritten-missing.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    again = tmp_path / "again"
    write_leaderboards(tmp_path / "runs", again, formats=("md", "csv", "json"))
    assert (again / "mv-handwritten-missing.png").read_bytes() == png  # deterministic bytes
    assert (again / "mv-handwritten.md").read_text() == md
    data = json.loads((boards / "mv-handwritten.json").read_text())
    row = next(r for r in data["groups"][0]["rows"] if r["objective"] == "beta")
    assert row["missing_views"]["miss50_acc"] == {"mean": 0.3, "std": pytest.approx(0.282842712475), "n": 2}
    header = (boards / "mv-handwritten.csv").read_text().splitlines()[0].split(",")
    assert header[-3:] == ["only_right_cluster_acc_mean", "only_right_cluster_acc_std", "only_right_cluster_acc_n"]


# ---------------------------------------------------------------------------------------------
# pretraining with missing views
# ---------------------------------------------------------------------------------------------
def test_pretraining_with_missing_views_hands_the_objective_masks(tmp_path, monkeypatch) -> None:
    from fusebench.objectives import OBJECTIVES

    cls = OBJECTIVES.get("mv_infonce")
    original = cls.forward
    seen = []

    def spy(self, views, mask=None):
        seen.append(None if mask is None else mask.detach().cpu().clone())
        return original(self, views, mask=mask)

    monkeypatch.setattr(cls, "forward", spy)
    rec = fusebench.run("mv-handwritten", objective="mv_infonce", seeds=[0], out=tmp_path, synthetic=True,
                        progress=False, overrides={"pretrain.missing_rate": 0.5})[0]
    assert rec["config"]["pretrain"]["missing_rate"] == 0.5
    steps = rec["budget"]["optimizer_steps"]
    assert steps >= 2 and len(seen) == steps
    for mask in seen:  # [k = 6, n = 8]: floor(0.5 * 48 + 0.5) = 24 absent, every sample keeps a view
        assert tuple(mask.shape) == (6, 8) and int((~mask).sum()) == 24 and mask.any(dim=0).all()
    assert not all(torch.equal(seen[0], m) for m in seen[1:])  # a mask per batch


def test_objectives_that_cannot_take_masks_are_refused_before_training() -> None:
    spec = benchmarks.load("mv-handwritten", overrides={"pretrain.missing_rate": 0.3})
    spec.dataset.modalities = [f"view{i}" for i in range(6)]  # as the runner resolves them from the file
    assert compat._incompatibility(spec, "mv_infonce") is None and compat._incompatibility(spec, "raw") is None
    for objective in ("m3g", "tuple_infonce", "byol_pwe", "pvc_geometric"):
        with pytest.raises(ValueError, match=rf"objective '{objective}' does not honour masks.*compatible "
                                             r"objectives: infonce_avg, infonce_pwe, mv_dhel, mv_infonce$"):
            compat.check_compatible(spec, objective)
    rotated = benchmarks.load("mv-handwritten", overrides={"pretrain.missing_rate": 0.3,
                                                           "pretrain.methods.view_rotation.enabled": True})
    assert "compute the loss without the presence mask" in compat._incompatibility(rotated, "mv_infonce")
    assert compat._incompatibility(benchmarks.load("mv-handwritten"), "m3g") is None  # complete views: as before


def test_rates_are_checked_when_the_spec_loads_and_against_the_data_view_count() -> None:
    with pytest.raises(ConfigError, match=r"options.linear_probe.missing_rates: rate 0.7 cannot keep a view of every "
                                          r"sample with k = 3 views"):
        benchmarks.load("quickstart", overrides={"options.linear_probe": {"missing_rates": [0.1, 0.7]}})
    with pytest.raises(ConfigError, match=r"0.333 must be in \(0, 1\) and a multiple of 0.01"):
        benchmarks.load("mv-handwritten", overrides={"options.embedding_eval.missing_rates": [0.333]})
    with pytest.raises(ConfigError, match=r"lists a rate twice"):
        benchmarks.load("mv-handwritten", overrides={"options.embedding_eval.missing_rates": [0.1, 0.1]})
    with pytest.raises(ConfigError, match=r"single_view: expected true or false"):
        benchmarks.load("mv-handwritten", overrides={"options.embedding_eval.single_view": "yes"})
    with pytest.raises(ConfigError, match=r"pretrain.missing_rate must be in \[0, 1\)"):
        benchmarks.load("mv-handwritten", overrides={"pretrain.missing_rate": -0.1})
    # views read from the file: k is checked by the runner once the data says it (here k = 2)
    spec = benchmarks.load("mv-handwritten", overrides={"options.embedding_eval.missing_rates": [0.7]})
    spec.dataset.modalities = ["view0", "view1"]
    with pytest.raises(ValueError, match=r"rate 0.7 cannot keep a view of every sample with k = 2 views"):
        compat.check_compatible(spec, "raw")
    spec = benchmarks.load("mv-handwritten", overrides={"pretrain.missing_rate": 0.5})
    spec.dataset.modalities = ["view0", "view1"]
    with pytest.raises(ValueError, match=r"a multi-view loss needs samples with two"):
        compat.check_compatible(spec, "mv_infonce")


def test_a_task_head_scores_the_incomplete_test_split(tmp_path) -> None:
    rec = fusebench.run("quickstart", objective="none", seeds=[0], out=tmp_path, synthetic=True, progress=False,
                        overrides={"options.linear_probe": {"missing_rates": [0.3], "single_view": True}})[0]
    mv = rec["missing_views"]
    assert mv["protocol"] == "linear_probe" and mv["shown"] == ["acc"]
    assert set(mv["metrics"]) == {f"{p}_{m}" for p in ("miss30", "only_strong1", "only_strong2", "only_weak")
                                  for m in rec["metrics"]}
    n_test, _ = _split_sizes("quickstart")
    assert mv["absent"]["miss30"]["test"] == math.floor(0.3 * n_test * 3 + 0.5)


def test_masked_scoring_of_a_task_model_against_its_complete_scoring() -> None:
    """The masked paths against the plain ones (fusebench.engine.evaluate): an all-present mask scores
    exactly what ``evaluate`` scores; under a rate's mask each view's feature block is the complete block
    where the view is present and 0 where it is absent (the per-view MLP embeds each view on its own and
    gives an absent view a zero embedding)."""
    from fusebench.engine.data import build_datasets
    from fusebench.engine.evaluate import evaluate, features
    from fusebench.probes.missing_views import masked_evaluate, masked_features
    from fusebench.cells.standard import build_model

    spec = benchmarks.load("quickstart", synthetic=True)
    ds = build_datasets(spec, True, None, 0, roles=("test",))["test"]
    torch.manual_seed(0)
    model = build_model(spec, ds)
    dev = torch.device("cpu")
    n, k = len(ds), len(model.modalities)
    assert masked_evaluate(model, ds, spec, dev, 0, np.ones((n, k), dtype=bool)) == evaluate(model, ds, spec, dev, 0)
    full, _ = features(model, ds, spec, dev, 0)
    mask = presence_mask(n, k, 0.5, (0, PROBE_STREAM))
    got = masked_features(model, ds, spec, dev, 0, mask)
    assert got.shape == full.shape and (~mask).any(axis=0).all()  # every view is absent somewhere
    width = full.shape[1] // k
    for j in range(k):
        cols, here = slice(j * width, (j + 1) * width), torch.from_numpy(mask[:, j])
        assert torch.equal(got[here, cols], full[here, cols])
        assert got[~here, cols].eq(0).all() and full[~here, cols].ne(0).any()


def _rec(objective: str, seed: int, mae: float, miss50: float) -> SimpleNamespace:
    """A stand-in for a RunRecord: what robustness_of reads (raw.missing_views, metrics, objective, seed, config)."""
    mv = {"protocol": "head", "rates": [0.5], "single_view": False, "views": [], "shown": ["mae"],
          "metrics": {"miss50_mae": miss50}}
    return SimpleNamespace(raw={"missing_views": mv}, objective=objective, seed=seed, metrics={"mae": mae},
                           config={}, path=f"{objective}/seed{seed}/run.json", metric_directions={})


def _view(recs: list) -> SimpleNamespace:
    return SimpleNamespace(recs=recs, rows=["alpha", "beta"], ranked=True, invalid=set(), aliases={},
                           reference_aliases={})


def _table(lines: list[str]) -> list[str]:
    start = lines.index("`mae ↓`:")
    return lines[start + 2:start + 6]


def test_a_lower_is_better_metric_bolds_the_smallest_mean():
    # alpha: mae (0.50, 0.70) -> 0.6000; miss50 (0.80, 1.00) -> 0.9000. beta: mae (0.90, 1.10) -> 1.0000;
    # miss50 (1.20, 1.40) -> 1.3000. mae is lower-is-better: alpha's cells are the bold ones.
    recs = [_rec("alpha", 0, 0.5, 0.8), _rec("alpha", 1, 0.7, 1.0), _rec("beta", 0, 0.9, 1.2), _rec("beta", 1, 1.1, 1.4)]
    table = _table(section_lines(_view(recs), None))
    assert table[0] == "| objective | r = 0 | r = 0.5 |"
    alpha, beta = table[2], table[3]
    assert alpha.startswith("| `alpha` | **0.6000 ± ") and "| **0.9000 ± " in alpha, alpha
    assert "**" not in beta, beta


def test_a_best_mean_not_separable_from_the_second_is_not_bold():
    """The main table's rule (docs/leaderboards.md, Columns): the best mean is bold only when the second-best row
    is separable from it by a paired t-test over the seeds. mae (lower is better): alpha (0.5, 0.6, 0.7) -> 0.6000,
    beta (0.9, 1.0, 1.1) -> 1.0000, every paired difference -0.4: separable, alpha bold. miss50: alpha (0.80,
    1.30, 0.90) -> 1.0000, beta (1.00, 1.05, 1.10) -> 1.0500: alpha has the better mean, but the differences
    (-0.20, 0.25, -0.20) do not separate them (scipy's paired t-test, p > 0.05): no bold in that column."""
    from scipy.stats import ttest_rel

    a50, b50 = (0.80, 1.30, 0.90), (1.00, 1.05, 1.10)
    assert ttest_rel(a50, b50).pvalue > 0.5
    recs = [_rec("alpha", s, m, a) for s, (m, a) in enumerate(zip((0.5, 0.6, 0.7), a50))]
    recs += [_rec("beta", s, m, b) for s, (m, b) in enumerate(zip((0.9, 1.0, 1.1), b50))]
    table = _table(section_lines(_view(recs), None))
    alpha, beta = table[2], table[3]
    assert alpha == "| `alpha` | **0.6000 ± 0.1000 (3)** | 1.0000 ± 0.2646 (3) |", alpha
    assert beta == "| `beta` | 1.0000 ± 0.1000 (3) | 1.0500 ± 0.0500 (3) |", beta


def _rules_rec(objective: str, seed: int, mae: float, rules: list, miss50: float, inst50: float) -> SimpleNamespace:
    """A stand-in record scored under ``rules``: ``miss50_mae`` (entry rule) and ``inst50_mae`` (instance rule)."""
    metrics = {**({"miss50_mae": miss50} if "entry" in rules else {}),
               **({"inst50_mae": inst50} if "instance" in rules else {})}
    mv = {"protocol": "head", "rates": [0.5], "rules": rules, "single_view": False, "views": [], "shown": ["mae"],
          "metrics": metrics}
    return SimpleNamespace(raw={"missing_views": mv}, objective=objective, seed=seed, metrics={"mae": mae},
                           config={}, path=f"{objective}/seed{seed}/run.json", metric_directions={})


def test_instance_level_rates_have_their_own_columns(tmp_path):
    """Records scored under missing_rules [instance] hold inst<100 r>_<metric> only: the section showed their rate
    columns as "—" for every row (it looked up miss<100 r>_<metric>) under the entry rule's text; with [entry,
    instance] the instance-level numbers were not shown at all. Each rule now has its columns (``r = 0.5`` and
    ``inst. r = 0.5``), the text says how the instance rate counts, and the plot has a panel per rule.
    Values: alpha inst50 (0.80, 1.00) -> 0.9000 ± 0.1414, miss50 (0.85, 1.15) -> 1.0000 ± 0.2121; beta inst50
    (1.20, 1.60) -> 1.4000 ± 0.2828, miss50 (1.30, 1.30) -> 1.3000 ± 0.0000."""
    from fusebench.leaderboard.robustness import plot_missing

    values = {("alpha", 0): (0.5, 0.85, 0.80), ("alpha", 1): (0.7, 1.15, 1.00),
              ("beta", 0): (0.9, 1.30, 1.20), ("beta", 1): (1.1, 1.30, 1.60)}
    only = [_rules_rec(o, s, m, ["instance"], a, b) for (o, s), (m, a, b) in values.items()]
    lines = section_lines(SimpleNamespace(**vars(_view(only)), name="toy"), None)
    intro = next(line for line in lines if line.startswith("At test time"))
    assert intro.startswith("At test time a seeded fraction r of the samples is incomplete (`inst. r`")
    table = _table(lines)
    assert table[0] == "| objective | r = 0 | inst. r = 0.5 |"
    assert table[2].endswith("| 0.9000 ± 0.1414 (2) |") and table[3].endswith("| 1.4000 ± 0.2828 (2) |")
    both = [_rules_rec(o, s, m, ["entry", "instance"], a, b) for (o, s), (m, a, b) in values.items()]
    view = SimpleNamespace(**vars(_view(both)), name="toy")
    lines = section_lines(view, None)
    assert "in the `inst. r` columns a seeded fraction r of the samples is incomplete" in "\n".join(lines)
    table = _table(lines)
    assert table[0] == "| objective | r = 0 | r = 0.5 | inst. r = 0.5 |"
    assert table[2].endswith("| 1.0000 ± 0.2121 (2) | 0.9000 ± 0.1414 (2) |"), table[2]
    assert table[3].endswith("| 1.3000 ± 0.0000 (2) | 1.4000 ± 0.2828 (2) |"), table[3]
    from fusebench.leaderboard.html_svg import missing_svg

    svg = missing_svg(view)  # the HTML page's charts: one per rule
    assert "vs missing rate r (mean over seeds)" in svg and "vs instance-level missing rate r (mean over seeds)" in svg
    assert plot_missing(view, tmp_path / "toy-missing.png")
    assert (tmp_path / "toy-missing.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_every_undefined_run_of_a_cell_is_counted():
    # beta's miss50_mae is NaN on both seeds: the cell says "— (2 undefined)", not 1
    recs = [_rec("alpha", 0, 0.5, 0.8), _rec("alpha", 1, 0.7, 1.0),
            _rec("beta", 0, 0.9, float("nan")), _rec("beta", 1, 1.1, float("nan"))]
    beta = _table(section_lines(_view(recs), None))[3]
    assert beta.endswith("| — (2 undefined) |"), beta
