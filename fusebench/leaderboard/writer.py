"""Writing a leaderboards folder (:func:`write_leaderboards`): every board of the benchmarks with runs,
their curves plots (and missing-view plots, :mod:`fusebench.leaderboard.robustness`), the index and its CD diagram, and on request each board's results as data (CSV,
JSON: :mod:`fusebench.leaderboard.export`). Everything is validated and rendered, the plots drawn (into memory,
:func:`fusebench.leaderboard.plots.staged_pngs`), before the first file is written, files are written only inside the output folder, and a file whose content is
unchanged (or a plot whose inputs are) is left untouched. Also where the committed boards of a
repository checkout are (:func:`repository_boards`)."""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path
from typing import Any

import fusebench.leaderboard.export as export
import fusebench.leaderboard.html as html_page
import fusebench.leaderboard.index as index_page
import os
import fusebench.leaderboard.plots as plotting
import fusebench.leaderboard.outputs as outputs
import fusebench.leaderboard.robustness as robustness
import fusebench.leaderboard.sensitivity as sensitivity
from fusebench.io import atomic_write_bytes, remove_stale_temps, write_if_changed
from fusebench.leaderboard.grouping import group_key, group_runs
from fusebench.leaderboard.groups import GroupView, load_runs, make_view
from fusebench.leaderboard.meta import read_board_meta, rendered_meta
from fusebench.leaderboard.render import render_board
from fusebench.leaderboard.reported import default_reported, load_reported
from fusebench.registry import ID_RULE, valid_id
from fusebench.runtime.progress import phase, track


#: seconds after which a temporary file of a target (``.<name>.<random>.tmp``, :func:`fusebench.io.atomic_write`)
#: is a killed regeneration's and is removed: a live write modifies its file as it goes and renames it within
#: seconds (a board is one write, a plot renders and writes in a few), so a concurrent regeneration's is never touched
STALE_TEMP_S = 600.0


def _inside(out_dir: Path, filename: str) -> Path:
    """``out_dir / filename`` after checking that it names a file directly inside ``out_dir``."""
    path = out_dir / filename
    if Path(filename).name != filename or path.parent.resolve() != out_dir.resolve():
        raise ValueError(f"refusing to write {path}: not a file directly inside {out_dir}")
    return path


def write_leaderboards(runs_dir: Path, out_dir: Path, plots: bool = True, split: bool = False,
                       reported: Path | None = None, formats: tuple[str, ...] | list[str] = ("md",),
                       tex_columns: tuple[str, ...] | list[str] | None = None, progress: bool = False) -> list[Path]:
    """Regenerate the boards of the benchmarks with runs under ``runs_dir`` and the index; returns the
    paths of those boards (per board its ``formats``: ``md`` the markdown, ``csv`` / ``json`` the
    results as data, :mod:`fusebench.leaderboard.export`; ``html`` the page,
    :mod:`fusebench.leaderboard.html`), with ``md`` their plots and the index with its CD diagram (with
    ``html``, ``index.html``). A file
    whose text did not change is left untouched, like a plot whose inputs did not. Without ``md`` no
    markdown, plot or index README is written. Everything is validated before the first file is written. The
    temporary files a killed regeneration left beside these files (older than :data:`STALE_TEMP_S`) are removed.
    ``progress``: say what it does while it reads the records and renders the boards (bars on a terminal, log
    lines elsewhere; ``fusebench leaderboard``)."""
    formats = export.check_formats(formats)
    outputs.check_tex_columns(formats, tex_columns)  # before any record is read
    with phase(f"leaderboard: reading the run records under {runs_dir}") if progress else nullcontext():
        runs = load_runs(Path(runs_dir))
    out_dir = Path(out_dir)
    reported_map = load_reported(Path(reported) if reported is not None else default_reported(out_dir))
    boards: list[tuple[str, list[GroupView], list[str], list[str], list[str]]] = []  # name, views, plots
    planned: dict[str, list[str]] = {}  # every file this regeneration may write -> who writes it
    for name, recs in track(runs.items(), len(runs), "leaderboard: tables computed (groups, statistics)",
                            progress and bool(runs)):
        if not valid_id(name):  # validated by the record schema already; never build paths from anything else
            raise ValueError(f"benchmark id {name!r} is not an id ({ID_RULE})")
        groups = group_runs(name, recs, split=split)
        views = [make_view(name, g) for g in groups]
        if (out_dir / f"{name}-kviews.md").exists():  # written by `fusebench study kviews`
            for v in views:
                v.studies.append(("k-views study", f"{name}-kviews.md", f"{name}-kviews.png"))
        plot_names = [f"{name}-curves.png" if len(views) == 1 else f"{name}-{group_key(v.recs)}-curves.png"
                      for v in views]
        missing_names = [f"{name}-missing.png" if len(views) == 1 else f"{name}-{group_key(v.recs)}-missing.png"
                         for v in views]  # drawn only for groups with missing-view metrics
        sens_names = [f"{name}-sensitivity.png" if len(views) == 1
                      else f"{name}-{group_key(v.recs)}-sensitivity.png" for v in views]  # tuned rows only
        for p in dict.fromkeys(plot_names + missing_names + sens_names + [f"{name}.{fmt}" for fmt in formats] +
                               outputs.extra_names(name, formats)):  # -seeds.csv, .tex (issue #32)
            planned.setdefault(p, []).append(f"the board {name!r}")
            _inside(out_dir, p)
        boards.append((name, views, plot_names, missing_names, sens_names))
    for p in (["README.md", index_page.CD_PLOT] if "md" in formats else []) + (["index.html"] if "html" in formats
                                                                               else []):
        planned.setdefault(p, []).append("the index")
    outputs.check_targets(planned, out_dir)  # two writers of one file, a folder where a file goes
    outputs.check_extras(runs, formats, out_dir, tex_columns)  # -seeds.csv collisions, tex columns
    md = "md" in formats
    web = "html" in formats  # the pages need the markdown text and the index (made, not written, without md)
    # the index: every board already in out_dir, with the regenerated ones replaced
    metas: dict[str, dict[str, Any]] = {}
    if (md or web) and out_dir.is_dir():
        for path in sorted(out_dir.glob("*.md")):
            if path.name != "README.md" and valid_id(path.stem) and path.stem not in runs:
                meta = read_board_meta(path)
                if meta is not None:
                    metas[path.stem] = meta
    # board pages linked from the pages: those written now and those already in out_dir
    pages = frozenset([*runs, *(m for m in metas if (out_dir / f"{m}.html").is_file())]) if web else frozenset()
    runs_rel = Path(os.path.relpath(os.path.abspath(runs_dir), os.path.abspath(out_dir))).as_posix() if web else ""  # links, not targets: a runs folder linked into --out reads as "runs"
    reported_rel = (Path(os.path.relpath(os.path.abspath(reported), os.path.abspath(out_dir))).as_posix()
                    if web and reported is not None else None)  # --reported as given, relative to the pages
    command = html_page.command_line(runs_rel, plots, split, formats, tex_columns, reported_rel) if web else ""
    written = []
    rendered = []  # every file's text is made before the first file is written
    extras: dict[str, str] = {}  # per-seed CSV and LaTeX table files (fusebench.leaderboard.outputs)
    for name, views, plot_names, missing_names, sens_names in track(boards, len(boards), "leaderboard: boards "
                                                                    "rendered", progress and bool(boards)):
        shown = [plot if plots and plotting.has_curves(view) else None for view, plot in zip(views, plot_names)]
        missing = [plot if plots and robustness.has_plot(view) else None for view, plot in zip(views, missing_names)]
        sens = [plot if plots and sensitivity.has_plot(view) else None for view, plot in zip(views, sens_names)]
        data = export.board_data(name, views) if set(formats) - {"md"} else None  # once for CSV and JSON
        texts = {fmt: export.RENDERERS[fmt](data) for fmt in formats if fmt in export.RENDERERS}
        extras.update(outputs.board_extras(name, runs[name], data, formats, tex_columns))
        if md or web:
            board_md = render_board(name, views, reported_map.get(name, []), shown, missing, sens)
            metas[name] = rendered_meta(board_md)
            if md:
                texts["md"] = board_md
            if web:
                texts["html"] = html_page.render_board_page(name, views, board_md, data, out_dir, runs_rel,
                                                            pages, command)
        rendered.append((name, views, shown, missing, sens, texts))
    if md or web:
        ranking = index_page.cross_dataset_ranking(metas)
        cd_plot = index_page.CD_PLOT if plots and "cd" in ranking else None
        index_md = index_page.build_index(metas, cd_plot, ranking)
        index_html = html_page.render_index_page(index_md, ranking, pages, command) if web else ""
    out_dir.mkdir(parents=True, exist_ok=True)
    targets = [*extras, *(["README.md", index_page.CD_PLOT] if md else []), *(["index.html"] if web else [])]
    for name, _, plot_names, missing_names, sens_names in boards:
        targets += [*plot_names, *missing_names, *sens_names, *(f"{name}.{fmt}" for fmt in formats)]
    for filename in targets:  # what a regeneration killed mid-write left: never kept forever
        remove_stale_temps(_inside(out_dir, filename), older_than=STALE_TEMP_S)
    # the plots drawn into memory first (plots.staged_pngs): one that fails to draw stops the regeneration before any
    # file is written, so the folder is never left part new, part old; an unchanged plot is neither drawn nor written
    with plotting.staged_pngs() as staged:
        for name, views, shown, missing, sens, texts in track(rendered, len(rendered), "leaderboard: plots drawn",
                                                              progress and bool(rendered) and md and plots):
            if md:
                for drawn, names in ((plotting.plot_curves, shown), (robustness.plot_missing, missing),
                                     (sensitivity.plot_sensitivity, sens)):
                    for view, plot in zip(views, names):
                        if plot and drawn(view, _inside(out_dir, plot)):  # True: the PNG is (or will be) there
                            written.append(out_dir / plot)
        if md and cd_plot and index_page.draw_cd_diagram(ranking, _inside(out_dir, cd_plot)):
            written.append(out_dir / cd_plot)
    for path, png in staged.items():
        atomic_write_bytes(path, png)
    for name, views, shown, missing, sens, texts in track(rendered, len(rendered), "leaderboard: boards written",
                                                          progress and bool(rendered)):
        for fmt in export.FORMATS:
            if fmt in texts:
                path = _inside(out_dir, f"{name}.{fmt}")
                write_if_changed(path, texts[fmt])
                written.append(path)
    for filename, text in extras.items():
        write_if_changed(_inside(out_dir, filename), text)
        written.append(out_dir / filename)
    if md:
        index_path = _inside(out_dir, "README.md")
        write_if_changed(index_path, index_md)
        written.append(index_path)
    if web:
        index_path = _inside(out_dir, "index.html")
        write_if_changed(index_path, index_html)
        written.append(index_path)
    return written


def repository_boards() -> Path | None:
    """The repository's ``leaderboards/`` folder when this fusebench runs from a checkout (the folder
    holding the package also holds ``pyproject.toml`` and ``leaderboards/``), else None (an installed
    wheel). The default of the commands that read the committed boards from any current folder
    (``fusebench bench leaderboard``, ``fusebench study kviews``)."""
    root = Path(__file__).resolve().parents[2]  # fusebench/leaderboard/writer.py
    boards = root / "leaderboards"
    return boards if (root / "pyproject.toml").is_file() and boards.is_dir() else None
