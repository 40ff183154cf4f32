"""Running one cell (the one way down): :func:`run_cell` takes a :class:`~fusebench.training.request.CellRequest`
and :class:`~fusebench.training.request.RunOptions`, returns the cell's finished record when there is one
made with the same configuration and data, else locks the cell, runs the spec's pipeline
(:mod:`fusebench.pipelines`) under the requested experiment trackers and returns the record it wrote.

Every caller -- a sequential sweep, a local worker, a SLURM job, hyper-parameter selection, a test --
runs a cell through this function."""

from __future__ import annotations

import time
from typing import Any, Mapping

from fusebench.pipelines import pipeline_of
from fusebench.training import distributed, utils
from fusebench.training.cell import CellLock, existing_record, record_there
from fusebench.training.config import BenchmarkSpec
from fusebench.training.progress import cell as progress_cell
from fusebench.training.progress import say
from fusebench.training.request import CellRequest, RunOptions
from fusebench.training.trackers import build_trackers


def run_cell(request: CellRequest, options: RunOptions = RunOptions(),
             context: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Run one (benchmark, objective, seed) cell and write its run.json; returns the record.

    ``context`` holds what the sweep measured once for every cell (``git``: the checkout's state before
    any output was written; ``fingerprint``: the data files read; ``hparams`` / ``hparam_selection``: the
    validation search's choices), computed here when absent. ``options.progress``: announce the cell
    (start / done / failed lines on stderr) and show its phases' progress, as bars on a terminal, else as
    log lines (:mod:`fusebench.training.progress`).

    A cell is only ever continued or returned for the configuration that made it: an existing
    ``run.json`` or ``last.pt`` with another config hash or data fingerprint is a
    :class:`~fusebench.training.cell.ConfigMismatchError`, never mixed."""
    from fusebench.training.runner import check_compatible

    spec, progress = request.spec, options.progress
    check_compatible(spec, request.objective)
    cell = request.cell
    run_json = cell / "run.json"
    where = request.where
    if context is None:  # what the data files are decides whether a record may be reused
        context = sweep_context(spec, options.synthetic, options.data_root)

    def reused() -> dict[str, Any]:
        rec = existing_record(run_json, spec, context)
        if progress:
            say(f"reused record {where} ({run_json})")
        return rec

    if record_there(run_json, request.out):
        return reused()
    cell.mkdir(parents=True, exist_ok=True)
    with CellLock(cell):
        if run_json.exists():  # another process finished the cell while we waited for nothing
            return reused()
        t0 = time.monotonic()
        if progress:
            try:
                dev = str(utils.resolve_device(options.device))
            except ValueError:  # the pipeline says why
                dev = options.device
            say(f"start {where} device={dev} precision={spec.precision}")
        try:
            with build_trackers(list(options.loggers) if distributed.rank() == 0 else None, request.out, cell,
                                options.mlflow_uri) as trk, progress_cell(where, progress):
                trk.start(where, spec.to_dict())
                record = pipeline_of(spec).run_cell(request, options, context, trk)
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


def sweep_context(spec: BenchmarkSpec, synthetic: bool, data_root: str | None) -> dict[str, Any]:
    """Measured once per sweep, before any output is written: the checkout's git state and the
    fingerprint of the data files (real data only; :mod:`fusebench.datasets.fingerprint`)."""
    ctx: dict[str, Any] = {"git": utils.git_info(), "fingerprint": None}
    if pipeline_of(spec).reads_dataset and not (synthetic or spec.dataset.synthetic_only) and data_root is not None:
        from fusebench.datasets.fingerprint import fingerprint

        ctx["fingerprint"] = fingerprint(data_root)
    return ctx


__all__ = ["run_cell", "sweep_context"]
