"""What a sweep would do, cell by cell, without doing it (sweep layer): ``fusebench run B ... --plan``.

A sweep judges every cell before any training (:func:`judge_cell`): a cell whose ``run.json`` was made with this
configuration, data and code is reused; a cell with a ``last.pt`` of the same is resumed; any other record or
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
run) and ``refused``.
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


def judge_cell(spec: BenchmarkSpec, objective: str, seed: int, out: Path, context: Mapping[str, Any] | None) -> str:
    """What the sweep does with the cell ``objective`` x ``seed`` under ``out``: ``"reuse"`` (a record made with
    this configuration, data and code), ``"resume"`` (a ``last.pt`` of the same) or ``"run"``; a record or a
    checkpoint made otherwise raises (:class:`ConfigMismatchError`, or :class:`RunError` for a record file the
    leaderboard refuses): the sweep stops before any training."""
    cell = CellRequest(spec, objective, seed, out).cell
    if record_there(cell / "run.json", out):
        existing_record(cell / "run.json", spec, objective, dict(context) if context is not None else None, seed)
        return "reuse"
    if (cell / "last.pt").exists():
        check_checkpoint_config(cell / "last.pt", load_checkpoint(cell / "last.pt", mmap=True), spec, objective,
                                dict(context) if context is not None else None)
        return "resume"
    return "run"


def check_resumes_fit(spec: BenchmarkSpec, cells: list[tuple[str, int]], out: Path, context: Mapping[str, Any],
                      train_ds: Any, rows: list[dict[str, Any]] | None = None) -> None:
    """Before any cell (and before the hyper-parameter selection): each cell of ``cells`` (objective, seed) that
    the sweep would resume from its ``last.pt`` (its configuration judged by :func:`judge_cell`) holds module states
    of the names and shapes of the modules the cell builds for ``train_ds``
    (:func:`fusebench.cells.resume_fit.resume_misfit`); else one ConfigError naming the file, the tensor, expected
    vs found shape and what to do. With ``rows`` (``--plan``: :func:`cell_plan`'s entries) the cell's entry is
    refused instead. A cell another process holds is not judged (the sweep skips it)."""
    from fusebench.cells.resume_fit import resume_misfit
    from fusebench.engine.cell import lock_holder
    from fusebench.engine.locks import LOCK
    from fusebench.spec.config import ConfigError

    entries = {(r["objective"], r["seed"]): r for r in rows or () if not r.get("selection")}
    for o, s in dict.fromkeys(cells):
        last = CellRequest(spec, o, s, out).cell / "last.pt"
        row = entries.get((o, s))
        if rows is not None:  # judged already: a cell refused, busy or without last.pt is not resumed
            if row is None or row["action"] != "resume":
                continue
        elif not last.is_file() or lock_holder(last.parent / LOCK)[0]:
            continue
        problem = resume_misfit(last, load_checkpoint(last, mmap=True), spec, o, train_ds, context)
        if problem is None:
            continue
        if row is None:
            raise ConfigError(problem)
        row.update(action="refused", detail=problem)


def cell_plan(spec: BenchmarkSpec, objs: list[str], seeds: list[int], out: Path,
              context: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One entry per cell, in sweep order: ``{"status": "plan", "benchmark", "objective", "seed", "action",
    "detail", "cell"}``, the action one of :data:`CELL_ACTIONS`; a refusal is an entry, not an exception."""
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
    """What the cells of ``objectives`` would get from the selections already frozen under ``out`` (those the run
    would reuse: :func:`fusebench.sweep.selection.check_frozen` passes), as
    :func:`~fusebench.sweep.selection.freeze_selections` returns it, so that the plan judges a finished cell or a
    ``last.pt`` against the chosen point as the run does; a selection still to make or refused adds nothing."""
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


def selection_plan(spec: BenchmarkSpec, objectives: list[str], out: Path, options: Any,
                   context: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One entry per objective of ``objectives`` whose hyper-parameters the sweep selects: ``{"status": "plan",
    "benchmark", "objective", "selection": True, "action", "detail"}``, the action one of
    :data:`SELECTION_ACTIONS`: its frozen file reused (checked as the run checks it), the trials still to run, or
    why the run would refuse the file."""
    from fusebench.sweep import selection as S

    rows = []
    unfixed: list[str | None] = []  # why no selection may run here (a test split not fixed), checked once

    def test_split_refusal() -> str | None:  # the check select_hparams makes before its first trial
        if not unfixed:
            try:
                S.check_test_split_fixed(spec, options)
                unfixed.append(None)
            except RunError as e:
                unfixed.append(str(e))
        return unfixed[0]

    for o in objectives:
        trials = S.trials_of(spec, o, out, context)
        if not trials:
            continue
        path = S.selection_path(out, spec.name, o)
        if path.exists():
            try:
                outcome, _ = S.check_frozen(path, spec, o, options, context)
                action, detail = "reuse", S.selection_line(outcome, path, made_now=False)
            except (ConfigMismatchError, RunError, OSError) as e:
                action, detail = "refused", str(e)
        elif (refusal := test_split_refusal()) is not None:  # the run refuses it before any trial
            action, detail = "refused", refusal
        else:
            todo = [t for t in trials if not (t.cell / "run.json").exists()]
            resumed, refusal = 0, None
            for t in todo:  # a trial with a last.pt continues from it, as the run's trials do (or is refused)
                if (t.cell / "last.pt").exists():
                    try:
                        check_checkpoint_config(t.cell / "last.pt", load_checkpoint(t.cell / "last.pt", mmap=True),
                                                spec, o, dict(context))
                        resumed += 1
                    except (ConfigMismatchError, RunError) as e:
                        refusal = refusal or str(e)
            if refusal is not None:
                action, detail = "refused", refusal
            else:
                action = "select"
                detail = (f"{len(todo)} of {len(trials)} trial(s) to run"
                          f"{f' ({resumed} resumed from last.pt)' if resumed else ''} "
                          f"({len(trials) // len(spec.selection_seeds)} grid point(s) x {len(spec.selection_seeds)} "
                          f"selection seed(s)) under {out / S.TRIALS_DIR / spec.name / o}, then the choice frozen to "
                          f"{path}")
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
           "refused", "render", "selection_plan"]
