"""The speed options of the standard cell (engine layer), from the spec's ``speed`` section: the channels-last
memory format for encoders with 2-D convolutions, cuDNN autotuning, the optimiser implementation (in
:func:`fusebench.engine.optim.build_optimizer`) and ``torch.compile`` of the encoder, with the fallback to
eager when compilation fails. Each is off by default (a run without them computes what it always did); each
may change the last bits of the numbers, so each enters the config hash when it is on, and what was in force
goes into ``run.json`` (``numerics.speed``, :func:`record`). docs/gpu.md, "Feeding the GPU and speed options".
"""

from __future__ import annotations

import contextlib
import copy
import functools
import logging
import sys
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch
from torch import nn

from fusebench.spec.config import SpeedConfig
from fusebench.runtime.utils import sync_inductor_determinism, use_deterministic_algorithms

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------------
# channels last
# ---------------------------------------------------------------------------------------------
def has_conv2d(model: nn.Module) -> bool:
    """Whether ``model`` holds a 2-D convolution (the layers the channels-last format is for)."""
    return any(isinstance(m, (nn.Conv2d, nn.ConvTranspose2d)) for m in model.modules())


def to_channels_last(model: nn.Module, cfg: SpeedConfig) -> bool:
    """Put ``model``'s 4-D parameters and buffers in the channels-last memory format when ``cfg.channels_last``
    asks for it and the model has 2-D convolutions; returns whether it was done (the values are unchanged,
    only their layout; the convolutions then pick channels-last kernels)."""
    if not cfg.channels_last:
        return False
    if not has_conv2d(model):
        log.info("speed.channels_last: the model has no 2-D convolutions; left as it is")
        return False
    model.to(memory_format=torch.channels_last)
    return True


def _channels_last(v: torch.Tensor, pin: bool) -> torch.Tensor:
    if v.is_contiguous(memory_format=torch.channels_last) and (not pin or v.is_pinned()):
        return v
    if not pin:
        return v.contiguous(memory_format=torch.channels_last)
    # one copy, straight into page-locked memory (the copy to the GPU stays asynchronous)
    return torch.empty_like(v, memory_format=torch.channels_last, pin_memory=True).copy_(v)


def channels_last_inputs(batch: Any, pin: bool = False) -> Any:
    """``batch`` with its 4-D floating-point modality tensors (images ``[n, c, h, w]``) in the channels-last
    memory format (same values); everything else as it is. Meant for the batch on the host, before its copy
    to the device (the training loop's ``host`` hook): with ``pin`` the converted tensors are page-locked."""
    if not isinstance(batch, dict) or not isinstance(batch.get("modalities"), dict):
        return batch
    mods = {k: _channels_last(v, pin) if isinstance(v, torch.Tensor) and v.dim() == 4 and v.is_floating_point()
            else v for k, v in batch["modalities"].items()}
    return {**batch, "modalities": mods}


def _as_is(batch: Any) -> Any:
    return batch


def input_format(applied: bool, pin: bool = False) -> Callable[[Any], Any]:
    """What a training step does to its batch on the host, before the copy to the device:
    :func:`channels_last_inputs` (into page-locked memory with ``pin``: the feed pins its batches) when the
    model was put in channels-last format, else nothing."""
    if not applied:
        return _as_is
    return functools.partial(channels_last_inputs, pin=pin) if pin else channels_last_inputs


# ---------------------------------------------------------------------------------------------
# cuDNN autotuning
# ---------------------------------------------------------------------------------------------
def _backend_state() -> tuple[bool, bool, bool, bool]:
    return (bool(torch.backends.cudnn.benchmark), bool(torch.backends.cudnn.deterministic),
            torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled())


@contextlib.contextmanager
def backend_scope(cfg: SpeedConfig) -> Iterator[None]:
    """With ``cfg.cudnn_benchmark``, restore the process's cuDNN and deterministic-algorithm switches when
    the cell ends (:func:`apply_backend` changes them for the cell); without it, nothing."""
    if not cfg.cudnn_benchmark:
        yield
        return
    benchmark, deterministic, algorithms, warn_only = _backend_state()
    try:
        yield
    finally:
        torch.backends.cudnn.benchmark = benchmark
        torch.backends.cudnn.deterministic = deterministic
        use_deterministic_algorithms(algorithms, warn_only=warn_only)


def apply_backend(cfg: SpeedConfig, flags: dict[str, Any]) -> None:
    """``cfg.cudnn_benchmark``: let cuDNN time its algorithms and keep the fastest, which is a trade against
    determinism (the fastest may differ from run to run, and PyTorch's deterministic-algorithm mode would
    restrict the search), so both deterministic switches are turned off. Call after
    :func:`fusebench.runtime.utils.seed_everything`, inside :func:`backend_scope`; ``flags`` (the record's
    ``determinism``) is updated to say so."""
    if not cfg.cudnn_benchmark:
        return
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.deterministic = False
    use_deterministic_algorithms(False)
    flags.update(deterministic_algorithms=False, cudnn_deterministic=False, cudnn_benchmark=True)
    log.info("speed.cudnn_benchmark: cuDNN autotuning on, deterministic algorithms off for this cell")


# ---------------------------------------------------------------------------------------------
# torch.compile
# ---------------------------------------------------------------------------------------------
@dataclass
class CompileStatus:
    """What became of ``speed.compile`` in a cell: whether a compiled call ran, and the reason of the
    fallback to eager (the first compilation error), if there was one."""

    mode: str = "default"
    ran_compiled: bool = False
    fallback: str | None = None

    def fail(self, where: str, error: BaseException) -> None:
        if self.fallback is None:
            text = str(error).strip()
            self.fallback = f"{where}: {type(error).__name__}: {text.splitlines()[0] if text else ''}"
            log.warning("speed.compile: torch.compile failed (%s); the encoder runs eagerly from here on", self.fallback)


def compiler_errors() -> tuple[type[BaseException], ...]:
    """The exceptions by which ``torch.compile`` says it could not compile a call: dynamo's tracing and backend
    failures and inductor's lowering and code-generation ones (those inductor raises inside the backend reach
    the caller as ``BackendCompilerFailed``). Looked up when a compiled call has raised, so that a run without
    ``speed.compile`` never imports ``torch._dynamo``; inductor's module is read only if it was imported (if it
    was not, none of its errors can have been raised)."""
    from torch._dynamo import exc as dynamo

    errors: list[type[BaseException]] = [dynamo.BackendCompilerFailed, dynamo.Unsupported, dynamo.TorchRuntimeError,
                                         dynamo.InternalTorchDynamoError]
    inductor = sys.modules.get("torch._inductor.exc")
    if inductor is not None:
        for name in ("CppCompileError", "CppWrapperCodegenError", "InvalidCxxCompiler", "OperatorIssue",
                     "SubgraphLoweringException", "GPUTooOldForTriton", "TritonMissing"):
            if isinstance(getattr(inductor, name, None), type):
                errors.append(getattr(inductor, name))
    return tuple(errors)


class CompiledOrEager:
    """A method of the encoder run through ``torch.compile`` (compiled at its first call), or eagerly once
    a compilation has failed anywhere in the cell (``status.fallback``): at the first call or at any later
    one (a recompilation for new input shapes or a new mode fails the same way); the failing call's result is
    the eager method's, and a call that fails eagerly too raises the model's own error. Only the compiler's own
    errors (:func:`compiler_errors`, or any error of ``torch.compile`` itself) fall back: any other error of a
    compiled call (a CUDA out-of-memory, a runtime error after part of the step ran and updated, say, BatchNorm
    statistics) is raised as it is, never re-run eagerly. Called while another compiled function is being
    traced, it runs the eager method (which the tracer then follows). A deep copy (an EMA teacher's copy of the
    encoder) wraps the copy's own method, compiled afresh."""

    def __init__(self, eager: Callable[..., Any], where: str, status: CompileStatus) -> None:
        self.eager, self.where, self.status = eager, where, status
        self.compiled: Callable[..., Any] | None = None
        self.ok = False

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.status.fallback is not None or torch.compiler.is_compiling():
            return self.eager(*args, **kwargs)
        if self.compiled is None:
            try:  # nothing has run yet: whatever torch.compile raises is the compiler refusing
                sync_inductor_determinism()  # the deterministic mode set before inductor was imported
                self.compiled = torch.compile(self.eager, mode=None if self.status.mode == "default" else self.status.mode)
            except Exception as e:  # noqa: BLE001
                return self._fall_back(e, args, kwargs)
        try:  # any call may compile (the first one; a recompilation for new shapes, dtypes or modes later on)
            out = self.compiled(*args, **kwargs)
        except Exception as e:
            if not isinstance(e, compiler_errors()):
                raise  # not the compiler's: an eager re-run would repeat what the failed call already did
            return self._fall_back(e, args, kwargs)
        self.ok = True
        self.status.ran_compiled = True
        return out

    def _fall_back(self, error: Exception, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        out = self.eager(*args, **kwargs)  # the model's own error is raised here, as without compilation
        self.status.fail(self.where, error)  # a compilation error: eager from now on, the first reason recorded
        return out

    def __deepcopy__(self, memo: dict[int, Any]) -> CompiledOrEager:
        return CompiledOrEager(copy.deepcopy(self.eager, memo), self.where, self.status)

    def __getstate__(self) -> dict[str, Any]:
        return {"eager": self.eager, "where": self.where, "status": self.status}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["eager"], state["where"], state["status"])


def compile_encoder(model: nn.Module, cfg: SpeedConfig) -> CompileStatus | None:
    """With ``cfg.compile``: the encoder's ``embed`` and ``features`` (what the pretraining loss and the task
    head call) replaced on the instance by :class:`CompiledOrEager` wrappers; parameters, buffers and
    state-dict keys stay as they are (checkpoints and resume are unchanged). The encoder is ``model.backbone``
    where there is one (a :class:`~fusebench.components.model.TaskModel`), else ``model``. Returns the
    cell's :class:`CompileStatus` (None without ``cfg.compile``)."""
    if not cfg.compile:
        return None
    status = CompileStatus(mode=cfg.compile_mode)
    encoder = getattr(model, "backbone", model)
    for name in ("embed", "features"):
        method = getattr(encoder, name, None)
        if callable(method):
            setattr(encoder, name, CompiledOrEager(method, f"{type(encoder).__name__}.{name}", status))
    return status


# ---------------------------------------------------------------------------------------------
# the record
# ---------------------------------------------------------------------------------------------
def record(cfg: SpeedConfig, feed: dict[str, Any], channels_last: bool, status: CompileStatus | None) -> dict[str, Any]:
    """``numerics.speed`` of ``run.json``: how batches were fetched (``feed``: :meth:`Feed.record
    <fusebench.engine.data.Feed.record>`) and the speed options in force: ``channels_last`` (whether the
    model was converted), ``cudnn_benchmark``, ``optimizer_impl``, ``compile`` (asked), ``compile_mode``,
    ``compiled`` (whether a compiled call ran) and ``compile_fallback`` (why the encoder ran eagerly)."""
    return {
        **feed,
        "channels_last": bool(channels_last),
        "cudnn_benchmark": bool(cfg.cudnn_benchmark),
        "optimizer_impl": cfg.optimizer_impl,
        "compile": bool(cfg.compile),
        "compile_mode": cfg.compile_mode if cfg.compile else None,
        "compiled": status.ran_compiled if status is not None else False,
        "compile_fallback": status.fallback if status is not None else None,
    }


__all__ = ["CompileStatus", "CompiledOrEager", "apply_backend", "backend_scope", "channels_last_inputs",
           "compile_encoder", "compiler_errors", "has_conv2d", "input_format", "record", "to_channels_last"]
