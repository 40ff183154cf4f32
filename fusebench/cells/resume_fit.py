"""Whether a cell's ``last.pt`` fits the modules the cell builds (cells layer): the names and shapes of its
tensors.

:func:`fusebench.engine.cell.check_checkpoint_config` judges a checkpoint's configuration hash, code versions,
data and epochs from the file alone; the names and shapes of the tensors it holds are known only to the modules
the cell builds. A checkpoint that passes those checks and does not fit (a file of another suite version, an
encoder, head or objective whose parameters changed since it was written, an edited file) used to start the sweep:
the hyper-parameter selection and the cells before it ran, then the cell failed when
:meth:`fusebench.engine.loop.Phase.restore` loaded it strictly. :func:`resume_misfit` builds the cell's modules
as the cell builds them (:func:`fusebench.cells.standard.build_model`; for a pretraining checkpoint the
:class:`~fusebench.engine.pretrain.Pretrainer` with the objective and its methods too), on the meta device (shapes
without memory or initialisation; on the CPU where a constructor needs values), and compares. The sweep
(:func:`fusebench.sweep.plan.check_resumes_fit`), ``--plan`` and ``fusebench status --benchmark`` ask it before
any cell runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping

import torch
from torch import nn

from fusebench.spec.config import BenchmarkSpec

#: the keys of each phase's checkpoint that hold a module's state, compared here
STATE_KEYS: dict[str, tuple[str, ...]] = {"pretrain": ("pretrainer",), "downstream": ("model", "pretrained_state")}
#: the mismatching tensors a message names (the count of the others follows)
SHOWN = 3


def _built(make: Callable[[], nn.Module]) -> nn.Module:
    """``make()`` on the meta device, else (a constructor that computes with values) on the CPU. (The modules it
    builds from are imported before, by :func:`expected_shapes`: a module-level tensor first made inside the meta
    context would stay a meta tensor for the process's real cells.)"""
    try:
        with torch.device("meta"):
            return make()
    except Exception:  # noqa: BLE001 - built again where values exist; a real failure is raised there
        return make()


def expected_shapes(spec: BenchmarkSpec, objective: str, train_ds: Any, phase: str,
                    hparams: Mapping[str, Any]) -> dict[str, tuple[int, ...] | None]:
    """{name: shape} of the state the cell's module of ``phase`` has (None for a module's non-tensor extra
    state): the task model for the downstream phase, the Pretrainer (task model, projection heads, the objective
    built with ``hparams``, its methods' modules) for the pretraining phase."""
    from fusebench import encoders, objectives, tasks  # looked up here, outside the meta context (_built)
    from fusebench.cells.standard import build_model
    from fusebench.components.rows import row_of
    from fusebench.engine.pretrain import Pretrainer
    from fusebench.spec.methods import split_method_keys, with_method_options

    encoders.ENCODERS.get("identity" if row_of(spec, objective).identity_encoder(spec) else spec.encoder.id)
    tasks.for_dataset(train_ds)
    if phase == "pretrain":
        objectives.OBJECTIVES.get(objective)

    def make() -> nn.Module:
        model = build_model(spec, train_ds, objective)
        if phase == "downstream":
            return model
        kwargs, method_options = split_method_keys(dict(hparams))
        own = spec.pretrain.settings(objective)
        return Pretrainer(model, objectives.build(objective, **kwargs),
                          with_method_options(spec.pretrain, method_options), micro_batch=own.micro_batch)

    state = _built(make).state_dict()
    return {k: tuple(v.shape) if torch.is_tensor(v) else None for k, v in state.items()}


def _shape(v: Any) -> str:
    return str(list(v.shape)) if torch.is_tensor(v) else f"a {type(v).__name__}"


def state_misfits(state: Mapping[str, Any], expected: Mapping[str, tuple[int, ...] | None]) -> list[str]:
    """What keeps ``state`` (a checkpoint's module state) from loading strictly into a module whose state has
    ``expected`` names and shapes: each tensor of another shape, each missing, each unexpected, in that order."""
    wrong = [f"tensor {k!r}: expected shape {list(shape)}, found {_shape(state[k])}"
             for k, shape in expected.items() if k in state and shape is not None
             and not (torch.is_tensor(state[k]) and tuple(state[k].shape) == shape)]
    missing = [f"tensor {k!r} (shape {list(shape) if shape is not None else '-'}) is missing"
               for k, shape in expected.items() if k not in state]
    unexpected = [f"tensor {k!r} (shape {_shape(v)}) is not one of the model's" for k, v in state.items()
                  if k not in expected]
    return wrong + missing + unexpected


def resume_misfit(path: Path, ckpt: Mapping[str, Any], spec: BenchmarkSpec, objective: str, train_ds: Any,
                  context: Mapping[str, Any] | None = None) -> str | None:
    """Why the cell of ``spec`` / ``objective`` (whose train split is ``train_ds``: the input sizes and class count
    its model is built for) cannot continue from ``ckpt`` (``path`` as :func:`~fusebench.engine.cell.load_checkpoint`
    returned it, its configuration passed by :func:`~fusebench.engine.cell.check_checkpoint_config`): one line
    naming the file, the state, the tensors and expected vs found shape, and what to do; None when every module
    state it holds has the names and shapes of the cell's. The objective's hyper-parameters are those the
    checkpoint was written at (``hparam_choice``), else the context's frozen choice, else the spec's."""
    from fusebench.spec.request import objective_hparams

    phase = ckpt["phase"]
    hparams = objective_hparams(spec, objective, context)
    if isinstance(ckpt.get("hparam_choice"), dict):  # the point it was written at (the run refuses any other)
        hparams = {**hparams, **ckpt["hparam_choice"]}
    expected = expected_shapes(spec, objective, train_ds, phase, hparams)
    for key in STATE_KEYS[phase]:
        problems = state_misfits(ckpt[key], expected)
        if not problems:
            continue
        more = f"; and {len(problems) - SHOWN} more" if len(problems) > SHOWN else ""
        built = "task model" if phase == "downstream" else "pretrainer (task model, projection heads, objective)"
        return (f"cannot resume {path}: its {key!r} state does not fit the {built} this run builds for "
                f"{spec.name}/{objective} (encoder {spec.encoder.id!r}): {'; '.join(problems[:SHOWN])}{more}; it was "
                f"written by other code (an encoder, head or objective whose parameters changed since, another "
                f"fusebench version) or edited; the file was left as it is: delete it to start the cell over, or run "
                f"into another --out (every cell with a last.pt resumes from it, with or without --resume)")
    return None


__all__ = ["STATE_KEYS", "expected_shapes", "resume_misfit", "state_misfits"]
