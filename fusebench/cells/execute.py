"""Running one cell (the one way down): :func:`run_cell` takes a :class:`~fusebench.spec.request.CellRequest`
and :class:`~fusebench.spec.request.RunOptions`, returns the cell's finished record when there is one
made with the same configuration and data, else locks the cell, runs the spec's pipeline
(:mod:`fusebench.pipelines`) under the requested experiment trackers and returns the record it wrote.

Every caller -- a sequential sweep, a local worker, a SLURM job, hyper-parameter selection, a test --
runs a cell through this function; a sweep's launcher calls it through :func:`sweep_cell`, which turns
a failure into a ``failed.json`` entry and lets the sweep go on."""

from __future__ import annotations

import logging
import sys
import time
import traceback
from contextlib import ExitStack
from typing import Any, Mapping

from fusebench import io
from fusebench.pipelines import pipeline_of
from fusebench.runtime import distributed, utils
from fusebench.engine.cell import UNREADABLE_LOCK_S, CellBusyError, CellLock, ConfigMismatchError
from fusebench.engine.locks import LOCK
from fusebench.records.cell_file import existing_record, record_there
from fusebench.components.compat import check_compatible
from fusebench.spec.config import BenchmarkSpec, ConfigError
from fusebench.components.memory_budget import check_memory_budget
from fusebench.runtime.progress import cell as progress_cell
from fusebench.runtime.progress import phase, say
from fusebench.spec.request import CellRequest, RunOptions
from fusebench.engine.threads import cell_threads, using_threads
from fusebench.engine.trackers import build_trackers

log = logging.getLogger(__name__)


def run_cell(request: CellRequest, options: RunOptions = RunOptions(),
             context: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Run one (benchmark, objective, seed) cell and write its run.json; returns the record.

    ``context`` holds what the sweep measured once for every cell (``git``: the checkout's state before
    any output was written; ``fingerprint``: the data files read; ``hparams`` / ``hparam_selection``: the
    validation search's choices), computed here when absent. ``options.progress``: announce the cell
    (start / done / failed lines on stderr) and show its phases' progress, as bars on a terminal, else as
    log lines (:mod:`fusebench.runtime.progress`).

    A cell is only ever continued or returned for the configuration that made it: an existing
    ``run.json`` or ``last.pt`` with another config hash or data fingerprint is a
    :class:`~fusebench.engine.cell.ConfigMismatchError`, never mixed."""
    spec, progress = request.spec, options.progress
    check_compatible(spec, request.objective)
    cell = request.cell
    run_json = cell / "run.json"
    where = request.where
    if context is None:  # what the data files are decides whether a record may be reused
        context = sweep_context(spec, options.synthetic, options.data_root)

    def reused() -> dict[str, Any]:
        rec = existing_record(run_json, spec, request.objective, context, request.seed)
        if progress:
            say(f"reused record {where} ({run_json})")
        return rec

    if record_there(run_json, request.out):
        return reused()
    options = options.resolved()  # the device, once (a sweep has resolved it already; a direct call, a job: here)
    # a cell to run: its loss must fit the memory of this machine (a SLURM node may have less than the submit host)
    check_memory_budget(spec, [request.objective], options.device, distributed.world_size())
    cell.mkdir(parents=True, exist_ok=True)
    with ExitStack() as held:
        # one lock per cell, held by rank 0 of a distributed run (torchrun: the ranks of one run are one process
        # group, not rivals); its decision -- run, reuse, or busy -- is every rank's, so no rank waits alone
        decision, busy = "run", None
        if distributed.rank() == 0:
            try:
                held.enter_context(CellLock(cell))
            except CellBusyError as e:
                decision, busy = "busy", e
            else:
                if run_json.exists():  # another process finished the cell while we waited for nothing
                    decision = "reuse"
        decision, message = distributed.from_rank0((decision, str(busy) if busy is not None else ""))
        if decision == "busy":
            raise busy if busy is not None else CellBusyError(message)
        if decision == "reuse":
            return reused()
        if distributed.rank() == 0:  # a retry: an earlier failure is no longer the cell's state (fusebench status)
            (cell / "failed.json").unlink(missing_ok=True)
            for name in ("last.pt", "best.pt", "run.json", "failed.json"):  # half-written by a killed run (the
                io.remove_stale_temps(cell / name)  # lock is ours: no live writer of this cell is left)
            # a lock's own temporary file, left by a process killed as it took the lock (another process taking it
            # now writes one too, for an instant: only those a minute old go)
            io.remove_stale_temps(cell / LOCK, older_than=UNREADABLE_LOCK_S)
        t0 = time.monotonic()
        # intra-op threads: 1 for a small model, else the cell's share of the CPUs; --threads / OMP_NUM_THREADS win
        n_threads = cell_threads(spec.encoder.id, options.device, options.threads, options.cells_at_once)[0]
        if progress:
            named = context.get("data_file")  # the one data file read, by name and content
            shown = f" data={named['name']} (sha256 {named['sha256'][:12]})" if named else ""
            say(f"start {where} device={options.device} precision={spec.precision} threads={n_threads}{shown}")
        try:
            with using_threads(n_threads), \
                    build_trackers(list(options.loggers) if distributed.rank() == 0 else None, request.out, cell,
                                   options.mlflow_uri) as trk, progress_cell(where, progress):
                trk.start(where, spec.to_dict())
                record = pipeline_of(spec).run_cell(request, options, context, trk)
                trk.log_record(record, run_json)  # final metrics, run.json as an artifact
        except BaseException as e:
            if progress and run_json.exists():  # the record was written before the interruption (SIGTERM just
                say_done(where, t0, None, run_json, spec.validation_metric)  # after it): the cell is done
            elif progress:
                what = "interrupted" if isinstance(e, KeyboardInterrupt) else "failed"
                say(f"{what} {where} after {time.monotonic() - t0:.1f}s ({type(e).__name__})")
            raise
        if progress:
            say_done(where, t0, record, run_json, spec.validation_metric)
        return record


def say_done(where: str, t0: float, record: Mapping[str, Any] | None, run_json: Any, metric: str) -> None:
    """The done line of a cell whose record is written: its time and validation score (read from ``run_json``
    when the cell was interrupted after writing it, before it returned ``record``)."""
    import json

    from fusebench.metrics import values_of

    if record is None:
        try:
            record = json.loads(run_json.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            record = {}
    score = values_of(record.get("metrics")).get(metric)
    shown = f" ({metric} {score:.4f})" if isinstance(score, (int, float)) else ""
    say(f"done {where} in {time.monotonic() - t0:.1f}s{shown}")


def sweep_context(spec: BenchmarkSpec, synthetic: bool, data_root: str | None) -> dict[str, Any]:
    """Measured once per sweep, before any output is written: the checkout's git state and the
    fingerprint of the data files (real data only; :mod:`fusebench.datasets.fingerprint`)."""
    ctx: dict[str, Any] = {"git": utils.git_info(), "fingerprint": None}
    if pipeline_of(spec).reads_dataset and not (synthetic or spec.dataset.synthetic_only) and data_root is not None:
        from fusebench import datasets
        from fusebench.datasets.fingerprint import fingerprint

        # the files the adapter reads (None: every file under the root)
        read = getattr(datasets.get(spec.dataset.id), "files_read", None)
        files = read(data_root, dict(spec.dataset.options)) if read else None
        with phase(f"hashing the data files under {data_root}"):  # said when slow (a large file)
            ctx["fingerprint"] = fingerprint(data_root, files=files)
            ctx["data_file"] = data_file(data_root, files)
    return ctx


def data_file(data_root: str, files: list[Any] | None) -> dict[str, str] | None:
    """``{"name": basename, "sha256": hex}`` of the one file a sweep reads (the data root itself when it is a
    file, else the adapter's only ``files_read``), which the record, the cell's start line and the board name
    (issue #32: any multi-view ``.mat`` given to the generic ``multiview`` benchmark); None when it reads several."""
    from pathlib import Path

    from fusebench.io import sha256_file

    root = Path(data_root)
    one = root if root.is_file() else (Path(files[0]) if files and len(files) == 1 else None)
    if one is not None and not one.is_absolute() and not one.exists():
        one = root / one
    if one is None or not one.is_file():
        return None
    return {"name": one.name, "sha256": sha256_file(one)}


def sweep_cell(request: CellRequest, options: RunOptions, context: Mapping[str, Any]) -> dict[str, Any]:
    """One cell of a sweep: its record, or a ``failed`` / ``skipped`` entry (a failure is written to
    the cell's ``failed.json``); run in the sweep's process, in a local worker process or as a job.
    A cell with a checkpoint continues from it."""
    spec, o, s = request.spec, request.objective, request.seed
    cell = request.cell
    try:
        return run_cell(request, options.but(resume=True) if (cell / "last.pt").exists() else options, context)
    except (KeyboardInterrupt, ConfigError, ConfigMismatchError):
        raise
    except CellBusyError as e:  # another process runs it: its record will be the cell's
        print(f"SKIPPED {spec.name}/{o}/seed{s}: {e}", file=sys.stderr)
        return {"status": "skipped", "benchmark": spec.name, "objective": o, "seed": s, "error": str(e)}
    except Exception as e:  # record the failed cell, go on with the sweep
        if (cell / "run.json").exists():  # a concurrent run of the cell won the race: keep its record
            return existing_record(cell / "run.json", spec, o, context, s)
        return record_failure(request, f"{type(e).__name__}: {e}", traceback.format_exc())


def record_failure(request: CellRequest, error: str, trace: str = "") -> dict[str, Any]:
    """The ``failed`` entry of the cell of ``request`` (``error``: the exception as one line, ``trace``: its
    traceback), written to the cell's ``failed.json`` and said on stderr; the sweep goes on with the other cells.
    Also what the local launcher records for a cell whose worker process died in it."""
    spec, o, s, cell = request.spec, request.objective, request.seed, request.cell
    failure = {"status": "failed", "benchmark": spec.name, "objective": o, "seed": s, "error": error,
               "traceback": trace}
    try:
        cell.mkdir(parents=True, exist_ok=True)
        utils.atomic_write_json(cell / "failed.json", failure)
    except OSError as w:  # e.g. the disk that made the cell fail is full: say so, do not hide the failure
        print(f"(could not write {cell / 'failed.json'}: {w.strerror or w})", file=sys.stderr)
    log.error("%s/%s/seed%s failed: %s", spec.name, o, s, error)
    print(f"FAILED {spec.name}/{o}/seed{s}: {io.shown_lines(error)}", file=sys.stderr)  # (file text escaped)
    return failure


__all__ = ["data_file", "record_failure", "run_cell", "sweep_cell", "sweep_context"]
