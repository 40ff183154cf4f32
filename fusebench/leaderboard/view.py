"""What one table shows (:class:`GroupView`): the view of one comparability group that
:func:`fusebench.leaderboard.groups.make_view` builds, :mod:`fusebench.leaderboard.ties` settles (ties,
rank intervals) and every renderer reads. A module of its own, below both of them, so that the statistics
that fill a view and the code that builds it do not import each other."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fusebench.leaderboard.columns import MetricInfo, mean_std
from fusebench.records import RunRecord


def record_budget(r: RunRecord) -> dict[str, Any] | None:
    """``record["budget"]`` (None when absent; typed by :func:`fusebench.records.validate_record`), and None for a
    row of encoder weights trained elsewhere (``record["encoder_weights"]``): its record's zero steps are this
    run's, not the budget its weights were trained with, which is not known here."""
    if is_external(r):
        return None
    return r.raw.get("budget")


def is_external(r: RunRecord) -> bool:
    """Whether ``r`` scores encoder weights trained elsewhere (``fusebench run --encoder-weights``)."""
    return bool(r.raw.get("encoder_weights"))


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
    # who set the comparison (primary metric, reference): "the benchmark" (its current spec), "the runs" (the
    # newest record's copy) or "" (neither has one: the records' selection metric, the default reference)
    compared_by: str = ""
    why: str = ""  # why the primary metric (record["comparison"]["why"])
    # the protocol notes shown: the benchmark's current spec's (None: no spec found, the records' copies)
    protocol_notes: dict[str, str] | None = None
    family: str | None = None  # the spec's ``family`` (the index ranks each family's boards too); None: not set
    variant_of: str | None = None  # the spec's ``variant_of``: the benchmark this board re-runs with a changed setting
    # (dotted config key, the spec's value, the runs' values) where the runs' config differs from the current spec
    # whose protocol notes and comparison the board shows (:func:`fusebench.leaderboard.groups.spec_differences`)
    spec_differences: list[tuple[str, Any, list[Any]]] = field(default_factory=list)
    # (what changed, how many runs) where the runs were made by other code than the current one: a version of their
    # objective, encoder, method, metric or downstream protocol (:func:`fusebench.leaderboard.groups.code_differences`)
    code_differences: list[tuple[str, int]] = field(default_factory=list)
    tests: dict[str, dict[str, Any]] = field(default_factory=dict)  # row -> stats.paired_vs_reference result
    ci: dict[str, tuple[float, float]] = field(default_factory=dict)  # row -> bootstrap CI of the primary mean
    # reference rows merged because they are the same features for every probe (a subset of ``aliases``):
    # displayed row -> {alias: the metrics whose numbers still differ (clustering), shown for both}
    reference_aliases: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    vs_best: dict[str, dict[str, Any]] = field(default_factory=dict)  # row -> stats.vs_best result (primary)
    ranks: dict[str, dict[str, Any]] = field(default_factory=dict)  # row -> stats.rank_intervals result (primary)
    bold: dict[str, str | None] = field(default_factory=dict)  # metric -> the row in bold (best, separable) or None
    separable: dict[str, bool | None] = field(default_factory=dict)  # metric -> best separable from the second

    @property
    def protocol(self) -> str | None:
        """The downstream protocol of the group's runs (``config.downstream.protocol``), or None."""
        downstream = self.recs[0].config.get("downstream")
        protocol = downstream.get("protocol") if isinstance(downstream, dict) else None
        return protocol if isinstance(protocol, str) else None

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

    def summary(self, row: str, metric: str) -> tuple[float, float, int] | None:
        """(mean, sample std, n) of a row's defined values of ``metric`` over seeds (None when it has
        none): the numbers of the table's cell and of the CSV / JSON exports."""
        v = self.values.get((row, metric))
        return (*mean_std(list(v.values())), len(v)) if v else None

    def mean(self, row: str, metric: str) -> float | None:
        s = self.summary(row, metric)
        return s[0] if s else None

    def budget(self, row: str) -> dict[str, tuple[int, int]] | None:
        """The row's pretraining budget over its runs (``record["budget"]``): ``{"optimizer_steps": (min,
        max), "samples_seen": (min, max)}``, min = max when every seed agrees; None when not recorded."""
        budgets = [b for r in self.recs if r.objective == row and (b := record_budget(r)) is not None]
        if not budgets:
            return None
        return {key: (min(b[key] for b in budgets), max(b[key] for b in budgets))
                for key in ("optimizer_steps", "samples_seen")}

    def cost(self, row: str) -> tuple[float | None, float]:
        """(mean pretraining time in s, mean peak memory in MiB) over the row's runs. The time is None for a row of
        encoder weights trained elsewhere (as its budget is, :func:`record_budget`): its records' 0 s are this run's,
        not what training the weights cost, which is not known here (a "lower is better" 0.0 would rank it cheapest)."""
        recs = [r for r in self.recs if r.objective == row]
        times = [r.pretrain_time_s for r in recs]
        mems = [r.peak_memory_mb for r in recs]
        time_s = None if all(is_external(r) for r in recs) else sum(times) / len(times)
        return time_s, sum(mems) / len(mems)


__all__ = ["GroupView", "record_budget"]
