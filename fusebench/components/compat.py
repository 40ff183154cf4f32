"""Which objectives fit a benchmark (spec layer, checked against the components): an objective must
accept the benchmark's view count(s) k and anything else its pipeline asks; the reference rows apply to
the protocols that offer them (:mod:`fusebench.components.reference_features`). Checked before any training."""

from __future__ import annotations

from fusebench.pipelines import pipeline_of
from fusebench.spec.config import BenchmarkSpec
from fusebench.components.protocols import PROTOCOLS, missing_view_problems, protocol_of
from fusebench.components.reference_features import BASELINE, RAW, REFERENCE_KINDS, REFERENCES


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
    """Why ``objective`` cannot run on ``spec`` (None when it can)."""
    pipeline = pipeline_of(spec)
    if objective in (getattr(spec, "encoder_weights", None) or {}):  # a pretrained encoder's row (issue #32)
        ok = pipeline.builds_encoder and pipeline.downstream
        return None if ok else f"{spec.name}: the {spec.pipeline} pipeline builds no encoder to load weights into"
    offered = protocol_of(spec).reference_rows if pipeline.downstream and spec.downstream.protocol in PROTOCOLS else ()
    if objective == BASELINE:
        if not pipeline.downstream:
            return f"{spec.name}: the '{BASELINE}' baseline applies to standard benchmarks only"
        if BASELINE not in offered:
            return f"{spec.name}: the {spec.downstream.protocol} protocol offers no '{BASELINE}' row"
        return None
    if objective == RAW and RAW in offered and not protocol_of(spec).frozen_features:
        from fusebench import datasets

        kinds = {m.kind for m in datasets.get(spec.dataset.id).MODALITIES
                 if spec.dataset.modalities is None or m.name in spec.dataset.modalities}
        if kinds != {"vector"}:
            return (f"{spec.name}: the '{RAW}' row of a linear-probe benchmark trains the probe on the input "
                    f"vectors; this dataset's modalities are {sorted(kinds)}")
        return None  # the probe trained on the input vectors (the `identity` encoder)
    if objective in REFERENCE_KINDS:
        if objective not in offered:
            offering = [p for p in PROTOCOLS.available() if objective in PROTOCOLS.get(p).reference_rows]
            return (f"{spec.name}: the '{objective}' reference row applies to the {' and '.join(offering)} "
                    f"protocol{'s' if len(offering) > 1 else ''} only")
        return None
    from fusebench import objectives

    cls = objectives.OBJECTIVES.get(objective)  # unknown id -> list + closest match
    kind = getattr(cls, "input_kind", "views")
    problem = pipeline.objective_problem(spec, objective, cls)
    if problem:
        return problem
    rate = getattr(spec.pretrain, "missing_rate", 0.0)
    if pipeline.downstream and rate > 0 and objective not in REFERENCES:
        if kind != "views" or not getattr(cls, "supports_mask", False):
            return (f"{spec.name}: pretrain.missing_rate = {rate:g} hands every pretraining batch a presence mask, "
                    f"but objective {objective!r} does not honour masks (supports_mask is false)")
        from fusebench.spec.methods import options_of

        owners = [m for m in ("ema_teacher", "view_rotation") if options_of(spec.pretrain, m).enabled]
        if owners:
            return (f"{spec.name}: pretrain.missing_rate = {rate:g}: the pretraining method(s) {owners} compute the "
                    f"loss without the presence mask; switch them off or set pretrain.missing_rate to 0")
    for k in pipeline.view_counts(spec):
        lo, hi = getattr(cls, "min_views", 2), getattr(cls, "max_views", None)
        if kind in ("views", "pairs") and (k < lo or (hi is not None and k > hi)):
            want = f"exactly {lo}" if hi == lo else f"{lo}..{hi}" if hi else f">= {lo}"
            return f"objective {objective!r} takes {want} views but benchmark {spec.name!r} has k = {k}"
    return None


def compatible_objectives(spec: BenchmarkSpec) -> list[str]:
    """Registered objectives that can run on ``spec`` (the 'none' baseline not included)."""
    from fusebench import objectives

    return [name for name in objectives.available() if _incompatibility(spec, name) is None]


__all__ = ["check_compatible", "compatible_objectives", "num_views"]
