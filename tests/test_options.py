"""Typed component options (fusebench.options) and their check when a benchmark spec is loaded."""

from __future__ import annotations

from pathlib import Path

import pytest

import fusebench
from fusebench import benchmarks
from fusebench.datasets.base import DatasetError
from fusebench.options import REQUIRED, Option, OptionsError, check_options, options_of
from fusebench.spec.config import ConfigError


class _Toy:
    def __init__(self, width: int, rate: float = 0.5, name: str | None = None, flags: list | None = None) -> None:
        pass


class _Open:
    def __init__(self, a: int = 1, num_features: int = 16, **kwargs) -> None:
        pass


def test_options_come_from_the_typed_signature() -> None:
    opts = options_of(_Toy)
    assert [(o.name, o.default) for o in opts] == [("width", REQUIRED), ("rate", 0.5), ("name", None), ("flags", None)]
    assert opts[0].type is int and opts[1].type is float
    assert [str(o) for o in opts[:2]] == ["width: int", "rate: float = 0.5"]
    assert options_of(_Open) is None  # **kwargs: open-ended, other keys are passed on
    check_options({"anything": object(), "num_features": 8}, _Open, "x")
    # ... but a key this close to a named option is a typo, and a named option's type is checked
    with pytest.raises(OptionsError, match=r"x: unknown options, did you mean 'num_features' for 'num_featres'\?"):
        check_options({"num_featres": 8, "dropout": 0.3}, _Open, "x")
    with pytest.raises(OptionsError, match=r"x.a: expected int, got str 'one'"):
        check_options({"a": "one"}, _Open, "x")


@pytest.mark.parametrize("given, message", [
    ({"widht": 3}, r"toy: unknown options \['widht'\] \(did you mean 'width' for 'widht'\?\); valid options: width, "
                   r"rate, name, flags"),
    ({"width": 3.0}, r"toy.width: expected int, got float 3.0"),
    ({"width": True}, r"toy.width: expected int, got bool True"),
    ({"rate": "0.1"}, r"toy.rate: expected float, got str '0.1'"),
    ({"name": 3}, r"toy.name: expected str \| None, got int 3"),
    ({"flags": "ab"}, r"toy.flags: expected list \| None, got str 'ab'"),
])
def test_bad_options_are_one_clear_error(given, message) -> None:
    with pytest.raises(OptionsError, match=message):
        check_options(given, _Toy, "toy")


def test_good_options_pass() -> None:
    check_options({"width": 3, "rate": 1, "name": None, "flags": [1, 2]}, _Toy, "toy")  # an int is a valid float
    check_options({"width": 3, "flags": (1,)}, _Toy, "toy")


def test_an_open_ended_constructor_takes_for_a_typo_only_a_key_this_close_to_a_named_option() -> None:
    class Open:  # a third-party class: **kwargs, declaring nothing
        def __init__(self, width: int = 1, **kwargs) -> None:
            pass

    check_options({"wid": 1, "depth": 2}, Open, "plugin")  # "wid" ~ "width" at 0.75: passed on, not a typo
    with pytest.raises(OptionsError, match=r"plugin: unknown options, did you mean 'width' for 'widht'\?"):
        check_options({"widht": 1}, Open, "plugin")  # 0.8: a typo
    with pytest.raises(OptionsError, match=r"plugin.width: expected int"):
        check_options({"width": "3"}, Open, "plugin")


def test_spec_hparams_are_checked_at_load_time() -> None:
    with pytest.raises(ConfigError, match=r"quickstart.yaml: pretrain.per_objective.m3g.hparams: unknown options \['epss'\] \(did "
                                          r"you mean 'eps' for 'epss'\?\); valid options: eps, cost, tol, max_iter"):
        benchmarks.load("quickstart", overrides={"pretrain.hparams.m3g.epss": 0.1})
    with pytest.raises(ConfigError, match=r"pretrain.per_objective.infonce_pwe.hparams.tau: expected float, got str '0.1'"):
        benchmarks.load("quickstart", overrides={"pretrain.hparams.infonce_pwe.tau": "0.1"})
    with pytest.raises(ConfigError, match=r"pretrain.per_objective.m3gg.hparams: 'm3gg' is not a registered objective id .*did you "
                                          r"mean 'm3g'\?"):
        benchmarks.load("quickstart", overrides={"pretrain.hparams.m3gg.eps": 0.1})


def test_spec_grid_encoder_and_dataset_options_are_checked_at_load_time() -> None:
    with pytest.raises(ConfigError, match=r"pretrain.per_objective.m3g.grid: unknown options \['tau'\]"):
        benchmarks.load("mv-ngs", overrides={"pretrain.grid.m3g": {"tau": [0.1]}})
    with pytest.raises(ConfigError, match=r"pretrain.per_objective.m3g.grid.eps: expected float, got str 'a'"):
        benchmarks.load("mv-ngs", overrides={"pretrain.grid.m3g": {"eps": [0.1, "a"]}})
    with pytest.raises(ConfigError, match=r"pretrain.per_objective.m3g.grid: expected a mapping of option names to non-empty lists"):
        benchmarks.load("mv-ngs", overrides={"pretrain.grid.m3g": {"eps": []}})
    with pytest.raises(ConfigError, match=r"encoder.config \(mlp\): unknown options \['hiden'\] \(did you mean "
                                          r"'hidden' for 'hiden'\?\)"):
        benchmarks.load("mv-ngs", overrides={"encoder.config.hiden": 8})
    with pytest.raises(DatasetError, match=r"dataset.options, adapter mv_ngs: unknown options \['split_sed'\] "
                                           r"\(did you mean 'split_seed' for 'split_sed'\?\)"):
        benchmarks.load("mv-ngs", overrides={"dataset.options.split_sed": 1})
    with pytest.raises(DatasetError, match=r"dataset.options, adapter mv_ngs.split_seed: expected int, got str '1'"):
        benchmarks.load("mv-ngs", overrides={"dataset.options.split_seed": "1"})


def test_container_options_are_checked_item_by_item_at_load_time() -> None:
    """A list / mapping option is checked with its items (votenet's ``mean_sizes: "abc"`` passed the spec check and
    failed when the cell built the encoder; ``Sequence`` annotations were not checked at all)."""
    from typing import Mapping, Sequence

    from fusebench.options import _type_ok

    # (value, annotation, expected): worked out by hand from what a spec's YAML can hold
    cases = [("abc", Sequence[Sequence[float]], False), ([[1, 2, 3.5]], Sequence[Sequence[float]], True),
             ([[1, "x", 3]], Sequence[Sequence[float]], False), ([1.0, 2.0], Sequence[Sequence[float]], False),
             (["rgb", "depth"], Sequence[str] | Mapping[str, int] | None, True),
             ({"rgb": 3}, Sequence[str] | Mapping[str, int] | None, True),
             ({"rgb": "3"}, Sequence[str] | Mapping[str, int] | None, False), ("rgb", Sequence[str], False),
             ([1, 2], tuple[int, ...], True), ([1, 2.5], tuple[int, ...], False), ([1, 2.5], tuple[int, float], True),
             ([1], tuple[int, float], False), ([True], list[int], False), ({}, dict, True), ([], Sequence[int], True)]
    assert [_type_ok(v, t) for v, t, _ in cases] == [want for _, _, want in cases]
    with pytest.raises(ConfigError, match=r"encoder.config \(votenet\)\.mean_sizes: expected .*got str 'abc'"):
        benchmarks.load("sunrgbd-det", overrides={"encoder.config.mean_sizes": "abc"})
    with pytest.raises(ConfigError, match=r"encoder.config \(esanet\)\.context_bins: expected .*got list \[1, 'a'\]"):
        benchmarks.load("nyuv2-seg", overrides={"encoder.config.context_bins": [1, "a"]})


def test_options_are_checked_before_any_data_is_read(tmp_path: Path) -> None:
    # the data root does not exist: a typo must be reported, not the missing files
    with pytest.raises(ConfigError, match=r"pretrain.per_objective.m3g.hparams: unknown options \['epss'\]"):
        fusebench.run("mv-ngs", objective="m3g", seeds=[0], out=tmp_path, data_root=str(tmp_path / "absent"),
                      progress=False, overrides={"pretrain.hparams.m3g.epss": 0.1})
    assert not any(tmp_path.iterdir())  # nothing written


def test_every_shipped_component_declares_its_options() -> None:
    from fusebench import datasets, encoders, objectives

    # the shipped ones (a plugin installed on this machine may take **kwargs: listed as open-ended, not ours to test)
    for name in objectives.OBJECTIVES.builtin():
        assert options_of(objectives.OBJECTIVES.get(name)) is not None, name
    for name in encoders.ENCODERS.builtin():
        assert options_of(encoders.ENCODERS.get(name)) is not None, name
    for name in datasets.DATASETS.builtin():
        opts = options_of(datasets.get(name))
        assert opts is not None, name
        assert {"seed", "augment", "use_cache"} <= {o.name for o in opts}
        assert all(isinstance(o, Option) for o in opts)


def test_data_info_and_list_details_print_the_typed_options(capsys) -> None:
    from fusebench.cli import main
    from fusebench.datasets.cli import main as data_main

    assert data_main(["info", "nyuv2"]) == 0
    out = capsys.readouterr().out
    assert "Options (dataset.options): " in out and "classes: int" in out and "val_fraction: float" in out
    assert main(["list", "objectives", "m3g", "--details"]) == 0
    out = capsys.readouterr().out
    assert "      eps: float = 0.2" in out and "      max_iter: int = 1000" in out


@pytest.mark.parametrize("bench, adapter, name, value, expected", [
    ("sunrgbd-det", "sunrgbd", "num_points", "20000", "int | None"),
    ("sunrgbd-det", "sunrgbd", "val_fraction", "0.1", "float"),
    ("sunrgbd-det", "sunrgbd", "voxel_size", "0.05", "float | None"),
    ("sleep-edf-staging", "sleep_edf", "sfreq_hz", "100", "float"),
    ("sleep-edf-staging", "sleep_edf", "max_cached_recordings", 2.5, "int"),
    ("sleep-edf-staging", "sleep_edf", "split_subjects", ["SC400"], "dict | None"),
    ("physionet2018-eeg", "physionet2018", "crop_wake_min", "30", "float | None"),
    ("mosi-sentiment", "mosi", "aligned", "yes", "bool"),
    ("mosi-sentiment", "mosi", "nonfinite", 0, "str"),
    ("chsims-sentiment", "chsims", "label", "0.4", "float"),
    ("chsims-sentiment", "chsims", "unimodal_labels", [0.2], "dict | None"),
])
def test_mistyped_adapter_options_are_errors_at_spec_load(bench, adapter, name, value, expected) -> None:
    import re

    message = f"dataset.options, adapter {adapter}.{name}: expected {expected}, got {type(value).__name__} {value!r}"
    with pytest.raises(DatasetError, match=re.escape(message)):
        benchmarks.load(bench, overrides={f"dataset.options.{name}": value})


@pytest.mark.parametrize("adapter, typed", [
    ("sunrgbd", ["num_points: int | None", "version: str", "val_fraction: float", "voxel_size: float | None"]),
    ("sleep_edf", ["sfreq_hz: float", "crop_wake_min: float | None", "pairs: list", "split_subjects: dict | None"]),
    ("physionet2018", ["sfreq_hz: float", "test_fraction: float", "max_cached_recordings: int"]),
    ("mosi", ["aligned: bool", "layout: str", "label: float", "folds: dict | None"]),
    ("chsims", ["text_field: str", "unimodal_labels: dict | None", "file: str | None"]),
])
def test_data_info_prints_the_typed_options_of_every_adapter(capsys, adapter, typed) -> None:
    from fusebench.datasets.cli import main as data_main

    assert data_main(["info", adapter]) == 0
    [line] = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("Options (dataset.options): ")]
    options = line.split(": ", 1)[1].split("; ")
    assert all(t in options for t in typed), (typed, options)
