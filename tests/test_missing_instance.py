"""Missing views as the incomplete multi-view literature counts them (issue #30 item 7,
fusebench/probes/missing_views.py): the instance-level mask against a loop re-implementation of its
documented recipe and its counts, the ``missing_rules`` option, the present-view probe worked by hand (an
encoder's mean of the present views' embeddings; an input-feature row's per-view scores averaged over the
present views) beside mean imputation, and the metric ids a tiny run records under both rules."""

from __future__ import annotations

import math

import numpy as np
import pytest

import fusebench
from fusebench import benchmarks
from fusebench.components import compat
from fusebench.spec.config import ConfigError
from fusebench.probes.logistic import fit_logistic
from fusebench.probes.missing_views import (PROBE_STREAM, FeatureSource, embedding_missing_views, instance_mask,
                                              presence_mask)
from fusebench.metrics import values_of


def _slow_instance_mask(n: int, k: int, rate: float, seed: tuple[int, ...]) -> list[list[bool]]:
    """The docstring's recipe with loops: choose the incomplete samples, then for each (in the order drawn)
    a number of kept views in 1..k-1 and the views of smallest uniform keys."""
    rng = np.random.default_rng(np.random.SeedSequence([*seed, round(rate * 10**6), 1]))
    m = math.floor(rate * n + 0.5)
    mask = [[True] * k for _ in range(n)]
    if m == 0:
        return mask
    rows = rng.choice(n, size=m, replace=False)
    kept = rng.integers(1, k, size=m)
    keys = rng.random((m, k))
    for i in range(m):
        order = sorted(range(k), key=lambda j: (keys[i][j], j))
        for j in range(k):
            mask[int(rows[i])][j] = j in order[:int(kept[i])]
    return mask


@pytest.mark.parametrize("n, k, rate, incomplete", [
    (10, 2, 0.3, 3),    # 3 of 10 samples incomplete, each keeps exactly one of its two views
    (7, 3, 0.5, 4),     # 3.5 rounds half up to 4
    (5, 6, 0.1, 1),     # 0.5 -> 1
    (20, 4, 0.0, 0),
    (9, 5, 0.99, 9),    # 8.91 -> 9: every sample incomplete
])
def test_instance_mask_counts_and_the_loop_recipe(n, k, rate, incomplete) -> None:
    for seed in range(15):
        mask = instance_mask(n, k, rate, (seed, PROBE_STREAM))
        assert mask.shape == (n, k) and mask.dtype == bool
        assert mask.tolist() == _slow_instance_mask(n, k, rate, (seed, PROBE_STREAM))
        kept = mask.sum(axis=1)
        assert int((kept < k).sum()) == incomplete                 # incomplete samples
        assert (kept >= 1).all()                                   # every sample keeps a view
        if k == 2:
            assert (kept[kept < k] == 1).all()


def test_instance_masks_are_seeded_and_apart_from_the_entry_rule() -> None:
    a = instance_mask(200, 2, 0.5, (3, 0))
    assert np.array_equal(a, instance_mask(200, 2, 0.5, (3, 0)))
    assert not np.array_equal(a, instance_mask(200, 2, 0.5, (4, 0)))
    assert not np.array_equal(a, instance_mask(200, 2, 0.5, (3, 1)))
    # the same rate counts differently: 100 incomplete samples vs 0.5 * 400 = 200 absent entries
    assert int((~a).sum()) == 100 and int((~presence_mask(200, 2, 0.5, (3, 0))).sum()) == 200
    # with two views the kept view of an incomplete sample is uniform (a loose check over 2000 samples)
    big = instance_mask(2000, 2, 0.5, 0)
    assert 400 < int(big[:, 0][~big.all(axis=1)].sum()) < 600


def test_bad_instance_masks_are_refused() -> None:
    with pytest.raises(ValueError, match="needs k >= 2 views"):
        instance_mask(5, 1, 0.5, 0)
    with pytest.raises(ValueError, match=r"must be a number in \[0, 1\)"):
        instance_mask(5, 2, 1.0, 0)


def test_the_missing_rules_option_is_checked_when_the_spec_loads() -> None:
    with pytest.raises(ConfigError, match=r"missing_rules: expected a non-empty list .*did you mean 'instance'"):
        benchmarks.load("mv-handwritten", overrides={"options.embedding_eval.missing_rules": ["instanse"]})
    with pytest.raises(ConfigError, match=r"missing_rules: expected a non-empty list"):
        benchmarks.load("mv-handwritten", overrides={"options.embedding_eval.missing_rules": "instance"})
    with pytest.raises(ConfigError, match=r"missing_rules: expected a non-empty list"):
        benchmarks.load("mv-handwritten", overrides={"options.embedding_eval.missing_rules": ["entry", "entry"]})
    with pytest.raises(ConfigError, match=r"missing_rules: set without options.embedding_eval.missing_rates"):
        benchmarks.load("mv-ngs", overrides={"options.embedding_eval.missing_rules": ["instance"]})
    # 0.9 of the samples incomplete is a valid instance rate with k = 2 views; 0.9 of the entries is not (the
    # runner checks the rates once the data says k)
    spec = benchmarks.load("mv-handwritten", overrides={"options.embedding_eval": {"missing_rates": [0.9],
                                                                                 "missing_rules": ["instance"]}})
    spec.dataset.modalities = ["view0", "view1"]
    compat.check_compatible(spec, "raw")
    spec = benchmarks.load("mv-handwritten", overrides={"options.embedding_eval": {
        "missing_rates": [0.9], "missing_rules": ["entry", "instance"]}})
    spec.dataset.modalities = ["view0", "view1"]
    with pytest.raises(ValueError, match=r"rate 0.9 cannot keep a view of every sample with k = 2"):
        compat.check_compatible(spec, "raw")
    spec = benchmarks.load("mv-handwritten", overrides={"options.embedding_eval": {"missing_rates": [0.5],
                                                                                 "missing_rules": ["instance"]}})
    spec.dataset.modalities = ["view0"]
    with pytest.raises(ValueError, match=r"needs k >= 2 views"):
        compat.check_compatible(spec, "raw")


# ---------------------------------------------------------------------------------------------
# the present-view probe, worked by hand
# ---------------------------------------------------------------------------------------------
# Two views with 1-d embeddings in one space. Train (= val): class 1 has (a, b) = (4, -1), class 0 (-4, 1).
# The mean embedding (a + b) / 2 is +-1.5: its probe predicts class 1 iff the mean is > 0. The concatenation
# probe (z-scores a / 4 and b) weighs a up and b down (w_b = -w_a, b = 0 by symmetry): class 1 iff
# z_a - z_b > 0, an absent view's z-score 0. Test: (4, .5), (4, .5) class 1; (-4, -.5) twice class 0.
TRAIN = np.array([[-4.0, 1.0], [-4.0, 1.0], [4.0, -1.0], [4.0, -1.0]])
Y_TRAIN = np.array([0, 0, 1, 1])
TEST = np.array([[4.0, 0.5], [4.0, 0.5], [-4.0, -0.5], [-4.0, -0.5]])
Y_TEST = np.array([1, 1, 0, 0])
RESULT = {"probe": {"l2": 1.0, "l2_grid": [1.0], "max_iter": 300},
          "clustering": {"on": "test", "n_init": 4, "standardize": "zscore_clustered_samples"}}


def _run(source: FeatureSource, rates=(), rules=("entry",), seed=0, train=TRAIN, y_train=Y_TRAIN, test=TEST,
         y_test=Y_TEST):
    return embedding_missing_views(source, {"train": train, "val": train, "test": test},
                                   {"train": y_train, "val": y_train, "test": y_test}, 2, seed, RESULT, list(rates),
                                   True, rules=rules)


def test_present_view_probe_of_an_encoder_row_by_hand() -> None:
    out = _run(FeatureSource(["a", "b"], [1, 1], shared=True), rates=[0.5], rules=("instance",))
    m = out["metrics"]
    # b alone: the mean embedding is b = +-.5, the sign of the class -> all right; mean imputation: z_a = 0,
    # -z_b = -+.5 -> all wrong
    assert m["only_b_present_acc"] == 1.0 and m["only_b_acc"] == 0.0
    # a alone: both right; complete: the mean (4 + .5) / 2 has the class's sign
    assert m["only_a_present_acc"] == 1.0 and m["only_a_acc"] == 1.0 and m["present_acc"] == 1.0
    # the instance rule at 0.5: 2 of the 4 test samples keep one view each; mean imputation is wrong exactly
    # where the kept view is b, the present-view probe is never wrong
    mask = instance_mask(4, 2, 0.5, (0, PROBE_STREAM))
    only_b = int((~mask[:, 0]).sum())
    assert m["inst50_present_acc"] == 1.0 and m["inst50_acc"] == (4 - only_b) / 4
    assert out["absent"]["inst50"]["incomplete_test"] == 2 and out["absent"]["inst50"]["test"] == 2
    assert out["rules"] == ["instance"] and "miss50_acc" not in m
    assert out["probe"]["present_views"]["kind"] == "mean_embedding"


def test_present_view_probe_of_an_input_row_against_a_loop() -> None:
    """Input-feature row (views of their own widths): logits b + (k / #present) * sum over the present views of
    W_v z_v, with the probe's own W and b, written out with loops; at r = 0 it is the probe itself."""
    rng = np.random.default_rng(5)
    y_train = np.array([0] * 9 + [1] * 3)                          # unbalanced: the bias matters
    train = rng.normal(size=(12, 3)) + np.where(y_train[:, None] == 1, 1.0, -0.3) * np.array([1.0, 0.6, 0.8])
    y_test = rng.integers(0, 2, size=30)
    test = rng.normal(size=(30, 3)) + np.where(y_test[:, None] == 1, 1.0, -0.3) * np.array([1.0, 0.6, 0.8])
    widths = [2, 1]                                                # view a: columns 0-1, view b: column 2
    out = _run(FeatureSource(["a", "b"], widths), rates=[0.5], rules=("entry", "instance"), seed=2, train=train,
               y_train=y_train, test=test, y_test=y_test)["metrics"]
    mean, std = train.mean(0), train.std(0)
    w, b = fit_logistic((train - mean) / std, y_train, 2, 1.0)
    z = (test - mean) / std
    view_of = [0, 0, 1]
    differs = 0
    for prefix, mask in [("miss50", presence_mask(30, 2, 0.5, (2, PROBE_STREAM))),
                         ("inst50", instance_mask(30, 2, 0.5, (2, PROBE_STREAM))),
                         ("only_a", np.tile([True, False], (30, 1))), ("only_b", np.tile([False, True], (30, 1))),
                         ("all", np.ones((30, 2), dtype=bool))]:
        present_right = imputed_right = 0
        for i in range(30):
            present = [v for v in range(2) if mask[i, v]]
            present_logit, imputed_logit = [], []
            for c in range(2):
                s = sum(w[j, c] * z[i, j] for j in range(3) if view_of[j] in present)
                present_logit.append(b[c] + 2 / len(present) * s)
                imputed_logit.append(b[c] + s)
            p, q = int(present_logit[1] > present_logit[0]), int(imputed_logit[1] > imputed_logit[0])
            present_right += p == y_test[i]
            imputed_right += q == y_test[i]
            differs += p != q
        if prefix == "all":
            assert out["present_acc"] == pytest.approx(present_right / 30) == pytest.approx(imputed_right / 30)
        else:
            assert out[f"{prefix}_present_acc"] == pytest.approx(present_right / 30)
            assert out[f"{prefix}_acc"] == pytest.approx(imputed_right / 30)
    assert differs > 0  # the two rules disagree somewhere on this data


# ---------------------------------------------------------------------------------------------
# a tiny run under both rules
# ---------------------------------------------------------------------------------------------
def test_a_tiny_run_records_both_rules_and_both_imputations(tmp_path) -> None:
    from fusebench.engine.data import build_datasets

    over = {"options.embedding_eval.missing_rates": [0.5],
            "options.embedding_eval.missing_rules": ["entry", "instance"]}
    recs = fusebench.run("mv-handwritten", objective=["none", "raw"], seeds=[0], out=tmp_path, synthetic=True,
                         progress=False, overrides=over)
    data = build_datasets(benchmarks.load("mv-handwritten", overrides=over, synthetic=True), True, None, 0)
    n_test = len(data["test"])
    for rec in recs:
        mv = rec["missing_views"]
        assert mv["rules"] == ["entry", "instance"]
        ids = {f"{p}_{m}" for p in ("miss50", "inst50") for m in ("acc", "present_acc", "cluster_acc", "nmi", "ari")}
        assert ids <= set(mv["metrics"]) and "present_acc" in mv["metrics"]
        assert mv["absent"]["inst50"]["incomplete_test"] == math.floor(0.5 * n_test + 0.5)
        assert mv["absent"]["miss50"]["test"] == math.floor(0.5 * n_test * 6 + 0.5)
        kind = mv["probe"]["present_views"]["kind"]
        assert kind == ("mean_embedding" if rec["objective"] == "none" else "mean_view_scores")
        if rec["objective"] == "raw":  # every view present: the per-view scores' mean is the probe itself
            assert mv["metrics"]["present_acc"] == values_of(rec["metrics"])["acc"]


def test_a_task_head_takes_the_instance_rule(tmp_path) -> None:
    from fusebench.engine.data import build_datasets

    over = {"options.linear_probe": {"missing_rates": [0.3], "missing_rules": ["instance"]}}
    rec = fusebench.run("quickstart", objective="none", seeds=[0], out=tmp_path, synthetic=True, progress=False,
                        overrides=over)[0]
    mv = rec["missing_views"]
    assert mv["rules"] == ["instance"] and set(mv["metrics"]) == {f"inst30_{m}" for m in rec["metrics"]}
    n_test = len(build_datasets(benchmarks.load("quickstart", overrides=over, synthetic=True), True, None, 0)["test"])
    # 0.3 of the samples incomplete, each missing 1 or 2 of its 3 views
    assert math.floor(0.3 * n_test + 0.5) <= mv["absent"]["inst30"]["test"] <= 2 * math.floor(0.3 * n_test + 0.5)
