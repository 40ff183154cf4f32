"""The shared adapter base :class:`_SleepDataset`: options, split selection, epoch index, signal cache.

Signals are cut into epochs and held as one contiguous array per recording so a sample is a slice
(a small LRU of recordings, ``max_cached_recordings``). An empty split raises
:class:`DatasetError` naming the subjects found, the rule and the fixes.

Shape (one sample):
    modalities[channel]  [1, 30 * sfreq_hz] float32, microvolts
    target               [] int64 stage id in 0..4
"""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from einops import rearrange

from ..base import DatasetError, MultimodalDataset
from .annotations import EPOCH_S, crop_wake
from .layouts import _split_counts, _subject_split


class _SleepDataset(MultimodalDataset):
    __module__ = "fusebench.datasets.sleep"  # its public path, as before the split into a package

    OPTIONS = frozenset({"crop_wake_min", "max_cached_recordings", "pairs", "sfreq_hz", "split_subjects",
                         "test_fraction", "val_fraction"})
    #: their types, checked when a benchmark spec is loaded (fusebench.options)
    OPTION_TYPES: ClassVar[dict[str, Any]] = {
        "crop_wake_min": float | None, "max_cached_recordings": int, "pairs": list, "sfreq_hz": float,
        "split_subjects": dict | None, "test_fraction": float, "val_fraction": float}

    task = "classification"
    num_classes = 5
    #: the test subjects are split_subjects' or the fixed subject split of test_fraction; no split_seed is taken
    SPLIT_SEED_MOVES_TEST: ClassVar[bool | None] = False
    fixed_num_classes = True  # the same count under every option (MultimodalDataset.delivers)
    CHANNELS: ClassVar[tuple[str, ...]] = ()
    #: the files of a recording a prepared cache depends on (keys of a recording's index entry); each adapter's own
    SOURCE_KEYS: ClassVar[tuple[str, ...]]
    DEFAULT_CROP_WAKE_MIN: ClassVar[float | None] = None
    SYNTHETIC_VERSION = 1

    def _index(self) -> list[tuple[int, int]]:
        o = self._opts_rest
        self.sfreq_hz = float(o.get("sfreq_hz", 100.0))
        if self.sfreq_hz <= 0:
            raise DatasetError(f"{self.id}: sfreq_hz must be positive, got {self.sfreq_hz}")
        self.crop_wake_min = o.get("crop_wake_min", self.DEFAULT_CROP_WAKE_MIN)
        self.max_cached_recordings = int(o.get("max_cached_recordings", 4))
        labels_of = {m.name: c for m, c in zip(type(self).MODALITIES, self.CHANNELS)}
        self._labels = [labels_of[m] for m in self.modalities]
        recordings = self._find_recordings()
        if not recordings:
            raise DatasetError(f"{self.id}: no recordings found under {self.root}.\n{self.info()}")
        chosen = o.get("split_subjects")
        self._found = recordings
        if chosen is not None:
            if not isinstance(chosen, dict):
                raise DatasetError(f"{self.id}: split_subjects must map split -> list of subject ids, "
                                   f"got {type(chosen).__name__}")
            keep = set(map(str, chosen.get(self.split) or []))
            self._split_rule = f"split_subjects[{self.split!r}] = {sorted(keep)}"
        else:
            vf, tf = float(o.get("val_fraction", 0.1)), float(o.get("test_fraction", 0.2))
            try:
                keep = _subject_split([r["subject"] for r in recordings], self.split, vf, tf)
            except DatasetError as e:
                raise DatasetError(f"{self.id}: {e}") from None
            n_sub = len({r["subject"] for r in recordings})
            c = _split_counts(n_sub, vf, tf)
            self._split_rule = (f"subject-wise split: subjects ordered by sha256 of their id, "
                                f"test_fraction={tf:g} -> {c['test']}, val_fraction={vf:g} -> {c['val']}, "
                                f"the rest -> train ({c['train']}) of {n_sub} subject(s)")
        self.recordings = [r for r in recordings if r["subject"] in keep]
        self._loaded: OrderedDict[int, np.ndarray] = OrderedDict()
        samples: list[tuple[int, int]] = []
        for ri, rec in enumerate(self.recordings):
            labels = self._epoch_labels(rec)
            kept = crop_wake(labels, self.crop_wake_min)
            rec["epoch_index"] = kept
            rec["stages"] = labels[kept]
            rec["stages_t"] = torch.from_numpy(rec["stages"])
            samples.extend((ri, j) for j in range(kept.shape[0]))
        return samples

    def _empty_split_message(self) -> str:
        """Why this split holds no epochs: the subjects/files found, the split rule and how to fix it."""
        subjects = sorted({r["subject"] for r in self._found})
        files = [Path(r.get("psg", r.get("hea", r["name"]))).name for r in self._found]
        if self.recordings:  # the split has recordings, but no scored epoch survived
            names = [r["name"] for r in self.recordings]
            why = (f"its {len(names)} recording(s) {names} have no scored epoch left "
                   f"(unscored/'?'/movement epochs are dropped, crop_wake_min={self.crop_wake_min})")
        else:
            why = "no subject falls in it"
        return (
            f"{self.id}: split {self.split!r} is empty under {self.root}: {why}. Found {len(subjects)} subject(s) "
            f"{subjects[:20]}{' ...' if len(subjects) > 20 else ''} in {len(files)} recording(s) "
            f"{files[:10]}{' ...' if len(files) > 10 else ''}; split rule: {self._split_rule}. "
            f"Fix: add recordings of more subjects (3 give one subject each to train, val and test), change "
            f"val_fraction / test_fraction (options; --set dataset.options.val_fraction=...), or list the "
            f"subjects of every split with split_subjects={{train: [...], val: [...], test: [...]}} (for a "
            f"smoke run on one subject the same subject may be listed in all three; its scores are then "
            f"meaningless). Pass allow_empty=True to build an empty split on purpose."
        )

    def sample_keys(self) -> list[str]:
        """``<recording>:<epoch>`` of every sample (its ``meta`` id), without reading a signal: splits that
        list the same subject (the one-subject smoke recipe) share them."""
        return [f"{self.recordings[ri]['name']}:{int(self.recordings[ri]['epoch_index'][j])}" for ri, j in self.samples]

    def source_files(self) -> list[Path]:
        """The files of this split's recordings (hashed by ``fusebench data prepare``)."""
        return [Path(r[k]) for r in self.recordings for k in self.SOURCE_KEYS]

    def _recording_array(self, ri: int) -> np.ndarray:
        """[n_kept, C, 30 * sfreq] float32, contiguous; a small LRU of recordings stays in memory."""
        if ri in self._loaded:
            self._loaded.move_to_end(ri)
            return self._loaded[ri]
        rec = self.recordings[ri]
        x = self._read_signals(rec)  # [C, n]
        t = int(round(EPOCH_S * self.sfreq_hz))
        n_epochs = x.shape[1] // t
        epochs = rearrange(x[:, : n_epochs * t], "c (e t) -> e c t", t=t)
        arr = np.ascontiguousarray(epochs[rec["epoch_index"]], dtype=np.float32)
        self._loaded[ri] = arr
        while len(self._loaded) > self.max_cached_recordings:
            self._loaded.popitem(last=False)
        return arr

    def _load_raw(self, index: int) -> dict[str, Any]:
        ri, j = self.samples[index]
        rec = self.recordings[ri]
        arr = self._recording_array(ri)
        epoch = int(rec["epoch_index"][j])
        x = torch.from_numpy(arr[j].copy())  # [C, T], one copy; the modalities are views of it
        return {
            "modalities": {m: x[c:c + 1] for c, m in enumerate(self.modalities)},
            "target": rec["stages_t"][j],
            "meta": {"id": f"{rec['name']}:{epoch}", "record": rec["name"], "subject": rec["subject"],
                     "night": rec.get("night"), "epoch": epoch, "onset_s": epoch * EPOCH_S},
        }
