"""Typed schema of run records (the ``run.json`` a run writes) and their comparability key.

:func:`validate_record` turns the parsed JSON of one ``run.json`` into a :class:`RunRecord`, or
raises :class:`RecordError` (a ``ValueError``) naming the file, the field and what was expected.
The leaderboard reads records only through it; the runner validates what it is about to write.

Schema versions
---------------

* **1** — the records committed under ``leaderboards/runs/``. Required: ``schema_version``,
  ``suite_version``, ``benchmark``, ``objective``, ``seed``, ``config``, ``dataset`` (``id``,
  ``synthetic``, ``manifest_hash``), ``metrics``, ``pretrain_time_s``, ``peak_memory_mb``.
  Optional: ``metric_directions``, ``curves``, ``selection``, ``protocol``, ``config_hash`` and the
  provenance fields (``git``, ``host``, ``device``, ...), which are kept in :attr:`RunRecord.raw`.
  Versions default to ``"1"`` (versions did not exist yet) and the dataset has no fingerprint.
* **2** — version 1 plus ``versions: {"suite": str, "objective": str, "metrics": {id: str}}``
  (``suite`` equals ``suite_version``; ``metrics`` covers every id in ``config.metrics``),
  ``comparability_key: str`` (:func:`comparability_key` of the record) and a dataset identity
  ``dataset: {"id", "synthetic": bool, "manifest_hash": str, "fingerprint": null |
  {"files": [[relpath, size], ...], "sha256": str}}``.
* **3** — version 2 with each value stated once (issue #35): no top-level ``precision`` or
  ``numerics.precision`` (``config.precision`` holds it), no ``protocol`` (``config.protocol_notes``; the
  reader's :attr:`RunRecord.protocol` is read from there), no ``seeds``, ``determinism.seed`` or
  ``clustering.seed`` (python, numpy, torch and k-means are seeded with ``seed``). A schema-3 record holding
  one of them is refused, naming the field it repeats (:data:`~fusebench.records.schema.REPEATED_FIELDS`).
  Records of versions 1 and 2 are read as before.
* **4** — version 3 with each metric an entry ``metrics: {id: {"value": number | null, "direction": "higher" |
  "lower" | null, "version": str}}`` (issue #35): no ``metric_directions`` and no ``versions.metrics`` (refused,
  naming the field); ``versions`` holds ``suite`` and ``objective``; a metric's version is its entry's.
  :func:`fusebench.metrics.values_of` reads ``{id: value}`` from the block of any version; the typed
  :class:`RunRecord` is the same for every version.

Every version may carry ``hash_schema`` (``2``: ``config_hash`` is
:func:`fusebench.components.identity.config_hash` of the record's ``config`` and ``objective``, checked
here; every committed record was migrated to it), ``finished_at`` (UTC ISO 8601 time the record was
written; the board's text is the newest record's), ``precision`` (versions 1 and 2: the run's precision
policy, one of :data:`fusebench.spec.precision.PRECISIONS`; it must equal ``config.precision``; records of hash
schema 1 left it out at the default ``32``) and ``numerics`` (a mapping: device name, CUDA / cuDNN versions,
deterministic settings, TF32 switches; :func:`fusebench.spec.precision.numerics`). A record
without them was made at ``32``: every record before the precision policy was made on the CPU.

Types: ids (``benchmark``, ``objective``, ``dataset.id``) follow the registry id rule
(:data:`fusebench.registry.ID_RULE`), so they are safe as one path component; ``seed`` is an
integer (not a string, not a boolean); every metric value is a finite JSON number, or ``null`` (what
strict JSON writes for NaN, :func:`fusebench.io.strict_json`) or ``NaN`` (records written before):
a metric undefined for the run, e.g. a correlation of constant predictions, Cohen's kappa when chance
agreement is 1, the F1 of a class absent from the split, read as NaN; the leaderboard counts these in
the cell; ``Infinity``, strings and lists are refused (a run that failed has ``failed.json``, not a
``run.json``); curves are lists of numbers (``null``: a non-finite value, read as NaN); metric and
curve names are ``[A-Za-z0-9][A-Za-z0-9_.@-]*``. The optional fields the leaderboard reads
(``wall_time_s``, ``device``, ``host``, ``numerics.device_name``, ``hparams``, ``hparam_selection``,
``missing_views``, ``config.pretrain``, ``config.downstream``, ``config.objectives``) are checked by
type where present, so a board never meets a field of another type (docs/leaderboards.md, "Run
record schema").

What counts as a record file (:func:`find_records`, :func:`check_record_file`; the leaderboard and
``fusebench status`` share the rule): a regular file named ``run.json`` reached from the runs folder
through real folders. A ``run.json`` that is a folder, a symbolic link or a special file, a symbolic
link to a folder anywhere under the runs folder (hidden folders aside), and a folder that cannot be
listed are errors naming the path, never skipped: a record is never counted from outside the runs
folder, nor silently left out. The runs folder itself may be a link.

Files written for records and boards get mode ``0o666 & ~umask`` (:func:`fusebench.io.new_file_mode`).

Comparability
-------------

Two runs may share a leaderboard row / table only if their :func:`comparability_key` is equal. The
key hashes :func:`comparability_fields`: the benchmark id; a hash of ``config`` without the keys that
do not change what one run computes (:data:`CONFIG_KEYS_IGNORED`: the seed list, the objective
sweep list, the protocol notes, the description, the ``synthetic:`` override block itself, the
checkpoint spacing, how the board compares rows, and ``options.board``) and without what is each row's
own (the per-objective tables of ``pretrain``: hyper-parameters, grid, batch, epochs, micro-batch; the
budget each row got is printed on the board); the suite version; the versions of the metrics in
``config.metrics``; and the dataset identity (id, synthetic flag, fingerprint hash, the manifest hash as
``synthetic`` / ``unprepared``: a prepared cache holds what the official files give, :func:`comparable_manifest`).
The precision is in ``config``, so runs of different precisions never share a key.
The objective's version is not in the key (one table compares objectives of different versions);
the leaderboard requires it to be the same within each objective's row instead.
"""

from fusebench.records.comparability import (CONFIG_KEYS_IGNORED, comparability_fields, comparability_key,
                                             comparable_config, synthetic_overrides_applied)
from fusebench.records.schema import (BOARD_KINDS, CURRENT_SCHEMA_VERSION, METRIC_EXPECTED,
                                      SCHEMA_VERSIONS, DatasetIdentity, Fingerprint, RecordError, RunRecord, Versions,
                                      board_kind, differing_fields, load_record, read_record_json, validate_record)
from fusebench.records.store import RECORD_FILE, check_record_file, duplicate_runs, find_records
from fusebench.components.identity import versions_block  # the version block a run writes (kept importable here)

__all__ = ["BOARD_KINDS", "CONFIG_KEYS_IGNORED", "CURRENT_SCHEMA_VERSION", "DatasetIdentity", "Fingerprint",
           "METRIC_EXPECTED", "RECORD_FILE", "RecordError", "RunRecord", "SCHEMA_VERSIONS", "Versions", "board_kind",
           "check_record_file", "comparability_fields", "comparability_key", "comparable_config", "differing_fields",
           "duplicate_runs", "find_records", "load_record", "read_record_json", "synthetic_overrides_applied",
           "validate_record", "versions_block"]
