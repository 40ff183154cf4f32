"""Where the cells of a sweep run: ``fusebench run ... --launcher NAME``.

* ``local`` (the default): in the sweep's own process, or with ``workers`` > 1 in that many local
  processes (every hyper-parameter selection first, its trials also ``workers`` at a time);
* ``slurm``: one SLURM job per (objective, seed) cell, submitted as one job array through
  `submitit <https://github.com/facebookincubator/submitit>`_ (``pip install -e .[slurm]``);
* ``submitit_local``: the same path through submitit's ``LocalExecutor`` (each cell a local
  process managed by submitit), to try the scheduler path on a machine without SLURM.

Whatever runs a cell, it is the same call (:func:`fusebench.cells.execute.sweep_cell` on a
:class:`~fusebench.spec.request.CellRequest` with the sweep's options and context), so every
cell keeps its guarantees: the exclusive per-cell lock, one immutable ``run.json``, ``failed.json``
for a failed cell, and resume from ``last.pt``. A submitted cell is a :class:`CellCall`, whose
``checkpoint()`` is submitit's preemption / time-out hook: it returns a resubmission of the same
call, and the requeued job resumes from ``last.pt``. Hyper-parameter selection (``pretrain.per_objective.<id>.grid``)
runs in the submitting process before any cell is submitted. docs/cluster.md has the details.

The launchers are a :class:`~fusebench.registry.Registry` (:data:`LAUNCHERS`, lowercase ids) like every
other component: a built-in registers with :func:`register`, a third-party launcher through the
entry-point group ``fusebench.launchers``; an unknown id is a ConfigError listing the known ones.

This module is longer than ~450 lines because the launchers share one cell call, one options type and its checks,
and the waiting on submitted jobs; split, each part would import the others.
"""

from __future__ import annotations

import importlib
import json
import sys
import time
import traceback
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, ClassVar, Mapping

from fusebench.io import shown_text
from fusebench.registry import Registry, UnknownNameError
from fusebench.runtime import interrupt
from fusebench.engine import locks
from fusebench.spec.config import ConfigError
from fusebench.cells.execute import sweep_cell
from fusebench.spec.request import CellRequest, RunOptions, SweepCells, cell_dir

#: launcher id -> :class:`Launcher` subclass (built-ins below; plugins through the entry-point group
#: ``fusebench.launchers``, value ``"package.module:LauncherClass"``, a class whose ``name`` is its id)
LAUNCHERS = Registry("launcher", entry_point_group="fusebench.launchers")


def register(name: str) -> Callable[[type["Launcher"]], type["Launcher"]]:
    """Decorator: register a :class:`Launcher` subclass under the lowercase id ``name`` (also set as
    its ``name``, which its messages and the cells' records use)."""

    def deco(cls: type["Launcher"]) -> type["Launcher"]:
        LAUNCHERS.add(name, cls)
        cls.name = name
        return cls

    return deco


def available() -> list[str]:
    """The launcher ids, sorted (built-ins and plugins)."""
    return LAUNCHERS.available()


def build(name: str, workers: int = 1, options: dict[str, Any] | None = None) -> "Launcher":
    """The launcher ``name`` with its options; a ConfigError for an unknown name (listing the known
    ones), an option it does not take, or a missing requirement (submitit, sbatch) — before anything runs."""
    try:
        cls = LAUNCHERS.get(name)
    except UnknownNameError:
        raise ConfigError(f"--launcher: unknown launcher {name!r}; known: {', '.join(available())}") from None
    launcher = cls(workers=workers, **(options or {}))
    launcher.name = name.lower()  # the id it was found by (a plugin from an entry point never passed register())
    launcher.check()
    return launcher


class Launcher:
    """Runs the cells of one sweep; ``launch`` returns one entry per cell, in sweep order."""

    name = ""
    #: the cells run on this machine (the sweep resolves their device and says their threads); a scheduler's jobs
    #: run on its nodes, and each job resolves its own
    runs_here: ClassVar[bool] = True

    def __init__(self, workers: int = 1, **options: Any) -> None:
        if options:
            raise ConfigError(f"--launcher {self.name} takes none of: {', '.join(sorted(options))}")
        self.workers = workers

    def cells_at_once(self, cells: int) -> int:
        """How many of ``cells`` cells run side by side on this machine, sharing its CPUs
        (:mod:`fusebench.engine.threads`)."""
        return max(1, min(self.workers, cells))

    @property
    def trial_workers(self) -> int:
        """Local processes the hyper-parameter selection trials run in (:mod:`fusebench.sweep.selection`)."""
        return 1

    def check(self) -> None:
        """Raise ConfigError when the launcher cannot work here."""

    def launch(self, objs: list[str], seeds: list[int], cells: SweepCells) -> list[dict[str, Any]]:
        """Run every cell ``sweep_cell(cells.request(o, s), cells.options, cells.context)`` (the sweep has frozen
        every hyper-parameter selection before it calls ``launch``, :mod:`fusebench.sweep.selection`); one
        entry per cell, in sweep order (objectives outer, seeds inner)."""
        raise NotImplementedError


@register("local")
class LocalLauncher(Launcher):
    """This process (``workers`` = 1: the cells one after another) or a pool of ``workers`` spawned local
    processes."""

    @property
    def trial_workers(self) -> int:
        return self.workers  # --workers N: the trials too, N at a time

    def launch(self, objs, seeds, cells):
        if self.workers <= 1:
            return [sweep_cell(cells.request(o, s), cells.options, cells.context) for o in objs for s in seeds]
        from fusebench.sweep.process_pool import run_in_processes

        # SIGTERM in a worker unwinds its cell like Ctrl-C (lock released); the sweep's own SIGTERM is passed on
        return run_in_processes(_worker_cell, [(cells.request(o, s), cells.options, cells.context)
                                               for o in objs for s in seeds], self.workers,  # in sweep order
                                on_crash=_crashed_cell)


def _crashed_cell(args: tuple[Any, ...], how: str) -> dict[str, Any]:
    """The ``failed`` entry of a cell whose worker process died in it (``how``: the exit status in words), written
    to its ``failed.json`` as any failure is; the other cells of the sweep run on."""
    from fusebench.cells.execute import record_failure

    request = args[0]
    kept = " (its last.pt is kept: a rerun continues from it)" if (request.cell / "last.pt").exists() else ""
    return record_failure(request, f"WorkerDied: the worker process running the cell died, {how}{kept}")


def _worker_cell(request: CellRequest, options: RunOptions, context: Mapping[str, Any]) -> dict[str, Any]:
    """A local worker's cell: :func:`sweep_cell`, unless the worker has been told to stop (SIGTERM)."""
    if interrupt.terminating():
        return {"status": "interrupted", "benchmark": request.spec.name, "objective": request.objective,
                "seed": request.seed}
    return sweep_cell(request, options, context)


class CellCall:
    """One cell as a picklable, checkpointable call (what a submitted job runs).

    Calling it runs :func:`~fusebench.cells.execute.sweep_cell` on ``request`` with ``options`` and
    ``context``; it resumes from the cell's ``last.pt`` when there is one. ``checkpoint()`` follows
    ``submitit.helpers.Checkpointable``: submitit calls it when the job is preempted or about to time
    out, and requeues the job with the submission it returns: the same cell call (with ``resume``), so
    the requeued job continues from ``last.pt`` (steps since the last checkpoint are redone; resume is
    exact, so the record equals an uninterrupted run's)."""

    def __init__(self, request: CellRequest, options: RunOptions, context: Mapping[str, Any]) -> None:
        self.request, self.options, self.context = request, options, dict(context)

    def __call__(self) -> dict[str, Any]:
        cell, where = self.request.cell, self.request.where
        job = locks.current_slurm_job().get("slurm_job")
        print(f"fusebench cell {where} on {locks.hostname()}" + (f" (slurm job {job})" if job else ""), flush=True)
        if (cell / "last.pt").exists() and not (cell / "run.json").exists():
            print(f"resuming {where} from {cell / 'last.pt'} ({_checkpoint_position(cell / 'last.pt')})", flush=True)
        # a job's output is a log file, not a terminal: progress comes as lines (fusebench.runtime.progress); the
        # device is resolved here, on the job's node (the submit host may have none of its GPUs)
        record = sweep_cell(self.request, self.options.resolved(), self.context)
        print(f"cell {where}: {record.get('status', 'done')}", flush=True)
        return record

    def checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        import submitit

        print(f"checkpoint: requeueing {self.request.where}; it resumes from last.pt", flush=True)
        return submitit.helpers.DelayedSubmission(CellCall(self.request, self.options.but(resume=True), self.context))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CellCall) and \
            (self.request, self.options, self.context) == (other.request, other.options, other.context)

    __hash__ = None  # type: ignore[assignment]


def _checkpoint_position(path: Path) -> str:
    try:
        import torch

        ckpt = torch.load(path, map_location="cpu", weights_only=True)
        return f"{ckpt.get('phase')} step {ckpt.get('step')}, epoch {ckpt.get('epoch')}"
    except Exception as e:  # the cell itself reports an unreadable checkpoint
        return f"unreadable: {type(e).__name__}"


@dataclass
class _Adopted:
    """A cell's SLURM job from an earlier submission, waited for instead of submitting the cell again."""

    job_id: str
    cell: Path


@dataclass
class SubmititOptions:
    """Options of the submitit launchers (CLI flags in parentheses)."""

    partition: str | None = None  # --partition
    gpus_per_job: int | None = None  # --gpus-per-job
    time_min: int = 60  # --time-min: each job's time limit; a cell that reaches it is requeued and resumes
    account: str | None = None  # --account
    cpus_per_job: int | None = None  # --cpus-per-job
    sbatch: dict[str, Any] = field(default_factory=dict)  # --sbatch KEY=VALUE: any other sbatch option
    array_parallelism: int | None = None  # --array-parallelism: at most this many cells at once
    max_requeues: int = 3  # time-outs a cell may be requeued after (preemptions do not count)
    wait: bool = True  # --no-wait: submit and return
    poll_s: float = 2.0  # seconds between looks at the jobs while waiting
    folder: str | None = None  # job files and logs (default: <out>/.submitit/<benchmark>)


def submitit_option_problems(opts: SubmititOptions) -> list[str]:
    """What is wrong with ``opts`` (from the CLI flags or ``fusebench.run(launcher_options=...)``), one message
    per option naming it: every field typed and in range before any job is submitted (a string ``max_requeues``
    used to fail the cell at its first preemption, a string ``poll_s`` after the jobs were submitted)."""
    def is_int(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool)

    out = []
    for name, least in (("gpus_per_job", 0), ("cpus_per_job", 1), ("array_parallelism", 1)):
        value = getattr(opts, name)
        if value is not None and (not is_int(value) or value < least):
            out.append(f"--{name.replace('_', '-')}: expected a {'non-negative' if least == 0 else 'positive'} "
                       f"integer, got {value!r}")
    if not is_int(opts.time_min) or opts.time_min < 1:
        out.append(f"--time-min: expected a positive number of minutes, got {opts.time_min!r}")
    if not is_int(opts.max_requeues) or opts.max_requeues < 0:
        out.append(f"max_requeues: expected an integer >= 0 (time-outs a cell may be requeued after), got "
                   f"{opts.max_requeues!r}")
    if not isinstance(opts.wait, bool):
        out.append(f"wait (--no-wait): expected True or False, got {opts.wait!r}")
    if not isinstance(opts.poll_s, (int, float)) or isinstance(opts.poll_s, bool) or not opts.poll_s > 0:
        out.append(f"poll_s: expected a number of seconds > 0, got {opts.poll_s!r}")
    for name in ("partition", "account", "folder"):
        value = getattr(opts, name)
        if value is not None and (not isinstance(value, str) or not value):
            out.append(f"--{name}: expected a non-empty string, got {value!r}")
    if not isinstance(opts.sbatch, Mapping) or not all(isinstance(k, str) and k for k in opts.sbatch):
        out.append(f"--sbatch: expected a mapping of sbatch option names to values (KEY=VALUE on the command line), "
                   f"got {opts.sbatch!r}")
    return out


def _first_missing(folder: Path) -> Path | None:
    """The highest of ``folder`` and its parents that does not exist yet (None when ``folder`` exists): what a
    submission creates, and may remove again when it fails (:func:`_remove_created`)."""
    if folder.is_dir():
        return None
    missing = folder
    while not missing.parent.exists() and missing.parent != missing:
        missing = missing.parent
    return missing


def _remove_created(folder: Path, created: Path | None) -> None:
    """After a failed submission: the files under ``folder`` and the folders up to ``created`` when the submission
    created them (``created`` from :func:`_first_missing`); a folder that existed before may be another sweep's,
    writing its own jobs now, and is left as it is."""
    if created is None or not folder.is_dir():
        return
    for p in sorted(folder.rglob("*"), key=lambda q: len(q.parts), reverse=True):
        if p.is_dir():
            if not any(p.iterdir()):
                p.rmdir()
        else:
            p.unlink(missing_ok=True)
    for d in [folder, *folder.parents]:
        if not d.is_dir() or any(d.iterdir()):
            break
        d.rmdir()
        if d == created:
            break


class SubmititLauncher(Launcher):
    """Submits every cell without a record as one job (one job array), then waits for them."""

    #: said after "--workers applies to --launcher local only" (how this launcher limits parallel jobs)
    parallelism_hint: str = ""
    #: said when the jobs cannot be submitted (where to look)
    submit_hint: str = ""

    def __init__(self, workers: int = 1, **options: Any) -> None:
        if workers != 1:
            raise ConfigError(f"--workers applies to --launcher local only; with --launcher {self.name} every cell "
                              f"is its own job{self.parallelism_hint}")
        known = {f.name for f in fields(SubmititOptions)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise ConfigError(f"--launcher {self.name}: unknown option(s) {', '.join(unknown)}; "
                              f"known: {', '.join(sorted(known))}")
        self.workers = 1
        self.opts = SubmititOptions(**options)
        problems = submitit_option_problems(self.opts)
        if problems:
            raise ConfigError("; ".join(problems))

    def check(self) -> None:
        try:
            importlib.import_module("submitit")
        except ImportError:
            raise ConfigError(f"--launcher {self.name} needs submitit: pip install -e .[slurm]") from None

    def executor(self, folder: Path, job_name: str) -> Any:
        raise NotImplementedError

    def _queue(self) -> locks.SlurmQueue | None:
        return None

    def launch(self, objs, seeds, sweep):
        from fusebench.runtime import utils
        sweep = sweep.moved_to(Path(sweep.out).resolve())  # a job may start in another folder
        spec, out = sweep.spec, sweep.out
        cells = [(o, s) for o in objs for s in seeds]
        records: list[dict[str, Any] | None] = [None] * len(cells)
        queue = self._queue()
        if queue is not None:
            queue.prefetch(locks.slurm_jobs([cell_dir(out, spec.name, o, s) for o, s in cells]))
        todo, waiting = [], {}
        for i, (o, s) in enumerate(cells):
            cell = cell_dir(out, spec.name, o, s)
            if (cell / "run.json").exists():
                records[i] = sweep_cell(sweep.request(o, s), sweep.options, sweep.context)  # its record, read back
                continue
            held = locks.busy(cell, queue)
            if held is None:
                todo.append(i)
            elif held[1] is not None and queue is not None:  # a SLURM job of an earlier submission: wait for it
                print(f"{spec.name}/{o}/seed{s}: not submitted again, {held[0]}", file=sys.stderr)
                waiting[i] = _Adopted(held[1], cell)
                records[i] = {"status": "submitted", "benchmark": spec.name, "objective": o, "seed": s,
                              "launcher": self.name, "job_id": held[1], "log": ""}
            else:  # another process runs it: never run a cell twice
                print(f"SKIPPED {spec.name}/{o}/seed{s}: {held[0]}", file=sys.stderr)
                records[i] = {"status": "skipped", "benchmark": spec.name, "objective": o, "seed": s, "error": held[0]}
        if todo:
            folder = Path(self.opts.folder) if self.opts.folder else out / ".submitit" / spec.name
            ex = self.executor(folder, f"fusebench-{spec.name}")
            calls = [CellCall(sweep.request(*cells[i]), sweep.options, sweep.context) for i in todo]
            created = _first_missing(folder)
            try:
                with ex.batch():
                    jobs = [ex.submit(c) for c in calls]
            except Exception as e:  # submitit's FailedJobError: sbatch refused (no controller, bad option, ...)
                from fusebench.engine.loop import RunError

                _remove_created(folder, created)  # the pickled calls and job scripts of jobs never submitted
                said = " ".join(str(e).split())[:600]
                raise RunError(f"--launcher {self.name}: the {len(calls)} job(s) could not be submitted "
                               f"({type(e).__name__}: {said}){self.submit_hint}; nothing was submitted") from None
            now = time.time()
            for i, job in zip(todo, jobs):
                o, s = cells[i]
                cell = cell_dir(out, spec.name, o, s)
                cell.mkdir(parents=True, exist_ok=True)
                utils.atomic_write_json(cell / locks.MARKER, {
                    "launcher": self.name, "job_id": str(job.job_id), "submitted": now, "host": locks.hostname(),
                    "stdout": str(job.paths.stdout), "stderr": str(job.paths.stderr)})
                logs = str(job.paths.stdout)[: -len(".out")]
                print(f"submitted {spec.name}/{o}/seed{s}: {self.name} job {job.job_id} (logs {logs}.out|.err)",
                      file=sys.stderr)
                waiting[i] = job
                records[i] = {"status": "submitted", "benchmark": spec.name, "objective": o, "seed": s,
                              "launcher": self.name, "job_id": str(job.job_id), "log": str(job.paths.stderr)}
        if waiting and self.opts.wait:
            self._wait(waiting, cells, records, spec, out)
        return records  # type: ignore[return-value]

    def _wait(self, waiting: dict[int, Any], cells, records, spec, out: Path) -> None:
        """Until every job has a result or has left the queue without one."""
        gone: dict[int, int] = {}
        while waiting:
            queue = self._queue()
            if queue is not None:
                queue.prefetch([str(j.job_id) for j in waiting.values()])
            for i, job in list(waiting.items()):
                if isinstance(job, _Adopted):  # a job we did not submit: its cell's files tell the outcome
                    if (job.cell / "run.json").exists() or queue.state(job.job_id)[0] == locks.GONE:
                        gone[i] = gone.get(i, 0) + 1
                        if (job.cell / "run.json").exists() or gone[i] >= 3:
                            records[i] = self._adopted_outcome(job, cells[i], spec)
                            del waiting[i]
                    continue
                if job.paths.result_pickle.exists() or (queue is None and job.done()):
                    records[i] = self._outcome(job, cells[i], spec, out)
                    del waiting[i]
                elif queue is not None and queue.state(str(job.job_id))[0] == locks.GONE:
                    gone[i] = gone.get(i, 0) + 1
                    if gone[i] >= 3:  # out of the queue for a while and still no result (shared file systems lag)
                        records[i] = self._outcome(job, cells[i], spec, out)
                        del waiting[i]
                else:
                    gone.pop(i, None)
            if waiting:
                time.sleep(self.opts.poll_s)

    def _adopted_outcome(self, job: "_Adopted", cell_id: tuple[str, int], spec) -> dict[str, Any]:
        from fusebench.records.cell_file import existing_record

        o, s = cell_id
        if (job.cell / "run.json").exists():
            return existing_record(job.cell / "run.json", spec, o, seed=s)
        base = {"benchmark": spec.name, "objective": o, "seed": s, "job_id": job.job_id}
        if (job.cell / "failed.json").exists():
            try:
                error = str(json.loads((job.cell / "failed.json").read_text(encoding="utf-8")).get("error", ""))
            except (OSError, ValueError):
                error = "failed.json unreadable"
            return {"status": "failed", **base, "error": error}
        error = f"slurm job {job.job_id} ended without a record"
        print(f"INTERRUPTED {spec.name}/{o}/seed{s}: {shown_text(error)}; rerunning the sweep finishes it", file=sys.stderr)
        return {"status": "interrupted", **base, "error": error}

    def _outcome(self, job: Any, cell_id: tuple[str, int], spec, out: Path) -> dict[str, Any]:
        """The cell's entry once its job ended: the record (or the failure sweep_cell recorded), or
        ``interrupted`` when the job ended without a result (cancelled, killed, out of time), or a
        failure the job raised outside the cell (written to failed.json)."""
        from fusebench.runtime import utils
        from fusebench.records.cell_file import existing_record

        o, s = cell_id
        cell = cell_dir(out, spec.name, o, s)
        base = {"benchmark": spec.name, "objective": o, "seed": s, "job_id": str(job.job_id), "log": str(job.paths.stderr)}
        trace = ""
        if job.paths.result_pickle.exists():
            try:
                result = job.result()
                if isinstance(result, dict) and result.get("status") == "failed":  # said in the job's log: here too
                    first = (str(result.get("error") or "").splitlines() or [""])[0]
                    print(f"FAILED {spec.name}/{o}/seed{s}: {shown_text(first)} (log {job.paths.stderr})", file=sys.stderr)
                return result
            except Exception as e:  # raised in the job outside the cell (or submitit gave up requeueing)
                error, trace = f"{type(e).__name__}: {e}", traceback.format_exc()
                interrupted = "UncompletedJobError" in error
        else:
            error, interrupted = f"{self.name} job {job.job_id} ended without a result (cancelled, killed or out of time)", True
        if (cell / "run.json").exists():
            return existing_record(cell / "run.json", spec, o, seed=s)
        if interrupted:
            how = "resumes from last.pt" if (cell / "last.pt").exists() else "starts it again"
            print(f"INTERRUPTED {spec.name}/{o}/seed{s}: {shown_text((error.splitlines() or [''])[0])}; rerunning the sweep {how} "
                  f"(log {job.paths.stderr})", file=sys.stderr)
            return {"status": "interrupted", **base, "error": error}
        failure = {"status": "failed", **base, "error": error, "traceback": trace}
        cell.mkdir(parents=True, exist_ok=True)
        utils.atomic_write_json(cell / "failed.json", failure)
        print(f"FAILED {spec.name}/{o}/seed{s}: {shown_text((error.splitlines() or [''])[0])} (log {job.paths.stderr})", file=sys.stderr)
        return failure


@register("slurm")
class SlurmLauncher(SubmititLauncher):
    """One SLURM job per cell (a job array, ``sbatch`` through submitit's SlurmExecutor)."""

    runs_here = False  # each job runs on a node with its own CPUs: its device and threads are decided there
    parallelism_hint = " (--array-parallelism limits how many run at once)"
    submit_hint = "; is the SLURM controller running and reachable from here? (`scontrol ping`, `sinfo`)"

    def check(self) -> None:
        super().check()
        import shutil

        if shutil.which("sbatch") is None:
            raise ConfigError("--launcher slurm: sbatch is not on PATH (run on a SLURM login node, "
                              "or try --launcher submitit_local)")

    def parameters(self, job_name: str) -> dict[str, Any]:
        """submitit SlurmExecutor parameters (sbatch options) from the launcher options."""
        o = self.opts
        params: dict[str, Any] = {"job_name": job_name, "time": o.time_min, "nodes": 1, "ntasks_per_node": 1}
        if o.partition:
            params["partition"] = o.partition
        if o.gpus_per_job is not None:
            params["gpus_per_node"] = o.gpus_per_job
        if o.account:
            params["account"] = o.account
        if o.cpus_per_job is not None:
            params["cpus_per_task"] = o.cpus_per_job
        if o.array_parallelism is not None:
            params["array_parallelism"] = o.array_parallelism
        if o.sbatch:
            params["additional_parameters"] = dict(o.sbatch)
        return params

    def executor(self, folder: Path, job_name: str) -> Any:
        import submitit

        ex = submitit.SlurmExecutor(folder=folder, max_num_timeout=self.opts.max_requeues)
        ex.update_parameters(**self.parameters(job_name))
        return ex

    def _queue(self) -> locks.SlurmQueue:
        return locks.SlurmQueue()


@register("submitit_local")
class SubmititLocalLauncher(SubmititLauncher):
    """submitit's LocalExecutor: every cell a local process, with the time limit and the
    checkpoint / requeue hook of the SLURM path (the scheduler options are not used)."""

    def __init__(self, workers: int = 1, **options: Any) -> None:
        super().__init__(workers, **options)
        used = [f"--{n.replace('_', '-')}" for n in ("partition", "account", "gpus_per_job", "cpus_per_job", "array_parallelism")
                if getattr(self.opts, n) is not None] + (["--sbatch"] if self.opts.sbatch else [])
        if used:
            raise ConfigError(f"{', '.join(used)}: SLURM options, not used by --launcher submitit_local")

    def cells_at_once(self, cells: int) -> int:
        return max(1, cells)  # the local executor runs every job side by side on this machine

    def executor(self, folder: Path, job_name: str) -> Any:
        import submitit

        ex = submitit.LocalExecutor(folder=folder, max_num_timeout=self.opts.max_requeues)
        ex.update_parameters(timeout_min=self.opts.time_min)
        return ex


__all__ = ["CellCall", "LAUNCHERS", "Launcher", "available", "build", "register"]
