"""The standard pipeline's cell (pipelines layer): dataset adapter -> encoder -> pretraining with the
objective -> downstream protocol -> metrics -> ``run.json``.

:class:`StandardCell` runs one :class:`~fusebench.spec.request.CellRequest` in two steps, each a
method:

1. :meth:`StandardCell.pretrain`: the objective trains the encoders (and its projection heads) for
   ``pretrain.epochs`` (``pretrain.per_objective.<id>.epochs`` / ``.batch_size`` where the spec sets them) in the
   phase loop of :mod:`fusebench.engine.loop`; ``last.pt`` every ``checkpoint_every`` steps, so a
   resumed cell reaches the same result. A row that pretrains nothing (a reference or a weights row,
   :mod:`fusebench.components.rows`) skips it.
2. :meth:`StandardCell.downstream`: the protocol of ``downstream.protocol`` scores the cell
   (:meth:`fusebench.components.protocols.Protocol.score`): ``linear_probe`` / ``finetune`` train the task head
   (:mod:`fusebench.cells.head_protocol`), ``embedding_eval`` probes the frozen embeddings
   (:mod:`fusebench.cells.embedding_protocol`).

The record is built once, complete, by :func:`fusebench.records.builder.record_of` from how the cell ran
(:meth:`StandardCell.ran`) and what the protocol measured (:class:`fusebench.records.builder.Scores`), and
written unchanged by :func:`fusebench.records.cell_file.write_record`.
"""

from __future__ import annotations

import time
from typing import Any, Mapping

import torch
from torch import nn

from fusebench.runtime import distributed, utils
from fusebench.spec import precision
from fusebench.engine import speed
from fusebench.engine.cell import check_checkpoint_config, data_fingerprint, load_checkpoint
from fusebench.spec.config import BenchmarkSpec, ConfigError
from fusebench.engine.data import build_datasets, feeding, held_in_memory, input_dims, make_loader, resolve_feed
from fusebench.engine.loop import Clock, Phase, PhaseHooks, StepBudget, run_phase
from fusebench.engine.optim import build_optimizer, build_scheduler
from fusebench.runtime.progress import progress_bar
from fusebench.components.protocols import protocol_of
from fusebench.records.builder import NO_BUDGET, CellRun, Scores, record_of
from fusebench.records.cell_file import write_record
from fusebench.components.rows import row_of
from fusebench.spec.request import CellRequest, RunOptions, objective_hparams
from fusebench.engine.trackers import Trackers

def build_model(spec: BenchmarkSpec, train_ds, objective: str | None = None) -> nn.Module:
    """The encoder (a backbone) with the head its dataset's task builds on it, right after it
    (:class:`fusebench.components.model.TaskModel`). The ``raw`` row of a linear-probe benchmark gets the
    ``identity`` encoder instead (the probe is trained on the input vectors)."""
    from fusebench import encoders, tasks
    from fusebench.components.model import build as with_task_head

    if objective is not None and row_of(spec, objective).identity_encoder(spec):  # the inputs as they are
        cfg = {"modalities": input_dims(train_ds)}
        if train_ds.num_classes is not None:
            cfg["num_classes"] = train_ds.num_classes
        return with_task_head(encoders.build("identity", **cfg), tasks.for_dataset(train_ds))
    return with_task_head(encoders.build(spec.encoder.id, **encoder_config(spec, train_ds)), tasks.for_dataset(train_ds))


def encoder_config(spec: BenchmarkSpec, train_ds) -> dict[str, Any]:
    """The spec's encoder config as the encoder is built with it: ``encoder.config`` with the modalities' input
    sizes (name -> channels) and, for a dataset whose task builds its encoder with the class count
    (``Task.encoder_takes_classes``: classification, segmentation), its class count when the encoder's constructor
    takes ``num_classes`` (docs/adding-a-modality.md, the encoder contract), where the spec does not set them."""
    from fusebench import encoders, tasks

    cfg = dict(spec.encoder.config)
    cfg.setdefault("modalities", input_dims(train_ds))
    if (train_ds.num_classes is not None and "num_classes" not in cfg
            and tasks.TASKS.get(train_ds.task).gives_classes(encoders.ENCODERS.get(spec.encoder.id))):
        cfg["num_classes"] = train_ds.num_classes
    return cfg


def check_weights_fit(spec: BenchmarkSpec, train_ds, names: list[str]) -> None:
    """Before any cell: the spec's encoder builds for ``train_ds`` with its ``encoder.config``, its task head with
    it (a value its constructor refuses, say ``hidden: -5``, or a ``num_classes`` other than the data's, is one
    ConfigError naming the key, not a failure in every cell after its pretraining), and (issue #32) the encoder
    weights of each row in ``names`` (``spec.encoder_weights``) fit it -- the strict ``load_state_dict`` as a dry
    run on a model built here and thrown away; one ConfigError naming the row, the file and the mismatching
    parameters."""
    from fusebench import encoders, tasks
    from fusebench.components import encoder_weights as W

    cfg = encoder_config(spec, train_ds)
    try:
        backbone = encoders.build(spec.encoder.id, **cfg)
        # the head the task builds on it, thrown away: a num_classes the data contradicts (a multi-view .mat's
        # class count is known once the file is read) is refused here, not in every cell
        head = tasks.for_dataset(train_ds).build_head(backbone)
    except (ValueError, TypeError, RuntimeError) as e:
        given = {k: v for k, v in cfg.items() if k in spec.encoder.config}
        raise ConfigError(f"{spec.name}: encoder {spec.encoder.id!r} cannot be built with encoder.config {given} "
                          f"(and the data's input sizes): {type(e).__name__}: {e}") from None
    if spec.speed.channels_last and not (speed.has_conv2d(backbone) or speed.has_conv2d(head)):
        # the cell would leave the model as it is (speed.to_channels_last), with the setting in the config hash
        raise ConfigError(f"{spec.name}: speed.channels_last=true: encoder {spec.encoder.id!r} and its task head have "
                          f"no 2-D convolutions (the layers the channels-last format is for), so it would be recorded "
                          f"and hashed and change nothing; drop it")
    for name in names:
        W.load_into(backbone, name, spec.encoder_weights[name], spec.encoder.id, cfg)


def pretrain_extensions(pre: nn.Module) -> list[tuple[type, Any]]:
    """(class, options) of the per-epoch extensions of the Pretrainer's methods (``fusebench.spec.methods``)."""
    from fusebench.spec.methods import extensions

    return extensions(list(pre.methods.values()))


#: what the validation tuples of a pretraining extension are drawn with, beside the run's seed
VAL_TUPLES_SEED = 104_729


def val_tuples(val_ds: Any, m: int, seed: int) -> Any:
    """The held-out batch a pretraining extension scores its candidates on (TupleInfoNCE's M validation tuples,
    Sec. 4.3.1: "M random tuples t_m ~ p(t)"): ``m`` samples of the validation split drawn at random once per run
    (seeded by ``seed``; the same batch every epoch), not its first ``m`` in file order (a recording's consecutive
    epochs, one subject's night)."""
    return next(iter(make_loader(val_ds, m, True, seed + VAL_TUPLES_SEED, 0)[0]))


def _tracking(trackers: Any) -> dict[str, Any]:
    """The training loop's callbacks for ``trackers``: ``on_step`` (each step's loss: read every step) or, for a
    tracker that wants no values (``on_step_end``: the GPU bench's timer), a call per step without a read."""
    if not trackers:
        return {}
    if hasattr(trackers, "on_step_end"):
        return {"on_step_end": trackers.on_step_end, "on_epoch_start": trackers.on_epoch_start}
    return {"on_step": trackers.on_step, "on_epoch_start": trackers.on_epoch_start}


def run_standard_cell(request: CellRequest, options: RunOptions, context: Mapping[str, Any],
                      trackers: Trackers | None = None) -> dict[str, Any]:
    """One cell of the standard pipeline under its precision policy (:mod:`fusebench.spec.precision`):
    the TF32 switches are set for the cell and restored after it, as are the cuDNN switches of
    ``speed.cudnn_benchmark`` (:mod:`fusebench.engine.speed`). Returns the record it wrote (on a
    rank other than 0 of a distributed run, ``{"status": "worker", ...}``: rank 0 writes the record)."""
    policy = precision.get(request.spec.precision)
    with precision.backend_flags(policy), speed.backend_scope(request.spec.speed):
        return StandardCell(request, options, context, trackers, policy).run()


class StandardCell:
    """The state one cell's two steps share: data, model, device, checkpoint, clocks."""

    def __init__(self, request: CellRequest, options: RunOptions, context: Mapping[str, Any],
                 trackers: Trackers | None, policy: precision.Precision) -> None:
        self.request, self.options, self.context, self.trk, self.policy = request, options, context, trackers, policy
        spec, objective, seed = request.spec, request.objective, request.seed
        self.spec, self.objective, self.seed, self.cell = spec, objective, seed, request.cell
        self.wall = Clock()  # the cell's time; a resumed cell adds the segments of the processes before
        self.dev = torch.device(options.device)  # resolved once by run_cell (RunOptions.resolved)
        self.flags = utils.seed_everything(seed)
        self.row = row_of(spec, objective)  # how the row's representation is made (fusebench.components.rows)
        # an input-feature row other than raw is computed from the unstandardised input views
        self.from_inputs = self.row.from_inputs(spec)
        # a hyper-parameter trial is scored on the validation split alone: the test split is not even read
        roles = ("train", "val") if options.selection_trial else ("train", "val", "test")
        self.data = build_datasets(spec, options.synthetic, options.data_root, seed, roles=roles,
                                   extra_options={"standardize": False} if self.from_inputs else None)
        self.model = build_model(spec, self.data["train"], objective)
        self.weights_fields = self.load_encoder_weights()  # a pretrained encoder's row (issue #32): its record fields
        self.model = self.model.to(self.dev)
        # the speed options (fusebench/engine/speed.py; all off by default) and how batches are fetched
        speed.apply_backend(spec.speed, self.flags)
        self.channels_last = speed.to_channels_last(self.model, spec.speed)
        self.compiled = speed.compile_encoder(self.model, spec.speed)
        self.feed = resolve_feed(spec.loader, options.num_workers, self.dev, in_memory=held_in_memory(self.data["train"]),
                                 cells_at_once=options.cells_at_once)
        # what a training step does to its batch on the host, before the copy (channels-last, into pinned memory)
        self.inputs = speed.input_format(self.channels_last, pin=self.feed.pin_memory)
        # what decides the numbers here (run.json); its "speed" block is added when the record is done (run)
        self.flags["numerics"] = precision.numerics(policy, self.dev)
        self.autocast = precision.autocast(policy, self.dev)  # encoders and heads only: objectives in float32
        self.budget = StepBudget(options.max_steps)
        self.track = _tracking(trackers)
        self.ckpt = None
        if options.resume and (self.cell / "last.pt").exists():
            self.ckpt = check_checkpoint_config(self.cell / "last.pt", load_checkpoint(self.cell / "last.pt"), spec,
                                                objective, context)
            self.wall.before = [float(t) for t in self.ckpt.get("wall_segments_s", ())]
        self.fingerprint = data_fingerprint(context)
        # what pretraining leaves for the downstream step (restored from last.pt when resumed there)
        self.pre_curves: dict[str, list[float]] = {}
        self.pretrain_time = 0.0
        self.pre_segments: list[float] = []
        self.budget_record: dict[str, Any] = dict(NO_BUDGET)

    def load_encoder_weights(self) -> dict[str, Any]:
        """For a row of ``encoder_weights`` (:mod:`fusebench.components.encoder_weights`): its file loaded into
        the encoder, strictly; returns the record's ``encoder_weights`` field (its ``versions`` name the file's
        hash as the objective's version: :func:`fusebench.components.identity.cell_versions`). Empty for every
        other row."""
        from fusebench.components import encoder_weights as W

        entry = self.spec.encoder_weights.get(self.objective)
        if entry is None:
            return {}
        cfg = encoder_config(self.spec, self.data["train"])
        W.load_into(self.model.backbone, self.objective, entry, self.spec.encoder.id, cfg)
        return {"encoder_weights": W.record_field(self.objective, entry, self.spec.encoder.id, cfg)}

    @property
    def resumed_downstream(self) -> bool:
        return self.ckpt is not None and self.ckpt["phase"] == "downstream"

    def speed_record(self) -> dict[str, Any]:
        """``numerics.speed`` of the record: the feed and the speed options in force (compilation included)."""
        return speed.record(self.spec.speed, self.feed.record(), self.channels_last, self.compiled)

    def run(self) -> dict[str, Any]:
        with feeding(self.feed):  # the cell's loaders; persistent workers are shut down at its end
            self.pretrain()
            if distributed.rank() != 0:  # rank 0 alone runs the (cheap) downstream protocol and writes the record
                return {"status": "worker", "benchmark": self.spec.name, "objective": self.objective, "seed": self.seed}
            scores = self.downstream()
            # built once, complete: numerics.speed (compilation's outcome is known now), versions, comparability key
            record = record_of(self.ran(), scores)
        write_record(self.cell, record)
        return record

    def ran(self) -> CellRun:
        """How this cell ran (:class:`fusebench.records.builder.CellRun`), read when its record is built (after
        :meth:`downstream`, which restores a resumed cell's pretraining budget)."""
        timing = {"resumed": self.ckpt is not None, "segments": {"wall": self.wall, "pretrain": self.pre_segments},
                  "budget": self.budget_record}
        return CellRun(self.request, self.options.synthetic, self.dev, self.flags, self.data, self.context,
                       curves=self.pre_curves, wall_time=self.wall.total(), pretrain_time=self.pretrain_time,
                       timing=timing, speed=self.speed_record(), fields=self.weights_fields)

    # ---- pretraining ----------------------------------------------------------------------------
    def pretrain(self) -> None:
        """Train the encoders with the objective (nothing for a reference row or zero epochs)."""
        from fusebench import objectives
        from fusebench.objectives.solver_tally import tally_of
        from fusebench.spec.methods import split_method_keys, with_method_options
        from fusebench.probes.missing_views import with_missing_views
        from fusebench.engine.pretrain import Pretrainer

        spec, objective, seed, data, dev, cell = self.spec, self.objective, self.seed, self.data, self.dev, self.cell
        pt = spec.pretrain
        own = pt.settings(objective)
        batch_size, epochs = own.batch_size, own.epochs
        if not self.row.pretrains or epochs <= 0:  # a reference or a weights row (issue #32): nothing pretrained
            return
        kwargs, method_options = split_method_keys(objective_hparams(spec, objective, self.context))
        obj = objectives.build(objective, **kwargs).to(dev)
        _, per_epoch = make_loader(data["train"], batch_size, True, seed, 0)
        total = per_epoch * epochs
        micro = own.micro_batch
        # a grid over a method's option (methods.<id>.<option>, e.g. BYOL's EMA momentum) sets it for this cell
        pre = Pretrainer(self.model, obj, with_method_options(pt, method_options), total_steps=total,
                         micro_batch=micro).to(dev)
        opt = build_optimizer(pre.student_parameters(), pt.optimizer, pt.lr, pt.weight_decay, spec.speed.optimizer_impl)
        step_fn = pre
        if distributed.is_distributed():  # DDP: rank 0's weights, averaged gradients
            from torch.nn.parallel import DistributedDataParallel as DDP

            # heads unused by the objective (e.g. the task head) get no gradient: find_unused_parameters
            step_fn = DDP(pre, device_ids=[dev.index] if dev.type == "cuda" else None, find_unused_parameters=True)
        sched = build_scheduler(opt, pt.schedule, total, pt.warmup_epochs * per_epoch)
        phase = Phase("pretrain", cell, spec.checkpoint_every, {"pretrainer": pre, "optimizer": opt, "scheduler": sched})
        scaler = precision.grad_scaler(self.policy, dev)  # 16-mixed: its state goes into last.pt with the phase's
        if scaler is not None:
            phase.mods["grad_scaler"] = scaler
        phase.identify(spec, self.objective, self.fingerprint, self.context)
        from fusebench.spec.methods import epoch_update_kwargs

        extensions = []  # the pretraining methods' own per-epoch steps (e.g. Algorithm 1); state in last.pt
        for ext_cls, opts in pretrain_extensions(pre):
            if ext_cls.enabled(opts):
                ext = phase.mods[ext_cls.state_key] = ext_cls(pre, opts, seed)
                extensions.append((ext, opts, epoch_update_kwargs(ext, scaler)))  # refused before training if unfit
        # the objective's iterative solver, if it has one: its calls that stopped at max_iter, counted per epoch into
        # the curves (solver_calls, solver_not_converged, solver_worst_marginal_error); the epoch's running count is
        # saved with each checkpoint, so a resumed cell counts what an uninterrupted one does
        tally = tally_of(obj)
        if self.ckpt is not None and self.ckpt["phase"] == "pretrain":
            phase.restore(self.ckpt)
            if tally is not None and "solver_tally" in self.ckpt:
                tally.load_state_dict(self.ckpt["solver_tally"])
        skip = self.resumed_downstream  # pretraining was finished; its results come from last.pt
        tp, start_step = time.time(), phase.step
        bar = progress_bar(total, phase.step, f"{self.request.where} pretrain", enabled=self.options.progress and not skip)

        def optimise(loss: torch.Tensor) -> None:
            pre.optimise(loss, opt, all_reduce=step_fn is pre, scaler=scaler)
            precision.step_scheduler(sched, scaler)
            pre.after_step(phase.step)

        def epoch_end() -> None:
            if tally is not None:
                for key, value in tally.take().items():
                    phase.curves.setdefault(key, []).append(value)
            for ext, opts, kwargs in extensions:  # e.g. B candidates from g_t, best kept as g_{t+1}, policy means to the curves
                ext.epoch_update(opt, phase.epoch,
                                 lambda: make_loader(data["train"], batch_size, True, seed + 7_919, phase.epoch, shard=True)[0],
                                 val_tuples(data["val"], ext.val_batch_size(opts), seed),
                                 phase.curves, self.autocast, **kwargs)  # 16-mixed: scaler=, the candidates' scale

        hooks = PhaseHooks(
            host=lambda batch: pre.host_batch(self.inputs(batch)),  # mask checked on the host, format set before the copy
            loss=lambda batch: step_fn(batch, gather=distributed.gather_with_grad),
            optimise=optimise,
            loader=lambda epoch, skip: with_missing_views(  # pretrain.missing_rate > 0: views taken out, seeded
                make_loader(data["train"], batch_size, True, seed, epoch, skip=skip, shard=True)[0], pt.missing_rate,
                seed, epoch, skip),
            on_epoch_start=pre.train,
            on_epoch_end=epoch_end,
            extra=lambda: {"wall_segments_s": self.wall.segments(),
                           **({"solver_tally": tally.state_dict()} if tally is not None else {})},
            diverged=lambda v, step, epoch: (f"{spec.name}: loss of objective {objective!r} is {v} at pretraining "
                                             f"step {step} (epoch {epoch})"),
            postfix=lambda v: {"loss": f"{v:.4f}",
                               "it_s": f"{(phase.step - start_step) / max(1e-9, time.time() - tp):.1f}"},
        )
        if not skip:
            run_phase(phase, epochs, hooks, dev, self.autocast, "pretrain_loss", bar, self.budget, **self.track)
        bar.close()
        self.pre_segments = phase.clock.segments()  # this process's and, when resumed, the earlier ones'
        # the steps of a method's own per-epoch training (Algorithm 1's candidates): those in the kept encoder's
        # history count as its steps; all of them (the compute) are stated beside
        extra = [ext.budget() for ext, _, _ in extensions if callable(getattr(ext, "budget", None))]
        kept = int(phase.step) + sum(b["kept_steps"] for b in extra)
        self.budget_record = {"optimizer_steps": kept, "samples_seen": kept * batch_size,
                              "batch_size": batch_size, "micro_batch": int(micro) if micro else None, "epochs": epochs}
        if extra:
            self.budget_record["candidate_steps"] = sum(b["candidate_steps"] for b in extra)
        self.pretrain_time = sum(self.pre_segments)
        self.pre_curves = phase.curves

    # ---- downstream -----------------------------------------------------------------------------
    def downstream(self) -> Scores:
        """The downstream protocol on the pretrained encoders; returns what it measured (:meth:`run` builds the
        record)."""
        spec, model = self.spec, self.model
        pretrained_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        ckpt = self.ckpt if self.resumed_downstream else None
        if ckpt is not None:
            self.pre_curves, self.pretrain_time = ckpt["pretrain_curves"], ckpt["pretrain_time"]
            self.pre_segments = list(ckpt.get("pretrain_time_segments_s", [self.pretrain_time]))
            pretrained_state = ckpt["pretrained_state"]
            if "pretrain_budget" in ckpt:
                self.budget_record = ckpt["pretrain_budget"]
        # the protocol scores the cell (fusebench.components.protocols: Protocol.scorer) and says what it measured
        scores = protocol_of(spec).score(self, pretrained_state=pretrained_state, ckpt=ckpt)
        if not isinstance(scores, Scores):
            raise TypeError(f"the scorer of protocol {spec.downstream.protocol!r} ({protocol_of(spec).scorer}) "
                            f"returned {type(scores).__name__}, not fusebench.records.builder.Scores")
        return scores


__all__ = ["StandardCell", "build_model", "check_weights_fit", "encoder_config", "pretrain_extensions",
           "run_standard_cell"]
