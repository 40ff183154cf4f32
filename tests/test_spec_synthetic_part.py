"""A typo in a spec's `synthetic:` overrides or `dataset.synthetic_spec` is refused on a real-data load too
(before the fix it was accepted silently unless the run used --synthetic)."""
import pytest

from fusebench.components.spec_check import load_spec
from fusebench.spec.config import ConfigError

SPEC = """\
dataset: {{id: quickstart{syn_spec}}}
encoder: {{id: mlp, config: {{num_features: 4}}}}
metrics: [acc]
synthetic:
  {override}: 1
"""


@pytest.mark.parametrize("override,syn_spec,word", [("pretrain.epoch", "", "epoch"),
                                                    ("pretrain.epochs", ", synthetic_spec: {num_sample: 9}", "num_sample")])
def test_typo_in_synthetic_part_is_refused_without_synthetic(tmp_path, override, syn_spec, word):
    path = tmp_path / "syn-typo.yaml"
    path.write_text(SPEC.format(override=override, syn_spec=syn_spec))
    for synthetic in (False, True):
        with pytest.raises(ConfigError, match=rf"{word}.*synthetic part"):
            load_spec(path, synthetic=synthetic)


def test_clean_synthetic_part_loads(tmp_path):
    path = tmp_path / "syn-ok.yaml"
    path.write_text(SPEC.format(override="pretrain.epochs", syn_spec=", synthetic_spec: {num_samples: 9}"))
    assert load_spec(path).dataset.id == "quickstart"
