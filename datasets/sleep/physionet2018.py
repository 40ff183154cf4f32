"""The registered ``physionet2018`` adapter (:class:`PhysioNet2018`, PhysioNet/CinC Challenge 2018).

Records ``<rec>/<rec>.hea`` + ``<rec>.mat`` (:mod:`.wfdb_records`) with ``<rec>-arousal.mat`` stages
(:mod:`.annotations`); a record without an arousal file is skipped with a warning. Wake cropping is
off by default (``crop_wake_min=None``).
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

import numpy as np

from .. import DATASETS
from ..base import DataFile, DatasetError, Modality, SyntheticSpec
from .annotations import EPOCH_S, physionet_epoch_stages, read_arousal_stages, write_arousal_mat
from .dataset import _SleepDataset
from .layouts import PHYSIONET_CHANNELS, channel_modality_name
from .synthetic import synth_eeg, synth_hypnogram
from .wfdb_records import check_wfdb_files, read_wfdb_channels, write_wfdb_mat_record

log = logging.getLogger(__package__)  # the logger of fusebench.datasets.sleep, as before the split


_PN_MODALITIES = tuple(Modality(channel_modality_name(c), "signal", 1, description=f"EEG {c}, µV")
                       for c in PHYSIONET_CHANNELS[:6])


@DATASETS.register("physionet2018")
class PhysioNet2018(_SleepDataset):
    """PhysioNet/CinC 2018: six EEG derivations (F3-M2 ... O2-M1) at 200 Hz as k = 6 views."""

    # the public name stays fusebench.datasets.sleep:PhysioNet2018 (recorded as "adapter" in prepared-cache
    # manifests and as the registry origin), as when the adapters were the module fusebench.datasets.sleep
    __module__ = "fusebench.datasets.sleep"

    id = "physionet2018"
    #: the files of a recording a prepared cache depends on (keys of a recording's index entry)
    SOURCE_KEYS = ("hea", "mat", "arousal")
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
