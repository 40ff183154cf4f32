"""Where a board's runs differ from the benchmark as it is now (leaderboard layer): from its current spec
(:func:`spec_differences`: the settings whose values the protocol notes and the comparison text, which describe the
spec, do not state for these runs) and from the current code (:func:`code_differences`: the versions a rerun would
not reuse). :func:`fusebench.leaderboard.groups.make_view` puts both on the group's view."""

from __future__ import annotations

from typing import Any

from fusebench.leaderboard.grouping import _pretrains_nothing, oldest_first
from fusebench.records import RunRecord
from fusebench.records.schema import _flatten


#: config keys (dotted prefixes) left out of :func:`spec_differences`: what names or lists the cells (each row and
#: seed is on the board), the prose itself, and the ``--synthetic`` overrides (applied to the spec already)
SPEC_TEXT_KEYS = ("name", "description", "objectives", "seeds", "protocol_notes", "synthetic", "comparison.why")


def spec_differences(spec: dict[str, Any], recs: list[RunRecord]) -> list[tuple[str, Any, list[Any]]]:
    """Where the runs' config differs from the benchmark's current spec, whose protocol notes and comparison text a
    board shows (they describe the spec: ``n_init: 100`` says "100 restarts" even for runs made with
    ``--set options.embedding_eval.n_init=1``): ``[(dotted key, the spec's value, the runs' distinct values)]`` for
    every config leaf (nested mappings flattened, lists whole) that the spec sets (not null) and every run records,
    where some run's value is not the spec's. Keys of :data:`SPEC_TEXT_KEYS` are left out, and so are the fields the
    pipeline's cell does not apply (:func:`fusebench.pipelines.applied_form`: a value there changed nothing), and
    the ``pretrain.*`` values of the rows that pretrain nothing (:func:`_pretrains_nothing`: they read none), and a
    ``pca_widths`` the spec gives as ``auto`` (each sweep writes it out from the data it reads)."""
    from fusebench.pipelines import PIPELINES, applied_form

    def applied(form: dict[str, Any]) -> dict[str, Any]:
        pipeline = form.get("pipeline", "standard")
        return applied_form(form, pipeline) if pipeline in PIPELINES else form

    want = {k: v for k, v in _flatten(applied(spec)).items()
            if v is not None and not any(k == t or k.startswith(t + ".") for t in SPEC_TEXT_KEYS)}
    ordered = oldest_first(recs)
    flat = [_flatten(applied(r.config)) for r in ordered]
    nothing = [_pretrains_nothing(r) for r in ordered]  # their pretrain.* values changed nothing (board_keys)
    from fusebench.components.protocols import WIDTH_OPTION, WIDTHS_AUTO

    out = []
    for key in sorted(want):
        if not all(key in f for f in flat):  # an older record without the field: nothing to compare
            continue
        if key.endswith(f".{WIDTH_OPTION}") and want[key] == WIDTHS_AUTO:  # each sweep writes it out from the data
            continue
        if key.startswith("pretrain."):
            flat_used = [f for f, n in zip(flat, nothing) if not n]
        else:
            flat_used = flat
        seen: list[Any] = []
        for f in flat_used:
            if f[key] not in seen:
                seen.append(f[key])
        if any(v != want[key] or isinstance(v, bool) != isinstance(want[key], bool) for v in seen):
            out.append((key, want[key], seen))
    return out


def code_differences(spec: Any, recs: list[RunRecord]) -> list[tuple[str, int]]:
    """Where the runs were made by other code than the current one, for the benchmark's current ``spec``: each change
    :func:`fusebench.components.identity.code_changes` finds for a run (an objective's, encoder's, method's,
    metric's or downstream protocol's version, as the run states them, :func:`fusebench.records.cell_file.record_versions`, against the
    code's now) with the number of runs it concerns, in order of first appearance. Such runs are still the runs'
    numbers, but a rerun would not reuse them: it computes them again with the current code."""
    from fusebench.components.identity import code_changes
    from fusebench.records.cell_file import record_versions
    from fusebench.registry import UnknownNameError

    counts: dict[str, int] = {}
    seen: dict[str, list[str]] = {}
    for r in recs:
        made, metrics = record_versions(r.raw)
        key = repr((r.objective, sorted(made.items(), key=str), sorted(metrics.items(), key=str)))
        if key not in seen:
            try:
                seen[key] = code_changes(_with_weights_row(spec, r), r.objective, made, metrics)
            except (UnknownNameError, KeyError, ValueError):  # a plugin's objective or metric not installed here
                seen[key] = []
        for change in seen[key]:
            counts[change] = counts.get(change, 0) + 1
    return list(counts.items())


def _with_weights_row(spec: Any, r: RunRecord) -> Any:
    """``spec`` with the run's own ``encoder_weights`` entry when its row is a weights row (``--encoder-weights
    NAME=FILE`` names the file at run time, so the benchmark's installed spec does not hold it): the row's version is
    its file's hash (:func:`fusebench.components.identity.cell_versions`), which the spec alone would read as an
    objective's."""
    entry = (r.config.get("encoder_weights") or {}).get(r.objective) if isinstance(r.config, dict) else None
    if not isinstance(entry, dict) or r.objective in (getattr(spec, "encoder_weights", None) or {}):
        return spec
    import dataclasses

    return dataclasses.replace(spec, encoder_weights={**spec.encoder_weights, r.objective: entry})
