"""Issue #31 item 1: ``multiview_mat`` reads every layout of the multi-view .mat family without options.

The eleven real files of ``../shared/fixtures/multiview2/`` (PROVENANCE.md, fourth round) are read by
their registered ids and by the generic adapter, and compared with an independent ``scipy.io.loadmat``
read written out per file here (which variable holds what, which axis holds the samples); layout variants
(a (V,1) or (1,V) cell, ``x1..xV`` variables, ``data``, label names, a label cell with one copy per view,
views stored features x samples, sparse views, 0-based / float labels, MATLAB v7.3, a shipped ``*_train`` /
``*_test`` split) give the same dataset; an ambiguous or unknown layout is one error naming the file, its
variables and the options that resolve it; a record's data fingerprint covers the file read, not its
folder; the migration of the committed records' fingerprints (scripts/migrate_data_fingerprint.py)."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp

import fusebench
from fusebench import benchmarks, datasets
from fusebench.leaderboard.groups import spec_family
from fusebench.datasets import DatasetError
from fusebench.metrics import values_of

ROOT = Path(__file__).resolve().parents[1]
SPLITS = ("train", "val", "test")

#: id -> (file, N, view dims, classes, family), from PROVENANCE.md's table (Cora's view order and widths as the
#: file stores them: the square citation matrix first, the 1433-word content second, two 2706-column link views)
EXPECTED = {
    "mv_3sources": ("3Sources.mat", 169, [3560, 3631, 3068], 6, "text"),
    "mv_movies": ("Movies.mat", 617, [1878, 1398], 17, "text"),
    "mv_webkb": ("WebKB.mat", 1051, [1840, 3000], 2, "text"),
    "mv_reuters1200": ("Reuters-1200.mat", 1200, [2000] * 5, 6, "text"),
    "mv_prokaryotic": ("Prokaryotic.mat", 551, [393, 3, 438], 4, "other"),
    "mv_proteinfold": ("ProteinFold.mat", 694, [27] * 12, 27, "other"),
    "mv_wikipedia": ("Wikipedia.mat", 2866, [128, 10], 10, "image+text"),
    "mv_cora": ("Cora.mat", 2708, [2708, 1433, 2706, 2706], 7, "other"),
    "mv_cub": ("CUB.mat", 600, [1024, 300], 10, "image+text"),
    "mv_bbc": ("BBC.mat", 685, [4659, 4633, 4665, 4684], 5, "text"),
    "mv_scene15": ("Scene15.mat", 4485, [20, 59, 40], 15, "image"),
}


@pytest.fixture(scope="module")
def mv2(fixtures_dir: Path) -> Path:
    d = fixtures_dir / "multiview2"
    if not d.is_dir():
        pytest.skip(f"{d} is absent")
    return d


def independent(path: Path) -> tuple[list[np.ndarray], np.ndarray, int | None]:
    """(views as (N, d) float64 arrays, labels as stored, size of the shipped train block or None), read with
    scipy.io.loadmat and the layout of each file written out by hand."""
    m = scipy.io.loadmat(str(path))
    name = path.stem
    if name == "CUB":  # x<v>_train / x<v>_test, gt_train / gt_test, rows are samples
        views = [np.vstack([m[f"x{v}_train"], m[f"x{v}_test"]]) for v in (1, 2)]
        return [v.astype(np.float64) for v in views], np.concatenate([m["gt_train"].ravel(), m["gt_test"].ravel()]), 480
    if name == "BBC":  # x1..x4 stored features x samples; truelabel: a (1, 4) cell of identical (1, N) rows
        rows = [m["truelabel"][0, v].ravel() for v in range(4)]
        assert all(np.array_equal(rows[0], r) for r in rows)
        return [m[f"x{v}"].T.astype(np.float64) for v in (1, 2, 3, 4)], rows[0], None
    if name == "Scene15":  # X (1, 3) cell of d x N views, labels gt
        return [m["X"][0, v].T.astype(np.float64) for v in range(3)], m["gt"].ravel(), None
    assert m["X"].shape[1] == 1  # the others: X a (V, 1) cell of N x d views, labels y
    return [m["X"][v, 0].astype(np.float64) for v in range(m["X"].shape[0])], m["y"].ravel(), None


def collect(ds) -> tuple[np.ndarray, dict[str, np.ndarray], np.ndarray]:
    """(rows, {view: [n, d]}, targets) of a split through the public sample API."""
    samples = [ds[i] for i in range(len(ds))]
    rows = np.array([s["meta"]["index"] for s in samples])
    views = {m: np.stack([s["modalities"][m].numpy() for s in samples]) for m in ds.modalities}
    return rows, views, np.array([int(s["target"]) for s in samples])


# ---------------------------------------------------------------------------------------------
# the eleven real files
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("did", sorted(EXPECTED))
def test_real_file_by_id_matches_an_independent_read(mv2: Path, did: str) -> None:
    file, n, dims, classes, family = EXPECTED[did]
    path = mv2 / file
    views, y, shipped_train = independent(path)
    # the independent read agrees with PROVENANCE.md
    assert [v.shape for v in views] == [(n, d) for d in dims] and y.size == n and np.unique(y).size == classes
    ids = np.searchsorted(np.unique(y), y)  # classes in ascending label order, 0..C-1
    dss = {s: datasets.build(did, root=mv2, split=s, standardize=False, use_cache=False) for s in SPLITS}
    cls = datasets.get(did)
    assert cls.MODALITY_FAMILY == family and cls.SHA256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert [m.channels for m in cls.MODALITIES] == dims and cls.num_classes == classes
    seen = []
    for s, ds in dss.items():
        assert ds.num_classes == classes and len(ds.modalities) == len(dims)  # k
        assert ds.modalities == [m.name for m in cls.MODALITIES]
        rows, got, targets = collect(ds)
        np.testing.assert_array_equal(targets, ids[rows])
        for v, name in enumerate(ds.modalities):
            np.testing.assert_array_equal(got[name], views[v][rows].astype(np.float32))
        seen.append(rows)
    assert np.array_equal(np.sort(np.concatenate(seen)), np.arange(n))  # disjoint, covering
    info = dss["test"].split_info()
    assert info["num_samples"] == n and info["view_dims"] == dims
    if shipped_train is None:
        assert dss["test"].shipped_test_indices is None and "shipped_split" not in info
    else:  # the shipped test block is the test split, whatever the seed; train / val split the train block
        np.testing.assert_array_equal(collect(dss["test"])[0], np.arange(shipped_train, n))
        np.testing.assert_array_equal(dss["test"].shipped_test_indices, np.arange(shipped_train, n))
        assert info["shipped_split"] == {"train": shipped_train, "test": n - shipped_train, "used": True}
        other = datasets.build(did, root=mv2, split="test", split_seed=7, use_cache=False)
        np.testing.assert_array_equal(collect(other)[0], np.arange(shipped_train, n))


def test_generic_adapter_reads_each_file_as_its_registered_id(mv2: Path) -> None:
    """``multiview_mat`` with no option reads the views and labels the registered ids read (names aside)."""
    for did, (file, n, dims, classes, _) in EXPECTED.items():
        a = datasets.build("multiview_mat", root=mv2 / file, split="val", standardize=False, use_cache=False)
        b = datasets.build(did, root=mv2 / file, split="val", standardize=False, use_cache=False)
        assert [m.channels for m in a.MODALITIES] == dims and a.num_classes == classes, did
        ra, va, ta = collect(a)
        rb, vb, tb = collect(b)
        assert np.array_equal(ra, rb) and np.array_equal(ta, tb)
        for x, z in zip(va.values(), vb.values()):
            np.testing.assert_array_equal(x, z)


def test_the_layouts_found_are_recorded(mv2: Path) -> None:
    want = {"BBC.mat": ({"views": "x1..x4", "labels": "truelabel"}, ["d x N"] * 4),
            "Scene15.mat": ({"views": "X", "labels": "gt"}, ["d x N"] * 3),
            "CUB.mat": ({"views": "x1_train..x2_train / x1_test..x2_test", "labels": "gt_train / gt_test"}, ["N x d"] * 2),
            "WebKB.mat": ({"views": "X", "labels": "y"}, ["N x d"] * 2)}
    for file, (layout, orient) in want.items():
        info = datasets.build("multiview_mat", root=mv2 / file, split="train", use_cache=False).split_info()
        assert info["layout"] == layout and info["view_layouts"] == orient, file


# ---------------------------------------------------------------------------------------------
# layout variants written here
# ---------------------------------------------------------------------------------------------
def _views(seed: int, n: int = 60, dims: tuple[int, ...] = (5, 7, 3), classes: int = 3):
    rng = np.random.default_rng(seed)
    y = rng.permutation(np.arange(n) % classes) + 1
    return [rng.standard_normal((n, d)) * 10.0 ** i + y[:, None] for i, d in enumerate(dims)], y


def _cell(items, shape):
    c = np.empty(shape, dtype=object)
    for i, v in enumerate(items):
        c.ravel(order="F")[i] = v
    return c


def _save(path: Path, variables: dict) -> Path:
    scipy.io.savemat(str(path), variables)
    return path


def _all(root: Path, **opts):
    return {s: datasets.build("multiview_mat", root=root, split=s, use_cache=False, **opts) for s in SPLITS}


def _same(a, b) -> None:
    for s in SPLITS:
        ra, va, ta = collect(a[s])
        rb, vb, tb = collect(b[s])
        assert np.array_equal(ra, rb) and np.array_equal(ta, tb) and list(va) == list(vb)
        for k in va:
            np.testing.assert_array_equal(va[k], vb[k])


def _write_v73(path: Path, variables: dict) -> Path:
    """MATLAB v7.3 as MATLAB writes it: every matrix transposed, cells as object references into #refs#,
    sparse matrices as data / ir / jc groups."""
    with h5py.File(path, "w", userblock_size=512) as f:
        refs = f.create_group("#refs#")

        def put(group, name, value):
            if sp.issparse(value):
                csc = sp.csc_matrix(value)
                g = group.create_group(name)
                g.attrs["MATLAB_class"] = np.bytes_("double")
                g.attrs["MATLAB_sparse"] = np.uint64(csc.shape[0])
                g.create_dataset("data", data=csc.data.astype(np.float64))
                g.create_dataset("ir", data=csc.indices.astype(np.uint64))
                g.create_dataset("jc", data=csc.indptr.astype(np.uint64))
                return g
            if isinstance(value, np.ndarray) and value.dtype == object:
                r = np.empty(value.shape[::-1], dtype=h5py.ref_dtype)
                for i, item in enumerate(value.ravel(order="F")):
                    r.ravel()[i] = put(refs, f"{name}_{i}", item).ref
                d = group.create_dataset(name, data=r)
                d.attrs["MATLAB_class"] = np.bytes_("cell")
                return d
            d = group.create_dataset(name, data=np.atleast_2d(np.asarray(value, dtype=np.float64)).T)
            d.attrs["MATLAB_class"] = np.bytes_("double")
            return d

        for k, v in variables.items():
            put(f, k, v)
    with open(path, "r+b") as fh:
        fh.write(b"MATLAB 7.3 MAT-file, Platform: GLNXA64, HDF5 schema 1.00 .".ljust(116, b" ") + b"\x00" * 8 + b"\x00\x02IM")
    return path


def test_every_layout_variant_gives_the_same_dataset(tmp_path: Path) -> None:
    views, y = _views(1)
    n, yc = y.size, y.astype(np.float64)[:, None]
    ref = _all(_save(tmp_path / "ref.mat", {"X": _cell(views, (1, 3)), "Y": yc}))
    variants = {
        "col_cell_y": {"X": _cell(views, (3, 1)), "y": yc},
        "data_gnd": {"data": _cell(views, (1, 3)), "gnd": yc.T},
        "vars_truth": {"x1": views[0], "x2": views[1].T, "x3": views[2], "truth": yc},  # x2 features x samples
        "vars_label_cell": {"x1": views[0].T, "x2": views[1], "x3": views[2].T,
                            "truelabel": _cell([y[None, :].astype(np.uint8)] * 3, (1, 3))},
        "zero_based_float": {"X": _cell(views, (3, 1)), "labels": (yc - 1.0)},
        "sparse_label": {"X": _cell([sp.csc_matrix(views[0]), views[1], sp.csc_matrix(views[2].T)], (1, 3)),
                         "label": yc},
        "x0_based": {"x0": views[0], "x1": views[1], "x2": views[2], "gt": yc},
    }
    for name, variables in variants.items():
        _same(ref, _all(_save(tmp_path / f"{name}.mat", variables)))
    v73 = _write_v73(tmp_path / "v73.mat", {"x1": views[0], "x2": sp.csr_matrix(views[1].T), "x3": views[2],
                                            "truelabel": _cell([y[None, :]] * 3, (1, 3))})
    assert h5py.is_hdf5(v73)
    _same(ref, _all(v73))
    assert _all(v73)["train"].split_info()["format"] == "v7.3"


def test_a_shipped_train_test_split_is_the_test_split(tmp_path: Path) -> None:
    views, y = _views(2, n=80)
    tr, te = np.arange(60), np.arange(60, 80)
    variables = {f"x{v + 1}_{p}": (views[v][idx] if v != 1 else views[v][idx].T) for v in range(3)
                 for p, idx in (("train", tr), ("test", te))}
    variables.update(gt_train=y[tr, None].astype(float), gt_test=y[te, None].astype(float))
    path = _save(tmp_path / "shipped.mat", variables)
    dss = _all(path, standardize=False)
    rows, got, targets = collect(dss["test"])
    np.testing.assert_array_equal(rows, te)
    np.testing.assert_array_equal(got["view1"], views[1][te].astype(np.float32))
    np.testing.assert_array_equal(targets, y[te] - 1)
    r_tr, r_va = collect(dss["train"])[0], collect(dss["val"])[0]
    assert np.array_equal(np.sort(np.concatenate([r_tr, r_va])), tr)
    assert abs(r_tr.size - 45) <= 1  # 0.6 : 0.2 of the 60 train rows
    info = dss["test"].split_info()
    assert info["shipped_split"] == {"train": 60, "test": 20, "used": True}
    np.testing.assert_array_equal(dss["val"].shipped_test_indices, te)
    # shipped_split=False: one stratified split of all 80 samples, recorded
    pooled = _all(path, standardize=False, shipped_split=False)
    assert len(pooled["test"]) == 16 and pooled["test"].split_info()["shipped_split"]["used"] is False
    # explicit keys name the same variables
    _same(dss, _all(path, standardize=False, x_key=["x1", "x2", "x3"], y_key="gt"))
    _same(dss, _all(path, standardize=False, x_key="x", y_key="gt"))  # the prefix of x1..x3


# ---------------------------------------------------------------------------------------------
# one error for an ambiguous or unknown layout, and the options that resolve it
# ---------------------------------------------------------------------------------------------
def _one_error(path: Path, *fragments: str, **opts) -> str:
    with pytest.raises(DatasetError) as e:
        datasets.build("multiview_mat", root=path, split="train", use_cache=False, **opts)
    text = str(e.value)
    assert str(path) in text and "\n" not in text.strip()
    for f in fragments:
        assert f in text, (f, text)
    return text


def test_ambiguous_and_unknown_layouts_name_the_variables_and_the_options(tmp_path: Path) -> None:
    views, y = _views(3)
    yc = y.astype(np.float64)[:, None]
    # views twice: a cell X and variables x1..x3
    both = _save(tmp_path / "both.mat", {"X": _cell(views, (1, 3)), "x1": views[0], "x2": views[1], "x3": views[2],
                                          "Y": yc})
    _one_error(both, "ambiguous views", "the cell X", "x1..x3", "X (1x3 cell)", "x1 (60x5 double)", "x_key", "y_key",
               "sample_axis")
    ref = _all(_save(tmp_path / "ref.mat", {"X": _cell(views, (1, 3)), "Y": yc}))
    _same(ref, _all(both, x_key="X"))
    _same(ref, _all(both, x_key=["x1", "x2", "x3"]))
    # labels twice
    two_y = _save(tmp_path / "two_y.mat", {"X": _cell(views, (1, 3)), "Y": yc, "gt": yc[::-1]})
    _one_error(two_y, "ambiguous labels", "'Y'", "'gt'", "y_key")
    _same(ref, _all(two_y, y_key="Y"))
    # nothing known
    odd = _save(tmp_path / "odd.mat", {"feats": _cell(views, (1, 3)), "cls": yc})
    _one_error(odd, "no variable(s) ['X']", "feats (1x3 cell)", "cls (60x1 double)", "x_key", "y_key")
    _same(ref, _all(odd, x_key="feats", y_key="cls"))
    no_y = _save(tmp_path / "no_y.mat", {"X": _cell(views, (1, 3)), "cls": yc})
    _one_error(no_y, "no variable(s) ['Y']", "cls (60x1 double)", "y_key")
    # a label cell whose copies disagree
    bad = y.copy()
    bad[:4] = bad[:4] % 3 + 1
    cells = _save(tmp_path / "cells.mat", {"x1": views[0], "x2": views[1], "truelabel": _cell([y[None], bad[None]], (1, 2))})
    _one_error(cells, "label cell truelabel", "not identical", "4 of 60 labels differ", "y_key")
    # views in _train / _test parts, labels in one variable
    split_x = _save(tmp_path / "split_x.mat", {"x1_train": views[0][:40], "x1_test": views[0][40:],
                                              "x2_train": views[1][:40], "x2_test": views[1][40:], "y": yc})
    _one_error(split_x, "_train / _test", "x_key", "y_key")
    # numbered views with a gap
    gap = _save(tmp_path / "gap.mat", {"x1": views[0], "x3": views[2], "y": yc})
    _one_error(gap, "not numbered", "x_key")


def test_the_cli_says_one_line_without_a_traceback(tmp_path: Path) -> None:
    views, y = _views(4)
    path = _save(tmp_path / "both.mat", {"X": _cell(views, (1, 3)), "x1": views[0], "x2": views[1], "Y": y[:, None] * 1.0})
    proc = subprocess.run([sys.executable, "-m", "fusebench", "run", "multiview", "--data-root", str(path),
                           "--objective", "none", "--seeds", "0", "--out", str(tmp_path / "runs")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "ambiguous views" in proc.stderr and "x_key" in proc.stderr
    assert not (tmp_path / "runs" / "multiview").exists() or not any((tmp_path / "runs" / "multiview").rglob("run.json"))


# ---------------------------------------------------------------------------------------------
# data identity: the file read, not its folder
# ---------------------------------------------------------------------------------------------
def _file_fp(path: Path, name: str) -> str:
    data = path.read_bytes()
    return hashlib.sha256(f"{name}\t{len(data)}\t{hashlib.sha256(data).hexdigest()}\n".encode()).hexdigest()


def test_the_fingerprint_covers_only_the_file_read(fixtures_dir: Path, tmp_path: Path) -> None:
    from fusebench.cells.execute import sweep_context

    folder = tmp_path / "multiview"
    folder.mkdir()
    for f in ("NGs.mat", "HW2sources.mat"):
        shutil.copyfile(fixtures_dir / "multiview" / f, folder / f)
    ngs = folder / "NGs.mat"
    spec = benchmarks.load("mv-ngs")
    fp = sweep_context(spec, False, str(folder))["fingerprint"]
    assert fp["files"] == [["NGs.mat", ngs.stat().st_size]] and fp["num_files"] == 1
    assert fp["sha256"] == _file_fp(ngs, "NGs.mat")
    (folder / "unrelated.mat").write_bytes(b"another dataset")  # a new file beside it changes nothing
    (folder / "notes.txt").write_text("x")
    assert sweep_context(spec, False, str(folder))["fingerprint"] == fp
    assert sweep_context(spec, False, str(ngs))["fingerprint"] == fp  # the file itself as the root: the same identity
    # the generic benchmark on a folder holding one .mat file and a README: the .mat alone
    solo = tmp_path / "solo"
    solo.mkdir()
    shutil.copyfile(ngs, solo / "NGs.mat")
    (solo / "README").write_text("about the data")
    assert sweep_context(benchmarks.load("multiview"), False, str(solo))["fingerprint"] == fp
    # a changed file is other data
    changed = folder / "NGs.mat"
    changed.write_bytes(changed.read_bytes()[:-1] + b"\x00")
    assert sweep_context(spec, False, str(folder))["fingerprint"]["sha256"] != fp["sha256"]


def _migration():
    spec = importlib.util.spec_from_file_location("migrate_data_fingerprint", ROOT / "scripts" / "migrate_data_fingerprint.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_migration_gives_committed_records_the_fingerprint_of_their_file(fixtures_dir: Path, tmp_path: Path) -> None:
    from fusebench.datasets.fingerprint import fingerprint
    from fusebench.records import comparability_key

    src = sorted((ROOT / "leaderboards" / "runs" / "mv-ngs").glob("*/seed*/run.json"))
    if not src:
        pytest.skip("no committed mv-ngs records")
    old = json.loads(src[0].read_text())
    # the committed records are migrated already: put back the form they had before, the fingerprint of every
    # file of the folder (the committed value of that era, from git history at 563f51f)
    old["dataset"]["fingerprint"] = {
        "content_hashed": True, "num_files": 4, "total_bytes": 5327780,
        "files": [["100Leaves.mat", 1048797], ["HW2sources.mat", 690419], ["NGs.mat", 104598],
                  ["handwritten.mat", 3483966]],
        "sha256": "132eadadc298682f71a912b062d3c1a1d4c338420b12a8559b9ef4b78e17467e"}
    old["comparability_key"] = comparability_key(old)
    runs = tmp_path / "runs" / "mv-ngs" / "x" / "seed0"
    runs.mkdir(parents=True)
    (runs / "run.json").write_text(json.dumps(old))
    quickstart = tmp_path / "runs" / "quickstart" / "none" / "seed0"  # synthetic: left alone
    quickstart.mkdir(parents=True)
    qs = sorted((ROOT / "leaderboards" / "runs" / "quickstart").glob("*/seed*/run.json"))[0]
    shutil.copyfile(qs, quickstart / "run.json")
    mig = _migration()
    assert mig.main([str(tmp_path / "runs")]) == 0
    new = json.loads((runs / "run.json").read_text())
    want = fingerprint(fixtures_dir / "multiview" / "NGs.mat")  # the real file, hashed now
    assert new["dataset"]["fingerprint"] == want
    assert new["comparability_key"] == comparability_key(new) != old["comparability_key"]
    new_rest, old_rest = dict(new), dict(old)
    for r in (new_rest, old_rest):
        r.pop("comparability_key")
        r["dataset"] = {k: v for k, v in r["dataset"].items() if k != "fingerprint"}
    assert new_rest == old_rest  # nothing else changed
    assert (quickstart / "run.json").read_bytes() == qs.read_bytes()
    before = (runs / "run.json").read_bytes()
    assert mig.main([str(tmp_path / "runs")]) == 0 and (runs / "run.json").read_bytes() == before  # idempotent
    # a record whose fingerprint does not list the file it read: refused, nothing written
    bad = json.loads(json.dumps(old))
    bad["dataset"]["fingerprint"]["files"] = [["other.mat", 1]]
    (runs / "run.json").write_text(json.dumps(bad))
    assert mig.main([str(tmp_path / "runs")]) == 1
    assert json.loads((runs / "run.json").read_text()) == bad


# ---------------------------------------------------------------------------------------------
# the benchmarks: one tiny cell per layout on the real file (about 20 s in all on one thread)
# ---------------------------------------------------------------------------------------------
TINY = {"pretrain.epochs": 1, "pretrain.grid": {}, "pretrain.selection_seeds": [],
        "options.embedding_eval": {"l2_grid": [1.0], "cluster_on": "all", "n_init": 1, "fewshot_shots": [1],
                                   "fewshot_draws": 1, "knn_grid": [1]},
        "metrics": ["fs1_best_acc", "fs1_acc", "knn_acc", "acc", "mf1", "cluster_acc", "nmi", "ari"]}


#: one file per layout trap of PROVENANCE.md (no cell and a shipped split; x1..xV features x samples with a label
#: cell; d x N views; square N x N views; k = 12): the other six are the common ``X`` cell + ``y`` layout these
#: share code with, read by name above (test_real_file_by_id_matches_an_independent_read) and run on their
#: synthetic twins (tests/test_benchmarks_synthetic.py)
TINY_CELLS = ["mv_bbc", "mv_cora", "mv_cub", "mv_proteinfold", "mv_scene15"]


@pytest.mark.slow
@pytest.mark.parametrize("did", TINY_CELLS)
def test_one_tiny_cell_per_layout_runs_on_the_real_file(mv2: Path, did: str, tmp_path: Path) -> None:
    file, n, dims, classes, family = EXPECTED[did]
    bench = did.replace("_", "-")
    spec = benchmarks.load(bench)
    assert spec.dataset.id == did and spec_family(spec) == family
    rec = fusebench.run(bench, objective="infonce_pwe", seeds=[0], data_root=str(mv2), out=tmp_path, overrides=TINY,
                        progress=False)[0]
    assert rec["dataset"]["fingerprint"]["files"] == [[file, (mv2 / file).stat().st_size]]
    assert rec["config"]["dataset"]["modalities"] == [m.name for m in datasets.get(did).MODALITIES]
    assert rec["dataset"]["splits"]["num_classes"] == classes and rec["dataset"]["splits"]["view_dims"] == dims
    assert all(0.0 <= v <= 1.0 for v in values_of(rec["metrics"]).values())


def test_an_outer_test_seed_beside_a_shipped_split_is_refused_not_ignored(mv2: Path) -> None:
    """CUB.mat ships its train / test split, which is the test split: an outer_test_seed would be recorded (and
    hashed) but draw nothing. Refused, naming both ways out; with shipped_split=false the seed draws the split."""
    with pytest.raises(DatasetError, match=r"CUB\.mat: outer_test_seed=3 draws a test split, but the file ships its "
                                           r"own \(120 \*_test samples\).*shipped_split=false"):
        datasets.build("mv_cub", root=mv2, split="test", outer_test_seed=3, use_cache=False)
    drawn = datasets.build("mv_cub", root=mv2, split="test", outer_test_seed=3, shipped_split=False, use_cache=False)
    assert drawn.split_info()["shipped_split"]["used"] is False and len(drawn) == 120  # 20% of 600, stratified


@pytest.mark.parametrize("bench", [b for b in benchmarks.builtin() if b.startswith("mv-")])
def test_every_registered_multiview_spec_fits_its_view_count(bench: str) -> None:
    """The missing-view rates of a spec are checked against k only once the data is read (the views of a .mat
    file come from the file); for a registered file k is known, so a rate it cannot take fails here, not after
    the sweep has started (mv-cub and mv-wikipedia listed r = 0.7 with k = 2: at most (k - 1) / k = 0.5)."""
    from fusebench.components.protocols import missing_view_problems

    spec = benchmarks.load(bench)
    k = len(datasets.get(spec.dataset.id).MODALITIES)
    assert missing_view_problems(spec, k) == []
    assert missing_view_problems(benchmarks.load(bench, synthetic=True), k) == []


def test_a_sample_count_mismatch_names_the_variable_at_fault(mv2: Path, tmp_path: Path) -> None:
    """Real files with one vector cut short: a label vector of the wrong length is named as such (every view has
    the file's N samples), not reported as view 0 failing to match "the labels of Y"; a view of the wrong length
    is named by its own variable (``X{2}``, ``x2_test``) and the labels by theirs (``y``, ``gt``, ``gt_test``)."""
    src = scipy.io.loadmat(str(mv2 / "3Sources.mat"))
    n = src["y"].size  # 169 (PROVENANCE.md)
    _save(tmp_path / "short_y.mat", {"X": src["X"], "y": src["y"][:-1]})
    with pytest.raises(DatasetError, match=rf"short_y\.mat: the label vector y has {n - 1} entries, but no view has "
                                           rf"{n - 1} samples along either axis \(X\{{1\}} {n}x3560, X\{{2\}} {n}x3631, "
                                           rf"X\{{3\}} {n}x3068\); every view has {n} along one axis, so y has the "
                                           "wrong length"):
        datasets.build("multiview_mat", root=tmp_path / "short_y.mat", split="train", use_cache=False)
    x = src["X"].copy()
    x[1, 0] = x[1, 0][:-1]
    _save(tmp_path / "short_x.mat", {"X": x, "y": src["y"]})
    with pytest.raises(DatasetError, match=rf"short_x\.mat: view 1 \(X\{{2\}}\) has shape \({n - 1}, 3631\); neither "
                                           rf"axis matches the {n} labels of y"):
        datasets.build("multiview_mat", root=tmp_path / "short_x.mat", split="train", use_cache=False)
    scene = scipy.io.loadmat(str(mv2 / "Scene15.mat"))  # views d x N, labels gt
    _save(tmp_path / "scene.mat", {"X": scene["X"], "gt": scene["gt"][:-3]})
    with pytest.raises(DatasetError, match=r"scene\.mat: the label vector gt has 4482 entries.*X\{1\} 20x4485, "
                                           r"X\{2\} 59x4485, X\{3\} 40x4485\); every view has 4485 along one axis"):
        datasets.build("multiview_mat", root=tmp_path / "scene.mat", split="train", use_cache=False)
    cub = {k: v for k, v in scipy.io.loadmat(str(mv2 / "CUB.mat")).items() if not k.startswith("__")}
    _save(tmp_path / "cub_y.mat", {**cub, "gt_test": cub["gt_test"][:-1]})
    with pytest.raises(DatasetError, match=r"cub_y\.mat: the label vector gt_test has 119 entries.*\(x1_test "
                                           r"120x1024, x2_test 120x300\)"):
        datasets.build("multiview_mat", root=tmp_path / "cub_y.mat", split="train", use_cache=False)
    _save(tmp_path / "cub_x.mat", {**cub, "x2_test": cub["x2_test"][:-1]})
    with pytest.raises(DatasetError, match=r"cub_x\.mat: view 1 \(x2_test\) has shape \(119, 300\); neither axis "
                                           r"matches the 120 labels of gt_test"):
        datasets.build("multiview_mat", root=tmp_path / "cub_x.mat", split="train", use_cache=False)


def test_a_square_block_of_a_shipped_split_follows_its_other_part(mv2: Path, tmp_path: Path, caplog) -> None:
    """CUB.mat written features x samples, with view 0 cut to 120 features: its test block x1_test is then 120 x
    120 (both axes match the 120 test labels) while x1_train (120 x 480) is unambiguously features x samples. The
    test block is read by columns, as the train block is: its samples are the real file's x1_test rows (taking
    its rows transposed the test split's view 0 without an error, the feature counts being equal)."""
    cub = {k: v for k, v in scipy.io.loadmat(str(mv2 / "CUB.mat")).items() if not k.startswith("__")}
    want = np.vstack([cub["x1_train"][:, :120], cub["x1_test"][:, :120]]).astype(np.float32)  # (600, 120), rows=samples
    _save(tmp_path / "cub_dxn.mat", {"x1_train": cub["x1_train"][:, :120].T, "x1_test": cub["x1_test"][:, :120].T,
                                     "x2_train": cub["x2_train"].T, "x2_test": cub["x2_test"].T,
                                     "gt_train": cub["gt_train"], "gt_test": cub["gt_test"]})
    caplog.clear()
    for s in SPLITS:
        ds = datasets.build("multiview_mat", root=tmp_path / "cub_dxn.mat", split=s, standardize=False, use_cache=False)
        rows, got, _ = collect(ds)
        np.testing.assert_array_equal(got["view0"], want[rows])
    assert "both axes match" not in caplog.text
    assert ds.split_info()["view_layouts"] == ["d x N", "d x N"]


def test_a_square_view_follows_the_way_the_files_other_views_are_stored(mv2: Path, tmp_path: Path, caplog) -> None:
    """Scene15.mat stores its views features x samples (20, 59 and 40 x 4485). 59 of its samples (three classes)
    make view 1 a 59 x 59 square: it is read by columns, as the file's other views are (rows would transpose it);
    Cora.mat's square citation matrix beside samples x features views stays read by rows."""
    m = scipy.io.loadmat(str(mv2 / "Scene15.mat"))
    gt = m["gt"].ravel()
    pick = np.concatenate([np.flatnonzero(gt == c)[:k] for c, k in ((1, 20), (2, 20), (3, 19))])  # 59 samples
    x = _cell([m["X"][0, v][:, pick] for v in range(3)], (1, 3))
    _save(tmp_path / "scene59.mat", {"X": x, "gt": gt[pick][:, None]})
    caplog.clear()
    ds = datasets.build("multiview_mat", root=tmp_path / "scene59.mat", split="train", standardize=False,
                        use_cache=False)
    rows, got, targets = collect(ds)
    for v in range(3):  # the real file's columns of the picked samples
        np.testing.assert_array_equal(got[f"view{v}"], m["X"][0, v][:, pick].T[rows].astype(np.float32))
    np.testing.assert_array_equal(targets, gt[pick][rows] - 1)
    assert ds.split_info()["view_layouts"] == ["d x N"] * 3
    assert "view 1 (X{2}) is square" in caplog.text and "taking columns as samples" in caplog.text
    caplog.clear()
    cora = datasets.build("mv_cora", root=mv2, split="val", standardize=False, use_cache=False)
    rows, got, _ = collect(cora)
    np.testing.assert_array_equal(got["cites"], scipy.io.loadmat(str(mv2 / "Cora.mat"))["X"][0, 0][rows])
    assert "taking rows as samples" in caplog.text
