"""``fusebench status --out DIR [--benchmark B ...]``: where a sweep stands.

Every cell folder ``DIR/<benchmark>/<objective>/seed<k>/`` is in one state:

* ``done``: ``run.json`` exists, a regular file (the record is final); with ``--benchmark``, a record made by other
  code (objective, encoder or metric versions: a rerun refuses it) is listed with what changed; whether its
  configuration and data are the ones a command would use needs that command's arguments: ``fusebench run ...
  --plan`` judges each cell as the run would (:mod:`fusebench.sweep.plan`);
* ``running``: a ``.lock`` held by a live process (``fusebench run`` is on it now), or one that names no owner
  (unreadable, empty) written less than a minute ago: the run's own rule
  (:func:`fusebench.engine.cell.lock_holder`), which skips such a cell; or the cell's SLURM job is running and has
  not taken the lock yet (it is starting);
* ``failed``: ``failed.json`` exists and no ``run.json`` (rerunning the sweep retries it);
* ``interrupted``: a ``last.pt`` checkpoint and no live lock: "resumable from last.pt" when the run's own checks
  pass it (rerunning resumes it where it stopped): it loads safely (``weights_only=True``) and holds what resuming
  reads (:func:`fusebench.engine.cell.load_checkpoint`), and with ``--benchmark`` it was written under the spec's
  default configuration, by the code here, within its epochs (:func:`fusebench.engine.cell.check_checkpoint_config`;
  ``fusebench run ... --plan`` judges it with the command's own --set and --data-root) and, for a checkpoint
  written on synthetic data, its tensors have the names and shapes of the modules the cell builds
  (:func:`fusebench.cells.resume_fit.resume_misfit`; one written on real data is "resumable from last.pt if its
  tensors fit ...": status does not read the data the model is built for, ``--plan`` does; of a benchmark whose
  views the run names from its data file, a multi-view ``.mat``, it is "resumable from last.pt if it was written
  under the configuration its data gives ...": the checkpoint's configuration is compared with what the data
  decides taken from the checkpoint, and that part is judged by ``--plan``); else
  "not resumable: " and the message the run would stop at;
* ``pending``: nothing yet; with ``--benchmark``, every cell of the benchmark's default sweep
  (objectives x seeds of its spec) without a folder counts as pending too;
* ``unreadable``: the cell breaks the rule of what counts as a record file, which the leaderboard
  shares (:func:`fusebench.records.check_record_file`): its ``run.json`` is a folder, a symbolic
  link or a special file, or the cell folder (or a folder above it, below ``--out``) is a symbolic
  link. The leaderboard refuses such a cell; the detail says why. So is a ``run.json`` a rerun refuses: not valid
  JSON, not the record of its cell (a JSON object naming the benchmark, objective and seed of its folders), or one
  the leaderboard's validator refuses (the detail is its message: the file, the field, what was expected).
  Shown only when there is one.

The lock (``.lock``) holds JSON: the owner's pid, host and, inside a SLURM job, the job id. Whether
its owner still lives is judged by the pid only on the host that wrote it; a lock written on another
host by a SLURM job is live while ``squeue`` lists that job as running, and one written on another
host outside SLURM cannot be checked from here, so it is taken as live. A cell submitted with
``--launcher slurm`` also has ``.launcher.json`` (the job id and its log files): a queued job is
named in the pending / interrupted detail, a running one that has not locked the cell yet counts as
running (docs/cluster.md).

Hidden folders (``.selection``: hyper-parameter trials, ``.submitit``: job files) are not cells and
are skipped; the hyper-parameter selection of a benchmark is summarised in one line: the trial records under
``DIR/.selection/<benchmark>/`` and the objectives whose choice is frozen in ``DIR/<benchmark>/_selection/``
(a sweep runs every trial before its first evaluation cell, :mod:`fusebench.sweep.selection`).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

from fusebench.io import shown_path, shown_text
from fusebench.records import RecordError, check_record_file
from fusebench.registry import ID_RULE, valid_id
from fusebench.engine.locks import GONE, LOCK, SLURM_ACTIVE, UNKNOWN, SlurmQueue, queued_job, slurm_jobs
from fusebench.runtime.terminal_help import Once, Parser

STATES = ("done", "running", "failed", "interrupted", "pending")
UNREADABLE = "unreadable"  # a cell the leaderboard refuses (see the module docstring); listed only when present
_SEED = re.compile(r"^seed(\d+)$")


def cell_state(cell: Path, queue: SlurmQueue | None = None, root: Path | None = None,
               spec: Any = None) -> tuple[str, str]:
    """(state, detail) of one cell folder; ``root``: the runs folder it lies in (``--out``), whose
    folders down to the cell must not be symbolic links (default: only the cell's own run.json is
    judged); ``spec``: its benchmark's spec (``--benchmark``), by which its ``last.pt`` is judged too."""
    state, detail, _ = _read_cell(cell, queue, root, spec)
    return state, detail


def _read_cell(cell: Path, queue: SlurmQueue | None, root: Path | None,
               spec: Any = None) -> tuple[str, str, dict[str, Any] | None]:
    """:func:`cell_state`'s (state, detail) and, for a done cell, its record as read (None otherwise), so that
    ``--benchmark`` judges the record's code versions without reading run.json again."""
    try:
        if check_record_file(cell / "run.json", root if root is not None else cell):
            return _done_or_unreadable(cell / "run.json")
    except RecordError as e:  # the leaderboard refuses it for the same reason
        return UNREADABLE, str(e), None
    from fusebench.engine.cell import lock_detail, lock_holder

    held, holder = lock_holder(cell / LOCK, queue)  # the run's own rule (CellLock)
    if held:
        return "running", lock_detail(holder), None
    job = queued_job(cell, queue)
    note = ""
    if job is not None:
        marker, state, node = job
        failed = cell / "failed.json"  # written by this job (it is ending) rather than by an earlier run
        failed_now = failed.is_file() and failed.stat().st_mtime >= float(marker.get("submitted", 0))
        if state in SLURM_ACTIVE and not failed_now:
            return "running", f"starting on {node or '?'} (slurm job {marker['job_id']})", None
        if state not in (GONE, UNKNOWN, *SLURM_ACTIVE):
            note = f"queued: slurm job {marker['job_id']} ({state})"
        elif state == GONE:
            note = f"slurm job {marker['job_id']} ended without a record (log: {marker.get('stderr', '?')})"
    if (cell / "failed.json").is_file():
        try:
            error = str(json.loads((cell / "failed.json").read_text(encoding="utf-8")).get("error", ""))
        except (OSError, ValueError, AttributeError, RecursionError):
            error = "failed.json unreadable"
        return "failed", error.splitlines()[0] if error else "", None
    if (cell / "last.pt").is_file():
        return "interrupted", _resumable(cell / "last.pt", spec) + (f"; {note}" if note else ""), None
    return "pending", note, None


def _resumable(last: Path, spec: Any) -> str:
    """``"resumable from last.pt"`` when the run's own checks pass ``last``: it loads safely and holds what resuming
    reads (:func:`fusebench.engine.cell.load_checkpoint`) and, with the benchmark's ``spec``, was written under its
    default configuration, by the code here, within its epochs (:func:`fusebench.engine.cell.check_checkpoint_config`:
    the data it read is judged by ``fusebench run ... --plan`` alone, which knows the command's --data-root and
    --set) and its tensors fit the cell's modules (:func:`_fit_of`); else ``"not resumable: "`` and the run's
    message."""
    from fusebench.engine.cell import check_checkpoint_config, load_checkpoint
    from fusebench.engine.loop import RunError

    try:
        ckpt = load_checkpoint(last, mmap=True)  # judged, not computed with: its weights are not read
        if spec is not None and _config_from_data(spec):  # judged with what the data gives taken from the checkpoint
            check_checkpoint_config(last, ckpt, _as_its_data_gave(spec, ckpt.get("config")), last.parents[1].name)
            return (f"resumable from last.pt if it was written under the configuration its data gives ({spec.name}'s "
                    f"views, and what follows from them, come from its data file, which status does not read: "
                    f"fusebench run ... --plan judges it)")
        if spec is not None:
            check_checkpoint_config(last, ckpt, spec, last.parents[1].name)
            return _fit_of(last, ckpt, spec)
    except RunError as e:
        return f"not resumable: {e}"
    return "resumable from last.pt"


def _config_from_data(spec: Any) -> bool:
    """Whether the run completes ``spec``'s configuration from the data it reads (its views:
    :func:`fusebench.sweep.runner.views_from_data`, and the PCA widths and batch caps that follow from them), so that
    a checkpoint's configuration cannot be judged whole without the data."""
    from fusebench.sweep.runner import views_from_data

    return views_from_data(spec)


def _as_its_data_gave(spec: Any, saved: Any) -> Any:
    """A copy of ``spec`` (one of :func:`_config_from_data`) with the values the run takes from the data file
    (:func:`fusebench.sweep.runner.resolve_views`, :func:`~fusebench.sweep.runner.resolve_width_grid`,
    :func:`~fusebench.sweep.runner.cap_batch_sizes`) as the checkpoint's saved configuration ``saved`` states them:
    its views, the PCA widths of an ``auto`` grid, a pretraining batch size below the spec's (a cap). The
    checkpoint's configuration is then compared with it key by key like any other, so that a checkpoint of another
    benchmark, objective or setting is refused and one that differs only in what the data decides is left to
    ``--plan``, which reads the data."""
    import copy

    from fusebench.components.protocols import WIDTH_OPTION, WIDTHS_AUTO

    filled = copy.deepcopy(spec)
    if not isinstance(saved, dict):
        return filled
    part = lambda key: saved.get(key) if isinstance(saved.get(key), dict) else {}  # noqa: E731
    views = part("dataset").get("modalities")
    if isinstance(views, list) and views and all(isinstance(v, str) for v in views):
        filled.dataset.modalities = list(views)
    for key, option in (filled.options or {}).items():
        saved_option = part("options").get(key)
        widths = saved_option.get(WIDTH_OPTION) if isinstance(saved_option, dict) else None
        if isinstance(option, dict) and option.get(WIDTH_OPTION) == WIDTHS_AUTO and isinstance(widths, list):
            filled.options[key] = {**option, WIDTH_OPTION: widths}
    pt, saved_pt = filled.pretrain, part("pretrain")
    capped = lambda b, now: type(b) is int and 2 <= b < now  # noqa: E731
    if capped(saved_pt.get("batch_size"), pt.batch_size):
        pt.batch_size = saved_pt["batch_size"]
    own = saved_pt.get("objective_batch_size") if isinstance(saved_pt.get("objective_batch_size"), dict) else {}
    for o, b in sorted(pt.objective_batch_size.items()):
        if capped(own.get(o), b):
            pt.objective_batch_size[o] = own[o]
    return filled


def _fit_of(last: Path, ckpt: dict[str, Any], spec: Any) -> str:
    """For a checkpoint whose configuration ``spec`` passes: whether its tensors fit the modules the cell builds
    (:func:`fusebench.cells.resume_fit.resume_misfit`, the run's check), judged where the model can be built without
    the user's data: a checkpoint written on synthetic data (``data_fingerprint`` None) or of a synthetic-only
    benchmark, whose input sizes and class count come from the spec's synthetic twin. One written on real data is
    said resumable on that condition: ``fusebench run ... --plan``, given the data root, judges it."""
    from fusebench.pipelines import pipeline_of
    from fusebench.spec.config import ConfigError

    pipeline = pipeline_of(spec)
    if not (pipeline.builds_encoder and pipeline.reads_dataset):
        return "resumable from last.pt"
    if not (spec.dataset.synthetic_only or ("data_fingerprint" in ckpt and ckpt["data_fingerprint"] is None)):
        return ("resumable from last.pt if its tensors fit the model built for its data (written on real data, "
                "which status does not read: fusebench run ... --plan judges it)")
    from fusebench.cells.resume_fit import resume_misfit
    from fusebench.engine.data import build_datasets

    seed = _SEED.fullmatch(last.parent.name)
    try:
        train = build_datasets(spec, True, None, int(seed.group(1)) if seed else 0, roles=("train",))["train"]
        problem = resume_misfit(last, ckpt, spec, last.parents[1].name, train)
    except ConfigError as e:
        return f"not resumable: {e}"
    return f"not resumable: {problem}" if problem else "resumable from last.pt"


def _done_or_unreadable(run_json: Path) -> tuple[str, str, dict[str, Any] | None]:
    """``("done", "", record)`` for a record file that reads as a run record of its own cell (a JSON object naming
    the benchmark, objective and seed of the folders it lies in) that the leaderboard reads (its validator:
    :func:`fusebench.records.cell_file.valid_record`), else ``(UNREADABLE, why, None)``: a rerun refuses such a file
    (:func:`fusebench.records.cell_file.existing_record`), so it is not counted as done."""
    from fusebench.engine.loop import RunError
    from fusebench.records import read_record_json
    from fusebench.records.cell_file import valid_record

    try:
        rec = read_record_json(run_json)  # the reader of the leaderboard and of a rerun
    except RecordError as e:
        return UNREADABLE, f"{e}; a rerun refuses it: move it away", None
    seed = _SEED.fullmatch(run_json.parent.name)
    want = {"benchmark": run_json.parents[2].name, "objective": run_json.parents[1].name,
            "seed": int(seed.group(1)) if seed else None}
    got = {k: rec.get(k) for k in want}
    if got != want:
        return UNREADABLE, (f"{run_json} is not the run record of its cell ({got}, expected {want}); a rerun "
                            "refuses it: move it away"), None
    try:
        valid_record(run_json, rec)
    except RunError as e:
        return UNREADABLE, str(e), None
    return "done", "", rec


def collect(out: Path, benchmarks: list[str] | None = None) -> dict[str, dict[tuple[str, int], tuple[str, str]]]:
    """``{benchmark: {(objective, seed): (state, detail)}}`` for the cells under ``out`` (and, for
    the named ``benchmarks``, the pending cells of their default sweep)."""
    found: dict[str, dict[tuple[str, int], tuple[str, str]]] = {}
    queue = SlurmQueue()
    if benchmarks:
        names = list(benchmarks)
        bad = [b for b in names if not valid_id(b)]  # each is a folder under ``out``: no path escapes
        if bad:
            raise ValueError(f"--benchmark {bad[0]!r} is not a benchmark id ({ID_RULE})")
    elif out.is_dir():
        names = sorted(p.name for p in out.iterdir() if p.is_dir() and not p.name.startswith("."))
        # a benchmark's own folder given as --out (<out>/<benchmark>/<objective>/seedN one level too deep): its
        # subfolders hold seed folders, which would be read as objectives without cells
        inside = [n for n in names if _holds_cells(out / n, depth=1)]
        if inside:
            raise ValueError(f"--out {out} is the folder of one benchmark ({out.name}: its {inside[0]}/ holds seed "
                             f"folders); give the folder above it, --out {out.parent} (and --benchmark {out.name})")
        # a folder above several runs folders (<out>/<runs>/<benchmark>/<objective>/seedN one level too high): each
        # would be listed as a benchmark of 0 cells
        runs = [n for n in names if _holds_cells(out / n, depth=3)]
        if runs:
            shown = ", ".join(runs[:5]) + (f" and {len(runs) - 5} more" if len(runs) > 5 else "")
            raise ValueError(f"--out {out} holds folders of run records, not benchmarks ({shown}: each holds "
                             f"<benchmark>/<objective>/seed<k>/); give one of them, e.g. --out {out / runs[0]}")
    else:
        names = []
    for bench in names:
        cells: dict[tuple[str, int], tuple[str, str]] = {}
        records: dict[tuple[str, int], dict[str, Any]] = {}  # the done cells' records (with --benchmark)
        spec = None
        if benchmarks:  # its spec judges the done cells' records and the interrupted cells' checkpoints
            from fusebench import benchmarks as B

            spec = B.load(bench)
        root = out / bench
        if root.is_dir():
            folders = {}
            for obj_dir in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
                for seed_dir in sorted(p for p in obj_dir.iterdir() if p.is_dir()):
                    m = _SEED.fullmatch(seed_dir.name)
                    if m:
                        folders[(obj_dir.name, int(m.group(1)))] = seed_dir
            queue.prefetch(slurm_jobs(list(folders.values())))
            for key, seed_dir in folders.items():
                state, detail, rec = _read_cell(seed_dir, queue, out, spec)
                cells[key] = (state, detail)
                if rec is not None and benchmarks:  # judged below, from the record read here
                    records[key] = rec
        if spec is not None:  # the default sweep of the spec: cells without a folder are pending
            for key, rec in records.items():
                cells[key] = ("done", _made_by_other_code(rec, spec, key[0]))
            for o in spec.objectives or [spec.pretrain.objective]:
                for s in spec.seeds:
                    cells.setdefault((o, s), ("pending", ""))
        found[bench] = cells
    return found


def _holds_cells(folder: Path, depth: int) -> bool:
    """Whether ``folder`` holds a seed folder ``depth`` levels down (hidden folders skipped): depth 1 is a
    benchmark's folder (``<objective>/seed<k>``), depth 3 a folder of run records (``<benchmark>/<objective>/seed<k>``)."""
    level = [folder]
    for _ in range(depth - 1):
        level = [q for p in level for q in p.iterdir() if q.is_dir() and not q.name.startswith(".")]
    return any(_SEED.fullmatch(q.name) and q.is_dir() for p in level for q in p.iterdir())


def _made_by_other_code(rec: dict[str, Any], spec: Any, objective: str) -> str:
    """For a done cell of a benchmark whose spec is known, given its record (``run.json`` as read): "" when the record
    was made by the objective, encoder and metric versions the code computes now, else what changed (a rerun refuses
    the record: :func:`fusebench.components.identity.code_changes`). A row of pretrained weights (its version is its
    file's hash, named on the command line) is not judged here."""
    from fusebench.components.identity import code_changes
    from fusebench.records.cell_file import record_versions

    if rec.get("encoder_weights") or not isinstance(rec.get("schema_version", 1), int):
        return ""
    changed = code_changes(spec, objective, *record_versions(rec))
    return (f"made by other code ({'; '.join(changed)}): a rerun refuses it; move the cell away to rerun it"
            if changed else "")


def selection_progress(out: Path, bench: str) -> tuple[Path, int, list[str]] | None:
    """(the trials' folder ``out/.selection/<bench>``, the trial records in it, the objectives with a frozen choice
    in ``out/<bench>/_selection``), or None when the benchmark has neither (no grid, or nothing run yet)."""
    from fusebench.sweep.selection import SELECTION_DIR, TRIALS_DIR

    trials_dir, frozen_dir = out / TRIALS_DIR / bench, out / bench / SELECTION_DIR
    if not trials_dir.is_dir() and not frozen_dir.is_dir():
        return None
    trials = sum(1 for p in trials_dir.rglob("run.json") if p.is_file()) if trials_dir.is_dir() else 0
    frozen = sorted(p.stem for p in frozen_dir.glob("*.json") if p.is_file()) if frozen_dir.is_dir() else []
    return trials_dir, trials, frozen


def render(found: dict[str, dict[tuple[str, int], tuple[str, str]]], out: Path | None = None) -> str:
    """The table of :func:`collect`'s states per benchmark; with ``out``, each benchmark's selection line too."""
    lines = []
    for bench, cells in found.items():
        states = STATES + ((UNREADABLE,) if any(v[0] == UNREADABLE for v in cells.values()) else ())
        totals = {st: sum(1 for v in cells.values() if v[0] == st) for st in states}
        # folder names and a failed cell's error are text of the runs folder: a control character escaped
        lines.append(f"{shown_text(bench)}: " + ", ".join(f"{totals[st]} {st}" for st in states)
                     + f" ({len(cells)} cells)")
        sel = selection_progress(out, bench) if out is not None else None
        if sel is not None:
            trials_dir, trials, frozen = sel
            lines.append(f"  selection: {trials} trial record(s) under {shown_path(trials_dir)}; "
                         f"{len(frozen)} objective(s) with a frozen choice"
                         + (f" ({', '.join(map(shown_text, frozen))})" if frozen else ""))
        objs = sorted({o for o, _ in cells})
        width = max([len(shown_text(o)) for o in objs] + [9])
        lines.append(f"  {'objective':<{width}}  " + "  ".join(f"{st:>11}" for st in states))
        for o in objs:
            counts = [sum(1 for (oo, _), v in cells.items() if oo == o and v[0] == st) for st in states]
            lines.append(f"  {shown_text(o):<{width}}  " + "  ".join(f"{c:>11}" for c in counts))
        for (o, s), (st, detail) in sorted(cells.items()):
            if st in ("running", "failed", "interrupted", UNREADABLE) or (st in ("pending", "done") and detail):
                lines.append(f"  {st}: {shown_text(o)}/seed{s}" + (f": {shown_text(detail)}" if detail else ""))
    return "\n".join(lines) if lines else "no cells"


def main(argv: list[str]) -> int:
    p = Parser(prog="fusebench status", description=__doc__)
    p.add_argument("--out", default="runs", help="folder of run records (default runs/)")
    p.add_argument("--benchmark", nargs="+", action=Once, default=None,
                   help="only these benchmarks; their default sweep's missing cells count as pending")
    p.add_argument("--json", action="store_true", help="print JSON: {benchmark: {objective: {seed: state}}}")
    ns = p.parse_args(argv)
    out = Path(ns.out)
    if out.exists() and not out.is_dir():  # with --benchmark too: every cell would be shown pending
        print(f"fusebench status: --out {shown_path(out)} is a file; expected the folder of run records",
              file=sys.stderr)
        return 2
    if not out.is_dir() and not ns.benchmark:
        print(f"fusebench status: --out {shown_path(out)} is not a folder of run records", file=sys.stderr)
        return 2
    try:
        found = collect(out, ns.benchmark)
    except (KeyError, ValueError) as e:
        print(f"fusebench status: {e}", file=sys.stderr)
        return 2
    if ns.json:
        data: dict[str, Any] = {}
        for bench, cells in found.items():
            for (o, s), (st, detail) in sorted(cells.items()):
                data.setdefault(bench, {}).setdefault(o, {})[str(s)] = {"state": st, "detail": detail}
        print(json.dumps(data, indent=2, sort_keys=True))
    else:
        print(render(found, out))
    return 0
