"""The full linear probe's fit (``fit_logistic`` on one problem, ``x [n, d]``: ``acc`` / ``mf1`` of ``embedding_eval``,
the missing-view probes) reaches the optimum of its objective.

The regression: the one-problem fit was torch's L-BFGS with absolute tolerances (max-abs gradient 1e-7, change
1e-12), never checked; it ended at max|grad| 2e-8 to 1e-5 of its value at 0, and its val predictions differed from
the exact optimum's at l2 = 1e-8 (1/34 to 57/891 of them on real features) and at l2 = 1e4 -- both reached by the L2
search's extensions. It is now the few-shot probe's damped Newton-CG on a batch of one, with the same stopping rule
(:data:`fusebench.probes.logistic.BATCHED_GRAD_RTOL`) and :class:`~fusebench.probes.logistic.NotConvergedError`.

Checked against values worked out independently (tests/test_fewshot_logistic_convergence.py: the gradient written
out in numpy, a dense Newton solver in numpy in another parametrisation) at l2 in {1e-8, 1e-4, 1, 1e4}, with fewer
features than samples and more."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fusebench.probes import logistic as LR
from fusebench.probes.logistic import fit_logistic, predict_classes
from test_fewshot_logistic_convergence import L2S, _gradient_size, _newton_reference, assert_predictions_stable

pytestmark = pytest.mark.usefixtures("one_torch_thread")

#: (classes, samples, features): d < n, d > n (the row-space form), and an unbalanced 3-class problem
SHAPES = {"narrow": (4, 60, 8), "wide": (4, 24, 40), "unbalanced": (3, 45, 12)}


def _data(classes: int, n: int, d: int, seed: int, sep: float = 1.0, queries: int = 300, counts=None):
    """One problem: ``n`` samples (every class present; ``counts`` per class if given) around class means ``sep``
    apart per coordinate, z-scored with their own statistics like the probe's, and ``queries`` samples from the same
    classes z-scored alike."""
    rng = np.random.default_rng(seed)
    mu = rng.standard_normal((classes, d)) * sep
    if counts is None:
        y = np.r_[np.arange(classes), rng.integers(classes, size=n - classes)]
    else:
        y = rng.permutation(np.repeat(np.arange(classes), counts))
    yq = rng.integers(classes, size=queries)
    x = mu[y] + rng.standard_normal((n, d))
    q = mu[yq] + rng.standard_normal((queries, d))
    x, q = LR.standardize(x, x, q)
    return x, y, q


def _shape_data(shape: str, seed: int):
    c, n, d = SHAPES[shape]
    counts = (5, 10, 30) if shape == "unbalanced" else None
    return (c,) + tuple(_data(c, n, d, seed, counts=counts))


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("l2", L2S)
def test_the_single_fit_equals_an_independent_newton_solver(shape: str, l2: float) -> None:
    """Shapes ``W [d, C]``, ``b [C]``; the gradient (numpy) within the stopping rule; W equal to the reference's
    within what the two gradients allow (strong convexity: |theta - theta*| <= |grad| / lambda_min(H)); the same
    objective value and centred bias; the same predicted class for every training sample and query, with the
    centred logits closer than half the reference's smallest top-2 gap (not by luck)."""
    c, x, y, q = _shape_data(shape, seed=0)
    w, b = fit_logistic(x, y, c, l2)
    assert w.shape == (x.shape[1], c) and b.shape == (c,) and w.dtype == b.dtype == np.float64
    at0 = max(1.0, _gradient_size(x[None], y[None], l2, np.zeros((1, x.shape[1], c)), np.zeros((1, c)))[0])
    assert _gradient_size(x[None], y[None], l2, w[None], b[None])[0] <= 2 * LR.BATCHED_GRAD_RTOL * at0
    wr, br, fr, gr, lam_min, parts = _newton_reference(x, y, c, l2)
    assert gr <= 1e-12 and lam_min > 0                         # the reference is at its optimum
    fn, gn, _ = parts(w, b)
    bound = 2 * (np.linalg.norm(gn) + gr * np.sqrt(gn.size)) / lam_min
    assert np.abs(w - wr).max() <= bound + 1e-14, (np.abs(w - wr).max(), bound)
    assert np.abs((b - b.mean()) - (br - br.mean())).max() <= bound + 1e-14
    assert abs(fn - fr) <= 1e-14 * max(1.0, fr)
    pts = np.vstack([x, q])
    ref, new = pts @ wr + br, pts @ w + b
    gap = np.diff(np.sort(ref, axis=1)[:, -2:], axis=1).min()
    drift = np.abs((new - new.mean(1, keepdims=True)) - (ref - ref.mean(1, keepdims=True))).max()
    assert drift < gap / 2, (drift, gap)
    assert np.array_equal(predict_classes(pts, w, b), ref.argmax(1))


@pytest.mark.parametrize("l2", L2S)
@pytest.mark.parametrize("n,d", [(100, 8), (30, 60)])
def test_predictions_do_not_move_under_a_1e_12_perturbation_or_float32_rounding(l2: float, n: int, d: int) -> None:
    """5 classes, 1000 queries: the same predicted classes for the features, the features times (1 + 1e-12 noise),
    and the features and queries rounded to float32 (fitted in float64)."""
    x, y, q = _data(5, n, d, seed=2, sep=0.7, queries=1000)
    assert_predictions_stable(x, y, q, 5, l2)


@pytest.mark.parametrize("l2", [1e-8, 1e4])
def test_a_full_probe_size_meets_the_stopping_rule(l2: float) -> None:
    """n 400, d 64, 10 classes (a full probe's size) at the two ends of the L2 search: the numpy gradient within the
    stopping rule -- the old L-BFGS ended at up to 1e-5 of the gradient at 0."""
    x, y, _ = _data(10, 400, 64, seed=6, sep=0.5, queries=1)
    w, b = fit_logistic(x, y, 10, l2)
    at0 = max(1.0, _gradient_size(x[None], y[None], l2, np.zeros((1, 64, 10)), np.zeros((1, 10)))[0])
    assert _gradient_size(x[None], y[None], l2, w[None], b[None])[0] <= 2 * LR.BATCHED_GRAD_RTOL * at0


def test_the_single_fit_is_the_same_bits_whatever_the_thread_count() -> None:
    c, x, y, _ = _shape_data("wide", seed=4)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = fit_logistic(x, y, c, 1e-3)
        torch.set_num_threads(2)
        two = fit_logistic(x, y, c, 1e-3)
    finally:
        torch.set_num_threads(before)
    assert all(np.array_equal(a, b) for a, b in zip(one, two))


def test_the_single_fit_is_a_batch_of_one() -> None:
    c, x, y, _ = _shape_data("narrow", seed=5)
    w, b = fit_logistic(x, y, c, 1e-2)
    wb, bb = fit_logistic(x[None], y[None], c, 1e-2)
    assert np.array_equal(w, wb[0]) and np.array_equal(b, bb[0])


def test_an_unconverged_single_fit_raises_and_bad_inputs_are_refused() -> None:
    c, x, y, _ = _shape_data("wide", seed=5)
    with pytest.raises(LR.NotConvergedError, match=r"problem\(s\) \[0\].*1 Newton steps"):
        fit_logistic(x, y, c, 1e-8, max_iter=1)
    with pytest.raises(ValueError, match="l2 finite and > 0"):
        fit_logistic(x, y, c, 0.0)                 # d > n: separable, no minimiser
    with pytest.raises(ValueError, match="one l2"):
        fit_logistic(x, y, c, np.array([1e-2, 1.0]))
    with pytest.raises(ValueError, match="NaN or Inf"):
        fit_logistic(np.where(np.arange(x.shape[1]) == 3, np.nan, x), y, c, 1.0)
    with pytest.raises(ValueError, match="labels must lie"):
        fit_logistic(x, np.where(y == 0, c, y), c, 1.0)


def test_the_reused_reduction_changes_no_bit_and_follows_the_bytes() -> None:
    """The L2 search refits one x at every value: the reduction of the last x is reused (identical bytes only). A fit
    with it reused equals one with it recomputed, bit for bit, and an x edited in place is reduced anew."""
    c, x, y, _ = _shape_data("wide", seed=7)
    LR._REDUCTION_CACHE.clear()
    fresh = fit_logistic(x, y, c, 1e-2)
    fit_logistic(x, y, c, 1.0)                                  # same x: reused
    again = fit_logistic(x, y, c, 1e-2)
    assert all(np.array_equal(a, b) for a, b in zip(fresh, again))
    x[0, 0] += 1.0                                              # edited in place: another problem
    edited = fit_logistic(x, y, c, 1e-2)
    LR._REDUCTION_CACHE.clear()
    assert all(np.array_equal(a, b) for a, b in zip(edited, fit_logistic(x, y, c, 1e-2)))
    assert not np.array_equal(edited[0], fresh[0])


def test_a_saturated_softmax_on_real_leaves_features_converges(fixtures_dir) -> None:
    """The full probe of ``mv-leaves100``'s ``raw`` row (real 100Leaves.mat: 3 views of 64 features, 100 classes),
    960 training samples (a seed-4 draw), z-scored, l2 = 1e-3. From its first Newton steps the softmax saturates: a
    class is predicted nowhere (its probability ~1e-73 on every sample), the curvature along its bias (unpenalised)
    rounds to ~1e-42, the Jacobi-preconditioned CG's first d^T H d rounds to a negative number and CG gives no
    direction; the fit used to repeat that step 300 times and raise NotConvergedError (cells of several seeds of the
    rerun did). The fit meets its stopping rule, checked with the gradient written out in numpy. Whether CG's first
    curvature rounds negative here depends on the float reduction order; that the damped step is taken where the
    Newton step gives no direction or no decrease is the test below's, forced without rounding."""
    import scipy.io

    m = scipy.io.loadmat(fixtures_dir / "multiview" / "100Leaves.mat")
    x = np.concatenate([np.asarray(v, dtype=np.float64) for v in m["X"].ravel()], 1)     # [1600, 192]
    y = np.asarray(m["Y"]).ravel().astype(np.int64)
    y -= y.min()
    idx = np.random.default_rng(4).permutation(len(y))[:960]
    xs, ys = LR.standardize(x[idx], x[idx])[0], y[idx]
    w, b = fit_logistic(xs, ys, 100, 1e-3)  # raised NotConvergedError before the damped step (this machine kind)
    at0 = max(1.0, _gradient_size(xs[None], ys[None], 1e-3, np.zeros((1, 192, 100)), np.zeros((1, 100)))[0])
    assert _gradient_size(xs[None], ys[None], 1e-3, w[None], b[None])[0] <= 2 * LR.BATCHED_GRAD_RTOL * at0


@pytest.mark.parametrize("first", ["no direction", "no decrease"])
def test_a_newton_step_without_direction_or_decrease_is_replaced_by_the_damped_step(
        first: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first Newton step's CG is made to return what rounding returned on Leaves-100 (zero: no direction), or a
    direction 1e60 times too long (no step of the 60 halvings decreases f). The next solve must be the damped one
    (l2 on the bias row, whose Newton penalty is 0), and the fit must still meet its stopping rule (the numpy
    gradient); the fit before it repeated the empty step, or stalled, and raised NotConvergedError."""
    c, x, y, _ = _shape_data("narrow", seed=3)
    l2 = 1e-2
    bias_penalty = []
    real_cg = LR._conjugate_gradient

    def cg(g, prob, lam, rhs, tol, max_steps):
        bias_penalty.append(lam[:, -1].tolist())
        out = real_cg(g, prob, lam, rhs, tol, max_steps)
        if len(bias_penalty) == 1:
            return torch.zeros_like(out) if first == "no direction" else out * 1e60
        return out

    monkeypatch.setattr(LR, "_conjugate_gradient", cg)
    w, b = fit_logistic(x, y, c, l2)
    assert bias_penalty[0] == [0.0] and bias_penalty[1] == [l2], bias_penalty[:2]
    assert all(p == [0.0] for p in bias_penalty[2:])  # then Newton steps again
    at0 = max(1.0, _gradient_size(x[None], y[None], l2, np.zeros((1, x.shape[1], c)), np.zeros((1, c)))[0])
    assert _gradient_size(x[None], y[None], l2, w[None], b[None])[0] <= 2 * LR.BATCHED_GRAD_RTOL * at0
