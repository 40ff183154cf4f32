"""The scoring of the head-training protocols (``linear_probe``, ``finetune``; :mod:`fusebench.components.protocols`):
the dataset's task head trained on the cell's encoder, frozen (``linear_probe``: the encoder in eval mode, only
the head's parameters optimised) or trained with it (``finetune``, the protocol's ``trains_encoder``); the epoch
with the best validation primary metric kept, the test split scored once, missing-view tests on the selected
model; the cell builds the record from what it measured (:class:`fusebench.records.builder.Scores`)."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from fusebench.engine.data import few_shot_subset, make_loader
from fusebench.engine.evaluate import embeddings, evaluate
from fusebench.engine.loop import Phase, PhaseHooks, RunError, check_finite_state, run_phase
from fusebench.engine.optim import build_optimizer, build_scheduler
from fusebench.records.builder import Scores
from fusebench.runtime import utils
from fusebench.runtime.progress import progress_bar
from fusebench.spec import precision


def score(sc: Any, protocol: Any, pretrained_state: dict[str, torch.Tensor],
          ckpt: dict[str, Any] | None) -> Scores:
    """Train the task head on cell ``sc``'s (:class:`fusebench.cells.standard.StandardCell`) encoder under
    ``protocol`` and return what it measured. ``ckpt``: the downstream checkpoint a resumed cell
    continues from; ``pretrained_state``: the encoder as pretraining left it (for the diagnostics)."""
    spec, objective, seed, data, dev, cell, model = sc.spec, sc.objective, sc.seed, sc.data, sc.dev, sc.cell, sc.model
    ds_cfg = spec.downstream
    if ds_cfg.shots:
        data["train"] = few_shot_subset(data["train"], ds_cfg.shots, seed)
    probe = not protocol.trains_encoder
    if probe:
        for p in model.encoder_parameters():
            p.requires_grad_(False)
    params = list(model.head_parameters()) if probe else list(model.parameters())
    opt = build_optimizer(params, "adamw", ds_cfg.lr, ds_cfg.weight_decay, spec.speed.optimizer_impl)
    _, per_epoch = make_loader(data["train"], ds_cfg.batch_size, True, seed + 1, 0)
    total = per_epoch * ds_cfg.epochs
    sched = build_scheduler(opt, "cosine", total, 0)
    phase = Phase("downstream", cell, spec.checkpoint_every, {"model": model, "optimizer": opt, "scheduler": sched})
    scaler = precision.grad_scaler(sc.policy, dev)
    if scaler is not None:
        phase.mods["grad_scaler"] = scaler
    phase.identify(spec, sc.objective, sc.fingerprint, sc.context)
    best: dict[str, Any] = {"epoch": -1, "val": None, "score": -math.inf}
    if ckpt is not None:
        phase.restore(ckpt)
        best = ckpt["best"]
    primary = spec.validation_metric
    from fusebench import metrics as M

    sign = 1.0 if M.get(primary).higher_is_better else -1.0

    def extra() -> dict[str, Any]:
        return {"best": best, "pretrain_curves": sc.pre_curves, "pretrain_time": sc.pretrain_time,
                "pretrain_budget": sc.budget_record,
                "pretrain_time_segments_s": sc.pre_segments, "wall_segments_s": sc.wall.segments(),
                "pretrained_state": pretrained_state}

    def optimise(loss: torch.Tensor) -> None:
        opt.zero_grad(set_to_none=True)
        precision.backward_step(loss, opt, scaler)
        precision.step_scheduler(sched, scaler)

    def task_loss(batch: dict[str, Any]) -> torch.Tensor:
        return model.task_loss(model(batch), batch)

    def epoch_start() -> None:
        model.train()
        if probe:
            model.eval()  # frozen encoder: batch-norm statistics stay as pretrained

    def epoch_end() -> None:  # select on the validation split only
        nonlocal best
        check_finite_state(phase, f"the epoch's validation and {cell / 'best.pt'}")  # never a NaN model kept
        val = evaluate(model, data["val"], spec, dev, seed)
        for k, v in val.items():
            phase.curves.setdefault(f"val_{k}", []).append(v)
        if sc.trk:
            sc.trk.log_epoch("downstream", phase.epoch, {f"val_{k}": v for k, v in val.items()})
        score = sign * val[primary]
        if score > best["score"]:
            best = {"epoch": phase.epoch, "val": val, "score": score}
            utils.atomic_torch_save({"model": model.state_dict(), "epoch": phase.epoch, "val": val}, cell / "best.pt")

    bar = progress_bar(total, phase.step, f"{sc.request.where} {ds_cfg.protocol}", enabled=sc.options.progress)
    hooks = PhaseHooks(
        host=lambda batch: model.check_batch(sc.inputs(batch)),  # labels checked, format set before the copy
        loss=task_loss,
        optimise=optimise,
        loader=lambda epoch, skip: make_loader(data["train"], ds_cfg.batch_size, True, seed + 1, epoch, skip=skip)[0],
        on_epoch_start=epoch_start,
        on_epoch_end=epoch_end,
        extra=extra,
        diverged=lambda v, step, epoch: (f"{spec.name}: downstream loss is {v} at step {step} (epoch {epoch}, "
                                         f"objective {objective!r})"),
    )
    run_phase(phase, ds_cfg.epochs, hooks, dev, sc.autocast, "downstream_loss", bar, sc.budget,
              checkpoint_each_epoch=True, **sc.track)
    bar.close()
    if best["epoch"] >= 0:
        model.load_state_dict(torch.load(cell / "best.pt", map_location="cpu", weights_only=True)["model"])
    elif phase.curves.get(f"val_{primary}"):  # epochs ran, and none had a validation value that can be compared
        raise RunError(f"{spec.name}/{objective}: the validation {primary} was not a finite number at any of the "
                       f"{len(phase.curves[f'val_{primary}'])} downstream epoch(s) ({phase.curves[f'val_{primary}']}; "
                       f"a metric undefined there, e.g. a correlation of constant predictions), so no epoch can be "
                       f"selected; choose a selection_metric defined on this validation split")
    else:  # zero downstream epochs: score the model as it is
        best = {"epoch": -1, "val": evaluate(model, data["val"], spec, dev, seed), "score": None}
    # the test split, scored once with the model chosen on validation; a hyper-parameter trial has none (its
    # record holds validation values alone: selection.val_metrics)
    test = {} if sc.options.selection_trial else evaluate(model, data["test"], spec, dev, seed)
    fields = _missing_view_fields(sc, model)  # missing views

    # diagnostics of the pretrained embeddings, then the record
    from fusebench.components.diagnostics import representation_diagnostics

    final_state = {k: v.clone() for k, v in model.state_dict().items()}
    model.load_state_dict(pretrained_state)
    diag = representation_diagnostics(embeddings(model, data["val"], spec, dev, seed))
    model.load_state_dict(final_state)
    return Scores(test, best["val"], best["epoch"], curves=phase.curves, model=model, diagnostics=diag, fields=fields)


def _missing_view_fields(sc: Any, model: nn.Module) -> dict[str, Any] | None:
    """``{"missing_views": ...}``: the selected model scoring the test split with missing views
    (:func:`fusebench.probes.missing_views.head_missing_views`) when the protocol's options ask
    (``missing_rates``, ``single_view``); None otherwise."""
    from fusebench.probes.missing_views import head_missing_views, requested

    rates, single = requested(sc.spec)
    if (not rates and not single) or sc.options.selection_trial:  # a trial is scored on validation alone
        return None
    shown = [sc.spec.comparison.get("primary") or sc.spec.validation_metric]
    return {"missing_views": head_missing_views(model, sc.data["test"], sc.spec, sc.dev, sc.seed, rates,
                                                single, shown)}


__all__ = ["score"]
