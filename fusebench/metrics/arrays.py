"""Array conversion shared by the metrics and by the code that gathers predictions for them.

Under a mixed-precision policy (``bf16-mixed``, ``16-mixed``) model outputs are bfloat16 / float16
tensors. Metrics always reduce in float64 (or exact integers for counts), whatever the input dtype and
the caller's autocast: every metric converts its inputs with :func:`to_numpy` and casts the result to
float64 / int64 itself. numpy has no bfloat16 (``tensor.numpy()`` raises) and a float16 numpy array
would sum in float16, so :func:`to_numpy` widens half precision to float32 first. Widening is exact
(every float16 / bfloat16 value is a float32 value), so a metric of bf16 predictions equals the metric
of the same values given in float64; float32, float64, integer and bool inputs are passed through
unchanged (bit-identical results).

>>> import torch
>>> to_numpy(torch.tensor([0.1, 2.5], dtype=torch.bfloat16)).dtype
dtype('float32')
>>> to_numpy(torch.tensor([0.1, 2.5], dtype=torch.bfloat16), np.float64).tolist()  # bf16(0.1), exactly
[0.10009765625, 2.5]
"""

from __future__ import annotations

from typing import Any

import numpy as np


def widen(t: Any) -> Any:
    """Torch tensor ``t`` as float32 when its dtype is a floating type narrower than float32 (float16,
    bfloat16, float8; exact); any other tensor is returned as is (the same object). Differentiable:
    it does not detach, so a loss may widen its inputs."""
    return t.float() if t.is_floating_point() and t.element_size() < 4 else t


def to_numpy(x: Any, dtype: Any = None) -> np.ndarray:
    """``x`` (torch tensor on any device, numpy array, sequence, scalar) as a numpy array: a tensor is
    detached and moved to the CPU; half precision (torch or numpy) is widened to float32 (exact);
    ``dtype``, where given, is then applied with ``np.asarray(..., dtype=dtype)``."""
    if hasattr(x, "detach"):  # a torch tensor (duck-typed: this module does not import torch)
        x = widen(x.detach().cpu()).numpy()
    a = np.asarray(x, dtype=dtype)
    if dtype is None and a.dtype.kind == "f" and a.dtype.itemsize < 4:
        a = a.astype(np.float32)
    return a


__all__ = ["to_numpy", "widen"]
