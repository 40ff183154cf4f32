"""Issue #22 on the runner side: matched budgets (one batch for every objective, M3G's loss on
micro-batches of the same batch, steps and samples seen in every record), a split per seed, and the
hyper-parameter search scored over several selection seeds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import fusebench
from fusebench.components.identity import spec_hash
from fusebench import benchmarks, objectives
from fusebench.spec.config import ConfigError
from fusebench.components.spec_check import load_spec
from fusebench.engine.pretrain import Pretrainer
from fusebench.engine.data import build_datasets, input_views
from fusebench.cells.standard import build_model
from fusebench.metrics import values_of

FAST = {"pretrain.epochs": 1, "pretrain.grid": {}, "pretrain.batch_size": 32,
        "options.embedding_eval": {"l2_grid": [1.0], "cluster_on": "all", "n_init": 2},
        "metrics": ["acc", "mf1", "cluster_acc", "nmi", "ari"], "comparison": {}}


class _Record(torch.nn.Module):
    """An objective that records the views it is called on and returns their mean (a known loss)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[torch.Tensor] = []

    def forward(self, views: torch.Tensor) -> torch.Tensor:
        self.calls.append(views.detach().clone())
        return views.square().mean()


class _Model(torch.nn.Module):
    modalities = ("a", "b", "c")
    num_features = 4

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(3, 4)

    def embed(self, batch):
        return torch.stack([self.lin(batch["modalities"][m]) for m in self.modalities])


@pytest.mark.parametrize("n, micro, sizes", [(32, 8, [8, 8, 8, 8]), (20, 8, [8, 8, 4]), (17, 8, [8, 9]),
                                             (8, 8, [8]), (5, 8, [5])])
def test_micro_batch_loss_is_the_size_weighted_mean_over_chunks(n, micro, sizes) -> None:
    torch.manual_seed(0)
    model, obj = _Model(), _Record()
    cfg = load_spec(benchmarks.path("quickstart")).pretrain
    pre = Pretrainer(model, obj, cfg, micro_batch=micro)
    batch = {"modalities": {m: torch.randn(n, 3) for m in model.modalities}}
    loss = pre(batch)
    assert [c.shape[1] for c in obj.calls] == sizes  # consecutive chunks; a tail of < 2 joins the one before
    z = torch.cat(obj.calls, dim=1)  # the chunks cover the batch once, in order
    assert z.shape[1] == n
    expected = sum(c.square().mean().item() * c.shape[1] / n for c in obj.calls)  # by hand
    assert loss.item() == pytest.approx(expected, rel=1e-6)
    # for this loss (a mean over samples) the size-weighted chunk mean is the full-batch mean
    assert loss.item() == pytest.approx(z.square().mean().item(), rel=1e-5)


def test_micro_batch_is_refused_where_a_method_owns_the_loss() -> None:
    spec = load_spec(benchmarks.path("quickstart"))
    model = build_model(spec, build_datasets(spec, True, None, 0)["train"])
    with pytest.raises(ValueError, match="micro_batch=8: needs .*plain view loss"):
        Pretrainer(model, objectives.build("byol_pwe"), spec.pretrain, micro_batch=8)


def test_records_carry_the_budget_and_the_comparison(tmp_path: Path, fixtures_dir: Path) -> None:
    over = {**FAST, "pretrain.objective_micro_batch": {"m3g": 8}, "pretrain.objective_batch_size": {}}
    recs = fusebench.run("mv-ngs", objective=["m3g", "infonce_pwe", "none"], seeds=[0], out=tmp_path,
                         data_root=str(fixtures_dir / "multiview" / "NGs.mat"), overrides=over, progress=False)
    by = {r["objective"]: r for r in recs}
    # 300 training documents, batch 32, drop_last: 9 steps of one epoch, 288 samples
    for o in ("m3g", "infonce_pwe"):
        assert by[o]["budget"]["optimizer_steps"] == 9 and by[o]["budget"]["samples_seen"] == 288, by[o]["budget"]
        assert by[o]["budget"]["batch_size"] == 32 and by[o]["budget"]["epochs"] == 1
    assert by["m3g"]["budget"]["micro_batch"] == 8 and by["infonce_pwe"]["budget"]["micro_batch"] is None
    assert len(by["m3g"]["curves"]["pretrain_loss"]) >= 1
    assert by["none"]["budget"]["optimizer_steps"] == 0 and by["none"]["budget"]["samples_seen"] == 0
    assert by["none"]["comparison"]["reference"] == "raw"  # the sweep has raw: it is the fixed reference
    assert by["none"]["comparison"]["primary"] == "acc"  # no comparison block: the spec's primary metric


def test_split_per_seed_draws_a_split_per_seed_and_keeps_hashes(tmp_path: Path, fixtures_dir: Path) -> None:
    root = str(fixtures_dir / "multiview" / "NGs.mat")
    fast = {k: v for k, v in FAST.items() if not k.startswith("pretrain.")}  # raw reads no pretrain.* setting
    recs = fusebench.run("mv-ngs", objective="raw", seeds=[0, 1], out=tmp_path, data_root=root, overrides=fast,
                         progress=False)
    s0, s1 = (r["dataset"]["splits"] for r in recs)
    assert s0["seed"] == 0 and s1["seed"] == 1
    assert s0["class_counts"] == s1["class_counts"]  # stratified: the same counts per class ...
    assert values_of(recs[0]["metrics"])["acc"] != values_of(recs[1]["metrics"])["acc"] or recs[0]["clustering"] != recs[1]["clustering"]
    # ... and the adapter, built directly with the two split seeds, gives two different test sets
    from fusebench import datasets

    spec = load_spec(benchmarks.path("mv-ngs"), overrides=FAST)
    tests = [input_views(datasets.build("mv_ngs", root=root, split="test", seed=0, split_seed=s,
                                               split_fractions=[0.6, 0.2, 0.2], standardize=False), spec, 0)[0][0]
             for s in (0, 1)]
    rows = [{r.tobytes() for r in t} for t in tests]
    assert len(rows[0] ^ rows[1]) > 0 and len(rows[0]) == len(rows[1]) == 100
    # the committed quickstart run still hashes as its spec
    spec = load_spec(benchmarks.path("quickstart"))
    committed = json.loads((Path(fusebench.__file__).parent.parent / "leaderboards" / "runs" / "quickstart" / "none"
                            / "seed0" / "run.json").read_text())
    assert committed["config_hash"] == spec_hash(spec, "none")


def test_selection_over_several_seeds_scores_the_mean(tmp_path: Path, fixtures_dir: Path) -> None:
    over = {**FAST, "pretrain.grid": {"infonce_pwe": {"tau": [0.1, 0.5]}}, "pretrain.selection_seeds": [1000, 1001]}
    rec = fusebench.run("mv-ngs", objective="infonce_pwe", seeds=[0], out=tmp_path,
                        data_root=str(fixtures_dir / "multiview" / "NGs.mat"), overrides=over, progress=False)[0]
    sel = rec["hparam_selection"]
    assert sel["seeds"] == [1000, 1001]
    folder = tmp_path / ".selection" / "mv-ngs" / "infonce_pwe"
    for i, score in enumerate(sel["scores"]):
        trial = next(folder.glob(f"trial{i}-*"))
        vals = {s: json.loads((trial / f"seed{s}" / "mv-ngs" / "infonce_pwe" / f"seed{s}" / "run.json").read_text())
                ["selection"]["val_metrics"]["acc"] for s in (1000, 1001)}
        assert score["val_by_seed"] == {str(s): v for s, v in vals.items()}
        assert score["val"] == pytest.approx((vals[1000] + vals[1001]) / 2, abs=1e-12)
    best = max(range(2), key=lambda i: (sel["scores"][i]["val"], -i))
    assert sel["choice"] == sel["scores"][best]["hparams"] == {"tau": rec["hparams"]["tau"]}


@pytest.mark.parametrize("over, msg", [
    ({"pretrain.selection_seeds": [0, 1000]}, "selection_seeds must be distinct integers, none of them an evaluation seed"),
    ({"pretrain.objective_micro_batch": {"m3g": 1}}, "pretrain.per_objective.m3g.micro_batch must be an integer >= 2, got 1"),
    ({"comparison": {"reference": "nope"}}, "comparison.reference 'nope' must be one of objectives"),
    ({"comparison": {"primary": "miou"}}, "comparison.primary 'miou' must be one of metrics"),
])
def test_bad_budget_selection_and_comparison_fields(over, msg) -> None:
    with pytest.raises(ConfigError, match=msg):
        load_spec(benchmarks.path("mv-ngs"), overrides=over)


def test_one_list_of_reference_rows() -> None:
    """The reference rows are registered row components, in board order: the random-init row, then every
    input-feature kind reference_features computes; the boards ask the same registry."""
    from fusebench.components import rows
    from fusebench.components.reference_features import REFERENCE_KINDS

    assert rows.references() == ("none", *REFERENCE_KINDS)
    assert all(rows.is_reference(r) for r in rows.references()) and not rows.is_reference("mv_infonce")


def test_a_grid_over_a_method_option_reaches_the_method(tmp_path: Path, fixtures_dir: Path) -> None:
    """BYOL has no objective argument to search; `methods.<id>.<option>` grid keys search the option of
    its pretraining method (here the EMA teacher's momentum) on the validation split."""
    from fusebench.spec import methods as M

    spec = load_spec(benchmarks.path("mv-ngs"), overrides=FAST)
    kwargs, meth = M.split_method_keys({"tau": 0.1, "methods.ema_teacher.momentum": 0.9})
    assert kwargs == {"tau": 0.1} and meth == {"ema_teacher": {"momentum": 0.9}}
    cfg = M.with_method_options(spec.pretrain, meth)
    assert M.options_of(cfg, "ema_teacher").momentum == 0.9
    assert M.options_of(spec.pretrain, "ema_teacher").momentum == 0.99  # the spec itself is unchanged
    over = {**FAST, "pretrain.grid": {"byol_pwe": {"methods.ema_teacher.momentum": [0.5, 0.99]}},
            "pretrain.selection_seeds": []}  # one selection seed: trial folders hold the run directly
    rec = fusebench.run("mv-ngs", objective="byol_pwe", seeds=[0], out=tmp_path,
                        data_root=str(fixtures_dir / "multiview" / "NGs.mat"), overrides=over, progress=False)[0]
    sel = rec["hparam_selection"]
    assert [s["hparams"] for s in sel["scores"]] == [{"methods.ema_teacher.momentum": 0.5},
                                                     {"methods.ema_teacher.momentum": 0.99}]
    assert rec["hparams"] == sel["choice"]
    # the option reached the teacher: the two trials trained differently
    folder = tmp_path / ".selection" / "mv-ngs" / "byol_pwe"
    curves = [json.loads(next(folder.glob(f"trial{i}-*")).joinpath("mv-ngs", "byol_pwe", "seed1000", "run.json")
                         .read_text())["curves"]["pretrain_loss"] for i in (0, 1)]
    assert curves[0] != curves[1]


@pytest.mark.parametrize("grid, msg", [
    ({"methods.nope.x": [1]}, "methods.nope"),
    ({"methods.ema_teacher.nope": [1]}, "nope"),
    ({"methods.ema_teacher": [1]}, "must read methods.<method id>.<option>"),
    ({"methods.ema_teacher.momentum": ["fast"]}, "momentum"),
])
def test_bad_method_grid_keys_are_refused_at_load(grid, msg) -> None:
    with pytest.raises(ConfigError, match=msg):
        load_spec(benchmarks.path("mv-ngs"), overrides={"pretrain.grid": {"byol_pwe": grid}})


def test_a_trial_folder_is_one_path_component_whatever_the_grid_value() -> None:
    from fusebench.sweep.selection import trial_name

    assert trial_name(0, {"tau": 0.1}) == "trial0-tau0.1"  # the committed trials' names
    assert trial_name(1, {"methods.byol_pwe.momentum": 0.99}) == "trial1-methods.byol_pwe.momentum0.99"
    assert trial_name(2, {"x": "../../etc", "z": [1, 2]}) == "trial2-x.._.._etc-z_1__2_"
