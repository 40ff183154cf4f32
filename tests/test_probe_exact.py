"""The logistic probes made cheaper without changing a bit (issue #31, item 5): their L-BFGS is PyTorch's
(``optimizer_class``: no torch._dynamo import) and their closure drops the gradients itself instead of
``opt.zero_grad()``; the weights equal, ``==`` on every float, those of the plain ``torch.optim.LBFGS`` fit kept
here (the module as it was). The single (full-probe) fit only: the batched few-shot fit is no longer L-BFGS (a damped
Newton-CG solved to its optimum, metric version 2), checked against an independent solver in
tests/test_fewshot_logistic_convergence.py."""

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
