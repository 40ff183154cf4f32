"""The rows of a board as components (``fusebench list rows``).

A benchmark spec's ``objectives:`` lists row ids. Each id is one :class:`Row`, which owns how the row's
representation is made and what the sweep does for it (:func:`row_of`):

* a **pretrained row** (:class:`PretrainedRow`, every objective id): the benchmark's encoders pretrained with
  that objective (its hyper-parameter grid, selection and budget), then scored by the downstream protocol;
* a **weights row** (:class:`WeightsRow`, a name of the spec's ``encoder_weights``): an encoder pretrained
  elsewhere, loaded and scored by the same protocol, nothing pretrained here;
* a **reference row**, registered here by id (:data:`ROWS`, entry-point group ``fusebench.rows``), nothing
  pretrained: ``none`` (:class:`RandomInitRow`: the encoders at random initialisation) and the input-feature
  rows of the frozen-features protocol (:class:`InputFeatureRow`: ``raw``, ``raw_l2``, ``raw_tfidf``,
  ``raw_balanced``, ``raw_pca``; the formulas in :mod:`fusebench.components.reference_features`).

Which reference rows a benchmark may list is its downstream protocol's declaration
(:mod:`fusebench.components.protocols`, ``reference_rows``). This module imports no torch: ``fusebench list
rows`` and the boards read it; the cells ask a row for its model, its features and its compatibility.
"""

from __future__ import annotations

from typing import Any, ClassVar, Mapping

from fusebench.registry import Registry, matching

#: the random-init row, offered by every protocol
BASELINE = "none"
#: the input views concatenated (z-scored by the probes); also a linear-probe row through the identity encoder
RAW = "raw"

ROWS = Registry("row", entry_point_group="fusebench.rows")
#: the row the others are compared with when the benchmark names none (``comparison.reference``): the first of
#: these the sweep (or the board's table) has
DEFAULT_REFERENCES: tuple[str, ...] = (RAW, BASELINE)


class Row:
    """A row of a board: how its representation is made (see the module docstring)."""

    #: what the row's features are (``fusebench list rows``)
    description: ClassVar[str] = ""
    #: the same in a few words, where a board names the row as its reference
    short: ClassVar[str] = ""
    #: a reference row: nothing pretrained, compared with and ranked beside the pretrained rows
    reference: ClassVar[bool] = False
    #: the cell pretrains the encoder with an objective (grid, selection, budget, hyper-parameters)
    pretrains: ClassVar[bool] = False
    #: the objective registry's id the row's cells pretrain with (None: no objective is used)
    objective: str | None = None
    #: where a reference row stands among the reference rows on a board and in ``fusebench list rows``
    board_order: ClassVar[int] = 100
    #: the features mix the views (a projection of their concatenation): with a view absent they are computed
    #: again from the imputed inputs instead of blanking that view's columns
    mixes_views: ClassVar[bool] = False
    #: the version of what a reference row computes (a record of another version is not reused, and a board
    #: does not average two: :func:`fusebench.components.identity.cell_versions`); a pretrained row's is its
    #: objective's
    version: ClassVar[str] = "1"
    #: the width of the row's features is a hyper-parameter (``width``; ``raw_pca``): its grid is the protocol
    #: option :data:`~fusebench.components.protocols.WIDTH_OPTION` (:meth:`selection_grid`)
    selects_width: ClassVar[bool] = False

    def __init__(self, name: str) -> None:
        self.id = name

    def problem(self, spec: Any) -> str | None:
        """Why this row cannot be a row of ``spec`` (None when it can): a reference row must be offered by the
        benchmark's downstream protocol."""
        from fusebench.components.protocols import PROTOCOLS, offered_rows

        if self.id in offered_rows(spec):
            return None
        offering = [p for p in PROTOCOLS.available() if self.id in PROTOCOLS.get(p).reference_rows]
        return (f"{spec.name}: the '{self.id}' reference row applies to the {' and '.join(offering)} "
                f"protocol{'s' if len(offering) > 1 else ''} only")

    def uses_encoder(self, spec: Any) -> bool:
        """Whether the protocol scores an encoder for this row (False: features computed from the inputs)."""
        return True

    def selection_grid(self, spec: Any) -> dict[str, list[Any]]:
        """The hyper-parameter grid a sweep of ``spec`` selects for this row on the selection seeds, before any
        evaluation cell (:mod:`fusebench.sweep.selection`): ``{name: values}``, ``{}`` when nothing is selected
        (here: a row with no hyper-parameter)."""
        return {}

    def from_inputs(self, spec: Any) -> bool:
        """Whether the cell builds its data unstandardised and computes the features from the input views
        (:meth:`features`)."""
        return False

    def identity_encoder(self, spec: Any) -> bool:
        """Whether the row's cells score the ``identity`` encoder over the input vectors instead of the spec's
        encoder (the ``raw`` row of a linear-probe benchmark)."""
        return False

    def features(self, views: Any, width: int | None) -> tuple[dict, dict, str]:
        """``(features {split: [n, D]}, record, cluster_standardize)`` of an input-feature row, fitted on
        ``views["train"]`` (:func:`fusebench.components.reference_features.reference_features`)."""
        raise NotImplementedError(f"row {self.id!r} computes no features from the inputs")

    def fitted(self, train: Any, width: int | None) -> Any:
        """The row's features fitted once on the train views ``train``, as a function of other views (the masked
        test views of the missing-view scores): :func:`fusebench.components.reference_features.fitted`."""
        raise NotImplementedError(f"row {self.id!r} computes no features from the inputs")


class PretrainedRow(Row):
    """An objective's row: the benchmark's encoders pretrained with it, then scored by the protocol."""

    pretrains = True

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.objective = name

    def selection_grid(self, spec: Any) -> dict[str, list[Any]]:
        """The objective's grid, ``pretrain.per_objective.<id>.grid``."""
        return dict(spec.pretrain.settings(self.id).grid or {})

    def problem(self, spec: Any) -> str | None:
        """The objective must accept the benchmark's view count(s) k, honour a presence mask when pretraining
        sees missing views, and pass its pipeline's own check."""
        from fusebench import objectives
        from fusebench.pipelines import pipeline_of

        from fusebench.registry import UnknownNameError, closest

        pipeline = pipeline_of(spec)
        try:
            cls = objectives.OBJECTIVES.get(self.id)
        except UnknownNameError:  # name every kind of row a sweep takes, and the closest of them
            weights = sorted(getattr(spec, "encoder_weights", None) or {})
            valid = [*objectives.OBJECTIVES.available(), *references(), *weights]
            hint = closest(self.id, valid)
            raise UnknownNameError(
                f"unknown row {self.id!r} (neither an objective, a reference row nor a --encoder-weights row)."
                + (f" Did you mean {hint!r}?" if hint else "")
                + f" Valid objective ids: {', '.join(objectives.OBJECTIVES.available())}; reference rows: "
                f"{', '.join(references())}" + (f"; encoder-weights rows: {', '.join(weights)}" if weights else "")
            ) from None
        kind = getattr(cls, "input_kind", "views")
        problem = pipeline.objective_problem(spec, self.id, cls)
        if problem:
            return problem
        rate = getattr(spec.pretrain, "missing_rate", 0.0)
        if pipeline.downstream and rate > 0:
            if kind != "views" or not getattr(cls, "supports_mask", False):
                return (f"{spec.name}: pretrain.missing_rate = {rate:g} hands every pretraining batch a presence "
                        f"mask, but objective {self.id!r} does not honour masks (supports_mask is false)")
            from fusebench.spec.methods import METHODS, joining

            owners = [m for m in joining(cls, spec.pretrain) if not METHODS.get(m).honours_mask]
            if owners:
                return (f"{spec.name}: pretrain.missing_rate = {rate:g}: the pretraining method(s) {owners} that join "
                        f"the runs of {self.id!r} compute the loss without the presence mask; switch off the options "
                        f"that bring them in (pretrain.methods.<id>) or set pretrain.missing_rate to 0")
        for k in pipeline.view_counts(spec):
            if not objectives.accepts_views(cls, k):
                return (f"objective {self.id!r} takes {objectives.views_text(cls)} views but benchmark {spec.name!r} "
                        f"has k = {k}")
        return None


class WeightsRow(Row):
    """A pretrained encoder's row (``encoder_weights``): the weights loaded, nothing pretrained here."""

    def problem(self, spec: Any) -> str | None:
        from fusebench.pipelines import pipeline_of

        pipeline = pipeline_of(spec)
        ok = pipeline.builds_encoder and pipeline.downstream
        return None if ok else f"{spec.name}: the {spec.pipeline} pipeline builds no encoder to load weights into"


@ROWS.register(BASELINE)
class RandomInitRow(Row):
    """The benchmark's encoders at random initialisation, nothing pretrained."""

    reference = True
    board_order = 0
    short = "random-init encoders"
    description = ("the benchmark's encoders at random initialisation, nothing pretrained, through the same "
                   "downstream protocol (every protocol)")

    def problem(self, spec: Any) -> str | None:
        from fusebench.components.protocols import offered_rows
        from fusebench.pipelines import pipeline_of

        if not pipeline_of(spec).downstream:
            return f"{spec.name}: the '{BASELINE}' baseline applies to standard benchmarks only"
        if BASELINE not in offered_rows(spec):
            return f"{spec.name}: the {spec.downstream.protocol} protocol offers no '{BASELINE}' row"
        return None


class InputFeatureRow(Row):
    """Features computed from the input views (``kind`` of :func:`reference_features`), no encoder."""

    reference = True

    def uses_encoder(self, spec: Any) -> bool:
        return False

    def from_inputs(self, spec: Any) -> bool:
        from fusebench.components.protocols import protocol_of

        return protocol_of(spec).frozen_features

    def features(self, views: Any, width: int | None) -> tuple[dict, dict, str]:
        from fusebench.components.reference_features import reference_features

        return reference_features(self.id, views, width=width)

    def fitted(self, train: Any, width: int | None) -> Any:
        from fusebench.components.reference_features import fitted

        return fitted(self.id, train, width=width)

    def selection_grid(self, spec: Any) -> dict[str, list[Any]]:
        """A width-selecting row's ``{"width": options.<protocol>.pca_widths}`` where the spec sets the widths
        (:func:`width_grid_of`), else ``{}`` (the width is the pretrained rows' embedding width)."""
        widths = width_grid_of(self.id, {"options": getattr(spec, "options", None)})
        return {"width": widths} if widths else {}

    def problem(self, spec: Any) -> str | None:
        """The protocol must offer the row; a row whose width is selected (``raw_pca`` with ``pca_widths``) needs
        a selection metric the validation split gives: k-means (``cluster_acc``, ``nmi``, ``ari``) is scored on
        the test split only."""
        from fusebench.components.reference_features import CLUSTER_METRICS

        base = super().problem(spec)
        metric = getattr(spec, "validation_metric", None)
        if base is None and self.selection_grid(spec) and metric in CLUSTER_METRICS:
            return (f"{spec.name}: the '{self.id}' row's number of components is chosen on the validation split by "
                    f"the selection metric, and {metric!r} is a k-means metric, scored on the test split only (k-means "
                    f"selects nothing); select on a probe's metric (comparison.primary or selection_metric, e.g. "
                    f"fs1_best_acc or acc), or leave '{self.id}' out of the sweep")
        return base


@ROWS.register(RAW)
class RawRow(InputFeatureRow):
    """The input views side by side: on a frozen-features protocol the standardised views themselves (the
    probes z-score them); on a linear-probe benchmark the probe trained on the input vectors through the
    ``identity`` encoder."""

    board_order = 1
    short = "the standardised input views"
    description = ("concat(x_v), the input views side by side, z-scored with train statistics by the probes "
                   "(embedding_eval; linear_probe through the identity encoder)")

    def from_inputs(self, spec: Any) -> bool:
        return False  # the adapter's standardised views, as the probes see every row's features

    def uses_encoder(self, spec: Any) -> bool:
        from fusebench.components.protocols import protocol_of

        return not protocol_of(spec).frozen_features

    def problem(self, spec: Any) -> str | None:
        from fusebench.components.protocols import offered_rows, protocol_of

        if RAW in offered_rows(spec) and not protocol_of(spec).frozen_features:
            from fusebench import datasets

            kinds = {m.kind for m in datasets.get(spec.dataset.id).MODALITIES
                     if spec.dataset.modalities is None or m.name in spec.dataset.modalities}
            if kinds != {"vector"}:
                return (f"{spec.name}: the '{RAW}' row of a linear-probe benchmark trains the probe on the input "
                        f"vectors; this dataset's modalities are {sorted(kinds)}")
            return None  # the probe trained on the input vectors (the `identity` encoder)
        return super().problem(spec)

    def identity_encoder(self, spec: Any) -> bool:
        from fusebench.components.protocols import protocol_of

        return not protocol_of(spec).frozen_features


def _input_feature_row(name: str, order: int, text: str, mixes: bool = False, version: str = "1"
                       ) -> type[InputFeatureRow]:
    from fusebench.components.reference_features import KINDS

    cls = type(f"InputFeatureRow_{name}", (InputFeatureRow,), {
        "board_order": order, "description": text, "mixes_views": mixes, "__doc__": text, "version": version,
        "selects_width": KINDS[name].needs_width})
    return ROWS.register(name)(cls)


_input_feature_row("raw_l2", 2, "concat(x_v / ||x_v||_2): each view's rows at unit L2 norm, zero rows stay zero "
                                "(embedding_eval)")
_input_feature_row("raw_tfidf", 3, "per view: tf = x / row sum, idf = ln((1 + n_train) / (1 + df_train)) + 1 "
                                   "(smooth idf), row-L2(tf * idf); concatenated; count views only (embedding_eval)")
_input_feature_row("raw_balanced", 4, "per view: zscore_train(x_v) / sqrt(d'_v), d'_v = its columns not constant "
                                      "on train: every view the same total variance; concatenated (embedding_eval)")
# version 3: w is a hyper-parameter chosen on the selection seeds like an objective's (version 2 chose it in each
# run on that run's validation split; version 1 fixed it at the embedding width)
_input_feature_row("raw_pca", 5, "zscore_train(concat(x_v)) projected on its first w principal components fitted on "
                                 "train; w chosen from options.embedding_eval.pca_widths on the selection seeds' "
                                 "validation splits, as an objective's hyper-parameters are, else the pretrained rows' "
                                 "embedding width (embedding_eval)", mixes=True, version="3")


def references() -> tuple[str, ...]:
    """Every reference row id, in board order (built-ins, then plugins by id)."""
    return tuple(sorted(ROWS.available(), key=lambda r: (ROWS.get(r).board_order, r)))


def is_reference(name: str) -> bool:
    """Whether ``name`` is a registered reference row (nothing pretrained)."""
    return name in ROWS


def width_grid_of(name: str, config: Any) -> list[Any]:
    """The widths a width-selecting reference row ``name`` (:attr:`Row.selects_width`) of ``config`` (a canonical
    spec, a record's ``config``, or ``{"options": spec.options}``) is selected among: its protocol options'
    :data:`~fusebench.components.protocols.WIDTH_OPTION` (every protocol's options mapping is looked in: the spec
    loader allows it in the frozen-features protocol's alone); ``[]`` for another row, or none set; ``["auto"]``
    while :data:`~fusebench.components.protocols.WIDTHS_AUTO` waits for the data to be read."""
    from fusebench.components.protocols import WIDTH_OPTION, WIDTHS_AUTO

    if name not in ROWS or not ROWS.get(name).selects_width:
        return []
    options = config.get("options") if isinstance(config, Mapping) else None
    for entry in (options.values() if isinstance(options, Mapping) else ()):
        widths = entry.get(WIDTH_OPTION) if isinstance(entry, Mapping) else None
        if widths == WIDTHS_AUTO:  # not resolved from the data yet (fusebench.sweep.runner.resolve_width_grid)
            return [WIDTHS_AUTO]
        if widths:
            return list(widths)
    return []


def unread_width_option(spec: Any) -> str | None:
    """Why the spec's :data:`~fusebench.components.protocols.WIDTH_OPTION` would be recorded and not used (None
    when a width-selecting row of its ``objectives`` reads it, or it is not set)."""
    from fusebench.components.protocols import WIDTH_OPTION

    options = getattr(spec, "options", None) or {}
    keys = [k for k, v in options.items() if isinstance(v, Mapping) and WIDTH_OPTION in v]
    readers = [o for o in ROWS.available() if ROWS.get(o).selects_width]
    if not keys or any(o in readers for o in spec.objectives):
        return None
    return (f"options.{keys[0]}.{WIDTH_OPTION}: no row of this benchmark's objectives has its width selected "
            f"({', '.join(readers)}), so the widths would be recorded and not used; remove it, or list "
            f"{' / '.join(readers)}")


def reads_no_pretraining(name: str, config: Any, reference: bool | None = None) -> bool:
    """Whether the row ``name`` of a canonical spec ``config`` (a record's ``config``) pretrains nothing, so its
    cells read no ``pretrain`` setting: a reference row (``reference``, None: :func:`is_reference`) or a weights
    row (the config's ``encoder_weights`` names it). The record alone says the second; the registry the first."""
    weights = config.get("encoder_weights") if isinstance(config, Mapping) else None
    return (is_reference(name) if reference is None else reference) or (isinstance(weights, Mapping) and name in weights)


def row_of(spec: Any, name: str) -> Row:
    """The row ``name`` of benchmark spec ``spec``: a weights row (a name of ``spec.encoder_weights``), a
    registered reference row, else the pretrained row of objective ``name``."""
    if name in (getattr(spec, "encoder_weights", None) or {}):
        return WeightsRow(name)
    if name in ROWS:
        return ROWS.get(name)(name)
    return PretrainedRow(name)


def available(pattern: str | None = None) -> list[str]:
    """The reference rows (a glob over ids when ``pattern`` is given), in board order."""
    chosen = set(matching(references(), pattern))
    return [r for r in references() if r in chosen]


def describe(row: str) -> list[str]:
    """``fusebench list rows``'s lines for a reference row."""
    return [f"{row}: reference row: {ROWS.get(row).description}"]


def comparison_of(spec: Any) -> dict[str, str]:
    """How the board compares the rows of benchmark spec ``spec`` (``spec.comparison`` with its defaults): the
    fixed reference row of the tests (``raw`` when the sweep has it, else ``none``), the primary metric and why
    it was chosen. Every record carries it; the board takes it from the benchmark's current spec when it is
    found (``fusebench.leaderboard.groups``), so a changed reference row needs no re-run (a changed primary metric
    is refused by the board unless the runs selected on it)."""
    out = {k: v for k, v in spec.comparison.items() if v}
    if "reference" not in out:
        ref = next((r for r in DEFAULT_REFERENCES if r in spec.objectives), None)
        if ref:
            out["reference"] = ref
    out.setdefault("primary", spec.validation_metric)
    return out


#: the closing line of ``fusebench list rows``
PRETRAINED_LINE = ("every objective id (fusebench list objectives) is a pretrained row: the benchmark's encoders "
                   "pretrained with that objective, then evaluated by its downstream protocol")


__all__ = ["BASELINE", "DEFAULT_REFERENCES", "InputFeatureRow", "PRETRAINED_LINE", "PretrainedRow", "RAW", "ROWS", "RandomInitRow", "RawRow",
           "Row", "WeightsRow", "available", "comparison_of", "describe", "is_reference", "reads_no_pretraining",
           "references", "row_of"]
