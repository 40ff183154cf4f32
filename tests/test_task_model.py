"""The downstream model is a backbone plus the head its dataset's task builds on it
(``fusebench.tasks``, ``fusebench.components.model``): which head each task builds, the task-owned
losses and predictions worked out by hand, the class count, state-dict keys (and checkpoints of
encoders that held their head), and the runner's ``build_model``."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from fusebench import tasks
from fusebench.encoders import build
from fusebench.encoders.base import Backbone, MultimodalModel
from fusebench.encoders.eeg_conv import ChannelProbeHead
from fusebench.encoders.esanet import ESANetSegmentationHead
from fusebench.encoders.seq_transformer import LateFusionHead
from fusebench.encoders.votenet import VoteNetHead
from fusebench.components.model import TaskModel, for_backbone
from fusebench.components.model import build as with_task_head
from fusebench.engine.data import build_datasets
from fusebench.cells.standard import build_model


def _vector_batch(n: int = 6, seed: int = 0, num_classes: int = 3) -> dict:
    g = torch.Generator().manual_seed(seed)
    mods = {"a": torch.randn(n, 5, generator=g), "b": torch.randn(n, 4, generator=g)}
    return {"names": ["a", "b"], "modalities": mods, "masks": {}, "present": torch.ones(2, n, dtype=torch.bool),
            "target": torch.randint(0, num_classes, (n,), generator=g), "extra_targets": {}, "meta": [{}] * n}


def test_each_task_builds_its_head():
    mlp = build("mlp", modalities={"a": 5, "b": 4}, num_features=6, hidden=8, num_classes=3)
    head = tasks.create("classification").build_head(mlp)
    assert isinstance(head, tasks.ConcatLinearHead) and (head.in_features, head.out_features) == (12, 3)
    assert tasks.create("regression").build_head(mlp).out_features == 1
    eeg = build("eeg_conv", modalities=["c3", "c4"], size="tiny", num_classes=5)
    assert isinstance(tasks.create("classification").build_head(eeg), ChannelProbeHead)
    # an encoder's own head is for its task; for another task it gets that task's default
    assert isinstance(tasks.create("regression").build_head(eeg), tasks.ConcatLinearHead)
    seq = build("seq_transformer", modalities={"text": 6, "audio": 4}, size="tiny")
    assert isinstance(tasks.create("regression").build_head(seq), LateFusionHead)
    esa = build("esanet", size="tiny", num_classes=4)
    assert isinstance(tasks.create("segmentation").build_head(esa), ESANetSegmentationHead)
    assert isinstance(tasks.create("detection").build_head(build("votenet", config="tiny")), VoteNetHead)
    with pytest.raises(ValueError, match="MLPEncoder declares no head for task 'segmentation'"):
        tasks.create("segmentation").build_head(mlp)
    with pytest.raises(NotImplementedError, match="votenet"):
        tasks.create("detection").build_head(build("pointnet2", config="tiny"))


def test_default_classification_head_and_task_loss_by_hand():
    torch.manual_seed(0)
    model = for_backbone(build("mlp", modalities={"a": 5, "b": 4}, num_features=6, hidden=8, num_classes=3))
    assert isinstance(model, MultimodalModel) and isinstance(model.backbone, Backbone)
    batch = _vector_batch()
    z = model.embed(batch)  # [k, n, f]
    logits = model(batch)
    w, b = model.head.weight, model.head.bias
    torch.testing.assert_close(logits, torch.cat([z[0], z[1]], dim=1) @ w.T + b)  # linear on [z_a, z_b]
    logp = logits.log_softmax(-1)
    want = -logp[torch.arange(6), batch["target"]].mean()
    torch.testing.assert_close(model.task_loss(logits, batch), want)
    assert model.predict(logits, batch).tolist() == logits.argmax(-1).tolist()
    # head and encoder parameters split the model; the probe trains the head only
    head = {id(p) for p in model.head_parameters()}
    enc = {id(p) for p in model.encoder_parameters()}
    assert head == {id(w), id(b)} and not head & enc and len(head | enc) == len(list(model.parameters()))


def test_regression_task_loss_and_predictions():
    torch.manual_seed(0)
    model = for_backbone(build("mlp", modalities={"a": 5, "b": 4}, num_features=6, hidden=8), "regression")
    batch = _vector_batch()
    batch["target"] = torch.tensor([0.5, -1.0, 2.0, 0.0, 1.5, -0.25])
    out = model(batch)
    assert out.shape == (6,)
    assert model.task_loss(out, batch).item() == pytest.approx((out - batch["target"]).abs().mean().item())
    assert model.predict(out, batch).tolist() == pytest.approx(out.tolist())
    with pytest.raises(ValueError, match=r"regression: target must be \[n\]"):
        model.task_loss(out, {**batch, "target": torch.zeros(3)})


def test_detection_loss_and_predictions_are_the_heads():
    torch.manual_seed(0)
    backbone = build("votenet", config="tiny")
    model = for_backbone(backbone)
    batch = backbone.example_batch(dict(config="tiny"), batch_size=2, num_points=256)
    out = model(batch)
    assert model.task_loss(out, batch).item() == model.head.loss(out, batch).item()
    assert float(model.head.loss_terms["total"]) == pytest.approx(model.task_loss(out, batch).item())
    model.eval()
    with torch.no_grad():
        out = model(batch)
        preds, direct = model.predict(out, batch), model.head.predict(out, batch)
    assert len(preds) == 2 and all(torch.equal(p["boxes"], d["boxes"]) for p, d in zip(preds, direct))


def test_class_count_is_the_datasets_and_must_agree_with_the_encoder():
    ds = SimpleNamespace(task="classification", num_classes=7, id="toy")
    task = tasks.for_dataset(ds)
    assert not any(v is ds for v in vars(task).values())  # only facts of the dataset: cheap to deep-copy
    assert task.classes(build("mlp", modalities={"a": 2, "b": 2}, num_classes=7)) == 7
    with pytest.raises(ValueError, match="toy: the dataset has 7 classes but the encoder MLPEncoder was built "
                                         "for num_classes=4"):
        task.build_head(build("mlp", modalities={"a": 2, "b": 2}, num_classes=4))
    # no dataset: the encoder's option; neither: a clear error
    assert tasks.create("classification").classes(build("mlp", modalities={"a": 2}, num_classes=5)) == 5
    with pytest.raises(ValueError, match="number of classes is unknown"):
        tasks.create("classification").classes(build("seq_transformer", modalities={"text": 4}, size="tiny"))


def test_state_dict_keys_and_checkpoints_of_encoders_that_held_their_head():
    torch.manual_seed(0)
    model = for_backbone(build("esanet", size="tiny", num_classes=4))
    keys = list(model.state_dict())
    assert all(k.startswith(("backbone.encoders.", "head.")) for k in keys)
    assert "head.conv_out.weight" in keys and "backbone.encoders.rgb.conv1.weight" in keys
    # the flat keys an ESANet with its head wrote (encoders.*, fusions.*, conv_out.*, ...) load as they were
    flat = {k.removeprefix("backbone.").removeprefix("head."): v for k, v in model.state_dict().items()}
    torch.manual_seed(1)
    other = for_backbone(build("esanet", size="tiny", num_classes=4))
    parent = torch.nn.ModuleDict({"model": other})  # nested, as in the Pretrainer's checkpoint
    parent.load_state_dict({f"model.{k}": v for k, v in flat.items()})
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), other.state_dict().values()))
    # the MLP's head was already called head: head.weight stays, encoders.* moves under backbone.
    torch.manual_seed(0)
    mlp = for_backbone(build("mlp", modalities={"a": 5, "b": 4}, num_classes=3))
    old = {k.removeprefix("backbone."): v for k, v in mlp.state_dict().items()}
    assert "head.weight" in old and "encoders.a.0.weight" in old
    copy.deepcopy(mlp).load_state_dict(old)


def test_build_model_is_the_backbone_with_its_tasks_head():
    from fusebench import benchmarks
    from fusebench.sweep import runner

    spec = benchmarks.load("quickstart")
    ds = build_datasets(spec, True, None, 0, roles=("train",))["train"]
    torch.manual_seed(3)
    model = build_model(spec, ds)
    assert isinstance(model, TaskModel) and model.task.id == "classification" and model.task.num_classes == 4
    assert model.modalities == ["strong1", "strong2", "weak"] and model.num_features == 4
    # the head is drawn right after the backbone: the same weights as building the two by hand
    torch.manual_seed(3)
    backbone = build("mlp", modalities={"strong1": 16, "strong2": 16, "weak": 16}, num_features=4, hidden=64,
                     num_classes=4)
    by_hand = with_task_head(backbone, tasks.for_dataset(ds))
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), by_hand.state_dict().values()))
    assert isinstance(copy.deepcopy(model).task, tasks.ClassificationTask)  # the EMA teacher deep-copies it
    batch = {"names": ["strong1", "strong2", "weak"], "present": torch.ones(3, 2, dtype=torch.bool),
             "modalities": {m: torch.randn(2, 16) for m in model.modalities}, "target": torch.tensor([0, 3])}
    assert model(batch).shape == (2, 4) and F.cross_entropy(model(batch), batch["target"]).item() == pytest.approx(
        model.task_loss(model(batch), batch).item())
