"""``fusebench study kviews``: run the k-views study (:mod:`fusebench.studies.kviews`) and write its
board (:mod:`fusebench.leaderboard.kviews`)."""

from __future__ import annotations

import difflib
import json
import sys
from pathlib import Path

from fusebench.runtime.terminal_help import Once, Parser
from fusebench.cli.run import count_type
from fusebench.studies import kviews
from fusebench.studies.kviews import (ARMS, BUDGET, COPIES_BASE, COPIES_MASK, COPIES_NOISE, OBJECTIVES, Study,
                                       run_study)
from fusebench.leaderboard.kviews import render


# ---------------------------------------------------------------------------------------------
# command line
# ---------------------------------------------------------------------------------------------
def main(argv: list[str]) -> int:
    p = Parser(prog="fusebench study kviews", description=kviews.__doc__)
    p.add_argument("--benchmark", default="mv-handwritten")
    p.add_argument("--data-root", default=None)
    p.add_argument("--synthetic", action="store_true", help="the benchmark's synthetic twin (a smoke run)")
    p.add_argument("--out", default=None,
                   help="folder of the study's run records (default: the repository's leaderboards/runs-kviews)")
    p.add_argument("--board", default=None,
                   help="where the markdown and the PNG go (default: the repository's leaderboards/)")
    p.add_argument("--objective", nargs="+", action=Once, default=list(OBJECTIVES),
                   help="the rows; must include none and raw (default: %(default)s)")
    p.add_argument("--seeds", nargs="+", action=Once, type=int, default=[0, 1, 2])
    p.add_argument("--k", nargs="+", action=Once, type=int, default=None, help="numbers of views (default: 2..V)")
    p.add_argument("--subsets", type=int, default=3, help="draws per k: view orders (views arm), augmentation "
                                                            "seeds (copies arm); default %(default)s")
    p.add_argument("--subset-seed", type=int, default=0)
    p.add_argument("--arms", nargs="+", action=Once, choices=ARMS, default=list(ARMS))
    p.add_argument("--copies-base", nargs="+", action=Once, type=int, default=None,
                   help=f"base view(s) of the copies arm (default: {COPIES_BASE} else [0])")
    p.add_argument("--copies-noise", type=float, default=COPIES_NOISE, help="noise std x train std (%(default)s)")
    p.add_argument("--copies-mask", type=float, default=COPIES_MASK, help="feature masking probability (%(default)s)")
    p.add_argument("--batch-size", type=int, default=None,
                   help=f"every objective's batch (default {BUDGET['real']['batch_size']}; synthetic "
                        f"{BUDGET['synthetic']['batch_size']})")
    p.add_argument("--epochs", type=int, default=None,
                   help=f"every objective's epochs (default {BUDGET['real']['epochs']}; synthetic "
                        f"{BUDGET['synthetic']['epochs']})")
    p.add_argument("--m3g-micro-batch", type=int, default=8, help="M3G's loss chunk (%(default)s)")
    p.add_argument("--no-select", dest="select", action="store_false",
                   help="no hyper-parameter selection: the spec's default hyper-parameters in every cell (default: "
                        "each objective's chosen once on validation in the selection cell -- the largest k of the "
                        "first arm, its first draw: the full view set when --k includes it -- over the benchmark's "
                        "grids and selection seeds, and used in every cell)")
    p.add_argument("--workers", type=count_type("--workers"), default=1, help="cells run at a time (local processes)")
    p.add_argument("--render-only", action="store_true", help="only regenerate the markdown and the plot")
    p.add_argument("--no-progress", "--quiet", dest="progress", action="store_false",
                   help="no progress output (default: bars on a terminal, else a log line per cell start and end "
                        "and every $FUSEBENCH_LOG_EVERY seconds per phase, default 30)")
    ns = p.parse_args(argv)
    if ns.render_only:  # the board is drawn from every record in --out; a run option would be ignored
        run_only = [f"--{a.dest.replace('_', '-')}" for a in p._actions
                    if a.dest not in ("help", "benchmark", "out", "board", "render_only", "progress")
                    and getattr(ns, a.dest) != a.default]
        if run_only:
            print(f"fusebench study kviews: {', '.join(run_only)} only change(s) what is run; --render-only draws "
                  f"the board from every record in --out (drop the option(s), or run without --render-only)",
                  file=sys.stderr)
            return 2
    elif "copies" not in ns.arms:  # the copies arm's options would be accepted and never read
        unused = [f"--{a.dest.replace('_', '-')}" for a in p._actions
                  if a.dest.startswith("copies_") and getattr(ns, a.dest) != a.default]
        if unused:
            print(f"fusebench study kviews: {', '.join(unused)} only change(s) the copies arm, which --arms "
                  f"{' '.join(ns.arms)} leaves out (add copies to --arms, or drop the option(s))", file=sys.stderr)
            return 2
    if not ns.render_only and "m3g" not in ns.objective and ns.m3g_micro_batch != p.get_default("m3g_micro_batch"):
        print(f"fusebench study kviews: --m3g-micro-batch {ns.m3g_micro_batch} is M3G's loss chunk, and m3g is not "
              f"among --objective {' '.join(ns.objective)} (add m3g to --objective, or drop the option)",
              file=sys.stderr)
        return 2
    from fusebench.leaderboard import repository_boards

    repo = repository_boards()
    if repo is None and (ns.out is None or ns.board is None):
        print("fusebench study kviews: this fusebench does not run from a repository checkout (no leaderboards/ "
              "beside the package), so there is no default folder; pass --out RUNS (the study's run records) and "
              "--board DIR (where the table and plot go)", file=sys.stderr)
        return 2
    out = Path(ns.out) if ns.out is not None else repo / "runs-kviews"
    board = Path(ns.board) if ns.board is not None else repo
    counts: dict[str, int] = {}
    from fusebench.engine.loop import RunError  # torch: not for --help

    try:
        if not ns.render_only:
            study = Study(benchmark=ns.benchmark, objectives=tuple(ns.objective), seeds=tuple(ns.seeds),
                          ks=tuple(ns.k or ()) or None, subsets=ns.subsets, subset_seed=ns.subset_seed,
                          arms=tuple(ns.arms),
                          copies_base=tuple(ns.copies_base) if ns.copies_base is not None else None,
                          noise=ns.copies_noise, mask=ns.copies_mask, batch_size=ns.batch_size, epochs=ns.epochs,
                          m3g_micro_batch=ns.m3g_micro_batch, select=ns.select)
            run_study(study, out, ns.data_root, synthetic=ns.synthetic, workers=ns.workers, progress=ns.progress,
                      counts=counts)
        md, png = render(out, board, ns.benchmark)
    except (ValueError, RunError) as e:  # ConfigError, DatasetError, RecordError; a cell of another config, a busy cell
        print(f"fusebench study kviews: {e}", file=sys.stderr)
        return 2
    if ns.render_only:
        done = f"no cell run (--render-only); rendered from the run records in {out}"
    else:
        cells = sum(counts.values())
        failed = f", {counts['failed']} failed or skipped (see above)" if counts["failed"] else ""
        done = (f"{cells} cell(s) of {ns.benchmark}: {counts['reused']} reused from existing run records, "
                f"{counts['run']} run now{failed}; records in {out}")
    print(f"fusebench study kviews: {done}; board written to {md} and {png}", file=sys.stderr)
    print(json.dumps({"markdown": str(md), "plot": str(png)}))
    return 0


def study_main(argv: list[str]) -> int:
    """``fusebench study NAME ...``; the one study is ``kviews``."""
    usage = "usage: fusebench study kviews [--help]   (studies: kviews)"
    if argv and argv[0] in ("-h", "--help"):
        print(f"{usage}\n\nStudies across benchmark variants; kviews: accuracy against the number of views "
              f"(docs/kviews.md). fusebench study kviews --help for its options.")
        return 0
    if not argv or argv[0] != "kviews":
        if not argv:
            said = "name a study: fusebench study kviews"
        else:
            hint = difflib.get_close_matches(argv[0].lower(), ["kviews"], n=1, cutoff=0.5)
            said = f"unknown study {argv[0]!r}" + (f"; did you mean {hint[0]!r}?" if hint else " (the one study is kviews)")
        print(f"{usage}\nfusebench study: {said}", file=sys.stderr)
        return 2
    return main(argv[1:])


__all__ = ["main", "study_main"]
