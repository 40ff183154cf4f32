"""Pretraining methods: what a loss needs around it during pretraining, as units with typed options.

A *method* is a pretraining wrapper or optimisation step that belongs to a loss rather than to the
generic pretraining loop. The built-in ones:

=================  ==========================================  ===================================
id                 what it adds                                 module
=================  ==========================================  ===================================
``tuple_infonce``  tuple fusion head, augmentation, k-disturbed  ``fusebench.components.tuple_method``
                   negatives, Algorithm 1 (sample optimisation)  (+ ``tuple_optim``)
``ema_teacher``    EMA teacher (cosine momentum) and BYOL's      ``fusebench.components.teacher``
                   student-prediction vs teacher-target loss
``view_rotation``  M3G Sec. 4 rotation: view i from the teacher  ``fusebench.components.teacher``
=================  ==========================================  ===================================

Each is a :class:`PretrainMethod` subclass registered in :data:`METHODS` (entry-point group
``fusebench.methods`` for plugins) with an ``Options`` dataclass: its typed settings, given in a
spec as ``pretrain.methods.<id>: {name: value, ...}`` (``--set pretrain.methods.<id>.<name>=...``)
and checked when the spec is loaded (:func:`check_methods`: unknown method ids and option names are
errors naming the valid ones and the closest match; values are type-checked and converted like
every other spec value).

An objective names the methods it builds on in its class attribute ``pretrain_methods`` (ids);
:func:`attach` asks every registered method whether it joins a run (:meth:`PretrainMethod.wanted`:
by default when the objective names it; a method may also join on its own options, e.g.
``ema_teacher: {enabled: true}``), adds what the joining methods ``require`` and orders them by
``build_order``. The :class:`~fusebench.engine.pretrain.Pretrainer` then asks them, never an
objective id, for

* their modules (``build``, called once from the Pretrainer's constructor, adds heads to it);
* the loss of a batch (``loss``: the first method returning a tensor wins; none: the plain view loss);
* what follows an optimisation step (``after_step``: e.g. the teacher's EMA update);
* per-epoch steps (``extensions``: ``"module:Class"`` names, see :func:`extensions`), which the runner
  attaches to the pretraining phase with their state in ``last.pt``.

A method's options enter the config hash as ``pretrain.methods.<id>.<name>`` only where they differ from
their defaults (hash schema 2, ``fusebench.spec.config``): a new option with a default leaves every
hash as it was. The flat keys some options had before methods had options (``tuple_*``,
``embedding_noise``, ``ema_teacher``, ``ema_momentum``, ``m3g_view_rotation``) are still read from specs
and ``--set`` with a :class:`DeprecatedKeyWarning` (``config.RENAMED_PRETRAIN_KEYS``).

>>> from fusebench.spec.config import PretrainConfig
>>> opts = options_of(PretrainConfig(methods={"tuple_infonce": {"candidates": 8}}), "tuple_infonce")
>>> opts.candidates, opts.sample_optimisation, opts.dropout
(8, False, 0.1)
>>> options_of(PretrainConfig(methods={"tuple_infonce": {"candidate": 8}}), "tuple_infonce")
Traceback (most recent call last):
...
fusebench.typed.ConfigError: pretrain.methods.tuple_infonce: unknown options ['candidate'] (did you mean 'candidates' for 'candidate'?); valid options: disturbed, alpha, embedding_noise, dropout, sample_optimisation, candidates, candidate_steps, policy_lr, policy_sigma, beta_sigma, beta_max, beta_lambda, zeta_grid, val_size, policy_baseline
"""

from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping

from torch import Tensor, nn

from fusebench.registry import Registry
from fusebench.typed import ConfigError, DeprecatedKeyWarning, from_dict




@dataclass
class NoOptions:
    """A method without settings."""


class PretrainMethod:
    """Base class of a pretraining method (see the module docstring). Subclasses set the class
    attributes and override the hooks they need; an instance lives as long as one Pretrainer."""

    #: the id in :data:`METHODS` and under ``pretrain.methods``
    id: ClassVar[str] = ""
    #: the typed settings (a dataclass: name, type, default per field)
    Options: ClassVar[type] = NoOptions
    #: methods attached whenever this one is (e.g. the view rotation needs the EMA teacher)
    requires: ClassVar[tuple[str, ...]] = ()
    #: lower builds first (a teacher copying the student is built after every student head)
    build_order: ClassVar[int] = 0
    #: per-epoch steps: "module:Class" of classes with ``enabled(options)``, ``state_key``,
    #: ``val_batch_size(options)``, ``__init__(pretrainer, options, seed)``, ``epoch_update(optimizer, epoch,
    #: train_batches, val_batch, curves, autocast, scaler=...)`` (``scaler``: the main loop's gradient scaler at
    #: precision ``16-mixed``, else None; one whose ``epoch_update`` takes no ``scaler`` is called without it, and
    #: refused at ``16-mixed``: :func:`epoch_update_kwargs`), ``state_dict()`` / ``load_state_dict()``
    extensions: ClassVar[tuple[str, ...]] = ()
    #: whether a run this method joins still honours the batch's presence mask (missing views): its ``loss``
    #: passes the mask on, or leaves the loss of every objective that takes a mask to the objective's own
    #: (masked) call. False, the conservative default: a method that does not declare it is taken to compute
    #: the loss without the mask, and a run with missing views (``pretrain.missing_rate > 0``) that it joins is
    #: refused (``fusebench.components.rows``)
    honours_mask: ClassVar[bool] = False
    #: the objective class attribute (a bool; absent: True) that says whether the objective's loss reads what this
    #: method adds, for a method that may join a run on its own options (``ema_teacher``: ``uses_teacher``); where it
    #: is False the method would be built, recorded and hashed, and unread, so such a run is refused
    #: (:func:`unread_methods`). None: every objective the method joins reads it
    read_by: ClassVar[str | None] = None
    #: the version of what the method computes (its part of the loss: augmentations, a teacher, fused tuples, ...):
    #: raised when that changes under unchanged options, as an objective's ``version`` is; a run it joins records it
    #: where it is not "1" (``versions.methods``), and a record, checkpoint or selection made by another version is
    #: not reused (``fusebench.components.identity.code_changes``). Where a change reaches only the runs of some
    #: options (a step the method takes only when an option turns it on), override :meth:`version_of` instead
    version: ClassVar[str] = "1"

    def __init__(self, options: Any) -> None:
        self.options = options

    # -- joining a run ------------------------------------------------------------------------
    @classmethod
    def wanted(cls, objective: nn.Module, declared: bool, options: Any, cfg: Any) -> bool:
        """Whether the method joins a run of ``objective`` (``declared``: the objective names it in
        ``pretrain_methods``; ``options``: this method's options; ``cfg``: the PretrainConfig)."""
        return declared

    @classmethod
    def version_of(cls, options: Any) -> str:
        """The version of what the method computes with ``options`` (its typed ``Options``): by default the class's
        :attr:`version`. A method whose options switch a part of its computation on overrides it, so that a change to
        that part marks stale the records made with it on and leaves the others current (read through
        :func:`method_version`, never ``cls.version`` directly)."""
        return cls.version

    @classmethod
    def check(cls, options: Any) -> list[str]:
        """Problems with the option values, found when the spec is loaded (``"name must be ..."``)."""
        return []

    # -- hooks ----------------------------------------------------------------------------------
    def build(self, pre: nn.Module) -> None:
        """Add this method's modules to the Pretrainer ``pre`` (called once, in ``build_order``)."""

    def loss(self, pre: nn.Module, batch: dict[str, Any], emb: Tensor, z: Tensor, mask: Tensor | None,
             gather: Any) -> Tensor | None:
        """The pretraining loss of ``batch`` (emb: [k, n, F] embeddings, z: [k, n, P] projections,
        mask: [k, n] or None), or None to leave it to the next method / the plain view loss."""
        return None

    def after_step(self, pre: nn.Module, step: int) -> None:
        """Called after optimisation step ``step`` of the main loop."""


#: every pretraining method, by id
METHODS = Registry("pretrain method", entry_point_group="fusebench.methods",
                   modules=("fusebench.components.teacher", "fusebench.components.tuple_method"))  # two small modules: both load


def register(cls: type) -> type:
    """Class decorator: register a :class:`PretrainMethod` subclass under ``cls.id``."""
    if not (isinstance(cls, type) and issubclass(cls, PretrainMethod)):
        raise TypeError(f"{cls!r} is not a PretrainMethod subclass")
    if not (isinstance(cls.Options, type) and dataclasses.is_dataclass(cls.Options)):
        raise TypeError(f"pretrain method {cls.id!r}: Options must be a dataclass")
    METHODS.add(cls.id, cls)
    return cls


# ---------------------------------------------------------------------------------------------
# options
# ---------------------------------------------------------------------------------------------
def make_options(cls: type, given: Any, where: str) -> Any:
    """``given`` (a mapping, an ``Options`` instance or None) -> a checked ``cls.Options`` instance.
    Unknown names and wrong types raise :class:`fusebench.typed.ConfigError` naming
    ``where``, the valid options and the closest match."""
    from fusebench.options import OptionsError, check_options

    if given is None:
        return cls.Options()
    if isinstance(given, cls.Options):
        return given
    try:
        check_options(given, cls, where)
    except OptionsError as e:
        raise ConfigError(str(e)) from None
    return from_dict(cls.Options, dict(given), where)


def method_class(method_id: Any, where: str = "pretrain.methods") -> type:
    """The registered method ``method_id``, matched exactly (ids are lowercase: ``Tuple_InfoNCE`` is not
    ``tuple_infonce``, whose options would then be looked up under another key and never read). Anything
    else is a :class:`ConfigError` naming ``where``, the closest id and the valid ones."""
    from fusebench.registry import closest

    valid = METHODS.available()
    if not isinstance(method_id, str) or method_id not in valid:
        hint = closest(str(method_id), valid)
        raise ConfigError(f"{where}: unknown pretrain method {method_id!r} (ids are matched exactly)."
                          + (f" Did you mean {hint!r}?" if hint else "") + f" Valid pretrain method ids: {', '.join(valid)}")
    return METHODS.get(method_id)


def options_of(cfg: Any, method_id: str) -> Any:
    """The typed options of method ``method_id`` in PretrainConfig ``cfg`` (its defaults when the
    spec does not mention it)."""
    cls = METHODS.get(method_id)
    return make_options(cls, (getattr(cfg, "methods", None) or {}).get(method_id), f"pretrain.methods.{method_id}")


def check_methods(methods: Any, where: str = "pretrain.methods") -> dict[str, Any]:
    """Check a spec's ``pretrain.methods`` block (method id -> options) and return it with every
    entry turned into its typed ``Options`` (the spec loader's step)."""
    if not isinstance(methods, Mapping):
        raise ConfigError(f"{where}: expected a mapping of method ids to their options, got {methods!r}")
    out = {}
    for mid, given in methods.items():
        cls = method_class(mid, f"{where}.{mid}")
        if given is not None and not isinstance(given, (Mapping, cls.Options)):
            raise ConfigError(f"{where}.{mid}: expected a mapping of option names to values, got {given!r}")
        opts = make_options(cls, given, f"{where}.{mid}")
        problems = cls.check(opts)
        if problems:
            raise ConfigError(f"{where}.{mid}: " + "; ".join(problems))
        out[str(mid)] = opts
    return out


def option_values(options: Any) -> dict[str, Any]:
    """An ``Options`` instance as a plain dict (lists copied), in field order."""
    return dataclasses.asdict(options)


#: prefix of a hyper-parameter that sets a pretraining method's option instead of an objective's
#: argument: ``methods.<method id>.<option>`` (e.g. ``pretrain.per_objective.byol_pwe.grid: {methods.ema_teacher.momentum:
#: [0.99, 0.996]}`` searches BYOL's EMA momentum on the validation split)
METHOD_KEY_PREFIX = "methods."


def method_version(cls: type, options: Any) -> str:
    """The version of method class ``cls`` under its typed ``options`` (:meth:`PretrainMethod.version_of`), checked:
    a string (an int is taken as its text); anything else, e.g. a plugin's property or a bool, a ConfigError."""
    version_of = getattr(cls, "version_of", None)
    version = version_of(options) if callable(version_of) else getattr(cls, "version", "1")
    if isinstance(version, bool) or not isinstance(version, (str, int)):
        raise ConfigError(f"pretraining method {getattr(cls, 'id', cls)!r}: its version must be a string (the class's "
                          f"version, or what version_of(options) returns), got {type(version).__name__}")
    return str(version)


def split_method_keys(hparams: Mapping[str, Any], where: str = "hparams") -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """``hparams`` -> (the objective's keyword arguments, ``{method id: {option: value}}`` from the
    ``methods.<id>.<option>`` keys). A malformed method key is a ConfigError naming ``where``."""

    kwargs: dict[str, Any] = {}
    methods: dict[str, dict[str, Any]] = {}
    for key, value in hparams.items():
        if isinstance(key, str) and key.startswith(METHOD_KEY_PREFIX):
            parts = key.split(".")
            if len(parts) != 3 or not all(parts):
                raise ConfigError(f"{where}: {key!r} must read methods.<method id>.<option>")
            methods.setdefault(parts[1], {})[parts[2]] = value
        else:
            kwargs[key] = value
    return kwargs, methods


def with_method_options(cfg: Any, overrides: Mapping[str, Mapping[str, Any]], where: str = "hparams") -> Any:
    """PretrainConfig ``cfg`` with the options of ``overrides`` (method id -> {option: value}) set on its
    methods (checked: unknown ids, names and wrong types are ConfigErrors naming ``where``); ``cfg``
    itself when there is nothing to set."""
    if not overrides:
        return cfg
    merged = dict(getattr(cfg, "methods", None) or {})
    for mid, opts in overrides.items():
        cls = method_class(mid, f"{where}: methods.{mid}")
        values = {**option_values(options_of(cfg, mid)), **dict(opts)}
        merged[mid] = make_options(cls, values, f"{where}: methods.{mid}")
    return dataclasses.replace(cfg, methods=merged)


# ---------------------------------------------------------------------------------------------
# joining a run
# ---------------------------------------------------------------------------------------------
def joining(objective: Any, cfg: Any) -> list[str]:
    """The ids of the methods that join a pretraining run of ``objective`` (an objective, or its class:
    only class attributes are read) with ``cfg`` (a PretrainConfig, or anything whose ``methods`` maps
    method ids to options): those the objective names in ``pretrain_methods`` or that join on their own
    options (:meth:`PretrainMethod.wanted`), then what they require, transitively. What a cell computes
    with: the config hash holds the options of these methods only (``fusebench.spec.config``)."""
    declared = [str(m) for m in getattr(objective, "pretrain_methods", ())]
    for mid in declared:
        METHODS.get(mid)  # an unknown id is an error naming the valid ones
    chosen: list[str] = []
    for mid in declared + [m for m in METHODS.available() if m not in declared]:
        cls = METHODS.get(mid)
        if cls.wanted(objective, mid in declared, options_of(cfg, mid), cfg) and mid not in chosen:
            chosen.append(mid)
    i = 0
    while i < len(chosen):  # what the chosen methods require, transitively
        for req in METHODS.get(chosen[i]).requires:
            if req not in chosen:
                chosen.append(req)
        i += 1
    return chosen


def attach(objective: nn.Module, cfg: Any) -> list[PretrainMethod]:
    """The method instances that join a pretraining run of ``objective`` with PretrainConfig ``cfg``
    (:func:`joining`), in build order (not yet built)."""
    chosen = joining(objective, cfg)
    order = sorted(range(len(chosen)), key=lambda j: (METHODS.get(chosen[j]).build_order, j))
    return [METHODS.get(chosen[j])(options_of(cfg, chosen[j])) for j in order]


def unread_methods(objective: Any, cfg: Any) -> list[tuple[str, str]]:
    """(method id, the objective's attribute) for each method that joins a run of ``objective`` with ``cfg``
    (:func:`joining`) although the objective says its loss does not read it (its :attr:`PretrainMethod.read_by`
    attribute is False): what the runner refuses before any cell. Only class attributes are read."""
    out = []
    for mid in joining(objective, cfg):
        attr = getattr(METHODS.get(mid), "read_by", None)
        if attr and not getattr(objective, attr, True):
            out.append((mid, attr))
    return out


def epoch_update_kwargs(ext: Any, scaler: Any) -> dict[str, Any]:
    """The keywords an extension's ``epoch_update`` is called with beyond the positional ones: ``scaler`` (the main
    loop's gradient scaler at precision ``16-mixed``, else None) where its signature takes it (a ``scaler``
    parameter or ``**kwargs``). An extension written before the keyword existed is called without it where there is
    no scaler; at ``16-mixed``, where its candidate steps would run unscaled in float16 beside a scaled main loop, it
    is refused before the cell trains: one ConfigError naming the class and what to add."""
    import inspect

    try:
        params = inspect.signature(ext.epoch_update).parameters.values()
    except (TypeError, ValueError):  # a signature Python cannot read (a builtin): called as documented
        return {"scaler": scaler}
    if any(p.name == "scaler" or p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return {"scaler": scaler}
    if scaler is None:
        return {}
    cls = type(ext)
    raise ConfigError(f"pretraining extension {cls.__module__}:{cls.__qualname__}: its epoch_update takes no 'scaler' "
                      f"keyword, which precision 16-mixed passes (the main loop's gradient scaler: steps the extension "
                      f"takes must be scaled and unscaled by it); add 'scaler=None' to epoch_update and use it, or run "
                      f"at another precision")


def extensions(methods: list[PretrainMethod]) -> list[tuple[type, Any]]:
    """(extension class, its method's options) for every extension of ``methods``."""
    out = []
    for m in methods:
        for target in m.extensions:
            module, _, attr = target.partition(":")
            out.append((getattr(importlib.import_module(module), attr), m.options))
    return out


__all__ = ["METHODS", "DeprecatedKeyWarning", "NoOptions", "PretrainMethod", "attach", "check_methods",
           "epoch_update_kwargs", "extensions", "joining", "make_options", "method_class", "method_version", "option_values", "options_of",
           "register", "unread_methods"]
