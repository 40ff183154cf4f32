"""A hostile first-use review of the command line: each defect it reproduced, checked by its exact message.

* A setting is used or refused: 0 pretraining epochs for a row that pretrains (common or its own), the seeds of a
  hyper-parameter selection when no row of the run selects, 0 downstream epochs of a protocol that trains a head;
  ``--set encoder_weights.NAME=FILE`` joins the run's rows as ``--encoder-weights NAME=FILE`` does.
* Bad values are refused when the spec loads, naming their key: an encoder width of 0, a synthetic twin of -10
  samples, an objective's own epochs of -1 (named before the warmup that must fit in them).
* One clear line, no traceback: a spec file that is not YAML in a spec folder (``list benchmarks`` lists the others),
  a weights file that is text, empty or a plain pickle (no torch warning), ``leaderboard`` paths of the wrong kind.
* A plugin's spec folder reusing a taken benchmark id is a warning, the rest still loads; benchmark names are exact
  ids (``QuickStart`` refused with the closest id); ``list objectives --details m3g`` parses.
* Saying what happened: Ctrl-C before the first cell says nothing was written; ``status`` on a folder above runs
  folders names them; ``data prepare`` prints the adapter's ``data info`` once; ``--resume`` says it changes nothing.
"""

from __future__ import annotations

import importlib.metadata as md
import pickle
import warnings
from pathlib import Path

import pytest
import torch

from fusebench import benchmarks, encoders
from fusebench.cli import main
from fusebench.registry import PluginWarning, UnknownNameError

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # conftest.py


def _run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def _plan(capsys, tmp_path: Path, *args: str) -> tuple[int, str, str]:
    return _run(capsys, "run", "quickstart", "--seeds", "0", *args, "--plan", "--out", str(tmp_path / "runs"))


def _weights(path: Path) -> Path:
    """The quickstart encoder's state_dict, saved by torch.save: a weights file that fits."""
    spec = benchmarks.load("quickstart")
    enc = encoders.build("mlp", modalities={"strong1": 16, "strong2": 16, "weak": 16}, **spec.encoder.config)
    torch.save(enc.state_dict(), path)
    return path


# ---- 1, 2, 12: a setting used or refused ---------------------------------------------------------------------------
def test_zero_pretraining_epochs_are_refused_for_a_row_that_pretrains(capsys, tmp_path: Path) -> None:
    code, _, err = _plan(capsys, tmp_path, "--objective", "infonce_pwe", "--set", "pretrain.epochs=0")
    assert code == 2
    assert err.strip() == ("fusebench run: quickstart: pretrain.epochs=0: objective 'infonce_pwe' pretrains, and 0 "
                           "epochs would record a pretrained row that nothing trained (the 'none' row under another "
                           "name); set pretrain.epochs to 1 or more, or run the reference row alone (--objective none)")
    code, _, err = _plan(capsys, tmp_path, "--objective", "m3g", "--set", "pretrain.per_objective.m3g.epochs=0")
    assert code == 2 and "fusebench run: quickstart: pretrain.per_objective.m3g.epochs=0: objective 'm3g' pretrains" \
        in err
    # a spec with 0 epochs still loads: a run of reference rows alone reads nothing of pretraining
    assert benchmarks.load("quickstart", overrides={"pretrain.epochs": 0}).pretrain.epochs == 0
    assert not (tmp_path / "runs").exists()


def test_selection_seeds_without_a_grid_are_refused(capsys, tmp_path: Path) -> None:
    for key, value in (("pretrain.selection_seeds", "[7,8]"), ("pretrain.selection_seed", "7")):
        code, _, err = _plan(capsys, tmp_path, "--objective", "m3g", "infonce_pwe", "--set", f"{key}={value}")
        shown = "[7, 8]" if key.endswith("s") else "7"
        assert code == 2
        assert err.strip() == (f"fusebench run: --set {key}={shown}: the seeds of the hyper-parameter selection, and "
                               f"no row of this run (m3g, infonce_pwe) has a selection grid "
                               f"(pretrain.per_objective.<id>.grid; raw_pca: options.embedding_eval.pca_widths), so "
                               f"the setting would be recorded and not used; "
                               f"drop it, or give a grid to select on")
    # with a grid to select on, they are read
    code, out, _ = _plan(capsys, tmp_path, "--objective", "m3g", "--set", "pretrain.selection_seeds=[7,8]",
                         "--set", "pretrain.per_objective.m3g.grid={eps: [0.1, 0.2]}")
    assert code == 0 and "quickstart m3g seed0: run" in out


def test_zero_downstream_epochs_of_a_head_protocol_are_refused(capsys, tmp_path: Path) -> None:
    code, _, err = _plan(capsys, tmp_path, "--set", "downstream.epochs=0")
    assert code == 2
    assert err.strip().endswith(
        "quickstart.yaml: downstream.epochs = 0: the linear_probe protocol trains a task head for downstream.epochs "
        "epochs, and with none it would score an untrained head as a result; set downstream.epochs to 1 or more "
        "[with --set downstream.epochs=0]")


def test_a_weights_row_of_set_joins_the_run_as_the_flag_does(capsys, tmp_path: Path) -> None:
    path = _weights(tmp_path / "enc.pt")
    code, by_flag, _ = _plan(capsys, tmp_path, "--objective", "m3g", "--encoder-weights", f"mine={path}")
    assert code == 0
    code, by_set, _ = _plan(capsys, tmp_path, "--objective", "m3g", "--set", f"encoder_weights.mine={path}")
    assert code == 0 and by_set == by_flag
    assert by_set.splitlines()[:2] == ["quickstart m3g seed0: run", "quickstart mine seed0: run"]


# ---- 6, 8, 9: values refused when the spec loads, by their key -----------------------------------------------------
@pytest.mark.parametrize("given, said", [
    ("encoder.config.num_features=0",
     "quickstart.yaml: encoder.config.num_features = 0: expected an integer >= 1 (of the encoder's widths and layer "
     "counts: num_features, hidden) [with --set encoder.config.num_features=0]"),
    ("dataset.synthetic_spec.num_samples=-10",
     "quickstart.yaml: dataset.synthetic_spec.num_samples must be an integer >= 1 (the samples of the synthetic "
     "twin), got -10 [with --set dataset.synthetic_spec.num_samples=-10]"),
    ("pretrain.per_objective.m3g.epochs=-1",
     "quickstart.yaml: pretrain.per_objective.m3g.epochs must be an integer >= 0, got -1 [with --set "
     "pretrain.per_objective.m3g.epochs=-1]"),
])
def test_bad_values_are_refused_by_their_key(capsys, tmp_path: Path, given: str, said: str) -> None:
    code, out, err = _plan(capsys, tmp_path, "--set", given)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert err.strip().startswith("fusebench run: ") and err.strip().endswith(said)


def test_an_encoder_checks_its_own_widths() -> None:
    from fusebench.encoders.seq_transformer import SeqTransformer

    assert encoders.ENCODERS.get("mlp").config_problems({"num_features": 4, "hidden": 64}) == []
    assert SeqTransformer.config_problems({"d_model": 0, "size": "tiny"}) == [
        "encoder.config.d_model = 0: expected an integer >= 1 (of the encoder's widths and layer counts: d_model, "
        "num_heads, num_layers, ff_dim, head_hidden)"]


# ---- 4, 5, 7, 10: listing and names -------------------------------------------------------------------------------
def test_a_spec_that_is_not_yaml_is_one_warning_and_the_others_are_listed(capsys, tmp_path: Path,
                                                                         monkeypatch) -> None:
    (tmp_path / "broken.yaml").write_text("description: x\ndataset: {id: quickstart\n")
    monkeypatch.setenv("FUSEBENCH_BENCHMARKS", str(tmp_path))
    code, out, err = _run(capsys, "list", "benchmarks")
    assert code == 0 and "quickstart: " in out and "broken" not in out
    assert err.splitlines() == [
        f"warning: benchmark 'broken' left out: {tmp_path / 'broken.yaml'}: not valid YAML: expected ',' or '}}', but "
        f"got '<stream end>' at line 3, column 1 (while parsing a flow mapping at line 2, column 10)"]
    # asked for by its id (the check docs/adding-a-modality.md step 4 gives): the same warning, and a failing exit
    # status, as for an id that does not exist (it was 0, with nothing on stdout); a glob naming it is a query: 0
    code, out, err = _run(capsys, "list", "benchmarks", "broken")
    assert (code, out) == (1, "") and err.splitlines()[0].startswith("warning: benchmark 'broken' left out: ")
    code, out, err = _run(capsys, "list", "benchmarks", "brok*")
    assert (code, out) == (0, "") and err.startswith("warning: benchmark 'broken' left out: ")
    code, out, err = _run(capsys, "list", "benchmarks", "quickstart")
    assert code == 0 and out.startswith("quickstart: ")
    code, out, err = _run(capsys, "run", "broken", "--plan", "--out", str(tmp_path / "runs"))
    assert code == 2 and err.splitlines() == [
        f"fusebench run: {tmp_path / 'broken.yaml'}: not valid YAML: expected ',' or '}}', but got '<stream end>' at "
        f"line 3, column 1 (while parsing a flow mapping at line 2, column 10)"]


def test_a_plugin_spec_reusing_a_taken_id_is_left_out_with_a_warning(capsys, tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "quickstart.yaml").write_text("description: shadow\n")
    (tmp_path / "plugin-bench.yaml").write_text("description: a plugin's own\n")
    ep = md.EntryPoint(name="mine", value=str(tmp_path), group="fusebench.benchmarks")
    monkeypatch.setattr(benchmarks, "entry_points", lambda group: [ep] if group == "fusebench.benchmarks" else [])
    said = (f"benchmark plugin left out: {tmp_path / 'quickstart.yaml'} of entry point 'mine = {tmp_path}' (group "
            f"fusebench.benchmarks) (distribution unknown): benchmark id 'quickstart' is taken already (by "
            f"{benchmarks.HERE / 'quickstart.yaml'}); expected a unique benchmark id (rename the plugin's file)")
    with pytest.warns(PluginWarning) as caught:
        assert benchmarks.path("quickstart") == benchmarks.HERE / "quickstart.yaml"
    assert [str(w.message) for w in caught] == [said]
    code, out, err = _run(capsys, "list", "benchmarks")
    assert code == 0 and "plugin-bench: a plugin's own" in out and "shadow" not in out
    assert err.splitlines() == [f"warning: {said}"]


def test_list_takes_options_between_its_arguments(capsys) -> None:
    code, after, _ = _run(capsys, "list", "objectives", "m3g", "--details")
    assert code == 0 and "m3g: " in after
    code, before, err = _run(capsys, "list", "objectives", "--details", "m3g")
    assert code == 0 and before == after and err == ""


def test_benchmark_names_are_exact_ids(capsys, tmp_path: Path) -> None:
    for name, hint in (("QuickStart", "quickstart"), ("MV-NGS", "mv-ngs")):
        code, out, err = _run(capsys, "run", name, "--plan", "--out", str(tmp_path / "runs"))
        assert code == 2 and out == ""
        assert err.startswith(f"fusebench run: unknown benchmark {name!r}. Did you mean {hint!r}? Valid benchmark "
                              f"ids: ")
    with pytest.raises(UnknownNameError, match=r"unknown benchmark 'QuickStart'\. Did you mean 'quickstart'\?"):
        benchmarks.load("QuickStart")


# ---- 11: weights files torch did not write ------------------------------------------------------------------------
def test_weights_files_that_torch_did_not_write_are_one_line_each(capsys, tmp_path: Path) -> None:
    text, empty, plain = tmp_path / "text.pt", tmp_path / "empty.pt", tmp_path / "plain.pt"
    text.write_text("hello")
    empty.write_bytes(b"")
    with open(plain, "wb") as f:
        pickle.dump({"encoders.weak.0.weight": torch.zeros(2, 2)}, f, protocol=4)
    expected = "expected the encoder's state_dict saved by torch.save(state_dict, PATH) or as a .safetensors file"
    for path, said in ((text, f"not a PyTorch checkpoint (torch.save zip format); {expected}"),
                       (empty, f"the file is empty; {expected}"),
                       (plain, "a plain Python pickle, not a PyTorch checkpoint (torch.save zip format), and "
                               f"fusebench never unpickles one; {expected}")):
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no torch warning may leak before the refusal
            code, out, err = _plan(capsys, tmp_path, "--objective", "mine", "--encoder-weights", f"mine={path}")
        assert code == 2 and out == ""
        assert err.splitlines() == [f"fusebench run: {path}: {said}"]


# ---- 13, 14, 15, 16, 17: saying what happened ----------------------------------------------------------------------
def test_ctrl_c_before_any_cell_says_nothing_was_written(capsys, tmp_path: Path, monkeypatch) -> None:
    import fusebench.sweep.runner as runner

    def interrupted(request):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "run", interrupted)
    out = tmp_path / "never"
    code, _, err = _run(capsys, "run", "quickstart", "--out", str(out))
    assert code == 130 and not out.exists()
    assert err.splitlines()[-1] == (f"fusebench run: interrupted before any cell started; nothing was written ({out} "
                                    f"was not created); rerun the same command to run the sweep")
    out.mkdir()  # a folder of records that exists: what is there is said, as before
    code, _, err = _run(capsys, "run", "quickstart", "--out", str(out))
    assert err.splitlines()[-1].startswith(f"fusebench run: interrupted; 0 cell(s) have a record under {out}; ")


def test_status_names_runs_folders_given_by_their_parent(capsys, tmp_path: Path) -> None:
    for runs in ("1", "2"):
        (tmp_path / runs / "quickstart" / "m3g" / "seed0").mkdir(parents=True)
    code, out, err = _run(capsys, "status", "--out", str(tmp_path))
    assert code == 2 and out == ""
    assert err.strip() == (f"fusebench status: --out {tmp_path} holds folders of run records, not benchmarks (1, 2: "
                           f"each holds <benchmark>/<objective>/seed<k>/); give one of them, e.g. --out "
                           f"{tmp_path / '1'}")
    code, out, _ = _run(capsys, "status", "--out", str(tmp_path / "1"))
    assert code == 0 and out.startswith("quickstart: 0 done, 0 running, 0 failed, 0 interrupted, 1 pending (1 cells)")


def test_data_prepare_prints_the_data_info_once(capsys, tmp_path: Path) -> None:
    from fusebench import datasets

    (tmp_path / "nyu").mkdir()
    code, _, err = _run(capsys, "data", "prepare", "nyuv2", "--data-root", str(tmp_path / "nyu"), "--opt",
                        "layout=mtan", "--out", str(tmp_path / "prep"))
    info = datasets.get("nyuv2").info()
    assert code == 2 and err.count(info) == 1 and err.count(info.splitlines()[0]) == 1
    lines = [ln for ln in err.splitlines() if ln.startswith("fusebench data prepare: nyuv2/")]
    assert [ln.split(":")[1] for ln in lines] == [" nyuv2/train", " nyuv2/val", " nyuv2/test"]
    assert lines[0].endswith("needs " + str(tmp_path / "nyu" / "train") + "/{image,depth,normal,label}/ (MTAN's "
                             "'train' folder).")


def test_resume_help_says_what_happens() -> None:
    from fusebench.cli.run import parser

    text = " ".join(parser().format_help().split())
    assert ("--resume accepted for older command lines; it changes nothing: a run always continues each cell that "
            "has a last.pt from it") in text
    assert "rerun with --resume" not in text


def test_leaderboard_paths_of_the_wrong_kind_are_one_line_each(capsys, tmp_path: Path) -> None:
    runs, afile = tmp_path / "runs", tmp_path / "afile"
    runs.mkdir()
    afile.write_text("x")
    for args, said in (
            (["--runs", str(runs), "--out", str(afile)],
             f"--out {afile} is a file; expected the folder to write the boards into (made if it does not exist)"),
            (["--runs", str(runs), "--out", str(afile / "boards")],
             f"--out {afile / 'boards'}: cannot be made ({afile} is a file); expected a folder for the boards"),
            (["--runs", str(afile)],
             f"--runs {afile} is a file; expected the folder of run records (run.json files) to read"),
            (["--runs", str(tmp_path / "none")],
             f"--runs {tmp_path / 'none'} does not exist; expected the folder of run records (run.json files) to read"),
            (["--runs", str(runs), "--reported", str(runs), "--out", str(tmp_path / "b")],
             f"--reported {runs} is a folder; expected a YAML file of the numbers the papers report")):
        code, out, err = _run(capsys, "leaderboard", *args)
        assert code == 2 and out == "" and err.splitlines() == [f"fusebench leaderboard: {said}"]
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize("args,key", [(("--precision", "tf32"), "precision=tf32"),
                                      (("--set", "speed.cudnn_benchmark=true"), "speed.cudnn_benchmark=true")])
def test_a_cuda_only_setting_is_refused_for_cells_that_run_on_the_cpu(capsys, tmp_path: Path, args, key) -> None:
    """TF32 matrix units and cuDNN's autotuner act on CUDA only: on the CPU the run would record them (a board of its
    own) and compute the same numbers as without them."""
    code, out, err = _plan(capsys, tmp_path, "--objective", "none", "--device", "cpu", *args)
    assert code == 2 and "Traceback" not in err
    assert (f"quickstart: {key}: it acts on CUDA only, and the cells run on the CPU here, so it would be recorded and "
            "change nothing") in err
    assert not (tmp_path / "runs").exists()


def test_a_modality_named_twice_is_refused_when_the_spec_loads() -> None:
    """Two copies of one modality passed --plan and failed mid-cell as "takes at least 2 views, got k=1"."""
    from fusebench.spec.config import ConfigError

    with pytest.raises(ConfigError, match=r"dataset\.modalities must name each modality once .*got \['rgb', 'rgb'\]"):
        benchmarks.load("nyuv2-seg", overrides={"dataset.modalities": ["rgb", "rgb"]}, synthetic=True)


@pytest.mark.parametrize("bench,key,value,expected", [
    ("nyuv2-seg", "encoder.config.context_bins", [0], r"encoder\.config\.context_bins = \[0\]: expected a non-empty "
                                                       r"list of integers >= 1"),
    ("nyuv2-seg", "encoder.config.context_bins", [], r"encoder\.config\.context_bins = \[\]: expected a non-empty"),
    ("sunrgbd-det", "encoder.config.config", {"num_proposals": 1000},
     r"encoder\.config\.config = \{'num_proposals': 1000\}: expected a VoteNet preset's name, one of "
     r"\['tiny', 'votenet'\]"),
])
def test_encoder_options_the_layers_cannot_take_are_refused_when_the_spec_loads(bench, key, value, expected) -> None:
    """They passed --plan and failed in the middle of a cell (a 0 x 0 pooling, a division by zero, a dict where the
    code reads a preset)."""
    from fusebench.spec.config import ConfigError

    with pytest.raises(ConfigError, match=expected):
        benchmarks.load(bench, overrides={key: value}, synthetic=True)


def test_more_pyramid_bins_than_the_last_stage_has_channels_are_refused() -> None:
    """The pooling gives each bin ``channels // len(bins)`` of the last stage's channels (64 at size tiny, the
    synthetic run's): 64 bins load and run their layers, 65 were a 0-channel convolution at the first forward."""
    import torch

    from fusebench.encoders import esanet as module
    from fusebench.spec.config import ConfigError

    spec = benchmarks.load("nyuv2-seg", overrides={"encoder.config.context_bins": [1] * 64}, synthetic=True)
    assert spec.encoder.config["size"] == "tiny"
    assert module.PyramidPooling(64, 8, [1] * 64).eval()(torch.zeros(2, 64, 4, 4)).shape == (2, 8, 4, 4)
    with pytest.warns(UserWarning, match="zero-element"), pytest.raises(RuntimeError):  # 0-channel branches
        module.PyramidPooling(64, 8, [1] * 65).eval()(torch.zeros(2, 64, 4, 4))
    with pytest.raises(ConfigError, match=r"encoder\.config\.context_bins has 65 bins: the pyramid pooling splits the "
                                          r"last stage's 64 channels \(size 'tiny'\) among them, so at most 64 bins"):
        benchmarks.load("nyuv2-seg", overrides={"encoder.config.context_bins": [1] * 65}, synthetic=True)


def test_sunrgbd_num_points_0_is_refused_not_read_as_every_point(tmp_path: Path) -> None:
    from fusebench.datasets import DatasetError, build

    with pytest.raises(DatasetError, match=r"sunrgbd: num_points must be a positive integer or None \(every point\), "
                                           r"got 0"):
        build("sunrgbd", root=None, synthetic=True, split="train", num_points=0, use_cache=False)


def test_an_abbreviated_option_is_refused_naming_the_option_it_resembles(capsys) -> None:
    """argparse took any unique prefix: --work 2 ran two cells at once (--workers) for someone meaning DataLoader
    workers. Options are spelled out; an unknown one names the closest."""
    from fusebench.cli.run import parser

    with pytest.raises(SystemExit) as e:
        parser().parse_args(["quickstart", "--work", "2"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "unrecognized arguments: --work 2 (did you mean --workers for --work?)" in err
    assert parser().parse_args(["quickstart", "--workers", "2"]).workers == 2


def test_a_long_set_value_is_cut_visibly_in_the_message() -> None:
    """``[with --set ...]`` names each value given on the command line; one longer than 60 characters is cut with
    "..." (it was cut silently, mid-word, so a reader took the cut text for the value)."""
    from fusebench.spec.config import ConfigError, name_overrides

    long = {"methods.ema_teacher.enabled": True}
    e = name_overrides(ConfigError("x.yaml: bad"), {"pretrain.hparams.tuple_infonce": long, "a": 1})
    whole = "pretrain.hparams.tuple_infonce={'methods.ema_teacher.enabled': True}"
    assert len(whole) > 60
    assert str(e) == f"x.yaml: bad [with --set {whole[:57]}..., a=1]"
