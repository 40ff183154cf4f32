"""BYOL regression loss over k views: all view pairs (``byol_pwe``) or against the average of the rest
(``byol_avg``).

BYOL (Grill et al. 2020, "Bootstrap Your Own Latent: A New Approach to Self-Supervised Learning",
NeurIPS 2020, arXiv:2006.07733, https://arxiv.org/abs/2006.07733) as written in Piran et al. 2024
(M3G, ICML 2024, arXiv:2405.19532, https://arxiv.org/abs/2405.19532), Sec. 2.2, Eq. 2:

    L_BYOL(P, T) = 2 - 2/n sum_i <p_i, t_i>      (p_i, t_i unit vectors)

with P the student's predictions and T the teacher's projections. The module is called as
``module(predictions, targets)``; targets are detached (the teacher gets no gradient; its EMA update
belongs to the trainer).

- ``byol_pwe`` (M3G Sec. 2.2, Eq. 3, with the symmetric BYOL pair loss): the mean over ordered view pairs
  (l, m), l != m, of L_BYOL(P^l, T^m) = 2/(k(k-1)) sum_{l<m} [L_BYOL(P^l, T^m) + L_BYOL(P^m, T^l)] / 2.
  (BYOL's paper adds the two directions of a pair instead of averaging them: twice this value at k=2.)
- ``byol_avg`` (M3G Sec. 2.2, Eq. 4): 1/k sum_l L_BYOL(P^l, normalise(mean_{m != l} T^m)).
  At k = 2 both equal the symmetrised two-view BYOL loss.

Mask: not supported (refused).

Shape:
    predictions: [k, n, d], targets: [k, n, d] (both L2-normalised inside) -> scalar.

Example (the loss is 2 - 2 x mean cosine, so it lies in [0, 4] and is 0 when every prediction points
at every other view's target)::

    >>> import torch
    >>> from fusebench.objectives import build
    >>> _ = torch.manual_seed(0)
    >>> pred, target = torch.randn(3, 8, 16), torch.randn(3, 8, 16)
    >>> value = build("byol_pwe")(pred, target)
    >>> bool(0 <= value <= 4)
    True
    >>> same = torch.randn(8, 16).expand(3, 8, 16)      # all views identical
    >>> abs(float(build("byol_avg")(same, same))) < 1e-5
    True
"""

from __future__ import annotations

from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor

from fusebench.objectives import OBJECTIVES
from fusebench.objectives.base import MultiViewObjective
from fusebench.objectives.infonce import off_diagonal

__all__ = ["BYOLPairwise", "BYOLAverage"]


class _BYOLBase(MultiViewObjective):
    input_kind: ClassVar[str] = "pairs"
    #: the EMA teacher whose projections are the targets (options: pretrain.methods.ema_teacher)
    pretrain_methods: ClassVar[tuple[str, ...]] = ("ema_teacher",)

    def __init__(self) -> None:
        super().__init__()

    def forward(self, predictions: Tensor, targets: Tensor, mask: Tensor | None = None) -> Tensor:  # type: ignore[override]
        self.check_views(predictions, "predictions")
        self.check_views(targets, "targets")
        if predictions.shape != targets.shape:
            raise ValueError(
                f"{self.name}: predictions and targets must have the same shape [k, n, d], got "
                f"{tuple(predictions.shape)} and {tuple(targets.shape)}"
            )
        self.check_mask(mask, predictions)
        self.stats = {}
        p = self.normalise(predictions)
        t = self.normalise(targets.detach())
        return self.byol(p, t)  # in the compute dtype (objectives/base.py)

    def byol(self, p: Tensor, t: Tensor) -> Tensor:  # pragma: no cover - abstract
        raise NotImplementedError


@OBJECTIVES.register("byol_pwe")
class BYOLPairwise(_BYOLBase):
    """BYOL (M3G Eq. 2) averaged over ordered view pairs (prediction of l vs target of m, l != m)."""

    registry_id: ClassVar[str] = "byol_pwe"
    paper: ClassVar[str] = ("Grill et al. 2020 (BYOL), arXiv:2006.07733, as M3G Sec. 2.2 Eq. 2, aggregated over view "
                            "pairs (M3G Eq. 3; Piran et al. 2024, arXiv:2405.19532)")

    def byol(self, p: Tensor, t: Tensor) -> Tensor:
        cos = torch.einsum("lid,mid->lm", p, t) / p.shape[1]  # mean cosine of P^l vs T^m
        mean_cos = off_diagonal(cos).mean()
        self.stats = {"pos_cos": mean_cos.detach()}
        return 2 - 2 * mean_cos


@OBJECTIVES.register("byol_avg")
class BYOLAverage(_BYOLBase):
    """BYOL (M3G Eq. 2) of each view's prediction against the normalised mean of the other targets."""

    registry_id: ClassVar[str] = "byol_avg"
    paper: ClassVar[str] = ("Grill et al. 2020 (BYOL), arXiv:2006.07733, as M3G Sec. 2.2 Eq. 2, one vs "
                            "average-of-rest (M3G Eq. 4; Piran et al. 2024, arXiv:2405.19532)")
    #: at k = 2 the normalised mean of the other targets is the other target (fusebench.objectives.equivalence)
    same_loss_as: ClassVar[dict[str, int | str]] = {"byol_pwe": 2}

    def byol(self, p: Tensor, t: Tensor) -> Tensor:
        rest = F.normalize(t.sum(0, keepdim=True) - t, dim=-1)  # [k, n, d]
        mean_cos = torch.einsum("lid,lid->", p, rest) / (p.shape[0] * p.shape[1])
        self.stats = {"pos_cos": mean_cos.detach()}
        return 2 - 2 * mean_cos
