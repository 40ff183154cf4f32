"""Array conversion and input checks shared by the metrics and by the code that gathers predictions for them.

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
    detached and moved to the CPU; a sparse one (torch sparse layout, or a ``scipy.sparse`` matrix / array) is
    made dense first (exact: its implicit entries are 0); half precision (torch or numpy) is widened to float32
    (exact); ``dtype``, where given, is then applied with ``np.asarray(..., dtype=dtype)``."""
    if hasattr(x, "detach"):  # a torch tensor (duck-typed: this module does not import torch)
        x = x.detach().cpu()
        if str(x.layout) != "torch.strided":  # sparse COO / CSR / CSC / BSR: numpy() refuses them
            x = x.to_dense()
        x = widen(x).numpy()
    elif hasattr(x, "toarray") and hasattr(x, "nnz"):  # scipy.sparse: np.asarray gives a 0-d object array
        x = x.toarray()
    a = np.asarray(x, dtype=dtype)
    if dtype is None and a.dtype.kind == "f" and a.dtype.itemsize < 4:
        a = a.astype(np.float32)
    return a


def as_1d(x: Any, name: str, metric: str) -> np.ndarray:
    """``x`` (numpy / torch / sequence, any dtype: half precision is widened exactly, see
    :func:`to_numpy`) as a 1-D numpy array; ValueError for other ranks or empty input."""
    a = to_numpy(x)
    if a.ndim != 1:
        raise ValueError(f"{metric}: {name} must be a 1-D array, got shape {a.shape}")
    if a.size == 0:
        raise ValueError(f"{metric}: {name} is empty; a metric needs at least one sample")
    return a


def pair(y_pred: Any, y_true: Any, metric: str, integer: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Validated ``(y_pred, y_true)`` of a metric of 1-D predictions: same length, finite; integer-valued
    (returned as int64) when ``integer``, else float64."""
    p = as_1d(y_pred, "y_pred", metric)
    t = as_1d(y_true, "y_true", metric)
    if p.shape != t.shape:
        raise ValueError(f"{metric}: y_pred has {p.size} entries, y_true {t.size}; they must match")
    for name, a in (("y_pred", p), ("y_true", t)):
        if a.dtype == bool:
            continue
        if not np.issubdtype(a.dtype, np.number):
            raise ValueError(f"{metric}: {name} must be numeric, got dtype {a.dtype}")
        if not np.isfinite(a).all():
            raise ValueError(f"{metric}: {name} contains NaN or Inf")
        if integer and not np.array_equal(a, np.round(a)):
            raise ValueError(f"{metric}: {name} must hold integer class ids, got non-integer values")
    if integer:
        return p.astype(np.int64), t.astype(np.int64)
    return p.astype(np.float64), t.astype(np.float64)


__all__ = ["as_1d", "pair", "to_numpy", "widen"]
