"""The allowlist unpickler: numpy/containers round-trip, anything else is refused and never run."""

from __future__ import annotations

import os
import pickle
import subprocess

import numpy as np
import pytest

from fusebench.datasets import DatasetError
from fusebench.datasets.safe_pickle import load, loads


class _WritesFile:
    """Unpickling this with plain pickle.load would call open(target, 'w') (creating the file)."""

    def __init__(self, target: str) -> None:
        self.target = target

    def __reduce__(self):
        return (open, (self.target, "w"))


class _RunsShell:
    def __init__(self, target: str) -> None:
        self.target = target

    def __reduce__(self):
        return (os.system, (f"touch {self.target}",))


class _Popen:
    def __init__(self, target: str) -> None:
        self.target = target

    def __reduce__(self):
        return (subprocess.Popen, (["touch", self.target],))


@pytest.mark.parametrize("payload_cls", [_WritesFile, _RunsShell, _Popen])
@pytest.mark.parametrize("protocol", [0, 2, 5])
def test_malicious_pickle_is_refused_and_runs_nothing(tmp_path, payload_cls, protocol):
    target = tmp_path / "pwned.txt"
    path = tmp_path / "evil.pkl"
    # nested inside an innocent-looking MMSA-style dict
    path.write_bytes(pickle.dumps({"train": {"audio": np.zeros(3), "x": payload_cls(str(target))}},
                                  protocol=protocol))
    with pytest.raises(DatasetError) as err:
        load(path)
    msg = str(err.value)
    assert str(path) in msg and "refused" in msg
    expected_global = {_WritesFile: "io.open", _RunsShell: "system", _Popen: "subprocess.Popen"}[payload_cls]
    assert expected_global in msg
    assert not target.exists()


def test_the_malicious_payload_really_would_run(tmp_path):
    """Guard that the test above is meaningful: the plain unpickler does create the file."""
    target = tmp_path / "created.txt"
    obj = pickle.loads(pickle.dumps(_WritesFile(str(target))))
    obj.close()
    assert target.exists()


def test_refuses_harmless_but_unlisted_class(tmp_path):
    import collections

    path = tmp_path / "counter.pkl"
    path.write_bytes(pickle.dumps(collections.Counter("aab")))
    with pytest.raises(DatasetError, match="collections.Counter"):
        load(path)


@pytest.mark.parametrize("protocol", [0, 1, 2, 3, 4, 5])
def test_numpy_and_containers_round_trip(tmp_path, protocol):
    rng = np.random.default_rng(0)
    obj = {
        "train": {
            "text": rng.normal(size=(2, 5, 7)).astype(np.float32),
            "text_bert": rng.integers(0, 30000, size=(2, 3, 5)),
            "lengths": np.array([5, 3], dtype=np.int32),
            "mask": np.array([True, False]),
            "u8": np.arange(6, dtype=np.uint8).reshape(2, 3),
            "f16": np.array([1.5, -2.0], dtype=np.float16),
            "c": np.array([1 + 2j], dtype=np.complex128),
            "fortran": np.asfortranarray(np.arange(6.0).reshape(2, 3)),
            "structured": np.array([(1.0, 2)], dtype=[("x", "<f4"), ("y", "<i8")]),
            "id": np.array(["vid$_0", "vid$_1"]),
            "raw_text": np.array(["hello", None], dtype=object),
        },
        "scalars": [np.float64(2.5), np.int64(-3), np.bool_(True), 7, 1.25, "s", b"b", None],
        "nested": ({"a": [1, {2, 3}, frozenset({4})]}, (1, (2,))),
    }
    path = tmp_path / f"ok{protocol}.pkl"
    path.write_bytes(pickle.dumps(obj, protocol=protocol))
    got = load(path)
    for key, arr in obj["train"].items():
        out = got["train"][key]
        assert isinstance(out, np.ndarray) and out.dtype == arr.dtype and out.shape == arr.shape, key
        assert np.array_equal(out, arr), key
    assert got["train"]["fortran"].flags["F_CONTIGUOUS"]
    assert got["scalars"] == [2.5, -3, True, 7, 1.25, "s", b"b", None]
    assert type(got["scalars"][0]) is np.float64 and type(got["scalars"][1]) is np.int64
    assert got["nested"] == ({"a": [1, {2, 3}, frozenset({4})]}, (1, (2,)))


def test_truncated_and_missing_files(tmp_path):
    path = tmp_path / "trunc.pkl"
    path.write_bytes(pickle.dumps({"a": np.arange(100)}, protocol=4)[:40])
    with pytest.raises(DatasetError, match="trunc.pkl"):
        load(path)
    with pytest.raises(DatasetError, match="does not exist"):
        load(tmp_path / "nope.pkl")
    with pytest.raises(DatasetError, match="<x>"):
        loads(b"not a pickle at all", source="<x>")


def test_real_fixture_pickles_load(fixtures_dir):
    d = load(fixtures_dir / "ch_sims" / "feature_aligned.pkl")
    assert d["text"].shape == (9, 768) and d["text"].dtype == np.float32
    assert d["text_bert"][0, 0] == 101 and d["text_bert"][0, -1] == 102  # [CLS] ... [SEP]
    infos = load(fixtures_dir / "sunrgbd" / "mmdet3d_v0_trainval" / "sunrgbd_infos_train.pkl")
    assert list(infos[0]["annos"]["name"]) == ["bed", "night_stand", "dresser"]
