"""``multiview_mat``: any ``.mat`` file of the multi-view learning convention, plus the registered
classic multi-view datasets ``mv_handwritten``, ``mv_leaves100``, ``mv_ngs`` and ``mv_hw2sources``.

The convention (zhou572/Multi-view-Datasets and most multi-view clustering code): a MATLAB file with

* ``X``: a 1-by-V or V-by-1 cell array; cell v is the view matrix, (N, d_v) (one row per sample) or
  (d_v, N) in some releases, dense or sparse, any numeric class;
* ``Y``: the N class labels (N-by-1 or 1-by-N), usually 1..C.

Both MATLAB v5/v7 (read with ``scipy.io.loadmat``) and v7.3 (HDF5, read with h5py: cells are object
references into ``#refs#`` and every matrix is stored transposed; sparse matrices are groups holding
``data``/``ir``/``jc``) are accepted. Orientation: a view's sample axis is the one whose length equals
len(Y); when both axes do (square view) rows are taken as samples with a warning (option
``sample_axis`` decides explicitly). Labels: the sorted unique values map to 0..C-1 (so 0- and 1-based
files give the same classes). Sparse views are densified (standardisation makes them dense anyway).

Every view is a modality of kind ``vector`` named ``view{v}`` (v = its index in the file) unless
``view_names`` names them. There is no official split: seeded stratified train/val/test splits are
drawn (``split_fractions`` default 0.6/0.2/0.2, ``split_seed`` default 0, independent of the run seed
unless ``split_seed="run"``); per class the counts are the floor or ceiling of fraction x class size,
the ceilings going to the splits furthest below their global target, so the totals also match the
fractions within one sample. Each view is z-scored with the mean and (population) standard deviation
of the **train** split (features constant on train become 0); the three split instances compute the
same statistics because the split assignment is recomputed from the same seed in each.

Root: the ``.mat`` file itself (``--data-root path/to/data.mat``) or a folder plus ``file=NAME.mat``
(a folder holding exactly one ``.mat`` file needs no ``file``). The registered datasets also accept
the folder containing their file and check its sha256 (``verify_sha256=False`` skips the check).
A file is read once per process (LRU keyed by path, mtime and size), not once per split.

Options: ``file``, ``x_key`` ("X"), ``y_key`` ("Y"), ``views`` (list of view indices, in the order
wanted), ``view_names``, ``sample_axis`` ("auto", 0 = rows are samples, 1 = columns are samples; one
value for every view or a list with one per view of the file),
``split_fractions`` ([train, val, test] or a dict), ``split_seed`` (int or "run"), ``standardize``
(True), ``verify_sha256`` (True), ``sha256`` (expected digest for any file).

Shape (one sample):
    modalities[view name]  [d_v] float32 (z-scored with train statistics unless standardize=False)
    target                 [] int64 class id in 0..C-1
    meta                   {"id": "<file stem>-<row>", "index": row in the file}
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections import OrderedDict
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import scipy.sparse as sp
import torch

from . import DATASETS
from .base import BASE_OPTIONS, DataFile, DatasetError, DatasetNotFoundError, Modality, MultimodalDataset, SyntheticSpec

log = logging.getLogger(__name__)

SPLIT_NAMES = ("train", "val", "test")
DEFAULT_FRACTIONS = (0.6, 0.2, 0.2)
OPTIONS = frozenset({"file", "x_key", "y_key", "views", "view_names", "sample_axis", "split_fractions",
                     "split_seed", "standardize", "verify_sha256", "sha256"})
_LRU_SIZE = 4
_LRU: OrderedDict[tuple, dict[str, Any]] = OrderedDict()


# ---------------------------------------------------------------------------------------------
# reading (v5 via scipy.io, v7.3 via h5py), cached
# ---------------------------------------------------------------------------------------------
def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _h5_matrix(f: Any, obj: Any, where: str) -> Any:
    """One MATLAB v7.3 matrix in MATLAB's orientation (h5py stores the transpose)."""
    import h5py

    if isinstance(obj, h5py.Group):
        if "MATLAB_sparse" not in obj.attrs or "jc" not in obj or "ir" not in obj:
            raise DatasetError(f"{where} is a MATLAB {obj.attrs.get('MATLAB_class', b'?')!r} group, not a numeric "
                               "(dense or sparse) matrix")
        n_rows = int(obj.attrs["MATLAB_sparse"])
        jc = np.asarray(obj["jc"][()]).astype(np.int64).ravel()
        ir = np.asarray(obj["ir"][()]).astype(np.int64).ravel()
        data = np.asarray(obj["data"][()]).ravel() if "data" in obj else np.ones(ir.size)
        return sp.csc_matrix((data.astype(np.float64), ir, jc), shape=(n_rows, jc.size - 1))
    if obj.dtype == h5py.ref_dtype:
        return np.asarray(obj[()], dtype=object)  # a cell: caller resolves the references
    if "MATLAB_empty" in obj.attrs and int(np.asarray(obj.attrs["MATLAB_empty"]).ravel()[0]):
        return np.zeros((0, 0))
    arr = np.asarray(obj[()])
    if arr.dtype.names:  # MATLAB complex: compound (real, imag)
        raise DatasetError(f"{where} is complex; only real views are supported")
    return arr.T


def _read_v73(path: Path, x_key: str, y_key: str) -> tuple[list[Any], Any, tuple[int, ...]]:
    import h5py

    try:
        f = h5py.File(path, "r")
    except OSError as e:
        raise DatasetError(f"{path}: not a readable MATLAB v7.3 (HDF5) .mat file ({e})") from None
    with f:
        names = sorted(k for k in f.keys() if not k.startswith("#"))
        _require_keys(path, names, x_key, y_key)
        xobj = f[x_key]
        if not isinstance(xobj, h5py.Dataset) or xobj.dtype != h5py.ref_dtype:
            got = ("a struct/group" if not isinstance(xobj, h5py.Dataset)
                   else f"a numeric array of MATLAB shape {xobj.shape[::-1]}")
            raise DatasetError(f"{path}: {x_key} must be a cell array of view matrices, got {got}")
        refs = np.asarray(xobj[()], dtype=object)
        cell_shape = tuple(refs.shape[::-1])  # MATLAB shape
        views = [_h5_matrix(f, f[r], f"{path}: {x_key}{{{i + 1}}}") for i, r in enumerate(refs.ravel())]
        for i, v in enumerate(views):
            if isinstance(v, np.ndarray) and v.dtype == object:
                raise DatasetError(f"{path}: {x_key}{{{i + 1}}} is itself a cell array, expected a numeric matrix")
        yobj = f[y_key]
        if not isinstance(yobj, h5py.Dataset) or yobj.dtype == h5py.ref_dtype:
            raise DatasetError(f"{path}: {y_key} must be a numeric label vector (got a cell array or struct)")
        y = _h5_matrix(f, yobj, f"{path}: {y_key}")
    return views, y, cell_shape


def _require_keys(path: Path, names: list[str], x_key: str, y_key: str) -> None:
    missing = [k for k in (x_key, y_key) if k not in names]
    if missing:
        raise DatasetError(f"{path}: no variable(s) {missing} in the file (it holds {names}); the multi-view "
                           f"convention is X = cell array of views, Y = labels (options x_key / y_key rename them)")


def _read_v5(path: Path, x_key: str, y_key: str) -> tuple[list[Any], Any, tuple[int, ...]]:
    import scipy.io

    try:
        names = sorted(name for name, _, _ in scipy.io.whosmat(str(path)))
        _require_keys(path, names, x_key, y_key)
        m = scipy.io.loadmat(str(path), variable_names=[x_key, y_key])
    except DatasetError:
        raise
    except Exception as e:  # scipy raises ValueError / TypeError / struct errors on non-.mat bytes
        raise DatasetError(f"{path}: not a readable MATLAB .mat file (v4/v5/v7 or v7.3): "
                           f"{type(e).__name__}: {e}") from None
    x, y = m[x_key], m[y_key]
    if not (isinstance(x, np.ndarray) and x.dtype == object):
        what = f"a {type(x).__name__}" if not isinstance(x, np.ndarray) else f"a {x.dtype} array of shape {x.shape}"
        raise DatasetError(f"{path}: {x_key} must be a cell array of view matrices, got {what}")
    views = list(x.ravel(order="F"))  # MATLAB's (column-major) cell order
    return views, y, tuple(x.shape)


def read_mat(path: Path, x_key: str = "X", y_key: str = "Y") -> dict[str, Any]:
    """The raw views (MATLAB orientation, as stored) and labels of a multi-view .mat file, cached.

    Returns ``{"views": [array or sparse], "y": array, "cell_shape": tuple, "format": "v5" | "v7.3"}``.
    """
    try:
        st = path.stat()
    except OSError as e:
        raise DatasetNotFoundError(f"{path}: cannot read ({e})") from None
    key = (str(path.resolve()), st.st_mtime_ns, st.st_size, x_key, y_key)
    hit = _LRU.get(key)
    if hit is not None:
        _LRU.move_to_end(key)
        return hit
    import h5py

    with open(path, "rb") as fh:
        head = fh.read(128)
    if len(head) == 0:
        raise DatasetError(f"{path}: empty file, not a MATLAB .mat file")
    is_h5 = h5py.is_hdf5(str(path))
    views, y, cell_shape = (_read_v73 if is_h5 else _read_v5)(path, x_key, y_key)
    entry = {"views": views, "y": y, "cell_shape": cell_shape, "format": "v7.3" if is_h5 else "v5"}
    _LRU[key] = entry
    while len(_LRU) > _LRU_SIZE:
        _LRU.popitem(last=False)
    return entry


_SHA: dict[tuple, str] = {}


def _file_sha256(path: Path) -> str:
    """sha256 of ``path``, memoised by (path, mtime, size)."""
    st = path.stat()
    key = (str(path.resolve()), st.st_mtime_ns, st.st_size)
    if key not in _SHA:
        _SHA[key] = sha256_of(path)
    return _SHA[key]


# ---------------------------------------------------------------------------------------------
# labels, orientation, splits, standardisation (pure functions, tested on their own)
# ---------------------------------------------------------------------------------------------
def labels_to_ids(y: Any, path: Path, y_key: str = "Y") -> tuple[np.ndarray, np.ndarray]:
    """(class ids 0..C-1 [N] int64, the original label values [C]) from a MATLAB label array."""
    if sp.issparse(y):
        y = y.toarray()
    y = np.asarray(y)
    if y.dtype == object or not (np.issubdtype(y.dtype, np.number) or y.dtype == bool):
        raise DatasetError(f"{path}: {y_key} must be a numeric label vector, got dtype {y.dtype}")
    if y.ndim > 2 or (y.ndim == 2 and min(y.shape) > 1):
        raise DatasetError(f"{path}: {y_key} must be an N-by-1 or 1-by-N label vector, got shape {y.shape}")
    y = y.ravel()
    if y.size == 0:
        raise DatasetError(f"{path}: {y_key} is empty")
    if np.issubdtype(y.dtype, np.floating) and not np.isfinite(y).all():
        raise DatasetError(f"{path}: {y_key} has {int((~np.isfinite(y)).sum())} NaN/Inf labels")
    values, ids = np.unique(y, return_inverse=True)
    if values.size < 2:
        raise DatasetError(f"{path}: {y_key} holds a single class ({values[0]!r}) for all {y.size} samples; "
                           "a classification dataset needs at least 2")
    return ids.astype(np.int64).ravel(), values


def orient(x: Any, n: int, view: int, path: Path, sample_axis: Any = "auto") -> tuple[Any, str]:
    """The view as (N, d) and how it was stored ("N x d" or "d x N")."""
    if not (sp.issparse(x) or isinstance(x, np.ndarray)):
        raise DatasetError(f"{path}: view {view} is a {type(x).__name__}, not a numeric matrix")
    if isinstance(x, np.ndarray) and (x.dtype == object or not (np.issubdtype(x.dtype, np.number) or x.dtype == bool)):
        raise DatasetError(f"{path}: view {view} has dtype {x.dtype}, not a numeric matrix")
    if isinstance(x, np.ndarray) and np.iscomplexobj(x):
        raise DatasetError(f"{path}: view {view} is complex; only real views are supported")
    if x.ndim != 2:
        raise DatasetError(f"{path}: view {view} has shape {x.shape}, expected a 2-D matrix")
    rows, cols = x.shape
    if sample_axis in (0, 1):
        if x.shape[sample_axis] != n:
            raise DatasetError(f"{path}: view {view} has shape {x.shape}; sample_axis={sample_axis} needs {n} "
                               f"(the number of labels) along that axis")
        axis = sample_axis
    elif sample_axis == "auto":
        if rows == n and cols == n:
            log.warning("%s: view %d is %d x %d, both axes match the %d labels; taking rows as samples "
                        "(pass sample_axis=1 if columns are)", path, view, rows, cols, n)
            axis = 0
        elif rows == n:
            axis = 0
        elif cols == n:
            axis = 1
        else:
            raise DatasetError(f"{path}: view {view} has shape {x.shape}; neither axis matches the {n} labels of Y")
    else:
        raise DatasetError(f"multiview_mat: sample_axis={sample_axis!r} must be 'auto', 0 or 1")
    return (x if axis == 0 else x.T), ("N x d" if axis == 0 else "d x N")


def parse_fractions(value: Any) -> tuple[float, float, float]:
    if value is None:
        return DEFAULT_FRACTIONS
    if isinstance(value, dict):
        extra = set(value) - set(SPLIT_NAMES)
        if extra or len(value) != 3:
            raise DatasetError(f"multiview_mat: split_fractions {value!r} must have exactly the keys {list(SPLIT_NAMES)}")
        value = [value[s] for s in SPLIT_NAMES]
    try:
        fr = tuple(float(v) for v in value)
    except (TypeError, ValueError):
        raise DatasetError(f"multiview_mat: split_fractions {value!r} must be three numbers (train, val, test)") from None
    if len(fr) != 3 or any(not np.isfinite(v) or v <= 0 for v in fr) or abs(sum(fr) - 1.0) > 1e-6:
        raise DatasetError(f"multiview_mat: split_fractions {value!r} must be three positive numbers "
                           "(train, val, test) summing to 1")
    return fr  # type: ignore[return-value]


def stratified_split(y: np.ndarray, fractions: tuple[float, float, float], seed: int) -> dict[str, np.ndarray]:
    """Seeded stratified split of the sample indices: ``{"train": idx, "val": idx, "test": idx}``.

    Per class (classes in ascending order) the members are shuffled with one generator seeded by
    ``seed``; split s receives floor(f_s n_c) or that + 1 of them: the n_c - sum floor(...) leftover
    samples go to the splits with the largest deficit f_s * (samples seen so far) - (given so far),
    ties to the earlier split. Each split's indices are returned in ascending order.
    """
    rng = np.random.default_rng(seed)
    f = np.asarray(fractions, dtype=np.float64)
    given = np.zeros(3, dtype=np.int64)
    seen = 0
    parts: list[list[np.ndarray]] = [[], [], []]
    for c in np.unique(y):
        members = np.flatnonzero(y == c)
        members = members[rng.permutation(members.size)]
        n_c = members.size
        base = np.floor(f * n_c + 1e-9).astype(np.int64)
        seen += n_c
        deficit = f * seen - (given + base)
        extra = n_c - int(base.sum())
        order = sorted(range(3), key=lambda s: (-deficit[s], s))
        counts = base.copy()
        for s in order[:extra]:
            counts[s] += 1
        given += counts
        start = 0
        for s in range(3):
            parts[s].append(members[start : start + counts[s]])
            start += counts[s]
    return {name: np.sort(np.concatenate(parts[s])) for s, name in enumerate(SPLIT_NAMES)}


def zscore_stats(x_train: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-feature mean and scale from the train rows; scale is inf for features constant on train
    (so they standardise to exactly 0)."""
    mean = x_train.mean(axis=0)
    std = x_train.std(axis=0)
    constant = (x_train.max(axis=0) == x_train.min(axis=0)) if x_train.shape[0] else np.ones(x_train.shape[1], bool)
    scale = np.where(constant | (std == 0), np.inf, std)
    mean = np.where(constant, 0.0, mean)
    return mean, scale


# ---------------------------------------------------------------------------------------------
# the adapter
# ---------------------------------------------------------------------------------------------
_SYN_DIMS = (8, 12, 16)


@DATASETS.register("multiview_mat")
class MultiviewMat(MultimodalDataset):
    """Any multi-view learning .mat file (X = cell of views, Y = labels): views are vector modalities."""

    id = "multiview_mat"
    task = "classification"
    #: class-level declaration = the default synthetic twin; an instance follows its file
    num_classes = 4
    MODALITIES: ClassVar[tuple[Modality, ...]] = tuple(
        Modality(f"view{i}", "vector", d, description=f"view {i} ({d}-d)") for i, d in enumerate(_SYN_DIMS))
    FILES = (DataFile("*.mat", "X: 1-by-V cell of (N, d_v) or (d_v, N) view matrices (dense or sparse); "
                               "Y: N labels (any numeric values)"),)
    INFO = ("Any .mat file of the multi-view learning convention (X = cell array of views, Y = labels), MATLAB "
            "v5/v7 or v7.3. Pass the file itself as the data root (--data-root path/to/data.mat) or its folder "
            "with the option file=NAME.mat. Splits are seeded and stratified (split_fractions, split_seed); "
            "views are z-scored with train statistics. See docs/datasets/multiview.md.")
    #: file name inside a folder root (registered datasets) and its expected sha256
    FILE: ClassVar[str | None] = None
    SHA256: ClassVar[str | None] = None
    SYNTHETIC_VERSION = 1
    #: the views (count, names, widths) come from the file: the runner opens it to resolve dataset.modalities
    VIEWS_FROM_DATA: ClassVar[bool] = True
    OPTIONS: ClassVar[frozenset[str]] = OPTIONS
    OPTION_TYPES: ClassVar[dict[str, Any]] = {"file": str, "x_key": str, "y_key": str, "views": list,
                                              "view_names": list, "split_seed": int, "standardize": bool,
                                              "verify_sha256": bool, "sha256": str}

    def __init__(self, root: str | os.PathLike | None = None, split: str = "train",
                 modalities: list[str] | tuple[str, ...] | None = None, synthetic: bool = False, **opts: Any) -> None:
        unknown = set(opts) - OPTIONS - BASE_OPTIONS  # checked before the file is opened
        if unknown:
            raise DatasetError(f"{self.id}: unknown option(s) {sorted(unknown)}; valid: {sorted(OPTIONS)}")
        self.options = {k: opts[k] for k in OPTIONS if k in opts}
        if synthetic:
            spec = SyntheticSpec(**opts.get("synthetic_spec", {}))
            folder = type(self).synthetic_root(spec, root)
            self.mat_path = folder / self._synthetic_name()
        else:
            self.mat_path = self._resolve_path(root)
        self._prepare(bool(synthetic), int(opts.get("seed", 0)))
        super().__init__(root=root, split=split, modalities=modalities, synthetic=synthetic, **opts)

    # -- locating the file -----------------------------------------------------------------------
    @classmethod
    def _synthetic_name(cls) -> str:
        return cls.FILE or "multiview.mat"

    def _resolve_path(self, root: Any) -> Path:
        if root is None:
            raise DatasetNotFoundError(f"{self.id}: no data root given (pass root=... or --data-root PATH to the "
                                       f".mat file or its folder).\n{self.info()}")
        root = Path(root)
        if not root.exists():
            raise DatasetNotFoundError(f"{self.id}: data root {root} does not exist.\n{self.info()}")
        if root.is_file():
            return root
        name = self.options.get("file") or self.FILE
        if name:
            p = root / name
            if not p.is_file():
                raise DatasetNotFoundError(f"{self.id}: {p} does not exist (data root {root}, file {name!r}).\n{self.info()}")
            return p
        mats = sorted(root.glob("*.mat"))
        if len(mats) != 1:
            raise DatasetError(f"{self.id}: data root {root} is a folder with {len(mats)} .mat files "
                               f"({[m.name for m in mats][:10]}); pass the file as the root or name it with file=NAME.mat")
        return mats[0]

    def _is_twin(self, path: Path) -> bool:
        """True for a file inside this adapter's synthetic-twin folder (marked by ``synthetic_root``)."""
        import json

        marker = path.parent / ".complete"
        try:
            return marker.is_file() and json.loads(marker.read_text()).get("id") == self.id
        except (OSError, ValueError, AttributeError):
            return False

    # -- reading, validating, splitting, standardising -----------------------------------------
    def _prepare(self, synthetic: bool, run_seed: int) -> None:
        o = self.options
        path = self.mat_path
        x_key, y_key = str(o.get("x_key", "X")), str(o.get("y_key", "Y"))
        expected = o.get("sha256", self.SHA256)
        self.sha256 = _file_sha256(path)
        synthetic = synthetic or self._is_twin(path)
        if expected and not synthetic and o.get("verify_sha256", True) and self.sha256 != str(expected).lower():
            raise DatasetError(f"{self.id}: {path} has sha256 {self.sha256}, expected {expected} (a different "
                               "release or a corrupt copy); pass verify_sha256=False to use it anyway")
        raw = read_mat(path, x_key, y_key)
        self.file_format = raw["format"]
        cell = raw["cell_shape"]
        if len(cell) > 2 or (len(cell) == 2 and min(cell) > 1):
            raise DatasetError(f"{path}: {x_key} is a {'x'.join(map(str, cell))} cell array; expected 1-by-V or V-by-1")
        n_views = len(raw["views"])
        if n_views < 2:
            raise DatasetError(f"{path}: {x_key} holds {n_views} view(s); a multi-view dataset needs at least 2")
        y, self.label_values = labels_to_ids(raw["y"], path, y_key)
        n = y.size
        sel = o.get("views")
        if sel is None:
            sel = list(range(n_views))
        else:
            try:
                sel = [int(v) for v in sel]
            except (TypeError, ValueError):
                raise DatasetError(f"{self.id}: views={o['views']!r} must be a list of view indices") from None
            bad = [v for v in sel if not 0 <= v < n_views]
            if not sel or bad or len(set(sel)) != len(sel):
                raise DatasetError(f"{self.id}: views={o['views']!r} must be distinct indices in 0..{n_views - 1} "
                                   f"({path} has {n_views} views)")
        names = o.get("view_names")
        if names is None:
            names = [f"view{v}" for v in sel]
        else:
            names = [str(s) for s in names]
            if len(names) != len(sel) or len(set(names)) != len(names) or not all(names):
                raise DatasetError(f"{self.id}: view_names={o['view_names']!r} must be {len(sel)} distinct non-empty "
                                   "names, one per selected view")
        sample_axis = o.get("sample_axis", "auto")
        if isinstance(sample_axis, (list, tuple)):
            if len(sample_axis) != n_views:
                raise DatasetError(f"{self.id}: sample_axis={sample_axis!r} must be one value or a list of {n_views} "
                                   f"(one per view of {path.name})")
            axes = list(sample_axis)
        else:
            axes = [sample_axis] * n_views
        views, layouts = [], []
        for v in sel:
            x, layout = orient(raw["views"][v], n, v, path, axes[v])
            vals = x.data if sp.issparse(x) else x
            if np.issubdtype(np.asarray(vals).dtype, np.floating):
                bad_count = int((~np.isfinite(vals)).sum())
                if bad_count:
                    raise DatasetError(f"{path}: view {v} ({names[len(views)]}) has {bad_count} NaN/Inf values")
            x = x.toarray() if sp.issparse(x) else x
            views.append(np.asarray(x, dtype=np.float64))
            layouts.append(layout)
        # splits
        fractions = parse_fractions(o.get("split_fractions"))
        split_seed = o.get("split_seed", 0)
        split_seed = run_seed if split_seed == "run" else split_seed
        try:
            split_seed = int(split_seed)
        except (TypeError, ValueError):
            raise DatasetError(f"{self.id}: split_seed={o['split_seed']!r} must be an integer or 'run'") from None
        parts = stratified_split(y, fractions, split_seed)
        empty = [s for s in SPLIT_NAMES if parts[s].size == 0]
        if empty:
            raise DatasetError(f"{path}: split_fractions {list(fractions)} leave split(s) {empty} empty with {n} samples")
        standardize = bool(o.get("standardize", True))
        self.stats = []
        for x in views:
            if standardize:
                self.stats.append(zscore_stats(x[parts["train"]]))
        num_classes = int(self.label_values.size)
        declared = {m.name: m.channels for m in type(self).MODALITIES}
        self.MODALITIES = tuple(
            Modality(name, "vector", int(x.shape[1]), description=f"view {v} of {path.name} ({x.shape[1]}-d, stored {lay})")
            for name, v, x, lay in zip(names, sel, views, layouts))
        if self.FILE and not synthetic and o.get("views") is None and o.get("view_names") is None:
            got = {m.name: m.channels for m in self.MODALITIES}
            if got != declared or num_classes != type(self).num_classes:
                log.warning("%s: %s has views %s and %d classes; the registered dataset declares %s and %d",
                            self.id, path, got, num_classes, declared, type(self).num_classes)
        self.num_classes = num_classes
        self._parts, self._y_all, self._views_all, self._sel = parts, y, views, sel
        self._layouts, self._fractions, self._split_seed, self._standardize = layouts, fractions, split_seed, standardize

    def _index(self) -> list[Any]:
        rows = self._parts[self.split]
        self._rows = rows
        self._x = {}
        for i, (m, x) in enumerate(zip(self.MODALITIES, self._views_all)):
            xs = x[rows]
            if self._standardize:
                mean, scale = self.stats[i]
                xs = (xs - mean) / scale
            self._x[m.name] = torch.from_numpy(np.ascontiguousarray(xs, dtype=np.float32))
        self._y = torch.from_numpy(self._y_all[rows])
        del self._views_all  # only this split's rows are kept
        return rows.tolist()

    def _load_raw(self, index: int) -> dict[str, Any]:
        row = int(self._rows[index])
        return {
            "modalities": {name: x[index].clone() for name, x in self._x.items()},
            "target": self._y[index].clone(),
            "meta": {"id": f"{self.mat_path.stem}-{row}", "index": row},
        }

    def source_files(self) -> list[Path]:
        return [self.mat_path.resolve()]

    def split_info(self) -> dict[str, Any]:
        """What a run should record: file, hash, fractions, seed, per-split and per-class counts."""
        y = self._y_all
        c = int(self.label_values.size)
        return {
            "file": str(self.mat_path), "sha256": self.sha256, "format": self.file_format,
            "num_samples": int(y.size), "num_classes": c,
            "label_values": [v.item() for v in self.label_values],
            "views": list(self._sel), "view_names": [m.name for m in self.MODALITIES],
            "view_dims": [m.channels for m in self.MODALITIES], "view_layouts": list(self._layouts),
            "fractions": dict(zip(SPLIT_NAMES, self._fractions)), "seed": self._split_seed,
            "stratified": True, "standardize": "zscore_train" if self._standardize else "none",
            "counts": {s: int(self._parts[s].size) for s in SPLIT_NAMES},
            "class_counts": {s: np.bincount(y[self._parts[s]], minlength=c).tolist() for s in SPLIT_NAMES},
        }

    # -- synthetic twin ---------------------------------------------------------------------------
    @classmethod
    def write_synthetic(cls, root: Path, spec: SyntheticSpec) -> None:
        """A small .mat in the convention: 1-by-V cell X of (N, d_v) views, N-by-1 labels 1..C.

        View v = class mean (informativeness x 2 x N(0, I) per class) + N(0, I) noise, then scaled by
        10^(v mod 3) and shifted by v (so standardisation matters). C = options["num_classes"], else
        min(declared classes, max(2, N // 8)).
        """
        import scipy.io

        rng = np.random.default_rng(spec.seed)
        n = int(spec.num_samples)
        c = int(spec.options.get("num_classes", min(int(cls.num_classes or 4), max(2, n // 8))))
        y = np.arange(n) % c
        y = y[rng.permutation(n)]
        cell = np.empty((1, len(cls.MODALITIES)), dtype=object)
        for v, m in enumerate(cls.MODALITIES):
            amp = 2.0 * float(spec.informativeness.get(m.name, 1.0))
            means = rng.standard_normal((c, m.channels)) * amp
            x = means[y] + rng.standard_normal((n, m.channels))
            cell[0, v] = x * 10.0 ** (v % 3) + v
        scipy.io.savemat(str(root / cls._synthetic_name()), {"X": cell, "Y": (y + 1).astype(np.float64)[:, None]})


# ---------------------------------------------------------------------------------------------
# the registered classic datasets (fixtures: zhou572/Multi-view-Datasets @ da48f8bf)
# ---------------------------------------------------------------------------------------------
_SOURCE = ("Copies of the files in the public repository zhou572/Multi-view-Datasets "
           "(https://github.com/zhou572/Multi-view-Datasets, commit da48f8bf4270c73d57c814a470fcd5fb16d757db; "
           "that repository has no licence file: cite the original sources). ")
_LAYOUT = ("The data root is the folder containing {file} or the file itself; its sha256 is checked "
           "(verify_sha256=False skips). No official split: seeded stratified 60/20/20 train/val/test "
           "(split_fractions, split_seed).")


def _registered(id_: str, title: str, file: str, sha: str, classes: int, dims: list[tuple[int, str]], info: str) -> type:
    mods = tuple(Modality(f"view{i}", "vector", d, description=desc) for i, (d, desc) in enumerate(dims))
    cls = type(f"Multiview_{id_}", (MultiviewMat,), {
        "__doc__": f"{title} ({file}, {len(dims)} views, {classes} classes).",
        "__module__": __name__,
        "id": id_, "FILE": file, "SHA256": sha, "num_classes": classes, "MODALITIES": mods,
        "FILES": (DataFile(file, f"X: 1x{len(dims)} cell of ({'/'.join(str(d) for d, _ in dims)})-column views, "
                                 f"Y: N x 1 labels 1..{classes} (MATLAB v5)", sha256=sha),),
        "INFO": info + " " + _SOURCE + _LAYOUT.format(file=file),
    })
    DATASETS.add(id_, cls)
    return cls


MvHandwritten = _registered(
    "mv_handwritten", "UCI mfeat handwritten digits", "handwritten.mat", "58843f19f3cea95dd3c506b2d44484b4589cc56c45786061db0778366c72bf06", 10,
    [(240, "pixel averages in 2x3 windows (mfeat-pix)"), (76, "Fourier coefficients of the character shapes (mfeat-fou)"),
     (216, "profile correlations (mfeat-fac)"), (47, "Zernike moments (mfeat-zer)"),
     (64, "Karhunen-Loeve coefficients (mfeat-kar)"), (6, "morphological features (mfeat-mor)")],
    "UCI Multiple Features (mfeat) handwritten digits 0-9, 2000 samples (200 per class), 6 views; "
    "UCI Machine Learning Repository, Duin 1998, CC BY 4.0 (https://archive.ics.uci.edu).")
MvLeaves100 = _registered(
    "mv_leaves100", "UCI one-hundred plant species leaves", "100Leaves.mat", "1602949219623cf7ec8455528f91c4544e3a5f96311d09d9134a8b688f1fb768", 100,
    [(64, "64-bin leaf descriptor histogram (shape, margin or texture)")] * 3,
    "UCI One-hundred plant species leaves, 1600 samples (16 per species, 100 species), 3 views (shape, "
    "fine-scale margin, texture histograms, 64-d each); Mallah, Cope and Orwell 2013, UCI Machine Learning "
    "Repository, CC BY 4.0 (https://archive.ics.uci.edu).")
MvNgs = _registered(
    "mv_ngs", "20 Newsgroups subset, three pre-processings", "NGs.mat", "9100c95e9cbf8d793c2139ee29b3d1e95330cc6007ade321c05262ee030554c9", 5,
    [(2000, "bag-of-words, pre-processing 1"), (2000, "bag-of-words, pre-processing 2"),
     (2000, "bag-of-words, pre-processing 3")],
    "NGs: a 500-document, 5-class subset of 20 Newsgroups (Lang 1995, http://qwone.com/~jason/20Newsgroups/), "
    "3 views = three pre-processings of the same documents (2000-d bag-of-words each).")
MvHw2sources = _registered(
    "mv_hw2sources", "Handwritten digits from MNIST and USPS", "HW2sources.mat", "a888aaf7a582513790340861222346f5b66b071a6fa3c8a370656ba0343ae925", 10,
    [(784, "MNIST 28x28 digit image"), (256, "USPS 16x16 digit image")],
    "HW2sources: 2000 handwritten digits 0-9 (200 per class) seen in two sources, MNIST (LeCun et al. 1998, "
    "28x28 = 784-d) and USPS (Hull 1994, 16x16 = 256-d) images of the same digit classes.")

__all__ = ["MultiviewMat", "MvHandwritten", "MvHw2sources", "MvLeaves100", "MvNgs", "labels_to_ids", "orient",
           "parse_fractions", "read_mat", "sha256_of", "stratified_split", "zscore_stats"]
