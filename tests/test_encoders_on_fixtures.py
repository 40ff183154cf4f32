"""Every encoder family runs forward/backward on a real fixture sample read through its adapter."""

from __future__ import annotations

import math

import numpy as np
import torch

from fusebench import datasets, encoders
from fusebench.datasets.collate import collate
from fusebench.components.model import for_backbone

NOCACHE = {"use_cache": False, "augment": False}


def _step(model, batch) -> float:
    model.train()
    out = model(batch)
    loss = model.task_loss(out, batch)
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert grads and all(g is not None and torch.isfinite(g).all() for g in grads)
    return float(loss.detach())


def test_esanet_on_nyuv2_mtan_fixture(fixtures_dir) -> None:
    ds = datasets.build("nyuv2", root=fixtures_dir / "nyuv2" / "mtan", split="test", **NOCACHE)
    batch = collate([ds[0], ds[0]], ds.modalities)  # 2 copies: batch norm needs > 1 value in training
    model = for_backbone(encoders.build("esanet", modalities={"rgb": 3, "depth": 1, "normal": 3}, size="tiny",
                                        num_classes=13))
    logits = model(batch)
    assert tuple(logits.shape) == (2, 13, 288, 384)
    assert model.embed(batch).shape[:2] == (3, 2)
    # the loss ignores the fixture's void pixels (-1): cross entropy over the labelled pixels only
    target = batch["target"]
    labelled = int((target >= 0).sum())
    assert 0 < labelled < target.numel()
    loss = _step(model, batch)
    assert math.isfinite(loss) and loss > 0


def test_eeg_conv_on_sleep_edf_fixture(fixtures_dir) -> None:
    ds = datasets.build("sleep_edf", root=fixtures_dir / "sleep_edf",
                        pairs=[("short_psg.edf", "SC4001EC-Hypnogram.edf")], **NOCACHE)
    batch = collate([ds[i] for i in range(4)], ds.modalities)
    model = for_backbone(encoders.build("eeg_conv", modalities=list(ds.modalities), size="tiny", num_classes=5))
    assert model.embed(batch).shape[:2] == (len(ds.modalities), 4)
    assert torch.equal(batch["target"], torch.zeros(4, dtype=torch.long))  # the fixture's 10 epochs are all W
    _step(model, batch)


def test_seq_transformer_on_chsims_fixture(fixtures_dir) -> None:
    ds = datasets.build("chsims", root=fixtures_dir / "ch_sims" / "feature_aligned.pkl", layout="feature_file",
                        label=0.4, unimodal_labels={"T": 0.2, "A": 0.4, "V": 0.6}, **NOCACHE)
    batch = collate([ds[0], ds[0]], ds.modalities)
    model = for_backbone(encoders.build("seq_transformer", modalities={"text": 768, "audio": 25, "vision": 171},
                                        size="tiny"))
    _step(model, batch)


def test_votenet_on_sunrgbd_fixture(fixtures_dir) -> None:
    ds = datasets.build("sunrgbd", root=fixtures_dir / "sunrgbd" / "mmdet3d_v0_trainval", split="train",
                        num_points=512, **NOCACHE)
    batch = collate([ds[0]], ds.modalities)
    model = for_backbone(encoders.build("votenet", config="tiny"))
    out = model(batch)
    assert np.isfinite(float(model.task_loss(out, batch).detach()))
    dets = model.predict(out, batch)
    assert set(dets[0]) == {"boxes", "scores", "labels"} and dets[0]["boxes"].shape[-1] == 7
