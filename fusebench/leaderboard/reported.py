"""Numbers printed in the source papers (``reported.yaml``): the entries checked and loaded
(:func:`load_reported`) and the board's section that shows them, "Published results (not comparable
to the runs above)" (:func:`published_section`): never ranked, bolded or tested."""

from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from fusebench.io import shown_path
from fusebench.leaderboard.columns import fmt_value, md_text, metric_info, natural_key
from fusebench.leaderboard.groups import GroupView
from fusebench.registry import ID_RULE, valid_id

PUBLISHED_TITLE = "Published results (not comparable to the runs above)"


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


#: the published numbers shipped with the benchmark definitions (package data of ``fusebench.benchmarks``)
PACKAGED = "published/reported.yaml"


def default_reported(out_dir: Path) -> Path:
    """The published numbers a board shows when ``--reported`` is not given: ``<out_dir>/reported.yaml`` when
    there is one (your own list), else the list shipped with the benchmark definitions
    (``benchmarks/published/reported.yaml`` in the checkout, package ``fusebench.benchmarks`` once installed), so a
    board written to a new folder keeps its "Published results" section."""
    own = Path(out_dir) / "reported.yaml"
    if own.is_file():
        return own
    import fusebench.benchmarks as benchmarks

    return benchmarks.HERE / PACKAGED


def _finite(v: int | float) -> bool:
    try:
        return math.isfinite(float(v))
    except OverflowError:  # an integer beyond the float range
        return False


def _fraction_floor(metric: str) -> float | None:
    """The lower bound of a metric of unit ``fraction`` (0; -1 for the chance-adjusted ARI), None for another unit
    or a metric outside the registry (no range known)."""
    from fusebench import metrics as M
    from fusebench.records.schema import fraction_floor
    from fusebench.registry import UnknownNameError

    try:
        unit = M.metadata(metric)["unit"]
    except (UnknownNameError, KeyError):
        return None
    return fraction_floor(metric) if unit == "fraction" else None


def load_reported(path: Path | None) -> dict[str, list[Reported]]:
    """Entries of a reported.yaml grouped by benchmark; a missing file gives none."""
    if path is None or not Path(path).is_file():
        return {}
    import yaml

    from fusebench.typed import load_yaml, yaml_problem

    try:  # the bounded safe loader of every settings file: an alias bomb or a too deep document is one error
        data = load_yaml(Path(path).read_text(encoding="utf-8"), str(path))
    except yaml.YAMLError as e:  # one line: what and where (not PyYAML's lines with a caret)
        raise ValueError(f"{shown_path(path)}: not a readable YAML file ({yaml_problem(e)})") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"{shown_path(path)}: not a readable YAML file ({' '.join(str(e).split())})") from None
    if data is None:
        return {}
    if not isinstance(data, list):
        raise ValueError(f"{shown_path(path)}: expected a list of entries {{{', '.join(_REPORTED_REQUIRED)}, ...}}")
    out: dict[str, list[Reported]] = defaultdict(list)
    seen = set()
    for i, e in enumerate(data):
        where = f"{shown_path(path)}: entry {i}"  # a control character in the path escaped
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
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.@\-]*", e["metric"]):
            raise ValueError(f"{where}: metric must be a metric id (letters, digits, '_', '.', '@', '-'), "
                             f"got {e['metric']!r}")
        for k in ("note", "printed", "protocol"):
            if e.get(k) is not None and not isinstance(e[k], str):
                raise ValueError(f"{where}: {k} must be a string, got {e[k]!r}")
        if e.get("objective") is not None and not valid_id(e["objective"]):
            raise ValueError(f"{where}: objective must be an objective id or null, got {e['objective']!r}")
        v = e["value"]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not _finite(v):
            raise ValueError(f"{where}: value must be a finite number (a fraction for percent metrics), got {v!r}")
        low = _fraction_floor(e["metric"])
        if low is not None and not low <= float(v) <= 1.0:
            raise ValueError(f"{where} ({e['label']!r}, {e['metric']}): value must be a fraction in [{low:g}, 1] "
                             f"({e['metric']} has unit 'fraction' in the metric registry; the board shows it x100: "
                             f"write 85.3% as 0.853), got {v!r}")
        key = (e["benchmark"], e["label"], e["metric"])
        if key in seen:
            raise ValueError(f"{where}: {e['label']!r} reports {e['metric']} for {e['benchmark']} twice")
        seen.add(key)
        out[e["benchmark"]].append(Reported(e["benchmark"], e["label"], e["metric"], float(v), e["source"],
                                            e.get("note") or "", e.get("objective"), e.get("printed") or "",
                                            e.get("protocol") or ""))
    return {b: sorted(v, key=lambda r: (r.label, r.metric)) for b, v in sorted(out.items())}


def _references(reported: list[Reported]) -> dict[str, int]:
    """Reference text -> footnote number, numbered in the order the rows (sorted by label) cite them."""
    refs: dict[str, int] = {}
    for r in sorted(reported, key=lambda r: (r.label, r.metric)):
        refs.setdefault(r.reference, len(refs) + 1)
    return refs


def published_section(views: list[GroupView], reported: list[Reported], level: int = 2) -> list[str]:
    """The board's published (reported) rows in a table of their own, with their references."""
    if not reported:
        return []
    recs = [r for v in views for r in v.recs]
    order = [m.id for v in views for m in v.metrics]
    wanted = sorted({r.metric for r in reported}, key=lambda m: (order.index(m) if m in order else len(order),
                                                                  natural_key(m)))
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
        row = [f"{md_text(label)}{ours} {cite}"]
        row += [fmt_value(m.unit, vals[m.id]) if m.id in vals else "—" for m in infos]
        out.append("| " + " | ".join(row) + " |")
    out.append("")
    for ref, i in refs.items():
        out.append(f"- [R{i}] {md_text(ref)}")
    return out
