"""What a sweep would do, cell by cell, without doing it (sweep layer): ``fusebench run B ... --plan``.

The run and ``--plan`` judge by the functions here, one judgement (:func:`cell_plan`, :func:`check_resumes_fit`,
:func:`selection_plan`; ``stop=True``: the run, raised at the first refusal; ``stop=False``: the plan, every refusal an
entry). A sweep judges every cell before any training (:func:`judge_cell`, against the selections already frozen:
:func:`frozen_context`): a cell whose ``run.json`` was made with this configuration, data, code and chosen point is
reused; a cell with a ``last.pt`` of the same is resumed; any other record or
checkpoint stops the sweep (:class:`~fusebench.engine.cell.ConfigMismatchError`: records are immutable), and so,
once the data is read, does a ``last.pt`` whose tensors do not fit the modules the cell builds
(:func:`check_resumes_fit`: a ConfigError naming the file, the tensor and both shapes). With
``--plan`` the sweep makes every check a run makes (ids, options, data files, memory budget, existing records,
checkpoints, frozen hyper-parameter selections), judges every cell and every selection instead of stopping at the
first refusal, and returns what it found; it trains nothing and writes no record, checkpoint, selection file or
``--out`` folder (a dataset adapter may still fill its own cache while the data is read, as a run does).
``fusebench status`` reads the folders alone; only the plan, given the run's own arguments (``--set``,
``--data-root``, ``--seeds``), can say whether a record's configuration and data are the ones the command would
use.

Actions of a cell: ``reuse`` (its record is kept), ``resume`` (from ``last.pt``), ``run`` (a retry where it failed
before), ``busy`` (another process holds its lock: the sweep skips it) and ``refused`` (the detail says why; the run
would stop before any cell). Actions of a selection: ``reuse`` (the frozen file), ``select`` (the trials still to
run, each trial's record and ``last.pt`` judged as a cell's) and ``refused``. A selection still to make is judged
against by the run once made (a cell at another point than its choice: refused then, before any cell); the plan
cannot foresee that choice.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from fusebench.engine.cell import ConfigMismatchError, check_checkpoint_config, load_checkpoint
from fusebench.engine.loop import RunError
from fusebench.records.cell_file import existing_record, record_there
from fusebench.spec.config import BenchmarkSpec
from fusebench.spec.request import CellRequest

#: what a sweep does with a cell (see the module docstring)
CELL_ACTIONS = ("reuse", "resume", "run", "busy", "refused")
#: what a sweep does with an objective's hyper-parameter selection
SELECTION_ACTIONS = ("reuse", "select", "refused")


def judge_request(request: CellRequest, context: Mapping[str, Any] | None) -> str:
    """What :func:`fusebench.cells.execute.run_cell` does with the cell (or selection trial) of ``request`` given
    ``context``: ``"reuse"`` (a record made with this configuration, data, code and frozen choice), ``"resume"`` (a
    ``last.pt`` of the same) or ``"run"``; a record or a checkpoint made otherwise raises
    (:class:`ConfigMismatchError`, or :class:`RunError` for a file the leaderboard refuses or that is no checkpoint):
    the sweep stops before any training."""
    spec, objective, cell = request.spec, request.objective, request.cell
    ctx = dict(context) if context is not None else None
    if record_there(cell / "run.json", request.out):
        existing_record(cell / "run.json", spec, objective, ctx, request.seed)
        return "reuse"
    if (cell / "last.pt").exists():
        check_checkpoint_config(cell / "last.pt", load_checkpoint(cell / "last.pt", mmap=True), spec, objective, ctx)
        return "resume"
    return "run"


def judge_cell(spec: BenchmarkSpec, objective: str, seed: int, out: Path, context: Mapping[str, Any] | None) -> str:
    """:func:`judge_request` for the sweep's cell ``objective`` x ``seed`` under ``out``."""
    return judge_request(CellRequest(spec, objective, seed, out), context)


def check_resumes_fit(spec: BenchmarkSpec, rows: list[dict[str, Any]], context: Mapping[str, Any], train_ds: Any,
                      stop: bool = False) -> None:
    """Before any cell (and before the hyper-parameter selection): each cell that :func:`cell_plan`'s entries
    ``rows`` resume from ``last.pt`` (action ``resume``: its configuration judged, no other process holding it)
    holds module states of the names and shapes of the modules the cell builds for ``train_ds``
    (:func:`fusebench.cells.resume_fit.resume_misfit`); else its entry is refused with one line naming the file, the
    tensor, expected vs found shape and what to do, or, with ``stop`` (the run), that line is a ConfigError."""
    from fusebench.cells.resume_fit import resume_misfit
    from fusebench.spec.config import ConfigError

    for row in rows:
        if row.get("selection") or row["action"] != "resume":
            continue
        last = Path(row["cell"]) / "last.pt"
        problem = resume_misfit(last, load_checkpoint(last, mmap=True), spec, row["objective"], train_ds, context)
        if problem is None:
            continue
        if stop:
            raise ConfigError(problem)
        row.update(action="refused", detail=problem)


def cell_plan(spec: BenchmarkSpec, objs: list[str], seeds: list[int], out: Path, context: Mapping[str, Any],
              stop: bool = False) -> list[dict[str, Any]]:
    """One entry per cell, in sweep order: ``{"status": "plan", "benchmark", "objective", "seed", "action",
    "detail", "cell"}``, the action one of :data:`CELL_ACTIONS`. ``stop=False`` (``--plan``): a refusal is an entry,
    not an exception; ``stop=True`` (the run, the same judgement): the first refusal is raised."""
    from fusebench.engine.cell import lock_detail, lock_holder
    from fusebench.engine.locks import LOCK

    rows = []
    for o in objs:
        for s in seeds:
            cell = CellRequest(spec, o, s, out).cell
            detail = ""
            try:
                action = judge_cell(spec, o, s, out, context)
            except (ConfigMismatchError, RunError) as e:
                if stop:
                    raise
                action, detail = "refused", str(e)
            if action in ("run", "resume"):
                held, holder = lock_holder(cell / LOCK)  # the run's own rule (CellLock)
                if held:
                    action, detail = "busy", f"locked by {lock_detail(holder)}: another process runs it now"
                elif action == "resume":
                    detail = f"from {cell / 'last.pt'}"
                elif (cell / "failed.json").is_file():
                    detail = f"a retry: it failed before ({cell / 'failed.json'})"
            elif action == "reuse":
                detail = str(cell / "run.json")
            rows.append({"status": "plan", "benchmark": spec.name, "objective": o, "seed": s, "action": action,
                         "detail": detail, "cell": str(cell)})
    return rows


def frozen_context(spec: BenchmarkSpec, objectives: list[str], out: Path, options: Any,
                   context: Mapping[str, Any]) -> dict[str, Any]:
    """What the cells of ``objectives`` get from the selections already frozen under ``out`` (those the run would
    reuse: :func:`fusebench.sweep.selection.check_frozen` passes), as
    :func:`~fusebench.sweep.selection.freeze_selections` returns it: the plan and the run judge every cell's record
    or ``last.pt`` against the chosen point with it (:func:`cell_plan`), those of an objective whose cells are all
    finished too; a selection still to make or refused adds nothing (its own entry says why)."""
    from fusebench.sweep import selection as S

    ctx: dict[str, Any] = {}
    for o in objectives:
        path = S.selection_path(out, spec.name, o)
        if not S.selects(spec, o) or not path.exists():
            continue
        try:
            outcome, digest = S.check_frozen(path, spec, o, options, context)
        except (ConfigMismatchError, RunError, OSError):
            continue  # the selection's own entry says why
        ctx.setdefault("hparams", {})[o] = dict(outcome["choice"])
        ctx.setdefault("hparam_selection", {})[o] = outcome
        ctx.setdefault("hparam_selection_sha256", {})[o] = digest
    return ctx


def _trial_refusal(spec: BenchmarkSpec, objective: str, out: Path, context: Mapping[str, Any],
                   train_ds: Any) -> tuple[int, int, int, Exception | None]:
    """Every trial of ``objective``'s selection judged as :func:`~fusebench.sweep.selection.select_hparams` runs it
    (:func:`judge_request` with the trial's own context; a ``last.pt`` it resumes fitting its modules where
    ``train_ds`` is given; another process holding it: the run's CellBusyError): ``(trials, to run, resumed,
    first refusal or None)``."""
    from fusebench.cells.resume_fit import resume_misfit
    from fusebench.engine.cell import busy_error
    from fusebench.engine.locks import LOCK
    from fusebench.spec.config import ConfigError
    from fusebench.sweep import selection as S

    n = todo = resumed = 0
    for _, _, _, request, ctx in S.trial_calls(spec, objective, out, context):
        n += 1
        try:
            action = judge_request(request, ctx)
        except (ConfigMismatchError, RunError) as e:
            return n, todo, resumed, e
        if action == "reuse":
            continue
        todo += 1
        busy = busy_error(request.cell / LOCK)  # CellLock's own rule and message
        if busy is not None:
            return n, todo, resumed, busy
        if action == "resume":
            resumed += 1
            last = request.cell / "last.pt"
            if train_ds is not None:
                problem = resume_misfit(last, load_checkpoint(last, mmap=True), spec, objective, train_ds, ctx)
                if problem is not None:
                    return n, todo, resumed, ConfigError(problem)
    return n, todo, resumed, None


def selection_plan(spec: BenchmarkSpec, objectives: list[str], out: Path, options: Any,
                   context: Mapping[str, Any], stop: bool = False, train_ds: Any = None) -> list[dict[str, Any]]:
    """One entry per objective of ``objectives`` whose hyper-parameters the sweep selects: ``{"status": "plan",
    "benchmark", "objective", "selection": True, "action", "detail"}``, the action one of
    :data:`SELECTION_ACTIONS`: its frozen file reused (checked as the run checks it), the trials still to run (each
    trial's record and ``last.pt`` judged as the selection's run judges it, the ``last.pt`` fitting the modules built
    for ``train_ds`` where it is given), or why the run would refuse the selection. ``stop=True`` (the run, the same
    judgement, before any trial): the first refusal is raised instead."""
    from fusebench.sweep import selection as S

    rows = []
    unfixed: list[Exception | None] = []  # why no selection may run here (a test split not fixed), checked once

    def test_split_refusal() -> Exception | None:  # the check select_hparams makes before its first trial
        if not unfixed:
            try:
                S.check_test_split_fixed(spec, options)
                unfixed.append(None)
            except RunError as e:
                unfixed.append(e)
        return unfixed[0]

    for o in objectives:
        if not S.selects(spec, o):
            continue
        path = S.selection_path(out, spec.name, o)
        refusal: Exception | None = None
        if path.exists():
            try:
                outcome, _ = S.check_frozen(path, spec, o, options, context)
                action, detail = "reuse", S.selection_line(outcome, path, made_now=False)
            except (ConfigMismatchError, RunError, OSError) as e:
                refusal = e
        elif (refusal := test_split_refusal()) is None:  # else the run refuses it before any trial
            n, todo, resumed, refusal = _trial_refusal(spec, o, out, context, train_ds)
            action = "select"
            detail = (f"{todo} of {n} trial(s) to run"
                      f"{f' ({resumed} resumed from last.pt)' if resumed else ''} "
                      f"({n // len(spec.selection_seeds)} grid point(s) x {len(spec.selection_seeds)} "
                      f"selection seed(s)) under {out / S.TRIALS_DIR / spec.name / o}, then the choice frozen to "
                      f"{path}")
        if refusal is not None:
            if stop:
                raise refusal
            action, detail = "refused", str(refusal)
        rows.append({"status": "plan", "benchmark": spec.name, "objective": o, "selection": True, "action": action,
                     "detail": detail})
    return rows


def render(rows: list[dict[str, Any]]) -> list[str]:
    """The plan as lines: the selections first (they run before any cell), then one line per cell, then a count
    of each action."""
    lines = []
    for r in rows:
        if r.get("selection"):
            lines.append(f"{r['benchmark']} {r['objective']} selection: {r['action']}"
                         + (f": {r['detail']}" if r["detail"] else ""))
    cells = [r for r in rows if not r.get("selection")]
    for r in cells:
        lines.append(f"{r['benchmark']} {r['objective']} seed{r['seed']}: {r['action']}"
                     + (f": {r['detail']}" if r["detail"] else ""))
    counts = {a: sum(1 for r in cells if r["action"] == a) for a in CELL_ACTIONS}
    lines.append(f"plan: {len(cells)} cell(s): " + ", ".join(f"{n} {a}" for a, n in counts.items() if n)
                 + "; nothing was run, no record written")
    return lines


def refused(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The entries a run would stop at."""
    return [r for r in rows if r.get("action") == "refused"]


__all__ = ["CELL_ACTIONS", "SELECTION_ACTIONS", "cell_plan", "check_resumes_fit", "frozen_context", "judge_cell",
           "judge_request", "refused", "render", "selection_plan"]
