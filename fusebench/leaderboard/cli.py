"""``fusebench leaderboard``: markdown leaderboards generated from run.json files; how a table compares its
rows (primary metric, reference row, why) comes from the benchmark's current spec where one of that name is
installed (its ``comparison`` block overrides the records' copy), else from the newest record's copy, and each
table's Protocol section says which.

``write_leaderboards(runs_dir, out_dir)`` reads every ``run.json`` under ``runs_dir``, validates it
(:func:`fusebench.records.validate_record`), and writes for each benchmark it found runs of
``<out_dir>/<benchmark>.md`` and a curves plot ``<out_dir>/<benchmark>-curves.png``; then it rebuilds
the index ``<out_dir>/README.md`` from the metadata comment at the end of *every* board file in
``out_dir``, so regenerating from a runs folder holding only some benchmarks keeps the other boards
listed. The output is a pure function of the inputs: rerunning gives byte-identical files (records
are sorted, numbers formatted at fixed precision, no timestamps).

Grouping: runs share a table only when their comparability key (``fusebench.records``: benchmark,
config hash, suite / objective / metric versions, dataset identity) is equal. A benchmark whose runs
fall into several groups is refused, naming the files and the fields that differ, unless
``--split`` is given (one table per group). Two run files for the same (group, objective, seed) are
refused, naming both.

Table: one row per distinct loss (objectives that compute the same loss at the group's number of
views, :func:`fusebench.objectives.equivalence.groups`, share one row shown as ``a (≡ b)``), one
column per metric (arrow = direction and percent display from the metric registry,
``fusebench.metrics``; the record's ``metric_directions`` for metrics outside the registry; no arrow
and no bold when the direction is unknown), cells ``mean ± std (n)`` over seeds (sample std, ddof =
1; 0 when n = 1), the best mean in bold, a dash where missing; then, for the primary metric, a
percentile-bootstrap 95% CI of the mean over seeds and "Δ vs <reference> (Holm p)": the mean paired
difference to a FIXED reference row (``record["comparison"]["reference"]``, else ``raw``, else
``none``) with the p-value of a two-sided paired t-test over the shared seeds, Holm-adjusted over
the rows tested (:mod:`fusebench.leaderboard.stats`); the pretraining budget (optimiser steps, samples seen,
from ``record["budget"]``) and cost columns (mean pretraining time, mean peak memory). Under each
table: whether the pretraining budgets are equal, aliases whose numbers differ, rows flagged invalid
(``record["validity"]``; never ranked best). Pipeline-check boards (tiny synthetic twins) show the
numbers without bold, best row, interval or tests. Numbers printed in the source papers come from
``reported.yaml`` (default ``<out_dir>/reported.yaml`` when there is one, else the list shipped with the
benchmarks) and are shown in their own section, "Published results (not comparable to the runs above)": never
ranked, bolded or tested.

The index ranks the objectives over the real-data boards of the ``embedding_eval`` protocol
(average ranks, Friedman test, Nemenyi critical difference, a CD diagram ``cd-diagram.png``;
Demšar 2006). See docs/leaderboards.md.

Results as data: ``--format md csv json`` (any of them; ``md`` alone by default) also writes
``<out_dir>/<benchmark>.csv`` and ``<out_dir>/<benchmark>.json`` beside each regenerated board: one
row per (comparability group, displayed objective) with every metric's mean, sample std and n, the
primary metric's CI, Δ vs the reference and Holm p, the budget and cost columns and the comparability
key, as plain numbers (fractions, not percent; floats to 12 significant digits), byte-identical on
regeneration (:mod:`fusebench.leaderboard.export`; columns and JSON schema in docs/leaderboards.md).
Without ``md`` the markdown boards, plots and index are left as they are. With ``csv`` it also writes
``<out_dir>/<benchmark>-seeds.csv``: one row per run record (benchmark, objective, seed, comparability key,
every metric, budget, cost, config hash; :mod:`fusebench.results`, whose ``load(runs_dir)`` gives the same
rows as a pandas DataFrame). ``--format tex`` writes ``<out_dir>/<benchmark>.tex``, a booktabs table per
comparability group for ``\\input`` (``--tex-columns``; :mod:`fusebench.leaderboard.tex`). The command ends
with each file it wrote or left unchanged.

Speed: regenerating on unchanged runs imports neither torch nor matplotlib (metric metadata from
:mod:`fusebench.metrics.catalog`, matplotlib only to redraw a plot, Pillow to read a plot's input
hash; numpy and scipy for the statistics) and rewrites no file whose content is unchanged. When the inputs
(records, specs, code, library versions, options) and every file in ``--out`` are byte for byte as the last
regeneration left them, it reads no record at all: :mod:`fusebench.leaderboard.fingerprint` (the manifest
``<out>/.fusebench-regen.json``; ``--force`` regenerates anyway). ``fusebench bench leaderboard`` times it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from fusebench.io import shown_path
from fusebench.runtime.terminal_help import Once, Parser

#: what ``--format`` accepts (:data:`fusebench.leaderboard.export.FORMATS`, checked equal by a test; written out
#: here so that a regeneration with nothing to do imports neither the statistics nor the renderers)
FORMATS = ("md", "csv", "json", "html", "tex")


def _what(path: Path) -> str:
    """What ``path`` is, for a message: ``does not exist``, ``is a file``, ``is a folder``, ``is not a file or
    folder`` (a socket, a device...)."""
    if not path.exists():
        return "does not exist"
    return "is a file" if path.is_file() else "is a folder" if path.is_dir() else "is neither a file nor a folder"


def path_problems(ns: Any) -> str | None:
    """The paths of the command line checked before anything is read or written, each refused in one line saying
    what it is and what was expected (None: they fit): ``--runs`` a folder, ``--reported`` a YAML file, ``--out``
    a folder or a path where one can be made."""
    runs, out = Path(ns.runs), Path(ns.out)
    if not runs.is_dir():
        return f"--runs {shown_path(runs)} {_what(runs)}; expected the folder of run records (run.json files) to read"
    if ns.reported is not None and not Path(ns.reported).is_file():
        return (f"--reported {shown_path(ns.reported)} {_what(Path(ns.reported))}; expected a YAML file of the numbers "
                f"the papers report")
    if out.exists() and not out.is_dir():
        return (f"--out {shown_path(out)} {_what(out)}; expected the folder to write the boards into (made if it does "
                f"not exist)")
    above = next((q for q in out.absolute().parents if q.exists()), None)
    if not out.exists() and above is not None and not above.is_dir():
        return (f"--out {shown_path(out)}: cannot be made ({shown_path(above)} {_what(above)}); expected a folder for "
                f"the boards")
    return None


def main(argv: list[str]) -> int:
    """``fusebench leaderboard [--runs DIR] [--out DIR] [--no-plots] [--split] [--reported FILE]
    [--format md csv json]``; returns the exit status (2, with the error on stderr, for a missing folder,
    an invalid record or a refused group; argparse's 2 for an unknown format)."""
    p = Parser(prog="fusebench leaderboard", description=__doc__)
    p.add_argument("--runs", default="leaderboards/runs",
                   help="folder searched for run.json files (default leaderboards/runs, from the current folder)")
    p.add_argument("--out", default="leaderboards",
                   help="output folder of the boards (default leaderboards, from the current folder: in a checkout, "
                        "the committed boards of the benchmarks found under --runs are replaced)")
    p.add_argument("--no-plots", action="store_true",
                   help="no plot is drawn, looked at or written (docs/leaderboards.md)")
    p.add_argument("--split", action="store_true",
                   help="one table per comparability group instead of refusing a benchmark whose runs mix groups")
    p.add_argument("--reported", default=None,
                   help="YAML file of numbers reported in the papers (default: <out>/reported.yaml when there is "
                        "one, else the list shipped with the benchmarks, benchmarks/published/reported.yaml in the "
                        "checkout)")
    p.add_argument("--format", dest="formats", nargs="+", action=Once, choices=FORMATS, default=["md"],
                   metavar="FORMAT",
                   help="what to write per board: md (the markdown board, its plots and the index), csv, json "
                        "(results as data beside the board), html (a self-contained page per board and index.html), "
                        "tex (a booktabs table per board for \\input); csv also writes <board>-seeds.csv, one row per "
                        "seed; default: md")
    p.add_argument("--tex-columns", nargs="+", action=Once, default=None, metavar="COLUMN",
                   help="columns of the tex table after the objective: mean (the primary metric's mean ± std), ci, "
                        "n, steps, samples, delta, p, time, memory, or a metric id (its mean ± std); default: "
                        "mean ci n steps")
    p.add_argument("--force", action="store_true",
                   help="regenerate even when the inputs and the files in --out are as the last regeneration left "
                        "them (see fusebench.leaderboard.fingerprint)")
    p.add_argument("--no-progress", "--quiet", dest="progress", action="store_false",
                   help="no progress output (the list of files written is still printed)")
    ns = p.parse_args(argv)
    problem = path_problems(ns)
    if problem:
        print(f"fusebench leaderboard: {problem}", file=sys.stderr)
        return 2
    from fusebench.leaderboard import fingerprint

    runs, out = Path(ns.runs), Path(ns.out)
    if next(runs.rglob("run.json"), None) is None:
        print(f"fusebench leaderboard: warning: no run.json under {shown_path(runs)}: no board is regenerated; the "
              f"index lists the boards already in {shown_path(out)} (runs are written by `fusebench run B --out "
              f"{shown_path(runs)}`)", file=sys.stderr)
    options = {"plots": not ns.no_plots, "split": ns.split, "reported": ns.reported, "formats": list(ns.formats),
               "tex_columns": ns.tex_columns}
    try:  # taken before anything is read: what the manifest will say the boards were made from
        inputs = fingerprint.inputs_digest(runs, out, options)
    except (ValueError, OSError):  # e.g. a record file that breaks the folder rule: the full run says why
        inputs = None
    same = None if ns.force or inputs is None else fingerprint.unchanged(out, inputs)
    if same is not None:
        print("\n".join(f"unchanged {shown_path(out / name)}" for name in same))
        print(f"0 file(s) written, {len(same)} unchanged in {shown_path(ns.out)} (records, specs, code, options and "
              f"every file in {shown_path(ns.out)} as the last regeneration left them: nothing re-read; --force "
              f"regenerates)")
        return 0
    from fusebench.leaderboard.outputs import check_tex_columns, file_lines, snapshot
    from fusebench.leaderboard.tex import check_columns
    from fusebench.leaderboard.writer import write_leaderboards

    try:
        fingerprint.forget(out)
        if ns.tex_columns is not None:
            check_tex_columns(ns.formats, ns.tex_columns)  # write_leaderboards checks it too
            check_columns(ns.tex_columns)  # known names or metric ids (checked per board when rendered)
        before = snapshot(ns.out)
        written = write_leaderboards(Path(ns.runs), Path(ns.out), plots=not ns.no_plots, split=ns.split,
                                     reported=Path(ns.reported) if ns.reported else None, formats=ns.formats,
                                     tex_columns=ns.tex_columns, progress=ns.progress)
        lines = file_lines(written, before)  # each file: wrote / unchanged (issue #32)
        print("\n".join(lines))
        changed = sum(line.startswith("wrote ") for line in lines)
        print(f"{changed} file(s) written, {len(lines) - changed} unchanged in {shown_path(ns.out)}")
        if inputs is not None:
            fingerprint.save(out, inputs, written)
    except (ValueError, OSError) as e:
        print(f"fusebench leaderboard: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"fusebench leaderboard: interrupted; the files in {shown_path(ns.out)} may be part old, part "
              f"regenerated: run the command again to finish them (nothing is skipped as unchanged after an "
              f"interruption)",
              file=sys.stderr)
        return 130
    return 0
