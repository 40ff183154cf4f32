"""``fusebench status --out DIR [--benchmark B ...]``: where a sweep stands.

Every cell folder ``DIR/<benchmark>/<objective>/seed<k>/`` is in one state:

* ``done``: ``run.json`` exists (the record is final);
* ``running``: a ``.lock`` holds the pid of a live process (``fusebench run`` is on it now);
* ``failed``: ``failed.json`` exists and no ``run.json`` (rerunning the sweep retries it);
* ``interrupted``: a ``last.pt`` checkpoint and no live lock (rerunning resumes it where it stopped);
* ``pending``: nothing yet; with ``--benchmark``, every cell of the benchmark's default sweep
  (objectives x seeds of its spec) without a folder counts as pending too.

Hidden folders (``.selection``: hyper-parameter trials) are not cells and are skipped.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

STATES = ("done", "running", "failed", "interrupted", "pending")
_SEED = re.compile(r"^seed(\d+)$")


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (used for cell locks; see runner._CellLock)."""
    import os

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def cell_state(cell: Path) -> tuple[str, str]:
    """(state, detail) of one cell folder."""
    if (cell / "run.json").is_file():
        return "done", ""
    lock = cell / ".lock"
    if lock.is_file():
        try:
            pid = int(lock.read_text().strip() or 0)
        except (OSError, ValueError):
            pid = 0
        if pid and pid_alive(pid):
            return "running", f"pid {pid}"
    if (cell / "failed.json").is_file():
        try:
            error = str(json.loads((cell / "failed.json").read_text()).get("error", ""))
        except (OSError, ValueError):
            error = "failed.json unreadable"
        return "failed", error.splitlines()[0] if error else ""
    if (cell / "last.pt").is_file():
        return "interrupted", "resumable from last.pt"
    return "pending", ""


def collect(out: Path, benchmarks: list[str] | None = None) -> dict[str, dict[tuple[str, int], tuple[str, str]]]:
    """``{benchmark: {(objective, seed): (state, detail)}}`` for the cells under ``out`` (and, for
    the named ``benchmarks``, the pending cells of their default sweep)."""
    found: dict[str, dict[tuple[str, int], tuple[str, str]]] = {}
    if benchmarks:
        names = list(benchmarks)
    elif out.is_dir():
        names = sorted(p.name for p in out.iterdir() if p.is_dir() and not p.name.startswith("."))
    else:
        names = []
    for bench in names:
        cells: dict[tuple[str, int], tuple[str, str]] = {}
        root = out / bench
        if root.is_dir():
            for obj_dir in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
                for seed_dir in sorted(p for p in obj_dir.iterdir() if p.is_dir()):
                    m = _SEED.match(seed_dir.name)
                    if m:
                        cells[(obj_dir.name, int(m.group(1)))] = cell_state(seed_dir)
        if benchmarks:  # the default sweep of the spec: cells without a folder are pending
            from fusebench import benchmarks as B

            spec = B.load(bench)
            for o in spec.objectives or [spec.pretrain.objective]:
                for s in spec.seeds:
                    cells.setdefault((o, s), ("pending", ""))
        found[bench] = cells
    return found


def render(found: dict[str, dict[tuple[str, int], tuple[str, str]]]) -> str:
    lines = []
    for bench, cells in found.items():
        totals = {st: sum(1 for v in cells.values() if v[0] == st) for st in STATES}
        lines.append(f"{bench}: " + ", ".join(f"{totals[st]} {st}" for st in STATES) + f" ({len(cells)} cells)")
        objs = sorted({o for o, _ in cells})
        width = max([len(o) for o in objs] + [9])
        lines.append(f"  {'objective':<{width}}  " + "  ".join(f"{st:>11}" for st in STATES))
        for o in objs:
            counts = [sum(1 for (oo, _), v in cells.items() if oo == o and v[0] == st) for st in STATES]
            lines.append(f"  {o:<{width}}  " + "  ".join(f"{c:>11}" for c in counts))
        for (o, s), (st, detail) in sorted(cells.items()):
            if st in ("running", "failed", "interrupted"):
                lines.append(f"  {st}: {o}/seed{s}" + (f": {detail}" if detail else ""))
    return "\n".join(lines) if lines else "no cells"


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="fusebench status", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="runs", help="folder of run records (default runs/)")
    p.add_argument("--benchmark", nargs="+", default=None,
                   help="only these benchmarks; their default sweep's missing cells count as pending")
    p.add_argument("--json", action="store_true", help="print JSON: {benchmark: {objective: {seed: state}}}")
    ns = p.parse_args(argv)
    out = Path(ns.out)
    if not out.is_dir() and not ns.benchmark:
        print(f"fusebench status: --out {out} is not a folder of run records", file=sys.stderr)
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
        print(render(found))
    return 0
