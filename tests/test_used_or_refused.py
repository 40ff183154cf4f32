"""A setting is used, or refused -- never recorded and ignored (what a new user found recorded and unused):
``downstream`` fields an embedding_eval protocol does not read, a common ``pretrain.epochs`` that every objective
of the run overrides with its own, and one objective's own setting given for an objective the run does not run."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

import fusebench
from fusebench import benchmarks
from fusebench.spec.config import ConfigError, DownstreamConfig

TINY = {"dataset.synthetic_spec": {"num_samples": 64, "seed": 0}, "pretrain.epochs": 1, "pretrain.batch_size": 32,
        "downstream.epochs": 1}


@pytest.mark.parametrize("key, value", [("downstream.epochs", 50), ("downstream.lr", 0.5), ("downstream.shots", 5),
                                        ("downstream.weight_decay", 0.1)])
def test_downstream_fields_the_embedding_protocol_does_not_read_are_refused(key: str, value: object) -> None:
    name = key.split(".")[1]
    default = {f.name: f.default for f in dataclasses.fields(DownstreamConfig)}[name]
    with pytest.raises(ConfigError, match=rf"mv-ngs\.yaml: {key} = {value!r}: the embedding_eval protocol does not "
                                          rf"read it \(of downstream it reads only protocol, batch_size\); leave it at "
                                          rf"its default {default!r} \[with --set {key}={value}\]"):
        benchmarks.load("mv-ngs", overrides={key: value})
    assert benchmarks.load("mv-ngs", overrides={key: default})  # at its default: nothing set, nothing refused
    # the field it reads is used: embeddings are computed in batches of it
    assert benchmarks.load("mv-ngs", overrides={"downstream.batch_size": 64}).downstream.batch_size == 64
    # a head protocol reads them all
    assert getattr(benchmarks.load("quickstart", overrides={key: value}).downstream, name) == value


def test_a_common_epoch_count_every_objective_overrides_is_refused_and_a_partial_one_said(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    # quickstart-compute: m3g, infonce_pwe and mv_dhel have their own epochs (100), tuple_infonce takes the common 20
    with pytest.raises(ConfigError, match=r"--set pretrain\.epochs: every objective of this run that pretrains has "
                                          r"its own \(pretrain\.per_objective\.mv_dhel\.epochs=100\), so the common "
                                          r"value would be recorded and not used"):
        fusebench.run("quickstart-compute", objective="mv_dhel", seeds=[0], out=tmp_path, overrides={
            "pretrain.epochs": 1}, progress=False, plan=True)
    fusebench.run("quickstart-compute", objective=["mv_dhel", "tuple_infonce", "none"], seeds=[0], out=tmp_path,
                  overrides={"pretrain.epochs": 1}, progress=False, plan=True)
    assert ("quickstart-compute: --set pretrain.epochs applies to tuple_infonce; the others keep their own "
            "(pretrain.per_objective.mv_dhel.epochs=100)") in capsys.readouterr().err
    # written as a per-objective key it is that objective's own: used
    fusebench.run("quickstart-compute", objective="mv_dhel", seeds=[0], out=tmp_path,
                  overrides={"pretrain.per_objective.mv_dhel.epochs": 1}, progress=False, plan=True)
    # reference rows pretrain nothing: a common value given to them alone is refused (next test)


@pytest.mark.parametrize("key", ["pretrain.per_objective.tuple_infonce.hparams.tau",
                                 "pretrain.hparams.tuple_infonce.tau", "pretrain.per_objective.tuple_infonce.epochs"])
def test_one_objective_s_setting_for_an_objective_the_run_leaves_out_is_refused(key: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=rf"--set {key}: objective 'tuple_infonce' is not in this run \(m3g\), so "
                                          r"the setting would be recorded and not used; drop it, or add --objective "
                                          r"tuple_infonce"):
        fusebench.run("quickstart", objective="m3g", seeds=[0], out=tmp_path, synthetic=True,
                      overrides={**TINY, key: 5}, progress=False, plan=True)
    with pytest.raises(ConfigError, match=r"objective\(s\) tuple_infonce not in this run \(m3g\)"):
        fusebench.run("quickstart", objective="m3g", seeds=[0], out=tmp_path, synthetic=True, progress=False,
                      overrides={**TINY, "pretrain.per_objective": {"tuple_infonce": {"epochs": 2}}}, plan=True)
    # the objective in the run: used
    rows = fusebench.run("quickstart", objective=["m3g", "tuple_infonce"], seeds=[0], out=tmp_path, synthetic=True,
                         overrides={**TINY, key: 5}, progress=False, plan=True)
    assert [r["action"] for r in rows] == ["run", "run"]


def _weights_file(path: Path) -> Path:
    """A weights file that fits the encoder quickstart's cells build (its config as the cell computes it)."""
    import torch

    from fusebench import encoders
    from fusebench.cells.standard import encoder_config
    from fusebench.engine.data import build_datasets

    spec = benchmarks.load("quickstart", synthetic=True)
    cfg = encoder_config(spec, build_datasets(spec, True, None, 0, roles=("train",))["train"])
    torch.save(encoders.build(spec.encoder.id, **cfg).state_dict(), path)
    return path


@pytest.mark.parametrize("rows, key, value, said", [
    (["raw"], "pretrain.epochs", "3", "pretrain.epochs=3: no row of this run pretrains (raw is a reference row: "
                                      "nothing is pretrained for it)"),
    (["none"], "pretrain.lr", "0.9", "pretrain.lr=0.9: no row of this run pretrains (none is a reference row: "
                                     "nothing is pretrained for it)"),
    (["raw", "none"], "pretrain.projection_dim", "7", "pretrain.projection_dim=7: no row of this run pretrains (raw "
                                                      "and none are reference rows: nothing is pretrained for them)"),
    (["none"], "pretrain.methods.tuple_infonce.disturbed", "false",
     "pretrain.methods.tuple_infonce.disturbed=False: no row of this run pretrains (none is a reference row"),
    (["mine"], "pretrain.lr", "0.9", "pretrain.lr=0.9: no row of this run pretrains (mine is a weights row: nothing "
                                     "is pretrained for it)"),
    (["mine", "raw"], "pretrain.batch_size", "8", "pretrain.batch_size=8: no row of this run pretrains (raw is a "
                                                  "reference row, mine is a weights row: nothing is pretrained for "
                                                  "them)"),
    (["mine"], "pretrain.per_objective.mine.epochs", "3",
     "pretrain.per_objective.mine.epochs: 'mine' is a weights row (--encoder-weights mine=...): nothing is pretrained "
     "for it, so per-objective settings do not apply to it; drop the setting"),
])
def test_a_pretraining_setting_given_to_rows_that_pretrain_nothing_is_refused(
        rows: list[str], key: str, value: str, said: str, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A reference row (none, raw) or a weights row pretrains nothing: a --set pretrain.* would be recorded in its
    config (and its config hash) and never read (its budget: 0 epochs)."""
    from fusebench.cli import main

    weights = ["--encoder-weights", f"mine={_weights_file(tmp_path / 'w.pt')}"] if "mine" in rows else []
    out = tmp_path / "runs"
    argv = ["run", "quickstart", "--synthetic", "--seeds", "0", "--out", str(out), *weights, "--objective", *rows]
    assert main([*argv, "--set", f"{key}={value}"]) == 2
    err = capsys.readouterr().err
    assert f"fusebench run: --set {said}" in err and err.count("fusebench run:") == 1
    if "per_objective" not in key:
        assert "so the pretraining setting would be recorded and not used; drop it, or add an objective that " \
               "pretrains" in err
    assert not out.exists()
    # with an objective that pretrains (and reads the setting), the setting is used: accepted
    objective = "tuple_infonce" if "tuple_infonce" in key else "m3g"
    assert main([*argv, objective, "--plan", "--set", f"{key.replace('.mine.', f'.{objective}.')}={value}"]) == 0
    # without it, the rows run (the plan of the same command)
    assert main([*argv, "--plan"]) == 0


def test_a_pretraining_setting_of_the_python_api_for_reference_rows_only_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^--set pretrain\.epochs=1: no row of this run pretrains \(none is a "
                                          r"reference row"):
        fusebench.run("quickstart", objective="none", seeds=[0], out=tmp_path, synthetic=True, overrides=TINY,
                      progress=False, plan=True)
    # the rest of TINY is read by the row: accepted
    fusebench.run("quickstart", objective="none", seeds=[0], out=tmp_path, synthetic=True, progress=False, plan=True,
                  overrides={k: v for k, v in TINY.items() if not k.startswith("pretrain.")})


def test_a_hyper_parameter_the_selection_grid_replaces_is_refused_from_the_command_line_and_checked_in_a_spec(
        tmp_path: Path, fixtures_dir: Path) -> None:
    from fusebench.sweep import runner

    ngs = str(fixtures_dir / "multiview" / "NGs.mat")
    with pytest.raises(ConfigError, match=r"--set pretrain\.per_objective\.mv_infonce\.hparams\.tau: "
                                          r"pretrain\.per_objective\.mv_infonce\.grid\.tau = "
                                          r"\[0\.05, 0\.1, 0\.2, 0\.5, 1\.0, 2\.0, 5\.0\] selects tau on validation, so this "
                                          r"value would be recorded and not used; set the grid instead"):
        fusebench.run("mv-ngs", objective="mv_infonce", seeds=[0], out=tmp_path, data_root=ngs, progress=False,
                      overrides={"pretrain.per_objective.mv_infonce.hparams.tau": 0.3}, plan=True)
    # a hyper-parameter the grid does not search is used: accepted
    fusebench.run("mv-ngs", objective="m3g", seeds=[0], out=tmp_path, data_root=ngs, progress=False,
                  overrides={"pretrain.per_objective.m3g.hparams.max_iter": 50}, plan=True)
    # written in a spec (the synthetic variant drops the grid and uses it), the value is still checked
    spec = benchmarks.load("mv-ngs", overrides={"pretrain.per_objective.mv_infonce.hparams.tau": -1})
    with pytest.raises(ConfigError, match=r"mv-ngs: pretrain\.per_objective\.mv_infonce\.hparams: objective "
                                          r"'mv_infonce' refuses \{'tau': -1\}: mv_infonce: tau must be a finite "
                                          r"number > 0, got -1"):
        runner.check_components(spec, ["mv_infonce"])


@pytest.mark.parametrize("argv, option, values", [
    (["run", "quickstart", "--objective", "raw", "--objective", "none", "--plan"], "--objective", ("raw", "none")),
    (["run", "quickstart", "--seeds", "0", "--seeds", "1", "--plan"], "--seeds", ("0", "1")),
    (["status", "--benchmark", "quickstart", "--benchmark", "mv-ngs"], "--benchmark", ("quickstart", "mv-ngs")),
    (["leaderboard", "--format", "md", "--format", "csv"], "--format", ("md", "csv")),
])
def test_an_option_of_several_values_given_twice_is_refused_not_replaced(argv: list[str], option: str,
                                                                         values: tuple[str, str],
                                                                         capsys: pytest.CaptureFixture) -> None:
    from fusebench.cli import main

    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    first, second = values
    assert (f"error: {option} given twice ({option} {first}, then {option} {second}): the second would replace the "
            f"first; give all its values after one {option}") in capsys.readouterr().err


@pytest.mark.parametrize("options, why", [
    ({"fewshot_shots": [1]}, "metric fs5_acc needs 5 in options.embedding_eval.fewshot_shots [1] (the probes compute "
                             "the shot counts listed there); metric fs10_acc needs 10 in"),
    ({"knn_grid": []}, "metric knn_acc needs a non-empty options.embedding_eval.knn_grid (it is empty: no kNN probe "
                       "runs)"),
    ({"n_init": 0}, "options.embedding_eval.n_init = 0: expected a positive integer"),
    ({"l2_grid": [-1]}, "options.embedding_eval.l2_grid = [-1]: expected a non-empty list of finite numbers > 0"),
    ({"fewshot_l2_grid": [0.0, 1.0]},  # 0: a separable few-shot draw has no optimum
     "options.embedding_eval.fewshot_l2_grid = [0.0, 1.0]: expected a non-empty list of finite numbers > 0"),
    ({"fewshot_draws": 1.5}, "options.embedding_eval.fewshot_draws = 1.5: expected a positive integer"),
    ({"cluster_on": "val"}, "options.embedding_eval.cluster_on = 'val': expected 'all' or 'test'"),
])
def test_probe_options_a_cell_would_fail_on_after_pretraining_are_refused_when_the_spec_loads(
        options: dict, why: str) -> None:
    with pytest.raises(ConfigError) as e:
        benchmarks.load("mv-ngs", overrides={"options.embedding_eval": options})
    assert f"mv-ngs.yaml: {why}" in str(e.value)
    # the metrics the options compute: accepted
    benchmarks.load("mv-ngs", overrides={"options.embedding_eval": {"fewshot_shots": [1, 5, 10], "n_init": 3}})


def test_an_encoder_config_its_constructor_refuses_is_one_error_before_any_cell(tmp_path: Path,
                                                                               fixtures_dir: Path,
                                                                               monkeypatch) -> None:
    # a width the encoder declares (Backbone.width_options) is refused when the spec loads, by its key
    with pytest.raises(ConfigError, match=r"mv-ngs\.yaml: encoder\.config\.hidden = -5: expected an integer >= 1 "
                                          r"\(of the encoder's widths and layer counts: num_features, hidden\)"):
        fusebench.run("mv-ngs", objective="raw", seeds=[0], out=tmp_path, progress=False, plan=True,
                      data_root=str(fixtures_dir / "multiview" / "NGs.mat"), overrides={"encoder.config.hidden": -5})
    # what the encoder does not declare is still met by building it once before any cell (a plugin's encoder)
    from fusebench.encoders.mlp import MLPEncoder

    monkeypatch.setattr(MLPEncoder, "width_options", ())
    with pytest.raises(ConfigError, match=r"^mv-ngs: encoder 'mlp' cannot be built with encoder\.config "
                                          r"\{'num_features': 16, 'hidden': -5\} \(and the data's input sizes\): "
                                          r"RuntimeError: .*negative dimension -5"):
        fusebench.run("mv-ngs", objective="raw", seeds=[0], out=tmp_path, progress=False, plan=True,
                      data_root=str(fixtures_dir / "multiview" / "NGs.mat"), overrides={"encoder.config.hidden": -5})
    assert not tmp_path.joinpath("mv-ngs").exists()


def test_a_class_count_the_file_contradicts_is_refused_before_any_cell(tmp_path: Path, fixtures_dir: Path) -> None:
    """A multi-view .mat's class count is known once the file is read (NGs.mat: 5 newsgroups, counted here from
    its labels): encoder.config.num_classes = 3 is refused at --plan, with the file's count, not in each cell."""
    import scipy.io

    classes = len(set(scipy.io.loadmat(str(fixtures_dir / "multiview" / "NGs.mat"))["Y"].ravel().tolist()))
    assert classes == 5
    for plan in (True, False):
        with pytest.raises(ConfigError, match=rf"^mv-ngs: encoder 'mlp' cannot be built with encoder\.config .*"
                                              rf"'num_classes': 3\}} \(and the data's input sizes\): ValueError: "
                                              rf"mv_ngs: the dataset has {classes} classes but the encoder "
                                              rf"MLPEncoder was built for num_classes=3"):
            fusebench.run("mv-ngs", objective="none", seeds=[0], out=tmp_path, progress=False, plan=plan,
                          data_root=str(fixtures_dir / "multiview" / "NGs.mat"),
                          overrides={"encoder.config.num_classes": 3})
        assert not tmp_path.joinpath("mv-ngs").exists()
    fusebench.run("mv-ngs", objective="none", seeds=[0], out=tmp_path, progress=False, plan=True,
                  data_root=str(fixtures_dir / "multiview" / "NGs.mat"), overrides={"encoder.config.num_classes": 5})


def test_a_mistyped_pretrain_key_is_matched_against_the_keys_a_spec_writes() -> None:
    with pytest.raises(ConfigError) as e:
        benchmarks.load("quickstart", overrides={"pretrain.per_objectiv.m3g.hparams.eps": 0.1})
    msg = str(e.value)
    assert "pretrain: unknown key(s) ['per_objectiv'] (did you mean 'per_objective'?); valid keys: [" in msg
    listed = msg.split("valid keys: ")[1].split("]")[0]
    assert "'per_objective'" in listed and "'objective_epochs'" not in listed and "'grid'" not in listed


def test_a_default_objective_the_run_does_not_make_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """pretrain.objective names the row of a run that names none; with --objective or the spec's objectives list it
    would be recorded in the config and not used."""
    from fusebench.cli import main

    out = tmp_path / "runs"
    base = ["run", "quickstart", "--synthetic", "--seeds", "0", "--out", str(out), "--plan"]
    assert main([*base, "--objective", "infonce_pwe", "--set", "pretrain.objective=m3g"]) == 2
    err = capsys.readouterr().err
    assert "--set pretrain.objective=m3g: it names the row a run makes when neither --objective nor the spec's " \
           "objectives list names them; this run's rows are infonce_pwe, so the value would be recorded and not " \
           "used; drop it, or run --objective m3g" in err and err.count("fusebench run:") == 1
    assert main([*base, "--set", "pretrain.objective=m3g"]) == 2  # the spec's objectives list names the rows
    assert "this run's rows are none, raw, infonce_pwe, mv_dhel, m3g, tuple_infonce" in capsys.readouterr().err
    assert main([*base, "--objective", "m3g", "--set", "pretrain.objective=m3g"]) == 0  # the same row: used
    assert not out.exists()


@pytest.mark.parametrize("given, said", [
    ({"data_root": "/nowhere"}, "--data-root /nowhere: the gaussian_mi pipeline reads no dataset"),
    ({"num_workers": 2}, "--num-workers 2: the gaussian_mi pipeline reads no dataset"),
])
def test_data_options_a_pipeline_without_a_dataset_never_reads_are_refused(given: dict, said: str,
                                                                            tmp_path: Path) -> None:
    """The gaussian_mi cell draws its views in closed form: no data folder, no DataLoader; a --data-root or
    --num-workers given to it was accepted and silently unused."""
    kw = dict(objective="pvc_geometric", seeds=[0], out=tmp_path / "runs", synthetic=True, progress=False, plan=True)
    with pytest.raises(ConfigError, match=rf"^{re.escape(said)} \(its cell draws its own data\), so the option "
                                          r"would be used by nothing; drop it"):
        fusebench.run("polyview-gaussian-mi", **kw, **given)
    assert not (tmp_path / "runs").exists()
    fusebench.run("polyview-gaussian-mi", **kw)  # without it: accepted


@pytest.mark.parametrize("sets, num_workers, said", [
    ({"loader.pin_memory": True}, None, "loader.pin_memory=true: page-locked batches are for copies to a GPU, and "
                                        "the cells run on the CPU here"),
    ({"loader.prefetch_factor": 4}, None, "loader.prefetch_factor=4: it sets the DataLoader's worker processes, and "
                                          "the cells fetch their batches with none (loader.num_workers unset: none "
                                          "on the CPU)"),
    ({"loader.persistent_workers": False}, None, "loader.persistent_workers=false: it sets the DataLoader's worker "
                                                 "processes, and the cells fetch their batches with none"),
    ({"loader.prefetch_factor": 4, "loader.num_workers": 1}, 0, "loader.prefetch_factor=4: it sets the "
                                                                "DataLoader's worker processes, and the cells fetch "
                                                                "their batches with none (--num-workers 0)"),
])
def test_loader_settings_the_cells_dataloaders_would_not_apply_are_refused(sets: dict, num_workers: int | None,
                                                                           said: str, tmp_path: Path) -> None:
    """On the CPU a cell fetches its batches in the training process and pins nothing: loader.pin_memory,
    prefetch_factor and persistent_workers were recorded in every record's config and never applied."""
    kw = dict(objective="raw", seeds=[0], out=tmp_path / "runs", synthetic=True, progress=False, plan=True,
              device="cpu", overrides={"downstream.epochs": 1, **sets})
    with pytest.raises(ConfigError, match=rf"^quickstart: {re.escape(said)}.*so it would be recorded and change "
                                          r"nothing"):
        fusebench.run("quickstart", num_workers=num_workers, **kw)
    # with worker processes they are applied: accepted
    if "loader.pin_memory" not in sets:
        fusebench.run("quickstart", num_workers=1, **kw)


def test_worker_settings_for_data_held_in_memory_on_cuda_are_refused(monkeypatch) -> None:
    """On CUDA, data held in memory is sliced in the training process unless a worker count is given."""
    import torch

    from fusebench.runtime import utils
    from fusebench.sweep.runner import check_loader_settings_used

    monkeypatch.setattr(utils, "resolve_device", lambda device: torch.device("cuda"))
    spec = benchmarks.load("quickstart", overrides={"loader.prefetch_factor": 4, "loader.pin_memory": True})
    with pytest.raises(ConfigError, match=r"loader\.prefetch_factor=4: .*none on CUDA for data held in memory"):
        check_loader_settings_used(spec, "cuda", None, in_memory=True)
    check_loader_settings_used(spec, "cuda", None, in_memory=False)  # workers: applied (pinning too)
    check_loader_settings_used(spec, "cuda", 2, in_memory=True)  # workers given: applied
    check_loader_settings_used(spec, None, None, in_memory=True)  # cells on other nodes: decided there
    # the automatic count on CUDA is every core of the cell's share but one: with one core, none (the check follows
    # resolve_feed, so this case is refused too; it used to be let through)
    from fusebench.engine import data

    monkeypatch.setattr(data, "usable_cores", lambda: 1)
    with pytest.raises(ConfigError, match=r"loader\.prefetch_factor=4: .*none on CUDA here \(no core to spare"):
        check_loader_settings_used(spec, "cuda", None, in_memory=False)


def test_channels_last_for_a_model_without_2d_convolutions_is_refused(tmp_path: Path) -> None:
    """speed.channels_last enters the config hash, and the cell leaves a model without 2-D convolutions as it is
    (quickstart's MLP): it was recorded, hashed and changed nothing."""
    kw = dict(objective="m3g", seeds=[0], out=tmp_path / "runs", synthetic=True, progress=False, plan=True,
              device="cpu", overrides={**TINY, "speed.channels_last": True})
    with pytest.raises(ConfigError, match=r"^quickstart: speed\.channels_last=true: encoder 'mlp' and its task head "
                                          r"have no 2-D convolutions .*so it would be recorded and hashed and change "
                                          r"nothing; drop it"):
        fusebench.run("quickstart", **kw)
    assert not (tmp_path / "runs").exists()


def test_channels_last_for_a_model_with_2d_convolutions_is_used(monkeypatch) -> None:
    from fusebench.cells import standard
    from fusebench.engine import speed
    from fusebench.engine.data import build_datasets

    spec = benchmarks.load("quickstart", synthetic=True, overrides={"speed.channels_last": True})
    train = build_datasets(spec, True, None, 0, roles=("train",))["train"]
    monkeypatch.setattr(speed, "has_conv2d", lambda model: True)  # as ESANet's
    standard.check_weights_fit(spec, train, [])


def test_checkpoint_spacing_set_for_rows_that_write_no_checkpoint_is_refused(tmp_path: Path) -> None:
    """mv-ngs scores frozen features: its reference rows train nothing in steps, so no last.pt is ever written and a
    --set checkpoint_every would be recorded in every record's config and used by nothing."""
    with pytest.raises(ConfigError, match=r"--set checkpoint_every=5: no row of this run trains in steps \(raw, none: "
                                          r"nothing is pretrained"):
        fusebench.run("mv-ngs", objective=["raw", "none"], seeds=[0], out=tmp_path / "out", synthetic=True,
                      progress=False, overrides={"checkpoint_every": 5})
    assert not (tmp_path / "out").exists()
    from fusebench.sweep.runner import check_checkpoint_every_used

    spec = benchmarks.load("mv-ngs", overrides={"checkpoint_every": 5})
    check_checkpoint_every_used(spec, ["raw", "m3g"], ["checkpoint_every"])  # m3g pretrains: its last.pt spacing
    check_checkpoint_every_used(spec, ["raw"], [])  # the spec's own value: the spacing of its other rows
    check_checkpoint_every_used(benchmarks.load("quickstart", overrides={"checkpoint_every": 5}), ["none"],
                                ["checkpoint_every"])  # a head protocol trains its head in steps
