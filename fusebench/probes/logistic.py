"""The L2-regularised multinomial logistic regression of the probes on frozen embeddings, and the validation
search of its L2 weight (probes layer).

* :func:`standardize`: every probe sees the embeddings **z-scored with the fitting split's per-column mean /
  std**, ``(x - mean) / std`` (population std; columns constant on the fitting split become 0); the probes
  fit it on the train split.
* :func:`fit_logistic`: multinomial logistic regression, weights ``W [d, C]`` and bias ``b [C]`` minimising

      mean_i CE(softmax(x_i W + b), y_i) + l2 / 2 * ||W||_F^2        (the bias not penalised)

  in float64 from zero on one thread, so the result depends on neither a seed nor the thread count.

  - **One problem** (``x [n, d]``: the full linear probe, the missing-view probes): solved to its optimum as a
    batch of one (``x[None]``, ``y[None]``) of the B-problem fit below -- the same reduction, damped Newton-CG,
    stopping rule (gradient size <= :data:`BATCHED_GRAD_RTOL` * max(1, its size at 0)) and
    :class:`NotConvergedError`; l2 must be > 0. It was, before (the full probe's ``acc`` / ``mf1`` of every
    ``embedding_eval`` record made with an earlier protocol version), full batch L-BFGS (``torch.optim.LBFGS``,
    strong-Wolfe line search, stop at max-abs gradient <= 1e-7 or a change <= 1e-12), its stop absolute and not
    checked. Measured (n 101-2700, d 32-10000, C 6-27; real and synthetic features): it ended at max|grad| 2e-8 to
    1e-5 of its value at 0; its val predictions were the optimum's at l2 1e-4 to 1, but not at 1e-8 (up to 6%
    differed) nor all at 1e4. Cost of a full-probe cell's L2 search, Newton-CG / that L-BFGS (CPU, one core,
    synthetic z-scored features; n x d x C 400x64x10, 2700x192x27, 700x6000x6, 960x48x100, 2000x10000x10): the
    default grid and its own extensions 0.5-1.1x; the grid extended down to 1e-8 (9 fits) 0.55-2.2x (worst: 100
    classes, 960 x 48, 2.4-3.0 s vs 1.3 s); up to 1e4 0.2-0.45x. With more features than samples the reduction
    (QR of x^T, an n x n eigh) is most of a fit (2000 x 10000: ~5 s of ~6.5 s), so the search's fits of one x
    reuse it (:func:`_reduction`, identical bytes only: the same bits).
  - **B problems** (``x [B, n, d]``: the few-shot probe's draws, :mod:`fusebench.probes.fewshot`), each solved to
    its own optimum, independently, by damped Newton-CG. Every problem is first reduced, exactly: with more
    features than samples to the row space of x (``x^T = Q R``, ``W = Q V``: every gradient ``x^T G + l2 W`` from
    W = 0 lies in the span of Q, an isometry; features ``R^T [n, n]``), then centred (``x W + b = (x - mean) W +
    b'``, ``b' = b + mean W``) and rotated to orthogonal columns (the eigenvectors of the centred Gram matrix), the
    bias a column of ones beside them. It runs in the subspace where every row of the parameters (a feature's
    weights over the classes; the bias) sums to 0: the softmax is blind to adding one vector to every class's
    column, the penalty is not, so the minimiser has ``W 1 = 0``; the bias is only defined up to a constant (here
    ``sum b = 0``); the Hessian is positive definite there. Each Newton step solves ``H delta = -grad`` by
    conjugate gradients (Hessian-vector products, diagonal preconditioner, forcing term Eisenstat-Walker choice 2
    bounded below by ``sqrt(|grad| / scale)``), then backtracks (Armijo, halving). Where that gives no direction or
    no step along it decreases f -- a saturated softmax: the unpenalised bias of a class predicted nowhere has a
    curvature that rounds to ~0, its Jacobi scale explodes and CG's first ``d^T H d`` rounds to a negative number,
    as on several seeds of ``mv-leaves100``'s input rows (100 classes, l2 = 1e-3) -- the step is the damped one
    (Levenberg-Marquardt: ``(H + l2 E) delta = -grad``, ``E`` the bias row), a descent direction whatever H rounds
    to; a fit that never meets either case takes the same steps, bit for bit, as without it. **Stopping rule**, per
    problem: its gradient size -- the largest 2-norm of a class column of dL/dW, or the largest |dL/db_c| -- at most
    :data:`BATCHED_GRAD_RTOL` (1e-12) times max(1, its size at 0). Measured: the rounding floor of that gradient
    is ~1e-16 of that scale; at 1e-10 a few predictions at l2 = 1e-8 still differed from a dense Newton solve's,
    at 1e-12 none. A problem not there within ``max_iter`` Newton steps, or whose line search finds no decrease
    along the damped step either, raises :class:`NotConvergedError`: the fit never returns an unconverged problem.
    l2 must be > 0 (at 0 a separable draw, e.g. any 1-shot draw, has no minimiser).

  **Version 1 of the few-shot metrics** (``fs<s>_acc``, ``fs<s>_best_acc``; every board committed before
  version 2) fitted the B problems jointly by L-BFGS on the **sum** of their objectives with the absolute
  tolerances above and never checked where it stopped: it ended far from the optimum at large l2 (the unpenalised
  bias, of curvature ~1/C against l2 for W: max|grad| 1.9e-5 on a 1-shot batch at l2 = 1e4) and at small l2 (an
  objective ~1e-7 passes the gradient test early), and its predictions moved under a 1e-12 perturbation of the
  features (float32 vs float64 copies of one run's features: 1-shot 17.6% vs 33.4%; the optimum: 17.3-17.5% at
  every l2 from 1 to 1e-8).
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

import hashlib
from typing import Any, Sequence

import numpy as np
import torch

from fusebench.components.reference_features import zscore_stats
from fusebench.runtime.utils import single_thread

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
    """Multinomial logistic regression (mean CE + l2/2 ||W||_F^2, bias free) in float64 from zero, on one thread
    (module doc), solved to its optimum by damped Newton-CG, stopped when its gradient size is <=
    :data:`BATCHED_GRAD_RTOL` * max(1, its size at 0); at most ``max_iter`` Newton steps, else
    :class:`NotConvergedError`. ``W 1 = 0`` and ``sum b = 0``; l2 > 0.

    ``x [n, d]``, ``y [n]``, ``l2`` a number -> ``(W [d, C], b [C])``: one problem (a batch of one of the form below).

    Batched form: ``x [B, n, d]``, ``y [B, n]``, ``l2`` a number or ``[B]`` (every value > 0) -> ``(W [B, d, C],
    b [B, C])``: B independent problems (each its own mean CE and its own l2), each solved to its own optimum.
    """
    if np.ndim(x) == 3:
        return _fit_logistic_batched(x, y, num_classes, l2, max_iter)
    if np.ndim(x) != 2 or np.ndim(y) != 1:
        raise ValueError(f"fit_logistic: x must be [n, d] with y [n], or x [B, n, d] with y [B, n]; got x "
                         f"{np.shape(x)}, y {np.shape(y)}")
    if np.ndim(l2) != 0:
        raise ValueError(f"fit_logistic: one problem takes one l2, got shape {np.shape(l2)}")
    w, b = _fit_logistic_batched(np.asarray(x)[None], np.asarray(y)[None], num_classes, l2, max_iter)
    return w[0], b[0]


class NotConvergedError(RuntimeError):
    """The fit (:func:`fit_logistic`, one problem or a batch) left a problem short of its stopping rule."""


#: the fit's stopping rule (one problem or a batch): every problem's gradient size (the largest 2-norm of a class
#: column of dL/dW, or the largest |dL/db_c|) <= BATCHED_GRAD_RTOL * max(1, its gradient size at W = 0, b = 0)
BATCHED_GRAD_RTOL = 1e-12
_EPS = float(np.finfo(np.float64).eps)


#: the last reduction of :func:`_reduction`, keyed by its x's shape and digest: the L2 search fits the same x at every
#: value it searches, and with more features than samples the reduction (QR of x^T, O(d n^2), and an n x n eigh) is
#: most of a fit (n 2000, d 10000: ~6 s of ~7 s on one core). Reused only for identical bytes: the same bits as
#: recomputing it.
_REDUCTION_CACHE: dict[str, Any] = {}


def _reduction(xt: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The batched fit's exact reparametrisation of ``x [B, n, d]`` (float64, contiguous; module doc): ``q [B, d, n]``
    (None when d <= n) with ``W = Q V``, the features' mean ``[B, 1, k]``, the rotation ``[B, k, k]``, and the
    centred, rotated features beside a column of ones ``g [B, n, k + 1]``. Called on one thread."""
    arr = xt.numpy()
    key = f"{arr.shape}:{hashlib.blake2b(memoryview(arr).cast('B'), digest_size=32).hexdigest()}"
    hit = _REDUCTION_CACHE.get(key)
    if hit is not None:
        return hit
    nb, n, d = xt.shape
    if d > n:   # W = Q V in the row space of x: x^T = Q R, features x Q = R^T [n, n]
        q, r = torch.linalg.qr(xt.transpose(1, 2), mode="reduced")      # [B, d, n], [B, n, n]
        feats = r.transpose(1, 2)
    else:
        q, feats = None, xt
    mean = feats.mean(1, keepdim=True)                                   # [B, 1, k]
    centred = feats - mean
    _, rot = torch.linalg.eigh(centred.transpose(1, 2) @ centred)        # [B, k, k] orthogonal
    g = torch.cat([centred @ rot, torch.ones(nb, n, 1, dtype=torch.float64)], 2)        # [B, n, k + 1]
    out = (q, mean, rot, g)
    _REDUCTION_CACHE.clear()
    _REDUCTION_CACHE[key] = out
    return out


def _fit_logistic_batched(x: np.ndarray, y: np.ndarray, num_classes: int, l2: Any, max_iter: int
                          ) -> tuple[np.ndarray, np.ndarray]:
    """The batched fit (module doc): reduce every problem to its centred, rotated row-space features, run the
    damped Newton-CG to the stopping rule, map back to ``W [B, d, C]``, ``b [B, C]`` (``W 1 = 0``, ``sum b = 0``)."""
    xt = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float64))       # [B, n, d]
    yt = torch.from_numpy(np.ascontiguousarray(y, dtype=np.int64))         # [B, n]
    nb, n, d = xt.shape
    if tuple(yt.shape) != (nb, n):
        raise ValueError(f"fit_logistic: batched y must be [B={nb}, n={n}], got {tuple(yt.shape)}")
    l2a = np.broadcast_to(np.asarray(l2, dtype=np.float64), (nb,)).copy()
    if not (np.isfinite(l2a).all() and (l2a > 0).all()):
        raise ValueError(f"fit_logistic: the fit needs every l2 finite and > 0, got {sorted(set(l2a.tolist()))} (at "
                         f"l2 = 0 a separable problem, e.g. every 1-shot draw or any with more features than samples, "
                         f"has no minimiser)")
    if not torch.isfinite(xt).all():
        raise ValueError("fit_logistic: x contains NaN or Inf")
    if yt.numel() and (int(yt.min()) < 0 or int(yt.max()) >= num_classes):
        raise ValueError(f"fit_logistic: labels must lie in [0, {num_classes}), got [{int(yt.min())}, {int(yt.max())}]")
    l2t = torch.from_numpy(l2a)
    with single_thread():
        q, mean, rot, g = _reduction(xt)
        k = g.shape[2] - 1
        lam = torch.cat([l2t[:, None].expand(nb, k), torch.zeros(nb, 1, dtype=torch.float64)], 1)  # [B, k + 1]
        onehot = torch.nn.functional.one_hot(yt, num_classes).to(torch.float64)                # [B, n, C]

        mean_rot = (mean @ rot).transpose(1, 2)                              # [B, k, 1]

        def grad_size(grad: torch.Tensor) -> torch.Tensor:
            # every problem's gradient size (module doc) from its reduced gradient [B, k + 1, C]: the gradient in W
            # is Q rot (dV' + mean_rot db), Q and rot isometries, so its class columns' 2-norms are those of
            # dV' + mean_rot db; db = db'
            gw = (grad[:, :k] + mean_rot * grad[:, k:]).norm(dim=1)          # [B, C]
            return torch.maximum(gw.amax(1), grad[:, k].abs().amax(1))

        theta = _newton_cg(g, onehot, lam, int(max_iter), l2a, grad_size)                       # [B, k + 1, C]
        v = rot @ theta[:, :k]                                               # [B, k, C]
        b = theta[:, k] - (mean @ v)[:, 0]                                   # logits x W + b = centred V + b'
        w = torch.bmm(q, v) if q is not None else v
    return w.numpy(), b.numpy()


def _class_centred(v: torch.Tensor) -> torch.Tensor:
    """``v [B, p, C]`` with every row's mean over the classes removed: the subspace ``Theta 1 = 0`` the fit runs in."""
    return v - v.mean(2, keepdim=True)


def _objective(g: torch.Tensor, onehot: torch.Tensor, lam: torch.Tensor, theta: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per problem: ``f = mean_i CE(g_i Theta, y_i) + 1/2 sum_j lam_j ||Theta_j||^2`` [B], its gradient projected on
    ``Theta 1 = 0`` [B, p, C] (the gradient lies there already: a row of ``P - Y`` sums to 0, and ``Theta 1 = 0``),
    and the softmax ``P`` [B, n, C]. CE as ``(max_c z - z_y) + log sum_c exp(z_c - max_c z)``: no cancellation of
    two large logits when the fit is confident."""
    n = g.shape[1]
    z = g @ theta
    top = z.amax(2, keepdim=True)
    e = torch.exp(z - top)
    tot = e.sum(2, keepdim=True)
    ce = ((top - z) * onehot).sum((1, 2)) + torch.log(tot).sum((1, 2))
    f = ce / n + 0.5 * (lam[:, :, None] * theta * theta).sum((1, 2))
    prob = e / tot
    grad = _class_centred(g.transpose(1, 2) @ (prob - onehot) / n + lam[:, :, None] * theta)
    return f, grad, prob


def _conjugate_gradient(g: torch.Tensor, prob: torch.Tensor, lam: torch.Tensor, rhs: torch.Tensor,
                        tol: torch.Tensor, max_steps: int) -> torch.Tensor:
    """Solve ``H delta = rhs`` per problem in the subspace ``Theta 1 = 0`` (where the Hessian ``H`` is positive
    definite) by conjugate gradients from 0 with the diagonal (Jacobi) preconditioner, until ``||residual||_2 <=
    tol`` or ``max_steps``; a problem that stops leaves the batch. ``H v = g^T S(v) / n + lam v`` with ``S(v)_i =
    p_i * u_i - p_i <p_i, u_i>``, ``u = g v``. -> ``delta``."""
    n = g.shape[1]
    out = torch.zeros_like(rhs)
    diag = (g * g).transpose(1, 2) @ (prob * (1.0 - prob)) / n + lam[:, :, None]          # [m, p, C]
    diag = torch.maximum(diag, 1e-13 * diag.amax((1, 2), keepdim=True))  # the bias row of a class with p = 0
    live = torch.arange(rhs.shape[0])
    x = torch.zeros_like(rhs)
    r = rhs.clone()
    z = _class_centred(r / diag)
    d = z
    rz = (r * z).sum((1, 2))
    for j in range(max_steps):
        u = g @ d
        s = prob * u
        hd = _class_centred(g.transpose(1, 2) @ (s - prob * s.sum(2, keepdim=True)) / n + lam[:, :, None] * d)
        dhd = (d * hd).sum((1, 2))
        pos = dhd > 0                                   # False only for d = 0 (rounding): nothing left to solve
        alpha = torch.where(pos, rz / torch.where(pos, dhd, torch.ones_like(dhd)), torch.zeros_like(dhd))
        x = x + alpha[:, None, None] * d
        r = r - alpha[:, None, None] * hd
        stop = ~pos | (r.flatten(1).norm(dim=1) <= tol) | (j == max_steps - 1)
        if bool(stop.any()):
            out[live[stop]] = x[stop]
            keep = ~stop
            if not bool(keep.any()):
                break
            live, x, r, d, rz, tol = live[keep], x[keep], r[keep], d[keep], rz[keep], tol[keep]
            g, prob, lam, diag = g[keep], prob[keep], lam[keep], diag[keep]
        z = _class_centred(r / diag)
        rzn = (r * z).sum((1, 2))
        d = z + (rzn / rz)[:, None, None] * d
        rz = rzn
    return out


def _line_search(g: torch.Tensor, onehot: torch.Tensor, lam: torch.Tensor, act: torch.Tensor, theta: torch.Tensor,
                 f: torch.Tensor, grad: torch.Tensor, prob: torch.Tensor, ga: torch.Tensor, delta: torch.Tensor
                 ) -> torch.Tensor:
    """Backtracking from ``theta[act]`` along ``delta`` (Armijo 1e-4, halving, at most 60 times): the decrease is
    tested with a rounding allowance of 64 eps (|f| + 1), so a step whose decrease f cannot resolve (at the optimum)
    is taken. Each problem's accepted step updates ``theta``, ``f``, ``grad``, ``prob`` in place. -> the positions
    (in ``act``) of the problems for which no step was accepted."""
    fa = f[act]
    slope = (ga * delta).sum((1, 2))                                    # < 0: CG from 0 descends
    step = torch.ones(act.numel(), dtype=torch.float64)
    todo = torch.arange(act.numel())
    start = theta[act]
    for _halving in range(60):
        sub = act[todo]
        trial = start[todo] + step[todo, None, None] * delta[todo]
        ft, gt, pt = _objective(g[sub], onehot[sub], lam[sub], trial)
        ok = ft <= fa[todo] + 1e-4 * step[todo] * slope[todo] + 64 * _EPS * (fa[todo].abs() + 1.0)
        if bool(ok.any()):
            took = sub[ok]
            theta[took], f[took], grad[took], prob[took] = trial[ok], ft[ok], gt[ok], pt[ok]
        todo = todo[~ok]
        if todo.numel() == 0:
            break
        step[todo] *= 0.5
    return todo


def _damped_direction(g: torch.Tensor, prob: torch.Tensor, lam: torch.Tensor, l2: torch.Tensor, idx: torch.Tensor,
                      rhs: torch.Tensor, tol: torch.Tensor, max_steps: int) -> torch.Tensor:
    """The step of problems ``idx`` where the Newton step gave none: ``(H + l2 E) delta = rhs`` by the same
    conjugate gradients, ``E`` the bias row (unpenalised, its curvature can round to 0 in a saturated softmax, where
    the objective is nearly linear along it): a Levenberg-Marquardt step, a descent direction whatever H rounds to,
    of size about |gradient| / l2 along the bias."""
    damped = lam[idx].clone()
    damped[:, -1] = l2[idx]
    return _conjugate_gradient(g[idx], prob[idx], damped, rhs, tol, max_steps)


def _newton_cg(g: torch.Tensor, onehot: torch.Tensor, lam: torch.Tensor, max_iter: int, l2: np.ndarray,
               grad_size: Any) -> torch.Tensor:
    """Damped Newton-CG from ``Theta = 0`` on every problem of the batch (module doc), each stopped on its own by the
    rule of :data:`BATCHED_GRAD_RTOL` on ``grad_size(reduced gradients [B, p, C]) -> [B]``, every problem's
    gradient size in its own ``W``, ``b`` (module doc); where the Newton step gives no direction or no decrease, the
    damped step (:func:`_damped_direction`). NotConvergedError names the problems that are not there after
    ``max_iter`` Newton steps or whose line search found no decrease along the damped step either."""
    nb, p, num_classes = g.shape[0], g.shape[2], onehot.shape[2]
    l2t = torch.as_tensor(np.asarray(l2, dtype=np.float64))
    theta = torch.zeros(nb, p, num_classes, dtype=torch.float64)
    f, grad, prob = _objective(g, onehot, lam, theta)
    gsize = grad_size(grad)
    scale = torch.clamp(gsize, min=1.0)
    tol = BATCHED_GRAD_RTOL * scale
    g_prev = torch.full((nb,), float("inf"), dtype=torch.float64)
    eta_prev = torch.full((nb,), 0.5, dtype=torch.float64)
    stalled = torch.zeros(nb, dtype=torch.bool)
    max_steps = min(p * (num_classes - 1), 1000)   # CG: exact in at most dim(Theta 1 = 0) steps (exact arithmetic)
    for _ in range(max(int(max_iter), 0)):
        act = torch.nonzero(~(gsize <= tol) & ~stalled).flatten()
        if act.numel() == 0:
            break
        ga = grad[act]
        gn = ga.flatten(1).norm(dim=1)                                     # 2-norm: W's and V's alike
        # forcing term: Eisenstat-Walker choice 2 (0.9 (|g_k| / |g_k-1|)^2, safeguarded), never below
        # sqrt(|g_k| / scale) (no over-solving far from the optimum), at most 0.5
        eta = 0.9 * (gn / g_prev[act]) ** 2
        safe = 0.9 * eta_prev[act] ** 2
        eta = torch.where(safe > 0.1, torch.maximum(eta, safe), eta)
        eta = torch.clamp(torch.maximum(eta, torch.sqrt(gn / scale[act])), max=0.5)
        g_prev[act], eta_prev[act] = gn, eta
        delta = _conjugate_gradient(g[act], prob[act], lam[act], -ga, eta * gn, max_steps)
        # no direction (CG's first curvature not positive: in a saturated softmax, the bias of a class predicted
        # nowhere has curvature ~1e-70, its Jacobi scale explodes and H d rounds to a negative d^T H d): the damped one
        none = delta.flatten(1).abs().amax(1) == 0
        if bool(none.any()):
            delta[none] = _damped_direction(g, prob, lam, l2t, act[none], -ga[none], (eta * gn)[none], max_steps)
        failed = _line_search(g, onehot, lam, act, theta, f, grad, prob, ga, delta)
        # a direction along which no step decreases f: once more along the damped one, else the problem stalls
        retry = failed[~none[failed]]
        if retry.numel():
            again = _damped_direction(g, prob, lam, l2t, act[retry], -ga[retry], (eta * gn)[retry], max_steps)
            failed = torch.cat([failed[none[failed]],
                                retry[_line_search(g, onehot, lam, act[retry], theta, f, grad, prob, ga[retry], again)]])
        stalled[act[failed]] = True
        gsize = grad_size(grad)
    bad = torch.nonzero(~(gsize <= tol)).flatten().tolist()
    if bad:
        raise NotConvergedError(
            "fit_logistic: the fit did not reach gradient size <= {:g} * max(1, gradient size at 0) on "
            "problem(s) {} (l2 {}; gradient size {}, at 0 {}; {})".format(
                BATCHED_GRAD_RTOL, bad, [float(l2[i]) for i in bad], [float(gsize[i]) for i in bad],
                [float(scale[i]) for i in bad],
                "the line search found no decrease" if bool(stalled[bad].any()) else f"{max_iter} Newton steps"))
    return theta


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


__all__ = ["BATCHED_GRAD_RTOL", "DEFAULT_L2_GRID", "L2_CEILING", "L2_FLOOR", "NotConvergedError", "accuracy_along",
           "fit_logistic", "predict_classes", "search_l2", "standardize"]
