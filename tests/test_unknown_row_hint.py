"""A mistyped --objective names every kind of row a sweep takes (objectives, reference rows, the
--encoder-weights rows) and the closest one; before the fix only objective ids were listed, with no hint for
`nnoe` (none) or `mien` (an --encoder-weights row)."""
import pytest
import torch

import fusebench
from fusebench import encoders
from fusebench.registry import UnknownNameError


def test_typo_of_reference_row_gets_a_hint(tmp_path):
    with pytest.raises(UnknownNameError, match=r"Did you mean 'none'\?.*reference rows: .*none"):
        fusebench.run("quickstart", objective="nnoe", out=tmp_path / "runs", progress=False)


def test_typo_of_weights_row_gets_a_hint(tmp_path):
    enc = encoders.build("mlp", modalities={"strong1": 16, "strong2": 16, "weak": 16}, num_features=4, hidden=64)
    torch.save(enc.state_dict(), tmp_path / "enc.pt")
    with pytest.raises(UnknownNameError, match=r"Did you mean 'mine'\?.*encoder-weights rows: mine"):
        fusebench.run("quickstart", objective="mien", out=tmp_path / "runs", progress=False,
                      encoder_weights={"mine": str(tmp_path / "enc.pt")})
