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
  unscored epochs are dropped; any other description is an error naming the hypnogram and the text
  unless ``unknown_stages="skip"`` (then its epochs are dropped with a warning). Wake cropping
  (``crop_wake_min``, default 30): keep the epochs from 30 min before the first to 30 min after the
  last sleep epoch; a recording without any sleep epoch
  (e.g. the 5-minute fixture) is left intact; ``None`` disables cropping. Every EDF and the
  hypnogram's TAL syntax are checked first (:mod:`.edf`, :mod:`.annotations`), since mne silently
  reads truncated files and skips malformed annotations.
* ``physionet2018`` (Ghassemi et al., CinC 2018): ``<rec>/<rec>.hea`` + ``<rec>.mat`` read with
  ``wfdb.rdrecord`` (format and file-size checks: :mod:`.wfdb_records`); ``<rec>-arousal.mat``
  sample-wise stage indicators read with h5py, an epoch's stage being the majority indicator over
  its samples (:mod:`.annotations`); undefined epochs are dropped. Wake cropping is off by default
  (``crop_wake_min=None``).

Signals are read in microvolts, resampled to ``sfreq_hz`` (default 100) with a polyphase filter
(scipy.signal.resample_poly), cut into epochs and held as one contiguous array per recording so a
sample is a slice. Subject-wise splits: subjects ordered by sha256 of their id, ``test_fraction``
(0.2) then ``val_fraction`` (0.1) of them (rounded half up, at least one each when enough subjects
remain, see :func:`.layouts._split_counts`) go to test and val, the rest (>= 1) to train;
``split_subjects={"train": [...], ...}`` overrides. An empty split raises :class:`DatasetError`
naming the subjects found, the rule and the fixes.

Shape (one sample):
    modalities[channel]  [1, 30 * sfreq_hz] float32, microvolts
    target               [] int64 stage id in 0..4

**References.**

* Sleep-EDF: Kemp, Zwinderman, Tuk, Kamphuisen, Oberyé, "Analysis of a sleep-dependent neuronal
  feedback loop: the slow-wave microcontinuity of the EEG", IEEE Trans. Biomed. Eng. 47(9), 2000,
  https://doi.org/10.1109/10.867928 ; data: https://physionet.org/content/sleep-edfx/
* PhysioNet/CinC Challenge 2018: Ghassemi et al., "You Snooze, You Win: the PhysioNet/Computing in
  Cardiology Challenge 2018", Computing in Cardiology 2018, https://doi.org/10.22489/CinC.2018.049 ;
  data: https://physionet.org/content/challenge-2018/
* EDF+ specification: https://www.edfplus.info/specs/edfplus.html

**Modules.** :mod:`.edf` (EDF header check, signal reading, EDF/EDF+ writer), :mod:`.annotations`
(stage map, EDF+ TAL / hypnogram and PhysioNet arousal-file readers, epoching, wake cropping),
:mod:`.wfdb_records` (WFDB record reading, file-size checks, writer), :mod:`.layouts` (channel and
file names, subject-wise split rule), :mod:`.synthetic` (synthetic EEG and hypnograms),
:mod:`.dataset` (the shared adapter base), :mod:`.sleep_edf` (:class:`SleepEDF`) and
:mod:`.physionet2018` (:class:`PhysioNet2018`). The package exports the adapter classes and the
public readers, writers and tables in ``__all__``; every other name is imported from the module that
defines it. The modules log to the ``fusebench.datasets.sleep`` logger; importing this package
registers both adapters.
"""

from __future__ import annotations

from .annotations import (
    EPOCH_S,
    PHYSIONET_STAGE_KEYS,
    STAGE_MAP,
    STAGES,
    crop_wake,
    physionet_epoch_stages,
    read_arousal_stages,
    read_edf_annotations,
    read_hypnogram,
    stage_epochs,
    write_arousal_mat,
)
from .edf import read_edf_channels, read_edf_header, write_edf
from .layouts import PHYSIONET_CHANNELS, channel_modality_name
from .physionet2018 import PhysioNet2018
from .sleep_edf import SleepEDF
from .synthetic import synth_eeg, synth_hypnogram
from .wfdb_records import check_wfdb_files, read_wfdb_channels, write_wfdb_mat_record

__all__ = [
    "EPOCH_S", "PHYSIONET_CHANNELS", "PHYSIONET_STAGE_KEYS", "PhysioNet2018", "STAGES", "STAGE_MAP", "SleepEDF",
    "channel_modality_name", "check_wfdb_files", "crop_wake", "physionet_epoch_stages", "read_arousal_stages",
    "read_edf_annotations", "read_edf_channels", "read_edf_header", "read_hypnogram", "read_wfdb_channels",
    "stage_epochs", "synth_eeg", "synth_hypnogram", "write_arousal_mat", "write_edf", "write_wfdb_mat_record",
]
