"""The ``view_copies`` option of the ``multiview_mat`` adapters: k augmented copies of the SAME view(s).

An information-fixed control for "more views help" studies (``fusebench study kviews``, docs/kviews.md):
instead of adding views that carry new information, the dataset's views are replaced by ``copies``
augmented copies of one base vector, so that every view is a noisy function of the same input.

Option value (a mapping; every key checked by :func:`parse_view_copies`)::

    view_copies: {base: [view indices], copies: k, noise: sigma, mask: p, seed: s}

* ``base`` (required): one view index or a non-empty list of distinct view indices of the file; the
  base vector of sample i is the concatenation, in the order given, of those views' rows
  (standardised with the train statistics when ``standardize``, as every view is);
* ``copies`` (required): the number k >= 2 of views the dataset then has;
* ``noise`` (default 0): sigma >= 0, the standard deviation of the additive Gaussian noise **relative
  to the feature's train standard deviation** (after standardisation that std is 1, so the noise has
  std sigma in z-units);
* ``mask`` (default 0): p in [0, 1), the probability that a feature of a sample is masked, i.e.
  replaced by its train mean (0 after standardisation);
* ``seed`` (default 0): integer >= 0 seeding the augmentations; independent of the run seed and of
  the split seed.

The augmentation (:func:`augmented_copies`). With B the [N, D] base matrix over all N samples of the
file (rows in file order), T the train rows, mu_f and s_f the mean and population standard deviation
of feature f over T (with ``standardize``: mu_f = 0 and s_f = 1 exactly, the standardised values'
train statistics; s_f = 0 for a feature constant on T, which therefore gets no noise), copy c
(c = 0..k-1) is::

    g_c = numpy.random.default_rng([seed, c])
    E_c = g_c.standard_normal((N, D))           # drawn first
    U_c = g_c.random((N, D))                    # drawn second, always (also when p = 0)
    M_c = (U_c >= p)                            # 1 = kept, 0 = masked
    copy_c = mu + M_c * (B - mu + sigma * s * E_c)

so every sample gets its own fixed augmentation per copy, drawn once when the dataset is built (the
same in the train, val and test split instances, and at every epoch), and copy c is the same whatever
k is (copies are nested in k, like the real view subsets of the study). The copies are not
re-standardised. They hold no information about the label beyond what the base view(s) hold (each
is the base plus independent noise, then masked), though more copies do recover more of the base
(averaging the noise out): the study's ``raw`` row on the copies measures that input-side effect.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from ..base import DatasetError

KEYS = ("base", "copies", "noise", "mask", "seed")
_FORM = "{base: [view indices], copies: k, noise: sigma, mask: p, seed: int}"


def _is_int(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))


def parse_view_copies(value: Any, n_views: int, where: str = "multiview_mat") -> dict[str, Any]:
    """The checked, normalised ``view_copies`` option: ``{"base": [int, ...], "copies": int, "noise":
    float, "mask": float, "seed": int}``. ``n_views`` is the number of views in the file (``base``
    indices must lie in 0..n_views-1). Raises :class:`DatasetError` naming ``view_copies.<key>`` and
    what was expected."""
    if not isinstance(value, Mapping):
        raise DatasetError(f"{where}: view_copies={value!r} must be a mapping {_FORM}")
    unknown = sorted(str(k) for k in value if k not in KEYS)
    if unknown:
        raise DatasetError(f"{where}: view_copies has unknown key(s) {unknown}; valid keys: {list(KEYS)} ({_FORM})")
    missing = [k for k in ("base", "copies") if k not in value]
    if missing:
        raise DatasetError(f"{where}: view_copies needs the key(s) {missing} ({_FORM})")
    base = value["base"]
    base_list = [base] if _is_int(base) else list(base) if isinstance(base, (list, tuple)) else None
    if (not base_list or not all(_is_int(v) for v in base_list) or len(set(base_list)) != len(base_list)
            or not all(0 <= v < n_views for v in base_list)):
        raise DatasetError(f"{where}: view_copies.base={base!r} must be a view index or a non-empty list of distinct "
                           f"view indices in 0..{n_views - 1} (the file has {n_views} views)")
    copies = value["copies"]
    if not _is_int(copies) or copies < 2:
        raise DatasetError(f"{where}: view_copies.copies={copies!r} must be an integer >= 2 (the number of views)")
    noise = value.get("noise", 0.0)
    if not _is_number(noise) or not math.isfinite(float(noise)) or float(noise) < 0:
        raise DatasetError(f"{where}: view_copies.noise={noise!r} must be a finite number >= 0 (the noise std "
                           "relative to the feature's train std)")
    mask = value.get("mask", 0.0)
    if not _is_number(mask) or not 0.0 <= float(mask) < 1.0:
        raise DatasetError(f"{where}: view_copies.mask={mask!r} must be a number in [0, 1) (the probability that "
                           "a feature is masked)")
    seed = value.get("seed", 0)
    if not _is_int(seed) or seed < 0:
        raise DatasetError(f"{where}: view_copies.seed={seed!r} must be an integer >= 0")
    return {"base": [int(v) for v in base_list], "copies": int(copies), "noise": float(noise), "mask": float(mask),
            "seed": int(seed)}


def augmented_copies(base: np.ndarray, train: np.ndarray, copies: int, noise: float, mask: float, seed: int,
                     standardized: bool) -> list[np.ndarray]:
    """``copies`` augmented copies of the [N, D] matrix ``base`` (float64; see the module docstring
    for the formula). ``train``: the train row indices (their mean and std set mu and s unless
    ``standardized``, where mu = 0 and s = 1 for the features not constant on train)."""
    x = np.asarray(base, dtype=np.float64)
    xt = x[train]
    constant = (xt.max(axis=0) == xt.min(axis=0)) if xt.shape[0] else np.ones(x.shape[1], dtype=bool)
    if standardized:
        mu = np.zeros(x.shape[1])
        s = np.where(constant, 0.0, 1.0)
    else:
        mu = np.where(constant, xt[:1].reshape(-1) if xt.shape[0] else 0.0, xt.mean(axis=0))
        s = np.where(constant, 0.0, xt.std(axis=0))
    out = []
    for c in range(int(copies)):
        g = np.random.default_rng([int(seed), c])
        eps = g.standard_normal(x.shape)
        keep = g.random(x.shape) >= mask
        out.append(mu + keep * (x - mu + noise * s * eps))
    return out


__all__ = ["KEYS", "augmented_copies", "parse_view_copies"]
