"""Prepared caches (fusebench.datasets.cache) and the `fusebench data` command.

A small adapter defined here (one ``.npz`` per sample: an image, a variable-length sequence that is
missing from some samples, a detection target with a varying box count, an extra target, nested
meta) exercises both storage layouts: fixed ``[N, ...]`` arrays and concatenated + offsets.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from fusebench.datasets import DatasetError, cache
from fusebench.datasets.base import DataFile, Modality, MultimodalDataset, SyntheticSpec
from fusebench.datasets.cli import main as data_main
from fusebench.datasets.conformance import ConformanceError, check_adapter

N = 7


class ToyDet(MultimodalDataset):
    """Toy detection adapter: items/<k>.npz with rgb uint8 [3, 4, 5], seq float32 [T, 2], boxes."""

    id = "toydet"
    task = "detection"
    num_classes = 3
    MODALITIES = (Modality("rgb", "image", 3), Modality("seq", "sequence", 2, variable_length=True))
    FILES = (DataFile("items/*.npz", "one sample per file"),)
    INFO = "Toy adapter of the cache tests."
    SPLITS = ("train", "test")
    OPTIONS = frozenset({"fail_at", "interrupt_at"})  # the failure injections below

    def _index(self):
        self.fail_at = self._opts_rest.get("fail_at")
        self.interrupt_at = self._opts_rest.get("interrupt_at")
        return sorted((self.root / "items").glob(f"{self.split}_*.npz"))

    def _load_raw(self, index):
        if index == self.fail_at:
            raise RuntimeError(f"reader failed on sample {index}")
        if index == self.interrupt_at:
            raise KeyboardInterrupt
        with np.load(self.samples[index]) as z:
            d = {k: z[k] for k in z.files}
        mods = {"rgb": torch.from_numpy(d["rgb"]).float() / 255}
        if d["seq"].shape[0] > 0:  # an empty sequence file means "modality missing"
            mods["seq"] = torch.from_numpy(d["seq"])
        return {
            "modalities": mods,
            "target": {"boxes": torch.from_numpy(d["boxes"]), "labels": torch.from_numpy(d["labels"])},
            "extra_targets": {"count": torch.tensor(len(d["labels"]))},
            "meta": {"id": self.samples[index].stem, "size": [4, 5], "nested": {"k": int(index)}},
        }

    @classmethod
    def write_synthetic(cls, root: Path, spec: SyntheticSpec) -> None:
        rng = np.random.default_rng(spec.seed)
        (root / "items").mkdir()
        for split, n in (("train", spec.num_samples), ("test", 3)):
            for k in range(n):
                t = (k * 3) % 5  # sequence lengths 0, 3, 1, 4, 2, 0, ...: 0 = missing
                g = k % 3  # box counts 0, 1, 2, ...
                boxes = np.concatenate([rng.normal(size=(g, 3)), rng.uniform(0.5, 2, (g, 3)), rng.normal(size=(g, 1))], 1)
                np.savez(root / "items" / f"{split}_{k:03d}.npz", rgb=rng.integers(0, 256, (3, 4, 5), dtype=np.uint8),
                         seq=rng.normal(size=(t, 2)).astype(np.float32), boxes=boxes.astype(np.float32),
                         labels=rng.integers(0, 3, g).astype(np.int64))


def _build(tmp_path, **kw):
    kw.setdefault("use_cache", False)
    return ToyDet(root=None, synthetic=True, synthetic_spec={"num_samples": N}, augment=False, **kw)


def _same(a, b):
    assert set(a["modalities"]) == set(b["modalities"])
    for k in a["modalities"]:
        assert a["modalities"][k].dtype == b["modalities"][k].dtype
        assert torch.equal(a["modalities"][k], b["modalities"][k])
    for k in ("boxes", "labels"):
        assert a["target"][k].dtype == b["target"][k].dtype and torch.equal(a["target"][k], b["target"][k])
    assert torch.equal(a["extra_targets"]["count"], b["extra_targets"]["count"])
    assert a["meta"] == b["meta"]


def test_round_trip_and_layout(tmp_path):
    raw = _build(tmp_path)
    folder = cache.prepare(raw, base=tmp_path / "prep", progress=False)
    assert folder == tmp_path / "prep" / "toydet" / cache.cache_key(raw)
    # fixed-shape modality: one [N, 3, 4, 5] array whose rows are the samples
    rgb = np.load(folder / "modalities" / "rgb.npy")
    assert rgb.shape == (N, 3, 4, 5) and rgb.dtype == np.float32
    assert np.array_equal(rgb[4], raw[4]["modalities"]["rgb"].numpy())
    # variable-length modality: concatenated + offsets; lengths (k*3) % 5 = 0,3,1,4,2,0,3, 0 = missing
    lengths = [(k * 3) % 5 for k in range(N)]
    offsets = np.load(folder / "modalities" / "seq.offsets.npy")
    expected, acc = [0], 0
    for t in lengths:  # element offsets (2 features per step)
        acc += 2 * t
        expected.append(acc)
    assert offsets.tolist() == expected
    assert np.load(folder / "modalities" / "seq.present.npy").tolist() == [t > 0 for t in lengths]
    assert np.load(folder / "modalities" / "seq.npy").shape == (2 * sum(lengths),)
    # detection boxes: box counts k % 3 = 0,1,2,0,1,2,0 -> 6 boxes of 7 numbers
    assert np.load(folder / "target" / "boxes.npy").shape == (6 * 7,)
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["num_samples"] == N and manifest["split"] == "train" and manifest["preprocess_version"] == 1
    assert manifest["counts"]["modalities/seq"] == sum(t > 0 for t in lengths)
    # the manifest's hashes are the files' sha256
    for rec in manifest["outputs"] + manifest["inputs"]:
        p = folder / rec["path"] if rec in manifest["outputs"] else Path(manifest["root"]) / rec["path"]
        assert hashlib.sha256(p.read_bytes()).hexdigest() == rec["sha256"]
    assert {r["path"] for r in manifest["inputs"]} >= {f"items/train_{k:03d}.npz" for k in range(N)}

    cached = _build(tmp_path)
    cached._cache = cache.open_cache(cached, base=tmp_path / "prep")
    assert cached._cache is not None
    for i in range(N):
        _same(raw[i], cached[i])
    assert "seq" not in cached[0]["modalities"] and cached[1]["modalities"]["seq"].shape == (3, 2)
    assert cached[0]["target"]["boxes"].shape == (0, 7) and cached[2]["target"]["boxes"].shape == (2, 7)
    # a modality subset reads only that modality
    sub = _build(tmp_path, modalities=["seq"])
    sub._cache = cache.open_cache(sub, base=tmp_path / "prep")
    assert set(sub._cache.modalities) == {"seq"} and set(sub[1]["modalities"]) == {"seq"}


def test_adapters_read_the_default_cache_transparently(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSEBENCH_PREPARED", str(tmp_path / "prepared"))
    assert _build(tmp_path, use_cache=True)._cache is None
    cache.prepare(_build(tmp_path), progress=False)
    ds = _build(tmp_path, use_cache=True)
    assert isinstance(ds._cache, cache.CacheReader)
    # other options, split or preprocessing version -> other key, no cache
    assert _build(tmp_path, use_cache=True, seed=5)._cache is None
    assert _build(tmp_path, use_cache=True, split="test")._cache is None
    monkeypatch.setattr(ToyDet, "PREPROCESS_VERSION", 2, raising=False)
    assert _build(tmp_path, use_cache=True)._cache is None


class ToyFolds(ToyDet):
    """ToyDet whose train split is a list of sample numbers in its code (as built-in standard folds are), given to
    the cache key by ``split_sample_keys()``."""

    id = "toyfolds"
    TRAIN = (0, 1, 2, 3)

    def _index(self):
        items = super()._index()
        return [items[k] for k in self.TRAIN] if self.split == "train" else items

    def split_sample_keys(self):
        return [p.stem for p in self.samples]


def test_a_split_list_in_the_code_keys_the_cache(tmp_path, monkeypatch):
    """A cache prepared for one built-in split list is not served once the list names other samples, even as many
    (it used to be: same key, same count, the old samples under the new split). The manifest records the sha256
    of the sample ids (worked out here from the names) and its fields still give its folder's key; an adapter
    without the hook keeps the key of (id, root, split, options, version, synthetic) alone, as every cache before."""
    base = tmp_path / "prep"

    def _build(cls, **kw):
        return cls(root=None, synthetic=True, synthetic_spec={"num_samples": N}, augment=False, use_cache=False, **kw)

    old = _build(ToyFolds)
    folder = cache.prepare(old, base=base, progress=False)
    manifest = json.loads((folder / "manifest.json").read_text())
    names = ["train_000", "train_001", "train_002", "train_003"]
    assert manifest["split_samples_sha256"] == hashlib.sha256(json.dumps(names).encode()).hexdigest()
    assert cache.check(folder) == [] and cache.open_cache(_build(ToyFolds), base=base) is not None
    monkeypatch.setattr(ToyFolds, "TRAIN", (0, 1, 2, 4))
    new = _build(ToyFolds)
    assert len(new) == len(old) == 4 and cache.cache_key(new) != folder.name
    assert cache.open_cache(new, base=base) is None
    fresh = cache.prepare(new, base=base, progress=False)
    assert [m["id"] for m in json.loads((fresh / "meta.json").read_text())] == ["train_000", "train_001", "train_002",
                                                                                "train_004"]
    plain = _build(ToyDet)
    ident = {"id": "toydet", "root": str(plain.root.resolve()), "split": "train",
             "options": {"seed": 0, "synthetic_spec": {"num_samples": N}}, "version": 1, "synthetic": True}
    assert cache.cache_key(plain) == hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:16]
    plain_dir = cache.prepare(plain, base=base, progress=False)
    assert "split_samples_sha256" not in json.loads((plain_dir / "manifest.json").read_text())


def test_a_cache_copied_under_another_splits_folder_is_refused_and_rebuilt(tmp_path):
    """Every file of a test split's cache, copied over the train split's folder, keeps its recorded hash; the
    manifest's own dataset / root / split / options no longer give the folder's name, so opening refuses it
    (naming the folder, the split it holds and what to do), `data check` reports it, and `prepare` rebuilds it."""
    base = tmp_path / "prep"

    def _build(tmp_path, **kw):  # 3 train samples, as many as the test split has: the sample counts agree
        return ToyDet(root=None, synthetic=True, synthetic_spec={"num_samples": 3}, augment=False,
                      **{"use_cache": False, **kw})

    train, test = _build(tmp_path), _build(tmp_path, split="test")
    assert len(train) == len(test) == 3
    train_dir, test_dir = cache.prepare(train, base=base, progress=False), cache.prepare(test, base=base, progress=False)
    assert cache.check(train_dir) == [] and cache.check(test_dir) == []
    shutil.rmtree(train_dir)
    shutil.copytree(test_dir, train_dir, copy_function=shutil.copy2)  # the times too: the cheap check passes
    with pytest.raises(DatasetError) as e:
        cache.open_cache(_build(tmp_path), base=base)
    msg = str(e.value)
    assert str(train_dir / "manifest.json") in msg and "split 'test'" in msg and "copied or moved" in msg
    assert "fusebench data prepare toydet --force" in msg
    problems = cache.check(train_dir)
    assert len(problems) == 1 and "split 'test'" in problems[0]
    # prepare does not take it for up to date: it writes the train split's cache again
    assert cache.prepare(_build(tmp_path), base=base, progress=False) == train_dir
    assert cache.check(train_dir) == [] and json.loads((train_dir / "manifest.json").read_text())["split"] == "train"
    reopened = _build(tmp_path)
    reopened._cache = cache.open_cache(reopened, base=base)
    assert reopened._cache is not None
    _same(train[2], reopened[2])
    # the manifest records the key its folder is named by
    m = json.loads((train_dir / "manifest.json").read_text())
    assert m["key"] == train_dir.name == cache.cache_key(train)


@pytest.mark.parametrize("how", ["fail_at", "interrupt_at"])
def test_failure_midway_leaves_nothing(tmp_path, how):
    ds = _build(tmp_path, **{how: 4})
    exc = RuntimeError if how == "fail_at" else KeyboardInterrupt
    with pytest.raises(exc):
        cache.prepare(ds, base=tmp_path / "prep", progress=False)
    leftovers = [p for p in (tmp_path / "prep").rglob("*") if p.is_file() or p.name.startswith(".")]
    assert leftovers == []
    assert cache.open_cache(ds, base=tmp_path / "prep") is None


def test_truncated_output_raises_naming_the_file(tmp_path):
    folder = cache.prepare(_build(tmp_path), base=tmp_path / "prep", progress=False)
    victim = folder / "modalities" / "rgb.npy"
    data = victim.read_bytes()
    victim.write_bytes(data[: len(data) // 2])
    with pytest.raises(DatasetError, match="rgb.npy"):
        cache.open_cache(_build(tmp_path), base=tmp_path / "prep")
    problems = cache.check(folder)
    assert len(problems) == 1 and "rgb.npy" in problems[0]


def test_corrupt_manifest_raises(tmp_path):
    folder = cache.prepare(_build(tmp_path), base=tmp_path / "prep", progress=False)
    (folder / "manifest.json").write_text("{not json")
    with pytest.raises(DatasetError, match="manifest.json"):
        cache.open_cache(_build(tmp_path), base=tmp_path / "prep")


def test_check_detects_modified_output_and_input(tmp_path):
    # a private copy of the twin read as real data: this test modifies an input file
    root = tmp_path / "data"
    shutil.copytree(ToyDet.synthetic_root(SyntheticSpec(num_samples=N)), root)
    ds = ToyDet(root=root, use_cache=False, augment=False)
    folder = cache.prepare(ds, base=tmp_path / "prep", progress=False)
    assert cache.check(folder) == []
    victim = folder / "target" / "labels.npy"
    data = bytearray(victim.read_bytes())
    data[-1] ^= 0xFF  # same size, different content: only the hash notices
    victim.write_bytes(bytes(data))
    problems = cache.check(folder)
    assert len(problems) == 1 and "labels.npy" in problems[0] and "sha256" in problems[0]
    # a changed input makes the cache stale: readers ignore it
    (root / "items" / "train_000.npz").write_bytes(b"changed")
    assert cache.open_cache(ds, base=tmp_path / "prep") is None
    assert any("train_000.npz" in p for p in cache.check(folder))


def test_source_files_hook_and_empty_dataset(tmp_path):
    class Hooked(ToyDet):
        def source_files(self):
            return ["items/train_000.npz"]

    ds = Hooked(synthetic=True, synthetic_spec={"num_samples": N}, use_cache=False, augment=False)
    folder = cache.prepare(ds, base=tmp_path / "prep", progress=False)
    manifest = cache.read_manifest(folder)
    assert [r["path"] for r in manifest["inputs"]] == ["items/train_000.npz"]

    class Empty(ToyDet):
        def _index(self):
            return []

    with pytest.raises(DatasetError, match="0 samples"):
        cache.prepare(Empty(synthetic=True, synthetic_spec={"num_samples": N}, use_cache=False),
                      base=tmp_path / "prep", progress=False)


def test_toy_adapter_passes_conformance_and_a_broken_one_fails():
    assert "cache" in check_adapter(ToyDet)

    class WrongDtype(ToyDet):
        def _load_raw(self, index):
            s = super()._load_raw(index)
            s["modalities"]["rgb"] = s["modalities"]["rgb"].double()
            return s

    with pytest.raises(ConformanceError, match="float64"):
        check_adapter(WrongDtype, checks=["schema"])

    class Nondeterministic(ToyDet):
        def _load_raw(self, index):
            s = super()._load_raw(index)
            s["modalities"]["rgb"] = torch.rand(3, 4, 5)
            return s

    with pytest.raises(ConformanceError, match="values differ"):
        check_adapter(Nondeterministic, checks=["determinism"])

    class NoId(ToyDet):
        def _load_raw(self, index):
            s = super()._load_raw(index)
            s["meta"] = {}
            return s

    with pytest.raises(ConformanceError, match="'id'"):
        check_adapter(NoId, checks=["schema"])


# -- the command line (uses the in-tree quickstart adapter) ------------------------------------
def test_cli_prepare_check_info(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("FUSEBENCH_PREPARED", str(tmp_path / "prepared"))
    assert data_main(["info", "quickstart"]) == 0
    assert "Expected layout" in capsys.readouterr().out
    assert data_main(["check", "quickstart"]) == 2  # nothing prepared yet
    assert data_main(["prepare", "quickstart", "--synthetic", "--quiet", "--split", "val"]) == 0
    assert "quickstart/val" in capsys.readouterr().out
    assert data_main(["check", "quickstart"]) == 0
    assert capsys.readouterr().out.startswith("ok")
    [folder] = cache.list_caches("quickstart")
    target = folder / "target.npy"
    data = bytearray(target.read_bytes())
    data[-1] ^= 1
    target.write_bytes(bytes(data))
    assert data_main(["check", "quickstart"]) == 1
    out = capsys.readouterr().out
    assert "MISMATCH" in out and "target.npy" in out


def test_cli_missing_dataset_is_a_message_not_a_traceback(tmp_path, capsys):
    assert data_main(["prepare", "quickstart", "--data-root", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert "does not exist" in err and "Expected layout" in err and "Traceback" not in err
    assert data_main(["info", "quickstrat"]) == 2
    assert "Did you mean 'quickstart'" in capsys.readouterr().err
    assert data_main(["prepare", "quickstart", "--synthetic", "--opt", "novalue"]) == 2
    assert "KEY=VALUE" in capsys.readouterr().err


def test_manifest_hash_is_the_content_of_the_prepared_cache(tmp_path, fixtures_dir) -> None:
    """The identity a record carries depends on the files and options only: preparing the same data
    again later, from another folder, into another base gives the same identity; other data does not."""
    import json
    import shutil

    from fusebench import datasets
    from fusebench.datasets import cache

    def prepared(root: Path, base: Path, **opts) -> cache.CacheReader:
        ds = datasets.build("mv_handwritten", root=str(root), split="train", seed=0, use_cache=False, **opts)
        return cache.CacheReader(cache.prepare(ds, base, progress=False))

    src = fixtures_dir / "multiview" / "handwritten.mat"
    a, b = tmp_path / "a", tmp_path / "elsewhere" / "b"
    for d in (a, b):
        d.mkdir(parents=True)
        shutil.copy2(src, d / src.name)
    first = prepared(a, tmp_path / "prep1")
    manifest = json.loads((first.folder / "manifest.json").read_text())
    # the identity, worked out by hand from the manifest: sorted-key compact JSON, the where/when/who
    # fields, the modalities the preparation read (what it stored is in "fields"), the manifest's own sha256 and
    # the files' mtimes dropped
    assert manifest["read_modalities"] == ["view0", "view1", "view2", "view3", "view4", "view5"]
    content = {k: v for k, v in manifest.items()
               if k not in ("adapter", "root", "key", "created", "read_modalities", "manifest_sha256")}
    content["inputs"] = [{k: v for k, v in r.items() if k != "mtime_ns"} for r in manifest["inputs"]]
    content["outputs"] = [{k: v for k, v in r.items() if k != "mtime_ns"} for r in manifest["outputs"]]
    expected = hashlib.sha256(json.dumps(content, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    assert first.manifest_hash == expected
    second = prepared(b, tmp_path / "prep2")  # other folder, other base, later
    assert json.loads((second.folder / "manifest.json").read_text())["root"] != manifest["root"]
    assert second.manifest_hash == first.manifest_hash
    assert prepared(a, tmp_path / "prep3", verify_sha256=False).manifest_hash != first.manifest_hash  # other options
    # other bytes are another identity: each input's sha256 is part of the hashed content (above)
    assert all("sha256" in r for r in content["inputs"]) and content["inputs"]
    # ... shown on two files of the same shapes that differ in one value of one view
    import scipy.io as sio

    real = sio.loadmat(str(src))
    for name, bump in (("same", 0.0), ("other", 1.0)):
        (tmp_path / name).mkdir()
        x = real["X"].copy()
        x[0, 0] = np.array(x[0, 0], dtype=np.float64)
        x[0, 0][0, 0] += bump
        sio.savemat(str(tmp_path / name / src.name), {"X": x, "Y": real["Y"]})
    same = prepared(tmp_path / "same", tmp_path / "prep6", verify_sha256=False).manifest_hash
    other = prepared(tmp_path / "other", tmp_path / "prep7", verify_sha256=False).manifest_hash
    assert same != other



def test_a_cache_edited_in_place_is_refused_when_a_dataset_opens_it(tmp_path, fixtures_dir, monkeypatch,
                                                                    caplog) -> None:
    """Opening a prepared cache compares each file's size and modification time with the manifest and hashes only a
    file whose time differs: one edited in place (same size) is refused, naming it; one whose bytes are the
    manifest's under another time (touched, copied without its times) is read. A same-size edit that leaves the time
    as it was is found by `fusebench data check` alone; so is any same-size edit under a manifest from before the
    outputs' times were recorded."""
    import logging
    import re

    from fusebench import datasets

    monkeypatch.setenv("FUSEBENCH_PREPARED", str(tmp_path / "prep"))
    src = fixtures_dir / "multiview" / "handwritten.mat"
    (tmp_path / "data").mkdir()
    shutil.copy2(src, tmp_path / "data" / src.name)

    def opened(use_cache: bool = True):
        return datasets.build("mv_handwritten", root=str(tmp_path / "data"), split="train", seed=0,
                              use_cache=use_cache)

    folder = cache.prepare(opened(use_cache=False), progress=False)
    manifest = json.loads((folder / "manifest.json").read_text())
    rec = next(r for r in manifest["outputs"] if r["path"] == "modalities/view0.npy")
    victim = folder / rec["path"]
    assert (rec["size"], rec["mtime_ns"]) == (victim.stat().st_size, victim.stat().st_mtime_ns)
    assert isinstance(opened()._cache, cache.CacheReader)
    original = victim.read_bytes()

    def edit_in_place(mtime_ns: int) -> None:  # the last byte flipped, the size kept; the time set, not waited for
        with open(victim, "r+b") as f:
            f.seek(len(original) - 1)
            f.write(bytes([original[-1] ^ 0xFF]))
        os.utime(victim, ns=(mtime_ns, mtime_ns))

    later = rec["mtime_ns"] + 10**9  # a second after the preparation (a write's own time may share its clock tick)
    edit_in_place(later)
    assert victim.stat().st_size == rec["size"]
    with pytest.raises(DatasetError, match=rf"{re.escape(str(victim))} was modified since preparation .*"
                                           r"`fusebench data check mv_handwritten` .*"
                                           r"`fusebench data prepare mv_handwritten --force`"):
        opened()
    problems = cache.check(folder)
    assert len(problems) == 1 and str(victim) in problems[0] and "sha256" in problems[0]
    # the same edit under the time of the preparation: not seen when opening, seen by data check
    os.utime(victim, ns=(rec["mtime_ns"], rec["mtime_ns"]))
    assert isinstance(opened()._cache, cache.CacheReader)
    assert cache.check(folder) == problems
    # the prepared bytes under another time: hashed, read, and said
    victim.write_bytes(original)
    os.utime(victim, ns=(later, later))
    with caplog.at_level(logging.WARNING, logger=cache.log.name):
        reader = opened()._cache
    assert isinstance(reader, cache.CacheReader)
    assert f"prepared cache: {victim} has another modification time than at preparation" in caplog.text
    assert cache.check(folder) == []
    # data prepare (no --force) rebuilds a cache whose output was edited, rather than call it up to date
    edit_in_place(later)
    assert cache.prepare(opened(use_cache=False), progress=False) == folder
    assert victim.read_bytes() == original and cache.check(folder) == []
    rebuilt = json.loads((folder / "manifest.json").read_text())
    assert next(r for r in rebuilt["outputs"] if r["path"] == rec["path"])["mtime_ns"] == victim.stat().st_mtime_ns
    # a manifest from before the outputs' times (and its own sha256) were recorded: sizes alone, as then; its
    # identity is the same
    old = {**rebuilt, "outputs": [{k: v for k, v in r.items() if k != "mtime_ns"} for r in rebuilt["outputs"]]}
    assert cache.content_identity(old) == cache.content_identity(rebuilt)
    (folder / "manifest.json").write_text(json.dumps(old, indent=1))  # the times dropped, the self-hash kept: edited
    with pytest.raises(DatasetError, match="manifest.json was edited since preparation"):
        opened()
    del old["manifest_sha256"]
    (folder / "manifest.json").write_text(json.dumps(old, indent=1))
    edit_in_place(later)
    assert isinstance(opened()._cache, cache.CacheReader)
    assert len(cache.check(folder)) == 1

# -- relative roots (issue #12 item 9) ---------------------------------------------------------
def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


# (dataset, working directory under the fixtures, relative --root, extra args, split, its input files)
RELATIVE_ROOT_CASES = [
    ("nyuv2", "nyuv2", "mtan", [], "test", ["val/depth/0.npy", "val/image/0.npy", "val/label/0.npy",
                                            "val/normal/0.npy"]),
    ("sleep_edf", ".", "sleep_edf", ["--opt", "pairs=[[short_psg.edf, SC4001EC-Hypnogram.edf]]"], "train",
     ["SC4001EC-Hypnogram.edf", "short_psg.edf"]),
]


def test_a_cache_prepared_from_some_modalities_never_serves_the_others(tmp_path, fixtures_dir, monkeypatch,
                                                                       caplog) -> None:
    """The real CH-SIMS file prepared with ``modalities=["text"]`` holds no audio or vision; a dataset reading
    all three must not get samples with those two missing (they would be zero-filled and marked absent by the
    collate): it ignores that cache, says why, and reads the files; preparing all three then replaces it, and the
    text-only dataset is served by the full cache."""
    import logging

    from fusebench import datasets

    monkeypatch.setenv("FUSEBENCH_PREPARED", str(tmp_path / "prep"))
    root = str(fixtures_dir / "ch_sims" / "feature_aligned.pkl")
    text_only = datasets.build("chsims", root=root, modalities=["text"], use_cache=False)
    folder = cache.prepare(text_only, progress=False)
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["read_modalities"] == ["text"] and sorted(manifest["fields"]["modalities"]) == ["text"]

    with caplog.at_level(logging.WARNING):
        full = datasets.build("chsims", root=root)
    assert full._cache is None
    assert "prepared without the modalities ['audio', 'vision']" in caplog.text
    assert sorted(full[0]["modalities"]) == ["audio", "text", "vision"]
    raw = datasets.build("chsims", root=root, use_cache=False)[0]["modalities"]
    assert torch.equal(full[0]["modalities"]["audio"], raw["audio"])

    assert cache.prepare(datasets.build("chsims", root=root, use_cache=False), progress=False) == folder
    assert json.loads((folder / "manifest.json").read_text())["read_modalities"] == ["audio", "text", "vision"]
    assert datasets.build("chsims", root=root)._cache is not None
    served = datasets.build("chsims", root=root, modalities=["text"])
    assert served._cache is not None and sorted(served[0]["modalities"]) == ["text"]


@pytest.mark.parametrize("name, cwd, root, extra, split, inputs", RELATIVE_ROOT_CASES,
                         ids=[c[0] for c in RELATIVE_ROOT_CASES])
def test_cli_prepare_with_a_relative_root(tmp_path, fixtures_dir, monkeypatch, capsys, name, cwd, root, extra,
                                          split, inputs):
    monkeypatch.chdir(fixtures_dir / cwd)
    out = tmp_path / "prepared"
    rc = data_main(["prepare", name, "--data-root", root, "--split", split, "--out", str(out), "--quiet", *extra])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    [folder] = cache.list_caches(name, base=out)
    m = cache.read_manifest(folder)
    abs_root = (fixtures_dir / cwd / root).resolve()
    assert m["root"] == str(abs_root)
    assert sorted(r["path"] for r in m["inputs"]) == inputs  # relative to the root, not doubled
    assert all(r["sha256"] == _sha(abs_root / r["path"]) for r in m["inputs"])
    # the same relative root finds the cache again (same key), from the same working directory
    monkeypatch.setenv("FUSEBENCH_PREPARED", str(out))
    opts = {"pairs": [["short_psg.edf", "SC4001EC-Hypnogram.edf"]]} if name == "sleep_edf" else {}
    from fusebench.datasets import build

    ds = build(name, root=root, split=split, **opts)
    assert isinstance(ds._cache, cache.CacheReader) and ds._cache.folder == folder


def test_prepare_api_with_a_relative_root(tmp_path, fixtures_dir, monkeypatch):
    """cache.prepare itself (no CLI) with adapters built from a relative root: the hook's paths are
    relative to the working directory and must not get the root prefixed a second time."""
    from fusebench.datasets import build

    monkeypatch.chdir(fixtures_dir / "ch_sims")
    ds = build("chsims", root="feature_aligned.pkl", use_cache=False)  # the root is the feature file
    m = cache.read_manifest(cache.prepare(ds, base=tmp_path / "prep", progress=False))
    # a file root is recorded as "." (the input paths are relative to the root)
    want = _sha(fixtures_dir / "ch_sims" / "feature_aligned.pkl")
    assert [(r["path"], r["sha256"]) for r in m["inputs"]] == [(".", want)]
    monkeypatch.chdir(fixtures_dir)
    ds = build("nyuv2", root="nyuv2/mtan", split="test", use_cache=False)
    m = cache.read_manifest(cache.prepare(ds, base=tmp_path / "prep", progress=False))
    assert sorted(r["path"] for r in m["inputs"])[0] == "val/depth/0.npy"
    assert cache.source_files(ds)[0] == (fixtures_dir / "nyuv2" / "mtan" / "val" / "depth" / "0.npy").resolve()


# -- write failures: full disk, read-only folder (issue #12 item 8) ---------------------------
class _FullDiskFile:
    """Wraps a real file: writes fail with ENOSPC after ``budget`` bytes, and close() then fails too
    (as a real full disk does when the buffered tail cannot be flushed) after closing the file."""

    def __init__(self, f, budget: int) -> None:
        self.f, self.budget, self.full = f, budget, False

    def write(self, b) -> int:
        n = memoryview(b).nbytes
        if n > self.budget:
            self.full = True
            raise OSError(errno.ENOSPC, "No space left on device")
        self.budget -= n
        return self.f.write(b)

    def __getattr__(self, name):
        return getattr(self.f, name)

    def close(self) -> None:
        self.f.close()
        if self.full:
            raise OSError(errno.ENOSPC, "No space left on device")


def _fill_disk_after(monkeypatch, budget: int) -> None:
    real_open = open

    def fake_open(path, mode="r", *a, **kw):
        f = real_open(path, mode, *a, **kw)
        return _FullDiskFile(f, budget) if "w" in mode else f

    monkeypatch.setattr(cache, "open", fake_open, raising=False)


def test_prepare_on_a_full_disk_leaves_nothing(tmp_path, monkeypatch):
    _fill_disk_after(monkeypatch, budget=1000)  # each field file fails after 1000 bytes
    ds = _build(tmp_path)
    with pytest.raises(cache.CacheWriteError, match=rf"toydet/train: cannot write the prepared cache under "
                                                    rf"{tmp_path / 'prep'}: No space left on device \[ENOSPC\]") as ei:
        cache.prepare(ds, base=tmp_path / "prep", progress=False)
    assert ei.value.errno == errno.ENOSPC and isinstance(ei.value, DatasetError)
    assert not (tmp_path / "prep").exists()  # temp folder and the folders made for it are gone


def test_cli_full_disk_and_read_only_out_are_messages(tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    out.mkdir()
    _fill_disk_after(monkeypatch, budget=300)
    rc = data_main(["prepare", "quickstart", "--synthetic", "--split", "val", "--quiet", "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 3 and "Traceback" not in err and err.count("\n") == 1
    assert f"cannot write the prepared cache under {out}: No space left on device" in err
    assert [p for p in out.rglob("*")] == []
    monkeypatch.undo()

    def read_only(*a, **kw):
        raise OSError(errno.EROFS, "Read-only file system", str(out))

    monkeypatch.setattr(cache.tempfile, "mkdtemp", read_only)
    rc = data_main(["prepare", "quickstart", "--synthetic", "--split", "val", "--quiet", "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 3 and "Traceback" not in err
    assert f"under {out}: Read-only file system [EROFS]" in err and "choose a writable folder" in err
    assert [p for p in out.rglob("*")] == []


def test_a_read_error_is_not_reported_as_a_write_error(tmp_path):
    class Unreadable(ToyDet):
        def _load_raw(self, index):
            raise PermissionError(errno.EACCES, "Permission denied", "items/x.npz")

    ds = Unreadable(synthetic=True, synthetic_spec={"num_samples": N}, use_cache=False, augment=False)
    with pytest.raises(DatasetError, match=r"toydet/train: reading sample 0 failed.*Permission denied") as ei:
        cache.prepare(ds, base=tmp_path / "prep", progress=False)
    assert not isinstance(ei.value, cache.CacheWriteError)
    assert not (tmp_path / "prep").exists()


@pytest.fixture
def small_tmpfs(tmp_path):
    """A real 3 MB tmpfs (needs root and mount permission; skipped otherwise); unmounted afterwards."""
    where = tmp_path / "small"
    where.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")

    def mount(*opts):
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join(("size=3m", *opts)), "tmpfs", str(where)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            pytest.skip(f"mount -t tmpfs is not permitted here: {r.stderr.strip()}")
        return where

    yield mount
    subprocess.run(["umount", str(where)], capture_output=True)


def test_real_full_tmpfs_and_read_only_tmpfs(small_tmpfs, fixtures_dir, capsys):
    out = small_tmpfs()  # the NYUv2 MTAN sample needs ~6 MB: it cannot fit
    args = ["prepare", "nyuv2", "--data-root", str(fixtures_dir / "nyuv2" / "mtan"), "--split", "test", "--quiet"]
    rc = data_main([*args, "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 3 and "Traceback" not in err
    assert f"nyuv2/test: cannot write the prepared cache under {out}: No space left on device [ENOSPC]" in err
    assert list(out.iterdir()) == [] and shutil.disk_usage(out).used == 0  # no partial arrays left
    subprocess.run(["umount", str(out)], check=True)
    out = small_tmpfs("ro")
    rc = data_main([*args, "--out", str(out / "caches")])
    err = capsys.readouterr().err
    assert rc == 3 and "Traceback" not in err
    assert f"under {out / 'caches'}: Read-only file system [EROFS]" in err


def test_prepare_all_splits_goes_on_past_an_empty_one(tmp_path, fixtures_dir, capsys):
    """Empty splits are reported and the others still prepared (the MTAN sample holds only the
    official test frames, its val/ folder: train and val are empty), exit status 2."""
    from fusebench.datasets import cli

    code = cli.main(["prepare", "nyuv2", "--data-root", str(fixtures_dir / "nyuv2" / "mtan"), "--opt", "val_fraction=0",
                     "--out", str(tmp_path / "cache"), "--quiet"])
    out, err = capsys.readouterr()
    assert code == 2
    assert "nyuv2/test: 1 samples" in out and "nyuv2/train:" not in out and "nyuv2/val:" not in out
    assert "nyuv2/train:" in err and "nyuv2/val:" in err and "splits not prepared: ['train', 'val']" in err
    assert (tmp_path / "cache").is_dir()
    assert "Traceback" not in err


def test_data_check_verifies_the_fixed_official_files(tmp_path, capsys):
    """NYUv2's metadata files declare the sha256 of the real files (../shared/fixtures, unmodified copies):
    `data check --data-root` reads them from meta/, says ok, and names a changed copy with both digests."""
    from conftest import FIXTURES
    from fusebench.datasets.cli import main as data_main

    meta = FIXTURES / "nyuv2" / "meta"
    if not meta.is_dir():
        pytest.skip(f"fixtures not found at {meta}")
    assert data_main(["check", "nyuv2", "--data-root", str(meta.parent)]) == 0
    out = capsys.readouterr().out
    for name in ("splits.mat", "classMapping40.mat", "class13Mapping.mat"):
        assert f"ok       {meta / name}" in out
    root = tmp_path / "nyu"
    shutil.copytree(meta, root)  # at the root this time, one of them changed by one byte
    data = bytearray((root / "splits.mat").read_bytes())
    data[-1] ^= 1
    (root / "splits.mat").write_bytes(bytes(data))
    assert data_main(["check", "nyuv2", "--data-root", str(root)]) == 1
    out = capsys.readouterr().out
    bad = hashlib.sha256(bytes(data)).hexdigest()
    assert f"MISMATCH {root / 'splits.mat'}: sha256 {bad}, expected 6e0814" in out
    assert f"ok       {root / 'classMapping40.mat'}" in out


def test_data_commands_take_data_root_and_still_read_the_old_root(tmp_path, capsys) -> None:
    """One word for the data folder (issue #35): ``--data-root`` as in ``fusebench run``; the old ``--root`` is
    read with a note on stderr, and names the same setting."""
    from fusebench.datasets.cli import _parser

    assert _parser().parse_args(["prepare", "nyuv2", "--data-root", "D"]).root == "D"
    assert _parser().parse_args(["check", "nyuv2", "--root", "D"]).root == "D"
    assert data_main(["prepare", "quickstart", "--root", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert "--root is the old name of --data-root" in err
    assert data_main(["prepare", "quickstart", "--data-root", str(tmp_path / "nowhere")]) == 2
    assert "old name" not in capsys.readouterr().err
