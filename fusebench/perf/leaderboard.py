"""``fusebench bench leaderboard``: how long regenerating the committed leaderboards takes.

Copies the committed board folder (``--boards``, default: the repository's ``leaderboards/``, found
beside the package, so the command works from any current folder; its boards in every format, the
``reported.yaml``, the study boards and their plots, but **not** the ``*-curves.png`` plots nor the
regeneration manifest) into a temporary folder, links the runs into it as ``runs`` (read in place:
``--runs``, default ``<boards>/runs``; nothing is written there; the pages link the records by relative
path, so the copy's pages are comparable with the committed ones), then times ``fusebench leaderboard
--format <--format>`` (default ``md csv json html``, every format) there, each a fresh process (interpreter
start and imports included, as a user runs it):

1. **cold**: every curves plot is drawn (none is in the copy);
2. **warm**: the same command again on unchanged runs: the regeneration manifest
   (:mod:`fusebench.leaderboard.fingerprint`) matches, so nothing is re-read or rewritten (best and
   median of ``--repeat`` runs); the number issue #34 sets a target for (at most 1 s on 2 cores);
3. **warm, full re-render** (``--force``): every record read and every board rendered again, no file
   rewritten since none changed, no PNG redrawn (best and median of ``--repeat`` runs);
4. **markdown only**: ``--no-plots --format md --force`` into a second copy (every record read, no plot
   looked at, none written), best and median of ``--repeat`` runs.

It also checks what it times: every regenerated file must be byte-identical to the cold run's and,
when the runs are the boards' own, to the committed boards; the PNGs must keep their inode and mtime;
every warm run must have found the manifest matching (its output says so: else an input changed while the
bench ran, and the warm time is a full regeneration's); the exit status is 1 otherwise, and when a timed
command fails (its command line and error are printed).
``--source DIR`` times another checkout instead (``DIR`` first on the commands' ``PYTHONPATH``,
e.g. ``git archive <commit> | tar -x -C DIR`` to compare with an earlier commit). See
docs/leaderboards.md for the numbers.

Example::

    fusebench bench leaderboard
    fusebench bench leaderboard --repeat 5 --skip-cold
"""

from __future__ import annotations

import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fusebench.runtime.terminal_help import Once, Parser


def _copy_boards(boards: Path, runs: Path, dest: Path) -> None:
    """The files of ``boards`` (top level only) but what ``fusebench leaderboard --runs runs`` writes:
    the index, the board of every benchmark folder under ``runs`` and the curves plots. What stays
    is what the command reads there: ``reported.yaml`` and the study boards (``*-kviews.md``) that
    the boards link."""
    from fusebench.leaderboard.fingerprint import MANIFEST

    regenerated = {"README.md"} | {f"{d.name}.md" for d in runs.iterdir() if d.is_dir()}
    dest.mkdir(parents=True)
    for path in sorted(boards.iterdir()):
        if path.is_file() and not path.name.endswith("-curves.png") and path.name not in regenerated \
                and path.name != MANIFEST:
            shutil.copy2(path, dest / path.name)


def _count_runs(runs: Path) -> int:
    """run.json files the leaderboard reads (hidden folders, e.g. ``.selection/``, are not read)."""
    from fusebench.records import find_records

    return len(find_records(runs))


def _pngs(folder: Path) -> dict[str, tuple[int, int, int]]:
    """name -> (inode, mtime_ns, size) of every PNG in ``folder``."""
    out = {}
    for p in sorted(folder.glob("*.png")):
        st = p.stat()
        out[p.name] = (st.st_ino, st.st_mtime_ns, st.st_size)
    return out


#: the board files compared (text formats; the PNGs are compared by inode and mtime)
TEXT_SUFFIXES = (".md", ".csv", ".json", ".html", ".tex")


def _markdown(folder: Path) -> dict[str, bytes]:
    """name -> bytes of every board file (:data:`TEXT_SUFFIXES`) directly in ``folder``."""
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())
            if p.suffix in TEXT_SUFFIXES and not p.name.startswith(".") and p.is_file()}


#: what ``fusebench leaderboard`` prints when its regeneration manifest matched (nothing read, nothing rendered)
MANIFEST_MATCHED = "nothing re-read"


def _run(cmd: list[str], env: dict[str, str], cwd: Path | None, said: list[str] | None = None) -> float:
    """Wall time of ``cmd`` (seconds); raises with its stderr when it fails. Its standard output is appended
    to ``said`` when given."""
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited with {proc.returncode}:\n{proc.stderr}")
    if said is not None:
        said.append(proc.stdout)
    return wall


def _machine() -> str:
    from fusebench.machine import cpu_model

    model = cpu_model()
    load = ""
    if hasattr(os, "getloadavg"):
        load = "; load average %.2f %.2f %.2f" % os.getloadavg()
    return f"{model}; {os.cpu_count()} logical cores; Python {platform.python_version()}{load}"


def main(argv: list[str]) -> int:
    p = Parser(prog="fusebench bench leaderboard", description=__doc__)
    p.add_argument("--boards", default=None,
                   help="the committed board folder (copied, never written; default: the repository's leaderboards/)")
    p.add_argument("--runs", default=None, help="run records (default: <boards>/runs; read only)")
    p.add_argument("--repeat", type=int, default=3, help="timed runs of the warm and markdown-only commands")
    p.add_argument("--skip-cold", action="store_true",
                   help="copy the committed plots instead of drawing them (no cold timing; ~30 s faster)")
    p.add_argument("--source", default=None,
                   help="time the fusebench of this checkout (put first on PYTHONPATH of the timed commands)")
    p.add_argument("--keep", action="store_true", help="keep the temporary folder and print where it is")
    from fusebench.leaderboard.cli import FORMATS

    p.add_argument("--format", dest="formats", nargs="+", action=Once, default=["md", "csv", "json", "html"],
                   choices=FORMATS, metavar="FORMAT",
                   help="the formats regenerated (fusebench leaderboard --format; default: md csv json html)")
    ns = p.parse_args(argv)
    from fusebench.leaderboard import repository_boards

    boards = Path(ns.boards) if ns.boards else repository_boards()
    if boards is None:
        print("fusebench bench leaderboard: no --boards given and this fusebench does not run from a repository "
              "checkout (no leaderboards/ beside the package); pass --boards DIR (a folder of committed boards) and "
              "--runs DIR if its run records are not in DIR/runs", file=sys.stderr)
        return 2
    runs = Path(ns.runs) if ns.runs else boards / "runs"
    for flag, folder in (("--boards", boards), ("--runs", runs)):
        if not folder.is_dir():
            default = " (the default: <boards>/runs)" if flag == "--runs" and not ns.runs else ""
            print(f"fusebench bench leaderboard: {flag} {folder}{default} is not a folder", file=sys.stderr)
            return 2
    if ns.repeat < 1:
        print("fusebench bench leaderboard: --repeat must be >= 1", file=sys.stderr)
        return 2
    if ns.source is not None:  # a checkout to time: it must hold the fusebench package (else the installed one is timed)
        source = Path(ns.source)
        why = ("does not exist" if not source.exists() else "is not a folder" if not source.is_dir() else
               "holds no fusebench package (no fusebench/__init__.py in it)"
               if not (source / "fusebench" / "__init__.py").is_file() else None)
        if why:
            print(f"fusebench bench leaderboard: --source {source} {why}; name a checkout of fusebench (e.g. "
                  f"git archive <commit> | tar -x -C DIR)", file=sys.stderr)
            return 2
    env = dict(os.environ)
    if ns.source:  # its commands run in the temporary folder, so the current folder does not shadow it
        env["PYTHONPATH"] = os.pathsep.join([str(Path(ns.source).resolve())] + (
            [env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    tmp = Path(tempfile.mkdtemp(prefix="fusebench-bench-leaderboard-"))
    cwd = tmp if ns.source else None
    failures: list[str] = []
    try:
        out, out_md = tmp / "boards", tmp / "boards-no-plots"
        _copy_boards(boards, runs, out)
        _copy_boards(boards, runs, out_md)
        (out / "runs").symlink_to(runs.resolve(), target_is_directory=True)  # read in place, linked as the pages expect
        own_runs = runs.resolve() == (boards / "runs").resolve()
        base = [sys.executable, "-m", "fusebench", "leaderboard", "--runs", str(out / "runs")]
        cmd = base + ["--out", str(out), "--format", *ns.formats]
        rows: list[tuple[str, str, str]] = []
        if ns.skip_cold:
            for png in sorted(boards.glob("*-curves.png")):
                shutil.copy2(png, out / png.name)
            rows.append(("cold (curves plots drawn)", "skipped", "committed plots copied"))
            _run(cmd, env, cwd)  # untimed: the first regeneration of the copy writes the manifest
        else:
            cold = _run(cmd, env, cwd)
            drawn = len(list(out.glob("*-curves.png")))
            rows.append(("cold (curves plots drawn)", f"{cold:.2f}", f"{drawn} plots drawn"))
        first_md = None if ns.skip_cold else _markdown(out)
        first_png = _pngs(out)
        warm, warm_said = [], []
        for _ in range(ns.repeat):
            warm.append(_run(cmd, env, cwd, warm_said))
            if first_md is not None and _markdown(out) != first_md:
                failures.append("the warm run's markdown differs from the cold run's")
            changed = sorted(n for n, v in _pngs(out).items() if first_png.get(n) != v)
            if changed:
                failures.append(f"the warm run rewrote {len(changed)} PNG(s): {', '.join(changed)}")
        force_help = subprocess.run(base + ["--help"], env=env, cwd=cwd, capture_output=True, text=True).stdout
        # the warm figure is the manifest's: a warm run that re-read everything (the manifest did not match, e.g.
        # fusebench's code edited while the bench ran) is not that figure, and is said (a fusebench from before the
        # manifest, --source without --force, has none to match)
        missed = sum(MANIFEST_MATCHED not in said for said in warm_said)
        if missed and "--force" in force_help:
            failures.append(f"{missed} of {len(warm)} warm run(s) re-read everything: the regeneration manifest did "
                            "not match (an input changed while the bench ran?), so the warm time is not the manifest's")
        rows.append(("warm (unchanged runs: the manifest matches)" if "--force" in force_help
                     else "warm (unchanged runs; the timed fusebench has no manifest)",
                     f"{min(warm):.2f} (median {statistics.median(warm):.2f})",
                     ("0 plots redrawn, PNG inode and mtime unchanged" if not any("PNG" in f for f in failures)
                      else "PNGs rewritten")
                     + (f"; the manifest did not match in {missed} of {len(warm)}" if missed and "--force" in force_help
                        else "")))
        if "--force" in force_help:  # a --source checkout from before the manifest has no --force
            full = []
            for _ in range(ns.repeat):
                full.append(_run(cmd + ["--force"], env, cwd))
                if first_md is not None and _markdown(out) != first_md:
                    failures.append("the --force run's files differ from the cold run's")
                changed = sorted(n for n, v in _pngs(out).items() if first_png.get(n) != v)
                if changed:
                    failures.append(f"the --force run rewrote {len(changed)} PNG(s): {', '.join(changed)}")
            rows.append(("warm, full re-render (--force)", f"{min(full):.2f} (median {statistics.median(full):.2f})",
                         "every record read, every board rendered, 0 files rewritten"))
        else:
            rows.append(("warm, full re-render (--force)", "skipped", "the timed fusebench has no --force"))
        pngs_before = _pngs(out_md)
        md_only = [_run(base + ["--out", str(out_md), "--no-plots", "--format", "md", "--force"], env, cwd)
                   for _ in range(ns.repeat)]
        written_png = sorted(n for n, v in _pngs(out_md).items() if pngs_before.get(n) != v)
        if written_png:
            failures.append(f"--no-plots wrote PNG(s): {', '.join(written_png)}")
        rows.append(("markdown only, full re-render (--no-plots --format md --force)", f"{min(md_only):.2f} (median {statistics.median(md_only):.2f})",
                     "no PNG written"))
        # every committed board file is regenerated byte-identically (the pages link the records by relative path:
        # compared only when the runs are the boards' own, linked into the copy where the committed pages expect them)
        committed = {n: b for n, b in _markdown(boards).items() if own_runs or not n.endswith(".html")}
        regenerated = _markdown(out)
        differ = sorted(n for n, text in committed.items() if regenerated.get(n) != text)
        if differ:
            failures.append(f"regenerated files differ from the committed boards: {', '.join(differ)}")
        print(f"fusebench bench leaderboard: {_count_runs(runs)} run.json files read from {runs}, "
              f"{len(_markdown(out))} board files ({', '.join(ns.formats)}) in the output")
        where = subprocess.run([sys.executable, "-c", "import fusebench.leaderboard as m; print(m.__file__)"],
                               env=env, cwd=cwd, capture_output=True, text=True).stdout.strip()
        print(f"timed: {where or '?'}")
        print(f"machine: {_machine()}")
        print(f"repeat: {ns.repeat} (wall time of a fresh `fusebench leaderboard` process, seconds)")
        print()
        print("| phase | wall time (s) | plots |")
        print("|---|---|---|")
        for phase, wall, note in rows:
            print(f"| {phase} | {wall} | {note} |")
        print()
        scope = "" if own_runs else ", pages not compared: --runs is not <boards>/runs"
        verdict = "yes" if not differ else f"NO ({', '.join(differ)})"
        print(f"identical to the committed boards ({len(committed)} files{scope}): {verdict}")
        if "--force" in force_help:
            print(f"warm regeneration: {min(warm):.2f} s, target <= 1 s (issue #34): "
                  f"{'met' if min(warm) <= 1.0 else 'NOT met'}; the full re-render takes {min(full) / min(warm):.1f}x "
                  f"as long (same run)")
        for f in failures:
            print(f"FAILED: {f}", file=sys.stderr)
        if ns.keep:
            print(f"kept: {tmp}")
        return 1 if failures else 0
    except RuntimeError as e:  # a timed `fusebench leaderboard` failed: its command and stderr, not a traceback
        print(f"fusebench bench leaderboard: {e}", file=sys.stderr)
        return 1
    finally:
        if not ns.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
