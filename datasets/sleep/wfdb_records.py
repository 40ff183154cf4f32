"""PhysioNet 2018 signals: WFDB records read with wfdb, their file-size checks, and the writer.

``<rec>/<rec>.hea`` + ``<rec>.mat`` (WFDB format 16 in a MATLAB v4 ``val`` matrix, byte offset 24)
read with ``wfdb.rdrecord`` (:func:`read_wfdb_channels`). Signal file sizes (and the ``.mat``'s
MATLAB v4 matrix size) are checked against the ``.hea`` (:func:`check_wfdb_files`).
:func:`write_wfdb_mat_record` writes the same layout for the synthetic twin; the
``-arousal.mat`` stage files are read and written in :mod:`.annotations`.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from einops import rearrange

from ..base import DatasetError
from .edf import _num, _resample

log = logging.getLogger(__package__)  # the logger of fusebench.datasets.sleep, as before the split


# ---------------------------------------------------------------------------------------------
# PhysioNet 2018: WFDB record
# ---------------------------------------------------------------------------------------------
#: WFDB units (lower case) -> factor to microvolts (wfdb reads a header without units as 'mV', the WFDB default)
_TO_MICROVOLT = {"uv": 1.0, "\u00b5v": 1.0, "\u03bcv": 1.0, "nv": 1e-3, "mv": 1e3, "v": 1e6}


def read_wfdb_channels(record: Path, labels: Sequence[str], sfreq_hz: float) -> tuple[np.ndarray, float]:
    """Channels of a WFDB record (``record`` without extension) in µV, resampled. -> [C, n] float32.

    Each channel's units must be a voltage (:data:`_TO_MICROVOLT`), else a :class:`DatasetError` names the header
    and the channel (any other unit used to be taken for µV)."""
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
    odd = [(c, u) for c, u in zip(labels, rec.units) if str(u).lower() not in _TO_MICROVOLT]
    if odd:  # it was scaled by 1 as if in µV: a signal in nV came out 1000 times too large
        raise DatasetError(f"{record}.hea: channel(s) {', '.join(f'{c!r} in {u!r}' for c, u in odd)}: expected a "
                           f"voltage, one of {sorted(_TO_MICROVOLT)} (the signals are delivered in microvolts)")
    scale = np.array([_TO_MICROVOLT[str(u).lower()] for u in rec.units])
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
