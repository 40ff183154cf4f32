"""NYUv2 folder layouts: detecting the layout, listing the frames of a split, the val carve.

Layouts (``layout=`` option, auto-detected by :meth:`_LayoutIndex._detect_layout`; see
docs/datasets/nyuv2.md):

* ``official``: ``nyu_depth_v2_labeled.mat`` + ``splits.mat`` + ``classMapping40.mat`` (+
  ``class13Mapping.mat`` for 13 classes), each at the root or under ``meta/``; optionally label PNGs
  ``{train,test}_labels_{40,13}/`` (formats: :mod:`fusebench.datasets.nyuv2.formats`).
* ``mtan``: the MTAN npy release ``{train,val}/{image,depth,normal,label}/<i>.npy``; MTAN's ``val``
  folder is the official test split, and a ``splits.mat`` next to the folders only adds frame numbers.

``train`` / ``val`` are carved out of the official train frames (MTAN: the files of ``train/``) by
:func:`carve_val`.
"""

from __future__ import annotations

import hashlib
import logging
import re
from pathlib import Path

import numpy as np

from fusebench.datasets.base import DatasetError, DatasetNotFoundError

from .formats import LABELED_MAT, MAP13_MAT, MAP40_MAT, SPLITS_MAT, _find, _Frame, _loadmat

log = logging.getLogger(__package__)  # the logger of fusebench.datasets.nyuv2, as before the split

LAYOUTS = ("official", "mtan")
_MTAN_FOLDERS = ("image", "depth", "normal", "label")


def carve_val(frames: list[int], val_fraction: float, split_seed: int) -> tuple[list[int], list[int]]:
    """Split official train frames into (train, val): val = the ``round(val_fraction * n)`` frames with
    the smallest ``sha256(f"{split_seed}:{frame}")``. Both lists sorted ascending."""
    if not 0.0 <= val_fraction < 1.0:
        raise DatasetError(f"nyuv2: val_fraction must be in [0, 1), got {val_fraction}")
    n_val = int(round(val_fraction * len(frames)))
    keyed = sorted(frames, key=lambda f: hashlib.sha256(f"{split_seed}:{f}".encode()).hexdigest())
    val = set(keyed[:n_val])
    return sorted(f for f in frames if f not in val), sorted(val)


#: frames of the NYUv2 labeled set (nyu_depth_v2_labeled.mat): the upper bound of a splits.mat index when the
#: .mat itself is not read (with it, its own frame count is the bound)
NUM_LABELED = 1449


def split_indices(path: Path, mat: dict, key: str) -> list[int]:
    """The 1-based frame numbers of variable ``key`` of ``splits.mat`` (``trainNdxs`` / ``testNdxs``).

    Each must be a finite integer >= 1 (a real number: no string, complex or object array), listed once.
    Any other value raises a DatasetError naming the file, the variable, the position and the value (NaN
    used to give a traceback, 1.5 was read as frame 1, a repeated frame was read twice).
    """
    arr = np.asarray(mat[key])
    if arr.dtype.kind not in "biuf":
        raise DatasetError(f"nyuv2: {path}: variable {key!r} must hold 1-based frame numbers (integers), got dtype "
                           f"{arr.dtype}")
    vals = arr.astype(np.float64).ravel()
    bad = ~np.isfinite(vals) | (vals != np.round(vals)) | (vals < 1)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise DatasetError(f"nyuv2: {path}: variable {key!r} entry {i} is {vals[i]:g}; frame numbers must be "
                           f"finite integers >= 1 (1-based), {int(bad.sum())} of {vals.size} entries are not")
    out = [int(v) for v in vals]
    uniq, counts = np.unique(vals, return_counts=True)
    if (counts > 1).any():
        dup = [int(v) for v in uniq[counts > 1]]
        raise DatasetError(f"nyuv2: {path}: variable {key!r} lists frame(s) {dup[:10]}{' ...' if len(dup) > 10 else ''} "
                           f"more than once; each frame may appear once in a split")
    return out


def check_upper(path: Path, key: str, frames: list[int], upper: int, what: str) -> None:
    """Every frame number of ``key`` must be <= ``upper`` (the frames ``what`` holds)."""
    over = [f for f in frames if f > upper]
    if over:
        raise DatasetError(f"nyuv2: {path}: variable {key!r} refers to frame {max(over)} but {what} holds {upper} "
                           f"({len(over)} entries out of range 1..{upper})")


class _LayoutIndex:
    """Mixin of :class:`~fusebench.datasets.nyuv2.NYUv2`: layout detection and the frame index."""

    def _detect_layout(self, layout: str | None) -> str:
        root = self.root
        if layout is not None:
            if layout not in LAYOUTS:
                raise DatasetError(f"nyuv2: layout={layout!r} is not one of {LAYOUTS}")
            return layout
        mtan = [root / d / "image" for d in ("train", "val") if (root / d / "image").is_dir()]
        if mtan and (root / LABELED_MAT).is_file():
            raise DatasetError(
                f"nyuv2: {root} holds both {LABELED_MAT} (layout 'official') and MTAN folders "
                f"({', '.join(str(p) for p in mtan)}: layout 'mtan'); pass layout='official' or layout='mtan'"
            )
        if mtan:  # a splits.mat next to the MTAN folders only adds frame numbers
            return "mtan"
        if (root / LABELED_MAT).is_file() or _find(root, SPLITS_MAT) is not None:
            return "official"
        raise DatasetNotFoundError(
            f"nyuv2: no NYUv2 layout recognised under {root}. Looked for {LABELED_MAT} / {SPLITS_MAT} "
            f"(at the root or meta/: layout 'official') and train/image/ or val/image/ (layout 'mtan').\n"
            f"{self.info()}"
        )

    def _require(self, name: str, why: str) -> Path:
        p = _find(self.root, name)
        if p is None:
            raise DatasetNotFoundError(
                f"nyuv2: missing {name} ({why}); looked in {self.root} and {self.root / 'meta'}.\n{self.info()}"
            )
        return p

    # official ---------------------------------------------------------------------------------
    def _index_official(self) -> list[_Frame]:
        sp = self._require(SPLITS_MAT, "official train/test split")
        splits = _loadmat(sp, ("trainNdxs", "testNdxs"))
        self._split_file = sp
        train = split_indices(sp, splits, "trainNdxs")
        test = split_indices(sp, splits, "testNdxs")
        if set(train) & set(test):
            raise DatasetError(f"nyuv2: {sp}: trainNdxs and testNdxs overlap")
        self._train_set = frozenset(train)
        if self.split == "test":
            chosen = sorted(test)
        else:
            tr, va = carve_val(sorted(train), self.val_fraction, self.split_seed)
            chosen = tr if self.split == "train" else va

        self._mat_path = self.root / LABELED_MAT
        need_mat = bool(self.modalities) or self.label_source == "mat"
        self.num_frames = None
        if need_mat:
            if not self._mat_path.is_file():
                raise DatasetNotFoundError(
                    f"nyuv2: missing {self._mat_path} (the labeled frames; needed for modalities "
                    f"{self.modalities} / label_source={self.label_source!r}).\n{self.info()}"
                )
            self.num_frames, self.frame_size = self._check_mat()
            for key, frames in (("trainNdxs", train), ("testNdxs", test)):
                check_upper(sp, key, frames, self.num_frames, str(self._mat_path))
        else:
            for key, frames in (("trainNdxs", train), ("testNdxs", test)):
                check_upper(sp, key, frames, NUM_LABELED, "the NYUv2 labeled set")
        self._lut = self._label_lut() if self.label_source == "mat" else None
        if not self.class_names:
            self.class_names = self._official_class_names()
        return [_Frame(pos=f - 1, frame=f, folder="train" if f in self._train_set else "test") for f in chosen]

    # mtan -------------------------------------------------------------------------------------
    def _index_mtan(self) -> list[_Frame]:
        folder = "val" if self.split == "test" else "train"
        base = self.root / folder
        if not base.is_dir():
            raise DatasetNotFoundError(
                f"nyuv2: split {self.split!r} of the mtan layout needs {base}/{{image,depth,normal,label}}/ "
                f"(MTAN's {folder!r} folder{'; its val = official test' if folder == 'val' else ''}).\n{self.info()}"
            )
        need = {"label"} | {"image" if m == "rgb" else m for m in self.modalities}
        if "normal" in self.modalities and self.normal_source == "computed":
            need.add("depth")
        counts = {}
        for sub in sorted(need):
            d = base / sub
            if not d.is_dir():
                raise DatasetNotFoundError(f"nyuv2: missing folder {d} (mtan layout)")
            nums = sorted(int(m.group(1)) for p in d.iterdir() if (m := re.fullmatch(r"(\d+)\.npy", p.name)))
            if nums != list(range(len(nums))):
                raise DatasetError(f"nyuv2: {d}: expected files 0.npy .. {len(nums) - 1}.npy without gaps")
            counts[sub] = len(nums)
        if len(set(counts.values())) != 1:
            raise DatasetError(f"nyuv2: {base}: folders hold different numbers of frames: {counts}")
        n = next(iter(counts.values()))
        self._split_file = base / "label"  # the split is the folder: its label files list the frames
        # frame ids from splits.mat when it is present (MTAN keeps the official order)
        sp = _find(self.root, SPLITS_MAT)
        ids = list(range(-1, -n - 1, -1))
        if sp is not None:
            s = _loadmat(sp, ("trainNdxs", "testNdxs"))
            key = "testNdxs" if folder == "val" else "trainNdxs"
            official = split_indices(sp, s, key)
            check_upper(sp, key, official, NUM_LABELED, "the NYUv2 labeled set")
            if len(official) == n:
                ids = official
            else:
                log.warning("nyuv2: %s lists %d frames for MTAN's %r folder but %s holds %d; frame numbers "
                            "are left unknown (-1)", sp, len(official), folder, base, n)
        positions = list(range(n))
        if self.split != "test":
            tr, va = carve_val(positions, self.val_fraction, self.split_seed)
            positions = tr if self.split == "train" else va
        self.class_names = ["bed", "books", "ceiling", "chair", "floor", "furniture", "objects", "picture",
                            "sofa", "table", "tv", "wall", "window"]
        return [_Frame(pos=i, frame=ids[i] if ids[i] > 0 else -1, folder=folder) for i in positions]

    def source_files(self) -> list[Path]:
        """The input files the samples of this split depend on (for the prepared-cache manifest).

        MTAN: the split's npy files, and ``splits.mat`` where one lies beside them (:meth:`_index_mtan` reads the
        frame numbers of ``meta["frame"]`` from it, so a changed ``splits.mat`` makes a prepared cache stale)."""
        if self.layout == "mtan":
            base = self.root / ("val" if self.split == "test" else "train")
            files = sorted(p for sub in _MTAN_FOLDERS if (base / sub).is_dir() for p in (base / sub).glob("*.npy"))
            splits = _find(self.root, SPLITS_MAT)
            return files + ([splits] if splits is not None else [])
        files = [p for p in (_find(self.root, n) for n in (SPLITS_MAT, MAP40_MAT, MAP13_MAT)) if p is not None]
        if self._mat_path.is_file():
            files.append(self._mat_path)
        if self.label_source == "png":
            for fr in self.samples:
                files.append(self.root / f"{fr.folder}_labels_{self.classes}" /
                             f"new_nyu_class{self.classes}_{fr.frame:04d}.png")
        return files
