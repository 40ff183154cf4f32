"""The run record, built in one place (records layer): :func:`record_of` turns how a cell ran
(:class:`CellRun`) and what its protocol measured (:class:`Scores`) into the complete ``run.json`` mapping --
``numerics.speed``, ``versions`` and ``comparability_key`` included -- that
:func:`fusebench.records.cell_file.write_record` validates (:func:`fusebench.records.validate_record`) and
writes once, unchanged; a written ``run.json`` is never changed. :func:`build_record` is the same call with the
arguments spread out, for pipelines written before the two objects."""

from __future__ import annotations

import datetime
import os
import platform
import sys
from dataclasses import dataclass, field
from typing import Any, Mapping

import torch

from fusebench.pipelines import pipeline_of
from fusebench.records import CURRENT_SCHEMA_VERSION as SCHEMA_VERSION  # the run.json schema (docs/leaderboards.md)
from fusebench.records import comparability_key
from fusebench.runtime import distributed, utils
from fusebench.spec import precision
from fusebench.components.identity import cell_versions, config_hash
from fusebench.spec.config import HASH_SCHEMA_VERSION, BenchmarkSpec
from fusebench.engine.loop import Clock
from fusebench.components.protocols import protocol_of
from fusebench.components.rows import comparison_of, row_of
from fusebench.spec.request import CellRequest, objective_hparams
from fusebench.version import __version__


#: the pretraining budget of a row that is not pretrained (a reference row, zero epochs)
NO_BUDGET: dict[str, Any] = {"optimizer_steps": 0, "samples_seen": 0, "batch_size": None, "micro_batch": None,
                             "epochs": 0}


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
    shared = split_overlap(data)
    if shared:  # e.g. the one-subject smoke recipe: a pipeline check, never ranked (fusebench.records.board_kind)
        ident["data_check"] = {"kind": "pipeline_check", "reason": shared}
    return ident


def split_overlap(data: Mapping[str, Any]) -> str | None:
    """Why the splits of ``data`` (role -> dataset, or a ``Subset`` of one) are not disjoint: the samples they
    share by their adapter's ``sample_keys()`` (None when they are disjoint or an adapter cannot say)."""
    keys: dict[str, list[str]] = {}
    for role, ds in data.items():
        base, idx = (ds.dataset, ds.indices) if hasattr(ds, "indices") and hasattr(ds, "dataset") else (ds, None)
        fn = getattr(base, "sample_keys", None)
        ks = fn() if callable(fn) else None
        if ks is not None:
            keys[role] = [ks[i] for i in idx] if idx is not None else list(ks)
    found = []
    roles = list(keys)
    for i, a in enumerate(roles):
        for b in roles[i + 1:]:
            both = sorted(set(keys[a]) & set(keys[b]))
            if both:
                found.append(f"{a} and {b} share {len(both)} sample(s) (of {len(set(keys[a]))} and "
                             f"{len(set(keys[b]))}; e.g. {both[0]})")
    if not found:
        return None
    return ("the splits are not disjoint: " + "; ".join(found) + ". Its scores are measured on samples it trained "
            "on: a pipeline check, not a result")


@dataclass(frozen=True)
class CellRun:
    """How one cell ran, known before it is scored: the request, the data it read, the device and the switches
    that decided its numbers (``flags``: :func:`fusebench.runtime.utils.seed_everything`'s determinism switches,
    with ``numerics``), what pretraining left (its ``curves``, ``pretrain_time``), the cell's wall time, the
    ``numerics.speed`` block (the feed and speed options in force, compilation's outcome included) and the
    cell's own record ``fields`` (a weights row's ``encoder_weights`` and ``versions``).

    ``timing`` (resumed cells): ``{"resumed": bool, "segments": {"wall": Clock | [s], "pretrain": [s]},
    "budget": {...}}``; ``wall_time`` and ``pretrain_time`` are then the sums of the segments (the time of the
    work kept across processes), and the segments are recorded beside them."""

    request: CellRequest
    synthetic: bool
    device: Any
    flags: Mapping[str, Any]
    data: Mapping[str, Any] | None = None
    context: Mapping[str, Any] | None = None
    curves: Mapping[str, Any] = field(default_factory=dict)
    wall_time: float = 0.0
    pretrain_time: float = 0.0
    timing: Mapping[str, Any] | None = None
    speed: Mapping[str, Any] | None = None
    fields: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Scores:
    """What a protocol (or a pipeline) measured for a cell: the ``test`` metrics (``{id: value}``), the
    validation metrics of the selected state (``val``) and its ``best_epoch`` (-1: no epoch selected), the
    protocol's own ``curves`` (recorded after the pretraining ones), the ``model`` it scored (its parameters are
    counted; None: 0), representation ``diagnostics``, ``selection`` (merged into the record's selection block:
    a protocol's rule and the choices it made), the protocol's record ``fields`` (e.g. ``clustering``,
    ``missing_views``, ``validity``; a field named here replaces the common one, e.g. a pipeline that counts its
    own ``budget``) and ``directions`` (a pipeline's own metrics' directions; else the dataset's task says them,
    else the metric's metadata)."""

    test: Mapping[str, Any]
    val: Mapping[str, Any] | None = None
    best_epoch: int = -1
    curves: Mapping[str, Any] = field(default_factory=dict)
    model: Any = None
    diagnostics: Mapping[str, Any] = field(default_factory=dict)
    selection: Mapping[str, Any] | None = None
    fields: Mapping[str, Any] | None = None
    directions: Mapping[str, str] | None = None


def record_of(run: CellRun, scores: Scores) -> dict[str, Any]:
    """The run record of a cell, built once and complete (record schema 4, docs/leaderboards.md): what every
    pipeline records (identity, config and hash, data identity, host, seeds, determinism, precision and
    ``numerics.speed``, curves, selection, metrics, times, budget, hyper-parameters), the cell's and the
    protocol's fields, ``versions`` and the ``comparability_key`` -- the mapping
    :func:`fusebench.records.cell_file.write_record` validates and writes unchanged.

    The test metrics are written as ``{id: {value, direction, version}}``: the direction from ``directions``
    (a pipeline's own metrics), else the dataset's task, else the metric's metadata."""
    from fusebench import metrics as M

    request, context, data, device = run.request, run.context or {}, run.data, run.device
    spec, objective, seed = request.spec, request.objective, request.seed
    config = spec.to_dict()  # once: the record's config, and its hash is that of this form
    segments = time_segments(run.timing, run.wall_time, run.pretrain_time)
    wall_time = sum(segments["wall"]) if run.timing else run.wall_time  # the sum of the recorded segments
    fields = {**run.fields, **(scores.fields or {})}
    # a pipeline's own metrics' directions (a plugin written before record schema 4 passes them as a field)
    directions = {**fields.pop("metric_directions", {}), **(scores.directions or {})}
    if pipeline_of(spec).downstream and not directions:  # the dataset's task says how its metrics read
        from fusebench.tasks import TASKS

        task = getattr((data or {}).get("train"), "task", None)
        if task in TASKS:
            described = TASKS.get(task).describe_metrics(spec.metrics, protocol_of(spec).metric_families)
            directions = {mid: direction for mid, _unit, direction in described}
        else:  # a plugin adapter's task that is not registered: the metric metadata alone
            directions = {mid: M.metadata(mid)["direction"] for mid in spec.metrics}
    numerics = dict(run.flags.get("numerics") or precision.numerics(precision.get(spec.precision), torch.device(device)))
    numerics.pop("precision", None)  # config.precision states it (schema 3)
    if run.speed is not None:  # the feed and speed options in force (fusebench.engine.speed.record)
        numerics["speed"] = dict(run.speed)
    record = {
        "schema_version": SCHEMA_VERSION,
        "suite_version": __version__,
        "git": context.get("git") or utils.git_info(),
        "benchmark": spec.name,
        "objective": objective,
        "seed": seed,
        "config": config,
        "config_hash": config_hash(config, objective),
        "hash_schema": HASH_SCHEMA_VERSION,
        "dataset": (dataset_identity(spec, synthetic=run.synthetic, data=data, fingerprint=context.get("fingerprint"))
                    if data else {"id": pipeline_of(spec).dataset_id(spec), "manifest_hash": "synthetic",
                                  "synthetic": True, "fingerprint": None}),
        "device": str(device),
        "host": {"python": sys.version.split()[0], "torch": torch.__version__, "platform": platform.platform(),
                 "cpu_count": os.cpu_count(), "world_size": distributed.world_size()},
        # the seed (python, numpy and torch are seeded with it) and the precision policy are stated once, as
        # "seed" and config.precision (schema 3): the determinism switches and what decided the numbers here
        "determinism": {k: v for k, v in run.flags.items() if k not in ("numerics", "seed")},
        "numerics": numerics,
        "curves": {**run.curves, **scores.curves},
        "selection": {"rule": f"best validation {spec.validation_metric} over downstream epochs "
                              f"(split {spec.dataset.val_split!r}); test scored once with the selected weights",
                      "metric": spec.validation_metric, "best_epoch": scores.best_epoch, "val_metrics": scores.val,
                      # the version of each metric scored on validation (a selection trial has no test metrics to
                      # state them: its reuse is judged by these, fusebench.records.cell_file.record_versions)
                      "val_versions": {m: e["version"] for m, e in M.entries(dict(scores.val or {})).items()},
                      **(scores.selection or {})},
        "metrics": M.entries(dict(scores.test), directions),  # each value with its direction and version (schema 4)
        "wall_time_s": wall_time,
        # when the record was built (UTC, ISO 8601): the board's text is the newest record's
        "finished_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "pretrain_time_s": run.pretrain_time,
        "resumed": bool((run.timing or {}).get("resumed", False)),
        "time_segments_s": segments,
        "peak_memory_mb": utils.peak_memory_mb(device),
        "parameters": sum(p.numel() for p in scores.model.parameters()) if scores.model is not None else 0,
        "diagnostics": dict(scores.diagnostics),
        # a reference row's: the grid point its selection chose (raw_pca's width), where it has a grid
        "hparams": (objective_hparams(spec, objective, context) if row_of(spec, objective).pretrains
                    else dict(context.get("hparams", {}).get(objective) or {})),
        "hparam_selection": context.get("hparam_selection", {}).get(objective),
        # sha256 of the frozen selection file the cell's hyper-parameters came from (fusebench.sweep.selection)
        **({"hparam_selection_sha256": digest} if (digest := context.get("hparam_selection_sha256", {})
                                                   .get(objective)) else {}),
        # the pretraining budget this row got: optimiser steps, samples seen, batch, micro-batch, epochs
        "budget": (run.timing or {}).get("budget") or dict(NO_BUDGET),
        "comparison": comparison_of(spec),
    }
    named = context.get("data_file")
    if named and not record["dataset"].get("synthetic"):  # the one data file read (issue #32): name and sha256
        record["dataset"]["data_file"] = dict(named)
    plugins = plugin_components(spec, objective)
    if plugins:  # which installed package supplied each plugin component (issue #32); absent when none did
        record["plugins"] = plugins
    record.update(fields)
    record["versions"] = cell_versions(spec, objective)
    record["comparability_key"] = comparability_key(record)
    return record


def build_record(request: CellRequest, synthetic: bool, device: Any, flags: Mapping[str, Any],
                 data: Mapping[str, Any] | None, *, curves: Mapping[str, Any], val: Mapping[str, Any] | None,
                 test: Mapping[str, Any], best_epoch: int, wall_time: float, pretrain_time: float, model: Any,
                 diagnostics: Mapping[str, Any], context: Mapping[str, Any] | None = None,
                 timing: Mapping[str, Any] | None = None, selection: Mapping[str, Any] | None = None,
                 fields: Mapping[str, Any] | None = None, directions: Mapping[str, str] | None = None,
                 speed: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """:func:`record_of` called with its arguments spread out, for pipelines written before :class:`CellRun` and
    :class:`Scores` (``curves`` are then all the record's curves); the same record."""
    run = CellRun(request, synthetic, device, flags, data, context, curves, wall_time, pretrain_time, timing, speed)
    return record_of(run, Scores(test, val, best_epoch, model=model, diagnostics=diagnostics, selection=selection,
                                 fields=fields, directions=directions))


def plugin_components(spec: BenchmarkSpec, objective: str) -> dict[str, Any]:
    """``{kind: provenance}`` of the cell's components that came from an entry point -- its objective, dataset
    adapter, encoder, downstream protocol and pipeline (:func:`fusebench.registry.plugin_provenance`: the
    distribution, its version, the module file's sha256, the install's URL / VCS revision); empty when every
    one is built in."""
    from fusebench import datasets, encoders, objectives
    from fusebench.pipelines import PIPELINES
    from fusebench.registry import plugin_provenance
    from fusebench.components.protocols import PROTOCOLS

    pipeline = pipeline_of(spec)
    used = [("pipeline", PIPELINES, spec.pipeline)]
    if row_of(spec, objective).objective is not None:
        used.append(("objective", objectives.OBJECTIVES, objective))
    if pipeline.reads_dataset:
        used.append(("dataset", datasets.DATASETS, spec.dataset.id))
    if pipeline.builds_encoder:
        used.append(("encoder", encoders.ENCODERS, spec.encoder.id))
    if pipeline.downstream:
        used.append(("protocol", PROTOCOLS, spec.downstream.protocol))
    return {kind: found for kind, registry, name in used if (found := plugin_provenance(registry, name))}


def time_segments(timing: dict[str, Any] | None, wall_time: float, pretrain_time: float) -> dict[str, list[float]]:
    """Per-process time segments of a record (one each for a cell run in one go)."""
    seg = (timing or {}).get("segments") or {}
    wall = seg.get("wall")
    return {"wall": wall.segments() if isinstance(wall, Clock) else list(wall or [wall_time]),
            "pretrain": list(seg.get("pretrain") or [pretrain_time])}
