"""``fusebench run NAME``: run a benchmark by name (see ``fusebench run --help``)."""

from __future__ import annotations

import argparse
import logging
import sys

EXAMPLES = """examples:
  fusebench run quickstart
  fusebench run nyuv2-seg --objective m3g infonce_pwe --seeds 0 1 2 --data-root /data/nyuv2
  fusebench run mosi-sentiment --synthetic --set pretrain.epochs=2 --out runs/
  torchrun --nproc-per-node 2 -m fusebench run quickstart --objective m3g   # DistributedDataParallel
  OMP_NUM_THREADS=1 fusebench run mv-ngs --data-root DIR --workers 2        # two cells at a time
  fusebench run quickstart --logger tensorboard csv                        # then: tensorboard --logdir runs/
"""


def main(argv: list[str]) -> int:
    from fusebench.registry import UnknownNameError
    from fusebench.training.config import ConfigError, parse_override
    from fusebench.training.trackers import TRACKERS

    p = argparse.ArgumentParser(prog="fusebench run", description=__doc__, epilog=EXAMPLES,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("benchmark", help="benchmark id (fusebench list benchmarks)")
    p.add_argument("--objective", nargs="+", default=None, help="objective id(s); default: the benchmark's sweep")
    p.add_argument("--seeds", nargs="+", type=int, default=None, help="seeds (default: the benchmark's)")
    p.add_argument("--data-root", default=None, help="folder with the dataset's official files")
    p.add_argument("--synthetic", action="store_true", help="run on the dataset's synthetic twin at tiny size")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda | mps")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a spec value by dotted key, e.g. pretrain.epochs=3 (repeatable)")
    p.add_argument("--out", default="runs", help="folder of run records (default runs/)")
    p.add_argument("--resume", action="store_true", help="continue from last.pt where present")
    p.add_argument("--leaderboard", default=None, metavar="DIR",
                   help="regenerate the leaderboard markdown into DIR after the sweep")
    p.add_argument("--workers", type=int, default=1, metavar="N",
                   help="run the cells in N local processes (default 1: one after another); set "
                        "OMP_NUM_THREADS so that N x threads fits the machine")
    p.add_argument("--logger", dest="loggers", nargs="+", default=None, choices=sorted(TRACKERS),
                   help="experiment trackers for every cell, one or more of csv | tensorboard | mlflow "
                        "(docs/trackers.md; tensorboard and mlflow need: pip install -e .[trackers])")
    p.add_argument("--mlflow-uri", default=None, metavar="URI",
                   help="MLflow tracking URI for --logger mlflow (default: $MLFLOW_TRACKING_URI, else "
                        "file:<out>/.mlruns)")
    bars = p.add_mutually_exclusive_group()
    bars.add_argument("--progress", dest="progress", action="store_true", default=None,
                      help="progress bars even when stderr is not a terminal")
    bars.add_argument("--no-progress", dest="progress", action="store_false",
                      help="no progress bars (the default when stderr is not a terminal, e.g. a log file)")
    ns = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    from fusebench.datasets.base import DatasetNotFoundError
    from fusebench.training import distributed
    from fusebench.training.runner import RunError, run

    try:
        overrides = dict(parse_override(o) for o in ns.overrides)
        with distributed.maybe_init(ns.device):
            records = run(ns.benchmark, objective=ns.objective, seeds=ns.seeds, out=ns.out, synthetic=ns.synthetic,
                          data_root=ns.data_root, device=ns.device, overrides=overrides, resume=ns.resume,
                          progress=sys.stderr.isatty() if ns.progress is None else ns.progress, leaderboard=ns.leaderboard,
                          workers=ns.workers, loggers=ns.loggers, mlflow_uri=ns.mlflow_uri)
    except (UnknownNameError, ConfigError, DatasetNotFoundError, RunError, ValueError) as e:
        print(f"fusebench run: {e}", file=sys.stderr)
        return 2
    failed = [r for r in records if r.get("status") == "failed"]
    for r in records:
        if r.get("status") in ("failed", "worker", "skipped"):
            continue
        shown = ", ".join(f"{k}={v:.4f}" for k, v in sorted(r["metrics"].items()))
        print(f"{r['benchmark']} {r['objective']} seed{r['seed']}: {shown}")
    if failed:
        print(f"{len(failed)} cell(s) failed; see failed.json in their folders", file=sys.stderr)
        return 1
    return 0
