"""TupleInfoNCE on fused tuple embeddings, plus its negative-sampling and reward helpers.

Liu, Fan, Zhang, Dong, Funkhouser, Yi, "Contrastive Multimodal Fusion with TupleInfoNCE", ICCV 2021,
arXiv:2107.02575, https://arxiv.org/abs/2107.02575. The paper gives no code repository. Its Eq. 2 is
InfoNCE (van den Oord et al. 2018, arXiv:1807.03748) on fused tuples. The default ``tau = 0.07`` is
fusebench's choice; the paper's text does not state the temperature it used.

Loss (Eq. 2, ``tuple_infonce``). g(t) is the fused embedding of a K-modality tuple; for anchor i,

    L = 1/n sum_i -log( e^{s(i, pos)} / (e^{s(i, pos)} + sum_j w_j e^{s(i, j)}) ),
    s(i, x) = cos(g(t_1,i), x) / tau,   tau = 0.07 by default,

over the negatives j given for anchor i ([n, m, d], one set per anchor) or shared ([m, d]); the
weights w ([m] or [n, m], >= 0, default 1) realise the negative "proposal" mixture q_alpha.

Helpers:

- :func:`random_derangement` - a uniformly random permutation without fixed point (rejection
  sampling of ``torch.randperm``; deterministic given a ``torch.Generator``).
- :func:`disturbed_negatives` - k-disturbed negatives (Sec. 4.1): modality k of every tuple is
  replaced by modality k of another sample, d(j) with d a derangement, the other K-1 modalities are
  kept. As no sample keeps its own modality k, none of the disturbed tuples equals a real tuple, so
  all of them (including the one built from the anchor's own sample, the hardest) are true negatives.
- :func:`mixture_weights` / :func:`assemble_negatives` - Eq. 2's q_alpha = alpha_0 p(t) +
  sum_k alpha_k p(v_bar^k) p(v^k) on a fixed batch. With m_k negatives of type k available and D
  draws from q_alpha in the paper's estimator, the expected negative sum D * E_q[f] is estimated by
  giving each type-k negative the weight D * alpha_k / m_k (alpha normalised to sum 1). Type 0 are
  the other samples' positive tuples (m_0 = n - 1), type k the n k-disturbed tuples. D defaults to
  n - 1, so alpha = (1, 0, ..., 0) recovers plain InfoNCE on the batch.
- :func:`cross_modal_discrimination_accuracy` / :func:`cross_modal_discrimination_reward` - Eqs. 3-5:
  on a held-out set of M tuples, modality k alone (augmented) must retrieve its own rest-of-tuple
  v_bar^k among the M candidates; A^k is the fraction retrieved (argmax of Eq. 3's softmax, which is
  the argmax of the similarity, for every tau > 0); R = sum_k A^k. Embeddings are compared by cosine
  (the loss's similarity); a tie with the correct candidate counts as a miss.

Shape:
    anchor: [n, d], positive: [n, d], negatives: [n, m, d] or [m, d], weights: [m] or [n, m] -> scalar.

Example (a zero weight removes a negative)::

    >>> import torch
    >>> from fusebench.objectives import build
    >>> from fusebench.objectives.tuple_infonce import disturbed_negatives, random_derangement
    >>> g = torch.Generator().manual_seed(0)
    >>> perm = random_derangement(5, g)
    >>> bool((perm != torch.arange(5)).all())                      # no sample keeps its own index
    True
    >>> mods = {"rgb": torch.arange(5.0), "depth": torch.arange(5.0)}
    >>> neg, d = disturbed_negatives(mods, "depth", g, return_permutation=True)
    >>> torch.equal(neg["rgb"], mods["rgb"]), torch.equal(neg["depth"], mods["depth"][d])
    (True, True)
    >>> _ = torch.manual_seed(0)
    >>> anchor, positive, negatives = torch.randn(4, 8), torch.randn(4, 8), torch.randn(6, 8)
    >>> loss = build("tuple_infonce")                              # tau = 0.07
    >>> w = torch.tensor([1.0, 1.0, 1.0, 0.0, 0.0, 0.0])
    >>> torch.allclose(loss(anchor, positive, negatives, weights=w), loss(anchor, positive, negatives[:3]))
    True
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from fusebench.objectives import OBJECTIVES
from fusebench.objectives.base import MultiViewObjective
from fusebench.objectives.infonce import check_tau, neg_fill
from fusebench.runtime.utils import value_checks

__all__ = [
    "TupleInfoNCE",
    "random_derangement",
    "disturbed_negatives",
    "mixture_weights",
    "assemble_negatives",
    "cross_modal_discrimination_accuracy",
    "discrimination_hits",
    "cross_modal_discrimination_reward",
]

_MAX_TRIES = 10_000


def random_derangement(n: int, generator: torch.Generator | None = None, device: torch.device | str | None = None) -> Tensor:
    """A uniformly random permutation of range(n) with perm[i] != i for every i (n >= 2)."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 2:
        raise ValueError(f"random_derangement: needs an integer n >= 2 (n = 1 has no derangement), got {n!r}")
    ar = torch.arange(n)
    for _ in range(_MAX_TRIES):  # each try succeeds with probability ~1/e
        perm = torch.randperm(n, generator=generator)
        if bool((perm != ar).all()):
            return perm.to(device) if device is not None else perm
    raise RuntimeError("random_derangement: no derangement found (generator broken?)")  # pragma: no cover


def disturbed_negatives(
    modalities: Mapping[str, Tensor] | Sequence[Tensor],
    k_disturbed: int | str,
    generator: torch.Generator | None = None,
    return_permutation: bool = False,
):
    """k-disturbed negatives: modality ``k_disturbed`` of tuple j is taken from sample d(j) != j.

    Args:
        modalities: per-modality inputs of the n tuples, each with the sample axis first ([n, ...]),
            as a dict name -> tensor or a list/tuple of tensors.
        k_disturbed: key (dict) or index (list) of the modality to disturb.
        generator: makes the derangement reproducible.
        return_permutation: also return d as a LongTensor [n].

    Returns:
        the same container type with modality k replaced by ``modalities[k][d]`` (others unchanged,
        the same tensor objects); with ``return_permutation``, ``(container, d)``.
    """
    if isinstance(modalities, Mapping):
        keys = list(modalities)
        tensors = [modalities[key] for key in keys]
        if k_disturbed not in modalities:
            raise ValueError(f"disturbed_negatives: k_disturbed={k_disturbed!r} is not a modality; have {keys}")
        idx = keys.index(k_disturbed)
    elif isinstance(modalities, Sequence) and not isinstance(modalities, (str, bytes)):
        tensors = list(modalities)
        if isinstance(k_disturbed, bool) or not isinstance(k_disturbed, int) or not 0 <= k_disturbed < len(tensors):
            raise ValueError(f"disturbed_negatives: k_disturbed must be an index in [0, {len(tensors)}), got {k_disturbed!r}")
        idx = k_disturbed
    else:
        raise ValueError(f"disturbed_negatives: modalities must be a dict or list of tensors, got {type(modalities).__name__}")
    if len(tensors) < 2:
        raise ValueError(f"disturbed_negatives: needs >= 2 modalities (a tuple), got {len(tensors)}")
    sizes = set()
    for t in tensors:
        if not isinstance(t, Tensor) or t.dim() < 1:
            raise ValueError("disturbed_negatives: every modality must be a tensor with the sample axis first [n, ...]")
        sizes.add(t.shape[0])
    if len(sizes) != 1:
        raise ValueError(f"disturbed_negatives: modalities disagree on the number of samples n: {sorted(sizes)}")
    n = sizes.pop()
    perm = random_derangement(n, generator)
    out = list(tensors)
    out[idx] = tensors[idx][to_device_async(perm, tensors[idx].device)]
    if isinstance(modalities, Mapping):
        result = dict(zip(keys, out))
    else:
        result = tuple(out) if isinstance(modalities, tuple) else out
    return (result, perm) if return_permutation else result


def mixture_weights(alpha: Sequence[float] | Tensor, counts: Sequence[int], num_draws: float | None = None) -> Tensor:
    """Weights realising q_alpha (Eq. 2) on a fixed set of negatives grouped by type.

    Args:
        alpha: [T] non-negative type probabilities (normalised here to sum 1), type 0 = plain negatives,
            type k = k-disturbed negatives.
        counts: [T] number of available negatives of each type (listed type after type).
        num_draws: D, the number of draws from q_alpha the sum estimates (default: sum(counts)).

    Returns:
        [sum(counts)] weights, D * alpha_t / counts_t for every negative of type t.
    """
    a = torch.as_tensor(alpha, dtype=torch.float64).flatten()
    if len(counts) != a.numel():
        raise ValueError(f"mixture_weights: alpha has {a.numel()} entries but counts has {len(counts)}")
    if not torch.isfinite(a).all() or (a < 0).any() or float(a.sum()) <= 0:
        raise ValueError(f"mixture_weights: alpha must be finite, >= 0 and not all 0, got {a.tolist()}")
    if any(isinstance(c, bool) or not isinstance(c, int) or c < 0 for c in counts):
        raise ValueError(f"mixture_weights: counts must be non-negative integers, got {list(counts)}")
    total = sum(counts)
    d = float(total if num_draws is None else num_draws)
    if not math.isfinite(d) or d <= 0:
        raise ValueError(f"mixture_weights: num_draws must be > 0, got {num_draws!r}")
    a = a / a.sum()
    parts = []
    for t, (w, c) in enumerate(zip(a.tolist(), counts)):
        if w > 0 and c == 0:
            raise ValueError(f"mixture_weights: alpha[{t}] = {w:g} > 0 but no negative of type {t} is given")
        parts.append(torch.full((c,), d * w / c if c else 0.0, dtype=torch.float64))
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.float64)


def assemble_negatives(positive: Tensor, disturbed: Sequence[Tensor], alpha: Sequence[float] | Tensor) -> tuple[Tensor, Tensor]:
    """Per-anchor negatives and weights for :class:`TupleInfoNCE` from fused embeddings.

    Args:
        positive: [n, d] fused embeddings of the positive tuples g(t_2,j).
        disturbed: K tensors [n, d], fused embeddings of the k-disturbed tuples (k = 1..K).
        alpha: [K + 1] mixture (alpha_0 for the plain negatives, then alpha_1..alpha_K).

    Returns:
        negatives [n, (n - 1) + K n, d]: for anchor i, the other samples' positives (j != i), then the
        n k-disturbed tuples of each type; weights [(n - 1) + K n] (shared by all anchors), from
        :func:`mixture_weights` with D = n - 1.
    """
    if not isinstance(positive, Tensor) or positive.dim() != 2:
        raise ValueError("assemble_negatives: positive must be a tensor [n, d]")
    n, d = positive.shape
    if n < 2:
        raise ValueError(f"assemble_negatives: needs n >= 2 tuples, got n={n}")
    for t in disturbed:
        if not isinstance(t, Tensor) or tuple(t.shape) != (n, d):
            raise ValueError(f"assemble_negatives: every disturbed embedding must have shape {(n, d)}")
    # [i, j != i, d]: row i of the [n, n] grid without its diagonal entry, by reshaping (the flat grid from entry
    # 1 on, in rows of n + 1, is the off-diagonal entries then the next diagonal one), with no boolean selection
    # (a wait for the device); the values and gradients of positive.expand(n, n, d)[~eye].reshape(n, n - 1, d)
    grid = positive.unsqueeze(0).expand(n, n, d).reshape(n * n, d)
    plain = grid[1:].reshape(n - 1, n + 1, d)[:, :n].reshape(n, n - 1, d)
    parts = [plain] + [t.unsqueeze(0).expand(n, n, d) for t in disturbed]
    weights = _device_weights(alpha, [n - 1] + [n] * len(disturbed), n - 1, positive.dtype, positive.device)
    return torch.cat(parts, dim=1), weights


def to_device_async(t: Tensor, device: torch.device) -> Tensor:
    """``t`` (on the CPU) on ``device``: to a GPU through page-locked memory without blocking the host (the
    caching host allocator keeps the pinned block until the copy is done); the same values."""
    device = torch.device(device)
    if device.type != "cuda" or t.device.type != "cpu":
        return t.to(device)
    return t.pin_memory().to(device, non_blocking=True)


_WEIGHTS: dict[tuple, Tensor] = {}


def _device_weights(alpha: Sequence[float] | Tensor, counts: list[int], num_draws: int, dtype: torch.dtype,
                    device: torch.device) -> Tensor:
    """:func:`mixture_weights` in ``dtype`` on ``device``, made once per (alpha, counts, dtype, device) when
    ``alpha`` is a list of numbers (every training step of a run asks for the same weights: made afresh, they
    cost host reads of the checks and a copy to the device per step)."""
    if isinstance(alpha, Tensor) or not all(isinstance(a, (int, float)) and not isinstance(a, bool) for a in alpha):
        return mixture_weights(alpha, counts, num_draws=num_draws).to(dtype).to(device)
    key = (tuple(float(a) for a in alpha), tuple(counts), num_draws, dtype, torch.device(device))
    got = _WEIGHTS.get(key)
    if got is None:
        if len(_WEIGHTS) >= 64:
            _WEIGHTS.clear()
        got = _WEIGHTS[key] = mixture_weights(list(alpha), counts, num_draws=num_draws).to(dtype).to(device)
    return got


def cross_modal_discrimination_accuracy(single: Tensor, rest: Tensor) -> float:
    """A^k (Eqs. 3-4): fraction of rows n whose most similar rest-embedding is rest[n] (strictly).

    single: [M, d] embeddings g(v'^k_m) of modality k alone; rest: [M, d] embeddings g(v_bar^k_m).
    """
    if not isinstance(single, Tensor) or not isinstance(rest, Tensor) or single.dim() != 2 or single.shape != rest.shape:
        raise ValueError("cross_modal_discrimination_accuracy: single and rest must be tensors of the same shape [M, d]")
    if single.shape[0] < 2:
        raise ValueError("cross_modal_discrimination_accuracy: needs M >= 2 validation tuples")
    if not (torch.isfinite(single).all() and torch.isfinite(rest).all()):
        raise ValueError("cross_modal_discrimination_accuracy: embeddings contain NaN or Inf")
    return float(discrimination_hits(single, rest))


def discrimination_hits(single: Tensor, rest: Tensor) -> Tensor:
    """:func:`cross_modal_discrimination_accuracy` as a 0-dim float64 tensor on the inputs' device, without its
    checks (the caller's): a loop over many accuracies reads them in one copy instead of one wait each."""
    with torch.no_grad():
        dt = torch.float64 if single.dtype == torch.float64 else torch.float32
        sim = F.normalize(single.to(dt), dim=-1) @ F.normalize(rest.to(dt), dim=-1).T  # [M, M]
        m = sim.shape[0]
        diag = sim.diagonal()
        others = sim.masked_fill(torch.eye(m, dtype=torch.bool, device=sim.device), float("-inf")).amax(-1)
        return (diag > others).double().mean()


def cross_modal_discrimination_reward(
    singles: Mapping[str, Tensor] | Sequence[Tensor], rests: Mapping[str, Tensor] | Sequence[Tensor]
) -> tuple[float, dict | list]:
    """R = sum_k A^k (Eq. 5). Returns ``(R, per-modality accuracies)`` in the container type of the input."""
    if isinstance(singles, Mapping):
        if not isinstance(rests, Mapping) or set(singles) != set(rests):
            raise ValueError("cross_modal_discrimination_reward: singles and rests must have the same modality keys")
        acc = {key: cross_modal_discrimination_accuracy(singles[key], rests[key]) for key in singles}
        return float(sum(acc.values())), acc
    if len(singles) != len(rests) or len(singles) == 0:
        raise ValueError("cross_modal_discrimination_reward: singles and rests must list the same K >= 1 modalities")
    accs = [cross_modal_discrimination_accuracy(s, r) for s, r in zip(singles, rests)]
    return float(sum(accs)), accs


@OBJECTIVES.register("tuple_infonce")
class TupleInfoNCE(MultiViewObjective):
    """TupleInfoNCE (Eq. 2) on fused embeddings: ``module(anchor, positive, negatives, weights=None)``."""

    registry_id: ClassVar[str] = "tuple_infonce"
    paper: ClassVar[str] = ("Liu et al. 2021 (TupleInfoNCE, ICCV), Eq. 2 (Sec. 4.2); negatives Sec. 4.1; "
                            "reward Eqs. 3-5; arXiv:2107.02575")
    input_kind: ClassVar[str] = "tuple"
    #: the modalities fused into each tuple (k >= 2, no maximum); the loss itself is called on two fused
    #: tuples, anchor and positive, checked as a stack of exactly 2 in :meth:`_check`
    min_views: ClassVar[int] = 2
    max_views: ClassVar[int | None] = None
    #: tuple fusion, augmentation, k-disturbed negatives and Algorithm 1 (sample optimisation), with
    #: their options under ``pretrain.methods.tuple_infonce`` (fusebench.components.tuple_method)
    pretrain_methods: ClassVar[tuple[str, ...]] = ("tuple_infonce",)
    #: the loss is on the student's fused tuples alone: an EMA teacher (``ema_teacher: {enabled: true}``) would be
    #: built and updated and never read, so a run that attaches one is refused (``MultiViewObjective.uses_teacher``)
    uses_teacher: ClassVar[bool] = False

    def __init__(self, tau: float = 0.07) -> None:
        super().__init__()
        self.tau = check_tau(tau, self.registry_id)

    def _check(self, anchor: Tensor, positive: Tensor, negatives: Tensor, weights: Tensor | None) -> None:
        who = self.name
        for arg, x, rank in (("anchor", anchor, (2,)), ("positive", positive, (2,)), ("negatives", negatives, (2, 3))):
            if not isinstance(x, Tensor):
                raise ValueError(f"{who}: {arg} must be a torch.Tensor, got {type(x).__name__}")
            if x.dim() not in rank:
                want = "[n, d]" if rank == (2,) else "[n, m, d] or [m, d]"
                raise ValueError(f"{who}: {arg} must have shape {want}, got shape {tuple(x.shape)}")
            if not x.is_floating_point():
                raise ValueError(f"{who}: {arg} must be a floating-point tensor, got {x.dtype}")
        if anchor.shape != positive.shape:
            raise ValueError(f"{who}: anchor {tuple(anchor.shape)} and positive {tuple(positive.shape)} must both be [n, d]")
        self.check_views(torch.stack([anchor.detach(), positive.detach()]), arg="stack(anchor, positive)", views_count=2)
        scan = value_checks()  # inside the training loop's steps the loop checks the loss instead (no device read)
        n, d = anchor.shape
        if negatives.shape[-1] != d or (negatives.dim() == 3 and negatives.shape[0] != n) or negatives.shape[-2] < 1:
            raise ValueError(f"{who}: negatives must be [n={n}, m, d={d}] or [m, d={d}] with m >= 1, got {tuple(negatives.shape)}")
        if scan and not torch.isfinite(negatives.detach()).all():
            raise ValueError(f"{who}: negatives contain NaN or Inf values")
        if weights is not None:
            m = negatives.shape[-2]
            if not isinstance(weights, Tensor) or tuple(weights.shape) not in ((m,), (n, m)):
                shape = tuple(weights.shape) if isinstance(weights, Tensor) else type(weights).__name__
                raise ValueError(f"{who}: weights must be a tensor [m={m}] or [n={n}, m={m}], got {shape}")
            if scan and (not torch.isfinite(weights.detach()).all() or (weights.detach() < 0).any()):
                raise ValueError(f"{who}: weights must be finite and >= 0")

    def forward(self, anchor: Tensor, positive: Tensor, negatives: Tensor, weights: Tensor | None = None) -> Tensor:  # type: ignore[override]
        self._check(anchor, positive, negatives, weights)
        self.stats = {}
        dt = self.compute_dtype(anchor)
        a = F.normalize(anchor.to(dt), dim=-1)
        p = F.normalize(positive.to(dt), dim=-1)
        neg = F.normalize(negatives.to(dt), dim=-1)
        pos = torch.einsum("nd,nd->n", a, p) / self.tau  # [n]
        if neg.dim() == 2:
            s = torch.einsum("nd,md->nm", a, neg) / self.tau  # [n, m]
        else:
            s = torch.einsum("nd,nmd->nm", a, neg) / self.tau
        if weights is not None:
            w = weights.to(dt).expand_as(s)
            logw = torch.where(w > 0, w.clamp_min(torch.finfo(dt).tiny).log(), torch.full_like(w, neg_fill(dt)))
            s_w = s + logw
        else:
            s_w = s
        lse = torch.logaddexp(pos, s_w.logsumexp(-1))
        self.stats = {"pos_cos": pos.detach().mean() * self.tau, "neg_cos": s.detach().mean() * self.tau}
        return (lse - pos).mean()  # in the compute dtype (objectives/base.py)
