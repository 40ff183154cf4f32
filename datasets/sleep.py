"""Sleep-staging EEG adapters ``sleep_edf`` (Sleep-EDF Expanded) and ``physionet2018``
(PhysioNet/CinC Challenge 2018), with EDF/EDF+ and WFDB writers for their synthetic twins.

Task: 5-class sleep staging of 30-s epochs, W, N1, N2, N3, REM -> 0..4 (AASM; R&K stages 3 and 4
are merged into N3, Rechtschaffen & Kales 1968 / Iber et al. 2007). Views = EEG channels, each a
modality of kind ``signal`` (the M3G paper's EEG setting uses the six PhysioNet 2018 derivations as
k = 6 views).

* ``sleep_edf`` (Kemp et al., IEEE TBME 2000; Goldberger et al. 2000): ``*-PSG.edf`` (plain EDF) and
  ``*-Hypnogram.edf`` (EDF+C annotations) read with mne. A PSG pairs with the hypnogram sharing its
  first 6 characters (``SC4001E0-PSG.edf`` <-> ``SC4001EC-Hypnogram.edf``); option ``pairs`` (or a
  ``pairs.tsv`` manifest in the root, one ``psg<TAB>hypnogram`` per line) gives explicit pairs.
  Subject/night come from the ``SC4ssN`` / ``ST7ssN`` name (PSG first, then hypnogram). The
  annotations are shifted by the start-time difference of the two headers, expanded into 30-s
  epochs on the PSG's grid (an epoch takes a stage only when one annotation covers it entirely),
  and clipped to the signal (annotations past the end are ignored). Movement time, ``?`` and
  unscored epochs are dropped. Wake cropping (``crop_wake_min``, default 30): keep the epochs from
  30 min before the first to 30 min after the last sleep epoch; a recording without any sleep epoch
  (e.g. the 5-minute fixture) is left intact; ``None`` disables cropping. Every EDF is checked
  first (:func:`read_edf_header`: fixed header, file size = header + n_records * record bytes, a
  record count of -1 derived from the size) and the hypnogram's TAL syntax (:func:`read_edf_annotations`),
  since mne silently reads truncated files and skips malformed annotations.
* ``physionet2018`` (Ghassemi et al., CinC 2018): ``<rec>/<rec>.hea`` + ``<rec>.mat`` (WFDB format 16
  in a MATLAB v4 ``val`` matrix, byte offset 24) read with ``wfdb.rdrecord``; ``<rec>-arousal.mat``
  (MATLAB v7.3 = HDF5) with ``data/sleep_stages/{wake, nonrem1, nonrem2, nonrem3, rem, undefined}``
  sample-wise 0/1 vectors read with h5py. An epoch's stage is the majority indicator over its
  samples (ties -> the earlier of W, N1, N2, N3, REM, undefined); undefined epochs are dropped.
  Wake cropping is off by default (``crop_wake_min=None``). Signal file sizes (and the ``.mat``'s
  MATLAB v4 matrix size) are checked against the ``.hea`` (:func:`check_wfdb_files`).

Signals are read in microvolts, resampled to ``sfreq_hz`` (default 100) with a polyphase filter
(scipy.signal.resample_poly), cut into epochs and held as one contiguous array per recording so a
sample is a slice. Subject-wise splits: subjects ordered by sha256 of their id, ``test_fraction``
(0.2) then ``val_fraction`` (0.1) of them (rounded half up, at least one each when enough subjects
remain, see :func:`_split_counts`) go to test and val, the rest (>= 1) to train;
``split_subjects={"train": [...], ...}`` overrides. An empty split raises :class:`DatasetError`
naming the subjects found, the rule and the fixes.

Shape (one sample):
    modalities[channel]  [1, 30 * sfreq_hz] float32, microvolts
    target               [] int64 stage id in 0..4
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import logging
import math
import re
from collections import OrderedDict
from fractions import Fraction
from pathlib import Path
from typing import Any, ClassVar, Sequence

import h5py
import numpy as np
import torch
from einops import rearrange

from . import DATASETS
from .base import DataFile, DatasetError, Modality, MultimodalDataset, SyntheticSpec

log = logging.getLogger(__name__)

EPOCH_S = 30.0
STAGES = ("W", "N1", "N2", "N3", "REM")
#: hypnogram description -> stage id (-1 = dropped: movement, unknown '?')
STAGE_MAP = {
    "Sleep stage W": 0, "Sleep stage 1": 1, "Sleep stage 2": 2, "Sleep stage 3": 3, "Sleep stage 4": 3,
    "Sleep stage R": 4, "Sleep stage N1": 1, "Sleep stage N2": 2, "Sleep stage N3": 3,
    "Movement time": -1, "Sleep stage ?": -1,
}
PHYSIONET_STAGE_KEYS = ("wake", "nonrem1", "nonrem2", "nonrem3", "rem", "undefined")
PHYSIONET_CHANNELS = ("F3-M2", "F4-M1", "C3-M2", "C4-M1", "O1-M2", "O2-M1", "E1-M2", "Chin1-Chin2",
                      "ABD", "CHEST", "AIRFLOW", "SaO2", "ECG")
_NAME_RE = re.compile(r"(SC4|ST7)(\d\d)(\d)")


def channel_modality_name(label: str) -> str:
    """'EEG Fpz-Cz' -> 'fpz_cz'; 'F3-M2' -> 'f3_m2'."""
    label = re.sub(r"^(EEG|EOG|EMG)\s+", "", label.strip())
    return re.sub(r"[^a-z0-9]+", "_", label.lower()).strip("_")


# ---------------------------------------------------------------------------------------------
# EDF header check, signals, hypnogram
# ---------------------------------------------------------------------------------------------
#: EDF per-signal header fields in file order: (name, width in bytes); each is stored for all signals
_EDF_SIGNAL_FIELDS = (("label", 16), ("transducer", 80), ("dimension", 8), ("pmin", 8), ("pmax", 8),
                      ("dmin", 8), ("dmax", 8), ("prefilter", 80), ("spr", 8), ("reserved", 32))


def read_edf_header(path: Path) -> dict[str, Any]:
    """Validate an EDF/EDF+ header against the file size and return its fields.

    Checks (EDF spec sections 2.1.1-2.1.2): version '0'; header bytes = 256 * (ns + 1); every
    signal has >= 1 sample per record; the file size equals header bytes + n_records * record bytes,
    where record bytes = 2 * sum(samples per record). A truncated file or a record count larger than
    the data raises. A record count of -1 (allowed by the spec only while recording) is replaced by
    the count the file size gives when the data is a whole number of records. Trailing bytes shorter
    than one record are ignored with a warning; a whole extra record or more raises (mne would
    silently read them as data). Raises :class:`DatasetError` naming the file and the field.

    Returns: start (datetime), n_records, record_s, n_signals, header_bytes, record_bytes, reserved,
    labels [ns], spr [ns] (samples per record), file_bytes.
    """
    try:
        with open(path, "rb") as f:
            head = f.read(256)
            size = f.seek(0, 2)
            f.seek(256)
            sig_head = f.read()  # sliced to the signal header below
    except OSError as e:
        raise DatasetError(f"{path}: cannot read EDF file ({e})") from e

    def bad(what: str) -> DatasetError:
        return DatasetError(f"{path}: bad EDF header: {what}")

    if len(head) < 256:
        raise bad(f"file has {len(head)} bytes, the fixed header alone is 256")
    try:
        text = head.decode("ascii")
    except UnicodeDecodeError as e:
        raise bad("non-ASCII bytes in the fixed header") from e
    if text[:8].strip() != "0":
        raise bad(f"version field {text[:8]!r} must be '0'")
    try:
        header_bytes, n_records = int(text[184:192]), int(text[236:244])
        record_s, n_signals = float(text[244:252]), int(text[252:256])
    except ValueError as e:
        raise bad(f"non-numeric size fields ({e})") from e
    if n_signals < 1 or header_bytes != 256 * (n_signals + 1):
        raise bad(f"{n_signals} signals need a {256 * (n_signals + 1)}-byte header, field says {header_bytes}")
    if size < header_bytes:
        raise bad(f"file has {size} bytes, shorter than its {header_bytes}-byte header")
    if n_records < -1 or record_s < 0 or not math.isfinite(record_s):
        raise bad(f"n_records={n_records}, record duration={record_s}")
    try:
        d, t = text[168:176], text[176:184]
        day, month, yy = (int(v) for v in d.split("."))
        hh, mm, ss = (int(v) for v in t.split("."))
        year = 1900 + yy if yy >= 85 else 2000 + yy  # EDF spec: 85-99 -> 19xx
        start = _dt.datetime(year, month, day, hh, mm, ss)
    except ValueError as e:
        raise bad(f"start date/time {text[168:184]!r} is not dd.mm.yyhh.mm.ss") from e

    fields: dict[str, list[str]] = {}
    off = 0
    for name, width in _EDF_SIGNAL_FIELDS:
        raw = sig_head[off:off + width * n_signals]
        fields[name] = [raw[i * width:(i + 1) * width].decode("latin-1").strip() for i in range(n_signals)]
        off += width * n_signals
    try:
        spr = [int(v) for v in fields["spr"]]
    except ValueError as e:
        raise bad(f"non-numeric samples-per-record field ({e})") from e
    if min(spr) < 1:
        raise bad(f"samples per record {spr} must all be >= 1")
    record_bytes = 2 * sum(spr)
    data_bytes = size - header_bytes
    whole, rest = divmod(data_bytes, record_bytes)
    where = (f"{size}-byte file = {header_bytes}-byte header + {data_bytes} data bytes "
             f"({whole} whole records of {record_bytes} bytes + {rest} bytes)")
    if n_records == -1:
        if rest or whole == 0:
            raise bad(f"record count -1 (recording not closed) and the data is not a whole, non-zero number "
                      f"of records: {where}")
        log.info("%s: EDF record count is -1; using %d records from the file size", path, whole)
        n_records = whole
    elif whole < n_records:
        raise DatasetError(
            f"{path}: truncated EDF file: the header declares {n_records} data records of {record_bytes} bytes "
            f"({header_bytes + n_records * record_bytes} bytes in all), the file has {size} bytes: {where}. "
            f"Download the file again (or fix the record count at header byte 236)"
        )
    elif whole > n_records:
        raise bad(f"the header declares {n_records} data records but the file holds {whole}: {where}")
    elif rest:
        log.warning("%s: %d trailing bytes after the %d declared EDF records are ignored", path, rest, n_records)
    return {"start": start, "n_records": n_records, "record_s": record_s, "n_signals": n_signals,
            "header_bytes": header_bytes, "record_bytes": record_bytes, "reserved": text[192:236].strip(),
            "labels": fields["label"], "spr": spr, "file_bytes": size}


def _edf_start(path: Path) -> _dt.datetime:
    """Validate the EDF header (:func:`read_edf_header`) and return the start date/time."""
    return read_edf_header(path)["start"]


def read_edf_channels(path: Path, labels: Sequence[str], sfreq_hz: float) -> tuple[np.ndarray, float]:
    """Channels ``labels`` of an EDF in microvolts resampled to ``sfreq_hz``.

    Shape: -> [C, n_samples] float32; also returns the native (mne) sampling rate.
    """
    import mne

    _edf_start(path)
    try:
        raw = mne.io.read_raw_edf(path, preload=False, verbose="error")
    except Exception as e:  # mne raises many kinds on a corrupt file
        raise DatasetError(f"{path}: not a readable EDF file ({type(e).__name__}: {e})") from e
    missing = [c for c in labels if c not in raw.ch_names]
    if missing:
        raise DatasetError(f"{path}: channels {missing} not found; the file has {raw.ch_names}")
    try:
        x = raw.get_data(picks=list(labels), units="uV")
    except Exception as e:
        raise DatasetError(f"{path}: cannot read the signal data ({type(e).__name__}: {e})") from e
    return _resample(x, float(raw.info["sfreq"]), sfreq_hz), float(raw.info["sfreq"])


def _resample(x: np.ndarray, sfreq_in: float, sfreq_out: float) -> np.ndarray:
    """Polyphase resampling along the last axis (identity when the rates agree)."""
    if abs(sfreq_in - sfreq_out) < 1e-9:
        return np.ascontiguousarray(x, dtype=np.float32)
    from scipy.signal import resample_poly

    ratio = Fraction(sfreq_out / sfreq_in).limit_denominator(1000)
    return np.ascontiguousarray(resample_poly(x, ratio.numerator, ratio.denominator, axis=-1), dtype=np.float32)


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


def stage_epochs(onsets: np.ndarray, durations: np.ndarray, descriptions: Sequence[str], n_epochs: int,
                 epoch_s: float = EPOCH_S, source: str = "") -> np.ndarray:
    """Per-epoch stage ids on the grid [k * epoch_s, (k + 1) * epoch_s), k < n_epochs.

    An epoch takes an annotation's stage when the annotation covers it entirely; epochs covered by
    none (or by a dropped description) are -1. Annotations beyond the grid are clipped away.
    Shape: -> [n_epochs] int64.
    """
    labels = np.full(n_epochs, -1, dtype=np.int64)
    unknown = set()
    for onset, dur, desc in zip(onsets, durations, descriptions):
        if desc not in STAGE_MAP:
            unknown.add(desc)
            continue
        k0 = max(0, int(math.ceil(onset / epoch_s - 1e-6)))
        k1 = min(n_epochs, int(math.floor((onset + dur) / epoch_s + 1e-6)))
        if k1 > k0:
            labels[k0:k1] = STAGE_MAP[desc]
    if unknown:
        log.warning("%s: ignored hypnogram descriptions %s", source, sorted(unknown))
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
# EDF / EDF+ writer (synthetic twins; follows the EDF and EDF+ specifications)
# ---------------------------------------------------------------------------------------------
def _field(value: Any, width: int) -> bytes:
    s = value if isinstance(value, str) else _num(value, width)
    b = s.encode("ascii")
    if len(b) > width:
        raise ValueError(f"EDF field {s!r} longer than {width} characters")
    return b.ljust(width, b" ")


def _num(v: float, width: int = 8) -> str:
    if float(v).is_integer():
        return str(int(v))
    for prec in range(width, 0, -1):
        s = f"{v:.{prec}g}"
        if len(s) <= width:
            return s
    raise ValueError(f"cannot write {v} in {width} characters")


def write_edf(path: Path, signals: Sequence[dict[str, Any]], start: _dt.datetime, record_s: float = 30.0,
              patient: str = "X X X X", recording: str | None = None,
              annotations: Sequence[tuple[float, float, str]] | None = None) -> None:
    """Write an EDF (or, with ``annotations``, an EDF+C annotation-only) file.

    ``signals``: dicts with ``label``, ``data`` (physical values, µV), ``sfreq``; optional
    ``dimension`` ('uV'), ``transducer``, ``prefilter``. Digital values are int16 over the full range
    [-32768, 32767] mapped linearly onto [phys_min, phys_max] (EDF spec section 2.1.3.2).
    Annotations are written as TALs (EDF+ spec section 2.2) in one record of duration 0, the layout
    of the Sleep-EDF hypnograms.
    """
    recording = recording or f"Startdate {start.strftime('%d-%b-%Y').upper()} X X X"
    headers: list[dict[str, Any]] = []
    records: list[list[bytes]] = []
    if annotations is not None:
        tal = b"+0\x14\x14\x00" + b"".join(
            f"+{_num(o, 20)}\x15{_num(d, 20)}\x14{desc}\x14\x00".encode("latin-1") for o, d, desc in annotations)
        n_spr = (len(tal) + 1) // 2
        headers.append(dict(label="EDF Annotations", dimension="", pmin=0, pmax=1, dmin=-32768, dmax=32767,
                            spr=n_spr, transducer="", prefilter=""))
        records = [[tal.ljust(2 * n_spr, b"\x00")]]
        n_records, record_s, reserved = 1, 0, "EDF+C"
    else:
        reserved = ""
        n_records = None
        for sig in signals:
            data = np.asarray(sig["data"], dtype=np.float64)
            spr = sig["sfreq"] * record_s
            if not float(spr).is_integer() or data.shape[0] % int(spr):
                raise ValueError(f"signal {sig['label']}: {data.shape[0]} samples are not whole records")
            spr = int(spr)
            n = data.shape[0] // spr
            if n_records is not None and n != n_records:
                raise ValueError("signals span different numbers of records")
            n_records = n
            lo, hi = float(np.floor(data.min())) - 1.0, float(np.ceil(data.max())) + 1.0
            dig = np.round((data - lo) / (hi - lo) * 65535.0 - 32768.0).clip(-32768, 32767).astype("<i2")
            headers.append(dict(label=sig["label"], dimension=sig.get("dimension", "uV"), pmin=lo, pmax=hi,
                                dmin=-32768, dmax=32767, spr=spr, transducer=sig.get("transducer", ""),
                                prefilter=sig.get("prefilter", ""), dig=dig))
        records = [[h["dig"][r * h["spr"]:(r + 1) * h["spr"]].tobytes() for h in headers] for r in range(n_records)]
    ns = len(headers)
    head = b"".join([
        _field("0", 8), _field(patient, 80), _field(recording, 80), _field(start.strftime("%d.%m.%y"), 8),
        _field(start.strftime("%H.%M.%S"), 8), _field(256 * (ns + 1), 8), _field(reserved, 44),
        _field(n_records, 8), _field(record_s, 8), _field(ns, 4),
    ])
    for key, width in (("label", 16), ("transducer", 80), ("dimension", 8), ("pmin", 8), ("pmax", 8),
                       ("dmin", 8), ("dmax", 8), ("prefilter", 80), ("spr", 8)):
        head += b"".join(_field(h[key], width) for h in headers)
    head += b" " * (32 * ns)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(head)
        for rec in records:
            f.write(b"".join(rec))
    tmp.replace(path)


# ---------------------------------------------------------------------------------------------
# PhysioNet 2018: WFDB record + MATLAB v7.3 arousal file
# ---------------------------------------------------------------------------------------------
def read_wfdb_channels(record: Path, labels: Sequence[str], sfreq_hz: float) -> tuple[np.ndarray, float]:
    """Channels of a WFDB record (``record`` without extension) in µV, resampled. -> [C, n] float32."""
    import wfdb

    try:
        hdr = wfdb.rdheader(str(record))
    except Exception as e:
        raise DatasetError(f"{record}.hea: not a readable WFDB header ({type(e).__name__}: {e})") from e
    missing = [c for c in labels if c not in hdr.sig_name]
    if missing:
        raise DatasetError(f"{record}.hea: channels {missing} not found; the record has {hdr.sig_name}")
    check_wfdb_files(record, hdr)
    try:
        rec = wfdb.rdrecord(str(record), channel_names=list(labels))
    except Exception as e:
        raise DatasetError(f"{record}: cannot read the WFDB signals ({type(e).__name__}: {e})") from e
    scale = np.array([{"uv": 1.0, "mv": 1e3, "v": 1e6}.get(str(u).lower(), 1.0) for u in rec.units])
    x = rearrange(rec.p_signal, "n c -> c n") * scale[:, None]
    return _resample(x, float(rec.fs), sfreq_hz), float(rec.fs)


#: bytes per sample of the WFDB storage formats (signal file sizes are checked for these)
_WFDB_SAMPLE_BYTES = {"8": 1.0, "16": 2.0, "61": 2.0, "80": 1.0, "160": 2.0, "24": 3.0, "32": 4.0, "212": 1.5}


def check_wfdb_files(record: Path, hdr: Any) -> None:
    """Check a WFDB record's signal files against its header (``hdr`` from ``wfdb.rdheader``).

    Each signal file must exist and hold ``byte offset + n_signals_in_file * sig_len * bytes per
    sample`` bytes (formats in ``_WFDB_SAMPLE_BYTES``); a shorter file is truncated. A ``.mat``
    signal file with a byte offset (the wfdb2mat layout) must also have a MATLAB v4 header describing
    an [n_signals, sig_len] matrix. Raises :class:`DatasetError` naming the file and both sizes.
    """
    if hdr.sig_len is None or not hdr.file_name:
        return
    offsets = hdr.byte_offset or [None] * len(hdr.file_name)
    groups: dict[str, list[tuple[str, int]]] = {}
    for fname, fmt, off in zip(hdr.file_name, hdr.fmt, offsets):
        groups.setdefault(fname, []).append((str(fmt), int(off or 0)))
    for fname, sigs in groups.items():
        path = record.parent / fname
        try:
            size = path.stat().st_size
        except OSError:
            raise DatasetError(f"{record}.hea: signal file {path} does not exist") from None
        fmts, offs = {f for f, _ in sigs}, {o for _, o in sigs}
        if len(fmts) != 1 or len(offs) != 1 or next(iter(fmts)) not in _WFDB_SAMPLE_BYTES:
            continue  # mixed or uncommon formats: left to wfdb
        fmt, off = next(iter(fmts)), next(iter(offs))
        need = off + int(math.ceil(len(sigs) * hdr.sig_len * _WFDB_SAMPLE_BYTES[fmt]))
        if size < need:
            have = int((size - off) // (len(sigs) * _WFDB_SAMPLE_BYTES[fmt])) if size > off else 0
            raise DatasetError(
                f"{path}: truncated WFDB signal file: {record.name}.hea declares {len(sigs)} signals x "
                f"{hdr.sig_len} samples in format {fmt} after a {off}-byte offset = {need} bytes, the file has "
                f"{size} bytes ({have} whole samples per signal). Download the record again"
            )
        if size > need:
            log.warning("%s: %d bytes after the %d samples per signal declared in %s.hea are ignored",
                        path, size - need, hdr.sig_len, record.name)
        if path.suffix == ".mat" and off >= 20:
            with open(path, "rb") as f:
                mtype, mrows, ncols, _imag, namlen = np.frombuffer(f.read(20), "<i4").tolist()
            if 0 <= mtype < 1000 and 0 < namlen <= off - 20 and (mrows, ncols) != (len(sigs), hdr.sig_len):
                raise DatasetError(
                    f"{path}: its MATLAB v4 header holds a {mrows} x {ncols} matrix, {record.name}.hea declares "
                    f"{len(sigs)} signals x {hdr.sig_len} samples (the header's sample count is wrong, or the "
                    f"files belong to different records)"
                )


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
    return np.stack(rows)


def physionet_epoch_stages(indicators: np.ndarray, samples_per_epoch: int) -> np.ndarray:
    """Majority stage per epoch from [6, n] indicators; undefined / unannotated -> -1. -> [n_epochs]."""
    n_epochs = indicators.shape[1] // samples_per_epoch
    ind = indicators[:, : n_epochs * samples_per_epoch].astype(np.float64)
    counts = rearrange(ind, "s (e t) -> e s t", t=samples_per_epoch).sum(axis=-1)  # [n_epochs, 6]
    best = counts.argmax(axis=1)
    best[(best == 5) | (counts.max(axis=1) <= 0)] = -1
    return best.astype(np.int64)


def write_wfdb_mat_record(folder: Path, name: str, signals_uv: np.ndarray, fs: float,
                          sig_names: Sequence[str], gain: float = 10.0) -> None:
    """Write ``name.hea`` + ``name.mat`` as the PhysioNet 2018 challenge files do (wfdb2mat layout).

    The .mat is a MATLAB v4 file holding one int16 matrix ``val`` [n_sig, n_samples] (column-major,
    i.e. samples interleaved by channel) after a 24-byte header (20-byte MAT4 header + 'val\\0'),
    which the header describes as WFDB format 16 with byte offset 24 (``name.mat 16+24``).
    Shape: signals_uv [n_sig, n_samples] physical values in µV; digital = round(gain * value).
    """
    n_sig, n = signals_uv.shape
    dig = np.clip(np.round(signals_uv * gain), -32767, 32767).astype("<i2")
    # MAT v4 header: type 30 (little-endian, int16, full numeric), mrows, ncols, imagf, namlen
    mat_head = np.array([30, n_sig, n, 0, 4], dtype="<i4").tobytes() + b"val\x00"
    body = rearrange(dig, "c n -> n c").tobytes()  # column-major val == interleaved samples
    (folder / f"{name}.mat").write_bytes(mat_head + body)
    lines = [f"{name} {n_sig} {_num(fs)} {n}"]
    for c in range(n_sig):
        checksum = int(dig[c].astype(np.int64).sum()) & 0xFFFF
        checksum = checksum - 65536 if checksum >= 32768 else checksum
        lines.append(f"{name}.mat 16+24 {_num(gain)}/uV 16 0 {int(dig[c, 0])} {checksum} 0 {sig_names[c]}")
    (folder / f"{name}.hea").write_text("\n".join(lines) + "\n")


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


# ---------------------------------------------------------------------------------------------
# synthetic EEG
# ---------------------------------------------------------------------------------------------
_BANDS = {  # stage -> list of (centre Hz, width Hz, amplitude µV/sqrt(Hz)-ish)
    0: [(10.0, 1.0, 6.0), (20.0, 3.0, 1.5)],   # W: alpha (+ beta)
    1: [(6.0, 1.0, 5.0)],                      # N1: theta
    2: [(13.0, 0.8, 5.0), (1.0, 0.5, 5.0)],    # N2: sigma spindles + K-complex-like slow power
    3: [(1.5, 0.7, 14.0)],                     # N3: delta
    4: [(5.0, 1.5, 3.0), (20.0, 4.0, 2.0)],    # REM: mixed theta + beta
}


def _stage_profile(stage: int, f: np.ndarray) -> np.ndarray:
    return sum(a * np.exp(-0.5 * ((f - c) / w) ** 2) for c, w, a in _BANDS[stage])


def synth_eeg(stages: np.ndarray, sfreq: float, informativeness: float, rng: np.random.Generator) -> np.ndarray:
    """Epoch-wise spectral synthesis: 1/f background + w * stage bands + (1 - w) * mean bands.

    A channel with informativeness w = 0 has the same spectrum in every stage. Shape: [n_epochs]
    -> [n_epochs * 30 * sfreq] float64 µV.
    """
    t = int(EPOCH_S * sfreq)
    f = np.fft.rfftfreq(t, 1.0 / sfreq)
    bg = 2.0 / np.sqrt(1.0 + f)
    mean = sum(_stage_profile(s, f) for s in range(5)) / 5.0
    profiles = np.stack([bg + informativeness * _stage_profile(s, f) + (1 - informativeness) * mean
                         for s in range(5)])
    noise = np.fft.rfft(rng.normal(size=(len(stages), t)), axis=1)
    spec = noise * profiles[np.clip(stages, 0, 4)]
    return np.fft.irfft(spec, n=t, axis=1).reshape(-1) * math.sqrt(sfreq)


def synth_hypnogram(n_epochs: int, rng: np.random.Generator) -> np.ndarray:
    """A sticky Markov chain over W, N1, N2, N3, REM starting (and mostly ending) in wake."""
    trans = np.array([
        [0.65, 0.22, 0.10, 0.00, 0.03],
        [0.08, 0.45, 0.42, 0.00, 0.05],
        [0.03, 0.05, 0.67, 0.18, 0.07],
        [0.02, 0.00, 0.16, 0.82, 0.00],
        [0.06, 0.09, 0.10, 0.00, 0.75],
    ])
    out = np.zeros(n_epochs, dtype=np.int64)
    lead = min(3, n_epochs)
    for k in range(lead, n_epochs):
        out[k] = rng.choice(5, p=trans[out[k - 1]])
    if n_epochs > 6:
        out[-2:] = 0
    return out


# ---------------------------------------------------------------------------------------------
# adapters
# ---------------------------------------------------------------------------------------------
def _split_counts(n: int, val_fraction: float, test_fraction: float) -> dict[str, int]:
    """Subjects per split for ``n`` subjects: round(fraction * n) (half up) for test and val, at least
    one each when its fraction is positive and enough subjects remain, the rest (>= 1) to train.

    Priority when subjects are few: train, then test, then val (n = 1: 1/0/0; 2: 1/0/1; 3: 1/1/1 as
    train/val/test). For n >= 5 at the default fractions (0.1, 0.2) this equals plain rounding.
    """
    counts = {"train": 0, "val": 0, "test": 0}
    left = n - 1  # one subject always stays in train
    for split, frac in (("test", test_fraction), ("val", val_fraction)):
        want = int(math.floor(n * frac + 0.5))
        if frac > 0:
            want = max(1, want)
        counts[split] = max(0, min(want, left))
        left -= counts[split]
    counts["train"] = n - counts["test"] - counts["val"]
    return counts


def _subject_split(subjects: list[str], split: str, val_fraction: float, test_fraction: float) -> set[str]:
    """The subjects of ``split``: subjects ordered by sha256 of their id, then test, val, train."""
    for name, frac in (("val_fraction", val_fraction), ("test_fraction", test_fraction)):
        if not 0.0 <= frac < 1.0:
            raise DatasetError(f"{name} must be in [0, 1), got {frac}")
    if val_fraction + test_fraction >= 1.0:
        raise DatasetError(f"val_fraction + test_fraction must be below 1, got {val_fraction} + {test_fraction}")
    order = sorted(set(subjects), key=lambda s: hashlib.sha256(s.encode()).hexdigest())
    c = _split_counts(len(order), val_fraction, test_fraction)
    parts = {"test": order[:c["test"]], "val": order[c["test"]:c["test"] + c["val"]],
             "train": order[c["test"] + c["val"]:]}
    if split not in parts:
        raise DatasetError(f"unknown split {split!r}; expected one of {sorted(parts)}")
    return set(parts[split])


class _SleepDataset(MultimodalDataset):
    OPTIONS = frozenset({"crop_wake_min", "max_cached_recordings", "pairs", "sfreq", "sfreq_hz", "split_subjects",
                         "test_fraction", "val_fraction"})

    task = "classification"
    num_classes = 5
    CHANNELS: ClassVar[tuple[str, ...]] = ()
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

    def source_files(self) -> list[Path]:
        """The files of this split's recordings (hashed by ``fusebench data prepare``)."""
        keys = ("psg", "hyp") if self.id == "sleep_edf" else ("hea", "mat", "arousal")
        return [Path(r[k]) for r in self.recordings for k in keys]

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


@DATASETS.register("sleep_edf")
class SleepEDF(_SleepDataset):
    """Sleep-EDF Expanded: Fpz-Cz and Pz-Oz EEG at 100 Hz, R&K hypnograms mapped to 5 AASM stages."""

    id = "sleep_edf"
    CHANNELS = ("EEG Fpz-Cz", "EEG Pz-Oz")
    MODALITIES = (
        Modality("fpz_cz", "signal", 1, description="EEG Fpz-Cz, µV"),
        Modality("pz_oz", "signal", 1, description="EEG Pz-Oz, µV"),
    )
    DEFAULT_CROP_WAKE_MIN = 30.0
    FILES = (
        DataFile("**/*-PSG.edf", "polysomnograms (EDF), e.g. sleep-cassette/SC4001E0-PSG.edf"),
        DataFile("**/*-Hypnogram.edf", "hypnograms (EDF+), e.g. sleep-cassette/SC4001EC-Hypnogram.edf"),
        DataFile("pairs.tsv", "optional explicit 'psg<TAB>hypnogram' pairs", required=False),
    )
    INFO = """
Sleep-EDF Database Expanded (Kemp et al. 2000; ODC-By 1.0), https://physionet.org/content/sleep-edfx/1.0.0/
(sleep-cassette/SC4ssNE0-PSG.edf with SC4ssN?-Hypnogram.edf; sleep-telemetry/ST7ssN...).
"""

    def _find_recordings(self) -> list[dict[str, Any]]:
        pairs = self._opts_rest.get("pairs")
        if pairs is None and (self.root / "pairs.tsv").is_file():
            pairs = [line.split("\t") for line in (self.root / "pairs.tsv").read_text().splitlines() if line.strip()]
        if pairs is None:
            pairs = []
            for psg in sorted(self.root.rglob("*-PSG.edf")):
                hyps = sorted(psg.parent.glob(f"{psg.name[:6]}*-Hypnogram.edf"))
                if len(hyps) != 1:
                    raise DatasetError(f"{psg}: expected one hypnogram named {psg.name[:6]}*-Hypnogram.edf "
                                       f"next to it, found {[h.name for h in hyps]}")
                pairs.append((psg, hyps[0]))
        out = []
        for psg, hyp in pairs:
            psg, hyp = self.root / str(psg).strip(), self.root / str(hyp).strip()
            for p in (psg, hyp):
                if not p.is_file():
                    raise DatasetError(f"{self.id}: {p} does not exist")
            m = _NAME_RE.match(psg.name) or _NAME_RE.match(hyp.name)
            subject = f"{m.group(1)}{m.group(2)}" if m else psg.stem
            out.append({"name": psg.stem, "psg": psg, "hyp": hyp, "subject": subject,
                        "night": int(m.group(3)) if m else None})
        return out

    def _epoch_labels(self, rec: dict[str, Any]) -> np.ndarray:
        import mne

        start_psg = _edf_start(rec["psg"])
        start_hyp = _edf_start(rec["hyp"])
        try:
            raw = mne.io.read_raw_edf(rec["psg"], preload=False, verbose="error")
        except Exception as e:
            raise DatasetError(f"{rec['psg']}: not a readable EDF file ({type(e).__name__}: {e})") from e
        n_epochs = int(raw.n_times / raw.info["sfreq"] // EPOCH_S)
        onset, dur, desc = read_hypnogram(rec["hyp"])
        onset = onset + (start_hyp - start_psg).total_seconds()
        return stage_epochs(onset, dur, desc, n_epochs, source=str(rec["hyp"]))

    def _read_signals(self, rec: dict[str, Any]) -> np.ndarray:
        return read_edf_channels(rec["psg"], self._labels, self.sfreq_hz)[0]

    @classmethod
    def write_synthetic(cls, root: Path, spec: SyntheticSpec) -> None:
        """``n_subjects`` (options, default 5) SC4ss1E0-PSG.edf + SC4ss1EH-Hypnogram.edf pairs.

        PSG: Fpz-Cz and Pz-Oz (informativeness defaults 1.0 / 0.6) and a flat 1 Hz 'Event marker' at
        100 Hz/1 Hz in 30-s records; hypnogram: R&K descriptions (N3 written as stage 3 or 4 at
        random), one 'Movement time' epoch, and a trailing '?' running an hour past the signal.
        """
        rng = np.random.default_rng(spec.seed)
        n_sub = int(spec.options.get("n_subjects", 5))
        per = max(8, int(math.ceil(spec.num_samples / n_sub)))
        inf = {"fpz_cz": 1.0, "pz_oz": 0.6}
        inf.update(spec.informativeness)
        start = _dt.datetime(1989, 4, 24, 22, 0, 0)
        for s in range(n_sub):
            stages = synth_hypnogram(per, rng)
            sigs = [dict(label=lab, data=synth_eeg(stages, 100.0, float(inf[m.name]), rng), sfreq=100.0,
                         transducer="Ag-AgCl electrodes", prefilter="HP:0.5Hz LP:100Hz")
                    for lab, m in zip(cls.CHANNELS, cls.MODALITIES)]
            sigs.append(dict(label="Event marker", data=np.zeros(per * 30), sfreq=1.0, dimension=""))
            name = f"SC4{s:02d}1"
            write_edf(root / f"{name}E0-PSG.edf", sigs, start, patient="X F X Female_33yr")
            names = {0: "Sleep stage W", 1: "Sleep stage 1", 2: "Sleep stage 2", 4: "Sleep stage R"}
            per_epoch = [names.get(int(st)) or ("Sleep stage 3" if rng.random() < 0.5 else "Sleep stage 4")
                         for st in stages]
            per_epoch[int(rng.integers(0, per))] = "Movement time"
            ann: list[tuple[float, float, str]] = []
            k = 0
            while k < per:  # run-length encode, as the official hypnograms are
                j = k + 1
                while j < per and per_epoch[j] == per_epoch[k]:
                    j += 1
                ann.append((k * EPOCH_S, (j - k) * EPOCH_S, per_epoch[k]))
                k = j
            ann.append((per * EPOCH_S, 3600.0, "Sleep stage ?"))
            write_edf(root / f"{name}EH-Hypnogram.edf", [], start, patient="X F X Female_33yr", annotations=ann)


_PN_MODALITIES = tuple(Modality(channel_modality_name(c), "signal", 1, description=f"EEG {c}, µV")
                       for c in PHYSIONET_CHANNELS[:6])


@DATASETS.register("physionet2018")
class PhysioNet2018(_SleepDataset):
    """PhysioNet/CinC 2018: six EEG derivations (F3-M2 ... O2-M1) at 200 Hz as k = 6 views."""

    id = "physionet2018"
    CHANNELS = PHYSIONET_CHANNELS[:6]
    MODALITIES = _PN_MODALITIES
    FILES = (
        DataFile("**/<rec>/<rec>.hea", "WFDB header, e.g. training/tr03-0005/tr03-0005.hea"),
        DataFile("**/<rec>/<rec>.mat", "signals (WFDB format 16 in a MATLAB v4 'val' matrix)"),
        DataFile("**/<rec>/<rec>-arousal.mat", "MATLAB v7.3 sleep-stage and arousal annotations"),
    )
    INFO = """
You Snooze You Win: the PhysioNet/Computing in Cardiology Challenge 2018 (Ghassemi et al.; ODC-By 1.0),
https://physionet.org/content/challenge-2018/1.0.0/ (training/<rec>/<rec>.hea, .mat, -arousal.mat).
"""

    def _find_recordings(self) -> list[dict[str, Any]]:
        out = []
        for hea in sorted(self.root.rglob("*.hea")):
            rec = hea.with_suffix("")
            arousal = hea.parent / f"{rec.name}-arousal.mat"
            if not arousal.is_file():
                log.warning("%s: no %s, record skipped (unlabelled test record?)", hea, arousal.name)
                continue
            out.append({"name": rec.name, "record": rec, "arousal": arousal, "subject": rec.name,
                        "hea": hea, "mat": hea.with_suffix(".mat")})
        return out

    def _epoch_labels(self, rec: dict[str, Any]) -> np.ndarray:
        import wfdb

        try:
            hdr = wfdb.rdheader(str(rec["record"]))
        except Exception as e:
            raise DatasetError(f"{rec['record']}.hea: not a readable WFDB header ({type(e).__name__}: {e})") from e
        check_wfdb_files(rec["record"], hdr)
        ind = read_arousal_stages(rec["arousal"])
        if ind.shape[1] != hdr.sig_len:
            raise DatasetError(f"{rec['arousal']}: {ind.shape[1]} annotation samples for a "
                               f"{hdr.sig_len}-sample record")
        return physionet_epoch_stages(ind, int(round(EPOCH_S * hdr.fs)))

    def _read_signals(self, rec: dict[str, Any]) -> np.ndarray:
        return read_wfdb_channels(rec["record"], self._labels, self.sfreq_hz)[0]

    @classmethod
    def write_synthetic(cls, root: Path, spec: SyntheticSpec) -> None:
        """``n_subjects`` (default 5) records ``training/trSS-0NNN`` with all 13 challenge channels at
        200 Hz (the 6 EEG with informativeness C 1.0, F 0.7, O 0.4 by default; the others noise), a
        sleep stage hypnogram with 'undefined' first and last epochs, and a few arousal regions."""
        rng = np.random.default_rng(spec.seed)
        n_sub = int(spec.options.get("n_subjects", 5))
        per = max(8, int(math.ceil(spec.num_samples / n_sub)))
        inf = {"f3_m2": 0.7, "f4_m1": 0.7, "c3_m2": 1.0, "c4_m1": 1.0, "o1_m2": 0.4, "o2_m1": 0.4}
        inf.update(spec.informativeness)
        fs = 200.0
        t = int(EPOCH_S * fs)
        for s in range(n_sub):
            stages = synth_hypnogram(per + 2, rng)
            sample_stage = np.repeat(stages, t)
            sample_stage[:t] = 5  # undefined (lights on) at both ends
            sample_stage[-t:] = 5
            eeg = [synth_eeg(stages, fs, float(inf[m.name]), rng) for m in cls.MODALITIES]
            other = [rng.normal(scale=20.0, size=stages.shape[0] * t) for _ in PHYSIONET_CHANNELS[6:]]
            name = f"tr{s % 100:02d}-{s:04d}"
            folder = root / "training" / name
            folder.mkdir(parents=True, exist_ok=True)
            write_wfdb_mat_record(folder, name, np.stack(eeg + other), fs, PHYSIONET_CHANNELS)
            arousals = np.zeros(sample_stage.shape[0])
            for _ in range(2):
                a0 = int(rng.integers(0, arousals.shape[0] - 3 * int(fs)))
                arousals[a0:a0 + 3 * int(fs)] = 1
            write_arousal_mat(folder / f"{name}-arousal.mat", sample_stage, arousals)
