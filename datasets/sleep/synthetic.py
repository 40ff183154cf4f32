"""Synthetic EEG for the synthetic twins: a sticky hypnogram and stage-dependent spectra.

The files themselves are written by the adapters' ``write_synthetic`` with :func:`.edf.write_edf`
(Sleep-EDF) and :func:`.wfdb_records.write_wfdb_mat_record` + :func:`.annotations.write_arousal_mat`
(PhysioNet 2018).
"""

from __future__ import annotations

import math

import numpy as np

from .annotations import EPOCH_S


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
