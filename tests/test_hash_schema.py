"""The config hash, schema 4 (fusebench.spec.config; schema 2 plus issue #29's cuts: no field the
pipeline does not apply, no unused method's options, no selection_seed beside selection_seeds; and schema 4's:
no pretraining setting for a row that pretrains nothing, no value a selection grid replaces): what enters a
cell's hash and what does not, an independent computation of it, every committed record at the current
schema with its hash reproduced from its own config and from its benchmark's spec, and the one-time
migrations from schema 1 (scripts/migrate_hash_schema_2.py, then migrate_hash_schema_3.py and
migrate_hash_schema_4.py) on a schema-1 record rebuilt by hand, and schema 4's on mv-ngs files put back at schema 3. tests/test_config_identity.py has the hostile inputs of issue #29."""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import json
import warnings
from pathlib import Path
from typing import Any

import pytest

from fusebench import benchmarks
from fusebench.records import comparability_key, validate_record
from fusebench.records.cell_file import record_versions
from fusebench.spec import methods as M
from fusebench.components.identity import code_changes, config_hash, spec_hash
from fusebench.spec.config import HASH_SCHEMA_VERSION, BenchmarkSpec, spec_from_dict

#: what the gaussian_mi cell reads besides the fields of every pipeline, written out here
GAUSSIAN_MI_READS = {"name", "pipeline", "metrics", "selection_metric", "precision", "options",
                     "pretrain.hparams", "pretrain.epochs", "pretrain.lr", "pretrain.weight_decay"}

ROOT = Path(__file__).resolve().parents[1]
RUN_FOLDERS = [ROOT / "leaderboards" / "runs", ROOT / "leaderboards" / "runs-kviews"]

#: the flat keys of hash schema 1 (before methods had options) -> (method, option), written out here
#: independently of the code's table
V1_FLAT = {
    "ema_teacher": ("ema_teacher", "enabled"), "ema_momentum": ("ema_teacher", "momentum"),
    "m3g_view_rotation": ("view_rotation", "enabled"), "tuple_disturbed": ("tuple_infonce", "disturbed"),
    "tuple_alpha": ("tuple_infonce", "alpha"), "tuple_sample_optimisation": ("tuple_infonce", "sample_optimisation"),
    "tuple_candidates": ("tuple_infonce", "candidates"), "tuple_candidate_steps": ("tuple_infonce", "candidate_steps"),
    "tuple_policy_lr": ("tuple_infonce", "policy_lr"), "tuple_policy_sigma": ("tuple_infonce", "policy_sigma"),
    "tuple_beta_sigma": ("tuple_infonce", "beta_sigma"), "tuple_beta_max": ("tuple_infonce", "beta_max"),
    "tuple_beta_lambda": ("tuple_infonce", "beta_lambda"), "tuple_zeta_grid": ("tuple_infonce", "zeta_grid"),
    "tuple_val_size": ("tuple_infonce", "val_size"), "tuple_policy_baseline": ("tuple_infonce", "policy_baseline"),
    "embedding_noise": ("tuple_infonce", "embedding_noise"),
}


def _json(x: Any) -> Any:
    return json.loads(json.dumps(x, default=str))


def _records() -> list[Path]:
    return [p for f in RUN_FOLDERS for p in sorted(f.rglob("run.json"))]


#: the pretraining methods each objective builds on (BYOL: the EMA teacher and predictor of its paper; TupleInfoNCE:
#: its tuple construction), the only methods whose options enter its cells' hash
BUILDS_ON = {"byol_pwe": ("ema_teacher",), "byol_avg": ("ema_teacher",), "tuple_infonce": ("tuple_infonce",)}


#: the rows that pretrain nothing, written out here (fusebench list rows)
REFERENCE_ROWS = {"none", "raw", "raw_l2", "raw_pca", "raw_tfidf", "raw_balanced"}
#: the rows whose features' width is a hyper-parameter (options.<protocol>.pca_widths)
WIDTH_ROWS = {"raw_pca"}


def _by_hand(canonical: dict[str, Any], objective: str, reference: bool | None = None) -> str:
    """The schema-4 hash as docs/benchmarks.md states it, written out step by step (``pretrain.methods``, which
    holds only options off their defaults, kept for the methods the objective builds on: :data:`BUILDS_ON`);
    ``reference``: whether the row pretrains nothing (None: :data:`REFERENCE_ROWS` says)."""
    assert set(canonical["pretrain"].get("methods") or {}) <= {"ema_teacher", "tuple_infonce"}, "extend BUILDS_ON"
    ident = copy.deepcopy(canonical)
    for key in ("description", "protocol_notes", "objectives", "seeds", "synthetic", "checkpoint_every", "comparison",
                "family", "variant_of"):
        ident.pop(key, None)
    if "methods" in ident["pretrain"]:
        mine = {m: o for m, o in ident["pretrain"]["methods"].items() if m in BUILDS_ON.get(objective, ())}
        if mine:
            ident["pretrain"]["methods"] = mine
        else:
            del ident["pretrain"]["methods"]
    del ident["pretrain"]["objective"]
    widths = False  # schema 4: the widths are raw_pca's alone
    for entry in (ident.get("options") or {}).values():
        if isinstance(entry, dict) and "pca_widths" in entry:
            widths = widths or bool(entry["pca_widths"])
            if objective not in WIDTH_ROWS:
                del entry["pca_widths"]
    for table in ("hparams", "grid", "objective_batch_size", "objective_epochs", "objective_micro_batch"):
        mine = ident["pretrain"][table].get(objective)
        ident["pretrain"][table] = {} if mine is None else {objective: mine}
    if ident["pretrain"].get("selection_seeds"):  # schema 3: the one seed is unused beside the list
        del ident["pretrain"]["selection_seed"]
    if ident.get("pipeline") == "gaussian_mi":  # schema 3: only what its cell reads
        ident = {k: v for k, v in ident.items() if k in GAUSSIAN_MI_READS}
        ident["pretrain"] = {k: v for k, v in canonical["pretrain"].items() if f"pretrain.{k}" in GAUSSIAN_MI_READS}
        ident["pretrain"]["hparams"] = {objective: canonical["pretrain"]["hparams"][objective]} \
            if objective in canonical["pretrain"]["hparams"] else {}
    if (objective in REFERENCE_ROWS if reference is None else reference):  # schema 4: a row that pretrains nothing reads no pretraining setting
        seeds = {k: ident["pretrain"][k] for k in ("selection_seed", "selection_seeds") if k in ident["pretrain"]}
        del ident["pretrain"]
        if objective in WIDTH_ROWS and widths:  # but raw_pca's width is selected on the selection seeds
            ident["pretrain"] = seeds
    else:  # schema 4: the values its selection grid replaces are not what the cells train with
        searched = ident["pretrain"].get("grid", {}).get(objective, {})
        own = ident["pretrain"]["hparams"].get(objective, {})
        kept = {h: v for h, v in own.items() if h not in searched}
        ident["pretrain"]["hparams"] = {objective: kept} if kept else {}
        if not searched:  # and without a grid nothing is selected: no selection seed is used
            ident["pretrain"].pop("selection_seed", None)
            ident["pretrain"].pop("selection_seeds", None)
    ident["objective"] = objective
    text = json.dumps(ident, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


# ---------------------------------------------------------------------------------------------
# what enters a cell's hash
# ---------------------------------------------------------------------------------------------
def test_the_hash_is_the_documented_identity_computed_independently() -> None:
    spec = benchmarks.load("mv-ngs")
    for objective in ("m3g", "byol_pwe", "raw", "raw_pca", "infonce_pwe"):
        assert spec_hash(spec, objective) == _by_hand(_json(spec.to_dict()), objective)
        assert config_hash(_json(spec.to_dict()), objective) == spec_hash(spec, objective)  # a record's config: the same
    quick = benchmarks.load("quickstart")  # no grid: nothing selected
    for objective in ("m3g", "tuple_infonce", "none", "raw"):
        assert spec_hash(quick, objective) == _by_hand(_json(quick.to_dict()), objective)
    # pinned: the schema does not move silently (a change of the canonical form changes these)
    assert (spec_hash(quick, "infonce_pwe"), spec_hash(quick, "m3g"), spec_hash(quick, "none")) == (
        "d2ed8ace69708b10", "d248c487ebf6bd9e", "cf5cd66313836dc7")  # schema 3: 037271e1a2055c5e, 9d4d4d794305ba64,
    # 190df945937e8dce (quickstart selects nothing: schema 4 leaves its selection seed out, and none's pretraining)


def _hashes(overrides: dict[str, Any]) -> dict[str, str]:
    spec = benchmarks.load("mv-ngs", overrides=overrides)
    return {o: spec_hash(spec, o) for o in ("infonce_pwe", "byol_pwe", "m3g", "raw")}


@pytest.mark.parametrize("overrides,changed", [
    ({"description": "another text"}, set()),
    ({"protocol_notes.hparams": "another note"}, set()),
    ({"objectives": ["raw", "raw_pca", "m3g"]}, set()),
    ({"options.embedding_eval.pca_widths": [2, 4]}, set()),  # raw_pca's alone (not hashed here)
    ({"seeds": [0, 1]}, set()),
    ({"checkpoint_every": 7}, set()),
    ({"comparison.why": "another reason"}, set()),
    ({"family": "image+text"}, set()),  # the index's grouping of boards
    ({"pretrain.objective": "m3g"}, set()),  # the default objective of a run that names none
    ({"pretrain.grid.byol_pwe": {"methods.ema_teacher.momentum": [0.99, 0.996]}}, {"byol_pwe"}),
    # schema 4: a value the selection grid replaces is not what a cell trains with (mv-ngs selects m3g's eps)
    ({"pretrain.hparams.m3g": {"eps": 0.3}}, set()),
    ({"pretrain.hparams.m3g": {"eps": 0.2, "max_iter": 50}}, {"m3g"}),
    ({"pretrain.grid.m3g": {"eps": [0.1, 0.2]}}, {"m3g"}),
    ({"pretrain.objective_batch_size": {"m3g": 16}}, {"m3g"}),
    ({"pretrain.objective_epochs": {"infonce_pwe": 3}}, {"infonce_pwe"}),
    ({"pretrain.lr": 0.002}, {"infonce_pwe", "byol_pwe", "m3g"}),  # schema 4: raw pretrains nothing
    ({"pretrain.selection_seeds": [2000, 2001]}, {"infonce_pwe", "byol_pwe", "m3g"}),
    # schema 3: a method's options count only for the objectives it joins (schema 2 changed all four here)
    ({"pretrain.methods.ema_teacher.momentum": 0.9}, {"byol_pwe"}),
    ({"pretrain.methods.ema_teacher.enabled": True}, {"infonce_pwe", "byol_pwe", "m3g"}),
    ({"precision": "tf32"}, {"infonce_pwe", "byol_pwe", "m3g", "raw"}),
    ({"loader.num_workers": 2, "loader.prefetch_factor": 4}, set()),  # how batches are fetched, not what they hold
    ({"synthetic": {"pretrain.epochs": 1}}, set()),  # the override block itself (applied: its values are in the form)
    ({"speed.channels_last": True}, {"infonce_pwe", "byol_pwe", "m3g", "raw"}),  # may change the last bits
])
def test_a_cell_hash_holds_what_the_cell_computes_and_nothing_else(overrides: dict[str, Any], changed: set[str]) -> None:
    base, other = _hashes({}), _hashes(overrides)
    assert {o for o in base if base[o] != other[o]} == changed


def test_method_options_enter_only_when_they_differ_from_their_default() -> None:
    base = benchmarks.load("quickstart")
    same = benchmarks.load("quickstart", overrides={"pretrain.methods.tuple_infonce.dropout": 0.1})
    other = benchmarks.load("quickstart", overrides={"pretrain.methods.tuple_infonce.dropout": 0.2})
    assert spec_hash(same, "tuple_infonce") == spec_hash(base, "tuple_infonce") and "methods" not in same.to_dict()["pretrain"]
    assert spec_hash(other, "tuple_infonce") != spec_hash(base, "tuple_infonce")
    assert other.to_dict()["pretrain"]["methods"] == {"tuple_infonce": {"dropout": 0.2}}
    back = spec_from_dict(_json(other.to_dict()))
    assert spec_hash(back, "tuple_infonce") == spec_hash(other, "tuple_infonce")
    assert back.pretrain.method_options("tuple_infonce").dropout == 0.2
    assert spec_hash(benchmarks.load("quickstart", overrides={"pretrain.methods": {"tuple_infonce": {}}}), "m3g") == spec_hash(base, "m3g")
    assert BenchmarkSpec().to_dict()["precision"] == "32"  # written out in schema 2


# (tuple_sample_optimisation, not tuple_candidates: Algorithm 1's options are refused without its switch, as read by
# nothing; test_method_options.py)
@pytest.mark.parametrize("flat", ["tuple_sample_optimisation", "ema_momentum", "m3g_view_rotation", "embedding_noise"])
def test_an_old_flat_key_gives_the_hash_of_its_method_option(flat: str) -> None:
    mid, opt = V1_FLAT[flat]
    value = {"tuple_sample_optimisation": True, "ema_momentum": 0.9, "m3g_view_rotation": True,
             "embedding_noise": 0.3}[flat]
    with pytest.warns(M.DeprecatedKeyWarning, match=f"pretrain.{flat} is deprecated; write pretrain.methods.{mid}.{opt}"):
        via_alias = benchmarks.load("quickstart", overrides={f"pretrain.{flat}": value})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        via_method = benchmarks.load("quickstart", overrides={f"pretrain.methods.{mid}.{opt}": value})
    user = {"tuple_infonce": "tuple_infonce", "ema_teacher": "byol_pwe", "view_rotation": "m3g"}[mid]  # joins it
    assert spec_hash(via_alias, user) == spec_hash(via_method, user) != spec_hash(benchmarks.load("quickstart"), user)
    assert via_method.to_dict()["pretrain"]["methods"] == {mid: {opt: value}}
    assert flat not in via_method.to_dict()["pretrain"]


def test_no_method_declares_legacy_keys() -> None:
    for mid in M.METHODS.available():
        assert not hasattr(M.METHODS.get(mid), "legacy_keys"), mid


# ---------------------------------------------------------------------------------------------
# every committed record
# ---------------------------------------------------------------------------------------------
def test_every_committed_record_is_at_the_current_schema_and_its_hash_is_reproduced_from_its_config() -> None:
    paths = _records()
    assert len(paths) > 1500
    checked: set[str] = set()  # the seeds of a row (and a trial's seeds) share one config: each config checked once
    for p in paths:
        rec = json.loads(p.read_text())
        assert rec.get("hash_schema") == HASH_SCHEMA_VERSION, p
        key = json.dumps([rec["config"], rec["objective"], rec["config_hash"]], sort_keys=True)
        if key in checked:
            continue
        checked.add(key)
        assert rec["config_hash"] == _by_hand(rec["config"], rec["objective"]), p
        assert not set(V1_FLAT) & set(rec["config"]["pretrain"]), p
        assert _json(spec_from_dict(rec["config"], str(p)).to_dict()) == rec["config"], p  # the canonical form


def _dotted_diff(spec: dict[str, Any], rec: dict[str, Any]) -> dict[str, Any]:
    """Overrides (dotted keys, depth <= 2) turning the spec's canonical form into the record's config."""
    out = {}
    for key, value in rec.items():
        if value == spec.get(key):
            continue
        if isinstance(value, dict) and isinstance(spec.get(key), dict) and key not in ("synthetic",):
            for sub, v in value.items():
                if spec[key].get(sub, object()) != v:
                    out[f"{key}.{sub}"] = v
        else:
            out[key] = value
    return out


#: boards whose committed runs predate their benchmark's current spec, to be re-run under it (2026-11-30: the
#: selection grids widened to 7 values of tau / eps and 3 x 2 for BYOL, where the first issue-#30 runs often chose a
#: grid edge; the same re-run scores the converged few-shot probe, metric version 2). Their records keep the hash of
#: their own config (test_every_committed_record_validates_with_its_hash_checked), and the rows the change concerns
#: (those with a grid) must NOT hash as the current spec: once a board is re-run, this test fails until its entry is
#: removed here.
PENDING_RERUN: set[str] = set()  # none now: the last of them, mv-leaves100, was re-run on 2026-11-30


@pytest.mark.parametrize("name", sorted(PENDING_RERUN))
def test_boards_pending_a_rerun_are_of_another_configuration(name: str) -> None:
    paths = sorted((RUN_FOLDERS[0] / name).glob("*/seed*/run.json"))
    assert paths, f"no committed runs of {name}: drop it from PENDING_RERUN"
    spec = benchmarks.load(name)
    gridded = [p for p in paths if spec.pretrain.settings(json.loads(p.read_text())["objective"]).grid]
    assert gridded, f"{name}: no committed run of an objective with a grid"
    for p in gridded:
        rec = json.loads(p.read_text())
        assert spec_hash(spec, rec["objective"]) != rec["config_hash"], (
            f"{p} hashes as the current spec of {name}: the board was re-run, remove it from PENDING_RERUN")


#: boards whose committed runs were made by other code than the current one and await a rerun (their boards and the
#: index say so, "Made by other code than the current one"): board -> the changes (code_changes' text) its records and
#: frozen selections may show, and no other. Once a board is re-run, the test below fails until its entry is removed.
PENDING_CODE_RERUN: dict[str, frozenset[str]] = {}  # none now: the two 4x variants (current specs, records scored
# by the few-shot probe's version 1) were re-run on 2026-11-30; the PENDING_RERUN boards are skipped by the test below.
# An entry reads e.g. {"mv-cub-4x": frozenset({"metric 'fs1_acc' version '1', now '2'", ...})}


@pytest.mark.parametrize("name", [n for n in benchmarks.builtin() if n not in PENDING_RERUN])
def test_builtin_spec_hashes_as_its_committed_runs(name: str) -> None:
    """Each committed run's hash is its benchmark's spec's hash for the run's objective; what may differ is
    what the run was made with: dataset.modalities filled from the data, the synthetic overrides, or the
    rows of a board re-run under an amended spec (then the spec of the newest run)."""
    paths = sorted((RUN_FOLDERS[0] / name).glob("*/seed*/run.json"))
    if not paths:
        pytest.skip(f"no committed runs of {name}")
    cache: dict[str, Any] = {}
    specs: dict[bool, Any] = {}  # the spec as it stands, with and without the synthetic overrides: loaded once each
    allowed, seen = PENDING_CODE_RERUN.get(name, frozenset()), set()
    for p in paths:
        rec = json.loads(p.read_text())
        syn = bool(rec["dataset"].get("synthetic"))
        if syn not in specs:
            specs[syn] = benchmarks.load(name, synthetic=syn)
        spec = specs[syn]
        diff = _dotted_diff(_json(spec.to_dict()), rec["config"])
        assert not any(k.startswith("pretrain.methods") for k in diff), (p, diff)  # never a method's setting
        if spec.pipeline == "gaussian_mi":  # a field its cell never read (the records' pretrain.batch_size 1024) is
            diff = {k: v for k, v in diff.items()  # refused now, and no part of the hash
                    if not k.startswith("pretrain.") or any(k == r or k.startswith(r + ".") for r in GAUSSIAN_MI_READS)}
        key = json.dumps([syn, diff], sort_keys=True, default=str)
        if key not in cache:
            cache[key] = benchmarks.load(name, synthetic=syn, overrides=diff) if diff else spec
        assert spec_hash(cache[key], rec["objective"]) == rec["config_hash"], p
        # and by the code now: the versions of its objective, encoder and metrics (else a rerun refuses the cell)
        changes = set(code_changes(cache[key], rec["objective"], *record_versions(rec)))
        assert changes <= allowed, (p, sorted(changes - allowed))
        seen |= changes
    # the frozen selections: written before files stated versions, each judged by its trials' records (all there)
    from fusebench.sweep import selection

    for frozen in sorted((RUN_FOLDERS[0] / name / selection.SELECTION_DIR).glob("*.json")):
        objective = frozen.stem
        trials = selection.trials_of(spec, objective, RUN_FOLDERS[0], {})
        assert trials and all((t.cell / "run.json").is_file() for t in trials), frozen
        outcome = json.loads(frozen.read_text())
        assert selection._outcome_problem(outcome, spec, objective) is None, frozen  # as select_hparams writes it
        made = outcome.get("versions")
        changes = set(code_changes(spec, objective, made, made.get("metrics")) if isinstance(made, dict) else
                      selection._trials_code_changes(spec, objective, RUN_FOLDERS[0], {}))
        assert changes <= allowed, (frozen, sorted(changes - allowed))
    if name in PENDING_CODE_RERUN:
        assert seen, f"{name}'s runs were made by the current code: the board was re-run, drop it from PENDING_CODE_RERUN"


def test_every_committed_record_validates_with_its_hash_checked() -> None:
    paths = _records()
    rec = json.loads(paths[0].read_text())
    validate_record(rec, paths[0])
    bad = copy.deepcopy(rec)
    bad["config"]["pretrain"]["lr"] = 123.0  # an edited config: the stored hash no longer matches
    bad["comparability_key"] = comparability_key(bad)
    with pytest.raises(ValueError, match="config_hash"):
        validate_record(bad, paths[0])


# ---------------------------------------------------------------------------------------------
# the migration from schema 1
# ---------------------------------------------------------------------------------------------
def _schema_1(config: dict[str, Any]) -> dict[str, Any]:
    """A schema-2 config written back in the schema-1 layout, by hand: every flat method key with its value
    (defaults included), no ``methods`` block, no ``precision`` at 32."""
    old = copy.deepcopy(config)
    methods = old["pretrain"].pop("methods", {})
    for flat, (mid, opt) in V1_FLAT.items():
        default = getattr(M.METHODS.get(mid).Options(), opt)
        old["pretrain"][flat] = methods.get(mid, {}).get(opt, default)
    if old.get("precision") == "32":
        del old["precision"]
    return old


def _load_script(name: str = "migrate_hash_schema_2"):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_migration_turns_a_schema_1_record_into_the_committed_one(tmp_path: Path) -> None:
    script = _load_script()
    src = RUN_FOLDERS[0] / "quickstart" / "tuple_infonce" / "seed0" / "run.json"
    now = json.loads(src.read_text())
    old = copy.deepcopy(now)
    old["config"] = _schema_1(now["config"])
    del old["hash_schema"]
    old["config_hash"] = hashlib.sha256(json.dumps(old["config"], sort_keys=True).encode()).hexdigest()[:16]
    old["comparability_key"] = "0" * 16
    (tmp_path / "runs" / "a").mkdir(parents=True)
    (tmp_path / "runs" / "a" / "run.json").write_text(json.dumps(old))
    assert script.main([str(tmp_path / "runs")]) == 0
    got = json.loads((tmp_path / "runs" / "a" / "run.json").read_text())
    assert got == _at_schema(now, 2)
    assert script.main([str(tmp_path / "runs")]) == 0  # again: nothing to do, nothing changed
    assert json.loads((tmp_path / "runs" / "a" / "run.json").read_text()) == _at_schema(now, 2)
    # then schema 3 (scripts/migrate_hash_schema_3.py), then 4: the committed record as it is now
    assert _load_script("migrate_hash_schema_3").main([str(tmp_path / "runs")]) == 0
    assert json.loads((tmp_path / "runs" / "a" / "run.json").read_text()) == _at_schema(now, 3)
    assert _load_script("migrate_hash_schema_4").main([str(tmp_path / "runs")]) == 0
    assert json.loads((tmp_path / "runs" / "a" / "run.json").read_text()) == now == _at_schema(now, HASH_SCHEMA_VERSION)


def _file_sha256(selection: dict[str, Any]) -> str:
    """The sha256 of a frozen selection file as the sweep writes it: indented, sorted keys, a final newline."""
    return hashlib.sha256((json.dumps(selection, indent=2, sort_keys=True) + "\n").encode()).hexdigest()


def _schema_3_board(tmp_path: Path, objective: str = "m3g") -> tuple[Path, dict[str, Any], dict[str, Any]]:
    """mv-ngs' ``objective`` seed 0 and ``raw`` seed 0 with the frozen selection, as they were at hash schema 3
    (the hashes recomputed at schema 3; the record's copy of the selection and its sha256 with them), in
    ``tmp_path/runs``; returns the folder and the committed selection and record."""
    board = RUN_FOLDERS[0] / "mv-ngs"
    sel = json.loads((board / "_selection" / f"{objective}.json").read_text())
    assert (board / "_selection" / f"{objective}.json").read_text() == json.dumps(sel, indent=2, sort_keys=True) + "\n"
    rec = json.loads((board / objective / "seed0" / "run.json").read_text())
    old_hash = config_hash(rec["config"], objective, 3)
    old_sel = {**sel, "config_hash": old_hash}
    old_rec = {**rec, "hash_schema": 3, "config_hash": old_hash, "hparam_selection": old_sel,
               "hparam_selection_sha256": _file_sha256(old_sel)}
    raw = json.loads((board / "raw" / "seed0" / "run.json").read_text())
    old_raw = {**raw, "hash_schema": 3, "config_hash": config_hash(raw["config"], "raw", 3)}
    out = tmp_path / "runs" / "mv-ngs"
    for path, data in ((out / "_selection" / f"{objective}.json", old_sel),
                       (out / objective / "seed0" / "run.json", old_rec), (out / "raw" / "seed0" / "run.json", old_raw)):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    return tmp_path / "runs", sel, rec


def test_the_schema_4_migration_gives_the_committed_records_and_selection_files(tmp_path: Path) -> None:
    """Schema 4 leaves ``pretrain`` out of a reference row's hash and the selected values out of an objective's: the
    raw row's hash and m3g's (mv-ngs selects its eps beside ``hparams.m3g.eps``) both change; the migration writes
    the committed files back, the selection file's hash and the record's copy of it with its new sha256 included."""
    runs, sel, rec = _schema_3_board(tmp_path)
    board = runs / "mv-ngs"
    raw = json.loads((RUN_FOLDERS[0] / "mv-ngs" / "raw" / "seed0" / "run.json").read_text())
    assert json.loads((board / "raw" / "seed0" / "run.json").read_text())["config_hash"] != raw["config_hash"]
    assert json.loads((board / "m3g" / "seed0" / "run.json").read_text())["config_hash"] != rec["config_hash"]
    assert _load_script("migrate_hash_schema_4").main([str(runs)]) == 0
    assert json.loads((board / "m3g" / "seed0" / "run.json").read_text()) == rec
    assert json.loads((board / "raw" / "seed0" / "run.json").read_text()) == raw
    assert (board / "_selection" / "m3g.json").read_text() == json.dumps(sel, indent=2, sort_keys=True) + "\n"
    assert rec["hparam_selection_sha256"] == hashlib.sha256((board / "_selection" / "m3g.json").read_bytes()).hexdigest()
    before = {p: p.read_bytes() for p in runs.rglob("*.json")}
    assert _load_script("migrate_hash_schema_4").main([str(runs)]) == 0  # again: nothing to do
    assert {p: p.read_bytes() for p in runs.rglob("*.json")} == before


@pytest.mark.parametrize("tamper", ["record's selection", "selection file", "orphan selection"])
def test_the_schema_4_migration_writes_nothing_when_a_file_does_not_agree(tmp_path: Path, tamper: str, capsys) -> None:
    runs, _, _ = _schema_3_board(tmp_path)
    board = runs / "mv-ngs"
    if tamper == "record's selection":  # its copy of the selection no longer the file it names by sha256
        path = board / "m3g" / "seed0" / "run.json"
        r = json.loads(path.read_text())
        r["hparam_selection"]["choice"] = {"eps": 0.5}
        path.write_text(json.dumps(r, indent=2, sort_keys=True) + "\n")
        named = path
    elif tamper == "selection file":  # the file no longer what the records copied
        named = board / "_selection" / "m3g.json"
        s = json.loads(named.read_text())
        s["choice"] = {"eps": 0.5}
        named.write_text(json.dumps(s, indent=2, sort_keys=True) + "\n")
    else:  # no record of its objective beside it: its cells' config, so its new hash, is unknown
        named = board / "_selection" / "byol_pwe.json"
        named.write_text((RUN_FOLDERS[0] / "mv-ngs" / "_selection" / "byol_pwe.json").read_text())
    before = {p: p.read_bytes() for p in runs.rglob("*.json")}
    assert _load_script("migrate_hash_schema_4").main([str(runs)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and str(named if tamper != "selection file" else board / "m3g" / "seed0" / "run.json") in err
    assert {p: p.read_bytes() for p in runs.rglob("*.json")} == before  # nothing written


def _at_schema(rec: dict[str, Any], schema: int) -> dict[str, Any]:
    """A committed record as it reads at hash ``schema`` (its config unchanged: only the hash is recomputed)."""
    out = copy.deepcopy(rec)
    out["hash_schema"] = schema
    out["config_hash"] = config_hash(out["config"], out["objective"], schema)
    return out


def test_the_migration_refuses_a_record_whose_settings_would_change(tmp_path: Path) -> None:
    script = _load_script()
    rec = json.loads((RUN_FOLDERS[0] / "quickstart" / "m3g" / "seed0" / "run.json").read_text())
    rec["config"] = _schema_1(rec["config"])
    del rec["hash_schema"]
    rec["config"]["pretrain"]["tuple_candidates"] = "four"  # not a value the option can hold
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "run.json").write_text(json.dumps(rec))
    before = (tmp_path / "r" / "run.json").read_bytes()
    assert script.main([str(tmp_path)]) == 1
    assert (tmp_path / "r" / "run.json").read_bytes() == before  # nothing written


def test_variant_of_names_another_benchmark_and_is_no_part_of_a_cell_identity() -> None:
    """issue #31: ``variant_of`` only places the board in the index (out of the ranking, beside its base)."""
    from fusebench.typed import ConfigError

    base = benchmarks.load("mv-cub")
    marked = benchmarks.load("mv-cub", overrides={"variant_of": "mv-hw2sources"})
    assert marked.variant_of == "mv-hw2sources" and spec_hash(marked, "mv_infonce") == spec_hash(base, "mv_infonce")
    for bad in ("mv-cub", "../up", "Mv-Cub"):
        with pytest.raises(ConfigError, match="variant_of must be the id of another benchmark"):
            benchmarks.load("mv-cub", overrides={"variant_of": bad})
    # the committed 4x variants: their base's data and rows, 4x its epochs, no selection grid
    for name, base_name in (("mv-hw2sources-4x", "mv-hw2sources"), ("mv-cub-4x", "mv-cub")):
        v, b = benchmarks.load(name), benchmarks.load(base_name)
        assert v.variant_of == base_name and v.pretrain.epochs == 4 * b.pretrain.epochs and not v.pretrain.grid
        assert v.objectives == b.objectives and v.seeds == b.seeds and v.dataset == b.dataset


def test_no_committed_record_names_a_machine_specific_absolute_path() -> None:
    """Committed records name their data relative to the project root (``../shared/fixtures/...``), as the
    sweeps' ``--data-root`` was given; an absolute path would name one machine's folders."""
    found = [str(p) for p in _records() if '": "/' in p.read_text()]
    assert not found, f"records with an absolute path: {found[:5]} (+{max(0, len(found) - 5)} more)"


def test_a_row_of_a_plugin_not_installed_here_validates_either_way() -> None:
    """Hash schema 4 leaves ``pretrain`` out of a reference row's hash, and whether a row is one is its registry's
    to say: a record of a plugin's row (``myref``, registered nowhere here) validates with the hash the plugin's
    runs wrote, as a reference row (pretrain left out) or as an objective (pretrain in); any other hash is refused."""
    from fusebench.records import RecordError

    rec = json.loads((RUN_FOLDERS[0] / "mv-ngs" / "raw" / "seed0" / "run.json").read_text())
    rec["objective"] = "myref"
    as_reference, as_objective = (_by_hand(rec["config"], "myref", reference=r) for r in (True, False))
    assert as_reference != as_objective
    for stated in (as_reference, as_objective):
        validate_record({**rec, "config_hash": stated}, "myref.json")
    with pytest.raises(RecordError, match=r"field 'config_hash': expected '"):
        validate_record({**rec, "config_hash": config_hash(rec["config"], "myref", 3)}, "myref.json")
    # a registered row is judged by its registry alone: raw's hash with pretrain in is refused
    raw = json.loads((RUN_FOLDERS[0] / "mv-ngs" / "raw" / "seed0" / "run.json").read_text())
    with pytest.raises(RecordError, match=r"field 'config_hash'"):
        validate_record({**raw, "config_hash": _by_hand(raw["config"], "raw", reference=False)}, "raw.json")
