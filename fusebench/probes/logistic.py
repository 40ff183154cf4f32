"""The L2-regularised multinomial logistic regression of the probes on frozen embeddings, and the validation
search of its L2 weight (probes layer).

* :func:`standardize`: every probe sees the embeddings **z-scored with the fitting split's per-column mean /
  std**, ``(x - mean) / std`` (population std; columns constant on the fitting split become 0); the probes
  fit it on the train split.
* :func:`fit_logistic`: multinomial logistic regression, weights ``W [d, C]`` and bias ``b [C]`` minimising

      mean_i CE(softmax(x_i W + b), y_i) + l2 / 2 * ||W||_F^2        (the bias not penalised)

  full batch, float64, L-BFGS (``torch.optim.LBFGS``, strong-Wolfe line search, stop at max-abs gradient
  <= 1e-7 or a change <= 1e-12) from zero on one thread, so the result depends on neither a seed nor the
  thread count. Batched (the few-shot draws): B independent problems fitted jointly by minimising the
  **sum** of their objectives (separable: the minimiser is the tuple of the per-problem minimisers); with
  more features than samples in the row space of x (``W = Q V`` with ``x^T = Q R``: the same L-BFGS
  trajectory up to rounding, :func:`_fit_logistic_batched_span`). The L-BFGS optimisers are
  :func:`fusebench.runtime.utils.optimizer_class` ones: PyTorch's, without importing torch._dynamo.
* ``predict_classes``: ``argmax_c (x W + b)_c``, ties to the lower class id; ``accuracy_along``: the fraction correct.
  Both are shared by the probes (:mod:`fusebench.probes.fewshot`, :mod:`fusebench.probes.knn`,
  :mod:`fusebench.probes.embedding_eval`).
* :func:`search_l2`: the L2 weight is chosen on the **validation** split only: the searched value with the
  highest val score, ties to the larger (more regularised) value. **The search**: a grid of two or more
  values is extended beyond the edge it chose, a decade at a time (``v / 10`` below the smallest value,
  ``v * 10`` above the largest), while the value beyond the edge has a strictly higher val score, within
  [:data:`L2_FLOOR`, :data:`L2_CEILING`] = [1e-8, 1e4]; so the chosen value lies inside the searched values
  unless a bound (or 0) stops the search, and the result says so (``edge``: ``"lower"`` / ``"upper"`` /
  None, ``searched``, ``extended``; the probes record them as ``l2_edge``, ``l2_searched``,
  ``l2_extended``). A grid of one value is a fixed weight: nothing is searched.

Precision: float64 throughout; autocast never casts float64 tensors, so a caller's autocast changes nothing.
Used by the full linear probe and the few-shot logistic probe (:mod:`fusebench.probes.embedding_eval`,
:mod:`fusebench.probes.fewshot`) and by the missing-view evaluation (:mod:`fusebench.probes.missing_views`).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch

from fusebench.components.reference_features import zscore_stats
from fusebench.runtime.utils import optimizer_class, single_thread

#: the default L2 grid of the probes (searched on val, :func:`search_l2`)
DEFAULT_L2_GRID = (1e-4, 1e-3, 1e-2, 1e-1, 1.0)
#: the bounds of the L2 search (:func:`search_l2`): a grid is never extended below / above them
L2_FLOOR, L2_CEILING = 1e-8, 1e4


def _decade(v: float) -> float:
    """``v`` rounded to 12 significant digits (``1e-4 / 10`` is ``1e-05``, not ``1.0000000000000002e-05``)."""
    return float(f"{v:.12g}")


def search_l2(grid: Sequence[float], score: Any) -> dict[str, Any]:
    """The validation search of an L2 weight (module doc): ``score(l2) -> float`` (the val score, higher is
    better) is called once per searched value. The grid's best value (ties to the larger); then, for a grid
    of two or more values, while the chosen value is the smallest (largest) searched value, ``v / 10``
    (``v * 10``) is scored and taken when its score is strictly higher, within [L2_FLOOR, L2_CEILING].
    -> ``{"l2", "scores" {l2: score}, "searched" (ascending), "extended" (in search order), "edge"}``,
    ``edge`` ``"lower"`` / ``"upper"`` when the chosen value is the smallest / largest searched value,
    else None (a one-value grid: None, nothing searched)."""
    scores = {float(v): float(score(v)) for v in grid}
    chosen = max(scores, key=lambda v: (scores[v], v))
    extended: list[float] = []
    while len(scores) >= 2:
        lo, hi = min(scores), max(scores)
        if chosen == lo and lo > 0 and _decade(lo / 10) >= L2_FLOOR:
            nxt = _decade(lo / 10)
        elif chosen == hi and _decade(hi * 10) <= L2_CEILING:
            nxt = _decade(hi * 10)
        else:
            break
        scores[nxt] = float(score(nxt))
        extended.append(nxt)
        if scores[nxt] <= scores[chosen]:
            break
        chosen = nxt
    searched = sorted(scores)
    edge = None
    if len(searched) >= 2:
        edge = "lower" if chosen == searched[0] else "upper" if chosen == searched[-1] else None
    return {"l2": chosen, "scores": scores, "searched": searched, "extended": extended, "edge": edge}


def standardize(fit: np.ndarray, *xs: np.ndarray) -> list[np.ndarray]:
    """z-score every array in ``xs`` with the per-column mean / population std of ``fit``:
    ``(x - mean) / std``; columns constant on ``fit`` become 0."""
    mean, scale, _ = zscore_stats(fit)
    return [(x - mean) / scale for x in xs]


def fit_logistic(x: np.ndarray, y: np.ndarray, num_classes: int, l2: Any, max_iter: int = 300
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Multinomial logistic regression (mean CE + l2/2 ||W||_F^2, bias free): full-batch L-BFGS
    (``torch.optim.LBFGS``, strong-Wolfe line search, stop at max-abs gradient <= 1e-7 or a change
    <= 1e-12) from zero, float64, one thread. ``x [n, d]``, ``y [n]`` -> ``(W [d, C], b [C])``.

    Batched form: ``x [B, n, d]``, ``y [B, n]``, ``l2`` a number or ``[B]`` -> ``(W [B, d, C],
    b [B, C])``: B independent problems (each its own mean CE and its own l2) fitted jointly by
    minimising the **sum** of their objectives. The sum is separable, so its minimiser is the tuple of
    the per-problem minimisers, and the max-abs gradient test applies to every problem's gradient;
    the iterates differ from B separate runs only at the solver's tolerance. One joint run costs
    about what one separate run costs (these problems are small; the time is per-iteration overhead).
    """
    if np.ndim(x) == 3:
        return _fit_logistic_batched(x, y, num_classes, l2, max_iter)
    xt = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float64))       # [n, d]
    yt = torch.from_numpy(np.ascontiguousarray(y, dtype=np.int64))         # [n]
    w = torch.zeros(x.shape[1], num_classes, dtype=torch.float64, requires_grad=True)
    b = torch.zeros(num_classes, dtype=torch.float64, requires_grad=True)
    with single_thread(), torch.enable_grad():
        opt = optimizer_class(torch.optim.LBFGS)([w, b], lr=1.0, max_iter=int(max_iter), tolerance_grad=1e-7,
                                tolerance_change=1e-12, history_size=10, line_search_fn="strong_wolfe")

        def closure() -> torch.Tensor:
            w.grad = b.grad = None  # opt.zero_grad() without its profiler scope (the same: set to None)
            loss = torch.nn.functional.cross_entropy(xt @ w + b, yt) + 0.5 * l2 * (w * w).sum()
            loss.backward()
            return loss

        opt.step(closure)
    return w.detach().numpy(), b.detach().numpy()


def _fit_logistic_batched(x: np.ndarray, y: np.ndarray, num_classes: int, l2: Any, max_iter: int
                          ) -> tuple[np.ndarray, np.ndarray]:
    xt = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float64))       # [B, n, d]
    yt = torch.from_numpy(np.ascontiguousarray(y, dtype=np.int64))         # [B, n]
    nb, n, d = xt.shape
    if tuple(yt.shape) != (nb, n):
        raise ValueError(f"fit_logistic: batched y must be [B={nb}, n={n}], got {tuple(yt.shape)}")
    l2t = torch.from_numpy(np.broadcast_to(np.asarray(l2, dtype=np.float64), (nb,)).copy())  # [B]
    if d > n:
        return _fit_logistic_batched_span(xt, yt, num_classes, l2t, max_iter)
    w = torch.zeros(nb, d, num_classes, dtype=torch.float64, requires_grad=True)
    b = torch.zeros(nb, 1, num_classes, dtype=torch.float64, requires_grad=True)
    with single_thread(), torch.enable_grad():
        opt = optimizer_class(torch.optim.LBFGS)([w, b], lr=1.0, max_iter=int(max_iter), tolerance_grad=1e-7,
                                tolerance_change=1e-12, history_size=10, line_search_fn="strong_wolfe")

        def closure() -> torch.Tensor:
            w.grad = b.grad = None  # opt.zero_grad() without its profiler scope (the same: set to None)
            logits = torch.bmm(xt, w) + b                                   # [B, n, C]
            ce = torch.nn.functional.cross_entropy(logits.reshape(nb * n, num_classes), yt.reshape(-1),
                                                   reduction="sum") / n     # sum over problems of mean CE
            loss = ce + 0.5 * (l2t * (w * w).sum(dim=(1, 2))).sum()
            loss.backward()
            return loss

        opt.step(closure)
    return w.detach().numpy(), b.detach().numpy()[:, 0]


def _fit_logistic_batched_span(xt: torch.Tensor, yt: torch.Tensor, num_classes: int, l2t: torch.Tensor,
                               max_iter: int) -> tuple[np.ndarray, np.ndarray]:
    """The batched fit when features outnumber samples (d > n: few-shot probes of wide features), in the
    row space of x. With the reduced QR factorisation ``x^T = Q R`` (``Q [d, n]`` orthonormal columns),
    every gradient of the objective, ``x^T G + l2 W``, and so every L-BFGS iterate started from W = 0,
    lies in the span of Q: ``W = Q V``. Because ``Q`` is an isometry (``||Q V|| = ||V||``, inner
    products preserved), minimising over ``V [n, C]`` with the features ``x Q = R^T [n, n]`` is the
    same problem with the same L-BFGS trajectory (up to rounding) at O(n^2 C) per iteration instead of
    O(n d C). Returns ``W = Q V`` and ``b``."""
    with single_thread():  # like every other step of the probes: the same bits whatever the thread count
        q, r = torch.linalg.qr(xt.transpose(1, 2), mode="reduced")           # [B, d, n], [B, n, n]
    v, b = _fit_logistic_batched(r.transpose(1, 2).numpy(), yt.numpy(), num_classes, l2t.numpy(), max_iter)
    with single_thread():
        w = torch.bmm(q, torch.from_numpy(v))                                # [B, d, C]
    return w.numpy(), b


def predict_classes(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    """argmax of ``x W + b``: ``x [n, d]`` with ``W [d, C]`` -> ``[n]``, or with ``W [B, d, C]``,
    ``b [B, C]`` -> ``[B, n]`` (ties to the lower class id)."""
    with single_thread():
        xt, wt, bt = (torch.from_numpy(np.ascontiguousarray(a)) for a in (x, w, b))
        if wt.dim() == 3:
            return (torch.matmul(xt, wt) + bt[:, None, :]).argmax(dim=2).numpy()
        return (xt @ wt + bt).argmax(dim=1).numpy()


def accuracy_along(pred: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Fraction correct along the last axis (``pred [..., n]``, ``y [n]``)."""
    return (pred == y).mean(axis=-1)


__all__ = ["DEFAULT_L2_GRID", "L2_CEILING", "L2_FLOOR", "accuracy_along", "fit_logistic", "predict_classes", "search_l2",
           "standardize"]
