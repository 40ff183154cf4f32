"""Issue #29 items 1-3, config identity: per-objective tables take exact registered objective ids only, a grid
over a method option the objective does not read is refused, a setting the pipeline's cell does not apply is
refused at spec load, a cell's config hash holds what the cell computes and nothing else (hash schema 3), the
board shows the benchmark's current comparison block without a re-run, and the one-time migration of the
records to hash schema 3 (scripts/migrate_hash_schema_3.py). Each hostile input here was accepted before."""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import json
import re
from pathlib import Path
from typing import Any

import pytest

from fusebench import benchmarks
from fusebench.leaderboard import benchmark_table, load_runs
from fusebench.records import comparability_key
from fusebench.components.identity import config_hash, spec_hash
from fusebench.spec.config import ConfigError, parse_override

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "leaderboards" / "runs"


def _set(*texts: str) -> dict[str, Any]:
    """``--set`` arguments as the CLI parses them."""
    return dict(parse_override(t) for t in texts)


# ---------------------------------------------------------------------------------------------
# 1. per-objective tables: exact registered objective ids
# ---------------------------------------------------------------------------------------------
def test_hparams_keyed_by_an_id_in_capitals_is_refused_naming_the_key_and_the_closest_id() -> None:
    # before: the spec check lowercased 'M3G', the cell looked 'M3G' up exactly and ran with eps 0.2
    with pytest.raises(ConfigError, match=r"quickstart.yaml: pretrain.per_objective.M3G.hparams: 'M3G' is not a registered "
                                          r"objective id \(ids are matched exactly; did you mean 'm3g'\?\)"):
        benchmarks.load("quickstart", overrides=_set("pretrain.hparams.M3G.eps=0.9"))


def test_an_objective_batch_size_for_no_objective_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"pretrain.per_objective.nosuch.batch_size: 'nosuch' is not a registered "
                                          r"objective id.*valid objective ids: byol_avg"):
        benchmarks.load("quickstart", overrides=_set("pretrain.objective_batch_size.nosuch=4"))


@pytest.mark.parametrize("table,setting,value", [("hparams", "hparams", {"eps": 0.3}),
                                                 ("grid", "grid", {"eps": [0.1, 0.3]}),
                                                 ("objective_batch_size", "batch_size", 16),
                                                 ("objective_epochs", "epochs", 2),
                                                 ("objective_micro_batch", "micro_batch", 8)])
def test_every_per_objective_table_takes_exact_ids_only(table: str, setting: str, value: Any) -> None:
    for key in (f"pretrain.{table}.m3g", f"pretrain.per_objective.m3g.{setting}"):  # the exact id, either way: fine
        benchmarks.load("quickstart", overrides={key: value})
    # the message names the key as a spec groups it, whichever way it was given
    for key in (f"pretrain.{table}.M3g", f"pretrain.per_objective.M3g.{setting}"):
        with pytest.raises(ConfigError, match=rf"pretrain\.per_objective\.M3g\.{setting}: 'M3g' is not a registered "
                                              r"objective id \(ids are matched exactly; did you mean 'm3g'\?\)"):
            benchmarks.load("quickstart", overrides={key: value})


def test_a_reference_row_has_no_per_objective_entry() -> None:
    # nothing is pretrained for raw / none: their epochs or batch would be recorded and never used
    with pytest.raises(ConfigError, match=r"pretrain.per_objective.raw.epochs: 'raw' is a reference row: nothing is "
                                          r"pretrained for it"):
        benchmarks.load("quickstart", overrides={"pretrain.objective_epochs.raw": 3})


def test_a_method_id_in_capitals_is_refused() -> None:
    # before: accepted (looked up lowercased), stored under 'Tuple_InfoNCE' and never read by the method
    with pytest.raises(ConfigError, match=r"pretrain.methods.Tuple_InfoNCE: unknown pretrain method 'Tuple_InfoNCE' "
                                          r"\(ids are matched exactly\). Did you mean 'tuple_infonce'\?"):
        benchmarks.load("quickstart", overrides=_set("pretrain.methods.Tuple_InfoNCE.dropout=0.2"))


def test_a_grid_over_a_method_option_the_objective_does_not_read_is_refused() -> None:
    # infonce_pwe builds on view_rotation only: two trials of tuple_infonce's dropout compute the same thing
    with pytest.raises(ConfigError, match=r"pretrain.per_objective.infonce_pwe.grid: 'methods.tuple_infonce.dropout' searches an "
                                          r"option of the tuple_infonce method, which does not join infonce_pwe's runs"):
        benchmarks.load("quickstart", overrides={"pretrain.grid.infonce_pwe": {"methods.tuple_infonce.dropout": [0.1, 0.2]}})
    with pytest.raises(ConfigError, match=r"'methods.ema_teacher.momentum' searches an option of the ema_teacher method"):
        benchmarks.load("quickstart", overrides={"pretrain.grid.m3g": {"methods.ema_teacher.momentum": [0.9, 0.99]}})
    # read: BYOL builds on the EMA teacher; a view objective does once the teacher is switched on
    benchmarks.load("quickstart", overrides={"pretrain.grid.byol_pwe": {"methods.ema_teacher.momentum": [0.9, 0.99]}})
    benchmarks.load("quickstart", overrides={"pretrain.methods.ema_teacher.enabled": True,
                                             "pretrain.grid.m3g": {"methods.ema_teacher.momentum": [0.9, 0.99]}})
    benchmarks.load("quickstart", overrides={"pretrain.grid.m3g": {"methods.view_rotation.enabled": [False, True]}})


# ---------------------------------------------------------------------------------------------
# 2. settings a pipeline does not apply
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("over,key", [
    ({"pretrain.missing_rate": 0.3}, "pretrain.missing_rate"),  # the case: metrics bit-identical before
    ({"pretrain.batch_size": 64}, "pretrain.batch_size"),  # the batch is options.samples_per_batch
    ({"pretrain.optimizer": "sgd"}, "pretrain.optimizer"),  # the cell always uses AdamW
    ({"pretrain.grid.suff_stats": {"tau": [0.1, 0.2]}}, "pretrain.per_objective.suff_stats.grid.tau"),
    ({"pretrain.per_objective.suff_stats.epochs": 3}, "pretrain.per_objective.suff_stats.epochs"),
    ({"pretrain.methods.ema_teacher.momentum": 0.9}, "pretrain.methods.ema_teacher.momentum"),
    ({"downstream.epochs": 5}, "downstream.epochs"),
    ({"encoder.id": "mlp"}, "encoder.id"),
    ({"loader.num_workers": 2}, "loader.num_workers"),
    ({"speed.compile": True}, "speed.compile"),
])
def test_the_gaussian_mi_pipeline_refuses_what_its_cell_does_not_apply(over: dict, key: str) -> None:
    with pytest.raises(ConfigError, match=rf"polyview-gaussian-mi.yaml: {re.escape(key)} = .*: the gaussian_mi "
                                          r"pipeline does not apply it"):
        benchmarks.load("polyview-gaussian-mi", overrides=over)


def test_what_the_gaussian_mi_cell_applies_is_accepted() -> None:
    spec = benchmarks.load("polyview-gaussian-mi", overrides={
        "pretrain.lr": 0.001, "pretrain.weight_decay": 0.01, "pretrain.epochs": 3, "options.sigma": 0.4,
        "pretrain.hparams.pvc_arithmetic": {"tau": 0.2}, "description": "another text", "seeds": [0, 1]})
    assert spec.pretrain.lr == 0.001 and spec.options["sigma"] == 0.4


# ---------------------------------------------------------------------------------------------
# 3. a cell's identity is exactly what it computes
# ---------------------------------------------------------------------------------------------
def _hashes(bench: str, overrides: dict[str, Any], objectives: tuple[str, ...], synthetic: bool = False) -> dict[str, str]:
    spec = benchmarks.load(bench, overrides=overrides, synthetic=synthetic)
    return {o: spec_hash(spec, o) for o in objectives}


OBJS = ("m3g", "infonce_pwe", "tuple_infonce", "byol_pwe", "none", "raw")


@pytest.mark.parametrize("overrides,changed", [
    ({"pretrain.methods.tuple_infonce.dropout": 0.2}, {"tuple_infonce"}),
    ({"pretrain.methods.tuple_infonce.sample_optimisation": True}, {"tuple_infonce"}),
    ({"pretrain.methods.ema_teacher.momentum": 0.9}, {"byol_pwe"}),  # the teacher is off for the view objectives
    # switched on, the teacher joins every objective (ema_teacher: "attach the teacher to objectives that do not
    # name it"), and the view rotation every view objective; the reference rows pretrain nothing
    ({"pretrain.methods.ema_teacher.enabled": True}, {"m3g", "infonce_pwe", "byol_pwe", "tuple_infonce"}),
    ({"pretrain.methods.ema_teacher.enabled": True, "pretrain.methods.tuple_infonce.dropout": 0.2},
     {"m3g", "infonce_pwe", "byol_pwe", "tuple_infonce"}),
    ({"pretrain.methods.view_rotation.enabled": True}, {"m3g", "infonce_pwe"}),
])
def test_method_options_change_only_the_cells_whose_objective_uses_the_method(overrides: dict, changed: set) -> None:
    base, other = _hashes("quickstart", {}, OBJS), _hashes("quickstart", overrides, OBJS)
    assert {o for o in OBJS if base[o] != other[o]} == changed


def test_a_method_option_counts_once_the_teacher_is_switched_on() -> None:
    on = {"pretrain.methods.ema_teacher.enabled": True}
    a = _hashes("quickstart", on, OBJS)
    b = _hashes("quickstart", {**on, "pretrain.methods.ema_teacher.momentum": 0.9}, OBJS)
    assert {o for o in OBJS if a[o] != b[o]} == {"m3g", "infonce_pwe", "byol_pwe", "tuple_infonce"}


def test_selection_seed_is_no_part_of_the_identity_when_selection_seeds_is_set() -> None:
    grid = {"pretrain.grid.m3g": {"eps": [0.1, 0.2]}, "pretrain.grid.infonce_pwe": {"tau": [0.1, 0.2]}}
    selected = ("m3g", "infonce_pwe")
    seeds = {**grid, "pretrain.selection_seeds": [1001, 1002]}
    a = _hashes("quickstart", {**seeds, "pretrain.selection_seed": 5}, OBJS)
    b = _hashes("quickstart", {**seeds, "pretrain.selection_seed": 7}, OBJS)
    assert a == b
    # without selection_seeds it is the one selection seed: it counts where a grid is searched (hash schema 4: only
    # there; an objective without a grid, and a reference row, selects nothing)
    c = _hashes("quickstart", {**grid, "pretrain.selection_seed": 5}, OBJS)
    d = _hashes("quickstart", {**grid, "pretrain.selection_seed": 7}, OBJS)
    assert {o for o in OBJS if c[o] != d[o]} == set(selected)
    # and the list itself counts, where a grid is searched
    e = _hashes("quickstart", {**grid, "pretrain.selection_seeds": [1001, 1003]}, OBJS)
    assert {o for o in OBJS if e[o] != a[o]} == set(selected)


def test_synthetic_spec_is_no_part_of_a_real_data_cell() -> None:
    over = {"dataset.synthetic_spec.num_samples": 5}
    real = benchmarks.load("mosi-sentiment")
    assert real.to_dict()["dataset"]["synthetic_spec"] == {}  # not used on real data: neither recorded nor hashed
    with pytest.raises(ConfigError, match=r"^--set dataset\.synthetic_spec\.num_samples: mosi-sentiment runs on the "
                                          r"real data here, so the synthetic generator's settings would be used by "
                                          r"nothing"):  # and refused when given for a real-data run
        benchmarks.load("mosi-sentiment", overrides=over)
    # on the synthetic twin the generator reads it
    syn = _hashes("mosi-sentiment", over, ("m3g", "none"), synthetic=True)
    assert syn != _hashes("mosi-sentiment", {}, ("m3g", "none"), synthetic=True)
    # a synthetic-only benchmark always uses the generator
    assert _hashes("quickstart", over, ("m3g",)) != _hashes("quickstart", {}, ("m3g",))


def test_a_gaussian_mi_cell_is_hashed_without_the_fields_its_pipeline_does_not_apply() -> None:
    spec = benchmarks.load("polyview-gaussian-mi")
    form = json.loads(json.dumps(spec.to_dict()))
    recorded = copy.deepcopy(form)
    recorded["pretrain"]["batch_size"] = 1024  # what the committed records carry (never read by the cell)
    recorded["pretrain"]["schedule"] = "constant"
    assert config_hash(recorded, "suff_stats") == config_hash(form, "suff_stats") == spec_hash(spec, "suff_stats")
    # the hash by hand: the shared fields and the six the cell reads, sorted-key compact JSON
    keep = {k: form[k] for k in ("name", "pipeline", "metrics", "selection_metric", "precision", "options")}
    keep["pretrain"] = {k: form["pretrain"][k] for k in ("epochs", "lr", "weight_decay")}
    keep["pretrain"]["hparams"] = {}
    keep["objective"] = "suff_stats"
    text = json.dumps(keep, sort_keys=True, separators=(",", ":"))
    assert spec_hash(spec, "suff_stats") == hashlib.sha256(text.encode()).hexdigest()[:16]
    changed = copy.deepcopy(form)
    changed["pretrain"]["lr"] = 0.002
    assert config_hash(changed, "suff_stats") != spec_hash(spec, "suff_stats")


# ---------------------------------------------------------------------------------------------
# 3. the comparison block reaches the board without a re-run
# ---------------------------------------------------------------------------------------------
TOY_SPEC = """\
description: toy comparison board
dataset: {id: quickstart}
encoder: {id: mlp}
metrics: [acc, mae]
objectives: [raw, alpha, beta]
comparison: {reference: alpha, primary: acc, why: "Accuracy matters here."}
"""


def _record(obj: str, seed: int, acc: float, comparison: dict, finished: str) -> dict:
    return {
        "schema_version": 1, "suite_version": "0.1.0", "benchmark": "toycmp", "objective": obj, "seed": seed,
        "metrics": {"acc": acc, "mae": 1.0 - acc + 0.01 * seed}, "metric_directions": {"acc": "higher", "mae": "lower"},
        "config": {"metrics": ["acc", "mae"], "selection_metric": "acc", "description": "toy", "seeds": [0, 1, 2],
                   "pretrain": {"epochs": 3}, "dataset": {"id": "toy", "synthetic_only": False}},
        "dataset": {"id": "toy", "synthetic": False, "manifest_hash": "ab12cd34"},
        "selection": {"rule": "best validation acc"}, "pretrain_time_s": 1.0, "peak_memory_mb": 1.0,
        "comparison": comparison, "finished_at": finished,
    }


def _toy_runs(root: Path) -> Path:
    accs = {"raw": [0.9, 0.9, 0.9], "alpha": [0.5, 0.6, 0.7], "beta": [0.45, 0.5, 0.65]}
    for obj, vals in accs.items():
        for s, v in enumerate(vals):
            # the runs recorded the comparison of their time: the older ones raw / acc, the newest beta / acc
            newest = obj == "beta" and s == 2
            comp = {"reference": "beta" if newest else "raw", "primary": "acc"}
            d = root / "toycmp" / obj / f"seed{s}"
            d.mkdir(parents=True)
            (d / "run.json").write_text(json.dumps(_record(obj, s, v, comp, "2026-01-02" if newest else "2026-01-01")))
    return root


def test_the_board_shows_the_current_spec_comparison_without_a_rerun(tmp_path: Path, monkeypatch) -> None:
    runs = _toy_runs(tmp_path / "runs")
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "toycmp.yaml").write_text(TOY_SPEC)
    monkeypatch.setenv("FUSEBENCH_BENCHMARKS", str(specs))
    md = benchmark_table("toycmp", load_runs(runs)["toycmp"])
    assert "Primary metric: `acc` (chosen because accuracy matters here)." in md
    assert "Reference row of the tests: `alpha`, set by the benchmark." in md and "Δ acc vs `alpha`" in md
    # the spec changes its reference row: the next board shows it, no record touched
    (specs / "toycmp.yaml").write_text(TOY_SPEC.replace("{reference: alpha, primary: acc, why: \"Accuracy matters here.\"}",
                                                        "{reference: raw}"))
    md = benchmark_table("toycmp", load_runs(runs)["toycmp"])
    assert "Primary metric: `acc`." in md and "Δ acc vs `raw`" in md
    # a spec without a comparison block: the board's default reference (raw is in the table)
    (specs / "toycmp.yaml").write_text(TOY_SPEC.replace("comparison: {reference: alpha, primary: acc, why: \"Accuracy "
                                                        "matters here.\"}\n", ""))
    md = benchmark_table("toycmp", load_runs(runs)["toycmp"])
    assert "`raw` (the standardised input views; the default reference)" in md
    # but not its primary metric: the runs chose everything on validation acc, so a board ranking them by mae is
    # refused, naming the metric they selected on (the spec's own rule: selection_metric follows comparison.primary)
    (specs / "toycmp.yaml").write_text(TOY_SPEC.replace("primary: acc, why: \"Accuracy", "primary: mae, why: \"Errors"))
    with pytest.raises(ValueError, match=re.escape("benchmark 'toycmp': the board ranks by 'mae' (the benchmark's "
                                                   "current spec) but 9 of its 9 runs chose their hyper-parameters, "
                                                   "checkpoints and probes on validation 'acc'")):
        benchmark_table("toycmp", load_runs(runs)["toycmp"])
    # runs whose spec chose on acc on purpose and said why (selection_metric_why) rank by the other metric
    for path in runs.rglob("run.json"):
        rec = json.loads(path.read_text())
        rec["config"]["selection_metric_why"] = "mae has no validation value here"
        path.write_text(json.dumps(rec))
    assert "Primary metric: `mae`" in benchmark_table("toycmp", load_runs(runs)["toycmp"])


def test_without_its_spec_records_disagreeing_on_the_comparison_are_refused(tmp_path: Path, monkeypatch) -> None:
    runs = _toy_runs(tmp_path / "runs")
    monkeypatch.setenv("FUSEBENCH_BENCHMARKS", str(tmp_path / "none-here"))
    # the newest record (beta seed 2) names another reference than the other eight: no spec says which is right
    beta2 = runs / "toycmp" / "beta" / "seed2" / "run.json"
    with pytest.raises(ValueError, match=re.escape(f'{{"primary":"acc","reference":"beta"}} in {beta2}. Install the '
                                                   "benchmark's spec")):
        benchmark_table("toycmp", load_runs(runs)["toycmp"])
    beta2.unlink()  # the runs agree: the board takes their comparison, and says where it came from
    md = benchmark_table("toycmp", load_runs(runs)["toycmp"])
    assert ("Reference row of the tests: `raw`, set by the run records' `comparison` (no spec of this benchmark is "
            "installed).") in md and "Δ acc vs `raw`" in md


# ---------------------------------------------------------------------------------------------
# the one-time migration of the committed records (scripts/migrate_hash_schema_3.py)
# ---------------------------------------------------------------------------------------------
def _script():
    spec = importlib.util.spec_from_file_location("migrate_hash_schema_3", ROOT / "scripts" / "migrate_hash_schema_3.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _at_schema_2(rec: dict) -> dict:
    """A committed record as it was at hash schema 2 (before the migration, or rebuilt after it)."""
    old = copy.deepcopy(rec)
    old["hash_schema"] = 2
    old["config_hash"] = config_hash(old["config"], old["objective"], 2)
    return old


def _by_hand_3(config: dict, objective: str) -> str:
    """Schema 3 for a record without a methods block on the standard pipeline, written out: schema 2's cuts,
    then no selection_seed when selection_seeds is set."""
    ident = {k: v for k, v in copy.deepcopy(config).items() if k not in (
        "description", "protocol_notes", "objectives", "seeds", "synthetic", "checkpoint_every", "comparison",
        "loader", "selection_metric_why")}
    pre = ident["pretrain"]
    del pre["objective"]
    for table in ("hparams", "grid", "objective_batch_size", "objective_epochs", "objective_micro_batch"):
        pre[table] = {objective: pre[table][objective]} if objective in pre[table] else {}
    if pre.get("selection_seeds"):
        del pre["selection_seed"]
    ident["objective"] = objective
    return hashlib.sha256(json.dumps(ident, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


def test_the_migration_rehashes_schema_2_records_and_changes_nothing_else(tmp_path: Path) -> None:
    script = _script()
    picks = {"sel": RUNS / "mv-ngs" / "m3g" / "seed0" / "run.json",  # selection_seeds set: a new hash
             "same": RUNS / "quickstart" / "m3g" / "seed0" / "run.json",  # the same hash, schema 3
             "gauss": RUNS / "polyview-gaussian-mi" / "suff_stats" / "seed0" / "run.json"}
    before = {}
    for name, src in picks.items():
        rec = _at_schema_2(json.loads(src.read_text()))
        (tmp_path / "runs" / name).mkdir(parents=True)
        (tmp_path / "runs" / name / "run.json").write_text(json.dumps(rec))
        before[name] = rec
    real = copy.deepcopy(before["sel"])  # a real-data record that carried a synthetic_spec it never used
    real["config"]["dataset"]["synthetic_spec"] = {"num_samples": 5}
    real = _at_schema_2(real)
    real["comparability_key"] = comparability_key(real)
    (tmp_path / "runs" / "real").mkdir()
    (tmp_path / "runs" / "real" / "run.json").write_text(json.dumps(real))
    before["real"] = real
    assert script.main([str(tmp_path / "runs"), "--check"]) == 0
    assert all(json.loads((tmp_path / "runs" / n / "run.json").read_text()) == r for n, r in before.items())  # --check
    assert script.main([str(tmp_path / "runs")]) == 0
    after = {n: json.loads((tmp_path / "runs" / n / "run.json").read_text()) for n in before}
    for n in before:
        assert after[n]["hash_schema"] == 3
        changed = {k for k in before[n] if before[n][k] != after[n][k]}
        assert changed <= {"hash_schema", "config_hash", "config", "comparability_key"}, (n, changed)
    for n in ("sel", "same", "real"):
        assert after[n]["config_hash"] == _by_hand_3(after[n]["config"], after[n]["objective"])
    assert after["sel"]["config_hash"] != before["sel"]["config_hash"]
    assert after["same"]["config_hash"] == before["same"]["config_hash"]
    assert after["gauss"]["config_hash"] == spec_hash(benchmarks.load("polyview-gaussian-mi"), "suff_stats")
    assert after["real"]["config"]["dataset"]["synthetic_spec"] == {}
    assert after["real"]["config_hash"] == after["sel"]["config_hash"]  # now the same computation as "sel"
    assert after["real"]["comparability_key"] == comparability_key(after["real"]) != real["comparability_key"]
    for n in ("sel", "same", "gauss"):
        assert after[n]["config"] == before[n]["config"]
    again = {n: (tmp_path / "runs" / n / "run.json").read_bytes() for n in before}
    assert script.main([str(tmp_path / "runs")]) == 0  # again: nothing to do
    assert {n: (tmp_path / "runs" / n / "run.json").read_bytes() for n in before} == again


def test_the_migration_refuses_an_edited_record_and_writes_nothing(tmp_path: Path) -> None:
    script = _script()
    good = _at_schema_2(json.loads((RUNS / "mv-ngs" / "m3g" / "seed0" / "run.json").read_text()))
    bad = copy.deepcopy(good)
    bad["config"]["pretrain"]["lr"] = 123.0  # the stored hash no longer matches the config
    for name, rec in (("a", good), ("b", bad)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "run.json").write_text(json.dumps(rec))
    snapshot = {n: (tmp_path / n / "run.json").read_bytes() for n in ("a", "b")}
    assert script.main([str(tmp_path)]) == 1
    assert {n: (tmp_path / n / "run.json").read_bytes() for n in ("a", "b")} == snapshot


@pytest.mark.parametrize("family", ["Image", "image text", "", "text", "image+text", 3])
def test_the_family_is_a_lowercase_token_and_not_identity(family: Any) -> None:
    if family in ("", "text", "image+text"):
        spec = benchmarks.load("mv-ngs", overrides={"family": family})
        assert spec.family == family and spec_hash(spec, "infonce_pwe") == spec_hash(benchmarks.load("mv-ngs"), "infonce_pwe")
        return
    with pytest.raises(ConfigError, match="family"):
        benchmarks.load("mv-ngs", overrides={"family": family})
