"""The EMA teacher (BYOL; the M3G paper's Sec. 4 scheme) and the student/teacher view rotation, as
pretraining methods (:mod:`fusebench.spec.methods`).

``ema_teacher`` — a frozen copy of the student's encoder and projection heads tracking them by
exponential moving average (``fusebench.encoders.heads.EMATeacher``: cosine momentum schedule from
``momentum`` to 1 over the run's optimisation steps), updated after every optimisation step. BYOL
objectives (called as ``pairs``) name it: their loss is the objective on the student's predictions
(projection + predictor) against the teacher's projections, per modality. ``enabled: true`` attaches
the teacher to any other objective too; a view objective then trains in the view rotation below. An objective
whose loss never reads a teacher (``uses_teacher = False``: TupleInfoNCE) refuses it (``read_by``; the runner's
``check_methods_read``, before any cell).

``view_rotation`` — the M3G paper's Sec. 4 scheme (Piran et al. 2024, arXiv:2405.19532) for any view
objective (every ``MultiViewObjective`` with ``input_kind = "views"`` names it): the loss is the
mean over i = 1..k of the objective on views where view i is the teacher's projection (no predictor,
no gradient) and the other k - 1 are the student's projection + predictor. On with ``enabled: true``
or with ``ema_teacher: {enabled: true}``.

Shapes: embeddings [k, n, F] -> projections z [k, n, P] -> predictions [k, n, P].
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from fusebench.encoders.heads import EMATeacher, Predictor
from fusebench.spec.methods import PretrainMethod, options_of, register


def _add_predictor(pre: nn.Module, hidden: int | None = None) -> None:
    """One predictor per modality on the Pretrainer (``pre.predictor``), shared by the methods here; its
    hidden width is ``hidden`` (default: ``pretrain.projection_hidden``)."""
    if getattr(pre, "predictor", None) is None:
        p, h = pre.cfg.projection_dim, hidden or pre.cfg.projection_hidden
        pre.predictor = nn.ModuleDict({m: Predictor(p, h) for m in pre.model.modalities})


def _teacher_projections(pre: nn.Module, batch: dict[str, Any]) -> Tensor:
    with torch.no_grad():
        t = pre.teacher.module
        return pre.project(t["model"].embed(batch), t["proj"])  # [k, n, P]


@dataclass
class EMATeacherOptions:
    enabled: bool = False  # attach the teacher to objectives that do not name it (views: the view rotation)
    momentum: float = 0.99  # base momentum of the cosine schedule (M3G paper: 0.99), in [0, 1)
    # BYOL's predictor: hidden width of its two-layer MLP (None: pretrain.projection_hidden, the width it had
    # before this option existed); a grid key of byol_* as methods.ema_teacher.predictor_hidden
    predictor_hidden: int | None = None


@register
class EMATeacherMethod(PretrainMethod):
    """EMA teacher of the encoder + projection heads; BYOL's predictions-vs-teacher-targets loss."""

    id: ClassVar[str] = "ema_teacher"
    Options: ClassVar[type] = EMATeacherOptions
    build_order: ClassVar[int] = 10  # after every student head: the copy is of the student as built
    #: an objective with ``uses_teacher = False`` (TupleInfoNCE) never reads the teacher: refused for it
    read_by: ClassVar[str | None] = "uses_teacher"
    #: its own loss is BYOL's, for "pairs" objectives, which take no mask (a run with missing views refuses them
    #: before this is asked); for a view objective it computes no loss (the objective's masked call does)
    honours_mask: ClassVar[bool] = True

    @classmethod
    def wanted(cls, objective: nn.Module, declared: bool, options: Any, cfg: Any) -> bool:
        undeclared_pairs = not hasattr(objective, "pretrain_methods") and getattr(objective, "input_kind", "") == "pairs"
        return declared or undeclared_pairs or options.enabled

    @classmethod
    def check(cls, options: Any) -> list[str]:
        problems = [] if 0.0 <= options.momentum < 1.0 else [f"momentum must be in [0, 1), got {options.momentum!r}"]
        if options.predictor_hidden is not None and options.predictor_hidden < 1:
            problems.append(f"predictor_hidden must be a positive width (or null), got {options.predictor_hidden!r}")
        return problems

    def __init__(self, options: Any) -> None:
        super().__init__(options)
        self.pairs = False

    def build(self, pre: nn.Module) -> None:
        self.pairs = pre.kind == "pairs"  # BYOL: this method computes the loss
        if self.pairs:
            _add_predictor(pre, self.options.predictor_hidden)
        student = nn.ModuleDict({"model": pre.model, "proj": pre.proj})
        pre.teacher = EMATeacher(student, self.options.momentum, max(1, pre.total_steps))

    def loss(self, pre, batch, emb, z, mask, gather):
        if not self.pairs:
            return None
        pred = pre.project(z, pre.predictor)
        zt = _teacher_projections(pre, batch)
        return pre.objective(gather(pred), gather(zt))

    def after_step(self, pre: nn.Module, step: int) -> None:
        """EMA step of the teacher after optimisation step ``step`` (cosine momentum schedule)."""
        pre.teacher.update(nn.ModuleDict({"model": pre.model, "proj": pre.proj}), step)


@dataclass
class ViewRotationOptions:
    enabled: bool = False  # M3G paper Sec. 4: view i from the teacher, the k - 1 others from the student


@register
class ViewRotation(PretrainMethod):
    """M3G Sec. 4: mean over i of the view loss with view i from the EMA teacher."""

    id: ClassVar[str] = "view_rotation"
    Options: ClassVar[type] = ViewRotationOptions
    requires: ClassVar[tuple[str, ...]] = ("ema_teacher",)
    #: the loss calls the objective on views mixing teacher and student, without the presence mask
    honours_mask: ClassVar[bool] = False

    @classmethod
    def wanted(cls, objective: nn.Module, declared: bool, options: Any, cfg: Any) -> bool:
        views = getattr(objective, "input_kind", "views") == "views"
        named = declared or not hasattr(objective, "pretrain_methods")  # an objective naming no method: by its kind
        return views and named and (options.enabled or options_of(cfg, "ema_teacher").enabled)

    def build(self, pre: nn.Module) -> None:
        # the predictor is ema_teacher's (which this method requires): its width option holds here too (the
        # rotation builds first, so the predictor it makes is the one the run keeps)
        _add_predictor(pre, options_of(pre.cfg, "ema_teacher").predictor_hidden)

    def loss(self, pre, batch, emb, z, mask, gather):
        pred = pre.project(z, pre.predictor)
        zt = _teacher_projections(pre, batch)
        losses = []
        for i in range(z.shape[0]):  # view i from the teacher, the others from the student
            views = torch.cat([pred[:i], zt[i : i + 1], pred[i + 1 :]])
            losses.append(pre.objective(gather(views)))
        return torch.stack(losses).mean()


__all__ = ["EMATeacherMethod", "EMATeacherOptions", "ViewRotation", "ViewRotationOptions"]
