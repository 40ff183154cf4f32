"""TupleInfoNCE's pretraining method (Liu et al. 2021, ICCV, "Contrastive Multimodal Fusion with
TupleInfoNCE", arXiv:2107.02575, Secs. 3-4): tuple fusion, augmentation, k-disturbed negatives and
the sample optimisation (Algorithm 1, :mod:`fusebench.components.tuple_optim`), with its typed options
(:class:`TupleInfoNCEOptions`, spec key ``pretrain.methods.tuple_infonce``).

The loss of a batch: per-modality projections are concatenated and fused by an MLP into one tuple
embedding. Two augmented copies of the per-modality embeddings (Gaussian noise of std beta_l on
modality l, then dropout with probability ``dropout``) give anchor and positive; the negatives are
the other samples' tuples plus, when ``disturbed``, the k-disturbed tuples of every modality
(modality l swapped by a derangement), weighted by ``alpha`` (paper Eq. 2). The Pretrainer carries
``tuple_alpha`` [K + 1] and ``tuple_beta`` [K] (per-modality noise std, initially
``embedding_noise``) so that the sample optimisation can set them.

Shapes: embeddings e [K, N, F] -> projections [K, N, P] -> fused tuples [N, P]; negatives
[N, (N - 1) + K N, P].
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from fusebench.encoders.heads import ProjectionHead
from fusebench.spec.methods import PretrainMethod, register


@dataclass
class TupleInfoNCEOptions:
    """``pretrain.methods.tuple_infonce``; Algorithm 1's settings are described in
    docs/tuple-sample-optimisation.md."""

    disturbed: bool = True  # k-disturbed negatives (else plain tuple InfoNCE)
    alpha: list[float] | None = None  # weights of the K + 1 negative types (None = uniform)
    embedding_noise: float = 0.1  # std of the Gaussian augmentation that makes two tuples (beta's start)
    dropout: float = 0.1  # dropout probability of the augmentation (training and the rewards' A^k)
    sample_optimisation: bool = False  # Algorithm 1 (REINFORCE over alpha and beta)
    candidates: int = 4  # B candidates per epoch
    candidate_steps: int = 8  # training steps per candidate (0 = a whole epoch)
    policy_lr: float = 0.01  # eta of Eq. 7
    policy_sigma: float = 0.05  # std of the alpha policy N(mu, sigma^2 I)
    beta_sigma: float = 0.05  # std of the beta policy
    beta_max: float = 1.0  # upper bound of every beta_k (Eq. 8's beta_max)
    beta_lambda: float = 1.0  # lambda of Eq. 8
    zeta_grid: int = 11  # grid points in [0, beta_max] for zeta*(beta)
    val_size: int = 256  # M held-out validation tuples for the rewards
    policy_baseline: bool = True  # subtract the mean reward in Eq. 7


#: the options read only by the sample optimisation (Algorithm 1, ``tuple_optim``): with ``sample_optimisation:
#: false`` one set off its default would be recorded and hashed and change nothing, so it is refused at load
SAMPLE_OPTIMISATION_OPTIONS: tuple[str, ...] = (
    "candidates", "candidate_steps", "policy_lr", "policy_sigma", "beta_sigma", "beta_max", "beta_lambda", "zeta_grid",
    "val_size", "policy_baseline")


@register
class TupleInfoNCEMethod(PretrainMethod):
    """Tuple fusion + augmentation + k-disturbed negatives (Eq. 2); Algorithm 1 as an epoch extension."""

    id: ClassVar[str] = "tuple_infonce"
    Options: ClassVar[type] = TupleInfoNCEOptions
    extensions: ClassVar[tuple[str, ...]] = ("fusebench.components.tuple_optim:TupleSampleOptimiser",)
    #: the fused tuples are built from every modality, present or not: the presence mask is not read
    honours_mask: ClassVar[bool] = False

    @classmethod
    def wanted(cls, objective: nn.Module, declared: bool, options: Any, cfg: Any) -> bool:
        undeclared_tuple = not hasattr(objective, "pretrain_methods") and getattr(objective, "input_kind", "") == "tuple"
        return declared or undeclared_tuple

    @classmethod
    def version_of(cls, options: Any) -> str:
        """"2" with ``sample_optimisation: true``, "1" without. Version 2 is Eq. 8's zeta*(beta) taken over beta itself
        and the grid, ties going to the strength nearest beta (it was the grid alone, ties to the smallest zeta): a
        change to the sample optimisation (``tuple_optim``), which a run without it never calls, so the records made
        without it (every committed ``tuple_infonce`` run) stay at version 1 and current. A change to what both
        compute (the fusion, augmentation, negatives of :meth:`loss`) raises both numbers."""
        return "2" if options.sample_optimisation else "1"

    @classmethod
    def check(cls, options: Any) -> list[str]:
        o, problems = options, []
        if not o.sample_optimisation:
            defaults = cls.Options()
            unread = [k for k in SAMPLE_OPTIMISATION_OPTIONS if getattr(o, k) != getattr(defaults, k)]
            if unread:
                problems.append(f"{', '.join(unread)} set with sample_optimisation: false: only the sample "
                                f"optimisation (Algorithm 1) reads {'it' if len(unread) == 1 else 'them'}; set "
                                f"sample_optimisation: true here, or leave {'it' if len(unread) == 1 else 'them'} out")
        if not 0.0 <= o.dropout < 1.0:
            problems.append(f"dropout must be in [0, 1), got {o.dropout!r}")
        # the mixture weights of Eq. 2: negative or all-zero weights were clamped to the uniform mixture by the sample
        # optimisation and refused only at the first training step without it
        if o.alpha is not None and (not all(math.isfinite(a) and a >= 0 for a in o.alpha) or sum(o.alpha) <= 0):
            problems.append(f"alpha must be finite weights >= 0, not all 0 (or null: uniform), got {o.alpha!r}")
        if not (math.isfinite(o.embedding_noise) and o.embedding_noise >= 0):  # a std: a negative one acted as its size
            problems.append(f"embedding_noise must be a std >= 0, got {o.embedding_noise!r}")
        elif o.sample_optimisation and o.embedding_noise > o.beta_max:  # beta's start, clamped to [0, beta_max]
            problems.append(f"embedding_noise ({o.embedding_noise!r}, beta's start) must be <= beta_max "
                            f"({o.beta_max!r}) with sample_optimisation: true")
        return problems

    def build(self, pre: nn.Module) -> None:
        o = self.options
        mods = list(pre.model.modalities)
        p, h = pre.cfg.projection_dim, pre.cfg.projection_hidden
        pre.fusion = ProjectionHead(p * len(mods), h, p)
        # Sec. 4.3's hyper-parameters; the sample optimisation (tuple_optim) overwrites them
        pre.tuple_alpha = list(o.alpha) if o.alpha else None  # [K + 1]
        pre.tuple_beta = [float(o.embedding_noise)] * len(mods)  # [K] noise std per modality

    def loss(self, pre, batch, emb, z, mask, gather) -> Tensor:
        from fusebench.objectives.tuple_infonce import assemble_negatives, disturbed_negatives, to_device_async

        emb = gather(emb)  # [k, N, F]: the global batch
        k = emb.shape[0]
        if len(pre.tuple_beta) != k:
            raise ValueError(f"tuple_infonce: needs k = {k} augmentation strengths beta, got {pre.tuple_beta}")
        # [k, 1, 1], made on the host and copied without blocking (a tensor built from a list on a GPU waits for it)
        beta = to_device_async(torch.tensor(pre.tuple_beta), emb.device).view(k, 1, 1)
        p_drop = float(self.options.dropout)

        def augment(e: Tensor) -> Tensor:  # e: [k, N, F]; modality l gets noise of std beta_l
            # noise and dropout mask drawn in float32 from the CPU generator, then moved: the same draws on
            # every device and under every autocast (on the CPU in float32 they equal randn_like / F.dropout)
            e = e + beta.to(e.dtype) * cpu_draw(torch.randn, e)
            if p_drop > 0.0 and pre.training:
                e = e * cpu_draw(lambda shape, dtype: torch.empty(shape, dtype=dtype).bernoulli_(1.0 - p_drop)
                                 .div_(1.0 - p_drop), e)
            return e

        # anchor and positive each augmented independently (SimCLR-style; the paper's Sec. 4.1 augments the anchor
        # to make the positive: their difference has std sqrt(2) beta here; docs/objectives-contrastive.md)
        anchor = fuse(pre, augment(emb))  # [N, P]
        positive = fuse(pre, augment(emb))
        disturbed: list[Tensor] = []
        alpha: list[float] = [1.0]
        if self.options.disturbed:
            alpha = list(pre.tuple_alpha or [1.0] * (k + 1))
            if len(alpha) != k + 1:
                raise ValueError(f"pretrain.methods.tuple_infonce.alpha needs k + 1 = {k + 1} weights "
                                 "(plain, then one per modality)")
            for l in range(k):  # k-disturbed tuples: modality l taken from another sample (a derangement)
                disturbed.append(fuse(pre, augment(torch.stack(disturbed_negatives(list(emb), l)))))
        negatives, weights = assemble_negatives(positive, disturbed, alpha)
        return pre.objective(anchor, positive, negatives, weights=weights)


def cpu_draw(draw, like: Tensor) -> Tensor:
    """``draw(shape, dtype=torch.float32)`` on the CPU's generator, moved to ``like``'s device and dtype:
    a random draw that does not depend on the device the run is on (CUDA has its own generator). The copy to
    a GPU goes through page-locked memory without blocking the host (the same values)."""
    from fusebench.objectives.tuple_infonce import to_device_async

    out = draw(like.shape, dtype=torch.float32)
    if out.device != like.device:
        out = to_device_async(out, like.device)
    return out.to(like.dtype) if out.dtype != like.dtype else out


def fuse(pre: nn.Module, emb: Tensor) -> Tensor:
    """Fused tuple embedding [N, P] of per-modality embeddings ``emb`` [K, N, F]."""
    z = pre.project(emb, pre.proj)  # [K, N, P]
    return pre.fusion(torch.cat(list(z), dim=-1))


__all__ = ["SAMPLE_OPTIMISATION_OPTIONS", "TupleInfoNCEMethod", "TupleInfoNCEOptions", "fuse"]
