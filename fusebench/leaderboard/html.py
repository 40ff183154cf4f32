"""One self-contained HTML page per board and an ``index.html`` (``fusebench leaderboard --format html``).

A board page is made from the board's markdown (:func:`fusebench.leaderboard.render.render_board`) and
the same :class:`~fusebench.leaderboard.groups.GroupView` the markdown, CSV and JSON are rendered from:
every table cell is the markdown table's cell (:func:`fusebench.leaderboard.table.table_lines`), the
prose (data line, notes, published results, protocol) is the markdown's, converted by
:mod:`fusebench.leaderboard.html_markdown` (record text arrives escaped by
:func:`fusebench.leaderboard.columns.md_text` and leaves escaped by
:func:`~fusebench.leaderboard.columns.html_escape`: HTML's special characters, and the bidirectional-text controls
as visible escapes); the SVG is :mod:`fusebench.leaderboard.html_svg`'s. What the page adds: per metric cell the seed values as an inline-SVG strip
plot with the mean and its interval (the bootstrap CI for the primary metric, mean ± std otherwise),
the tie-with-best mark, the rank interval as a bar; per row a permalink anchor and a ``<details>`` panel
of its run records with relative links to each ``run.json``; the training curves as inline SVG; the
board data (:func:`fusebench.leaderboard.export.board_data`) inline as JSON; sorting (in the metric's
direction of better) and filtering (objective family, reference rows, comparability group) by a small
inline script that also reads them from the URL fragment (``#sort=<column>:desc&family=infonce&refs=off
&group=<key>``).

Offline and strict: no external URL of any kind, a Content-Security-Policy that allows only the page's
own inline style and script by hash (:mod:`fusebench.leaderboard.html_assets`), readable with scripts
off (a plain table with ``<th scope>``). Deterministic: the same inputs give the same bytes.
"""

from __future__ import annotations

import math
import os
import re
import shlex
import urllib.parse
from pathlib import Path
from typing import Any

from fusebench.leaderboard.columns import html_escape as escape  # html.escape, bidi controls shown as escapes
from fusebench.leaderboard.export import number
from fusebench.components.rows import is_reference
from fusebench.leaderboard.grouping import group_key
from fusebench.leaderboard.groups import GroupView
from fusebench.leaderboard.html_assets import CSS, JS, csp
from fusebench.leaderboard.html_markdown import md_blocks, md_inline, slug, split_row
from fusebench.leaderboard.html_svg import cd_svg, curves_svg, missing_svg, rank_bar_svg, sensitivity_svg, strip_svg
from fusebench.leaderboard.meta import embedded_json
from fusebench.leaderboard.table import table_lines
from fusebench.version import __version__

# -- pieces of a board page -----------------------------------------------------------------------------


def _v(x: float | int | None) -> str:
    """A sort value as the page holds it (``data-v``): the exported number's repr, "" when missing."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return ""
    return repr(number(x))


#: the family of the rows that score an encoder from a weights file (``--encoder-weights NAME=PATH``)
WEIGHTS_FAMILY = "encoder weights"


def family(row: str, recs: Any = ()) -> str:
    """The objective family of a row: ``reference`` for reference rows, :data:`WEIGHTS_FAMILY` for a weights row
    (a record of it among ``recs`` names it in its ``encoder_weights``), else the built-in loss module defining it,
    else (a plugin's id) the row itself."""
    if is_reference(row):
        return "reference"
    for r in recs:
        weights = r.config.get("encoder_weights") if r.objective == row else None
        if isinstance(weights, dict) and row in weights:
            return WEIGHTS_FAMILY
    try:
        from fusebench.objectives import OBJECTIVES  # the registry's module of an id (home); imports no torch

        home = OBJECTIVES.home(row)
    except Exception:  # noqa: BLE001 - a plugin or unknown id: its own family
        return row
    # home() names a module for any id (the id itself when unknown): a family only where a built-in module is it
    return home.rsplit(".", 1)[-1] if home in OBJECTIVES.modules else row


def _anchor(view_index: int, row: str) -> str:
    return f"g{view_index + 1}-{re.sub(r'[^A-Za-z0-9_.-]', '-', row)}"


def _columns(view: GroupView, header: list[str]) -> list[dict[str, Any]]:
    """Per markdown header cell: its sort key, type, direction of better and the per-row sort value."""
    p = view.primary
    pinfo = view.info(p) if p and any(m.id == p for m in view.metrics) else None
    cols: list[dict[str, Any]] = []
    by_header = {m.header: m for m in view.metrics}
    for h in header:
        col: dict[str, Any] = {"key": slug(h), "type": "num", "better": None, "metric": None, "value": None}
        if h == "objective":
            col.update(key="objective", type="text", value=lambda o: o)
        elif h in by_header:
            m = by_header[h]
            col.update(key=m.id, better=m.direction, metric=m, value=lambda o, m=m: view.mean(o, m.id))
        elif h.startswith(f"{p} 95% CI"):
            col.update(key="ci", better=pinfo.direction if pinfo else None,
                       value=lambda o: (view.ci[o][0] + view.ci[o][1]) / 2 if o in view.ci else None)
        elif h.startswith("Δ "):
            col.update(key="delta", better=pinfo.direction if pinfo else None,
                       value=lambda o: (view.tests.get(o) or {}).get("mean_diff"))
        elif h.startswith("rank [95%]"):
            col.update(key="rank", better="lower", value=lambda o: (view.ranks.get(o) or {}).get("rank"))
        elif h.startswith("vs best"):
            col.update(key="vs-best", better="higher",
                       value=lambda o: 2 if o == view.best.get(p) else (view.vs_best.get(o) or {}).get("p_holm"))
        elif h == "steps":
            col.update(value=lambda o: (view.budget(o) or {}).get("optimizer_steps", (None,))[0])
        elif h == "samples seen":
            col.update(key="samples", value=lambda o: (view.budget(o) or {}).get("samples_seen", (None,))[0])
        elif h.startswith("pretrain time"):
            col.update(key="time", better="lower", value=lambda o: view.cost(o)[0])
        elif h.startswith("peak memory"):
            col.update(key="memory", better="lower", value=lambda o: view.cost(o)[1])
        cols.append(col)
    metric_ids = {m.id for m in view.metrics}  # a metric named like a fixed column (time, rank, ci, ...) keeps
    for col in cols:  # its id as key (the URL fragment's sort=<metric>); the fixed column's key gets a "_",
        if col["metric"] is None and col["key"] != "objective" and col["key"] in metric_ids:  # never a metric id
            col["key"] = "_" + col["key"]
    return cols


def board_table(view: GroupView, vi: int) -> str:
    """The group's table: the markdown table's cells, with sort values, strip plots, tie marks and anchors."""
    lines = table_lines(view)
    header = split_row(lines[0])
    body = [split_row(r) for r in lines[2:]]
    cols = _columns(view, header)
    scale: dict[str, tuple[float, float]] = {}
    for c in cols:
        m = c["metric"]
        if m is None:
            continue
        pts = [v for o in view.rows for v in (view.values.get((o, m.id)) or {}).values()]
        if m.id == view.primary:
            pts += [x for ci in view.ci.values() for x in ci]
        for o in view.rows:
            s = view.summary(o, m.id)
            if s:
                pts += [s[0] - s[1], s[0] + s[1]]
        if pts:
            scale[m.id] = (min(pts), max(pts))
    ths = []
    for h, c in zip(header, cols):
        attrs = f' data-key="{escape(c["key"])}" data-type="{c["type"]}"'
        attrs += f' data-better="{c["better"]}"' if c["better"] else ""
        ths.append(f'<th scope="col" class="sortable"{attrs}>{md_inline(h)}</th>')
    trs = []
    for i, (o, cells) in enumerate(zip(view.rows, body)):
        anchor = _anchor(vi, o)
        ref = is_reference(o)
        tds = []
        for j, (cell, c) in enumerate(zip(cells, cols)):
            value = c["value"](o) if c["value"] else None
            dv = escape(value) if c["type"] == "text" else _v(value)
            if j == 0:
                tds.append(f'<th scope="row" data-v="{dv}">{md_inline(cell)}<a class="perm" href="#{anchor}" '
                           f'title="permalink">#</a> <a href="#runs-{anchor}">runs</a></th>')
                continue
            extra = ""
            m = c["metric"]
            if m is not None and m.id in scale:
                extra = strip_svg(view, o, m, *scale[m.id])
                if m.id == view.primary and (view.vs_best.get(o) or {}).get("tied"):
                    extra += ('<span class="tie" title="not separable from the best row (paired t-test, '
                              'Holm-adjusted)">≈ tied with best</span>')
            elif c["key"] == "rank":
                extra = rank_bar_svg(view, o)
            tds.append(f'<td class="num" data-v="{dv}">{md_inline(cell)}{extra}</td>')
        cls = ' class="ref"' if ref else ""
        fam = escape(family(o, view.recs))
        trs.append(f'<tr id="{anchor}"{cls} data-i="{i}" data-family="{fam}" data-ref="{int(ref)}">'
                   + "".join(tds) + "</tr>")
    return (f'<div class="wrap"><table class="board"><thead><tr>{"".join(ths)}</tr></thead>'
            f"<tbody>\n" + "\n".join(trs) + "\n</tbody></table></div>")


def _run_link(path: str, out_abs: str) -> str | None:
    try:
        rel = os.path.relpath(os.path.abspath(path), out_abs)
    except ValueError:  # another drive (Windows)
        return None
    # percent-encoded: a folder name with a space, "+", "@" or a non-ASCII letter keeps its link; ":" is
    # encoded too, so the link never has a scheme, and a relative path has no host
    rel = urllib.parse.quote(Path(rel).as_posix(), safe="/")
    return rel if rel and not rel.startswith("/") else None


def _short(x: Any, n: int = 12) -> str:
    return escape(str(x)[:n]) if x else "—"


def runs_panels(view: GroupView, vi: int, out_dir: Path) -> str:
    """Per row a ``<details>`` panel of its run records (merged aliases included)."""
    out = []
    out_abs = os.path.abspath(out_dir)
    head = ("<tr><th scope=\"col\">objective</th><th scope=\"col\">seed</th><th scope=\"col\">record</th>"
            "<th scope=\"col\">config hash</th><th scope=\"col\">git sha</th><th scope=\"col\">data fingerprint</th>"
            "<th scope=\"col\">device / precision</th><th scope=\"col\">steps / samples seen</th>"
            "<th scope=\"col\">pretrain time (s)</th><th scope=\"col\">peak memory (MiB)</th>"
            "<th scope=\"col\">selection</th></tr>")
    for o in view.rows:
        ids = {o, *view.aliases.get(o, [])}
        recs = sorted((r for r in view.recs if r.objective in ids), key=lambda r: (r.objective, r.seed, r.path))
        rows = []
        for r in recs:
            raw = r.raw
            link = _run_link(r.path, out_abs)
            rec = f'<a href="{escape(link)}">run.json</a>' if link else escape(Path(r.path).name)
            ds = raw.get("dataset") or {}
            fp = (ds.get("fingerprint") or {}).get("sha256") if isinstance(ds.get("fingerprint"), dict) else None
            fp = fp or ds.get("manifest_hash")
            numerics = raw.get("numerics") or {}
            dev = str(raw.get("device") or "?") + (f" ({numerics['device_name']})"
                                                   if isinstance(numerics, dict) and numerics.get("device_name") else "")
            b = raw.get("budget") if isinstance(raw.get("budget"), dict) else {}
            budget = (f"{b['optimizer_steps']:,} / {b['samples_seen']:,}"
                      if isinstance(b.get("optimizer_steps"), int) and isinstance(b.get("samples_seen"), int) else "—")
            sel = []
            hs = raw.get("hparam_selection")
            if isinstance(hs, dict) and isinstance(hs.get("choice"), dict):
                sel.append(", ".join(f"{k}={v}" for k, v in sorted(hs["choice"].items())))
            if isinstance(r.selection, dict) and r.selection.get("best_epoch") not in (None, -1):
                sel.append(f"best epoch {r.selection['best_epoch']}")
            rows.append(f"<tr><td><code>{escape(r.objective)}</code></td><td>{r.seed}</td><td>{rec}</td>"
                        f"<td><code>{_short(r.config_hash)}</code></td>"
                        f"<td><code>{_short((raw.get('git') or {}).get('sha'))}</code></td>"
                        f"<td><code>{_short(fp)}</code></td><td>{escape(dev)} / {escape(str(r.precision))}</td>"
                        f"<td>{budget}</td><td>{r.pretrain_time_s:.1f}</td><td>{r.peak_memory_mb:.0f}</td>"
                        f"<td>{escape('; '.join(sel)) or '—'}</td></tr>")
        anchor = _anchor(vi, o)
        out.append(f'<details id="runs-{anchor}"><summary><code>{escape(o)}</code>: {len(recs)} run(s)</summary>'
                   f'<div class="wrap"><table><thead>{head}</thead><tbody>' + "".join(rows)
                   + "</tbody></table></div></details>")
    return "<h4>Run records per row</h4>\n" + "\n".join(out)


# -- pages ----------------------------------------------------------------------------------------------


def json_block(data: Any) -> str:
    """``data`` as the text of a ``<script type="application/json">``: compact
    :func:`fusebench.leaderboard.meta.embedded_json` (strict JSON, ``<``, ``>`` and ``&`` as ``\\u``
    escapes), so no ``</script>`` or comment can close or open anything."""
    return embedded_json(data, separators=(",", ":"))


def page(title: str, body: str, data: Any, footer: str) -> str:
    """A whole page: CSP first, the inline style, the body, the data, the script."""
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f'<meta http-equiv="Content-Security-Policy" content="{csp()}">\n'
            '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            '<meta name="referrer" content="no-referrer">\n'
            f"<title>{escape(title)}</title>\n<style>{CSS}</style>\n</head>\n<body>\n{body}\n"
            f"<footer>{footer}</footer>\n"
            f'<script type="application/json" id="board-data">{json_block(data)}</script>\n'
            f"<script>{JS}</script>\n</body>\n</html>\n")


def command_line(runs_rel: str, plots: bool = True, split: bool = False, formats: Any = ("html",),
                 tex_columns: Any = None, reported_rel: str | None = None) -> str:
    """The ``fusebench leaderboard`` command that writes these pages, run in their folder, with the options
    the pages were made with (the footer's command)."""
    return (f"fusebench leaderboard --runs {shlex.quote(runs_rel)} --out ." + (" --no-plots" if not plots else "")
            + (" --split" if split else "")
            + (f" --reported {shlex.quote(reported_rel)}" if reported_rel is not None else "")
            + f" --format {' '.join(formats)}"
            + (f" --tex-columns {' '.join(tex_columns)}" if tex_columns and "tex" in formats else ""))


def _footer(views: list[GroupView] | None, command: str) -> str:
    suites = sorted({r.suite_version for v in views or [] for r in v.recs})
    suite = f"suite version of the runs: {escape(', '.join(suites))}; " if suites else ""
    return (f"Generated by <code>{escape(command)}</code> (run in this folder) from run.json files and, for how "
            f"each table compares its rows, the benchmark's current spec where one is installed (the Protocol "
            f"section says which); {suite}rendered by fusebench {__version__}. "
            "Do not edit by hand. Self-contained: opens offline, loads nothing.")


def _controls(views: list[GroupView]) -> str:
    fams = sorted({family(o, v.recs) for v in views for o in v.rows})
    opts = "".join(f'<option value="{escape(f)}">{escape(f)}</option>' for f in fams)
    out = (f'<form id="controls" class="controls" hidden><label>objective family <select id="f-family">'
           f'<option value="">all</option>{opts}</select></label>'
           f'<label><input type="checkbox" id="f-refs" checked> reference rows</label>')
    if len(views) > 1:
        keys = "".join(f'<option value="{escape(group_key(v.recs))}">{escape(group_key(v.recs))}'
                       f"</option>" for v in views)
        out += f'<label>comparability group <select id="f-group"><option value="">all</option>{keys}</select></label>'
    return out + " (click a column header to sort)</form>"


def render_board_page(name: str, views: list[GroupView], markdown: str, data: dict[str, Any], out_dir: Path,
                      runs_rel: str = "runs", pages: frozenset[str] = frozenset(), command: str | None = None) -> str:
    """``<name>.html`` from the board's ``markdown`` (its text as rendered) and ``views``: the markdown's
    blocks, each group's table and curves replaced by their richer HTML. ``command``: the footer's command
    (:func:`command_line`; default: ``--runs runs_rel`` with the default options and ``--format html``)."""
    lines = markdown.rstrip("\n").split("\n")
    hooks: dict[str, str] = {}
    for vi, view in enumerate(views):
        table = table_lines(view)
        start = next((k for k in range(len(lines)) if lines[k:k + len(table)] == table), None)
        if start is None:  # defensive: the markdown is rendered from these views
            raise ValueError(f"board {name}: group {vi + 1}'s table is not in its markdown")
        key = f"\x00table {vi}"
        hooks[key] = board_table(view, vi) + "\n" + runs_panels(view, vi, out_dir)
        lines[start:start + len(table)] = [key]
        end = next((k for k in range(start + 1, len(lines)) if lines[k].startswith("## Group ")), len(lines))
        for alt, draw in (("training curves", curves_svg), ("missing-view robustness", missing_svg),
                          ("hyper-parameter sensitivity", sensitivity_svg)):
            img = next((k for k in range(start, end) if lines[k].startswith(f"![{alt}](")), None)
            if img is not None:  # the markdown's plot (drawn when plots are on) as inline SVG
                key = f"\x00{alt} {vi}"
                hooks[key] = draw(view) or md_inline(lines[img], pages)
                lines[img] = key
    # one <section> per comparability group (the group filter hides the others)
    starts = [k for k, line in enumerate(lines) if re.match(r"## Group \d+ of \d+: ", line)]
    body: list[str] = []
    if len(views) > 1 and len(starts) == len(views):
        ends = starts[1:] + [next((k for k in range(starts[-1] + 1, len(lines)) if lines[k].startswith("## ")),
                                  len(lines))]
        body.append(md_blocks(lines[:starts[0]], pages, hooks))
        body.append(_controls(views))
        for view, a, b in zip(views, starts, ends):
            body.append(f'<section class="group" data-group="{escape(group_key(view.recs))}">'
                        + md_blocks(lines[a:b], pages, hooks) + "</section>")
        body.append(md_blocks(lines[ends[-1]:], pages, hooks))
    else:
        head = 2 if len(lines) > 2 else len(lines)  # the title (and blank line) above the controls
        body.append(md_blocks(lines[:head], pages, hooks))
        body.append(_controls(views))
        body.append(f'<section class="group" data-group="{escape(group_key(views[0].recs))}">'
                    + md_blocks(lines[head:], pages, hooks) + "</section>")
    body.insert(0, '<nav><a href="index.html">all leaderboards</a></nav>')
    return page(f"Leaderboard: {name}", "\n".join(body), data, _footer(views, command or command_line(runs_rel)))


def render_index_page(index_md: str, ranking: dict[str, Any], pages: frozenset[str], command: str | None = None) -> str:
    """``index.html`` from the index markdown (board links to their pages where those exist); ``command`` as
    for :func:`render_board_page`."""
    lines = index_md.rstrip("\n").split("\n")
    hooks = {}
    for line in lines:
        if line.startswith("![critical difference diagram]("):
            hooks[line] = cd_svg(ranking) if "cd" in ranking else md_inline(line, pages)
    data = {"boards": sorted(pages)}
    return page("fusebench leaderboards", md_blocks(lines, pages, hooks), data,
                _footer(None, command or command_line("runs")))
