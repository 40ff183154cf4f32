"""Multimodal sentiment adapters ``mosi``, ``mosei`` (CMU) and ``chsims`` (CH-SIMS), from the MMSA
feature pickles, single-clip MMSA-FET feature files and CMU-MultimodalSDK computational sequences.

Datasets: CMU-MOSI (Zadeh et al., IEEE Intelligent Systems 2016), CMU-MOSEI (Zadeh et al., ACL 2018),
CH-SIMS (Yu et al., ACL 2020). Task: regression of the utterance sentiment; CMU labels in [-3, 3],
CH-SIMS labels in [-1, 1] with unimodal labels ``T``, ``A``, ``V`` as ``extra_targets``.

Layouts (option ``layout``; ``"auto"`` picks from what ``root`` holds, see docs/datasets/sentiment.md):

* ``"mmsa"``: the MMSA pickles (``unaligned_50.pkl`` / ``aligned_50.pkl`` for MOSI/MOSEI,
  ``unaligned_39.pkl`` for CH-SIMS; option ``file`` names another). Top level ``{"train", "valid",
  "test"}`` (our split ``val`` reads ``valid``); each split a dict of ``text`` [n, T, 768] BERT
  features and/or ``text_bert`` [n, 3, T] (input ids / attention mask / token type ids), ``audio``
  [n, T_a, d_a], ``vision`` [n, T_v, d_v], ``regression_labels`` [n] (CH-SIMS also
  ``regression_labels_T/A/V``), ``audio_lengths``/``vision_lengths`` [n] (unaligned files), ``id``,
  ``raw_text``. Unaligned sequences are zero-padded at the end (MMSA packs them with these lengths):
  audio/vision are trimmed to their lengths and text to the ``text_bert`` attention-mask sum. Aligned
  files carry no lengths and are returned untrimmed. A length must be an integer in 0..T (T = padded
  length; 0 = the modality is missing for that sample), else :class:`DatasetError` names file, split,
  sample and range. Every split must give a modality the same feature dimension; an empty split is an
  error (see :class:`~fusebench.datasets.base.MultimodalDataset`).
* ``"feature_file"``: one MMSA-FET output dict for a single clip (``text`` [T, 768], ``text_bert``
  [3, T], ``audio`` [T, d_a], ``vision`` [T, d_v]; no label) such as the CH-SIMS fixture. It goes
  through the same validation and sample code as an MMSA split with n = 1 and yields one sample in
  every split; its target is NaN unless ``label=`` (and for CH-SIMS ``unimodal_labels={"T": ..}``)
  is given.
* ``"csd"`` (``mosi``/``mosei`` only): a folder of computational sequences, see :mod:`.csd`. Samples
  are the rows of the labels sequence (``*Labels*.csd``, sentiment = column 0); feature sequences are
  sliced to each segment's interval (``csd_alignment="slice"``, variable length) or averaged over
  the segment's word intervals (``"text"``, aligned). Folds: ``folds={"train": [video ids], ...}``,
  or ``folds.json`` in the root, else a deterministic video-level split (videos ordered by sha256 of
  their id, cut 52/10/31 for MOSI — the sizes of the standard folds, not their ids — and 70/10/20
  for MOSEI).

Text modality: ``text_field="text"`` (BERT features, d = 768) or ``"text_bert"`` (token rows as a
[T, 3] float32 sequence: id, mask, type); ``"auto"`` prefers ``text``.
Non-finite features raise :class:`DatasetError` naming file, split, key, sample index and id;
``nonfinite="zero"`` replaces them by 0 instead (MMSA itself zeroes ``-inf`` in audio/vision).

Shape (one sample):
    modalities["text"]   [T_t, 768] float32 (or [T_t, 3] for text_bert)
    modalities["audio"]  [T_a, d_a] float32   (MOSI 5, MOSEI 74, CH-SIMS 33 in MMSA's files)
    modalities["vision"] [T_v, d_v] float32   (MOSI 20, MOSEI 35, CH-SIMS 709)
    target               [] float32
    extra_targets        {"T", "A", "V"}: [] float32 (chsims only)
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import pickle
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from einops import rearrange

from . import DATASETS
from .base import DataFile, DatasetError, Modality, MultimodalDataset, SyntheticSpec
from .csd import align_to_reference, read_csd, slice_segment, write_csd
from .safe_pickle import load as safe_load

log = logging.getLogger(__name__)

_SPLIT_KEYS = {"train": "train", "val": "valid", "test": "test"}
_MODS = ("text", "audio", "vision")
_CSD_PATTERNS = {
    "text": ("*WordVectors*.csd", "*GloVe*.csd", "*glove*.csd", "*BERT*.csd"),
    "audio": ("*COVAREP*.csd", "*OpenSMILE*.csd", "*opensmile*.csd"),
    "vision": ("*Facet*.csd", "*FACET*.csd", "*OpenFace*.csd"),
}


def _video_split(videos: list[str], fractions: tuple[float, float, float]) -> dict[str, list[str]]:
    """Deterministic video-level split: order by sha256 of the id, cut by ``fractions``."""
    order = sorted(videos, key=lambda v: hashlib.sha256(v.encode()).hexdigest())
    total = sum(fractions)
    n = len(order)
    n_train = int(math.floor(n * fractions[0] / total + 0.5))
    n_val = int(math.floor(n * fractions[1] / total + 0.5))
    return {"train": order[:n_train], "val": order[n_train:n_train + n_val], "test": order[n_train + n_val:]}


class _SentimentDataset(MultimodalDataset):
    """Shared reader of the three sentiment adapters (see module docstring)."""

    #: dataset.options this adapter reads (others are errors, see MultimodalDataset.OPTIONS)
    OPTIONS = frozenset({"aligned", "csd_alignment", "csd_files", "file", "folds", "label", "labels_csd", "layout",
                         "nonfinite", "text_field", "unimodal_labels"})
    #: their types, checked when a benchmark spec is loaded (fusebench.options)
    OPTION_TYPES: ClassVar[dict[str, Any]] = {
        "aligned": bool, "csd_alignment": str, "csd_files": dict | None, "file": str | None, "folds": dict | None,
        "label": float, "labels_csd": str | None, "layout": str, "nonfinite": str, "text_field": str,
        "unimodal_labels": dict | None}

    task = "regression"
    LABEL_RANGE: ClassVar[tuple[float, float]] = (-3.0, 3.0)
    UNIMODAL: ClassVar[bool] = False
    PICKLES: ClassVar[dict[str, str]] = {"unaligned": "unaligned_50.pkl", "aligned": "aligned_50.pkl"}
    DIMS: ClassVar[dict[str, int]] = {"text": 768, "audio": 5, "vision": 20}
    PAD_LEN: ClassVar[dict[str, int]] = {"text": 50, "audio": 375, "vision": 500}
    FOLD_FRACTIONS: ClassVar[tuple[float, float, float]] = (0.7, 0.1, 0.2)
    SUPPORTS_CSD: ClassVar[bool] = True
    SYNTHETIC_VERSION = 1

    # -- index -----------------------------------------------------------------------------------
    def _index(self) -> list[Any]:
        o = self._opts_rest
        self.nonfinite = o.get("nonfinite", "error")
        if self.nonfinite not in ("error", "zero"):
            raise DatasetError(f"{self.id}: nonfinite={self.nonfinite!r} must be 'error' or 'zero'")
        self.text_field = o.get("text_field", "auto")
        if self.text_field not in ("auto", "text", "text_bert"):
            raise DatasetError(f"{self.id}: text_field={self.text_field!r} must be 'auto', 'text' or 'text_bert'")
        layout = o.get("layout", "auto")
        if layout == "auto":
            layout = self._detect_layout()
        if layout == "csd" and not self.SUPPORTS_CSD:
            raise DatasetError(f"{self.id}: layout 'csd' is only for mosi/mosei")
        if layout not in ("mmsa", "feature_file", "csd"):
            raise DatasetError(f"{self.id}: layout={layout!r} must be 'auto', 'mmsa', 'feature_file' or 'csd'")
        self.layout = layout
        if layout == "csd":
            return self._index_csd()
        return self._index_pickle()

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

    def _read_pickle(self, path: Path) -> Any:
        cache = getattr(self, "_pickle_cache", None)
        if cache is not None and cache[0] == path:
            return cache[1]
        obj = safe_load(path)
        self._pickle_cache = (path, obj)
        return obj

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

    def _index_pickle(self) -> list[int]:
        path = self._pickle_path()
        obj = self._read_pickle(path)
        self.source = str(path)
        if self.layout == "feature_file":
            part, where = self._feature_file_split(obj, path), f"{path}"
        else:
            if not isinstance(obj, dict) or not all(k in obj for k in ("train", "valid", "test")):
                found = sorted(obj) if isinstance(obj, dict) else type(obj).__name__
                raise DatasetError(f"{path}: an MMSA pickle must be a dict with keys ['train', 'valid', 'test']; "
                                   f"found {found}")
            part, where = obj[_SPLIT_KEYS[self.split]], f"{path} [{_SPLIT_KEYS[self.split]}]"
        self._split_file = where  # named by the base class when the split is empty
        self._arrays = self._validate_split(part, where)
        if self.layout == "mmsa" and self._n > 0:
            self._check_dims_across_splits(obj, path)
        return list(range(self._n))

    def _check_dims_across_splits(self, obj: dict[str, Any], path: Path) -> None:
        """Every split of an MMSA pickle must give a modality the same feature dimension."""
        keys = {"text": self._text_key, "audio": "audio", "vision": "vision"}
        for m in self.modalities:
            key = keys[m]
            axis = 1 if key == "text_bert" else 2  # text_bert is [n, 3, T]: its rows are the "features"
            dims: dict[str, int] = {}
            for split_key in ("train", "valid", "test"):
                part = obj.get(split_key)
                if not isinstance(part, dict) or key not in part:
                    continue  # reported when that split is built
                shape = np.shape(part[key])
                if len(shape) == 3 and shape[0] > 0:
                    dims[split_key] = int(shape[axis])
            if len(set(dims.values())) > 1:
                own = _SPLIT_KEYS[self.split]
                ref = own if own in dims else next(iter(dims))
                other = next(k for k, d in dims.items() if d != dims[ref])
                listing = ", ".join(f"[{k}] {d}" for k, d in dims.items())
                raise DatasetError(
                    f"{path}: key {key!r} has feature dimension {dims[ref]} in split [{ref}] but {dims[other]} in "
                    f"split [{other}] (all splits: {listing}); every split must have the same dimension")

    def _feature_file_split(self, obj: Any, path: Path) -> dict[str, Any]:
        """Wrap a single-clip MMSA-FET dict as an MMSA split with n = 1."""
        if not isinstance(obj, dict):
            raise DatasetError(f"{path}: a feature file must be a dict, got {type(obj).__name__}")
        part: dict[str, Any] = {}
        for key in ("text", "text_bert", "audio", "vision"):
            if key in obj:
                arr = np.asarray(obj[key])
                if arr.ndim != 2:
                    raise DatasetError(f"{path}: feature-file key {key!r} must be 2-D, got shape {arr.shape}")
                part[key] = arr[None]
        label = self._opts_rest.get("label", float("nan"))
        part["regression_labels"] = np.array([label], dtype=np.float32)
        if self.UNIMODAL:
            uni = self._opts_rest.get("unimodal_labels", {}) or {}
            for m in "TAV":
                part[f"regression_labels_{m}"] = np.array([uni.get(m, float("nan"))], dtype=np.float32)
        part["id"] = np.array([path.stem])
        if "align" in obj and isinstance(obj["align"], list):
            part["raw_text"] = np.array(["".join(str(w.get("text", "")) for w in obj["align"] if isinstance(w, dict))],
                                        dtype=object)
        self._allow_nan_label = "label" not in self._opts_rest
        return part

    def _validate_split(self, part: Any, where: str) -> dict[str, Any]:
        label_keys = ["regression_labels"] + ([f"regression_labels_{m}" for m in "TAV"] if self.UNIMODAL else [])
        expected = ["text or text_bert", "audio", "vision"] + label_keys
        if not isinstance(part, dict):
            raise DatasetError(f"{where}: expected a dict with keys {expected}, got {type(part).__name__}")
        missing_labels = [k for k in label_keys if k not in part]
        if missing_labels:
            raise DatasetError(f"{where}: missing keys {missing_labels}; expected keys {expected} "
                               f"(+ optional audio_lengths, vision_lengths, id, raw_text); found {sorted(part)}")
        labels = {k: np.asarray(part[k], dtype=np.float32).reshape(-1) for k in label_keys}
        n = labels["regression_labels"].shape[0]
        self._n = n
        arrays: dict[str, Any] = {"labels": labels}
        text_key = self.text_field
        if text_key == "auto":
            text_key = "text" if "text" in part else "text_bert"
        self._text_key = text_key
        if n == 0:  # an empty split: the base class raises, naming the file and split key
            arrays.update(lengths={}, id=[], raw_text=[])
            return arrays
        keys = {"text": text_key, "audio": "audio", "vision": "vision"}
        for m in self.modalities:
            key = keys[m]
            if key not in part:
                raise DatasetError(f"{where}: modality {m!r} is missing: no key {key!r} (found {sorted(part)}); "
                                   f"expected keys {expected}. Pass modalities=[...] without {m!r} to skip it")
            arr = np.asarray(part[key])
            if arr.ndim != 3 or arr.shape[0] != n:
                raise DatasetError(f"{where}: key {key!r} must be [n={n}, ...] 3-D, got shape {arr.shape}")
            if key == "text_bert":
                arr = rearrange(arr, "n r t -> n t r")  # [n, 3, T] -> [n, T, 3] (ids, mask, type)
            arr = np.ascontiguousarray(arr, dtype=np.float32)
            bad = ~np.isfinite(arr).all(axis=(1, 2))
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                if self.nonfinite == "error":
                    raise DatasetError(
                        f"{where}: key {key!r} has NaN/Inf values in {int(bad.sum())} samples, first sample "
                        f"{i} (id {self._id_of(part, i)!r}); pass nonfinite='zero' to replace them by 0")
                arr = np.nan_to_num(arr, nan=0.0, posinf=0.0, neginf=0.0)
            arrays[m] = arr
        for k, v in labels.items():
            finite = np.isfinite(v)
            allow_nan = getattr(self, "_allow_nan_label", False)
            if not allow_nan and not finite.all():
                i = int(np.flatnonzero(~finite)[0])
                raise DatasetError(f"{where}: label {k!r} is not finite for sample {i} (id {self._id_of(part, i)!r})")
            lo, hi = self.LABEL_RANGE
            out = finite & ((v < lo - 1e-6) | (v > hi + 1e-6))
            if out.any():
                i = int(np.flatnonzero(out)[0])
                raise DatasetError(f"{where}: label {k!r} = {v[i]} of sample {i} is outside [{lo}, {hi}]")
        lengths: dict[str, np.ndarray] = {}
        for m in ("audio", "vision"):
            if m in arrays and f"{m}_lengths" in part:
                lengths[m] = self._check_lengths(part, f"{m}_lengths", n, arrays[m].shape[1], where)
        if "text" in arrays and "text_bert" in part and ("audio_lengths" in part or "vision_lengths" in part
                                                         or self.layout == "feature_file"):
            mask = np.asarray(part["text_bert"])
            if mask.ndim == 3 and mask.shape[0] == n and mask.shape[1] == 3:
                lengths["text"] = np.clip(mask[:, 1].sum(axis=1).astype(np.int64), 1, arrays["text"].shape[1])
        arrays["lengths"] = lengths
        arrays["id"] = [self._id_of(part, i) for i in range(n)]
        raw = part.get("raw_text")
        arrays["raw_text"] = [str(raw[i]) for i in range(n)] if raw is not None and len(raw) == n else [""] * n
        # declared channel sizes follow the file
        self.MODALITIES = tuple(
            Modality(m.name, m.kind, int(arrays[m.name].shape[2]) if m.name in arrays else m.channels,
                     m.variable_length, m.description)
            for m in type(self).MODALITIES
        )
        return arrays

    def _check_lengths(self, part: dict[str, Any], key: str, n: int, t: int, where: str) -> np.ndarray:
        """``audio_lengths`` / ``vision_lengths`` as int64 [n]; each must be an integer in 0..T (the padded
        length). 0 = the modality is missing for that sample."""
        raw = np.asarray(part[key]).reshape(-1)
        if raw.shape[0] != n:
            raise DatasetError(f"{where}: {key} has {raw.shape[0]} entries for {n} samples")
        try:
            vals = raw.astype(np.float64)
        except (TypeError, ValueError) as e:
            raise DatasetError(f"{where}: {key} must hold integers in 0..{t}, got dtype {raw.dtype}") from e
        bad = ~np.isfinite(vals) | (vals != np.round(vals)) | (vals < 0) | (vals > t)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            value = raw[i].item() if hasattr(raw[i], "item") else raw[i]
            raise DatasetError(
                f"{where}: {key} of sample {i} (id {self._id_of(part, i)!r}) is {value!r}, outside the valid "
                f"range 0..{t} (integers up to the padded length T = {t} of {key.split('_')[0]!r}); "
                f"{int(bad.sum())} of {n} samples are out of range")
        return vals.astype(np.int64)

    @staticmethod
    def _id_of(part: dict[str, Any], i: int) -> str:
        ids = part.get("id")
        if ids is None or i >= len(ids):
            return str(i)
        v = ids[i]
        return v.decode() if isinstance(v, bytes) else str(v)

    # -- csd layout ------------------------------------------------------------------------------
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
        labels = read_csd(labels_path)
        self.source = str(labels_path)
        folds = self._opts_rest.get("folds")
        self._split_file = "the folds= option" if folds is not None else f"{labels_path} (deterministic video split)"
        if folds is None and (self.root / "folds.json").is_file():
            folds = json.loads((self.root / "folds.json").read_text())
            self._split_file = self.root / "folds.json"
        if folds is not None:
            key = self.split if self.split in folds else _SPLIT_KEYS[self.split]
            if key not in folds:
                raise DatasetError(f"{self.id}: folds lack split {self.split!r} (keys {sorted(folds)})")
            videos = [v for v in folds[key] if v in labels.features]
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

    def source_files(self) -> list[Path]:
        """The files this split was read from (hashed by ``fusebench data prepare``)."""
        if self.layout == "csd":
            files = [Path(self._labels_csd.path)] + [Path(seq.path) for seq in self._csd.values()]
            return files + ([self.root / "folds.json"] if (self.root / "folds.json").is_file() else [])
        return [Path(self.source)]

    # -- samples ---------------------------------------------------------------------------------
    def _load_raw(self, index: int) -> dict[str, Any]:
        if self.layout == "csd":
            return self._load_csd(index)
        a = self._arrays
        mods = {}
        for m in self.modalities:
            x = a[m][index]
            ln = a["lengths"].get(m)
            if ln is not None:
                if int(ln[index]) == 0:
                    continue  # length 0: the modality is missing for this sample (presence mask)
                x = x[: int(ln[index])]
            mods[m] = torch.from_numpy(x.copy())
        sample = {
            "modalities": mods,
            "target": torch.tensor(float(a["labels"]["regression_labels"][index]), dtype=torch.float32),
            "meta": {"id": a["id"][index], "raw_text": a["raw_text"][index], "index": index,
                     "source": self.source},
        }
        if self.UNIMODAL:
            sample["extra_targets"] = {
                m: torch.tensor(float(a["labels"][f"regression_labels_{m}"][index]), dtype=torch.float32) for m in "TAV"
            }
        return sample

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

    # -- synthetic twin --------------------------------------------------------------------------
    @classmethod
    def _synthetic_arrays(cls, spec: SyntheticSpec) -> dict[str, dict[str, Any]]:
        """MMSA-style split dicts whose label is a weighted sum of per-modality latents.

        Each sample has latents z_text, z_audio, z_vision ~ N(0, 1); modality m writes z_m along a
        fixed random direction at every valid step (plus unit noise), and the multimodal label is
        ``scale * sum_m w_m z_m / ||w||`` with w = spec.informativeness (defaults text 0.8, audio 0.5,
        vision 0.2), so a modality is as informative as its weight. CH-SIMS unimodal labels are
        tanh(z_m) rounded to 0.2.
        """
        rng = np.random.default_rng(spec.seed)
        w = {"text": 0.8, "audio": 0.5, "vision": 0.2}
        w.update({k: float(v) for k, v in spec.informativeness.items() if k in w})
        norm = math.sqrt(sum(v * v for v in w.values())) or 1.0
        pad = dict(cls.PAD_LEN)
        pad.update(spec.options.get("pad_len", {}))
        dims = dict(cls.DIMS)
        dirs = {m: rng.normal(size=dims[m]) for m in _MODS}
        dirs = {m: d / np.linalg.norm(d) * math.sqrt(dims[m]) for m, d in dirs.items()}
        n_total = max(int(spec.num_samples), 3)
        n_val = max(1, n_total // 5)
        n_test = max(1, n_total // 5)
        sizes = {"train": n_total - n_val - n_test, "valid": n_val, "test": n_test}
        out: dict[str, dict[str, Any]] = {}
        counter = 0
        for split, n in sizes.items():
            z = {m: rng.normal(size=n) for m in _MODS}
            s = sum(w[m] * z[m] for m in _MODS) / norm
            lo, hi = cls.LABEL_RANGE
            if cls.UNIMODAL:
                label = np.round(np.tanh(s) * 5) / 5
            else:
                label = np.clip(np.round(1.5 * s * 3) / 3, lo, hi)
            lengths = {m: rng.integers(max(2, pad[m] // 4), pad[m] + 1, size=n) for m in _MODS}
            part: dict[str, Any] = {}
            for m in _MODS:
                arr = np.zeros((n, pad[m], dims[m]), dtype=np.float32)
                for i in range(n):
                    t = lengths[m][i]
                    arr[i, :t] = z[m][i] * dirs[m] + rng.normal(size=(t, dims[m]))
                part[m] = arr
            bert = np.zeros((n, 3, pad["text"]), dtype=np.int64)
            for i in range(n):
                t = lengths["text"][i]
                bert[i, 0, :t] = rng.integers(1000, 30000, size=t)
                bert[i, 0, 0], bert[i, 0, t - 1] = 101, 102
                bert[i, 1, :t] = 1
            part["text_bert"] = bert
            part["audio_lengths"] = [int(v) for v in lengths["audio"]]
            part["vision_lengths"] = [int(v) for v in lengths["vision"]]
            part["regression_labels"] = label.astype(np.float32)
            if cls.UNIMODAL:
                for key, m in zip("TAV", _MODS):
                    part[f"regression_labels_{key}"] = (np.round(np.tanh(z[m]) * 5) / 5).astype(np.float32)
            part["classification_labels"] = np.sign(label).astype(np.float32)
            part["id"] = np.array([f"syn{(counter + i) // 4:04d}$_${(counter + i) % 4 + 1}" for i in range(n)])
            part["raw_text"] = np.array([" ".join(["word"] * int(lengths["text"][i] - 2)) for i in range(n)],
                                        dtype=object)
            counter += n
            out[split] = part
        return out

    @classmethod
    def write_synthetic(cls, root: Path, spec: SyntheticSpec) -> None:
        """MMSA pickle (default) or, with ``spec.options["layout"] == "csd"``, computational sequences."""
        root = Path(root)
        parts = cls._synthetic_arrays(spec)
        if spec.options.get("layout", "mmsa") == "csd":
            if not cls.SUPPORTS_CSD:
                raise DatasetError(f"{cls.id}: no csd layout")
            cls._write_synthetic_csd(root, parts)
            return
        with open(root / cls.PICKLES["unaligned"], "wb") as f:
            pickle.dump(parts, f, protocol=4)

    @classmethod
    def _write_synthetic_csd(cls, root: Path, parts: dict[str, dict[str, Any]]) -> None:
        """One segment per sample; segment i of a video spans [10 i, 10 i + 8] s; rows are spread evenly."""
        prefix = "CMU_MOSI" if cls.id == "mosi" else "CMU_MOSEI"
        feats: dict[str, dict[str, list]] = {m: {} for m in (*_MODS, "labels")}
        ivals: dict[str, dict[str, list]] = {m: {} for m in (*_MODS, "labels")}
        folds: dict[str, list[str]] = {"train": [], "valid": [], "test": []}
        for split, part in parts.items():
            for i, sid in enumerate(part["id"]):
                vid, seg = str(sid).split("$_$")
                if vid not in folds[split]:
                    folds[split].append(vid)
                start, end = 10.0 * (int(seg) - 1), 10.0 * (int(seg) - 1) + 8.0
                lengths = {"text": int(part["text_bert"][i, 1].sum()), "audio": part["audio_lengths"][i],
                           "vision": part["vision_lengths"][i]}
                for m in _MODS:
                    t = lengths[m]
                    edges = np.linspace(start, end, t + 1)
                    feats[m].setdefault(vid, []).append(part[m][i, :t])
                    ivals[m].setdefault(vid, []).append(np.stack([edges[:-1], edges[1:]], axis=1))
                feats["labels"].setdefault(vid, []).append(np.array([[part["regression_labels"][i]]], np.float32))
                ivals["labels"].setdefault(vid, []).append(np.array([[start, end]]))
        names = {"text": "TimestampedWordVectors", "audio": "COVAREP", "vision": "Visual_Facet_42",
                 "labels": "Opinion_Labels" if cls.id == "mosi" else "Labels"}
        for m, name in names.items():
            write_csd(root / f"{prefix}_{name}.csd", name,
                      {v: np.concatenate(x) for v, x in feats[m].items()},
                      {v: np.concatenate(x) for v, x in ivals[m].items()},
                      {"dataset name": prefix.replace("_", "-"), "dimension names": [f"{name}_{k}" for k in range(
                          next(iter(feats[m].values()))[0].shape[1])]})
        (root / "folds.json").write_text(json.dumps(folds, indent=1))


_SENTIMENT_MODALITIES = (
    Modality("text", "sequence", 768, True, "BERT last-layer token features (or token ids with text_field='text_bert')"),
    Modality("audio", "sequence", 5, True, "acoustic frame features (COVAREP / librosa / eGeMAPS)"),
    Modality("vision", "sequence", 20, True, "facial frame features (FACET / OpenFace)"),
)


@DATASETS.register("mosi")
class MOSI(_SentimentDataset):
    """CMU-MOSI: 2199 opinion segments of 93 YouTube videos, sentiment in [-3, 3]."""

    id = "mosi"
    MODALITIES = _SENTIMENT_MODALITIES
    DIMS = {"text": 768, "audio": 5, "vision": 20}
    PAD_LEN = {"text": 50, "audio": 375, "vision": 500}
    FOLD_FRACTIONS = (52.0, 10.0, 31.0)
    FILES = (
        DataFile("unaligned_50.pkl", "MMSA features (or aligned_50.pkl with aligned=True)", required=False),
        DataFile("CMU_MOSI_Opinion_Labels.csd", "CMU-MultimodalSDK labels (csd layout)", required=False),
        DataFile("CMU_MOSI_*.csd", "feature computational sequences (csd layout)", required=False),
    )
    INFO = """
CMU-MOSI (Zadeh et al. 2016; research use, CMU MultiComp Lab).
MMSA features: https://github.com/thuiar/MMSA (MOSI/Processed/unaligned_50.pkl, aligned_50.pkl).
Computational sequences: CMU-MultimodalSDK, http://immortal.multicomp.cs.cmu.edu/raw_datasets/processed_data/cmu-mosi/seq_length_50/ (and mmsdk.mmdatasdk.cmu_mosi).
Pass root=<folder with the pickle or the .csd files> or root=<a single MMSA-FET feature .pkl>.
"""


_MOSEI_DIMS = {"text": 768, "audio": 74, "vision": 35}  # BERT, COVAREP, FACET (MMSA unaligned_50)


@DATASETS.register("mosei")
class MOSEI(_SentimentDataset):
    """CMU-MOSEI: ~23k segments of 3228 videos, sentiment in [-3, 3] (labels column 0)."""

    id = "mosei"
    DIMS = _MOSEI_DIMS
    MODALITIES = tuple(Modality(m.name, m.kind, _MOSEI_DIMS[m.name], True, m.description) for m in _SENTIMENT_MODALITIES)
    PAD_LEN = {"text": 50, "audio": 500, "vision": 500}
    FOLD_FRACTIONS = (0.7, 0.1, 0.2)
    FILES = (
        DataFile("unaligned_50.pkl", "MMSA features (or aligned_50.pkl with aligned=True)", required=False),
        DataFile("CMU_MOSEI_Labels.csd", "CMU-MultimodalSDK labels (csd layout)", required=False),
        DataFile("CMU_MOSEI_*.csd", "feature computational sequences (csd layout)", required=False),
    )
    INFO = """
CMU-MOSEI (Zadeh et al. ACL 2018; research use, CMU MultiComp Lab).
MMSA features: https://github.com/thuiar/MMSA (MOSEI/Processed/unaligned_50.pkl, aligned_50.pkl).
Computational sequences: CMU-MultimodalSDK (mmsdk.mmdatasdk.cmu_mosei; CMU_MOSEI_Labels.csd, CMU_MOSEI_COVAREP.csd, ...).
"""


@DATASETS.register("chsims")
class CHSIMS(_SentimentDataset):
    """CH-SIMS: 2281 Mandarin clips, multimodal + unimodal (T, A, V) sentiment in [-1, 1]."""

    id = "chsims"
    LABEL_RANGE = (-1.0, 1.0)
    UNIMODAL = True
    SUPPORTS_CSD = False
    PICKLES = {"unaligned": "unaligned_39.pkl", "aligned": "aligned_39.pkl"}
    MODALITIES = tuple(Modality(m.name, m.kind, {"text": 768, "audio": 33, "vision": 709}[m.name], True,
                                m.description) for m in _SENTIMENT_MODALITIES)
    DIMS = {"text": 768, "audio": 33, "vision": 709}
    PAD_LEN = {"text": 39, "audio": 400, "vision": 55}
    FILES = (
        DataFile("unaligned_39.pkl", "MMSA CH-SIMS features with regression_labels and regression_labels_T/A/V"),
    )
    INFO = """
CH-SIMS (Yu et al. ACL 2020; research use, thuiar). Request access at https://github.com/thuiar/MMSA
(SIMS/Processed/unaligned_39.pkl). A single MMSA-FET feature file (root=<file.pkl>) also loads, as one
unlabelled sample (target NaN unless label=... is given).
"""
