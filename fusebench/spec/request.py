"""What is asked of a sweep and of each of its cells, as frozen, picklable objects (spec layer).

* :class:`SweepRequest`: the whole ``fusebench run`` -- the benchmark, objectives, seeds, output folder,
  spec overrides and every option -- typed and checked once. The CLI and :func:`fusebench.run` both build
  one; :func:`fusebench.sweep.runner.run` takes it. The precision policy is folded into the overrides here
  (``--precision P`` is ``--set precision=P``; the two disagreeing is refused), so the spec carries it.
* :class:`CellRequest`: *which* cell -- the resolved benchmark spec, the objective, the seed, and the
  sweep's output folder. Its :attr:`~CellRequest.cell` is the folder the cell writes.
* :class:`RunOptions`: *how* to run it -- synthetic data or a data root, the device, resume, progress
  output, a step limit (tests of killed runs), experiment trackers, DataLoader workers. None of these enter the config
  hash; they never change a result (the device decides only the ``numerics`` a record reports). The device
  is resolved once where cells run (:meth:`RunOptions.resolved`: ``auto`` becomes ``cpu``, ``cuda`` or
  ``mps``): by the sweep for local cells, by the job for a scheduler's (its node is not the submit host).

The sweep's ``context`` (measured once per sweep: the checkout's git state, the data fingerprint, the
hyper-parameters chosen on validation) travels beside them as a plain mapping.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Mapping

from fusebench.machine import check_device_name
from fusebench.registry import ID_RULE, valid_id
from fusebench.spec.config import BenchmarkSpec, ConfigError, check_seed, parse_override


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
        check_counts(self.cells_at_once, self.threads, self.num_workers)

    def but(self, **changes: Any) -> "RunOptions":
        """A copy with ``changes`` (e.g. ``resume=True`` for a requeued job)."""
        return replace(self, **changes)

    def resolved(self) -> "RunOptions":
        """These options with the device resolved on this machine (``auto``: cuda, then mps, then cpu; a named
        device checked to exist here): what a process that runs cells does once, before its first cell."""
        from fusebench.runtime.utils import resolve_device  # torch: only where cells run

        device = str(resolve_device(self.device))
        return self if device == self.device else replace(self, device=device)


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
    """The objective's hyper-parameters: ``pretrain.per_objective.<objective>.hparams`` updated with the values the
    validation search chose (``context["hparams"]``, see :func:`fusebench.sweep.selection.select_hparams`)."""
    return {**spec.pretrain.settings(objective).hparams, **((context or {}).get("hparams", {}).get(objective, {}))}


@dataclass(frozen=True)
class SweepRequest:
    """One ``fusebench run``: what to run and how, typed and checked when built (a ConfigError naming the option
    and what was expected), before anything is read or trained. ``fusebench.run(benchmark, **options)`` and the
    CLI build it; :func:`fusebench.sweep.runner.run` runs it.

    ``objectives`` / ``seeds``: None for the benchmark's own sweep. ``overrides``: dotted spec keys (a mapping, or
    ``KEY=VALUE`` strings as ``--set`` takes them). ``precision``: folded into ``overrides["precision"]``.
    ``encoder_weights``: ``{row name: weights file}``. ``workers``: cells run side by side (local processes);
    ``threads``: intra-op threads of each cell; ``num_workers``: DataLoader workers of each cell. ``launcher`` /
    ``launcher_options``: where the cells run (:mod:`fusebench.sweep.launchers`). ``plan``: judge every cell and
    selection and return what the sweep would do, running nothing (:mod:`fusebench.sweep.plan`)."""

    benchmark: str
    objectives: tuple[str, ...] | None = None
    seeds: tuple[int, ...] | None = None
    out: Path = Path("runs")
    overrides: Mapping[str, Any] = field(default_factory=dict)
    precision: str | None = None
    synthetic: bool = False
    data_root: str | None = None
    device: str = "auto"
    resume: bool = False
    progress: bool = True
    workers: int = 1
    threads: int | None = None
    num_workers: int | None = None
    loggers: tuple[str, ...] = ()
    mlflow_uri: str | None = None
    launcher: str = "local"
    launcher_options: Mapping[str, Any] = field(default_factory=dict)
    encoder_weights: Mapping[str, Any] = field(default_factory=dict)
    plan: bool = False

    def __post_init__(self) -> None:
        put = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731 (frozen)
        if not isinstance(self.benchmark, str) or not self.benchmark:
            raise ConfigError(f"benchmark: expected a benchmark id (fusebench list benchmarks), got {self.benchmark!r}")
        if self.objectives is not None:
            if not isinstance(self.objectives, str) and not hasattr(self.objectives, "__iter__"):
                raise ConfigError(f"--objective: expected one or more objective ids, got {self.objectives!r}")
            objs = (self.objectives,) if isinstance(self.objectives, str) else tuple(self.objectives)
            if not objs or not all(isinstance(o, str) for o in objs):
                raise ConfigError(f"--objective: expected one or more objective ids, got {self.objectives!r}")
            twice = sorted({o for o in objs if objs.count(o) > 1})
            if twice:
                raise ConfigError(f"--objective: {', '.join(twice)} given more than once")
            put("objectives", objs)
        if self.seeds is not None:
            if isinstance(self.seeds, (str, bytes)) or not hasattr(self.seeds, "__iter__"):
                raise ConfigError(f"--seeds: expected a list of integers, got {self.seeds!r}")
            seeds = tuple(check_seed(s) for s in self.seeds)
            twice = sorted({s for s in seeds if seeds.count(s) > 1})
            if twice:
                raise ConfigError(f"--seeds: seed(s) {', '.join(map(str, twice))} given more than once (a seed given "
                                  f"twice would count one run twice)")
            put("seeds", seeds)
        if not isinstance(self.out, (str, Path)) or not str(self.out):
            raise ConfigError(f"--out: expected a folder, got {self.out!r}")
        put("out", Path(self.out))
        put("overrides", _overrides(self.overrides, self.precision))
        for name in ("synthetic", "resume", "progress", "plan"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name}: expected True or False, got {getattr(self, name)!r}")
        if self.data_root is not None and (not isinstance(self.data_root, (str, Path)) or not str(self.data_root)):
            # '' would be read as the current folder: refused as --out '' is
            raise ConfigError(f"--data-root: expected a folder or file, got {self.data_root!r}")
        put("data_root", None if self.data_root is None else str(self.data_root))
        try:
            check_device_name(self.device)  # the one rule (fusebench.machine); whether this machine has it: resolved()
        except ValueError as e:
            raise ConfigError(str(e)) from None
        check_counts(self.workers, self.threads, self.num_workers)
        loggers = (self.loggers,) if isinstance(self.loggers, str) else tuple(self.loggers or ())
        if not all(isinstance(x, str) for x in loggers):
            raise ConfigError(f"--logger: expected tracker ids, got {self.loggers!r}")
        put("loggers", loggers)
        for name in ("launcher_options", "encoder_weights"):
            value = getattr(self, name)
            if value is None:
                value = {}
            if not isinstance(value, Mapping):
                raise ConfigError(f"{name}: expected a mapping, got {value!r}")
            put(name, dict(value))
        if not isinstance(self.launcher, str):
            raise ConfigError(f"--launcher: expected a launcher id, got {self.launcher!r}")

    @classmethod
    def of(cls, benchmark: "str | SweepRequest", **options: Any) -> "SweepRequest":
        """``benchmark`` as a request (``options`` applied to a request given), with the keyword names
        ``fusebench.run`` has always taken (``objective`` for ``objectives``); an unknown keyword is a
        ConfigError naming the known ones."""
        if "objective" in options:
            if "objectives" in options:
                raise ConfigError("give objective or objectives, not both")
            options["objectives"] = options.pop("objective")
        known = {f.name for f in fields(cls)} - {"benchmark"}
        unknown = sorted(set(options) - known)
        if unknown:
            raise ConfigError(f"fusebench.run: unknown option(s) {', '.join(unknown)}; known: "
                              f"{', '.join(sorted(known | {'objective'}))}")
        if isinstance(benchmark, SweepRequest):
            return replace(benchmark, **options) if options else benchmark
        return cls(benchmark, **options)


#: the counted options of a run: flag -> (the least value, what a value counts)
COUNTED: dict[str, tuple[int, str]] = {"--workers": (1, "cells run side by side"),
                                       "--threads": (1, "torch threads per cell"),
                                       "--num-workers": (0, "DataLoader worker processes per cell")}


def check_count(value: Any, flag: str) -> int:
    """``value`` of the counted option ``flag`` (:data:`COUNTED`), checked by the one rule the CLI's parser, the
    request and the run options apply: an integer (not a boolean) at least the flag's least value; else one
    ConfigError naming the flag, what it counts and the value."""
    least, what = COUNTED[flag]
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        expected = "a positive integer" if least == 1 else f"an integer >= {least}"
        raise ConfigError(f"{flag}: expected {expected} ({what}), got {value!r}")
    return value


def check_counts(workers: Any, threads: Any, num_workers: Any) -> None:
    """``--workers``, and ``--threads`` / ``--num-workers`` where given (None: the default), by :func:`check_count`."""
    check_count(workers, "--workers")
    for value, flag in ((threads, "--threads"), (num_workers, "--num-workers")):
        if value is not None:
            check_count(value, flag)


def override_mapping(given: Any) -> dict[str, Any]:
    """``given`` -- None, a mapping of dotted spec keys, or ``KEY=VALUE`` strings as ``--set`` takes them (one string
    or a list) -- as one mapping, each setting given once; anything else is a ConfigError. The overrides
    :func:`fusebench.run` and :func:`fusebench.benchmarks.load` take."""
    return _overrides(given, None)


def _overrides(given: Any, precision: Any) -> dict[str, Any]:
    """``overrides`` as one mapping (``KEY=VALUE`` strings parsed as ``--set`` does, :func:`set_values`), with
    ``precision`` folded in as ``precision`` (the two disagreeing is refused)."""
    if given is None:
        given = {}
    if isinstance(given, str):
        given = [given]
    if isinstance(given, Mapping):
        pairs = list(given.items())
    elif isinstance(given, (list, tuple)) and all(isinstance(o, str) for o in given):
        pairs = set_values(given)
    else:
        raise ConfigError(f"overrides: expected a mapping of dotted keys or KEY=VALUE strings, got {given!r}")
    if not all(isinstance(k, str) for k, _ in pairs):
        raise ConfigError(f"overrides: keys must be dotted spec keys (strings), got "
                          f"{sorted(repr(k) for k, _ in pairs)}")
    _check_set_once(pairs)
    out = dict(pairs)
    if precision is not None:
        if "precision" in out and str(out["precision"]) != str(precision):
            raise ConfigError(f"--precision {precision} and --set precision={out['precision']} disagree")
        out["precision"] = str(precision)
    return out


def set_values(texts: Any) -> list[tuple[str, Any]]:
    """``--set KEY=VALUE`` texts as (key, value) pairs in their order, each parsed by
    :func:`~fusebench.spec.config.parse_override` (the value as YAML). A value YAML would cut at a comment
    (``description=a # b`` reads ``a``) is a ConfigError naming the key: the text after ``#`` would be dropped
    without a word."""
    pairs = []
    for text in texts:
        key, value = parse_override(text)
        raw = text.partition("=")[2]
        dropped = _yaml_comment(raw, value)
        if dropped is not None:
            shown = raw.strip()
            quoted = "" if set(shown) & set("'\"") else f" (--set '{key}=\"{shown}\"')"
            raise ConfigError(f"--set {key}={shown}: YAML reads {dropped!r} as a comment, so {key} would be "
                              f"{value!r}; quote the whole value to keep the text{quoted}, or drop the comment")
        pairs.append((key, value))
    return pairs


def _yaml_comment(raw: str, value: Any) -> str | None:
    """The comment YAML drops from ``raw``, the text of a ``--set`` value that was read as ``value``: from a ``#``
    at the start or after a blank, outside quotes (the text before it reads as the same value); None when there is
    none, or when the text was kept as it is (YAML could not read it)."""
    import re

    import yaml

    from fusebench.typed import load_yaml

    if isinstance(value, str) and value == raw:
        return None
    for m in re.finditer(r"(?:^|(?<=\s))#", raw):
        head = raw[:m.start()]
        try:
            read = load_yaml(head, "--set") if head.strip() else None
        except (yaml.YAMLError, ConfigError):  # the '#' is inside a quoted (or unfinished) value
            continue
        if read == value or (read is None and value == ""):
            return raw[m.start():].strip()
    return None


def _check_set_once(pairs: list[tuple[str, Any]]) -> None:
    """Each setting set once: a key given twice (``--set k=1 --set k=2``, or one setting under both its names,
    ``pretrain.per_objective.<id>.<setting>`` and ``pretrain.<table>.<id>``), or a key given after a key inside it
    (``pretrain.hparams.m3g.eps=1`` then ``pretrain.hparams.m3g={...}``, or ``pretrain.per_objective.m3g={...}``,
    which replace it), is a ConfigError naming the key and both values: the second would replace the first
    without a word. A key inside one given before it refines that value: accepted."""
    from fusebench.spec.config import GROUPED, PER_OBJECTIVE, grouped_override

    seen: list[tuple[str, str, Any]] = []  # (the setting's canonical key, the key as given, the value)
    for key, value in pairs:
        canonical = grouped_override(key.strip(), f"--set {key}")
        parts = canonical.split(".")
        covers = [canonical]  # what setting this key replaces: its own key, and the keys inside it
        if parts[:2] == ["pretrain", GROUPED] and len(parts) <= 3:  # a block spread over the per-objective tables
            covers += [".".join(["pretrain", table, *parts[2:]]) for table in PER_OBJECTIVE]
        for before_canonical, before, before_value in seen:
            if canonical == before_canonical:
                same = "" if before == key else f" (as {before} and as {key}: one setting)"
                raise ConfigError(f"--set {key} given twice{same}: {before}={before_value!r}, then "
                                  f"{key}={value!r}; the second would replace the first: give it once")
            if any(before_canonical == c or before_canonical.startswith(c + ".") for c in covers):
                raise ConfigError(f"--set {key}={value!r} replaces the whole of {key}, so the --set "
                                  f"{before}={before_value!r} given before it would be dropped; give {before} "
                                  f"after it, or inside its value")
        seen.append((canonical, key, value))


__all__ = ["COUNTED", "CellRequest", "RunOptions", "SweepCells", "SweepRequest", "cell_dir", "check_cell_ids",
           "check_count", "check_counts", "objective_hparams", "override_mapping", "set_values"]
