"""The downstream protocols are registry entries that declare their reference rows and options
(fusebench/components/protocols.py); the spec loader and the compatibility check read the declarations."""

from __future__ import annotations

import pytest

from fusebench import benchmarks
from fusebench.components import compat
from fusebench.spec.config import ConfigError
from fusebench.components.protocols import PROTOCOLS, protocol_of
from fusebench.components.reference_features import REFERENCE_KINDS
from fusebench.metrics import values_of


def test_the_three_protocols_and_what_they_declare() -> None:
    assert PROTOCOLS.available() == ["embedding_eval", "finetune", "linear_probe"]
    assert PROTOCOLS.get("linear_probe").reference_rows == ("none", "raw")
    assert PROTOCOLS.get("finetune").reference_rows == ("none",) and PROTOCOLS.get("finetune").trains_encoder
    ev = PROTOCOLS.get("embedding_eval")
    assert ev.reference_rows == ("none", *REFERENCE_KINDS) and ev.frozen_features and ev.options_key == "embedding_eval"
    assert protocol_of(benchmarks.load("mv-handwritten")) is ev
    assert protocol_of(benchmarks.load("quickstart")) is PROTOCOLS.get("linear_probe")


def test_an_unknown_protocol_or_protocol_option_is_refused_when_the_spec_loads() -> None:
    with pytest.raises(ConfigError, match=r"downstream.protocol 'lineer_probe' is not a registered protocol \(did you mean 'linear_probe'\?\); valid: "
                                          r"embedding_eval, finetune, linear_probe"):
        benchmarks.load("quickstart", overrides={"downstream.protocol": "lineer_probe"})
    with pytest.raises(ConfigError, match=r"options.embedding_eval: unknown option\(s\) \['n_inits'\]; the "
                                          r"embedding_eval protocol takes l2_grid, cluster_on, n_init"):
        benchmarks.load("mv-handwritten", overrides={"options.embedding_eval": {"n_inits": 3}})


def test_reference_rows_follow_the_protocol() -> None:
    probe = benchmarks.load("quickstart")  # linear_probe on vector modalities: none and raw
    assert compat._incompatibility(probe, "raw") is None and compat._incompatibility(probe, "none") is None
    assert compat._incompatibility(probe, "raw_l2") == ("quickstart: the 'raw_l2' reference row applies to the "
                                                        "embedding_eval protocol only")
    tuned = benchmarks.load("quickstart", overrides={"downstream.protocol": "finetune"})
    assert "applies to the embedding_eval and linear_probe protocols only" in compat._incompatibility(tuned, "raw")
    ev = benchmarks.load("mv-handwritten")
    assert all(compat._incompatibility(ev, r) is None for r in ("none", *REFERENCE_KINDS))


def nearest_neighbour_score(cell, protocol, pretrained_state=None, ckpt=None):
    """A plugin protocol's scorer (the test's): 1-nearest-neighbour test accuracy (cosine) of the frozen
    embeddings, train split as the memory; validation scored the same way."""
    import torch

    from fusebench.engine.evaluate import features
    from fusebench.records.builder import Scores

    xs = {r: features(cell.model, cell.data[r], cell.spec, cell.dev, cell.seed) for r in ("train", "val", "test")}
    bank = torch.nn.functional.normalize(xs["train"][0].double(), dim=1)

    def acc(split: str) -> float:
        q = torch.nn.functional.normalize(xs[split][0].double(), dim=1)
        pred = xs["train"][1][(q @ bank.T).argmax(dim=1)]
        return float((pred == xs[split][1]).double().mean())

    return Scores({"acc": acc("test")}, {"acc": acc("val")}, model=cell.model)


def test_a_plugin_protocol_scores_a_cell_without_a_pipeline_of_its_own(monkeypatch, tmp_path) -> None:
    """#35: a protocol owns its scoring (``scorer``); a registered protocol runs in the standard pipeline, its
    scorer called with the cell after pretraining (the pretrained row's budget is spent, the reference row's is
    not), and no other protocol's code scores it. A frozen-features protocol without a scorer of its own is
    refused when the spec loads."""
    import fusebench
    from fusebench.components.protocols import Protocol

    class NearestNeighbour(Protocol):
        frozen_features = True
        scorer = f"{__name__}:nearest_neighbour_score"

    reg = PROTOCOLS
    reg.available()
    for attr in ("_entries", "_meta", "_lazy", "_origin", "_plugin_of"):
        monkeypatch.setattr(reg, attr, dict(getattr(reg, attr)))
    reg.register("nn1")(NearestNeighbour)
    import fusebench.cells.embedding_protocol as E

    monkeypatch.setattr(E, "score", lambda *a, **k: pytest.fail("the embedding_eval scorer ran"))
    over = {"downstream.protocol": "nn1", "metrics": ["acc"], "comparison": {"reference": "none", "primary": "acc"},
            "options": {}, "pretrain.grid": {}, "pretrain.selection_seeds": []}
    recs = fusebench.run("mv-hw2sources", objective=["none", "mv_infonce"], seeds=[0], out=tmp_path, synthetic=True,
                         overrides=over, progress=False)
    assert [r["objective"] for r in recs] == ["none", "mv_infonce"]
    for r in recs:
        assert set(r["metrics"]) == {"acc"} and 0.0 <= values_of(r["metrics"])["acc"] <= 1.0
        assert r["config"]["downstream"]["protocol"] == "nn1"
    assert recs[1]["budget"]["optimizer_steps"] > 0 and recs[0]["budget"]["optimizer_steps"] == 0

    class Unscored(Protocol):
        frozen_features = True  # but the default scorer trains a task head: refused

    reg.register("unscored")(Unscored)
    with pytest.raises(ConfigError, match=r"downstream.protocol 'unscored' scores frozen features but names no scorer"):
        benchmarks.load("mv-hw2sources", overrides={**over, "downstream.protocol": "unscored"})


@pytest.mark.parametrize("bench, overrides, chosen", [
    ("quickstart", {}, r"the best of its 10 downstream epochs"),
    ("mv-ngs", {}, r"the probes' L2 weights, kNN's k and the few-shot probe and the hyper-parameters of the "
                   r"selection grids"),
])
def test_a_validation_split_that_is_the_test_split_is_refused_where_anything_is_chosen_on_it(bench, overrides,
                                                                                           chosen) -> None:
    """``dataset.val_split = test``: the best epoch, the probes' settings and the grids' choices would be made on the
    test samples (it was accepted: a selection then chose on test accuracy). A pipeline check that chooses nothing
    (one downstream epoch, no grid: the shipped sunrgbd-det-real20) may share the split."""
    with pytest.raises(ConfigError, match=r"dataset.val_split and dataset.test_split are both 'test': " + chosen
                       + r" would be chosen on the test samples"):
        benchmarks.load(bench, overrides={"dataset.val_split": "test", **overrides})
    shared = benchmarks.load("sunrgbd-det-real20")
    assert shared.dataset.val_split == shared.dataset.test_split == "test" and shared.downstream.epochs == 1


@pytest.mark.parametrize("bench", ["quickstart", "mv-ngs", "sunrgbd-det-real20"])
def test_the_training_split_is_never_the_test_split_nor_a_validation_that_chooses(bench: str) -> None:
    """``dataset.test_split = train`` scored every row on the samples it was trained on (quickstart's `raw` row reported
    98.4% test accuracy on its own training samples), and every selection trial trained on the test samples;
    ``dataset.val_split = train`` chose the best epoch, the probes' L2 weights and the grids on training samples.
    Both were accepted. The test split is refused whatever is chosen; the validation where anything is chosen."""
    with pytest.raises(ConfigError, match=r"dataset.test_split is 'train', the split every cell trains on .* the "
                                          r"test score would be measured on training samples"):
        benchmarks.load(bench, overrides={"dataset.test_split": "train"})
    if bench == "sunrgbd-det-real20":  # one downstream epoch, no grid: nothing is chosen on its validation split
        assert benchmarks.load(bench, overrides={"dataset.val_split": "train"}).dataset.val_split == "train"
        return
    chosen = "the best of its 10 downstream epochs" if bench == "quickstart" else "the probes' L2 weights"
    with pytest.raises(ConfigError, match=r"dataset.val_split is 'train', the split every cell trains on: " + chosen
                       + r".* would be chosen on training samples"):
        benchmarks.load(bench, overrides={"dataset.val_split": "train"})
