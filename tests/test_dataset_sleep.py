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
    splits = {s: build("physionet2018", root=tmp_path, split=s, use_cache=False) for s in ("train", "val", "test")}
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
