"""The pretraining module: view rotation with an EMA teacher (M3G Sec. 4), BYOL wiring (the mlp model itself
is covered with the other encoders in test_encoders.py)."""

from __future__ import annotations

import torch

from fusebench import objectives
from fusebench.encoders.mlp import MLPEncoder
from fusebench.spec.config import PretrainConfig
from fusebench.engine.pretrain import Pretrainer

DIMS = {"a": 5, "b": 6, "c": 7}


def _batch(n: int = 8, seed: int = 1) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {"names": list(DIMS), "modalities": {m: torch.randn(n, d, generator=g, dtype=torch.float64) for m, d in DIMS.items()},
            "present": torch.ones(3, n, dtype=torch.bool), "target": torch.randint(0, 4, (n,), generator=g)}


def _pretrainer(objective: str, **methods) -> Pretrainer:
    torch.manual_seed(0)
    model = MLPEncoder(DIMS, num_features=8, hidden=16).double()
    conf = PretrainConfig(projection_dim=8, projection_hidden=16, methods=methods)
    return Pretrainer(model, objectives.build(objective), conf, total_steps=10).double()


def test_view_rotation_is_mean_over_teacher_positions() -> None:
    pre = _pretrainer("infonce_pwe", view_rotation={"enabled": True})
    batch = _batch()
    with torch.no_grad():  # make the teacher differ from the student
        for p in pre.teacher.parameters():
            p.add_(0.05)
    loss = pre(batch)
    # independent: student predictions for every view, teacher projection for view i, loss averaged over i
    obj = objectives.build("infonce_pwe")
    student = [pre.predictor[m](pre.proj[m](pre.model.encoders[m](batch["modalities"][m]))) for m in DIMS]
    teacher = [pre.teacher.module["proj"][m](pre.teacher.module["model"].encoders[m](batch["modalities"][m])) for m in DIMS]
    expected = sum(obj(torch.stack([teacher[l] if l == i else student[l] for l in range(3)])) for i in range(3)) / 3
    torch.testing.assert_close(loss, expected)
    loss.backward()
    assert all(p.grad is None for p in pre.teacher.parameters())
    assert all(p.grad is not None for p in pre.predictor.parameters())


def test_ema_teacher_flag_turns_rotation_on_and_updates_by_cosine_momentum() -> None:
    pre = _pretrainer("m3g", ema_teacher={"enabled": True, "momentum": 0.9})
    assert "view_rotation" in pre.methods and pre.teacher is not None
    before = {n: p.detach().clone() for n, p in pre.teacher.module.named_parameters()}
    with torch.no_grad():
        for p in pre.model.parameters():
            p.add_(1.0)
    pre.after_step(step=0)  # momentum at step 0 of 10 is the base 0.9
    student = dict(pre.model.named_parameters())
    for name, p in pre.teacher.module["model"].named_parameters():
        torch.testing.assert_close(p, 0.9 * before[f"model.{name}"] + 0.1 * student[name].detach())


def test_byol_uses_teacher_targets_without_gradient() -> None:
    pre = _pretrainer("byol_pwe")
    batch = _batch()
    loss = pre(batch)
    obj = objectives.build("byol_pwe")
    pred = torch.stack([pre.predictor[m](pre.proj[m](pre.model.encoders[m](batch["modalities"][m]))) for m in DIMS])
    with torch.no_grad():
        targ = torch.stack([pre.teacher.module["proj"][m](pre.teacher.module["model"].encoders[m](batch["modalities"][m]))
                            for m in DIMS])
    torch.testing.assert_close(loss, obj(pred, targ))


def test_the_view_rotation_builds_its_predictor_at_the_teacher_s_width() -> None:
    """``ema_teacher.predictor_hidden`` sets the predictor's width under the view rotation too (the rotation built
    the predictor first, at ``projection_hidden``, so the option changed the config hash and nothing else)."""
    rotated = _pretrainer("infonce_pwe", view_rotation={"enabled": True}, ema_teacher={"predictor_hidden": 7})
    byol = _pretrainer("byol_pwe", ema_teacher={"predictor_hidden": 7})
    for pre in (rotated, byol):
        assert {m: p.hidden_dim for m, p in pre.predictor.items()} == {m: 7 for m in DIMS}
    default = _pretrainer("infonce_pwe", view_rotation={"enabled": True})
    assert {p.hidden_dim for p in default.predictor.values()} == {16}  # projection_hidden
