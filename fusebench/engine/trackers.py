"""Experiment trackers: ``fusebench run B --logger tensorboard mlflow csv`` (docs/trackers.md).

A :class:`Tracker` receives, for one run cell: the resolved config (:meth:`Tracker.start`), every
training step's loss and throughput in both phases (:meth:`~Tracker.log_step`), the validation
metrics after every downstream epoch (:meth:`~Tracker.log_epoch`), the final metrics
(:meth:`~Tracker.log_final`) and the finished ``run.json`` (:meth:`~Tracker.log_artifact`).

The trackers only read what the run already computed: the loss value the loop recorded in its curve,
the validation scores the runner computed for model selection. Throughput is measured here with
``time.perf_counter`` from one step (or the epoch's start) to the next, never in the training numerics, so
a run's results are the same with or without trackers. TensorBoard and MLflow are optional (the
``trackers`` extra): they are imported only when asked for, and a missing one is one
:class:`TrackerError` naming the extra to install.

Trackers travel through the runner as a list of ids (picklable for the ``--workers`` processes) and
are built per cell with :func:`build_trackers`. The ids are a :class:`~fusebench.registry.Registry`
(:data:`TRACKERS`, lowercase ids, factories registered with ``@TRACKERS.register(id)``) like every
other component; third-party trackers come through the entry-point group ``fusebench.trackers``.
"""

from __future__ import annotations

import csv
import importlib
import json
import os
import re
import shlex
import time
from pathlib import Path
from typing import Any, Callable

from fusebench.registry import Registry
from fusebench.metrics import values_of
from fusebench.spec.config import ConfigError

INSTALL_HINT = "pip install -e .[trackers]"


class TrackerError(ConfigError):
    """An unknown tracker id, or a tracker whose package is not installed."""


class Tracker:
    """What every tracker implements (all no-ops here). ``phase`` is ``"pretrain"`` or ``"downstream"``;
    ``throughput`` is samples/s of that step, or None where it was not measured."""

    def start(self, cell_id: str, config: dict[str, Any]) -> None:
        """A cell begins: ``cell_id`` is ``<benchmark>/<objective>/seed<k>``, ``config`` the resolved spec."""

    def log_step(self, phase: str, step: int, loss: float, throughput: float | None, epoch: int | None = None) -> None:
        """One optimisation step (``step`` counts from 1 within the phase)."""

    def log_epoch(self, phase: str, epoch: int, metrics: dict[str, float]) -> None:
        """Metrics at the end of ``epoch`` (0-based) of ``phase``, e.g. ``{"val_acc": 0.8}``."""

    def log_final(self, metrics: dict[str, float]) -> None:
        """The run's final metrics, e.g. ``{"test/acc": 0.8, "val/acc": 0.81}``."""

    def log_artifact(self, path: Path) -> None:
        """A file of the run (its ``run.json``)."""

    def close(self, status: str = "FINISHED") -> None:
        """The cell ended: ``FINISHED``, ``FAILED`` or ``KILLED``."""


# ---------------------------------------------------------------------------------------------
# CSV
# ---------------------------------------------------------------------------------------------
class CsvTracker(Tracker):
    """``<cell>/metrics.csv`` with columns ``phase, step, epoch, name, value`` (one row per value,
    flushed after every row; appended to when a run is resumed). Step rows: ``name`` ``loss`` or
    ``samples_per_s``; epoch rows: ``val_<metric>`` (``step`` empty); final rows: phase ``final``."""

    COLUMNS = ("phase", "step", "epoch", "name", "value")

    def __init__(self, cell: Path) -> None:
        self.path = Path(cell) / "metrics.csv"
        self._file: Any = None
        self._writer: Any = None

    def start(self, cell_id: str, config: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        new = not self.path.exists() or self.path.stat().st_size == 0
        self._file = open(self.path, "a", newline="")
        self._writer = csv.writer(self._file)
        if new:
            self._row(*self.COLUMNS)

    def _row(self, *cells: Any) -> None:
        self._writer.writerow(["" if c is None else c for c in cells])
        self._file.flush()

    def log_step(self, phase, step, loss, throughput, epoch=None):
        self._row(phase, step, epoch, "loss", repr(float(loss)))  # repr: the float reads back exactly
        if throughput is not None:
            self._row(phase, step, epoch, "samples_per_s", repr(float(throughput)))

    def log_epoch(self, phase, epoch, metrics):
        for name, value in metrics.items():
            self._row(phase, None, epoch, name, repr(float(value)))

    def log_final(self, metrics):
        for name, value in metrics.items():
            self._row("final", None, None, name, repr(float(value)))

    def close(self, status="FINISHED"):
        if self._file is not None:
            self._file.close()
            self._file = None


# ---------------------------------------------------------------------------------------------
# TensorBoard
# ---------------------------------------------------------------------------------------------
class TensorBoardTracker(Tracker):
    """Event files in ``<cell>/tb/`` (``torch.utils.tensorboard.SummaryWriter``): scalars
    ``<phase>/loss`` and ``<phase>/samples_per_s`` by step, ``downstream/val_<metric>`` by epoch, the
    final metrics (``test/<metric>``, ``val/<metric>``) at step 0, the resolved config as text.
    TensorBoard stores scalars as float32."""

    def __init__(self, cell: Path) -> None:
        self.logdir = Path(cell) / "tb"
        self._writer: Any = None

    def start(self, cell_id: str, config: dict[str, Any]) -> None:
        SummaryWriter = _require("tensorboard", lambda: importlib.import_module("torch.utils.tensorboard")).SummaryWriter
        self._writer = SummaryWriter(log_dir=str(self.logdir))
        self._writer.add_text("config", "```\n" + json.dumps(config, indent=2, sort_keys=True, default=str) + "\n```")

    def log_step(self, phase, step, loss, throughput, epoch=None):
        self._writer.add_scalar(f"{phase}/loss", loss, step)
        if throughput is not None:
            self._writer.add_scalar(f"{phase}/samples_per_s", throughput, step)

    def log_epoch(self, phase, epoch, metrics):
        for name, value in metrics.items():
            self._writer.add_scalar(f"{phase}/{name}", value, epoch)
        self._writer.flush()

    def log_final(self, metrics):
        for name, value in metrics.items():
            self._writer.add_scalar(name, value, 0)
        self._writer.flush()

    def close(self, status="FINISHED"):
        if self._writer is not None:
            self._writer.close()
            self._writer = None


# ---------------------------------------------------------------------------------------------
# MLflow
# ---------------------------------------------------------------------------------------------
_KEY_CHARS = re.compile(r"[^\w./\- :]")  # MLflow keys: alphanumerics, _ . / - space :


def flatten(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"pretrain": {"epochs": 1}}`` -> ``{"pretrain.epochs": 1}`` (lists stay values)."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out


def mlflow_params(config: dict[str, Any], max_key: int = 250,
                  max_value: int = 6000) -> tuple[dict[str, str], list[str]]:
    """The flattened config as MLflow params: values as text (JSON for non-strings), cut to
    ``max_value`` characters (ending in ``...``); keys longer than ``max_key`` are left out and
    returned as the second element."""
    params, skipped = {}, []
    for key, value in flatten(config).items():
        key = _KEY_CHARS.sub("_", key)
        if len(key) > max_key:
            skipped.append(key)
            continue
        text = value if isinstance(value, str) else json.dumps(value, default=str)
        params[key] = text if len(text) <= max_value else text[: max_value - 3] + "..."
    return params, skipped


class MLflowTracker(Tracker):
    """One MLflow run per cell: experiment = the benchmark, run name = ``<objective>/seed<k>``,
    params = the flattened resolved config, metrics as for TensorBoard (step metrics sent in
    batches), ``run.json`` as an artifact. ``uri``: ``--mlflow-uri``, else ``MLFLOW_TRACKING_URI``,
    else ``file:<out>/.mlruns`` (hidden, so neither the leaderboard nor ``fusebench status`` reads it).
    MLflow >= 3 refuses a ``file:`` store unless ``MLFLOW_ALLOW_FILE_STORE`` is set; for a ``file:``
    URI it is set to ``true`` in this process when unset."""

    BATCH = 500  # metrics per log_batch call (MLflow allows 1000)

    def __init__(self, uri: str, cell: Path | None = None) -> None:
        self.uri, self.cell = uri, cell
        self._client: Any = None
        self._run_id: str | None = None
        self._pending: list[Any] = []

    def start(self, cell_id: str, config: dict[str, Any]) -> None:
        _require("mlflow", lambda: importlib.import_module("mlflow"))
        from mlflow.entities import Metric, Param
        from mlflow.exceptions import MlflowException
        from mlflow.tracking import MlflowClient

        if _is_file_uri(self.uri):
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        try:
            from mlflow.utils.validation import MAX_ENTITY_KEY_LENGTH as max_key, MAX_PARAM_VAL_LENGTH as max_value
        except ImportError:  # pragma: no cover - older MLflow
            max_key, max_value = 250, 6000
        self._Metric = Metric
        self._client = MlflowClient(tracking_uri=self.uri)
        benchmark, _, run_name = cell_id.partition("/")
        exp = self._client.get_experiment_by_name(benchmark)
        if exp is None:
            try:
                exp_id = self._client.create_experiment(benchmark)
            except MlflowException:  # another worker process created it first
                exp_id = self._client.get_experiment_by_name(benchmark).experiment_id
        else:
            exp_id = exp.experiment_id
        tags = {"fusebench.cell": cell_id}
        if self.cell is not None:
            tags["fusebench.cell_dir"] = str(Path(self.cell).resolve())
        self._run_id = self._client.create_run(exp_id, run_name=run_name or cell_id, tags=tags).info.run_id
        params, skipped = mlflow_params(config, max_key, max_value)
        items = [Param(k, v) for k, v in params.items()]
        for i in range(0, len(items), 100):  # MLflow takes at most 100 params per batch
            self._client.log_batch(self._run_id, params=items[i : i + 100])
        if skipped:
            self._client.set_tag(self._run_id, "fusebench.params_skipped", ", ".join(skipped)[:5000])

    def _metric(self, key: str, value: float, step: int) -> None:
        self._pending.append(self._Metric(_KEY_CHARS.sub("_", key), float(value), int(time.time() * 1000), int(step)))
        if len(self._pending) >= self.BATCH:
            self._flush()

    def _flush(self) -> None:
        if self._pending and self._run_id is not None:
            self._client.log_batch(self._run_id, metrics=self._pending)
        self._pending = []

    def log_step(self, phase, step, loss, throughput, epoch=None):
        self._metric(f"{phase}/loss", loss, step)
        if throughput is not None:
            self._metric(f"{phase}/samples_per_s", throughput, step)

    def log_epoch(self, phase, epoch, metrics):
        for name, value in metrics.items():
            self._metric(f"{phase}/{name}", value, epoch)
        self._flush()

    def log_final(self, metrics):
        for name, value in metrics.items():
            self._metric(name, value, 0)
        self._flush()

    def log_artifact(self, path):
        self._flush()
        self._client.log_artifact(self._run_id, str(path))

    def close(self, status="FINISHED"):
        if self._run_id is not None:
            try:
                self._flush()
            finally:
                self._client.set_terminated(self._run_id, status)
                self._run_id = None


def _is_file_uri(uri: str) -> bool:
    return uri.startswith("file:") or "://" not in uri and not uri.startswith(("sqlite:", "databricks"))


def default_mlflow_uri(out: str | Path, uri: str | None = None) -> str:
    """``uri``, else ``MLFLOW_TRACKING_URI``, else ``file:<out>/.mlruns`` (absolute)."""
    return uri or os.environ.get("MLFLOW_TRACKING_URI") or (Path(out).resolve() / ".mlruns").as_uri()


# ---------------------------------------------------------------------------------------------
# registry, group, factory
# ---------------------------------------------------------------------------------------------
#: tracker id -> factory ``(cell, out, mlflow_uri) -> Tracker`` (``cell``: the cell folder, ``out``: the
#: sweep's output folder, ``mlflow_uri``: ``--mlflow-uri`` or None); metadata ``requires``: the module an
#: optional tracker imports, checked before any training; ``where(out, mlflow_uri) -> str``: where it writes,
#: said when the run ends (:func:`written_where`). Plugins: entry-point group ``fusebench.trackers``,
#: value ``"package.module:factory"``.
TRACKERS = Registry("tracker", entry_point_group="fusebench.trackers")


@TRACKERS.register("csv", where=lambda out, uri: f"metrics.csv in each cell folder under {out}")
def _csv(cell: Path, out: Path, mlflow_uri: str | None) -> Tracker:
    return CsvTracker(cell)


@TRACKERS.register("tensorboard", requires="torch.utils.tensorboard",
                   where=lambda out, uri: f"tb/ in each cell folder under {out} (tensorboard --logdir {out})")
def _tensorboard(cell: Path, out: Path, mlflow_uri: str | None) -> Tracker:
    return TensorBoardTracker(cell)


def _mlflow_where(out: str | Path, uri: str | None) -> str:
    """The tracking URI and how to look at it: a server's page, else the ``mlflow ui`` command for the store (a
    ``file:`` store needs ``MLFLOW_ALLOW_FILE_STORE=true`` with MLflow 3, docs/trackers.md)."""
    store = default_mlflow_uri(out, uri)
    if store.startswith(("http://", "https://")):
        return f"tracking URI {store} (open it in a browser)"
    env = "MLFLOW_ALLOW_FILE_STORE=true " if store.startswith("file:") else ""
    return f"tracking URI {store} ({env}mlflow ui --backend-store-uri {shlex.quote(store)})"


@TRACKERS.register("mlflow", requires="mlflow", where=_mlflow_where)
def _mlflow(cell: Path, out: Path, mlflow_uri: str | None) -> Tracker:
    return MLflowTracker(default_mlflow_uri(out, mlflow_uri), cell)


def written_where(tracker: str, out: str | Path, mlflow_uri: str | None = None) -> str:
    """Where tracker ``tracker`` writes for a sweep into ``out`` (its registration's ``where``; a plugin that
    declares none: its own docs)."""
    where = TRACKERS.meta(tracker).get("where") if tracker in TRACKERS.available() else None
    return where(out, mlflow_uri) if callable(where) else "where its plugin writes (see its docs)"


def _require(name: str, load: Callable[[], Any]) -> Any:
    try:
        return load()
    except ImportError as e:
        raise TrackerError(f"--logger {name} needs the {name!r} package, which is not installed ({e}); "
                           f"install the trackers extra: {INSTALL_HINT}") from None


def check_trackers(ids: list[str] | None) -> list[str]:
    """Validate ``ids`` before any training: unknown ids and missing packages raise one
    :class:`TrackerError`. Returns the ids without duplicates, in order."""
    ids = list(dict.fromkeys(ids or []))
    valid = TRACKERS.available()
    unknown = [i for i in ids if i not in valid]
    if unknown:
        raise TrackerError(f"unknown logger(s) {', '.join(map(repr, unknown))}; valid: {', '.join(valid)}")
    for i in ids:
        module = TRACKERS.meta(i).get("requires")
        if module:
            _require(i, lambda: importlib.import_module(module))
    return ids


class Trackers(Tracker):
    """The trackers of one cell, called together; empty (and falsy) when none was asked for.
    :meth:`on_step` is the loop's step callback and measures the throughput."""

    def __init__(self, trackers: list[Tracker] | None = None) -> None:
        self.trackers = list(trackers or [])
        self._last: tuple[str, int, float] | None = None  # (phase, epoch, time) of the previous step

    def __bool__(self) -> bool:
        return bool(self.trackers)

    def __enter__(self) -> "Trackers":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.close("FINISHED")
            return
        try:  # the run's own exception is the one to see
            self.close("KILLED" if issubclass(exc_type, KeyboardInterrupt) else "FAILED")
        except Exception:
            pass

    def on_epoch_start(self, phase: Any) -> None:
        """Just before the first batch of an epoch of ``phase`` (a :class:`fusebench.engine.loop.Phase`)."""
        self._last = (phase.name, phase.epoch, time.perf_counter())

    def on_step(self, phase: Any, value: float, batch_size: int) -> None:
        """After a counted step of ``phase``: its loss and samples/s over the time since the previous
        step of the same epoch, or since the epoch started (None where neither was seen)."""
        now = time.perf_counter()
        last = self._last
        same = last is not None and last[:2] == (phase.name, phase.epoch) and now > last[2]
        throughput = batch_size / (now - last[2]) if same else None
        self.log_step(phase.name, phase.step, value, throughput, epoch=phase.epoch)
        self._last = (phase.name, phase.epoch, time.perf_counter())  # the trackers' own time left out

    def start(self, cell_id, config):
        for t in self.trackers:
            t.start(cell_id, config)

    def log_step(self, phase, step, loss, throughput, epoch=None):
        for t in self.trackers:
            t.log_step(phase, step, loss, throughput, epoch=epoch)

    def log_epoch(self, phase, epoch, metrics):
        for t in self.trackers:
            t.log_epoch(phase, epoch, metrics)

    def log_final(self, metrics):
        for t in self.trackers:
            t.log_final(metrics)

    def log_artifact(self, path):
        for t in self.trackers:
            t.log_artifact(path)

    def log_record(self, record: dict[str, Any], path: Path) -> None:
        """A finished cell: its final metrics (``test/<m>`` from ``metrics``, ``val/<m>`` from the
        selection's validation metrics) and ``path`` (its run.json) as an artifact."""
        if not self.trackers or record.get("status") is not None:
            return
        final = {f"test/{k}": v for k, v in values_of(record.get("metrics")).items() if _is_number(v)}
        val = (record.get("selection") or {}).get("val_metrics") or {}
        final.update({f"val/{k}": v for k, v in val.items() if _is_number(v)})
        self.log_final(final)
        self.log_artifact(path)

    def close(self, status="FINISHED"):
        errors = []
        for t in self.trackers:
            try:
                t.close(status)
            except Exception as e:  # close every tracker, then report
                errors.append(e)
        if errors:
            raise errors[0]


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def build_trackers(ids: list[str] | None, out: str | Path, cell: str | Path, mlflow_uri: str | None = None) -> Trackers:
    """The trackers ``ids`` for the cell folder ``cell`` of a sweep writing to ``out`` (an empty
    :class:`Trackers` for no ids; nothing optional is imported then)."""
    return Trackers([TRACKERS.get(i)(Path(cell), Path(out), mlflow_uri) for i in check_trackers(ids)])


__all__ = ["CsvTracker", "MLflowTracker", "TRACKERS", "TensorBoardTracker", "Tracker", "TrackerError", "Trackers",
           "build_trackers", "check_trackers", "default_mlflow_uri", "written_where"]
