"""Multi-view ``.mat`` layouts: where the file is (the root itself, a folder plus ``file=``, a folder
holding one ``.mat`` file, or this adapter's synthetic-twin folder), how the labels are stored
(:func:`labels_to_ids`: N-by-1 or 1-by-N, integral values, mapped to 0..C-1) and how each view is stored
(:func:`orient`: (N, d) or (d, N), decided by which axis matches the labels or by ``sample_axis``).

:class:`_FileLocation` is the mixin of the ``multiview_mat`` adapters that locates the file.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from ..base import DatasetError, DatasetNotFoundError

log = logging.getLogger(__package__)  # the logger of fusebench.datasets.multiview_mat, as before the split


def labels_to_ids(y: Any, path: Path, y_key: str = "Y",
                  allow_fractional: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(class ids 0..C-1 [N] int64, the original label values [C]) from a MATLAB label array.

    Class labels must be integral values: integer classes, or floats such as 1.0, 2.0 (MATLAB stores
    labels as double). Non-integer values (0.5, 1.7) are refused unless ``allow_fractional``: they
    are a regression target or a feature, and every distinct value would become a class.
    """
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
    if np.issubdtype(y.dtype, np.floating) and not allow_fractional:
        frac = np.unique(y[y != np.round(y)])
        if frac.size:
            shown = ", ".join(f"{v:g}" for v in frac[:5]) + (", ..." if frac.size > 5 else "")
            raise DatasetError(
                f"{path}: {y_key} holds {frac.size} distinct non-integer label value(s) ({shown}; "
                f"{int((y != np.round(y)).sum())} of {y.size} samples); class labels must be integers (integral "
                f"floats such as 1.0, 2.0, as MATLAB stores them, are fine). {y_key} looks like a regression target "
                "or a feature, not classes: every distinct value would become a class. Pass the option "
                "allow_fractional_labels=True (--set dataset.options.allow_fractional_labels=true) to treat each "
                "distinct value as a class anyway")
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


class _FileLocation:
    """Locating the ``.mat`` file of a ``multiview_mat`` adapter."""

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
