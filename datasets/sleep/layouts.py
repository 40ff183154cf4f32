"""Recording layouts: channel names, the Sleep-EDF file-name pattern and the subject-wise split rule.

Sleep-EDF subject/night come from the ``SC4ssN`` / ``ST7ssN`` name (:data:`_NAME_RE`); the
PhysioNet 2018 records hold the 13 channels of :data:`PHYSIONET_CHANNELS` (the first six are EEG).

Subject-wise splits: subjects ordered by sha256 of their id, ``test_fraction`` (0.2) then
``val_fraction`` (0.1) of them (rounded half up, at least one each when enough subjects remain, see
:func:`_split_counts`) go to test and val, the rest (>= 1) to train (:func:`_subject_split`);
``split_subjects={"train": [...], ...}`` overrides (in the adapter's index).
"""

from __future__ import annotations

import hashlib
import math
import re

from ..base import DatasetError


PHYSIONET_CHANNELS = ("F3-M2", "F4-M1", "C3-M2", "C4-M1", "O1-M2", "O2-M1", "E1-M2", "Chin1-Chin2",
                      "ABD", "CHEST", "AIRFLOW", "SaO2", "ECG")
_NAME_RE = re.compile(r"(SC4|ST7)(\d\d)(\d)")


def channel_modality_name(label: str) -> str:
    """'EEG Fpz-Cz' -> 'fpz_cz'; 'F3-M2' -> 'f3_m2'."""
    label = re.sub(r"^(EEG|EOG|EMG)\s+", "", label.strip())
    return re.sub(r"[^a-z0-9]+", "_", label.lower()).strip("_")


# ---------------------------------------------------------------------------------------------
# subject-wise splits
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
