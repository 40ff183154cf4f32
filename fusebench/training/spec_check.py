"""Loading a benchmark spec (components layer): :func:`load_spec` reads it (:func:`fusebench.training.config.read_spec`:
keys, types, ranges) and checks it against the components it names (:func:`check_against_components`):
what its pipeline requires of it, the precision policies the pipeline applies, and every option of the
dataset adapter, the encoder, the objectives (``pretrain.hparams`` / ``pretrain.grid``) and the
pretraining methods -- all before any data is read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fusebench import datasets as fb_datasets
from fusebench import encoders, objectives
from fusebench.datasets.errors import DatasetError
from fusebench.options import OptionsError, check_options
from fusebench.pipelines import PIPELINES, pipeline_of
from fusebench.registry import UnknownNameError
from fusebench.tasks import TASKS
from fusebench.training.config import BenchmarkSpec, ConfigError, read_spec
from fusebench.training.methods import check_methods, split_method_keys, with_method_options
from fusebench.training.protocols import PROTOCOLS, EmbeddingEval, missing_view_problems, protocol_of


def load_spec(path: str | Path, overrides: dict[str, Any] | None = None, synthetic: bool = False) -> BenchmarkSpec:
    """Load and validate a YAML spec; apply the synthetic overrides (if ``synthetic``) then ``overrides``."""
    spec = read_spec(path, overrides=overrides, synthetic=synthetic)
    check_against_components(spec, str(path))
    return spec


def check_against_components(spec: BenchmarkSpec, source: str) -> None:
    """What the spec's pipeline asks of it (``spec_problems``, its precision policies), then
    :func:`check_component_options`; one :class:`ConfigError` naming ``source``."""
    if spec.pipeline not in PIPELINES:
        raise ConfigError(f"{source}: pipeline {spec.pipeline!r} is not registered; valid pipeline ids: "
                          f"{', '.join(PIPELINES.available())}")
    pipeline = pipeline_of(spec)
    problems = pipeline.spec_problems(spec)
    if pipeline.downstream:
        problems += protocol_problems(spec)
    if spec.precision not in pipeline.precisions:
        problems = [*problems, f"precision {spec.precision!r}: the {spec.pipeline!r} pipeline applies only "
                               f"{', '.join(pipeline.precisions)}"]
    if problems:
        raise ConfigError(f"{source}: " + "; ".join(problems))
    check_component_options(spec, source)


def protocol_problems(spec: BenchmarkSpec) -> list[str]:
    """``downstream.protocol`` is a registered protocol, and the options it reads from the spec
    (``options.<options_key>``) are ones it declares."""
    if spec.downstream.protocol not in PROTOCOLS:
        return [f"downstream.protocol {spec.downstream.protocol!r} is not a registered protocol; valid: "
                f"{', '.join(PROTOCOLS.available())}"]
    protocol = protocol_of(spec)
    if protocol.frozen_features and protocol is not EmbeddingEval and spec.pipeline == "standard":
        return [f"downstream.protocol {spec.downstream.protocol!r} scores frozen features, which the standard "
                f"pipeline does only with embedding_eval's probes; give the protocol its own pipeline"]
    given = spec.options.get(protocol.options_key) if protocol.options_key else None
    if given is None:
        return missing_view_problems(spec, _views_known_now(spec))
    if not isinstance(given, dict):
        return [f"options.{protocol.options_key}: expected a mapping of option names to values, got {given!r}"]
    unknown = sorted(set(given) - set(protocol.options))
    if unknown:
        return [f"options.{protocol.options_key}: unknown option(s) {unknown}; the {spec.downstream.protocol} "
                f"protocol takes {', '.join(protocol.options)}"]
    return missing_view_problems(spec, _views_known_now(spec))


def _views_known_now(spec: BenchmarkSpec) -> int | None:
    """The view count k when the spec alone says it (``dataset.modalities``, or an adapter whose views are
    not read from its file); None otherwise: the runner checks the missing-view rates once the data says k
    (:func:`fusebench.training.compat.check_compatible`)."""
    if spec.dataset.modalities:
        return len(spec.dataset.modalities)
    if spec.dataset.id not in fb_datasets.DATASETS:
        return None
    adapter = fb_datasets.DATASETS.get(spec.dataset.id)
    return None if getattr(adapter, "VIEWS_FROM_DATA", False) else len(adapter.MODALITIES)


def check_component_options(spec: BenchmarkSpec, source: str) -> None:
    """Check ``dataset.options``, ``encoder.config``, ``pretrain.hparams``, ``pretrain.grid`` and
    ``pretrain.methods`` (whose entries become each method's typed ``Options``) against the options
    each component declares (:mod:`fusebench.options`), before any data is read: a
    :class:`ConfigError` (a :class:`~fusebench.datasets.base.DatasetError` for ``dataset.options``)
    naming the spec, the key, the valid options and the closest match. An unknown objective id in
    ``pretrain.hparams`` / ``pretrain.grid`` is an error too (its settings would be silently unused)."""
    try:
        spec.pretrain.methods = check_methods(spec.pretrain.methods)
    except ConfigError as e:
        raise ConfigError(f"{source}: {e}") from None

    def _get(registry, name: str, key: str):
        try:
            return registry.get(name)
        except UnknownNameError as e:
            raise ConfigError(f"{source}: {key}: {e}") from None

    try:
        # a dataset or encoder id that is not registered here may come from a plugin installed elsewhere:
        # the spec still loads (listing it works) and the run stops at that id with the valid ids
        pipeline = pipeline_of(spec)
        if pipeline.reads_dataset and spec.dataset.id in fb_datasets.DATASETS:
            adapter = fb_datasets.DATASETS.get(spec.dataset.id)
            try:
                check_options(spec.dataset.options, adapter, f"{source}: dataset.options, adapter {spec.dataset.id}")
            except OptionsError as e:  # the error the adapter itself would raise, only earlier
                raise DatasetError(str(e)) from None
            if adapter.task in TASKS:  # the dataset's task says which metrics it can report
                try:
                    TASKS.get(adapter.task).describe_metrics(spec.metrics, spec.downstream.protocol)
                except ValueError as e:
                    raise ConfigError(f"{source}: metrics: {e}") from None
        if pipeline.builds_encoder and spec.encoder.id in encoders.ENCODERS:
            encoder = encoders.ENCODERS.get(spec.encoder.id)
            check_options(spec.encoder.config, encoder, f"{source}: encoder.config ({spec.encoder.id})")
        for name, hp in spec.pretrain.hparams.items():
            check_options(hp, _get(objectives.OBJECTIVES, name, "pretrain.hparams"), f"{source}: pretrain.hparams.{name}")
        for name, grid in spec.pretrain.grid.items():
            obj = _get(objectives.OBJECTIVES, name, "pretrain.grid")
            if not isinstance(grid, dict) or not all(isinstance(v, list) and v for v in grid.values()):
                raise ConfigError(f"{source}: pretrain.grid.{name}: expected a mapping of option names to non-empty "
                                  f"lists of values, got {grid!r}")
            where = f"{source}: pretrain.grid.{name}"
            own, _ = split_method_keys(grid, where)  # methods.<id>.<option> keys search a method's option
            check_options(own, obj, where, values=False)
            for key, vals in grid.items():
                for v in vals:
                    kw, meth = split_method_keys({key: v}, where)
                    check_options(kw, obj, where)
                    with_method_options(spec.pretrain, meth, where)
    except OptionsError as e:
        raise ConfigError(str(e)) from None


__all__ = ["check_against_components", "check_component_options", "load_spec", "protocol_problems"]
