"""Hyper-parameter selection on the validation split (sweep layer): every combination of
``pretrain.grid[objective]`` is run on the selection seeds (never evaluation seeds), the best mean
validation primary metric wins, and the outcome goes into every record of the objective."""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

from fusebench import metrics as M
from fusebench.training import utils
from fusebench.training.config import BenchmarkSpec
from fusebench.training.execute import run_cell
from fusebench.training.progress import say
from fusebench.training.reference_features import REFERENCES
from fusebench.training.request import CellRequest, RunOptions


def trial_name(index: int, combo: dict[str, Any]) -> str:
    """The folder of trial ``index`` of a grid: ``trial<i>-<key><value>-...`` (e.g. ``trial0-tau0.1``), with
    every character other than letters, digits, ``.``, ``_`` and ``-`` replaced by ``_``: grid values come
    from a spec (e.g. a method option that is a string or a list) and must stay one path component."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", f"trial{index}-" + "-".join(f"{k}{v}" for k, v in combo.items()))


def select_hparams(spec: BenchmarkSpec, objective: str, out: Path, options: RunOptions,
                   context: dict[str, Any]) -> dict[str, Any] | None:
    """Choose ``objective``'s hyper-parameters from ``pretrain.grid[objective]`` on the validation split.

    Every combination is run (pretraining + downstream protocol) once per selection seed
    (``pretrain.selection_seeds``, else ``[pretrain.selection_seed]``; none is an evaluation seed); the
    combination with the best *mean validation* primary metric over those seeds wins (ties: the first
    in grid order). Trial records go to ``<out>/.selection/<benchmark>/<objective>/<trial>/`` (one
    seed) or ``<trial>/seed<S>/`` (several) -- a hidden folder the leaderboard does not read; the
    outcome ``{"grid", "seed", "seeds", "metric", "scores", "choice"}`` (each score with its per-seed
    values) is stored beside them in ``selection.json`` and in every run record of the objective."""
    grid = spec.pretrain.grid.get(objective)
    if not grid or objective in REFERENCES:
        return None
    folder = out / ".selection" / spec.name / objective
    names = sorted(grid)
    combos = [dict(zip(names, values)) for values in itertools.product(*(grid[n] for n in names))]
    primary = spec.primary_metric
    sign = 1.0 if M.get(primary).higher_is_better else -1.0
    seeds = spec.selection_seeds
    trial_options = options.but(resume=False, max_steps=None, loggers=(), selection_trial=True)  # not tracked
    progress = options.progress
    scores = []
    for i, combo in enumerate(combos):
        trial = trial_name(i, combo)
        ctx = {**context, "hparams": {**context.get("hparams", {}), objective: combo}}
        if progress:
            shown = " ".join(f"{k}={v}" for k, v in combo.items())
            say(f"selection {spec.name}/{objective} trial {i + 1}/{len(combos)} {shown} "
                f"(seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))})")
        per_seed = {}
        for s in seeds:
            where = folder / trial if len(seeds) == 1 else folder / trial / f"seed{s}"
            rec = run_cell(CellRequest(spec, objective, s, where), trial_options, ctx)
            per_seed[str(s)] = rec["selection"]["val_metrics"][primary]
        mean = sum(per_seed.values()) / len(per_seed)
        scores.append({"hparams": combo, "val": mean, **({"val_by_seed": per_seed} if len(seeds) > 1 else {})})
    best = max(range(len(combos)), key=lambda i: (sign * scores[i]["val"], -i))
    outcome = {"grid": {n: list(grid[n]) for n in names}, "seed": seeds[0],
               **({"seeds": seeds} if len(seeds) > 1 else {}),
               "metric": f"validation {primary}" + (f" (mean over {len(seeds)} selection seeds)" if len(seeds) > 1 else ""),
               "scores": scores, "choice": combos[best]}
    utils.atomic_write_json(folder / "selection.json", outcome)
    return outcome


__all__ = ["select_hparams", "trial_name"]
