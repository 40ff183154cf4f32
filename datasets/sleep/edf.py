"""EDF / EDF+ files: header check, signal reading (via mne) and the writer of the synthetic twins.

Every EDF (PSG and hypnogram) is checked first (:func:`read_edf_header`: fixed header, file size =
header + n_records * record bytes, a record count of -1 derived from the size), since mne silently
reads truncated files. Signals are read in microvolts and resampled to ``sfreq_hz`` (default 100)
with a polyphase filter (scipy.signal.resample_poly), see :func:`read_edf_channels` and
:func:`_resample` (also used for the WFDB signals of PhysioNet 2018).

The writer (:func:`write_edf`) follows the EDF and EDF+ specifications
(https://www.edfplus.info/specs/edf.html, https://www.edfplus.info/specs/edfplus.html); the TALs of
EDF+ annotation signals are read in :mod:`.annotations`.
"""

from __future__ import annotations

import datetime as _dt
import logging
import math
from fractions import Fraction
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from fusebench.io import atomic_write

from ..base import DatasetError

log = logging.getLogger(__package__)  # the logger of fusebench.datasets.sleep, as before the split


# ---------------------------------------------------------------------------------------------
# EDF header check, signals
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

    Every signal's physical range must be finite and non-empty and its digital range integer with
    minimum < maximum (:func:`_signal_scales`). A record duration of 0 is accepted only in a file of
    'EDF Annotations' signals alone (an EDF+ hypnogram), as the EDF+ spec says: it would give the
    other signals an infinite sampling rate.

    Returns: start (datetime), n_records, record_s, n_signals, header_bytes, record_bytes, reserved,
    labels [ns], dimensions [ns] (physical dimension fields), spr [ns] (samples per record), file_bytes, pmin / pmax / dmin / dmax [ns].
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
    signals = [lab for lab in fields["label"] if lab != "EDF Annotations"]
    if record_s == 0 and signals:  # the EDF+ spec allows records of 0 s only in a file without ordinary signals
        raise bad(f"the record duration (bytes 244-252) is 0 s, but the file holds the signals {signals[:8]}"
                  f"{' ...' if len(signals) > 8 else ''}, whose sampling rates (samples per record / record "
                  "duration) it makes infinite; only an EDF+ file of annotations alone may have records of 0 s")
    scale = _signal_scales(fields, bad)
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
            "labels": fields["label"], "dimensions": fields["dimension"], "spr": spr, "file_bytes": size, **scale}


def _signal_scales(fields: dict[str, list[str]], bad) -> dict[str, list[float]]:
    """Check every signal's physical and digital range (EDF spec section 2.1.3.2); -> pmin, pmax, dmin, dmax.

    Physical minimum and maximum must be finite numbers that differ (a maximum below the minimum is an
    inverted signal, allowed by the spec); digital minimum and maximum must be integers with
    minimum < maximum. Any other value gives NaN, infinite or flat signals (mne divides by the ranges),
    so it raises naming the signal label and the header field.
    """
    out: dict[str, list[float]] = {"pmin": [], "pmax": [], "dmin": [], "dmax": []}
    names = {"pmin": "physical minimum", "pmax": "physical maximum",
             "dmin": "digital minimum", "dmax": "digital maximum"}
    for i, label in enumerate(fields["label"]):
        vals = {}
        for key, name in names.items():
            text = fields[key][i]
            try:
                v = float(text)
            except ValueError:
                v = math.nan
            if not math.isfinite(v) or (key in ("dmin", "dmax") and not v.is_integer()):
                kind = "an integer" if key in ("dmin", "dmax") else "a finite number"
                raise bad(f"signal {i + 1} {label!r}: {name} field {text!r} is not {kind}")
            vals[key] = v
        if vals["pmin"] == vals["pmax"]:
            raise bad(f"signal {i + 1} {label!r}: physical minimum = physical maximum = {fields['pmin'][i]!r} "
                      f"(the spec requires them to differ)")
        if not vals["dmin"] < vals["dmax"]:
            raise bad(f"signal {i + 1} {label!r}: digital minimum {fields['dmin'][i]!r} must be below the "
                      f"digital maximum {fields['dmax'][i]!r}")
        for key, v in vals.items():
            out[key].append(v)
    return out


def _edf_start(path: Path) -> _dt.datetime:
    """Validate the EDF header (:func:`read_edf_header`) and return the start date/time."""
    return read_edf_header(path)["start"]


def check_native_rates(path: Path, hdr: dict[str, Any], native_hz: Mapping[str, float]) -> None:
    """Raise :class:`DatasetError` unless each channel of ``native_hz`` that the EDF holds is stored at that
    rate: samples per record / record duration (``hdr`` from :func:`read_edf_header`).

    The rate is never stored in an EDF, only derived, so a wrong record duration (header bytes 244-252) or
    samples-per-record field reads the signal at the wrong rate, and the resampling to ``sfreq_hz`` then
    silently stretches or squeezes it (a record duration of 15 instead of 30 s put 60 s of EEG into each 30-s
    epoch). Channels missing from the file are left to the reader, which names them.
    """
    record_s = float(hdr["record_s"])
    for label, want in native_hz.items():
        if label not in hdr["labels"]:
            continue
        spr = int(hdr["spr"][hdr["labels"].index(label)])
        rate = spr / record_s if record_s > 0 else math.inf
        if not math.isclose(rate, want, rel_tol=1e-6):
            raise DatasetError(
                f"{path}: channel {label!r} is stored at {rate:g} Hz ({spr} samples per {record_s:g}-s data "
                f"record), expected {want:g} Hz (the rate the dataset records it at); the header's record duration "
                "(bytes 244-252) or the channel's samples-per-record field is wrong (a damaged or edited file)")


#: the physical dimensions (EDF header field, latin-1) mne scales correctly: its factor to volts. mne reads any
#: other dimension (empty, 'nV', 'degC', ...) as volts (factor 1), which get_data(units="uV") multiplied by 1e6
MNE_VOLT_UNITS = {"uV": 1e-6, "\u00b5V": 1e-6, "\u03bcV": 1e-6, "mV": 1e-3, "V": 1.0}


def check_voltage_units(path: Path, hdr: dict[str, Any], labels: Sequence[str]) -> None:
    """Raise :class:`DatasetError` unless every channel of ``labels`` that the EDF holds has a voltage as its
    physical dimension (:data:`MNE_VOLT_UNITS`). Channels missing from the file are left to the reader.

    The signals are delivered in microvolts through mne, which scales 'uV' / 'mV' and takes every other dimension
    for volts: an EEG channel whose dimension field was blank or 'nV' came out 10^6 times (10^9 for nV) too
    large, without a word."""
    for label in labels:
        if label not in hdr["labels"]:
            continue
        dim = hdr["dimensions"][hdr["labels"].index(label)]
        if dim not in MNE_VOLT_UNITS:
            raise DatasetError(
                f"{path}: channel {label!r} has physical dimension {dim!r} (header field 'physical dimension'); "
                f"expected a voltage, one of {sorted(MNE_VOLT_UNITS)}: the signal is delivered in microvolts and "
                "cannot be scaled from another unit (a damaged or edited header, or not an EEG channel)")


def read_edf_channels(path: Path, labels: Sequence[str], sfreq_hz: float,
                      native_hz: Mapping[str, float] | None = None) -> tuple[np.ndarray, float]:
    """Channels ``labels`` of an EDF in microvolts resampled to ``sfreq_hz``.

    ``native_hz``: the rate each named channel must be stored at (:func:`check_native_rates`), checked before
    any sample is read; so is each channel's physical dimension, a voltage (:func:`check_voltage_units`).

    Shape: -> [C, n_samples] float32; also returns the native (mne) sampling rate. A channel with a
    non-finite value after scaling (e.g. a physical range too wide for float32) raises naming it.
    """
    import mne

    hdr = read_edf_header(path)
    if native_hz:
        check_native_rates(path, hdr, native_hz)
    check_voltage_units(path, hdr, labels)
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
    with np.errstate(over="ignore", invalid="ignore"):  # non-finite results are refused just below
        out = _resample(x, float(raw.info["sfreq"]), sfreq_hz)
    finite = np.isfinite(out).all(axis=-1)
    if not finite.all():
        bad_ch = [c for c, ok in zip(labels, finite) if not ok]
        raise DatasetError(f"{path}: signals {bad_ch} hold non-finite values after scaling to microvolts "
                           f"(float32); check their physical/digital range fields")
    return out, float(raw.info["sfreq"])


def _resample(x: np.ndarray, sfreq_in: float, sfreq_out: float) -> np.ndarray:
    """Polyphase resampling along the last axis (identity when the rates agree)."""
    if abs(sfreq_in - sfreq_out) < 1e-9:
        return np.ascontiguousarray(x, dtype=np.float32)
    from scipy.signal import resample_poly

    ratio = Fraction(sfreq_out / sfreq_in).limit_denominator(1000)
    return np.ascontiguousarray(resample_poly(x, ratio.numerator, ratio.denominator, axis=-1), dtype=np.float32)


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
    def write(f) -> None:
        f.write(head)
        for rec in records:
            f.write(b"".join(rec))

    atomic_write(path, write)  # whole or not at all, no temporary file left (fusebench.io)
