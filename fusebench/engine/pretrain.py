"""The pretraining module: encoder + projection heads + objective, and the pretraining methods the
objective builds on (:mod:`fusebench.spec.methods`).

The Pretrainer knows no objective by name. It embeds a batch per modality (``model.embed(batch)``
[k, n, F]) and projects it with one projection head per modality to [k, n, P]; the methods attached
to the run (:func:`fusebench.spec.methods.attach`: those the objective names in
``pretrain_methods``, plus those switched on by their options) add their modules when it is built
and compute the loss where they own it:

* ``tuple_infonce`` (:mod:`fusebench.components.tuple_method`) — the tuple fusion head, augmentation and
  k-disturbed negatives of TupleInfoNCE (called as ``tuple``); Algorithm 1 as an epoch extension;
* ``ema_teacher`` (:mod:`fusebench.components.teacher`) — the EMA teacher, updated after every
  optimisation step; BYOL (called as ``pairs``): student predictions against teacher projections;
* ``view_rotation`` (same module) — the M3G paper's Sec. 4 rotation for any view objective.

Without a method owning the loss, an objective called as ``views`` gets the projections [k, n, P]
(``mask`` = the batch's presence mask for objectives that honour it).
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch import Tensor, nn

from fusebench.encoders.heads import ProjectionHead
from fusebench.spec.config import PretrainConfig


class Pretrainer(nn.Module):
    """Encoder + heads + objective; ``forward(batch)`` is the pretraining loss of one batch.
    ``total_steps`` sets the EMA teacher's cosine momentum schedule.

    ``micro_batch`` (``pretrain.per_objective.<id>.micro_batch``): the view loss of a batch of n samples is the
    size-weighted mean of the objective over consecutive chunks of ``micro_batch`` samples,
    ``L = sum_c (n_c / n) * objective(z[:, chunk_c])``: the encoder sees the whole batch and one optimiser
    step is taken per batch, so steps and samples seen equal those of the common batch while the loss's
    own cost (M3G's n^k) is that of the chunk. Only for objectives whose loss the plain view path computes
    (not one owned by a pretraining method: TupleInfoNCE, BYOL, the view rotation)."""

    def __init__(self, model: nn.Module, objective: nn.Module, cfg: PretrainConfig, total_steps: int = 1,
                 micro_batch: int | None = None) -> None:
        super().__init__()
        from fusebench.spec import methods

        self.model = model
        self.objective = objective
        self.cfg = cfg
        self.kind = getattr(objective, "input_kind", "views")
        self.total_steps = int(total_steps)
        mods = list(model.modalities)
        f, p, h = model.num_features, cfg.projection_dim, cfg.projection_hidden
        self.proj = nn.ModuleDict({m: ProjectionHead(f, h, p) for m in mods})
        #: the methods of this run, in build order (id -> instance); they add their heads here
        self.methods: dict[str, Any] = {}
        for method in methods.attach(objective, cfg):
            method.build(self)
            self.methods[method.id] = method
        if micro_batch is not None and (int(micro_batch) < 2 or self.kind != "views"
                                        or any(type(m).loss is not methods.PretrainMethod.loss
                                               for m in self.methods.values())):
            raise ValueError(f"micro_batch={micro_batch}: needs an integer >= 2 and an objective whose loss is the "
                             f"plain view loss (input kind {self.kind!r}, methods {sorted(self.methods) or 'none'})")
        self.micro_batch = int(micro_batch) if micro_batch else None

    # -- pieces -------------------------------------------------------------------------------
    def student_parameters(self) -> list[nn.Parameter]:
        return [q for name, q in self.named_parameters() if not name.startswith("teacher.")]

    def project(self, emb: Tensor, heads: nn.ModuleDict) -> Tensor:
        return torch.stack([heads[m](emb[l]) for l, m in enumerate(self.model.modalities)])

    def optimise(self, loss: Tensor, optimizer: torch.optim.Optimizer, all_reduce: bool = True,
                 scaler: torch.amp.GradScaler | None = None) -> None:
        """One optimisation step on ``loss``: backward, gradient all-reduce across ranks (distributed
        runs, unless DistributedDataParallel already reduced them: ``all_reduce=False``), optimizer
        step. Shared by the training loop and the TupleInfoNCE candidate updates. With a gradient
        ``scaler`` (precision ``16-mixed``) the loss is scaled before backward and the step is the
        scaler's (skipped when a gradient overflowed)."""
        from fusebench.runtime import distributed

        optimizer.zero_grad(set_to_none=True)
        (scaler.scale(loss) if scaler is not None else loss).backward()
        if all_reduce:
            distributed.average_gradients(self.student_parameters())
        if scaler is not None:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()

    def after_step(self, step: int) -> None:
        """What the methods do after optimisation step ``step`` (e.g. the EMA teacher's update)."""
        for method in self.methods.values():
            method.after_step(self, step)

    @staticmethod
    def host_batch(batch: Any) -> Any:
        """``batch`` on the host, before its copy to the device, with ``present_all``: whether its presence
        mask is full (read here, on the CPU, so that the step does not read it back from the device)."""
        if isinstance(batch, dict) and isinstance(batch.get("present"), Tensor) and "present_all" not in batch:
            return {**batch, "present_all": bool(batch["present"].all())}
        return batch

    def _mask(self, batch: dict[str, Any]) -> Tensor | None:
        present = batch.get("present")
        if present is None:
            return None
        full = batch.get("present_all")  # the host's answer (host_batch), else read here
        if full if full is not None else bool(present.all()):
            return None
        idx = [batch["names"].index(m) for m in self.model.modalities]
        return present[idx]

    # -- the loss -------------------------------------------------------------------------------
    def forward(self, batch: dict[str, Any], gather=None) -> Tensor:
        """Pretraining loss of one batch. ``gather`` (distributed) maps [k, n, d] -> [k, N, d]; a sharded batch's
        ``shard_sizes`` (every rank's shard size, from the loader) go to it, so it exchanges no sizes."""
        sizes = batch.get("shard_sizes") if isinstance(batch, dict) else None
        if gather is not None and sizes is not None:
            gather = functools.partial(gather, sizes=tuple(sizes))
        gather = gather or (lambda t: t)
        emb = self.model.embed(batch)  # [k, n, F]
        z = self.project(emb, self.proj)  # [k, n, P]
        mask = self._mask(batch)
        for method in self.methods.values():  # a method that owns the loss (tuple fusion, teacher targets, rotation)
            loss = method.loss(self, batch, emb, z, mask, gather)
            if loss is not None:
                return loss
        if self.kind == "views":
            z = gather(z)
            mask = gather(mask.unsqueeze(-1)).squeeze(-1) if mask is not None else None
            n = z.shape[1]
            if self.micro_batch is None or n <= self.micro_batch:
                return self.objective(z, **({"mask": mask} if mask is not None else {}))
            total = z.new_zeros((), dtype=torch.float32)
            for lo in range(0, n, self.micro_batch):  # a last chunk of one sample joins the one before
                hi = n if n - (lo + self.micro_batch) < 2 else lo + self.micro_batch
                kw = {"mask": mask[:, lo:hi]} if mask is not None else {}
                total = total + self.objective(z[:, lo:hi], **kw).float() * ((hi - lo) / n)
                if hi == n:
                    break
            return total
        raise ValueError(f"objective input kind {self.kind!r}: no pretraining method computes its loss "
                         f"(attached: {sorted(self.methods) or 'none'}); name one in the objective's pretrain_methods")
