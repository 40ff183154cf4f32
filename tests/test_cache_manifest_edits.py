"""An edited manifest must not switch off the checks made when a prepared cache is opened (hostile round, F6).

The real 3Sources file (mv_3sources, train split) is prepared; then its manifest is edited as a tester did:
``outputs`` emptied (so nothing was checked) with the labels reversed, or the outputs' ``mtime_ns`` removed (so
only sizes were compared) with the labels shuffled at the same size. Every file the cache reads must be listed
in ``outputs``; a manifest that records the outputs' times must have one for each; a manifest that records its
own sha256 (``manifest_sha256``, written since 2026-11-29) is refused when edited. A manifest from before both
(no self-hash, no output time) is still read by sizes alone: that, and a same-size edit with the time set back,
only ``fusebench data check`` finds.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from fusebench import datasets
from fusebench.datasets import DatasetError, cache

OPTS = {"split_fractions": [0.6, 0.2, 0.2], "split_seed": 0, "outer_test_seed": 0}


@pytest.fixture()
def prepared(tmp_path, fixtures_dir, monkeypatch):
    """(data root, cache folder, build(use_cache) -> dataset) of the real 3Sources file's train split."""
    monkeypatch.setenv("FUSEBENCH_PREPARED", str(tmp_path / "prep"))
    root = tmp_path / "data"
    root.mkdir()
    shutil.copy2(fixtures_dir / "multiview2" / "3Sources.mat", root / "3Sources.mat")

    def build(use_cache: bool = True):
        return datasets.build("mv_3sources", root=str(root), split="train", seed=0, use_cache=use_cache, **OPTS)

    folder = cache.prepare(build(use_cache=False), progress=False)
    return root, folder, build


def _manifest(folder: Path) -> dict:
    return json.loads((folder / "manifest.json").read_text())


def _write(folder: Path, m: dict) -> None:
    (folder / "manifest.json").write_text(json.dumps(m, indent=1))


def _self_hash(m: dict) -> str:
    """The manifest's sha256 worked out here: sorted-key compact JSON without the field itself."""
    rest = {k: v for k, v in m.items() if k != "manifest_sha256"}
    return hashlib.sha256(json.dumps(rest, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _rewrite_target(folder: Path, rec: dict, values: np.ndarray) -> None:
    """target.npy's data rewritten in place with ``values`` (its header kept); its time set one second after the
    preparation."""
    path = folder / "target.npy"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - values.nbytes] + np.ascontiguousarray(values).tobytes())
    assert path.stat().st_size == rec["size"]
    later = rec["mtime_ns"] + 10**9
    os.utime(path, ns=(later, later))


def _labels(ds) -> list[int]:
    return [int(ds[i]["target"]) for i in range(len(ds))]


def test_the_manifest_records_its_own_sha256_and_every_output_s_time(prepared) -> None:
    _, folder, build = prepared
    m = _manifest(folder)
    assert m["manifest_sha256"] == _self_hash(m)
    assert sorted(r["path"] for r in m["outputs"]) == ["meta.json", "modalities/bbc.npy", "modalities/guardian.npy",
                                                        "modalities/reuters.npy", "target.npy"]
    assert all(r["mtime_ns"] == (folder / r["path"]).stat().st_mtime_ns for r in m["outputs"])
    assert isinstance(build()._cache, cache.CacheReader) and cache.check(folder) == []


def test_outputs_emptied_and_labels_reversed_is_refused(prepared) -> None:
    """(a): ``"outputs": []`` and target.npy reversed was read, exit 0, no warning."""
    _, folder, build = prepared
    genuine = _labels(build(use_cache=False))
    m = _manifest(folder)
    trec = next(r for r in m["outputs"] if r["path"] == "target.npy")
    _rewrite_target(folder, trec, np.load(folder / "target.npy")[::-1].copy())
    emptied = {**m, "outputs": []}
    _write(folder, emptied)  # the self-hash left as it was
    with pytest.raises(DatasetError, match=r"manifest\.json was edited since preparation .* `fusebench data prepare "
                                           r"mv_3sources --force`"):
        build()
    assert any("was edited since preparation" in p for p in cache.check(folder))
    # the self-hash recomputed (or dropped, as in a manifest from before it): the files read are not in outputs
    for self_hash in (True, False):
        edited = dict(emptied)
        del edited["manifest_sha256"]
        if self_hash:
            edited["manifest_sha256"] = _self_hash(edited)
        _write(folder, edited)
        with pytest.raises(DatasetError, match=rf"{folder / 'meta.json'} is read by the cache but not listed in the "
                                               r"outputs of .*manifest\.json"):
            build()
        problems = cache.check(folder)
        assert sorted(p.split(" ")[0] for p in problems) == [str(folder / f) for f in (
            "meta.json", "modalities/bbc.npy", "modalities/guardian.npy", "modalities/reuters.npy", "target.npy")]
    # only the target dropped from outputs: refused naming it
    only = {**m, "outputs": [r for r in m["outputs"] if r["path"] != "target.npy"]}
    only["manifest_sha256"] = _self_hash(only)
    _write(folder, only)
    with pytest.raises(DatasetError, match=rf"{folder / 'target.npy'} is read by the cache but not listed"):
        build()
    # the genuine manifest: the reversed labels are seen by their changed time and sha256
    _write(folder, m)
    with pytest.raises(DatasetError, match=rf"{folder / 'target.npy'} was modified since preparation"):
        build()
    assert genuine != genuine[::-1]  # the edit changed what a run would read


def test_output_times_removed_and_labels_shuffled_is_refused(prepared) -> None:
    """(b): the outputs' mtime_ns removed and target.npy shuffled at its size was read (its record's manifest_hash
    the genuine cache's)."""
    _, folder, build = prepared
    m = _manifest(folder)
    trec = next(r for r in m["outputs"] if r["path"] == "target.npy")
    target = np.load(folder / "target.npy")
    shuffled = target[np.random.default_rng(0).permutation(len(target))]
    assert not np.array_equal(shuffled, target)
    _rewrite_target(folder, trec, shuffled)
    timeless = {**m, "outputs": [{k: v for k, v in r.items() if k != "mtime_ns"} for r in m["outputs"]]}
    assert cache.content_identity(timeless) == cache.content_identity(m)  # why the record could not tell them apart
    _write(folder, timeless)  # self-hash as it was
    with pytest.raises(DatasetError, match=r"manifest\.json was edited since preparation"):
        build()
    timeless["manifest_sha256"] = _self_hash(timeless)  # recomputed: the manifest still says it records times
    _write(folder, timeless)
    with pytest.raises(DatasetError, match=r"manifest\.json: output meta\.json has no recorded modification time "
                                           r"\(\"mtime_ns\"\) although this manifest records them: the manifest was "
                                           r"edited; re-run `fusebench data prepare mv_3sources --force`"):
        build()
    # no self-hash, one output's time removed: the others say times are recorded
    one = {**m, "outputs": [{k: v for k, v in r.items() if not (k == "mtime_ns" and r is trec)}
                            for r in m["outputs"]]}
    del one["manifest_sha256"]
    _write(folder, one)
    with pytest.raises(DatasetError, match=r"output target\.npy has no recorded modification time"):
        build()
    assert any("target.npy has no recorded modification time" in p for p in cache.check(folder))
    # a manifest from before the outputs' times and the self-hash (neither anywhere): sizes alone, as then (the
    # documented limit); `data check` finds the shuffled labels
    old = {k: v for k, v in timeless.items() if k != "manifest_sha256"}
    _write(folder, old)
    assert _labels(build()) == shuffled.tolist()
    problems = cache.check(folder)
    assert len(problems) == 1 and str(folder / "target.npy") in problems[0] and "sha256" in problems[0]


def test_a_listed_output_that_is_missing_is_refused_naming_it(prepared) -> None:
    _, folder, build = prepared
    (folder / "modalities" / "guardian.npy").unlink()
    with pytest.raises(DatasetError, match=rf"output file {folder / 'modalities' / 'guardian.npy'} is missing"):
        build()


@pytest.mark.parametrize("edit, says", [
    (lambda m: m["outputs"][0].update(path="../../../etc/passwd"), r"outputs\[0\]: expected \{\"path\": a path inside "
                                                                    r"the cache folder"),
    (lambda m: m["outputs"][1].update(size="3690"), r"outputs\[1\]: expected"),
    (lambda m: m["outputs"][2].pop("sha256"), r"outputs\[2\]: expected"),
    (lambda m: m["inputs"][0].update(path="data\ud800.mat"), r"inputs\[0\]: expected \{\"path\": a file path"),
    (lambda m: m["fields"]["target"][""].update(file="/abs/target.npy"), r"fields\.target\[''\]: expected"),
    (lambda m: m.update(num_samples=True), r"num_samples: expected a sample count"),
    (lambda m: m.update(outputs={"meta.json": 1}), r"outputs: expected a list"),
], ids=["path-outside", "size-as-text", "no-sha256", "lone-surrogate-input", "absolute-field-file", "bool-count",
        "outputs-not-a-list"])
def test_a_malformed_manifest_is_one_error_naming_it_and_the_key(prepared, edit, says) -> None:
    _, folder, build = prepared
    m = _manifest(folder)
    del m["manifest_sha256"]  # as an old manifest, so that the check of the shape is what answers
    edit(m)
    _write(folder, m)
    with pytest.raises(DatasetError, match=rf"prepared cache: {folder / 'manifest.json'}: {says}"):
        build()
    problems = cache.check(folder)
    assert len(problems) == 1 and str(folder / "manifest.json") in problems[0]


@pytest.mark.parametrize("text", ['{"format": "fusebench-prepared", "x": ' + "[" * 100000 + "]" * 100000 + "}",
                                  '{"format": "fusebench-prepared", "num_samples": ' + "9" * 5000 + "}"],
                         ids=["nested-100000-deep", "integer-of-5000-digits"])
def test_an_unparseable_manifest_is_one_error_naming_it(prepared, text) -> None:
    _, folder, build = prepared
    (folder / "manifest.json").write_text(text)
    with pytest.raises(DatasetError, match=rf"{folder / 'manifest.json'} is not a readable manifest"):
        build()


def test_fusebench_run_on_an_edited_cache_is_one_message(prepared, tmp_path, capsys) -> None:
    from fusebench.cli import main

    root, folder, _ = prepared
    m = _manifest(folder)
    _write(folder, {**m, "outputs": []})
    rc = main(["run", "mv-3sources", "--objective", "raw", "--seeds", "0", "--data-root", str(root),
               "--out", str(tmp_path / "runs"), "--device", "cpu", "--no-progress"])
    err = capsys.readouterr().err
    assert rc != 0 and "Traceback" not in err
    assert f"{folder / 'manifest.json'} was edited since preparation" in err
    assert not list((tmp_path / "runs").rglob("run.json"))
