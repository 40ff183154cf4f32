"""Which run records share a table (leaderboard layer): the records of one benchmark split by comparability key
(:func:`group_runs`; :func:`board_keys`: a row that pretrains nothing joins the pretrained rows' group whatever
its ``pretrain`` settings), refusing duplicate runs, a row of two objective versions and a row of two configs
(:func:`_check_one_config`, under one hash schema); the key a group is named by (:func:`group_key`). What one
group's table shows is :mod:`fusebench.leaderboard.groups`'."""

from __future__ import annotations

from collections import defaultdict

from fusebench.components.identity import cell_identity, config_hash
from fusebench.io import canonical_json, shown_path, shown_text
from fusebench.records import RunRecord, differing_fields, duplicate_runs
from fusebench.records.schema import _flatten, finished_time
from fusebench.spec.config import HASH_SCHEMA_VERSION


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


def _weights_files(row: str, recs: list[RunRecord]) -> dict[str, list[RunRecord]]:
    """The records of a weights row by the sha256 of the file they scored (``config.encoder_weights.<row>``);
    empty for another row."""
    out: dict[str, list[RunRecord]] = defaultdict(list)
    for r in recs:
        entry = (r.config.get("encoder_weights") or {}).get(row) if isinstance(r.config.get("encoder_weights"),
                                                                                dict) else None
        if isinstance(entry, dict) and isinstance(entry.get("sha256"), str):
            out[entry["sha256"]].append(r)
    return dict(out)


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
                shas = _weights_files(objective, [r for rs in versions.values() for r in rs])
                if len(shas) > 1:  # a weights row: its "version" is the file's content
                    listing = "; ".join(f"sha256 {sha[:12]}: {_files(rs)}" for sha, rs in sorted(shas.items()))
                    raise ValueError(f"benchmark {name!r}, row {objective!r} mixes runs of different encoder weights "
                                     f"files (the row's encoder changed between them): {listing}. Move the runs of "
                                     f"one file away, or give the other file another row name.")
                listing = "; ".join(f"version {v}: {_files(rs)}" for v, rs in sorted(versions.items()))
                from fusebench.components.rows import is_reference

                what = "the row's features" if is_reference(objective) else "the loss"
                raise ValueError(f"benchmark {name!r}, objective {objective!r} mixes runs of different objective "
                                 f"versions ({what} changed between them): {listing}. Move the old runs away.")
        _check_one_config(name, group)
    groups = sorted(by_key.items(), key=lambda kg: (-len(kg[1]), kg[0]))
    if len(groups) > 1 and not split:
        fields = differing_fields([g[0] for _, g in groups])
        lines = [f"benchmark {name!r} mixes runs that must not be compared: {len(groups)} comparability groups "
                 f"differing in {', '.join(map(shown_text, fields)) or 'their comparability key'}:"]
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
        differ = ", ".join(map(shown_text, keys[:6])) + (f" and {len(keys) - 6} more" if len(keys) > 6 else "")
        raise ValueError(f"benchmark {name!r}, objective {objective!r} mixes runs made under different configs (a row "
                         f"averages the seeds of one config; hashes of hash schema {HASH_SCHEMA_VERSION}): {listing}; "
                         f"they differ in {differ or 'their config'}. Move the runs of the other config away, or rerun "
                         f"them.")


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
