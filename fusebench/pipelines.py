"""Pipelines (``fusebench.pipelines``): what one cell of a benchmark runs, and what the runner asks of it.

A benchmark spec names its pipeline (``pipeline:``, default ``standard``). The runner never branches
on that id: it looks the pipeline up here (:func:`pipeline_of`) and reads what the entry declares:

* :meth:`Pipeline.run_cell` ``(request, options, context, trackers)``: run one (benchmark, objective,
  seed) cell and write its ``run.json``; a built-in pipeline names its cell function by import path
  (:attr:`Pipeline.cell`, ``"module:function"``), imported on the first call (this module imports no
  training code, which sits above it);
* :attr:`Pipeline.reads_dataset`: the cell reads a dataset adapter (``dataset.id``), so the data path
  applies: ``--data-root`` is required unless ``--synthetic``, the data is checked once before the
  first cell, its files are fingerprinted into the records, and views known only from the file
  (``VIEWS_FROM_DATA``) are resolved before the objectives are checked;
* :attr:`Pipeline.downstream`: the downstream protocol (linear probe / fine-tune / embedding_eval)
  scores the spec's ``metrics``, which are then registered metric ids (checked before the sweep,
  their directions recorded), and the reference rows ``none`` / ``raw`` apply;
* :meth:`Pipeline.view_counts` and :meth:`Pipeline.objective_problem`: which objectives fit (each view
  count k must be within the objective's view limits);
* :meth:`Pipeline.dataset_id`: how a record names its data when no adapter was read;
* :attr:`Pipeline.builds_encoder`: the cell builds the spec's registered encoder (``encoder.id``), whose
  options are then checked when the spec is loaded;
* :meth:`Pipeline.spec_problems`: what a spec of this pipeline must also say (checked when it is loaded);
* :attr:`Pipeline.precisions`: the precision policies (``precision:``, :mod:`fusebench.spec.precision`)
  the pipeline applies; another one is refused when the spec is loaded.

Built-ins: ``standard`` (dataset adapter -> encoder -> pretraining -> downstream protocol,
:mod:`fusebench.cells.standard`) and ``gaussian_mi`` (the poly-view Gaussian MI experiment on
closed-form synthetic views, :mod:`fusebench.cells.gaussian_mi`; its option checks,
:func:`gaussian_mi_options_problems`, are here). Pipelines are registered like
every other component (lowercase ids, duplicate ids an error); plugins come through the entry-point
group ``fusebench.pipelines`` (value ``"package.module:PipelineClass"``, a :class:`Pipeline` subclass).

Example::

    >>> from fusebench.pipelines import PIPELINES
    >>> PIPELINES.available()
    ['gaussian_mi', 'standard']
    >>> PIPELINES.meta("gaussian_mi")["reads_dataset"]
    False
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, Mapping

from fusebench.registry import Registry


def _describe(cls: Any) -> dict[str, Any]:
    """Metadata read off a pipeline class: what it declares to the runner."""
    return {key: getattr(cls, key, None) for key in ("reads_dataset", "downstream", "builds_encoder", "precisions")}


PIPELINES = Registry("pipeline", entry_point_group="fusebench.pipelines", describe=_describe)


class Pipeline:
    """A pipeline: :meth:`run_cell` plus the properties the runner reads (see the module docstring)."""

    #: the cell reads a dataset adapter: --data-root / --synthetic, data checks, fingerprint, views from data
    reads_dataset: ClassVar[bool] = True
    #: the downstream protocol scores the spec's (registered) metrics; the 'none' / 'raw' rows apply
    downstream: ClassVar[bool] = True
    #: the cell builds the spec's registered encoder (``encoder.id``, options in ``encoder.config``)
    builds_encoder: ClassVar[bool] = False
    #: the precision policies the cell applies (fusebench.spec.precision); others are refused at spec load
    precisions: ClassVar[tuple[str, ...]] = ("32",)
    #: the keys of the spec's top-level ``options`` the cell reads; any other key (besides ``board`` and the
    #: downstream protocol's ``options_key``) is refused at spec load, naming the closest
    options: ClassVar[tuple[str, ...]] = ()
    #: the spec fields the cell applies (dotted: a section such as ``options``, or one field such as
    #: ``pretrain.lr``) besides :data:`SHARED_FIELDS`; None: every field. A field outside them is refused at
    #: spec load unless it is at its default (:func:`unapplied_settings`), and is no part of a cell's
    #: identity (its config hash: :func:`applied_form`, read by ``fusebench.components.identity.cell_identity``)
    applies: ClassVar[tuple[str, ...] | None] = None

    #: the function that runs this pipeline's cell, ``"module:function"`` with the signature of
    #: :meth:`run_cell`, imported on the first call (None: the subclass implements :meth:`run_cell` itself)
    cell: ClassVar[str | None] = None

    def run_cell(self, request: Any, options: Any, context: dict[str, Any], trackers: Any) -> dict[str, Any]:
        """Run the cell ``request`` (a :class:`fusebench.spec.request.CellRequest`; its folder is
        ``request.cell``) as ``options`` (:class:`~fusebench.spec.request.RunOptions`) say, write its
        ``run.json`` and return the record. ``context``: what the sweep measured once (git state, data
        fingerprint, the hyper-parameters chosen on validation); ``trackers``: the cell's experiment trackers.
        The base calls the function :attr:`cell` names; a subclass may override this method instead."""
        if self.cell is None:  # pragma: no cover - abstract
            raise NotImplementedError(f"{type(self).__name__} names no cell function and does not implement run_cell")
        import importlib

        module, _, function = self.cell.partition(":")
        return getattr(importlib.import_module(module), function)(request, options, context, trackers)

    def view_counts(self, spec: Any) -> list[int]:  # pragma: no cover - abstract
        """The view counts k an objective must accept to run on ``spec``."""
        raise NotImplementedError

    def objective_problem(self, spec: Any, objective: str, cls: Any) -> str | None:
        """Why the objective class ``cls`` does not fit this pipeline beyond its view limits (None: it fits)."""
        return None

    def dataset_id(self, spec: Any) -> str:
        """The record's dataset id when no adapter was read."""
        return spec.dataset.id or spec.pipeline

    def spec_problems(self, spec: Any) -> list[str]:
        """What is missing or inconsistent in ``spec`` for this pipeline (empty: nothing); the spec loader
        reports them as a ConfigError naming the spec file. The base asks for nothing."""
        return []


@PIPELINES.register("standard")
class StandardPipeline(Pipeline):
    """Dataset adapter -> encoder -> pretraining with the objective -> downstream protocol -> metrics."""

    reads_dataset = True
    downstream = True
    builds_encoder = True
    precisions = ("32", "tf32", "bf16-mixed", "16-mixed")
    cell = "fusebench.cells.standard:run_standard_cell"

    def spec_problems(self, spec: Any) -> list[str]:
        """A dataset id, an encoder id and at least one metric (the selection metric among them)."""
        out = []
        if not spec.dataset.id:
            out.append("dataset.id is required")
        if not spec.encoder.id:
            out.append("encoder.id is required")
        if not spec.metrics:
            out.append("metrics must list at least one metric id")
        elif spec.selection_metric and spec.selection_metric not in spec.metrics:
            out.append(f"selection_metric {spec.selection_metric!r} is not in metrics")
        return out

    def view_counts(self, spec: Any) -> list[int]:
        if spec.dataset.modalities:
            return [len(spec.dataset.modalities)]
        from fusebench import datasets

        return [len(datasets.get(spec.dataset.id).MODALITIES)]


@PIPELINES.register("gaussian_mi")
class GaussianMIPipeline(Pipeline):
    """Poly-view Gaussian MI: the objective's MI bound against the closed-form MI, per multiplicity M."""

    reads_dataset = False
    downstream = False
    builds_encoder = False
    cell = "fusebench.cells.gaussian_mi:run_cell"
    options = ("samples_per_batch", "multiplicities", "sigma0", "sigma", "steps_per_epoch", "eval_batches",
               "validity_alpha")  # checked by gaussian_mi_options_problems

    # the cell trains an MLP with AdamW (lr, weight decay) for epochs x options.steps_per_epoch steps on
    # batches of options.samples_per_batch: no dataset, encoder, downstream protocol, pretraining method,
    # loader, speed option, missing views, grid search, schedule or projection head
    applies = ("precision", "options", "pretrain.hparams", "pretrain.epochs", "pretrain.lr", "pretrain.weight_decay")

    def spec_problems(self, spec: Any) -> list[str]:  # bad study options fail when the spec loads
        return [*super().spec_problems(spec), *gaussian_mi_options_problems(spec.options)]

    def view_counts(self, spec: Any) -> list[int]:
        """One count per multiplicity ``options.multiplicities`` (default [2])."""
        return [int(m) for m in spec.options.get("multiplicities", [2])]

    def objective_problem(self, spec: Any, objective: str, cls: Any) -> str | None:
        kind = getattr(cls, "input_kind", "views")
        if kind != "views":
            return f"{spec.name}: objective {objective!r} ({kind} inputs) does not fit the Gaussian MI experiment"
        return None


#: the spec fields of every pipeline: the board's text and columns, the sweep's lists, the override block
#: for ``--synthetic``, how the board compares the rows, the default objective of a run that names none
SHARED_FIELDS: tuple[str, ...] = ("name", "description", "pipeline", "objectives", "seeds", "metrics",
                                  "selection_metric", "selection_metric_why", "protocol_notes", "family", "synthetic",
                                  "comparison", "pretrain.objective")


def _split_applied(node: Mapping[str, Any], applies: tuple[str, ...], prefix: str = "") -> tuple[dict, dict]:
    """(the fields of ``node`` covered by ``applies`` + :data:`SHARED_FIELDS`, the others), recursing into a
    section of which only some fields are applied."""
    keys = (*SHARED_FIELDS, *applies)
    kept: dict[str, Any] = {}
    left: dict[str, Any] = {}
    for key, value in node.items():
        path = f"{prefix}{key}"
        if any(path == k or path.startswith(k + ".") for k in keys):
            kept[key] = value
        elif isinstance(value, Mapping) and any(k.startswith(path + ".") for k in keys):
            kept[key], rest = _split_applied(value, applies, path + ".")
            if rest:
                left[key] = rest
        else:
            left[key] = value
    return kept, left


def applied_form(form: Mapping[str, Any], pipeline: str) -> dict[str, Any]:
    """A spec's canonical form (``BenchmarkSpec.to_dict()``, a record's ``config``) with only the fields the
    pipeline ``pipeline`` applies (:attr:`Pipeline.applies`); ``form`` itself for a pipeline that applies
    every field or that is not registered here (a plugin not installed: nothing is left out)."""
    if not isinstance(pipeline, str) or pipeline not in PIPELINES:
        return dict(form)
    applies = PIPELINES.get(pipeline).applies
    return dict(form) if applies is None else _split_applied(form, tuple(applies))[0]


def _leaves(node: Any, prefix: str) -> dict[str, Any]:
    if isinstance(node, Mapping) and node:
        out: dict[str, Any] = {}
        for k, v in node.items():
            out.update(_leaves(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: node}


def unapplied_settings(pipeline: Pipeline, spec: Any) -> list[str]:
    """The fields of ``spec`` that ``pipeline``'s cell does not apply (:attr:`Pipeline.applies`) and that are
    not at their default, each as one problem naming the dotted key (empty: none). Such a value would be
    recorded and silently not used."""
    from fusebench.spec.config import grouped_key  # keys named as a spec writes them

    applies = type(pipeline).applies
    if applies is None:
        return []
    given = _leaves(_split_applied(spec.to_dict(), tuple(applies))[1], "")
    default = _leaves(_split_applied(type(spec)().to_dict(), tuple(applies))[1], "")
    name = getattr(spec, "pipeline", type(pipeline).__name__)
    differ = {k for k in set(given) | set(default) if given.get(k, _ABSENT) != default.get(k, _ABSENT)}
    out = []
    for key in sorted(k for k in differ if not any(d.startswith(k + ".") for d in differ)):  # {} vs its entries
        fix = "leave it at its default" + (f" {default[key]!r}" if key in default else "")
        out.append(f"{grouped_key(key)} = {given.get(key)!r}: the {name} pipeline does not apply it (of the "
                   f"pipeline-specific fields its cell reads only {', '.join(map(grouped_key, applies))}); {fix}")
    return out


_ABSENT = object()


def pipeline_of(spec: Any) -> Pipeline:
    """The pipeline ``spec`` names (``spec.pipeline``; an unknown id lists the valid ones)."""
    return PIPELINES.build(spec.pipeline)


def available(pattern: str | None = None) -> list[str]:
    return PIPELINES.available(pattern)


#: the level of the one-sided test that flags a Gaussian-MI bound above the true MI (fusebench/cells/gaussian_mi.py)
DEFAULT_VALIDITY_ALPHA = 0.01


def gaussian_mi_options_problems(options: Mapping[str, Any]) -> list[str]:
    """What is wrong with the experiment's ``options`` (empty: nothing); each names the key and what it
    expects."""
    out = []

    def integer(key: str, default: int, low: int) -> None:
        v = options.get(key, default)
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
            out.append(f"options.{key}: expected an integer >= {low}, got {v!r}")

    integer("samples_per_batch", 1024, 2)
    integer("steps_per_epoch", 10, 1)
    integer("eval_batches", 8, 2)
    ms = options.get("multiplicities", [2, 4, 8, 10])
    if (not isinstance(ms, (list, tuple)) or not ms
            or any(isinstance(m, bool) or not isinstance(m, int) or m < 2 for m in ms)):
        out.append(f"options.multiplicities: expected a non-empty list of integers >= 2, got {ms!r}")
    for key, default in (("sigma0", 1.0), ("sigma", 0.5)):
        v = options.get(key, default)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            out.append(f"options.{key}: expected a positive number, got {v!r}")
    a = options.get("validity_alpha", DEFAULT_VALIDITY_ALPHA)
    if isinstance(a, bool) or not isinstance(a, (int, float)) or not 0.0 < a < 1.0:
        out.append(f"options.validity_alpha: expected a level in (0, 1), got {a!r}")
    return out


__all__ = ["DEFAULT_VALIDITY_ALPHA", "PIPELINES", "SHARED_FIELDS", "GaussianMIPipeline", "Pipeline",
           "StandardPipeline", "applied_form", "available", "gaussian_mi_options_problems", "pipeline_of",
           "unapplied_settings"]
