"""Pipelines (``fusebench.pipelines``): what one cell of a benchmark runs, and what the runner asks of it.

A benchmark spec names its pipeline (``pipeline:``, default ``standard``). The runner never branches
on that id: it looks the pipeline up here (:func:`pipeline_of`) and reads what the entry declares:

* :meth:`Pipeline.run_cell`: run one (benchmark, objective, seed) cell and write its ``run.json``;
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
* :attr:`Pipeline.precisions`: the precision policies (``precision:``, :mod:`fusebench.training.precision`)
  the pipeline applies; another one is refused when the spec is loaded.

Built-ins: ``standard`` (dataset adapter -> encoder -> pretraining -> downstream protocol,
:mod:`fusebench.training.standard`) and ``gaussian_mi`` (the poly-view Gaussian MI experiment on
closed-form synthetic views, :mod:`fusebench.training.gaussian_mi`). Pipelines are registered like
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

from typing import Any, ClassVar

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
    #: the precision policies the cell applies (fusebench.training.precision); others are refused at spec load
    precisions: ClassVar[tuple[str, ...]] = ("32",)

    def run_cell(self, request: Any, options: Any, context: dict[str, Any],
                 trackers: Any) -> dict[str, Any]:  # pragma: no cover - abstract
        """Run the cell ``request`` (a :class:`fusebench.training.request.CellRequest`; its folder is
        ``request.cell``) as ``options`` (:class:`~fusebench.training.request.RunOptions`) say, write its
        ``run.json`` and return the record. ``context``: what the sweep measured once (git state, data
        fingerprint, the hyper-parameters chosen on validation); ``trackers``: the cell's experiment trackers."""
        raise NotImplementedError

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

    def run_cell(self, request: Any, options: Any, context: dict[str, Any], trackers: Any) -> dict[str, Any]:
        from fusebench.training.standard import run_standard_cell

        return run_standard_cell(request, options, context, trackers)

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

    def run_cell(self, request: Any, options: Any, context: dict[str, Any], trackers: Any) -> dict[str, Any]:
        from fusebench.training import precision
        from fusebench.training.gaussian_mi import run_gaussian_mi

        with precision.backend_flags(precision.get(request.spec.precision)):  # float32: TF32 off on CUDA
            return run_gaussian_mi(request, device=options.device, progress=options.progress, context=context)

    def spec_problems(self, spec: Any) -> list[str]:  # bad study options fail when the spec loads
        from fusebench.training.gaussian_mi import options_problems

        return [*super().spec_problems(spec), *options_problems(spec.options)]

    def view_counts(self, spec: Any) -> list[int]:
        """One count per multiplicity ``options.multiplicities`` (default [2])."""
        return [int(m) for m in spec.options.get("multiplicities", [2])]

    def objective_problem(self, spec: Any, objective: str, cls: Any) -> str | None:
        kind = getattr(cls, "input_kind", "views")
        if kind != "views":
            return f"{spec.name}: objective {objective!r} ({kind} inputs) does not fit the Gaussian MI experiment"
        return None


def pipeline_of(spec: Any) -> Pipeline:
    """The pipeline ``spec`` names (``spec.pipeline``; an unknown id lists the valid ones)."""
    return PIPELINES.build(spec.pipeline)


def available(pattern: str | None = None) -> list[str]:
    return PIPELINES.available(pattern)


__all__ = ["PIPELINES", "GaussianMIPipeline", "Pipeline", "StandardPipeline", "available", "pipeline_of"]
