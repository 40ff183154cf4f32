"""The logistic probes made cheaper without changing a bit (issue #31, item 5): their L-BFGS is PyTorch's
(``optimizer_class``: no torch._dynamo import) and their closure drops the gradients itself instead of
``opt.zero_grad()``; the weights equal, ``==`` on every float, those of the plain ``torch.optim.LBFGS`` fit kept
here (the module as it was), single, batched over draws, and batched in the row space (d > n)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fusebench.probes import logistic as lr
from fusebench.runtime.utils import single_thread

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _ref_fit(x: np.ndarray, y: np.ndarray, num_classes: int, l2: float, max_iter: int = 300):
    xt, yt = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float64)), torch.from_numpy(y.astype(np.int64))
    w = torch.zeros(x.shape[1], num_classes, dtype=torch.float64, requires_grad=True)
    b = torch.zeros(num_classes, dtype=torch.float64, requires_grad=True)
    with single_thread(), torch.enable_grad():
        opt = torch.optim.LBFGS([w, b], lr=1.0, max_iter=max_iter, tolerance_grad=1e-7, tolerance_change=1e-12,
                                history_size=10, line_search_fn="strong_wolfe")

        def closure():
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(xt @ w + b, yt) + 0.5 * l2 * (w * w).sum()
            loss.backward()
            return loss

        opt.step(closure)
    return w.detach().numpy(), b.detach().numpy()


def _ref_fit_batched(x: np.ndarray, y: np.ndarray, num_classes: int, l2: float, max_iter: int = 300):
    xt, yt = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float64)), torch.from_numpy(y.astype(np.int64))
    nb, n, d = xt.shape
    l2t = torch.full((nb,), float(l2), dtype=torch.float64)
    w = torch.zeros(nb, d, num_classes, dtype=torch.float64, requires_grad=True)
    b = torch.zeros(nb, 1, num_classes, dtype=torch.float64, requires_grad=True)
    with single_thread(), torch.enable_grad():
        opt = torch.optim.LBFGS([w, b], lr=1.0, max_iter=max_iter, tolerance_grad=1e-7, tolerance_change=1e-12,
                                history_size=10, line_search_fn="strong_wolfe")

        def closure():
            opt.zero_grad()
            logits = torch.bmm(xt, w) + b
            ce = torch.nn.functional.cross_entropy(logits.reshape(nb * n, num_classes), yt.reshape(-1),
                                                   reduction="sum") / n
            loss = ce + 0.5 * (l2t * (w * w).sum(dim=(1, 2))).sum()
            loss.backward()
            return loss

        opt.step(closure)
    return w.detach().numpy(), b.detach().numpy()[:, 0]


def _data(n: int, d: int, c: int, seed: int, batch: int | None = None):
    rng = np.random.default_rng(seed)
    shape = (n, d) if batch is None else (batch, n, d)
    y = rng.integers(c, size=shape[:-1])
    x = rng.normal(size=shape) + 1.5 * np.eye(c, d)[y]
    return x, y


@pytest.mark.parametrize("l2", [1e-4, 1e-2, 1.0])
def test_single_fit_equals_plain_lbfgs(l2: float) -> None:
    x, y = _data(120, 16, 4, 0)
    w, b = lr.fit_logistic(x, y, 4, l2)
    rw, rb = _ref_fit(x, y, 4, l2)
    assert np.array_equal(w, rw) and np.array_equal(b, rb)


def test_batched_fit_equals_plain_lbfgs() -> None:
    x, y = _data(30, 8, 3, 1, batch=5)
    w, b = lr.fit_logistic(x, y, 3, 0.01)
    rw, rb = _ref_fit_batched(x, y, 3, 0.01)
    assert np.array_equal(w, rw) and np.array_equal(b, rb)


def test_wide_batched_fit_equals_plain_lbfgs_in_the_row_space() -> None:
    """d > n: the fit runs on R^T of x^T = QR (the module's row-space form); the plain fit on R^T, mapped back
    by Q, gives the same bits."""
    x, y = _data(6, 20, 3, 2, batch=4)
    w, b = lr.fit_logistic(x, y, 3, 0.1)
    with single_thread():
        q, r = torch.linalg.qr(torch.from_numpy(x).transpose(1, 2), mode="reduced")
    rv, rb = _ref_fit_batched(r.transpose(1, 2).numpy(), y, 3, 0.1)
    with single_thread():
        rw = torch.bmm(q, torch.from_numpy(rv)).numpy()
    assert np.array_equal(w, rw) and np.array_equal(b, rb)
