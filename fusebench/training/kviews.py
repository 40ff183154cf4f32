"""The k-views study: do more views help, and which objective uses them best?

The source papers' central claim (M3G Sec. 5, the MV-InfoNCE / MV-DHEL paper, poly-view
contrastive learning) is that objectives built for k >= 3 views gain from each added view. The
study reruns a multi-view benchmark (default ``mv-handwritten``, 6 real views) with only k of its
views, for k = 2..V:

* the view subsets are a fixed, seeded choice: for each k, ``subsets`` subsets of size k drawn
  without repetition by ``numpy.random.default_rng(subset_seed + k)`` from all C(V, k) subsets
  (k = V: the full set), the same for every objective and seed;
* each (k, subset) is the benchmark with ``name=<benchmark>-k<k>s<j>`` and
  ``dataset.options.views=[...]``; everything else as in the benchmark, except that the
  pretraining hyper-parameters are the spec's defaults (no validation grid per k: recorded as
  ``pretrain.grid = {}``) and M3G uses batch 8 for 1 epoch at k >= 5 (its n^k cost) and batch 32
  at k <= 4;
* ``render`` reads the run records and writes a markdown table (mean ± std over seeds and subsets
  of test accuracy and clustering accuracy per objective and k) and a PNG with one curve per
  objective and error bars (std over seeds x subsets).

``fusebench study kviews --data-root DIR`` runs and renders: the run records go to ``--out``
(default: the repository's ``leaderboards/runs-kviews``, found beside the package, so the command
works from any current folder), the table and plot to ``--board`` (default: the repository's
``leaderboards/``); cells that already have a run record are reused, and the command says how many
were reused, how many run and where the board was written (on stderr; stdout keeps one JSON line
``{"markdown": ..., "plot": ...}`` for scripts).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

OBJECTIVES = ("raw", "none", "infonce_pwe", "mv_infonce", "mv_dhel", "pvc_geometric", "m3g")
METRICS = (("acc", "test accuracy (linear probe)"), ("cluster_acc", "clustering accuracy (k-means)"))


def view_subsets(num_views: int, k: int, subsets: int, subset_seed: int) -> list[list[int]]:
    """``subsets`` distinct size-k subsets of range(num_views), seeded by ``subset_seed + k``, sorted."""
    combos = [list(c) for c in itertools.combinations(range(num_views), k)]
    if len(combos) <= subsets:
        return combos
    rng = np.random.default_rng(subset_seed + k)
    pick = sorted(rng.choice(len(combos), size=subsets, replace=False).tolist())
    return [combos[i] for i in pick]


def study_overrides(k: int, views: list[int], benchmark: str, j: int) -> dict[str, Any]:
    big = k >= 5
    return {
        "name": f"{benchmark}-k{k}s{j}",
        "dataset.options.views": views,
        "pretrain.grid": {},
        "pretrain.objective_batch_size": {"m3g": 8 if big else 32},
        "pretrain.objective_epochs": {"m3g": 1} if big else {},
    }


def run_study(benchmark: str = "mv-handwritten", data_root: str | None = None, out: str | Path = "runs-kviews",
              objectives: tuple[str, ...] = OBJECTIVES, seeds: tuple[int, ...] = (0, 1, 2),
              ks: tuple[int, ...] | None = None, subsets: int = 1, subset_seed: int = 0,
              progress: bool = False, counts: dict[str, int] | None = None) -> list[dict[str, Any]]:
    """Run every (k, subset, objective, seed) cell (cells with a run.json are kept); ``progress``:
    announce the cells and their phases (:mod:`fusebench.training.progress`); ``counts``, when given,
    receives how many cells were ``reused`` (their record existed), ``run`` and ``failed`` (failed or
    skipped: the sweep's entries without a record)."""
    import fusebench
    from fusebench import benchmarks
    from fusebench.training import runner

    if counts is not None:
        counts.update(reused=0, run=0, failed=0)

    spec = benchmarks.load(benchmark)
    runner.resolve_views(spec, False, data_root)
    num_views = len(spec.dataset.modalities or [])
    ks = tuple(ks or range(2, num_views + 1))
    records = []
    for k in ks:
        if not 2 <= k <= num_views:
            raise ValueError(f"kviews: k = {k} is outside 2..{num_views} (the views of {benchmark})")
        for j, views in enumerate(view_subsets(num_views, k, subsets, subset_seed)):
            objs = [o for o in objectives if o in ("raw", "none") or o in runner.compatible_objectives(
                benchmarks.load(benchmark, overrides={"dataset.modalities": [f"view{v}" for v in views]}))]
            overrides = study_overrides(k, views, benchmark, j)
            existed = {(o, s) for o in objs for s in seeds
                       if (runner.cell_dir(Path(out), overrides["name"], o, s) / "run.json").exists()}
            got = fusebench.run(benchmark, objective=objs, seeds=list(seeds), out=out, data_root=data_root,
                                overrides=overrides, progress=progress)
            if counts is not None:
                for r in got:
                    what = ("failed" if r.get("status") in ("failed", "skipped") else
                            "reused" if (r.get("objective"), r.get("seed")) in existed else "run")
                    counts[what] += 1
            records += got
    return records


def collect(runs: Path, benchmark: str) -> dict[str, dict[int, dict[str, list[float]]]]:
    """objective -> k -> metric -> values (one per seed and subset), from ``<runs>/<benchmark>-k*``."""
    from fusebench.records import find_records, load_record

    table: dict[str, dict[int, dict[str, list[float]]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    prefix = f"{benchmark}-k"
    runs = Path(runs)
    if not runs.is_dir():
        return table
    for path in find_records(runs):  # the leaderboard's rule of what counts as a record file
        parts = path.relative_to(runs).parts
        if len(parts) != 4 or not parts[0].startswith(prefix) or not parts[2].startswith("seed"):
            continue
        rec = load_record(path)
        if not rec.benchmark.startswith(prefix):
            continue
        k = len(rec.config["dataset"]["options"]["views"])
        for m, _ in METRICS:
            table[rec.objective][k][m].append(float(rec.metrics[m]))
    return table


def _mean_std(values: list[float]) -> tuple[float, float]:
    n = len(values)
    mean = sum(values) / n
    return mean, (math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0)


def render(runs: str | Path, board: str | Path, benchmark: str = "mv-handwritten") -> tuple[Path, Path]:
    """Write ``<board>/<benchmark>-kviews.md`` and ``-kviews.png`` from the study's run records."""
    from fusebench.training.utils import atomic_write_text

    table = collect(Path(runs), benchmark)
    if not table:
        raise ValueError(f"kviews: no run records of {benchmark}-k* under {runs}; run the study first")
    board = Path(board)
    board.mkdir(parents=True, exist_ok=True)
    order = [o for o in OBJECTIVES if o in table] + sorted(o for o in table if o not in OBJECTIVES)
    ks = sorted({k for o in table.values() for k in o})
    md = [f"# k-views study: {benchmark}", "",
          "Test accuracy (linear probe) and clustering accuracy (k-means) with only k of the views, mean ± std "
          "over seeds x view subsets (n). View subsets: a fixed seeded choice per k (`fusebench.training.kviews`); "
          "pretraining hyper-parameters are the spec's defaults (no per-k grid); M3G uses batch 8 for 1 epoch at "
          "k >= 5. `raw` = the standardised views concatenated; `none` = random-init encoders.", ""]
    for m, label in METRICS:
        md += [f"## {label}", "", "| objective | " + " | ".join(f"k = {k}" for k in ks) + " |",
               "|---|" + "---|" * len(ks)]
        for o in order:
            cells = []
            for k in ks:
                vals = table[o].get(k, {}).get(m, [])
                if vals:
                    mean, std = _mean_std(vals)
                    cells.append(f"{100 * mean:.2f} ± {100 * std:.2f} ({len(vals)})")
                else:
                    cells.append("—")
            md.append(f"| `{o}` | " + " | ".join(cells) + " |")
        md.append("")
    png = board / f"{benchmark}-kviews.png"
    md += [f"![k-views study]({png.name})", ""]
    mdp = board / f"{benchmark}-kviews.md"
    atomic_write_text(mdp, "\n".join(md))
    _plot(table, order, ks, png, benchmark)
    return mdp, png


def _plot(table, order, ks, path: Path, benchmark: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(METRICS), figsize=(6 * len(METRICS), 4.2))
    for ax, (m, label) in zip(axes, METRICS):
        for i, o in enumerate(order):
            xs = [k for k in ks if table[o].get(k, {}).get(m)]
            stats = [_mean_std(table[o][k][m]) for k in xs]
            ax.errorbar([x + 0.03 * (i - len(order) / 2) for x in xs], [100 * s[0] for s in stats],
                        yerr=[100 * s[1] for s in stats], marker="o", capsize=3, label=o,
                        linestyle="--" if o in ("raw", "none") else "-")
        ax.set_xlabel("number of views k")
        ax.set_ylabel(f"{label} (%)")
        ax.set_xticks(ks)
        ax.set_title(f"{benchmark}: {label}")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata={"Software": None})
    plt.close(fig)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="fusebench study kviews", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--benchmark", default="mv-handwritten")
    p.add_argument("--data-root", default=None)
    p.add_argument("--out", default=None,
                   help="folder of the study's run records (default: the repository's leaderboards/runs-kviews)")
    p.add_argument("--board", default=None,
                   help="where the markdown and the PNG go (default: the repository's leaderboards/)")
    p.add_argument("--objective", nargs="+", default=list(OBJECTIVES))
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--k", nargs="+", type=int, default=None)
    p.add_argument("--subsets", type=int, default=1, help="view subsets per k")
    p.add_argument("--render-only", action="store_true", help="only regenerate the markdown and the plot")
    p.add_argument("--no-progress", dest="progress", action="store_false",
                   help="no progress output (default: bars on a terminal, else a log line per cell start and end "
                        "and every $FUSEBENCH_LOG_EVERY seconds per phase, default 30)")
    ns = p.parse_args(argv)
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
    try:
        if not ns.render_only:
            run_study(ns.benchmark, ns.data_root, out, tuple(ns.objective), tuple(ns.seeds), tuple(ns.k or ()) or None,
                      ns.subsets, progress=ns.progress, counts=counts)
        md, png = render(out, board, ns.benchmark)
    except ValueError as e:  # includes ConfigError, DatasetError, RecordError
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
    if not argv or argv[0] != "kviews":
        print("usage: fusebench study kviews [--help]   (studies: kviews)", file=sys.stderr)
        return 2
    return main(argv[1:])


__all__ = ["OBJECTIVES", "collect", "render", "run_study", "view_subsets"]
