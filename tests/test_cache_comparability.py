"""A run that read a prepared cache compares with one that read the official files (a new user's seed that found a
cache split one board into two groups): the cache holds what the raw reader gives for the same files, options and
preprocessing version; the data's identity is the fingerprint."""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path

import pytest

from fusebench.records import RecordError, comparability_key, validate_record
from fusebench.records.comparability import comparable_manifest

RUNS = Path(__file__).resolve().parents[1] / "leaderboards" / "runs"


def _key_by_hand(rec: dict, manifest: str) -> str:
    """The key over the fields as written out here: the record's own fields with the manifest given."""
    from fusebench.records.comparability import comparability_fields

    fields = comparability_fields(rec)
    fields["dataset"]["manifest_hash"] = manifest
    return hashlib.sha256(json.dumps(fields, sort_keys=True, separators=(",", ":"),
                                     ensure_ascii=False).encode()).hexdigest()[:16]


def test_a_cache_s_manifest_hash_is_not_a_comparability_field_and_older_keys_still_read() -> None:
    path = RUNS / "mv-ngs" / "raw" / "seed0" / "run.json"
    rec = json.loads(path.read_text())
    assert rec["dataset"]["manifest_hash"] == "unprepared" and not rec["dataset"]["synthetic"]
    cached = copy.deepcopy(rec)
    cached["dataset"]["manifest_hash"] = "ab" * 32  # the same run, its splits read from a prepared cache
    assert comparable_manifest(cached["dataset"]) == "unprepared"
    assert comparability_key(cached) == comparability_key(rec) == rec["comparability_key"]
    validate_record(cached, "cached.json")  # the key it is written with now
    # written before the change: its key hashed the cache's manifest; it still validates, and joins the group
    cached["comparability_key"] = comparability_key(cached, legacy=True)
    assert cached["comparability_key"] == _key_by_hand(rec, "ab" * 32) != rec["comparability_key"]
    assert validate_record(cached, "old.json").comparability_key == rec["comparability_key"]
    # any other key is still an edited record
    cached["comparability_key"] = "0" * 16
    with pytest.raises(RecordError, match="comparability_key"):
        validate_record(cached, "edited.json")
    # synthetic data keeps its marker
    assert comparable_manifest({"synthetic": True, "manifest_hash": "synthetic"}) == "synthetic"
