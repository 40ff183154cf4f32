"""Multi-view ``.mat`` layouts: where the file is (the root itself, a folder plus ``file=``, a folder
holding one ``.mat`` file, or this adapter's synthetic-twin folder), how the labels are stored
(:func:`labels_to_ids`: N-by-1 or 1-by-N, integral values, mapped to 0..C-1) and how each view is stored
(:func:`orient`: (N, d) or (d, N), decided by which axis matches the labels or by ``sample_axis``).

:class:`_FileLocation` is the mixin of the ``multiview_mat`` adapters that locates the file.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from ..base import DatasetError, DatasetNotFoundError

log = logging.getLogger(__package__)  # the logger of fusebench.datasets.multiview_mat, as before the split

#: names (any case) of a cell variable holding the views, and of a label variable (numeric, or a cell
#: holding one identical label vector per view)
VIEW_CELL_NAMES = ("x", "data", "views")
LABEL_NAMES = ("y", "gt", "gnd", "truth", "groundtruth", "ground_truth", "label", "labels", "truelabel",
               "truelabels", "true_label", "true_labels")
#: a shipped split: variable NAME_train next to NAME_test (views and labels alike)
SPLIT_SUFFIXES = ("_train", "_test")
_NUMBERED = re.compile(r"^[xX](\d+)$")
_SPLIT = re.compile(r"^(.+)(_train|_test)$")
_HELP = ("Views are found as a 1-by-V or V-by-1 cell named X, data or views; as variables x1..xV; or as "
         "x1_train..xV_train with x1_test..xV_test (a shipped train / test split). Labels are found as Y, y, gt, gnd, "
         "truth, label(s) or truelabel (numeric, or a cell holding one identical label vector per view), with "
         "_train / _test for a shipped split. Name them with the options x_key (a cell variable, a list of view "
         "variables, or the prefix of x1..xV) and y_key (dataset.options.x_key / y_key, --set "
         "dataset.options.y_key=NAME); sample_axis (0, 1 or 'auto', or one per view) says which axis of each view "
         "holds the samples")


@dataclass(frozen=True)
class Layout:
    """Where a multi-view file keeps its views and labels (:func:`find_layout`).

    ``parts``: the variable-name suffixes of the stored sample blocks, ``("",)`` or ``("_train", "_test")``
    (a shipped split: the samples are the train block then the test block); ``x_kind``: ``"cell"`` (one cell
    variable ``x_names[0]``) or ``"vars"`` (one variable per view, in order); ``y_kind``: ``"var"`` or
    ``"cell"`` (one identical label vector per view)."""

    parts: tuple[str, ...]
    x_kind: str
    x_names: tuple[str, ...]
    y_kind: str
    y_name: str

    @property
    def shipped_split(self) -> bool:
        return self.parts != ("",)

    def variables(self) -> list[str]:
        """Every variable the layout reads, in reading order."""
        return [b + p for p in self.parts for b in (*self.x_names, self.y_name)]

    @property
    def x_label(self) -> str:
        """How the views are named in messages and records: ``X``, ``x1..x4``, ``x1_train..x2_train / ...``."""
        def one(suffix: str) -> str:
            names = [b + suffix for b in self.x_names]
            return names[0] if len(names) == 1 else f"{names[0]}..{names[-1]}"
        return " / ".join(one(p) for p in self.parts)

    @property
    def y_label(self) -> str:
        return " / ".join(self.y_name + p for p in self.parts)


def _describe(listing: dict[str, tuple[tuple[int, ...], str]]) -> str:
    return ", ".join(f"{k} ({'x'.join(map(str, shape))} {cls})" for k, (shape, cls) in sorted(listing.items())) or "nothing"


def _kind(cls: str) -> str:
    if cls == "cell":
        return "cell"
    if cls in ("char", "struct", "object", "function", "opaque", "other"):
        return "other"
    return "numeric"  # double, single, (u)int*, logical, sparse


def find_layout(path: Path, listing: dict[str, tuple[tuple[int, ...], str]], x_key: Any = None,
                y_key: Any = None) -> Layout:
    """The :class:`Layout` of a file from its variables (``{name: (MATLAB shape, MATLAB class)}``) and the
    ``x_key`` / ``y_key`` options (None: found by name; see ``_HELP``). Raises one :class:`DatasetError`
    naming the file, its variables and the options that resolve it when the layout is unknown or ambiguous."""
    names = sorted(listing)
    kinds = {k: _kind(c) for k, (_, c) in listing.items()}
    units: dict[tuple[str, bool], str] = {}  # (base name, shipped split) -> kind ("mixed" when the parts differ)
    paired = set()
    for n in names:
        m = _SPLIT.match(n)
        if m and m.group(2) == "_train" and m.group(1) + "_test" in listing:
            base = m.group(1)
            kt, ke = kinds[base + "_train"], kinds[base + "_test"]
            units[(base, True)] = kt if kt == ke else "mixed"
            paired.update((base + "_train", base + "_test"))
    for n in names:
        if n not in paired:
            units[(n, False)] = kinds[n]
    held = f"The file holds {_describe(listing)}. {_HELP}"

    def fail(problem: str) -> DatasetError:
        return DatasetError(f"{path}: {problem}. {held}")

    # -- views ------------------------------------------------------------------------------------------
    if x_key is not None and not isinstance(x_key, str):  # an explicit list of view variables
        bases = [str(b) for b in x_key]
        found = [[s for s in (False, True) if (b, s) in units] for b in bases]
        missing = [b for b, f in zip(bases, found) if not f]
        if not bases or missing:
            raise fail(f"x_key={list(x_key)!r} names no variable(s) {missing or '(empty list)'} of the file")
        splits = {s for f in found for s in f}
        if len(splits) != 1:
            raise fail(f"x_key={list(x_key)!r} mixes variables with and without _train / _test parts")
        shipped = splits.pop()
        bad = [b for b in bases if units[(b, shipped)] != "numeric"]
        if bad:
            raise fail(f"x_key={list(x_key)!r}: {bad} are not numeric view matrices")
        x_kind, x_names = "vars", tuple(bases)
    else:
        cands: list[tuple[str, tuple[str, ...], bool]] = []
        not_cells = []
        if x_key is not None:
            hits = [(b, s) for (b, s) in units if b == x_key]
            for b, s in hits:
                (cands.append(("cell", (b,), s)) if units[(b, s)] == "cell" else not_cells.append((b, s)))
            numbered_prefix = re.compile(rf"^{re.escape(x_key)}(\d+)$")
        else:
            for (b, s), k in units.items():
                if b.lower() in VIEW_CELL_NAMES:
                    (cands.append(("cell", (b,), s)) if k == "cell" else not_cells.append((b, s)))
            numbered_prefix = _NUMBERED
        if x_key is None or not (cands or not_cells):  # found by name: every candidate layout counts
            for shipped in (False, True):
                nums = sorted((int(m.group(1)), b) for (b, s), k in units.items()
                              if s == shipped and k == "numeric" and (m := numbered_prefix.match(b)))
                if nums:
                    first = nums[0][0]
                    if first not in (0, 1) or [n for n, _ in nums] != list(range(first, first + len(nums))):
                        raise fail(f"the view variables {[b for _, b in nums]} are not numbered {first}, {first + 1}, "
                                   "... without gaps; name the views with x_key=[...]")
                    cands.append(("vars", tuple(b for _, b in nums), shipped))
        if not cands:
            key = x_key if x_key is not None else "X"
            if not_cells:
                b, s = not_cells[0]
                shape, cls = listing[b + ("_train" if s else "")]
                raise DatasetError(f"{path}: {b} must be a cell array of view matrices, got a {cls} array of MATLAB "
                                   f"shape {'x'.join(map(str, shape))}. {held}")
            raise DatasetError(f"{path}: no variable(s) [{key!r}] in the file (it holds {names}); no other layout of "
                               f"views was found either. {held}")
        if len(cands) > 1:
            shown = "; ".join(_cand_text(c) for c in cands)
            raise fail(f"ambiguous views: {len(cands)} candidate layouts ({shown})")
        x_kind, x_names, shipped = cands[0]
    # -- labels -----------------------------------------------------------------------------------------
    if y_key is not None:
        y_cands = [(b, s) for (b, s) in units if b == str(y_key) and s == shipped]
        other = [(b, s) for (b, s) in units if b == str(y_key) and s != shipped]
        if not y_cands:
            if other:
                raise fail(f"y_key={y_key!r} is {'split into _train / _test' if other[0][1] else 'one variable'} but "
                           f"the views are {'split into _train / _test' if shipped else 'not'}")
            raise DatasetError(f"{path}: no variable(s) [{str(y_key)!r}] in the file (it holds {names}). "
                               f"{held}")
    else:
        y_cands = [(b, s) for (b, s), k in units.items()
                   if b.lower() in LABEL_NAMES and k in ("numeric", "cell") and s == shipped]
        if not y_cands:
            typed = [(b, k) for (b, s), k in units.items() if b.lower() in LABEL_NAMES and s == shipped]
            if typed:
                b = typed[0][0]
                cls = listing.get(b + (SPLIT_SUFFIXES[0] if shipped else ""), ((), typed[0][1]))[1]
                raise fail(f"the label variable {b} is a MATLAB {cls} variable; expected a numeric "
                           f"label vector (one class per sample) or a cell of them (text class names are not read: "
                           f"store them as numbers)")
            other = [b for (b, s), k in units.items() if b.lower() in LABEL_NAMES and s != shipped]
            if other:
                raise fail(f"the views {'come' if shipped else 'do not come'} as _train / _test parts but the labels "
                           f"{other} {'do not' if shipped else 'do'}; name matching variables with x_key / y_key")
            raise DatasetError(f"{path}: no variable(s) ['Y'] in the file (it holds {names}) nor another label "
                               f"variable. {held}")
        if len(y_cands) > 1:
            raise fail(f"ambiguous labels: {len(y_cands)} candidate label variables {sorted(b for b, _ in y_cands)}")
    yb, _ = y_cands[0]
    y_kind = units[(yb, shipped)]
    if y_kind not in ("numeric", "cell"):
        what = "differ between the _train and _test parts" if y_kind == "mixed" else f"is a MATLAB {y_kind} variable"
        raise fail(f"the label variable {yb} {what}; expected a numeric label vector or a cell of them")
    if yb in x_names:
        raise fail(f"{yb} cannot hold both the views and the labels")
    return Layout(SPLIT_SUFFIXES if shipped else ("",), x_kind, tuple(x_names), "var" if y_kind == "numeric" else "cell",
                  yb)


def _cand_text(c: tuple[str, tuple[str, ...], bool]) -> str:
    kind, bases, shipped = c
    suffix = " with _train / _test parts" if shipped else ""
    if kind == "cell":
        return f"the cell {bases[0]}{suffix}"
    return f"the variables {bases[0]}..{bases[-1]}{suffix}"


def label_cell(cell: np.ndarray, path: Path, name: str) -> np.ndarray:
    """The one label vector of a cell holding one copy per view, checked identical."""
    entries = [np.asarray(e.toarray() if sp.issparse(e) else e) for e in np.asarray(cell, dtype=object).ravel(order="F")]
    if not entries:
        raise DatasetError(f"{path}: the label cell {name} is empty")
    if all(e.size == 1 or e.dtype.kind in "USO" for e in entries):
        kinds = sorted({"text" if e.dtype.kind in "USO" else "a number" for e in entries})
        raise DatasetError(f"{path}: the label cell {name} holds {len(entries)} entries of {' or '.join(kinds)}, one "
                           f"per sample, not label vectors; expected a numeric label vector (N-by-1), or a cell "
                           f"with one copy of it per view")
    first = entries[0]
    for i, e in enumerate(entries[1:], start=2):
        if e.dtype == object or e.size != first.size or not np.array_equal(e.ravel(), first.ravel()):
            diff = (f"{int((e.ravel() != first.ravel()).sum())} of {first.size} labels differ" if e.size == first.size
                    and e.dtype != object else f"entry {i} has shape {e.shape}, entry 1 {first.shape}")
            raise DatasetError(f"{path}: the label cell {name} holds {len(entries)} label vectors (one per view) that "
                               f"are not identical: entry {i} differs from entry 1 ({diff}); the views' labels "
                               "disagree. Fix the file, or name another label variable with y_key")
    return first


def label_vector(y: Any, path: Path, y_key: str = "Y") -> np.ndarray:
    """A MATLAB label array (N-by-1 or 1-by-N, dense or sparse, real numeric) as a 1-D array, values as stored.

    A complex array is refused: ``np.number`` includes the complex types, which were accepted as classes (and
    their values recorded as complex label values) although no class label is complex."""
    if sp.issparse(y):
        y = y.toarray()
    y = np.asarray(y)
    if y.dtype == object or not (np.issubdtype(y.dtype, np.number) or y.dtype == bool):
        raise DatasetError(f"{path}: {y_key} must be a numeric label vector, got dtype {y.dtype}")
    if np.iscomplexobj(y):
        raise DatasetError(f"{path}: {y_key} is complex ({y.dtype}); class labels must be real numbers (integers, or "
                           "integral floats such as 1.0, 2.0)")
    if y.ndim > 2 or (y.ndim == 2 and min(y.shape) > 1):
        raise DatasetError(f"{path}: {y_key} must be an N-by-1 or 1-by-N label vector, got shape {y.shape}")
    return y.ravel()


def labels_to_ids(y: Any, path: Path, y_key: str = "Y",
                  allow_fractional: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(class ids 0..C-1 [N] int64, the original label values [C]) from a MATLAB label array.

    Class labels must be integral values: integer classes, or floats such as 1.0, 2.0 (MATLAB stores
    labels as double). Non-integer values (0.5, 1.7) are refused unless ``allow_fractional``: they
    are a regression target or a feature, and every distinct value would become a class.
    """
    y = label_vector(y, path, y_key)
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


def view_variable(layout: Layout, view: int, suffix: str = "") -> str:
    """How MATLAB names view ``view`` (0-based) of a file's part ``suffix``: ``X{2}`` (the cell's 1-based entry)
    or the view's own variable ``x2`` / ``x2_test``."""
    if layout.x_kind == "cell":
        return f"{layout.x_names[0]}{suffix}{{{view + 1}}}"
    return layout.x_names[view] + suffix


def check_sample_counts(views: list[Any], n: int, path: Path, labels: str, names: list[str]) -> None:
    """Raise one :class:`DatasetError` naming the label variable when no view of a part has ``n`` (the labels'
    length) along either axis: the label vector is then the odd one out (too short or too long), not the first
    view the orientation check would have named."""
    shapes = [tuple(getattr(x, "shape", ())) for x in views]
    if not views or any(len(s) != 2 or n in s for s in shapes):
        return
    shown = ", ".join(f"{name} {'x'.join(map(str, s))}" for name, s in zip(names, shapes))
    counts = sorted({a for s in shapes for a in s if all(a in t for t in shapes)})
    common = (f"; every view has {' or '.join(map(str, counts))} along one axis, so {labels} has the wrong length"
              if counts else "")
    raise DatasetError(f"{path}: the label vector {labels} has {n} entries, but no view has {n} samples along either "
                       f"axis ({shown}){common}. Each view needs one row (or column) per label; fix the file or name "
                       "the right label variable with y_key")


def unambiguous_axis(block: Any, n: int) -> int | None:
    """The sample axis of a stored block when exactly one of its axes has the part's ``n`` samples, else None."""
    shape = tuple(getattr(block, "shape", ()))
    if len(shape) != 2 or (shape[0] == n) == (shape[1] == n):
        return None
    return 0 if shape[0] == n else 1


def part_axes(blocks: list[Any], sizes: list[int], sample_axis: Any, file_axes: set[int]) -> tuple[list[Any], str]:
    """The ``sample_axis`` to orient each stored block of one view with (:func:`.layouts.orient`), and how a
    square block's axis was decided ("" when none was decided here).

    With ``"auto"``, a block whose two axes both equal its part's sample count takes the axis the same view's
    other blocks show (a square ``x1_test`` of 120 x 120 beside an ``x1_train`` of 120 x 480), else the one every
    unambiguous block of the file's views shows (``file_axes``, a file stored features x samples throughout):
    taking its rows (the rule for a square view with no other evidence, which warns) transposed a d x N view
    while the file's other blocks were read by columns, with the same feature count, so nothing failed."""
    plain = [sample_axis] * len(blocks)
    square = [len(s) == 2 and s[0] == s[1] == n for s, n in
              zip((tuple(getattr(b, "shape", ())) for b in blocks), sizes)]
    if sample_axis != "auto" or not any(square):
        return plain, ""
    own = {a for b, n in zip(blocks, sizes) if (a := unambiguous_axis(b, n)) is not None}
    if len(own) == 1:
        axis, why = own.pop(), "its other part"
    elif not own and len(file_axes) == 1:
        axis, why = next(iter(file_axes)), "every other view of the file"
    else:
        return plain, ""
    return [axis if sq else sample_axis for sq in square], why


def orient(x: Any, n: int, view: int, path: Path, sample_axis: Any = "auto", name: str | None = None,
           labels: str = "Y") -> tuple[Any, str]:
    """The view as (N, d) and how it was stored ("N x d" or "d x N"). ``name`` / ``labels``: the view's and the
    labels' variables, for messages (a view's variable is :func:`view_variable`)."""
    what = f"view {view} ({name})" if name else f"view {view}"
    if not (sp.issparse(x) or isinstance(x, np.ndarray)):
        raise DatasetError(f"{path}: {what} is a {type(x).__name__}, not a numeric matrix")
    if isinstance(x, np.ndarray) and (x.dtype == object or not (np.issubdtype(x.dtype, np.number) or x.dtype == bool)):
        raise DatasetError(f"{path}: {what} has dtype {x.dtype}, not a numeric matrix")
    if isinstance(x, np.ndarray) and np.iscomplexobj(x):
        raise DatasetError(f"{path}: {what} is complex; only real views are supported")
    if x.ndim != 2:
        raise DatasetError(f"{path}: {what} has shape {x.shape}, expected a 2-D matrix")
    rows, cols = x.shape
    if sample_axis in (0, 1):
        if x.shape[sample_axis] != n:
            raise DatasetError(f"{path}: {what} has shape {x.shape}; "
                               f"sample_axis={sample_axis} needs {n} (the number of labels of {labels}) along that axis")
        axis = sample_axis
    elif sample_axis == "auto":
        if rows == n and cols == n:
            log.warning("%s: %s is %d x %d, both axes match the %d labels of %s; taking rows as samples "
                        "(pass sample_axis=1 if columns are)", path, what, rows, cols, n, labels)
            axis = 0
        elif rows == n:
            axis = 0
        elif cols == n:
            axis = 1
        else:
            raise DatasetError(f"{path}: {what} has shape {x.shape}; neither axis "
                               f"matches the {n} labels of {labels}")
    else:
        raise DatasetError(f"multiview_mat: sample_axis={sample_axis!r} must be 'auto', 0 or 1")
    return (x if axis == 0 else x.T), ("N x d" if axis == 0 else "d x N")


class _FileLocation:
    """Locating the ``.mat`` file of a ``multiview_mat`` adapter."""

    @classmethod
    def _synthetic_name(cls) -> str:
        return cls.FILE or "multiview.mat"

    @classmethod
    def files_read(cls, root: Any, options: dict[str, Any]) -> list[Path] | None:
        """The one ``.mat`` file a run on ``root`` reads (the root itself, ``root/file``, the registered
        file, or the folder's only ``.mat``), for the record's data fingerprint; None when the root does not
        say (the run then stops with :meth:`_resolve_path`'s error)."""
        root = Path(root)
        if root.is_file():
            return [root]
        name = (options or {}).get("file") or cls.FILE
        if name:
            return [root / name] if (root / name).is_file() else None
        mats = sorted(root.glob("*.mat")) if root.is_dir() else []
        return mats if len(mats) == 1 else None

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
        if not mats:  # "a folder with 0 .mat files ([]); ... name it with file=NAME.mat" named nothing to choose
            raise DatasetNotFoundError(f"{self.id}: data root {root} holds no .mat file (a multi-view .mat file, or "
                                       f"the folder that holds it, is the data root: --data-root path/to/NAME.mat)"
                                       f".\n{self.info()}")
        if len(mats) != 1:
            names = [m.name for m in mats]
            shown = f"{names[:10]}" + (f" and {len(names) - 10} more not shown" if len(names) > 10 else "")
            raise DatasetError(f"{self.id}: data root {root} is a folder with {len(mats)} .mat files ({shown}); pass "
                               f"the file itself as the root (--data-root {root / 'NAME.mat'}) or name it with the "
                               f"option file=NAME.mat (fusebench run: --set dataset.options.file=NAME.mat; fusebench "
                               f"data prepare: --opt file=NAME.mat; Python: build(..., file='NAME.mat'))")
        if not mats[0].is_file():  # a dangling symbolic link (or a folder named *.mat): its stat was a raw OSError
            what = (f"a symbolic link to {os.readlink(mats[0])!r}, which does not exist" if mats[0].is_symlink()
                    else "not a regular file")
            raise DatasetNotFoundError(f"{self.id}: {mats[0]} (the only .mat in the data root {root}) is {what}."
                                       f"\n{self.info()}")
        return mats[0]

    def _is_twin(self, path: Path) -> bool:
        """True for a file inside this adapter's synthetic-twin folder (marked by ``synthetic_root``)."""
        import json

        marker = path.parent / ".complete"
        try:
            return marker.is_file() and json.loads(marker.read_text()).get("id") == self.id
        except (OSError, ValueError, AttributeError):
            return False
