"""Shared input handling for every multi-view objective.

Contract (see README, "Objectives"): an objective is an ``nn.Module`` called on ``views`` of shape
``[k, n, d]`` (k views, n samples, d dims; ``views[l, i]`` is sample ``i`` seen in view ``l``) and an
optional ``mask: BoolTensor[k, n]`` (True = present). It returns a scalar tensor in the compute dtype:
float32 for half-precision inputs, otherwise the input dtype; differentiable w.r.t. ``views``; inputs
are L2-normalised inside the loss; per-call diagnostics go to ``self.stats``. An objective with an iterative
solver (M3G, the matching gap) also counts its calls that stopped at ``max_iter`` in a ``solver_tally``
(:mod:`fusebench.objectives.solver_tally`), which the pretraining cell records per epoch.

Objectives always compute in float32 or better, whatever the caller's autocast: ``forward`` of this
class and of every subclass (including one that overrides ``forward`` with other arguments, and
third-party objectives registered through the entry points) runs with ``torch.autocast`` disabled for
every device type where it is on (the CPU, the devices of its tensor arguments, the usual accelerators),
and with every bfloat16 / float16 tensor argument (positional or keyword) upcast to float32 first; their
gradients flow back through the cast in their own dtype. Other arguments (bool masks, float32 / float64
tensors, non-tensors) are passed unchanged. Forward pre-hooks see the caller's tensors (before the
upcast); forward hooks see the loss in the compute dtype. The CUDA matrix products and convolutions of the
forward run in full float32 too: the TF32 switches (``fp32_precision`` of cuBLAS and cuDNN) are set to
``ieee`` for the forward call and restored when it returns
(:func:`fusebench.spec.precision.full_float32`), whatever the precision policy of the run, so the loss
value is full float32. Its backward runs later, with the switches restored: the products of the objective's
gradient follow the run's policy (TF32 under ``--precision tf32``, like the encoders').

Inside the training loop's steps (:func:`fusebench.runtime.utils.deferred_value_checks`) the checks that
would read the device are left to the loop: the NaN / Inf scan of the views (the loop stops on the
non-finite loss they give) and the test whether a mask is full (the Pretrainer passes a mask only when its
host-side check of the batch found a missing view).

Every loss module's docstring names its paper (authors, title, venue, year and an arXiv id or URL) and,
where a ``variant`` follows the authors' released code, the repository and file; the class attribute
``paper`` repeats the reference in one line.
"""

from __future__ import annotations

import functools
from contextlib import ExitStack
from typing import Any, Callable, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fusebench.objectives import accepts_views, views_text
from fusebench.spec.precision import full_float32
from fusebench.runtime.utils import value_checks

#: floating dtypes an objective never computes in: tensor arguments in them are upcast to float32
HALF_DTYPES = frozenset({torch.float16, torch.bfloat16})
#: device types whose autocast is turned off around every objective call (besides the arguments' devices)
AUTOCAST_DEVICE_TYPES = ("cpu", "cuda", "xpu", "mps", "hpu", "mtia", "maia", "xla")
#: whether autocast is on for any device type (one cheap call: most objective calls run without autocast)
_any_autocast_enabled: Callable[[], bool] = getattr(torch._C, "_is_any_autocast_enabled", lambda: True)


def _autocast_enabled(device_type: str) -> bool:
    try:
        return torch.is_autocast_enabled(device_type)
    except RuntimeError:  # a device type without autocast (e.g. "meta")
        return False


def _upcast(a: Any) -> Any:
    return a.float() if isinstance(a, Tensor) and a.dtype in HALF_DTYPES else a


def compute_in_float32(forward: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap an objective's ``forward``: autocast off (for every device type where it is on: the tensor
    arguments' devices, the CPU and :data:`AUTOCAST_DEVICE_TYPES`) and bfloat16 / float16 tensor arguments,
    positional or keyword, upcast to float32 (differentiably: gradients reach the half-precision tensors);
    the TF32 switches off for the call (:func:`fusebench.spec.precision.full_float32`).
    Applied to every subclass's own ``forward`` by :meth:`MultiViewObjective.__init_subclass__`; idempotent."""
    if getattr(forward, "_fusebench_compute_in_float32", False):
        return forward

    @functools.wraps(forward)
    def guarded(self, *args: Any, **kwargs: Any) -> Any:
        with full_float32():  # no TF32 in the objective's CUDA matrix products, whatever the precision policy
            return _in_float32(forward, self, args, kwargs)

    guarded._fusebench_compute_in_float32 = True  # type: ignore[attr-defined]
    return guarded


def _in_float32(forward: Callable[..., Any], self: Any, args: tuple, kwargs: dict[str, Any]) -> Any:
    """``forward(self, *args, **kwargs)`` with half-precision tensor arguments upcast and autocast off."""
    for a in (*args, *kwargs.values()):
        if isinstance(a, Tensor) and a.dtype in HALF_DTYPES:
            args = tuple(_upcast(b) for b in args)
            kwargs = {key: _upcast(b) for key, b in kwargs.items()}
            break
    if not _any_autocast_enabled():
        return forward(self, *args, **kwargs)
    device_types = {a.device.type for a in (*args, *kwargs.values()) if isinstance(a, Tensor)}
    device_types.update(AUTOCAST_DEVICE_TYPES)
    with ExitStack() as stack:
        for t in sorted(device_types):
            if _autocast_enabled(t):
                stack.enter_context(torch.autocast(device_type=t, enabled=False))
        return forward(self, *args, **kwargs)


class MultiViewObjective(nn.Module):
    """Base class: validates inputs, L2-normalises, records ``stats``.

    Subclasses set the class attributes below and implement :meth:`loss` on normalised views in the
    compute dtype (float32 for half-precision inputs, otherwise the input dtype).
    """

    #: human-readable reference with a followable id (display only: ``fusebench list objectives``), e.g.
    #: "Piran et al. 2024 (M3G), Eq. 3, arXiv:2405.19532"; the module docstring gives the full citation
    paper: ClassVar[str] = ""
    #: smallest / largest number of views the loss is defined for (None = no upper bound)
    min_views: ClassVar[int] = 2
    max_views: ClassVar[int | None] = None
    #: whether a ``mask`` with missing entries is honoured; otherwise such a mask is refused
    supports_mask: ClassVar[bool] = False
    #: how the module is called: "views" -> module(views[k, n, d], mask=None);
    #: "pairs" -> module(predictions[k, n, d], targets[k, n, d]) (BYOL);
    #: "tuple" -> module(anchor[n, d], positive[n, d], negatives[n, m, d] | [m, d], weights=None)
    input_kind: ClassVar[str] = "views"
    #: bumped when the loss's definition changes; part of a run record's comparability key
    #: (fusebench.records), so runs of different definitions are never ranked together
    version: ClassVar[str] = "1"
    #: the pretraining methods this loss builds on (ids of ``fusebench.spec.methods.METHODS``,
    #: each with its typed options under ``pretrain.methods.<id>``): their heads, loss computation,
    #: per-step and per-epoch steps. A view objective may train in the M3G Sec. 4 view rotation
    #: (``view_rotation``, off unless its options turn it on); BYOL names ``ema_teacher``,
    #: TupleInfoNCE ``tuple_infonce``. The Pretrainer and the runner know no objective by name.
    pretrain_methods: ClassVar[tuple[str, ...]] = ("view_rotation",)
    #: whether the loss reads an EMA teacher attached to its runs (``pretrain.methods.ema_teacher``, the method's
    #: ``read_by``): a view objective does, through the view rotation it names, BYOL through its targets. An objective
    #: whose loss never reads one sets it False, and a run that would attach one to it (``ema_teacher: {enabled:
    #: true}``) is refused before any cell: the teacher would be recorded and hashed, built and updated, and unread
    uses_teacher: ClassVar[bool] = True
    #: the loss averages a two-view loss over view pairs, so the mutual-information bound it gives is
    #: the two-view one, ``log(2K - 1) - loss`` whatever the multiplicity M (poly-view paper,
    #: Prop. 2.1; used by the poly-view Gaussian MI experiment); otherwise the poly-view bound
    #: ``log(K M - M + 1) - loss`` (Theorems 2.2, 2.4) applies
    pairwise_mi_bound: ClassVar[bool] = False
    #: where the poly-view paper proves that this loss gives a lower bound on the One-vs-Rest MI (e.g.
    #: "Theorem 2.2, Eq. 13"), read by the Gaussian MI experiment through :meth:`mi_bound_proof`; None: none is
    mi_bound_proven: ClassVar[str | None] = None

    @classmethod
    def mi_bound_proof(cls, hparams: "dict[str, Any] | None" = None) -> str | None:
        """Where the bound this loss gives with ``hparams`` is proven (:attr:`mi_bound_proven`), or None."""
        return cls.mi_bound_proven

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Every subclass's own ``forward`` computes in float32 or better (:func:`compute_in_float32`)."""
        super().__init_subclass__(**kwargs)
        forward = cls.__dict__.get("forward")
        if callable(forward) and not isinstance(forward, (staticmethod, classmethod)):
            cls.forward = compute_in_float32(forward)

    def __init__(self) -> None:
        super().__init__()
        self.stats: dict[str, float | Tensor] = {}  # 0-dim tensors stay on the device until read

    @classmethod
    def accepts_views(cls, k: int) -> bool:
        """Whether this loss takes k views (:attr:`min_views` / :attr:`max_views`;
        :func:`fusebench.objectives.accepts_views`, the one rule)."""
        return accepts_views(cls, k)

    @classmethod
    def views_text(cls) -> str:
        """The view counts this loss takes, in words (:func:`fusebench.objectives.views_text`)."""
        return views_text(cls)

    @property
    def name(self) -> str:
        return getattr(self, "registry_id", type(self).__name__)

    def check_views(self, views: Tensor, arg: str = "views", finite: bool = True, views_count: int | None = None) -> None:
        """Raise ``ValueError`` naming the loss and the expected shape for bad ``views``; ``finite=False``
        skips the scan for NaN / Inf (for a loss that detects them on its own and then calls this again);
        ``views_count``: the number of views ``views`` must stack when it is not the class's view rule (a loss that
        checks a fixed stack of its own, e.g. TupleInfoNCE's anchor and positive)."""
        who = self.name
        if not isinstance(views, Tensor):
            raise ValueError(f"{who}: {arg} must be a torch.Tensor [k, n, d], got {type(views).__name__}")
        if views.dim() != 3:
            raise ValueError(
                f"{who}: {arg} must have shape [k, n, d] (views, samples, dims), got rank {views.dim()} "
                f"shape {tuple(views.shape)}"
            )
        if not views.is_floating_point():
            raise ValueError(f"{who}: {arg} must be a floating-point tensor, got {views.dtype}")
        k, n, d = views.shape
        if views_count is not None and k != views_count:
            raise ValueError(f"{who}: {arg} must stack exactly {views_count} views (k), got k={k} in shape "
                             f"{tuple(views.shape)}")
        if views_count is None and not self.accepts_views(k):
            raise ValueError(f"{who}: takes {self.views_text()} views (k), got k={k} in {arg} of shape "
                             f"{tuple(views.shape)}")
        if n < 2:
            raise ValueError(f"{who}: needs n >= 2 samples in {arg} [k, n, d], got n={n}")
        if d < 1:
            raise ValueError(f"{who}: {arg} [k, n, d] has d=0")
        if finite and value_checks() and not torch.isfinite(views.detach()).all():
            raise ValueError(f"{who}: {arg} contains NaN or Inf values")

    def check_mask(self, mask: Tensor | None, views: Tensor) -> Tensor | None:
        """Validate ``mask`` [k, n]; return None when it marks everything present."""
        if mask is None:
            return None
        k, n = views.shape[:2]
        if not isinstance(mask, Tensor) or mask.dtype != torch.bool or tuple(mask.shape) != (k, n):
            got = (f"a {str(mask.dtype).removeprefix('torch.')} tensor of shape {tuple(mask.shape)}"
                   if isinstance(mask, Tensor) else f"a {type(mask).__name__}")
            hint = ("; a 0/1 mask is passed as mask.bool() (True = present)"
                    if isinstance(mask, Tensor) and mask.dtype != torch.bool and tuple(mask.shape) == (k, n) else "")
            raise ValueError(f"{self.name}: mask must be a BoolTensor of shape [k, n] = {(k, n)}, got {got}{hint}")
        if value_checks() and bool(mask.all()):  # deferred: the caller passes a mask only when one is missing
            return None
        if not self.supports_mask:
            raise ValueError(
                f"{self.name}: does not support missing views (mask with False entries); "
                "use an objective that honours masks (see `fusebench list objectives`)"
            )
        return mask

    @staticmethod
    def compute_dtype(x: Tensor) -> torch.dtype:
        return torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype

    def normalise(self, views: Tensor) -> Tensor:
        return F.normalize(views.to(self.compute_dtype(views)), dim=-1)

    @compute_in_float32
    def forward(self, views: Tensor, mask: Tensor | None = None) -> Tensor:
        self.check_views(views)
        mask = self.check_mask(mask, views)
        self.stats = {}
        z = self.normalise(views)
        return self.loss(z, mask) if self.supports_mask else self.loss(z)

    def loss(self, z: Tensor, mask: Tensor | None = None) -> Tensor:  # pragma: no cover - abstract
        raise NotImplementedError
