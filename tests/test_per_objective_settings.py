"""Each objective's own settings grouped in a spec, ``pretrain.per_objective.<id>`` (issue #35 item 3): read onto
the canonical tables (so every config hash stays as it was), the old flat tables read with a deprecation
warning, a setting given twice refused, ``--set`` taking the grouped keys as aliases."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from fusebench.components.identity import spec_hash
from fusebench.spec.config import ConfigError, read_spec
from fusebench.typed import DeprecatedKeyWarning

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"

HEAD = """\
dataset: {id: multiview_synthetic}
encoder: {id: mlp, config: {num_features: 8, hidden: 16}}
metrics: [acc]
objectives: [none, m3g, infonce_pwe]
"""

GROUPED = HEAD + """\
pretrain:
  epochs: 2
  per_objective:
    m3g: {hparams: {eps: 0.3}, grid: {eps: [0.1, 0.3]}, micro_batch: 4, batch_size: 16, epochs: 3}
    infonce_pwe:
      hparams: {tau: 0.5}
"""

FLAT = HEAD + """\
pretrain:
  epochs: 2
  hparams: {m3g: {eps: 0.3}, infonce_pwe: {tau: 0.5}}
  grid: {m3g: {eps: [0.1, 0.3]}}
  objective_micro_batch: {m3g: 4}
  objective_batch_size: {m3g: 16}
  objective_epochs: {m3g: 3}
"""


def _spec(tmp_path: Path, text: str, name: str = "b", **kwargs):
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    return read_spec(path, **kwargs)


def test_grouped_settings_land_on_the_canonical_tables_without_a_warning(tmp_path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecatedKeyWarning)
        spec = _spec(tmp_path, GROUPED)
    pre = spec.pretrain
    assert pre.hparams == {"m3g": {"eps": 0.3}, "infonce_pwe": {"tau": 0.5}}
    assert pre.grid == {"m3g": {"eps": [0.1, 0.3]}}
    assert (pre.objective_micro_batch, pre.objective_batch_size, pre.objective_epochs) == ({"m3g": 4}, {"m3g": 16},
                                                                                          {"m3g": 3})
    m3g = pre.settings("m3g")
    assert (m3g.hparams, m3g.grid, m3g.batch_size, m3g.epochs, m3g.micro_batch) == ({"eps": 0.3}, {"eps": [0.1, 0.3]},
                                                                                    16, 3, 4)
    other = pre.settings("infonce_pwe")
    # no setting of its own: the common batch size (the default, 32) and epochs (2), no micro-batch
    assert (other.hparams, other.grid, other.batch_size, other.epochs, other.micro_batch) == ({"tau": 0.5}, {}, 32, 2,
                                                                                              None)
    assert "per_objective" not in spec.to_dict()["pretrain"]  # the canonical form holds the tables


def test_the_flat_layout_is_read_with_a_warning_and_gives_the_same_spec_and_hashes(tmp_path: Path) -> None:
    grouped = _spec(tmp_path, GROUPED, "g")
    with pytest.warns(DeprecatedKeyWarning, match=r"pretrain.hparams, pretrain.grid, pretrain.objective_batch_size, "
                                                  r"pretrain.objective_epochs, pretrain.objective_micro_batch: "
                                                  r"deprecated layout; write each objective's settings together, "
                                                  r"pretrain.per_objective.<objective>.\{hparams, grid, batch_size, "
                                                  r"epochs, micro_batch\}"):
        flat = _spec(tmp_path, FLAT, "g")
    assert flat.to_dict() == grouped.to_dict()
    for objective in ("m3g", "infonce_pwe", "none"):
        assert spec_hash(flat, objective) == spec_hash(grouped, objective)


@pytest.mark.parametrize("block, message", [
    ("per_objective: [m3g]", r"pretrain.per_objective: expected a mapping objective id -> \{hparams, grid"),
    ("per_objective: {m3g: 3}", r"pretrain.per_objective.m3g: expected a mapping of hparams, grid"),
    ("per_objective: {m3g: {gird: {eps: [0.1]}}}",
     r"pretrain.per_objective.m3g.gird: unknown setting \(did you mean 'grid'\?\); known: hparams, grid, batch_size"),
    ("per_objective: {m3g: {hparams: {eps: 0.3}}}\n  hparams: {m3g: {eps: 0.2}}",
     r"pretrain.per_objective.m3g.hparams = \{'eps': 0.3\} and pretrain.hparams.m3g = \{'eps': 0.2\} set one setting "
     r"twice; keep pretrain.per_objective.m3g.hparams"),
    ("per_objective: {m3g: {micro_batch: 1}}", r"pretrain.per_objective.m3g.micro_batch must be an integer >= 2, got 1"),
])
def test_a_bad_block_is_one_error_naming_the_key(tmp_path: Path, block: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecatedKeyWarning)
        _spec(tmp_path, HEAD + "pretrain:\n  " + block + "\n")


def test_the_same_value_given_both_ways_is_accepted(tmp_path: Path) -> None:
    with pytest.warns(DeprecatedKeyWarning):
        spec = _spec(tmp_path, HEAD + "pretrain:\n  per_objective: {m3g: {hparams: {eps: 0.3}}}\n"
                               "  hparams: {m3g: {eps: 0.3}}\n")
    assert spec.pretrain.hparams == {"m3g": {"eps": 0.3}}


@pytest.mark.parametrize("grouped_key, value, flat_key", [
    ("pretrain.per_objective.m3g.grid.eps", [0.2], "pretrain.grid.m3g.eps"),
    ("pretrain.per_objective.m3g.hparams", {"eps": 0.7}, "pretrain.hparams.m3g"),
    ("pretrain.per_objective.infonce_pwe.micro_batch", 8, "pretrain.objective_micro_batch.infonce_pwe"),
    ("pretrain.per_objective.m3g.epochs", 9, "pretrain.objective_epochs.m3g"),
])
def test_set_takes_the_grouped_keys_as_aliases(tmp_path: Path, grouped_key: str, value: object,
                                               flat_key: str) -> None:
    a = _spec(tmp_path, GROUPED, overrides={grouped_key: value})
    b = _spec(tmp_path, GROUPED, overrides={flat_key: value})
    assert a.to_dict() == b.to_dict()


def test_set_of_a_whole_block_replaces_that_objectives_settings_only(tmp_path: Path) -> None:
    spec = _spec(tmp_path, GROUPED, overrides={"pretrain.per_objective.m3g": {"hparams": {"eps": 0.9}}})
    pre = spec.pretrain
    assert pre.hparams == {"m3g": {"eps": 0.9}, "infonce_pwe": {"tau": 0.5}}
    assert (pre.grid, pre.objective_micro_batch, pre.objective_batch_size, pre.objective_epochs) == ({}, {}, {}, {})
    cleared = _spec(tmp_path, GROUPED, overrides={"pretrain.per_objective": {}})
    assert cleared.pretrain.hparams == {} and cleared.pretrain.grid == {}
    with pytest.raises(ConfigError, match=r"pretrain.per_objective.m3g.eps: unknown setting"):
        _spec(tmp_path, GROUPED, overrides={"pretrain.per_objective.m3g": {"eps": 0.9}})


def test_every_committed_spec_uses_the_grouped_layout() -> None:
    """No built-in benchmark is written in the deprecated layout (a user copying one learns the current one)."""
    specs = sorted(BENCHMARKS.glob("*.yaml"))
    assert len(specs) > 20
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecatedKeyWarning)
        for path in specs:
            read_spec(path)
            read_spec(path, synthetic=True)
