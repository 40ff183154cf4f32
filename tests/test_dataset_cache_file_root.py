"""A prepared cache of an adapter whose data root is one file (``--data-root data.npz``) must depend on that file:
before the fix ``source_files`` listed nothing under a file root, so the manifest held no inputs, a changed file kept
being served from the stale cache and ``fusebench data check`` said ok."""
import hashlib
import os

import numpy as np
import torch

from fusebench.datasets import cache
from fusebench.datasets.base import Modality, MultimodalDataset


class OneFile(MultimodalDataset):
    id = "onefile_test"
    task = "classification"
    num_classes = 2
    MODALITIES = (Modality("a", "vector", 3), Modality("b", "vector", 2))

    def _index(self):
        with np.load(self.root, allow_pickle=False) as z:
            self._a, self._b, self._y = z["a"], z["b"], z["y"]
        return list(range(len(self._y)))

    def _load_raw(self, i):
        return {"modalities": {"a": torch.from_numpy(self._a[i].copy()), "b": torch.from_numpy(self._b[i].copy())},
                "target": torch.tensor(int(self._y[i])), "meta": {"id": str(i)}}


def _write(path, scale):
    np.savez(path, a=np.full((4, 3), scale, np.float32), b=np.zeros((4, 2), np.float32), y=np.array([0, 1, 0, 1]))


def test_file_root_is_an_input_of_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSEBENCH_CACHE", str(tmp_path / "cache"))
    data = tmp_path / "data.npz"
    _write(data, 1.0)
    ds = OneFile(root=data, split="train", use_cache=False)
    assert cache.source_files(ds) == [data.resolve()]
    folder = cache.prepare(ds, progress=False)
    manifest = cache.read_manifest(folder)
    assert [rec["sha256"] for rec in manifest["inputs"]] == [hashlib.sha256(data.read_bytes()).hexdigest()]
    assert OneFile(root=data, split="train")._cache is not None  # unchanged file: the cache is used
    _write(data, 7.0)  # same size, new content and mtime
    os.utime(data, ns=(1, 1))
    fresh = OneFile(root=data, split="train")
    assert fresh._cache is None  # stale: refused, the raw reader serves the new values
    assert fresh[0]["modalities"]["a"].tolist() == [7.0, 7.0, 7.0]
