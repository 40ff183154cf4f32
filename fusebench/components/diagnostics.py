"""Representation diagnostics of pretrained embeddings, recorded in every run.json.

* alignment (Wang & Isola 2020): mean over samples and view pairs l < m of ||z_l,i - z_m,i||^2 on
  L2-normalised embeddings (lower = views of a sample closer);
* uniformity (Wang & Isola 2020, t = 2): mean over views of log mean_{i != j} exp(-2 ||z_i - z_j||^2)
  (lower = more uniform on the sphere);
* effective rank (Roy & Vetterli 2007): exp of the entropy of the normalised singular values of the
  centred embedding matrix, averaged over views.

Precision: every diagnostic widens the views to float64 first (exact for bfloat16 / float16
embeddings) and reduces in float64; autocast never casts float64 tensors, so the result does not
depend on the caller's autocast.

Shape: views [k, n, d].
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor


def alignment(views: Tensor) -> float:
    z = F.normalize(views.double(), dim=-1)
    k = z.shape[0]
    pairs = [(l, m) for l in range(k) for m in range(l + 1, k)]
    if not pairs:
        return float("nan")
    return float(torch.stack([(z[l] - z[m]).pow(2).sum(-1).mean() for l, m in pairs]).mean())


def uniformity(views: Tensor, t: float = 2.0) -> float:
    z = F.normalize(views.double(), dim=-1)
    out = []
    for zl in z:
        n = zl.shape[0]
        d2 = torch.cdist(zl, zl).pow(2)
        off = d2[~torch.eye(n, dtype=torch.bool)]
        out.append(torch.logsumexp(-t * off, dim=0) - math.log(off.numel()))
    return float(torch.stack(out).mean())


def effective_rank(views: Tensor) -> float:
    out = []
    for zl in views.double():
        s = torch.linalg.svdvals(zl - zl.mean(0, keepdim=True))
        if float(s.sum()) == 0.0:
            out.append(torch.tensor(0.0, dtype=torch.float64))
            continue
        p = s / s.sum()
        p = p[p > 0]
        out.append(torch.exp(-(p * p.log()).sum()))
    return float(torch.stack(out).mean())


def representation_diagnostics(views: Tensor) -> dict[str, float]:
    """All three diagnostics; NaN where fewer than 2 samples make them undefined."""
    if views.shape[1] < 2:
        nan = float("nan")
        return {"alignment": alignment(views), "uniformity": nan, "effective_rank": nan}
    return {"alignment": alignment(views), "uniformity": uniformity(views), "effective_rank": effective_rank(views)}
