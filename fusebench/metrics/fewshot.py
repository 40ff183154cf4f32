"""Few-shot linear-probe protocol of the M3G paper's EEG experiment (Piran et al., Sec. 4.3, Table 3).

References: Piran, Klein, Thornton, Cuturi, "Contrasting Multiple Representations with the
Multi-Marginal Matching Gap", ICML 2024, arXiv:2405.19532, https://arxiv.org/abs/2405.19532; Brüsch,
Schmidt, Alstrøm, "Multi-view self-supervised learning for multivariate variable-channel time
series", IEEE MLSP 2023, arXiv:2307.09614, https://arxiv.org/abs/2307.09614 (code, named in the M3G
paper: https://github.com/theabrusch/Multiview_TS_SSL).

Protocol (following Brüsch et al. 2023, as the M3G paper does): the pre-trained encoder is frozen;
for each number of labelled epochs per class s in {10, 50, 100, 1000} and each seed, s training
epochs of every class are drawn without replacement (:func:`sample_per_class`), a linear classifier
is trained on their frozen embeddings and scored on the test embeddings with the sleep metrics
(pooled over all test subjects). The per-channel embeddings ``[k, n, d]`` are concatenated to
``[n, k*d]`` first: "a linear layer combining the channel representations followed by a linear
classifier" composes to one linear map of the concatenation, so one multinomial logistic regression
on it is the same model class.

The probe (:func:`fit_linear_probe`) is multinomial logistic regression, features standardised with
the training mean/std, cross-entropy (log-softmax, i.e. log-space) plus ``l2 * ||W||^2 / 2``,
minimised full-batch with L-BFGS in float64 — deterministic, no learning-rate tuning.

Shape: embeddings ``[n, d]`` or ``[k, n, d]``; labels ``[n]`` integer class ids 0..C-1.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch
from einops import rearrange

from fusebench.metrics import get as get_metric
from fusebench.training.utils import optimizer_class
from fusebench.metrics.arrays import to_numpy

SHOTS = (10, 50, 100, 1000)


def _emb(x: Any, name: str) -> torch.Tensor:
    t = torch.as_tensor(to_numpy(x))  # half precision widened exactly; float64 below
    if t.dim() == 3:
        t = rearrange(t, "k n d -> n (k d)")
    if t.dim() != 2 or t.shape[0] == 0:
        raise ValueError(f"fewshot: {name} must be [n, d] or [k, n, d] with n >= 1, got shape {tuple(t.shape)}")
    t = t.to(torch.float64)
    if not torch.isfinite(t).all():
        raise ValueError(f"fewshot: {name} contains NaN or Inf")
    return t


def _labels(y: Any, n: int, name: str) -> np.ndarray:
    a = to_numpy(y)
    if a.shape != (n,) or not np.issubdtype(a.dtype, np.integer) or (a < 0).any():
        raise ValueError(f"fewshot: {name} must be [n={n}] non-negative integer class ids, got {a.dtype} {a.shape}")
    return a.astype(np.int64)


def sample_per_class(y: Any, s: int, seed: int, classes: Sequence[int] | None = None) -> np.ndarray:
    """Indices of ``s`` samples of each class drawn without replacement, seeded; sorted.

    Raises ValueError naming the class when it has fewer than ``s`` samples.
    """
    y = to_numpy(y)
    if s < 1:
        raise ValueError(f"fewshot: s (labelled samples per class) must be >= 1, got {s}")
    rng = np.random.default_rng(seed)
    classes = np.unique(y) if classes is None else np.asarray(classes)
    out = []
    for c in classes:
        pool = np.flatnonzero(y == c)
        if pool.size < s:
            raise ValueError(f"fewshot: class {int(c)} has {pool.size} labelled samples, s={s} requested")
        out.append(rng.choice(pool, size=s, replace=False))
    return np.sort(np.concatenate(out))


def fit_linear_probe(x: Any, y: Any, num_classes: int, l2: float = 1e-2, max_iter: int = 200):
    """Fit multinomial logistic regression; returns ``predict(x) -> labels [n]``."""
    xt = _emb(x, "x")
    yt = torch.as_tensor(_labels(y, xt.shape[0], "y"))
    if int(yt.max()) >= num_classes:
        raise ValueError(f"fewshot: label {int(yt.max())} >= num_classes={num_classes}")
    mean, std = xt.mean(0), xt.std(0, unbiased=False).clamp_min(1e-8)
    z = (xt - mean) / std
    w = torch.zeros(z.shape[1], num_classes, dtype=torch.float64, requires_grad=True)
    b = torch.zeros(num_classes, dtype=torch.float64, requires_grad=True)
    opt = optimizer_class(torch.optim.LBFGS)([w, b], lr=1.0, max_iter=max_iter, tolerance_grad=1e-7, tolerance_change=1e-10,
                            history_size=20, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        opt.zero_grad()
        logits = z @ w + b
        loss = torch.nn.functional.cross_entropy(logits, yt) + 0.5 * l2 * (w * w).sum()
        loss.backward()
        return loss

    with torch.enable_grad():
        opt.step(closure)
    w_, b_ = w.detach(), b.detach()

    def predict(x_new: Any) -> np.ndarray:
        zn = (_emb(x_new, "x_test") - mean) / std
        return (zn @ w_ + b_).argmax(dim=1).numpy()

    predict.weights, predict.bias = w_, b_  # type: ignore[attr-defined]
    return predict


def fewshot_eval(
    train_emb: Any,
    train_y: Any,
    test_emb: Any,
    test_y: Any,
    shots: Sequence[int] = SHOTS,
    seeds: Sequence[int] = (0, 1, 2, 3, 4),
    metrics: Sequence[str] = ("acc", "bacc", "mf1", "kappa"),
    l2: float = 1e-2,
) -> dict[int, dict[str, dict[str, Any]]]:
    """Run the protocol; ``{s: {metric: {"mean": float, "std": float, "per_seed": [float]}}}``.

    The classes are those of ``train_y``; an ``s`` larger than the smallest class raises ValueError.
    """
    xtr, xte = _emb(train_emb, "train_emb"), _emb(test_emb, "test_emb")
    ytr = _labels(train_y, xtr.shape[0], "train_y")
    yte = _labels(test_y, xte.shape[0], "test_y")
    num_classes = int(max(ytr.max(), yte.max())) + 1
    fns = {m: get_metric(m) for m in metrics}
    out: dict[int, dict[str, dict[str, Any]]] = {}
    for s in shots:
        per = {m: [] for m in metrics}
        for seed in seeds:
            idx = sample_per_class(ytr, int(s), int(seed))
            predict = fit_linear_probe(xtr[idx], ytr[idx], num_classes, l2=l2)
            pred = predict(xte)
            for m, fn in fns.items():
                per[m].append(fn(pred, yte))
        out[int(s)] = {m: {"mean": float(np.mean(v)), "std": float(np.std(v)), "per_seed": v} for m, v in per.items()}
    return out


__all__ = ["SHOTS", "fewshot_eval", "fit_linear_probe", "sample_per_class"]
