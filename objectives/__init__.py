"""Multi-view pretraining objectives (``fusebench.objectives``).

``build(name, **hparams)`` returns an ``nn.Module``; ``available()`` lists the registered ids.
Third-party objectives register through the entry-point group ``fusebench.objectives``.

Every objective ``build`` returns checks what each call returns (a forward hook,
:func:`check_loss_output`): a scalar (0-d) float32 / float64 tensor, carrying a gradient whenever grad
mode is on and an input requires one. Anything else is one :class:`ObjectiveOutputError` naming the
objective id and where it comes from (a plugin's distribution and entry point), instead of PyTorch's
message from ``backward``. The check reads tensor metadata only (type, ``dim``, ``dtype``,
``requires_grad``), never a value: no device synchronisation.
"""

from __future__ import annotations

if __name__ != "fusebench.objectives":  # this folder is mapped to fusebench.objectives by pyproject.toml
    raise ImportError("import this folder as fusebench.objectives; a bare 'objectives' would shadow other packages")


from typing import Any

from fusebench.registry import PluginError, Registry, UnknownNameError


def _describe(cls: Any) -> dict[str, Any]:
    """Metadata read off an objective class: paper, input kind, view limits, mask support, version, the
    pretraining methods it builds on (``fusebench.spec.methods``), options."""
    from fusebench.options import options_of

    meta = {k: getattr(cls, k) for k in ("paper", "input_kind", "min_views", "max_views", "supports_mask", "version",
                                         "pretrain_methods") if hasattr(cls, k)}
    meta["options"] = options_of(cls)
    return meta


_FAMILY = {"infonce_avg": "infonce", "infonce_pwe": "infonce", "byol_avg": "byol", "byol_pwe": "byol", "dhel": "mv_infonce",
           "mv_dhel": "mv_infonce", "pvc_arithmetic": "polyview", "pvc_geometric": "polyview", "suff_stats": "polyview"}


def _home(name: str) -> str:
    """The loss module that registers objective ``name`` (looking one id up imports that module only)."""
    return f"{__name__}.{_FAMILY.get(name, name)}"


# one module per loss family; importing a module registers its ids (on the first lookup)
OBJECTIVES = Registry("objective", entry_point_group="fusebench.objectives", describe=_describe, home=_home, modules=tuple(
    f"{__name__}.{m}" for m in ("infonce", "multicrop", "polyview", "mv_infonce", "byol", "tuple_infonce",
                                "matching_gap", "m3g")))


def view_limits(obj: Any) -> tuple[int, int | None]:
    """``(min_views, max_views)`` an objective (class, instance, or :class:`~fusebench.objectives.equivalence.Declared`
    entry) declares; a plugin that declares none takes k >= 2 (:class:`~fusebench.objectives.base.MultiViewObjective`'s
    defaults)."""
    return getattr(obj, "min_views", 2), getattr(obj, "max_views", None)


def accepts_views(obj: Any, k: int) -> bool:
    """Whether objective ``obj`` can be called on the k views of a benchmark (k: its modalities): the one view-count
    rule, read by the objective's own input check, the rows, the equivalence groups and ``fusebench list``."""
    lo, hi = view_limits(obj)
    return lo <= k and (hi is None or k <= hi)


def views_text(obj: Any) -> str:
    """The view counts ``obj`` accepts, in words (``exactly 2``, ``at least 2``, ``2 to 4``)."""
    lo, hi = view_limits(obj)
    return f"exactly {lo}" if hi == lo else f"at least {lo}" if hi is None else f"{lo} to {hi}"


def available(pattern: str | None = None) -> list[str]:
    """Sorted ids of every registered objective (optionally filtered by a glob pattern)."""
    return OBJECTIVES.available(pattern)


class ObjectiveOutputError(TypeError):
    """An objective returned something other than a scalar float tensor with a gradient (one line: the
    objective id, its origin, what it returned, what was expected)."""


#: the dtypes a loss may have: float32, or float64 for float64 views (never half: losses compute in float32)
LOSS_DTYPES = ("torch.float32", "torch.float64")


def origin(name: str) -> str:
    """Where objective ``name`` comes from, for messages: its plugin's distribution and entry point, or
    ``built-in``."""
    return OBJECTIVES.plugin(name) or "built-in"


def check_loss_output(module: Any, args: tuple, kwargs: dict, output: Any) -> None:
    """Forward hook of every built objective: ``output`` must be a 0-d float32 / float64 tensor that
    requires grad when grad mode is on and a tensor argument requires grad. Reads metadata only."""
    import torch  # here, not at the top: the package's light questions (equivalence) import no torch

    problem = None
    if not isinstance(output, torch.Tensor):
        problem = f"returned a {type(output).__name__}"
    elif output.dim() != 0:
        problem = f"returned a tensor of shape {tuple(output.shape)}, not a scalar"
    elif str(output.dtype) not in LOSS_DTYPES:
        problem = f"returned a {output.dtype} tensor (losses compute in float32)"
    elif (not output.requires_grad and torch.is_grad_enabled()
          and any(isinstance(a, torch.Tensor) and a.requires_grad for a in (*args, *kwargs.values()))):
        problem = "returned a tensor without a gradient (detached, or computed outside autograd) from inputs that require one"
    if problem is not None:
        name = getattr(module, "registry_id", type(module).__name__)
        raise ObjectiveOutputError(f"objective {name!r} ({origin(name)}) {problem}; expected a scalar float32 "
                                   f"tensor (shape ()) differentiable with respect to the views")


def build(name: str, **hparams: Any):
    """Instantiate objective ``name`` with hyperparameters ``hparams`` (e.g. ``tau=0.1``); its calls are
    checked by :func:`check_loss_output`. A plugin factory that builds no ``nn.Module`` is a
    :class:`~fusebench.registry.PluginError` naming its distribution and entry point."""
    from torch import nn

    cls = OBJECTIVES.get(name)
    module = cls(**hparams)
    if not isinstance(module, nn.Module):
        raise PluginError(f"objective {name!r} ({origin(name)}) built a {type(module).__name__}; expected a "
                          f"torch.nn.Module called on the views that returns the loss")
    module.registry_id = name.lower()
    module.register_forward_hook(check_loss_output, with_kwargs=True)
    return module


__all__ = ["LOSS_DTYPES", "OBJECTIVES", "ObjectiveOutputError", "UnknownNameError", "available", "build",
           "check_loss_output", "origin"]
