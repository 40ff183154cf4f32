"""The pipeline registry (``fusebench.pipelines``): built-ins, typos, duplicates, a plugin pipeline run
end to end through ``fusebench.run``, and the runner reading the declared properties."""

from __future__ import annotations

import importlib.metadata as md
import json
import sys
import types
from pathlib import Path

import pytest

from fusebench import pipelines as P
from fusebench import registry as R
from fusebench.metrics import values_of


@pytest.fixture
def fresh_pipelines(monkeypatch: pytest.MonkeyPatch):
    """PIPELINES with its plugins read again (restored afterwards); returns a function installing fake
    entry points of the group ``fusebench.pipelines``."""
    reg = P.PIPELINES
    reg.available()  # built-ins in place before the copy
    for attr in ("_entries", "_meta", "_lazy", "_origin", "_plugin_of"):
        monkeypatch.setattr(reg, attr, dict(getattr(reg, attr)))
    monkeypatch.setattr(reg, "_plugins_loaded", False)
    real = R.entry_points

    def install(*eps: md.EntryPoint) -> None:
        monkeypatch.setattr(R, "entry_points", lambda group: [e for e in eps if e.group == group]
                            if group == "fusebench.pipelines" else real(group=group))

    return install


def test_builtins_and_declared_properties() -> None:
    assert P.available() == ["gaussian_mi", "standard"]
    assert P.PIPELINES.meta("standard") == {"reads_dataset": True, "downstream": True, "builds_encoder": True,
                                            "precisions": ("32", "tf32", "bf16-mixed", "16-mixed")}
    assert P.PIPELINES.meta("gaussian_mi") == {"reads_dataset": False, "downstream": False, "builds_encoder": False,
                                               "precisions": ("32",)}
    from fusebench import benchmarks

    assert isinstance(P.pipeline_of(benchmarks.load("quickstart")), P.StandardPipeline)
    assert isinstance(P.pipeline_of(benchmarks.load("polyview-gaussian-mi")), P.GaussianMIPipeline)


def test_unknown_pipeline_names_the_valid_ones(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(R.UnknownNameError, match=r"unknown pipeline 'standrad'\. Did you mean 'standard'\?"
                                                 r" Valid pipeline ids: gaussian_mi, standard"):
        P.PIPELINES.get("standrad")
    from fusebench import benchmarks
    from fusebench.spec.config import ConfigError

    (tmp_path / "odd-pipeline.yaml").write_text("description: x\npipeline: gausian_mi\n")
    monkeypatch.setenv("FUSEBENCH_BENCHMARKS", str(tmp_path))
    with pytest.raises(ConfigError, match=r"pipeline 'gausian_mi' is not registered; valid pipeline ids: "
                                          r"gaussian_mi, standard"):
        benchmarks.load("odd-pipeline")


@pytest.mark.parametrize("edit,message", [
    (lambda d: d["dataset"].pop("id"), "dataset.id is required"),
    (lambda d: d["encoder"].pop("id"), "encoder.id is required"),
    (lambda d: d.update(metrics=[]), "metrics must list at least one metric id"),
    (lambda d: d.update(selection_metric="bacc", metrics=["acc"]), "selection_metric 'bacc' is not in metrics"),
    (lambda d: (d["dataset"].pop("id"), d.update(metrics=[])),
     "dataset.id is required; metrics must list at least one metric id"),
])
def test_the_pipeline_says_what_a_spec_must_contain(edit, message, tmp_path: Path, monkeypatch) -> None:
    """The spec loader asks the spec's pipeline what is missing (``Pipeline.spec_problems``) and names the
    file; the Gaussian MI pipeline reads no dataset and builds no encoder, so it asks for neither."""
    import yaml

    from fusebench import benchmarks
    from fusebench.spec.config import ConfigError

    spec = yaml.safe_load(benchmarks.path("quickstart").read_text())
    edit(spec)
    (tmp_path / "bad-spec.yaml").write_text(yaml.safe_dump(spec))
    monkeypatch.setenv("FUSEBENCH_BENCHMARKS", str(tmp_path))
    with pytest.raises(ConfigError, match=r"bad-spec\.yaml: " + message.replace("(", r"\(")):
        benchmarks.load("bad-spec")
    mi = yaml.safe_load(benchmarks.path("polyview-gaussian-mi").read_text())
    assert not mi.get("encoder", {}).get("id") and not mi.get("dataset", {}).get("id")
    assert P.pipeline_of(benchmarks.load("polyview-gaussian-mi")).spec_problems(benchmarks.load("polyview-gaussian-mi")) == []


def test_duplicate_pipeline_ids_are_errors(fresh_pipelines, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(R.DuplicateIdError, match=r"pipeline id 'standard' is registered twice: by "
                                                 r"fusebench.pipelines:StandardPipeline and by .*Other"):
        P.PIPELINES.add("standard", type("Other", (P.Pipeline,), {}))
    mod = types.ModuleType("fb_fake_pipelines")
    mod.Shadow = type("Shadow", (P.Pipeline,), {})
    monkeypatch.setitem(sys.modules, "fb_fake_pipelines", mod)
    fresh_pipelines(md.EntryPoint("gaussian_mi", "fb_fake_pipelines:Shadow", "fusebench.pipelines"))
    # a plugin cannot take a built-in id: left out with one warning naming its entry point (the rest loads)
    with pytest.warns(R.PluginWarning, match=r"pipeline plugin left out: entry point 'gaussian_mi = "
                                             r"fb_fake_pipelines:Shadow' .*: pipeline id 'gaussian_mi' is taken "
                                             r"already \(by fusebench.pipelines:GaussianMIPipeline\)"):
        assert P.available() == ["gaussian_mi", "standard"]
    assert P.PIPELINES.get("gaussian_mi") is P.GaussianMIPipeline


class _Constant(P.Pipeline):
    """A plugin pipeline: no dataset, no downstream protocol; records one constant per view count."""

    reads_dataset = False
    downstream = False
    options = ("views",)  # the spec's options.views: the view counts
    calls: list = []

    def view_counts(self, spec):
        return [int(k) for k in spec.options.get("views", [2])]

    def run_cell(self, request, options, context, trackers):
        import torch

        from fusebench.records.cell_file import write_record
        from fusebench.records.builder import build_record

        spec, objective, seed = request.spec, request.objective, request.seed
        type(self).calls.append((objective, seed, options.data_root, context is not None))
        metrics = {f"constant_k{k}": float(k + seed) for k in self.view_counts(spec)}
        record = build_record(request, True, torch.device("cpu"), {}, None, curves={}, val=None, test=metrics,
                              best_epoch=-1, wall_time=0.0, pretrain_time=0.0, model=None, diagnostics={},
                              context=context,
                              fields={"metric_directions": {m: "higher" for m in metrics},
                                      "selection": {"rule": "none", "metric": None, "best_epoch": -1, "val_metrics": None}})
        write_record(request.cell, record)
        return record


def test_plugin_pipeline_runs_through_the_runner(fresh_pipelines, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    mod = types.ModuleType("fb_fake_pipelines")
    mod.Constant = _Constant
    monkeypatch.setitem(sys.modules, "fb_fake_pipelines", mod)
    monkeypatch.setattr(_Constant, "calls", [])
    fresh_pipelines(md.EntryPoint("constant", "fb_fake_pipelines:Constant", "fusebench.pipelines"))
    assert P.available() == ["constant", "gaussian_mi", "standard"]
    assert P.PIPELINES.meta("constant") == {"reads_dataset": False, "downstream": False, "builds_encoder": False,
                                            "precisions": ("32",)}

    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "plugin-constant.yaml").write_text(
        "description: a benchmark of a plugin pipeline\npipeline: constant\nobjectives: [infonce_pwe]\n"
        "seeds: [0, 1]\noptions:\n  views: [2, 3]\n")
    monkeypatch.setenv("FUSEBENCH_BENCHMARKS", str(specs))
    import fusebench
    from fusebench import benchmarks
    from fusebench.components import compat

    spec = benchmarks.load("plugin-constant")
    assert compat.num_views(spec) == 3
    # the reference rows need a downstream protocol; a 2-view objective does not fit k = 3
    assert "baseline applies to standard benchmarks only" in compat._incompatibility(spec, "none")
    assert "takes exactly 2 views" in compat._incompatibility(spec, "matching_gap")
    # no --data-root and no --synthetic: fine, the pipeline reads no dataset
    records = fusebench.run("plugin-constant", out=tmp_path / "runs", progress=False)
    assert [values_of(r["metrics"]) for r in records] == [{"constant_k2": 2.0, "constant_k3": 3.0},
                                               {"constant_k2": 3.0, "constant_k3": 4.0}]
    assert _Constant.calls == [("infonce_pwe", 0, None, True), ("infonce_pwe", 1, None, True)]
    rec = json.loads((tmp_path / "runs" / "plugin-constant" / "infonce_pwe" / "seed1" / "run.json").read_text())
    assert rec["dataset"] == {"id": "constant", "manifest_hash": "synthetic", "synthetic": True, "fingerprint": None}
    assert {m: e["direction"] for m, e in rec["metrics"].items()} == {"constant_k2": "higher", "constant_k3": "higher"}
    assert fusebench.run("plugin-constant", out=tmp_path / "runs", progress=False) == records  # cells are kept
    assert len(_Constant.calls) == 2


def test_list_pipelines(capsys) -> None:
    from fusebench.cli import main

    assert main(["list", "pipelines"]) == 0
    out = capsys.readouterr().out
    assert {line.split(":")[0] for line in out.splitlines() if not line.startswith(" ")} == set(P.available())
    assert "standard: Dataset adapter" in out and "reads a dataset: no; downstream protocol: no" in out
