"""Run a benchmark by name: pretrain -> fine-tune / probe -> evaluate -> run.json.

``run("quickstart", objective=["m3g", "infonce_pwe"], seeds=[0, 1])`` runs the sweep objectives x
seeds; a cell whose ``run.json`` exists is skipped, a failed cell is recorded in
``<out>/<benchmark>/<objective>/seed<k>/failed.json`` and the sweep goes on.

Per cell (``run_one``):

1. seeds (python/numpy/torch) and deterministic flags; the spec is resolved (synthetic overrides,
   ``--set``) and hashed;
2. pretraining with the objective (``fusebench.training.pretrain.Pretrainer``) for
   ``pretrain.epochs``; ``last.pt`` every ``checkpoint_every`` steps (model, optimizer, scheduler,
   RNG states, step) — ``resume=True`` continues from it and reaches the same result;
   Both training phases run in the one loop of :mod:`fusebench.training.loop` (``run_phase``);
3. downstream: ``linear_probe`` (encoder frozen, head trained) or ``finetune``; after every epoch the
   validation split is scored and the best epoch by ``selection_metric`` is kept in ``best.pt``. The
   test split is scored once, with the selected weights — it is never used for selection;
4. representation diagnostics of the pretrained embeddings on the validation split;
5. ``run.json`` written atomically (temporary file + rename), never overwritten.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import platform
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader

import fusebench
from fusebench.pipelines import pipeline_of  # what the spec's pipeline runs and declares (fusebench/pipelines.py)
from fusebench.records import CURRENT_SCHEMA_VERSION as SCHEMA_VERSION  # the run.json schema (docs/leaderboards.md)
from fusebench.training import distributed, precision, utils
from fusebench.training.config import BenchmarkSpec, ConfigError, check_seed, parse_override
from fusebench.training.loop import Clock, Phase, PhaseHooks, RunError, StepBudget, run_phase
from fusebench.training.progress import cell as progress_cell
from fusebench.training.progress import progress_bar, say
from fusebench.training.status import lock_payload, read_lock
from fusebench.training.trackers import Trackers, build_trackers, check_trackers, default_mlflow_uri

log = logging.getLogger(__name__)

BASELINE = "none"  # pseudo-objective: no pretraining (random-init encoder), the reference row
RAW = "raw"  # pseudo-objective of the embedding_eval protocol: the standardised input views, concatenated
#: the reference rows of the embedding_eval protocol computed from the input views without training
#: (fusebench/training/reference_features.py): concatenated (z-scored by the evaluation), per-view L2,
#: tf-idf (count views), view-balanced z-scoring, PCA to the embedding width
from fusebench.training.reference_features import REFERENCE_KINDS as RAW_KINDS  # noqa: E402 (numpy only)

REFERENCES = (BASELINE, *RAW_KINDS)


class ConfigMismatchError(RunError):
    """A cell's run.json or last.pt was made with another configuration (never continued or returned)."""


class CellBusyError(RunError):
    """Another live process holds the cell's lock."""


# ---------------------------------------------------------------------------------------------
# compatibility
# ---------------------------------------------------------------------------------------------
def num_views(spec: BenchmarkSpec) -> int:
    return max(pipeline_of(spec).view_counts(spec))


def check_compatible(spec: BenchmarkSpec, objective: str) -> None:
    """Raise ValueError before any training when ``objective`` cannot run on ``spec``."""
    problem = _incompatibility(spec, objective)
    if problem:
        raise ValueError(f"{problem}; compatible objectives: {', '.join(compatible_objectives(spec))}")


def _incompatibility(spec: BenchmarkSpec, objective: str) -> str | None:
    """Why ``objective`` cannot run on ``spec`` (None when it can)."""
    pipeline = pipeline_of(spec)
    if objective == BASELINE:
        if not pipeline.downstream:
            return f"{spec.name}: the '{BASELINE}' baseline applies to standard benchmarks only"
        return None
    if objective == RAW and pipeline.downstream and spec.downstream.protocol == "linear_probe":
        from fusebench import datasets

        kinds = {m.kind for m in datasets.get(spec.dataset.id).MODALITIES
                 if spec.dataset.modalities is None or m.name in spec.dataset.modalities}
        if kinds != {"vector"}:
            return (f"{spec.name}: the '{RAW}' row of a linear-probe benchmark trains the probe on the input "
                    f"vectors; this dataset's modalities are {sorted(kinds)}")
        return None  # the probe trained on the input vectors (the `identity` encoder)
    if objective in RAW_KINDS:
        if not pipeline.downstream or spec.downstream.protocol != "embedding_eval":
            return (f"{spec.name}: the '{objective}' reference row applies to the embedding_eval protocol"
                    + (" and (raw only) to the linear_probe protocol" if objective == RAW else " only"))
        return None
    from fusebench import objectives

    cls = objectives.OBJECTIVES.get(objective)  # unknown id -> list + closest match
    kind = getattr(cls, "input_kind", "views")
    problem = pipeline.objective_problem(spec, objective, cls)
    if problem:
        return problem
    for k in pipeline.view_counts(spec):
        lo, hi = getattr(cls, "min_views", 2), getattr(cls, "max_views", None)
        if kind in ("views", "pairs") and (k < lo or (hi is not None and k > hi)):
            want = f"exactly {lo}" if hi == lo else f"{lo}..{hi}" if hi else f">= {lo}"
            return f"objective {objective!r} takes {want} views but benchmark {spec.name!r} has k = {k}"
    return None


def compatible_objectives(spec: BenchmarkSpec) -> list[str]:
    """Registered objectives that can run on ``spec`` (the 'none' baseline not included)."""
    from fusebench import objectives

    return [name for name in objectives.available() if _incompatibility(spec, name) is None]


# ---------------------------------------------------------------------------------------------
# data and model
# ---------------------------------------------------------------------------------------------
def _datasets(spec: BenchmarkSpec, synthetic: bool, data_root: str | None, seed: int,
              roles: tuple[str, ...] = ("train", "val", "test"), extra_options: dict[str, Any] | None = None):
    from fusebench import datasets

    ds_cfg = spec.dataset
    synthetic = synthetic or ds_cfg.synthetic_only
    common = dict(modalities=ds_cfg.modalities, synthetic=synthetic, **ds_cfg.options, **(extra_options or {}))
    if ds_cfg.split_per_seed and not synthetic:  # each seed its own stratified split
        common["split_seed"] = int(seed)
    if synthetic:
        common["synthetic_spec"] = dict(ds_cfg.synthetic_spec)
    out = {}
    for role, split in (("train", "train"), ("val", ds_cfg.val_split), ("test", ds_cfg.test_split)):
        if role not in roles:
            continue
        out[role] = datasets.build(ds_cfg.id, root=data_root, split=split, seed=seed, **common)
    return out


def _loader(ds, batch_size: int, shuffle: bool, seed: int, epoch: int, skip: int = 0, shard: bool = False) -> Iterable:
    """A deterministic loader: the epoch's order depends only on (seed, epoch); ``skip`` batches are
    dropped from the front (used when resuming inside an epoch)."""
    from fusebench.datasets.collate import collate

    names = list(ds.modalities)
    if hasattr(ds, "set_epoch"):
        ds.set_epoch(epoch)
    if shuffle:
        g = torch.Generator().manual_seed(seed * 100_003 + epoch)
        order = torch.randperm(len(ds), generator=g).tolist()
    else:
        order = list(range(len(ds)))
    bs = min(batch_size, len(ds))
    drop_last = shuffle and len(ds) >= 2 * bs  # contrastive batches need >= 2 samples
    batches = [order[i : i + bs] for i in range(0, len(order), bs)]
    if drop_last and len(batches[-1]) < bs:
        batches.pop()
    batches = [b for b in batches if not shuffle or len(b) >= 2]
    if shard and distributed.is_distributed():  # each rank takes its contiguous shard of every global batch
        batches = [distributed.shard(b) for b in batches]
    # an own generator: building the iterator must not draw from the global RNG (resume exactness)
    loader = DataLoader(batches[skip:], batch_size=None, shuffle=False, generator=torch.Generator(),
                        collate_fn=lambda idx: collate([ds[i] for i in idx], names))
    return loader, len(batches)


class _Subset(torch.utils.data.Dataset):
    """``indices`` of an adapter, keeping its attributes (modalities, task, num_classes, ...)."""

    def __init__(self, ds, indices: list[int]) -> None:
        self.ds, self.indices = ds, list(indices)

    def __getattr__(self, name: str) -> Any:
        if name in ("ds", "indices"):
            raise AttributeError(name)
        return getattr(self.ds, name)

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return self.ds[self.indices[i]]


def few_shot_subset(ds, shots: int, seed: int):
    """The M3G paper's few-shot probe set: ``shots`` samples per class drawn with ``seed`` (all of a
    class's samples where it has fewer). Classification datasets only."""
    if ds.task != "classification":
        raise ValueError(f"downstream.shots needs a classification dataset, {ds.id} is {ds.task}")
    labels = [int(ds[i]["target"]) for i in range(len(ds))]
    order = torch.randperm(len(ds), generator=torch.Generator().manual_seed(seed + 12_345)).tolist()
    taken: dict[int, list[int]] = {}
    for i in order:
        bucket = taken.setdefault(labels[i], [])
        if len(bucket) < shots:
            bucket.append(i)
    return _Subset(ds, sorted(i for idx in taken.values() for i in idx))


def _input_dims(ds) -> dict[str, int]:
    return {m.name: m.channels for m in ds.MODALITIES if m.name in ds.modalities}


def build_model(spec: BenchmarkSpec, train_ds, objective: str | None = None) -> nn.Module:
    """The encoder (a backbone) with the head its dataset's task builds on it, right after it
    (:class:`fusebench.training.model.TaskModel`). The ``raw`` row of a linear-probe benchmark gets the
    ``identity`` encoder instead (the probe is trained on the input vectors)."""
    from fusebench import encoders, tasks
    from fusebench.training.model import build as with_task_head

    if objective == RAW and spec.downstream.protocol == "linear_probe":
        cfg = {"modalities": _input_dims(train_ds)}
        if train_ds.num_classes is not None:
            cfg["num_classes"] = train_ds.num_classes
        return with_task_head(encoders.build("identity", **cfg), tasks.for_dataset(train_ds))
    cfg = dict(spec.encoder.config)
    cfg.setdefault("modalities", _input_dims(train_ds))
    if train_ds.num_classes is not None and "num_classes" not in cfg and train_ds.task in ("classification", "segmentation"):
        cfg["num_classes"] = train_ds.num_classes
    return with_task_head(encoders.build(spec.encoder.id, **cfg), tasks.for_dataset(train_ds))


def _optimizer(params, name: str, lr: float, weight_decay: float):
    params = [p for p in params if p.requires_grad]
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=0.9, weight_decay=weight_decay)
    return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)


def _scheduler(opt, name: str, total_steps: int, warmup_steps: int):
    def factor(step: int) -> float:
        if warmup_steps and step < warmup_steps:
            return (step + 1) / warmup_steps
        if name == "constant" or total_steps <= warmup_steps:
            return 1.0
        t = (step - warmup_steps) / max(1, total_steps - warmup_steps)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, t)))

    return torch.optim.lr_scheduler.LambdaLR(opt, factor)


# ---------------------------------------------------------------------------------------------
# evaluation
# ---------------------------------------------------------------------------------------------
@torch.no_grad()
def evaluate(model: nn.Module, ds, spec: BenchmarkSpec, device: torch.device, seed: int) -> dict[str, float]:
    """Score ``model`` on ``ds`` with the spec's metrics, in the form of the dataset's task
    (:mod:`fusebench.tasks`)."""
    from fusebench import tasks

    model.eval()
    task = tasks.for_dataset(ds)
    loader, _ = _loader(ds, spec.downstream.batch_size, False, seed, 0)
    for batch in loader:
        batch = utils.to_device(batch, device)
        task.add(model.predict(model(batch), batch), batch["target"])
    return task.score(spec.metrics)


@torch.no_grad()
def embeddings(model: nn.Module, ds, spec: BenchmarkSpec, device: torch.device, seed: int, limit: int = 512) -> torch.Tensor:
    model.eval()
    loader, _ = _loader(ds, spec.downstream.batch_size, False, seed, 0)
    out, n = [], 0
    for batch in loader:
        out.append(model.embed(utils.to_device(batch, device)).float().cpu())
        n += out[-1].shape[1]
        if n >= limit:
            break
    return torch.cat(out, dim=1)[:, :limit]


# ---------------------------------------------------------------------------------------------
# one cell
# ---------------------------------------------------------------------------------------------
def cell_dir(out: Path, benchmark: str, objective: str, seed: int) -> Path:
    return Path(out) / benchmark / objective / f"seed{seed}"


def _load_checkpoint(path: Path) -> dict[str, Any]:
    try:
        return torch.load(path, map_location="cpu", weights_only=True)  # never unpickle arbitrary objects
    except Exception as e:  # corrupt / truncated / not a checkpoint
        raise RunError(f"cannot resume: checkpoint {path} is unreadable ({type(e).__name__}: {e}); "
                       "the file was left as it is — delete it to start over") from None


def run_one(
    spec: BenchmarkSpec,
    objective: str,
    seed: int,
    out: Path,
    synthetic: bool = False,
    data_root: str | None = None,
    device: str = "auto",
    resume: bool = False,
    progress: bool = True,
    max_steps: int | None = None,
    context: dict[str, Any] | None = None,
    loggers: list[str] | None = None,
    mlflow_uri: str | None = None,
) -> dict[str, Any]:
    """Run one (benchmark, objective, seed) cell and write its run.json. ``max_steps`` stops the run
    after that many optimisation steps in total (for tests that simulate a killed run). ``context``
    holds what the sweep measured once for every cell (``git``: the checkout's state before any
    output was written; ``fingerprint``: the data files read), computed here when absent.
    ``loggers``: experiment tracker ids (:mod:`fusebench.training.trackers`), built for this cell.
    ``progress``: announce the cell (start / done / failed lines on stderr) and show its phases'
    progress, as bars on a terminal, else as log lines (:mod:`fusebench.training.progress`).

    A cell is only ever continued or returned for the configuration that made it: an existing
    ``run.json`` or ``last.pt`` with another config hash is a :class:`RunError`, never mixed."""
    check_compatible(spec, objective)
    cell = cell_dir(out, spec.name, objective, seed)
    run_json = cell / "run.json"
    where = f"{spec.name}/{objective}/seed{seed}"
    if context is None:  # what the data files are decides whether a record may be reused
        context = sweep_context(spec, synthetic, data_root)

    def reused() -> dict[str, Any]:
        rec = _existing_record(run_json, spec, context)
        if progress:
            say(f"reused record {where} ({run_json})")
        return rec

    if _record_there(run_json, out):
        return reused()
    cell.mkdir(parents=True, exist_ok=True)
    with _CellLock(cell):
        if run_json.exists():  # another process finished the cell while we waited for nothing
            return reused()
        t0 = time.monotonic()
        if progress:
            try:
                dev = str(utils.resolve_device(device))
            except ValueError:  # the pipeline says why
                dev = device
            say(f"start {where} device={dev} precision={spec.precision}")
        try:
            with build_trackers(loggers if distributed.rank() == 0 else None, out, cell, mlflow_uri) as trk, \
                    progress_cell(where, progress):
                trk.start(where, spec.to_dict())
                record = pipeline_of(spec).run_cell(spec, objective, seed, cell, synthetic=synthetic,
                                                    data_root=data_root, device=device, resume=resume,
                                                    progress=progress, max_steps=max_steps, context=context,
                                                    trackers=trk)
                trk.log_record(record, run_json)  # final metrics, run.json as an artifact
        except BaseException as e:
            if progress:
                what = "interrupted" if isinstance(e, KeyboardInterrupt) else "failed"
                say(f"{what} {where} after {time.monotonic() - t0:.1f}s ({type(e).__name__})")
            raise
        if progress:
            score = (record.get("metrics") or {}).get(spec.primary_metric)
            shown = f" ({spec.primary_metric} {score:.4f})" if isinstance(score, (int, float)) else ""
            say(f"done {where} in {time.monotonic() - t0:.1f}s{shown}")
        return record


def _record_there(run_json: Path, out: Path) -> bool:
    """Whether the cell has a record, by the one rule the leaderboard and ``status`` apply
    (:func:`fusebench.records.check_record_file`): a regular ``run.json`` reached from ``out`` through
    real folders; a link, a folder or a special file there is a RunError naming it."""
    from fusebench.records import RecordError, check_record_file

    try:
        return check_record_file(run_json, out)
    except RecordError as e:
        raise RunError(f"{e}; move it away to rerun the cell") from None


def data_fingerprint(context: dict[str, Any] | None) -> str | None:
    """The sha256 of the data files a sweep reads (its context's fingerprint; None for synthetic data)."""
    fp = (context or {}).get("fingerprint")
    return fp.get("sha256") if isinstance(fp, dict) else None


def _existing_record(run_json: Path, spec: BenchmarkSpec, context: dict[str, Any] | None = None) -> dict[str, Any]:
    """The finished cell's record, if it was made with ``spec``'s configuration and, when ``context``
    is given, from the same data (the fingerprint of the files read: a rerun on another file of the
    same shapes must not return the first file's record)."""
    try:
        rec = json.loads(run_json.read_text())
    except (OSError, json.JSONDecodeError, RecursionError) as e:
        raise RunError(f"{run_json} is unreadable ({type(e).__name__}: {str(e)[:200]}); move it away to rerun the "
                       "cell") from None
    if not isinstance(rec, dict):
        raise RunError(f"{run_json} is not a run record (a JSON object expected); move it away to rerun the cell")
    if rec.get("config_hash") != spec.hash():
        raise ConfigMismatchError(f"{run_json} was made with another configuration (config hash {rec.get('config_hash')} "
                       f"!= {spec.hash()} of the current spec and --set values); records are immutable: "
                       "write to another --out, or move that cell's folder away to rerun it")
    if context is not None:
        ds = rec.get("dataset") if isinstance(rec.get("dataset"), dict) else {}
        fp = ds.get("fingerprint")
        made_from = fp.get("sha256") if isinstance(fp, dict) else None
        if made_from != data_fingerprint(context):
            raise ConfigMismatchError(
                f"{run_json} was made from other data (fingerprint {made_from or 'none (synthetic data)'} of "
                f"{ds.get('root') or 'the synthetic generator'}, now {data_fingerprint(context) or 'none (synthetic data)'}"
                f"); records are immutable: write to another --out, or move that cell's folder away to rerun it")
    return rec


def _check_checkpoint_config(path: Path, ckpt: dict[str, Any], spec: BenchmarkSpec,
                             context: dict[str, Any] | None = None) -> dict[str, Any]:
    if ckpt.get("config_hash") != spec.hash():
        raise ConfigMismatchError(
            f"cannot resume {path}: it was written with another configuration (config hash {ckpt.get('config_hash')} "
            f"!= {spec.hash()} of the current spec and --set values); rerun with the same settings, or move the cell "
            "folder away to start over")
    if context is not None and "data_fingerprint" in ckpt and ckpt["data_fingerprint"] != data_fingerprint(context):
        raise ConfigMismatchError(
            f"cannot resume {path}: it was written while reading other data (fingerprint "
            f"{ckpt['data_fingerprint'] or 'none (synthetic data)'}, now {data_fingerprint(context) or 'none (synthetic data)'}); "
            "resume with the same --data-root, or move the cell folder away to start over")
    return ckpt


class _CellLock:
    """An exclusive per-cell lock file (``.lock``, holding the owner's pid, host and SLURM job): two
    processes never run one cell at once. A lock left by a process that no longer exists is taken
    over (judged by pid on its own host, by squeue for a SLURM job elsewhere: status.read_lock)."""

    def __init__(self, cell: Path) -> None:
        self.path = cell / ".lock"
        self.fd: int | None = None

    def __enter__(self) -> "_CellLock":
        for _ in range(2):
            try:
                self.fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
                os.write(self.fd, lock_payload().encode())
                return self
            except FileExistsError:
                holder = read_lock(self.path)
                if holder is not None and holder.alive and not (holder.local and holder.pid == os.getpid()):
                    raise CellBusyError(f"{self.path.parent} is being run by {holder.owner} "
                                        f"(lock {self.path}); not starting it twice") from None
                self.path.unlink(missing_ok=True)  # stale lock of a killed run
        raise CellBusyError(f"cannot lock {self.path}")

    def __exit__(self, *exc: Any) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.path.unlink(missing_ok=True)


def _run_cell(spec, objective, seed, cell, synthetic, data_root, device, resume, progress, max_steps, context,
              trk: Trackers | None = None):
    """One cell of the standard pipeline under its precision policy (:mod:`fusebench.training.precision`):
    the TF32 switches are set for the cell and restored after it."""
    policy = precision.get(spec.precision)
    with precision.backend_flags(policy):
        return _run_cell_body(spec, objective, seed, cell, synthetic, data_root, device, resume, progress, max_steps,
                              context, trk, policy)


def _run_cell_body(spec, objective, seed, cell, synthetic, data_root, device, resume, progress, max_steps, context,
                   trk: Trackers | None, policy: precision.Precision):
    from fusebench import objectives
    from fusebench.training.diagnostics import representation_diagnostics
    from fusebench.training.pretrain import Pretrainer

    wall = Clock()  # the cell's time; a resumed cell adds the segments of the processes before
    dev = utils.resolve_device(device)
    flags = utils.seed_everything(seed)
    # the reference rows other than raw are computed from the unstandardised input views
    from_inputs = spec.downstream.protocol == "embedding_eval" and objective in RAW_KINDS and objective != RAW
    data = _datasets(spec, synthetic, data_root, seed, extra_options={"standardize": False} if from_inputs else None)
    model = build_model(spec, data["train"], objective).to(dev)
    flags["numerics"] = precision.numerics(policy, dev)  # what decides the numbers on this device (run.json)
    autocast = precision.autocast(policy, dev)  # encoders and heads only: objectives run in float32 (objectives/base.py)
    budget = StepBudget(max_steps)
    track = {"on_step": trk.on_step, "on_epoch_start": trk.on_epoch_start} if trk else {}  # loss, samples/s per step
    ckpt = None
    if resume and (cell / "last.pt").exists():
        ckpt = _check_checkpoint_config(cell / "last.pt", _load_checkpoint(cell / "last.pt"), spec, context)
        wall.before = [float(t) for t in ckpt.get("wall_segments_s", ())]
    fingerprint = data_fingerprint(context)

    # ---- pretraining ------------------------------------------------------------------------
    pt = spec.pretrain
    pre_curves: dict[str, list[float]] = {}
    pretrain_time = 0.0
    pre_segments: list[float] = []
    batch_size = pretrain_batch_size(spec, objective)
    budget_record: dict[str, Any] = {"optimizer_steps": 0, "samples_seen": 0, "batch_size": None,
                                     "micro_batch": None, "epochs": 0}
    epochs = int(pt.objective_epochs.get(objective, pt.epochs))
    if objective not in REFERENCES and epochs > 0:
        from fusebench.training.methods import split_method_keys, with_method_options

        kwargs, method_options = split_method_keys(objective_hparams(spec, objective, context))
        obj = objectives.build(objective, **kwargs).to(dev)
        _, per_epoch = _loader(data["train"], batch_size, True, seed, 0)
        total = per_epoch * epochs
        micro = pt.objective_micro_batch.get(objective)
        # a grid over a method's option (methods.<id>.<option>, e.g. BYOL's EMA momentum) sets it for this cell
        pre = Pretrainer(model, obj, with_method_options(pt, method_options), total_steps=total,
                         micro_batch=micro).to(dev)
        opt = _optimizer(pre.student_parameters(), pt.optimizer, pt.lr, pt.weight_decay)
        step_fn = pre
        if distributed.is_distributed():  # DDP: rank 0's weights, averaged gradients
            from torch.nn.parallel import DistributedDataParallel as DDP

            # heads unused by the objective (e.g. the task head) get no gradient: find_unused_parameters
            step_fn = DDP(pre, device_ids=[dev.index] if dev.type == "cuda" else None, find_unused_parameters=True)
        sched = _scheduler(opt, pt.schedule, total, pt.warmup_epochs * per_epoch)
        phase = Phase("pretrain", cell, spec.checkpoint_every, {"pretrainer": pre, "optimizer": opt, "scheduler": sched})
        pre_scaler = precision.grad_scaler(policy, dev)  # 16-mixed: its state goes into last.pt with the phase's
        if pre_scaler is not None:
            phase.mods["grad_scaler"] = pre_scaler
        phase.config_hash, phase.data_fingerprint = spec.hash(), fingerprint
        extensions = []  # the pretraining methods' own per-epoch steps (e.g. Algorithm 1); state in last.pt
        for ext_cls, opts in pretrain_extensions(pre):
            if ext_cls.enabled(opts):
                ext = phase.mods[ext_cls.state_key] = ext_cls(pre, opts, seed)
                extensions.append((ext, opts))
        if ckpt is not None and ckpt["phase"] == "pretrain":
            phase.restore(ckpt)
        skip_pretrain = ckpt is not None and ckpt["phase"] == "downstream"  # restored below
        tp, start_step = time.time(), phase.step
        bar = progress_bar(total, phase.step, f"{spec.name}/{objective}/seed{seed} pretrain",
                           enabled=progress and not skip_pretrain)

        def pre_optimise(loss: torch.Tensor) -> None:
            pre.optimise(loss, opt, all_reduce=step_fn is pre, scaler=pre_scaler)
            precision.step_scheduler(sched, pre_scaler)
            pre.after_step(phase.step)

        def pre_epoch_end() -> None:
            for ext, opts in extensions:  # e.g. B candidates from g_t, best kept as g_{t+1}, policy means to the curves
                ext.epoch_update(opt, phase.epoch, lambda: _loader(data["train"], batch_size, True, seed + 7_919, phase.epoch, shard=True)[0],
                                 next(iter(_loader(data["val"], ext.val_batch_size(opts), False, seed, 0)[0])), phase.curves, autocast)

        hooks = PhaseHooks(
            loss=lambda batch: step_fn(batch, gather=distributed.gather_with_grad),
            optimise=pre_optimise,
            loader=lambda epoch, skip: _loader(data["train"], batch_size, True, seed, epoch, skip=skip, shard=True)[0],
            on_epoch_start=pre.train,
            on_epoch_end=pre_epoch_end,
            extra=lambda: {"wall_segments_s": wall.segments()},
            diverged=lambda v: (f"{spec.name}: loss of objective {objective!r} is {v} at pretraining step {phase.step} "
                                f"(epoch {phase.epoch}); checkpoint kept at {cell / 'last.pt'}"),
            postfix=lambda v: {"loss": f"{v:.4f}",
                               "it_s": f"{(phase.step - start_step) / max(1e-9, time.time() - tp):.1f}"},
        )
        if not skip_pretrain:
            run_phase(phase, epochs, hooks, dev, autocast, "pretrain_loss", bar, budget, **track)
        bar.close()
        pre_segments = phase.clock.segments()  # this process's and, when resumed, the earlier ones'
        budget_record = {"optimizer_steps": int(phase.step), "samples_seen": int(phase.step) * batch_size,
                         "batch_size": batch_size, "micro_batch": int(micro) if micro else None, "epochs": epochs}
        pretrain_time = sum(pre_segments)
        pre_curves = phase.curves
        del pre, opt, sched, hooks
    if distributed.rank() != 0:  # rank 0 alone runs the (cheap) downstream protocol and writes the record
        return {"status": "worker", "benchmark": spec.name, "objective": objective, "seed": seed}
    pretrained_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    if ckpt is not None and ckpt["phase"] == "downstream":
        pre_curves, pretrain_time = ckpt["pretrain_curves"], ckpt["pretrain_time"]
        pre_segments = list(ckpt.get("pretrain_time_segments_s", [pretrain_time]))
        pretrained_state = ckpt["pretrained_state"]
    if ckpt is not None and ckpt["phase"] == "downstream" and "pretrain_budget" in ckpt:
        budget_record = ckpt["pretrain_budget"]
    timing = {"resumed": ckpt is not None, "segments": {"wall": wall, "pretrain": pre_segments},
              "budget": budget_record}

    # ---- downstream ---------------------------------------------------------------------------
    ds_cfg = spec.downstream
    if ds_cfg.protocol == "embedding_eval":
        record = _embedding_eval_record(spec, objective, seed, synthetic, dev, flags, data, model, pre_curves,
                                        pretrain_time, wall, context, timing)
        write_record(cell, record)
        return record
    if ds_cfg.shots:
        data["train"] = few_shot_subset(data["train"], ds_cfg.shots, seed)
    probe = ds_cfg.protocol == "linear_probe"
    if probe:
        for p in model.encoder_parameters():
            p.requires_grad_(False)
    params = list(model.head_parameters()) if probe else list(model.parameters())
    opt = _optimizer(params, "adamw", ds_cfg.lr, ds_cfg.weight_decay)
    _, per_epoch = _loader(data["train"], ds_cfg.batch_size, True, seed + 1, 0)
    total = per_epoch * ds_cfg.epochs
    sched = _scheduler(opt, "cosine", total, 0)
    phase = Phase("downstream", cell, spec.checkpoint_every, {"model": model, "optimizer": opt, "scheduler": sched})
    scaler = precision.grad_scaler(policy, dev)
    if scaler is not None:
        phase.mods["grad_scaler"] = scaler
    phase.config_hash, phase.data_fingerprint = spec.hash(), fingerprint
    best: dict[str, Any] = {"epoch": -1, "val": None, "score": -math.inf}
    if ckpt is not None and ckpt["phase"] == "downstream":
        phase.restore(ckpt)
        best = ckpt["best"]
    primary = spec.primary_metric
    from fusebench import metrics as M

    sign = 1.0 if M.get(primary).higher_is_better else -1.0

    def extra() -> dict[str, Any]:
        return {"best": best, "pretrain_curves": pre_curves, "pretrain_time": pretrain_time,
                "pretrain_budget": budget_record,
                "pretrain_time_segments_s": pre_segments, "wall_segments_s": wall.segments(),
                "pretrained_state": pretrained_state}

    def ds_optimise(loss: torch.Tensor) -> None:
        opt.zero_grad(set_to_none=True)
        if scaler is not None:  # 16-mixed
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        precision.step_scheduler(sched, scaler)

    def ds_epoch_start() -> None:
        model.train()
        if probe:
            model.eval()  # frozen encoder: batch-norm statistics stay as pretrained

    def ds_epoch_end() -> None:  # select on the validation split only
        nonlocal best
        val = evaluate(model, data["val"], spec, dev, seed)
        for k, v in val.items():
            phase.curves.setdefault(f"val_{k}", []).append(v)
        if trk:
            trk.log_epoch("downstream", phase.epoch, {f"val_{k}": v for k, v in val.items()})
        score = sign * val[primary]
        if score > best["score"]:
            best = {"epoch": phase.epoch, "val": val, "score": score}
            utils.atomic_torch_save({"model": model.state_dict(), "epoch": phase.epoch, "val": val}, cell / "best.pt")

    bar = progress_bar(total, phase.step, f"{spec.name}/{objective}/seed{seed} {ds_cfg.protocol}", enabled=progress)
    hooks = PhaseHooks(
        loss=lambda batch: model.task_loss(model(batch), batch),
        optimise=ds_optimise,
        loader=lambda epoch, skip: _loader(data["train"], ds_cfg.batch_size, True, seed + 1, epoch, skip=skip)[0],
        on_epoch_start=ds_epoch_start,
        on_epoch_end=ds_epoch_end,
        extra=extra,
        diverged=lambda v: (f"{spec.name}: downstream loss is {v} at step {phase.step} (objective {objective!r}); "
                            f"checkpoint kept at {cell / 'last.pt'}"),
    )
    run_phase(phase, ds_cfg.epochs, hooks, dev, autocast, "downstream_loss", bar, budget, checkpoint_each_epoch=True,
              **track)
    bar.close()
    if best["epoch"] >= 0:
        model.load_state_dict(torch.load(cell / "best.pt", map_location="cpu", weights_only=True)["model"])
    else:  # zero downstream epochs: score the model as it is
        best = {"epoch": -1, "val": evaluate(model, data["val"], spec, dev, seed), "score": None}
    test = evaluate(model, data["test"], spec, dev, seed)

    # ---- diagnostics and record ------------------------------------------------------------------
    final_state = {k: v.clone() for k, v in model.state_dict().items()}
    model.load_state_dict(pretrained_state)
    diag = representation_diagnostics(embeddings(model, data["val"], spec, dev, seed))
    model.load_state_dict(final_state)
    record = make_record(
        spec, objective, seed, synthetic, dev, flags, data,
        curves={**pre_curves, **phase.curves}, val=best["val"], test=test, best_epoch=best["epoch"],
        wall_time=wall.total(), pretrain_time=pretrain_time, model=model, diagnostics=diag, context=context,
        timing=timing,
    )
    write_record(cell, record)
    return record


def check_components(spec: BenchmarkSpec, objs: list[str]) -> None:
    """Before any work: the spec's dataset and encoder ids are registered (a plugin's id that is not
    installed here would fail in every cell), and every objective can be built with its
    hyper-parameters and with every combination of its selection grid (value checks such as
    ``eps > 0`` live in the objectives' constructors). One ConfigError naming the key."""
    import itertools

    from fusebench import datasets, encoders, objectives
    from fusebench.registry import UnknownNameError
    from fusebench.training.methods import split_method_keys, with_method_options

    pipeline = pipeline_of(spec)
    try:
        if pipeline.reads_dataset:
            datasets.get(spec.dataset.id)
        if pipeline.builds_encoder:
            encoders.ENCODERS.get(spec.encoder.id)
    except UnknownNameError as e:
        key = "dataset.id" if pipeline.reads_dataset and spec.dataset.id not in datasets.DATASETS else "encoder.id"
        raise ConfigError(f"{spec.name}: {key}: {e}") from None
    for o in objs:
        if o in REFERENCES:
            continue
        grid = spec.pretrain.grid.get(o) or {}
        names = sorted(grid)
        for combo in itertools.product(*(grid[n] for n in names)):
            hp = {**spec.pretrain.hparams.get(o, {}), **dict(zip(names, combo))}
            try:
                kwargs, method_options = split_method_keys(hp, f"{spec.name}: pretrain.grid.{o}")
                objectives.build(o, **kwargs)
                with_method_options(spec.pretrain, method_options, f"{spec.name}: pretrain.grid.{o}")
            except (ValueError, TypeError) as e:
                where = f"pretrain.hparams.{o}" + (f" / pretrain.grid.{o} {dict(zip(names, combo))}" if names else "")
                raise ConfigError(f"{spec.name}: {where}: objective {o!r} refuses {hp}: {e}") from None


def check_out(out: Path) -> Path:
    """``--out``: a folder that exists or can be made, and that this process can write to."""
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out}: exists and is not a folder; name a folder for the run records")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"--out {out}: cannot create the folder ({e.strerror or e}); name a writable folder") from None
    if not os.access(out, os.W_OK | os.X_OK):
        raise ConfigError(f"--out {out}: the folder is not writable by this user; name a writable folder")
    return out


def sweep_context(spec: BenchmarkSpec, synthetic: bool, data_root: str | None) -> dict[str, Any]:
    """Measured once per sweep, before any output is written: the checkout's git state and the
    fingerprint of the data files (real data only; :mod:`fusebench.datasets.fingerprint`)."""
    ctx: dict[str, Any] = {"git": utils.git_info(), "fingerprint": None}
    if pipeline_of(spec).reads_dataset and not (synthetic or spec.dataset.synthetic_only) and data_root is not None:
        from fusebench.datasets.fingerprint import fingerprint

        ctx["fingerprint"] = fingerprint(data_root)
    return ctx


def objective_hparams(spec: BenchmarkSpec, objective: str, context: dict[str, Any] | None = None) -> dict[str, Any]:
    """The objective's hyper-parameters: ``pretrain.hparams[objective]`` updated with the values the
    validation search chose (``context["hparams"]``, see :func:`select_hparams`)."""
    return {**spec.pretrain.hparams.get(objective, {}), **((context or {}).get("hparams", {}).get(objective, {}))}


def select_hparams(spec: BenchmarkSpec, objective: str, out: Path, synthetic: bool, data_root: str | None,
                   device: str, progress: bool, context: dict[str, Any]) -> dict[str, Any] | None:
    """Choose ``objective``'s hyper-parameters from ``pretrain.grid[objective]`` on the validation split.

    Every combination is run (pretraining + downstream protocol) once per selection seed
    (``pretrain.selection_seeds``, else ``[pretrain.selection_seed]``; none is an evaluation seed); the
    combination with the best *mean validation* primary metric over those seeds wins (ties: the first
    in grid order). Trial records go to ``<out>/.selection/<benchmark>/<objective>/<trial>/`` (one
    seed) or ``<trial>/seed<S>/`` (several) -- a hidden folder the leaderboard does not read; the
    outcome ``{"grid", "seed", "seeds", "metric", "scores", "choice"}`` (each score with its per-seed
    values) is stored beside them in ``selection.json`` and in every run record of the objective."""
    import itertools

    from fusebench import metrics as M

    grid = spec.pretrain.grid.get(objective)
    if not grid or objective in REFERENCES:
        return None
    folder = out / ".selection" / spec.name / objective
    names = sorted(grid)
    combos = [dict(zip(names, values)) for values in itertools.product(*(grid[n] for n in names))]
    primary = spec.primary_metric
    sign = 1.0 if M.get(primary).higher_is_better else -1.0
    seeds = spec.selection_seeds
    scores = []
    for i, combo in enumerate(combos):
        trial = f"trial{i}-" + "-".join(f"{k}{v}" for k, v in combo.items())
        ctx = {**context, "hparams": {**context.get("hparams", {}), objective: combo}}
        if progress:
            shown = " ".join(f"{k}={v}" for k, v in combo.items())
            say(f"selection {spec.name}/{objective} trial {i + 1}/{len(combos)} {shown} "
                f"(seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))})")
        per_seed = {}
        for s in seeds:
            where = folder / trial if len(seeds) == 1 else folder / trial / f"seed{s}"
            rec = run_one(spec, objective, s, where, synthetic=synthetic, data_root=data_root, device=device,
                          progress=progress, context=ctx)
            per_seed[str(s)] = rec["selection"]["val_metrics"][primary]
        mean = sum(per_seed.values()) / len(per_seed)
        scores.append({"hparams": combo, "val": mean, **({"val_by_seed": per_seed} if len(seeds) > 1 else {})})
    best = max(range(len(combos)), key=lambda i: (sign * scores[i]["val"], -i))
    outcome = {"grid": {n: list(grid[n]) for n in names}, "seed": seeds[0],
               **({"seeds": seeds} if len(seeds) > 1 else {}),
               "metric": f"validation {primary}" + (f" (mean over {len(seeds)} selection seeds)" if len(seeds) > 1 else ""),
               "scores": scores, "choice": combos[best]}
    utils.atomic_write_json(folder / "selection.json", outcome)
    return outcome


def pretrain_extensions(pre: nn.Module) -> list[tuple[type, Any]]:
    """(class, options) of the per-epoch extensions of the Pretrainer's methods (``fusebench.training.methods``)."""
    from fusebench.training.methods import extensions

    return extensions(list(pre.methods.values()))


def pretrain_batch_size(spec: BenchmarkSpec, objective: str) -> int:
    """``pretrain.objective_batch_size[objective]`` where given (e.g. M3G at k >= 5, whose cost grows as
    n^k), else ``pretrain.batch_size``."""
    return int(spec.pretrain.objective_batch_size.get(objective, spec.pretrain.batch_size))


@torch.no_grad()
def features(model: nn.Module | None, ds, spec: BenchmarkSpec, device: torch.device, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """All of ``ds`` as frozen features [n, k * f] and labels [n]: the concatenated per-view
    embeddings of ``model``, or with ``model=None`` the adapter's (standardised) input views."""
    if model is None:
        views, y = input_views(ds, spec, seed)
        return torch.from_numpy(np.concatenate(views, axis=1)).float(), y
    model.eval()
    loader, _ = _loader(ds, spec.downstream.batch_size, False, seed, 0)
    xs, ys = [], []
    for batch in loader:
        z = model.embed(utils.to_device(batch, device)).float().cpu()  # [k, n, f]
        xs.append(z.permute(1, 0, 2).reshape(z.shape[1], -1))
        ys.append(batch["target"].reshape(-1).cpu())
    return torch.cat(xs), torch.cat(ys)


@torch.no_grad()
def input_views(ds, spec: BenchmarkSpec, seed: int) -> tuple[list[np.ndarray], torch.Tensor]:
    """The input views of all of ``ds`` as float64 arrays, one [n, d_v] per modality (in order), and
    the labels [n]."""
    loader, _ = _loader(ds, spec.downstream.batch_size, False, seed, 0)
    parts: list[list[torch.Tensor]] = [[] for _ in ds.modalities]
    ys = []
    for batch in loader:
        n = len(batch["target"])
        for l, m in enumerate(ds.modalities):
            parts[l].append(batch["modalities"][m].reshape(n, -1).double())
        ys.append(batch["target"].reshape(-1).cpu())
    return [torch.cat(p).numpy() for p in parts], torch.cat(ys)


#: the probe/clustering options of ``options.embedding_eval`` passed on to probe_and_cluster as given
EMBEDDING_EVAL_OPTIONS = ("l2_grid", "cluster_on", "n_init", "fewshot_shots", "fewshot_draws", "fewshot_l2_grid", "knn_grid")


def _embedding_eval_record(spec, objective, seed, synthetic, dev, flags, data, model, pre_curves, pretrain_time,
                           wall: Clock, context, timing: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ``embedding_eval`` protocol: frozen embeddings (or a reference row's features) of every split ->
    linear probe (L2 chosen on val), few-shot and kNN probes, k-means
    (:func:`fusebench.training.embedding_eval.probe_and_cluster`)."""
    from fusebench.training.diagnostics import representation_diagnostics
    from fusebench.training.embedding_eval import probe_and_cluster

    roles = ("train", "val", "test")
    enc = None if objective in RAW_KINDS else model
    from_inputs = objective in RAW_KINDS and objective != RAW  # data was built without standardisation
    if from_inputs:
        views, labels = {}, {}
        for r in roles:
            views[r], labels[r] = input_views(data[r], spec, seed)
        ytr, yva, yte = (labels[r] for r in roles)
    else:
        (xtr, ytr), (xva, yva), (xte, yte) = (features(enc, data[r], spec, dev, seed) for r in roles)
    opts = dict(spec.options.get("embedding_eval", {}))
    kwargs = {k: opts[k] for k in EMBEDDING_EVAL_OPTIONS if k in opts}
    # the probes the spec's metrics ask for, unless the options name them
    kwargs.setdefault("fewshot_shots", [s for s in (1, 5, 10) if f"fs{s}_acc" in spec.metrics])
    if "knn_acc" not in spec.metrics:
        kwargs.setdefault("knn_grid", ())
    reference = None
    if from_inputs:
        from fusebench.training.reference_features import reference_features

        # the pretrained rows' embedding width, at most the rank PCA can give (tiny synthetic runs)
        width = min(len(views["train"]) * int(model.num_features), len(ytr) - 1, sum(v.shape[1] for v in views["train"]))
        feats, reference, cluster_standardize = reference_features(objective, views, width=width)
        xtr, xva, xte = (feats[r] for r in roles)
        kwargs["cluster_standardize"] = cluster_standardize
    res = probe_and_cluster(xtr, ytr, xva, yva, xte, yte, data["train"].num_classes, seed, **kwargs)
    names = {"mf1": "macro_f1"}
    val = {m: res[f"val_{names.get(m, m)}"] for m in spec.metrics if f"val_{names.get(m, m)}" in res}
    test = {m: res.get(f"test_{names.get(m, m)}", res.get(m)) for m in spec.metrics}
    missing = [m for m, v in test.items() if v is None]
    if missing:
        raise RunError(f"{spec.name}: the embedding_eval protocol does not compute metric(s) {missing}")
    diag = {} if enc is None else representation_diagnostics(embeddings(model, data["val"], spec, dev, seed))
    record = make_record(spec, objective, seed, synthetic, dev, flags, data, curves=pre_curves, val=val, test=test,
                         best_epoch=-1, wall_time=wall.total(), pretrain_time=pretrain_time, timing=timing,
                         model=enc, diagnostics=diag, context=context)
    record["selection"]["rule"] = ("linear probe: L2 weight chosen on the validation split (highest val accuracy); "
                                   "kNN: k chosen on the validation split; k-means needs no selection; test scored once")
    for key in ("probe", "fewshot", "knn"):
        if key in res:
            record["selection"][key] = res[key]
    record["clustering"] = res["clustering"]
    if reference is not None:
        record["reference_features"] = reference
    return record


def dataset_identity(spec: BenchmarkSpec, synthetic: bool, data: dict[str, Any],
                     fingerprint: dict[str, Any] | None = None) -> dict[str, Any]:
    """What the run read: adapter id, synthetic or real; for real data the prepared cache's manifest
    hash (or "unprepared") and the fingerprint of the files under the data root."""
    if synthetic or spec.dataset.synthetic_only:
        return {"id": spec.dataset.id, "manifest_hash": "synthetic", "synthetic": True, "fingerprint": None}
    hashes = {role: getattr(ds, "manifest_hash", None) or "unprepared"
              for role, ds in data.items()}
    ident = {"id": spec.dataset.id, "manifest_hash": hashes["train"], "manifest_hashes": hashes,
             "synthetic": False, "root": str(getattr(data["train"], "root", "")), "fingerprint": fingerprint,
             "sizes": {role: len(ds) for role, ds in data.items()}}
    split_info = getattr(data["train"], "split_info", None)
    if callable(split_info):
        ident["splits"] = split_info()
    return ident


def make_record(spec, objective, seed, synthetic, device, flags, data, curves, val, test, best_epoch,
                wall_time, pretrain_time, model, diagnostics, context=None,
                timing: dict[str, Any] | None = None) -> dict[str, Any]:
    """The run record. ``timing`` (resumed cells): ``{"resumed": bool, "segments": {"wall": Clock | [s],
    "pretrain": [s]}}``; ``wall_time`` and ``pretrain_time`` are then the sums of the segments (the
    time of the work kept across processes), and the segments are recorded beside them."""
    segments = _segments(timing, wall_time, pretrain_time)
    if timing:
        wall_time = sum(segments["wall"])  # read once: the total is the sum of the recorded segments
    directions = {}
    if pipeline_of(spec).downstream:  # the dataset's task says how its metrics read (unit, direction)
        from fusebench.tasks import TASKS

        task = getattr((data or {}).get("train"), "task", None)
        if task in TASKS:
            described = TASKS.get(task).describe_metrics(spec.metrics, spec.downstream.protocol)
            directions = {mid: direction for mid, _unit, direction in described}
        else:  # a plugin adapter's task that is not registered: the metric metadata alone
            from fusebench import metrics as M

            directions = {mid: M.metadata(mid)["direction"] for mid in spec.metrics}
    return {
        "metric_directions": directions,
        "schema_version": SCHEMA_VERSION,
        "suite_version": fusebench.__version__,
        "git": (context or {}).get("git") or utils.git_info(),
        "benchmark": spec.name,
        "objective": objective,
        "seed": seed,
        "config": spec.to_dict(),
        "config_hash": spec.hash(),
        "dataset": dataset_identity(spec, synthetic, data, (context or {}).get("fingerprint")) if data else {"id": pipeline_of(spec).dataset_id(spec), "manifest_hash": "synthetic", "synthetic": True, "fingerprint": None},
        "device": str(device),
        "host": {"python": sys.version.split()[0], "torch": torch.__version__, "platform": platform.platform(),
                 "cpu_count": os.cpu_count(), "world_size": distributed.world_size()},
        "seeds": {"python": seed, "numpy": seed, "torch": seed},
        "determinism": {k: v for k, v in flags.items() if k != "numerics"},
        # the precision policy and what decided the numbers on this device (fusebench/training/precision.py)
        "precision": precision.check(spec.precision),
        "numerics": flags.get("numerics") or precision.numerics(precision.get(spec.precision), torch.device(device)),
        "curves": curves,
        "selection": {"rule": f"best validation {spec.primary_metric} over downstream epochs "
                              f"(split {spec.dataset.val_split!r}); test scored once with the selected weights",
                      "metric": spec.primary_metric, "best_epoch": best_epoch, "val_metrics": val},
        "metrics": test,
        "wall_time_s": wall_time,
        "pretrain_time_s": pretrain_time,
        "resumed": bool((timing or {}).get("resumed", False)),
        "time_segments_s": segments,
        "peak_memory_mb": utils.peak_memory_mb(device),
        "parameters": sum(p.numel() for p in model.parameters()) if model is not None else 0,
        "diagnostics": diagnostics,
        "protocol": spec.protocol_notes,
        "hparams": objective_hparams(spec, objective, context) if objective not in REFERENCES else {},
        "hparam_selection": (context or {}).get("hparam_selection", {}).get(objective),
        # the pretraining budget this row got: optimiser steps, samples seen, batch, micro-batch, epochs
        "budget": (timing or {}).get("budget") or {"optimizer_steps": 0, "samples_seen": 0, "batch_size": None,
                                                   "micro_batch": None, "epochs": 0},
        "comparison": comparison_of(spec),
    }


def comparison_of(spec: BenchmarkSpec) -> dict[str, str]:
    """How the board compares the rows (``spec.comparison`` with its defaults): the fixed reference row of
    the tests (``raw`` when the sweep has it, else ``none``), the primary metric and why it was chosen."""
    out = {k: v for k, v in spec.comparison.items() if v}
    if "reference" not in out:
        ref = next((r for r in (RAW, BASELINE) if r in spec.objectives), None)
        if ref:
            out["reference"] = ref
    out.setdefault("primary", spec.primary_metric)
    return out


def _segments(timing: dict[str, Any] | None, wall_time: float, pretrain_time: float) -> dict[str, list[float]]:
    """Per-process time segments of a record (one each for a cell run in one go)."""
    seg = (timing or {}).get("segments") or {}
    wall = seg.get("wall")
    return {"wall": wall.segments() if isinstance(wall, Clock) else list(wall or [wall_time]),
            "pretrain": list(seg.get("pretrain") or [pretrain_time])}


def resolve_views(spec: BenchmarkSpec, synthetic: bool, data_root: str | None) -> None:
    """Adapters whose views are known only from the file (``VIEWS_FROM_DATA``, e.g. any multi-view
    ``.mat``) are opened once to fill ``dataset.modalities``, so the view count k that decides the
    compatible objectives, and the recorded config, are those of the data actually read."""
    from fusebench import datasets

    if not pipeline_of(spec).reads_dataset or spec.dataset.modalities or not getattr(datasets.get(spec.dataset.id), "VIEWS_FROM_DATA", False):
        return
    ds = _datasets(spec, synthetic, data_root, 0, roles=("train",))["train"]
    spec.dataset.modalities = list(ds.modalities)


def check_data(spec: BenchmarkSpec, synthetic: bool, data_root: str | None, seed: int, objs: list[str]) -> None:
    """Build the three splits once and stop before any training with one clear message when the data
    is unusable: missing files, an empty split, or a pretraining batch larger than the train split."""
    from fusebench.datasets.base import DatasetError

    data = _datasets(spec, synthetic, data_root, seed)
    for role, ds in data.items():
        if len(ds) == 0:
            split = {"train": "train", "val": spec.dataset.val_split, "test": spec.dataset.test_split}[role]
            raise DatasetError(f"{spec.name}: the {role} split ({spec.dataset.id!r} split {split!r}, data root "
                               f"{getattr(ds, 'root', data_root)}) has no samples; the benchmark needs it "
                               f"{'for model selection' if role == 'val' else 'for training' if role == 'train' else 'for the test score'}")
    n = len(data["train"])
    for o in objs:
        bs = pretrain_batch_size(spec, o)
        if o not in REFERENCES and spec.pretrain.objective_epochs.get(o, spec.pretrain.epochs) > 0 and bs > n:
            key = f"pretrain.objective_batch_size.{o}" if o in spec.pretrain.objective_batch_size else "pretrain.batch_size"
            raise ConfigError(f"{key}={bs} exceeds the {n} samples of the train split of {spec.name}; "
                              f"choose a batch size <= {n}")


def write_record(cell: Path, record: dict[str, Any]) -> Path:
    """Write run.json once (immutable): written to a temporary file, then hard-linked into place,
    which fails if another process created run.json first — concurrent runs never overwrite."""
    from fusebench.records import comparability_key, validate_record, versions_block

    path = cell / "run.json"
    if path.exists():
        raise RunError(f"{path} exists already; run records are immutable")
    if record.get("schema_version", 1) >= 2:
        record.setdefault("versions", versions_block(record["objective"], list(record["config"].get("metrics") or [])))
        record["comparability_key"] = comparability_key(record)
    validate_record(record, path)  # never write a record the leaderboard would refuse
    tmp = cell / f".run.json.{os.getpid()}.tmp"
    utils.atomic_write_json(tmp, record)
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise RunError(f"{path} exists already; run records are immutable") from None
    finally:
        tmp.unlink(missing_ok=True)
    (cell / "failed.json").unlink(missing_ok=True)
    return path


# ---------------------------------------------------------------------------------------------
# sweep
# ---------------------------------------------------------------------------------------------
def sweep_cell(o: str, s: int, spec: BenchmarkSpec, out: Path, synthetic: bool, data_root: str | None, device: str,
               resume: bool, progress: bool, context: dict[str, Any], loggers: list[str] | None = None,
               mlflow_uri: str | None = None) -> dict[str, Any]:
    """One cell of a sweep: its record, or a ``failed`` / ``skipped`` entry (a failure is written to
    the cell's ``failed.json``); run in the sweep's process or in a local worker process."""
    cell = cell_dir(out, spec.name, o, s)
    try:
        return run_one(spec, o, s, out, synthetic=synthetic, data_root=data_root, device=device,
                       resume=resume or (cell / "last.pt").exists(), progress=progress, context=context,
                       loggers=loggers, mlflow_uri=mlflow_uri)
    except (KeyboardInterrupt, ConfigError, ConfigMismatchError):
        raise
    except CellBusyError as e:  # another process runs it: its record will be the cell's
        print(f"SKIPPED {spec.name}/{o}/seed{s}: {e}", file=sys.stderr)
        return {"status": "skipped", "benchmark": spec.name, "objective": o, "seed": s, "error": str(e)}
    except Exception as e:  # record the failed cell, go on with the sweep
        if (cell / "run.json").exists():  # a concurrent run of the cell won the race: keep its record
            return _existing_record(cell / "run.json", spec, context)
        failure = {"status": "failed", "benchmark": spec.name, "objective": o, "seed": s,
                   "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
        try:
            cell.mkdir(parents=True, exist_ok=True)
            utils.atomic_write_json(cell / "failed.json", failure)
        except OSError as w:  # e.g. the disk that made the cell fail is full: say so, do not hide the failure
            print(f"(could not write {cell / 'failed.json'}: {w.strerror or w})", file=sys.stderr)
        log.error("%s/%s/seed%s failed: %s", spec.name, o, s, e)
        print(f"FAILED {spec.name}/{o}/seed{s}: {type(e).__name__}: {e}", file=sys.stderr)
        return failure


def run(
    benchmark: str,
    objective: str | list[str] | None = None,
    seeds: list[int] | None = None,
    out: str | Path = "runs",
    synthetic: bool = False,
    data_root: str | None = None,
    device: str = "auto",
    overrides: dict[str, Any] | list[str] | None = None,
    resume: bool = False,
    progress: bool = True,
    leaderboard: str | Path | None = None,
    workers: int = 1,
    loggers: str | list[str] | None = None,
    mlflow_uri: str | None = None,
    launcher: str = "local",
    launcher_options: dict[str, Any] | None = None,
    precision: str | None = None,
) -> list[dict[str, Any]]:
    """Run ``benchmark`` for every objective x seed; returns the run records (failed cells as
    ``{"status": "failed", ...}``). All names are validated before any training starts.
    ``workers`` > 1 runs the cells in that many local processes (after every hyper-parameter
    selection); each cell is the same as in a sequential sweep (its own seed, lock and record).
    ``loggers``: experiment trackers for every cell, any of ``csv``, ``tensorboard``, ``mlflow``
    (docs/trackers.md; results are the same with or without); ``mlflow_uri``: the MLflow tracking
    URI (default ``MLFLOW_TRACKING_URI``, else ``file:<out>/.mlruns``).
    ``launcher``: where the cells run, ``local`` (default), ``slurm`` (one SLURM job per cell) or
    ``submitit_local``, with ``launcher_options`` (:mod:`fusebench.training.launchers`,
    docs/cluster.md); with ``launcher_options={"wait": False}`` the submitted cells come back as
    ``{"status": "submitted", "job_id": ...}`` and the leaderboard is left for later.
    ``precision``: the precision policy of encoders and heads (``32``, ``tf32``, ``bf16-mixed``,
    ``16-mixed``; :mod:`fusebench.training.precision`), the same as the override ``precision``."""
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ConfigError(f"--workers: expected a positive number of processes, got {workers!r}")
    from fusebench.training import launchers

    launch = launchers.build(launcher, workers, launcher_options)  # unknown name / option, missing submitit
    loggers = check_trackers([loggers] if isinstance(loggers, str) else loggers)  # unknown id / missing package
    from fusebench import benchmarks

    if isinstance(overrides, list):
        overrides = dict(parse_override(o) for o in overrides)
    if precision is not None:
        overrides = {**(overrides or {}), "precision": str(precision)}
    spec = benchmarks.load(benchmark, overrides=overrides, synthetic=synthetic)
    resolve_views(spec, synthetic, data_root)
    objs = [objective] if isinstance(objective, str) else list(objective or spec.objectives or [spec.pretrain.objective])
    for o in objs:  # validate every requested name first
        check_compatible(spec, o)
    seeds = [check_seed(s) for s in (seeds if seeds is not None else spec.seeds)]
    # the device where the cells run here (a scheduler's nodes are not this machine: the name only)
    utils.check_device_name(device) if launcher == "slurm" else utils.resolve_device(device)
    check_components(spec, objs)
    pipeline = pipeline_of(spec)
    if pipeline.downstream:
        from fusebench import metrics as M

        for mid in spec.metrics:
            M.get(mid)
    if pipeline.reads_dataset and not (synthetic or spec.dataset.synthetic_only):
        from fusebench import datasets
        from fusebench.datasets.base import DatasetNotFoundError

        cls = datasets.get(spec.dataset.id)
        if data_root is None or not Path(data_root).exists():
            where = "no --data-root given" if data_root is None else f"--data-root {data_root} does not exist"
            raise DatasetNotFoundError(f"{spec.name}: {where}; or pass --synthetic to use the synthetic twin.\n{cls.info()}")
    out = check_out(Path(out))
    mlflow_uri = default_mlflow_uri(out, mlflow_uri) if "mlflow" in loggers else None  # one URI for every worker
    context = sweep_context(spec, synthetic, data_root)  # before any output of this sweep is written
    for o in objs:  # a cell made with another configuration or other data stops the sweep before any training
        for s in seeds:
            cell = cell_dir(out, spec.name, o, s)
            if _record_there(cell / "run.json", out):
                _existing_record(cell / "run.json", spec, context)
            elif (cell / "last.pt").exists():
                _check_checkpoint_config(cell / "last.pt", _load_checkpoint(cell / "last.pt"), spec, context)
    pending = [(o, s) for o in objs for s in seeds if not (cell_dir(out, spec.name, o, s) / "run.json").exists()]
    if pending and pipeline.reads_dataset:  # once, before the first cell: one message, not one per cell
        check_data(spec, synthetic, data_root, pending[0][1], [o for o, _ in pending])
    def select(o: str) -> None:  # hyper-parameters chosen on val before the objective's cells
        if any(oo == o for oo, _ in pending):
            chosen = select_hparams(spec, o, out, synthetic, data_root, device, progress, context)
            if chosen is not None:
                context.setdefault("hparams", {})[o] = chosen["choice"]
                context.setdefault("hparam_selection", {})[o] = chosen

    args = (spec, out, synthetic, data_root, device, resume, progress, context, loggers, mlflow_uri)
    # the launcher runs every cell as sweep_cell(o, s, *args): here, in local workers, or as scheduler jobs
    records = launch.launch(objs, seeds, select, args)
    if leaderboard is not None and any(r.get("status") == "submitted" for r in records):
        print(f"jobs submitted, not waited for: when they are done, run\n  fusebench leaderboard --runs {out} "
              f"--out {leaderboard}\n(fusebench status --out {out} shows where the cells stand)", file=sys.stderr)
    elif leaderboard is not None:
        from fusebench.leaderboard import write_leaderboards

        write_leaderboards(out, Path(leaderboard))
    return records


__all__ = ["RunError", "check_compatible", "compatible_objectives", "run", "run_one"]
_ = dataclasses
