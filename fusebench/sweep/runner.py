"""Run a benchmark by name (sweep layer): plan, check, select hyper-parameters, launch the cells.

``run("quickstart", objective=["m3g", "infonce_pwe"], seeds=[0, 1])`` runs the sweep objectives x
seeds. Before any training it checks everything once: the objectives fit the benchmark's views
(:func:`fusebench.components.compat.check_compatible`), the spec's components exist and accept its hyper-parameters
(:func:`check_components`), the data is there and usable (:func:`check_data`), no existing cell was made
with another configuration or other data, and each ``last.pt`` to resume fits the cell's modules
(:func:`fusebench.sweep.plan.check_resumes_fit`). Then, for every objective, the hyper-parameters are chosen on the
validation split and frozen to a file before any evaluation cell starts (:mod:`fusebench.sweep.selection`),
and the launcher (:mod:`fusebench.sweep.launchers`) runs every cell as :func:`fusebench.cells.execute.sweep_cell`: a cell whose ``run.json`` exists is reused, a failed cell is
recorded in ``<out>/<benchmark>/<objective>/seed<k>/failed.json`` and the sweep goes on.

One cell is :func:`fusebench.cells.execute.run_cell`; the standard pipeline's cell is
:mod:`fusebench.cells.standard` (pretraining -> downstream protocol -> record).

This module is longer than 450 lines: the checks made before any work (the run's settings used or refused, the
components, the data, the existing cells) all read the same run arguments and each says what the run would do, so
they stay beside the sweep that applies them; splitting the used-or-refused checks into their own module is the
next cut when it grows.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Iterable, Mapping

from fusebench.pipelines import pipeline_of  # what the spec's pipeline runs and declares (fusebench/pipelines.py)
from fusebench.runtime import progress as progress_lines
from fusebench.components.compat import check_compatible
from fusebench.spec.config import BenchmarkSpec, ConfigError, check_seed, setting_key
from fusebench.engine.data import build_datasets
from fusebench.cells.execute import sweep_context
from fusebench.sweep.plan import cell_plan, frozen_context, selection_plan
from fusebench.components.rows import row_of
from fusebench.spec.request import CellRequest, RunOptions, SweepCells, SweepRequest, check_cell_ids
from fusebench.engine.trackers import check_trackers, default_mlflow_uri
from fusebench.io import shown_path

# ---------------------------------------------------------------------------------------------
# checks before any training
# ---------------------------------------------------------------------------------------------
def check_components(spec: BenchmarkSpec, objs: list[str]) -> None:
    """Before any work: the spec's dataset and encoder ids are registered (a plugin's id that is not
    installed here would fail in every cell), and every objective can be built with its
    hyper-parameters and with every combination of its selection grid (value checks such as
    ``eps > 0`` live in the objectives' constructors). One ConfigError naming the key."""
    from fusebench import datasets, encoders, objectives
    from fusebench.registry import UnknownNameError
    from fusebench.spec.methods import split_method_keys, with_method_options

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
        if not row_of(spec, o).pretrains:  # a reference or a weights row (issue #32): nothing pretrained
            continue
        own = spec.pretrain.settings(o)
        # the hyper-parameters alone too (a grid may replace some): a value the objective refuses is refused wherever
        for point in ([{}] if own.grid else []) + own.points():
            hp = own.at(point)
            try:
                kwargs, method_options = split_method_keys(hp, f"{spec.name}: {setting_key(o, 'grid')}")
                objectives.build(o, **kwargs)
                with_method_options(spec.pretrain, method_options, f"{spec.name}: {setting_key(o, 'grid')}")
            except (ValueError, TypeError) as e:
                where = setting_key(o, "hparams") + (f" / {setting_key(o, 'grid')} {point}" if point else "")
                raise ConfigError(f"{spec.name}: {where}: objective {o!r} refuses {hp}: {e}") from None


def check_method_options_used(spec: BenchmarkSpec, objs: list[str], overrides: Iterable[str] = ()) -> None:
    """A pretraining method's options (``pretrain.methods.<id>``, off their defaults) are used or refused: a
    ConfigError when the method joins none of the cells they would reach. Given on the command line
    (``overrides``: the ``--set`` keys), that is the run's objectives ``objs``; written in the spec, its
    objectives or the run's (the spec may set a method for an objective this run leaves out). The cells' config
    hash already leaves such options out (:func:`fusebench.components.identity.methods_used`); without this check the
    record would show them as if set."""
    from fusebench.components.identity import methods_used
    from fusebench.spec.config import canonical_pretrain

    pretrain = canonical_pretrain(spec.pretrain)
    set_here = sorted(pretrain.get("methods") or {})
    if not set_here:
        return

    def joined_by(names: Iterable[str]) -> set[str]:
        used: set[str] = set()
        for o in names:
            m = methods_used(o, pretrain)
            used |= set(set_here) if m is None else set(m)  # None: an id not registered here, every method counts
        return used

    by_run = joined_by(objs)
    by_spec = joined_by([*spec.objectives, *objs])
    keys = list(overrides)
    for mid in set_here:
        given = [k for k in keys if k in ("pretrain", "pretrain.methods") or k.startswith(f"pretrain.methods.{mid}")]
        if given:
            reached, whose = by_run, f"this run's objectives ({', '.join(objs)})"
        else:
            named = ", ".join(dict.fromkeys([*spec.objectives, *objs]))
            reached, whose = by_spec, f"the benchmark's objectives or this run's ({named})"
        if mid not in reached:
            what = ", ".join(f"{k}={v!r}" for k, v in pretrain["methods"][mid].items())
            raise ConfigError(f"{spec.name}: pretrain.methods.{mid} ({what}{', from --set' if given else ''}): the "
                              f"{mid} method joins none of {whose}, so the setting would be recorded and not used; "
                              f"drop it, or run an objective that builds on {mid}")


def check_methods_read(spec: BenchmarkSpec, objs: Iterable[str]) -> None:
    """A pretraining method that would join the runs of an objective of the run ``objs`` which says its loss does not
    read it (:func:`fusebench.spec.methods.unread_methods`: ``ema_teacher: {enabled: true}`` for ``tuple_infonce``,
    whose ``uses_teacher`` is false) is refused at any point of the objective's grid: built and updated every step,
    recorded and hashed, and never read. One ConfigError naming the key that brings it in (the grid point's, or
    ``pretrain.methods``: an objective's ``hparams`` take no ``methods.*`` key, refused when the spec loads) and the
    objective."""
    from fusebench import objectives
    from fusebench.spec.methods import METHODS, option_values, split_method_keys, unread_methods, with_method_options

    for o in dict.fromkeys(objs):
        if not row_of(spec, o).pretrains or o not in objectives.OBJECTIVES:
            continue
        own = spec.pretrain.settings(o)
        for point in own.points():
            _, method_options = split_method_keys(own.at(point))
            for mid, attr in unread_methods(objectives.OBJECTIVES.get(o), with_method_options(spec.pretrain,
                                                                                              method_options)):
                mine = {k: v for k, v in point.items() if k.startswith(f"methods.{mid}.")}
                if mine:
                    keys = ", ".join(f"{setting_key(o, 'grid')}.{k}={v!r}" for k, v in mine.items())
                else:
                    given = option_values((spec.pretrain.methods or {}).get(mid) or METHODS.get(mid).Options())
                    default = option_values(METHODS.get(mid).Options())
                    keys = ", ".join(f"pretrain.methods.{mid}.{k}={v!r}" for k, v in given.items() if v != default[k])
                raise ConfigError(f"{spec.name}: {keys or f'pretrain.methods.{mid}'}: the {mid} method is not used by "
                                  f"{o} (the objective's {attr} is false: its loss never reads what {mid} adds), so "
                                  f"it would be built, recorded and hashed in {o}'s cells and change nothing; drop it, "
                                  f"or run {o} apart from the objectives that read it (--objective)")


def check_objective_overrides_used(spec: BenchmarkSpec, objs: list[str], overrides: Iterable[str] = ()) -> None:
    """``--set`` values of objectives' settings are used or refused: one objective's own setting
    (``pretrain.per_objective.<id>...``, or a flat table ``pretrain.<table>.<id>...``) for an objective this run does
    not run, and a common ``pretrain.epochs`` / ``pretrain.batch_size`` that no objective of the run reads (each
    pretraining objective has its own), are a ConfigError naming the key: the value would be recorded and not used;
    so is any ``pretrain.*`` value when no row of the run pretrains (reference rows and weights rows only,
    :func:`pretrains_nothing` names them; the selection seeds are read by a reference row whose width is selected),
    and a ``pretrain.selection_seed`` / ``selection_seeds`` off its default when no row of the run has a selection
    grid (:func:`fusebench.sweep.selection.selects`: the seeds of a search nothing runs; hash schema 4 leaves them
    out of the cells' identity). Where some objectives
    read the common value and others keep their own, those are named on stderr."""
    from fusebench.spec.config import GROUPED, PER_OBJECTIVE, grouped_override

    keys = list(overrides)
    for key in keys:
        parts = grouped_override(key, "--set").split(".")
        if len(parts) >= 3 and parts[0] == "pretrain" and parts[1] in PER_OBJECTIVE and parts[2] not in objs:
            raise ConfigError(f"--set {key}: objective {parts[2]!r} is not in this run ({', '.join(objs)}), so the "
                              f"setting would be recorded and not used; drop it, or add --objective {parts[2]}")
        if len(parts) >= 3 and parts[:2] == ["pretrain", "hparams"]:  # a value the selection grid replaces
            o = parts[2]
            given = [parts[3]] if len(parts) >= 4 else list(spec.pretrain.hparams.get(o) or {})
            grid = spec.pretrain.grid.get(o) or {}
            shadowed = [h for h in given if h in grid and row_of(spec, o).pretrains]
            if shadowed:
                h = shadowed[0]
                raise ConfigError(f"--set {key}: {setting_key(o, 'grid')}.{h} = {grid[h]} selects {h} on validation, "
                                  f"so this value would be recorded and not used; set the grid instead "
                                  f"(--set {setting_key(o, 'grid')}.{h}=[...])")
        if parts[:2] == ["pretrain", GROUPED] and len(parts) == 2:  # every objective's block, as one mapping
            given = overrides[key] if isinstance(overrides, dict) else None
            absent = sorted(set(given) - set(objs)) if isinstance(given, dict) else []
            if absent:
                raise ConfigError(f"--set {key}: objective(s) {', '.join(absent)} not in this run "
                                  f"({', '.join(objs)}): their settings would be recorded and not used")
    if "pretrain.objective" in keys and list(objs) != [spec.pretrain.objective]:  # the default row, not run here
        raise ConfigError(f"--set pretrain.objective={spec.pretrain.objective}: it names the row a run makes when "
                          f"neither --objective nor the spec's objectives list names them; this run's rows are "
                          f"{', '.join(objs)}, so the value would be recorded and not used; drop it, or run "
                          f"--objective {spec.pretrain.objective}")
    from fusebench.sweep.selection import selects

    pretraining = [o for o in objs if row_of(spec, o).pretrains]
    selecting = [o for o in objs if selects(spec, o)]  # objectives with a grid; raw_pca with pca_widths
    seed_names = ("pretrain.selection_seed", "pretrain.selection_seeds")
    # a reference row whose width is selected reads the selection seeds (and no other pretraining setting)
    pretrain_keys = [k for k in keys if k.split(".")[0] == "pretrain" and not (selecting and k in seed_names)]
    defaults = type(spec.pretrain)()  # a key set back to its default (selection_seeds=[]: off) changes nothing
    seeds_keys = [k for k in keys if k in seed_names
                  and getattr(spec.pretrain, k.split(".")[1]) != getattr(defaults, k.split(".")[1])]

    def shown(key: str) -> str:  # as given: KEY=VALUE where the overrides are a mapping
        return f"{key}={overrides[key]!r}" if isinstance(overrides, Mapping) else key

    if seeds_keys and pretraining and not selecting:  # the seeds of a hyper-parameter search no row of the run makes
        raise ConfigError(f"--set {shown(seeds_keys[0])}: the seeds of the hyper-parameter selection, and no row of "
                          f"this run ({', '.join(objs)}) has a selection grid (pretrain.{GROUPED}.<id>.grid; raw_pca: "
                          f"options.embedding_eval.pca_widths), so the setting would be recorded and not used; drop "
                          f"it, or give a grid to select on")
    if pretrain_keys and not pretraining:  # reference and weights rows only: no pretraining setting is read
        raise ConfigError(f"--set {shown(pretrain_keys[0])}: no row of this run pretrains "
                          f"({pretrains_nothing(spec, objs)}: nothing is pretrained for "
                          f"{'it' if len(set(objs)) == 1 else 'them'}), so the pretraining setting would be recorded "
                          f"and not used; drop it, or add an objective that pretrains "
                          f"(--objective <id>; fusebench list objectives)")
    for common, table, name in (("pretrain.epochs", "objective_epochs", "epochs"),
                                ("pretrain.batch_size", "objective_batch_size", "batch_size")):
        if common not in keys or not pretraining:
            continue
        own = {o: getattr(spec.pretrain, table)[o] for o in pretraining if o in getattr(spec.pretrain, table)}
        mine = ", ".join(f"{setting_key(o, name)}={v}" for o, v in own.items())
        if len(own) == len(pretraining):
            raise ConfigError(f"--set {common}: every objective of this run that pretrains has its own ({mine}), so "
                              f"the common value would be recorded and not used; set theirs instead "
                              f"(--set {setting_key(pretraining[0], name)}=...)")
        if own:
            print(f"{spec.name}: --set {common} applies to {', '.join(o for o in pretraining if o not in own)}; "
                  f"the others keep their own ({mine})", file=sys.stderr)


def check_speed_settings_used(spec: BenchmarkSpec, objs: Iterable[str]) -> None:
    """The ``speed`` options (off their defaults) are used or refused by the rows of the run ``objs``: those that act
    on the encoder (``channels_last``, ``cudnn_benchmark``, ``compile`` / ``compile_mode``) when no row scores an
    encoder (:meth:`~fusebench.components.rows.Row.uses_encoder`: the ``raw`` row of a frozen-features benchmark
    reads the input views), and ``optimizer_impl`` when no row's cell runs an optimiser (nothing pretrained, and a
    frozen-features protocol, whose probes fit without one). Each enters the config hash, so it would be recorded,
    split the rows' records from runs without it, and change nothing: a ConfigError naming the key and the rows."""
    from fusebench.components.protocols import protocol_of
    from fusebench.spec.config import SpeedConfig

    rows = [row_of(spec, o) for o in dict.fromkeys(objs)]
    default = SpeedConfig()
    scores_encoder = any(r.uses_encoder(spec) for r in rows)
    optimises = any(r.pretrains for r in rows) or not protocol_of(spec).frozen_features
    for key in ("channels_last", "cudnn_benchmark", "compile", "compile_mode", "optimizer_impl"):
        value = getattr(spec.speed, key)
        if value == getattr(default, key):
            continue
        used = optimises if key == "optimizer_impl" else scores_encoder
        if used:
            continue
        what = ("no row of this run trains anything with an optimiser (nothing is pretrained, and the "
                f"{spec.name} probes fit on frozen features without one)" if key == "optimizer_impl" else
                "no row of this run runs an encoder (its features are the input views)")
        shown = str(value).lower() if isinstance(value, bool) else repr(value)
        raise ConfigError(f"{spec.name}: speed.{key}={shown}: {what}: {', '.join(r.id for r in rows)}; so it would "
                          f"be recorded and hashed and change nothing; drop it, or run a row it acts on")


def check_checkpoint_every_used(spec: BenchmarkSpec, objs: Iterable[str], overrides: Iterable[str] = ()) -> None:
    """``--set checkpoint_every=N`` (``overrides``: the ``--set`` keys) is refused when no row of the run ``objs``
    has a training loop that writes ``last.pt`` (nothing pretrained, and a frozen-features protocol, whose probes
    fit without one): it would be recorded in every record's config and used by nothing. (A spec's own value
    stays: it is the spacing of the benchmark's other rows.)"""
    from fusebench.components.protocols import protocol_of

    if "checkpoint_every" not in list(overrides):
        return
    rows = [row_of(spec, o) for o in dict.fromkeys(objs)]
    if any(r.pretrains for r in rows) or not protocol_of(spec).frozen_features:
        return
    raise ConfigError(f"--set checkpoint_every={spec.checkpoint_every}: no row of this run trains in steps "
                      f"({', '.join(r.id for r in rows)}: nothing is pretrained, and the {spec.name} probes fit on "
                      f"frozen features), so no last.pt is written and the setting would be recorded and not used; "
                      f"drop it")


def check_pretraining_epochs(spec: BenchmarkSpec, objs: Iterable[str]) -> None:
    """Every row of the run that pretrains (:attr:`fusebench.components.rows.Row.pretrains`) gets at least one
    epoch: with 0 (``pretrain.epochs``, or its own ``pretrain.per_objective.<id>.epochs``) the cell would record a
    pretrained row that nothing trained, the ``none`` row under another name. A ConfigError naming the key. A spec
    may still say 0 epochs for a run of reference rows only (nothing is pretrained, so nothing is read)."""
    for o in dict.fromkeys(objs):
        if not row_of(spec, o).pretrains:
            continue
        epochs = spec.pretrain.settings(o).epochs
        if epochs < 1:
            key = setting_key(o, "epochs") if o in spec.pretrain.objective_epochs else "pretrain.epochs"
            raise ConfigError(f"{spec.name}: {key}={epochs}: objective {o!r} pretrains, and {epochs} epochs would "
                              f"record a pretrained row that nothing trained (the 'none' row under another name); "
                              f"set {key} to 1 or more, or run the reference row alone (--objective none)")


def check_cuda_only_settings(spec: BenchmarkSpec, device: str) -> None:
    """A setting that acts on CUDA only (``precision: tf32``, TF32 matrix units; ``speed.cudnn_benchmark``, cuDNN's
    autotuner) is refused for cells that run on a CPU here: it would be recorded (and split the board from runs
    without it) and change no number. Cells a SLURM launcher sends to other nodes decide their device there."""
    from fusebench.runtime.utils import resolve_device

    if resolve_device(device).type != "cpu":
        return
    found = [key for key, on in (("precision=tf32", spec.precision == "tf32"),
                                 ("speed.cudnn_benchmark=true", bool(getattr(spec.speed, "cudnn_benchmark", False))))
             if on]
    if found:
        raise ConfigError(f"{spec.name}: {found[0]}: it acts on CUDA only, and the cells run on the CPU here, so it "
                          "would be recorded and change nothing; drop it (precision 32, the CPU's float32 matrix "
                          "products) or run on a GPU (--device cuda)")


def check_loader_settings_used(spec: BenchmarkSpec, device: str | None, num_workers: int | None,
                               in_memory: bool) -> None:
    """A ``loader`` setting the cells' DataLoaders would not apply is refused (it would be recorded in every
    record's config and change nothing), judged on the feed a cell resolves (:func:`fusebench.engine.data.resolve_feed`,
    the one rule): ``loader.pin_memory: true`` where it pins nothing (cells on a CPU), and
    ``loader.persistent_workers`` / ``loader.prefetch_factor`` off their defaults where the feed has no worker
    process. ``device``: where the cells run (None: on other nodes, decided there: only an explicit worker count is
    judged); ``num_workers``: ``--num-workers`` (None: not given)."""
    from fusebench.engine.data import resolve_feed
    from fusebench.runtime.utils import resolve_device
    from fusebench.spec.config import LoaderConfig

    cfg, default = spec.loader, LoaderConfig()
    if device is None and num_workers is None and cfg.num_workers is None:
        return
    dev = resolve_device(device if device is not None else "cpu")  # (None: the count is explicit, the device moot)
    feed = resolve_feed(cfg, num_workers, dev, in_memory)
    if device is not None and cfg.pin_memory is True and not feed.pin_memory:
        raise ConfigError(f"{spec.name}: loader.pin_memory=true: page-locked batches are for copies to a GPU, and the "
                          "cells run on the CPU here, so it would be recorded and change nothing; drop it or run on a "
                          "GPU (--device cuda)")
    if feed.num_workers:
        return
    why = {"--num-workers": f"--num-workers {num_workers}", "spec": f"loader.num_workers={cfg.num_workers}"}.get(
        feed.num_workers_from, "loader.num_workers unset: none " + (
            "on the CPU" if dev.type != "cuda" else "on CUDA for data held in memory, sliced in the training process"
            if in_memory else "on CUDA here (no core to spare for a worker)"))
    for key in ("persistent_workers", "prefetch_factor"):
        value = getattr(cfg, key)
        if value != getattr(default, key):
            shown = str(value).lower() if isinstance(value, bool) else value
            raise ConfigError(f"{spec.name}: loader.{key}={shown}: it sets the DataLoader's worker processes, and the "
                              f"cells fetch their batches with none ({why}), so it would be recorded and change "
                              f"nothing; drop it, or give the cells workers (--num-workers N)")


def pretrains_nothing(spec: BenchmarkSpec, rows: Iterable[str]) -> str:
    """``rows`` (none of which pretrains) said with what they are: ``raw and none are reference rows, mine is a
    weights row``."""
    rows = list(dict.fromkeys(rows))
    weights = [o for o in rows if o in spec.encoder_weights]
    refs = [o for o in rows if o not in weights]
    said = []
    for names, one, several in ((refs, "is a reference row", "are reference rows"),
                                (weights, "is a weights row", "are weights rows")):
        if names:
            said.append(f"{' and '.join([', '.join(names[:-1]), names[-1]] if len(names) > 1 else names)} "
                        f"{one if len(names) == 1 else several}")
    return ", ".join(said)


def check_weights_row_settings(overrides: Mapping[str, Any], weights: Iterable[str]) -> None:
    """Before the spec loads (which knows the weights rows of ``--encoder-weights`` not yet): a ``--set`` of
    per-objective settings (``pretrain.per_objective.<name>...``) for a weights row ``name`` is a ConfigError
    naming the key and the row, which pretrains nothing (not "not a registered objective"); so is a ``--set
    encoder_weights.<name>...`` for a row ``--encoder-weights`` gives (it would not reach that row's entry)."""
    from fusebench.spec.config import GROUPED, PER_OBJECTIVE, grouped_override

    names = set(weights)
    for key, value in overrides.items():
        head = key.split(".")
        if head[0] == "encoder_weights":  # a row of --encoder-weights takes no --set: the two are not merged
            given = [head[1]] if len(head) >= 2 else list(value) if isinstance(value, Mapping) else []
            hit = [n for n in given if n in names]
            if hit:
                raise ConfigError(f"--set {key}: the row {hit[0]!r} is given by --encoder-weights {hit[0]}=PATH, "
                                  f"which this --set would not reach (the two are not merged); give the row once: "
                                  f"--set 'encoder_weights.{hit[0]}={{path: PATH, sha256: HEX}}' without "
                                  f"--encoder-weights {hit[0]}, or in the spec")
            continue
        parts = grouped_override(key, "--set").split(".")
        if parts[0] != "pretrain" or len(parts) < 2:
            continue
        if parts[1] in PER_OBJECTIVE and len(parts) >= 3:
            given = [parts[2]]
        elif parts[1] == GROUPED and len(parts) == 2 and isinstance(value, Mapping):
            given = list(value)
        else:
            continue
        hit = [n for n in given if n in names]
        if hit:
            raise ConfigError(f"--set {key}: {hit[0]!r} is a weights row (--encoder-weights {hit[0]}=...): nothing is "
                              f"pretrained for it, so per-objective settings do not apply to it; drop the setting")


def weights_rows_set(overrides: Mapping[str, Any]) -> list[str]:
    """The weights rows a ``--set`` gives (``encoder_weights.<name>=...``, or ``encoder_weights={name: ...}``): rows
    of this command line, which join the run's rows as ``--encoder-weights NAME=PATH`` does."""
    names: list[str] = []
    for key, value in overrides.items():
        head = key.split(".")
        if head[0] != "encoder_weights":
            continue
        names += [head[1]] if len(head) >= 2 else [str(n) for n in value] if isinstance(value, Mapping) else []
    return list(dict.fromkeys(names))


def check_out(out: Path) -> Path:
    """``--out``: a folder that exists or can be made, and that this process can write to; not made here (a plan
    writes nothing; a run makes it with :func:`make_out` once every check that can refuse has passed, so that a
    refused run leaves no empty folder behind)."""
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {shown_path(out)}: exists and is not a folder; name a folder for the run records")
    if out.is_dir():
        if not os.access(out, os.W_OK | os.X_OK):
            raise ConfigError(f"--out {shown_path(out)}: the folder is not writable by this user; name a writable "
                              f"folder")
        return out
    above = next(p for p in out.absolute().parents if p.exists())  # the folder it would be made in
    if not above.is_dir():
        raise ConfigError(f"--out {shown_path(out)}: cannot create the folder ({shown_path(above)} is not a folder); "
                          f"name a writable folder")
    if not os.access(above, os.W_OK | os.X_OK):
        raise ConfigError(f"--out {shown_path(out)}: cannot create the folder ({shown_path(above)} is not writable by "
                          f"this user); name a writable folder")
    return out


def make_out(out: Path) -> list[Path]:
    """Make the ``--out`` folder (:func:`check_out` checked it); returns the folders this made, outermost first (none
    when it existed), for :func:`remove_made` to take back when the run stops before writing into them."""
    made = [p for p in (out, *out.absolute().parents) if not p.exists()][::-1]
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"--out {shown_path(out)}: cannot create the folder ({e.strerror or e}); name a writable "
                          f"folder") from None
    if not os.access(out, os.W_OK | os.X_OK):
        remove_made(made)
        raise ConfigError(f"--out {shown_path(out)}: the folder is not writable by this user; name a writable "
                          f"folder")
    return made


def remove_made(made: list[Path]) -> None:
    """The folders of :func:`make_out` removed, innermost first, while they are empty (one with a file in it, and
    those above it, stay)."""
    for folder in reversed(made):
        try:
            folder.rmdir()
        except OSError:
            return


def views_from_data(spec: BenchmarkSpec) -> bool:
    """Whether the run names ``spec``'s views from the data it reads (:func:`resolve_views`): its pipeline reads a
    dataset whose adapter has ``VIEWS_FROM_DATA`` (e.g. any multi-view ``.mat``) and the spec names none."""
    from fusebench import datasets

    return (pipeline_of(spec).reads_dataset and not spec.dataset.modalities
            and bool(getattr(datasets.get(spec.dataset.id), "VIEWS_FROM_DATA", False)))


def resolve_views(spec: BenchmarkSpec, synthetic: bool, data_root: str | None, seed: int = 0) -> Any:
    """Adapters whose views are known only from the file (``VIEWS_FROM_DATA``, e.g. any multi-view
    ``.mat``) are opened once to fill ``dataset.modalities``, so the view count k that decides the
    compatible objectives, and the recorded config, are those of the data actually read. Returns the
    train split it opened (None when it opened nothing), for :func:`cap_batch_sizes` to reuse."""
    if not views_from_data(spec):
        return None
    ds = build_datasets(spec, synthetic, data_root, seed, roles=("train",))["train"]
    spec.dataset.modalities = list(ds.modalities)
    return ds


def resolve_width_grid(spec: BenchmarkSpec, synthetic: bool, data_root: str | None,
                       train: tuple[int, Any] | None = None) -> list[int] | None:
    """``options.<protocol>.pca_widths: auto`` (:data:`~fusebench.components.protocols.WIDTHS_AUTO`: ``multiview``,
    whose views are known only from its file) replaced in the spec by the widths the curated boards write out,
    :func:`~fusebench.components.reference_features.width_grid` of the cap, so that the recorded config and its
    hash say what was selected among, and said once on stderr. The cap is the pretrained rows' embedding width (the
    views times the encoder's ``num_features``) at most the numerical rank of the z-scored train matrix of every
    split the spec runs -- its seeds' and its selection seeds' (a width past a split's rank is refused there:
    rounding noise) --, so the widths depend on the spec and the file alone, not on the seeds a run asks for (a run
    of a seed outside the spec's whose split has a lower rank is refused in its cell, naming the rank). Resolved
    whatever rows a run has, so that every record of a sweep carries the same config. Returns the widths (None:
    nothing to resolve). ``train``: ``(seed, train split)`` when the caller has one open."""
    from fusebench.components.protocols import WIDTH_OPTION, WIDTHS_AUTO

    keys = [k for k, v in (spec.options or {}).items() if isinstance(v, dict) and v.get(WIDTH_OPTION) == WIDTHS_AUTO]
    if not keys or not pipeline_of(spec).reads_dataset:
        return None
    from fusebench.cells.standard import build_model
    from fusebench.components.reference_features import pca_rank, width_grid
    from fusebench.engine.data import input_views

    seeds = sorted({check_seed(s) for s in spec.seeds} | set(spec.selection_seeds))
    ranks = {}
    with progress_lines.phase(f"working out raw_pca's widths: the rank of the train split of {len(seeds)} seed(s)"):
        for s in seeds:
            split = train[1] if train is not None and train[0] == s else \
                build_datasets(spec, synthetic, data_root, s, roles=("train",))["train"]
            views, _ = input_views(split, spec, s)
            ranks[s] = pca_rank(views)  # >= 1 where a column varies (a width past it is refused, naming the rank)
    features = int(build_model(spec, split).num_features)  # every split has the same views and encoder
    k_d = len(views) * features
    low = min(ranks, key=lambda s: (ranks[s], s))
    widths = width_grid(max(1, min(k_d, ranks[low])))
    for key in keys:
        spec.options[key] = {**spec.options[key], WIDTH_OPTION: widths}
    print(f"{spec.name}: options.{keys[0]}.{WIDTH_OPTION} {WIDTHS_AUTO} -> {widths} (the powers of two below "
          f"min({len(views)} views x {features} features = {k_d}, the lowest rank of the z-scored train matrices "
          f"of the spec's {len(seeds)} seeds and selection seeds, {ranks[low]} at seed {low}) and that width; "
          f"recorded in the run config)", file=sys.stderr)
    return widths


def cap_batch_sizes(spec: BenchmarkSpec, synthetic: bool, data_root: str | None, seed: int,
                    train: Any = None) -> list[str]:
    """On data defined by the file alone (adapters with ``VIEWS_FROM_DATA``: any multi-view ``.mat`` of the
    convention, whose size nobody chose), a pretraining batch size larger than the train split is capped
    at the split's size, in the spec (so the recorded config and its hash say what ran) and said once on
    stderr. Returns what was capped (empty: nothing). Curated benchmarks are left as written: a batch
    larger than their split stays an error (:func:`check_data`). ``train``: the split of ``seed`` when the
    caller has it open already (:func:`resolve_views`), else it is opened here."""
    from fusebench import datasets

    if not pipeline_of(spec).reads_dataset or not getattr(datasets.get(spec.dataset.id), "VIEWS_FROM_DATA", False):
        return []
    n = len(train if train is not None else build_datasets(spec, synthetic, data_root, seed, roles=("train",))["train"])
    if n < 2:  # no batch fits: check_data names the split
        return []
    pt, capped = spec.pretrain, []
    if pt.batch_size > n:
        capped.append(f"pretrain.batch_size {pt.batch_size}")
        pt.batch_size = n
    for o, b in sorted(pt.objective_batch_size.items()):
        if b > n:
            capped.append(f"{setting_key(o, 'batch_size')} {b}")
            pt.objective_batch_size[o] = n
    if capped:
        print(f"{spec.name}: {', '.join(capped)} capped at {n}, the size of the train split of "
              f"{data_root or 'the synthetic twin'} (recorded in the run config)", file=sys.stderr)
    return capped


def check_data(spec: BenchmarkSpec, synthetic: bool, data_root: str | None, seed: int, objs: list[str]) -> dict[str, Any]:
    """Build the three splits once and stop before any training with one clear message when the data
    is unusable: missing files, an empty split, or a pretraining batch larger than the train split.
    Returns the splits (role -> dataset)."""
    from fusebench.datasets.base import DatasetError

    data = build_datasets(spec, synthetic, data_root, seed)
    for role, ds in data.items():
        if len(ds) == 0:
            split = {"train": "train", "val": spec.dataset.val_split, "test": spec.dataset.test_split}[role]
            raise DatasetError(f"{spec.name}: the {role} split ({spec.dataset.id!r} split {split!r}, data root "
                               f"{getattr(ds, 'root', data_root)}) has no samples; the benchmark needs it "
                               f"{'for model selection' if role == 'val' else 'for training' if role == 'train' else 'for the test score'}")
    cached = [f"{role} (manifest {ds.manifest_hash[:12]})" for role, ds in data.items()
              if isinstance(getattr(ds, "manifest_hash", None), str)]
    if cached:  # the same samples as the official files give (fusebench.datasets.cache); said, not silent
        print(f"{spec.name}: split(s) read from a prepared cache (fusebench data prepare): {', '.join(cached)}",
              file=sys.stderr)
    n = len(data["train"])
    for o in objs:
        own = spec.pretrain.settings(o)
        bs = own.batch_size
        if row_of(spec, o).pretrains and own.epochs > 0 and bs > n:
            key = setting_key(o, "batch_size") if o in spec.pretrain.objective_batch_size else "pretrain.batch_size"
            raise ConfigError(f"{key}={bs} exceeds the {n} samples of the train split of {spec.name}; "
                              f"choose a batch size <= {n}")
    return data


# ---------------------------------------------------------------------------------------------
# sweep
# ---------------------------------------------------------------------------------------------
def run(benchmark: str | SweepRequest, **given: Any) -> list[dict[str, Any]]:
    """Run a sweep, every objective x seed of :class:`~fusebench.spec.request.SweepRequest` ``benchmark`` (or of
    ``SweepRequest.of(benchmark, **given)``: ``run("quickstart", objective=["m3g"], seeds=[0])``); returns the
    run records (failed cells as ``{"status": "failed", ...}``). Everything is checked before any training starts.
    ``workers`` > 1 runs the cells in that many local processes (after every hyper-parameter selection); each cell
    is the same as in a sequential sweep (its own seed, lock and record). ``loggers``: experiment trackers for
    every cell, any of ``csv``, ``tensorboard``, ``mlflow`` (docs/trackers.md; results are the same with or
    without); ``mlflow_uri``: the MLflow tracking URI (default ``MLFLOW_TRACKING_URI``, else
    ``file:<out>/.mlruns``). ``launcher``: where the cells run, ``local`` (default), ``slurm`` (one SLURM job per
    cell) or ``submitit_local``, with ``launcher_options`` (:mod:`fusebench.sweep.launchers`, docs/cluster.md);
    with ``launcher_options={"wait": False}`` the submitted cells come back as ``{"status": "submitted", "job_id":
    ...}``. The boards are regenerated afterwards (:func:`fusebench.leaderboard.write_leaderboards`; ``fusebench
    run --leaderboard DIR`` does it). ``precision``: the precision policy of encoders and heads (``32``, ``tf32``,
    ``bf16-mixed``, ``16-mixed``; :mod:`fusebench.spec.precision`), the same as the override ``precision``.
    ``num_workers``: DataLoader worker processes of each cell, over the spec's ``loader.num_workers`` (the
    batches, and so the results, are the same whatever it is; :mod:`fusebench.engine.data`).
    ``encoder_weights``: ``{row name: weights file}``, pretrained encoders evaluated under the board's downstream
    protocol as rows of those names, run besides ``objectives`` (the spec's own ``encoder_weights`` rows join its
    default sweep; :mod:`fusebench.components.encoder_weights`). ``threads``: intra-op threads of each cell
    (``--threads``); None: ``OMP_NUM_THREADS``, else 1 for a small model and the cell's share of the CPUs for a
    large one (:mod:`fusebench.engine.threads`; said on stderr before the cells; results do not depend on it).
    ``device``: resolved once here for cells run on this machine (``auto``: cuda, then mps, then cpu); a
    scheduler's job resolves it on its node. ``plan=True``: every check, then what the sweep would do with each
    selection and cell (:mod:`fusebench.sweep.plan`) returned instead of running anything."""
    req = SweepRequest.of(benchmark, **given)
    progress = req.progress
    synthetic, data_root, out = req.synthetic, req.data_root, req.out
    from fusebench.sweep import launchers

    launch = launchers.build(req.launcher, req.workers, req.launcher_options)  # unknown name / option, missing submitit
    loggers = check_trackers(list(req.loggers))  # unknown id / missing package
    from fusebench import benchmarks

    check_weights_row_settings(req.overrides, req.encoder_weights)  # before the load says "not an objective"
    spec = benchmarks.load(req.benchmark, overrides=req.overrides, synthetic=synthetic)
    progress_lines.phases_enabled(progress)  # reading / hashing the data before the cells: said when slow
    seeds = list(req.seeds if req.seeds is not None else [check_seed(s) for s in spec.seeds])
    train = resolve_views(spec, synthetic, data_root, seeds[0] if seeds else 0)  # the file opened once for both
    objs = list(req.objectives or spec.objectives or [spec.pretrain.objective])
    encoder_weights = req.encoder_weights
    if encoder_weights or spec.encoder_weights:  # pretrained encoders as rows (issue #32): hashed, names checked
        from fusebench.components.encoder_weights import add_rows

        # the spec's rows join its default sweep; a row given on the command line (--set encoder_weights.<name>,
        # like --encoder-weights NAME=PATH) joins whatever objectives are run: never read, checked and dropped
        own = list(spec.encoder_weights) if req.objectives is None else \
            [n for n in spec.encoder_weights if n in weights_rows_set(req.overrides)]
        add_rows(spec, encoder_weights or None, spec.name)
        objs += [o for o in [*own, *encoder_weights] if o not in objs]
    for o in objs:  # validate every requested name first
        check_compatible(spec, o)  # an unknown id: the known ones, the closest first
        check_cell_ids(spec.name, o)  # each becomes a folder: an id (the lookup above ignores case), never '../x'
    # the device, resolved once where the cells run: here (the name kept for a scheduler's nodes, which are not
    # this machine: each job resolves it, fusebench.sweep.launchers.CellCall)
    options = RunOptions(synthetic=synthetic, data_root=data_root, device=req.device, resume=req.resume,
                         progress=progress, num_workers=req.num_workers, threads=req.threads)
    if launch.runs_here:
        options = options.resolved()
    device = options.device
    check_objective_overrides_used(spec, objs, req.overrides)
    from fusebench.sweep.selection import check_seeds_apart, selects

    check_seeds_apart(spec, [o for o in objs if selects(spec, o)], seeds)  # no evaluation seed repeats a trial
    check_pretraining_epochs(spec, objs)
    check_components(spec, objs)
    check_method_options_used(spec, objs, req.overrides)
    check_methods_read(spec, objs)
    pipeline = pipeline_of(spec)
    if pipeline.builds_encoder:  # (a pipeline that applies no speed option refuses them when the spec loads)
        check_speed_settings_used(spec, objs)
    check_checkpoint_every_used(spec, objs, req.overrides)
    if not pipeline.reads_dataset:  # no data folder and no DataLoader: used or refused, never taken and ignored
        for flag, value in (("--data-root", data_root), ("--num-workers", req.num_workers)):
            if value is not None:
                raise ConfigError(f"{flag} {value}: the {spec.pipeline} pipeline reads no dataset (its cell draws its "
                                  f"own data), so the option would be used by nothing; drop it")
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
    if pipeline.reads_dataset:
        cap_batch_sizes(spec, synthetic, data_root, seeds[0] if seeds else 0, train)
        opened = (seeds[0] if seeds else 0, train) if train is not None else None
        resolve_width_grid(spec, synthetic, data_root, opened)
    if req.mlflow_uri is not None and "mlflow" not in loggers:  # used or refused, never taken and ignored
        raise ConfigError(f"--mlflow-uri {req.mlflow_uri}: read only with --logger mlflow, which this run does not "
                          f"use; add --logger mlflow or drop --mlflow-uri")
    out = check_out(out)  # made below, once every check that can refuse has passed
    mlflow_uri = default_mlflow_uri(out, req.mlflow_uri) if "mlflow" in loggers else None  # one URI for every worker
    context = sweep_context(spec, synthetic, data_root)  # before any output of this sweep is written
    options = options.but(loggers=tuple(loggers), mlflow_uri=mlflow_uri)
    # every cell judged once, by the plan's rules (fusebench.sweep.plan: --plan lists each refusal, the run stops at
    # the first, before any training), against the selections already frozen, those of objectives whose cells are
    # all finished too; a selection this run still makes is judged against once it is made (_select_and_launch)
    judged = {**context, **frozen_context(spec, objs, out, options, context)}
    planned = cell_plan(spec, objs, seeds, out, judged, stop=not req.plan)
    pending = [(o, s) for o in objs for s in seeds if not (CellRequest(spec, o, s, out).cell / "run.json").exists()]
    fit_ds = None  # the train split a last.pt to resume must fit (a pipeline that builds an encoder)
    if pending and pipeline.reads_dataset:  # once, before the first cell: one message, not one per cell
        data = check_data(spec, synthetic, data_root, pending[0][1], [o for o, _ in pending])
        from fusebench.engine.data import held_in_memory

        check_loader_settings_used(spec, device if launch.runs_here else None, req.num_workers,
                                   held_in_memory(data["train"]))
        weights = [o for o, _ in pending if o in spec.encoder_weights]
        if pipeline.builds_encoder:  # the encoder builds from encoder.config, and each weights file fits it (#32)
            from fusebench.cells.standard import check_weights_fit

            check_weights_fit(spec, data["train"], list(dict.fromkeys(weights)))
            from fusebench.sweep.plan import check_resumes_fit  # each last.pt's tensors fit the cell's modules

            fit_ds = data["train"]
            check_resumes_fit(spec, planned, judged, fit_ds, stop=not req.plan)
    from fusebench.runtime import distributed
    from fusebench.components.memory_budget import check_memory_budget

    # an objective whose declared cost (M3G: n^k) exceeds the memory budget at its batch: refused before any
    # cell, after check_data (a batch larger than the train split is named as that, not as a memory estimate)
    check_memory_budget(spec, list(dict.fromkeys(o for o, _ in pending)), device, distributed.world_size())
    if pending and launch.runs_here:  # the cells run on this machine: a CUDA-only setting on its CPU changes nothing
        check_cuda_only_settings(spec, device)
    skipped = len(objs) * len(seeds) - len(pending)
    from fusebench.engine.threads import cell_threads

    # the threads of each cell, checked (a bad OMP_NUM_THREADS) and said before any cell starts (a job decides its own)
    options = options.but(cells_at_once=launch.cells_at_once(len(pending)))
    # --threads above the CPUs here is refused where the cells run here (a job's node may have more: it checks its own)
    n_threads, why = cell_threads(spec.encoder.id, device, req.threads, options.cells_at_once,
                                  bounded=launch.runs_here)
    # what the selections would do, each frozen file and trial judged as the run judges it (the run: stopped at the
    # first refusal, before any trial)
    selecting = [o for o in objs if any(oo == o for oo, _ in pending)]
    selections = selection_plan(spec, selecting, out, options, context, stop=not req.plan, train_ds=fit_ds)
    if req.plan:  # nothing is trained or written
        return selections + planned
    made = make_out(out)  # every check that can refuse has passed: a refused run leaves no folder behind
    try:  # a refusal from here on, before anything is written into the folder, takes it back (remove_made)
        if pending and progress and launch.runs_here:
            print(f"{spec.name}: {len(pending)} cell(s) to run, {options.cells_at_once} at a time, {n_threads} torch "
                  f"thread(s) each ({why}; --threads N or OMP_NUM_THREADS overrides)", file=sys.stderr)
        if skipped and progress:  # said before anything runs: their records are reused, not recomputed
            print(f"{skipped} of {len(objs) * len(seeds)} cell(s) of {spec.name} already have run.json under {out}: "
                  f"skipped, their records reused (another --out runs them afresh)", file=sys.stderr)
        return _select_and_launch(spec, objs, seeds, out, options, context, pending, launch)
    except BaseException:
        remove_made(made)
        raise


def _select_and_launch(spec: BenchmarkSpec, objs: list[str], seeds: list[int], out: Path, options: RunOptions,
                       context: dict[str, Any], pending: list[tuple[str, int]], launch: Any) -> list[dict[str, Any]]:
    """The sweep once every check has passed and ``out`` exists: the selections frozen, then the cells launched."""
    # hyper-parameters chosen on the validation split for every objective with pending cells, BEFORE any
    # evaluation cell starts, each frozen to <out>/<benchmark>/_selection/<objective>.json (a resumed sweep reuses
    # it); the cells get the frozen choice, outcome and file hash as inputs (fusebench.sweep.selection)
    from fusebench.sweep.selection import freeze_selections

    # (with --workers N the trials run N at a time, each the same call as in one process: the same records)
    context.update(freeze_selections(spec, [o for o in objs if any(oo == o for oo, _ in pending)], out, options,
                                     context, workers=launch.trial_workers))
    # a finished cell or a last.pt made at another point than a selection made now: before any cell runs (the plan's
    # judgement again, now that the choice is known)
    cell_plan(spec, list(context.get("hparam_selection") or {}), seeds, out, context, stop=True)

    cells = SweepCells(spec, out, options, context)
    # the launcher runs every cell as execute.sweep_cell(cells.request(o, s), options, context): here, in local
    # workers, or as scheduler jobs
    try:
        records = launch.launch(objs, seeds, cells)
    except KeyboardInterrupt as e:  # Ctrl-C or SIGTERM (runtime.interrupt): what finished, for the caller to say
        e.finished = finished_records(spec, objs, seeds, out)
        raise
    return records


def finished_records(spec: BenchmarkSpec, objs: list[str], seeds: list[int], out: Path) -> list[dict[str, Any]]:
    """The records (``run.json``) the cells objs x seeds of ``spec`` have under ``out`` (an interrupted sweep's
    finished cells, in sweep order); an unreadable one is left out."""
    import json

    found = []
    for o in objs:
        for s in seeds:
            path = CellRequest(spec, o, s, out).cell / "run.json"
            try:
                found.append(json.loads(path.read_text(encoding="utf-8")))
            except (OSError, ValueError):
                continue
    return found


__all__ = ["cap_batch_sizes", "check_components", "check_data", "check_objective_overrides_used", "check_out",
           "check_pretraining_epochs", "check_checkpoint_every_used", "check_speed_settings_used", "check_methods_read", "check_weights_row_settings", "finished_records", "make_out",
           "pretrains_nothing", "remove_made", "resolve_views", "views_from_data", "resolve_width_grid", "run", "weights_rows_set"]
