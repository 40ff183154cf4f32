"""Sentiment file layouts: which layout a root holds, where its files are, and the ``csd`` layout.

* layout detection (option ``layout="auto"``): a single file is an MMSA pickle (a dict with a
  ``train`` key) or else a single-clip MMSA-FET feature file; a folder holding the adapter's MMSA
  pickle (or ``file=``) is ``mmsa``; a folder of ``.csd`` files is ``csd`` (``mosi``/``mosei`` only);
* ``mmsa`` / ``feature_file``: the pickle's path (:meth:`_Layouts._pickle_path`; split keys
  ``train`` / ``valid`` / ``test``, our ``val`` reads ``valid``);
* ``csd``: the computational sequence of each modality (``csd_files=`` or the file-name patterns of
  :data:`_CSD_PATTERNS`), samples = rows of the labels sequence, folds from ``folds=``, ``folds.json``,
  the adapter's ``STANDARD_FOLDS`` (MOSI, MOSEI: :mod:`.folds`) when they hold every video of the labels
  (MOSEI: when they hold some, the others in no split, see :meth:`_Layouts._standard_folds`), else the
  deterministic video-level split :func:`_video_split`; a sample's features are sliced to its
  segment (``csd_alignment="slice"``) or averaged over its word intervals (``"text"``).

:class:`_Layouts` is the mixin of the sentiment adapters holding these steps.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..base import DatasetError, Modality
from ..csd import align_to_reference, read_csd, slice_segment

log = logging.getLogger(__name__)

_SPLIT_KEYS = {"train": "train", "val": "valid", "test": "test"}
_MODS = ("text", "audio", "vision")
_CSD_PATTERNS = {
    "text": ("*WordVectors*.csd", "*GloVe*.csd", "*glove*.csd", "*BERT*.csd"),
    "audio": ("*COVAREP*.csd", "*OpenSMILE*.csd", "*opensmile*.csd"),
    "vision": ("*Facet*.csd", "*FACET*.csd", "*OpenFace*.csd"),
}


#: the warnings about a labels sequence said in this process, by (file, its mtime and size, the text): the train,
#: val and test splits are three datasets read from one file (and a study reads it for every cell), so a warning
#: about the file is said once for a version of it, not once per split opened
_SAID: set[tuple[Any, ...]] = set()


def _warn_once(path: str | Path, msg: str, *args: Any) -> None:
    """``log.warning(msg, *args)`` about the labels sequence ``path``, unless this text was said about this version
    of the file (same mtime and size) in this process."""
    try:
        st = Path(path).stat()
        version: tuple[Any, ...] = (str(Path(path).resolve()), st.st_mtime_ns, st.st_size)
    except OSError:
        version = (str(path),)
    key = version + (msg % args,)
    if key in _SAID:
        return
    _SAID.add(key)
    log.warning(msg, *args)


def _video_split(videos: list[str], fractions: tuple[float, float, float]) -> dict[str, list[str]]:
    """Deterministic video-level split: order by sha256 of the id, cut by ``fractions``."""
    order = sorted(videos, key=lambda v: hashlib.sha256(v.encode()).hexdigest())
    total = sum(fractions)
    n = len(order)
    n_train = int(math.floor(n * fractions[0] / total + 0.5))
    n_val = int(math.floor(n * fractions[1] / total + 0.5))
    return {"train": order[:n_train], "val": order[n_train:n_train + n_val], "test": order[n_train + n_val:]}


class _Layouts:
    """Layout detection, the pickle path and the ``csd`` layout of the sentiment adapters."""

    def _detect_layout(self) -> str:
        root = self.root
        if root.is_file():
            if root.suffix == ".csd":
                raise DatasetError(f"{root}: pass the folder holding the .csd files as root, not one file")
            obj = self._read_pickle(root)
            return "mmsa" if isinstance(obj, dict) and "train" in obj else "feature_file"
        if self._opts_rest.get("file") or any((root / f).is_file() for f in self.PICKLES.values()):
            return "mmsa"
        if self.SUPPORTS_CSD and any(root.glob("*.csd")):
            return "csd"
        pickles = f"MMSA pickle ({', '.join(self.PICKLES.values())})"
        what = f"neither an {pickles} nor .csd computational sequences" if self.SUPPORTS_CSD else f"no {pickles}"
        raise DatasetError(f"{self.id}: {root} holds {what}.\n{self.info()}")

    def _pickle_path(self) -> Path:
        if self.root.is_file():
            return self.root
        name = self._opts_rest.get("file")
        if name is None:
            name = self.PICKLES["aligned" if self._opts_rest.get("aligned", False) else "unaligned"]
        path = self.root / name
        if not path.is_file():
            present = sorted(p.name for p in self.root.glob("*.pkl"))
            raise DatasetError(f"{self.id}: {path} does not exist (pickles in {self.root}: {present}).\n{self.info()}")
        return path

    def _csd_file(self, modality: str) -> Path:
        names = self._opts_rest.get("csd_files", {}) or {}
        if modality in names:
            p = self.root / names[modality]
            if not p.is_file():
                raise DatasetError(f"{self.id}: csd_files[{modality!r}] = {p} does not exist")
            return p
        pats = ("*Labels*.csd",) if modality == "labels" else _CSD_PATTERNS[modality]
        if modality == "labels" and self._opts_rest.get("labels_csd"):
            return self.root / self._opts_rest["labels_csd"]
        hits = sorted({p for pat in pats for p in self.root.glob(pat)})
        if len(hits) != 1:
            present = sorted(p.name for p in self.root.glob("*.csd"))
            what = "labels" if modality == "labels" else f"modality {modality!r}"
            raise DatasetError(f"{self.id}: {'no' if not hits else 'several'} computational sequence for {what} "
                               f"in {self.root} (patterns {list(pats)}; .csd files there: {present}); name it "
                               f"with csd_files={{{modality!r}: 'FILE.csd'}}")
        return hits[0]

    def _index_csd(self) -> list[tuple[str, int]]:
        labels_path = self._csd_file("labels")
        labels = read_csd(labels_path, labels=True)
        self.source = str(labels_path)
        empty = [v for v in labels.videos if labels.features[v].shape[0] == 0]
        if empty:  # the SDK's integrity check passes them and its alignment makes no entry of them: said, not refused
            _warn_once(labels_path, "%s: %s holds %d of its %d video(s) with no labelled segment (0 rows of 'features' "
                       "and 'intervals'); they give no sample in any split: %s", self.id, labels_path, len(empty),
                       len(labels.videos), ", ".join(map(repr, empty[:5])) + (", ..." if len(empty) > 5 else ""))
        folds = self._opts_rest.get("folds")
        self._split_file = "the folds= option" if folds is not None else f"{labels_path} (deterministic video split)"
        if folds is None and (self.root / "folds.json").is_file():
            try:
                folds = json.loads((self.root / "folds.json").read_text())
            except (OSError, UnicodeDecodeError, ValueError) as e:
                raise DatasetError(f"{self.id}: cannot read {self.root / 'folds.json'} as JSON ({e}); expected "
                                   '{"train": [video ids], "valid": [...], "test": [...]}') from None
            self._split_file = self.root / "folds.json"
        if folds is not None:
            where = self._split_file
            bad = (f"a {type(folds).__name__}" if not isinstance(folds, dict) else next(
                (f"split {k!r} holding {v!r:.60}" for k, v in folds.items()
                 if not (isinstance(v, list) and all(isinstance(x, str) for x in v))), None))
            if bad is not None:
                raise DatasetError(f"{self.id}: {where} must map each split to a list of video ids (strings), got "
                                   f"{bad}")
            seen: dict[str, str] = {}
            for k, vids in folds.items():
                for v in vids:
                    if v in seen:
                        where_else = "twice in that split" if seen[v] == k else f"in split {k!r} too"
                        raise DatasetError(f"{self.id}: {where}: video {v!r} is listed in split {seen[v]!r} and "
                                           f"{where_else}; every video must belong to exactly one split (a video "
                                           f"in two splits leaks its segments between them)")
                    seen[v] = k
            key = self.split if self.split in folds else _SPLIT_KEYS[self.split]
            if key not in folds:
                raise DatasetError(f"{self.id}: folds lack split {self.split!r} (keys {sorted(folds)})")
            videos = [v for v in folds[key] if v in labels.features]
            unknown = [v for v in folds[key] if v not in labels.features]
            if unknown:
                log.warning("%s: %d of the %d video ids of split %r in %s are not in the labels %s and are left "
                            "out: %s", self.id, len(unknown), len(folds[key]), key, where, labels_path,
                            ", ".join(map(repr, unknown[:5])) + (", ..." if len(unknown) > 5 else ""))
            unlisted = [v for v in labels.videos if v not in seen]
            if unlisted:  # a subset is a choice the folds may make, but not a silent one
                _warn_once(labels_path, "%s: %s lists no split for %d of the %d labelled videos of %s (%d segments); "
                           "they are in no split: %s", self.id, where, len(unlisted), len(labels.videos), labels_path,
                           sum(int(labels.features[v].shape[0]) for v in unlisted),
                           ", ".join(map(repr, unlisted[:5])) + (", ..." if len(unlisted) > 5 else ""))
        elif self._standard_folds(labels):
            videos = [v for v in self.STANDARD_FOLDS[_SPLIT_KEYS[self.split]] if v in labels.features]
            self._split_file = f"the standard folds of {self.id} (CMU-MultimodalSDK)"
        else:
            videos = _video_split(labels.videos, self.FOLD_FRACTIONS)[self.split]
        self.csd_alignment = self._opts_rest.get("csd_alignment", "slice")
        if self.csd_alignment not in ("slice", "text"):
            raise DatasetError(f"{self.id}: csd_alignment={self.csd_alignment!r} must be 'slice' or 'text'")
        need = list(self.modalities)
        if self.csd_alignment == "text" and "text" not in need and need:
            need.append("text")
        self._csd: dict[str, Any] = {}
        for m in need:
            seq = read_csd(self._csd_file(m), videos=videos)
            for vid, x in seq.features.items():
                if not np.issubdtype(x.dtype, np.number):
                    raise DatasetError(f"{seq.path}: features of video {vid!r} are {x.dtype}, not numbers "
                                       f"(word tokens?); use the word-vector sequence for text")
                if not np.isfinite(x).all():
                    if self.nonfinite == "error":
                        row = int(np.flatnonzero(~np.isfinite(x).all(axis=1))[0])
                        raise DatasetError(f"{seq.path}: video {vid!r} row {row} of 'features' has NaN/Inf; "
                                           f"pass nonfinite='zero' to replace them by 0")
                    seq.features[vid] = np.nan_to_num(x, nan=0.0, posinf=0.0, neginf=0.0)
            self._csd[m] = seq
        self.MODALITIES = tuple(
            Modality(m.name, m.kind, self._csd[m.name].dim if m.name in self._csd else m.channels,
                     m.variable_length, m.description)
            for m in type(self).MODALITIES
        )
        self._labels_csd = labels
        lo, hi = self.LABEL_RANGE
        samples = []
        for vid in videos:
            y = labels.features[vid]
            for i in range(y.shape[0]):
                if not (lo - 1e-6 <= float(y[i, 0]) <= hi + 1e-6):
                    raise DatasetError(f"{labels_path}: video {vid!r} segment {i}: label {y[i, 0]} outside [{lo}, {hi}]")
                samples.append((vid, i))
        return samples

    def _standard_folds(self, labels: Any) -> bool:
        """Whether the split comes from :attr:`STANDARD_FOLDS` (no ``folds=`` / ``folds.json``): every video of the
        labels sequence is in them. None of them (a twin's or another corpus's ids): the deterministic video split.
        Some but not all: with ``STANDARD_FOLDS_UNLISTED == "leave_out"`` (MOSEI, whose official labels hold
        videos the SDK's folds do not list) the standard folds, the other videos in no split and a warning naming
        them; else (MOSI) an error naming the file and the videos the standard folds lack (a split of the
        dataset's own videos by the standard folds, the others by hash, would be neither)."""
        if not self.STANDARD_FOLDS:
            return False
        known = {v for vids in self.STANDARD_FOLDS.values() for v in vids}
        outside = [v for v in labels.videos if v not in known]
        if not outside:
            return True
        if len(outside) == len(labels.videos):
            return False
        if self.STANDARD_FOLDS_UNLISTED == "leave_out":
            _warn_once(labels.path, "%s: %s holds %d video(s) (%d segments) that the standard folds of %s do not list "
                       "(%s); they are in no split, as in the CMU-MultimodalSDK's folds (pass folds= or a folds.json "
                       "to place them)", self.id, labels.path, len(outside),
                       sum(int(labels.features[v].shape[0]) for v in outside), self.id,
                       ", ".join(map(repr, outside[:5])) + (", ..." if len(outside) > 5 else ""))
            return True
        raise DatasetError(
            f"{self.id}: {labels.path} holds {len(outside)} video(s) outside the standard folds of {self.id} "
            f"({', '.join(map(repr, outside[:5]))}{', ...' if len(outside) > 5 else ''}) beside "
            f"{len(labels.videos) - len(outside)} of their videos; give the folds of every video with "
            f"folds={{'train': [...], 'valid': [...], 'test': [...]}} or a folds.json in {self.root}")

    def _load_csd(self, index: int) -> dict[str, Any]:
        vid, i = self.samples[index]
        start, end = (float(t) for t in self._labels_csd.intervals[vid][i])
        mods = {}
        ref = None
        if self.csd_alignment == "text" and "text" in self._csd and vid in self._csd["text"].features:
            t_iv = self._csd["text"].intervals[vid]
            overlap = np.minimum(t_iv[:, 1], end) - np.maximum(t_iv[:, 0], start)
            ref = t_iv[overlap > 0]
        for m in self.modalities:
            seq = self._csd[m]
            if vid not in seq.features:
                continue  # video absent from this sequence: the modality is missing (presence mask)
            if ref is not None:
                x = align_to_reference(seq.features[vid], seq.intervals[vid], ref)
            else:
                x = slice_segment(seq.features[vid], seq.intervals[vid], start, end)
            if x.shape[0] == 0:
                continue
            mods[m] = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
        return {
            "modalities": mods,
            "target": torch.tensor(float(self._labels_csd.features[vid][i, 0]), dtype=torch.float32),
            "meta": {"id": f"{vid}[{i}]", "video": vid, "segment": i, "interval": (start, end),
                     "source": self.source},
        }
