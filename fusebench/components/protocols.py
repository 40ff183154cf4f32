"""Downstream protocols (components layer): how a cell scores its (pretrained, random or reference)
representation, each declared once, as a registry entry (``downstream.protocol`` of a spec):

Each protocol scores a cell itself (:meth:`Protocol.score`: the function its ``scorer`` names;
``fusebench.cells.head_protocol`` trains a task head, ``fusebench.cells.embedding_protocol`` probes frozen
embeddings), so the cell does not branch on the protocol.

* ``linear_probe``: the encoder frozen, the dataset's task head trained on it; the best epoch on the
  validation split kept, the test split scored once. Reference rows: ``none`` and ``raw`` (the probe on
  the input vectors, through the ``identity`` encoder; vector modalities only).
* ``finetune``: encoder and head trained together, selection as above. Reference row: ``none``.
* ``embedding_eval``: frozen embeddings (or a reference row's features) of every split -> linear probe
  (L2 weight chosen on val), few-shot and kNN probes, k-means (``fusebench.probes.embedding_eval``).
  Reference rows: ``none`` and every input-feature row of :mod:`fusebench.components.reference_features`;
  options: ``options.embedding_eval`` with the keys of :data:`EMBEDDING_EVAL_OPTIONS`, :data:`WIDTH_OPTION`
  and :data:`MISSING_VIEW_OPTIONS`.

Every protocol reads the missing-view options :data:`MISSING_VIEW_OPTIONS` (``missing_rates``: the test
data scored again with a seeded fraction r of its (sample, view) entries absent; ``single_view``: with
one view alone; ``missing_n_init``: k-means restarts of those clusterings, default the protocol's
``n_init``; ``missing_rules``: how a rate counts, ``entry`` (the default: a fraction r of the (sample, view)
entries absent) and / or ``instance`` (a fraction r of the samples incomplete);
:mod:`fusebench.probes.missing_views`) from its own options key: ``options.embedding_eval``,
``options.linear_probe``, ``options.finetune``. :func:`missing_view_problems` checks them (and
``pretrain.missing_rate``) against the view count k: a rate must leave every sample one view,
``r <= (k - 1) / k``.

A protocol declares what the rest of the suite asks of it: its reference rows (which pseudo-objectives
a benchmark of it may list), whether it trains the encoder, whether it scores frozen features with its
own probes instead of a task head, and the spec options it reads (checked when a spec is loaded).
Plugins come through the entry-point group ``fusebench.protocols``; a plugin protocol runs in the standard
pipeline through its own ``scorer`` (one that scores frozen features must name one: the default trains a task
head).
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

from fusebench.registry import Registry

#: the probe / clustering options of ``options.embedding_eval`` (passed on to probe_and_cluster as given)
EMBEDDING_EVAL_OPTIONS = ("l2_grid", "cluster_on", "n_init", "fewshot_shots", "fewshot_draws", "fewshot_l2_grid",
                          "knn_grid")
#: the option of ``options.embedding_eval`` that makes the features' width of a width-selecting reference row
#: (``raw_pca``) a hyper-parameter: the widths its selection scores on the selection seeds
#: (:meth:`fusebench.components.rows.Row.selection_grid`); read by that row alone (not a cell identity of another)
WIDTH_OPTION = "pca_widths"
#: :data:`WIDTH_OPTION`'s value for a benchmark whose views are known only from its file (``multiview``): a sweep
#: replaces it, once the train split is open, by the list the curated boards write out, ``width_grid`` of the
#: pretrained rows' embedding width at most the train matrices' rank (:func:`fusebench.sweep.runner.resolve_width_grid`)
WIDTHS_AUTO = "auto"


def without_width_option(options: Any) -> Any:
    """A spec's ``options`` mapping without :data:`WIDTH_OPTION` in any protocol's entry (a new mapping where one
    is left out, else ``options`` itself): what every row but a width-selecting one reads, and what a board's rows
    must share (the widths are ``raw_pca``'s own setting, like an objective's grid)."""
    if not isinstance(options, dict) or not any(isinstance(v, dict) and WIDTH_OPTION in v for v in options.values()):
        return options
    return {k: ({o: x for o, x in v.items() if o != WIDTH_OPTION} if isinstance(v, dict) else v)
            for k, v in options.items()}


#: the missing-view evaluation options every protocol reads (fusebench.probes.missing_views); off by default
MISSING_VIEW_OPTIONS = ("missing_rates", "single_view", "missing_n_init", "missing_rules")
#: how a missing-view rate r counts (option ``missing_rules``, default ``["entry"]``): ``entry`` = a fraction r of
#: the (sample, view) entries absent (metric prefix ``miss``); ``instance`` = a fraction r of the samples
#: incomplete, each keeping at least one view and missing at least one (COMPLETER / DCP; prefix ``inst``)
MISSING_RULES = {"entry": "miss", "instance": "inst"}


def _describe(cls: Any) -> dict[str, Any]:
    return {key: getattr(cls, key, None) for key in ("reference_rows", "trains_encoder", "frozen_features",
                                                     "options_key", "options")}


PROTOCOLS = Registry("downstream protocol", entry_point_group="fusebench.protocols", describe=_describe)


class Protocol:
    """A downstream protocol's declaration (see the module docstring)."""

    #: what the protocol's scoring computes, beyond its metrics' own versions (its probes' fits, its selection on
    #: validation); bump when the same configuration and metrics would score differently. A record states it where
    #: it is not "1" (``versions.protocol``), a run reuses a record only at the current one, and a board never mixes
    #: two (:func:`fusebench.components.identity.cell_versions`, ``code_changes``; a comparability field)
    version: ClassVar[str] = "1"
    #: the reference rows (ids of fusebench.components.rows) a benchmark of this protocol may list
    reference_rows: ClassVar[tuple[str, ...]] = ("none",)
    #: the encoder is trained downstream (fine-tuning) rather than frozen
    trains_encoder: ClassVar[bool] = False
    #: frozen features scored by the protocol's own probes (no task head trained by the phase loop)
    frozen_features: ClassVar[bool] = False
    #: the key of ``spec.options`` holding the protocol's options, and the names it accepts there
    options_key: ClassVar[str | None] = None
    options: ClassVar[tuple[str, ...]] = ()
    #: the function that scores a cell under this protocol, by import path (``"module:function"``), called as
    #: ``function(cell, protocol, pretrained_state=..., ckpt=...)`` and returning what it measured
    #: (:class:`fusebench.records.builder.Scores`; the cell builds the record from it); imported on the first call
    #: (this module imports no torch). A plugin protocol names its own.
    scorer: ClassVar[str] = "fusebench.cells.head_protocol:score"
    #: the metric families (``task`` of :func:`fusebench.metrics.metadata`) the protocol's scoring reports beyond
    #: the dataset task's own (e.g. ``clustering``: k-means on the embeddings)
    metric_families: ClassVar[tuple[str, ...]] = ()
    #: how the missing-view test scores a cell under this protocol, as the robustness board says it
    #: (``{restarts}``: where the board names the k-means restarts of the records, if any)
    missing_views_text: ClassVar[str] = ("The model selected on the complete validation split scores the incomplete "
                                         "test split. ")
    #: the fields of ``downstream`` the protocol reads (None: all of them); another one set off its default is
    #: refused when the spec is loaded (:func:`unapplied_downstream`: it would be recorded and silently unused)
    downstream_fields: ClassVar[tuple[str, ...] | None] = None
    #: the protocol's real-data boards join the cross-dataset ranking of the leaderboard index
    #: (:func:`fusebench.leaderboard.index.cross_dataset_ranking`): their primary metrics score every board's rows
    #: alike (frozen embeddings, the same probes), so ranks over the boards compare objectives
    cross_dataset_ranking: ClassVar[bool] = False

    @classmethod
    def selects_on_validation(cls, spec: Any) -> str | None:
        """What the protocol chooses on the validation split for ``spec`` (a phrase), or None when it chooses
        nothing: the head protocols keep the downstream epoch with the best validation value, so they choose when
        there is more than one epoch."""
        epochs = spec.downstream.epochs
        return f"the best of its {epochs} downstream epochs" if epochs > 1 else None

    #: the function that checks the values of the protocol's options for a spec, by import path
    #: (``"module:function"``, called as ``function(options, metric ids, key)`` and returning a phrase per problem;
    #: imported when a spec is loaded, as :attr:`scorer` is when a cell is scored); None: the values are not checked
    option_checker: ClassVar[str | None] = None

    @classmethod
    def option_problems(cls, spec: Any) -> list[str]:
        """What is wrong with the values of the protocol's options (``options.<options_key>``) for ``spec``, each a
        phrase naming the key (empty: nothing), by its :attr:`option_checker`; checked when the spec is loaded,
        after the option names."""
        if not cls.option_checker or not cls.options_key:
            return []
        import importlib

        module, _, function = cls.option_checker.partition(":")
        check = getattr(importlib.import_module(module), function)
        return check(spec.options.get(cls.options_key) or {}, spec.metrics, f"options.{cls.options_key}")

    @classmethod
    def score(cls, cell: Any, **state: Any) -> Any:
        """Score ``cell`` (a :class:`fusebench.cells.standard.StandardCell` after pretraining) under this
        protocol: its :attr:`scorer` called with ``state`` (``pretrained_state``, ``ckpt``); returns its
        :class:`~fusebench.records.builder.Scores`."""
        import importlib

        module, _, function = cls.scorer.partition(":")
        return getattr(importlib.import_module(module), function)(cell, cls, **state)


@PROTOCOLS.register("linear_probe")
class LinearProbe(Protocol):
    reference_rows = ("none", "raw")
    options_key = "linear_probe"
    options = MISSING_VIEW_OPTIONS


@PROTOCOLS.register("finetune")
class Finetune(Protocol):
    trains_encoder = True
    options_key = "finetune"
    options = MISSING_VIEW_OPTIONS


@PROTOCOLS.register("embedding_eval")
class EmbeddingEval(Protocol):
    #: version 2: the full linear probe's logistic fit (``acc``, ``mf1``, the missing-view probes) solved to its
    #: optimum by damped Newton-CG (:func:`fusebench.probes.logistic.fit_logistic`); version 1 stopped L-BFGS on
    #: absolute tolerances, short of the optimum at the L2 search's extremes (1e-8: up to 6% of the predictions
    #: differed). The few-shot metrics carry their own version (2 for the same reason)
    version = "2"
    reference_rows = ("none", "raw", "raw_l2", "raw_tfidf", "raw_balanced", "raw_pca")
    frozen_features = True
    options_key = "embedding_eval"
    scorer = "fusebench.cells.embedding_protocol:score"
    option_checker = "fusebench.probes.embedding_eval:option_problems"
    options = EMBEDDING_EVAL_OPTIONS + (WIDTH_OPTION,) + MISSING_VIEW_OPTIONS
    metric_families = ("clustering",)
    cross_dataset_ranking = True
    #: frozen embeddings are computed in batches of ``downstream.batch_size``; no head is trained, so the head's
    #: epochs, learning rate, weight decay and few-shot subset (``shots``: the probes' shots are
    #: ``options.embedding_eval.fewshot_shots``) are not read
    downstream_fields = ("protocol", "batch_size")

    @classmethod
    def selects_on_validation(cls, spec: Any) -> str | None:
        return "the probes' L2 weights, kNN's k and the few-shot probe"

    @classmethod
    def option_problems(cls, spec: Any) -> list[str]:
        """The probe options (:func:`fusebench.probes.embedding_eval.option_problems`) and :data:`WIDTH_OPTION`, a
        list of distinct positive integers (that a row of the spec reads it is the spec loader's check,
        :func:`fusebench.components.rows.unread_width_option`)."""
        out = super().option_problems(spec)
        given = spec.options.get(cls.options_key) or {}
        widths = given.get(WIDTH_OPTION)
        if WIDTH_OPTION in given and widths != WIDTHS_AUTO and (
                not isinstance(widths, list) or not widths or len(set(widths)) != len(widths)
                or any(type(w) is not int or w < 1 for w in widths)):
            out.append(f"options.{cls.options_key}.{WIDTH_OPTION} = {widths!r}: expected a non-empty list of distinct "
                       f"positive integers (the numbers of components the selection scores), or {WIDTHS_AUTO!r} "
                       f"(the powers of two below the pretrained rows' embedding width and that width, worked out "
                       f"from the data)")
        return out

    missing_views_text = ("The linear probe chosen and fitted on the complete data scores the incomplete test split (an "
                          "absent view's standardised features set to 0, the train mean); k-means clusters the "
                          "incomplete samples (each column standardised over the samples where its view is present, "
                          "absent entries 0{restarts}). ")


def unapplied_downstream(spec: Any) -> list[str]:
    """The fields of ``spec.downstream`` its protocol does not read (:attr:`Protocol.downstream_fields`) that are
    set off their defaults, each as one problem naming the key (empty: none)."""
    import dataclasses

    protocol = protocol_of(spec)
    reads = protocol.downstream_fields
    if reads is None:
        return []
    out = []
    for f in dataclasses.fields(spec.downstream):
        default = f.default if f.default is not dataclasses.MISSING else None
        value = getattr(spec.downstream, f.name)
        if f.name not in reads and value != default:
            out.append(f"downstream.{f.name} = {value!r}: the {spec.downstream.protocol} protocol does not read it "
                       f"(of downstream it reads only {', '.join(reads)}); leave it at its default {default!r}")
    return out


def protocol_of(spec: Any) -> type[Protocol]:
    """The declaration of ``spec.downstream.protocol`` (an unknown id lists the valid ones)."""
    return PROTOCOLS.get(spec.downstream.protocol)


def offered_rows(spec: Any) -> tuple[str, ...]:
    """The reference rows a benchmark of ``spec`` may list: its protocol's, where its pipeline has a downstream
    protocol (none otherwise)."""
    from fusebench.pipelines import pipeline_of

    if pipeline_of(spec).downstream and spec.downstream.protocol in PROTOCOLS:
        return protocol_of(spec).reference_rows
    return ()


def rate_id(rate: float, rule: str = "entry") -> str:
    """The metric-id prefix of a missing-view rate under ``rule`` (:data:`MISSING_RULES`): ``miss<100 r>`` for
    the entry-level rate (0.1 -> ``miss10``), ``inst<100 r>`` for the instance-level rate (0.1 -> ``inst10``)."""
    return f"{MISSING_RULES[rule]}{round(100 * float(rate))}"


def view_id(name: str) -> str:
    """The metric-id prefix of a single-view test: ``only_<view name>`` (characters other than letters,
    digits and ``_`` written as ``_``)."""
    return "only_" + re.sub(r"[^A-Za-z0-9_]", "_", str(name))


def missing_rate_problem(rate: Any, k: int | None, key: str, pairs: bool = False) -> str | None:
    """Why ``rate`` (spec key ``key``) cannot be a missing-view rate (None when it can): a number in
    [0, 1) that leaves every sample at least one of its k views, ``rate <= (k - 1) / k`` (checked when
    ``k`` is given); with ``pairs`` (pretraining: a multi-view loss needs samples with two views)
    ``rate < (k - 1) / k``."""
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0.0 <= float(rate) < 1.0:
        return f"{key}: {rate!r} must be a number in [0, 1) (the fraction of (sample, view) entries absent)"
    if k is not None and float(rate) > (k - 1) / k:
        return (f"{key}: rate {float(rate):g} cannot keep a view of every sample with k = {k} views: at most "
                f"(k - 1) / k = {(k - 1) / k:.4g} of the entries can be absent")
    if pairs and k is not None and float(rate) > 0 and float(rate) >= (k - 1) / k:
        return (f"{key}: rate {float(rate):g} leaves every sample one view of k = {k}: a multi-view loss needs "
                f"samples with two, so the rate must be below (k - 1) / k = {(k - 1) / k:.4g}")
    return None


def instance_rate_problem(rate: Any, k: int | None, key: str) -> str | None:
    """Why ``rate`` cannot be an instance-level missing rate (the fraction of incomplete samples; None when it
    can): a number in [0, 1), and a sample can be incomplete yet keep a view only with k >= 2 views."""
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0.0 <= float(rate) < 1.0:
        return f"{key}: {rate!r} must be a number in [0, 1) (the fraction of the samples that are incomplete)"
    if k is not None and float(rate) > 0 and k < 2:
        return (f"{key}: rate {float(rate):g} needs k >= 2 views (an incomplete sample keeps one and misses one), "
                f"k = {k}")
    return None


def missing_view_problems(spec: Any, k: int | None) -> list[str]:
    """What is wrong with the spec's missing-view settings (empty: nothing): the protocol's
    ``missing_rates`` (a list of distinct rates in (0, 1), each a multiple of 0.01: its metric ids are
    ``miss<100 r>_<metric>``) and ``single_view`` (true / false), and ``pretrain.missing_rate``; each
    rate against the view count ``k`` when it is known (None: checked once the data says k)."""
    out = []
    rate = getattr(spec.pretrain, "missing_rate", 0.0)
    problem = missing_rate_problem(rate, k, "pretrain.missing_rate", pairs=True)
    if problem:
        out.append(problem)
    if spec.downstream.protocol not in PROTOCOLS:
        return out
    protocol = protocol_of(spec)
    given = spec.options.get(protocol.options_key) if protocol.options_key else None
    if not isinstance(given, dict):
        return out
    key = f"options.{protocol.options_key}"
    if "single_view" in given and not isinstance(given["single_view"], bool):
        out.append(f"{key}.single_view: expected true or false, got {given['single_view']!r}")
    restarts = given.get("missing_n_init")
    if restarts is not None and (type(restarts) is not int or restarts < 1):
        out.append(f"{key}.missing_n_init: expected a number of k-means restarts >= 1 (default: the protocol's "
                   f"n_init), got {restarts!r}")
    rules = given.get("missing_rules", ["entry"])
    if (not isinstance(rules, list) or not rules or len(set(map(str, rules))) != len(rules)
            or any(not isinstance(r, str) or r not in MISSING_RULES for r in rules)):
        import difflib

        bad = [r for r in rules if not isinstance(r, str) or r not in MISSING_RULES] if isinstance(rules, list) else []
        close = difflib.get_close_matches(str(bad[0]), list(MISSING_RULES), n=1) if bad else []
        out.append(f"{key}.missing_rules: expected a non-empty list of distinct rules from {list(MISSING_RULES)} "
                   f"(entry: a fraction r of the (sample, view) entries absent; instance: a fraction r of the samples "
                   f"incomplete), got {rules!r}" + (f"; did you mean {close[0]!r}?" if close else ""))
        rules = ["entry"]
    rates = given.get("missing_rates")
    if "missing_rules" in given and not rates:
        out.append(f"{key}.missing_rules: set without {key}.missing_rates: there is no rate for the rule to count "
                   f"(give missing_rates, or remove missing_rules)")
    if rates is None:
        return out
    if not isinstance(rates, list):
        return [*out, f"{key}.missing_rates: expected a list of rates in (0, 1), e.g. [0.1, 0.3, 0.5, 0.7], "
                      f"got {rates!r}"]
    for r in rates:
        problem = (missing_rate_problem(r, k, f"{key}.missing_rates") if "entry" in rules
                   else instance_rate_problem(r, k, f"{key}.missing_rates"))
        if problem is None and (r == 0 or abs(100 * float(r) - round(100 * float(r))) > 1e-9):
            problem = (f"{key}.missing_rates: {r!r} must be in (0, 1) and a multiple of 0.01 (rate 0 is the "
                       f"protocol's own metrics)")
        if problem:
            out.append(problem)
    codes = [round(100 * float(r)) for r in rates if not isinstance(r, bool) and isinstance(r, (int, float))]
    if len(set(codes)) != len(codes):
        out.append(f"{key}.missing_rates: {rates!r} lists a rate twice")
    return out


__all__ = ["EMBEDDING_EVAL_OPTIONS", "MISSING_RULES", "MISSING_VIEW_OPTIONS", "WIDTH_OPTION", "WIDTHS_AUTO",
           "PROTOCOLS", "EmbeddingEval", "Finetune",
           "LinearProbe", "Protocol", "instance_rate_problem", "missing_rate_problem", "missing_view_problems",
           "offered_rows", "protocol_of", "rate_id", "view_id", "without_width_option"]
