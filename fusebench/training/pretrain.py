"""The pretraining module: encoder + projection heads (+ predictor, EMA teacher, tuple fusion) + objective.

How each objective is fed (``objective.input_kind``):

* ``views`` — per-modality pooled embeddings ``model.embed(batch)`` [k, n, F] go through one
  projection head per modality to [k, n, P] and into the objective (``mask`` = the batch's presence
  mask for objectives that honour it). With ``m3g_view_rotation`` or ``ema_teacher`` (M3G paper Sec. 4) the loss is the
  mean over i = 1..k of the objective on views where view i comes from the EMA teacher (projection,
  no predictor, no gradient) and the other k - 1 from the student (projection + predictor).
* ``pairs`` (BYOL) — student predictions (projection + predictor) against EMA-teacher projections.
* ``tuple`` (TupleInfoNCE, Liu et al. 2021 Sec. 3) — per-modality projections are concatenated and
  fused by an MLP into one tuple embedding. Two augmented copies (Gaussian noise of std
  ``embedding_noise`` and dropout on the per-modality embeddings) give anchor and positive; the
  negatives are the other samples' tuples plus, when ``tuple_disturbed``, the k-disturbed tuples of
  every modality (modality l swapped by a derangement), weighted by ``tuple_alpha`` (paper Eq. 2).
  ``self.tuple_alpha`` [K + 1] and ``self.tuple_beta`` [K] (per-modality noise std, initially
  ``embedding_noise``) are attributes so that ``fusebench.training.tuple_optim`` (Algorithm 1) can set them.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from fusebench.encoders.heads import EMATeacher, Predictor, ProjectionHead
from fusebench.training.config import PretrainConfig


class Pretrainer(nn.Module):
    """Encoder + heads + objective; ``forward(batch)`` is the pretraining loss of one batch.
    ``total_steps`` sets the EMA teacher's cosine momentum schedule."""

    def __init__(self, model: nn.Module, objective: nn.Module, cfg: PretrainConfig, total_steps: int = 1) -> None:
        super().__init__()
        self.model = model
        self.objective = objective
        self.cfg = cfg
        self.kind = getattr(objective, "input_kind", "views")
        mods = list(model.modalities)
        f, p, h = model.num_features, cfg.projection_dim, cfg.projection_hidden
        self.proj = nn.ModuleDict({m: ProjectionHead(f, h, p) for m in mods})
        # student/teacher view rotation (M3G paper Sec. 4), for any view objective; ema_teacher turns it on
        self.rotation = self.kind == "views" and (cfg.m3g_view_rotation or cfg.ema_teacher)
        self.use_teacher = self.kind == "pairs" or self.rotation or cfg.ema_teacher
        self.predictor = nn.ModuleDict({m: Predictor(p, h) for m in mods}) if (self.kind == "pairs" or self.rotation) else None
        self.fusion = ProjectionHead(p * len(mods), h, p) if self.kind == "tuple" else None
        # TupleInfoNCE hyper-parameters (Sec. 4.3); tuple_optim's sample optimisation overwrites them
        self.tuple_alpha: list[float] | None = list(cfg.tuple_alpha) if cfg.tuple_alpha else None  # [K + 1]
        self.tuple_beta: list[float] = [float(cfg.embedding_noise)] * len(mods)  # [K] noise std per modality
        self.teacher: EMATeacher | None = None
        if self.use_teacher:
            student = nn.ModuleDict({"model": model, "proj": self.proj})
            self.teacher = EMATeacher(student, cfg.ema_momentum, max(1, total_steps))

    # -- pieces -------------------------------------------------------------------------------
    def student_parameters(self) -> list[nn.Parameter]:
        return [q for name, q in self.named_parameters() if not name.startswith("teacher.")]

    def project(self, emb: Tensor, heads: nn.ModuleDict) -> Tensor:
        return torch.stack([heads[m](emb[l]) for l, m in enumerate(self.model.modalities)])

    def optimise(self, loss: Tensor, optimizer: torch.optim.Optimizer, all_reduce: bool = True) -> None:
        """One optimisation step on ``loss``: backward, gradient all-reduce across ranks (distributed
        runs, unless DistributedDataParallel already reduced them: ``all_reduce=False``), optimizer
        step. Shared by the training loop and the TupleInfoNCE candidate updates."""
        from fusebench.training import distributed

        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if all_reduce:
            distributed.average_gradients(self.student_parameters())
        optimizer.step()

    def update_teacher(self, step: int) -> None:
        """EMA step of the teacher after optimisation step ``step`` (cosine momentum schedule)."""
        if self.teacher is not None:
            self.teacher.update(nn.ModuleDict({"model": self.model, "proj": self.proj}), step)

    def _mask(self, batch: dict[str, Any]) -> Tensor | None:
        present = batch.get("present")
        if present is None or bool(present.all()):
            return None
        idx = [batch["names"].index(m) for m in self.model.modalities]
        return present[idx]

    # -- the loss -------------------------------------------------------------------------------
    def forward(self, batch: dict[str, Any], gather=None) -> Tensor:
        """Pretraining loss of one batch. ``gather`` (distributed) maps [k, n, d] -> [k, N, d]."""
        gather = gather or (lambda t: t)
        emb = self.model.embed(batch)  # [k, n, F]
        z = self.project(emb, self.proj)  # [k, n, P]
        mask = self._mask(batch)
        if self.kind == "views" and not self.rotation:
            kw = {"mask": gather(mask.unsqueeze(-1)).squeeze(-1)} if mask is not None else {}
            return self.objective(gather(z), **kw)
        if self.kind in ("pairs",) or self.rotation:
            pred = self.project(z, self.predictor)
            with torch.no_grad():
                t = self.teacher.module
                zt = self.project(t["model"].embed(batch), t["proj"])
            if self.kind == "pairs":
                return self.objective(gather(pred), gather(zt))
            k = z.shape[0]
            losses = []
            for i in range(k):  # M3G Sec. 4: view i from the teacher, the others from the student
                views = torch.cat([pred[:i], zt[i : i + 1], pred[i + 1 :]])
                losses.append(self.objective(gather(views)))
            return torch.stack(losses).mean()
        if self.kind == "tuple":
            return self._tuple_loss(emb, gather)
        raise ValueError(f"unknown objective input kind {self.kind!r}")

    def _fuse(self, emb: Tensor) -> Tensor:
        z = self.project(emb, self.proj)  # [k, n, P]
        return self.fusion(torch.cat(list(z), dim=-1))

    def _tuple_loss(self, emb: Tensor, gather) -> Tensor:
        from fusebench.objectives.tuple_infonce import assemble_negatives, disturbed_negatives

        emb = gather(emb)  # [k, N, F]: the global batch
        k = emb.shape[0]
        if len(self.tuple_beta) != k:
            raise ValueError(f"tuple_infonce: needs k = {k} augmentation strengths beta, got {self.tuple_beta}")
        beta = torch.tensor(self.tuple_beta, device=emb.device).view(k, 1, 1)  # [k, 1, 1]

        def augment(e: Tensor) -> Tensor:  # e: [k, N, F]; modality l gets noise of std beta_l
            e = e + beta.to(e.dtype) * torch.randn_like(e)
            return nn.functional.dropout(e, p=0.1, training=self.training)

        anchor = self._fuse(augment(emb))  # [N, P]
        positive = self._fuse(augment(emb))
        disturbed: list[Tensor] = []
        alpha: list[float] = [1.0]
        if self.cfg.tuple_disturbed:
            alpha = list(self.tuple_alpha or [1.0] * (k + 1))
            if len(alpha) != k + 1:
                raise ValueError(f"pretrain.tuple_alpha needs k + 1 = {k + 1} weights (plain, then one per modality)")
            for l in range(k):  # k-disturbed tuples: modality l taken from another sample (a derangement)
                disturbed.append(self._fuse(augment(torch.stack(disturbed_negatives(list(emb), l)))))
        negatives, weights = assemble_negatives(positive, disturbed, alpha)
        return self.objective(anchor, positive, negatives, weights=weights)
