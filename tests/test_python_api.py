"""The Python entry points the docs show take their arguments in the forms the CLI and ``fusebench.run`` take,
and refuse others with one error naming the argument.

``fusebench.benchmarks.load(name, overrides, synthetic)`` (docs/benchmarks.md, docs/adding-a-modality.md) takes
``overrides`` as a mapping of dotted keys or as ``KEY=VALUE`` strings, as ``fusebench.run(overrides=...)`` and
``--set`` do: a list of strings was an AttributeError ('list' object has no attribute 'items'), ``synthetic="no"``
loaded the synthetic variant (a truthy string), and a name that is not a string was an AttributeError from
``.lower()``.
"""

from __future__ import annotations

import pytest

from fusebench import benchmarks
from fusebench.spec.config import ConfigError


def test_load_takes_set_strings_as_the_mapping_they_spell() -> None:
    as_mapping = benchmarks.load("quickstart", overrides={"pretrain.epochs": 2, "pretrain.per_objective.m3g.hparams.eps": 0.5})
    as_strings = benchmarks.load("quickstart", overrides=["pretrain.epochs=2", "pretrain.per_objective.m3g.hparams.eps=0.5"])
    one_string = benchmarks.load("quickstart", overrides="pretrain.epochs=2")
    assert as_strings.to_dict() == as_mapping.to_dict()
    assert as_strings.pretrain.epochs == one_string.pretrain.epochs == 2
    assert as_strings.pretrain.settings("m3g").hparams["eps"] == 0.5
    assert benchmarks.load("quickstart").pretrain.epochs != 2  # the override did something


def test_load_refuses_wrong_argument_types_naming_them() -> None:
    with pytest.raises(ConfigError, match="synthetic: expected True or False, got 'no'"):
        benchmarks.load("quickstart", synthetic="no")
    with pytest.raises(ConfigError, match="overrides: expected a mapping of dotted keys or KEY=VALUE strings, got 3"):
        benchmarks.load("quickstart", overrides=3)
    with pytest.raises(ConfigError, match="pretrain.epochs given twice"):
        benchmarks.load("quickstart", overrides=["pretrain.epochs=2", "pretrain.epochs=3"])
    with pytest.raises(TypeError, match="benchmark id must be a string .*got int 3"):
        benchmarks.load(3)


def test_load_is_documented() -> None:
    assert benchmarks.load.__doc__ and "KEY=VALUE" in benchmarks.load.__doc__


def test_datasets_build_refuses_a_string_for_modalities_and_a_non_bool_synthetic() -> None:
    """README's ``fusebench.datasets.build(name, root=None, split="train", modalities=None, synthetic=False, **opts)``:
    ``modalities="rgb"`` was read letter by letter ("unknown modalities ['r', 'g', 'b']"), ``synthetic="no"`` built
    the synthetic twin, ``root=3`` was a TypeError from pathlib."""
    from fusebench import datasets

    with pytest.raises(datasets.DatasetError, match=r"modalities: expected a list of modality names .*got 'rgb'"):
        datasets.build("nyuv2", synthetic=True, modalities="rgb")
    with pytest.raises(datasets.DatasetError, match="synthetic: expected True or False, got 'no'"):
        datasets.build("nyuv2", synthetic="no")
    with pytest.raises(datasets.DatasetError, match="root: expected the path of the data folder or file"):
        datasets.build("nyuv2", root=3)
    ds = datasets.build("nyuv2", synthetic=True, modalities=("rgb", "depth"))  # a tuple is a list of names
    assert list(ds[0]["modalities"]) == ["rgb", "depth"]
