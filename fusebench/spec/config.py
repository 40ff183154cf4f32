"""Typed benchmark configuration, validated on load, with ``--set key=value`` overrides.

A benchmark spec is a YAML file in ``benchmarks/`` (package ``fusebench.benchmarks``). Its keys map
onto :class:`BenchmarkSpec`; unknown keys, wrong types and out-of-range values raise
:class:`ConfigError` naming the file and the dotted key. ``synthetic:`` holds overrides (same dotted
keys) applied when the benchmark runs on its dataset's synthetic twin (``--synthetic``).

This module is longer than ~450 lines because it is the spec's one schema: the typed sections, loading
with overrides, the cross-field validation and the canonical form that is hashed change together.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import re
import typing
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml

from fusebench.grids import points as grid_points
from fusebench.io import shown_text
from fusebench.typed import (ConfigError, DeprecatedKeyWarning, check_type, from_dict, load_yaml, read_yaml_file,
                            yaml_problem)
from fusebench.registry import closest, valid_id


#: the split every cell trains on (the train role of :func:`fusebench.engine.data.build_datasets`): never a spec's
#: val_split or test_split
TRAIN_SPLIT = "train"


@dataclass
class DatasetConfig:
    id: str = ""
    modalities: list[str] | None = None  # the views, in order; None = all of the adapter's
    options: dict[str, Any] = field(default_factory=dict)  # passed to fusebench.datasets.build
    synthetic_spec: dict[str, Any] = field(default_factory=dict)  # SyntheticSpec fields
    synthetic_only: bool = False  # embedded data (quickstart): always the synthetic generator
    val_split: str = "val"  # the only split used for model selection
    # each run seed draws its own split: the adapter's ``split_seed`` option is set to the run's seed
    # (selection runs: the selection seed), so the seeds vary the split as well as the initialisation
    split_per_seed: bool = False
    # a fixed outer test split (issue #30): the adapter draws the test split once with this seed, the same for
    # every run and selection seed, and ``split_seed`` (the run seed with split_per_seed) only partitions the
    # rest into train / val; so no selection trial trains or validates on an evaluation test sample. None: off
    outer_test_seed: int | None = None
    test_split: str = "test"


@dataclass
class EncoderConfig:
    id: str = ""
    config: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ObjectiveSettings:
    """One objective's pretraining settings, as a spec groups them under ``pretrain.per_objective.<id>``
    (:data:`OBJECTIVE_SETTINGS`), resolved: its own batch size and epochs, else the common ones;
    :meth:`PretrainConfig.settings` is the one place that reads the per-objective tables for a cell."""

    hparams: dict[str, Any]
    grid: dict[str, list[Any]]
    batch_size: int
    epochs: int
    micro_batch: int | None  # None: the loss on the whole batch

    def points(self) -> list[dict[str, Any]]:
        """Every point of the selection grid, in grid order (names sorted, the last varying fastest); ``[{}]``
        without a grid (the hyper-parameters alone)."""
        return grid_points(self.grid)

    def at(self, point: dict[str, Any]) -> dict[str, Any]:
        """The hyper-parameters at grid ``point``: :attr:`hparams` updated with it."""
        return {**self.hparams, **point}


def grouped_key(key: str) -> str:
    """A dotted key of the canonical form named as a spec and ``--set`` write it: ``pretrain.<table>.<id>[.<rest>]``
    (a table of :data:`PER_OBJECTIVE`) as ``pretrain.per_objective.<id>.<setting>[.<rest>]`` (``<id>`` where the key
    names no objective); any other key unchanged.

    >>> grouped_key("pretrain.grid.m3g.eps"), grouped_key("pretrain.objective_epochs"), grouped_key("pretrain.lr")
    ('pretrain.per_objective.m3g.grid.eps', 'pretrain.per_objective.<id>.epochs', 'pretrain.lr')
    """
    parts = key.split(".")
    if len(parts) < 2 or parts[0] != "pretrain" or parts[1] not in PER_OBJECTIVE:
        return key
    return ".".join(["pretrain", GROUPED, parts[2] if len(parts) > 2 else "<id>", SETTING_OF_TABLE[parts[1]],
                     *parts[3:]])


def setting_key(objective: str, setting: str) -> str:
    """The key that names ``objective``'s own ``setting`` (``hparams``, ``grid``, ``batch_size``, ``epochs``,
    ``micro_batch``; :data:`OBJECTIVE_SETTINGS`) in a spec, in ``--set`` and in every message:
    ``pretrain.per_objective.<objective>.<setting>``."""
    if setting not in OBJECTIVE_SETTINGS:
        raise KeyError(f"unknown per-objective setting {setting!r}; known: {', '.join(OBJECTIVE_SETTINGS)}")
    return f"pretrain.{GROUPED}.{objective}.{setting}"


@dataclass
class PretrainConfig:
    objective: str = "infonce_pwe"  # default objective when none is requested
    hparams: dict[str, dict[str, Any]] = field(default_factory=dict)  # objective id -> hyperparameters
    epochs: int = 1
    batch_size: int = 32
    objective_batch_size: dict[str, int] = field(default_factory=dict)  # objective id -> its own batch (M3G at k >= 5)
    objective_epochs: dict[str, int] = field(default_factory=dict)  # objective id -> its own epochs (with its own batch)
    # objective id -> micro-batch: the loss is the size-weighted mean of the objective over consecutive chunks
    # of this many samples of each batch (for a loss whose cost cannot fit the common batch, e.g. M3G's n^k
    # at k = 6): optimiser steps and samples seen stay those of the common batch; with missing views a chunk with
    # no usable term is left out (Pretrainer)
    objective_micro_batch: dict[str, int] = field(default_factory=dict)
    # hyper-parameter search on the validation split: objective id -> {name: [values]}; every combination
    # is pretrained once with ``selection_seed`` and the best validation primary metric wins (selection.select_hparams)
    grid: dict[str, dict[str, list[Any]]] = field(default_factory=dict)
    selection_seed: int = 1000  # not one of the evaluation seeds
    # several selection seeds (none of them an evaluation seed): each grid point is run once per seed and
    # scored by the mean validation metric; empty = [selection_seed]
    selection_seeds: list[int] = field(default_factory=list)
    optimizer: str = "adamw"  # adamw | sgd
    lr: float = 1e-3
    weight_decay: float = 1e-4
    schedule: str = "cosine"  # cosine | constant
    warmup_epochs: int = 0
    projection_dim: int = 64
    projection_hidden: int = 128
    # missing views in pretraining: this fraction of every batch's (sample, view) entries is absent (each sample
    # keeps >= 1 view; fusebench/probes/missing_views.py), the objective gets the presence mask; 0 = complete
    missing_rate: float = 0.0
    # the settings of the pretraining methods the objectives build on (fusebench.spec.methods):
    # method id -> its typed options, e.g. tuple_infonce: {disturbed: true, sample_optimisation: false};
    # checked on load (unknown ids / options are errors) and held as each method's Options dataclass
    methods: dict[str, Any] = field(default_factory=dict)

    def settings(self, objective: str) -> "ObjectiveSettings":
        """``objective``'s settings (a spec's ``pretrain.per_objective.<objective>``): its hyper-parameters and
        selection grid, its batch size and epochs (its own, else the common ``batch_size`` / ``epochs``) and its
        micro-batch (None: none)."""
        return ObjectiveSettings(hparams=dict(self.hparams.get(objective, {})), grid=dict(self.grid.get(objective, {})),
                                 batch_size=int(self.objective_batch_size.get(objective, self.batch_size)),
                                 epochs=int(self.objective_epochs.get(objective, self.epochs)),
                                 micro_batch=self.objective_micro_batch.get(objective))

    @classmethod
    def spec_keys(cls) -> list[str]:
        """The keys a spec's ``pretrain`` section takes, as messages name them: the fields, each objective's own
        settings grouped under ``per_objective`` (the tables of :data:`PER_OBJECTIVE` are the canonical form)."""
        return sorted({f.name for f in dataclasses.fields(cls)} - set(PER_OBJECTIVE) | {GROUPED})

    def method_options(self, method_id: str) -> Any:
        """The typed options of pretraining method ``method_id`` (its defaults when the spec has none)."""
        from fusebench.spec.methods import options_of

        return options_of(self, method_id)


@dataclass
class DownstreamConfig:
    protocol: str = "linear_probe"  # a registered protocol (fusebench/components/protocols.py): linear_probe | finetune | embedding_eval
    shots: int | None = None  # few-shot: s labelled training samples per class (M3G paper's EEG probe)
    epochs: int = 1
    batch_size: int = 32
    lr: float = 1e-3
    weight_decay: float = 0.0


@dataclass
class LoaderConfig:
    """How batches are fetched (fusebench/engine/data.py), never what they hold: the batches are the same
    whatever these are, so they do not change a result (docs/gpu.md, "Feeding the GPU and speed options")."""

    num_workers: int | None = None  # DataLoader worker processes; None: auto (usable cores - 1 on CUDA, 0 elsewhere)
    pin_memory: bool | None = None  # page-locked batches for asynchronous copies; None: auto (on for CUDA)
    persistent_workers: bool = True  # keep the workers across the epochs of a cell
    prefetch_factor: int = 2  # batches each worker prepares ahead


OPTIMIZER_IMPLS = ("default", "foreach", "fused")
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


@dataclass
class SpeedConfig:
    """Speed options of the standard cell (fusebench/engine/speed.py); each may change the last bits of the
    numbers, so each enters the config hash when it is not its default."""

    channels_last: bool = False  # channels-last memory format for encoders with 2-D convolutions (and 4-D inputs)
    cudnn_benchmark: bool = False  # cuDNN picks its fastest algorithms: deterministic algorithms switched off
    optimizer_impl: str = "default"  # default | foreach | fused: the torch.optim implementation of AdamW / SGD
    compile: bool = False  # torch.compile the encoder (falls back to eager, logged and recorded, if it fails)
    compile_mode: str = "default"  # torch.compile's mode: default | reduce-overhead | max-autotune | max-autotune-no-cudagraphs


@dataclass
class BenchmarkSpec:
    name: str = ""
    description: str = ""
    pipeline: str = "standard"  # standard | gaussian_mi
    dataset: DatasetConfig = field(default_factory=DatasetConfig)
    encoder: EncoderConfig = field(default_factory=EncoderConfig)
    pretrain: PretrainConfig = field(default_factory=PretrainConfig)
    downstream: DownstreamConfig = field(default_factory=DownstreamConfig)
    metrics: list[str] = field(default_factory=list)
    # the validation metric that selects (the downstream checkpoint and the hyper-parameters of pretrain.grid):
    # by default the board's primary metric (comparison.primary, else metrics[0]); one that differs from
    # comparison.primary is refused unless ``selection_metric_why`` says why (issue #30: select on what is ranked)
    selection_metric: str = ""
    selection_metric_why: str = ""
    objectives: list[str] = field(default_factory=list)  # the sweep run by default
    seeds: list[int] = field(default_factory=lambda: [0])
    checkpoint_every: int = 50  # steps between last.pt writes
    # the precision policy of encoders and heads: 32 | tf32 | bf16-mixed | 16-mixed
    # (fusebench/spec/precision.py); objectives and metrics compute in float32 or wider whatever it is
    precision: str | int = "32"
    protocol_notes: dict[str, str] = field(default_factory=dict)  # leaderboard footer lines
    # the data's modality family (e.g. text, image, image+text; default: the dataset adapter's MODALITY_FAMILY):
    # the index ranks the objectives over the boards of each family with >= 3 boards too (issue #31)
    family: str = ""
    # another benchmark this one re-runs with a changed setting (e.g. 4x the pretraining budget): its board stays
    # out of the cross-dataset ranking (the data would count twice) and the index compares its ranking with the
    # base board's (issue #31)
    variant_of: str = ""
    options: dict[str, Any] = field(default_factory=dict)  # pipeline-specific settings
    synthetic: dict[str, Any] = field(default_factory=dict)  # dotted overrides for --synthetic
    # how the board compares the rows: {"reference": objective id the tests are against (e.g. raw),
    # "primary": the board's primary metric id, "why": one line on the choice}; copied into every record
    comparison: dict[str, str] = field(default_factory=dict)
    loader: LoaderConfig = field(default_factory=LoaderConfig)  # how batches are fetched (no effect on results)
    speed: SpeedConfig = field(default_factory=SpeedConfig)  # speed options (hashed when not their defaults)
    # ---- issue #32: pretrained encoders as named rows (fusebench.components.encoder_weights) ----
    # row name -> {"path": the weights file, "sha256": its hash}; given as a path (or {path, sha256}) and resolved
    # when the spec is loaded. Each row is evaluated under the board's downstream protocol without pretraining;
    # its cells' identity holds its own entry's sha256 only (the path is recorded, not hashed)
    encoder_weights: dict[str, Any] = field(default_factory=dict)

    @property
    def validation_metric(self) -> str:
        """The metric that selects on the validation split (checkpoints, hyper-parameters): ``selection_metric``,
        else the board's primary metric ``comparison.primary``, else ``metrics[0]``. (Not the board's primary
        metric, which ranks: ``comparison.primary``; the two are equal by default.)"""
        return self.selection_metric or self.comparison.get("primary") or (self.metrics[0] if self.metrics else "")

    @property
    def primary_metric(self) -> str:
        """The old name of :attr:`validation_metric` (it named the selection metric, not the board's primary one);
        kept for plugins written against it."""
        return self.validation_metric

    @property
    def selection_seeds(self) -> list[int]:
        """The seeds of the hyper-parameter search (``pretrain.selection_seeds``, else ``[selection_seed]``)."""
        return [int(s) for s in (self.pretrain.selection_seeds or [self.pretrain.selection_seed])]

    def to_dict(self) -> dict[str, Any]:
        """The canonical form of the spec (hash schema :data:`HASH_SCHEMA_VERSION`): what ``run.json``
        stores as ``config``; a cell's config hash is computed from its projection (:func:`cell_identity`)."""
        out = dataclasses.asdict(self)
        out["pretrain"] = canonical_pretrain(self.pretrain)
        from fusebench.spec.precision import check

        out["precision"] = check(out["precision"])
        # the selection metric as resolved: ``comparison`` is not identity, but its primary decides what an
        # unset selection_metric selects on (every committed record names its selection_metric: unchanged)
        out["selection_metric"] = self.validation_metric
        for path, default in OMITTED_WHEN_DEFAULT:  # fields added after schema 2: written only when set
            *parents, leaf = path
            node = out
            for p in parents:
                node = node[p]
            if node.get(leaf) == default:
                del node[leaf]
        return out


#: The config hash's schema. Version 2: the canonical form is ``dataclasses.asdict`` of the spec with
#: ``pretrain.methods`` holding, per method, only the options that differ from their defaults (absent
#: when none does) and ``precision`` always written; fields added after version 2 (``OMITTED_WHEN_DEFAULT``)
#: are written only when they differ from their default, so adding a field leaves every hash as it was. The
#: hash of a cell is that of :func:`cell_identity`: the canonical form without what does not change what
#: the cell computes (:data:`NOT_IDENTITY`, ``pretrain.objective``) and with the per-objective tables of
#: ``pretrain`` (:data:`PER_OBJECTIVE`) cut to the cell's objective. Version 3 (issue #29, records
#: migrated once by ``scripts/migrate_hash_schema_3.py``): the same form, and the identity also leaves out
#: the fields the cell's pipeline does not apply (``fusebench.pipelines.Pipeline.applies``), the options of
#: the pretraining methods that do not join the objective's runs (``fusebench.spec.methods.joining``),
#: and ``pretrain.selection_seed`` when ``pretrain.selection_seeds`` is set (it is unused then). Version 4
#: (this one; records migrated once by ``scripts/migrate_hash_schema_4.py``): the same form, and the identity
#: also leaves out ``pretrain`` for the rows that pretrain nothing (reference rows, weights rows), the values
#: of ``pretrain.hparams.<id>`` that the objective's selection grid replaces, and the selection seeds of an
#: objective without a grid.
#: docs/benchmarks.md ("The config hash").
HASH_SCHEMA_VERSION = 4
#: the hash schemas a record may carry: its hash is checked under its own schema (older records stay
#: readable; ``fusebench run`` reuses a record only at the current one)
HASH_SCHEMAS: tuple[int, ...] = (2, 3, 4)

#: top-level spec keys that do not change what a cell computes: the board's text, the sweep's lists, the
#: synthetic override block (applied or not, the resulting values are in the form), checkpoint spacing
#: (resume is exact), how the board compares rows, how batches are fetched (the same batches for any loader
#: setting: tests/test_loader_workers.py)
NOT_IDENTITY: tuple[str, ...] = ("description", "protocol_notes", "objectives", "seeds", "synthetic",
                                 "checkpoint_every", "comparison", "loader", "selection_metric_why", "family",
                                 "variant_of")

#: ``pretrain`` tables keyed by objective id: a cell's identity holds only its own objective's entry
PER_OBJECTIVE: tuple[str, ...] = ("hparams", "grid", "objective_batch_size", "objective_epochs",
                                  "objective_micro_batch")

#: a spec groups each objective's own settings, ``pretrain.per_objective.<id>.<setting>`` (issue #35); the
#: canonical form (records, the config hash) keeps them as the tables of :data:`PER_OBJECTIVE`: setting -> table
OBJECTIVE_SETTINGS: dict[str, str] = {"hparams": "hparams", "grid": "grid", "batch_size": "objective_batch_size",
                                      "epochs": "objective_epochs", "micro_batch": "objective_micro_batch"}
#: the inverse of :data:`OBJECTIVE_SETTINGS`: canonical table -> the setting's name in a spec
SETTING_OF_TABLE: dict[str, str] = {table: name for name, table in OBJECTIVE_SETTINGS.items()}
GROUPED = "per_objective"

#: fields added after hash schema 2 was fixed: written into the canonical form (and so the hash) only when
#: they differ from their default, so every existing spec and run keeps its hash
OMITTED_WHEN_DEFAULT: tuple[tuple[tuple[str, ...], Any], ...] = (
    # loader and speed (issue #21): each key only when set, then the block only when a key is left
    (("loader", "num_workers"), None), (("loader", "pin_memory"), None), (("loader", "persistent_workers"), True),
    (("loader", "prefetch_factor"), 2), (("loader",), {}),
    (("speed", "channels_last"), False), (("speed", "cudnn_benchmark"), False), (("speed", "optimizer_impl"), "default"),
    (("speed", "compile"), False), (("speed", "compile_mode"), "default"), (("speed",), {}),
    (("pretrain", "missing_rate"), 0.0),  # missing views in pretraining (issue #23)
    (("dataset", "outer_test_seed"), None), (("selection_metric_why",), ""),  # issue #30
    (("family",), ""), (("variant_of",), ""),  # issue #31
    (("encoder_weights",), {}),  # issue #32: pretrained encoders as rows
)


def canonical_pretrain(pt: PretrainConfig) -> dict[str, Any]:
    """``pretrain`` in hash schema 2: the generic fields, then ``methods`` holding, per method, only the
    options that differ from their defaults (absent when there are none)."""
    from fusebench.spec import methods as M

    out = {f.name: copy.deepcopy(getattr(pt, f.name)) for f in dataclasses.fields(pt) if f.name != "methods"}
    given = dict(pt.methods or {})
    changed_by_method: dict[str, dict[str, Any]] = {}
    for mid in sorted(given):
        cls = M.METHODS.get(mid)
        values = M.option_values(M.make_options(cls, given[mid], f"pretrain.methods.{mid}"))
        defaults = M.option_values(cls.Options())
        changed = {k: v for k, v in values.items() if v != defaults[k]}
        if changed:
            changed_by_method[mid] = changed
    if changed_by_method:
        out["methods"] = changed_by_method
    return out


def spec_from_dict(canonical: dict[str, Any], source: str = "config") -> BenchmarkSpec:
    """The inverse of ``BenchmarkSpec.to_dict()``: a spec from its canonical form (e.g. a run record's
    ``config``), the flat method keys mapped onto ``pretrain.methods`` without a warning. Keys and
    types are checked; the cross-field validation of :func:`load_spec` is not repeated."""
    data = copy.deepcopy(canonical)
    if isinstance(data.get("pretrain"), dict):
        _move_legacy_keys(data["pretrain"], source, warn=False)
    spec = from_dict(BenchmarkSpec, data, "")
    from fusebench.spec.methods import check_methods

    spec.pretrain.methods = check_methods(spec.pretrain.methods)
    spec.precision = _check_precision(spec.precision, source)
    return spec


def _check_precision(value: Any, source: str) -> str:
    from fusebench.spec.precision import check

    try:
        return check(value)
    except ValueError as e:
        raise ConfigError(f"{source}: {e}") from None


#: the flat ``pretrain`` keys the built-in methods' options had before methods had options (and before hash
#: schema 2): old key -> (method id, option). Still read from specs and ``--set`` with a
#: :class:`~fusebench.spec.methods.DeprecatedKeyWarning`; a method author never meets them.
RENAMED_PRETRAIN_KEYS: dict[str, tuple[str, str]] = {
    "ema_teacher": ("ema_teacher", "enabled"), "ema_momentum": ("ema_teacher", "momentum"),
    "m3g_view_rotation": ("view_rotation", "enabled"),
    **{f"tuple_{o}": ("tuple_infonce", o) for o in (
        "disturbed", "alpha", "sample_optimisation", "candidates", "candidate_steps", "policy_lr", "policy_sigma",
        "beta_sigma", "beta_max", "beta_lambda", "zeta_grid", "val_size", "policy_baseline")},
    "embedding_noise": ("tuple_infonce", "embedding_noise"),
}


def _move_legacy_keys(pretrain: dict[str, Any], source: str, warn: bool = True) -> None:
    """Move the old flat keys of ``pretrain`` (a raw spec mapping, changed in place) onto
    ``methods.<id>.<option>``, type-checked under the key as written; warn (``DeprecatedKeyWarning``)
    unless ``warn`` is false. The same option given both ways with two values is an error."""
    for flat in [k for k in pretrain if k in RENAMED_PRETRAIN_KEYS]:
        from fusebench.spec import methods as M  # torch: only where an old key is there to move

        mid, opt = RENAMED_PRETRAIN_KEYS[flat]
        new = f"pretrain.methods.{mid}.{opt}"
        value = pretrain.pop(flat)
        cls = M.METHODS.get(mid)
        try:
            value = check_type(value, typing.get_type_hints(cls.Options)[opt], f"pretrain.{flat} (now {new})")
        except ConfigError as e:
            raise ConfigError(f"{source}: {e}") from None
        if warn:
            warnings.warn(f"{source}: pretrain.{flat} is deprecated; write {new}", M.DeprecatedKeyWarning, stacklevel=4)
        methods = pretrain.get("methods")
        if methods is None:
            methods = pretrain["methods"] = {}
        block = methods.get(mid) if isinstance(methods, dict) else None
        if block is None and isinstance(methods, dict):
            block = methods[mid] = {}
        if not isinstance(block, dict):
            raise ConfigError(f"{source}: cannot map pretrain.{flat} onto {new}: pretrain.methods.{mid} is not a mapping")
        if opt in block and block[opt] != value:
            raise ConfigError(f"{source}: pretrain.{flat} = {value!r} and {new} = {block[opt]!r} set one option "
                              f"twice; keep {new}")
        block[opt] = value


def group_objective_settings(pretrain: dict[str, Any], source: str, warn: bool = True) -> None:
    """``pretrain.per_objective`` (``{objective id: {hparams, grid, batch_size, epochs, micro_batch}}``) of a raw
    spec mapping moved, in place, onto the canonical tables of :data:`PER_OBJECTIVE`; the tables written flat in a
    spec file are read too, with a :class:`~fusebench.typed.DeprecatedKeyWarning` unless ``warn`` is false. One
    setting given both ways with two values is an error; an unknown setting is one naming the known ones."""
    flat = [t for t in PER_OBJECTIVE if pretrain.get(t)]
    if flat and warn:
        warnings.warn(f"{source}: {', '.join(f'pretrain.{t}' for t in flat)}: deprecated layout; write each "
                      f"objective's settings together, pretrain.{GROUPED}.<objective>."
                      f"{{{', '.join(SETTING_OF_TABLE[t] for t in flat)}}}", DeprecatedKeyWarning, stacklevel=4)
    if GROUPED not in pretrain:
        return
    grouped = pretrain.pop(GROUPED)
    known = ", ".join(OBJECTIVE_SETTINGS)
    if grouped is None:
        return
    if not isinstance(grouped, dict):
        raise ConfigError(f"{source}: pretrain.{GROUPED}: expected a mapping objective id -> {{{known}}}, "
                          f"got {type(grouped).__name__}")
    for objective, block in grouped.items():
        where = f"pretrain.{GROUPED}.{objective}"
        if block is None:
            continue
        if not isinstance(objective, str) or not isinstance(block, dict):
            raise ConfigError(f"{source}: {where}: expected a mapping of {known}, got {block!r}")
        for name, value in block.items():
            if name not in OBJECTIVE_SETTINGS:
                raise ConfigError(f"{source}: {where}.{name}: unknown setting{_closest(name, OBJECTIVE_SETTINGS)}; "
                                  f"known: {known}")
            table = pretrain.setdefault(OBJECTIVE_SETTINGS[name], {})
            if not isinstance(table, dict):
                raise ConfigError(f"{source}: {where}.{name}: pretrain.{OBJECTIVE_SETTINGS[name]} is not a mapping")
            if objective in table and table[objective] != value:
                raise ConfigError(f"{source}: {where}.{name} = {value!r} and pretrain.{OBJECTIVE_SETTINGS[name]}."
                                  f"{objective} = {table[objective]!r} set one setting twice; keep {where}.{name}")
            table[objective] = value


def _closest(name: str, choices: Any) -> str:
    """`` (did you mean 'x'?)`` from :func:`fusebench.registry.closest`, or nothing."""
    near = closest(str(name), list(choices))
    return f" (did you mean {near!r}?)" if near else ""


def grouped_override(key: str, source: str = "--set") -> str:
    """An override key of the grouped layout, ``pretrain.per_objective.<id>.<setting>[.<name>...]``, as the key of the
    canonical form it sets (``pretrain.<table>.<id>[.<name>...]``); any other key as it is. The whole block of one
    objective, or all of them, is a mapping to set: :func:`apply_overrides` spreads it over the tables."""
    parts = key.split(".")
    if len(parts) >= 4 and parts[:2] == ["pretrain", GROUPED]:
        if parts[3] not in OBJECTIVE_SETTINGS:
            raise ConfigError(f"{source}: {key}: unknown setting {parts[3]!r}{_closest(parts[3], OBJECTIVE_SETTINGS)}; "
                              f"known: {', '.join(OBJECTIVE_SETTINGS)}")
        return ".".join(["pretrain", OBJECTIVE_SETTINGS[parts[3]], parts[2], *parts[4:]])
    return key


def _legacy_override(key: str, source: str) -> str:
    """A dotted override key, with an old flat ``pretrain.<key>`` mapped onto its method option (warned)."""
    parts = key.split(".")
    if len(parts) != 2 or parts[0] != "pretrain":
        return key
    hit = RENAMED_PRETRAIN_KEYS.get(parts[1])
    if hit is None:
        return key
    from fusebench.spec import methods as M  # torch: only for an old key

    new = f"pretrain.methods.{hit[0]}.{hit[1]}"
    warnings.warn(f"{source}: {key} is deprecated; write {new}", M.DeprecatedKeyWarning, stacklevel=4)
    return new


def parse_override(text: str) -> tuple[str, Any]:
    """``"pretrain.epochs=3"`` -> ("pretrain.epochs", 3); the value is parsed as YAML."""
    if "=" not in text:
        raise ConfigError(f"--set {text!r}: expected KEY=VALUE with a dotted key, e.g. pretrain.epochs=3")
    key, _, raw = text.partition("=")
    stripped = raw.strip()
    try:
        value = load_yaml(raw, f"--set {key.strip()}") if stripped else ""
    except yaml.YAMLError as e:
        if stripped[:1] in "[{":
            raise ConfigError(f"--set {text!r}: value is not valid YAML ({yaml_problem(e)})") from None
        value = raw  # plain text that YAML cannot parse (e.g. 'a: b, c: d')
    if isinstance(value, (dict, list)) and stripped[:1] not in "[{":
        value = raw  # 'note: text' is a string, not a mapping; write {..} / [..] for those
    return key.strip(), value


def apply_overrides(data: dict[str, Any], overrides: dict[str, Any], source: str) -> dict[str, Any]:
    """Return a copy of ``data`` with dotted-key ``overrides`` applied."""
    out = copy.deepcopy(data)
    for key, value in overrides.items():
        key = grouped_override(_legacy_override(key, source), source)
        parts = key.split(".")
        if parts[:2] == ["pretrain", GROUPED] and len(parts) <= 3:  # one objective's block, or every objective's
            pre = out.setdefault("pretrain", {})
            if not isinstance(pre, dict):
                raise ConfigError(f"{source}: cannot set {key!r}: 'pretrain' is not a mapping")
            objectives = [parts[2]] if len(parts) == 3 else None  # None: every objective's settings replaced
            for table in PER_OBJECTIVE:
                if objectives is None:
                    pre[table] = {}
                elif isinstance(pre.get(table), dict):
                    pre[table] = {o: v for o, v in pre[table].items() if o not in objectives}
            block = {parts[2]: value} if len(parts) == 3 else value
            pre[GROUPED] = block
            group_objective_settings(pre, f"{source}: {key}", warn=False)
            continue
        node = out
        for p in parts[:-1]:
            if not isinstance(node.get(p, {}), dict):
                hint = ""
                if node is out and p == "objectives":  # the sweep's list of ids, not where an objective is set
                    hint = (f"; 'objectives' is the list of objective ids the sweep runs: an objective's own settings "
                            f"are pretrain.per_objective.<id>.<setting>, e.g. pretrain.per_objective.{parts[1]}."
                            f"hparams.<name>=VALUE (fusebench list objectives --details)")
                raise ConfigError(f"{source}: cannot set {key!r}: {p!r} is not a mapping{hint}")
            node = node.setdefault(p, {})
        node[parts[-1]] = value
    return out


def validate(spec: BenchmarkSpec, source: str) -> BenchmarkSpec:
    """The checks a spec passes on its own (ranges, consistency between its fields, valid ids); what it
    names is checked against the registered components by :mod:`fusebench.components.spec_check`."""
    pt, ds = spec.pretrain, spec.downstream
    checks = [
        (pt.epochs >= 0, "pretrain.epochs must be >= 0"),
        (pt.batch_size >= 2, "pretrain.batch_size must be >= 2 (contrastive losses need negatives)"),
        (math.isfinite(pt.lr) and pt.lr > 0, f"pretrain.lr must be a finite number > 0, got {pt.lr!r}"),
        (math.isfinite(pt.weight_decay) and pt.weight_decay >= 0,
         f"pretrain.weight_decay must be a finite number >= 0, got {pt.weight_decay!r}"),
        *((type(v) is int and v >= 1, f"pretrain.{name} must be an integer >= 1 (a width), got {v!r}")
          for name, v in (("projection_dim", pt.projection_dim), ("projection_hidden", pt.projection_hidden))),
        # each objective's own epochs before the warmup that must fit in them: a bad value is named by its key
        *((isinstance(v, int) and not isinstance(v, bool) and v >= least,
           f"{setting_key(o, setting)} must be an integer >= {least}, got {v!r}")
          for setting, table, least in (("batch_size", pt.objective_batch_size, 2),
                                        ("epochs", pt.objective_epochs, 0),
                                        ("micro_batch", pt.objective_micro_batch, 2))
          for o, v in sorted(table.items())),
        *((type(pt.warmup_epochs) is int and 0 <= pt.warmup_epochs <= e,
           f"pretrain.warmup_epochs must be an integer in 0..{e} (the {where} epochs), got {pt.warmup_epochs!r}")
          for where, e in (("pretraining", pt.epochs),
                           *((f"{o!r} objective's own", v) for o, v in sorted(pt.objective_epochs.items())
                             if isinstance(v, int)))),
        (spec.dataset.modalities is None or len(set(map(str, spec.dataset.modalities))) == len(spec.dataset.modalities),
         f"dataset.modalities must name each modality once (each is one view of the objectives), got "
         f"{spec.dataset.modalities!r}"),
        (0.0 <= pt.missing_rate < 1.0, "pretrain.missing_rate must be in [0, 1) (the fraction of (sample, view) "
                                      "entries absent from every pretraining batch)"),
        (pt.optimizer in ("adamw", "sgd"), "pretrain.optimizer must be 'adamw' or 'sgd'"),
        (pt.schedule in ("cosine", "constant"), "pretrain.schedule must be 'cosine' or 'constant'"),
        *((not isinstance(v, int) or v <= pt.objective_batch_size.get(o, pt.batch_size),
           f"{setting_key(o, 'micro_batch')} = {v} must be at most the batch it splits "
           f"({pt.objective_batch_size.get(o, pt.batch_size)}): no chunk of the batch could be that large")
          for o, v in sorted(pt.objective_micro_batch.items())),
        (all(isinstance(x, int) and not isinstance(x, bool) for x in pt.selection_seeds)
         and len(set(pt.selection_seeds)) == len(pt.selection_seeds) and not set(pt.selection_seeds) & set(spec.seeds),
         "pretrain.selection_seeds must be distinct integers, none of them an evaluation seed (seeds)"),
        (set(spec.comparison) <= {"reference", "primary", "why"}
         and all(isinstance(v, str) for v in spec.comparison.values()),
         "comparison takes the string keys reference, primary, why"),
        (not spec.comparison.get("primary") or spec.comparison["primary"] in spec.metrics,
         f"comparison.primary {spec.comparison.get('primary')!r} must be one of metrics {spec.metrics}"),
        (not spec.selection_metric or not spec.comparison.get("primary")
         or spec.selection_metric == spec.comparison["primary"] or spec.selection_metric_why.strip(),
         f"selection_metric {spec.selection_metric!r} differs from comparison.primary "
         f"{spec.comparison.get('primary')!r}, the metric the board ranks: the hyper-parameters and checkpoints "
         f"would be chosen on another metric. Drop selection_metric (it defaults to comparison.primary) or state "
         f"why in selection_metric_why"),
        (not spec.selection_metric_why or (spec.selection_metric and spec.comparison.get("primary")
                                           and spec.selection_metric != spec.comparison["primary"]),
         "selection_metric_why is read only where selection_metric differs from comparison.primary; drop it"),
        (spec.family == "" or (isinstance(spec.family, str) and re.fullmatch(FAMILY_RULE, spec.family) is not None),
         f"family must be a lowercase modality family such as text, image or image+text (letters, digits, '+', "
         f"'-', '_', starting with a letter), got {spec.family!r}"),
        (spec.variant_of == "" or (valid_id(spec.variant_of) and spec.variant_of != spec.name),
         f"variant_of must be the id of another benchmark (the one this spec re-runs with a changed setting), "
         f"got {spec.variant_of!r}"),
        (spec.dataset.outer_test_seed is None or (type(spec.dataset.outer_test_seed) is int
                                                  and 0 <= spec.dataset.outer_test_seed <= MAX_SEED),
         f"dataset.outer_test_seed must be null (off) or an integer seed in 0..{MAX_SEED}, "
         f"got {spec.dataset.outer_test_seed!r}"),
        (not spec.comparison.get("reference") or spec.comparison["reference"] in spec.objectives,
         f"comparison.reference {spec.comparison.get('reference')!r} must be one of objectives {spec.objectives}"),
        (ds.epochs >= 0 and ds.batch_size >= 1, "downstream.epochs >= 0 and downstream.batch_size >= 1"),
        (math.isfinite(ds.lr) and ds.lr > 0, f"downstream.lr must be a finite number > 0, got {ds.lr!r}"),
        (math.isfinite(ds.weight_decay) and ds.weight_decay >= 0,
         f"downstream.weight_decay must be a finite number >= 0, got {ds.weight_decay!r}"),
        (ds.shots is None or ds.shots >= 1, "downstream.shots must be a positive number of samples per class"),
        (len(spec.seeds) >= 1, "seeds must list at least one seed"),
        (len(set(map(repr, spec.seeds))) == len(spec.seeds),
         f"seeds must be distinct (a seed given twice would count one run twice), got {spec.seeds}"),
        (len(set(spec.objectives)) == len(spec.objectives),
         f"objectives must be distinct, got {sorted({o for o in spec.objectives if spec.objectives.count(o) > 1})} "
         f"more than once"),
        (spec.checkpoint_every >= 1, "checkpoint_every must be >= 1"),
        (spec.loader.num_workers is None or (type(spec.loader.num_workers) is int and spec.loader.num_workers >= 0),
         f"loader.num_workers must be null (auto) or an integer >= 0, got {spec.loader.num_workers!r}"),
        (spec.loader.pin_memory is None or isinstance(spec.loader.pin_memory, bool),
         f"loader.pin_memory must be null (auto: on for CUDA) or a boolean, got {spec.loader.pin_memory!r}"),
        (spec.loader.prefetch_factor >= 1,
         f"loader.prefetch_factor must be an integer >= 1, got {spec.loader.prefetch_factor!r}"),
        *speed_checks(spec.speed),
    ]
    for ok, msg in checks:
        if not ok:
            raise ConfigError(f"{source}: {msg}")
    from fusebench.registry import ID_RULE

    if not valid_id(spec.name):  # the name becomes a folder of run records: no path escapes
        raise ConfigError(f"{source}: name {spec.name!r} is not a valid benchmark id ({ID_RULE})")
    for s in spec.seeds:
        check_seed(s, f"{source}: seeds")
    spec.precision = _check_precision(spec.precision, source)
    return spec


def speed_checks(speed: SpeedConfig) -> list[tuple[bool, str]]:
    """The checks of a ``speed`` section beyond its keys' types: (passed, message) pairs."""
    return [
        (speed.optimizer_impl in OPTIMIZER_IMPLS,
         f"speed.optimizer_impl must be one of {', '.join(OPTIMIZER_IMPLS)}, got {speed.optimizer_impl!r}"),
        (speed.compile_mode in COMPILE_MODES,
         f"speed.compile_mode must be one of {', '.join(COMPILE_MODES)}, got {speed.compile_mode!r}"),
        (speed.compile or speed.compile_mode == "default",  # else recorded and hashed, and never used
         f"speed.compile_mode {speed.compile_mode!r} is used only with speed.compile: true; set both, or drop "
         "compile_mode"),
    ]


def speed_config(options: dict[str, Any], source: str) -> SpeedConfig:
    """A :class:`SpeedConfig` from the keys of a ``speed`` section (``fusebench bench gpu --speed``), checked as
    a spec's are: a ``ConfigError`` naming ``source`` and the key otherwise."""
    try:
        speed = from_dict(SpeedConfig, dict(options), "speed")
    except ConfigError as e:
        raise ConfigError(f"{source}: {e}") from None
    for ok, msg in speed_checks(speed):
        if not ok:
            raise ConfigError(f"{source}: {msg}")
    return speed


MAX_SEED = 2**32 - 1  # numpy's seed range
FAMILY_RULE = r"[a-z][a-z0-9+_-]*"  # a spec's ``family``


def check_seed(seed: Any, where: str = "--seeds") -> int:
    """A seed is an integer in 0..2**32-1 (numpy's range); anything else is a ConfigError naming ``where``."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        raise ConfigError(f"{where}: seed {seed!r} is not an integer in 0..{MAX_SEED}")
    return seed


class SpecNameError(ConfigError):
    """A spec file whose ``name:`` key differs from its file's stem (``claimed``: that name): a benchmark's
    id is its file name, so the records of one file never land in another benchmark's folders."""

    def __init__(self, message: str, claimed: str) -> None:
        super().__init__(message)
        self.claimed = claimed


def name_overrides(error: Exception, overrides: Mapping[str, Any] | None) -> Exception:
    """``error`` (raised about a spec file) with the ``--set`` values applied to the file added at the end of its
    message, ``... [with --set downstream.lr=-1]``: a value given on the command line is named beside the file it
    changed, never blamed on the file alone. The same exception object (its type and other arguments kept)."""
    if overrides and error.args and isinstance(error.args[0], str) and "[with --set " not in error.args[0]:
        each = [shown_text(f"{k}={v!r}") for k, v in overrides.items()]  # a control character in a key: escaped
        shown = ", ".join(e if len(e) <= 60 else e[:57] + "..." for e in each)  # a long value cut, visibly
        error.args = (f"{error.args[0]} [with --set {shown}]", *error.args[1:])
    return error


def read_spec(path: str | Path, overrides: dict[str, Any] | None = None, synthetic: bool = False) -> BenchmarkSpec:
    """Read a YAML spec, apply the synthetic overrides (if ``synthetic``) then ``overrides``, and check it on
    its own (keys, types, ranges: :func:`validate`). Checked against the registered components by
    :func:`fusebench.components.spec_check.load_spec`, which is what loads a benchmark. The YAML is read within
    the limits of :func:`fusebench.typed.load_yaml` (nesting depth, size with aliases expanded); a ``name:``
    key must equal the file's stem (:class:`SpecNameError`; ``--set name=...`` may still rename a run)."""
    path = Path(path)
    data = read_yaml_file(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    if isinstance(data.get("name"), str) and data["name"] != path.stem:
        raise SpecNameError(f"{path}: name {data['name']!r} differs from the file's stem {path.stem!r}: a "
                            f"benchmark's id is its file name; drop the name: key or rename the file", data["name"])
    data.setdefault("name", path.stem)
    if isinstance(data.get("pretrain"), dict):  # old flat method keys (tuple_*, ema_*, ...): mapped, warned
        data["pretrain"] = dict(data["pretrain"])
        _move_legacy_keys(data["pretrain"], str(path))
        # each objective's settings, grouped in the file, onto the canonical tables (flat tables: warned)
        group_objective_settings(data["pretrain"], str(path))
    if synthetic:
        syn = data.get("synthetic", {}) or {}
        if not isinstance(syn, dict):
            raise ConfigError(f"{path}: 'synthetic' must be a mapping of dotted overrides")
        data = apply_overrides(data, syn, str(path))
    if overrides:
        data = apply_overrides(data, overrides, "--set")
    try:
        spec = from_dict(BenchmarkSpec, data, "")
    except ConfigError as e:
        raise name_overrides(ConfigError(f"{path}: {e}"), overrides) from None
    if not synthetic and not spec.dataset.synthetic_only:
        # the synthetic generator is not used: its settings are neither recorded nor hashed (issue #29); one given on
        # the command line would be recorded nowhere and used by nothing: refused
        given = [k for k in (overrides or {}) if k == "dataset.synthetic_spec" or k.startswith("dataset.synthetic_spec.")
                 or (k == "dataset" and isinstance(overrides[k], dict) and "synthetic_spec" in overrides[k])]
        if given:
            raise ConfigError(f"--set {given[0]}: {path.stem} runs on the real data here, so the synthetic generator's "
                              "settings would be used by nothing; drop the setting, or add --synthetic to run the "
                              "synthetic twin")
        spec.dataset.synthetic_spec = {}
    try:
        return validate(spec, str(path))
    except ConfigError as e:
        raise name_overrides(e, overrides) from None
