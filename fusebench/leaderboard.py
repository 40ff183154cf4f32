"""``fusebench leaderboard``: markdown leaderboards generated from run.json files alone.

``write_leaderboards(runs_dir, out_dir)`` reads every ``run.json`` under ``runs_dir``, validates it
(:func:`fusebench.records.validate_record`), and writes for each benchmark it found runs of
``<out_dir>/<benchmark>.md`` and a curves plot ``<out_dir>/<benchmark>-curves.png``; then it rebuilds
the index ``<out_dir>/README.md`` from the metadata comment at the end of *every* board file in
``out_dir``, so regenerating from a runs folder holding only some benchmarks keeps the other boards
listed. The output is a pure function of the inputs: rerunning gives byte-identical files (records
are sorted, numbers formatted at fixed precision, no timestamps).

Grouping: runs share a table only when their comparability key (``fusebench.records``: benchmark,
config hash, suite / objective / metric versions, dataset identity) is equal. A benchmark whose runs
fall into several groups is refused, naming the files and the fields that differ, unless
``--split`` is given (one table per group). Two run files for the same (group, objective, seed) are
refused, naming both.

Table: one row per objective, one column per metric (arrow = direction and percent display from
the metric registry, ``fusebench.metrics``; the record's ``metric_directions`` for metrics outside
the registry; no arrow and no bold when the direction is unknown), cells ``mean ± std (n)`` over
seeds (sample std, ddof = 1; 0 when n = 1), the best mean in bold, a dash where missing; cost
columns (mean pretraining time, mean peak memory); and a paired test across seeds against the best
row on the primary metric: a two-sided paired t-test (scipy.stats.ttest_rel) over the seeds both
rows share, reported as a p-value ('n/a' with fewer than 2 shared seeds, '—' for the best row
itself; computed in closed form, with scipy's digits, see :func:`_paired_p`). Pipeline-check
boards (tiny synthetic twins) show the numbers without bold, best row or tests. Numbers printed in
the source papers come from ``reported.yaml`` (default ``<out_dir>/reported.yaml``, optional) and
are shown as "reported" rows: never ranked or bolded.
See docs/leaderboards.md.

Speed: regenerating on unchanged runs imports none of torch, numpy, scipy, matplotlib (metric
metadata from :mod:`fusebench.metrics.catalog`, matplotlib only to redraw a plot) and rewrites no
file whose content is unchanged; ``fusebench bench leaderboard`` times it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import tempfile
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fusebench.records import (RecordError, RunRecord, board_kind, differing_fields, find_records, load_record,
                               new_file_mode)
from fusebench.registry import ID_RULE, valid_id

BOARD_META = "fusebench-board"
_META_RE = re.compile(r"<!-- " + BOARD_META + r" (\{.*\}) -->\s*\Z", re.S)
KIND_TITLES = {"real": "real data", "study": "synthetic study", "pipeline_check": "pipeline check"}


# ---------------------------------------------------------------------------------------------
# loading and grouping
# ---------------------------------------------------------------------------------------------
def load_runs(runs_dir: Path) -> dict[str, list[RunRecord]]:
    """Every run.json under ``runs_dir``, validated, grouped by benchmark, in a deterministic order.
    Raises :class:`fusebench.records.RecordError` (a ValueError) for the first invalid file. Hidden
    folders (``.selection/``: the hyper-parameter trials on the validation split) are not read; what
    counts as a record file (a regular file, never through a symbolic link) is
    :func:`fusebench.records.find_records`'s rule, which ``fusebench status`` shares."""
    out: dict[str, list[RunRecord]] = defaultdict(list)
    for path in find_records(runs_dir):
        rec = load_record(path)
        out[rec.benchmark].append(rec)
    for recs in out.values():
        recs.sort(key=lambda r: (r.objective, r.seed, r.path))
    return dict(sorted(out.items()))


def _files(recs: list[RunRecord], limit: int = 6) -> str:
    paths = sorted(r.path for r in recs)
    shown = ", ".join(paths[:limit])
    return shown + (f" and {len(paths) - limit} more" if len(paths) > limit else "")


def group_runs(name: str, recs: list[RunRecord], split: bool = False) -> list[list[RunRecord]]:
    """Split ``recs`` (one benchmark) by comparability key; refuse duplicates and, unless ``split``,
    a benchmark with more than one group. Groups are ordered largest first, then by key."""
    by_key: dict[str, list[RunRecord]] = defaultdict(list)
    for r in recs:
        by_key[r.comparability_key].append(r)
    for key, group in by_key.items():
        seen: dict[tuple[str, int], RunRecord] = {}
        for r in group:
            other = seen.get((r.objective, r.seed))
            if other is not None:
                raise ValueError(
                    f"duplicate runs of benchmark {name!r}, objective {r.objective!r}, seed {r.seed}: "
                    f"{other.path} and {r.path} (a table counts each (objective, seed) once; remove one)")
            seen[(r.objective, r.seed)] = r
        by_version: dict[str, dict[str, list[RunRecord]]] = defaultdict(lambda: defaultdict(list))
        for r in group:  # one row = one objective version: a loss whose definition changed is not averaged
            by_version[r.objective][r.versions.objective].append(r)
        for objective, versions in sorted(by_version.items()):
            if len(versions) > 1:
                listing = "; ".join(f"version {v}: {_files(rs)}" for v, rs in sorted(versions.items()))
                raise ValueError(f"benchmark {name!r}, objective {objective!r} mixes runs of different objective "
                                 f"versions (the loss changed between them): {listing}. Move the old runs away.")
    groups = sorted(by_key.values(), key=lambda g: (-len(g), g[0].comparability_key))
    if len(groups) > 1 and not split:
        fields = differing_fields([g[0] for g in groups])
        lines = [f"benchmark {name!r} mixes runs that must not be compared: {len(groups)} comparability groups "
                 f"differing in {', '.join(fields) or 'their comparability key'}:"]
        for g in groups:
            lines.append(f"  group {g[0].comparability_key} ({len(g)} run(s)): {_files(g)}")
        lines.append("Move the odd runs to another runs folder, or pass --split for one table per group.")
        raise ValueError("\n".join(lines))
    return groups


# ---------------------------------------------------------------------------------------------
# metric metadata
# ---------------------------------------------------------------------------------------------
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
        return MetricInfo(metric, reg["unit"], reg["direction"])
    if len(set(stated.values())) > 1:
        first = {d: p for p, d in sorted(stated.items(), reverse=True)}
        raise ValueError(f"metric {metric!r} has direction 'higher' in {first['higher']} but 'lower' in "
                         f"{first['lower']}")
    return MetricInfo(metric, "raw", next(iter(stated.values()), None))


def _natural(name: str) -> list:
    """Sort key putting 'M2' before 'M10'."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def _fmt_value(unit: str, v: float) -> str:
    return f"{100 * v:.2f}" if unit == "fraction" else f"{v:.4f}"


def _fmt(unit: str, values: list[float], undefined: int = 0) -> str:
    """``mean ± std (n)`` of the defined values; ``undefined`` runs whose value is NaN (a metric
    undefined for that run) are counted as ``(n; k undefined)``, never silently dropped."""
    n = len(values)
    if n == 0:
        return f"— ({undefined} undefined)"
    mean = sum(values) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0
    return f"{_fmt_value(unit, mean)} ± {_fmt_value(unit, std)} ({n}{f'; {undefined} undefined' if undefined else ''})"


def student_t_two_sided(t: float, df: int) -> float:
    """P(|T| >= |t|) for Student's t with an integer ``df >= 1`` degrees of freedom.

    Closed form of the t distribution for integer df (Abramowitz & Stegun 26.7.3 / 26.7.4), with
    theta = atan(|t| / sqrt(df)): A = 2/pi (theta + sin(theta) cos(theta) sum) for odd df, A = sin(theta) sum for
    even df, where the finite sum runs over powers of cos^2(theta); the p-value is 1 - A. Exact up to
    rounding (absolute error ~1e-15): the same value as ``scipy.special.stdtr`` / ``scipy.stats.ttest_rel``
    to far more digits than a board prints (checked against scipy in tests/test_leaderboard_regen.py)."""
    if isinstance(df, bool) or not isinstance(df, int) or df < 1:
        raise ValueError(f"df must be an integer >= 1, got {df!r}")
    t = abs(float(t))
    if math.isnan(t):
        return math.nan
    if math.isinf(t):
        return 0.0
    theta = math.atan(t / math.sqrt(df))
    c2 = df / (df + t * t)  # cos^2(theta)
    total = term = 1.0
    if df % 2:
        for k in range(1, (df - 1) // 2):
            term *= c2 * (2 * k) / (2 * k + 1)
            total += term
        a = 2.0 / math.pi * (theta + (math.sin(theta) * math.cos(theta) * total if df > 1 else 0.0))
    else:
        for k in range(1, df // 2):
            term *= c2 * (2 * k - 1) / (2 * k)
            total += term
        a = math.sin(theta) * total
    return min(1.0, max(0.0, 1.0 - a))


def _paired_p(a: dict[int, float], b: dict[int, float]) -> str:
    """The p-value of a two-sided paired t-test over the seeds ``a`` and ``b`` share, as printed
    (3 decimals): the statistic of ``scipy.stats.ttest_rel`` and :func:`student_t_two_sided`, computed
    without importing scipy. Where the two could print differently, i.e. near-constant differences
    (scipy warns of catastrophic cancellation there) or a p-value within 1e-9 of a rounding boundary
    of the third decimal, scipy itself is asked, so the printed digits are always scipy's."""
    seeds = sorted(set(a) & set(b))
    if len(seeds) < 2:
        return "n/a"
    x = [a[s] for s in seeds]
    y = [b[s] for s in seeds]
    diffs = [u - v for u, v in zip(x, y)]
    if all(d == diffs[0] for d in diffs):
        return "1.000" if diffs[0] == 0 else "0.000"
    n = len(diffs)
    mean = math.fsum(diffs) / n
    dev = [d - mean for d in diffs]
    var = math.fsum(e * e for e in dev) / (n - 1)
    spread = max(abs(e) for e in dev)
    p = None
    if var > 0 and math.isfinite(var) and spread > 1e-12 * abs(mean):
        p = student_t_two_sided(mean / math.sqrt(var / n), n - 1)
        frac = 1000.0 * p - math.floor(1000.0 * p)
        if not math.isfinite(p) or abs(frac - 0.5) < 1e-6:
            p = None
    if p is None:  # the delicate cases: scipy's own digits
        from scipy.stats import ttest_rel

        p = float(ttest_rel(x, y).pvalue)
    return f"{p:.3f}"


def _cell_text(text: str) -> str:
    """Text safe inside one markdown table cell."""
    return " ".join(str(text).split()).replace("|", "\\|")


# ---------------------------------------------------------------------------------------------
# reported numbers (leaderboards/reported.yaml)
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Reported:
    """One number printed in a source paper (an entry of reported.yaml)."""

    benchmark: str
    label: str
    metric: str
    value: float  # in our metric's unit: a fraction for "fraction" metrics
    source: str  # "<paper file>, Table N"
    note: str = ""
    objective: str | None = None  # our objective id when the row is that objective
    printed: str = ""  # the string as printed in the paper
    protocol: str = ""  # how the paper's protocol differs from ours

    @property
    def reference(self) -> str:
        text = self.source + (f": {self.protocol}" if self.protocol else "")
        return text + (f" ({self.note})" if self.note else "")


_REPORTED_REQUIRED = ("benchmark", "label", "metric", "value", "source")
_REPORTED_OPTIONAL = ("note", "objective", "printed", "protocol")


def load_reported(path: Path | None) -> dict[str, list[Reported]]:
    """Entries of a reported.yaml grouped by benchmark; a missing file gives none."""
    if path is None or not Path(path).is_file():
        return {}
    import yaml

    try:
        # libyaml's safe loader when PyYAML has it (the same documents, ~10x faster than the pure-Python one)
        data = yaml.load(Path(path).read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except (OSError, yaml.YAMLError) as e:
        raise ValueError(f"{path}: not a readable YAML file ({e})") from None
    if data is None:
        return {}
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a list of entries {{{', '.join(_REPORTED_REQUIRED)}, ...}}")
    out: dict[str, list[Reported]] = defaultdict(list)
    seen = set()
    for i, e in enumerate(data):
        where = f"{path}: entry {i}"
        if not isinstance(e, dict):
            raise ValueError(f"{where}: expected a mapping, got {type(e).__name__}")
        unknown = sorted(set(e) - set(_REPORTED_REQUIRED) - set(_REPORTED_OPTIONAL))
        missing = [k for k in _REPORTED_REQUIRED if k not in e]
        if unknown or missing:
            raise ValueError(f"{where}: unknown key(s) {unknown}, missing key(s) {missing}; required keys "
                             f"{list(_REPORTED_REQUIRED)}, optional {list(_REPORTED_OPTIONAL)}")
        if not valid_id(e["benchmark"]):
            raise ValueError(f"{where}: benchmark {e['benchmark']!r} is not an id ({ID_RULE})")
        for k in ("label", "metric", "source"):
            if not isinstance(e[k], str) or not e[k].strip():
                raise ValueError(f"{where}: {k} must be a non-empty string, got {e[k]!r}")
        for k in ("note", "printed", "protocol"):
            if e.get(k) is not None and not isinstance(e[k], str):
                raise ValueError(f"{where}: {k} must be a string, got {e[k]!r}")
        if e.get("objective") is not None and not valid_id(e["objective"]):
            raise ValueError(f"{where}: objective must be an objective id or null, got {e['objective']!r}")
        v = e["value"]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(float(v)):
            raise ValueError(f"{where}: value must be a finite number (a fraction for percent metrics), got {v!r}")
        key = (e["benchmark"], e["label"], e["metric"])
        if key in seen:
            raise ValueError(f"{where}: {e['label']!r} reports {e['metric']} for {e['benchmark']} twice")
        seen.add(key)
        out[e["benchmark"]].append(Reported(e["benchmark"], e["label"], e["metric"], float(v), e["source"],
                                            e.get("note") or "", e.get("objective"), e.get("printed") or "",
                                            e.get("protocol") or ""))
    return {b: sorted(v, key=lambda r: (r.label, r.metric)) for b, v in sorted(out.items())}


# ---------------------------------------------------------------------------------------------
# one comparability group
# ---------------------------------------------------------------------------------------------
@dataclass
class GroupView:
    """Everything rendered for one comparability group of one benchmark."""

    name: str
    recs: list[RunRecord]
    kind: str
    metrics: list[MetricInfo]
    primary: str
    best: dict[str, str | None]
    values: dict[tuple[str, str], dict[int, float]]  # (objective, metric) -> seed -> value
    studies: list[tuple[str, str, str]] = field(default_factory=list)  # (title, markdown, plot) beside the board
    undefined: dict[tuple[str, str], int] = field(default_factory=dict)  # (objective, metric) -> runs with NaN

    @property
    def objectives(self) -> list[str]:
        return sorted({r.objective for r in self.recs})

    @property
    def ranked(self) -> bool:
        return self.kind != "pipeline_check"

    @property
    def seeds(self) -> list[int]:
        return sorted({r.seed for r in self.recs})

    def info(self, metric: str) -> MetricInfo:
        return next(m for m in self.metrics if m.id == metric)


def _group_kind(recs: list[RunRecord]) -> str:
    kinds = sorted({board_kind(r) for r in recs})
    if len(kinds) > 1:  # same comparability key implies the same dataset and config; defensive
        raise ValueError(f"runs {_files(recs)} mix board kinds {kinds}")
    return kinds[0]


def make_view(name: str, recs: list[RunRecord], extra_metrics: list[str] = ()) -> GroupView:
    order = recs[0].metric_order
    seen = sorted({m for r in recs for m in r.metrics}, key=_natural)
    ids = [m for m in order if m in seen] + [m for m in seen if m not in order]
    ids += [m for m in extra_metrics if m not in ids]
    infos = [metric_info(m, recs) for m in ids]
    primary = recs[0].primary_metric
    if primary not in seen:
        primary = ids[0] if seen else ""
    kind = _group_kind(recs)
    values: dict[tuple[str, str], dict[int, float]] = {}
    undefined: dict[tuple[str, str], int] = {}
    for r in recs:
        for m, v in r.metrics.items():
            if math.isfinite(v):
                values.setdefault((r.objective, m), {})[r.seed] = v
            else:  # NaN (validation refuses infinities): undefined for this run, counted in the cell
                undefined[(r.objective, m)] = undefined.get((r.objective, m), 0) + 1
    view = GroupView(name, recs, kind, infos, primary, {}, values, undefined=undefined)
    for info in infos:
        view.best[info.id] = None
        if not view.ranked or info.direction is None:
            continue
        means = {o: sum(v.values()) / len(v) for o in view.objectives if (v := values.get((o, info.id)))}
        if means and len(set(means.values())) > 1:  # no bold where every row ties
            target = max(means.values()) if info.direction == "higher" else min(means.values())
            view.best[info.id] = sorted(o for o in means if means[o] == target)[0]
    return view


# rows that are not pretraining objectives: random-init encoders, and the raw input views (embedding_eval)
REFERENCE_ROWS = ("none", "raw")


def best_line(view: GroupView) -> str | None:
    """The index's "best on primary metric" text; None for pipeline checks."""
    if not view.ranked:
        return None
    p = view.primary
    if not p:
        return "—"
    info = view.info(p)
    per = {o: list(v.values()) for o in view.objectives if (v := view.values.get((o, p)))}
    if not per:
        return "—"
    if info.direction is None:
        return f"— ({p}: direction unknown)"
    o = view.best.get(p)

    def cell(q: str) -> str:  # with the count of runs where the metric is undefined, like the table's cell
        return _fmt(info.unit, per[q], view.undefined.get((q, p), 0))

    if o is None:
        only = next(iter(per))
        return f"all tied ({p} {cell(only)})" if len(per) > 1 else f"`{only}` ({p} {cell(only)})"
    text = f"`{o}` ({p} {cell(o)})"
    if o in REFERENCE_ROWS:  # say which pretraining objective comes closest
        pre = {q: v for q, v in per.items() if q not in REFERENCE_ROWS}
        if pre:
            sign = 1.0 if info.direction == "higher" else -1.0
            q = max(sorted(pre), key=lambda q: sign * sum(pre[q]) / len(pre[q]))
            text += f"; best pretrained `{q}` ({cell(q)})"
    return text


def _table(view: GroupView, reported: list[Reported]) -> list[str]:
    header = ["objective"] + [m.header for m in view.metrics] + ["pretrain time (s) ↓", "peak memory (MiB) ↓"]
    if view.ranked:
        header.append(f"p vs best ({view.primary})")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    by_obj: dict[str, list[RunRecord]] = defaultdict(list)
    for r in view.recs:
        by_obj[r.objective].append(r)
    p = view.primary
    for o in view.objectives:
        row = [f"`{o}`"]
        for m in view.metrics:
            v = view.values.get((o, m.id))
            undefined = view.undefined.get((o, m.id), 0)
            if not v and not undefined:
                row.append("—")
                continue
            text = _fmt(m.unit, list((v or {}).values()), undefined)
            row.append(f"**{text}**" if v and view.best[m.id] == o else text)
        times = [r.pretrain_time_s for r in by_obj[o]]
        mems = [r.peak_memory_mb for r in by_obj[o]]
        row.append(f"{sum(times) / len(times):.1f}")
        row.append(f"{sum(mems) / len(mems):.0f}")
        if view.ranked:
            b = view.best.get(p) if p else None
            if b is None:
                row.append("n/a")
            else:
                row.append("—" if o == b else _paired_p(view.values.get((o, p), {}), view.values.get((b, p), {})))
        lines.append("| " + " | ".join(row) + " |")
    refs = _references(reported)
    for label in sorted({r.label for r in reported}):
        entries = [r for r in reported if r.label == label]
        vals = {r.metric: r.value for r in entries}
        objs = sorted({r.objective for r in entries if r.objective})
        cite = "".join(f"[R{n}]" for n in sorted({refs[r.reference] for r in entries}))
        ours = f" (our {', '.join(f'`{o}`' for o in objs)})" if objs else ""
        row = [f"*reported:* {_cell_text(label)}{ours} {cite}"]
        row += [_fmt_value(m.unit, vals[m.id]) if m.id in vals else "—" for m in view.metrics]
        row += ["—", "—"] + (["not tested"] if view.ranked else [])
        lines.append("| " + " | ".join(row) + " |")
    return lines


def _references(reported: list[Reported]) -> dict[str, int]:
    """Reference text -> footnote number, numbered in the order the rows (sorted by label) cite them."""
    refs: dict[str, int] = {}
    for r in sorted(reported, key=lambda r: (r.label, r.metric)):
        refs.setdefault(r.reference, len(refs) + 1)
    return refs


def _reported_notes(view: GroupView, reported: list[Reported]) -> list[str]:
    if not reported:
        return []
    out = ["", "*reported* rows: numbers printed in the source papers, not run by fusebench; never ranked, bolded "
               "or tested, and not comparable one to one (see each source's protocol)."]
    if view.kind != "real":
        out[-1] += " They are on the official dataset; this board's runs are not."
    out.append("")
    for text, i in _references(reported).items():
        out.append(f"- [R{i}] {' '.join(text.split())}")
    return out


def _data_line(view: GroupView) -> str:
    ds = view.recs[0].dataset
    if view.kind == "real":
        fp = f", data fingerprint `{ds.fingerprint.sha256[:12]}`" if ds.fingerprint else ""
        return (f"Data: **real** (dataset `{ds.id}`, manifest `{ds.manifest_hash[:16]}`{fp}); "
                f"seeds {', '.join(map(str, view.seeds))}.")
    if view.kind == "pipeline_check":
        data = "synthetic** twin of dataset" if ds.synthetic else "real** dataset"
        return (f"Data: **{data} `{ds.id}`. **Pipeline check**: a tiny smoke run that checks the pipeline end to "
                f"end; its numbers rank nothing (no best row, no tests).")
    return (f"Data: **synthetic** (dataset `{ds.id}`, synthetic by design); a reproducible study whose ranking "
            f"holds for this data only.")


def group_section(view: GroupView, reported: list[Reported], plot_name: str | None, level: int = 2) -> list[str]:
    """Table, notes, protocol and curves of one group (headings at ``level``)."""
    h = "#" * level
    cells = ("Cells are mean ± std (n seeds), sample std; metrics marked (%) are fractions shown x100; "
             "arrows give the direction of better.")
    if view.undefined:  # only boards with NaN metrics carry the note
        cells += (" `k undefined`: runs whose value of the metric is undefined (NaN in their run.json, e.g. a "
                  "correlation of constant predictions), left out of the mean, std, best and tests.")
    out = [_data_line(view), "", cells, ""]
    out += _table(view, reported)
    out += _reported_notes(view, reported)
    unknown = [m.id for m in view.metrics if m.direction is None]
    first = view.recs[0]
    suites = sorted({r.suite_version for r in view.recs})
    out += ["", f"{h} Protocol", "",
            f"- data: {KIND_TITLES[view.kind]} (dataset `{first.dataset.id}`)",
            f"- model selection: {' '.join(str(first.selection.get('rule', '')).split())}"]
    if view.ranked:
        out.append(f"- primary metric: `{view.primary}`; paired test: two-sided paired t-test over shared seeds "
                   "(scipy.stats.ttest_rel) against the best row")
    else:
        out.append(f"- primary metric: `{view.primary}`; pipeline check: no best row and no tests")
    out.append("- cost: mean pretraining wall time; peak memory = the process's peak resident set on CPU (in a sweep "
               "it includes earlier cells of the same process) or the CUDA allocator peak on GPU (device in run.json)")
    if unknown:
        out.append(f"- direction unknown (never bolded): {', '.join(f'`{m}`' for m in unknown)}")
    out.append(_precision_line(view))
    protocol: dict[str, str] = {}
    for r in view.recs:
        protocol.update(r.protocol)
    for key in sorted(protocol):
        out.append(f"- {key}: {' '.join(protocol[key].split())}")
    out.append(f"- runs: {len(view.recs)} run.json file(s), seeds {', '.join(map(str, view.seeds))}, "
               f"fusebench {', '.join(suites)}, comparability key `{first.comparability_key}`")
    chosen = _chosen_hparams(view)
    if chosen:
        out.append(f"- hyper-parameters chosen on the validation split: {chosen}")
    wall = sum(float(r.raw.get("wall_time_s") or 0.0) for r in view.recs)
    trials = sum(len((r.raw.get("hparam_selection") or {}).get("scores", [])) for r in _first_per_objective(view))
    out.append(f"- compute: {wall / 60:.1f} min in all, the sum of the {len(view.recs)} runs' wall times "
               f"(device {first.raw.get('device', '?')}, {(first.raw.get('host') or {}).get('cpu_count', '?')} CPUs)"
               + (f", plus {trials} selection run(s) on the validation split" if trials else ""))
    if plot_name:
        out += ["", f"{h} Training curves", "", f"![training curves]({plot_name})"]
    for study in view.studies:
        out += ["", f"{h} Study: {study[0]}", "", f"[{study[0]}]({study[1]}) — ![{study[0]}]({study[2]})"]
    return out


def _precision_line(view: GroupView) -> str:
    """The group's precision policy (one per group: it is part of the comparability key) and the
    devices its runs were made on (``numerics.device_name`` where recorded, else ``device``)."""
    from fusebench.training.precision import PRECISIONS

    name = view.recs[0].precision
    devices: dict[str, int] = {}
    for r in view.recs:
        numerics = r.raw.get("numerics") if isinstance(r.raw.get("numerics"), dict) else {}
        dev = str(r.raw.get("device", "?"))
        label = f"{dev} ({numerics['device_name']})" if numerics.get("device_name") else dev
        devices[label] = devices.get(label, 0) + 1
    shown = ", ".join(f"{d} x{n}" for d, n in sorted(devices.items()))
    return (f"- precision: `{name}` ({PRECISIONS[name].summary}); objectives and metrics compute in float32 or "
            f"wider whatever the precision (docs/gpu.md); runs on {shown}")


def _first_per_objective(view: GroupView) -> list[RunRecord]:
    seen: dict[str, RunRecord] = {}
    for r in view.recs:
        seen.setdefault(r.objective, r)
    return [seen[o] for o in sorted(seen)]


def _chosen_hparams(view: GroupView) -> str:
    """``obj`` name=value (grid) per objective whose records carry a validation-split selection."""
    parts = []
    for r in _first_per_objective(view):
        sel = r.raw.get("hparam_selection")
        if not isinstance(sel, dict) or not isinstance(sel.get("choice"), dict):
            continue
        grid = sel.get("grid") or {}
        choice = ", ".join(f"{k}={v} of {grid.get(k)}" for k, v in sorted(sel["choice"].items()))
        parts.append(f"`{r.objective}` {choice}")
    return "; ".join(parts)


def _meta(view: GroupView, title: str | None) -> dict[str, Any]:
    return {"kind": view.kind, "dataset": view.recs[0].dataset.id, "synthetic": view.recs[0].dataset.synthetic,
            "objectives": len(view.objectives),
            "seeds": view.seeds, "runs": len(view.recs), "best": best_line(view), "title": title,
            "key": view.recs[0].comparability_key}


def render_board(name: str, views: list[GroupView], reported: list[Reported],
                 plot_names: list[str | None]) -> str:
    """The whole board markdown of one benchmark (one section per group when split)."""
    out = [f"# Leaderboard: {name}", ""]
    desc = views[0].recs[0].description
    if desc:
        out += [" ".join(desc.split()), ""]
    metas = []
    if len(views) == 1:
        out += group_section(views[0], reported, plot_names[0], level=2)
        metas.append(_meta(views[0], None))
    else:
        fields = differing_fields([v.recs[0] for v in views])
        out += [f"The runs of this benchmark fall into {len(views)} comparability groups (runs that must not be "
                f"compared), one table each; they differ in {', '.join(fields)}.", ""]
        for i, (view, plot) in enumerate(zip(views, plot_names), 1):
            title = f"group {i} of {len(views)}"
            out += [f"## Group {i} of {len(views)}: key `{view.recs[0].comparability_key}`", ""]
            out += group_section(view, reported, plot, level=3)
            out.append("")
            metas.append(_meta(view, title))
        out = out[:-1]
    meta = {"benchmark": name, "groups": metas}
    out += ["", f"<!-- {BOARD_META} {json.dumps(meta, sort_keys=True, ensure_ascii=True)} -->"]
    return "\n".join(out) + "\n"


def benchmark_table(name: str, recs: list[RunRecord], plot_name: str | None = None,
                    reported: list[Reported] = ()) -> str:
    """The board of one benchmark whose runs form one comparability group."""
    (group,) = group_runs(name, recs)
    reported = list(reported)
    return render_board(name, [make_view(name, group, [r.metric for r in reported])], reported, [plot_name])


# ---------------------------------------------------------------------------------------------
# curves
# ---------------------------------------------------------------------------------------------
def _mean_band(series: list[list[float]]) -> tuple[list[float], list[float], list[float]]:
    n = min(len(c) for c in series)
    mean, lo, hi = [], [], []
    for i in range(n):
        xs = [c[i] for c in series if math.isfinite(c[i])]
        m = sum(xs) / len(xs) if xs else math.nan
        s = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else 0.0
        mean.append(m)
        lo.append(m - s)
        hi.append(m + s)
    return mean, lo, hi


def _curve_series(view: GroupView) -> tuple[dict[str, dict[str, list[list[float]]]], dict[str, list[list[float]]]]:
    """(objective -> loss key -> per-seed curves, objective -> per-seed validation primary-metric curves)."""
    val_key = f"val_{view.primary}" if view.primary else ""
    loss: dict[str, dict[str, list[list[float]]]] = defaultdict(lambda: defaultdict(list))
    val: dict[str, list[list[float]]] = defaultdict(list)
    for r in view.recs:
        for key in sorted(r.curves):
            if (key == "pretrain_loss" or key.startswith("loss_M")) and r.curves[key]:
                loss[r.objective][key].append(r.curves[key])
        if val_key and r.curves.get(val_key):
            val[r.objective].append(r.curves[val_key])
    return loss, val


def has_curves(view: GroupView) -> bool:
    loss, val = _curve_series(view)
    return bool(loss or val)


PLOT_VERSION = 1  # bump when plot_curves draws differently: every plot is redrawn once
PLOT_KEY = "fusebench-inputs"  # PNG text chunk holding the hash of what a plot was drawn from


def png_text(path: Path) -> dict[str, str]:
    """The tEXt chunks of a PNG file ({} for a missing or unreadable file)."""
    import struct

    try:
        data = path.read_bytes()
    except OSError:
        return {}
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        return {}
    out, pos = {}, 8
    while pos + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        if kind == b"tEXt":
            key, _, value = data[pos + 8:pos + 8 + length].partition(b"\0")
            out[key.decode("latin-1")] = value.decode("latin-1")
        if kind == b"IEND":
            break
        pos += 12 + length
    return out


def plot_key(view: GroupView, loss: dict, val: dict) -> str:
    """A hash of everything a board's plot is drawn from (curves, seeds, metric, unit, plot version):
    an unchanged key means the PNG on disk is already the plot of these runs."""
    import hashlib

    seeds = {o: sorted({r.seed for r in view.recs if r.objective == o}) for o in view.objectives}
    unit = view.info(view.primary).unit if view.primary else "raw"
    blob = json.dumps({"v": PLOT_VERSION, "name": view.name, "primary": view.primary, "unit": unit,
                       "objectives": list(view.objectives), "seeds": seeds, "loss": loss, "val": val},
                      sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def plot_curves(view: GroupView, path: Path) -> bool:
    """Per objective: the pretraining loss per step and the validation primary metric per downstream
    epoch, mean over seeds with a ± 1 std band. Returns False (and writes nothing) without curves.
    The PNG carries a hash of its inputs (:func:`plot_key`); when the file on disk already has the
    same hash it is left untouched (no redraw: regenerating unchanged boards costs no plotting)."""
    loss, val = _curve_series(view)
    objectives = [o for o in view.objectives if o in loss or o in val]
    if not objectives:
        return False
    inputs_key = plot_key(view, loss, val)
    if png_text(path).get(PLOT_KEY) == inputs_key:
        return True
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    has_val = bool(val)
    unit = view.info(view.primary).unit if view.primary else "raw"
    scale = 100.0 if unit == "fraction" else 1.0
    per_row = 2 if has_val else 3  # objectives per figure row
    ncols = per_row * (2 if has_val else 1)
    nrows = -(-len(objectives) // per_row)
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.1 * ncols, 2.5 * nrows), dpi=90, squeeze=False)
    flat = list(axes.flat)
    val_axes = []
    for i, o in enumerate(objectives):
        n_seeds = len({r.seed for r in view.recs if r.objective == o})
        ax = flat[i * (2 if has_val else 1)]
        if loss.get(o):
            for j, (key, series) in enumerate(sorted(loss[o].items(), key=lambda kv: _natural(kv[0]))):
                mean, lo, hi = _mean_band(series)
                xs = list(range(1, len(mean) + 1))
                label = f"M = {key[len('loss_M'):]}" if key != "pretrain_loss" else None
                ax.plot(xs, mean, color=f"C{j}", linewidth=1.2, label=label)
                ax.fill_between(xs, lo, hi, color=f"C{j}", alpha=0.25, linewidth=0)
            if len(loss[o]) > 1:
                ax.legend(fontsize=6, loc="upper right")
        else:
            ax.text(0.5, 0.5, "no pretraining", ha="center", va="center", fontsize=8, transform=ax.transAxes)
            ax.set_xticks([])
            ax.set_yticks([])
        ax.set_title(f"{o} (n={n_seeds}): pretraining loss", fontsize=8)
        ax.set_xlabel("pretraining step", fontsize=7)
        ax.set_ylabel("loss", fontsize=7)
        ax.tick_params(labelsize=6)
        if has_val:
            vax = flat[i * 2 + 1]
            if val.get(o):
                mean, lo, hi = _mean_band([[scale * x for x in c] for c in val[o]])
                xs = list(range(1, len(mean) + 1))
                vax.plot(xs, mean, color="C1", linewidth=1.2, marker="o", markersize=2)
                vax.fill_between(xs, lo, hi, color="C1", alpha=0.25, linewidth=0)
                val_axes.append((vax, lo, hi))
            else:
                vax.text(0.5, 0.5, "no validation curve", ha="center", va="center", fontsize=8,
                         transform=vax.transAxes)
                vax.set_xticks([])
                vax.set_yticks([])
            vax.set_title(f"{o} (n={n_seeds}): validation {view.primary}", fontsize=8)
            vax.set_xlabel("downstream epoch", fontsize=7)
            vax.set_ylabel(f"{view.primary}{' (%)' if unit == 'fraction' else ''}", fontsize=7)
            vax.tick_params(labelsize=6)
    finite = [x for _, lo, hi in val_axes for x in lo + hi if math.isfinite(x)]
    if finite:  # one y range for every validation panel so objectives compare by eye
        lo_all, hi_all = min(finite), max(finite)
        pad = 0.05 * (hi_all - lo_all) or 0.5
        for vax, _, _ in val_axes:
            vax.set_ylim(lo_all - pad, hi_all + pad)
    for ax in flat[len(objectives) * (2 if has_val else 1):]:
        ax.axis("off")
    what = "pretraining loss" + (f" and validation {view.primary}" if has_val else "")
    fig.suptitle(f"{view.name}: {what}; line = mean over seeds, band = ± 1 std", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    # a temporary name of its own (two regenerations into one folder draw the same plot at once)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, new_file_mode())
        with os.fdopen(fd, "wb") as f:
            fig.savefig(f, format="png", metadata={"Software": None, PLOT_KEY: inputs_key})
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    finally:
        plt.close(fig)
    return True


# ---------------------------------------------------------------------------------------------
# index
# ---------------------------------------------------------------------------------------------
def read_board_meta(path: Path) -> dict[str, Any] | None:
    """The metadata comment of a board file (None for a markdown file that is not a board)."""
    text = path.read_text()
    if not text.startswith("# Leaderboard: "):
        return None
    m = _META_RE.search(text)
    if not m:
        raise ValueError(f"{path}: a board without the '{BOARD_META}' metadata comment (written by an older "
                         f"fusebench?); regenerate it from its runs or delete it")
    try:
        meta = json.loads(m.group(1))
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: board metadata is not valid JSON ({e})") from None
    if not isinstance(meta, dict) or meta.get("benchmark") != path.stem or not isinstance(meta.get("groups"), list):
        raise ValueError(f"{path}: board metadata must name benchmark {path.stem!r} and list its groups")
    for g in meta["groups"]:
        if not isinstance(g, dict) or g.get("kind") not in KIND_TITLES:
            raise ValueError(f"{path}: board metadata group {g!r} lacks a valid kind")
    return meta


def _seeds_text(seeds: list[Any]) -> str:
    return ", ".join(str(s) for s in seeds)


def build_index(boards: dict[str, dict[str, Any]]) -> str:
    """The index markdown from ``{benchmark: board metadata}``: real data, synthetic studies, then the
    pipeline checks (which rank nothing)."""
    rows: dict[str, list[str]] = {"real": [], "study": [], "pipeline_check": []}
    for name in sorted(boards):
        for g in boards[name]["groups"]:
            link = f"[{name}]({name}.md)" + (f" ({g['title']})" if g.get("title") else "")
            seeds = _seeds_text(g.get("seeds", []))
            if g["kind"] == "pipeline_check":
                data = "synthetic" if g.get("synthetic", True) else "real"
                rows["pipeline_check"].append(
                    f"- {link}: dataset `{g.get('dataset')}` ({data}), {g.get('objectives')} objectives, "
                    f"seeds {seeds} ({g.get('runs')} runs)")
            else:
                rows[g["kind"]].append(f"| {link} | `{g.get('dataset')}` | {g.get('objectives')} | {seeds} | "
                                       f"{g.get('runs')} | {g.get('best') or '—'} |")
    head = "| benchmark | dataset | objectives | seeds | runs | best on primary metric |\n|---|---|---|---|---|---|"
    out = ["# fusebench leaderboards", "",
           "Generated by `fusebench leaderboard` from run.json files; do not edit by hand. This index lists every "
           "board in this folder (each board ends with a metadata comment), so regenerating boards from a runs "
           "folder holding only some benchmarks keeps the others. Format and rules: docs/leaderboards.md.", "",
           "## Real data", "",
           "Runs on real data files (each run record carries the dataset's manifest hash or a fingerprint of the "
           "files read); rows rank the objectives on that data. Reference rows: `none` = random-init encoders, "
           "`raw` = the standardised input views; when one of them is best, the best pretrained objective "
           "follows.", ""]
    out += [head] + rows["real"] if rows["real"] else ["No real-data runs yet."]
    out += ["", "## Synthetic studies", "",
            "Reproducible studies on data that is synthetic by design; rankings hold for that data only.", ""]
    out += [head] + rows["study"] if rows["study"] else ["None."]
    out += ["", "## Pipeline checks", "",
            "Tiny smoke runs, mostly synthetic twins of the real-data benchmarks. They check the pipeline end to "
            "end and **rank nothing**: no best row, no tests.", ""]
    out += rows["pipeline_check"] if rows["pipeline_check"] else ["None."]
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------------------------
# writing
# ---------------------------------------------------------------------------------------------
def _inside(out_dir: Path, filename: str) -> Path:
    """``out_dir / filename`` after checking that it names a file directly inside ``out_dir``."""
    path = out_dir / filename
    if Path(filename).name != filename or path.parent.resolve() != out_dir.resolve():
        raise ValueError(f"refusing to write {path}: not a file directly inside {out_dir}")
    return path


def write_if_changed(path: Path, text: str) -> bool:
    """Write ``text`` (UTF-8) to ``path`` through a temporary file in the same folder (a unique name:
    concurrent regenerations into one folder both succeed, the last rename wins) and an atomic
    rename, unless the file already holds exactly that: an unchanged file keeps its mtime. The file
    gets mode ``0o666 & ~umask`` (:func:`fusebench.records.new_file_mode`). Returns whether it wrote."""
    try:
        if path.read_bytes() == text.encode():
            return False
    except OSError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, new_file_mode())
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return True


def write_leaderboards(runs_dir: Path, out_dir: Path, plots: bool = True, split: bool = False,
                       reported: Path | None = None) -> list[Path]:
    """Regenerate the boards of the benchmarks with runs under ``runs_dir`` and the index; returns the
    markdown paths of those boards and the index (a file whose text did not change is left untouched,
    like a plot whose inputs did not). Everything is validated before the first file is written."""
    runs = load_runs(Path(runs_dir))
    out_dir = Path(out_dir)
    reported_map = load_reported(Path(reported) if reported is not None else out_dir / "reported.yaml")
    boards: list[tuple[str, list[GroupView], list[str]]] = []
    for name, recs in runs.items():
        if not valid_id(name):  # validated by the record schema already; never build paths from anything else
            raise ValueError(f"benchmark id {name!r} is not an id ({ID_RULE})")
        groups = group_runs(name, recs, split=split)
        rep = reported_map.get(name, [])
        views = [make_view(name, g, [r.metric for r in rep]) for g in groups]
        if (out_dir / f"{name}-kviews.md").exists():  # written by `fusebench study kviews`
            for v in views:
                v.studies.append(("k-views study", f"{name}-kviews.md", f"{name}-kviews.png"))
        plot_names = [f"{name}-curves.png" if len(views) == 1 else f"{name}-{v.recs[0].comparability_key}-curves.png"
                      for v in views]
        for p in plot_names + [f"{name}.md"]:
            _inside(out_dir, p)
        boards.append((name, views, plot_names))
    # the index: every board already in out_dir, with the regenerated ones replaced
    metas: dict[str, dict[str, Any]] = {}
    if out_dir.is_dir():
        for path in sorted(out_dir.glob("*.md")):
            if path.name != "README.md" and valid_id(path.stem) and path.stem not in runs:
                meta = read_board_meta(path)
                if meta is not None:
                    metas[path.stem] = meta
    written = []
    rendered = []  # every markdown text is made before the first file is written
    for name, views, plot_names in boards:
        shown = [plot if plots and has_curves(view) else None for view, plot in zip(views, plot_names)]
        md = render_board(name, views, reported_map.get(name, []), shown)
        metas[name] = json.loads(_META_RE.search(md).group(1))  # type: ignore[union-attr]
        rendered.append((name, views, shown, md))
    index_md = build_index(metas)
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, views, shown, md in rendered:
        for view, plot in zip(views, shown):
            if plot:
                plot_curves(view, _inside(out_dir, plot))
        path = _inside(out_dir, f"{name}.md")
        write_if_changed(path, md)
        written.append(path)
    index = _inside(out_dir, "README.md")
    write_if_changed(index, index_md)
    written.append(index)
    return written


def repository_boards() -> Path | None:
    """The repository's ``leaderboards/`` folder when this fusebench runs from a checkout (the folder
    holding the package also holds ``pyproject.toml`` and ``leaderboards/``), else None (an installed
    wheel). The default of the commands that read the committed boards from any current folder
    (``fusebench bench leaderboard``, ``fusebench study kviews``)."""
    root = Path(__file__).resolve().parents[1]
    boards = root / "leaderboards"
    return boards if (root / "pyproject.toml").is_file() and boards.is_dir() else None


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="fusebench leaderboard", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", default="leaderboards/runs", help="folder searched for run.json files")
    p.add_argument("--out", default="leaderboards", help="output folder for the markdown")
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--split", action="store_true",
                   help="one table per comparability group instead of refusing a benchmark whose runs mix groups")
    p.add_argument("--reported", default=None,
                   help="YAML file of numbers reported in the papers (default: <out>/reported.yaml, optional)")
    ns = p.parse_args(argv)
    if not Path(ns.runs).is_dir():
        print(f"fusebench leaderboard: runs folder {ns.runs} does not exist", file=sys.stderr)
        return 2
    if ns.reported is not None and not Path(ns.reported).is_file():
        print(f"fusebench leaderboard: --reported {ns.reported} does not exist", file=sys.stderr)
        return 2
    try:
        for path in write_leaderboards(Path(ns.runs), Path(ns.out), plots=not ns.no_plots, split=ns.split,
                                       reported=Path(ns.reported) if ns.reported else None):
            print(path)
    except (ValueError, OSError) as e:
        print(f"fusebench leaderboard: {e}", file=sys.stderr)
        return 2
    return 0
