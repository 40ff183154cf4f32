"""Metric columns of a board: a metric's unit, direction and header (:class:`MetricInfo`, from the
metric registry or the records), and how numbers print in a cell (mean ± std, differences, p-values,
markdown-safe text). Shared by the table, the published rows, the index and the plots."""

from __future__ import annotations

import html
import math
import re
import sys
from dataclasses import dataclass

from fusebench.io import shown_path
from fusebench.records import RecordError, RunRecord


@dataclass(frozen=True)
class MetricInfo:
    id: str
    unit: str  # "fraction" | "raw"
    direction: str | None  # "higher" | "lower" | None (unknown)

    @property
    def header(self) -> str:
        arrow = {"higher": " ↑", "lower": " ↓"}.get(self.direction or "", " (direction unknown)")
        return f"{self.id}{' (%)' if self.unit == 'fraction' else ''}{arrow}"


def metric_info(metric: str, recs: list[RunRecord]) -> MetricInfo:
    """Unit and direction of ``metric``: from the metric registry when registered (a record whose
    ``metric_directions`` disagrees is refused), else from the records (unit "raw")."""
    from fusebench import metrics as M  # light: built-in metadata comes from fusebench.metrics.catalog
    from fusebench.registry import UnknownNameError

    stated = {r.path: r.metric_directions[metric] for r in recs if metric in r.metric_directions}
    try:
        reg = M.metadata(metric)
    except (UnknownNameError, KeyError):
        reg = None
    if reg is not None:
        for path, d in sorted(stated.items()):
            if d != reg["direction"]:
                raise RecordError(path, f"metric_directions.{metric}",
                                  f"{reg['direction']!r} (the metric registry's direction)", d)
        if reg["unit"] == "fraction":  # built-in ids are checked when the record is read; a plugin's here
            from fusebench.records.schema import fraction_range_problem

            for r in sorted(recs, key=lambda r: r.path):
                x = r.metrics.get(metric)
                expected = fraction_range_problem(metric, reg["unit"], x) if x is not None else None
                if expected:
                    raise RecordError(r.path, f"metrics.{metric}", expected, x)
        return MetricInfo(metric, reg["unit"], reg["direction"])
    if len(set(stated.values())) > 1:
        first = {d: p for p, d in sorted(stated.items(), reverse=True)}
        raise ValueError(f"metric {metric!r} has direction 'higher' in {shown_path(first['higher'])} but 'lower' in "
                         f"{shown_path(first['lower'])}")
    return MetricInfo(metric, "raw", next(iter(stated.values()), None))


def natural_key(name: str) -> list:
    """Sort key putting 'M2' before 'M10'."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def shown_bound(x: float, up: bool = False, digits: int = 3) -> str:
    """``x >= 0`` rounded to ``digits`` significant digits, down (``up=False``) or up: a bound on ``x`` that stays on
    its side of a tolerance. A solver's largest marginal error is shown rounded down when every call converged (it
    is <= the tolerance: 0.0009996 against 0.001 never shows as 0.001) and rounded up when some call stopped at
    ``max_iter`` (it is above the tolerance: 0.0010068 shows as 0.00101, never as the tolerance itself)."""
    if not x > 0 or not math.isfinite(x):
        return f"{x:g}"
    step = 10.0 ** (math.floor(math.log10(x)) - digits + 1)
    if step == 0.0:  # x near the smallest float (5e-324): its digits' step underflows
        return f"{x:.{digits}g}"
    if up:  # (1 - 1e-12), (1 + 1e-12): a float quotient such as 0.07 / 0.0001 = 700.0000000000001 or 0.3 / 0.001 =
        return f"{math.ceil(x / step * (1 - 1e-12)) * step:.{digits}g}"  # 299.99999999999994 is the digit it shows
    return f"{math.floor(x / step * (1 + 1e-12)) * step:.{digits}g}"


def fmt_value(unit: str, v: float) -> str:
    """A value in the column's display units: fractions x100 with 2 decimals, others with 4 (in scientific notation
    from 1e9 on: a value near the float limit would print 300 digits); a statistic beyond the float range (the std of
    values near the limit) as the bound it exceeds; -0.0 as 0."""
    if not math.isfinite(v):
        return "nan" if math.isnan(v) else f"{'>' if v > 0 else '<'} {math.copysign(sys.float_info.max, v):.1e}"
    v += 0.0  # -0.0 (a record's value) shows as 0.00, not -0.00
    if unit == "fraction":
        return f"{100 * v:.2f}"
    return f"{v:.4f}" if abs(v) < 1e9 else f"{v:.4e}"


def mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (ddof 1; 0 for one value) of a non-empty list of values: the
    numbers of every board cell and of the CSV / JSON exports (:mod:`fusebench.leaderboard.export`)."""
    n = len(values)
    try:
        mean = sum(values) / n
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0
        if not (math.isfinite(mean) and math.isfinite(std)):  # a sum past the float range is inf, not an error
            raise OverflowError
    except OverflowError:  # |values| past ~1e154: the same formulas on values scaled by the largest magnitude
        scale = max(abs(v) for v in values)
        scaled = [v / scale for v in values]
        m = sum(scaled) / n
        mean = m * scale
        std = math.sqrt(sum((v - m) ** 2 for v in scaled) / (n - 1)) * scale if n > 1 else 0.0
    return mean, std


def fmt_stats(unit: str, mean: float | None, std: float | None, n: int, undefined: int = 0) -> str:
    """A cell ``mean ± std (n)``; ``undefined`` runs whose value is NaN (a metric undefined for that
    run) are counted as ``(n; k undefined)``, never silently dropped; ``— (k undefined)`` when n = 0."""
    if n == 0 or mean is None or std is None:
        return f"— ({undefined} undefined)"
    return f"{fmt_value(unit, mean)} ± {fmt_value(unit, std)} ({n}{f'; {undefined} undefined' if undefined else ''})"


def fmt_cell(unit: str, values: list[float], undefined: int = 0) -> str:
    """``mean ± std (n)`` of the defined values (:func:`mean_std`, :func:`fmt_stats`)."""
    if not values:
        return fmt_stats(unit, None, None, 0, undefined)
    return fmt_stats(unit, *mean_std(values), len(values), undefined)


def fmt_delta(unit: str, v: float) -> str:
    """A signed difference in the column's display units."""
    return f"{100 * v:+.2f}" if unit == "fraction" else f"{v:+.4f}"


def fmt_p(p: float) -> str:
    """A p-value as printed: 3 decimals, '< 0.001' below what they show."""
    return "< 0.001" if 0.0 < p < 0.0005 else f"{p:.3f}"


#: characters of record text that markdown (CommonMark / GFM) could read as markup, with their escapes:
#: a backslash before inline markers (code spans, emphasis, links and images, table cells, strikethrough,
#: math); HTML's ``&``, ``<`` and ``>`` as entities, so no tag, comment (``<!--``: the board's metadata
#: comment, :mod:`fusebench.leaderboard.meta`) or entity ever comes from a record
_MD_ESCAPES = {c: "\\" + c for c in "\\`*[]|~$"} | {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
#: C0 control characters other than whitespace, and DEL: shown as U+FFFD (never a NUL in a board; the HTML
#: page keys its hooks with one, :func:`fusebench.leaderboard.html.render_board_page`)
_MD_ESCAPES |= {chr(c): "\ufffd" for c in [*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20), 0x7F]}
#: the Unicode bidirectional-text controls (embeddings, overrides, isolates, the implicit marks): one in a record's
#: text reorders what follows it on the page (U+202E shows "txt.exe" as "exe.txt"); every board format shows each as
#: a visible escape ``\u202e`` instead (:func:`no_bidi`)
BIDI_CONTROLS = ("\u061c\u200e\u200f" + "".join(map(chr, range(0x202A, 0x202F)))
                 + "".join(map(chr, range(0x2066, 0x206A))))
_BIDI_ESCAPES = {c: f"\\u{ord(c):04x}" for c in BIDI_CONTROLS}
#: what every board format shows for text outside markdown (:func:`no_bidi`): the bidi escapes, and U+FFFD for the
#: C0 controls other than tab / newline / carriage return and DEL (as in markdown, :data:`_MD_ESCAPES`)
_BIDI_TABLE = str.maketrans({**_BIDI_ESCAPES, **{chr(c): "\ufffd" for c in [*range(0x00, 0x09), 0x0B, 0x0C,
                                                                          *range(0x0E, 0x20), 0x7F]}})
#: in markdown with its backslash escaped, as a record's own backslash is: ``\\u202e`` shows ``\u202e``
_MD_ESCAPES |= {c: "\\" + e for c, e in _BIDI_ESCAPES.items()}
_MD_TABLE = str.maketrans(_MD_ESCAPES)
#: an underscore that can open or close emphasis: not between two letters or digits (CommonMark: an
#: intraword ``_``, as in ``tuple_infonce``, never does)
_MD_UNDERSCORE = re.compile(r"(?<![^\W_])_|_(?![^\W_])")
#: a line start that markdown reads as a block (an ATX heading, a list item, a thematic break or a setext
#: underline, an ordered list's "1." / "1)"): its marker is escaped
_MD_BLOCK_START = re.compile(r"^(?:([#=+-])(?=[\s#=+-]|$)|(\d{1,9})([.)])(?=\s|$))")
#: text shown as a code span as it is (ids and names of these characters); anything else is escaped text
_MD_CODE_SAFE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@+ -]*")


def md_text(text: object) -> str:
    """Text from a record (or any input file) as markdown that shows it literally and stays on one
    line: whitespace runs (newlines included) become one space, markdown's inline markers are escaped
    with a backslash (``_`` where it could delimit emphasis, not inside a word), ``&``, ``<`` and ``>``
    become HTML entities, and a marker that would start a block at the start of the text (``#``, ``-``,
    ``+``, ``=`` followed by a space, ``1.``) is escaped; safe inside a table cell (``|`` escaped) and
    never a heading, a tag or an HTML comment; a bidirectional-text control (:data:`BIDI_CONTROLS`) shows as its
    escape (``\\u202e``), never reordering the text after it. The one escaping helper of every text a board or
    the index renders from records."""
    text = _MD_UNDERSCORE.sub(r"\\_", " ".join(str(text).split()).translate(_MD_TABLE))
    return _MD_BLOCK_START.sub(lambda m: f"\\{m[1]}" if m[1] else f"{m[2]}\\{m[3]}", text)


def no_bidi(text: object) -> str:
    """``text`` with each of :data:`BIDI_CONTROLS` replaced by its visible escape (``\\u202e``) and each control
    character but tab, newline and carriage return by U+FFFD (never a NUL or a terminal escape in a board): for the
    formats that show record text without :func:`md_text` (CSV cells, HTML attributes and text)."""
    return str(text).translate(_BIDI_TABLE)


def html_escape(text: object, quote: bool = True) -> str:
    """:func:`html.escape` of :func:`no_bidi` of ``text``: the one escaping of every text an HTML page shows."""
    return html.escape(no_bidi(text), quote)


def md_code(text: object) -> str:
    """A name from a record as a code span when it is made of letters, digits, ``_ . @ + -`` and spaces
    (shown as it is), else as :func:`md_text` (a code span would show an escape literally)."""
    text = " ".join(str(text).split())
    return f"`{text}`" if _MD_CODE_SAFE.fullmatch(text) else md_text(text)


def md_inline(text: object) -> str:
    """A one-line markdown text made of code spans and plain text (the "best on primary metric" line a board's
    metadata gives the index) shown as it was meant and no more: each code span as :func:`md_code` of its
    content, the rest as :func:`md_text` (its edge spaces kept), so a board file found in a folder cannot put
    markup, a tag, a link or a table cell into the index. None or empty: empty."""
    if not text:
        return ""
    out = []
    for i, part in enumerate(re.split(r"(`[^`\n]*`)", " ".join(str(text).split()))):
        if i % 2:
            out.append(md_code(part[1:-1]))
        elif part:
            edge = " " if part[-1] == " " and part.strip() else ""
            out.append((" " if part[0] == " " else "") + md_text(part) + edge)
    return "".join(out)
