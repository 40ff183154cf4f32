"""Sleep EEG adapters sleep_edf / physionet2018: real fixtures, synthetic twins, bad input."""

from __future__ import annotations

import datetime as dt

import h5py
import mne
import numpy as np
import pytest
import wfdb
from scipy.signal import resample_poly

from fusebench.datasets import DatasetError, SyntheticSpec, build
from fusebench.datasets.collate import collate
from fusebench.datasets.sleep import PhysioNet2018, SleepEDF, stage_epochs, write_edf

PAIR = [("short_psg.edf", "SC4001EC-Hypnogram.edf")]
RK = {"Sleep stage W": 0, "Sleep stage 1": 1, "Sleep stage 2": 2, "Sleep stage 3": 3, "Sleep stage 4": 3,
      "Sleep stage R": 4}


def _slow_epochs(onsets, durations, descs, n_epochs):
    """Reference: for each epoch, the stage of the annotation containing all of it (loops)."""
    out = []
    for k in range(n_epochs):
        lab = -1
        for o, d, desc in zip(onsets, durations, descs):
            if o <= 30 * k + 1e-6 and 30 * (k + 1) <= o + d + 1e-6:
                lab = RK.get(desc, -1)
        out.append(lab)
    return out


# -- real fixture ---------------------------------------------------------------------------------
def test_sleep_edf_fixture(fixtures_dir):
    root = fixtures_dir / "sleep_edf"
    ds = build("sleep_edf", root=root, pairs=PAIR, use_cache=False)
    assert len(ds) == 10  # 5 min of signal = 10 epochs, all wake; all-wake recordings are not cropped
    assert [int(ds[i]["target"]) for i in range(10)] == [0] * 10
    s = ds[3]
    assert s["modalities"]["fpz_cz"].shape == (1, 3000) and s["modalities"]["pz_oz"].shape == (1, 3000)
    assert s["meta"]["subject"] == "SC400" and s["meta"]["night"] == 1 and s["meta"]["epoch"] == 3
    assert s["meta"]["onset_s"] == 90.0
    raw = mne.io.read_raw_edf(root / "short_psg.edf", preload=True, verbose="error")
    fpz = raw.get_data(picks=["EEG Fpz-Cz"])[0] * 1e6  # volts -> µV
    np.testing.assert_allclose(s["modalities"]["fpz_cz"][0].numpy(), fpz[9000:12000], rtol=1e-5, atol=1e-4)
    assert float(s["modalities"]["fpz_cz"][0, 0]) == pytest.approx(fpz[9000], abs=1e-4)
    batch = collate([ds[i] for i in range(4)], names=ds.modalities)
    assert batch["modalities"]["pz_oz"].shape == (4, 1, 3000) and batch["target"].tolist() == [0] * 4


def test_hypnogram_fixture_expansion_and_clipping(fixtures_dir):
    ann = mne.read_annotations(fixtures_dir / "sleep_edf" / "SC4001EC-Hypnogram.edf")
    assert len(ann) == 154
    assert set(ann.description) == {"Sleep stage W", "Sleep stage 1", "Sleep stage 2", "Sleep stage 3",
                                    "Sleep stage 4", "Sleep stage R", "Sleep stage ?"}
    assert ann.onset[1] == 30630.0 and ann.duration[0] == 30630.0 and ann.onset[-1] == 79500.0
    n_total = int(round((ann.onset[-1] + ann.duration[-1]) / 30))
    got = stage_epochs(ann.onset, ann.duration, list(ann.description), n_total)
    want = _slow_epochs(ann.onset, ann.duration, list(ann.description), n_total)
    assert got.tolist() == want
    assert (got == 3).sum() == sum(int(d // 30) for d, s in zip(ann.duration, ann.description)
                                   if s in ("Sleep stage 3", "Sleep stage 4"))
    # clipped to a 5-minute signal: only the first (wake) annotation remains, as 10 epochs
    assert stage_epochs(ann.onset, ann.duration, list(ann.description), 10).tolist() == [0] * 10


def _write_pair(root, stages_desc, n_epochs, hyp_delay_s=0.0, name="SC4121"):
    start = dt.datetime(2000, 1, 1, 23, 0, 0)
    rng = np.random.default_rng(0)
    x = rng.normal(scale=20.0, size=n_epochs * 3000)
    write_edf(root / f"{name}E0-PSG.edf", [dict(label="EEG Fpz-Cz", data=x, sfreq=100.0),
                                           dict(label="EEG Pz-Oz", data=-x, sfreq=100.0)], start)
    write_edf(root / f"{name}EC-Hypnogram.edf", [], start + dt.timedelta(seconds=hyp_delay_s),
              annotations=stages_desc)
    return x


def test_stage_mapping_movement_and_cropping(tmp_path):
    # epochs: W W 1 2 2 3 4 R Move ? W W(+runs past the end)
    ann = [(0, 60, "Sleep stage W"), (60, 30, "Sleep stage 1"), (90, 60, "Sleep stage 2"),
           (150, 30, "Sleep stage 3"), (180, 30, "Sleep stage 4"), (210, 30, "Sleep stage R"),
           (240, 30, "Movement time"), (270, 30, "Sleep stage ?"), (300, 600, "Sleep stage W")]
    _write_pair(tmp_path, ann, 12)
    full = build("sleep_edf", root=tmp_path, crop_wake_min=None, use_cache=False)
    assert [int(full[i]["target"]) for i in range(len(full))] == [0, 0, 1, 2, 2, 3, 3, 4, 0, 0]
    assert [full[i]["meta"]["epoch"] for i in range(len(full))] == [0, 1, 2, 3, 4, 5, 6, 7, 10, 11]
    assert full[0]["meta"]["subject"] == "SC412" and full[0]["meta"]["night"] == 1
    default = build("sleep_edf", root=tmp_path, use_cache=False)  # 30 min margin: nothing cropped here
    assert len(default) == 10
    cropped = build("sleep_edf", root=tmp_path, crop_wake_min=0.5, use_cache=False)  # 1 epoch of margin
    assert [cropped[i]["meta"]["epoch"] for i in range(len(cropped))] == [1, 2, 3, 4, 5, 6, 7]
    assert [int(cropped[i]["target"]) for i in range(len(cropped))] == [0, 1, 2, 2, 3, 3, 4]


def test_hypnogram_start_offset(tmp_path):
    x = _write_pair(tmp_path, [(0, 30, "Sleep stage W"), (30, 30, "Sleep stage 2")], 3, hyp_delay_s=30.0)
    ds = build("sleep_edf", root=tmp_path, use_cache=False)
    assert [ds[i]["meta"]["epoch"] for i in range(len(ds))] == [1, 2]
    assert [int(ds[i]["target"]) for i in range(len(ds))] == [0, 2]
    # 16-bit quantisation of a ~ +-90 µV range: error below 0.01 µV
    np.testing.assert_allclose(ds[1]["modalities"]["fpz_cz"][0].numpy(), x[6000:9000], atol=0.01)
    np.testing.assert_allclose(ds[1]["modalities"]["pz_oz"][0].numpy(), -x[6000:9000], atol=0.01)


def _pair_with_hypnogram_start(folder, fixtures_dir, subject: str, start: bytes) -> None:
    """The real fixture PSG and hypnogram as SC4<subject>1E0-PSG.edf / SC4<subject>1EC-Hypnogram.edf, the
    hypnogram's start date/time (header bytes 168-184, 'dd.mm.yyhh.mm.ss') replaced by ``start``."""
    src = fixtures_dir / "sleep_edf"
    (folder / f"SC4{subject}1E0-PSG.edf").write_bytes((src / "short_psg.edf").read_bytes())
    hyp = bytearray((src / "SC4001EC-Hypnogram.edf").read_bytes())
    assert hyp[168:184] == b"24.04.8916.13.00"
    hyp[168:184] = start
    (folder / f"SC4{subject}1EC-Hypnogram.edf").write_bytes(bytes(hyp))


@pytest.mark.parametrize("start, span", [(b"25.04.8916.13.00", "86400..172800"),   # the next day
                                         (b"24.04.8917.13.00", "3600..90000"),     # an hour after the PSG
                                         (b"23.04.8916.13.00", "-86400..0")])      # ends as the PSG starts
def test_hypnogram_that_misses_its_recording_is_an_error(tmp_path, fixtures_dir, start, span):
    """Two real recordings; the second's hypnogram (22 h of annotations from its header start) lies entirely
    outside its 300-s PSG. Every one of its epochs was unscored and the recording silently dropped: the split
    held 10 epochs instead of 20, with no word."""
    _pair_with_hypnogram_start(tmp_path, fixtures_dir, "00", b"24.04.8916.13.00")
    _pair_with_hypnogram_start(tmp_path, fixtures_dir, "01", start)
    with pytest.raises(DatasetError, match=r"SC4011EC-Hypnogram.edf: the hypnogram does not overlap its recording "
                                           r".*SC4011E0-PSG.edf: its 154 annotation\(s\) span " + span +
                                           r" s on the PSG's time axis, the signal 0..300 s"):
        build("sleep_edf", root=tmp_path, use_cache=False, split_subjects={"train": ["SC400", "SC401"]})
    # the same pair with its original start reads both recordings: 2 x 10 wake epochs
    _pair_with_hypnogram_start(tmp_path, fixtures_dir, "01", b"24.04.8916.13.00")
    ds = build("sleep_edf", root=tmp_path, use_cache=False, split_subjects={"train": ["SC400", "SC401"]})
    assert len(ds) == 20 and sorted({ds[i]["meta"]["subject"] for i in range(20)}) == ["SC400", "SC401"]


def test_bad_edf_header(tmp_path, fixtures_dir):
    src = fixtures_dir / "sleep_edf"
    (tmp_path / "SC4001EC-Hypnogram.edf").write_bytes((src / "SC4001EC-Hypnogram.edf").read_bytes())
    data = bytearray((src / "short_psg.edf").read_bytes())
    data[252:256] = b"x7  "  # number of signals
    (tmp_path / "short_psg.edf").write_bytes(bytes(data))
    with pytest.raises(DatasetError, match=r"short_psg.edf: bad EDF header"):
        build("sleep_edf", root=tmp_path, pairs=PAIR, use_cache=False)
    data = bytearray((src / "short_psg.edf").read_bytes())
    data[184:192] = b"999     "  # header size
    (tmp_path / "short_psg.edf").write_bytes(bytes(data))
    with pytest.raises(DatasetError, match=r"short_psg.edf: bad EDF header.*2048-byte header"):
        build("sleep_edf", root=tmp_path, pairs=PAIR, use_cache=False)
    (tmp_path / "short_psg.edf").write_bytes((src / "short_psg.edf").read_bytes()[:100])
    with pytest.raises(DatasetError, match=r"short_psg.edf"):
        build("sleep_edf", root=tmp_path, pairs=PAIR, use_cache=False)
    with pytest.raises(DatasetError, match=r"missing.edf does not exist"):
        build("sleep_edf", root=tmp_path, pairs=[("missing.edf", "SC4001EC-Hypnogram.edf")], use_cache=False)


# -- synthetic twins ------------------------------------------------------------------------------
def _band_power(x: np.ndarray, lo: float, hi: float, sfreq: float = 100.0) -> float:
    f = np.fft.rfftfreq(x.shape[-1], 1 / sfreq)
    p = np.abs(np.fft.rfft(x)) ** 2
    return float(p[(f >= lo) & (f < hi)].sum())


@pytest.fixture(scope="module")
def edf_twin(tmp_path_factory):
    root = tmp_path_factory.mktemp("sleep_edf_twin")
    SleepEDF.write_synthetic(root, SyntheticSpec(num_samples=200, seed=2, informativeness={"pz_oz": 0.0},
                                                 options={"n_subjects": 5}))
    return root


def test_sleep_edf_twin_round_trip(edf_twin):
    psgs = sorted(edf_twin.glob("*-PSG.edf"))
    assert len(psgs) == 5 and all((edf_twin / f"{p.name[:6]}EH-Hypnogram.edf").is_file() for p in psgs)
    splits = {s: build("sleep_edf", root=edf_twin, split=s, use_cache=False) for s in ("train", "val", "test")}
    subjects = {s: {r["subject"] for r in d.recordings} for s, d in splits.items()}
    assert [len(subjects[s]) for s in ("train", "val", "test")] == [3, 1, 1]
    assert set.union(*subjects.values()) == {f"SC4{k:02d}" for k in range(5)}
    assert not (subjects["train"] & subjects["test"]) and not (subjects["train"] & subjects["val"])
    ds = splits["train"]
    for rec in ds.recordings:  # labels and signals against independent mne reads and loops
        ann = mne.read_annotations(rec["hyp"])
        assert "Movement time" in ann.description and ann.description[-1] == "Sleep stage ?"
        raw = mne.io.read_raw_edf(rec["psg"], preload=True, verbose="error")
        n_ep = raw.n_times // 3000
        want = _slow_epochs(ann.onset, ann.duration, list(ann.description), n_ep)
        got = [(int(ds[i]["target"]), ds[i]["meta"]["epoch"]) for i in range(len(ds))
               if ds[i]["meta"]["record"] == rec["name"]]
        assert got == [(lab, k) for k, lab in enumerate(want) if lab >= 0]
        k = got[1][1]
        i = next(i for i in range(len(ds)) if ds[i]["meta"]["id"] == f"{rec['name']}:{k}")
        sig = raw.get_data(picks=["EEG Pz-Oz"])[0] * 1e6
        np.testing.assert_allclose(ds[i]["modalities"]["pz_oz"][0].numpy(), sig[k * 3000:(k + 1) * 3000],
                                   rtol=1e-5, atol=1e-3)
    # stage-specific spectra on the informative channel, none on the uninformative one
    all_ds = build("sleep_edf", root=edf_twin, split="train", use_cache=False, split_subjects={
        "train": [f"SC4{k:02d}" for k in range(5)]})
    by_stage = {st: [all_ds[i] for i in range(len(all_ds)) if int(all_ds[i]["target"]) == st] for st in (0, 3)}
    assert len(by_stage[0]) >= 5 and len(by_stage[3]) >= 5

    def ratio(ch, lo, hi):
        pw = {st: np.mean([_band_power(s["modalities"][ch][0].numpy(), lo, hi) for s in v]) for st, v in by_stage.items()}
        return pw[0] / pw[3]

    assert ratio("fpz_cz", 8, 12) > 3 and ratio("fpz_cz", 0.5, 3) < 1 / 3  # alpha in W, delta in N3
    assert 0.6 < ratio("pz_oz", 8, 12) < 1.6 and 0.6 < ratio("pz_oz", 0.5, 3) < 1.6
    # resampling to 50 Hz
    ds50 = build("sleep_edf", root=edf_twin, split="test", sfreq_hz=50, use_cache=False)
    ds100 = build("sleep_edf", root=edf_twin, split="test", use_cache=False)
    a, b = ds50[2]["modalities"]["fpz_cz"][0].numpy(), ds100[2]["modalities"]["fpz_cz"][0].numpy()
    assert a.shape == (1500,)
    raw = mne.io.read_raw_edf(ds100.recordings[0]["psg"], preload=True, verbose="error")
    k = ds100[2]["meta"]["epoch"]
    ref = resample_poly(raw.get_data(picks=["EEG Fpz-Cz"])[0] * 1e6, 1, 2)[k * 1500:(k + 1) * 1500]
    np.testing.assert_allclose(a, ref, rtol=1e-4, atol=1e-3)
    assert np.corrcoef(a, b[::2])[0, 1] > 0.9


def test_twin_is_deterministic(tmp_path, edf_twin):
    SleepEDF.write_synthetic(tmp_path, SyntheticSpec(num_samples=200, seed=2, informativeness={"pz_oz": 0.0},
                                                     options={"n_subjects": 5}))
    for p in edf_twin.glob("*.edf"):
        assert (tmp_path / p.name).read_bytes() == p.read_bytes()


def test_physionet2018_twin_round_trip(tmp_path):
    PhysioNet2018.write_synthetic(tmp_path, SyntheticSpec(num_samples=36, seed=5, options={"n_subjects": 3}))
    recs = sorted((tmp_path / "training").iterdir())
    assert len(recs) == 3
    name = recs[0].name
    hea = (recs[0] / f"{name}.hea").read_text().splitlines()
    assert hea[0].split()[1:3] == ["13", "200"] and hea[1].split()[:2] == [f"{name}.mat", "16+24"]
    assert [line.split()[-1] for line in hea[1:7]] == ["F3-M2", "F4-M1", "C3-M2", "C4-M1", "O1-M2", "O2-M1"]
    mat = (recs[0] / f"{name}.mat").read_bytes()
    assert np.frombuffer(mat[:20], "<i4").tolist()[:2] == [30, 13] and mat[20:24] == b"val\x00"
    arousal = recs[0] / f"{name}-arousal.mat"
    assert arousal.read_bytes()[:19] == b"MATLAB 7.3 MAT-file"
    # 3 subjects: some split is empty on purpose (allow_empty: an empty split is otherwise an error)
    splits = {s: build("physionet2018", root=tmp_path, split=s, use_cache=False, allow_empty=True)
              for s in ("train", "val", "test")}
    assert sorted(r["name"] for d in splits.values() for r in d.recordings) == [r.name for r in recs]
    ds = next(d for d in splits.values() if len(d))
    assert ds.modalities == ["f3_m2", "f4_m1", "c3_m2", "c4_m1", "o1_m2", "o2_m1"]
    rec = ds.recordings[0]
    w = wfdb.rdrecord(str(rec["record"]))  # independent reads
    with h5py.File(rec["arousal"], "r") as f:
        ss = {k: f["data/sleep_stages"][k][()] for k in f["data/sleep_stages"]}
    assert ss["wake"].shape == (1, w.sig_len)
    keys = ["wake", "nonrem1", "nonrem2", "nonrem3", "rem", "undefined"]
    want = []
    for k in range(w.sig_len // 6000):
        counts = [ss[key][0, k * 6000:(k + 1) * 6000].sum() for key in keys]
        best = int(np.argmax(counts))
        if best != 5:
            want.append((k, best))
    got = [(ds[i]["meta"]["epoch"], int(ds[i]["target"])) for i in range(len(ds))
           if ds[i]["meta"]["record"] == rec["name"]]
    assert got == want and want[0][0] == 1  # the undefined first epoch is dropped
    s = ds[0]
    assert all(v.shape == (1, 3000) for v in s["modalities"].values()) and len(s["modalities"]) == 6
    c4 = resample_poly(w.p_signal[:, w.sig_name.index("C4-M1")], 1, 2)
    k = s["meta"]["epoch"]
    np.testing.assert_allclose(s["modalities"]["c4_m1"][0].numpy(), c4[k * 3000:(k + 1) * 3000], rtol=1e-4, atol=1e-3)
    assert w.units[0] == "uV"


def test_physionet_bad_arousal_file(tmp_path):
    PhysioNet2018.write_synthetic(tmp_path, SyntheticSpec(num_samples=16, seed=0, options={"n_subjects": 1}))
    rec = next((tmp_path / "training").iterdir())
    path = rec / f"{rec.name}-arousal.mat"
    with h5py.File(path, "r+") as f:
        del f["data/sleep_stages/rem"]
    with pytest.raises(DatasetError, match=r"arousal.mat: data/sleep_stages lacks \['rem'\]"):
        build("physionet2018", root=tmp_path, use_cache=False)
    path.write_bytes(b"not hdf5")
    with pytest.raises(DatasetError, match=r"arousal.mat: not a readable MATLAB v7.3"):
        build("physionet2018", root=tmp_path, use_cache=False)


# -- corrupted real files: EDF size checks, TAL syntax, WFDB sizes (issue #12) ---------------------
# short_psg.edf by hand: 7 signals -> 256 * 8 = 2048 header bytes; samples per record 3 x 3000 + 4 x 30
# = 9120 -> 18240 bytes per record; 10 records -> 2048 + 182400 = 184448 bytes (the file's size).
PSG_HEADER, PSG_RECORD, PSG_RECORDS = 2048, 18240, 10
# the hypnogram: 1 signal -> 512 header bytes, then '+0\x14\x14\x00' (time-keeping TAL, bytes 512-516),
# then '+0\x1530630\x14Sleep stage W\x14\x00' starting at byte 517 (0x15 at 519, duration at 520-524).
HYP_TAL2 = 517


def _copy_fixture(src, dst):
    for name in ("short_psg.edf", "SC4001EC-Hypnogram.edf"):
        (dst / name).write_bytes((src / name).read_bytes())


def _patch(path, offset, new):
    data = bytearray(path.read_bytes())
    data[offset:offset + len(new)] = new
    path.write_bytes(bytes(data))


def test_fixture_sizes_match_the_hand_computed_layout(fixtures_dir):
    psg = (fixtures_dir / "sleep_edf" / "short_psg.edf").read_bytes()
    assert len(psg) == PSG_HEADER + PSG_RECORDS * PSG_RECORD and psg[236:244] == b"10      "
    hyp = (fixtures_dir / "sleep_edf" / "SC4001EC-Hypnogram.edf").read_bytes()
    assert hyp[HYP_TAL2:HYP_TAL2 + 10] == b"+0\x1530630\x14S"


@pytest.mark.parametrize("keep", [(PSG_HEADER + PSG_RECORDS * PSG_RECORD) // 2, PSG_HEADER + 7 * PSG_RECORD])
def test_truncated_psg_raises(tmp_path, fixtures_dir, keep):
    _copy_fixture(fixtures_dir / "sleep_edf", tmp_path)
    psg = tmp_path / "short_psg.edf"
    psg.write_bytes(psg.read_bytes()[:keep])
    whole, rest = divmod(keep - PSG_HEADER, PSG_RECORD)  # half: 4 records + 17216 bytes; else 7 + 0
    with pytest.raises(DatasetError, match=(
            rf"short_psg.edf: truncated EDF file: the header declares 10 data records of 18240 bytes "
            rf"\(184448 bytes in all\), the file has {keep} bytes.*\({whole} whole records of 18240 bytes \+ "
            rf"{rest} bytes\)")):
        build("sleep_edf", root=tmp_path, pairs=PAIR, use_cache=False)


def test_record_count_inconsistent_with_file_size(tmp_path, fixtures_dir, caplog):
    _copy_fixture(fixtures_dir / "sleep_edf", tmp_path)
    psg = tmp_path / "short_psg.edf"
    original = psg.read_bytes()
    _patch(psg, 236, b"99999999")
    with pytest.raises(DatasetError, match=r"short_psg.edf: truncated EDF file: the header declares 99999999"):
        build("sleep_edf", root=tmp_path, pairs=PAIR, use_cache=False)
    # one whole record more than declared: mne would read it, so it is an error
    psg.write_bytes(original + original[PSG_HEADER:PSG_HEADER + PSG_RECORD])
    with pytest.raises(DatasetError, match=r"short_psg.edf: bad EDF header: the header declares 10 data records "
                                           r"but the file holds 11"):
        build("sleep_edf", root=tmp_path, pairs=PAIR, use_cache=False)
    # fewer trailing bytes than one record: ignored with a warning, the 10 declared records are read
    psg.write_bytes(original + b"\x00" * 100)
    with caplog.at_level("WARNING", logger="fusebench.datasets.sleep"):
        assert len(build("sleep_edf", root=tmp_path, pairs=PAIR, use_cache=False)) == 10
    assert "100 trailing bytes" in caplog.text
    # -1 (recording not closed): the count comes from the file size when it is whole records
    psg.write_bytes(original)
    _patch(psg, 236, b"-1      ")
    assert len(build("sleep_edf", root=tmp_path, pairs=PAIR, use_cache=False)) == 10
    psg.write_bytes(psg.read_bytes()[:-5])
    with pytest.raises(DatasetError, match=r"short_psg.edf: bad EDF header: record count -1.*9 whole records of "
                                           r"18240 bytes \+ 18235 bytes"):
        build("sleep_edf", root=tmp_path, pairs=PAIR, use_cache=False)


def test_truncated_or_inconsistent_hypnogram_header(tmp_path, fixtures_dir):
    _copy_fixture(fixtures_dir / "sleep_edf", tmp_path)
    hyp = tmp_path / "SC4001EC-Hypnogram.edf"
    hyp.write_bytes(hyp.read_bytes()[:3000])  # 512 + 4108 bytes (2054 samples x 2) -> cut inside the record
    with pytest.raises(DatasetError, match=r"SC4001EC-Hypnogram.edf: truncated EDF file: the header declares 1 "
                                           r"data records of 4108 bytes"):
        build("sleep_edf", root=tmp_path, pairs=PAIR, use_cache=False)


@pytest.mark.parametrize("offset, garbage, expected", [
    (HYP_TAL2, b"X", rf"at byte {HYP_TAL2}: expected a TAL onset starting with '\+' or '-', found b'X0"),
    (HYP_TAL2 + 2, b"x", rf"at byte {HYP_TAL2}: expected an onset of '\+' or '-' then digits"),
    (HYP_TAL2 + 5, b"a", rf"at byte {HYP_TAL2 + 3}: expected a duration of digits \[. digits\] after 0x15, "
                         r"found b'30a30'"),
    (HYP_TAL2 + 22, b"!", rf"at byte {HYP_TAL2 + 9}: expected annotation text ended by 0x14"),  # its 0x14
    (HYP_TAL2 + 23, b"!", rf"at byte {HYP_TAL2 + 23}: expected annotation text without 0x15, "  # its 0x00:
                          r"found b'!\+30630\\x15120'"),  # the TAL runs on into the next one
    (512 + 3912 + 40, b"junk", rf"at byte {512 + 3912 + 40}: expected 0x00 padding after the last TAL"),
])
def test_hypnogram_tal_syntax_errors(tmp_path, fixtures_dir, offset, garbage, expected):
    _copy_fixture(fixtures_dir / "sleep_edf", tmp_path)
    hyp = tmp_path / "SC4001EC-Hypnogram.edf"
    _patch(hyp, offset, garbage)
    with pytest.raises(DatasetError, match=r"SC4001EC-Hypnogram.edf: bad EDF\+ annotation " + expected):
        build("sleep_edf", root=tmp_path, pairs=PAIR, use_cache=False)


def test_hypnogram_random_garbage_is_an_error(tmp_path, fixtures_dir):
    _copy_fixture(fixtures_dir / "sleep_edf", tmp_path)
    hyp = tmp_path / "SC4001EC-Hypnogram.edf"
    rng = np.random.default_rng(0)
    _patch(hyp, 2000, bytes(rng.integers(0x20, 0x7F, 64, dtype=np.uint8)))  # printable junk mid-annotations
    with pytest.raises(DatasetError, match=r"SC4001EC-Hypnogram.edf: bad EDF\+ annotation at byte \d+: expected"):
        build("sleep_edf", root=tmp_path, pairs=PAIR, use_cache=False)


def test_tal_reader_matches_mne_on_the_fixture(fixtures_dir):
    from fusebench.datasets.sleep import read_edf_annotations

    path = fixtures_dir / "sleep_edf" / "SC4001EC-Hypnogram.edf"
    got = read_edf_annotations(path)
    ann = mne.read_annotations(path)
    assert [(o, d, s) for o, d, s in got] == list(zip(ann.onset.tolist(), ann.duration.tolist(), ann.description))
    assert got[0] == (0.0, 30630.0, "Sleep stage W") and got[-1] == (79500.0, 6900.0, "Sleep stage ?")


# -- subject-wise splits ----------------------------------------------------------------------------
@pytest.mark.parametrize("n, want", [  # (train, val, test) by hand: round half up, >= 1 when possible
    (1, (1, 0, 0)), (2, (1, 0, 1)), (3, (1, 1, 1)), (4, (2, 1, 1)), (5, (3, 1, 1)), (10, (7, 1, 2)),
    (78, (54, 8, 16)),  # Sleep-EDF SC: round(15.6) = 16 test, round(7.8) = 8 val
])
def test_split_counts(n, want):
    from fusebench.datasets.sleep.layouts import _split_counts

    c = _split_counts(n, 0.1, 0.2)
    assert (c["train"], c["val"], c["test"]) == want


def test_three_subjects_fill_every_split(tmp_path):
    SleepEDF.write_synthetic(tmp_path, SyntheticSpec(num_samples=24, seed=1, options={"n_subjects": 3}))
    subjects = {s: {r["subject"] for r in build("sleep_edf", root=tmp_path, split=s, use_cache=False).recordings}
                for s in ("train", "val", "test")}
    assert all(len(v) == 1 for v in subjects.values())
    assert set.union(*subjects.values()) == {"SC400", "SC401", "SC402"}


def test_empty_split_names_subjects_rule_and_fix(fixtures_dir):
    root = fixtures_dir / "sleep_edf"
    for split in ("val", "test"):
        with pytest.raises(DatasetError, match=(
                rf"sleep_edf: split '{split}' is empty under .*sleep_edf: no subject falls in it. Found 1 "
                r"subject\(s\) \['SC400'\] in 1 recording\(s\) \['short_psg.edf'\]; split rule: subject-wise "
                r"split.*test_fraction=0.2 -> 0, val_fraction=0.1 -> 0, the rest -> train \(1\) of 1 subject"
                r".*split_subjects")):
            build("sleep_edf", root=root, pairs=PAIR, split=split, use_cache=False)
    assert len(build("sleep_edf", root=root, pairs=PAIR, split="val", use_cache=False, allow_empty=True)) == 0
    one = {"train": ["SC400"], "val": ["SC400"], "test": ["SC400"]}  # smoke-run workaround from the message
    assert len(build("sleep_edf", root=root, pairs=PAIR, split="val", use_cache=False, split_subjects=one)) == 10
    with pytest.raises(DatasetError, match=r"val_fraction \+ test_fraction must be below 1"):
        build("sleep_edf", root=root, pairs=PAIR, use_cache=False, val_fraction=0.5, test_fraction=0.5)


def test_split_with_only_unscored_epochs_says_so(tmp_path):
    _write_pair(tmp_path, [(0, 90, "Sleep stage ?")], 3)
    with pytest.raises(DatasetError, match=r"split 'train' is empty .*: its 1 recording\(s\) \['SC4121E0-PSG'\] "
                                           r"have no scored epoch left"):
        build("sleep_edf", root=tmp_path, use_cache=False)


def test_physionet_truncated_or_inconsistent_signal_file(tmp_path):
    PhysioNet2018.write_synthetic(tmp_path, SyntheticSpec(num_samples=16, seed=0, options={"n_subjects": 1}))
    rec = next((tmp_path / "training").iterdir())
    mat, hea = rec / f"{rec.name}.mat", rec / f"{rec.name}.hea"
    sig_len = int(hea.read_text().split()[3])  # 18 epochs x 6000 samples at 200 Hz
    assert sig_len == 18 * 6000
    need = 24 + 13 * 2 * sig_len  # MAT v4 header + 'val\0', then 13 int16 signals
    original = mat.read_bytes()
    assert len(original) == need
    keep = 24 + 13 * 2 * 30000  # 5 whole epochs: wfdb only fails later, with an unclear message
    mat.write_bytes(original[:keep])
    with pytest.raises(DatasetError, match=(
            rf"{rec.name}.mat: truncated WFDB signal file: {rec.name}.hea declares 13 signals x {sig_len} samples "
            rf"in format 16 after a 24-byte offset = {need} bytes, the file has {keep} bytes \(30000 whole")):
        build("physionet2018", root=tmp_path, use_cache=False)
    mat.write_bytes(original)  # a header sample count smaller than the .mat matrix
    lines = hea.read_text().splitlines()
    lines[0] = " ".join(lines[0].split()[:3] + [str(sig_len - 6000)])
    hea.write_text("\n".join(lines) + "\n")
    with pytest.raises(DatasetError, match=rf"{rec.name}.mat: its MATLAB v4 header holds a 13 x {sig_len} matrix, "
                                           rf"{rec.name}.hea declares 13 signals x {sig_len - 6000} samples"):
        build("physionet2018", root=tmp_path, use_cache=False)


def test_pairs_tsv_and_pairs_option_of_the_wrong_form(tmp_path, fixtures_dir):
    """pairs.tsv beside the real recording: a line that is not two tab-separated fields names the file, the line
    and what it holds (it used to be a bare "not enough values to unpack"); a good one reads the 10 epochs."""
    import shutil

    for f in ("short_psg.edf", "SC4001EC-Hypnogram.edf"):
        shutil.copy(fixtures_dir / "sleep_edf" / f, tmp_path)
    tsv = tmp_path / "pairs.tsv"
    for text, fields in (("short_psg.edf SC4001EC-Hypnogram.edf\n", 1),
                         ("short_psg.edf\tSC4001EC-Hypnogram.edf\textra\n", 3)):
        tsv.write_text("\n" + text)
        with pytest.raises(DatasetError, match=rf"pairs.tsv line 2 has {fields} tab-separated field\(s\) .*expected "
                                               r"two: the PSG file, a tab, its hypnogram file"):
            build("sleep_edf", root=tmp_path, use_cache=False)
    tsv.write_text("short_psg.edf\tSC4001EC-Hypnogram.edf\n")
    assert len(build("sleep_edf", root=tmp_path, use_cache=False)) == 10
    with pytest.raises(DatasetError, match=r"the pairs= option: entry 0 is 'short_psg.edf'; expected a pair"):
        build("sleep_edf", root=tmp_path, pairs=["short_psg.edf"], use_cache=False)


def test_an_epoch_is_labelled_only_when_an_annotation_covers_it_entirely():
    onsets = np.array([0.0, 90.0])
    durations = np.array([45.0, 30.0])
    # epoch 0 [0, 30): inside W -> 0; epoch 1 [30, 60): W ends at 45, partly covered -> -1;
    # epoch 2 [60, 90): no annotation -> -1; epoch 3 [90, 120): stage 2 -> 2; epoch 4 [120, 150): none -> -1
    got = stage_epochs(onsets, durations, ["Sleep stage W", "Sleep stage 2"], 5)
    assert got.tolist() == [0, -1, -1, 2, -1]
    # an annotation starting mid-epoch: [15, 75) covers epoch 1 [30, 60) only
    assert stage_epochs(np.array([15.0]), np.array([60.0]), ["Sleep stage R"], 3).tolist() == [-1, 4, -1]


@pytest.mark.parametrize("key, value, first", [("wake", np.nan, "nan"), ("rem", -1.0, "-1.0"), ("nonrem2", 0.5, "0.5")])
def test_physionet_stage_indicators_other_than_0_1_are_an_error(tmp_path, key, value, first):
    """The stage vectors are sample-wise 0/1 indicators. NaN in the first 3000 samples of `wake` made the
    twin's undefined first epoch a wake epoch (17 epochs instead of 16); -1 in `rem` dropped the REM epochs;
    0.5 counted half. No real PhysioNet 2018 file is in the fixtures, so the twin's arousal file is edited."""
    PhysioNet2018.write_synthetic(tmp_path, SyntheticSpec(num_samples=16, seed=0, options={"n_subjects": 1}))
    rec = next((tmp_path / "training").iterdir())
    opts = dict(use_cache=False, split_subjects={"train": [rec.name]})
    assert len(build("physionet2018", root=tmp_path, **opts)) == 16
    with h5py.File(rec / f"{rec.name}-arousal.mat", "r+") as f:
        g = f["data/sleep_stages"]
        a = g[key][()]
        hit = np.flatnonzero(a[0] == 1)[:3000] if key != "wake" else np.arange(3000)
        a[0, hit] = value
        g[key][...] = a
    with pytest.raises(DatasetError, match=rf"-arousal\.mat: data/sleep_stages/{key} holds {hit.size} value\(s\) other "
                                           rf"than 0 and 1 \(first at sample {hit[0]}: {first}\)"):
        build("physionet2018", root=tmp_path, **opts)


def _edf_int16_channel(data: bytes, channel: int) -> np.ndarray:
    """Independent read of one channel of a plain EDF, in its physical unit: header fields by hand, int16 records,
    (d - dmin) * (pmax - pmin) / (dmax - dmin) + pmin (EDF spec 2.1.3.2)."""
    ns = int(data[252:256])
    h = data[256:256 * (ns + 1)]

    def field(offset: int, width: int) -> list[str]:
        return [h[offset + i * width: offset + (i + 1) * width].decode().strip() for i in range(ns)]

    widths = [("label", 16), ("transducer", 80), ("dimension", 8), ("pmin", 8), ("pmax", 8), ("dmin", 8),
              ("dmax", 8), ("prefilter", 80), ("spr", 8)]
    f, off = {}, 0
    for name, w in widths:
        f[name] = field(off, w)
        off += w * ns
    spr = [int(v) for v in f["spr"]]
    recs = np.frombuffer(data[256 * (ns + 1):], "<i2").reshape(int(data[236:244]), sum(spr))
    start = sum(spr[:channel])
    d = recs[:, start:start + spr[channel]].reshape(-1).astype(np.float64)
    pmin, pmax, dmin, dmax = (float(f[k][channel]) for k in ("pmin", "pmax", "dmin", "dmax"))
    return (d - dmin) * (pmax - pmin) / (dmax - dmin) + pmin


def test_psg_channel_dimension_must_be_a_voltage(tmp_path, fixtures_dir):
    """The real PSG's EEG is stored in 'uV' and delivered as read by hand; 'mV' is scaled by 1000. A blank or
    'nV' physical dimension is refused naming the file and channel: mne reads any dimension but uV / mV as volts,
    so the channel came out 10^6 times too large (156 553 840 'µV' for a 157 µV peak)."""
    src = fixtures_dir / "sleep_edf"
    _copy_fixture(src, tmp_path)
    data = bytearray((src / "short_psg.edf").read_bytes())
    uv = _edf_int16_channel(bytes(data), 0)  # EEG Fpz-Cz, dimension 'uV' in the real header
    dim = 256 + 7 * (16 + 80)  # the physical dimension field of signal 1 (7 signals)
    assert bytes(data[dim:dim + 8]) == b"uV      "
    ds = build("sleep_edf", root=tmp_path, pairs=PAIR, use_cache=False)
    np.testing.assert_allclose(ds[4]["modalities"]["fpz_cz"][0].numpy(), uv[12000:15000], atol=1e-4)
    data[dim:dim + 8] = b"mV      "
    (tmp_path / "short_psg.edf").write_bytes(bytes(data))
    ds = build("sleep_edf", root=tmp_path, pairs=PAIR, use_cache=False)
    np.testing.assert_allclose(ds[4]["modalities"]["fpz_cz"][0].numpy(), 1000 * uv[12000:15000], rtol=1e-5, atol=0.1)
    for bad in (b"        ", b"nV      "):
        data[dim:dim + 8] = bad
        (tmp_path / "short_psg.edf").write_bytes(bytes(data))
        with pytest.raises(DatasetError, match=rf"short_psg.edf: channel 'EEG Fpz-Cz' has physical dimension "
                                               rf"'{bad.decode().strip()}' .*expected a voltage"):
            build("sleep_edf", root=tmp_path, pairs=PAIR, use_cache=False)
    # pz_oz alone does not read Fpz-Cz, whose dimension is not checked then
    assert len(build("sleep_edf", root=tmp_path, pairs=PAIR, modalities=["pz_oz"], use_cache=False)) == 10


def test_wfdb_units_other_than_a_voltage_are_refused(tmp_path):
    """PhysioNet 2018 twin: the header's 'uV' read by wfdb is delivered as is, 'mV' x 1000; a unit that is not a
    voltage ('NU') was scaled by 1 as if in µV and is now refused naming the header and the channel."""
    PhysioNet2018.write_synthetic(tmp_path, SyntheticSpec(num_samples=12, seed=1, options={"n_subjects": 1}))
    rec = next((tmp_path / "training").iterdir())
    hea = rec / f"{rec.name}.hea"
    kw = dict(root=tmp_path, split_subjects={"train": [rec.name]}, modalities=["f3_m2"], use_cache=False,
              sfreq_hz=200.0)
    w = wfdb.rdrecord(str(rec / rec.name))  # independent read, µV
    ds = build("physionet2018", **kw)
    k = ds[0]["meta"]["epoch"]
    f3 = w.p_signal[k * 6000:(k + 1) * 6000, 0]
    np.testing.assert_allclose(ds[0]["modalities"]["f3_m2"][0].numpy(), f3, atol=1e-4)
    text = hea.read_text()
    hea.write_text(text.replace("10/uV 16 0", "10/mV 16 0", 1))
    np.testing.assert_allclose(build("physionet2018", **kw)[0]["modalities"]["f3_m2"][0].numpy(), 1000 * f3,
                               rtol=1e-5, atol=1e-2)
    hea.write_text(text.replace("10/uV 16 0", "10/NU 16 0", 1))
    with pytest.raises(DatasetError, match=rf"{rec.name}.hea: channel\(s\) 'F3-M2' in 'NU': expected a voltage"):
        build("physionet2018", **kw)[0]
