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

Table: one row per distinct loss (objectives that compute the same loss at the group's number of
views, :func:`fusebench.objectives.equivalence.groups`, share one row shown as ``a (≡ b)``), one
column per metric (arrow = direction and percent display from the metric registry,
``fusebench.metrics``; the record's ``metric_directions`` for metrics outside the registry; no arrow
and no bold when the direction is unknown), cells ``mean ± std (n)`` over seeds (sample std, ddof =
1; 0 when n = 1), the best mean in bold, a dash where missing; then, for the primary metric, a
percentile-bootstrap 95% CI of the mean over seeds and "Δ vs <reference> (Holm p)": the mean paired
difference to a FIXED reference row (``record["comparison"]["reference"]``, else ``raw``, else
``none``) with the p-value of a two-sided paired t-test over the shared seeds, Holm-adjusted over
the rows tested (:mod:`fusebench.stats`); the pretraining budget (optimiser steps, samples seen,
from ``record["budget"]``) and cost columns (mean pretraining time, mean peak memory). Under each
table: whether the pretraining budgets are equal, aliases whose numbers differ, rows flagged invalid
(``record["validity"]``; never ranked best). Pipeline-check boards (tiny synthetic twins) show the
numbers without bold, best row, interval or tests. Numbers printed in the source papers come from
``reported.yaml`` (default ``<out_dir>/reported.yaml``, optional) and are shown in their own section,
"Published results (not comparable to the runs above)": never ranked, bolded or tested.

The index ranks the objectives over the real-data boards of the ``embedding_eval`` protocol
(average ranks, Friedman test, Nemenyi critical difference, a CD diagram ``cd-diagram.png``;
Demšar 2006). See docs/leaderboards.md.

Speed: regenerating on unchanged runs imports neither torch nor matplotlib (metric metadata from
:mod:`fusebench.metrics.catalog`, matplotlib only to redraw a plot; numpy and scipy for the
statistics) and rewrites no file whose content is unchanged; ``fusebench bench leaderboard`` times it.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fusebench.training.reference_features import REFERENCE_KINDS
from fusebench.io import atomic_write, canonical_json, sha256_hex, write_if_changed
from fusebench.records import RecordError, RunRecord, board_kind, differing_fields, find_records, load_record
from fusebench.registry import ID_RULE, valid_id

BOARD_META = "fusebench-board"
# version of what a board shows; 2: fixed-reference tests, CIs, budgets, published section, per-row means
BOARD_FORMAT = 2
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


def _fmt_delta(unit: str, v: float) -> str:
    """A signed difference in the column's display units."""
    return f"{100 * v:+.2f}" if unit == "fraction" else f"{v:+.4f}"


def _fmt_p(p: float) -> str:
    """A p-value as printed: 3 decimals, '< 0.001' below what they show."""
    return "< 0.001" if 0.0 < p < 0.0005 else f"{p:.3f}"


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
# rows that are not pretraining objectives: random-init encoders, and the reference features of the
# embedding_eval protocol computed from the input views (the runner's REFERENCES; this module imports
# numpy-only reference_features, not the runner, which imports torch)
REFERENCE_ROWS = ("none", *REFERENCE_KINDS)
REFERENCE_TEXT = {"raw": "the standardised input views", "none": "random-init encoders"}
CI_LEVEL, CI_RESAMPLES, CI_SEED = 0.95, 10000, 0  # the bootstrap interval of every board


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
    rows: list[str] = field(default_factory=list)  # displayed ids (one per distinct loss), sorted
    aliases: dict[str, list[str]] = field(default_factory=dict)  # displayed id -> ids merged into its row
    num_views: int | None = None  # k, the number of views the objectives saw (None: not found in the records)
    invalid: dict[str, str] = field(default_factory=dict)  # row -> why (record["validity"])
    reference: str | None = None  # the fixed reference row of the tests
    reference_text: str = ""  # where the reference comes from, or why there is none
    why: str = ""  # why the primary metric (record["comparison"]["why"])
    tests: dict[str, dict[str, Any]] = field(default_factory=dict)  # row -> stats.paired_vs_reference result
    ci: dict[str, tuple[float, float]] = field(default_factory=dict)  # row -> bootstrap CI of the primary mean

    @property
    def objectives(self) -> list[str]:
        """Every objective with runs in the group (merged aliases included)."""
        return sorted({r.objective for r in self.recs})

    @property
    def ranked(self) -> bool:
        return self.kind != "pipeline_check"

    @property
    def seeds(self) -> list[int]:
        return sorted({r.seed for r in self.recs})

    @property
    def valid_rows(self) -> list[str]:
        """Rows that may be ranked: not flagged invalid."""
        return [o for o in self.rows if o not in self.invalid]

    def info(self, metric: str) -> MetricInfo:
        return next(m for m in self.metrics if m.id == metric)

    def mean(self, row: str, metric: str) -> float | None:
        v = self.values.get((row, metric))
        return sum(v.values()) / len(v) if v else None


def _group_kind(recs: list[RunRecord]) -> str:
    kinds = sorted({board_kind(r) for r in recs})
    if len(kinds) > 1:  # same comparability key implies the same dataset and config; defensive
        raise ValueError(f"runs {_files(recs)} mix board kinds {kinds}")
    return kinds[0]


def _record_views(r: RunRecord) -> int | None:
    """k, the number of views a record's objective saw: the views of the split actually read
    (``dataset.splits.views``, the multi-view ``.mat`` adapter), else the configured modalities
    (``config.dataset.modalities``), else the configured view subset (``config.dataset.options.views``);
    None when the record names none of them (e.g. embedded data whose modalities are fixed in code)."""
    ds = r.raw.get("dataset")
    splits = ds.get("splits") if isinstance(ds, dict) else None
    if isinstance(splits, dict) and isinstance(splits.get("views"), list) and splits["views"]:
        return len(splits["views"])
    cfg = r.config.get("dataset")
    if isinstance(cfg, dict):
        if isinstance(cfg.get("modalities"), list) and cfg["modalities"]:
            return len(cfg["modalities"])
        opts = cfg.get("options")
        if isinstance(opts, dict) and isinstance(opts.get("views"), list) and opts["views"]:
            return len(opts["views"])
    return None


def _num_views(recs: list[RunRecord]) -> int | None:
    found = {_record_views(r) for r in recs}
    return found.pop() if len(found) == 1 else None


def equivalence_groups(objectives: list[str], k: int | None,
                       hparams: dict[str, dict[str, Any] | None] | None = None) -> list[list[str]]:
    """Objectives of ``objectives`` (in order of display preference) merged into one row: those that
    compute the same loss at ``k`` views (:func:`fusebench.objectives.equivalence.groups`, reference
    rows and ids the objective registry does not know stay alone) **and** ran with the same
    hyper-parameters (:func:`fusebench.objectives.equivalence.same_hparams` of ``hparams[id]``, a
    record's ``hparams``; None = unknown or differing between seeds, never merged). Each returned
    group has at least two ids; its first is the one displayed. ``[]`` when ``k`` is unknown or the
    module is not there (no merging). The built-in objectives are answered from the equivalence
    module's own table, without importing the objective classes (torch)."""
    if k is None or k < 2 or len(objectives) < 2:
        return []
    try:
        from fusebench.objectives.equivalence import groups, same_hparams
    except ImportError:
        return []
    candidates = [o for o in objectives if o not in REFERENCE_ROWS]
    if len(candidates) < 2:
        return []
    hparams = hparams or {}
    out = []
    for g in groups(candidates, k, unknown="alone"):  # ids the registry does not know stay alone
        rows: list[list[str]] = []  # split by hyper-parameters: an alias joins the first row it matches
        for o in g:
            h = hparams.get(o, {})
            for row in rows:
                d = hparams.get(row[0], {})
                if h is not None and d is not None and same_hparams(d, h, row[0], o):
                    row.append(o)
                    break
            else:
                rows.append([o])
        out += [row for row in rows if len(row) > 1]
    return out


def _hparams(recs: list[RunRecord]) -> dict[str, dict[str, Any] | None]:
    """Per objective, the ``hparams`` its runs recorded (None when its seeds disagree or it is not a
    mapping); objectives whose records carry none get ``{}`` (the defaults)."""
    out: dict[str, dict[str, Any] | None] = {}
    for r in recs:
        h = r.raw.get("hparams", {})
        h = h if isinstance(h, dict) else None
        if r.objective not in out:
            out[r.objective] = h
        elif out[r.objective] is not None and h != out[r.objective]:
            out[r.objective] = None
    return out


def _display_order(recs: list[RunRecord]) -> list[str]:
    """The group's objectives in order of display preference: the benchmark's ``objectives`` list, then
    the others sorted."""
    present = {r.objective for r in recs}
    listed = recs[0].config.get("objectives")
    listed = [o for o in listed if isinstance(o, str)] if isinstance(listed, list) else []
    first = [o for i, o in enumerate(listed) if o in present and o not in listed[:i]]
    return first + sorted(present - set(first))


def _comparison(recs: list[RunRecord]) -> dict[str, str]:
    """The group's ``record["comparison"]`` ({} when the records carry none); every record must agree."""
    seen: dict[str, str] = {}
    for r in recs:
        c = r.raw.get("comparison")
        if c is None:
            continue
        if not isinstance(c, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in c.items()):
            raise RecordError(r.path, "comparison", 'a mapping {"reference": id, "primary": metric, "why": text}', c)
        text = json.dumps(c, sort_keys=True)
        seen.setdefault(text, r.path)
    if len(seen) > 1:
        (a, pa), (b, pb) = list(seen.items())[:2]
        raise ValueError(f"runs of one table disagree on how to compare the rows: {pa} has comparison {a}, "
                         f"{pb} has {b}")
    return json.loads(next(iter(seen))) if seen else {}


def _validity(r: RunRecord) -> str | None:
    """None for a valid record, else the reason it is not (``record["validity"]``)."""
    v = r.raw.get("validity")
    if v is None:
        return None
    if not isinstance(v, dict) or not isinstance(v.get("valid"), bool) or not isinstance(v.get("why", ""), str):
        raise RecordError(r.path, "validity", 'a mapping {"valid": true|false, "why": text}', v)
    return None if v["valid"] else (" ".join(v.get("why", "").split()) or "no reason given")


def _budget(r: RunRecord) -> dict[str, Any] | None:
    """``record["budget"]`` checked (None when absent)."""
    b = r.raw.get("budget")
    if b is None:
        return None
    if not isinstance(b, dict):
        raise RecordError(r.path, "budget", "a mapping {optimizer_steps, samples_seen, batch_size, micro_batch, "
                                            "epochs}", b)
    for key in ("optimizer_steps", "samples_seen"):
        v = b.get(key)
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise RecordError(r.path, f"budget.{key}", "an integer >= 0", v)
    for key in ("batch_size", "micro_batch", "epochs"):
        v = b.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
            raise RecordError(r.path, f"budget.{key}", "an integer >= 0 or null", v)
    return b


def make_view(name: str, recs: list[RunRecord], extra_metrics: list[str] = ()) -> GroupView:
    """Everything one comparability group's table shows: metric columns (``extra_metrics``: more
    columns, e.g. metrics no run has), the primary metric, per-(objective, metric) values, the rows
    (merged aliases, invalid rows), the best row per metric, and for ranked groups the fixed
    reference row, the bootstrap intervals and the paired tests. Malformed ``comparison``,
    ``validity`` or ``budget`` fields raise :class:`fusebench.records.RecordError`."""
    order = recs[0].metric_order
    seen = sorted({m for r in recs for m in r.metrics}, key=_natural)
    ids = [m for m in order if m in seen] + [m for m in seen if m not in order]
    ids += [m for m in extra_metrics if m not in ids]
    infos = [metric_info(m, recs) for m in ids]
    comparison = _comparison(recs)
    primary = comparison.get("primary") or recs[0].primary_metric
    if primary not in seen:
        primary = ids[0] if seen else ""
    kind = _group_kind(recs)
    values: dict[tuple[str, str], dict[int, float]] = {}
    undefined: dict[tuple[str, str], int] = {}
    invalid_by_obj: dict[str, list[str]] = defaultdict(list)
    for r in recs:
        for m, v in r.metrics.items():
            if math.isfinite(v):
                values.setdefault((r.objective, m), {})[r.seed] = v
            else:  # NaN (validation refuses infinities): undefined for this run, counted in the cell
                undefined[(r.objective, m)] = undefined.get((r.objective, m), 0) + 1
        why = _validity(r)
        if why is not None and why not in invalid_by_obj[r.objective]:
            invalid_by_obj[r.objective].append(why)
        _budget(r)
    objectives = sorted({r.objective for r in recs})
    k = _num_views(recs)
    aliases: dict[str, list[str]] = {}
    merged: set[str] = set()
    for g in equivalence_groups(_display_order(recs), k, _hparams(recs)):
        g = [o for o in g if o not in merged and o not in aliases]
        if len(g) > 1:
            aliases[g[0]] = g[1:]
            merged.update(g[1:])
    rows = [o for o in objectives if o not in merged]
    view = GroupView(name, recs, kind, infos, primary, {}, values, undefined=undefined, rows=rows,
                     aliases=aliases, num_views=k, why=" ".join(comparison.get("why", "").split()))
    view.invalid = {o: "; ".join(invalid_by_obj[o]) for o in rows if invalid_by_obj.get(o)}
    for info in infos:
        view.best[info.id] = None
        if not view.ranked or info.direction is None:
            continue
        means = {o: m for o in view.valid_rows if (m := view.mean(o, info.id)) is not None}
        if means and len(set(means.values())) > 1:  # no bold where every row ties
            target = max(means.values()) if info.direction == "higher" else min(means.values())
            view.best[info.id] = sorted(o for o in means if means[o] == target)[0]
    if view.ranked:
        _set_reference(view, comparison)
        _run_statistics(view)
    return view


def _set_reference(view: GroupView, comparison: dict[str, str]) -> None:
    """The fixed reference row: ``comparison["reference"]`` (mapped to its displayed row when it is a
    merged alias), else ``raw`` when the group has it, else ``none``."""
    named = comparison.get("reference")
    shown = {a: d for d, al in view.aliases.items() for a in al}
    if named:
        row = shown.get(named, named)
        if row in view.rows:
            view.reference = row
            view.reference_text = f"`{named}`, set by the benchmark" + (f" (shown as `{row}`)" if row != named else "")
        else:
            view.reference_text = f"the runs name `{named}` as the reference row, but it has no runs in this table"
        return
    for row in ("raw", "none"):
        if row in view.rows:
            view.reference = row
            view.reference_text = f"`{row}` ({REFERENCE_TEXT[row]}; the default reference)"
            return
    view.reference_text = "no reference row (`raw` or `none`) in this table"


def _run_statistics(view: GroupView) -> None:
    """Bootstrap CIs of every row's primary mean and the paired tests against the reference."""
    p = view.primary
    if not p:
        return
    from fusebench import stats

    for o in view.rows:
        v = view.values.get((o, p))
        if v:
            view.ci[o] = stats.bootstrap_ci([v[s] for s in sorted(v)], level=CI_LEVEL, n_boot=CI_RESAMPLES,
                                            seed=CI_SEED)
    ref = view.reference
    if ref is None or not view.values.get((ref, p)):
        return
    family = {o: view.values[(o, p)] for o in view.valid_rows if view.values.get((o, p))}
    family[ref] = view.values[(ref, p)]
    view.tests = stats.paired_vs_reference(family, ref)


def best_line(view: GroupView) -> str | None:
    """The index's "best on primary metric" text; None for pipeline checks."""
    if not view.ranked:
        return None
    p = view.primary
    if not p:
        return "—"
    info = view.info(p)
    per = {o: list(v.values()) for o in view.valid_rows if (v := view.values.get((o, p)))}
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


def _row_label(view: GroupView, o: str) -> str:
    label = f"`{o}`"
    if view.aliases.get(o):
        label += f" (≡ {', '.join(f'`{a}`' for a in view.aliases[o])})"
    if o in view.invalid:
        label += f" (invalid: {_cell_text(view.invalid[o])})"
    return label


def _row_budget(view: GroupView, o: str) -> tuple[str, str]:
    """The (steps, samples seen) cells of a row: the value when every seed agrees, 'min–max' otherwise."""
    budgets = [b for r in view.recs if r.objective == o and (b := _budget(r)) is not None]
    if not budgets:
        return "—", "—"
    cells = []
    for key in ("optimizer_steps", "samples_seen"):
        vals = sorted({b[key] for b in budgets})
        cells.append(f"{vals[0]:,}" if len(vals) == 1 else f"{vals[0]:,}–{vals[-1]:,}")
    return cells[0], cells[1]


def _delta_cell(view: GroupView, o: str) -> str:
    if o == view.reference:
        return "reference"
    if o in view.invalid:
        return "— (invalid)"
    res = view.tests.get(o)
    if res is None:
        return "—"
    if res["mean_diff"] is None:
        return "— (no shared seed)"
    unit = view.info(view.primary).unit
    delta = _fmt_delta(unit, res["mean_diff"])
    if res["p_holm"] is None:
        return f"{delta} (n/a: {res['n']} seed)"
    return f"{delta} ({_fmt_p(res['p_holm'])})"


def _table(view: GroupView) -> list[str]:
    p = view.primary
    stats_cols = view.ranked and bool(p)
    header = ["objective"] + [m.header for m in view.metrics]
    if stats_cols:
        pct = " (%)" if view.info(p).unit == "fraction" else ""
        header.append(f"{p} 95% CI{pct}")
        if view.reference:
            header.append(f"Δ {p} vs `{view.reference}` (Holm p)")
    header += ["steps", "samples seen", "pretrain time (s) ↓", "peak memory (MiB) ↓"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    by_obj: dict[str, list[RunRecord]] = defaultdict(list)
    for r in view.recs:
        by_obj[r.objective].append(r)
    for o in view.rows:
        row = [_row_label(view, o)]
        for m in view.metrics:
            v = view.values.get((o, m.id))
            undefined = view.undefined.get((o, m.id), 0)
            if not v and not undefined:
                row.append("—")
                continue
            text = _fmt(m.unit, list((v or {}).values()), undefined)
            row.append(f"**{text}**" if v and view.best[m.id] == o else text)
        if stats_cols:
            ci = view.ci.get(o)
            unit = view.info(p).unit
            row.append(f"[{_fmt_value(unit, ci[0])}, {_fmt_value(unit, ci[1])}]" if ci else "—")
            if view.reference:
                row.append(_delta_cell(view, o))
        row += list(_row_budget(view, o))
        times = [r.pretrain_time_s for r in by_obj[o]]
        mems = [r.peak_memory_mb for r in by_obj[o]]
        row.append(f"{sum(times) / len(times):.1f}")
        row.append(f"{sum(mems) / len(mems):.0f}")
        lines.append("| " + " | ".join(row) + " |")
    return lines


def _budget_text(b: tuple[int, int, Any, Any]) -> str:
    steps, samples, batch, epochs = b
    extra = [f"batch {batch}" if batch is not None else "", f"{epochs} epochs" if epochs is not None else ""]
    extra = [e for e in extra if e]
    return f"{steps:,} optimizer steps, {samples:,} samples seen" + (f" ({', '.join(extra)})" if extra else "")


def _budget_line(view: GroupView) -> str | None:
    """Whether the pretrained rows (all but the reference rows) had equal pretraining budgets."""
    pretrained = [o for o in view.rows if o not in REFERENCE_ROWS]
    if not pretrained:
        return None
    per: dict[str, set] = {}
    missing = []
    for o in pretrained:
        budgets = [b for r in view.recs if r.objective == o and (b := _budget(r)) is not None]
        if not budgets:
            missing.append(o)
            continue
        per[o] = {(b["optimizer_steps"], b["samples_seen"], b.get("batch_size"), b.get("epochs")) for b in budgets}
    if not per:
        return "Pretraining budget: not recorded in these runs (records without a `budget` field)."
    tail = f" Not recorded for {', '.join(f'`{o}`' for o in missing)}." if missing else ""
    keys = {o: {(s, n) for s, n, _, _ in v} for o, v in per.items()}  # (steps, samples seen) per row
    every = {b for v in keys.values() for b in v}
    if len(every) == 1:  # equal: one (steps, samples seen) for every row and seed
        full = {b for v in per.values() for b in v}  # with batch and epochs, when those agree too
        shown = next(iter(full)) if len(full) == 1 else (*next(iter(every)), None, None)
        return (f"Pretraining budget: **equal** across the {len(per)} pretrained row(s): {_budget_text(shown)} "
                f"each.{tail}")
    counts: dict[tuple[int, int], int] = defaultdict(int)
    for v in keys.values():
        if len(v) == 1:
            counts[next(iter(v))] += 1
    common = min(counts, key=lambda b: (-counts[b], b)) if counts else None
    odd = []
    for o in sorted(per):
        if keys[o] == {common}:
            continue
        if len(keys[o]) > 1:
            odd.append(f"`{o}` varies by seed ({', '.join(f'{s:,} / {n:,}' for s, n in sorted(keys[o]))})")
        else:
            odd.append(f"`{o}` {_budget_text(next(iter(per[o])))}")
    rest = (f"; the other {counts[common]} row(s): {common[0]:,} optimizer steps, {common[1]:,} samples seen"
            if common else "")
    return f"Pretraining budgets **differ** across the pretrained rows: {'; '.join(odd)}{rest}.{tail}"


def _rounding_only(x: float, y: float) -> bool:
    """Whether two metric values differ by float rounding only (relative 1e-9)."""
    return math.isfinite(x) and math.isfinite(y) and abs(x - y) <= 1e-9 * max(1.0, abs(x), abs(y))


def _alias_lines(view: GroupView) -> list[str]:
    """Merged rows and, where their runs differ, on which seeds and metrics."""
    out = []
    for d in sorted(view.aliases):
        for a in view.aliases[d]:
            seeds, metrics, worst, rounding = set(), [], 0.0, 0.0
            for m in view.metrics:
                dv, av = view.values.get((d, m.id), {}), view.values.get((a, m.id), {})
                shared = [s for s in set(dv) & set(av) if dv[s] != av[s]]
                # the same loss trains the same network; a metric may still differ in its last bits (a
                # reduction in another order): that is rounding, not a different result
                diff = sorted(s for s in shared if not _rounding_only(dv[s], av[s]))
                rounding = max([rounding, *(abs(dv[s] - av[s]) for s in shared if s not in diff)])
                if diff:
                    seeds.update(diff)
                    metrics.append(m.id)
                    worst = max(worst, max(abs(dv[s] - av[s]) for s in diff))
            d_seeds = {r.seed for r in view.recs if r.objective == d}
            a_seeds = {r.seed for r in view.recs if r.objective == a}
            only = sorted(a_seeds - d_seeds)
            k = f" at k = {view.num_views} views" if view.num_views else ""
            if seeds:
                text = (f"- `{a}` computes the same loss as `{d}`{k} but its numbers **differ** on seed(s) "
                        f"{', '.join(map(str, sorted(seeds)))} ({', '.join(metrics)}; largest difference "
                        f"{worst:.4g}); the row shows `{d}`'s runs.")
            elif rounding:
                text = (f"- `{a}` computes the same loss as `{d}`{k}: the same numbers on every shared seed "
                        f"(up to float rounding, at most {rounding:.1e}).")
            else:
                text = f"- `{a}` computes the same loss as `{d}`{k}: identical numbers on every shared seed."
            if only:
                text += f" Seeds run for `{a}` only: {', '.join(map(str, only))}."
            out.append(text)
    if out:
        out.insert(0, "Rows merged because the objectives compute the same loss "
                      "(`fusebench.objectives.equivalence`); only the displayed id is tested and ranked:")
    return out


def _test_notes(view: GroupView) -> list[str]:
    out = []
    few = sorted(o for o, r in view.tests.items() if r["p"] is None)
    if few:
        out.append(f"- not tested (fewer than 2 seeds shared with `{view.reference}`): "
                   f"{', '.join(f'`{o}`' for o in few)}")
    for o, r in sorted(view.tests.items()):
        if r["p"] is not None and r["note"]:
            out.append(f"- `{o}`: {r['note']}")
    return out


def _notes(view: GroupView) -> list[str]:
    """The lines under a table: budgets, merged rows, invalid rows, test conventions."""
    out = []
    budget = _budget_line(view)
    if budget:
        out += ["", budget]
    if view.invalid:
        out += ["", "Rows flagged invalid by their runs (shown, never ranked best, not tested):", ""]
        out += [f"- `{o}`: {why}" for o, why in sorted(view.invalid.items())]
    aliases = _alias_lines(view)
    if aliases:
        out += [""] + aliases[:1] + [""] + aliases[1:]
    tests = _test_notes(view)
    if tests:
        out += ["", "Tests:", ""] + tests
    return out


def _references(reported: list[Reported]) -> dict[str, int]:
    """Reference text -> footnote number, numbered in the order the rows (sorted by label) cite them."""
    refs: dict[str, int] = {}
    for r in sorted(reported, key=lambda r: (r.label, r.metric)):
        refs.setdefault(r.reference, len(refs) + 1)
    return refs


PUBLISHED_TITLE = "Published results (not comparable to the runs above)"


def published_section(views: list[GroupView], reported: list[Reported], level: int = 2) -> list[str]:
    """The board's published (reported) rows in a table of their own, with their references."""
    if not reported:
        return []
    recs = [r for v in views for r in v.recs]
    order = [m.id for v in views for m in v.metrics]
    wanted = sorted({r.metric for r in reported}, key=lambda m: (order.index(m) if m in order else len(order),
                                                                  _natural(m)))
    known = {m.id: m for v in views for m in v.metrics}
    infos = [known[m] if m in known else metric_info(m, recs) for m in wanted]
    text = ("Numbers printed in the source papers, not run by fusebench: other protocols, splits, models and "
            "budgets (see each source), so they are not comparable one to one with the runs above; never ranked, "
            "bolded or tested.")
    if any(v.kind != "real" for v in views):
        text += " They are on the official dataset; this board's runs are not."
    out = [f"{'#' * level} {PUBLISHED_TITLE}", "", text, "",
           "| published row | " + " | ".join(m.header for m in infos) + " |", "|" + "---|" * (len(infos) + 1)]
    refs = _references(reported)
    for label in sorted({r.label for r in reported}):
        entries = [r for r in reported if r.label == label]
        vals = {r.metric: r.value for r in entries}
        objs = sorted({r.objective for r in entries if r.objective})
        cite = "".join(f"[R{n}]" for n in sorted({refs[r.reference] for r in entries}))
        ours = f" (our {', '.join(f'`{o}`' for o in objs)})" if objs else ""
        row = [f"{_cell_text(label)}{ours} {cite}"]
        row += [_fmt_value(m.unit, vals[m.id]) if m.id in vals else "—" for m in infos]
        out.append("| " + " | ".join(row) + " |")
    out.append("")
    for ref, i in refs.items():
        out.append(f"- [R{i}] {' '.join(ref.split())}")
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


def _comparison_lines(view: GroupView) -> list[str]:
    """What the table compares: the primary metric (and why) and the reference row of the tests."""
    p = view.primary
    if not p:
        return []
    why = view.why.rstrip(".")
    line = f"Primary metric: `{p}`" + (f" (chosen because {why[0].lower() + why[1:]})" if why else "") + "."
    if view.ranked:
        if view.reference:
            line += f" Reference row of the tests: {view.reference_text}."
        else:
            line += f" No tests: {view.reference_text}."
    return [line, ""]


def _cells_text(view: GroupView) -> str:
    text = ("Cells are mean ± std (n seeds), sample std; metrics marked (%) are fractions shown x100; "
            "arrows give the direction of better.")
    p = view.primary
    if view.ranked and p:
        text += (f" {p} 95% CI: percentile bootstrap of the mean over seeds ({CI_RESAMPLES:,} resamples, "
                 f"fixed seed; with few seeds it describes the seeds and is too narrow to be a calibrated interval).")
        if view.reference:
            n = sum(1 for r in view.tests.values() if r["p"] is not None)
            text += (f" Δ: mean over the seeds shared with `{view.reference}` of (row − `{view.reference}`) on "
                     f"`{p}`, in the column's units; in brackets the p-value of a two-sided paired t-test over "
                     f"those seeds, Holm-adjusted over the {n} row(s) tested.")
    text += " Steps / samples seen: the pretraining budget of the row (0 for reference rows; — where not recorded)."
    if view.undefined:  # only boards with NaN metrics carry the note
        text += (" `k undefined`: runs whose value of the metric is undefined (NaN in their run.json, e.g. a "
                 "correlation of constant predictions), left out of the mean, std, best and tests.")
    return text


def group_section(view: GroupView, reported: list[Reported], plot_name: str | None, level: int = 2) -> list[str]:
    """Table, notes, published rows (when given), protocol and curves of one group (headings at ``level``)."""
    h = "#" * level
    out = [_data_line(view), ""] + _comparison_lines(view) + [_cells_text(view), ""]
    out += _table(view)
    out += _notes(view)
    if reported:
        out += [""] + published_section([view], reported, level)
    unknown = [m.id for m in view.metrics if m.direction is None]
    first = view.recs[0]
    suites = sorted({r.suite_version for r in view.recs})
    out += ["", f"{h} Protocol", "",
            f"- data: {KIND_TITLES[view.kind]} (dataset `{first.dataset.id}`)",
            f"- model selection: {' '.join(str(first.selection.get('rule', '')).split())}"]
    if view.ranked:
        ref = f"the fixed reference row `{view.reference}`" if view.reference else "no reference row: no tests"
        out.append(f"- primary metric: `{view.primary}`; paired test: two-sided paired t-test over shared seeds "
                   f"(scipy.stats.ttest_rel) against {ref}, Holm-adjusted over the rows tested; 95% CI: "
                   f"percentile bootstrap of the mean ({CI_RESAMPLES:,} resamples, seed {CI_SEED})")
    else:
        out.append(f"- primary metric: `{view.primary}`; pipeline check: no best row and no tests")
    if view.num_views:
        out.append(f"- views: k = {view.num_views}")
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
    # one run per grid point and selection seed (records of several selection seeds list the seeds)
    trials = sum(len((r.raw.get("hparam_selection") or {}).get("scores", []))
                 * max(1, len((r.raw.get("hparam_selection") or {}).get("seeds") or []))
                 for r in _first_per_objective(view))
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
    """A group's entry in the board's metadata comment, read back by the index: the index line, and
    for ranked groups the per-row means of the primary metric (valid rows, displayed ids) that the
    cross-dataset ranking uses."""
    downstream = view.recs[0].config.get("downstream")
    protocol = downstream.get("protocol") if isinstance(downstream, dict) else None
    meta = {"kind": view.kind, "dataset": view.recs[0].dataset.id, "synthetic": view.recs[0].dataset.synthetic,
            "objectives": len(view.objectives),
            "seeds": view.seeds, "runs": len(view.recs), "best": best_line(view), "title": title,
            "key": view.recs[0].comparability_key, "protocol": protocol, "primary": view.primary or None,
            "reference": view.reference}
    if view.ranked and view.primary:
        meta["direction"] = view.info(view.primary).direction
        # rounded to 12 decimals: means equal but for the order of summation rank as ties
        meta["means"] = {o: round(m, 12) for o in view.valid_rows if (m := view.mean(o, view.primary)) is not None}
    return meta


def render_board(name: str, views: list[GroupView], reported: list[Reported],
                 plot_names: list[str | None]) -> str:
    """The whole board markdown of one benchmark (one section per group when split; the published
    rows once, in a section of their own)."""
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
            out += group_section(view, [], plot, level=3)
            out.append("")
            metas.append(_meta(view, title))
        out = out[:-1]
        if reported:
            out += [""] + published_section(views, reported, level=2)
    meta = {"benchmark": name, "format": BOARD_FORMAT, "groups": metas}
    out += ["", f"<!-- {BOARD_META} {json.dumps(meta, sort_keys=True, ensure_ascii=True)} -->"]
    return "\n".join(out) + "\n"


def benchmark_table(name: str, recs: list[RunRecord], plot_name: str | None = None,
                    reported: list[Reported] = ()) -> str:
    """The board of one benchmark whose runs form one comparability group."""
    (group,) = group_runs(name, recs)
    return render_board(name, [make_view(name, group)], list(reported), [plot_name])


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
    seeds = {o: sorted({r.seed for r in view.recs if r.objective == o}) for o in view.objectives}
    unit = view.info(view.primary).unit if view.primary else "raw"
    return sha256_hex(canonical_json({"v": PLOT_VERSION, "name": view.name, "primary": view.primary, "unit": unit,
                                      "objectives": list(view.objectives), "seeds": seeds, "loss": loss, "val": val},
                                     compact=False))


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
    try:  # a temporary name of its own (two regenerations into one folder draw the same plot at once)
        atomic_write(path, lambda f: fig.savefig(f, format="png", metadata={"Software": None, PLOT_KEY: inputs_key}))
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


CD_PLOT = "cd-diagram.png"  # the index's critical-difference diagram
CD_PLOT_VERSION = 1  # bump when the diagram is drawn differently
CD_ALPHA = 0.05


def cross_dataset_ranking(boards: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Average ranks of the objectives over the real-data boards of the ``embedding_eval`` protocol.

    From each board's metadata (first group: the largest when split) of kind ``real`` with protocol
    ``embedding_eval``: the per-row means of its primary metric (valid rows, displayed ids). The
    objectives present on every such board are ranked within each (rank 1 = best in the metric's
    direction, ties share the average rank) and the ranks averaged; Friedman's test
    (:func:`fusebench.stats.friedman`) and the Nemenyi critical difference at ``CD_ALPHA``
    (:func:`fusebench.stats.nemenyi_cd`) follow (Demšar 2006). Returns a dict with ``boards``
    (names used), ``skipped`` ({name: why}), ``methods``, ``ranks`` ({method: {board: rank}}),
    ``avg`` ({method: average rank}), ``primary`` ({board: metric}), and when at least 2 boards and
    2 common objectives exist, ``friedman`` and ``cd``; otherwise ``problem`` says what is missing."""
    used: dict[str, dict[str, Any]] = {}
    skipped: dict[str, str] = {}
    for name in sorted(boards):
        groups = boards[name]["groups"]
        g = groups[0] if groups else None
        if g is None or g.get("kind") != "real":
            continue
        if "means" not in g or "protocol" not in g:
            skipped[name] = "board written by an older fusebench without per-row means: regenerate it"
            continue
        if g.get("protocol") != "embedding_eval":
            continue
        if g.get("direction") not in ("higher", "lower"):
            skipped[name] = f"primary metric `{g.get('primary')}` has no known direction"
            continue
        if not isinstance(g.get("means"), dict) or not g["means"]:
            skipped[name] = "no row has a value of the primary metric"
            continue
        used[name] = g
    out: dict[str, Any] = {"boards": list(used), "skipped": skipped, "methods": [], "ranks": {}, "avg": {},
                           "primary": {n: g["primary"] for n, g in used.items()}}
    common = sorted(set.intersection(*(set(g["means"]) for g in used.values()))) if used else []
    out["methods"] = common
    if len(used) < 2 or len(common) < 2:
        out["problem"] = (f"needs at least 2 real-data boards of the `embedding_eval` protocol and 2 objectives "
                          f"run on all of them; here {len(used)} board(s) and {len(common)} common objective(s)")
        return out
    from fusebench import stats

    scores = [[(1.0 if used[n]["direction"] == "higher" else -1.0) * float(used[n]["means"][m]) for m in common]
              for n in used]
    ranks = stats.average_ranks(scores, higher_is_better=True)
    out["ranks"] = {m: {n: float(ranks[i, j]) for i, n in enumerate(used)} for j, m in enumerate(common)}
    res = stats.friedman(scores, higher_is_better=True)
    out["avg"] = dict(zip(common, res.avg_ranks))
    out["friedman"] = res
    out["cd"] = stats.nemenyi_cd(len(common), len(used), CD_ALPHA)
    out["q"] = stats.nemenyi_q(len(common), CD_ALPHA)
    return out


def _cd_title(ranking: dict[str, Any]) -> str:
    return (f"Average rank over {len(ranking['boards'])} real-data boards (1 = best); "
            f"Nemenyi CD at alpha = {CD_ALPHA} = {ranking['cd']:.2f}")


def _ranking_section(ranking: dict[str, Any], cd_plot: str | None) -> list[str]:
    out = ["## Cross-dataset ranking", ""]
    boards = ranking["boards"]
    skipped = "".join(f" Not included: [{n}]({n}.md) ({why})." for n, why in sorted(ranking["skipped"].items()))
    if "problem" in ranking:
        return out + [f"No cross-dataset ranking: it {ranking['problem']}.{skipped}"]
    k, n = len(ranking["methods"]), len(boards)
    res = ranking["friedman"]
    out += [f"The {k} objectives run on every real-data board of the `embedding_eval` protocol ({n} boards), ranked "
            f"on each board by the mean over seeds of its primary metric (rank 1 = best; ties share the average "
            f"rank), then averaged over the boards (Demšar 2006, JMLR 7:1-30). Rows flagged invalid are left out; "
            f"merged aliases count once, under their displayed id.{skipped}", ""]
    head = ["objective", "average rank"] + [f"[{b}]({b}.md) (`{ranking['primary'][b]}`)" for b in boards]
    out += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for m in sorted(ranking["methods"], key=lambda m: (ranking["avg"][m], m)):
        out.append("| " + " | ".join([f"`{m}`", f"{ranking['avg'][m]:.2f}"]
                                     + [f"{ranking['ranks'][m][b]:.1f}" for b in boards]) + " |")
    f_line = (f"Iman-Davenport F_F = {res.iman_davenport:.3f} ({k - 1}, {(k - 1) * (n - 1)} df), "
              f"p = {_fmt_p(res.iman_davenport_p)}" if math.isfinite(res.iman_davenport)
              else "Iman-Davenport F_F infinite (every board ranks the objectives alike), p = 0")
    out += ["", f"Friedman test (tie-corrected chi-square, {k - 1} df): chi2_F = {res.statistic:.3f}, "
                f"p = {_fmt_p(res.pvalue)}; {f_line}. Nemenyi critical difference at alpha = {CD_ALPHA}: "
                f"CD = q_alpha sqrt(k (k + 1) / (6 N)) = {ranking['q']:.3f} x sqrt({k} x {k + 1} / (6 x {n})) = "
                f"{ranking['cd']:.2f}; two objectives whose average ranks differ by less than CD are not "
                f"significantly different (joined by a bar in the diagram). With {n} datasets the test has little "
                f"power: read the ranks as a summary, not a verdict."]
    if cd_plot:
        out += ["", f"![critical difference diagram]({cd_plot})"]
    return out


def build_index(boards: dict[str, dict[str, Any]], cd_plot: str | None = None,
                ranking: dict[str, Any] | None = None) -> str:
    """The index markdown from ``{benchmark: board metadata}``: real data, the cross-dataset ranking of
    the real-data boards (``cd_plot``: the CD diagram's file name to link, None for none), synthetic
    studies, then the pipeline checks (which rank nothing). ``ranking`` is
    :func:`cross_dataset_ranking` of ``boards`` (computed when not given)."""
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
    if ranking is None:
        ranking = cross_dataset_ranking(boards)
    head = "| benchmark | dataset | objectives | seeds | runs | best on primary metric |\n|---|---|---|---|---|---|"
    out = ["# fusebench leaderboards", "",
           "Generated by `fusebench leaderboard` from run.json files; do not edit by hand. This index lists every "
           "board in this folder (each board ends with a metadata comment), so regenerating boards from a runs "
           "folder holding only some benchmarks keeps the others. Format and rules: docs/leaderboards.md.", "",
           "## Real data", "",
           "Runs on real data files (each run record carries the dataset's manifest hash or a fingerprint of the "
           "files read); rows rank the objectives on that data. Reference rows: `none` = random-init encoders, "
           "`raw` = the standardised input views, `raw_*` = other features of the input views (per-view L2, "
           "tf-idf, view-balanced, PCA; docs/benchmarks.md); when one of them is best, the best pretrained "
           "objective follows.", ""]
    out += [head] + rows["real"] if rows["real"] else ["No real-data runs yet."]
    out += [""] + _ranking_section(ranking, cd_plot)
    out += ["", "## Synthetic studies", "",
            "Reproducible studies on data that is synthetic by design; rankings hold for that data only.", ""]
    out += [head] + rows["study"] if rows["study"] else ["None."]
    out += ["", "## Pipeline checks", "",
            "Tiny smoke runs, mostly synthetic twins of the real-data benchmarks. They check the pipeline end to "
            "end and **rank nothing**: no best row, no tests.", ""]
    out += rows["pipeline_check"] if rows["pipeline_check"] else ["None."]
    return "\n".join(out) + "\n"


def draw_cd_diagram(ranking: dict[str, Any], path: Path) -> bool:
    """Draw the index's CD diagram of ``ranking`` to ``path`` unless the PNG there was already drawn
    from the same inputs (its ``fusebench-inputs`` text chunk holds their hash). Returns False (and
    draws nothing) when there is no ranking."""
    if "cd" not in ranking:
        return False
    title = _cd_title(ranking)
    key = sha256_hex(canonical_json({"v": CD_PLOT_VERSION, "avg": ranking["avg"], "cd": ranking["cd"], "title": title},
                                    compact=False, default=None))
    if png_text(path).get(PLOT_KEY) == key:
        return True
    from fusebench import stats

    stats.cd_diagram(ranking["avg"], ranking["cd"], path, title, metadata={PLOT_KEY: key})
    return True


# ---------------------------------------------------------------------------------------------
# writing
# ---------------------------------------------------------------------------------------------
def _inside(out_dir: Path, filename: str) -> Path:
    """``out_dir / filename`` after checking that it names a file directly inside ``out_dir``."""
    path = out_dir / filename
    if Path(filename).name != filename or path.parent.resolve() != out_dir.resolve():
        raise ValueError(f"refusing to write {path}: not a file directly inside {out_dir}")
    return path


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
        views = [make_view(name, g) for g in groups]
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
    ranking = cross_dataset_ranking(metas)
    cd_plot = CD_PLOT if plots and "cd" in ranking else None
    index_md = build_index(metas, cd_plot, ranking)
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, views, shown, md in rendered:
        for view, plot in zip(views, shown):
            if plot:
                plot_curves(view, _inside(out_dir, plot))
        path = _inside(out_dir, f"{name}.md")
        write_if_changed(path, md)
        written.append(path)
    if cd_plot:
        draw_cd_diagram(ranking, _inside(out_dir, cd_plot))
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
