"""The k-views study: do pretrained multi-view objectives gain from more views, beyond what the views add?

The poly-view papers (M3G Sec. 5, MV-InfoNCE / MV-DHEL, poly-view contrastive learning) claim that
objectives built for k >= 3 views gain from each added view. Rerunning a benchmark with k of its views
cannot show that by itself: every added view also adds input information, so the random-init ``none``
row and the ``raw`` row (the standardised views concatenated) rise too. The study therefore reports
**paired gaps** to those rows, in two arms (docs/kviews.md has the design and its reasons):

* arm ``views`` (more views = more information): for each draw j = 0..``subsets``-1 one seeded
  permutation ``pi_j = numpy.random.default_rng([subset_seed, j]).permutation(V)`` of the V views;
  the subset for k is ``sorted(pi_j[:k])``, so the subsets of one draw are nested (k's contains
  k-1's). A draw whose k-subset equals an earlier draw's is not run again (its cells would be the
  same runs): the statistics count distinct view sets x seeds (``n`` in the tables);
* arm ``copies`` (the information-fixed control of the poly-view claim itself): k augmented copies
  of the same base view(s) (dataset option ``view_copies``, datasets/multiview_mat/copies.py: per
  copy and sample a fixed Gaussian noise of std ``noise`` x the feature's train std and feature
  masking with probability ``mask``); draw j uses the augmentation seed ``subset_seed + j`` and the
  same base for every k, so the copies are nested in k as well.

Every (arm, k, draw) is the benchmark with ``name = <benchmark>-kv-<arm>-k<k>d<j>``, run for the same
rows (``raw``, ``none`` and the pretrained objectives) and seeds, and a **matched budget**: one batch
size and number of epochs for every pretrained objective and every k (``pretrain.batch_size``,
``pretrain.epochs``; the spec's per-objective batch / epoch exceptions are cleared), so every
pretrained cell takes the same optimiser steps and sees the same samples; M3G, whose loss costs n^k,
computes it on micro-batches of ``m3g_micro_batch`` samples accumulated over the common batch
(``pretrain.per_objective.m3g.micro_batch``) at every k, so its curve has no change of chunk size in it. Each
objective's hyper-parameters are chosen once on validation, in the **selection cell** (:func:`selection_cell`: the
largest k of the first arm, draw 0 -- the full view set), over the benchmark's grids and selection seeds at the
study's budget, and every other cell runs at that choice with no grid (:func:`chosen_overrides`; ``select=False``:
the spec's default tau / eps everywhere, no search). The cell's
draw, its permutation (arm ``views``) or base and augmentation (arm ``copies``) are recorded as JSON
in ``config.protocol_notes.kviews`` of each run record, besides ``dataset.options``.

For an objective o, a metric m, an arm, k and a reference row r in {``none``, ``raw``}, the gap of
one pair (cell c = a view set or a draw of copies, seed s) is ``m(o, c, s) - m(r, c, s)``: both runs
share the data, the split and the seed. The tables give mean ± sample std (n - 1) over the pairs and
n; the values themselves likewise over the cells x seeds. :func:`render` writes
``<benchmark>-kviews.md`` (the design and budget read back from the records, a summary whose every
number is computed from the runs, the gap tables, the value tables, the cells) and
``<benchmark>-kviews.png`` (the gaps vs k, both arms, both references, both metrics).

``fusebench study kviews --data-root DIR`` runs and renders: the run records go to ``--out`` (default:
the repository's ``leaderboards/runs-kviews``, found beside the package), the table and plot to
``--board`` (default: the repository's ``leaderboards/``); cells that already have a run record are
reused; the command says how many were reused, run and failed and where the board was written (on
stderr; stdout keeps one JSON line ``{"markdown": ..., "plot": ...}`` for scripts).

Compute (measured on the 2-core development machine, docs/kviews.md): the default study on
``mv-handwritten`` (13 view sets + 15 copies cells, x 7 rows x 3 seeds = 588 runs) is estimated at
about 20 minutes run alone in one process (two measured samples of 70 runs, one seed x one draw x
k = 2..6 x both arms: 146 s and 141 s of CPU time, about 2 s per run); on a machine shared with other
jobs the wall time grows with their load (the same 70 runs took 281 s and 247 s at a load average of
3-4 on 2 cores, i.e. about 35-40 minutes for the default study). ``--workers 2`` did not help under
that load (each (arm, k, draw) starts its own worker processes).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fusebench.components.rows import BASELINE, RAW, is_reference

OBJECTIVES = (RAW, BASELINE, "infonce_pwe", "mv_infonce", "mv_dhel", "pvc_geometric", "m3g")
#: the reference rows the study's gaps are paired with
PAIRED_WITH = (BASELINE, RAW)
ARMS = ("views", "copies")
#: the metrics the board shows, the first the primary (the boards' primary since issue #30: the 1-shot accuracy of
#: the row's few-shot probe, logistic or prototype, chosen on validation); a metric its records lack is not shown
#: (records of the first design hold ``acc`` and ``cluster_acc`` only)
METRICS = (("fs1_best_acc", "1-shot test accuracy (the row's few-shot probe)"), ("acc", "test accuracy (linear probe)"),
           ("cluster_acc", "clustering accuracy (k-means)"))
PRIMARY = METRICS[0][0]
#: the study's default budget on the real data and on a synthetic twin (``synthetic=True``): the 1-shot probes of
#: the boards (20 draws, logistic and prototype), the full linear probe and k-means; no kNN probe
BUDGET = {"real": {"batch_size": 128, "epochs": 10,
                   "eval": {"l2_grid": [0.0001, 0.001, 0.01, 0.1, 1.0], "cluster_on": "all", "n_init": 10,
                            "fewshot_shots": [1], "fewshot_draws": 20, "knn_grid": []}},
          "synthetic": {"batch_size": 8, "epochs": 1,
                        "eval": {"l2_grid": [1.0], "cluster_on": "all", "n_init": 2, "fewshot_shots": [1],
                                 "fewshot_draws": 2, "knn_grid": []}}}
#: the base view(s) of the copies arm per benchmark (other benchmarks: view 0); mv-handwritten's view 1 is
#: the 76 Fourier coefficients, a mid-strength view (a linear probe on it alone is far from saturated)
COPIES_BASE = {"mv-handwritten": [1]}
COPIES_NOISE, COPIES_MASK = 0.5, 0.3
#: a study cell's benchmark name: ``<benchmark>-kv-<arm>-k<k>d<draw>``
CELL_NAME = re.compile(r"^(?P<bench>.+)-kv-(?P<arm>views|copies)-k(?P<k>\d+)d(?P<draw>\d+)$")
LEGACY_CELL_NAME = re.compile(r"^.+-k\d+s\d+$")  # the superseded design's cells (one subset per k, not nested)


# ---------------------------------------------------------------------------------------------
# the cells
# ---------------------------------------------------------------------------------------------
def view_permutation(num_views: int, draw: int, subset_seed: int = 0) -> list[int]:
    """The view order of draw ``draw``: ``numpy.random.default_rng([subset_seed, draw]).permutation(num_views)``."""
    if num_views < 2:
        raise ValueError(f"kviews: num_views={num_views} must be >= 2")
    if draw < 0 or subset_seed < 0:
        raise ValueError(f"kviews: draw={draw} and subset_seed={subset_seed} must be >= 0")
    return [int(v) for v in np.random.default_rng([int(subset_seed), int(draw)]).permutation(int(num_views))]


@dataclass(frozen=True)
class Cell:
    """One (arm, k, draw) of the study: its run name and what it reads. ``views``: the sorted view
    subset (arm ``views``) or the base view(s) (arm ``copies``); ``permutation``: the draw's view
    order (arm ``views``); ``copies``: the ``view_copies`` option (arm ``copies``)."""

    arm: str
    k: int
    draw: int
    name: str
    views: list[int]
    permutation: list[int] = field(default_factory=list)
    copies: dict[str, Any] = field(default_factory=dict)

    def dataset_override(self) -> tuple[str, Any]:
        if self.arm == "views":
            return "dataset.options.views", list(self.views)
        return "dataset.options.view_copies", dict(self.copies)

    def note(self, subset_seed: int) -> str:
        """The cell's provenance as one JSON line (``protocol_notes.kviews`` of its records)."""
        if self.arm == "views":
            what = {"arm": "views", "k": self.k, "draw": self.draw, "subset_seed": subset_seed,
                    "permutation": self.permutation, "views": self.views,
                    "rule": "views = sorted(permutation[:k]); permutation = numpy.random.default_rng("
                            "[subset_seed, draw]).permutation(V)"}
        else:
            what = {"arm": "copies", "k": self.k, "draw": self.draw, "view_copies": self.copies,
                    "rule": "k augmented copies of the base view(s); augmentation seed = subset_seed + draw"}
        return json.dumps(what, sort_keys=True)


def study_cells(benchmark: str, num_views: int, ks: list[int], subsets: int, subset_seed: int = 0,
                arms: tuple[str, ...] = ARMS, copies_base: list[int] | None = None, noise: float = COPIES_NOISE,
                mask: float = COPIES_MASK) -> list[Cell]:
    """Every cell of the study, in run order (arm, k, draw). Arm ``views``: draw j's k-subset is
    ``sorted(view_permutation(num_views, j, subset_seed)[:k])``; a subset already drawn at this k by an
    earlier draw is left out. Arm ``copies``: ``view_copies = {base: copies_base, copies: k, noise,
    mask, seed: subset_seed + j}`` for every draw j."""
    if not isinstance(subsets, int) or isinstance(subsets, bool) or subsets < 1:
        raise ValueError(f"kviews: subsets={subsets!r} must be an integer >= 1 (draws per k)")
    bad = [a for a in arms if a not in ARMS]
    if bad or not arms:
        raise ValueError(f"kviews: arms={list(arms)!r} must be a non-empty subset of {list(ARMS)}")
    for k in ks:
        if not isinstance(k, int) or isinstance(k, bool) or not 2 <= k <= num_views:
            raise ValueError(f"kviews: k = {k!r} is outside 2..{num_views} (the views of {benchmark})")
    ks = sorted(set(ks))
    base = list(copies_base) if copies_base is not None else list(COPIES_BASE.get(benchmark, [0]))
    if not base or not all(isinstance(v, int) and 0 <= v < num_views for v in base) or len(set(base)) != len(base):
        raise ValueError(f"kviews: copies_base={base!r} must be distinct view indices in 0..{num_views - 1}")
    perms = [view_permutation(num_views, j, subset_seed) for j in range(subsets)]
    cells = []
    for arm in ARMS:
        if arm not in arms:
            continue
        for k in ks:
            seen: set[tuple[int, ...]] = set()
            for j in range(subsets):
                name = f"{benchmark}-kv-{arm}-k{k}d{j}"
                if arm == "views":
                    views = sorted(perms[j][:k])
                    if tuple(views) in seen:
                        continue
                    seen.add(tuple(views))
                    cells.append(Cell(arm, k, j, name, views, permutation=perms[j]))
                else:
                    cells.append(Cell(arm, k, j, name, list(base), copies={
                        "base": list(base), "copies": k, "noise": float(noise), "mask": float(mask),
                        "seed": int(subset_seed) + j}))
    return cells


def study_overrides(cell: Cell, objectives: list[str], batch_size: int, epochs: int, m3g_micro_batch: int,
                    eval_options: dict[str, Any], subset_seed: int = 0,
                    notes: dict[str, str] | None = None) -> dict[str, Any]:
    """The spec overrides of one cell: its name and data (``dataset.options.views`` or
    ``dataset.options.view_copies``), the matched budget (every objective: ``batch_size`` x ``epochs``;
    per-objective batch / epoch exceptions cleared; M3G's loss on micro-batches of ``m3g_micro_batch``),
    no hyper-parameter grid, the probe / k-means settings ``eval_options``, the metrics the study reads,
    and the protocol notes (``notes`` from the spec, e.g. its data and split lines, plus the study's: its ``hparams``
    note says the spec's hyper-parameters are used at every k). The selection cell (:func:`selection_overrides`) and
    the cells that use its choice (:func:`chosen_overrides`) start from these and say so in that note."""
    key, value = cell.dataset_override()
    grid = ", ".join(f"{v:g}" for v in eval_options.get("l2_grid", []))
    own = {
        "budget": (f"every pretrained row and every k: batch {batch_size}, {epochs} epochs of the training split (the "
                   f"same optimiser steps and samples seen); M3G computes its loss on micro-batches of "
                   f"{m3g_micro_batch} accumulated over the batch of {batch_size} (its n^k cost), at every k"),
        "hparams": "no per-k search: the spec's default hyper-parameters (pretrain.hparams) at every k",
        "probe": (f"multinomial logistic regression on the frozen concatenated per-view embeddings (z-scored on "
                  f"train), L2 weight chosen on val from [{grid}], test scored once; 1-shot probes: one labelled "
                  f"training sample per class, {eval_options.get('fewshot_draws')} seeded draws, each scored by a "
                  f"logistic probe and by a nearest-prototype probe (SimpleShot), the row's number from the one with "
                  f"the higher validation accuracy (fs1_best_acc, the primary metric); the probes' input width grows "
                  f"with k (the encoder's num_features per view for the encoder rows, the input views' widths for "
                  f"raw)"),
        "clustering": (f"k-means++ ({eval_options.get('n_init')} restarts) on the z-scored embeddings of "
                       f"{eval_options.get('cluster_on', 'all')} samples; clustering accuracy by Hungarian matching"),
        "kviews": cell.note(subset_seed),
    }
    return {
        "name": cell.name,
        key: value,
        "objectives": list(objectives),
        "pretrain.grid": {},
        "pretrain.selection_seeds": [],
        "pretrain.batch_size": int(batch_size),
        "pretrain.epochs": int(epochs),
        "pretrain.objective_batch_size": {},
        "pretrain.objective_epochs": {},
        "pretrain.objective_micro_batch": {"m3g": int(m3g_micro_batch)},
        "metrics": [PRIMARY, "fs1_acc", "fs1_proto_acc", "acc", "mf1", "cluster_acc", "nmi", "ari"],
        "selection_metric": PRIMARY,
        "comparison": {"reference": "none", "primary": PRIMARY,
                       "why": "k-views study: paired gaps to the none and raw rows per k (docs/kviews.md)"},
        "options.embedding_eval": dict(eval_options),
        "protocol_notes": {**(notes or {}), **own},
    }


#: the protocol note of the cell whose selection every other cell uses
SELECTION_NOTE = ("each objective with a grid: chosen once on validation in this cell (the largest k of the study's "
                  "first arm, first draw, at the study's budget): the grid point with the best mean validation "
                  "{metric} over the spec's selection seeds and grids (the records' hparam_selection); every other "
                  "cell of the study uses the same values (an objective without a grid: the spec's values)")


def selection_overrides(overrides: dict[str, Any], extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The selection cell's overrides: ``overrides`` (:func:`study_overrides`) without the cleared grid and
    selection seeds, so the benchmark's own grids and selection seeds apply (``extra`` last, e.g. a test's smaller
    grid), and the note that its choice is every cell's."""
    out = {k: v for k, v in overrides.items() if k not in ("pretrain.grid", "pretrain.selection_seeds")}
    notes = dict(out["protocol_notes"], hparams=SELECTION_NOTE.format(metric=out["selection_metric"]))
    return {**out, "protocol_notes": notes, **(extra or {})}


def chosen_overrides(overrides: dict[str, Any], extra: dict[str, Any] | None, hparams: dict[str, dict[str, Any]],
                     where: str) -> dict[str, Any]:
    """A cell's overrides when the study selected (every cell but the selection cell): ``overrides``, ``extra``
    (but its grids and selection seeds: the selection cell's), then no grid and no selection seeds (the selection
    ran once, in cell ``where``) and each objective's
    hyper-parameters ``hparams`` (its spec's with the chosen grid point), recorded in the protocol note ``hparams``
    (text) and in the cell's JSON note ``kviews`` (``hparams_chosen_in``: ``where``; ``hparams_chosen``: the
    objectives chosen there), which the board reads when the selection cell's records are missing."""
    from fusebench.spec.config import GROUPED, grouped_key

    def selects(key: str) -> bool:  # a grid or the selection seeds: the selection cell's, never another cell's
        parts = grouped_key(key).split(".")
        return (key in ("pretrain.grid", "pretrain.selection_seeds", "pretrain.selection_seed")
                or (len(parts) >= 4 and parts[:2] == ["pretrain", GROUPED] and parts[3] == "grid"))

    extra = {k: v for k, v in (extra or {}).items() if not selects(k)}
    shown = "; ".join(f"{o} " + ", ".join(f"{k}={v}" for k, v in sorted(h.items())) for o, h in sorted(hparams.items()))
    cell_note = {**json.loads(overrides["protocol_notes"]["kviews"]), "hparams_chosen_in": where,
                 "hparams_chosen": sorted(hparams)}
    notes = dict(overrides["protocol_notes"], kviews=json.dumps(cell_note, sort_keys=True), hparams=(
        f"chosen once per objective on validation in cell {where} (its _selection/<objective>.json; the best mean "
        f"validation {overrides['selection_metric']} over the spec's selection seeds and grids) and used in every "
        f"cell of the study: {shown or 'no objective has a grid'}"))
    return {**overrides, **extra, "pretrain.grid": {}, "pretrain.selection_seeds": [],
            **{f"pretrain.per_objective.{o}.hparams": dict(h) for o, h in hparams.items()}, "protocol_notes": notes}


@dataclass(frozen=True)
class Study:
    """One k-views study: the cells it runs (the benchmark, the rows, the seeds, the view counts ``ks`` (default
    2..number of views), the draws per k (``subsets``, seeded by ``subset_seed``), the ``arms``, the view copies'
    base views, noise and mask) and the budget every cell gets (``batch_size`` / ``epochs`` / ``eval_options``,
    default :data:`BUDGET` -- ``real``, or ``synthetic`` for a synthetic run -- and M3G's micro-batch);
    ``extra_overrides`` are applied to every cell's spec last (e.g. a test's smaller grid). ``select`` (default):
    each objective's hyper-parameters are chosen once on validation, in the selection cell (the largest k of the
    first arm, first draw: the full view set by default) over the benchmark's grids and selection seeds at the
    study's budget, and used in every other cell; ``select=False``: the spec's default hyper-parameters everywhere."""

    benchmark: str = "mv-handwritten"
    objectives: tuple[str, ...] = OBJECTIVES
    seeds: tuple[int, ...] = (0, 1, 2)
    ks: tuple[int, ...] | None = None
    subsets: int = 3
    subset_seed: int = 0
    arms: tuple[str, ...] = ARMS
    copies_base: tuple[int, ...] | None = None
    noise: float = COPIES_NOISE
    mask: float = COPIES_MASK
    batch_size: int | None = None
    epochs: int | None = None
    m3g_micro_batch: int = 8
    eval_options: dict[str, Any] | None = None
    extra_overrides: dict[str, Any] | None = None
    select: bool = True


def selection_cell(cells: list[Cell]) -> Cell:
    """The cell whose hyper-parameter selection every cell uses: the largest k of the first arm, its first draw
    (arm ``views`` at k = V: the benchmark's full view set)."""
    if not cells:
        raise ValueError("kviews: the study has no cell (no k >= 2 to run: a benchmark of fewer than 2 views, or --k "
                         "empty), so no cell to select hyper-parameters in")
    arm = cells[0].arm
    top = max(c.k for c in cells if c.arm == arm)
    return next(c for c in cells if c.arm == arm and c.k == top)


def chosen_hparams(spec: Any, objectives: list[str], out: str | Path) -> dict[str, dict[str, Any]]:
    """Per objective of ``objectives`` with a grid in the selection cell's ``spec``, its hyper-parameters at the
    choice frozen in ``<out>/<cell>/_selection/<objective>.json`` (a ValueError naming the file when it is not
    there: the cell's records exist without it)."""
    from fusebench.sweep import selection

    out_hp = {}
    for o in objectives:
        if not selection.selects(spec, o):
            continue
        try:
            choice = selection.frozen_choice(spec, o, Path(out))
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ValueError(f"kviews: {selection.selection_path(out, spec.name, o)}: the selection cell's frozen "
                             f"choice of {o} cannot be read ({e}); delete the cell {spec.name} under {out} to select "
                             "again") from None
        out_hp[o] = spec.pretrain.settings(o).at(choice)
    return out_hp


def run_study(study: Study, out: str | Path = "runs-kviews", data_root: str | None = None, *, synthetic: bool = False,
              workers: int = 1, progress: bool = False, counts: dict[str, int] | None = None) -> list[dict[str, Any]]:
    """Run every (arm, k, draw, objective, seed) cell of ``study`` into ``out`` (cells with a run.json are kept);
    returns the run records. ``progress``: announce the cells and their phases; ``counts``, when given, receives
    how many cells were ``reused`` (their record existed), ``run`` and ``failed`` (failed or skipped)."""
    from fusebench import benchmarks
    from fusebench.components import compat
    from fusebench.sweep import runner, selection
    from fusebench.spec.request import cell_dir

    if counts is not None:
        counts.update(reused=0, run=0, failed=0)
    budget = BUDGET["synthetic" if synthetic else "real"]
    benchmark, seeds = study.benchmark, study.seeds
    batch_size = int(study.batch_size if study.batch_size is not None else budget["batch_size"])
    epochs = int(study.epochs if study.epochs is not None else budget["epochs"])
    eval_options = dict(study.eval_options if study.eval_options is not None else budget["eval"])
    from fusebench import objectives as registry

    if epochs < 1:  # a pretrained row of 0 epochs is its random init: the `none` row again
        raise ValueError(f"kviews: epochs={epochs} must be >= 1 (the study compares pretrained rows with `none`)")
    # named by the study's own option, before the spec is loaded with the study's overrides (whose message would blame
    # the spec file and list every override the study makes)
    if batch_size < 2:
        raise ValueError(f"kviews: batch_size={batch_size} must be >= 2 (contrastive losses need negatives)")
    objectives = tuple(study.objectives)
    micro = study.m3g_micro_batch
    if "m3g" in objectives and (not isinstance(micro, int) or isinstance(micro, bool) or micro < 2):
        raise ValueError(f"kviews: m3g_micro_batch={micro!r} must be an integer >= 2 (the samples of each chunk of "
                         f"M3G's loss)")
    for o in objectives:  # an unknown id first (one error with the closest match), before the rows the study needs
        if not is_reference(o):
            registry.OBJECTIVES.get(o)
    if not set(PAIRED_WITH) <= set(objectives) or not [o for o in objectives if not is_reference(o)]:
        raise ValueError(f"kviews: objectives={list(objectives)!r} must include the reference rows 'none' and 'raw' "
                         "(the gaps are paired with them) and at least one pretrained objective")
    others = [o for o in objectives if is_reference(o) and o not in PAIRED_WITH]
    if others:  # the board pairs every other row with them as a pretrained row (its width, its hyper-parameters)
        raise ValueError(f"kviews: objectives={list(objectives)!r}: the study pairs pretrained objectives with the "
                         f"reference rows {list(PAIRED_WITH)}; the other reference row(s) {others} are not part of it "
                         "(run them on the benchmark's own board)")

    spec = benchmarks.load(benchmark, synthetic=synthetic)
    from fusebench import datasets

    adapter_options = getattr(datasets.get(spec.dataset.id), "OPTIONS", frozenset())
    needed = {"views"} | ({"view_copies"} if "copies" in study.arms else set())
    if spec.downstream.protocol != "embedding_eval" or not needed <= set(adapter_options):
        raise ValueError(f"kviews: benchmark {benchmark!r} cannot be studied: the study subsets and copies views "
                         f"through the dataset options {sorted(needed)} and scores frozen embeddings "
                         f"(downstream.protocol embedding_eval), and {benchmark!r} has dataset "
                         f"{spec.dataset.id!r} and protocol {spec.downstream.protocol!r}; study a multi-view .mat "
                         "benchmark (mv-*, or multiview with --data-root)")
    runner.resolve_views(spec, synthetic, data_root)
    num_views = len(spec.dataset.modalities or [])
    notes = {k: v for k, v in spec.protocol_notes.items() if k in ("data", "splits")}
    ks = list(study.ks or range(2, num_views + 1))
    records = []
    copies_base = list(study.copies_base) if study.copies_base is not None else None
    # every variant's spec loaded and its views read before the first cell runs: a bad option of the copies arm
    # (noise, mask) stops the study before any work, not after the whole views arm
    plan = []
    cells = study_cells(benchmark, num_views, ks, study.subsets, study.subset_seed, study.arms, copies_base,
                        study.noise, study.mask)
    chooser = selection_cell(cells) if study.select else None
    for cell in cells:
        base = study_overrides(cell, list(objectives), batch_size, epochs, study.m3g_micro_batch, eval_options,
                               study.subset_seed, notes)
        overrides = (selection_overrides(base, study.extra_overrides) if cell is chooser else
                     chosen_overrides(base, study.extra_overrides, {}, chooser.name) if chooser else
                     {**base, **(study.extra_overrides or {})})
        cell_spec = benchmarks.load(benchmark, overrides=overrides, synthetic=synthetic)
        runner.resolve_views(cell_spec, synthetic, data_root)
        compatible = set(compat.compatible_objectives(cell_spec))
        objs = [o for o in objectives if is_reference(o) or o in compatible]
        plan.append((cell, base, overrides, objs))
        if cell is chooser:
            chooser_spec = cell_spec
        elif chooser is not None:
            # a grid is the selection cell's alone: one left in another cell (given in a nested form of the extra
            # overrides, which chosen_overrides does not clear) would be refused by that cell, after the work before it
            gridded = [o for o in objs if selection.selects(cell_spec, o)]
            if gridded:
                raise ValueError(f"kviews: the extra overrides leave a grid for {', '.join(gridded)} in cell "
                                 f"{cell.name}, which only the selection cell {chooser.name} searches; give grids "
                                 f"as flat keys (pretrain.per_objective.<id>.grid.<key> or pretrain.grid)")
    plan.sort(key=lambda p: p[0] is not chooser)  # the selection cell first: every other cell uses its choice
    if chooser is not None:  # an objective with a grid must be selected in the selection cell, else it is run unselected
        selected = set(plan[0][3])
        unselected = sorted({o for _, _, _, objs in plan[1:] for o in objs
                             if o not in selected and selection.selects(chooser_spec, o)})
        if unselected:
            raise ValueError(f"kviews: {', '.join(unselected)} cannot run in the selection cell {chooser.name} (not "
                             f"compatible with its views), so its grid would not be searched; leave it out "
                             f"(--objective ...) or run the study with --no-select")
    hparams: dict[str, dict[str, Any]] = {}
    for cell, base, overrides, objs in plan:
        if chooser is not None and cell is not chooser:
            overrides = chosen_overrides(base, study.extra_overrides, {o: hparams[o] for o in objs if o in hparams},
                                         chooser.name)
        existed = {(o, s) for o in objs for s in seeds
                   if (cell_dir(Path(out), cell.name, o, s) / "run.json").exists()}
        got = runner.run(benchmark, objective=objs, seeds=list(seeds), out=out, data_root=data_root,
                            overrides=overrides, progress=progress, synthetic=synthetic, workers=workers)
        if cell is chooser:
            hparams = chosen_hparams(chooser_spec, objs, out)
        if counts is not None:
            for r in got:
                what = ("failed" if r.get("status") in ("failed", "skipped") else
                        "reused" if (r.get("objective"), r.get("seed")) in existed else "run")
                counts[what] += 1
        records += got
    return records


__all__ = ["ARMS", "CELL_NAME", "LEGACY_CELL_NAME", "OBJECTIVES", "Cell", "Study", "chosen_hparams",
           "chosen_overrides", "run_study", "selection_cell", "selection_overrides", "study_cells", "study_overrides",
           "view_permutation"]
