"""The run record, built in one place (records layer): :func:`build_record` turns what a cell ran and
measured into the ``run.json`` mapping that :func:`fusebench.records.validate_record` accepts. Between
building and writing, two steps add to it and change nothing else: the standard cell
(:meth:`fusebench.cells.standard.StandardCell.run`) adds ``numerics.speed`` (the feed and speed options in
force, known once compilation's outcome is), and :func:`fusebench.records.cell_file.write_record` fills
``versions`` where a schema-2 record lacks it and sets ``comparability_key``, then validates the record and
writes it once; a written ``run.json`` is never changed."""

from __future__ import annotations

import datetime
import os
import platform
import sys
from typing import Any, Mapping

import torch

from fusebench.pipelines import pipeline_of
from fusebench.records import CURRENT_SCHEMA_VERSION as SCHEMA_VERSION  # the run.json schema (docs/leaderboards.md)
from fusebench.runtime import distributed, utils
from fusebench.spec import precision
from fusebench.spec.config import HASH_SCHEMA_VERSION, BenchmarkSpec, config_hash
from fusebench.engine.loop import Clock
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


def build_record(request: CellRequest, synthetic: bool, device: Any, flags: Mapping[str, Any], data: Mapping[str, Any] | None,
                 *, curves: Mapping[str, Any], val: Mapping[str, Any] | None, test: Mapping[str, Any], best_epoch: int,
                 wall_time: float, pretrain_time: float, model: Any, diagnostics: Mapping[str, Any],
                 context: Mapping[str, Any] | None = None, timing: Mapping[str, Any] | None = None,
                 selection: Mapping[str, Any] | None = None, fields: Mapping[str, Any] | None = None,
                 directions: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The run record of ``request``, in one piece: what every pipeline records (identity, config and hash,
    data identity, host, seeds, determinism, precision, curves, selection, metrics, times, budget, hyper-
    parameters), with ``selection`` merged into the selection block (a protocol's selection rule and the
    choices it made) and ``fields`` the protocol's own fields (e.g. ``clustering``, ``validity``; a field
    named here replaces the common one, e.g. a pipeline that counts its own ``budget``).

    ``timing`` (resumed cells): ``{"resumed": bool, "segments": {"wall": Clock | [s], "pretrain": [s]},
    "budget": {...}}``; ``wall_time`` and ``pretrain_time`` are then the sums of the segments (the time of
    the work kept across processes), and the segments are recorded beside them.

    ``test`` (the test metrics) is written as ``{id: {value, direction, version}}`` (record schema 4): the
    direction from the dataset's task, or ``directions`` (a pipeline's own metrics), else the metric's metadata."""
    spec, objective, seed = request.spec, request.objective, request.seed
    config = spec.to_dict()  # once: the record's config, and its hash is that of this form
    segments = time_segments(timing, wall_time, pretrain_time)
    if timing:
        wall_time = sum(segments["wall"])  # read once: the total is the sum of the recorded segments
    fields = dict(fields or {})
    # a pipeline's own metrics' directions (a plugin written before record schema 4 passes them as a field)
    directions = {**fields.pop("metric_directions", {}), **(directions or {})}
    if pipeline_of(spec).downstream and not directions:  # the dataset's task says how its metrics read (unit, direction)
        from fusebench.tasks import TASKS

        task = getattr((data or {}).get("train"), "task", None)
        if task in TASKS:
            described = TASKS.get(task).describe_metrics(spec.metrics, spec.downstream.protocol)
            directions = {mid: direction for mid, _unit, direction in described}
        else:  # a plugin adapter's task that is not registered: the metric metadata alone
            from fusebench import metrics as M

            directions = {mid: M.metadata(mid)["direction"] for mid in spec.metrics}
    from fusebench import metrics as M

    record = {
        "schema_version": SCHEMA_VERSION,
        "suite_version": __version__,
        "git": (context or {}).get("git") or utils.git_info(),
        "benchmark": spec.name,
        "objective": objective,
        "seed": seed,
        "config": config,
        "config_hash": config_hash(config, objective),
        "hash_schema": HASH_SCHEMA_VERSION,
        "dataset": dataset_identity(spec, synthetic, data, (context or {}).get("fingerprint")) if data else {"id": pipeline_of(spec).dataset_id(spec), "manifest_hash": "synthetic", "synthetic": True, "fingerprint": None},
        "device": str(device),
        "host": {"python": sys.version.split()[0], "torch": torch.__version__, "platform": platform.platform(),
                 "cpu_count": os.cpu_count(), "world_size": distributed.world_size()},
        # the seed (python, numpy and torch are seeded with it) and the precision policy are stated once, as
        # "seed" and config.precision (schema 3): the determinism switches and what decided the numbers here
        "determinism": {k: v for k, v in flags.items() if k not in ("numerics", "seed")},
        "numerics": {k: v for k, v in (flags.get("numerics") or precision.numerics(precision.get(spec.precision),
                                                                                torch.device(device))).items()
                     if k != "precision"},
        "curves": curves,
        "selection": {"rule": f"best validation {spec.validation_metric} over downstream epochs "
                              f"(split {spec.dataset.val_split!r}); test scored once with the selected weights",
                      "metric": spec.validation_metric, "best_epoch": best_epoch, "val_metrics": val},
        "metrics": M.entries(dict(test), directions),  # each value with its direction and version (schema 4)
        "wall_time_s": wall_time,
        # when the record was written (UTC, ISO 8601): the board's text is the newest record's
        "finished_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "pretrain_time_s": pretrain_time,
        "resumed": bool((timing or {}).get("resumed", False)),
        "time_segments_s": segments,
        "peak_memory_mb": utils.peak_memory_mb(device),
        "parameters": sum(p.numel() for p in model.parameters()) if model is not None else 0,
        "diagnostics": diagnostics,
        "hparams": objective_hparams(spec, objective, context) if row_of(spec, objective).pretrains else {},
        "hparam_selection": (context or {}).get("hparam_selection", {}).get(objective),
        # sha256 of the frozen selection file the cell's hyper-parameters came from (fusebench.sweep.selection)
        **({"hparam_selection_sha256": digest} if (digest := (context or {}).get("hparam_selection_sha256", {})
                                                   .get(objective)) else {}),
        # the pretraining budget this row got: optimiser steps, samples seen, batch, micro-batch, epochs
        "budget": (timing or {}).get("budget") or dict(NO_BUDGET),
        "comparison": comparison_of(spec),
    }
    named = (context or {}).get("data_file")
    if named and not record["dataset"].get("synthetic"):  # the one data file read (issue #32): name and sha256
        record["dataset"]["data_file"] = dict(named)
    plugins = plugin_components(spec, objective)
    if plugins:  # which installed package supplied each plugin component (issue #32); absent when none did
        record["plugins"] = plugins
    record["selection"].update(selection or {})
    record.update(fields or {})
    return record


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
