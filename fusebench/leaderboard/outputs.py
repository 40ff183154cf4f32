"""What a command that writes boards says at its end (issue #32, "say where and what"): each file it wrote
or left unchanged (:func:`fusebench.io.write_if_changed` keeps an unchanged file's inode and mtime), by a
look at the output folder before and after."""

from __future__ import annotations

import os
from pathlib import Path

from fusebench.io import shown_path

Snapshot = dict[str, tuple[int, int, int]]


def snapshot(folder: str | os.PathLike) -> Snapshot:
    """name -> (inode, mtime_ns, size) of every file directly inside ``folder`` (empty when it is absent)."""
    out: Snapshot = {}
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return out
    for e in entries:
        try:
            if e.is_file(follow_symlinks=False):
                st = e.stat(follow_symlinks=False)
                out[e.name] = (st.st_ino, st.st_mtime_ns, st.st_size)
        except OSError:
            continue
    return out


def file_lines(paths: list[Path], before: Snapshot) -> list[str]:
    """``wrote PATH`` or ``unchanged PATH`` for each of ``paths`` (files directly inside the folder that
    ``before`` was taken of, before the command wrote them); a control character in a path is escaped
    (:func:`fusebench.io.shown_path`)."""
    lines, after = [], {}
    for p in paths:
        folder = Path(p).parent
        if folder not in after:
            after[folder] = snapshot(folder)
        now = after[folder].get(Path(p).name)
        same = now is not None and before.get(Path(p).name) == now
        lines.append(f"{'unchanged' if same else 'wrote'} {shown_path(p)}")
    return lines


__all__ = ["file_lines", "snapshot"]


# ---- the board files beside the aggregate ones (issue #32): per-seed CSV, LaTeX table --------------------------
def extra_names(name: str, formats: tuple[str, ...] | list[str]) -> list[str]:
    """The files :func:`board_extras` writes for board ``name``: ``<name>-seeds.csv`` with ``csv``,
    ``<name>.tex`` with ``tex``."""
    return ([f"{name}-seeds.csv"] if "csv" in formats else []) + ([f"{name}.tex"] if "tex" in formats else [])


#: the first line of a per-seed CSV (:func:`fusebench.results.render_seeds_csv`): how a ``X-seeds.csv`` that
#: board ``X`` wrote is told from the aggregate CSV of a board named ``X-seeds``
SEEDS_CSV_HEAD = "benchmark,objective,seed"


def check_tex_columns(formats: tuple[str, ...] | list[str], tex_columns: tuple[str, ...] | list[str] | None) -> None:
    """``tex_columns`` are the columns of ``--format tex``: a ValueError when they are given without it (a
    setting is used or refused, never ignored)."""
    if tex_columns is not None and "tex" not in formats:
        raise ValueError("--tex-columns: the columns of --format tex; add tex to --format")


def _is_seeds_csv(path: Path) -> bool:
    """Whether ``path`` is a per-seed CSV (its first line starts with :data:`SEEDS_CSV_HEAD`)."""
    try:
        with open(path, "rb") as f:
            return f.read(len(SEEDS_CSV_HEAD)) == SEEDS_CSV_HEAD.encode()
    except OSError:
        return False


def check_targets(planned: dict[str, list[str]], out_dir: Path) -> None:
    """Before anything is written: a ValueError when two writers of one regeneration would write one file (a
    benchmark named ``index`` beside the index's ``index.html``), or a file's path in ``out_dir`` is a folder (or
    anything else that is not a file): one message naming the path, instead of the boards written before it and
    an OS error at its rename. ``planned``: file name -> who writes it."""
    for name, writers in planned.items():
        if len(writers) > 1:
            raise ValueError(f"{out_dir / name} would be written by both {' and '.join(writers[:2])}; write the "
                             f"boards into another --out folder, or rename the benchmark")
        path = out_dir / name
        if path.exists() and not path.is_file():
            raise ValueError(f"{path} is a folder (or another non-file) where {writers[0]} writes a file; move it "
                             f"away or write the boards into another --out folder")


def check_extras(runs: dict[str, list], formats: tuple[str, ...] | list[str], out_dir: Path,
                 tex_columns: tuple[str, ...] | list[str] | None = None) -> None:
    """Before anything is written: a ValueError when ``tex_columns`` are given without ``tex`` in ``formats``
    (:func:`check_tex_columns`), when a board's per-seed CSV would overwrite the file of another board already in
    ``out_dir``, a board ``X-seeds``: its ``.md``, ``.json``, ``.html`` or ``.tex``, or an ``X-seeds.csv`` that is not
    a per-seed CSV, so not board ``X``'s (a benchmark ``X-seeds`` beside ``X`` in ``runs`` is two writers of one file,
    :func:`check_targets`), or when a ``tex_columns``
    name is neither a column of :mod:`fusebench.leaderboard.tex` nor a metric of any record (a metric some boards
    lack is a column of dashes there)."""
    check_tex_columns(formats, tex_columns)
    if "csv" in formats:
        for name in runs:
            other = f"{name}-seeds"
            csv = out_dir / f"{other}.csv"
            if (any((out_dir / f"{other}.{ext}").is_file() for ext in ("md", "json", "html", "tex"))
                    or (csv.is_file() and not _is_seeds_csv(csv))):
                raise ValueError(f"benchmark {name!r}: its per-seed CSV {name}-seeds.csv would overwrite the CSV of "
                                 f"the board {other!r} in {out_dir}; write the boards of one of them into another "
                                 "--out folder")
    if "tex" in formats and tex_columns is not None:
        from fusebench.leaderboard.tex import check_columns

        check_columns(tex_columns, sorted({m for recs in runs.values() for r in recs for m in r.metrics}))


def board_extras(name: str, recs: list, data: dict | None, formats: tuple[str, ...] | list[str],
                 tex_columns: tuple[str, ...] | list[str] | None = None) -> dict[str, str]:
    """file name -> text of board ``name``'s extra files (:func:`extra_names`): the per-seed rows of its
    records (:func:`fusebench.results.render_seeds_csv`, cells neutralised as the board CSV's) and the
    booktabs table (:func:`fusebench.leaderboard.tex.render_tex` of ``data`` with ``tex_columns``)."""
    out: dict[str, str] = {}
    if "csv" in formats:
        from fusebench.leaderboard.export import _cell as csv_cell  # the board CSV's cell: rounding, formula guard
        from fusebench.results import render_seeds_csv

        out[f"{name}-seeds.csv"] = render_seeds_csv(recs, csv_cell)
    if "tex" in formats and data is not None:
        from fusebench.leaderboard.tex import DEFAULT_COLUMNS, render_tex

        out[f"{name}.tex"] = render_tex(data, tex_columns or DEFAULT_COLUMNS)
    return out


__all__ += ["SEEDS_CSV_HEAD", "board_extras", "check_extras", "check_tex_columns", "extra_names"]
