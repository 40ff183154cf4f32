"""From run records to what one table shows: the records of a runs folder by benchmark
(:func:`load_runs`), split into comparability groups (:func:`group_runs`: runs share a table only
when their comparability key is equal; duplicates and mixed objective versions are refused), and one
group's :class:`~fusebench.leaderboard.view.GroupView` (:func:`make_view`): metric columns, per-(objective, metric) values over
seeds, rows with the objectives that compute the same loss merged into one (alias rows,
:func:`equivalence_groups`), rows flagged invalid, the best row per metric, the fixed reference row,
the bootstrap intervals and the paired tests (:mod:`fusebench.leaderboard.stats`)."""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import Any

from fusebench.components.identity import cell_identity, config_hash
from fusebench.io import canonical_json, shown_path
from fusebench.leaderboard.columns import md_code, metric_info, natural_key
from fusebench.leaderboard.view import GroupView
from fusebench.records import (RecordError, RunRecord, board_kind, differing_fields, duplicate_runs, find_records,
                               load_record)
from fusebench.records.schema import _flatten, finished_time
from fusebench.spec.config import HASH_SCHEMA_VERSION
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


def _files(recs: list[RunRecord], limit: int = 6) -> str:
    """The files of ``recs``, sorted, the first ``limit`` named (a control character escaped: :func:`shown_path`)."""
    paths = [shown_path(p) for p in sorted(r.path for r in recs)]
    shown = ", ".join(paths[:limit])
    return shown + (f" and {len(paths) - limit} more" if len(paths) > limit else "")


def _pretrains_nothing(r: RunRecord) -> bool:
    """Whether ``r``'s row pretrains nothing: a reference row, or a weights row (its record's ``encoder_weights``
    names it)."""
    from fusebench.components.rows import reads_no_pretraining

    return reads_no_pretraining(r.objective, r.config)


def board_keys(recs: list[RunRecord]) -> list[str]:
    """The comparability key each record is grouped by: its own (:attr:`RunRecord.comparability_key`), except for a
    row that pretrains nothing (:func:`_pretrains_nothing`), which reads no ``pretrain`` setting (hash schema 4
    leaves them out of its config hash, so a sweep reuses its record when only the pretraining settings changed):
    it joins the group of the pretrained rows whose key, ``pretrain`` left out, is its own, where those rows are
    one group. Otherwise (no pretrained row, or pretrained rows of two pretraining configs) it keeps its own key."""
    from fusebench.records.comparability import comparability_key

    def without_pretrain(r: RunRecord) -> str:
        return comparability_key({**r.raw, "config": {k: v for k, v in r.config.items() if k != "pretrain"}})

    pretrains = [not _pretrains_nothing(r) for r in recs]
    pretrained_keys = {r.comparability_key for r, p in zip(recs, pretrains) if p}
    if not pretrained_keys or all(p or r.comparability_key in pretrained_keys for r, p in zip(recs, pretrains)):
        return [r.comparability_key for r in recs]  # every record's own key (the common case: nothing to join)
    joined: dict[str, set[str]] = defaultdict(set)  # without pretrain -> the pretrained rows' keys
    for r, p in zip(recs, pretrains):
        if p:
            joined[without_pretrain(r)].add(r.comparability_key)
    keys = []
    for r in recs:
        target = joined.get(without_pretrain(r)) if _pretrains_nothing(r) else None
        keys.append(next(iter(target)) if target and len(target) == 1 else r.comparability_key)
    return keys


def group_key(recs: list[RunRecord]) -> str:
    """The comparability key a group of records (:func:`group_runs`) is named by: its pretrained rows' (the rows
    that pretrain nothing may state another, :func:`board_keys`), else its first record's."""
    own = [r.comparability_key for r in recs if not _pretrains_nothing(r)]
    return own[0] if own else recs[0].comparability_key


def group_runs(name: str, recs: list[RunRecord], split: bool = False) -> list[list[RunRecord]]:
    """Split ``recs`` (one benchmark) by comparability key (:func:`board_keys`: a row that pretrains nothing joins
    the pretrained rows' group whatever its ``pretrain`` settings); refuse duplicates and, unless ``split``,
    a benchmark with more than one group. Groups are ordered largest first, then by key."""
    by_key: dict[str, list[RunRecord]] = defaultdict(list)
    for r, key in zip(recs, board_keys(recs)):
        by_key[key].append(r)
    for key, group in by_key.items():
        twice = duplicate_runs(group)
        if twice is not None:
            other, r = twice
            raise ValueError(f"duplicate runs of benchmark {name!r}, objective {r.objective!r}, seed {r.seed}: "
                             f"{shown_path(other.path)} and {shown_path(r.path)} (a table counts each (objective, "
                             f"seed) once; remove one)")
        by_version: dict[str, dict[str, list[RunRecord]]] = defaultdict(lambda: defaultdict(list))
        for r in group:  # one row = one objective version (and its methods'): a changed loss is not averaged
            by_version[r.objective][r.versions.row].append(r)
        for objective, versions in sorted(by_version.items()):
            if len(versions) > 1:
                listing = "; ".join(f"version {v}: {_files(rs)}" for v, rs in sorted(versions.items()))
                raise ValueError(f"benchmark {name!r}, objective {objective!r} mixes runs of different objective "
                                 f"versions (the loss changed between them): {listing}. Move the old runs away.")
        _check_one_config(name, group)
    groups = sorted(by_key.items(), key=lambda kg: (-len(kg[1]), kg[0]))
    if len(groups) > 1 and not split:
        fields = differing_fields([g[0] for _, g in groups])
        lines = [f"benchmark {name!r} mixes runs that must not be compared: {len(groups)} comparability groups "
                 f"differing in {', '.join(fields) or 'their comparability key'}:"]
        for key, g in groups:
            lines.append(f"  group {key} ({len(g)} run(s)): {_files(g)}")
        lines.append("Move the odd runs to another runs folder, or pass --split for one table per group.")
        raise ValueError("\n".join(lines))
    return [g for _, g in groups]


def _current_hash(r: RunRecord) -> str:
    """The config hash of ``r``'s config under the current hash schema (:data:`HASH_SCHEMA_VERSION`): the stored
    one when the record was written under it (the schema checked it), else recomputed, so a schema-2 record and a
    schema-3 record of one config give one hash."""
    if r.raw.get("hash_schema") == HASH_SCHEMA_VERSION and r.config_hash is not None:
        return r.config_hash
    return config_hash(r.config, r.objective, HASH_SCHEMA_VERSION)


def _check_one_config(name: str, group: list[RunRecord]) -> None:
    """Refuse a row whose runs were made under different configs. Runs of one comparability group share everything
    but each row's own settings (``pretrain``'s per-objective tables: hyper-parameters, grid, batch, epochs,
    micro-batch; the row's encoder weights): one objective's runs are one config, and its row averages them over
    seeds. Compared by :func:`_current_hash`, one hash schema for all; the message names the files of each hash and
    the config keys in which they differ. Budgets may still differ by seed under one config (each seed draws its
    own split: the board's budget line says ``varies by seed``)."""
    by_objective: dict[str, dict[str, list[RunRecord]]] = defaultdict(lambda: defaultdict(list))
    for r in group:
        by_objective[r.objective][_current_hash(r)].append(r)
    for objective, hashes in sorted(by_objective.items()):
        if len(hashes) < 2:
            continue
        firsts = [min(rs, key=lambda r: r.path) for _, rs in sorted(hashes.items())]
        flat = [_flatten(cell_identity(r.config, objective, HASH_SCHEMA_VERSION)) for r in firsts]
        keys = [k for k in sorted(set().union(*flat))
                if len({canonical_json(f.get(k, "<absent>")) for f in flat}) > 1]
        listing = "; ".join(f"config hash {h}: {_files(rs)}" for h, rs in sorted(hashes.items()))
        differ = ", ".join(keys[:6]) + (f" and {len(keys) - 6} more" if len(keys) > 6 else "")
        raise ValueError(f"benchmark {name!r}, objective {objective!r} mixes runs made under different configs (a row "
                         f"averages the seeds of one config; hashes of hash schema {HASH_SCHEMA_VERSION}): {listing}; "
                         f"they differ in {differ or 'their config'}. Move the runs of the other config away, or rerun "
                         f"them.")


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


def oldest_first(recs: list[RunRecord]) -> list[RunRecord]:
    """``recs`` by the time they were written (``finished_at``; records written before the field existed
    first, in their given order). The board's text (description, protocol notes, the objectives' display
    order) is the newest record's: re-running some rows of a board under an amended spec (e.g. one row's
    new grid, hash schema 2 keeps the other rows' records) brings the spec's amended text with it. Times are
    compared as times (:func:`fusebench.records.schema.finished_time`), not as text: ``10:00+05:00`` is before
    ``06:00+00:00``."""
    def key(r: RunRecord) -> tuple:
        t = r.raw.get("finished_at")
        return (0,) if t is None else (1, finished_time(t, r.path))

    return sorted(recs, key=key)


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
        compared_by, "the runs")
    raise ValueError(f"benchmark {name!r}: the board ranks by {primary!r} ({where}) but {len(odd)} of its {len(recs)} "
                     f"runs chose their hyper-parameters, checkpoints and probes on validation {', '.join(map(repr, chosen))} "
                     f"(their selection_metric; e.g. {_files(odd, 3)}): a ranking must be decided on the metric that "
                     f"selected. Rank by it (comparison.primary: {chosen[0]}), or re-run the runs with the new primary "
                     "(a spec whose selection_metric differs from comparison.primary states why in selection_metric_why)")


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
    primary = comparison.get("primary") or recs[0].validation_metric
    if primary not in seen:
        primary = ids[0] if seen else ""
    _check_selected_on_primary(name, recs, primary, compared_by)
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
    the ``pretrain.*`` values of the rows that pretrain nothing (:func:`_pretrains_nothing`: they read none)."""
    from fusebench.pipelines import PIPELINES, applied_form

    def applied(form: dict[str, Any]) -> dict[str, Any]:
        pipeline = form.get("pipeline", "standard")
        return applied_form(form, pipeline) if pipeline in PIPELINES else form

    want = {k: v for k, v in _flatten(applied(spec)).items()
            if v is not None and not any(k == t or k.startswith(t + ".") for t in SPEC_TEXT_KEYS)}
    ordered = oldest_first(recs)
    flat = [_flatten(applied(r.config)) for r in ordered]
    nothing = [_pretrains_nothing(r) for r in ordered]  # their pretrain.* values changed nothing (board_keys)
    out = []
    for key in sorted(want):
        if not all(key in f for f in flat):  # an older record without the field: nothing to compare
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

