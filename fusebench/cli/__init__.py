"""The ``fusebench`` command line.

Subcommands are owned by the package that implements them; this module only dispatches, so that
``fusebench --help`` and ``fusebench list`` stay fast.

Examples::

    fusebench list objectives            # every objective with hyperparameters, defaults, paper
    fusebench bench objectives           # forward+backward time and peak memory per objective
    fusebench data info nyuv2            # where the official files come from, expected layout
    fusebench run quickstart             # the README's main job
    fusebench leaderboard --runs runs/   # regenerate leaderboards/*.md from run.json files
    fusebench status --out runs/         # which cells are done, running, failed, interrupted, pending
    fusebench study kviews --data-root DIR   # mv-handwritten with k = 2..6 views, table + plot
"""

from __future__ import annotations

import argparse
import importlib
import sys

from fusebench.runtime.terminal_help import Parser

# subcommand -> (module, function taking argv list and returning an exit code, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str, str]] = {
    "list": ("fusebench.cli.listing", "main", "list registered benchmarks|objectives|datasets|encoders|metrics|pipelines|rows"),
    "bench": ("fusebench.perf", "main", "speed/memory benchmarks: objectives|data|encoders|leaderboard|gpu|cells|threads"),
    "data": ("fusebench.datasets.cli", "main", "prepare|check|info a dataset"),
    "run": ("fusebench.cli.run", "main", "run a benchmark by name (pretrain -> downstream -> run.json)"),
    "leaderboard": ("fusebench.leaderboard", "main", "regenerate leaderboard markdown from run.json files"),
    "status": ("fusebench.sweep.status", "main", "cells of a sweep: done / running / failed / interrupted / pending"),
    "study": ("fusebench.cli.study", "study_main", "studies across benchmark variants: kviews (accuracy vs number of views)"),
}


#: the speed / memory benches for the suite's developers: in the source checkout, not in the wheel (pyproject.toml)
DEVELOPER_BENCHES = "fusebench.perf"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = Parser(
        prog="fusebench",
        description="Benchmark suite for multimodal and multi-view representation learning.",
        epilog=__doc__.split("Examples::", 1)[1],
    )
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    parser.add_argument("command", nargs="?", choices=sorted(SUBCOMMANDS), metavar="COMMAND",
                        help="; ".join(f"{k}: {v[2]}" for k, v in SUBCOMMANDS.items()))
    parser.add_argument("args", nargs=argparse.REMAINDER, help="arguments of the command (COMMAND --help)")
    ns = parser.parse_args(argv)
    if ns.version:
        from fusebench.version import __version__

        print(__version__)
        return 0
    if ns.command is None:
        parser.print_help()
        return 2
    module, func, _ = SUBCOMMANDS[ns.command]
    _plugin_warnings_on_one_line()
    try:
        fn = getattr(importlib.import_module(module), func)
    except ModuleNotFoundError as e:
        if e.name != DEVELOPER_BENCHES:
            raise
        print(f"fusebench {ns.command}: the developer benches ({DEVELOPER_BENCHES}, the folder fusebench/perf/ of "
              f"the source repository) are not part of an installed fusebench; run this from a checkout "
              f"(git clone, then pip install -e .)", file=sys.stderr)
        return 2
    try:
        return int(fn(ns.args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except MemoryError as e:  # e.g. a synthetic twin of 10^12 samples: one line, not numpy's traceback
        said = " ".join(str(e).split())[:300]
        print(f"fusebench {ns.command}: out of memory ({type(e).__name__}{': ' + said if said else ''}); ask for less "
              "(a smaller dataset.synthetic_spec.num_samples, batch size or model) or run where there is more memory",
              file=sys.stderr)
        return 1
    except BrokenPipeError:  # `fusebench list ... | head`: the reader left; no traceback
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


def _plugin_warnings_on_one_line() -> None:
    """A plugin or spec file left out (:class:`fusebench.registry.PluginWarning`) is printed as one line,
    ``warning: <message>``, without the source line Python adds to a warning."""
    import warnings

    from fusebench.registry import PluginWarning

    default = warnings.formatwarning

    def fmt(message, category, filename, lineno, line=None):  # type: ignore[no-untyped-def]
        if issubclass(category, PluginWarning):
            return f"warning: {message}\n"
        return default(message, category, filename, lineno, line)

    if not getattr(default, "_fusebench_one_line", False):
        fmt._fusebench_one_line = True  # type: ignore[attr-defined]
        warnings.formatwarning = fmt


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
