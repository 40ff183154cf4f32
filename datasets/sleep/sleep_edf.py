"""The registered ``sleep_edf`` adapter (:class:`SleepEDF`, Sleep-EDF Expanded) and its synthetic twin.

``*-PSG.edf`` (plain EDF) and ``*-Hypnogram.edf`` (EDF+C annotations) read with mne. A PSG pairs
with the hypnogram sharing its first 6 characters; option ``pairs`` (or a ``pairs.tsv`` manifest)
gives explicit pairs. The hypnogram's annotations are shifted by the start-time difference of the
two headers before they are expanded into epochs (:func:`.annotations.stage_epochs`).
"""

from __future__ import annotations

import datetime as _dt
import math
from pathlib import Path
from typing import Any

import numpy as np

from .. import DATASETS
from ..base import DataFile, DatasetError, Modality, SyntheticSpec
from ..errors import not_a_file
from .annotations import EPOCH_S, UNKNOWN_STAGES, read_hypnogram, stage_epochs
from .dataset import _SleepDataset
from .edf import _edf_start, check_native_rates, check_voltage_units, read_edf_channels, read_edf_header, write_edf
from .layouts import _NAME_RE
from .synthetic import synth_eeg, synth_hypnogram


def _check_overlap(rec: dict[str, Any], onset: np.ndarray, dur: np.ndarray, span_s: float,
                   start_psg: _dt.datetime, start_hyp: _dt.datetime, shift: float) -> None:
    """Raise :class:`DatasetError` unless some annotation of the hypnogram (any description, ``?`` included),
    laid on the PSG's time axis, overlaps the recording's ``span_s`` seconds of signal.

    A hypnogram that covers none of its recording (another night's file, or a start date / time edited in one
    of the two headers) scored no epoch, and the recording was silently left out of its split."""
    end = onset + np.maximum(dur, 0.0)
    hits = (onset < span_s) & ((end > 0) | (onset >= 0))
    if hits.any():
        return
    what = (f"its {len(onset)} annotation(s) span {float(onset.min()):g}..{float(end.max()):g} s on the PSG's time "
            f"axis" if len(onset) else "it holds no annotation")
    raise DatasetError(
        f"{rec['hyp']}: the hypnogram does not overlap its recording {rec['psg']}: {what}, the signal "
        f"0..{span_s:g} s (PSG start {start_psg:%d.%m.%Y %H:%M:%S}, hypnogram start {start_hyp:%d.%m.%Y %H:%M:%S}, "
        f"{shift:+g} s apart); not one epoch of the recording could be scored. The hypnogram belongs to another "
        "recording, or a start date/time in one header (bytes 168-184) is wrong; pair the right files "
        "(pairs=... or pairs.tsv)")


@DATASETS.register("sleep_edf")
class SleepEDF(_SleepDataset):
    """Sleep-EDF Expanded: Fpz-Cz and Pz-Oz EEG at 100 Hz, R&K hypnograms mapped to 5 AASM stages."""

    # the public name stays fusebench.datasets.sleep:SleepEDF (recorded as "adapter" in prepared-cache
    # manifests and as the registry origin), as when the adapters were the module fusebench.datasets.sleep
    __module__ = "fusebench.datasets.sleep"

    id = "sleep_edf"
    #: the files of a recording a prepared cache depends on (keys of a recording's index entry)
    SOURCE_KEYS = ("psg", "hyp")
    CHANNELS = ("EEG Fpz-Cz", "EEG Pz-Oz")
    #: the rate Sleep-EDF stores each channel read at (PhysioNet's description of sleep-edfx: EEG and EOG at 100 Hz;
    #: the 1 Hz channels are not read): checked against each PSG's header (:func:`.edf.check_native_rates`)
    NATIVE_HZ = {"EEG Fpz-Cz": 100.0, "EEG Pz-Oz": 100.0}
    MODALITIES = (
        Modality("fpz_cz", "signal", 1, description="EEG Fpz-Cz, µV"),
        Modality("pz_oz", "signal", 1, description="EEG Pz-Oz, µV"),
    )
    DEFAULT_CROP_WAKE_MIN = 30.0
    #: + unknown_stages ("error" | "skip"): what a hypnogram description outside STAGE_MAP does
    OPTIONS = _SleepDataset.OPTIONS | {"unknown_stages"}
    OPTION_TYPES = {**_SleepDataset.OPTION_TYPES, "unknown_stages": str}
    FILES = (
        DataFile("**/*-PSG.edf", "polysomnograms (EDF), e.g. sleep-cassette/SC4001E0-PSG.edf"),
        DataFile("**/*-Hypnogram.edf", "hypnograms (EDF+), e.g. sleep-cassette/SC4001EC-Hypnogram.edf"),
        DataFile("pairs.tsv", "optional explicit 'psg<TAB>hypnogram' pairs", required=False),
    )
    INFO = """
Sleep-EDF Database Expanded (Kemp et al. 2000; ODC-By 1.0), https://physionet.org/content/sleep-edfx/1.0.0/
(sleep-cassette/SC4ssNE0-PSG.edf with SC4ssN?-Hypnogram.edf; sleep-telemetry/ST7ssN...).
"""

    def _unknown_stages(self) -> str:
        value = self._opts_rest.get("unknown_stages", "error")
        if value not in UNKNOWN_STAGES:
            raise DatasetError(f"{self.id}: unknown_stages={value!r} must be one of {list(UNKNOWN_STAGES)} "
                               "(what a hypnogram description that is not a Sleep-EDF stage does)")
        return value

    def _find_recordings(self) -> list[dict[str, Any]]:
        self._unknown_stages()  # a bad value is reported before any file is read
        pairs = self._opts_rest.get("pairs")
        where = "the pairs= option"
        if pairs is None and (self.root / "pairs.tsv").is_file():
            where = str(self.root / "pairs.tsv")
            pairs = []
            for i, line in enumerate((self.root / "pairs.tsv").read_text().splitlines(), start=1):
                if not line.strip():
                    continue
                fields = line.split("\t")
                if len(fields) != 2:
                    raise DatasetError(f"{self.id}: {where} line {i} has {len(fields)} tab-separated field(s) "
                                       f"({line!r:.80}); expected two: the PSG file, a tab, its hypnogram file")
                pairs.append(fields)
        if pairs is not None:
            for i, pair in enumerate(pairs):
                if isinstance(pair, (str, bytes)) or not hasattr(pair, "__len__") or len(pair) != 2:
                    raise DatasetError(f"{self.id}: {where}: entry {i} is {pair!r:.80}; expected a pair "
                                       f"[PSG file, hypnogram file]")
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
                    raise DatasetError(f"{self.id}: {p} {not_a_file(p)}" + (
                        "; expected an EDF file" if p.exists() or p.is_symlink() else ""))
            m = _NAME_RE.match(psg.name) or _NAME_RE.match(hyp.name)
            subject = f"{m.group(1)}{m.group(2)}" if m else psg.stem
            out.append({"name": psg.stem, "psg": psg, "hyp": hyp, "subject": subject,
                        "night": int(m.group(3)) if m else None})
        return out

    def _epoch_labels(self, rec: dict[str, Any]) -> np.ndarray:
        import mne

        hdr = read_edf_header(rec["psg"])
        check_native_rates(rec["psg"], hdr, {c: self.NATIVE_HZ[c] for c in self._labels})
        check_voltage_units(rec["psg"], hdr, self._labels)
        start_psg, start_hyp = hdr["start"], _edf_start(rec["hyp"])
        try:
            raw = mne.io.read_raw_edf(rec["psg"], preload=False, verbose="error")
        except Exception as e:
            raise DatasetError(f"{rec['psg']}: not a readable EDF file ({type(e).__name__}: {e})") from e
        n_epochs = int(raw.n_times / raw.info["sfreq"] // EPOCH_S)
        onset, dur, desc = read_hypnogram(rec["hyp"])
        shift = (start_hyp - start_psg).total_seconds()
        onset = onset + shift
        _check_overlap(rec, onset, dur, n_epochs * EPOCH_S, start_psg, start_hyp, shift)
        return stage_epochs(onset, dur, desc, n_epochs, source=str(rec["hyp"]), unknown_stages=self._unknown_stages())

    def _read_signals(self, rec: dict[str, Any]) -> np.ndarray:
        return read_edf_channels(rec["psg"], self._labels, self.sfreq_hz,
                                 native_hz={c: self.NATIVE_HZ[c] for c in self._labels})[0]

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
