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

from fusebench.components.micro_batches import chunk_bounds
from fusebench.encoders.heads import ProjectionHead
from fusebench.runtime.utils import value_checks
from fusebench.spec.config import PretrainConfig


class Pretrainer(nn.Module):
    """Encoder + heads + objective; ``forward(batch)`` is the pretraining loss of one batch.
    ``total_steps`` sets the EMA teacher's cosine momentum schedule.

    ``micro_batch`` (``pretrain.per_objective.<id>.micro_batch``): the view loss of a batch of n samples is the
    size-weighted mean of the objective over consecutive chunks of ``micro_batch`` samples,
    ``L = sum_c (n_c / n) * objective(z[:, chunk_c])`` (with missing views, a chunk in which the objective has no
    usable term is left out and ``n`` is the kept chunks' samples; a batch with none is refused as the objective
    refuses it, :meth:`mask_problem`): the encoder sees the whole batch and one optimiser
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

    def host_batch(self, batch: Any) -> Any:
        """``batch`` on the host, before its copy to the device, with ``present_all``: whether its presence
        mask is full (read here, on the CPU, so that the step does not read it back from the device). With a
        missing view, also ``mask_checked`` (whether the masks the step hands the objective were tested here)
        and ``mask_problem``: the error a direct call of the objective raises for them (e.g. no usable term),
        found on the CPU (:meth:`check_masks_on_host`; inside the loop's steps the objectives skip the tests
        that read the device); the step raises it first thing (:meth:`forward`), as the objective did. With
        micro-batches some of which have no usable term (and others do), ``mask_chunks``: per chunk, whether the
        objective is called on it (:meth:`chunk_problems`)."""
        if isinstance(batch, dict) and isinstance(batch.get("present"), Tensor) and "present_all" not in batch:
            if bool(batch["present"].all()):
                return {**batch, "present_all": True}
            checked, problem, kept = self.check_masks_on_host(batch)
            return {**batch, "present_all": False, "mask_checked": checked, "mask_problem": problem,
                    **({"mask_chunks": kept} if kept is not None else {})}
        return batch

    def _masked_call(self) -> bool:
        """Whether the objective of a batch with a missing view gets the mask: a view objective that honours masks
        (``mask_problem``), every method of the run leaving the loss to its masked call or passing the mask on."""
        return (self.kind == "views" and callable(getattr(self.objective, "mask_problem", None))
                and all(getattr(m, "honours_mask", False) for m in self.methods.values()))

    def chunks(self, n: int) -> list[tuple[int, int]]:
        """The ``(lo, hi)`` sample ranges of the objective's calls on a batch of ``n`` (gathered) samples:
        the whole batch, or its micro-batches (:func:`fusebench.components.micro_batches.chunk_bounds`: a last chunk of
        one sample joins the one before)."""
        return chunk_bounds(n, self.micro_batch)

    def chunk_problems(self, mask: Tensor) -> list[str | None]:
        """Per chunk of ``mask`` [k, n] the objective is called with (:meth:`chunks`), the error it raises in a direct
        call (its ``mask_problem``: e.g. no sample with two views present), or None; computed where ``mask`` is."""
        return [self.objective.mask_problem(mask[:, lo:hi]) for lo, hi in self.chunks(mask.shape[1])]

    def mask_problem(self, mask: Tensor) -> str | None:
        """The error of a step on ``mask`` [k, n]: that of its first chunk when no chunk has a usable term, else
        None. A micro-batch without one is left out of the loss and the others weighted by their sizes
        (:meth:`forward`): with missing views a chunk of a few samples often has no sample with two views, which
        stopped the run although the batch had many."""
        problems = self.chunk_problems(mask)
        return problems[0] if all(problems) else None

    @staticmethod
    def _kept(problems: list[str | None]) -> list[bool] | None:
        """Per chunk, whether the objective is called on it; None when it is called on every chunk."""
        return [p is None for p in problems] if any(problems) else None

    def check_masks_on_host(self, batch: dict[str, Any]) -> tuple[bool, str | None, list[bool] | None]:
        """(settled, problem, kept): :meth:`mask_problem` of the CPU batch's mask, whether that settles it, and
        per micro-batch whether the objective is called on it (None: on every chunk). Not in a distributed run,
        where the objective sees every rank's shard gathered: a shard that passes settles it (the gathered batch
        passes too) unless the batch is cut into micro-batches; otherwise the step tests the gathered mask (one
        read of the device, on that rank; the gathered mask is the same on every rank, and every rank gathers
        one, a complete shard its full mask, so the ranks' collectives match)."""
        if not self._masked_call():
            return True, None, None  # the objective does not get the mask (or tests nothing)
        from fusebench.runtime import distributed

        mask = self._mask({**batch, "present_all": False})
        if not distributed.is_distributed():
            problems = self.chunk_problems(mask)
            return True, (problems[0] if all(problems) else None), self._kept(problems)
        if self.micro_batch is None and self.objective.mask_problem(mask) is None:
            return True, None, None
        return False, None, None

    def _mask(self, batch: dict[str, Any]) -> Tensor | None:
        """The presence mask in the model's modality order (None when nothing is missing): integer indices of
        the batch's rows and a stack on the device, not an index tensor made from a Python list (a copy from
        the host at every step)."""
        present = batch.get("present")
        if present is None:
            return None
        full = batch.get("present_all")  # the host's answer (host_batch), else read here
        if full if full is not None else bool(present.all()):
            return None
        idx = [batch["names"].index(m) for m in self.model.modalities]
        if idx == list(range(present.shape[0])):
            return present
        return torch.stack([present[i] for i in idx])

    # -- the loss -------------------------------------------------------------------------------
    def forward(self, batch: dict[str, Any], gather=None) -> Tensor:
        """Pretraining loss of one batch. ``gather`` (distributed) maps [k, n, d] -> [k, N, d]; a sharded batch's
        ``shard_sizes`` (every rank's shard size, from the loader) go to it, so it exchanges no sizes."""
        sizes = batch.get("shard_sizes") if isinstance(batch, dict) else None
        sharded = gather is not None
        if gather is not None and sizes is not None:
            gather = functools.partial(gather, sizes=tuple(sizes))
        gather = gather or (lambda t: t)
        problem = batch.get("mask_problem") if isinstance(batch, dict) else None
        if problem:  # found on the CPU batch (host_batch): the error the objective raises in a direct call
            raise ValueError(problem)
        emb = self.model.embed(batch)  # [k, n, F]
        z = self.project(emb, self.proj)  # [k, n, P]
        mask = self._mask(batch)
        for method in self.methods.values():  # a method that owns the loss (tuple fusion, teacher targets, rotation)
            loss = method.loss(self, batch, emb, z, mask, gather)
            if loss is not None:
                return loss
        if self.kind == "views":
            if sharded and mask is None and isinstance(batch.get("present"), Tensor) and self._masked_call():
                # a complete shard gathers its (full) mask too: every rank takes part in the same collectives, whether
                # or not its own shard misses a view (the objective then sees the gathered batch's mask)
                mask = torch.ones(z.shape[:2], dtype=torch.bool, device=z.device)
            z = gather(z)
            mask = gather(mask.unsqueeze(-1)).squeeze(-1) if mask is not None else None
            checked = batch.get("mask_checked")
            if checked is None and batch.get("present_all"):  # a complete shard passes, and settles the gathered
                checked = self.micro_batch is None            # batch unless a micro-batch mixes the ranks' samples
            n = z.shape[1]
            chunked = self.micro_batch is not None and n > self.micro_batch
            kept = batch.get("mask_chunks") if checked else None  # the host's answer, per micro-batch
            if mask is not None and not checked and (chunked or not value_checks()) and self._masked_call():
                # a mask the host did not settle (a distributed batch, or a batch that skipped host_batch): tested
                # here, one read of the device; inside the loop's deferred checks always, outside them where the
                # micro-batches to leave out must be known (a whole batch: the objective tests its mask itself)
                problems = self.chunk_problems(mask)
                if all(problems):
                    raise ValueError(problems[0])
                kept = self._kept(problems)
            if not chunked:
                return self.objective(z, **({"mask": mask} if mask is not None else {}))
            # the mean of the micro-batches' losses, each weighted by its size; a micro-batch without a usable term
            # (missing views) is left out and the others share its weight
            calls = [c for i, c in enumerate(self.chunks(n)) if kept is None or kept[i]]
            m = sum(hi - lo for lo, hi in calls)
            total = z.new_zeros((), dtype=torch.float32)
            for lo, hi in calls:
                kw = {"mask": mask[:, lo:hi]} if mask is not None else {}
                total = total + self.objective(z[:, lo:hi], **kw).float() * ((hi - lo) / m)
            return total
        raise ValueError(f"objective input kind {self.kind!r}: no pretraining method computes its loss "
                         f"(attached: {sorted(self.methods) or 'none'}); name one in the objective's pretrain_methods")
