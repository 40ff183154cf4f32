"""A cell's record file (records layer): whether the cell has one (:func:`record_there`, by the rule the
leaderboard and ``fusebench status`` share), the finished record when it was made with the same
configuration and data (:func:`existing_record`), and writing it once, validated, never overwritten
(:func:`write_record`)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from fusebench.components.identity import code_changes, frozen_choice, spec_hash
from fusebench.records import RecordError, check_record_file, read_record_json, validate_record
from fusebench.runtime import utils
from fusebench.engine.cell import ConfigMismatchError, config_changes, data_fingerprint
from fusebench.spec.config import HASH_SCHEMA_VERSION, BenchmarkSpec
from fusebench.engine.loop import RunError


def record_there(run_json: Path, out: Path) -> bool:
    """Whether the cell has a record, by the one rule the leaderboard and ``status`` apply
    (:func:`fusebench.records.check_record_file`): a regular ``run.json`` reached from ``out`` through
    real folders; a link, a folder or a special file there is a RunError naming it."""
    try:
        return check_record_file(run_json, out)
    except RecordError as e:
        raise RunError(f"{e}; move it away to rerun the cell") from None


def existing_record(run_json: Path, spec: BenchmarkSpec, objective: str,
                    context: dict[str, Any] | None = None, seed: int | None = None) -> dict[str, Any]:
    """The finished cell's record, if it was made with ``spec``'s configuration for ``objective`` and, when ``context``
    is given, from the same data (the fingerprint of the files read: a rerun on another file of the
    same shapes must not return the first file's record), and the leaderboard reads it: read and validated as the
    leaderboard reads and validates a record (:func:`fusebench.records.read_record_json`, :func:`valid_record`),
    never returned otherwise (a reused record is printed and compared as the run's)."""
    try:
        rec = read_record_json(run_json)  # the leaderboard's reader: a readable JSON object, no key given twice
    except RecordError as e:
        raise RunError(f"{e}; move it away to rerun the cell") from None
    want = {"benchmark": spec.name, "objective": objective, **({} if seed is None else {"seed": seed})}
    got = {k: rec.get(k) for k in want}
    if got != want:  # the config hash does not cover the seed: a record copied or edited into another cell
        raise RunError(f"{run_json} is the record of {got}, not of its cell {want} (copied from another cell, or "
                       f"edited?); move it away to rerun the cell")
    valid_record(run_json, rec)  # before the checks below read its fields (typed by the validator)
    if context is not None:  # other data first: a different file usually changes the config too (its views)
        _check_same_data(run_json, rec, context)
    want_hash = spec_hash(spec, objective)
    if rec.get("config_hash") != want_hash and rec.get("hash_schema") != HASH_SCHEMA_VERSION:
        old = rec.get("hash_schema")
        first = old + 1 if type(old) is int and 1 <= old < HASH_SCHEMA_VERSION else 2  # no field: before schema 2
        scripts = " then ".join(f"scripts/migrate_hash_schema_{n}.py" for n in range(first, HASH_SCHEMA_VERSION + 1))
        raise ConfigMismatchError(f"{run_json} carries a config hash of schema {old!r}, not {HASH_SCHEMA_VERSION}: "
                                  f"migrate the runs folder once (python {scripts}, each with RUNS_FOLDER), then "
                                  "rerun")
    if rec.get("config_hash") != want_hash:
        _check_same_weights(run_json, rec, spec, objective)  # a row's weights file: said as that, not as a --set
        changed = config_changes(rec.get("config"), spec, objective, where="the record")
        raise ConfigMismatchError(f"{run_json} was made with another configuration (config hash {rec.get('config_hash')} "
                       f"!= {want_hash} of the current spec and --set values"
                       f"{'; changed: ' + changed if changed else ''}); records are immutable: "
                       "write to another --out, or move that cell's folder away to rerun it")
    _check_same_code(run_json, rec, spec, objective)
    if context is not None:
        _check_same_selection(run_json, rec, objective, context)
    _undefined_as_nan(rec)
    return rec


def _check_same_selection(run_json: Path, rec: dict[str, Any], objective: str, context: dict[str, Any]) -> None:
    """The record's hyper-parameters are the point the frozen selection the sweep's cells get now chose
    (:func:`~fusebench.components.identity.frozen_choice`); else a ConfigMismatchError: the config hash does not cover
    the chosen point (the grid replaces it), so a selection made again (its file deleted, the trials rerun elsewhere)
    with another choice would otherwise let one row hold seeds run at two points. Nothing to compare where the sweep
    selects nothing for ``objective`` (or not yet)."""
    now = frozen_choice(context, objective)
    if now is None:
        return
    sel = rec.get("hparam_selection")
    then = sel.get("choice") if isinstance(sel, dict) else None
    if then == now:
        return
    raise ConfigMismatchError(
        f"{run_json} was made with the hyper-parameters of another frozen selection (choice {then!r}, selection file "
        f"sha256 {rec.get('hparam_selection_sha256')}; this sweep's: choice {now!r}, sha256 "
        f"{(context.get('hparam_selection_sha256') or {}).get(objective)}); records are immutable: write to another "
        "--out, or move that cell's folder away to rerun it with this selection")


def valid_record(run_json: Path, rec: dict[str, Any]) -> None:
    """A RunError, with the leaderboard's message (:func:`fusebench.records.validate_record`: the file, the field,
    what was expected), when the leaderboard refuses the record ``rec`` read from ``run_json``: it is not reused (nor
    counted done by ``fusebench status``) either."""
    try:
        validate_record(rec, run_json)
    except RecordError as e:
        raise RunError(f"{e}; the leaderboard refuses this record: move the cell folder away to recompute it") from None
    except RecursionError:  # as load_record: a config nested nearly as deep as the parser allows
        raise RunError(f"{run_json}: a run record nested too deeply to check; move the cell folder away to recompute "
                       "it") from None


def _check_same_code(run_json: Path, rec: dict[str, Any], spec: BenchmarkSpec, objective: str) -> None:
    """The record was made by the versions of the objective, the encoder and the metrics this code computes
    (:func:`fusebench.components.identity.code_changes`); else a ConfigMismatchError naming what changed. ``rec`` is
    valid (:func:`valid_record`: its schema_version an integer, its metric entries typed)."""
    changed = code_changes(spec, objective, *record_versions(rec))
    if changed:
        raise ConfigMismatchError(f"{run_json} was made by other code under the same configuration "
                                  f"({'; '.join(changed)}: it computes differently now); records are immutable: write "
                                  "to another --out, or move that cell's folder away to rerun it")


def _check_same_weights(run_json: Path, rec: dict[str, Any], spec: BenchmarkSpec, objective: str) -> None:
    """A pretrained-weights row's record made from another weights file than the one named now: a
    ConfigMismatchError saying so, with both files' sha256 (the config hash covers the file's content)."""
    now = (spec.encoder_weights or {}).get(objective)
    made = ((rec.get("config") or {}).get("encoder_weights") or {}).get(objective)
    if not isinstance(now, dict) or not isinstance(made, dict) or now.get("sha256") == made.get("sha256"):
        return
    raise ConfigMismatchError(f"{run_json} was made from another weights file for the row {objective!r} (sha256 "
                              f"{made.get('sha256')} of {made.get('path')}, now {now.get('sha256')} of "
                              f"{now.get('path')}); records are immutable: write to another --out, name the row "
                              "otherwise, or move that cell's folder away to rerun it")


def record_versions(rec: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The code versions a record states (for :func:`fusebench.components.identity.code_changes`): its ``versions``
    (none in schema 1: version 1 of everything) and its metrics' versions (schema 4: each metric's entry, and for a
    metric scored on validation alone, as a selection trial's are, ``selection.val_versions`` where the record has
    it; schemas 2-3: ``versions.metrics``; schema 1: every metric of the config at version 1)."""
    made = rec.get("versions") if isinstance(rec.get("versions"), dict) else {}
    if rec.get("schema_version", 1) >= 4:
        entries = rec.get("metrics") if isinstance(rec.get("metrics"), dict) else {}
        selection = rec.get("selection") if isinstance(rec.get("selection"), dict) else {}
        val = selection.get("val_versions") if isinstance(selection.get("val_versions"), dict) else {}
        return made, {**val, **{m: e.get("version") for m, e in entries.items() if isinstance(e, dict)}}
    if isinstance(made.get("metrics"), dict):
        return made, dict(made["metrics"])
    return made, {m: "1" for m in (rec.get("config") or {}).get("metrics") or [] if isinstance(m, str)}


def _check_same_data(run_json: Path, rec: dict[str, Any], context: dict[str, Any]) -> None:
    """The record was made from the data the sweep reads (its fingerprint); else a ConfigMismatchError saying
    so -- "a different data file", naming both files by name and sha256, where the sweep reads one file."""
    ds = rec.get("dataset") if isinstance(rec.get("dataset"), dict) else {}
    fp = ds.get("fingerprint")
    made_from = fp.get("sha256") if isinstance(fp, dict) else None
    if made_from == data_fingerprint(context):
        return
    now, then = context.get("data_file"), ds.get("data_file") if isinstance(ds.get("data_file"), dict) else None
    named = ""
    if now:  # the sweep reads one file: say it is another file, naming both
        was = f"{then.get('name')} (sha256 {then.get('sha256')})" if then else "another file"
        named = f": a different data file, {was} then, {now['name']} (sha256 {now['sha256']}) now"
    raise ConfigMismatchError(
        f"{run_json} was made from other data (fingerprint {made_from or 'none (synthetic data)'} of "
        f"{ds.get('root') or 'the synthetic generator'}, now {data_fingerprint(context) or 'none (synthetic data)'}"
        f"){named}; records are immutable: write to another --out, or move that cell's folder away to rerun it")


def _undefined_as_nan(rec: dict[str, Any]) -> None:
    """A metric undefined for the run is NaN in memory and ``null`` in run.json (strict JSON,
    :func:`fusebench.io.strict_json`): read back as NaN in ``metrics`` and ``selection.val_metrics``, the
    values a reused record is read for (printed, compared in a hyper-parameter selection)."""
    selection = rec.get("selection")
    for values in (rec.get("metrics"), selection.get("val_metrics") if isinstance(selection, dict) else None):
        if isinstance(values, dict):
            values.update({k: math.nan for k, v in values.items() if v is None})
            for entry in values.values():  # schema 4: {value, direction, version}
                if isinstance(entry, dict) and entry.get("value", 0) is None:
                    entry["value"] = math.nan


def write_record(cell: Path, record: dict[str, Any]) -> Path:
    """Write ``record`` (as :func:`fusebench.records.builder.record_of` built it: complete, its comparability key
    included) as run.json, unchanged and once (immutable): validated first, written to a temporary file, then
    hard-linked into place, which fails if another process created run.json first — concurrent runs never
    overwrite. A record that the leaderboard would refuse (e.g. one changed after it was built, whose
    comparability key no longer matches) is a RecordError naming the field, and nothing is written."""
    path = cell / "run.json"
    if path.exists():
        raise RunError(f"{path} exists already; run records are immutable")
    validate_record(record, path)  # never write a record the leaderboard would refuse
    if not utils.create_json_once(path, record):
        raise RunError(f"{path} exists already; run records are immutable")
    (cell / "failed.json").unlink(missing_ok=True)
    return path


__all__ = ["existing_record", "record_there", "record_versions", "valid_record", "write_record"]
