"""One typed boundary (issue #35 item 3): ``fusebench run`` and ``fusebench.run`` build the same
:class:`~fusebench.spec.request.SweepRequest`, every option is checked when it is built (one ConfigError naming
the option), ``--precision`` is folded into the overrides once, and the device ``auto`` is resolved once per sweep."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import fusebench
from fusebench.cli.run import parser, request_of
from fusebench.spec.config import ConfigError
from fusebench.spec.request import RunOptions, SweepRequest

TINY = {"pretrain.epochs": 1, "pretrain.batch_size": 64, "dataset.synthetic_spec.num_samples": 128,
        "downstream.epochs": 1}


def test_cli_and_python_build_the_same_request() -> None:
    ns = parser().parse_args(["quickstart", "--objective", "m3g", "infonce_pwe", "--seeds", "3", "4",
                              "--set", "pretrain.epochs=2", "--set", "note=a: b", "--precision", "tf32",
                              "--out", "somewhere", "--workers", "2", "--threads", "1", "--device", "cpu",
                              "--no-progress", "--encoder-weights", "mine=w.safetensors"])
    from_cli = request_of(ns)
    from_python = SweepRequest.of("quickstart", objective=["m3g", "infonce_pwe"], seeds=[3, 4],
                                  overrides={"pretrain.epochs": 2, "note": "a: b"}, precision="tf32",
                                  out="somewhere", workers=2, threads=1, device="cpu", progress=False,
                                  encoder_weights={"mine": "w.safetensors"})
    assert from_cli == from_python
    # typed and normalised once: tuples, a Path, the precision inside the overrides
    assert from_cli.objectives == ("m3g", "infonce_pwe") and from_cli.seeds == (3, 4)
    assert from_cli.out == Path("somewhere")
    assert from_cli.overrides == {"pretrain.epochs": 2, "note": "a: b", "precision": "tf32"}


def test_a_request_is_a_frozen_value_and_of_applies_changes() -> None:
    req = SweepRequest("quickstart", seeds=[0])
    with pytest.raises(AttributeError):
        req.seeds = (1,)  # type: ignore[misc]
    again = SweepRequest.of(req, seeds=[1, 2])
    assert again.seeds == (1, 2) and req.seeds == (0,) and again.benchmark == "quickstart"
    assert SweepRequest.of(req) is req


@pytest.mark.parametrize("options, message", [
    ({"workers": 0}, r"--workers: expected a positive integer \(cells run side by side\), got 0"),
    ({"workers": True}, r"--workers: expected a positive integer \(cells run side by side\), got True"),
    ({"threads": -1}, r"--threads: expected a positive integer \(torch threads per cell\), got -1"),
    ({"num_workers": -1}, r"--num-workers: expected an integer >= 0 \(DataLoader worker processes per cell\), got -1"),
    ({"seeds": [0, -1]}, r"--seeds: seed -1 is not an integer"),
    ({"seeds": "0"}, r"--seeds: expected a list of integers, got '0'"),
    ({"device": "tpu"}, r"--device 'tpu': expected auto, cpu, cuda, cuda:N or mps"),
    ({"device": "cuda:x"}, r"--device 'cuda:x'"),
    ({"objective": []}, r"--objective: expected one or more objective ids"),
    ({"objective": ["m3g", 3]}, r"--objective: expected one or more objective ids"),
    ({"resume": "yes"}, r"resume: expected True or False, got 'yes'"),
    ({"overrides": {"precision": "32"}, "precision": "tf32"}, r"--precision tf32 and --set precision=32 disagree"),
    ({"overrides": 3}, r"overrides: expected a mapping of dotted keys or KEY=VALUE strings, got 3"),
    ({"overrides": ["pretrain.epochs"]}, r"--set 'pretrain.epochs': expected KEY=VALUE"),
    ({"launcher_options": ["x"]}, r"launcher_options: expected a mapping"),
    ({"epochs": 3}, r"fusebench.run: unknown option\(s\) epochs; known: .*objective.*seeds"),
    ({"objective": "m3g", "objectives": ["m3g"]}, r"give objective or objectives, not both"),
    # a seed or an objective given twice would count one run twice in the summary's n
    ({"seeds": [0, 1, 0]}, r"--seeds: seed\(s\) 0 given more than once"),
    ({"objectives": ["m3g", "mv_dhel", "m3g"]}, r"--objective: m3g given more than once"),
])
def test_a_bad_option_is_one_config_error_naming_it(options: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        SweepRequest.of("quickstart", **options)


def test_a_bad_option_stops_fusebench_run_before_anything_is_written(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--workers"):
        fusebench.run("quickstart", synthetic=True, out=tmp_path / "runs", workers=0)
    assert not (tmp_path / "runs").exists()


def test_overrides_as_set_strings_equal_the_mapping() -> None:
    a = SweepRequest.of("quickstart", overrides=["pretrain.epochs=2", "pretrain.lr=0.001"])
    b = SweepRequest.of("quickstart", overrides={"pretrain.epochs": 2, "pretrain.lr": 0.001})
    assert a == b


@pytest.mark.parametrize("text, comment, read", [
    ("description=a # b", "# b", "'a'"),
    ("description='a # b' # c", "# c", "'a # b'"),
    ("pretrain.lr=0.1  # the paper's", "# the paper's", "0.1"),
    ("seeds=[0, 1] # two", "# two", "[0, 1]"),
    ("description=#all of it", "#all of it", "None"),
])
def test_a_set_value_yaml_would_cut_at_a_comment_is_refused_naming_the_key(text: str, comment: str, read: str,
                                                                          tmp_path: Path, capsys) -> None:
    key = text.partition("=")[0]
    with pytest.raises(ConfigError) as e:
        SweepRequest.of("quickstart", overrides=[text])
    assert str(e.value).startswith(f"--set {text}: YAML reads {comment!r} as a comment, so {key} would be {read}; "
                                   f"quote the whole value to keep the text")
    from fusebench.cli import main

    assert main(["run", "quickstart", "--objective", "raw", "--out", str(tmp_path / "runs"), "--set", text]) == 2
    assert f"fusebench run: --set {key}=" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("text, value", [
    ("description=a#b", "a#b"),  # no blank before '#': YAML keeps it
    ('description="a # b"', "a # b"),  # quoted: the '#' is text
    ("description='it''s # here'", "it's # here"),
    ("protocol_notes.x=K = 256 (paper: 1024)", "K = 256 (paper: 1024)"),
    ("protocol_notes.x=a: b, c: d # e", "a: b, c: d # e"),  # not YAML: kept as the text given
])
def test_a_set_value_with_a_hash_that_is_text_is_kept(text: str, value: str) -> None:
    key = text.partition("=")[0]
    assert SweepRequest.of("quickstart", overrides=[text]).overrides[key] == value


def _no_accelerator(monkeypatch) -> None:
    """``auto`` resolves to the CPU whatever this machine has (the verdicts must not depend on a GPU being there)."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    if getattr(torch.backends, "mps", None) is not None:
        monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)


def test_the_device_auto_is_resolved_once_per_sweep(tmp_path: Path, monkeypatch) -> None:
    from fusebench.runtime import utils

    _no_accelerator(monkeypatch)
    asked: list[str] = []
    real = utils.resolve_device

    def counting(name: str = "auto"):
        asked.append(name)
        return real(name)

    monkeypatch.setattr(utils, "resolve_device", counting)
    records = fusebench.run("quickstart", objective=["none", "infonce_pwe"], seeds=[0, 1], synthetic=True,
                            out=tmp_path / "runs", overrides=TINY, progress=False)
    assert len(records) == 4 and all(r["device"] == "cpu" for r in records)
    # "auto" decided once, by the sweep; each cell only checks the concrete name it was given
    assert asked.count("auto") == 1
    assert set(asked) == {"auto", "cpu"}
    on_disk = json.loads((tmp_path / "runs" / "quickstart" / "none" / "seed1" / "run.json").read_text())
    assert on_disk["device"] == "cpu"


def test_run_options_resolved_keeps_a_concrete_device_and_returns_itself(monkeypatch) -> None:
    opts = RunOptions(device="cpu")
    assert opts.resolved() is opts
    _no_accelerator(monkeypatch)
    assert RunOptions().resolved().device == "cpu"
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # auto prefers CUDA (the name only: nothing runs)
    assert RunOptions().resolved().device == "cuda"


@pytest.mark.parametrize("text, value", [("1e-3", 0.001), ("2E+4", 20000.0), ("-3e-2", -0.03), ("1.5e3", 1500.0),
                                         ("'1e-3'", "1e-3"), ("e5", "e5"), ("12", 12), ("0.001", 0.001)])
def test_exponent_numbers_are_numbers_in_specs_and_set(text: str, value: object) -> None:
    """YAML 1.2 reads ``1e-3`` as a number; PyYAML's 1.1 resolver gave the string '1e-3', refused by a float
    field, so ``--set pretrain.lr=1e-3`` failed ("expected float, got str")."""
    from fusebench.spec.config import parse_override
    from fusebench.typed import load_yaml

    assert load_yaml(f"x: {text}", "t") == {"x": value}
    got = parse_override(f"pretrain.lr={text}")[1]
    assert got == value and type(got) is type(value)


def test_set_lr_in_exponent_form_is_applied() -> None:
    from fusebench import benchmarks

    request = SweepRequest.of("quickstart", overrides=["pretrain.lr=3e-4"])
    spec = benchmarks.load("quickstart", overrides=request.overrides, synthetic=True)
    assert spec.pretrain.lr == 0.0003


@pytest.mark.parametrize("key, value, message", [
    ("downstream.lr", -1, r"downstream.lr must be a finite number > 0, got -1"),
    ("downstream.weight_decay", -0.1, r"downstream.weight_decay must be a finite number >= 0, got -0.1"),
    ("pretrain.weight_decay", -1, r"pretrain.weight_decay must be a finite number >= 0, got -1"),
    ("pretrain.projection_dim", 0, r"pretrain.projection_dim must be an integer >= 1 \(a width\), got 0"),
    ("pretrain.projection_hidden", 0, r"pretrain.projection_hidden must be an integer >= 1"),
    ("pretrain.warmup_epochs", 50, r"pretrain.warmup_epochs must be an integer in 0..20 \(the pretraining epochs\)"),
    ("pretrain.per_objective.m3g.micro_batch", 65,
     r"pretrain.per_objective.m3g.micro_batch = 65 must be at most the batch it splits \(64\)"),
    ("seeds", [0, 0], r"seeds must be distinct"),
    ("objectives", ["m3g", "m3g"], r"objectives must be distinct, got \['m3g'\] more than once"),
])
def test_values_a_cell_would_fail_on_or_not_use_are_refused_when_the_spec_loads(key, value, message) -> None:
    """Each used to pass the spec check: a negative downstream lr or weight decay and a zero-width head failed in
    the middle of the cell with torch's error naming no key, after pretraining; a warm-up longer than the run, a
    micro-batch larger than the batch and a repeated seed were recorded and had no effect (the seed counted one
    run twice). The error names the file, the --set value and the limit (quickstart: 20 epochs, batch 64)."""
    from fusebench import benchmarks

    spec = benchmarks.load("quickstart")
    assert spec.pretrain.epochs == 20 and spec.pretrain.batch_size == 64
    with pytest.raises(ConfigError, match=r"quickstart.yaml: " + message + r".* \[with --set "
                       + re.escape(f"{key}={value!r}") + r"\]$"):
        benchmarks.load("quickstart", overrides={key: value})


def test_a_method_option_no_objective_of_the_run_uses_is_refused(tmp_path: Path) -> None:
    """``--set pretrain.methods.tuple_infonce.disturbed=false`` with ``--objective m3g``: M3G builds on no method,
    so the option would be recorded in the record's config and change nothing (the config hash leaves it out); it
    is refused before anything is written. The same option with the objective that uses it runs; the spec file's
    own method options for objectives this run leaves out stay accepted."""
    from fusebench import benchmarks
    from fusebench.sweep.runner import check_method_options_used

    with pytest.raises(ConfigError, match=r"pretrain.methods.tuple_infonce \(disturbed=False, from --set\): the "
                                          r"tuple_infonce method joins none of this run's objectives \(m3g\)"):
        fusebench.run("quickstart", objective="m3g", seeds=[0], out=tmp_path / "runs",
                      overrides={"pretrain.methods.tuple_infonce.disturbed": False})
    assert not (tmp_path / "runs").exists()
    overrides = {"pretrain.methods.tuple_infonce.disturbed": False}
    spec = benchmarks.load("quickstart", overrides=overrides)
    check_method_options_used(spec, ["tuple_infonce"], overrides)  # used: no error
    hw = benchmarks.load("mv-handwritten")
    assert hw.pretrain.methods["tuple_infonce"].embedding_noise == 0.1  # set by the spec file for tuple_infonce
    check_method_options_used(hw, ["m3g"], {})
