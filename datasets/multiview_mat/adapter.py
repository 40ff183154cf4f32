"""The registered ``multiview_mat`` adapter :class:`MultiviewMat`: options, reading and validating the
views, splitting, standardising, sample assembly, the record's split information.

The work is shared with the sibling modules: :mod:`.formats` (the ``.mat`` readers, cached),
:mod:`.layouts` (locating the file, label and view orientation), :mod:`.splits` (stratified splits,
z-scoring) and :mod:`.synthetic` (the synthetic twin writer).
"""

from __future__ import annotations

import os
import re
from collections import OrderedDict
from pathlib import Path
from typing import Any, ClassVar, Mapping

import numpy as np
import scipy.sparse as sp
import torch

from .. import DATASETS
from ..base import BASE_OPTIONS, DataFile, DatasetError, Delivered, Modality, MultimodalDataset, SyntheticSpec
from .copies import augmented_copies, parse_view_copies
from .formats import _file_sha256, read_mat
from .layouts import (_FileLocation, check_sample_counts, label_vector, labels_to_ids, log, orient, part_axes,
                      unambiguous_axis, view_variable)
from .splits import (SPLIT_NAMES, min_class_size, outer_split, parse_fractions, stratified_split, view_problem,
                     zscore_stats)
from .synthetic import _SyntheticTwin

# the public names stay fusebench.datasets.multiview_mat:<Class> (recorded as "adapter" in
# prepared-cache manifests and as the registry origin), as when the adapter was the module
# fusebench.datasets.multiview_mat
_MODULE = "fusebench.datasets.multiview_mat"

OPTIONS = frozenset({"file", "x_key", "y_key", "views", "view_names", "sample_axis", "split_fractions",
                     "split_seed", "standardize", "verify_sha256", "sha256", "allow_fractional_labels",
                     "allow_small_classes", "view_copies", "outer_test_seed", "shipped_split"})

_SYN_DIMS = (8, 12, 16)

#: prepared datasets kept per process (:meth:`MultiviewMat._prepare`)
_PREPARED_SIZE = 2
_PREPARED: OrderedDict[tuple, dict[str, Any]] = OrderedDict()


def _whose_file(sha256: str, id_: str) -> str:
    """Why a file's sha256 is not the registered one: the registered dataset whose file it is (a folder or file of
    another dataset passed as the data root), else another release or a damaged copy."""
    todo, seen = list(MultiviewMat.__subclasses__()), []
    while todo:
        cls = todo.pop()
        seen.append(cls)
        todo.extend(cls.__subclasses__())
    for cls in seen:
        if cls.SHA256 == sha256 and cls.id != id_:
            bench = cls.id.replace("_", "-")  # the built-in mv_* datasets each have the benchmark mv-*
            return f"it is the file of the dataset {cls.id!r}" + (
                f": its benchmark is fusebench run {bench}" if cls.__module__ == _MODULE else "")
    return "a different release or a corrupt copy"


@DATASETS.register("multiview_mat")
class MultiviewMat(_FileLocation, _SyntheticTwin, MultimodalDataset):
    """Any multi-view learning .mat file (X = cell of views, Y = labels): views are vector modalities."""

    __module__ = _MODULE

    id = "multiview_mat"
    task = "classification"
    #: class-level declaration = the default synthetic twin; an instance follows its file
    num_classes = 4
    MODALITIES: ClassVar[tuple[Modality, ...]] = tuple(
        Modality(f"view{i}", "vector", d, description=f"view {i} ({d}-d)") for i, d in enumerate(_SYN_DIMS))
    FILES = (DataFile("*.mat", "views: a 1-by-V or V-by-1 cell X / data, or variables x1..xV, of (N, d_v) or (d_v, "
                               "N) matrices (dense or sparse); labels: Y, y, gt, gnd, truth, label(s) or a cell of "
                               "identical label vectors (integral values); optionally *_train / *_test parts (a "
                               "shipped split)"),)
    INFO = ("Any .mat file of the multi-view learning family (views as a cell X or data, or variables x1..xV; labels "
            "Y, y, gt, gnd, truth, label(s) or a label cell; an optional shipped *_train / *_test split; found by "
            "name, or named with x_key / y_key), MATLAB "
            "v5/v7 or v7.3. Pass the file itself as the data root (--data-root path/to/data.mat) or its folder "
            "with the option file=NAME.mat. Splits are seeded and stratified (split_fractions, split_seed); "
            "views are z-scored with train statistics. See docs/datasets/multiview.md.")
    #: what the views are, for rankings grouped by family: "image", "text", "image+text" or "other" (None: an
    #: unregistered file); the registered datasets say theirs (``classic.FAMILIES``)
    MODALITY_FAMILY: ClassVar[str | None] = None
    #: file name inside a folder root (registered datasets) and its expected sha256
    FILE: ClassVar[str | None] = None
    SHA256: ClassVar[str | None] = None
    SYNTHETIC_VERSION = 1
    #: the views (count, names, widths) come from the file: the runner opens it to resolve dataset.modalities
    VIEWS_FROM_DATA: ClassVar[bool] = True
    #: split_seed draws the stratified test split too, unless outer_test_seed or the file's own test block fixes
    #: it: known once the file is open (split_seed_moves_test)
    SPLIT_SEED_MOVES_TEST: ClassVar[bool | None] = None
    FIXED_TEST_SPLIT_HINT: ClassVar[str] = (
        "use a file that ships its test split (*_train / *_test variables; shipped_split not false)")
    OPTIONS: ClassVar[frozenset[str]] = OPTIONS
    OPTION_TYPES: ClassVar[dict[str, Any]] = {"file": str, "x_key": str | list, "y_key": str, "views": list,
                                              "view_names": list, "split_seed": int, "standardize": bool,
                                              "verify_sha256": bool, "sha256": str,
                                              "allow_fractional_labels": bool, "allow_small_classes": bool,
                                              # {base, copies, noise, mask, seed}: see datasets/multiview_mat/copies.py
                                              "view_copies": dict,
                                              # a fixed outer test split (splits.outer_split): split_seed then
                                              # draws only the train / val partition of the other samples
                                              "outer_test_seed": int,
                                              # use a file's shipped *_train / *_test split (True)
                                              "shipped_split": bool}

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

    @classmethod
    def delivers(cls, options: Mapping[str, Any]) -> dict[str, Delivered]:
        """Nothing known before the file is read: its labels say the class count (the declared
        :attr:`num_classes` is the registered file's, and the synthetic twin's default)."""
        return {}

    # -- reading, validating, splitting, standardising -----------------------------------------
    def _prepare(self, synthetic: bool, run_seed: int) -> None:
        """:meth:`_prepare_views`, once per (file, adapter, options, split seed) in a process: a run opens its
        dataset several times (views, batch caps, data checks, the three splits), and on a large file (Cora:
        2708 x 9553 values) the views' checks and train statistics cost seconds each time. The state is kept
        for the last :data:`_PREPARED_SIZE` datasets; every instance indexes its own split from it (nothing
        shared is modified)."""
        try:
            st = self.mat_path.stat()
        except OSError:
            return self._prepare_views(synthetic, run_seed)  # the reader names the problem
        fixed = self.options.get("split_seed", 0) != "run"
        key = (type(self), str(self.mat_path.resolve()), st.st_mtime_ns, st.st_size, bool(synthetic),
               None if fixed else int(run_seed), repr(sorted(self.options.items())))
        hit = _PREPARED.get(key)
        if hit is not None:
            _PREPARED.move_to_end(key)
            self.__dict__.update(hit)
            return
        before = set(self.__dict__)
        self._prepare_views(synthetic, run_seed)
        _PREPARED[key] = {k: v for k, v in self.__dict__.items() if k not in before}
        while len(_PREPARED) > _PREPARED_SIZE:
            _PREPARED.popitem(last=False)

    def _prepare_views(self, synthetic: bool, run_seed: int) -> None:
        o = self.options
        path = self.mat_path
        x_key, y_key = o.get("x_key"), o.get("y_key")  # None: the layout is found by the variables' names
        expected = o.get("sha256", self.SHA256)
        if "sha256" in o:  # a digest the user gives is checked, never recorded and ignored
            if not re.fullmatch(r"[0-9a-fA-F]{64}", str(o["sha256"])):
                raise DatasetError(f"{self.id}: sha256={o['sha256']!r} is not a sha256 digest (64 hexadecimal "
                                   f"characters); it could never match {path.name}")
            if o.get("verify_sha256", True) is False:
                raise DatasetError(f"{self.id}: sha256={o['sha256']!r} with verify_sha256=False: the digest would be "
                                   "recorded and not checked; drop one of the two options")
        self.sha256 = _file_sha256(path)
        synthetic = synthetic or self._is_twin(path)
        if expected and not synthetic and o.get("verify_sha256", True) and self.sha256 != str(expected).lower():
            raise DatasetError(f"{self.id}: {path} has sha256 {self.sha256}, expected {expected} "
                               f"({_whose_file(self.sha256, self.id)}); to use it anyway pass verify_sha256=False "
                               "(fusebench run: --set dataset.options.verify_sha256=false; fusebench data prepare: "
                               "--opt verify_sha256=false; Python: build(..., verify_sha256=False))")
        raw = read_mat(path, x_key, y_key)
        self.file_format, self.layout = raw["format"], raw["layout"]
        x_key, y_key = self.layout.x_label, self.layout.y_label  # the variables read, as messages name them
        raw_parts = raw["parts"]
        n_views = len(raw_parts[0]["views"])
        for part in raw_parts:
            cell = part["cell_shape"]
            if cell is not None and (len(cell) > 2 or (len(cell) == 2 and min(cell) > 1)):
                raise DatasetError(f"{path}: {x_key} is a {'x'.join(map(str, cell))} cell array; expected 1-by-V or "
                                   "V-by-1")
            if len(part["views"]) != n_views:
                raise DatasetError(f"{path}: the {part['split']} part of {x_key} holds {len(part['views'])} views, the "
                                   f"{raw_parts[0]['split']} part {n_views}")
        if n_views < 2:
            raise DatasetError(f"{path}: {x_key} holds {n_views} view(s); a multi-view dataset needs at least 2")
        part_y = [label_vector(part["y"], path, y_key) for part in raw_parts]
        y, self.label_values = labels_to_ids(np.concatenate(part_y), path, y_key,
                                             allow_fractional=bool(o.get("allow_fractional_labels", False)))
        n = y.size
        # a shipped split: the train block's rows, then the test block's (recorded; used as the outer test split)
        sizes = [v.size for v in part_y]
        self.shipped_test_indices = (np.arange(sizes[0], n, dtype=np.int64) if self.layout.shipped_split else None)
        copies = None
        if o.get("view_copies") is not None:
            if o.get("views") is not None:
                raise DatasetError(f"{self.id}: views={o['views']!r} and view_copies are exclusive: view_copies "
                                   "replaces the views by copies of view_copies.base; drop views")
            copies = parse_view_copies(o["view_copies"], n_views, self.id)
        sel = copies["base"] if copies is not None else o.get("views")
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
        n_out = copies["copies"] if copies is not None else len(sel)  # the views the dataset will have
        if names is None:
            # a registered file's views keep their registered names (view{v} when the file has other views)
            declared_names = [m.name for m in type(self).MODALITIES]
            named = self.FILE is not None and len(declared_names) == n_views
            names = ([f"copy{c}" for c in range(n_out)] if copies is not None else
                     [declared_names[v] if named else f"view{v}" for v in sel])
        else:
            names = [str(s) for s in names]
            if len(names) != n_out or len(set(names)) != len(names) or not all(names):
                what = "one per copy (view_copies.copies)" if copies is not None else "one per selected view"
                raise DatasetError(f"{self.id}: view_names={o['view_names']!r} must be {n_out} distinct non-empty "
                                   f"names, {what}")
        base_names = [f"view{v}" for v in sel] if copies is not None else names
        # the synthetic twin is written samples x features (synthetic.py): its axes are known, never guessed (a view
        # as wide as the twin has samples made "auto" warn on every --synthetic run of mv-handwritten)
        sample_axis = o.get("sample_axis", 0 if synthetic else "auto")
        if isinstance(sample_axis, (list, tuple)):
            if len(sample_axis) != n_views:
                raise DatasetError(f"{self.id}: sample_axis={sample_axis!r} must be one value or a list of {n_views} "
                                   f"(one per view of {path.name})")
            axes = list(sample_axis)
        else:
            axes = [sample_axis] * n_views
        suffixes = dict(zip((p["split"] for p in raw_parts), self.layout.parts))
        for part, n_part in zip(raw_parts, sizes):  # labels of the wrong length: named as such, not as view 0's fault
            suffix = suffixes[part["split"]]
            check_sample_counts(part["views"], n_part, path, self.layout.y_name + suffix,
                                [view_variable(self.layout, i, suffix) for i in range(n_views)])
        file_axes = {a for part, n_part in zip(raw_parts, sizes) for x in part["views"]
                     if (a := unambiguous_axis(x, n_part)) is not None}  # how the file's views are stored
        views, layouts = [], []
        for v in sel:
            blocks, block_layouts = [], []
            block_axes, why = part_axes([part["views"][v] for part in raw_parts], sizes, axes[v], file_axes)
            if why == "every other view of the file":
                log.warning("%s: view %d (%s) is square, both axes match the labels; taking %s as samples, as %s "
                            "is stored (pass sample_axis to say otherwise)", path, v, view_variable(self.layout, v),
                            "columns" if 1 in block_axes else "rows", why)
            for part, n_part, axis in zip(raw_parts, sizes, block_axes):
                suffix = suffixes[part["split"]]
                x, layout = orient(part["views"][v], n_part, v, path, axis, view_variable(self.layout, v, suffix),
                                   self.layout.y_name + suffix)
                vals = x.data if sp.issparse(x) else x
                if np.issubdtype(np.asarray(vals).dtype, np.floating):
                    bad_count = int((~np.isfinite(vals)).sum())
                    if bad_count:
                        raise DatasetError(f"{path}: view {v} ({base_names[len(views)]}) has {bad_count} NaN/Inf values")
                blocks.append(np.asarray(x.toarray() if sp.issparse(x) else x, dtype=np.float64))
                block_layouts.append(layout)
            if len({b.shape[1] for b in blocks}) > 1:
                raise DatasetError(f"{path}: view {v} has {[b.shape[1] for b in blocks]} features in the "
                                   f"{[p['split'] for p in raw_parts]} parts; each view needs the same features in both")
            views.append(blocks[0] if len(blocks) == 1 else np.concatenate(blocks, axis=0))
            layouts.append(" / ".join(dict.fromkeys(block_layouts)))
        # splits
        fractions = parse_fractions(o.get("split_fractions"))
        split_seed = o.get("split_seed", 0)
        split_seed = run_seed if split_seed == "run" else split_seed
        try:
            split_seed = int(split_seed)
        except (TypeError, ValueError):
            raise DatasetError(f"{self.id}: split_seed={o['split_seed']!r} must be an integer or 'run'") from None
        outer = o.get("outer_test_seed")
        if outer is not None and (isinstance(outer, bool) or not isinstance(outer, int) or outer < 0):
            raise DatasetError(f"{self.id}: outer_test_seed={outer!r} must be a non-negative integer")
        shipped = self.shipped_test_indices if o.get("shipped_split", True) else None
        if shipped is not None and outer is not None:  # never recorded and ignored
            raise DatasetError(f"{path}: outer_test_seed={outer} draws a test split, but the file ships its own "
                               f"({shipped.size} *_test samples), which is used as the test split; drop "
                               "outer_test_seed, or pass shipped_split=false to draw the test split with it")
        if shipped is not None:  # the file's own test block is the (outer) test split; train / val come from the rest
            parts = outer_split(y, fractions, 0, split_seed, test=shipped)
        else:
            parts = (stratified_split(y, fractions, split_seed) if outer is None
                     else outer_split(y, fractions, outer, split_seed))
        self._outer_test_seed = outer
        empty = [s for s in SPLIT_NAMES if parts[s].size == 0]
        if empty:
            raise DatasetError(f"{path}: split_fractions {list(fractions)} leave split(s) {empty} empty with {n} samples")
        if shipped is not None:  # every class needs enough shipped-train samples for train and val
            rest = np.setdiff1d(np.arange(n), shipped)
            f_tv = fractions[0] + fractions[1]
            self._check_class_sizes(y[rest], (fractions[0] / f_tv, fractions[1] / f_tv), path,
                                    f"{y_key} (shipped train part)",
                                    bool(o.get("allow_small_classes", False)))
        else:
            self._check_class_sizes(y, fractions, path, y_key, bool(o.get("allow_small_classes", False)))
        standardize = bool(o.get("standardize", True))
        for v, name, x in zip(sel, base_names, views):
            problem = view_problem(x, parts["train"], standardize)
            if problem:
                leave_out = ("choose another view_copies.base" if copies is not None else
                             "leave it out with the option views=[...] (the indices of the views to keep)")
                raise DatasetError(f"{path}: view {v} ({name}) {problem}. Fix or rescale it, or {leave_out}")
        self.stats = []
        for x in views:
            if standardize:
                self.stats.append(zscore_stats(x[parts["train"]]))
        num_classes = int(self.label_values.size)
        declared = {m.name: m.channels for m in type(self).MODALITIES}
        if copies is not None:  # the base views (standardised), concatenated, replaced by k augmented copies
            base = np.concatenate([(x - m) / sc for x, (m, sc) in zip(views, self.stats)] if standardize else views,
                                  axis=1)
            views = augmented_copies(base, parts["train"], copies["copies"], copies["noise"], copies["mask"],
                                     copies["seed"], standardized=standardize)
            self.stats = []  # already standardised (before the augmentation): _index takes the copies as they are
            what = (f"copy {{c}} of view(s) {copies['base']} of {path.name} ({base.shape[1]}-d; noise "
                    f"{copies['noise']:g}, mask {copies['mask']:g}, seed {copies['seed']})")
            self.MODALITIES = tuple(Modality(name, "vector", int(base.shape[1]), description=what.format(c=c))
                                    for c, name in enumerate(names))
        else:
            self.MODALITIES = tuple(
                Modality(name, "vector", int(x.shape[1]),
                         description=f"view {v} of {path.name} ({x.shape[1]}-d, stored {lay})")
                for name, v, x, lay in zip(names, sel, views, layouts))
        if (self.FILE and not synthetic and o.get("views") is None and o.get("view_names") is None
                and copies is None):
            got = {m.name: m.channels for m in self.MODALITIES}
            if got != declared or num_classes != type(self).num_classes:
                log.warning("%s: %s has views %s and %d classes; the registered dataset declares %s and %d",
                            self.id, path, got, num_classes, declared, type(self).num_classes)
        self.num_classes = num_classes
        self._parts, self._y_all, self._views_all, self._sel = parts, y, views, sel
        self._layouts, self._fractions, self._split_seed, self._standardize = layouts, fractions, split_seed, standardize
        self._view_copies = copies

    def _check_class_sizes(self, y: np.ndarray, fractions: tuple[float, float, float], path: Path, y_key: str,
                           allow: bool) -> None:
        """Every class needs :func:`.splits.min_class_size` samples to appear in train, val and test; a
        class missing from train cannot be learnt and one missing from val/test cannot be scored."""
        need = min_class_size(fractions)
        counts = np.bincount(y, minlength=self.label_values.size)
        small = np.flatnonzero(counts < need)
        if not small.size:
            return
        listed = ", ".join(f"{self.label_values[c].item():g}: {int(counts[c])}" for c in small[:10])
        more = f", ... ({small.size - 10} more)" if small.size > 10 else ""
        text = (f"{path}: {small.size} of {counts.size} classes of {y_key} have fewer than {need} samples, the fewest "
                f"split_fractions {list(fractions)} need so that every class appears in train, val and test "
                f"(floor(fraction x class size) >= 1 for each split); class (label value): samples = "
                f"{{{listed}{more}}}")
        if not allow:
            raise DatasetError(text + ". A class missing from train cannot be learnt and one missing from val or test "
                               "cannot be scored (accuracy and clustering scores become meaningless). Merge or drop "
                               "these classes, change split_fractions, or pass the option allow_small_classes=True "
                               "(--set dataset.options.allow_small_classes=true) to run anyway")
        log.warning("%s; allow_small_classes=True: running anyway", text)

    def _index(self) -> list[Any]:
        rows = self._parts[self.split]
        self._rows = rows
        self._x = {}
        for i, (m, x) in enumerate(zip(self.MODALITIES, self._views_all)):
            xs = x[rows]
            if self._standardize and self._view_copies is None:
                mean, scale = self.stats[i]
                xs = (xs - mean) / scale
            self._x[m.name] = torch.from_numpy(np.ascontiguousarray(xs, dtype=np.float32))
        self._y = torch.from_numpy(self._y_all[rows])
        del self._views_all  # only this split's rows are kept
        return rows.tolist()

    def _load_raw(self, index: int) -> dict[str, Any]:
        return {
            "modalities": {name: x[index].clone() for name, x in self._x.items()},
            "target": self._y[index].clone(),
            "meta": self._meta(index),
        }

    def _in_memory(self) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        return self._x, self._y

    def _meta(self, index: int) -> dict[str, Any]:
        row = int(self._rows[index])
        return {"id": f"{self.mat_path.stem}-{row}", "index": row}

    def source_files(self) -> list[Path]:
        return [self.mat_path.resolve()]

    def split_seed_moves_test(self) -> bool:
        """False when the test split is fixed: drawn once with ``outer_test_seed``, or the file's own ``*_test``
        block (used unless ``shipped_split=false``); else ``split_seed`` draws it with train and val."""
        fixed_by_file = self.shipped_test_indices is not None and bool(self.options.get("shipped_split", True))
        return not (self._outer_test_seed is not None or fixed_by_file)

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
            "layout": {"views": self.layout.x_label, "labels": self.layout.y_label},
            # a file's own train / test split: its test block is the test split unless shipped_split=False
            **({"shipped_split": {"train": int(self._y_all.size - self.shipped_test_indices.size),
                                  "test": int(self.shipped_test_indices.size),
                                  "used": bool(self.options.get("shipped_split", True))}}
               if self.shipped_test_indices is not None else {}),
            # the fixed outer test split's seed (absent: the test split follows ``seed`` too)
            **({"outer_test_seed": self._outer_test_seed} if self._outer_test_seed is not None else {}),
            "stratified": True, "standardize": "zscore_train" if self._standardize else "none",
            "counts": {s: int(self._parts[s].size) for s in SPLIT_NAMES},
            "class_counts": {s: np.bincount(y[self._parts[s]], minlength=c).tolist() for s in SPLIT_NAMES},
            **({"view_copies": dict(self._view_copies)} if self._view_copies is not None else {}),
        }
