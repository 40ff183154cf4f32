"""The downstream protocols are registry entries that declare their reference rows and options
(fusebench/components/protocols.py); the spec loader and the compatibility check read the declarations."""

from __future__ import annotations

import pytest

from fusebench import benchmarks
from fusebench.components import compat
from fusebench.spec.config import ConfigError
from fusebench.components.protocols import PROTOCOLS, protocol_of
from fusebench.components.reference_features import REFERENCE_KINDS


def test_the_three_protocols_and_what_they_declare() -> None:
    assert PROTOCOLS.available() == ["embedding_eval", "finetune", "linear_probe"]
    assert PROTOCOLS.get("linear_probe").reference_rows == ("none", "raw")
    assert PROTOCOLS.get("finetune").reference_rows == ("none",) and PROTOCOLS.get("finetune").trains_encoder
    ev = PROTOCOLS.get("embedding_eval")
    assert ev.reference_rows == ("none", *REFERENCE_KINDS) and ev.frozen_features and ev.options_key == "embedding_eval"
    assert protocol_of(benchmarks.load("mv-handwritten")) is ev
    assert protocol_of(benchmarks.load("quickstart")) is PROTOCOLS.get("linear_probe")


def test_an_unknown_protocol_or_protocol_option_is_refused_when_the_spec_loads() -> None:
    with pytest.raises(ConfigError, match=r"downstream.protocol 'lineer_probe' is not a registered protocol; valid: "
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
