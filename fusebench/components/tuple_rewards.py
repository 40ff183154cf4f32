"""TupleInfoNCE's rewards and the pure pieces of its sample optimisation (Liu et al. 2021, ICCV, Sec. 4.3,
Eqs. 3-8): the policy samples turned into alpha and beta, the REINFORCE update of Eq. 7, the rewards of Eqs. 5 and 8,
zeta*(beta), and the cross-modal discrimination accuracies A^k(g, zeta) of Eqs. 3-4 on the Pretrainer's fused
encoder. Algorithm 1, which uses them once per epoch, is :class:`fusebench.components.tuple_optim.TupleSampleOptimiser`
(whose docstring states each piece's role and its conventions: the relaxation of alpha, the clamp of beta, the
common random numbers of the accuracies, the ties of zeta*).

Shape:
    mu_alpha, x_alpha: [K + 1];  mu_beta, x_beta: [K];  samples: [B, D], rewards: [B] -> new mu [D];
    val embeddings e: [K, M, F] -> projections [K, M, P] -> fused [M, P];  accuracies: [G, K].
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

__all__ = ["relaxed_to_alpha", "clamp_beta", "reinforce_update", "alpha_reward", "beta_reward", "best_zeta",
           "fuse_partial", "discrimination_accuracies"]


# ---------------------------------------------------------------------------------------------
# pure pieces
# ---------------------------------------------------------------------------------------------
def relaxed_to_alpha(x: Sequence[float] | Tensor) -> list[float]:
    """A relaxed policy sample [K + 1] -> mixture ratios: clamp at 0, renormalise to sum 1."""
    t = torch.as_tensor(x, dtype=torch.float64).flatten().clamp_min(0.0)
    if not torch.isfinite(t).all():
        raise ValueError(f"tuple sample optimisation: alpha sample must be finite, got {t.tolist()}")
    s = float(t.sum())
    if s <= 0.0:  # every ratio clamped away: fall back to the uniform mixture
        return [1.0 / t.numel()] * t.numel()
    return (t / s).tolist()


def clamp_beta(x: Sequence[float] | Tensor, beta_max: float) -> list[float]:
    """A beta policy sample [K] -> augmentation strengths in [0, beta_max]."""
    t = torch.as_tensor(x, dtype=torch.float64).flatten()
    if not torch.isfinite(t).all():
        raise ValueError(f"tuple sample optimisation: beta sample must be finite, got {t.tolist()}")
    return t.clamp(0.0, float(beta_max)).tolist()


def reinforce_update(mu: Tensor, samples: Tensor, rewards: Tensor, sigma: float, lr: float, baseline: bool = True) -> Tensor:
    """Eq. 7: mu + lr * mean_b (R_b - b) * grad_mu log N(x_b; mu, sigma^2 I).

    mu: [D]; samples: [B, D]; rewards: [B]; sigma: the policy std; b = mean_b R_b when ``baseline``
    else 0. Returns the new mean [D] (float64).
    """
    mu = torch.as_tensor(mu, dtype=torch.float64)
    x = torch.as_tensor(samples, dtype=torch.float64)
    r = torch.as_tensor(rewards, dtype=torch.float64)
    if mu.dim() != 1 or x.dim() != 2 or x.shape[1] != mu.shape[0] or r.shape != (x.shape[0],):
        raise ValueError(f"reinforce_update: expected mu [D], samples [B, D], rewards [B]; got "
                         f"{tuple(mu.shape)}, {tuple(x.shape)}, {tuple(r.shape)}")
    if not (sigma > 0 and math.isfinite(sigma)):
        raise ValueError(f"reinforce_update: sigma must be a finite std > 0, got {sigma!r}")
    if not torch.isfinite(r).all():
        raise ValueError(f"reinforce_update: rewards must be finite, got {r.tolist()}")
    adv = r - r.mean() if baseline else r  # [B]
    grad_logp = (x - mu) / sigma**2  # [B, D], d/dmu log N(x; mu, sigma^2 I)
    return mu + lr * torch.einsum("b,bd->d", adv, grad_logp) / x.shape[0]


def alpha_reward(accuracies: Sequence[float] | Tensor) -> float:
    """Eq. 5: R(alpha) = sum_k A^k."""
    return float(torch.as_tensor(accuracies, dtype=torch.float64).sum())


def beta_reward(accuracies: Sequence[float] | Tensor, beta: Sequence[float] | Tensor, zeta_star: Sequence[float] | Tensor,
                beta_max: float, lam: float) -> float:
    """Eq. 8: 1 - sum_k A^k(g, beta) / K - lam ||beta - zeta*||^2 / ||beta_max||^2.

    accuracies: [K], A^k measured with zeta = beta; beta, zeta_star: [K]; beta_max: the scalar upper
    bound of every modality's strength (so ||beta_max||^2 = K beta_max^2).
    """
    a = torch.as_tensor(accuracies, dtype=torch.float64).flatten()
    b = torch.as_tensor(beta, dtype=torch.float64).flatten()
    z = torch.as_tensor(zeta_star, dtype=torch.float64).flatten()
    k = a.numel()
    if b.numel() != k or z.numel() != k:
        raise ValueError(f"beta_reward: accuracies, beta and zeta_star must all have K = {k} entries")
    if not beta_max > 0:
        raise ValueError(f"beta_reward: beta_max must be > 0, got {beta_max!r}")
    return float(1.0 - a.sum() / k - lam * ((b - z) ** 2).sum() / (k * beta_max**2))


def best_zeta(acc: Tensor, zetas: Sequence[float] | Tensor, beta: Sequence[float] | Tensor | None = None) -> list[float]:
    """zeta*_k = argmax of A^k (acc [G, K]) over the strengths ``zetas`` ([G], or [G, K]: row g gives modality k
    zetas[g, k]); ties: the one nearest ``beta_k`` ([K]), then the smaller (without beta: the smallest). With beta
    among the rows, zeta* = beta unless another strength scores strictly higher (module docstring)."""
    a, z = torch.as_tensor(acc, dtype=torch.float64), torch.as_tensor(zetas, dtype=torch.float64)
    z = z.view(-1, 1).expand_as(a) if z.dim() == 1 and a.dim() == 2 and len(z) == len(a) else z
    if a.dim() != 2 or z.shape != a.shape:
        raise ValueError(f"best_zeta: acc must be [G, K], zetas [G] or [G, K]; got {tuple(a.shape)}, {tuple(z.shape)}")
    b = None if beta is None else torch.as_tensor(beta, dtype=torch.float64).flatten()
    if b is not None and b.numel() != a.shape[1]:
        raise ValueError(f"best_zeta: beta must have K = {a.shape[1]} entries, got {b.numel()}")
    tied = [[float(z[i, k]) for i in torch.nonzero(a[:, k] == a[:, k].max()).flatten().tolist()] for k in range(a.shape[1])]
    return [min(t, key=lambda v: (abs(v - float(b[k])), v)) if b is not None else min(t) for k, t in enumerate(tied)]


# ---------------------------------------------------------------------------------------------
# cross-modal discrimination on the Pretrainer's fused encoder
# ---------------------------------------------------------------------------------------------
def fuse_partial(pre: nn.Module, z: Tensor, keep: Sequence[bool]) -> Tensor:
    """Fused embedding with the modalities not in ``keep`` replaced by zero placeholders.

    z: [K, M, P] per-modality projections; keep: K booleans -> [M, P].
    """
    slots = [z[l] if keep[l] else torch.zeros_like(z[l]) for l in range(z.shape[0])]
    return pre.fusion(torch.cat(slots, dim=-1))


@torch.no_grad()
def discrimination_accuracies(pre: nn.Module, batch: dict[str, Any], zetas: Tensor, seed: int, dropout: float = 0.1) -> Tensor:
    """A^k(g, zeta) (Eqs. 3-4) for each row of ``zetas`` [G, K] -> [G, K].

    The augmentation of modality k is ``(e_k + zeta_k * eps_k) * mask_k`` (the training augmentation:
    Gaussian noise, then dropout with probability ``dropout``); eps [K, M, F] and the dropout mask are
    drawn once from a generator seeded with ``seed`` and reused for every row (common random numbers).
    The G x K accuracies stay on the device until one copy at the end (with the test that every embedding
    was finite): no wait for the device per accuracy.
    """
    from fusebench.objectives.tuple_infonce import discrimination_hits

    was_training = pre.training
    pre.eval()
    try:
        emb = pre.model.embed(batch).float()  # [K, M, F]
        k = emb.shape[0]
        if zetas.dim() != 2 or zetas.shape[1] != k:
            raise ValueError(f"discrimination_accuracies: zetas must be [G, K={k}], got {tuple(zetas.shape)}")
        if emb.shape[1] < 2:
            raise ValueError("cross_modal_discrimination_accuracy: needs M >= 2 validation tuples")
        gen = torch.Generator().manual_seed(int(seed))
        eps = torch.randn(emb.shape, generator=gen, dtype=emb.dtype).to(emb.device)  # [K, M, F]
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"discrimination_accuracies: dropout must be in [0, 1), got {dropout!r}")
        keep_mask = (torch.rand(emb.shape, generator=gen) >= dropout).to(emb.device, emb.dtype) / (1.0 - dropout)
        z = pre.project(emb, pre.proj).float()  # [K, M, P], unaugmented
        rests = [fuse_partial(pre, z, [l != j for l in range(k)]) for j in range(k)]  # g(v_bar^j): [M, P]
        zeta = zetas.to(emb)  # [G, K]: one copy of the grid, the values zetas[gi].to(emb) gives row by row
        hits, finite = [], [torch.isfinite(r).all() for r in rests]
        for gi in range(zetas.shape[0]):
            aug = (emb + zeta[gi].view(k, 1, 1) * eps) * keep_mask  # [K, M, F]
            za = pre.project(aug, pre.proj).float()
            for j in range(k):
                single = fuse_partial(pre, za, [l == j for l in range(k)])  # g(v'^j): [M, P]
                hits.append(discrimination_hits(single, rests[j]))
                finite.append(torch.isfinite(single).all())
        if not hits:
            return torch.zeros(zetas.shape, dtype=torch.float64)
        values = torch.cat([torch.stack(hits), torch.stack(finite).all().double().view(1)]).tolist()  # the one copy
        if values[-1] != 1.0:
            raise ValueError("cross_modal_discrimination_accuracy: embeddings contain NaN or Inf")
        return torch.tensor(values[:-1], dtype=torch.float64).view(zetas.shape)  # on the host, as before
    finally:
        pre.train(was_training)
