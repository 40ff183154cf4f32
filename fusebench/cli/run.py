"""``fusebench run NAME``: run a benchmark by name (see ``fusebench run --help``)."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from fusebench.io import shown_path
from fusebench.runtime.terminal_help import Keyed, Once, Parser

if TYPE_CHECKING:
    from fusebench.spec.request import SweepRequest

EXAMPLES = """examples:
  fusebench run quickstart
  fusebench run nyuv2-seg --objective m3g infonce_pwe --seeds 0 1 2 --data-root /data/nyuv2
  fusebench run mosi-sentiment --synthetic --set pretrain.epochs=2 --out runs/
  fusebench run nyuv2-seg --data-root /data/nyuv2 --device cuda --precision bf16-mixed   # docs/gpu.md
  fusebench run nyuv2-seg --data-root /data/nyuv2 --device cuda --num-workers 8   # batches fetched by 8 processes
  torchrun --nproc-per-node 2 -m fusebench run quickstart --objective m3g   # DistributedDataParallel
  fusebench run mv-ngs --data-root DIR --workers 2        # two cells at a time (each its share of the CPUs)
  fusebench run quickstart --threads 2                      # 2 torch threads per cell (default: 1 for small models)
  fusebench run quickstart --logger tensorboard csv                        # then: tensorboard --logdir runs/
  fusebench run quickstart --encoder-weights mine=enc.pt --objective mine  # your encoder as the row 'mine'
  fusebench run mv-ngs --data-root DIR --seeds 0 1 2 --plan   # what each cell would do (reuse / run / refused)
  fusebench run mv-ngs --data-root DIR --launcher slurm --partition gpu --gpus-per-job 1 --time-min 120
  fusebench run mv-ngs --data-root DIR --launcher slurm --sbatch qos=normal --sbatch mem=16G --no-wait

launchers (--launcher; docs/cluster.md):
  local            this process, or --workers N local processes (the default)
  slurm            one SLURM job per (objective, seed) cell, a job array submitted through submitit
                   (pip install -e .[slurm]); a preempted or timed-out job is requeued and resumes
                   from last.pt; rerun the same command to finish cells whose jobs were cancelled
  submitit_local   the same path through submitit's LocalExecutor (local processes, no scheduler)
"""


def _sbatch_option(text: str) -> tuple[str, object]:
    """``--sbatch KEY=VALUE`` (or a bare ``KEY`` for a flag such as ``exclusive``)."""
    key, eq, value = text.partition("=")
    key = key.strip().lstrip("-")
    if not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE (an sbatch option without its dashes), got {text!r}")
    return key, (value if eq else True)


def count_type(flag: str):
    """The argparse type of the counted option ``flag``: its text as an integer, checked by the request's rule
    (:func:`fusebench.spec.request.check_count`), so the usage line names the same problem a Python caller gets."""

    def parse(text: str) -> int:
        from fusebench.spec.request import check_count
        from fusebench.typed import ConfigError

        try:
            value: object = int(text)
        except ValueError:
            value = text
        try:
            return check_count(value, flag)
        except ConfigError as e:
            raise argparse.ArgumentTypeError(str(e).removeprefix(f"{flag}: ")) from None

    return parse


def _weights_option(text: str) -> tuple[str, str]:
    """``--encoder-weights NAME=PATH``."""
    name, eq, path = text.partition("=")
    if not eq or not name.strip() or not path.strip():
        raise argparse.ArgumentTypeError(f"expected NAME=PATH (the row's name and its weights file), got {text!r}")
    return name.strip(), path.strip()


def parser() -> argparse.ArgumentParser:
    """``fusebench run``'s arguments (no torch imported: ``--help`` stays fast)."""
    from fusebench.engine.trackers import TRACKERS

    p = Parser(prog="fusebench run", description=__doc__, epilog=EXAMPLES)
    p.add_argument("benchmark", help="benchmark id (fusebench list benchmarks)")
    p.add_argument("--objective", nargs="+", action=Once, default=None,
                   help="objective id(s); default: the benchmark's sweep")
    p.add_argument("--seeds", nargs="+", action=Once, type=int, default=None, help="seeds (default: the benchmark's)")
    p.add_argument("--data-root", default=None, help="folder with the dataset's official files")
    p.add_argument("--synthetic", action="store_true", help="run on the dataset's synthetic twin at tiny size")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N | mps")
    p.add_argument("--precision", default=None, metavar="P",
                   help="precision of encoders and heads: 32 (default: float32, TF32 off) | tf32 (TF32 matrix "
                        "units on CUDA) | bf16-mixed | 16-mixed (autocast; 16-mixed with a gradient scaler). "
                        "Objectives and metrics always compute in float32 or wider. Same as --set precision=P; "
                        "part of the config hash when not 32 (docs/gpu.md)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a spec value by dotted key, e.g. pretrain.epochs=3 (repeatable, each key once)")
    p.add_argument("--out", default="runs", help="folder of run records (default runs/)")
    p.add_argument("--encoder-weights", dest="encoder_weights", action="append", default=[], type=_weights_option,
                   metavar="NAME=PATH",
                   help="evaluate pretrained encoder weights (safetensors, or a torch state_dict / a run's best.pt, "
                        "read with weights_only=True) under the board's downstream protocol as the row NAME, "
                        "besides the objectives run (--objective NAME: that row alone); the file must fit the "
                        "benchmark's encoder exactly (repeatable, each NAME once; docs/benchmarks.md)")
    p.add_argument("--resume", action="store_true",
                   help="accepted for older command lines; it changes nothing: a run always continues each cell "
                        "that has a last.pt from it (one made with another configuration, data or code is refused, "
                        "never overwritten); to run a cell afresh, move its folder away or use another --out")
    p.add_argument("--plan", action="store_true",
                   help="check everything a run checks and print what it would do with each cell (reuse its "
                        "record, resume from last.pt, run it, or refuse it and why) and each hyper-parameter "
                        "selection; runs nothing and writes no record (a synthetic twin the cells need is generated, "
                        "and said; exit 2 where the run would refuse)")
    p.add_argument("--leaderboard", default=None, metavar="DIR",
                   help="regenerate the boards into DIR after the sweep (markdown, CSV and JSON, plus html / tex where "
                        "DIR already holds pages of that format, so none is left stale; docs/leaderboards.md)")
    p.add_argument("--workers", type=count_type("--workers"), default=1, metavar="N",
                   help="run the cells in N local processes (default 1: one after another); they share the CPUs "
                        "this process may use (--threads)")
    p.add_argument("--threads", type=count_type("--threads"), default=None, metavar="N",
                   help="torch intra-op threads of each cell (default: $OMP_NUM_THREADS, else 1 for a small model "
                        "and CPUs allowed // cells at once for a large one: ESANet, PointNet++, VoteNet; the CPUs "
                        "allowed respect affinity, cgroup quota and SLURM_CPUS_PER_TASK). Results do not depend on "
                        "it (docs/cluster.md, 'Threads of a cell')")
    p.add_argument("--num-workers", type=count_type("--num-workers"), default=None, metavar="N",
                   help="DataLoader worker processes fetching each cell's batches (not --workers, which runs "
                        "cells side by side); default: the spec's loader.num_workers, else on CUDA the cores this "
                        "process may use // cells at once - 1 (0 for data held in memory) and 0 (this process) on "
                        "the CPU. The batches are the same whatever N is, so it is not part of the config hash "
                        "(docs/gpu.md)")
    p.add_argument("--logger", dest="loggers", nargs="+", action=Once, default=None, choices=sorted(TRACKERS),
                   help="experiment trackers for every cell, one or more of csv | tensorboard | mlflow "
                        "(docs/trackers.md; tensorboard and mlflow need: pip install -e .[trackers])")
    p.add_argument("--mlflow-uri", default=None, metavar="URI",
                   help="MLflow tracking URI for --logger mlflow (default: $MLFLOW_TRACKING_URI, else "
                        "file:<out>/.mlruns)")
    # no choices= here: the launcher registry imports torch, and --help must not (issue #32); an unknown id is
    # refused by fusebench.sweep.launchers.build before anything runs, listing the known ones
    cluster = p.add_argument_group("launchers", "where the cells run (docs/cluster.md)")
    cluster.add_argument("--launcher", default="local", metavar="ID",
                         help="local (default: this process, or --workers N processes) | slurm (one SLURM "
                              "job per cell through submitit) | submitit_local (submitit's local executor)")
    cluster.add_argument("--partition", default=None, help="slurm: the partition")
    cluster.add_argument("--account", default=None, help="slurm: the account to charge")
    cluster.add_argument("--gpus-per-job", type=int, default=None, metavar="N", help="slurm: GPUs of each cell's job")
    cluster.add_argument("--cpus-per-job", type=int, default=None, metavar="N", help="slurm: CPUs of each cell's job")
    cluster.add_argument("--time-min", type=int, default=None, metavar="MIN",
                         help="time limit of each job in minutes (default 60); a cell that reaches it is "
                              "requeued and resumes from last.pt (up to 3 times)")
    cluster.add_argument("--sbatch", action=Keyed, default=[], type=_sbatch_option, metavar="KEY=VALUE",
                         help="any other sbatch option, e.g. --sbatch qos=high --sbatch mem=16G "
                              "--sbatch constraint=a100 (repeatable, each KEY once)")
    cluster.add_argument("--array-parallelism", type=int, default=None, metavar="N",
                         help="slurm: at most N cells running at once")
    cluster.add_argument("--no-wait", dest="wait", action="store_false",
                         help="slurm / submitit_local: submit the jobs and return (then: fusebench status, "
                              "fusebench leaderboard)")
    bars = p.add_mutually_exclusive_group()
    bars.add_argument("--progress", dest="progress", action="store_true", default=True,
                      help="show progress (the default): bars on a terminal, else (a log file, a SLURM job, CI) a "
                           "line per cell start and end and one per phase every $FUSEBENCH_LOG_EVERY seconds "
                           "(default 30; 0: every step)")
    bars.add_argument("--no-progress", "--quiet", dest="progress", action="store_false",
                      help="no progress output at all")
    return p


def request_of(ns: argparse.Namespace) -> "SweepRequest":
    """The parsed arguments as one typed :class:`~fusebench.spec.request.SweepRequest` (what ``fusebench.run``
    builds from its keywords): every option checked before anything runs."""
    from fusebench.spec.request import SweepRequest

    return SweepRequest.of(
        ns.benchmark, objectives=ns.objective, seeds=ns.seeds, out=ns.out, overrides=ns.overrides,
        precision=ns.precision, synthetic=ns.synthetic, data_root=ns.data_root, device=ns.device,
        resume=ns.resume, progress=ns.progress, workers=ns.workers, threads=ns.threads,
        num_workers=ns.num_workers, loggers=ns.loggers or (), mlflow_uri=ns.mlflow_uri, launcher=ns.launcher,
        launcher_options=_launcher_options(ns), encoder_weights=_weights_rows(ns.encoder_weights), plan=ns.plan)


def main(argv: list[str]) -> int:
    from fusebench.registry import UnknownNameError
    from fusebench.spec.config import ConfigError

    ns = parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    from fusebench.datasets.base import DatasetNotFoundError
    from fusebench.runtime import distributed
    from fusebench.runtime.interrupt import Terminated, sigterm_unwinds
    from fusebench.engine.loop import RunError
    from fusebench.sweep.runner import run
    from fusebench.datasets.base import TWINS_WRITTEN

    twins_before = len(TWINS_WRITTEN)  # the synthetic twins this command generates: said at its end
    board_lines = None  # the board files written (--leaderboard), said at the end
    try:
        request = request_of(ns)  # one typed request (fusebench.spec.request.SweepRequest)
        if ns.leaderboard is not None:  # checked before any cell, as --out is: not found a file after the sweep
            board_dir = Path(ns.leaderboard)
            if board_dir.exists() and not board_dir.is_dir():
                raise ConfigError(f"--leaderboard {board_dir}: exists and is not a folder; name a folder for the "
                                  f"boards")
        if request.plan:  # what the sweep would do, cell by cell; nothing runs (fusebench.sweep.plan)
            from fusebench.sweep import plan

            rows = run(request)
            print("\n".join(plan.render(rows) + _twin_lines(TWINS_WRITTEN[twins_before:])), flush=True)
            stops = plan.refused(rows)
            if stops:
                print(f"fusebench run: the run would stop before any cell: {len(stops)} refused (above)",
                      file=sys.stderr)
            return 2 if stops else 0
        # SIGTERM stops the sweep as Ctrl-C does: locks released, the finished cells' lines printed (below)
        with sigterm_unwinds(), distributed.maybe_init(request.device):
            records = run(request)
        # after maybe_init's barrier: every rank is done; one process writes the boards
        if ns.leaderboard is not None and int(os.environ.get("RANK", "0")) == 0:
            board_lines = _regenerate_boards(records, ns.out, ns.leaderboard)
    except (UnknownNameError, ConfigError, DatasetNotFoundError, RunError, ValueError) as e:
        print(f"fusebench run: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM (Terminated): the cells that finished, then the exit status
        done = getattr(e, "finished", [])
        for r in done:
            print(_result_line(r), flush=True)
        what = "terminated (SIGTERM)" if isinstance(e, Terminated) else "interrupted"
        if not done and not Path(ns.out).is_dir():  # stopped before the folder was made (or it was taken back)
            print(f"fusebench run: {what} before any cell started; nothing was written ({shown_path(ns.out)} was not "
                  "created); rerun the same command to run the sweep", file=sys.stderr, flush=True)
        else:
            print(f"fusebench run: {what}; {len(done)} cell(s) have a record under {shown_path(ns.out)}; rerun the "
                  "same command to run the rest (a cell with last.pt resumes from it)", file=sys.stderr, flush=True)
        return 128 + int(signal.SIGTERM if isinstance(e, Terminated) else signal.SIGINT)
    failed = [r for r in records if r.get("status") == "failed"]
    interrupted = [r for r in records if r.get("status") == "interrupted"]
    submitted = [r for r in records if r.get("status") == "submitted"]
    for r in records:
        if r.get("status") == "submitted":
            print(f"{r['benchmark']} {r['objective']} seed{r['seed']}: submitted, {r['launcher']} job {r['job_id']}")
        if r.get("status") in ("failed", "worker", "skipped", "interrupted", "submitted"):
            continue
        print(_result_line(r))
    if submitted:
        print(f"{len(submitted)} job(s) submitted; follow them with: fusebench status --out {shown_path(ns.out)}",
              file=sys.stderr)
    if failed:
        print(f"{len(failed)} cell(s) failed; see failed.json in their folders", file=sys.stderr)
    if interrupted:
        print(f"{len(interrupted)} cell(s) interrupted (their jobs ended without a result); rerun the same "
              "command to finish them (each resumes from its last.pt)", file=sys.stderr)
    if int(os.environ.get("RANK", "0")) == 0:  # where and what (issue #32): records, boards, a compact table
        from fusebench.cli.run_summary import closing_lines, tracker_lines

        logs = tracker_lines(ns.loggers, ns.out, ns.mlflow_uri) + _twin_lines(TWINS_WRITTEN[twins_before:])
        print("\n".join(closing_lines(records, ns.out, board_lines, logs)), flush=True)
    return 1 if failed or interrupted else 0


def _weights_rows(given: list[tuple[str, str]]) -> dict[str, str] | None:
    """``--encoder-weights`` as ``{name: path}``; a name given twice is refused."""
    from fusebench.spec.config import ConfigError

    out: dict[str, str] = {}
    for name, path in given:
        if name in out:
            raise ConfigError(f"--encoder-weights {name} given twice ({name}={out[name]}, then {name}={path}): one "
                              f"row has one weights file; give each row once, another name for another file")
        out[name] = path
    return out or None


def _twin_lines(written: list[Path]) -> list[str]:
    """A line per synthetic twin the command generated (under ``--data-root``, else the cache; ``--plan`` too,
    which needs the data to judge the cells): where that output went."""
    return [f"data: synthetic twin written to {shown_path(p)} (made once; later runs and plans reuse it)"
            for p in written]


def _result_line(r: dict) -> str:
    """``<benchmark> <objective> seed<k>: metric=value, ...`` of a finished cell's record."""
    from fusebench.metrics import values_of

    shown = ", ".join(f"{k}={v:.4f}" if isinstance(v, (int, float)) else f"{k}={v}"
                      for k, v in sorted(values_of(r.get("metrics")).items()))
    return f"{r['benchmark']} {r['objective']} seed{r['seed']}: {shown}"


def _launcher_options(ns: argparse.Namespace) -> dict[str, object]:
    """The launcher's options from the flags given; a scheduler flag needs a scheduler launcher."""
    from fusebench.spec.config import ConfigError

    given = {name: getattr(ns, name) for name in ("partition", "account", "gpus_per_job", "cpus_per_job", "time_min",
                                                  "array_parallelism") if getattr(ns, name) is not None}
    if ns.sbatch:
        given["sbatch"] = dict(ns.sbatch)
    if not ns.wait:
        given["wait"] = False
    if ns.launcher == "local" and given:
        flags = ", ".join("--no-wait" if k == "wait" else f"--{k.replace('_', '-')}" for k in given)
        raise ConfigError(f"{flags}: options of --launcher slurm (submitit_local takes --time-min and --no-wait "
                          f"only), not of the local launcher")
    return given


def _board_formats(board: str) -> tuple[str, ...]:
    """The formats ``--leaderboard DIR`` is regenerated in: markdown with its plots and index, the results as data
    (csv, json), and each other format the folder already holds, so that no file of it is left stale: ``html``
    when it has an HTML page (``index.html`` or a board's ``<name>.html`` beside its ``<name>.md``), ``tex`` when it
    has a board's ``<name>.tex`` beside its ``<name>.md``."""
    folder = Path(board)
    formats = ["md", "csv", "json"]
    if not folder.is_dir():
        return tuple(formats)
    boards = {p.stem for p in folder.glob("*.md")}
    if (folder / "index.html").is_file() or any(p.stem in boards for p in folder.glob("*.html")):
        formats.append("html")
    if any(p.stem in boards for p in folder.glob("*.tex")):
        formats.append("tex")
    return tuple(formats)


def _regenerate_boards(records: list[dict], out: str, board: str) -> list[str] | None:
    """``--leaderboard DIR``: the boards of ``out`` regenerated into ``DIR`` after the sweep, in the formats of
    :func:`_board_formats` (md, csv, json and those DIR already holds: html, tex); returns a line naming the
    formats, then a line per file, ``wrote PATH`` or ``unchanged PATH``. When cells were submitted and not waited
    for, the command that does it once they are done (and None)."""
    formats = _board_formats(board)
    if any(r.get("status") == "submitted" for r in records):
        print(f"jobs submitted, not waited for: when they are done, run\n  fusebench leaderboard --runs {out} "
              f"--out {board} --format {' '.join(formats)}\n(fusebench status --out {out} shows where the cells "
              f"stand)", file=sys.stderr)
        return None
    from fusebench.leaderboard import write_leaderboards
    from fusebench.leaderboard.outputs import file_lines, snapshot

    before = snapshot(board)
    written = write_leaderboards(Path(out), Path(board), formats=formats)
    kept = [f for f in formats if f not in ("md", "csv", "json")]
    said = (f"formats {', '.join(formats)} ({' and '.join(kept)}: {board} already held "
            f"{'them' if len(kept) > 1 else 'it'})" if kept else
            f"formats {', '.join(formats)} (no html page in {board}: add one with fusebench leaderboard "
            f"--format md csv json html)")
    return [said] + file_lines(written, before)
