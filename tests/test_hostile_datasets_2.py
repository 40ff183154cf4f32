"""Hostile-tester findings, second round: damaged copies of the real fixtures must give one DatasetError
naming the file, the field / key and the rule (never a traceback, never silent acceptance)."""

from __future__ import annotations

import pytest

from fusebench.datasets import DatasetError, build

# -- 1. Sleep-EDF per-signal header fields -----------------------------------------------------------
# short_psg.edf by hand: 7 signals; the signal header starts at byte 256 with the fields stored for all
# signals in turn: label 16 x 7 = 112, transducer 80 x 7 = 560, dimension 8 x 7 = 56 bytes -> physical
# minimum at 256 + 112 + 560 + 56 = 984, physical maximum at 984 + 56 = 1040, digital minimum at 1096,
# digital maximum at 1152; signal i (0-based) at offset + 8 i. Signal 0 is 'EEG Fpz-Cz' with physical
# range -192..192 and digital range -2048..2047 (read off the file with a hex viewer).
PAIR = [("short_psg.edf", "SC4001EC-Hypnogram.edf")]
PMIN, PMAX, DMIN, DMAX = 984, 1040, 1096, 1152


def _sleep_copy(fixtures_dir, tmp_path, offset, value: bytes):
    src = fixtures_dir / "sleep_edf"
    (tmp_path / "SC4001EC-Hypnogram.edf").write_bytes((src / "SC4001EC-Hypnogram.edf").read_bytes())
    data = bytearray((src / "short_psg.edf").read_bytes())
    assert data[PMIN:PMIN + 8] == b"-192    " and data[DMAX:DMAX + 8] == b"2047    "  # the layout above
    data[offset:offset + 8] = value.ljust(8)
    (tmp_path / "short_psg.edf").write_bytes(bytes(data))


@pytest.mark.parametrize("offset,value,message", [
    (PMIN, b"nan", r"signal 1 'EEG Fpz-Cz': physical minimum field 'nan' is not a finite number"),
    (PMAX, b"inf", r"signal 1 'EEG Fpz-Cz': physical maximum field 'inf' is not a finite number"),
    (PMAX, b"-192", r"signal 1 'EEG Fpz-Cz': physical minimum = physical maximum = '-192'"),
    (DMAX, b"-2048", r"signal 1 'EEG Fpz-Cz': digital minimum '-2048' must be below the digital maximum '-2048'"),
    (DMIN + 8, b"3000", r"signal 2 'EEG Pz-Oz': digital minimum '3000' must be below"),
    (DMIN, b"1.5", r"signal 1 'EEG Fpz-Cz': digital minimum field '1.5' is not an integer"),
])
def test_edf_signal_ranges_refused(tmp_path, fixtures_dir, offset, value, message):
    _sleep_copy(fixtures_dir, tmp_path, offset, value)
    with pytest.raises(DatasetError, match=r"short_psg.edf: bad EDF header: " + message):
        build("sleep_edf", root=tmp_path, pairs=PAIR, use_cache=False)


def test_edf_signal_overflowing_float32_refused(tmp_path, fixtures_dir):
    # 1e300 is finite, but (1e300 - -192) / 4095 µV per digit overflows float32 for every non-zero sample
    _sleep_copy(fixtures_dir, tmp_path, PMAX, b"1e300")
    ds = build("sleep_edf", root=tmp_path, pairs=PAIR, use_cache=False)  # signals are read on first access
    with pytest.raises(DatasetError, match=r"short_psg.edf: signals \['EEG Fpz-Cz'\] hold non-finite values"):
        ds[0]


def test_edf_inverted_physical_range_still_read(tmp_path, fixtures_dir):
    # physical max < min is allowed by the EDF spec (an inverted signal): read, the values negated
    import numpy as np

    ref = build("sleep_edf", root=fixtures_dir / "sleep_edf", pairs=PAIR, use_cache=False)
    src = fixtures_dir / "sleep_edf"
    (tmp_path / "SC4001EC-Hypnogram.edf").write_bytes((src / "SC4001EC-Hypnogram.edf").read_bytes())
    data = bytearray((src / "short_psg.edf").read_bytes())
    data[PMIN:PMIN + 8], data[PMAX:PMAX + 8] = b"192     ", b"-192    "
    (tmp_path / "short_psg.edf").write_bytes(bytes(data))
    ds = build("sleep_edf", root=tmp_path, pairs=PAIR, use_cache=False)
    a, b = ref[0]["modalities"]["fpz_cz"].numpy(), ds[0]["modalities"]["fpz_cz"].numpy()
    assert np.abs(a).max() > 1  # a real signal, not zeros
    np.testing.assert_allclose(b, -a, atol=0.2)  # same digits, range mirrored -> negated (one step = 0.094 µV)
