"""Multi-view ``.mat`` file formats: MATLAB v4/v5/v7 read with ``scipy.io.loadmat`` and v7.3 (HDF5)
read with h5py.

In v7.3 files cells are object references into ``#refs#`` and every matrix is stored transposed
(:func:`_h5_matrix` turns it back into MATLAB's orientation); sparse matrices are groups holding
``data`` / ``ir`` / ``jc``. Every sparse matrix of either format is checked (:func:`check_sparse`) before use. Both list the file's variables first (``whosmat`` / the HDF5 keys) for
:func:`.layouts.find_layout`, then read only the variables of the layout found (a label cell is reduced
to its one label vector, checked identical). :func:`read_mat` returns the raw views and labels as stored
(one block, or the shipped train and test blocks) and keeps the
last few files in a per-process LRU keyed by path, mtime and size (one read for the three splits);
:func:`_file_sha256` memoises the file's sha256 the same way.
"""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from ..base import DatasetError, DatasetNotFoundError
from .layouts import Layout, find_layout, label_cell
from fusebench.io import sha256_file
from fusebench.machine import available_memory

_LRU_SIZE = 4
_LRU: OrderedDict[tuple, dict[str, Any]] = OrderedDict()


def sha256_of(path: Path) -> str:
    """The file's sha256 (hex), as the prepared-cache manifests hash their inputs."""
    return sha256_file(path)


def _is_ref(dtype: Any) -> bool:
    """Whether an HDF5 dataset's dtype is object references (a MATLAB cell). ``dtype == h5py.ref_dtype`` is not
    a test: every variable-length dtype compares equal to it (both are numpy object dtypes)."""
    import h5py

    return h5py.check_dtype(ref=dtype) is not None


def _deref(f: Any, ref: Any, where: str) -> Any:
    """The object a cell entry's reference points to; a null or dangling reference raises naming ``where``."""
    if not ref:
        raise DatasetError(f"{where} is a null object reference (an empty or damaged cell entry); expected a "
                           "reference to a numeric matrix")
    try:
        return f[ref]
    except (ValueError, KeyError, OSError) as e:
        raise DatasetError(f"{where}: cannot follow the object reference ({e}); the cell entry points nowhere "
                           "(damaged file?)") from None


def _sparse_index(obj: Any, where: str) -> np.ndarray:
    """A v7.3 sparse matrix's ``ir`` or ``jc`` as int64 (MATLAB writes uint64); an integer above int64's range
    (which ``astype`` would wrap to a negative number) or a non-integer dtype raises naming ``where``."""
    raw = np.asarray(obj[()]).ravel()
    if raw.dtype.kind not in "iu":
        raise DatasetError(f"{where} is of HDF5 dtype {raw.dtype}; expected integer indices")
    if raw.dtype.kind == "u" and raw.size and int(raw.max()) > np.iinfo(np.int64).max:
        raise DatasetError(f"{where} holds the index {int(raw.max())}, beyond any matrix's size")
    return raw.astype(np.int64)


def check_sparse(jc: np.ndarray, ir: np.ndarray, n_data: int, n_rows: int, n_cols: int, where: str) -> None:
    """Raise :class:`DatasetError` naming ``where`` unless (``jc``, ``ir``, data) is a well-formed MATLAB (CSC)
    sparse matrix of ``n_rows`` x ``n_cols``.

    MATLAB stores column j's nonzeros at positions ``jc[j] .. jc[j+1] - 1`` of ``ir`` (their rows, 0-based) and
    of the data, so ``jc`` must hold ``n_cols + 1`` non-decreasing entries from 0 to the number of nonzeros,
    ``ir`` and the data one entry per nonzero, and every row index must lie in ``0 .. n_rows - 1``. scipy does
    not check the indices when it builds the matrix (neither ``loadmat`` nor ``csc_matrix``): a row index past
    the end or a column pointer past the nonzeros made ``toarray()`` write or read outside its buffers (a
    segfault, or values silently lost), and a pointer short of the nonzeros dropped data without a word.
    """
    problem = None
    if n_rows < 0:
        problem = f"a negative row count {n_rows}"
    elif jc.size != n_cols + 1:
        problem = f"{jc.size} column pointers (jc) for {n_cols} columns; expected {n_cols + 1}"
    elif jc[0] != 0:
        problem = f"the first column pointer (jc) is {int(jc[0])}; expected 0"
    elif (np.diff(jc) < 0).any():
        j = int(np.flatnonzero(np.diff(jc) < 0)[0])
        problem = (f"the column pointers (jc) decrease at column {j + 1} ({int(jc[j])} then {int(jc[j + 1])}); "
                   "expected a non-decreasing sequence")
    elif not int(jc[-1]) == ir.size == n_data:
        problem = (f"the last column pointer (jc) says {int(jc[-1])} nonzeros, the row indices (ir) hold "
                   f"{ir.size} and the data {n_data}; expected all three equal")
    elif ir.size and (int(ir.min()) < 0 or int(ir.max()) >= n_rows):
        bad = np.flatnonzero((ir < 0) | (ir >= n_rows))
        problem = (f"{bad.size} row index(es) (ir) outside 0..{n_rows - 1} (the first: {int(ir[bad[0]])} at "
                   f"nonzero {int(bad[0]) + 1})")
    if problem is not None:
        raise DatasetError(f"{where}: malformed sparse matrix ({n_rows} x {n_cols}): {problem}; the file is damaged "
                           "or was not written by MATLAB / scipy.io")


def _check_v5_sparse(value: Any, where: str) -> None:
    """:func:`check_sparse` on a sparse matrix ``scipy.io.loadmat`` returned (also inside a cell), and refuse a
    complex one (only real views are supported)."""
    if isinstance(value, np.ndarray) and value.dtype == object:
        for i, entry in enumerate(value.ravel(order="F")):  # MATLAB's (column-major) cell order
            _check_v5_sparse(entry, f"{where}{{{i + 1}}}")
    elif sp.issparse(value):
        m = value.tocsc(copy=False) if value.format != "csc" else value
        if np.iscomplexobj(m.data):
            raise DatasetError(f"{where} is a complex sparse matrix; only real views are supported")
        check_sparse(np.asarray(m.indptr, np.int64), np.asarray(m.indices, np.int64), m.data.size, m.shape[0],
                     m.shape[1], where)


def _h5_matrix(f: Any, obj: Any, where: str) -> Any:
    """One MATLAB v7.3 matrix in MATLAB's orientation (h5py stores the transpose)."""
    import h5py

    if isinstance(obj, h5py.Group):
        if "MATLAB_sparse" not in obj.attrs or "jc" not in obj or "ir" not in obj:
            raise DatasetError(f"{where} is a MATLAB {obj.attrs.get('MATLAB_class', b'?')!r} group, not a numeric "
                               "(dense or sparse) matrix")
        n_rows = int(np.asarray(obj.attrs["MATLAB_sparse"]).ravel()[0])
        jc, ir = (_sparse_index(obj[k], f"{where} ({k})") for k in ("jc", "ir"))
        if "data" in obj:  # a logical sparse matrix stores no data: its nonzeros are true
            data = np.asarray(obj["data"][()])
            if data.dtype.names:  # MATLAB complex: compound (real, imag)
                raise DatasetError(f"{where} is a complex sparse matrix; only real views are supported")
            if data.dtype.kind not in "biuf":
                raise DatasetError(f"{where}: the sparse matrix's data is of HDF5 dtype {data.dtype}; expected numbers")
            data = data.ravel()
        else:
            data = np.ones(ir.size)
        check_sparse(jc, ir, data.size, n_rows, max(jc.size - 1, 0), where)
        return sp.csc_matrix((data.astype(np.float64), ir, jc), shape=(n_rows, jc.size - 1))
    if _is_ref(obj.dtype):
        return np.asarray(obj[()], dtype=object)  # a cell: caller resolves the references
    if h5py.check_dtype(vlen=obj.dtype) is not None or obj.dtype.kind not in "biuf" or obj.dtype.names:
        if obj.dtype.names and len(obj.dtype.names) == 2 and "real" in obj.dtype.names:
            raise DatasetError(f"{where} is complex; only real views are supported")
        kind = ("a variable-length (ragged) dataset" if h5py.check_dtype(vlen=obj.dtype) is not None
                else f"of HDF5 dtype {obj.dtype}")
        raise DatasetError(f"{where} is {kind}; expected a numeric (dense or sparse) MATLAB matrix")
    if "MATLAB_empty" in obj.attrs and int(np.asarray(obj.attrs["MATLAB_empty"]).ravel()[0]):
        return np.zeros((0, 0))
    need = int(np.prod(obj.shape, dtype=object)) * obj.dtype.itemsize  # what reading it allocates (a gzip'd
    room, _ = available_memory()  # chunked dataset of zeros declares terabytes in a few hundred KB)
    if room is not None and need > room:
        raise DatasetError(f"{where}: a {'x'.join(map(str, obj.shape[::-1]))} {obj.dtype} matrix needs "
                           f"{need / 2**30:,.1f} GiB to read, more than the {room / 2**30:,.1f} GiB this process can "
                           "still get")
    arr = np.asarray(obj[()])
    if arr.dtype.names:  # MATLAB complex: compound (real, imag)
        raise DatasetError(f"{where} is complex; only real views are supported")
    return arr.T


def _h5_listing(f: Any) -> dict[str, tuple[tuple[int, ...], str]]:
    """``{name: (MATLAB shape, MATLAB class)}`` of the top-level variables of a v7.3 file."""
    import h5py

    out = {}
    for k in f.keys():
        if k.startswith("#"):
            continue
        obj = f[k]
        cls = obj.attrs.get("MATLAB_class", b"")
        cls = cls.decode() if isinstance(cls, bytes) else str(cls)
        if isinstance(obj, h5py.Group):
            if "MATLAB_sparse" in obj.attrs and "jc" in obj:
                shape = (int(obj.attrs["MATLAB_sparse"]), int(obj["jc"].shape[0]) - 1)
                out[k] = (shape, "sparse")
            else:
                out[k] = ((1, 1), cls or "struct")
        elif _is_ref(obj.dtype):
            out[k] = (tuple(obj.shape[::-1]), "cell")
        else:
            out[k] = (tuple(obj.shape[::-1]), cls or "double")
    return out


def _read_v73(path: Path, x_key: Any, y_key: Any) -> tuple[Layout, dict[str, Any]]:
    import h5py

    try:
        f = h5py.File(path, "r")
    except OSError as e:
        raise DatasetError(f"{path}: not a readable MATLAB v7.3 (HDF5) .mat file ({e})") from None
    with f:
        layout = find_layout(path, _h5_listing(f), x_key, y_key)
        values: dict[str, Any] = {}
        for name in layout.variables():
            obj = f[name]
            if isinstance(obj, h5py.Dataset) and _is_ref(obj.dtype):
                refs = np.asarray(obj[()], dtype=object)
                cell = np.empty(refs.size, dtype=object)
                for i, r in enumerate(refs.ravel()):  # h5py's C order of the transposed cell = MATLAB's column-major order
                    where = f"{path}: {name}{{{i + 1}}}"
                    v = _h5_matrix(f, _deref(f, r, where), where)
                    if isinstance(v, np.ndarray) and v.dtype == object:
                        raise DatasetError(f"{path}: {name}{{{i + 1}}} is itself a cell array, expected a numeric matrix")
                    cell[i] = v
                values[name] = cell.reshape(refs.shape[::-1], order="F")  # MATLAB's shape
            else:
                values[name] = _h5_matrix(f, obj, f"{path}: {name}")
    return layout, values


_MI_COMPRESSED, _MI_MATRIX = 15, 14


def _check_v5_complete(path: Path) -> None:
    """Raise :class:`DatasetError` when a MATLAB v5/v7 file is shorter than its own structure says.

    A v5 file is a 128-byte header (text, then version and the endian indicator ``IM`` / ``MI`` at
    bytes 124..127) followed by top-level data elements, each an 8-byte tag (uint32 data type, uint32
    byte count) and that many bytes (``scipy.io`` reads the next element right after them). A file
    cut short (an interrupted download or copy) ends inside an element: ``scipy.io.whosmat`` then
    lists only the variables before the cut, and ``loadmat`` fails or returns them alone, which
    would be reported as "no variable Y". Files without a v5 header (v4) are left to scipy.
    """
    import struct

    size = path.stat().st_size
    with open(path, "rb") as fh:
        head = fh.read(128)
        if head.startswith(b"MATLAB") and len(head) < 128:
            raise DatasetError(f"{path}: truncated or damaged MATLAB .mat file: {size} bytes, shorter than the "
                               "128-byte MATLAB v5 header; re-download or re-export it")
        endian = {b"IM": "<", b"MI": ">"}.get(head[126:128])
        if endian is None or 0 in head[:4]:
            return  # not a v5 header (a v4 file, or not a .mat at all): scipy reports what it is
        pos, index = 128, 0
        while pos < size:
            fh.seek(pos)
            tag = fh.read(8)
            if len(tag) < 8:
                raise DatasetError(f"{path}: truncated or damaged MATLAB v5 .mat file: it ends {size - pos} byte(s) "
                                   f"into the 8-byte tag of data element {index + 1} at byte {pos}; re-download or "
                                   "re-export it")
            mdtype, nbytes = struct.unpack(endian + "II", tag)
            if mdtype not in (_MI_COMPRESSED, _MI_MATRIX):
                return  # not a variable: a damaged file, which scipy reports
            end = pos + 8 + nbytes
            if end > size:
                raise DatasetError(f"{path}: truncated MATLAB v5 .mat file: variable {index + 1} (data element at byte "
                                   f"{pos}) declares {nbytes} bytes, but the file ends after {size} bytes "
                                   f"({end - size} byte(s) missing; that variable and any after it are lost); "
                                   "re-download or re-export it")
            pos, index = end, index + 1


def _failing_variable(path: Path, names: tuple[str, ...] | list[str]) -> str | None:
    """The first of ``names`` that ``scipy.io.loadmat`` cannot read alone (to name it when reading them all
    failed); None when each reads alone."""
    import scipy.io

    for name in names:
        try:
            scipy.io.loadmat(str(path), variable_names=[name])
        except Exception:
            return name
    return None


def _read_v5(path: Path, x_key: Any, y_key: Any) -> tuple[Layout, dict[str, Any]]:
    import scipy.io

    _check_v5_complete(path)
    layout = None
    try:
        listing = {name: (tuple(shape), cls) for name, shape, cls in scipy.io.whosmat(str(path))}
        layout = find_layout(path, listing, x_key, y_key)
        m = scipy.io.loadmat(str(path), variable_names=layout.variables())
    except DatasetError:
        raise
    except Exception as e:  # scipy raises ValueError / TypeError / struct errors on non-.mat bytes
        culprit = _failing_variable(path, layout.variables()) if layout is not None else None
        if culprit is not None and isinstance(e, ValueError) and ("index pointer" in str(e) or "indices" in str(e)):
            # loadmat builds a sparse matrix with csc_matrix, which checks the sizes of jc / ir / data (not the
            # index values: those are checked by _check_v5_sparse below)
            raise DatasetError(f"{path}: {culprit}: malformed sparse matrix: {e} (its column pointers jc, row "
                               "indices ir and data disagree); the file is damaged or was not written by MATLAB / "
                               "scipy.io") from None
        where = f" (variable {culprit!r})" if culprit is not None else ""
        raise DatasetError(f"{path}: not a readable MATLAB .mat file (v4/v5/v7 or v7.3){where}: "
                           f"{type(e).__name__}: {e}") from None
    for key in layout.variables():  # scipy warns and returns "Read error: ..." for a variable it cannot decode
        if isinstance(m.get(key), str) and m[key].startswith("Read error"):
            raise DatasetError(f"{path}: variable {key!r} is damaged and cannot be read ({m[key]}); re-download "
                               "or re-export the file")
        _check_v5_sparse(m[key], f"{path}: {key}")
    return layout, {k: m[k] for k in layout.variables()}


def _assemble(path: Path, layout: Layout, values: dict[str, Any]) -> list[dict[str, Any]]:
    """The stored sample blocks (one, or the shipped train and test blocks): their views (as stored) and labels."""
    parts = []
    for suffix in layout.parts:
        if layout.x_kind == "cell":
            name = layout.x_names[0] + suffix
            x = values[name]
            if not (isinstance(x, np.ndarray) and x.dtype == object):
                what = f"a {type(x).__name__}" if not isinstance(x, np.ndarray) else f"a {x.dtype} array of shape {x.shape}"
                raise DatasetError(f"{path}: {name} must be a cell array of view matrices, got {what}")
            views, cell_shape = list(x.ravel(order="F")), tuple(x.shape)  # MATLAB's (column-major) cell order
        else:
            views, cell_shape = [values[b + suffix] for b in layout.x_names], None
        y = values[layout.y_name + suffix]
        if layout.y_kind == "cell":
            y = label_cell(y, path, layout.y_name + suffix)
        parts.append({"split": suffix.lstrip("_") or None, "views": views, "y": y, "cell_shape": cell_shape})
    return parts


def read_mat(path: Path, x_key: Any = None, y_key: Any = None) -> dict[str, Any]:
    """The raw views (MATLAB orientation, as stored) and labels of a multi-view .mat file, cached.

    ``x_key`` / ``y_key``: None finds the layout by the variables' names (:func:`.layouts.find_layout`).
    Returns ``{"layout": Layout, "parts": [{"split": None | "train" | "test", "views": [array or sparse],
    "y": array, "cell_shape": tuple | None}], "format": "v5" | "v7.3"}``: one part, or the shipped train
    and test parts.
    """
    try:
        st = path.stat()
    except OSError as e:
        raise DatasetNotFoundError(f"{path}: cannot read ({e})") from None
    key = (str(path.resolve()), st.st_mtime_ns, st.st_size, repr(x_key), repr(y_key))
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
    layout, values = (_read_v73 if is_h5 else _read_v5)(path, x_key, y_key)
    entry = {"layout": layout, "parts": _assemble(path, layout, values), "format": "v7.3" if is_h5 else "v5"}
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
