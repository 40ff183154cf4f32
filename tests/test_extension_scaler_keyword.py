"""A pretraining method's per-epoch extension (``PretrainMethod.extensions``) is called with ``scaler=`` (the main
loop's gradient scaler at precision ``16-mixed``, else None). One written before the keyword existed is called
without it where there is no scaler, and refused at ``16-mixed`` before the cell trains (its steps would run
unscaled beside a scaled main loop), never a TypeError at the end of the first epoch."""

from __future__ import annotations

import pytest
import torch

from fusebench.components.tuple_optim import TupleSampleOptimiser
from fusebench.spec.config import ConfigError
from fusebench.spec.methods import epoch_update_kwargs


class Current:
    def epoch_update(self, optimizer, epoch, train_batches, val_batch, curves, autocast, scaler=None):
        pass


class Open:
    def epoch_update(self, optimizer, epoch, *args, **kwargs):
        pass


class Old:
    def epoch_update(self, optimizer, epoch, train_batches, val_batch, curves, autocast):
        pass


def test_the_scaler_keyword_is_passed_where_taken_and_refused_at_16_mixed_where_not() -> None:
    scaler = torch.amp.GradScaler("cpu")
    for ext in (Current(), Open()):
        assert epoch_update_kwargs(ext, scaler) == {"scaler": scaler}
        assert epoch_update_kwargs(ext, None) == {"scaler": None}
    assert epoch_update_kwargs(Old(), None) == {}  # precision 32 / bf16: called as it was written
    with pytest.raises(ConfigError) as err:
        epoch_update_kwargs(Old(), scaler)
    assert str(err.value) == (
        f"pretraining extension {__name__}:Old: its epoch_update takes no 'scaler' keyword, which precision 16-mixed "
        "passes (the main loop's gradient scaler: steps the extension takes must be scaled and unscaled by it); add "
        "'scaler=None' to epoch_update and use it, or run at another precision")


def test_the_built_in_extension_takes_it() -> None:
    """TupleInfoNCE's sample optimisation (Algorithm 1), the one built-in extension, is called with the scaler."""
    ext = TupleSampleOptimiser.__new__(TupleSampleOptimiser)  # (the signature alone is read)
    scaler = torch.amp.GradScaler("cpu")
    assert epoch_update_kwargs(ext, scaler) == {"scaler": scaler}


def test_a_cell_calls_an_old_extension_without_the_keyword_and_refuses_it_at_16_mixed(tmp_path, monkeypatch) -> None:
    """Through a real cell (quickstart, tuple_infonce with Algorithm 1): Algorithm 1's epoch_update replaced by one of
    the old signature (no ``scaler``). At precision 32 the cell runs it (called without the keyword: its record has the
    policy curves); at 16-mixed the cell stops before it trains, with the message above, and writes no record."""
    import json

    import fusebench

    original = TupleSampleOptimiser.epoch_update
    calls = []

    def old(self, optimizer, epoch, train_batches, val_batch, curves=None, autocast=None):
        calls.append(epoch)
        return original(self, optimizer, epoch, train_batches, val_batch, curves, autocast)

    monkeypatch.setattr(TupleSampleOptimiser, "epoch_update", old)
    tiny = {"dataset.synthetic_spec": {"num_samples": 128, "seed": 0}, "pretrain.epochs": 1, "downstream.epochs": 1,
            "pretrain.methods.tuple_infonce.sample_optimisation": True}
    fusebench.run("quickstart", objective="tuple_infonce", seeds=[0], out=tmp_path / "a", progress=False,
                  overrides=tiny)
    record = json.loads((tmp_path / "a" / "quickstart" / "tuple_infonce" / "seed0" / "run.json").read_text())
    assert calls == [0] and len(record["curves"]["tuple_reward_best"]) == 1
    with pytest.raises(ConfigError, match=r"^pretraining extension fusebench\.components\.tuple_optim:"
                                          r"TupleSampleOptimiser: its epoch_update takes no 'scaler' keyword, which "
                                          r"precision 16-mixed passes"):
        fusebench.run("quickstart", objective="tuple_infonce", seeds=[0], out=tmp_path / "b", progress=False,
                      overrides={**tiny, "precision": "16-mixed"})
    assert calls == [0] and not list((tmp_path / "b").rglob("run.json"))
