"""What is asked of a cell, as two frozen, picklable objects (spec layer).

* :class:`CellRequest`: *which* cell -- the resolved benchmark spec, the objective, the seed, and the
  sweep's output folder. Its :attr:`~CellRequest.cell` is the folder the cell writes.
* :class:`RunOptions`: *how* to run it -- synthetic data or a data root, the device, resume, progress
  output, a step limit (tests of killed runs), experiment trackers, DataLoader workers. None of these enter the config
  hash; they never change a result (the device decides only the ``numerics`` a record reports).

The sweep's ``context`` (measured once per sweep: the checkout's git state, the data fingerprint, the
hyper-parameters chosen on validation) travels beside them as a plain mapping.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping

from fusebench.registry import ID_RULE, valid_id
from fusebench.spec.config import BenchmarkSpec, ConfigError


def check_cell_ids(benchmark: str, objective: str) -> None:
    """A ConfigError unless the benchmark name and the objective id are ids (:data:`~fusebench.registry.ID_RULE`):
    they become folders of the cell (no path escapes) and fields of its record, which the record schema
    checks the same way. Objectives are looked up case-insensitively, so ``M3G`` would otherwise train
    the whole cell and then be refused when its record is written."""
    for what, value in (("benchmark name", benchmark), ("objective", objective)):
        if not valid_id(value):
            hint = f" (did you mean {value.lower()!r}?)" if isinstance(value, str) and valid_id(value.lower()) else ""
            raise ConfigError(f"{what} {value!r} is not an id ({ID_RULE}){hint}")


def cell_dir(out: str | Path, benchmark: str, objective: str, seed: int) -> Path:
    """``<out>/<benchmark>/<objective>/seed<seed>``: the folder of a cell (its record, lock, checkpoints);
    the names are checked first (:func:`check_cell_ids`)."""
    check_cell_ids(benchmark, objective)
    return Path(out) / benchmark / objective / f"seed{seed}"


@dataclass(frozen=True)
class CellRequest:
    """One (benchmark, objective, seed) cell of a sweep writing under ``out``."""

    spec: BenchmarkSpec
    objective: str
    seed: int
    out: Path

    @property
    def cell(self) -> Path:
        """``<out>/<benchmark>/<objective>/seed<seed>``: the cell's folder."""
        return cell_dir(self.out, self.spec.name, self.objective, self.seed)

    @property
    def where(self) -> str:
        """``<benchmark>/<objective>/seed<seed>``, the cell's name in progress lines and messages."""
        return f"{self.spec.name}/{self.objective}/seed{self.seed}"


@dataclass(frozen=True)
class RunOptions:
    """How cells run; nothing here changes a result."""

    synthetic: bool = False
    data_root: str | None = None
    device: str = "auto"
    resume: bool = False
    progress: bool = True
    max_steps: int | None = None  # stop after this many optimisation steps in all (tests of killed runs)
    loggers: tuple[str, ...] = ()  # experiment tracker ids (fusebench.engine.trackers)
    mlflow_uri: str | None = None
    # DataLoader worker processes of each cell (fusebench run --num-workers), over the spec's loader.num_workers;
    # None: the spec's, else auto. The batches are the same whatever it is (fusebench/engine/data.py)
    num_workers: int | None = None
    # a hyper-parameter selection trial (fusebench.sweep.selection): scored by its validation metric alone,
    # so the evaluations only the board reads (missing-view robustness) are skipped
    selection_trial: bool = False
    # intra-op threads of each cell (fusebench run --threads); None: OMP_NUM_THREADS, else the rule of
    # fusebench.engine.threads (1 for a small model, else the cell's share of the CPUs); results do not depend on it
    threads: int | None = None
    # how many cells run at once on this machine (--workers): they share its CPUs (fusebench.engine.threads)
    cells_at_once: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "loggers", tuple(self.loggers or ()))
        for name in ("threads", "cells_at_once"):
            value = getattr(self, name)
            if (value is not None or name == "cells_at_once") and (type(value) is not int or value < 1):
                raise ValueError(f"--{'threads' if name == 'threads' else 'workers'}: expected a positive integer, "
                                 f"got {value!r}")
        if self.num_workers is not None and (type(self.num_workers) is not int or self.num_workers < 0):
            raise ValueError(f"--num-workers: expected an integer >= 0 (DataLoader worker processes per cell), "
                             f"got {self.num_workers!r}")

    def but(self, **changes: Any) -> "RunOptions":
        """A copy with ``changes`` (e.g. ``resume=True`` for a requeued job)."""
        return replace(self, **changes)


@dataclass(frozen=True)
class SweepCells:
    """The cells of one sweep, as a launcher receives them: the resolved spec, the output folder, the
    run options and the sweep's context (filled by hyper-parameter selection before the cells run).
    :meth:`request` names one cell; every launcher runs it as
    ``fusebench.cells.execute.sweep_cell(cells.request(o, s), cells.options, cells.context)``."""

    spec: BenchmarkSpec
    out: Path
    options: RunOptions
    context: Mapping[str, Any]

    def request(self, objective: str, seed: int) -> CellRequest:
        return CellRequest(self.spec, objective, seed, self.out)

    def moved_to(self, out: Path) -> "SweepCells":
        """The same cells under ``out`` (e.g. the resolved folder: a job may start in another one)."""
        return replace(self, out=Path(out))


def objective_hparams(spec: BenchmarkSpec, objective: str, context: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The objective's hyper-parameters: ``pretrain.hparams[objective]`` updated with the values the
    validation search chose (``context["hparams"]``, see :func:`fusebench.sweep.selection.select_hparams`)."""
    return {**spec.pretrain.hparams.get(objective, {}), **((context or {}).get("hparams", {}).get(objective, {}))}


__all__ = ["CellRequest", "RunOptions", "SweepCells", "cell_dir", "check_cell_ids", "objective_hparams"]
