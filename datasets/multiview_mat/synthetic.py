"""Multi-view synthetic twin: a small ``.mat`` file in the multi-view convention, read back by the
real reader (see docs/datasets/multiview.md).

:class:`_SyntheticTwin` is the mixin of the ``multiview_mat`` adapters holding the writer.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..base import SyntheticSpec


class _SyntheticTwin:
    """The synthetic-twin writer of the ``multiview_mat`` adapters (a class method)."""

    @classmethod
    def write_synthetic(cls, root: Path, spec: SyntheticSpec) -> None:
        """A small .mat in the convention: 1-by-V cell X of (N, d_v) views, N-by-1 labels 1..C.

        View v = class mean (informativeness x 2 x N(0, I) per class) + N(0, I) noise, then scaled by
        10^(v mod 3) and shifted by v (so standardisation matters). C = options["num_classes"], else
        min(declared classes, max(2, N // 8)).
        """
        import scipy.io

        rng = np.random.default_rng(spec.seed)
        n = int(spec.num_samples)
        c = int(spec.options.get("num_classes", min(int(cls.num_classes or 4), max(2, n // 8))))
        y = np.arange(n) % c
        y = y[rng.permutation(n)]
        cell = np.empty((1, len(cls.MODALITIES)), dtype=object)
        for v, m in enumerate(cls.MODALITIES):
            amp = 2.0 * float(spec.informativeness.get(m.name, 1.0))
            means = rng.standard_normal((c, m.channels)) * amp
            x = means[y] + rng.standard_normal((n, m.channels))
            cell[0, v] = x * 10.0 ** (v % 3) + v
        scipy.io.savemat(str(root / cls._synthetic_name()), {"X": cell, "Y": (y + 1).astype(np.float64)[:, None]})
