"""Smoke runs are not results (issue 29 item 9): a run on a real file whose train, val and test splits share
samples -- the Sleep-EDF fixture recipe, one subject listed in all three splits -- is recorded and shown as a
pipeline check, never ranked as real data (it scored balanced accuracy 100 on the samples it trained on)."""

from __future__ import annotations

import json

import pytest
from torch.utils.data import Subset

from fusebench.records import load_record, validate_record
from fusebench.records.builder import split_overlap
from fusebench.metrics import values_of

PAIR = [["short_psg.edf", "SC4001EC-Hypnogram.edf"]]


class _Keys:
    """A split whose adapter names its samples."""

    def __init__(self, keys):
        self.keys = keys

    def sample_keys(self):
        return list(self.keys)

    def __len__(self):
        return len(self.keys)


def test_split_overlap_names_the_shared_samples():
    assert split_overlap({"train": _Keys("abc"), "val": _Keys("de"), "test": _Keys("fg")}) is None
    why = split_overlap({"train": _Keys("abc"), "val": _Keys("cd"), "test": _Keys("bce")})
    # by hand: train & val share {c}; train & test share {b, c}; val & test share {c}
    assert "train and val share 1 sample(s) (of 3 and 2; e.g. c)" in why
    assert "train and test share 2 sample(s) (of 3 and 3; e.g. b)" in why
    assert "val and test share 1 sample(s) (of 2 and 3; e.g. c)" in why
    # a few-shot subset of train: only the samples it keeps count
    assert split_overlap({"train": Subset(_Keys("abc"), [0]), "test": _Keys("bc")}) is None
    # an adapter that cannot name its samples: nothing is claimed
    assert split_overlap({"train": object(), "test": _Keys("a")}) is None


def test_sleep_edf_subject_splits_are_disjoint_on_the_synthetic_twin():
    from fusebench.datasets import build

    data = {s: build("sleep_edf", split=s, synthetic=True, use_cache=False, synthetic_spec={"options": {"n_subjects": 5}})
            for s in ("train", "val", "test")}
    assert all(len(ds.sample_keys()) == len(ds) for ds in data.values())
    assert split_overlap(data) is None


def test_sleep_edf_fixture_recipe_is_a_pipeline_check(fixtures_dir, tmp_path):
    from fusebench.leaderboard import write_leaderboards
    from fusebench.sweep.runner import run

    root = fixtures_dir / "sleep_edf"
    out, boards = tmp_path / "runs", tmp_path / "boards"
    overrides = {"dataset.options.pairs": PAIR,
                 "dataset.options.split_subjects": {"train": ["SC400"], "val": ["SC400"], "test": ["SC400"]},
                 "downstream.batch_size": 4, "downstream.epochs": 2}
    (rec,) = run("sleep-edf-staging", objective=["none"], seeds=[0], out=out, data_root=str(root),
                 overrides=overrides, progress=False, device="cpu")
    assert values_of(rec["metrics"])["bacc"] == 1.0  # the hostile number: measured on the samples it trained on
    path = out / "sleep-edf-staging" / "none" / "seed0" / "run.json"
    raw = json.loads(path.read_text())
    check = raw["dataset"]["data_check"]
    assert check["kind"] == "pipeline_check"
    # the fixture holds 10 scored 30-s epochs of one recording, in all three splits
    assert "train and test share 10 sample(s) (of 10 and 10; e.g. short_psg:0)" in check["reason"]
    validate_record(raw, str(path))
    assert load_record(path).board == "pipeline_check"
    write_leaderboards(out, boards)
    board = (boards / "sleep-edf-staging.md").read_text()
    assert "Data: **real** (dataset" not in board
    assert "Data: **real** dataset `sleep_edf`. **Pipeline check**" in board
    assert "Why: the splits are not disjoint: train and val share 10 sample(s)" in board
    real_part = (boards / "README.md").read_text().split("Tiny smoke runs")[0]  # the index: real boards first
    assert "sleep-edf-staging" not in real_part


def test_a_forged_data_check_is_refused(tmp_path):
    from fusebench.records import RecordError
    from fusebench.records.schema import _validate_dataset

    raw = {"kind": "ranked", "reason": "x"}

    with pytest.raises(RecordError, match="dataset.data_check.kind"):
        _validate_dataset({"id": "sleep_edf", "synthetic": False, "manifest_hash": "unprepared", "fingerprint": None,
                           "data_check": raw}, "run.json", 2)
    with pytest.raises(RecordError, match="dataset.data_check.reason"):
        _validate_dataset({"id": "sleep_edf", "synthetic": False, "manifest_hash": "unprepared", "fingerprint": None,
                           "data_check": {"kind": "pipeline_check", "reason": 5}}, "run.json", 2)
