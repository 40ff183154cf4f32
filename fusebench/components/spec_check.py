"""Loading a benchmark spec (components layer): :func:`load_spec` reads it (:func:`fusebench.spec.config.read_spec`:
keys, types, ranges) and checks it against the components it names (:func:`check_against_components`):
what its pipeline requires of it, the precision policies the pipeline applies, and every option of the
dataset adapter, the encoder, the objectives (``pretrain.per_objective.<id>.hparams`` / ``.grid``) and the
pretraining methods -- all before any data is read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fusebench import datasets as fb_datasets
from fusebench import encoders, objectives
from fusebench.datasets.base import SyntheticSpec
from fusebench.datasets.errors import DatasetError
from fusebench.options import OptionsError, check_options
from fusebench.pipelines import PIPELINES, pipeline_of, unapplied_settings
from fusebench.registry import closest
from fusebench.tasks import TASKS
from fusebench.spec.config import (PER_OBJECTIVE, TRAIN_SPLIT, BenchmarkSpec, ConfigError, grouped_key,
                                   name_overrides, read_spec, setting_key)
from fusebench.spec.methods import check_methods, joining, split_method_keys, with_method_options
from fusebench.components.protocols import (PROTOCOLS, Protocol, missing_view_problems, protocol_of,
                                            unapplied_downstream)
from fusebench.components.rows import is_reference, row_of, unread_width_option
from fusebench.typed import from_dict


#: what a problem found only in a spec's --synthetic variant is in
SYNTHETIC_PART = ("in the spec's synthetic part: its `synthetic:` overrides or `dataset.synthetic_spec`, which "
                  "apply with --synthetic only")


def load_spec(path: str | Path, overrides: dict[str, Any] | None = None, synthetic: bool = False) -> BenchmarkSpec:
    """Load and validate a YAML spec; apply the synthetic overrides (if ``synthetic``) then ``overrides``.
    The synthetic part of the file (``synthetic:``, ``dataset.synthetic_spec``) is checked on every load, so a
    typo in it is refused on a real run too, never carried unread until the first ``--synthetic`` run; on a real
    load it is checked as the file writes it, without ``overrides`` (a ``--set`` meant for the real run, e.g. a
    micro-batch above the synthetic variant's smaller batch, is not the file's error)."""
    try:
        spec = read_spec(path, overrides=overrides, synthetic=synthetic)
        check_against_components(spec, str(path))
    except (ConfigError, DatasetError) as e:
        if synthetic and _loads(path, overrides, synthetic=False):
            raise ConfigError(f"{name_overrides(e, overrides)} ({SYNTHETIC_PART})") from None
        raise name_overrides(e, overrides) from None
    if not synthetic:
        _check_synthetic_part(Path(path))
    return spec


#: spec files whose synthetic part was found right, by (path, mtime, size): a file is checked once per version in a
#: process (a study loads one spec per cell)
_SYNTHETIC_PART_OK: set[tuple[str, int, int]] = set()


def _check_synthetic_part(path: Path) -> None:
    """The spec file's ``--synthetic`` variant, as the file writes it, checked against the components; a problem is
    a ConfigError saying it is in the synthetic part."""
    st = path.stat()
    key = (str(path.resolve()), st.st_mtime_ns, st.st_size)
    if key in _SYNTHETIC_PART_OK:
        return
    try:
        variant = read_spec(path, synthetic=True)
        variant.encoder_weights = {}  # the rows' files were checked (and hashed) on the spec itself
        check_against_components(variant, str(path))
    except (ConfigError, DatasetError) as e:
        raise ConfigError(f"{e} ({SYNTHETIC_PART})") from None
    _SYNTHETIC_PART_OK.add(key)


def _loads(path: str | Path, overrides: dict[str, Any] | None, synthetic: bool) -> bool:
    """Whether the spec loads cleanly in that variant (no error raised)."""
    try:
        check_against_components(read_spec(path, overrides=overrides, synthetic=synthetic), str(path))
    except (ConfigError, DatasetError):
        return False
    return True


def check_against_components(spec: BenchmarkSpec, source: str) -> None:
    """What the spec's pipeline asks of it (``spec_problems``, its precision policies), then
    :func:`check_component_options`; one :class:`ConfigError` naming ``source``."""
    if spec.pipeline not in PIPELINES:
        raise ConfigError(f"{source}: pipeline {spec.pipeline!r} is not registered; valid pipeline ids: "
                          f"{', '.join(PIPELINES.available())}")
    pipeline = pipeline_of(spec)
    try:  # a setting the pipeline's cell does not apply would be recorded and silently unused
        unapplied = unapplied_settings(pipeline, spec)
    except ConfigError as e:
        raise ConfigError(f"{source}: {e}") from None
    problems = [*spec_options_problems(spec, pipeline), *unapplied, *pipeline.spec_problems(spec)]
    if pipeline.downstream:
        problems += protocol_problems(spec)
    if spec.precision not in pipeline.precisions:
        problems = [*problems, f"precision {spec.precision!r}: the {spec.pipeline!r} pipeline applies only "
                               f"{', '.join(pipeline.precisions)}"]
    if problems:
        raise ConfigError(f"{source}: " + "; ".join(problems))
    check_component_options(spec, source)
    if spec.encoder_weights:  # issue #32: pretrained encoders as rows, each file hashed and its name checked
        from fusebench.components.encoder_weights import add_rows

        add_rows(spec, None, source)


#: the ``options`` key every pipeline accepts: how the board labels the runs (read by fusebench.records)
BOARD_OPTION = "board"


def spec_options_problems(spec: BenchmarkSpec, pipeline: Any) -> list[str]:
    """Keys of the spec's top-level ``options`` that nothing reads (empty: none): each pipeline declares
    the keys its cell reads (``Pipeline.options``), a downstream pipeline's protocol its ``options_key``,
    and ``board`` is read by the records; ``dataset.synthetic_spec`` holds the fields of the synthetic twin's
    :class:`~fusebench.datasets.base.SyntheticSpec`. Each unknown key is named with the closest valid one."""
    valid = {BOARD_OPTION, *getattr(pipeline, "options", ())}
    if pipeline.downstream and spec.downstream.protocol in PROTOCOLS and protocol_of(spec).options_key:
        valid.add(protocol_of(spec).options_key)
    out = []
    for key in sorted(set(spec.options) - valid, key=repr):
        hint = closest(str(key), sorted(valid))
        out.append(f"options.{key}: unknown option of the {spec.pipeline} pipeline"
                   + (f" (did you mean {hint!r}?)" if hint else "") + f"; valid: {', '.join(sorted(valid))}")
    if pipeline.reads_dataset and spec.dataset.synthetic_spec:  # the synthetic twin's fields, typed and in range
        try:
            twin = from_dict(SyntheticSpec, spec.dataset.synthetic_spec, "dataset.synthetic_spec")
        except ConfigError as e:
            out.append(str(e))
        else:
            out += twin.problems("dataset.synthetic_spec")
    return out


def protocol_problems(spec: BenchmarkSpec) -> list[str]:
    """``downstream.protocol`` is a registered protocol, and the options it reads from the spec
    (``options.<options_key>``) are ones it declares."""
    if spec.downstream.protocol not in PROTOCOLS:
        hint = closest(str(spec.downstream.protocol), PROTOCOLS.available())
        return [f"downstream.protocol {spec.downstream.protocol!r} is not a registered protocol"
                + (f" (did you mean {hint!r}?)" if hint else "") + f"; valid: {', '.join(PROTOCOLS.available())}"]
    protocol = protocol_of(spec)
    if protocol.frozen_features and protocol.scorer == Protocol.scorer:
        return [f"downstream.protocol {spec.downstream.protocol!r} scores frozen features but names no scorer of its "
                f"own (its scorer is the task-head training of linear_probe / finetune, {Protocol.scorer}); set the "
                f"protocol's scorer to the function that scores a cell ('package.module:function')"]
    ds = spec.dataset
    if ds.test_split == TRAIN_SPLIT:  # every row trains on it: the test score would be one on training samples
        return [f"dataset.test_split is {TRAIN_SPLIT!r}, the split every cell trains on (pretraining, the probes, the "
                f"task head) and every selection trial too: the test score would be measured on training samples; "
                f"name the dataset's held-out test split"]
    # the adapters' held-out splits under each other's role (multiview_mat with a split drawn per seed: the test score
    # on a per-seed partition whose samples the selection trials and the other seeds trained on)
    for key, name, other, what in (("val_split", "test", "test_split", "test"), ("test_split", "val", "val_split",
                                                                                  "validation")):
        if getattr(ds, key) == name and getattr(ds, other) != name:
            return [f"dataset.{key} is {name!r}, the adapter's held-out {what} split, while dataset.{other} is "
                    f"{getattr(ds, other)!r}: the test score would be measured on another split than the held-out one "
                    f"(with a split drawn per seed, on samples the selection trials and the other seeds trained on); "
                    f"keep val_split: val and test_split: test"]
    if ds.val_split in (ds.test_split, TRAIN_SPLIT):  # what is chosen on validation would be chosen on those samples
        gridded = any(spec.pretrain.grid.values()) or any(row_of(spec, o).selection_grid(spec) for o in spec.objectives)
        grids = "the hyper-parameters of the selection grids" if gridded else None
        chosen = [c for c in (protocol.selects_on_validation(spec), grids, *validation_steps(spec)) if c]
        if chosen and ds.val_split == TRAIN_SPLIT:
            return [f"dataset.val_split is {TRAIN_SPLIT!r}, the split every cell trains on: {' and '.join(chosen)} "
                    f"would be chosen on training samples, not on held-out ones; give the validation its own split"]
        if chosen:
            return [f"dataset.val_split and dataset.test_split are both {ds.test_split!r}: {' and '.join(chosen)} "
                    f"would be chosen on the test samples; give the validation its own split (only a pipeline check "
                    f"that chooses nothing, one downstream epoch and no grid, may share them)"]
    unread = unapplied_downstream(spec)  # recorded and silently unused otherwise
    if unread:
        return unread
    reads_epochs = protocol.downstream_fields is None or "epochs" in protocol.downstream_fields
    if reads_epochs and not protocol.frozen_features and spec.downstream.epochs < 1:  # the task head's epochs
        return [f"downstream.epochs = {spec.downstream.epochs}: the {spec.downstream.protocol} protocol trains a task "
                f"head for downstream.epochs epochs, and with none it would score an untrained head as a result; "
                f"set downstream.epochs to 1 or more"]
    given = spec.options.get(protocol.options_key) if protocol.options_key else None
    if given is None:
        return missing_view_problems(spec, _views_known_now(spec))
    if not isinstance(given, dict):
        return [f"options.{protocol.options_key}: expected a mapping of option names to values, got {given!r}"]
    unknown = sorted(set(given) - set(protocol.options))
    if unknown:
        return [f"options.{protocol.options_key}: unknown option(s) {unknown}; the {spec.downstream.protocol} "
                f"protocol takes {', '.join(protocol.options)}"]
    unread = unread_width_option(spec)
    return (protocol.option_problems(spec) or ([unread] if unread else [])
            or missing_view_problems(spec, _views_known_now(spec)))


def validation_steps(spec: BenchmarkSpec) -> list[str]:
    """The per-epoch steps of pretraining methods (``PretrainMethod.extensions``, e.g. TupleInfoNCE's sample
    optimisation, Algorithm 1) that a pretraining run of one of the spec's objectives takes, at any point of its
    grid: each reads the validation split (its reward), so it must not be the test split. A phrase per step."""
    from fusebench.spec.methods import attach, extensions

    found: dict[str, None] = {}
    for o in spec.objectives or [spec.pretrain.objective]:
        if o not in objectives.OBJECTIVES or is_reference(o):
            continue
        own = spec.pretrain.settings(o)
        for point in own.points():
            _, method_options = split_method_keys(own.at(point))
            cfg = with_method_options(spec.pretrain, method_options)
            for ext, opts in extensions(attach(objectives.OBJECTIVES.get(o), cfg)):  # what the cell would run
                if ext.enabled(opts):
                    found[f"the per-epoch step of {o}'s runs ({ext.__name__}, its reward on the validation split)"] = None
    return list(found)


def _views_known_now(spec: BenchmarkSpec) -> int | None:
    """The view count k when the spec alone says it (``dataset.modalities``, or an adapter whose views are
    not read from its file); None otherwise: the runner checks the missing-view rates once the data says k
    (:func:`fusebench.components.compat.check_compatible`)."""
    if spec.dataset.modalities:
        return len(spec.dataset.modalities)
    if spec.dataset.id not in fb_datasets.DATASETS:
        return None
    adapter = fb_datasets.DATASETS.get(spec.dataset.id)
    return None if getattr(adapter, "VIEWS_FROM_DATA", False) else len(adapter.MODALITIES)


def check_component_options(spec: BenchmarkSpec, source: str) -> None:
    """Check ``dataset.options``, ``encoder.config``, ``pretrain.per_objective.<id>.hparams`` / ``.grid`` and
    ``pretrain.methods`` (whose entries become each method's typed ``Options``) against the options
    each component declares (:mod:`fusebench.options`), before any data is read: a
    :class:`ConfigError` (a :class:`~fusebench.datasets.base.DatasetError` for ``dataset.options``)
    naming the spec, the key, the valid options and the closest match. An id in a per-objective table that is
    not exactly a registered objective is an error too (:func:`check_objective_tables`: its settings would be
    silently unused), and so is a grid over a method option of a method that does not join the objective, or a grid
    point whose method options the joining method's ``check`` refuses (:func:`check_method_points`)."""
    try:
        spec.pretrain.methods = check_methods(spec.pretrain.methods)
    except ConfigError as e:
        raise ConfigError(f"{source}: {e}") from None

    try:
        # a dataset or encoder id that is not registered here may come from a plugin installed elsewhere:
        # the spec still loads (listing it works) and the run stops at that id with the valid ids
        pipeline = pipeline_of(spec)
        if pipeline.reads_dataset and spec.dataset.id in fb_datasets.DATASETS:
            adapter = fb_datasets.DATASETS.get(spec.dataset.id)
            try:
                check_options(spec.dataset.options, adapter, f"{source}: dataset.options, adapter {spec.dataset.id}")
            except OptionsError as e:  # the error the adapter itself would raise, only earlier
                raise DatasetError(str(e)) from None
            check_split_keys(spec, adapter, source)
            check_dataset_task(adapter, f"{source}: dataset {spec.dataset.id}")
            try:  # the dataset's task says which metrics it can report
                added = PROTOCOLS.get(spec.downstream.protocol).metric_families \
                    if spec.downstream.protocol in PROTOCOLS else ()
                TASKS.get(adapter.task).describe_metrics(spec.metrics, added)
            except ValueError as e:
                raise ConfigError(f"{source}: metrics: {e}") from None
        if pipeline.builds_encoder and spec.encoder.id in encoders.ENCODERS:
            encoder = encoders.ENCODERS.get(spec.encoder.id)
            check_options(spec.encoder.config, encoder, f"{source}: encoder.config ({spec.encoder.id})")
            problems = encoder_config_problems(encoder, spec.encoder.config)  # the encoder's own value checks
            if problems:
                raise ConfigError(f"{source}: " + "; ".join(problems))
            problem = encoder_kind_problem(spec, encoder) if pipeline.reads_dataset else None
            if problem:
                raise ConfigError(f"{source}: {problem}")
            problems = encoder_data_problems(spec, encoder) if pipeline.reads_dataset else []
            if problems:  # what the dataset delivers against what the encoder takes (points, classes)
                raise ConfigError(f"{source}: " + "; ".join(problems))
        check_objective_tables(spec, source)
        for name, hp in spec.pretrain.hparams.items():
            check_options(hp, objectives.OBJECTIVES.get(name), f"{source}: {setting_key(name, 'hparams')}")
        for name, grid in spec.pretrain.grid.items():
            obj = objectives.OBJECTIVES.get(name)
            where = f"{source}: {setting_key(name, 'grid')}"
            if not isinstance(grid, dict) or not all(isinstance(v, list) and v for v in grid.values()):
                raise ConfigError(f"{where}: expected a mapping of option names to non-empty lists of values, "
                                  f"got {grid!r}")
            own, _ = split_method_keys(grid, where)  # methods.<id>.<option> keys search a method's option
            check_options(own, obj, where, values=False)
            for key, vals in grid.items():
                shown = [repr(v) for v in vals]  # (1 and 1.0 alike: the same value to the objective)
                twice = sorted({r for v, r in zip(vals, shown) if sum(_same_value(v, w) for w in vals) > 1})
                if twice:  # each copy would be a trial of its own, computing the same thing
                    raise ConfigError(f"{where}.{key}: {', '.join(twice)} given more than once in {vals}: every value "
                                      f"is one trial per selection seed, so a repeat runs the same trial again; give "
                                      f"each value once")
                joins = False
                for v in vals:
                    kw, meth = split_method_keys({key: v}, where)
                    check_options(kw, obj, where)
                    cfg = with_method_options(spec.pretrain, meth, where)
                    joins = joins or not meth or set(meth) <= set(joining(obj, cfg))
                if not joins:  # every trial would compute the same thing, and a "choice" would be recorded
                    mid = key.split(".")[1]
                    raise ConfigError(f"{where}: {key!r} searches an option of the {mid} method, which does not "
                                      f"join {name}'s runs for any of the values {vals} (the objective builds on "
                                      f"{', '.join(getattr(obj, 'pretrain_methods', ())) or 'no method'}): the "
                                      f"trials would be identical; search an option {name} reads")
        for name in spec.pretrain.grid:  # every point as a trial runs it, each joining method's own value checks
            check_method_points(spec, name, source)
    except OptionsError as e:
        raise ConfigError(str(e)) from None


def check_method_points(spec: BenchmarkSpec, name: str, source: str) -> None:
    """Run the ``check`` of every pretraining method that joins a run of objective ``name`` on the options each
    point of its selection grid runs with (the whole point, every searched key at once: the global
    ``pretrain.methods`` block, then the objective's own ``methods.<id>.<option>`` hyper-parameters, then the
    point's), as :func:`~fusebench.spec.methods.check_methods` checks the global block alone. A ConfigError naming
    the grid, the point and the problem: a value checked one key at a time can pass while the point it makes fails
    (``candidates`` searched with ``sample_optimisation: false``: trials computing the same thing)."""
    from fusebench.spec.methods import METHODS, options_of

    obj = objectives.OBJECTIVES.get(name)
    own = spec.pretrain.settings(name)
    where = f"{source}: {setting_key(name, 'grid')}"
    for point in own.points():
        _, method_options = split_method_keys(own.at(point), where)
        cfg = with_method_options(spec.pretrain, method_options, where)
        for mid in joining(obj, cfg):
            problems = METHODS.get(mid).check(options_of(cfg, mid))
            if problems:
                raise ConfigError(f"{where}: at the point {point} the {mid} method refuses the options it would run "
                                  f"{name}'s trial with (pretrain.methods.{mid}, then {setting_key(name, 'hparams')}'s "
                                  f"and the point's methods.{mid}.* keys): " + "; ".join(problems))


def _same_value(a: Any, b: Any) -> bool:
    """Whether two values of a grid are the same setting (numbers by value, bools only as bools, anything else
    equal)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return a == b


def encoder_config_problems(encoder: Any, config: Any) -> list[str]:
    """What the encoder class ``encoder`` finds wrong with the values of ``config`` (a spec's ``encoder.config``),
    each a phrase naming the key (``encoder.config.num_features = 0: ...``), by its ``config_problems`` (a
    :class:`~fusebench.encoders.base.Backbone` classmethod: its widths at least 1, and what else it declares); a
    plugin encoder without one is not checked here (its constructor still is, in the first cell)."""
    check = getattr(encoder, "config_problems", None)
    return list(check(dict(config))) if callable(check) and isinstance(config, dict) else []


def encoder_data_problems(spec: BenchmarkSpec, encoder: Any) -> list[str]:
    """What the encoder class ``encoder`` finds it cannot take of what the spec's dataset will deliver, each a
    phrase naming the keys and the values on both sides (empty: nothing, or a side that does not say): the
    adapter's ``delivers(dataset.options)`` (:meth:`~fusebench.datasets.base.MultimodalDataset.delivers`: its class
    count, the points of a scene) handed to the encoder's ``data_problems`` (a
    :class:`~fusebench.encoders.base.Backbone` classmethod) with ``encoder.config`` as the cell builds it: with the
    dataset's ``num_classes`` where the task gives it to the encoder (``Task.gives_classes``) and the config does
    not set it. A plugin encoder or adapter without the method is not checked here."""
    check = getattr(encoder, "data_problems", None)
    if not callable(check) or spec.dataset.id not in fb_datasets.DATASETS or not isinstance(spec.encoder.config, dict):
        return []
    adapter = fb_datasets.DATASETS.get(spec.dataset.id)
    delivers = getattr(adapter, "delivers", None)
    data = dict(delivers(dict(spec.dataset.options))) if callable(delivers) else {}
    config = dict(spec.encoder.config)
    classes = data.get("num_classes")
    if classes is not None and "num_classes" not in config and TASKS.get(adapter.task).gives_classes(encoder):
        config["num_classes"] = classes.value
    return list(check(config, data))


def check_split_keys(spec: BenchmarkSpec, adapter: Any, source: str) -> None:
    """``dataset.split_per_seed`` and ``dataset.outer_test_seed`` become the adapter options ``split_seed`` (each
    run's seed) and ``outer_test_seed``: an adapter that declares neither would refuse them when the first split is
    built, as options the user never wrote in ``dataset.options``. Said here, when the spec is loaded, naming the
    spec key and what the adapter must declare. An adapter with open-ended options (``OPTIONS = None``) is not
    checked; ``split_per_seed`` is not either on a ``synthetic_only`` dataset (the runner passes no split seed to a
    synthetic twin)."""
    declared = getattr(adapter, "OPTIONS", None)
    if declared is None:
        return
    keys = []
    if spec.dataset.split_per_seed and not spec.dataset.synthetic_only:
        keys.append(("split_per_seed", "split_seed", "each run's seed"))
    if spec.dataset.outer_test_seed is not None:
        keys.append(("outer_test_seed", "outer_test_seed", "the seed of the one fixed test split"))
    for key, option, what in keys:
        if option not in declared:
            raise ConfigError(f"{source}: dataset.{key}: the runner passes {what} to adapter {spec.dataset.id!r} as "
                              f"its option {option!r}, which the adapter does not declare (its OPTIONS: "
                              f"{sorted(declared)}); declare {option!r} in the adapter's OPTIONS and draw the "
                              f"split from it (docs/adding-a-modality.md), or drop dataset.{key}")


def check_dataset_task(adapter: Any, where: str) -> None:
    """A dataset adapter (class) names a registered task family in ``task`` (built-in or a plugin's: the task
    registry, not a fixed list), and declares ``num_classes`` where that task's targets are classes
    (``Task.has_classes``); else one ConfigError naming ``where``, the task and what was expected."""
    task = getattr(adapter, "task", None)
    if task not in TASKS:
        raise ConfigError(f"{where}: task {task!r} is not a registered task family (registered: "
                          f"{', '.join(TASKS.available())}; a plugin registers one in the fusebench.tasks entry point)")
    if TASKS.get(task).has_classes and not getattr(adapter, "num_classes", None):
        raise ConfigError(f"{where}: task {task!r} predicts classes, so the adapter must declare num_classes")


def encoder_kind_problem(spec: BenchmarkSpec, encoder: Any) -> str | None:
    """Why the spec's encoder cannot read its dataset's modalities (None: it can, or either side does not say):
    the encoder's declared ``input_kinds`` against the kind of each modality the spec reads (the adapter's
    ``MODALITIES``, those of ``dataset.modalities`` when it names them), naming the encoder, its kinds and
    every modality of another kind with its kind."""
    kinds = getattr(encoder, "input_kinds", None)
    if kinds is None or spec.dataset.id not in fb_datasets.DATASETS:
        return None
    adapter = fb_datasets.DATASETS.get(spec.dataset.id)
    named = spec.dataset.modalities if not getattr(adapter, "VIEWS_FROM_DATA", False) else None
    other = [f"{m.name!r} ({m.kind})" for m in getattr(adapter, "MODALITIES", ())
             if (named is None or m.name in named) and m.kind not in kinds]
    if not other:
        return None
    readers = [e for e in encoders.ENCODERS.available()
               if not encoders.ENCODERS.plugin(e) and all(k in (getattr(encoders.ENCODERS.get(e), "input_kinds", None) or ())
                                                          for k in {m.kind for m in adapter.MODALITIES})]
    return (f"encoder.id: encoder {spec.encoder.id!r} reads modality kinds {list(kinds)}, but dataset "
            f"{spec.dataset.id!r} has modalities of another kind: {', '.join(other)}; choose an encoder that reads "
            f"them" + (f" (built in: {', '.join(readers)})" if readers else ""))


def check_objective_tables(spec: BenchmarkSpec, source: str) -> None:
    """Every per-objective setting (``pretrain.per_objective.<id>``; the tables of
    :data:`~fusebench.spec.config.PER_OBJECTIVE`) names a registered objective, exactly (a cell looks its entry
    up by its exact id, so ``M3G`` would be recorded and never read). A reference row (``none``, ``raw``...) has no entry either: nothing is
    pretrained for it. One :class:`ConfigError` naming the dotted key and the closest id."""
    for table in PER_OBJECTIVE:
        entries = getattr(spec.pretrain, table)
        if not isinstance(entries, dict):
            raise ConfigError(f"{source}: pretrain.{table}: expected a mapping of objective ids, got {entries!r}")
        for name in entries:
            if name in objectives.OBJECTIVES:  # imports the module of that id only
                continue
            key = grouped_key(f"pretrain.{table}.{name}")
            if is_reference(name):
                raise ConfigError(f"{source}: {key}: {name!r} is a reference row: nothing is pretrained for it, so "
                                  f"per-objective settings do not apply to it; remove the entry")
            valid = objectives.OBJECTIVES.available()
            hint = closest(str(name), valid)
            raise ConfigError(f"{source}: {key}: {name!r} is not a registered objective id (ids "
                              f"are matched exactly" + (f"; did you mean {hint!r}?" if hint else "")
                              + f"); valid objective ids: {', '.join(valid)}")


__all__ = ["check_against_components", "check_component_options", "check_objective_tables",
           "encoder_config_problems", "encoder_data_problems", "encoder_kind_problem", "load_spec", "protocol_problems",
           "spec_options_problems"]
