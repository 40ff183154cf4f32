"""From run records to what one table shows: the records of a runs folder by benchmark
(:func:`load_runs`), split into comparability groups (:func:`~fusebench.leaderboard.grouping.group_runs`,
re-exported here: runs share a table only when their comparability key is equal; duplicates, mixed objective
versions and a row of two configs are refused), and one
group's :class:`~fusebench.leaderboard.view.GroupView` (:func:`make_view`): metric columns, per-(objective, metric) values over
seeds, rows with the objectives that compute the same loss merged into one (alias rows,
:func:`equivalence_groups`), rows flagged invalid, the best row per metric, the fixed reference row,
the bootstrap intervals and the paired tests (:mod:`fusebench.leaderboard.stats`)."""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import Any

from fusebench.io import canonical_json
from fusebench.leaderboard.columns import md_code, metric_info, natural_key
from fusebench.leaderboard.differences import code_differences, spec_differences
from fusebench.leaderboard.grouping import _files, oldest_first
from fusebench.leaderboard.view import GroupView
from fusebench.records import RecordError, RunRecord, board_kind, find_records, load_record
from fusebench.components.rows import DEFAULT_REFERENCES, ROWS, is_reference
from fusebench.components.reference_features import CLUSTER_METRICS, cluster_identical, probe_identical_groups

CI_LEVEL, CI_RESAMPLES, CI_SEED = 0.95, 10000, 0  # the bootstrap interval of every board
RANK_RESAMPLES, RANK_SEED = 10000, 0  # the bootstrap of every row's rank interval (resamples of the seeds)


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
    candidates = [o for o in objectives if not is_reference(o)]
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
    """The group's objectives in order of display preference: the benchmark's ``objectives`` list (of the
    newest record), then the others sorted."""
    present = {r.objective for r in recs}
    listed = oldest_first(recs)[-1].config.get("objectives")
    listed = [o for o in listed if isinstance(o, str)] if isinstance(listed, list) else []
    first = [o for i, o in enumerate(listed) if o in present and o not in listed[:i]]
    return first + sorted(present - set(first))


def _record_comparison(r: RunRecord) -> dict[str, str] | None:
    """``record["comparison"]`` checked (None when absent)."""
    c = r.raw.get("comparison")
    if c is not None and (not isinstance(c, dict)
                          or not all(isinstance(k, str) and isinstance(v, str) for k, v in c.items())):
        raise RecordError(r.path, "comparison", 'a mapping {"reference": id, "primary": metric, "why": text}', c)
    return c


def current_spec(name: str, recs: list[RunRecord]):
    """The current spec of benchmark ``name`` (with its ``--synthetic`` overrides when the newest record was
    made with them), or None when no spec of that name is found. A spec that is found but does not load is a
    ValueError. The board shows the spec's ``comparison`` block and ``protocol_notes`` (both outside a cell's
    identity), so a changed sentence reaches the board without re-running a cell."""
    from fusebench import benchmarks
    from fusebench.records import synthetic_overrides_applied
    from fusebench.registry import UnknownNameError
    from fusebench.spec.config import ConfigError, read_spec

    try:
        path = benchmarks.path(name)
    except UnknownNameError:
        return None
    try:
        spec = read_spec(path, synthetic=synthetic_overrides_applied(oldest_first(recs)[-1].config))
    except ConfigError as e:
        raise ValueError(f"board {name!r} shows the comparison block and protocol notes of its benchmark's spec, "
                         f"which does not load: {e}") from None
    return spec if spec.name == name else None  # another benchmark's file: not this board's spec


def spec_family(spec) -> str | None:
    """The modality family of a spec's data: its ``family`` when set, else its dataset adapter's
    ``MODALITY_FAMILY`` (the registered multi-view datasets declare theirs), else None."""
    if spec.family:
        return spec.family
    from fusebench import datasets
    from fusebench.registry import UnknownNameError

    try:
        cls = datasets.get(spec.dataset.id) if spec.dataset.id else None
    except UnknownNameError:
        return None
    family = getattr(cls, "MODALITY_FAMILY", None)
    return family if isinstance(family, str) and family else None


def spec_comparison(spec) -> dict[str, str] | None:
    """How a benchmark's current spec (:func:`current_spec`; None: no spec found) compares the rows
    (:func:`~fusebench.components.reference_features.comparison_of`; ``reference`` only where the spec names it,
    else the board's default); None without a spec."""
    from fusebench.components.rows import comparison_of

    if spec is None:
        return None
    out = comparison_of(spec)
    if not spec.comparison.get("reference"):
        out.pop("reference", None)  # the board's default: raw when the table has it, else none
    return out


def _comparison(recs: list[RunRecord], spec) -> tuple[dict[str, str], str]:
    """(how the group's rows are compared, who says so: ``"the benchmark"``, ``"the runs"`` or ``""``): the
    benchmark's current spec when it is found (:func:`spec_comparison`: a changed comparison block reaches
    the board without re-running a cell), else the copy the records carry, else ({}, ""). Every record's copy is
    checked. Without a spec the records' copies must agree: one record's block would otherwise set the primary
    metric and the reference row of the whole board (a ValueError names a file of each block)."""
    copies = [(r, c) for r in sorted(recs, key=lambda r: r.path) if (c := _record_comparison(r)) is not None]
    current = spec_comparison(spec)
    if current is not None:
        return current, "the benchmark"
    if not copies:
        return {}, ""
    blocks: dict[str, list[RunRecord]] = {}
    for r, c in copies:
        blocks.setdefault(canonical_json(c), []).append(r)
    if len(blocks) > 1:
        listing = "; ".join(f"{b} in {_files(rs, limit=3)}" for b, rs in blocks.items())
        raise ValueError(f"the runs of board {recs[0].benchmark!r} disagree on how to compare the rows (no spec of "
                         f"this benchmark is installed to say it): comparison {listing}. Install the benchmark's "
                         f"spec, or keep the runs of one comparison in this runs folder.")
    return dict(copies[0][1]), "the runs"


def _validity(r: RunRecord) -> str | None:
    """None for a valid record, else the reason it is not (``record["validity"]``, typed by
    :func:`fusebench.records.validate_record`)."""
    v = r.raw.get("validity")
    if v is None or v["valid"]:
        return None
    return " ".join(v.get("why", "").split()) or "no reason given"


def _check_selected_on_primary(name: str, recs: list[RunRecord], primary: str, compared_by: str) -> None:
    """Refuse a board that ranks by another metric than the one its runs chose on validation (their
    ``config.selection_metric``: hyper-parameters, checkpoints, probe choices), unless the runs' spec says why
    (``selection_metric_why``, as a spec must to load with a ``selection_metric`` other than its
    ``comparison.primary``). A comparison block changed after the runs (the board takes the current spec's) would
    otherwise rank objectives by a metric nothing was selected on."""
    odd = [r for r in recs if isinstance(r.config.get("selection_metric"), str) and primary
           and r.config["selection_metric"] != primary and not str(r.config.get("selection_metric_why") or "").strip()]
    if not odd:
        return
    chosen = sorted({r.config["selection_metric"] for r in odd})
    where = {"the benchmark": "the benchmark's current spec", "the runs": "the runs' comparison block"}.get(
        compared_by, "the board's choice: no comparison names a metric these runs scored")
    raise ValueError(f"benchmark {name!r}: the board ranks by {primary!r} ({where}) but {len(odd)} of its {len(recs)} "
                     f"runs chose their hyper-parameters, checkpoints and probes on validation {', '.join(map(repr, chosen))} "
                     f"(their selection_metric; e.g. {_files(odd, 3)}): a ranking must be decided on the metric that "
                     f"selected. Rank by it (comparison.primary: {chosen[0]!r}), or re-run the runs with the new primary "
                     "(a spec whose selection_metric differs from comparison.primary states why in selection_metric_why)")


def _check_primary_scored(name: str, recs: list[RunRecord], named: str | None, compared_by: str,
                          scored: list[str]) -> None:
    """Refuse a comparison whose primary metric no run of the group scored: the board would rank by another metric
    in its place (its first) under the comparison's "why", a sentence about the metric it names."""
    if not named or named in scored:
        return
    where = {"the benchmark": "the benchmark's current spec"}.get(compared_by, "the runs' comparison block")
    raise ValueError(f"benchmark {name!r}: the board ranks by {named!r} ({where}) but no run of this table scored it "
                     f"(they scored {', '.join(map(repr, scored)) or 'no metric'}; e.g. {_files(recs, 3)}): re-run the "
                     f"runs with a config that scores it, or rank by a metric they scored (comparison.primary)")


def make_view(name: str, recs: list[RunRecord]) -> GroupView:
    """Everything one comparability group's table shows: metric columns, the primary metric, per-(objective, metric) values, the rows
    (merged aliases, invalid rows), the best row per metric, and for ranked groups the fixed
    reference row, the bootstrap intervals and the paired tests. A malformed ``comparison`` field raises
    :class:`fusebench.records.RecordError` (``validity`` and ``budget`` are typed when the record is read)."""
    order = recs[0].metric_order
    seen = sorted({m for r in recs for m in r.metrics}, key=natural_key)
    ids = [m for m in order if m in seen] + [m for m in seen if m not in order]
    infos = [metric_info(m, recs) for m in ids]
    spec = current_spec(name, recs)
    comparison, compared_by = _comparison(recs, spec)
    _check_primary_scored(name, recs, comparison.get("primary"), compared_by, ids)
    primary = comparison.get("primary") or recs[0].validation_metric
    if primary not in seen:
        primary = ids[0] if seen else ""
    _check_selected_on_primary(name, recs, primary, compared_by if primary == comparison.get("primary") else "")
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
    objectives = sorted({r.objective for r in recs})
    k = _num_views(recs)
    aliases: dict[str, list[str]] = {}
    merged: set[str] = set()
    for g in equivalence_groups(_display_order(recs), k, _hparams(recs)):
        g = [o for o in g if o not in merged and o not in aliases]
        if len(g) > 1:
            aliases[g[0]] = g[1:]
            merged.update(g[1:])
    reference_aliases: dict[str, dict[str, list[str]]] = {}
    for g in probe_identical_groups(_display_order(recs)):  # reference rows that are the same features
        g = [o for o in g if o not in merged and o not in aliases]
        if len(g) > 1:
            aliases[g[0]] = g[1:]
            merged.update(g[1:])
            reference_aliases[g[0]] = {a: [m for m in ids if m in CLUSTER_METRICS and not cluster_identical(g[0], a)]
                                       for a in g[1:]}
    rows = [o for o in objectives if o not in merged]
    view = GroupView(name, recs, kind, infos, primary, {}, values, undefined=undefined, rows=rows,
                     aliases=aliases, num_views=k, why=" ".join(comparison.get("why", "").split()),
                     reference_aliases=reference_aliases, compared_by=compared_by,
                     protocol_notes=dict(spec.protocol_notes) if spec is not None else None,
                     family=spec_family(spec) if spec is not None else None,
                     variant_of=(spec.variant_of or None) if spec is not None else None)
    view.invalid = {o: "; ".join(invalid_by_obj[o]) for o in rows if invalid_by_obj.get(o)}
    if spec is not None:
        view.spec_differences = spec_differences(spec.to_dict(), recs)
        view.code_differences = code_differences(spec, recs)
    for info in infos:
        view.best[info.id] = None
        if not view.ranked or info.direction is None:
            continue
        means = {o: m for o in view.valid_rows if (m := view.mean(o, info.id)) is not None}
        if means and len(set(means.values())) > 1:  # no bold where every row ties
            target = max(means.values()) if info.direction == "higher" else min(means.values())
            view.best[info.id] = sorted(o for o in means if means[o] == target)[0]
    if view.ranked:
        _set_reference(view, comparison, compared_by)
        _run_statistics(view)
        from fusebench.leaderboard.ties import settle_ties

        settle_ties(view, level=CI_LEVEL, n_boot=RANK_RESAMPLES, seed=RANK_SEED)
    return view


def _set_reference(view: GroupView, comparison: dict[str, str], named_by: str = "the runs") -> None:
    """The fixed reference row: ``comparison["reference"]`` (mapped to its displayed row when it is a
    merged alias; ``named_by`` says where the comparison comes from), else ``raw`` when the group has it,
    else ``none``."""
    named = comparison.get("reference")
    shown = {a: d for d, al in view.aliases.items() for a in al}
    if named:
        row = shown.get(named, named)
        if row in view.rows:
            view.reference = row
            as_row = f" (shown as `{row}`)" if row != named else ""
            view.reference_text = (f"{md_code(named)}, set by the benchmark{as_row}" if named_by == "the benchmark"
                                   else f"{md_code(named)}{as_row}, set by the run records' `comparison` (no spec of "
                                   "this benchmark is installed)")
        else:
            verb = "names" if named_by == "the benchmark" else "name"
            view.reference_text = f"{named_by} {verb} {md_code(named)} as the reference row, but it has no runs in this table"
        return
    for row in DEFAULT_REFERENCES:
        if row in view.rows:
            view.reference = row
            view.reference_text = f"`{row}` ({ROWS.get(row).short}; the default reference)"
            return
    view.reference_text = f"no reference row ({' or '.join(map(md_code, DEFAULT_REFERENCES))}) in this table"


def _run_statistics(view: GroupView) -> None:
    """Bootstrap CIs of every row's primary mean and the paired tests against the reference."""
    p = view.primary
    if not p:
        return
    from fusebench.leaderboard import stats

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

