"""Hyper-parameter selection on the validation split (sweep layer), frozen before any evaluation cell.

For every row of a sweep with a grid (an objective's ``pretrain.per_objective.<objective>.grid``; a width-selecting
reference row's widths, ``options.embedding_eval.pca_widths``: :meth:`fusebench.components.rows.Row.selection_grid`)
every combination is run on the selection seeds (never evaluation seeds) and scored by the mean over those seeds of
its validation value of the selection metric (``spec.validation_metric``: ``selection_metric``, by default the board's primary metric
``comparison.primary``: the hyper-parameters are chosen on what the board ranks). The outcome is written
once, before any evaluation cell of the sweep starts, to ``<out>/<benchmark>/_selection/<objective>.json``
(:func:`selection_path`): the grid, every point's per-seed validation scores (and, for an objective with an
iterative solver, its trials' solver tally: how many of their Sinkhorn solves stopped at ``max_iter``), the choice,
the grid keys whose choice lies on an edge of the grid (``at_edge``) and what it was made from (the objective's
config hash, the code's versions and the data's fingerprint). The cells read the choice from that file (:func:`freeze_selections`);
every record holds the outcome (``hparam_selection``) and the file's sha256 (``hparam_selection_sha256``). A later sweep
into the same ``--out`` (a resume) reuses the file and runs no trial again; a file made with another
configuration, other code or other data is a :class:`~fusebench.engine.cell.ConfigMismatchError`, never mixed."""

from __future__ import annotations

import hashlib
import json
import math
import re
import time
from pathlib import Path
from typing import Any, Mapping

from fusebench.components.identity import cell_versions, code_changes, same_config_hashes, spec_hash, versions_block
from fusebench import metrics as M
from fusebench.grids import at_edge  # the rule the board reads back (fusebench.grids)
from fusebench.grids import points as grid_points
from fusebench.runtime import utils
from fusebench.engine.cell import ConfigMismatchError
from fusebench.spec.config import HASH_SCHEMA_VERSION, BenchmarkSpec, ConfigError
from fusebench.cells.execute import run_cell
from fusebench.engine.loop import RunError
from fusebench.objectives.solver_tally import merged, summed
from fusebench.runtime.progress import say
from fusebench.components.rows import row_of
from fusebench.spec.request import CellRequest, RunOptions, check_cell_ids
from fusebench.sweep.leakage import check_seeds_apart, check_test_split_fixed  # (re-exported: part of the API)

#: the folder of the frozen selections, ``<out>/<benchmark>/_selection`` (not an id: never a cell's folder)
SELECTION_DIR = "_selection"
#: the hidden folder of the trials' records, ``<out>/.selection/<benchmark>/<objective>/<trial>`` (the
#: leaderboard and ``fusebench status`` skip hidden folders)
TRIALS_DIR = ".selection"


def trial_name(index: int, combo: dict[str, Any]) -> str:
    """The folder of trial ``index`` of a grid: ``trial<i>-<key><value>-...`` (e.g. ``trial0-tau0.1``), with
    every character other than letters, digits, ``.``, ``_`` and ``-`` replaced by ``_``: grid values come
    from a spec (e.g. a method option that is a string or a list) and must stay one path component."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", f"trial{index}-" + "-".join(f"{k}{v}" for k, v in combo.items()))


def selection_path(out: str | Path, benchmark: str, objective: str) -> Path:
    """``<out>/<benchmark>/_selection/<objective>.json``: the frozen selection of ``objective``."""
    check_cell_ids(benchmark, objective)
    return Path(out) / benchmark / SELECTION_DIR / f"{objective}.json"


def _grid(spec: BenchmarkSpec, objective: str) -> dict[str, list[Any]]:
    """Row ``objective``'s selection grid (:meth:`~fusebench.components.rows.Row.selection_grid`); a width grid
    still ``auto`` (resolved when a sweep opens the data, :func:`fusebench.sweep.runner.resolve_width_grid`) is
    refused: its points are not known."""
    from fusebench.components.protocols import WIDTH_OPTION, WIDTHS_AUTO

    grid = row_of(spec, objective).selection_grid(spec)
    if any(WIDTHS_AUTO in v for v in grid.values()):
        raise ConfigError(f"{spec.name}/{objective}: options.embedding_eval.{WIDTH_OPTION} is {WIDTHS_AUTO!r}, worked "
                          f"out from the data when a sweep opens it (fusebench run); give the widths as a list to "
                          f"select without one")
    return grid


def select_hparams(spec: BenchmarkSpec, objective: str, out: Path, options: RunOptions,
                   context: Mapping[str, Any], metric: str | None = None) -> dict[str, Any] | None:
    """Run row ``objective``'s grid and return the outcome (None: no grid); writes nothing but the trials' records.

    Every combination of the row's grid (:meth:`~fusebench.components.rows.Row.selection_grid`) is run (pretraining,
    where the row pretrains, and the downstream protocol) once per selection seed (``pretrain.selection_seeds``, else ``[pretrain.selection_seed]``; none is an evaluation
    seed); the combination with the best mean validation ``metric`` (default ``spec.validation_metric``) over
    those seeds wins (ties: the first in grid order). Where every trial of a point counted its solver's calls
    (M3G, the matching gap: :mod:`fusebench.objectives.solver_tally`), the point's score carries ``solver``
    (``calls`` and ``not_converged`` summed over its trials, ``worst_marginal_error`` the largest): a point whose
    solves did not converge is not refused, but the board says so. Trial records go to
    ``<out>/.selection/<benchmark>/<objective>/<trial>/`` (one seed) or ``<trial>/seed<S>/`` (several), a
    hidden folder the leaderboard does not read; a trial whose record is there is not run again, one with a
    ``last.pt`` (a sweep killed during it) continues from it."""
    grid = _grid(spec, objective)
    if not grid:
        return None
    metric = metric or spec.validation_metric
    names = sorted(grid)
    combos = grid_points(grid)
    higher = M.get(metric).higher_is_better
    seeds = spec.selection_seeds
    check_test_split_fixed(spec, options)
    trial_options = _trial_options(options)
    per_point: list[dict[str, float]] = [{} for _ in combos]
    tallies: list[list[dict[str, Any] | None]] = [[] for _ in combos]  # per point, each trial's solver tally
    for i, combo, s, request, ctx in trial_calls(spec, objective, out, context):
        trial = trial_name(i, combo)
        if options.progress and s == seeds[0]:
            shown = " ".join(f"{k}={v}" for k, v in combo.items())
            say(f"selection {spec.name}/{objective} trial {i + 1}/{len(combos)} {shown} "
                f"(seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))})")
        rec = run_cell(request, trial_options, ctx)
        val = (rec.get("selection") or {}).get("val_metrics") or {}
        if not isinstance(val.get(metric), (int, float)):
            raise RunError(f"{spec.name}: the selection metric {metric!r} has no validation value in trial "
                           f"{trial} of {objective!r} (validation values: {sorted(val)}); choose a "
                           "selection_metric / comparison.primary the protocol scores on the validation split")
        if not math.isfinite(float(val[metric])):  # NaN would win max() from the first grid point
            raise RunError(f"{spec.name}: trial {trial} of {objective!r}, selection seed {s}, has no finite "
                           f"validation {metric} ({val[metric]}; record {request.out}); the grid point cannot be "
                           "scored, so no choice is made: narrow the grid or fix what makes the metric undefined")
        per_point[i][str(s)] = float(val[metric])
        tallies[i].append(summed(rec.get("curves") or {}))
    scores = [{"hparams": combo, "val": sum(p.values()) / len(p), "val_by_seed": p}
              for combo, p in zip(combos, per_point)]
    for score, t in zip(scores, tallies):  # the solver's tally over the point's trials (every trial counted it)
        if (tally := merged(t)) is not None:
            score["solver"] = tally
    sign = 1.0 if higher else -1.0
    best = max(range(len(combos)), key=lambda i: (sign * scores[i]["val"], -i))
    return {"benchmark": spec.name, "objective": objective, "metric": metric,
            "rule": (f"mean validation {metric} over the {len(seeds)} selection seed(s) ({'higher' if higher else 'lower'}"
                     " is better); ties: the first grid point in grid order"),
            "grid": {n: list(grid[n]) for n in names}, "seed": seeds[0], "seeds": list(seeds),
            "scores": scores, "choice": combos[best], "at_edge": at_edge(grid, combos[best])}


def _trial_options(options: RunOptions) -> RunOptions:
    """A trial's options: not tracked, no step budget, and continued from its ``last.pt`` where a killed sweep left
    one (as every cell is: one of another configuration, data or code is refused, never overwritten)."""
    return options.but(resume=True, max_steps=None, loggers=(), selection_trial=True)


def trial_calls(spec: BenchmarkSpec, objective: str, out: Path, context: Mapping[str, Any]):
    """Every trial of ``objective``'s grid, in the order they run: ``(grid index, combination, selection seed,
    request, context)``, the request and context :func:`select_hparams` runs it with (and ``--plan`` judges it
    with: :func:`fusebench.sweep.plan.selection_plan`). Records go to ``<out>/.selection/<benchmark>/<objective>/<trial>`` (one selection seed) or
    ``.../<trial>/seed<S>``; the context gives the objective the combination's hyper-parameters."""
    seeds = spec.selection_seeds
    for i, combo in enumerate(grid_points(_grid(spec, objective))):
        ctx = {**context, "hparams": {**context.get("hparams", {}), objective: combo}}
        folder = out / TRIALS_DIR / spec.name / objective / trial_name(i, combo)
        for s in seeds:
            yield i, combo, s, CellRequest(spec, objective, s, folder if len(seeds) == 1 else folder / f"seed{s}"), ctx


def trials_of(spec: BenchmarkSpec, objective: str, out: Path, context: Mapping[str, Any]) -> list[CellRequest]:
    """The requests of every trial ``objective``'s selection runs (grid points x selection seeds), in the order they
    run; empty when the sweep selects nothing for it (a row without a grid)."""
    if not selects(spec, objective):
        return []
    return [request for _, _, _, request, _ in trial_calls(spec, objective, out, context)]


def run_trials_in_parallel(spec: BenchmarkSpec, objectives: list[str], out: Path, options: RunOptions,
                           context: Mapping[str, Any], workers: int) -> int:
    """Run every trial the selections of ``objectives`` still need (objectives without a frozen selection file,
    trials without a record), ``workers`` at a time in spawned local processes; returns how many ran. Each trial
    is the :func:`run_cell` call :func:`select_hparams` makes, with the same request, options and context, so its
    record is the one the loop in one process writes; :func:`select_hparams` then reads the records (a trial
    whose record is there is not run again) and makes the same choice. With one worker or fewer than two trials
    to run, nothing is run here."""
    if workers < 2:
        return 0
    todo = [o for o in objectives if selects(spec, o) and not selection_path(out, spec.name, o).exists()]
    if todo:
        check_test_split_fixed(spec, options)  # the same for every objective: once, before any trial
    trial_options = _trial_options(options)
    calls = [(request, trial_options, ctx) for o in todo
             for _, _, _, request, ctx in trial_calls(spec, o, out, context) if not (request.cell / "run.json").exists()]
    if len(calls) < 2:
        return 0
    from fusebench.sweep.process_pool import run_in_processes

    if options.progress:
        say(f"selection {spec.name}: {len(calls)} trial(s) to run, {min(workers, len(calls))} at a time, before any "
            "evaluation cell")
    run_in_processes(run_cell, calls, workers)
    return len(calls)


def _identity(spec: BenchmarkSpec, objective: str, options: RunOptions, context: Mapping[str, Any]) -> dict[str, Any]:
    """What a frozen selection was made from: the objective's config hash (its grid, selection seeds and
    metric, dataset and budget) and the data (the fingerprint's sha256; synthetic or not)."""
    fp = context.get("fingerprint")
    return {"config_hash": spec_hash(spec, objective), "synthetic": bool(options.synthetic),
            "data_sha256": fp.get("sha256") if isinstance(fp, dict) else None}


#: seconds a frozen selection file that does not parse yet counts as being written by a concurrent sweep (a file
#: system without hard links shows it before it is whole: fusebench.io.create_once), and how long to wait for it
BEING_WRITTEN_S = 60.0
WAIT_S = 30.0


def _read(path: Path) -> tuple[dict[str, Any], str]:
    waited = 0.0
    while True:
        data = path.read_bytes()
        try:
            outcome = json.loads(data)
            break
        except ValueError as e:
            young = time.time() - path.stat().st_mtime < BEING_WRITTEN_S
            if not young or waited >= WAIT_S:
                raise ConfigMismatchError(f"{path}: the frozen hyper-parameter selection is not valid JSON ({e}); "
                                          "delete it to select again") from None
            time.sleep(0.2)  # another sweep is writing it
            waited += 0.2
    return outcome, hashlib.sha256(data).hexdigest()


def selects(spec: BenchmarkSpec, objective: str) -> bool:
    """Whether a sweep of ``spec`` selects the hyper-parameters of row ``objective``: a row with a grid
    (:meth:`~fusebench.components.rows.Row.selection_grid`: an objective's, or a width-selecting reference row's)."""
    return bool(row_of(spec, objective).selection_grid(spec))


def frozen_choice(spec: BenchmarkSpec, objective: str, out: Path) -> dict[str, Any]:
    """The grid point frozen for ``objective`` in ``out`` (:func:`selection_path`), as a sweep wrote it: an OSError
    when there is none, a ConfigMismatchError when it is not JSON, a KeyError when it holds no choice."""
    return _read(selection_path(out, spec.name, objective))[0]["choice"]


def freeze_selection(spec: BenchmarkSpec, objective: str, out: Path, options: RunOptions,
                     context: Mapping[str, Any]) -> tuple[dict[str, Any], str] | None:
    """The frozen selection of ``objective`` and its file's sha256 (None: nothing to select): read from
    :func:`selection_path` when it is there (made from the same configuration and data, else a
    ConfigMismatchError naming the file), else selected now (:func:`select_hparams`) and written once."""
    if not selects(spec, objective):
        return None
    path = selection_path(out, spec.name, objective)
    made_now = not path.exists()
    if made_now:
        outcome = select_hparams(spec, objective, out, options, context)
        assert outcome is not None
        path.parent.mkdir(parents=True, exist_ok=True)  # a concurrent sweep's file, written first, is kept
        versions = {**cell_versions(spec, objective),  # and the selection metric's, which scored the trials
                    "metrics": versions_block(objective, [spec.validation_metric])["metrics"]}
        utils.create_json_once(path, {**_identity(spec, objective, options, context), "versions": versions, **outcome})
    outcome, digest = check_frozen(path, spec, objective, options, context)
    if options.progress:
        say(selection_line(outcome, path, made_now))
    return outcome, digest


def check_frozen(path: Path, spec: BenchmarkSpec, objective: str, options: RunOptions,
                 context: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    """The frozen selection in ``path`` and its sha256, when it was made from ``objective``'s configuration, the
    data of ``context`` and the code's versions; else a ConfigMismatchError naming the file and what differs."""
    ident = _identity(spec, objective, options, context)
    outcome, digest = _read(path)
    if not isinstance(outcome, dict):
        raise ConfigMismatchError(f"{path}: the frozen hyper-parameter selection is not a JSON object; delete it to "
                                  "select again")
    made = {k: outcome.get(k) for k in ident}
    if made["config_hash"] != ident["config_hash"] and made["config_hash"] in same_config_hashes(spec, objective):
        raise ConfigMismatchError(f"{path}: the frozen hyper-parameter selection of {spec.name}/{objective} was made "
                                  f"with this configuration under an older hash schema (config hash "
                                  f"{made['config_hash']}, now {ident['config_hash']}): migrate the runs folder once "
                                  f"(python scripts/migrate_hash_schema_{HASH_SCHEMA_VERSION}.py "
                                  f"{path.parents[2]}), then rerun")
    if made != ident:
        diff = ", ".join(f"{k} {made[k]!r} (now {ident[k]!r})" for k in ident if made[k] != ident[k])
        raise ConfigMismatchError(f"{path}: the frozen hyper-parameter selection of {spec.name}/{objective} was made "
                                  f"with another configuration or other data: {diff}; use another --out, or delete "
                                  "the file (and the cells made with it) to select again")
    # the trials' code: the versions the file states, or (a file written before they were saved in it) those its
    # trials' records state
    made_by = outcome.get("versions")
    if made_by is not None and not isinstance(made_by, dict):  # edited: never judged as a file written before them
        raise ConfigMismatchError(f"{path}: the frozen hyper-parameter selection of {spec.name}/{objective}: "
                                  f"'versions' is {type(made_by).__name__} {made_by!r}, expected the mapping of the "
                                  "code versions that made it; delete the file (and the cells made with it) to "
                                  "select again")
    changed = (code_changes(spec, objective, made_by, made_by.get("metrics")) if isinstance(made_by, dict)
               else _trials_code_changes(spec, objective, path.parents[2], context))
    if changed:
        raise ConfigMismatchError(f"{path}: the frozen hyper-parameter selection of {spec.name}/{objective} was made "
                                  f"by other code under the same configuration ({'; '.join(changed)}: it computes "
                                  "differently now); use another --out, or delete the file (and the cells made with "
                                  "it) to select again")
    problem = _outcome_problem(outcome, spec, objective)
    if problem:  # edited, or not a selection: its choice would reach every cell
        raise ConfigMismatchError(f"{path}: the frozen hyper-parameter selection of {spec.name}/{objective}: "
                                  f"{problem}; delete the file (and the cells made with it) to select again")
    return outcome, digest


def _outcome_problem(outcome: Mapping[str, Any], spec: BenchmarkSpec, objective: str) -> str | None:
    """Why a frozen selection's outcome is not what :func:`select_hparams` writes for ``objective``'s grid (None
    when it is): ``choice`` one point of the grid, ``scores`` one entry per point in grid order, and the choice the
    best mean score in the metric's direction (ties: the first)."""
    grid = _grid(spec, objective)
    points = grid_points(grid)
    choice, scores = outcome.get("choice"), outcome.get("scores")
    if not isinstance(choice, dict) or choice not in points:
        return f"its choice {choice!r} is not a point of the grid {dict(grid)}"
    if (not isinstance(scores, list) or len(scores) != len(points)
            or any(not isinstance(e, dict) or e.get("hparams") != p for e, p in zip(scores, points))):
        return f"its scores are not one entry per grid point in grid order ({len(points)} points)"
    vals = [e.get("val") for e in scores]
    if any(isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) for v in vals):
        return "its scores hold a value that is not a finite number"
    metric = outcome.get("metric")
    if not isinstance(metric, str) or metric not in M.METRICS:
        return f"its metric {metric!r} is not a registered metric"
    sign = 1.0 if M.get(metric).higher_is_better else -1.0
    best = max(range(len(points)), key=lambda i: (sign * vals[i], -i))
    if points[best] != choice:
        return (f"its choice {choice} is not the best of its own scores ({points[best]}, mean validation "
                f"{vals[best]:.6g} {metric})")
    return None


def _trials_code_changes(spec: BenchmarkSpec, objective: str, out: Path, context: Mapping[str, Any]) -> list[str]:
    """What of the code that made the trial records of ``objective``'s selection under ``out`` computes differently
    now (objective, encoder and the selection metric's versions, as each record states them:
    :func:`fusebench.records.cell_file.record_versions`); for a frozen file that states no versions. A trial without
    a readable record is not judged; none at all: nothing to judge (empty)."""
    from fusebench.records.cell_file import record_versions

    metric, changed = spec.validation_metric, []
    for request in trials_of(spec, objective, out, context):
        try:
            rec = json.loads((request.cell / "run.json").read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError):
            continue
        if not isinstance(rec, dict) or not isinstance(rec.get("schema_version", 1), int):
            continue
        made, metrics = record_versions(rec)
        changed += [c for c in code_changes(spec, objective, made, {metric: metrics[metric]} if metric in metrics
                                            else None) if c not in changed]
    return changed


def selection_line(outcome: Mapping[str, Any], path: Path, made_now: bool = True) -> str:
    """What a frozen selection chose, in one line: the choice, its mean validation score, the file, the grid
    keys whose choice is on an edge of the grid (a wider grid may move it), and how many of the chosen point's
    trials' solver calls stopped at ``max_iter`` (where any did)."""
    choice = " ".join(f"{k}={v}" for k, v in (outcome.get("choice") or {}).items())
    best = next((p for p in outcome.get("scores") or [] if p.get("hparams") == outcome.get("choice")), None)
    score = f" (mean validation {outcome.get('metric')} {best['val']:.4g} over {len(best['val_by_seed'])} " \
            f"selection seed(s))" if best else ""
    edge = outcome.get("at_edge") or []
    where = "written to" if made_now else "reused from"
    tally = (best or {}).get("solver") or {}
    missed = (f"; its trials' Sinkhorn solves stopped at max_iter in {tally['not_converged']:,} of {tally['calls']:,} "
              f"calls (an approximately solved objective)" if tally.get("not_converged") else "")
    return (f"selection {outcome.get('benchmark')}/{outcome.get('objective')}: chose {choice}{score}, {where} {path}"
            + (f"; on the edge of its grid: {', '.join(edge)} (a wider grid may move the choice)" if edge else "")
            + missed)


def freeze_selections(spec: BenchmarkSpec, objectives: list[str], out: Path, options: RunOptions,
                      context: Mapping[str, Any], workers: int = 1) -> dict[str, dict[str, Any]]:
    """Freeze the selection of every objective in ``objectives`` (before any evaluation cell runs) and return
    what the cells receive in their context: ``{"hparams": {objective: choice}, "hparam_selection":
    {objective: outcome}, "hparam_selection_sha256": {objective: sha256 of the file}}`` (empty: nothing selected).
    ``workers`` > 1: the trials still to run are run that many at a time first (:func:`run_trials_in_parallel`)."""
    run_trials_in_parallel(spec, objectives, out, options, context, workers)
    ctx: dict[str, dict[str, Any]] = {}
    for o in objectives:
        frozen = freeze_selection(spec, o, out, options, context)
        if frozen is None:
            continue
        outcome, digest = frozen
        ctx.setdefault("hparams", {})[o] = dict(outcome["choice"])
        ctx.setdefault("hparam_selection", {})[o] = outcome
        ctx.setdefault("hparam_selection_sha256", {})[o] = digest
    return ctx


__all__ = ["SELECTION_DIR", "TRIALS_DIR", "at_edge", "check_frozen", "check_seeds_apart", "check_test_split_fixed",
           "freeze_selection",
           "freeze_selections",
           "run_trials_in_parallel",
           "select_hparams", "selection_line", "selection_path", "trial_calls", "trial_name", "trials_of"]
