"""Sleep stages: the stage map, hypnogram readers (EDF+ TALs, PhysioNet 2018 arousal files) and epoching.

Task: 5-class sleep staging of 30-s epochs (:data:`EPOCH_S`), W, N1, N2, N3, REM -> 0..4
(:data:`STAGES`; :data:`STAGE_MAP` maps the Sleep-EDF hypnogram descriptions, R&K stages 3 and 4
merged into N3).

* Sleep-EDF hypnograms (``*-Hypnogram.edf``, EDF+C annotations): the TAL syntax of every
  'EDF Annotations' signal is checked (:func:`read_edf_annotations`, EDF+ spec section 2.2,
  https://www.edfplus.info/specs/edfplus.html) before mne reads the file
  (:func:`read_hypnogram`), since mne skips malformed annotations. The annotations are expanded
  into 30-s epochs on the PSG's grid (an epoch takes a stage only when one annotation covers it
  entirely) and clipped to the signal (annotations past the end are ignored), see
  :func:`stage_epochs`. Movement time, ``?`` and unscored epochs are dropped; any other description
  is an error unless ``unknown_stages="skip"`` (then its epochs are dropped too). Wake cropping
  (:func:`crop_wake`): keep the epochs from ``crop_wake_min`` minutes before the first to
  ``crop_wake_min`` after the last sleep epoch; a recording without any sleep epoch (e.g. the
  5-minute fixture) is left intact; ``None`` disables cropping.
* PhysioNet 2018: ``<rec>-arousal.mat`` (MATLAB v7.3 = HDF5) with
  ``data/sleep_stages/{wake, nonrem1, nonrem2, nonrem3, rem, undefined}`` sample-wise 0/1 vectors
  read with h5py (:func:`read_arousal_stages`; written by :func:`write_arousal_mat`). An epoch's
  stage is the majority indicator over its samples (ties -> the earlier of W, N1, N2, N3, REM,
  undefined); undefined epochs are dropped (:func:`physionet_epoch_stages`).
"""

from __future__ import annotations

import datetime as _dt
import logging
import math
import re
from pathlib import Path
from typing import Sequence

import h5py
import numpy as np
from einops import rearrange

from ..base import DatasetError
from .edf import read_edf_header

log = logging.getLogger(__package__)  # the logger of fusebench.datasets.sleep, as before the split


EPOCH_S = 30.0
STAGES = ("W", "N1", "N2", "N3", "REM")
#: hypnogram description -> stage id (-1 = dropped: movement, unknown '?')
STAGE_MAP = {
    "Sleep stage W": 0, "Sleep stage 1": 1, "Sleep stage 2": 2, "Sleep stage 3": 3, "Sleep stage 4": 3,
    "Sleep stage R": 4, "Sleep stage N1": 1, "Sleep stage N2": 2, "Sleep stage N3": 3,
    "Movement time": -1, "Sleep stage ?": -1,
}
PHYSIONET_STAGE_KEYS = ("wake", "nonrem1", "nonrem2", "nonrem3", "rem", "undefined")


# ---------------------------------------------------------------------------------------------
# EDF+ hypnogram (TALs), epoching
# ---------------------------------------------------------------------------------------------
_TAL_ONSET = re.compile(rb"[+-][0-9]+(\.[0-9]*)?")
_TAL_DURATION = re.compile(rb"[0-9]+(\.[0-9]*)?")


def _tal_error(path: Path, at: int, expected: str, found: bytes) -> DatasetError:
    return DatasetError(f"{path}: bad EDF+ annotation at byte {at}: expected {expected}, found {found[:24]!r}")


def _parse_tal_block(path: Path, block: bytes, at: int) -> list[tuple[float, float | None, str]]:
    """The TALs of one data record's 'EDF Annotations' bytes ``block`` (file offset ``at``).

    EDF+ spec section 2.2.2: each TAL is ``[+-]onset [0x15 duration] 0x14 (text 0x14)+ 0x00``
    (onset signed, duration unsigned, both decimal numbers in ASCII, texts UTF-8); unused bytes at
    the end of the record are 0x00. Returns (onset_s, duration_s or None, text) for every non-empty
    text. Raises :class:`DatasetError` with the file offset and what was expected.
    """
    out = []
    pos, n = 0, len(block)
    while pos < n:
        if block[pos] == 0:  # padding: the rest of the record must be 0x00
            junk = next((k for k in range(pos, n) if block[k] != 0), None)
            if junk is not None:
                raise _tal_error(path, at + junk, "0x00 padding after the last TAL of the record (or a TAL "
                                 "starting with '+' or '-')", block[junk:])
            break
        if block[pos] not in b"+-":
            raise _tal_error(path, at + pos, "a TAL onset starting with '+' or '-'", block[pos:])
        end = block.find(b"\x00", pos)
        if end < 0:
            raise _tal_error(path, at + pos, "a TAL ended by 0x00 before the end of the data record", block[pos:])
        tal = block[pos:end]
        j = tal.find(b"\x14")
        if j < 0:
            raise _tal_error(path, at + pos, "0x14 after the TAL onset (and duration)", tal)
        onset_b, sep, dur_b = tal[:j].partition(b"\x15")
        if not _TAL_ONSET.fullmatch(onset_b):
            raise _tal_error(path, at + pos, "an onset of '+' or '-' then digits [. digits]", onset_b)
        if sep and not _TAL_DURATION.fullmatch(dur_b):
            raise _tal_error(path, at + pos + len(onset_b) + 1, "a duration of digits [. digits] after 0x15", dur_b)
        body = tal[j + 1:]
        if not body.endswith(b"\x14"):
            raise _tal_error(path, at + pos + j + 1, "annotation text ended by 0x14 before the TAL's 0x00", body)
        t0 = at + pos + j + 1  # file offset of the current text
        for text in body[:-1].split(b"\x14"):
            if b"\x15" in text:
                raise _tal_error(path, t0, "annotation text without 0x15", text)
            try:
                desc = text.decode("utf-8")
            except UnicodeDecodeError:
                raise _tal_error(path, t0, "UTF-8 annotation text", text) from None
            if desc:
                out.append((float(onset_b), float(dur_b) if sep else None, desc))
            t0 += len(text) + 1
        pos = end + 1
    return out


def read_edf_annotations(path: Path) -> list[tuple[float, float | None, str]]:
    """Every annotation of an EDF+ file's 'EDF Annotations' signal(s), TAL syntax checked.

    The header is checked first (:func:`read_edf_header`). Returns (onset_s, duration_s or None,
    text) in file order (time-keeping TALs, whose text is empty, are left out). Raises
    :class:`DatasetError` naming the file, the byte offset and what was expected.
    """
    hdr = read_edf_header(path)
    chans = [i for i, lab in enumerate(hdr["labels"]) if lab == "EDF Annotations"]
    if not chans:
        raise DatasetError(f"{path}: no 'EDF Annotations' signal (signals {hdr['labels']}); an EDF+ hypnogram "
                           f"was expected")
    starts = np.concatenate([[0], np.cumsum(hdr["spr"])]) * 2  # byte offset of each signal in a record
    out = []
    try:
        with open(path, "rb") as f:
            for r in range(hdr["n_records"]):
                for c in chans:
                    at = hdr["header_bytes"] + r * hdr["record_bytes"] + int(starts[c])
                    f.seek(at)
                    out.extend(_parse_tal_block(path, f.read(int(starts[c + 1] - starts[c])), at))
    except OSError as e:
        raise DatasetError(f"{path}: cannot read EDF file ({e})") from e
    return out


def read_hypnogram(path: Path) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(onset_s, duration_s, descriptions) of an EDF+ hypnogram, via mne.read_annotations.

    The header and the TAL syntax are checked first (:func:`read_edf_annotations`); mne must find
    the same number of annotations.
    """
    import mne

    tals = read_edf_annotations(path)
    try:
        ann = mne.read_annotations(path)
    except Exception as e:
        raise DatasetError(f"{path}: not a readable EDF+ hypnogram ({type(e).__name__}: {e})") from e
    if len(ann) != len(tals):
        raise DatasetError(f"{path}: mne read {len(ann)} annotations, the file's TALs hold {len(tals)}")
    return np.asarray(ann.onset, float), np.asarray(ann.duration, float), [str(d) for d in ann.description]


UNKNOWN_STAGES = ("error", "skip")


def stage_epochs(onsets: np.ndarray, durations: np.ndarray, descriptions: Sequence[str], n_epochs: int,
                 epoch_s: float = EPOCH_S, source: str = "", unknown_stages: str = "error") -> np.ndarray:
    """Per-epoch stage ids on the grid [k * epoch_s, (k + 1) * epoch_s), k < n_epochs.

    An epoch takes an annotation's stage when the annotation covers it entirely; epochs covered by
    none (or by a dropped description: ``Movement time``, ``Sleep stage ?``) are -1. Annotations
    beyond the grid are clipped away. An epoch covered entirely by two annotations of different stage
    ids (Movement time and ``?`` count as -1; R&K stages 3 and 4 both as N3) raises
    :class:`DatasetError` naming ``source`` and both annotations (onset, duration, description): the
    last one used to win silently. Overlaps that agree are kept (the official hypnograms have none). A description outside :data:`STAGE_MAP` (e.g. a damaged
    ``Sleep stafe W``) raises :class:`DatasetError` naming ``source`` and the text, wherever it lies
    in the night; ``unknown_stages="skip"`` drops its epochs with a warning instead.
    Shape: -> [n_epochs] int64.
    """
    if unknown_stages not in UNKNOWN_STAGES:
        raise DatasetError(f"unknown_stages={unknown_stages!r} must be one of {list(UNKNOWN_STAGES)}")
    unknown: dict[str, list[float]] = {}
    for onset, desc in zip(onsets, descriptions):
        if desc not in STAGE_MAP:
            unknown.setdefault(desc, []).append(float(onset))
    if unknown and unknown_stages == "error":
        found = "; ".join(f"{d!r} ({len(o)} annotation(s), first at onset {o[0]:g} s)"
                          for d, o in sorted(unknown.items()))
        raise DatasetError(
            f"{source or 'hypnogram'}: unknown hypnogram description(s) {found}; the known descriptions are "
            f"{sorted(STAGE_MAP)} ('Movement time' and 'Sleep stage ?' epochs are dropped, the others are stages). "
            "The file may be damaged or not a Sleep-EDF hypnogram; pass the option unknown_stages='skip' "
            "(--set dataset.options.unknown_stages=skip) to drop the epochs of unknown descriptions instead")
    labels = np.full(n_epochs, -1, dtype=np.int64)
    owner = np.full(n_epochs, -1, dtype=np.int64)  # the annotation that scored each epoch (-1: none)
    for a, (onset, dur, desc) in enumerate(zip(onsets, durations, descriptions)):
        if desc not in STAGE_MAP:
            continue
        k0 = max(0, int(math.ceil(onset / epoch_s - 1e-6)))
        k1 = min(n_epochs, int(math.floor((onset + dur) / epoch_s + 1e-6)))
        if k1 <= k0:
            continue
        stage = STAGE_MAP[desc]
        clash = np.flatnonzero((owner[k0:k1] >= 0) & (labels[k0:k1] != stage))
        if clash.size:
            b, k = int(owner[k0 + clash[0]]), k0 + int(clash[0])
            n_both = int(((owner[k0:k1] == b) & (labels[k0:k1] != stage)).sum())
            ann = [f"onset {float(onsets[i]):g} s, duration {float(durations[i]):g} s, {descriptions[i]!r}"
                   for i in (b, a)]
            raise DatasetError(
                f"{source or 'hypnogram'}: overlapping annotations give {n_both} epoch(s) two different stages, "
                f"first epoch {k} ({k * epoch_s:g}..{(k + 1) * epoch_s:g} s): the annotation at {ann[0]} and the one "
                f"at {ann[1]}; each epoch must have one stage (the file is damaged or was edited)")
        labels[k0:k1] = stage
        owner[k0:k1] = a
    if unknown:
        log.warning("%s: unknown_stages='skip': dropped the epochs of unknown hypnogram descriptions %s", source,
                    sorted(unknown))
    return labels


def crop_wake(labels: np.ndarray, crop_wake_min: float | None, epoch_s: float = EPOCH_S) -> np.ndarray:
    """Indices of the epochs kept: scored ones within ``crop_wake_min`` of the first/last sleep epoch.

    Recordings with no sleep epoch are not cropped. Shape: [n_epochs] -> [n_kept] int64.
    """
    keep = labels >= 0
    sleep = np.flatnonzero(labels >= 1)
    if crop_wake_min is not None and sleep.size:
        margin = int(round(crop_wake_min * 60.0 / epoch_s))
        idx = np.arange(labels.shape[0])
        keep &= (idx >= sleep[0] - margin) & (idx <= sleep[-1] + margin)
    return np.flatnonzero(keep)


# ---------------------------------------------------------------------------------------------
# PhysioNet 2018: MATLAB v7.3 arousal file
# ---------------------------------------------------------------------------------------------
def read_arousal_stages(path: Path) -> np.ndarray:
    """Sample-wise stage indicators of a ``-arousal.mat``. Shape: -> [6, n_samples] (W..REM, undefined)."""
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        raise DatasetError(f"{path}: not a readable MATLAB v7.3 (HDF5) arousal file ({e})") from e
    with f:
        if "data" not in f or "sleep_stages" not in f["data"]:
            raise DatasetError(f"{path}: expected group data/sleep_stages with {list(PHYSIONET_STAGE_KEYS)}; "
                               f"found {list(f.keys())}")
        g = f["data"]["sleep_stages"]
        missing = [k for k in PHYSIONET_STAGE_KEYS if k not in g]
        if missing:
            raise DatasetError(f"{path}: data/sleep_stages lacks {missing} (has {list(g.keys())})")
        rows = [np.asarray(g[k][()]).reshape(-1) for k in PHYSIONET_STAGE_KEYS]
    if len({r.shape[0] for r in rows}) != 1:
        raise DatasetError(f"{path}: sleep_stages vectors differ in length {[r.shape[0] for r in rows]}")
    for key, row in zip(PHYSIONET_STAGE_KEYS, rows):
        # sample-wise 0/1 indicators: a NaN won the per-epoch argmax (an undefined epoch became wake), a
        # negative value lost it (REM epochs dropped), each silently
        if row.dtype.kind not in "biuf":
            raise DatasetError(f"{path}: data/sleep_stages/{key} has dtype {row.dtype}; expected 0/1 indicators")
        bad = ~np.isin(row, (0, 1))
        if bad.any():
            first = int(np.flatnonzero(bad)[0])
            raise DatasetError(
                f"{path}: data/sleep_stages/{key} holds {int(bad.sum())} value(s) other than 0 and 1 (first at sample "
                f"{first}: {row[first].item()!r}); the stage vectors are sample-wise 0/1 indicators")
    return np.stack(rows)


def physionet_epoch_stages(indicators: np.ndarray, samples_per_epoch: int) -> np.ndarray:
    """Majority stage per epoch from [6, n] indicators; undefined / unannotated -> -1. -> [n_epochs]."""
    n_epochs = indicators.shape[1] // samples_per_epoch
    ind = indicators[:, : n_epochs * samples_per_epoch].astype(np.float64)
    counts = rearrange(ind, "s (e t) -> e s t", t=samples_per_epoch).sum(axis=-1)  # [n_epochs, 6]
    best = counts.argmax(axis=1)
    best[(best == 5) | (counts.max(axis=1) <= 0)] = -1
    return best.astype(np.int64)


def write_arousal_mat(path: Path, stages: np.ndarray, arousals: np.ndarray) -> None:
    """MATLAB v7.3 arousal file: 512-byte MAT header in the HDF5 user block, struct ``data`` with
    ``arousals`` and ``sleep_stages.{wake, nonrem1, nonrem2, nonrem3, rem, undefined}``, each stored
    as MATLAB does a column vector (HDF5 shape [1, n], class double).
    Shape: stages [n] int in 0..4 or 5 (undefined), arousals [n].
    """
    text = (f"MATLAB 7.3 MAT-file, Platform: GLNXA64, Created on: "
            f"{_dt.datetime(2018, 1, 1).strftime('%a %b %d %H:%M:%S %Y')} HDF5 schema 1.00 .").encode()
    user_block = text.ljust(116, b" ") + b"\x00" * 8 + b"\x00\x02" + b"IM"
    with h5py.File(path, "w", userblock_size=512) as f:
        data = f.create_group("data")
        data.attrs["MATLAB_class"] = np.bytes_(b"struct")
        ds = data.create_dataset("arousals", data=np.asarray(arousals, np.float64)[None, :])
        ds.attrs["MATLAB_class"] = np.bytes_(b"double")
        st = data.create_group("sleep_stages")
        st.attrs["MATLAB_class"] = np.bytes_(b"struct")
        for k, key in enumerate(PHYSIONET_STAGE_KEYS):
            ds = st.create_dataset(key, data=(stages == k).astype(np.float64)[None, :])
            ds.attrs["MATLAB_class"] = np.bytes_(b"double")
    with open(path, "r+b") as f:
        f.write(user_block.ljust(512, b"\x00"))
