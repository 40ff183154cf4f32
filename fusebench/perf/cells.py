"""``fusebench bench cells [--old DIR] [--data-root DIR]``: CPU seconds of whole cells, one checkout against another.

Each case is one ``fusebench run`` in a fresh interpreter, imports included, records written to a temporary
folder: ``quickstart`` (one cell: ``--objective infonce_pwe --seeds 0``) and ``mv-hw2sources`` (the same cell
with its hyperparameter-selection trials, read from ``--data-root``, the folder of ``HW2sources.mat``; left out
without it). The figure is the CPU time of the child process (user + system, ``getrusage``), which other
processes on the machine do not inflate as they inflate wall time; wall time is shown beside it.

``--old DIR`` runs every case in another checkout too, first, in the same invocation (``git worktree add
/tmp/old <commit>`` makes one): its ``fusebench`` and its ``benchmarks/``, ``datasets/``, ``encoders/``,
``objectives/`` packages are imported from DIR (an editable install maps those packages to the installed
checkout whatever ``PYTHONPATH`` says; the child is started through a launcher that maps them to DIR). The
table gives new / old per case, and whether the two checkouts' records agree on every metric (a
protocol change between the checkouts, e.g. another hyperparameter grid, shows there and in the trial
counts). ``--set KEY=VALUE`` is passed to the mv-hw2sources runs of both checkouts (e.g. the same selection
grid, where the checkouts' specs differ); without ``--data-root`` there is no such run and ``--set`` is refused.
``--threads`` sets ``OMP_NUM_THREADS`` of the children (default 1). ``--repeat N`` runs every case N times per
checkout, the checkouts' order swapped every round (old, new, new, old, ...), and the table gives the medians and,
with ``--old``, the ratio of the medians with the range of the per-round ratios (a ratio of one run each is one
noisy sample). The output starts with the machine (CPU, cores, load average); a run that fails stops the command
with its command line and output (exit status 1). docs/speed.md has the figures.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fusebench.runtime.terminal_help import Keyed, Parser
from typing import Any

#: the package directories an editable install maps (setuptools' finder), relative to a checkout
MAPPED = {"fusebench": "fusebench", "fusebench.benchmarks": "benchmarks", "fusebench.datasets": "datasets",
          "fusebench.encoders": "encoders", "fusebench.objectives": "objectives"}

LAUNCHER = """
import importlib.abc, importlib.util, runpy, sys
from pathlib import Path
root = Path(sys.argv[1])
mapped = {MAPPED!r}

class _Checkout(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name in mapped:
            init = root / mapped[name] / "__init__.py"
            return importlib.util.spec_from_file_location(name, init, submodule_search_locations=[str(init.parent)])
        return None

sys.meta_path.insert(0, _Checkout())
sys.path.insert(0, str(root))
sys.argv = ["fusebench"] + sys.argv[2:]
runpy.run_module("fusebench", run_name="__main__")
"""


def _cases(data_root: str | None, sets: list[str]) -> list[tuple[str, list[str]]]:
    cases = [("quickstart cell", ["quickstart", "--objective", "infonce_pwe", "--seeds", "0"])]
    if data_root:
        cases.append(("mv-hw2sources cell + selection trials",
                      ["mv-hw2sources", "--objective", "infonce_pwe", "--seeds", "0", "--data-root", data_root]
                      + [a for s in sets for a in ("--set", s)]))
    return cases


def run_case(root: Path | None, args: list[str], out: Path, threads: int) -> dict[str, Any]:
    """One ``fusebench run`` of checkout ``root`` (None: this one) in a child process -> ``{"cpu_s", "wall_s",
    "records": {relative path: metrics}}``."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    cmd = [sys.executable]
    if root is not None:
        launcher = out.parent / "launcher.py"
        launcher.write_text(LAUNCHER.replace("{MAPPED!r}", repr(MAPPED)))
        cmd += [str(launcher), str(root)]
    else:
        cmd += ["-m", "fusebench"]
    cmd += ["run", *args, "--out", str(out), "--no-progress"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=str(root or Path.cwd()))
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    records = {str(p.relative_to(out)): _compared(json.loads(p.read_text(encoding="utf-8")), p.relative_to(out))
               for p in sorted(out.rglob("run.json"))}
    return {"cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), "wall_s": wall,
            "records": records}


def _compared(record: dict[str, Any], where: Path) -> Any:
    """What must not change between the checkouts: an evaluation cell's metrics; a hyper-parameter trial's
    (under ``.selection/``) validation value of its selection metric, the number the selection reads (a trial
    computes its selection metric alone since issue #31 item 5, so its other metrics are not compared)."""
    if ".selection" not in where.parts:  # values alone: record schema 4 adds direction and version to each
        from fusebench.metrics import values_of

        return values_of(record.get("metrics"))
    selection = record.get("selection") or {}
    return (selection.get("val_metrics") or {}).get(selection.get("metric"))


def main(argv: list[str]) -> int:
    parser = Parser(prog="fusebench bench cells", description=__doc__.split("\n\n")[0])
    parser.add_argument("--old", type=Path, default=None, help="another checkout (e.g. a git worktree of the "
                        "commit before a change), run first")
    parser.add_argument("--data-root", default=None, help="folder of HW2sources.mat (without it: quickstart only)")
    parser.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS of the runs (default 1)")
    parser.add_argument("--set", dest="sets", action=Keyed, default=[], metavar="KEY=VALUE",
                        help="spec override for the mv-hw2sources runs of both checkouts (repeatable)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="runs of each case per checkout, the checkouts' order swapped every round; the table "
                             "gives medians and, with --old, the range of the per-round ratios (default 1)")
    ns = parser.parse_args(argv)
    if ns.threads < 1:
        parser.error(f"--threads must be >= 1, got {ns.threads}")
    if ns.repeat < 1:
        parser.error(f"--repeat must be >= 1, got {ns.repeat}")
    if ns.sets and not ns.data_root:  # only the mv-hw2sources case takes them, and it runs with --data-root
        parser.error("--set applies to the mv-hw2sources runs, which run only with --data-root DIR (the folder of "
                     "HW2sources.mat); add --data-root, or drop --set")
    if ns.data_root and not Path(ns.data_root).exists():
        parser.error(f"--data-root {ns.data_root} does not exist; expected the folder of HW2sources.mat")
    if ns.data_root and Path(ns.data_root).is_dir() and not (Path(ns.data_root) / "HW2sources.mat").is_file():
        parser.error(f"--data-root {ns.data_root} holds no HW2sources.mat; expected the folder of HW2sources.mat")
    if ns.old is not None and not (ns.old / "fusebench" / "__init__.py").is_file():
        parser.error(f"--old {ns.old}: not a fusebench checkout (no fusebench/__init__.py there); e.g. "
                     "git worktree add /tmp/old <commit>")
    trees: list[tuple[str, Path | None]] = ([("old", ns.old.resolve())] if ns.old is not None else []) + [("new", None)]
    rows = []
    try:
        with tempfile.TemporaryDirectory(prefix="fusebench-bench-cells-") as tmp:
            for name, args in _cases(str(Path(ns.data_root).resolve()) if ns.data_root else None, ns.sets):
                got: dict[str, list[dict[str, Any]]] = {label: [] for label, _ in trees}
                for r in range(ns.repeat):  # ABBA: a drift in the machine's load falls on both checkouts
                    for label, root in (trees if r % 2 == 0 else trees[::-1]):
                        folder = Path(tmp) / label / f"{name.split()[0]}{r}"
                        folder.mkdir(parents=True)
                        got[label].append(run_case(root, args, folder / "runs", ns.threads))
                rows.append((name, got))
    except RuntimeError as e:  # a run of a case failed: its command and output, not a traceback
        print(f"fusebench bench cells: {e}", file=sys.stderr)
        return 1
    from fusebench.machine import cpu_model

    load = "; load average %.2f %.2f %.2f" % os.getloadavg() if hasattr(os, "getloadavg") else ""
    print(f"machine: {cpu_model()}; {os.cpu_count()} logical cores; Python {sys.version.split()[0]}{load}")
    print(f"CPU seconds (user + system) of one `fusebench run` per case, imports included, OMP_NUM_THREADS="
          f"{ns.threads}; wall seconds in brackets; "
          + (f"median of {ns.repeat} runs per checkout, the order swapped every round" if ns.repeat > 1 else
             "one run per checkout (--repeat N for medians)"))
    head = "| case | " + " | ".join(f"{label} CPU s (wall)" for label, _ in trees) + " | runs |"
    head += " new / old CPU | same results |" if ns.old is not None else ""
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for name, got in rows:
        cells = [f"{statistics.median([g['cpu_s'] for g in got[label]]):.1f} ({statistics.median([g['wall_s'] for g in got[label]]):.1f})"
                 for label, _ in trees]
        line = (f"| {name} | " + " | ".join(cells) + " | "
                + " / ".join(str(len(got[label][0]["records"])) for label, _ in trees) + " |")
        if ns.old is not None:
            same = all(o["records"] == n["records"] for o, n in zip(got["old"], got["new"]))
            per_round = [n["cpu_s"] / o["cpu_s"] for o, n in zip(got["old"], got["new"])]
            ratio = statistics.median([g["cpu_s"] for g in got["new"]]) / statistics.median([g["cpu_s"] for g in got["old"]])
            spread = f" ({min(per_round):.2f}-{max(per_round):.2f})" if len(per_round) > 1 else ""
            line += f" {ratio:.2f}{spread} | {'yes' if same else 'no'} |"
        print(line)
    return 0
