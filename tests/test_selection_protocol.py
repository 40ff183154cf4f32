"""Issue #30 item 1: hyper-parameters are selected on what the board ranks, before any evaluation cell,
and the outcome is a frozen, recorded input of the cells.

* a spec whose ``selection_metric`` differs from ``comparison.primary`` is refused unless it says why;
* the selection metric defaults to the primary metric (the metric id is the spec's: switching the primary
  switches what selects, no code change);
* every grid point's score is the mean over the selection seeds of the trial's validation value of that
  metric (worked out here from the trials' per-draw few-shot accuracies), and a choice on a grid edge is
  recorded (``at_edge``);
* ``<out>/<benchmark>/_selection/<objective>.json`` exists before the first evaluation cell starts, its
  sha256 is in every record, and a later sweep (resume) reuses it without running a trial again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import pytest

import fusebench
from fusebench.components.identity import spec_hash
from fusebench import benchmarks, metrics, objectives
from fusebench.sweep import launchers, runner, selection
from fusebench.engine.cell import ConfigMismatchError
from fusebench.spec.config import ConfigError
from fusebench.spec.request import RunOptions
from fusebench.components.spec_check import load_spec

GRID = [0.1, 0.5, 1.0]
FAST = {"pretrain.epochs": 1, "pretrain.batch_size": 32, "metrics": ["fs1_best_acc", "fs1_acc", "knn_acc", "acc"],
        "options.embedding_eval": {"l2_grid": [1.0], "cluster_on": "all", "n_init": 1, "fewshot_shots": [1],
                                   "fewshot_draws": 3, "knn_grid": [1, 5]},
        "pretrain.grid": {"infonce_pwe": {"tau": GRID}}, "pretrain.selection_seeds": [1000, 1001]}


def _ngs(fixtures_dir: Path) -> str:
    return str(fixtures_dir / "multiview" / "NGs.mat")


# ---------------------------------------------------------------------------------------------
# the spec: default and refusal
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", [n for n in benchmarks.builtin() if n.startswith("mv-") and not n.endswith("-4x")])
def test_the_real_boards_select_on_their_primary_metric_over_wide_grids(name: str) -> None:
    spec = load_spec(benchmarks.path(name))
    assert spec.comparison["primary"] == "fs1_best_acc" and spec.selection_metric == ""
    assert spec.validation_metric == "fs1_best_acc"  # the default: what the board ranks
    assert spec.to_dict()["selection_metric"] == "fs1_best_acc"  # resolved in the recorded config (and its hash)
    if name in ("mv-handwritten", "mv-hw2sources", "mv-leaves100", "mv-ngs"):  # (others: a split the file ships)
        assert spec.dataset.outer_test_seed is not None  # item 4: one fixed test split
    # every objective's grid: 7 values of tau or of eps, or BYOL's 3 momenta x 2 predictor widths
    for o, grid in spec.pretrain.grid.items():
        if "tau" in grid:
            assert grid == {"tau": [0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0]}, o
        elif "eps" in grid:
            assert grid == {"eps": [0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0]}, o
        else:
            assert grid == {"methods.ema_teacher.momentum": [0.9, 0.99, 0.996],
                            "methods.ema_teacher.predictor_hidden": [128, 512]}, o


def test_a_selection_metric_apart_from_the_primary_is_refused_unless_the_spec_says_why() -> None:
    path = benchmarks.path("mv-ngs")
    with pytest.raises(ConfigError, match=r"mv-ngs\.yaml: selection_metric 'acc' differs from comparison\.primary "
                                          r"'fs1_best_acc'.*selection_metric_why"):
        load_spec(path, overrides={"selection_metric": "acc"})
    spec = load_spec(path, overrides={"selection_metric": "acc", "selection_metric_why": "a test of the rule"})
    assert spec.validation_metric == "acc"
    # the same metric named explicitly needs no reason; a reason for nothing is refused (never recorded and ignored)
    assert load_spec(path, overrides={"selection_metric": "fs1_best_acc"}).validation_metric == "fs1_best_acc"
    with pytest.raises(ConfigError, match="selection_metric_why is read only where selection_metric differs"):
        load_spec(path, overrides={"selection_metric_why": "no divergence"})
    # switching the primary switches what selects, with no other change
    assert load_spec(path, overrides={"comparison.primary": "knn_acc"}).validation_metric == "knn_acc"


def test_the_reason_is_not_identity_but_the_resolved_selection_metric_is() -> None:
    base = benchmarks.load("mv-ngs")
    why = benchmarks.load("mv-ngs", overrides={"selection_metric": "acc", "selection_metric_why": "x"})
    why2 = benchmarks.load("mv-ngs", overrides={"selection_metric": "acc", "selection_metric_why": "another text"})
    assert spec_hash(why, "m3g") == spec_hash(why2, "m3g") != spec_hash(base, "m3g")
    # comparison is not identity, but an unset selection_metric follows its primary: the hash must follow too
    knn = benchmarks.load("mv-ngs", overrides={"comparison.primary": "knn_acc"})
    assert spec_hash(knn, "m3g") != spec_hash(base, "m3g")
    assert "selection_metric_why" not in base.to_dict()  # old records' canonical form is unchanged


@pytest.mark.parametrize("grid, choice, edge", [
    ({"tau": [0.05, 0.1, 0.2, 0.5, 1.0]}, {"tau": 0.05}, ["tau"]),
    ({"tau": [0.05, 0.1, 0.2, 0.5, 1.0]}, {"tau": 1.0}, ["tau"]),
    ({"tau": [0.05, 0.1, 0.2, 0.5, 1.0]}, {"tau": 0.2}, []),
    ({"tau": [0.5, 0.1, 0.2]}, {"tau": 0.2}, []),  # the edge is the smallest / largest value, not the list's end
    ({"tau": [0.5, 0.1, 0.2]}, {"tau": 0.5}, ["tau"]),
    ({"a": [1, 2, 3], "b": [0.9, 0.99]}, {"a": 2, "b": 0.99}, ["b"]),
    ({"tau": [0.2]}, {"tau": 0.2}, []),  # one value: no search, no edge
    ({"m": ["x", "y"]}, {"m": "x"}, []),  # not ordered: no edge
])
def test_at_edge(grid, choice, edge) -> None:
    assert selection.at_edge(grid, choice) == edge


# ---------------------------------------------------------------------------------------------
# a sweep
# ---------------------------------------------------------------------------------------------
def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def test_selection_is_frozen_before_the_first_cell_scored_on_the_primary_and_reused_on_resume(
        tmp_path: Path, fixtures_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "runs"
    path = out / "mv-ngs" / "_selection" / "infonce_pwe.json"
    seen: list[tuple[str, bool]] = []
    real_cell = launchers.sweep_cell

    def cell(request, options, context):  # what exists when an evaluation cell starts
        seen.append((request.where, path.is_file()))
        return real_cell(request, options, context)

    monkeypatch.setattr(launchers, "sweep_cell", cell)
    recs = fusebench.run("mv-ngs", objective=["none", "infonce_pwe"], seeds=[0], out=out, data_root=_ngs(fixtures_dir),
                         overrides=FAST, progress=False)
    # 'none' comes first in the sweep, yet the selection of infonce_pwe was frozen before it started
    assert seen == [("mv-ngs/none/seed0", True), ("mv-ngs/infonce_pwe/seed0", True)]
    frozen = json.loads(path.read_bytes())
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert frozen["metric"] == "fs1_best_acc" and frozen["seeds"] == [1000, 1001] and frozen["grid"] == {"tau": GRID}
    # every point's score, by hand: the mean over the selection seeds of the mean over draws of the validation
    # accuracy of that trial's chosen 1-shot probe (logistic or prototype, the higher mean; ties to logistic)
    folder = out / ".selection" / "mv-ngs" / "infonce_pwe"
    by_hand = []
    for i, tau in enumerate(GRID):
        per_seed = {}
        for s in (1000, 1001):
            trial = json.loads((folder / f"trial{i}-tau{tau}" / f"seed{s}" / "mv-ngs" / "infonce_pwe" / f"seed{s}"
                                / "run.json").read_text())
            one = trial["selection"]["fewshot"]["per_shot"]["1"]
            logistic, proto = one["val_acc_per_draw"], one["prototype"]["val_acc_per_draw"]
            assert len(logistic) == len(proto) == 3
            per_seed[str(s)] = max(_mean(logistic), _mean(proto))
        by_hand.append(per_seed)
        assert frozen["scores"][i]["hparams"] == {"tau": tau}
        assert frozen["scores"][i]["val_by_seed"] == pytest.approx(per_seed, abs=1e-12)
        assert frozen["scores"][i]["val"] == pytest.approx(_mean(list(per_seed.values())), abs=1e-12)
    means = [_mean(list(p.values())) for p in by_hand]
    best = max(range(len(GRID)), key=lambda i: (means[i], -i))  # ties: the first in grid order
    assert frozen["choice"] == {"tau": GRID[best]}
    assert frozen["at_edge"] == (["tau"] if GRID[best] in (min(GRID), max(GRID)) else [])
    # the frozen outcome and its hash are inputs of the evaluation record; the reference row has none
    by = {r["objective"]: r for r in recs}
    assert by["infonce_pwe"]["hparam_selection"] == frozen
    assert by["infonce_pwe"]["hparam_selection_sha256"] == digest
    assert by["infonce_pwe"]["hparams"]["tau"] == GRID[best]
    assert by["none"]["hparam_selection"] is None and "hparam_selection_sha256" not in by["none"]
    assert json.loads((out / "mv-ngs" / "infonce_pwe" / "seed0" / "run.json").read_text())[
        "hparam_selection_sha256"] == digest
    # the board says when the choice lies on the grid's edge
    from fusebench.leaderboard import write_leaderboards

    write_leaderboards(out, tmp_path / "boards", plots=False)
    line = next(x for x in (tmp_path / "boards" / "mv-ngs.md").read_text().splitlines()
                if x.startswith("- hyper-parameters chosen on the validation split:"))
    assert (f"tau={GRID[best]} of [0.1, 0.5, 1.0] (on the grid's edge)" in line) == bool(frozen["at_edge"]), line
    assert f"tau={GRID[best]} of [0.1, 0.5, 1.0]" in line

    # resume: another evaluation seed and a deleted trial record; no trial may run again
    def no_trial(*args, **kwargs):
        raise AssertionError("a selection trial ran although the selection is frozen")

    for p in folder.rglob("run.json"):
        p.unlink()
    monkeypatch.setattr(selection, "run_cell", no_trial)
    more = fusebench.run("mv-ngs", objective="infonce_pwe", seeds=[0, 1], out=out, data_root=_ngs(fixtures_dir),
                         overrides=FAST, progress=False)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == digest  # the file is untouched
    assert [r["hparam_selection_sha256"] for r in more] == [digest, digest]
    assert more[1]["hparams"]["tau"] == GRID[best] and more[1]["seed"] == 1

    # a sweep with another grid into the same folder is refused, naming the file; nothing is mixed
    other = {**FAST, "pretrain.grid": {"infonce_pwe": {"tau": [0.2, 0.5]}}}
    with pytest.raises(ConfigMismatchError, match=r"_selection/infonce_pwe\.json: the frozen hyper-parameter "
                                                   r"selection .* another configuration or other data: config_hash"):
        selection.freeze_selection(benchmarks.load("mv-ngs", overrides=other), "infonce_pwe", out,
                                   RunOptions(data_root=_ngs(fixtures_dir)), {})
    # one written before its folder was migrated to hash schema 4 (the same configuration's schema-3 hash): the
    # advice is the migration, not deleting the file and the cells made with it
    from fusebench.components.identity import config_hash

    current = benchmarks.load("mv-ngs", overrides=FAST)
    runner.resolve_views(current, False, _ngs(fixtures_dir))
    old_hash = config_hash(current.to_dict(), "infonce_pwe", 3)
    assert old_hash != frozen["config_hash"]
    kept = path.read_bytes()
    path.write_text(json.dumps({**json.loads(kept), "config_hash": old_hash}, indent=2, sort_keys=True) + "\n")
    with pytest.raises(ConfigMismatchError, match=r"_selection/infonce_pwe\.json: the frozen hyper-parameter "
                                                   r"selection .* under an older hash schema .*migrate_hash_schema_4\.py"):
        selection.freeze_selection(current, "infonce_pwe", out, RunOptions(data_root=_ngs(fixtures_dir)), {})
    path.write_bytes(kept)
    # so is one whose trials another version of the loss ran (the config hash covers the configuration, not the code)
    assert frozen["versions"]["objective"] == "1"
    monkeypatch.setattr(objectives.OBJECTIVES.get("infonce_pwe"), "version", "2")
    same = benchmarks.load("mv-ngs", overrides=FAST)
    runner.resolve_views(same, False, _ngs(fixtures_dir))  # the views the sweep read off the file
    with pytest.raises(ConfigMismatchError, match=r"_selection/infonce_pwe\.json: the frozen hyper-parameter "
                                                   r"selection .* by other code .*objective 'infonce_pwe' version '1', "
                                                   r"now '2'"):
        selection.freeze_selection(same, "infonce_pwe", out, RunOptions(data_root=_ngs(fixtures_dir)),
                                   {"fingerprint": {"sha256": frozen["data_sha256"]}})
    monkeypatch.undo()
    # and by the version of the metric that scored its trials, the selection metric, alone of the metrics
    assert set(frozen["versions"]["metrics"]) == {same.validation_metric} == {"fs1_best_acc"}
    real = metrics.get
    for bumped_id, refused in (("acc", False), ("fs1_best_acc", True)):
        monkeypatch.setattr(metrics, "get", lambda mid, b=bumped_id: dataclasses.replace(real(mid), version="3")
                            if mid == b else real(mid))
        call = lambda: selection.freeze_selection(same, "infonce_pwe", out, RunOptions(data_root=_ngs(fixtures_dir)),
                                                  {"fingerprint": {"sha256": frozen["data_sha256"]}})
        if refused:
            with pytest.raises(ConfigMismatchError, match=r"by other code .*metric 'fs1_best_acc' version '2', now '3'"):
                call()
        else:
            assert call()[1] == digest  # another metric's version: the selection stands
        monkeypatch.undo()


def test_a_trial_states_its_validation_metrics_versions_and_an_unversioned_file_is_judged_by_its_trials(
        tmp_path: Path, fixtures_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A trial record has no test metrics to carry their versions: ``selection.val_versions`` does, and its reuse is
    judged by them; a frozen file written before files stated versions is judged by its trials' records."""
    small = {**FAST, "pretrain.grid": {"infonce_pwe": {"tau": [0.1, 0.5]}}, "pretrain.selection_seeds": [1000]}
    out, ngs = tmp_path / "runs", _ngs(fixtures_dir)
    fusebench.run("mv-ngs", objective="infonce_pwe", seeds=[0], out=out, data_root=ngs, overrides=small,
                  progress=False)
    trials = sorted((out / ".selection" / "mv-ngs" / "infonce_pwe").rglob("run.json"))
    assert len(trials) == 2
    for t in trials:
        rec = json.loads(t.read_text())
        assert rec["metrics"] == {}  # a trial is scored on validation alone
        assert rec["selection"]["val_versions"] == {"fs1_acc": "2", "fs1_best_acc": "2", "fs1_proto_acc": "1"}
    spec = benchmarks.load("mv-ngs", overrides=small)
    runner.resolve_views(spec, False, ngs)
    fp = json.loads((out / "mv-ngs" / "infonce_pwe" / "seed0" / "run.json").read_text())["dataset"]["fingerprint"]
    ctx, opts = {"fingerprint": fp}, RunOptions(data_root=ngs, progress=False)
    path = out / "mv-ngs" / "_selection" / "infonce_pwe.json"

    # a file without versions: judged by the versions its trials' records state
    frozen = json.loads(path.read_text())
    path.write_text(json.dumps({**frozen, "versions": "1"}))  # edited: refused, not judged as a file without them
    with pytest.raises(ConfigMismatchError, match=r"infonce_pwe: 'versions' is str '1', expected the mapping"):
        selection.check_frozen(path, spec, "infonce_pwe", opts, ctx)
    del frozen["versions"]
    path.write_text(json.dumps(frozen))
    assert selection.check_frozen(path, spec, "infonce_pwe", opts, ctx)[0]["choice"] == frozen["choice"]
    monkeypatch.setattr(objectives.OBJECTIVES.get("infonce_pwe"), "version", "2")
    with pytest.raises(ConfigMismatchError, match=r"by other code .*objective 'infonce_pwe' version '1', now '2'"):
        selection.check_frozen(path, spec, "infonce_pwe", opts, ctx)
    real = metrics.get
    monkeypatch.undo()
    monkeypatch.setattr(metrics, "get", lambda mid: dataclasses.replace(real(mid), version="3")
                        if mid == "fs1_best_acc" else real(mid))
    with pytest.raises(ConfigMismatchError, match=r"by other code .*metric 'fs1_best_acc' version '2', now '3'"):
        selection.check_frozen(path, spec, "infonce_pwe", opts, ctx)
    # with the selection metric at another version a trial record is not reused as a score either
    path.unlink()
    with pytest.raises(ConfigMismatchError, match=r"trial0-tau0\.1/mv-ngs/infonce_pwe/seed1000/run\.json was made by "
                                                   r"other code .*metric 'fs1_best_acc' version '2', now '3'"):
        selection.select_hparams(spec, "infonce_pwe", out, opts, ctx)
    monkeypatch.undo()
    # no trial record left: nothing to judge the file by (the documented limit), it stands
    path.write_text(json.dumps(frozen))
    for t in trials:
        t.unlink()
    monkeypatch.setattr(objectives.OBJECTIVES.get("infonce_pwe"), "version", "2")
    assert selection.check_frozen(path, spec, "infonce_pwe", opts, ctx)[0]["choice"] == frozen["choice"]


def test_a_selection_file_another_sweep_wrote_first_is_the_one_used(tmp_path: Path, monkeypatch) -> None:
    """Two sweeps into one --out select at once: the file written first is kept and both use it (an overwrite
    would leave cells already started with one choice and a resume with another)."""
    from fusebench.components.identity import cell_versions, versions_block
    from fusebench.runtime import utils

    spec = benchmarks.load("mv-ngs", overrides=FAST)
    options = RunOptions(synthetic=True)
    path = selection.selection_path(tmp_path, spec.name, "infonce_pwe")
    scores = [{"hparams": {"tau": t}, "val": v, "val_by_seed": {"1000": v}} for t, v in zip(GRID, (0.2, 0.3, 0.4))]
    first = {**selection._identity(spec, "infonce_pwe", options, {}), "choice": {"tau": 1.0}, "scores": scores,
             "metric": spec.validation_metric,  # a whole outcome: its choice (tau 1.0) the best of its scores
             "versions": {**cell_versions(spec, "infonce_pwe"),
                          "metrics": versions_block("infonce_pwe", [spec.validation_metric])["metrics"]}}

    def select(*args, **kwargs):  # the other sweep finishes first, while this one selects
        path.parent.mkdir(parents=True, exist_ok=True)
        utils.create_json_once(path, first)
        return {"choice": {"tau": 0.1}}

    monkeypatch.setattr(selection, "select_hparams", select)
    written = path.read_bytes() if path.exists() else None
    outcome, digest = selection.freeze_selection(spec, "infonce_pwe", tmp_path, options, {})
    assert written is None and outcome["choice"] == {"tau": 1.0}
    assert json.loads(path.read_text())["choice"] == {"tau": 1.0}
    assert digest == hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_selection_metric_is_the_spec_s_primary_whatever_its_id(tmp_path: Path, fixtures_dir: Path) -> None:
    """Switching ``comparison.primary`` (here to the kNN probe) makes it the selection metric, no code change."""
    over = {**FAST, "comparison": {"reference": "raw", "primary": "knn_acc"}, "pretrain.selection_seeds": [],
            "pretrain.grid": {"infonce_pwe": {"tau": [0.1, 0.5]}}}
    rec = fusebench.run("mv-ngs", objective="infonce_pwe", seeds=[0], out=tmp_path, data_root=_ngs(fixtures_dir),
                        overrides=over, progress=False)[0]
    sel = rec["hparam_selection"]
    assert sel["metric"] == "knn_acc" and sel["seeds"] == [1000]
    for i, tau in enumerate((0.1, 0.5)):
        trial = json.loads((tmp_path / ".selection" / "mv-ngs" / "infonce_pwe" / f"trial{i}-tau{tau}" / "mv-ngs"
                            / "infonce_pwe" / "seed1000" / "run.json").read_text())
        knn = trial["selection"]["knn"]
        assert sel["scores"][i]["val"] == knn["val_acc_by_k"][str(knn["k"])] == knn["val_acc"]


def test_a_selection_metric_without_a_validation_value_is_one_clear_error(tmp_path: Path, fixtures_dir: Path) -> None:
    over = {**FAST, "metrics": ["fs1_acc", "acc", "cluster_acc"], "comparison": {"primary": "cluster_acc"},
            "pretrain.selection_seeds": [], "pretrain.grid": {"infonce_pwe": {"tau": [0.1, 0.5]}}}
    from fusebench.engine.loop import RunError

    with pytest.raises(RunError, match="selection metric 'cluster_acc' has no validation value"):
        fusebench.run("mv-ngs", objective="infonce_pwe", seeds=[0], out=tmp_path, data_root=_ngs(fixtures_dir),
                      overrides=over, progress=False)
    assert not (tmp_path / "mv-ngs" / "_selection" / "infonce_pwe.json").exists()  # nothing half-written


def test_a_selection_that_could_see_test_samples_is_refused_before_any_trial(
        tmp_path: Path, fixtures_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """split_per_seed without a fixed test split: selection seed 1000's train / val would hold samples of seed
    0's test split. Refused naming dataset.outer_test_seed, before a trial trains."""
    from fusebench.engine.loop import RunError

    def no_trial(*args, **kwargs):
        raise AssertionError("a selection trial ran although its test split is not fixed")

    monkeypatch.setattr(selection, "run_cell", no_trial)
    spec = benchmarks.load("mv-ngs", overrides={**FAST, "dataset.outer_test_seed": None})
    with pytest.raises(RunError, match=r"mv-ngs: dataset.split_per_seed .* selection seeds \[1000, 1001\] would train "
                                       r"and validate on test samples.*dataset.outer_test_seed"):
        selection.select_hparams(spec, "infonce_pwe", tmp_path, RunOptions(data_root=_ngs(fixtures_dir)), {})
    # with the fixed test split the same grid starts its trials
    ok = benchmarks.load("mv-ngs", overrides=FAST)
    with pytest.raises(AssertionError, match="a selection trial ran"):
        selection.select_hparams(ok, "infonce_pwe", tmp_path, RunOptions(data_root=_ngs(fixtures_dir)), {})


def test_an_evaluation_seed_that_is_a_selection_seed_is_refused_before_anything_runs(
        tmp_path: Path, fixtures_dir: Path) -> None:
    """An evaluation cell at a selection seed, with the chosen point, is the winning trial itself: the same train /
    val partition of the non-test samples, the same initialisation and draws. Refused
    whether the seed comes from --seeds or from the spec (``pretrain.selection_seed``, which the spec's own check of
    ``selection_seeds`` against ``seeds`` does not cover); a run whose rows select nothing may use any seed."""
    common = dict(objective="infonce_pwe", out=tmp_path, data_root=_ngs(fixtures_dir), progress=False, plan=True)
    with pytest.raises(ConfigError, match=r"mv-ngs: seed\(s\) 1000 of this run are selection seeds "
                                          r"\(pretrain.selection_seeds: \[1000, 1001\]\) of infonce_pwe"):
        fusebench.run("mv-ngs", seeds=[1000, 3], overrides=FAST, **common)
    with pytest.raises(ConfigError, match=r"seed\(s\) 1000 of this run are selection seeds \(pretrain.selection_seed: "
                                          r"\[1000\]\)"):
        fusebench.run("mv-ngs", overrides={**FAST, "seeds": [1000, 1], "pretrain.selection_seeds": []}, **common)
    assert not (tmp_path / "mv-ngs").exists() and not (tmp_path / selection.TRIALS_DIR).exists()
    # apart from the selection seeds, or no row selecting: planned
    assert fusebench.run("mv-ngs", seeds=[3], overrides=FAST, **common)
    assert fusebench.run("mv-ngs", seeds=[1000], overrides={"metrics": ["acc"], "comparison": {}},
                         **{**common, "objective": "raw"})


def test_a_record_made_with_another_frozen_choice_is_not_reused(tmp_path: Path, fixtures_dir: Path) -> None:
    """The config hash does not cover the chosen point (the grid replaces it). A selection made again with another
    choice (its file deleted and the trials rerun on another machine: simulated here by a file whose scores make
    another point the best) let a sweep reuse seed 0's record, run at the old point, beside seed 1 run at the new
    one: one row, two hyper-parameters. Now the reuse is refused, naming both choices; a file with the same choice
    (other scores) is no reason to refuse."""
    from fusebench.engine.cell import ConfigMismatchError

    out = tmp_path / "runs"
    over = {**FAST, "pretrain.selection_seeds": [1000], "pretrain.grid": {"infonce_pwe": {"tau": [0.1, 0.5]}}}
    common = dict(objective="infonce_pwe", out=out, data_root=_ngs(fixtures_dir), overrides=over, progress=False)
    (rec,) = fusebench.run("mv-ngs", seeds=[0], **common)
    path = out / "mv-ngs" / "_selection" / "infonce_pwe.json"
    frozen = json.loads(path.read_text())
    old = frozen["choice"]
    new = next(e["hparams"] for e in frozen["scores"] if e["hparams"] != old)
    scores = [{**e, "val": 0.9 if e["hparams"] == new else 0.1, "val_by_seed": {"1000": 0.9 if e["hparams"] == new
                                                                               else 0.1}} for e in frozen["scores"]]
    path.write_text(json.dumps({**frozen, "scores": scores, "choice": new, "at_edge": ["tau"]}))
    with pytest.raises(ConfigMismatchError, match=rf"seed0/run.json was made with the hyper-parameters of another "
                                                  rf"frozen selection \(choice {old!r}.*this sweep's: choice {new!r}"):
        fusebench.run("mv-ngs", seeds=[1, 0], **common)  # refused before seed 1 runs
    assert not (out / "mv-ngs" / "infonce_pwe" / "seed1").exists()
    plan = {r.get("seed"): r for r in fusebench.run("mv-ngs", seeds=[1, 0], plan=True, **common)}  # as the run says
    assert plan[0]["action"] == "refused" and "another frozen selection" in plan[0]["detail"]
    assert plan[1]["action"] == "run" and plan[None]["action"] == "reuse"
    assert rec["hparams"]["tau"] == old["tau"]
    # a selection file with the same choice (here: other bytes, other scores): seed 0 reused, seed 1 run at its point
    path.write_text(json.dumps({**frozen, "scores": [{**e, "val": e["val"] / 2, "val_by_seed": {
        k: v / 2 for k, v in e["val_by_seed"].items()}} for e in frozen["scores"]]}))
    recs = fusebench.run("mv-ngs", seeds=[0, 1], **common)
    assert [r["hparams"]["tau"] for r in recs] == [old["tau"]] * 2 and recs[0]["finished_at"] == rec["finished_at"]


def test_a_checkpoint_written_at_another_frozen_choice_is_not_resumed(
        tmp_path: Path, fixtures_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An evaluation cell killed while it pretrained at the frozen choice: its last.pt says at which point. A
    selection made again with another choice resumed it at the new point (pretraining continued with another tau,
    the record then naming the new choice alone). Refused now, before any cell runs; at the same point it resumes."""
    import functools

    from fusebench.engine.cell import ConfigMismatchError

    out = tmp_path / "runs"
    over = {**FAST, "pretrain.selection_seeds": [1000], "pretrain.grid": {"infonce_pwe": {"tau": [0.1, 0.5]}},
            "checkpoint_every": 1}
    common = dict(objective="infonce_pwe", out=out, data_root=_ngs(fixtures_dir), overrides=over, progress=False)
    with monkeypatch.context() as m:  # killed after one pretraining step (the trials run whole: options.but)
        m.setattr(runner, "RunOptions", functools.partial(RunOptions, max_steps=1))
        with pytest.raises(KeyboardInterrupt):
            fusebench.run("mv-ngs", seeds=[2], **common)
    last = out / "mv-ngs" / "infonce_pwe" / "seed2" / "last.pt"
    path = out / "mv-ngs" / "_selection" / "infonce_pwe.json"
    frozen = json.loads(path.read_text())
    import torch

    assert torch.load(last, weights_only=True)["hparam_choice"] == frozen["choice"]
    new = next(e["hparams"] for e in frozen["scores"] if e["hparams"] != frozen["choice"])
    scores = [{**e, "val": 0.9 if e["hparams"] == new else 0.1, "val_by_seed": {"1000": 0.9 if e["hparams"] == new
                                                                               else 0.1}} for e in frozen["scores"]]
    path.write_text(json.dumps({**frozen, "scores": scores, "choice": new}))
    with pytest.raises(ConfigMismatchError, match=rf"cannot resume {last}: it was written at the point "
                                                  rf"{frozen['choice']!r} of another frozen hyper-parameter selection, "
                                                  rf"this sweep's chose {new!r}"):
        fusebench.run("mv-ngs", seeds=[3, 2], **common)
    assert not (out / "mv-ngs" / "infonce_pwe" / "seed3").exists()  # refused before any cell ran
    path.write_text(json.dumps(frozen))  # the point it was written at: resumed
    (rec,) = fusebench.run("mv-ngs", seeds=[2], **common)
    assert rec["resumed"] and rec["hparams"]["tau"] == frozen["choice"]["tau"]


def test_a_trial_without_a_finite_validation_score_stops_the_selection(tmp_path: Path, monkeypatch) -> None:
    """NaN compared in max() keeps the first grid point: a trial that could not be scored must not win."""
    from fusebench.engine.loop import RunError

    scores = iter([float("nan"), 0.5, 0.7])
    monkeypatch.setattr(selection, "run_cell", lambda request, options, context: {
        "selection": {"val_metrics": {"fs1_best_acc": next(scores)}}})
    spec = benchmarks.load("mv-ngs", overrides={**FAST, "pretrain.selection_seeds": [1000]})
    with pytest.raises(RunError, match=r"trial trial0-tau0.1 of 'infonce_pwe', selection seed 1000, has no finite "
                                       r"validation fs1_best_acc \(nan"):
        selection.select_hparams(spec, "infonce_pwe", tmp_path, RunOptions(synthetic=True), {})


def test_trials_run_in_parallel_give_the_records_and_choice_of_one_process(
        tmp_path: Path, fixtures_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--workers 2`` runs the selection trials two at a time in spawned processes (the selection phase used one
    core of a sweep for hours); every trial's metrics and the frozen selection file equal the one-process run's."""
    ran: list[int] = []
    real = selection.run_trials_in_parallel

    def counted(*args, **kwargs):
        ran.append(real(*args, **kwargs))
        return ran[-1]

    monkeypatch.setattr(selection, "run_trials_in_parallel", counted)
    outs = {}
    for workers in (1, 2):
        out = tmp_path / f"w{workers}"
        fusebench.run("mv-ngs", objective=["infonce_pwe"], seeds=[0], out=out, data_root=_ngs(fixtures_dir),
                      overrides=FAST, progress=False, workers=workers)
        outs[workers] = out
    assert ran == [0, len(GRID) * 2]  # one process: none here (the loop runs them); two workers: all 6 trials
    frozen = [(o / "mv-ngs" / "_selection" / "infonce_pwe.json").read_bytes() for o in outs.values()]
    assert frozen[0] == frozen[1]
    trials = [sorted(p.relative_to(o) for p in (o / ".selection").rglob("run.json")) for o in outs.values()]
    assert trials[0] == trials[1] and len(trials[0]) == len(GRID) * 2
    for rel in trials[0]:
        one, two = (json.loads((o / rel).read_text()) for o in outs.values())
        assert one["metrics"] == two["metrics"] and one["selection"] == two["selection"], rel
    evaluation = [json.loads((o / "mv-ngs" / "infonce_pwe" / "seed0" / "run.json").read_text()) for o in outs.values()]
    assert evaluation[0]["metrics"] == evaluation[1]["metrics"]


def test_a_trial_computes_its_selection_metric_alone_and_the_value_of_the_full_evaluation(
        tmp_path: Path, fixtures_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """#31 item 5: a hyper-parameter trial runs only the probe that gives its selection metric (here the 1-shot
    probes: no linear probe, kNN, k-means or diagnostics), and its validation value is the one an evaluation
    cell with the same seed and hyper-parameters computes with every probe. A trial never reads the test split
    (it used to load, embed and score it, and keep the test scores in its record)."""
    from fusebench.cells import standard

    built: list[tuple[int, tuple[str, ...]]] = []
    real_build = standard.build_datasets

    def build(spec, synthetic, data_root, seed, roles=("train", "val", "test"), **kw):
        built.append((seed, tuple(roles)))
        return real_build(spec, synthetic, data_root, seed, roles=roles, **kw)

    monkeypatch.setattr(standard, "build_datasets", build)
    over = {**FAST, "pretrain.selection_seeds": [1000], "pretrain.grid": {"infonce_pwe": {"tau": [0.1, 0.5]}}}
    rec = fusebench.run("mv-ngs", objective="infonce_pwe", seeds=[0], out=tmp_path / "sel",
                        data_root=_ngs(fixtures_dir), overrides=over, progress=False)[0]
    assert built == [(1000, ("train", "val")), (1000, ("train", "val")), (0, ("train", "val", "test"))]
    trial = json.loads((tmp_path / "sel" / ".selection" / "mv-ngs" / "infonce_pwe" / "trial0-tau0.1" / "mv-ngs"
                        / "infonce_pwe" / "seed1000" / "run.json").read_text())
    ones = {"fs1_best_acc", "fs1_acc", "fs1_proto_acc"}  # the 1-shot probes' numbers, nothing else
    assert trial["metrics"] == {} and set(trial["selection"]["val_metrics"]) == ones  # validation values alone
    one = trial["selection"]["fewshot"]["per_shot"]["1"]
    assert one["test_acc"] is None and one["prototype"]["test_acc"] is None and one["best_test_acc"] is None
    assert set(trial["dataset"]["sizes"]) == {"train", "val"}
    assert "clustering" not in trial and trial["diagnostics"] == {} and "knn" not in trial["selection"]
    assert "probe" not in trial["selection"] and list(trial["selection"]["fewshot"]["per_shot"]) == ["1"]
    full_over = {**FAST, "pretrain.grid": {}, "pretrain.selection_seeds": [],
                 "pretrain.hparams": {"infonce_pwe": {"tau": 0.1}}}
    full = fusebench.run("mv-ngs", objective="infonce_pwe", seeds=[1000], out=tmp_path / "full",
                         data_root=_ngs(fixtures_dir), overrides=full_over, progress=False)[0]
    assert set(full["metrics"]) == {*ones, "knn_acc", "acc"} and "clustering" in full
    assert trial["selection"]["val_metrics"]["fs1_best_acc"] == full["selection"]["val_metrics"]["fs1_best_acc"]
    assert rec["hparam_selection"]["scores"][0]["val"] == full["selection"]["val_metrics"]["fs1_best_acc"]


def test_the_selection_says_what_it_chose_where_it_wrote_it_and_the_grid_edge(tmp_path) -> None:
    """The line a sweep prints once a selection is frozen: the choice, its mean validation score over the selection
    seeds (worked out here: (0.90 + 0.94) / 2 = 0.92), the file, and a choice on the edge of its grid."""
    from fusebench.sweep.selection import selection_line

    outcome = {"benchmark": "mv-x", "objective": "mv_infonce", "metric": "fs1_best_acc", "at_edge": ["tau"],
               "choice": {"tau": 0.5},
               "scores": [{"hparams": {"tau": 0.1}, "val": 0.5, "val_by_seed": {"1000": 0.4, "1001": 0.6}},
                          {"hparams": {"tau": 0.5}, "val": 0.92, "val_by_seed": {"1000": 0.90, "1001": 0.94}}]}
    path = tmp_path / "mv-x" / "_selection" / "mv_infonce.json"
    assert selection_line(outcome, path) == (
        f"selection mv-x/mv_infonce: chose tau=0.5 (mean validation fs1_best_acc 0.92 over 2 selection seed(s)), "
        f"written to {path}; on the edge of its grid: tau (a wider grid may move the choice)")
    inner = {**outcome, "at_edge": []}
    assert selection_line(inner, path, made_now=False).endswith(f"reused from {path}")


def _stub(monkeypatch, metric: str, values: dict[tuple[float, int], float]) -> None:
    """Each trial's validation ``metric`` from ``values[(tau, selection seed)]``."""
    def run_cell(request, options, context):
        tau = context["hparams"]["infonce_pwe"]["tau"]  # the trial's grid point
        return {"selection": {"val_metrics": {metric: values[(tau, request.seed)]}}}
    monkeypatch.setattr(selection, "run_cell", run_cell)


@pytest.mark.parametrize("metric,values,choice", [
    # higher is better: means 0.5, 0.8, 0.6 -> tau 0.5
    ("fs1_best_acc", {(0.1, 1000): 0.4, (0.1, 1001): 0.6, (0.5, 1000): 0.7, (0.5, 1001): 0.9,
                      (1.0, 1000): 0.6, (1.0, 1001): 0.6}, 0.5),
    # lower is better (mae): means 0.7, 0.3, 0.9 -> tau 0.5 (the largest, 1.0, would be the wrong direction)
    ("mae", {(0.1, 1000): 0.6, (0.1, 1001): 0.8, (0.5, 1000): 0.2, (0.5, 1001): 0.4,
             (1.0, 1000): 0.9, (1.0, 1001): 0.9}, 0.5),
    # a tie of the means (0.8 and 0.8, the best) keeps the first grid point in grid order: tau 0.1, not 1.0
    ("fs1_best_acc", {(0.1, 1000): 0.7, (0.1, 1001): 0.9, (0.5, 1000): 0.5, (0.5, 1001): 0.5,
                      (1.0, 1000): 0.8, (1.0, 1001): 0.8}, 0.1),
])
def test_the_choice_is_the_best_mean_in_the_metric_s_direction_ties_to_the_first(
        metric, values, choice, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _stub(monkeypatch, metric, values)
    spec = benchmarks.load("mv-ngs", overrides=FAST)
    out = selection.select_hparams(spec, "infonce_pwe", tmp_path, RunOptions(synthetic=True), {}, metric=metric)
    assert out["metric"] == metric
    assert [s["val"] for s in out["scores"]] == pytest.approx(
        [(values[(t, 1000)] + values[(t, 1001)]) / 2 for t in GRID])
    assert out["choice"] == {"tau": choice}


def test_a_grid_value_given_twice_is_refused_at_load() -> None:
    """Each grid value is a trial per selection seed: a repeat (0.1 twice, or 1 and 1.0) ran the same trials again
    (pca_widths already refused repeats)."""
    from fusebench import benchmarks
    from fusebench.spec.config import ConfigError

    with pytest.raises(ConfigError, match=r"m3g\.grid\.eps: 0\.1 given more than once in \[0\.1, 0\.2, 0\.1\]"):
        benchmarks.load("mv-ngs", overrides={"pretrain.per_objective.m3g.grid": {"eps": [0.1, 0.2, 0.1]}})
    with pytest.raises(ConfigError, match=r"infonce_pwe\.grid\.tau: 1, 1\.0 given more than once"):
        benchmarks.load("mv-ngs", overrides={"pretrain.per_objective.infonce_pwe.grid": {"tau": [1, 1.0]}})
    assert benchmarks.load("mv-ngs", overrides={"pretrain.per_objective.m3g.grid": {"eps": [0.1, 0.2]}})
