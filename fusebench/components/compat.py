"""Which objectives fit a benchmark (spec layer, checked against the components): an objective must
accept the benchmark's view count(s) k and anything else its pipeline asks; the reference rows apply to
the protocols that offer them; each row says why it cannot run (:mod:`fusebench.components.rows`). Checked
before any training."""

from __future__ import annotations

from fusebench.pipelines import pipeline_of
from fusebench.spec.config import BenchmarkSpec
from fusebench.components.protocols import PROTOCOLS, missing_view_problems, protocol_of
from fusebench.components.rows import row_of


def num_views(spec: BenchmarkSpec) -> int:
    return max(pipeline_of(spec).view_counts(spec))


def check_compatible(spec: BenchmarkSpec, objective: str) -> None:
    """Raise ValueError before any training when ``objective`` cannot run on ``spec``."""
    if pipeline_of(spec).downstream and _asks_missing_views(spec):  # the rates against the data's k (every row)
        rates = missing_view_problems(spec, num_views(spec))
        if rates:
            raise ValueError(f"{spec.name}: " + "; ".join(rates))
    problem = _incompatibility(spec, objective)
    if problem:
        raise ValueError(f"{problem}; compatible objectives: {', '.join(compatible_objectives(spec))}")


def _asks_missing_views(spec: BenchmarkSpec) -> bool:
    """Whether the spec sets a missing-view rate (``pretrain.missing_rate``, the protocol's ``missing_rates``)."""
    if getattr(spec.pretrain, "missing_rate", 0.0):
        return True
    key = protocol_of(spec).options_key if spec.downstream.protocol in PROTOCOLS else None
    given = spec.options.get(key) if key else None
    return isinstance(given, dict) and bool(given.get("missing_rates"))


def _incompatibility(spec: BenchmarkSpec, objective: str) -> str | None:
    """Why row ``objective`` cannot run on ``spec`` (None when it can): the row's own answer
    (:meth:`fusebench.components.rows.Row.problem`)."""
    return row_of(spec, objective).problem(spec)


def compatible_objectives(spec: BenchmarkSpec) -> list[str]:
    """Registered objectives that can run on ``spec`` (the 'none' baseline not included)."""
    from fusebench import objectives

    return [name for name in objectives.available() if _incompatibility(spec, name) is None]


__all__ = ["check_compatible", "compatible_objectives", "num_views"]
