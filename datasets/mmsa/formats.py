"""MMSA feature files: the allowlist-unpickled MMSA pickles and single-clip MMSA-FET feature files,
validated into per-modality arrays.

An MMSA split is a dict of ``text`` [n, T, 768] and/or ``text_bert`` [n, 3, T], ``audio`` [n, T_a, d_a],
``vision`` [n, T_v, d_v], ``regression_labels`` [n] (CH-SIMS also ``regression_labels_T/A/V``),
optional ``audio_lengths`` / ``vision_lengths`` [n], ``id`` and ``raw_text``. A feature file is one
clip's dict (``text`` [T, 768], ``text_bert`` [3, T], ``audio`` [T, d_a], ``vision`` [T, d_v]),
wrapped as a split with n = 1 (:meth:`_PickleFormat._feature_file_split`). Validation
(:meth:`_PickleFormat._validate_split`): real numeric dtypes (:func:`_require_real`), values within float32,
``id`` / ``raw_text`` of one entry per sample, shapes, finite features (``nonfinite``), label ranges,
lengths in 0..T (:meth:`_PickleFormat._check_lengths`) and one feature dimension per modality across
the splits of a pickle (:meth:`_PickleFormat._check_dims_across_splits`), no clip id twice in a split
(:meth:`_PickleFormat._check_ids_within_splits`) nor in two splits
(:meth:`_PickleFormat._check_ids_across_splits`), feature widths >= 1 and a
``text_bert`` attention mask of 0/1 values only (:meth:`_PickleFormat._mask_lengths`; its sum is the
text length, 0 = text absent).

:class:`_PickleFormat` is the mixin of the sentiment adapters holding these readers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from einops import rearrange

from ..base import DatasetError, Modality
from ..safe_pickle import load as safe_load
from .layouts import _MODS, _SPLIT_KEYS


class _PickleFormat:
    """Readers and validation of the MMSA pickles and feature files."""

    def _read_pickle(self, path: Path) -> Any:
        cache = getattr(self, "_pickle_cache", None)
        if cache is not None and cache[0] == path:
            return cache[1]
        obj = safe_load(path)
        self._pickle_cache = (path, obj)
        return obj

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
        clips = self._clip_ids(part)  # every sample named by a clip id (else sample_keys cannot say)
        self._has_ids = clips is not None and None not in clips
        if self.layout == "mmsa" and self._n > 0:
            self._check_dims_across_splits(obj, path)
            self._check_ids_within_splits(obj, path)
            self._check_ids_across_splits(obj, path)
        return list(range(self._n))

    @classmethod
    def _clip_ids(cls, part: Any) -> list[str | None] | None:
        """The clip id of each sample of a split (its ``meta`` id, :meth:`_id_of`; None for a missing id, ``None`` or
        NaN, which names no clip and is compared with nothing), or None when the split has no ``id`` or an ``id``
        that is not a sequence (a set, a mapping: refused when that split is built). One id per sample: a row of a
        2-D ``id`` array is one id, never split into its entries."""
        ids = part.get("id") if isinstance(part, dict) else None
        if ids is None or not isinstance(ids, (list, tuple, np.ndarray)):
            return None
        return [None if _missing_id(ids[i]) else cls._id_of(part, i) for i in range(len(ids))]

    @classmethod
    def _check_ids_within_splits(cls, obj: dict[str, Any], path: Path) -> None:
        """No clip ``id`` may occur twice in one split of an MMSA pickle: the repeated sample would weigh twice in
        training or in the test metric. MMSA builds an id as ``<video_id>$_$<clip_id>`` from the two key columns of
        its ``label.csv`` (one row per clip), so a repeat is not the official layout: it comes from concatenated or
        re-exported splits. It is refused whether the rows hold the same sample or different ones (a copy still
        weighs twice; two samples under one id leave ``meta`` ids and a split's ``sample_keys`` ambiguous), in every
        split built from the file, naming the file, the split, the count and the first ids with their samples.
        Splits without ``id`` cannot be checked. (The ``csd`` layout's ``<video>[<segment>]`` ids are unique by
        construction.)"""
        for split_key in ("train", "valid", "test"):
            clips = cls._clip_ids(obj.get(split_key))
            if clips is None:
                continue
            rows: dict[str, list[int]] = {}
            for i, clip in enumerate(clips):
                if clip is not None:  # a missing id is no clip
                    rows.setdefault(clip, []).append(i)
            repeated = [(clip, at) for clip, at in rows.items() if len(at) > 1]
            if repeated:
                extra = sum(len(at) - 1 for _, at in repeated)
                shown = "; ".join(f"{clip!r} at samples {', '.join(map(str, at[:4]))}{', ...' if len(at) > 4 else ''}"
                                  for clip, at in repeated[:3]) + ("; ..." if len(repeated) > 3 else "")
                raise DatasetError(f"{path}: split [{split_key}] holds {len(repeated)} clip id(s) more than once "
                                   f"({extra} repeated sample(s) of {len(clips)}: {shown}); a repeated clip weighs "
                                   "twice in training or in the test metric: each clip id must occur once in a split")

    @classmethod
    def _check_ids_across_splits(cls, obj: dict[str, Any], path: Path) -> None:
        """No clip ``id`` may occur in two splits of an MMSA pickle: its features and label would be trained on
        and then scored (leakage). Splits without ``id`` are not compared; repeats within one split are refused
        before (:meth:`_check_ids_within_splits`). Raises naming the file, both splits and the first ids found in
        both."""
        seen: dict[str, str] = {}
        for split_key in ("train", "valid", "test"):
            clips = cls._clip_ids(obj.get(split_key))
            if clips is None:
                continue
            both: dict[str, list[str]] = {}
            for clip in clips:
                other = seen.get(clip) if clip is not None else None
                if other is not None and other != split_key:
                    both.setdefault(other, []).append(clip)
            for other, found in both.items():
                shown = ", ".join(repr(c) for c in found[:5]) + (", ..." if len(found) > 5 else "")
                raise DatasetError(f"{path}: {len(found)} clip id(s) occur in both split [{other}] and split "
                                   f"[{split_key}] ({shown}); a clip in two splits leaks its features and label "
                                   "between them: each clip must belong to one split")
            for clip in clips:
                if clip is not None:
                    seen.setdefault(clip, split_key)

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
            missing = [m for m in "TAV" if m not in uni]
            if "label" in self._opts_rest and missing:  # else: "label 'regression_labels_T' is not finite", no option
                raise DatasetError(
                    f"{path}: a feature file holds no labels: label={label!r} was given, but no unimodal label for "
                    f"{missing} (CH-SIMS scores the text, audio and vision labels too); pass unimodal_labels="
                    "{'T': .., 'A': .., 'V': ..} beside label= (fusebench run: --set dataset.options.unimodal_labels="
                    "'{\"T\": 0.2, \"A\": -1.0, \"V\": 1.0}'), or neither for an unlabelled clip")
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
        labels = {k: self._label_array(part[k], k, where) for k in label_keys}
        n = labels["regression_labels"].shape[0]
        short = {k: v.shape[0] for k, v in labels.items() if v.shape[0] != n}
        if short:
            raise DatasetError(f"{where}: label keys {sorted(short)} have {sorted(set(short.values()))} entries, but "
                               f"'regression_labels' has {n}; every label key holds one value per sample")
        for key in ("id", "raw_text"):  # a wrong length used to be replaced by indices / "" without a word
            if part.get(key) is not None:
                try:
                    size = len(part[key])
                except TypeError:
                    size = None
                if size is not None and not isinstance(part[key], (list, tuple, np.ndarray)):  # a set, a mapping, text
                    raise DatasetError(f"{where}: key {key!r} is a {type(part[key]).__name__}; expected a list or an "
                                       "array of one entry per sample, in the samples' order")
                if size != n:
                    got = f"{size} entries" if size is not None else f"the {type(part[key]).__name__} {part[key]!r:.40}"
                    raise DatasetError(f"{where}: key {key!r} holds {got}, but 'regression_labels' has {n}; {key!r} "
                                       "must hold one entry per sample")
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
            try:
                arr = np.asarray(part[key])
            except ValueError as e:  # a list of arrays of different shapes
                raise DatasetError(f"{where}: key {key!r} must be one padded array [n={n}, T, d], got a ragged "
                                   f"{type(part[key]).__name__} ({str(e)[:80]})") from None
            if arr.ndim != 3 or arr.shape[0] != n:
                raise DatasetError(f"{where}: key {key!r} must be [n={n}, ...] 3-D, got shape {arr.shape}")
            if arr.shape[2] == 0 or (key == "text_bert" and arr.shape[1] != 3):
                want = "[n, 3, T] (ids, mask, types)" if key == "text_bert" else "[n, T, d] with d >= 1 features"
                raise DatasetError(f"{where}: key {key!r} has shape {arr.shape}, expected {want}"
                                   + (" (zero feature width)" if arr.shape[2] == 0 else ""))
            if key == "text_bert":
                arr = rearrange(arr, "n r t -> n t r")  # [n, 3, T] -> [n, T, 3] (ids, mask, type)
            _require_real(arr, f"{where}: key {key!r}")
            arr = self._as_float32(part, arr, f"{where}: key {key!r}")
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
        mask = np.asarray(part["text_bert"]) if "text_bert" in part else None
        aligned = self.layout == "mmsa" and "audio_lengths" not in part and "vision_lengths" not in part
        if mask is not None and ("text" in arrays or aligned):
            # its attention mask gives the text lengths (a malformed text_bert was ignored: the zero padding was
            # delivered as text steps); MMSA pads text [n, T, 768] and text_bert [n, 3, T] to one T
            if mask.ndim != 3 or mask.shape[0] != n or mask.shape[1] != 3:
                raise DatasetError(
                    f"{where}: key 'text_bert' has shape {mask.shape}, expected [n={n}, 3, T] (input ids, attention "
                    "mask, token type ids; a feature file's [3, T]): its attention mask gives the text lengths")
            if self._text_key == "text" and "text" in arrays and arrays["text"].shape[1] != mask.shape[2]:
                raise DatasetError(
                    f"{where}: key 'text' has {arrays['text'].shape[1]} steps (shape {tuple(arrays['text'].shape)}) but "
                    f"'text_bert' {mask.shape[2]} (shape {mask.shape}); both are padded to the same length T (text "
                    "[n, T, d], text_bert [n, 3, T]), so the attention mask would cut the text at the wrong steps "
                    "(a transposed text, or the two keys of different files)")
        if aligned:  # one T for all three (MMSA's aligned_50.pkl: 50 each); the text mask gives all three lengths
            steps = {"text_bert": int(mask.shape[2])} if mask is not None else {}  # a read 'text' has its T (above)
            steps.update({m: int(arrays[m].shape[1]) for m in _MODS if m in arrays and (m != "text" or mask is None)})
            if len(set(steps.values())) > 1:
                raise DatasetError(
                    f"{where}: an aligned file (no 'audio_lengths' / 'vision_lengths') pads text, audio and vision to "
                    f"one length T, as MMSA's aligned_50.pkl does, but the padded lengths are "
                    f"{', '.join(f'{k} {t}' for k, t in steps.items())}: the text attention mask cannot give the audio / "
                    "vision lengths, and their zero padding would be read as data. Pass the unaligned file with its "
                    "audio_lengths and vision_lengths (MMSA's unaligned_*.pkl), or add those two keys ([n] integers, "
                    "the unpadded lengths) to this file")
        if mask is not None and mask.ndim == 3 and mask.shape[0] == n and mask.shape[1] == 3:
            # an aligned file: audio / vision share the text steps; MMSA runs them for the text_bert mask
            # length too (models/multiTask/SELF_MM.py: `if self.aligned: audio_model(audio, text_lengths)`)
            cut = [m for m in ("audio", "vision") if aligned and m in arrays]
            if "text" in arrays or cut:  # the mask is checked where it is used
                mask_len = self._mask_lengths(part, mask[:, 1], where)
                if "text" in arrays:
                    lengths["text"] = self._mask_within(part, mask_len, "text", arrays["text"].shape[1], where)
                for m in cut:
                    lengths[m] = mask_len
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

    def _as_float32(self, part: dict[str, Any], arr: np.ndarray, what: str) -> np.ndarray:
        """A real feature array [n, T, d] as contiguous float32. Finite values beyond float32's range (float64
        1e300) raise naming the sample: the cast would turn them into Inf, reported as NaN/Inf values that the
        file does not hold (and that nonfinite='zero' would zero)."""
        with np.errstate(over="ignore"):
            out = np.ascontiguousarray(arr, dtype=np.float32)
        if arr.dtype.kind == "f" and arr.dtype.itemsize > 4:
            over = (np.isfinite(arr) & ~np.isfinite(out)).any(axis=(1, 2))
            if over.any():
                i = int(np.flatnonzero(over)[0])
                big = float(np.abs(arr[i][np.isfinite(arr[i])]).max())
                raise DatasetError(
                    f"{what} holds values that overflow float32 (the features are read as float32, largest "
                    f"±{np.finfo(np.float32).max:.4g}) in {int(over.sum())} samples, first sample {i} (id "
                    f"{self._id_of(part, i)!r}, magnitude up to {big:g}); rescale the features")
        return out

    @staticmethod
    def _label_array(value: Any, key: str, where: str) -> np.ndarray:
        """Label ``key`` as float32 [n]: one number per sample (a [n], [n, 1] or [1, n] array), else a DatasetError
        naming the file, the key and what it holds."""
        if value is None:
            raise DatasetError(f"{where}: label {key!r} is None; expected one number per sample (regression scores)")
        try:
            raw = np.asarray(value)
        except ValueError as e:  # a ragged list
            raise DatasetError(f"{where}: label {key!r} must hold one number per sample (regression scores), got a "
                               f"ragged {type(value).__name__} ({str(e)[:80]})") from None
        _require_real(raw, f"{where}: label {key!r}", "one number per sample (real regression scores)")
        with np.errstate(over="ignore"):
            arr = raw.astype(np.float32)
        over = np.isfinite(raw) & ~np.isfinite(arr)
        if over.any():
            i = int(np.flatnonzero(over.reshape(-1))[0])
            raise DatasetError(f"{where}: label {key!r} holds {raw.reshape(-1)[i]:g} (entry {i}), beyond the float32 "
                               f"range (±{np.finfo(np.float32).max:.4g}) the labels are read as")
        if arr.ndim == 2 and 1 in arr.shape:
            arr = arr.reshape(-1)
        if arr.ndim != 1:
            raise DatasetError(f"{where}: label {key!r} must be a vector [n] with one number per sample, got shape "
                               f"{arr.shape}")
        return arr

    def _check_lengths(self, part: dict[str, Any], key: str, n: int, t: int, where: str) -> np.ndarray:
        """``audio_lengths`` / ``vision_lengths`` as int64 [n]; each must be an integer in 0..T (the padded
        length). 0 = the modality is missing for that sample."""
        raw = np.asarray(part[key]).reshape(-1)
        if raw.shape[0] != n:
            raise DatasetError(f"{where}: {key} has {raw.shape[0]} entries for {n} samples")
        _require_real(raw, f"{where}: {key}", f"integers in 0..{t}")  # '3' as text, 3+1j: not a length
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

    def _mask_lengths(self, part: dict[str, Any], mask: np.ndarray, where: str) -> np.ndarray:
        """The attention-mask row of ``text_bert`` ([n, T], row 1 of [n, 3, T]) as int64 lengths [n]: its sum.

        Every value must be 0 or 1, else a DatasetError naming the file, the sample and the key (values are not
        clipped). A length of 0 (no token attended) leaves the text (and, in an aligned file, audio / vision)
        absent from that sample, like ``audio_lengths`` = 0.
        """
        _require_real(np.asarray(mask), f"{where}: key 'text_bert' row 1 (attention mask)", "0/1")
        try:
            vals = np.asarray(mask).astype(np.float64)
        except (TypeError, ValueError):
            raise DatasetError(f"{where}: key 'text_bert' row 1 (attention mask) must hold 0/1, got dtype "
                               f"{np.asarray(mask).dtype}") from None
        bad = ~((vals == 0) | (vals == 1)).all(axis=1)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            v = vals[i][(vals[i] != 0) & (vals[i] != 1)][0]
            raise DatasetError(
                f"{where}: key 'text_bert' row 1 (attention mask) of sample {i} (id {self._id_of(part, i)!r}) holds "
                f"{v:g}; the mask must hold only 0 and 1 ({int(bad.sum())} of {len(vals)} samples do not)")
        return vals.sum(axis=1).astype(np.int64)

    def _mask_within(self, part: dict[str, Any], lengths: np.ndarray, m: str, t: int, where: str) -> np.ndarray:
        """Attention-mask lengths used for modality ``m`` of padded length ``t``: each must be in 0..t."""
        bad = lengths > t
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise DatasetError(
                f"{where}: key 'text_bert' attention mask of sample {i} (id {self._id_of(part, i)!r}) sums to "
                f"{int(lengths[i])}, outside the valid range 0..{t} (the padded length T = {t} of {m!r})")
        return lengths

    @staticmethod
    def _id_of(part: dict[str, Any], i: int) -> str:
        ids = part.get("id")
        if ids is None or i >= len(ids):
            return str(i)
        return _clip_text(ids[i])


def _clip_text(v: Any) -> str:
    """A clip id as text: bytes decoded, a numpy scalar as its Python value, a row (an id stored as several columns:
    array, list or tuple) as its entries' texts joined by ``|`` (a row of one entry: that entry) -- never numpy's
    printed form of a row, which rounds floats, follows the print options and keeps ``b'...'``."""
    if isinstance(v, np.ndarray):
        v = v.tolist()
    if isinstance(v, (list, tuple)):
        parts = [_clip_text(x) for x in v]
        return parts[0] if len(parts) == 1 else "|".join(parts)
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, bytes):
        return v.decode("utf-8", "backslashreplace")
    return str(v)


def _missing_id(v: Any) -> bool:
    """An id entry that names no clip: None, or a float NaN (a missing value in a numeric id column)."""
    if isinstance(v, np.generic):
        v = v.item()
    return v is None or (isinstance(v, float) and v != v)


def _require_real(arr: np.ndarray, what: str, expected: str = "real numbers") -> None:
    """Raise unless ``arr`` has a real numeric (or bool) dtype. Casting did not refuse the others: a complex
    array lost its imaginary part with only a ComplexWarning, and an array of strings such as '0.5' was parsed
    as numbers."""
    if arr.dtype.kind in "biuf":
        return
    kind = {"c": "complex", "U": "text", "S": "bytes", "O": "Python objects"}.get(arr.dtype.kind, "non-numeric")
    raise DatasetError(f"{what} must hold {expected}, got dtype {arr.dtype} ({kind} values)")
