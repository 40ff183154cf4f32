"""Pretraining methods as units (fusebench.training.methods): typed options under
``pretrain.methods.<id>``, checked at spec load; the config hash (schema 1) unchanged for every spec
and committed run; the old flat keys as deprecated aliases; methods attached by declaration, never
by an objective id in the runner or the Pretrainer."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tokenize
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

from fusebench import benchmarks, objectives
from fusebench.encoders.mlp import MLPEncoder
from fusebench.training import methods as M
from fusebench.training.config import BenchmarkSpec, ConfigError, PretrainConfig, config_hash, spec_from_dict
from fusebench.training.pretrain import Pretrainer
from fusebench.training.spec_check import load_spec

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "leaderboards" / "runs"

#: hash schema 1: the flat pretrain keys (and their defaults) of PretrainConfig before the methods
#: had options, in field order; every committed run was hashed with exactly these
V1_LEGACY_DEFAULTS = {
    "ema_teacher": False, "ema_momentum": 0.99, "m3g_view_rotation": False,
    "tuple_disturbed": True, "tuple_alpha": None, "tuple_sample_optimisation": False,
    "tuple_candidates": 4, "tuple_candidate_steps": 8, "tuple_policy_lr": 0.01, "tuple_policy_sigma": 0.05,
    "tuple_beta_sigma": 0.05, "tuple_beta_max": 1.0, "tuple_beta_lambda": 1.0, "tuple_zeta_grid": 11,
    "tuple_val_size": 256, "tuple_policy_baseline": True, "embedding_noise": 0.1,
}

#: quickstart hashes computed with the code before this change (PretrainConfig with flat fields)
#: the quickstart spec as it was when the hashes below were pinned (before its `raw` row, issue #22): the
#: pins check that the hash schema has not moved, so they are computed on that spec
QUICKSTART_AS_PINNED = {
    "objectives": ["none", "infonce_pwe", "mv_dhel", "m3g", "tuple_infonce"],
    "protocol_notes": {
        "generator": "embedded, seeded (, 1024 train / 256 val / 512 test samples); the run tests whether pretraining "
                     "recovers the weak factor b: a probe without it is capped at 50% accuracy",
        "splits": "train for pretraining and probe; val for epoch selection; test scored once",
        "probe": "linear probe on the frozen concatenated per-modality embeddings"},
}
#: specs whose committed runs are of an earlier protocol until their boards are re-run (none now: the four
#: real boards were re-run under issue #22's protocol)
AWAITING_RERUN: set[str] = set()
QUICKSTART_OLD_HASHES = [
    (None, None, "0160b9f9615cafb0"),
    ("tuple_candidates", 8, "6320a58cc04e8c26"),
    ("ema_momentum", 0.9, "54d20fe0719275af"),
    ("m3g_view_rotation", True, "201038e575d9bb6e"),
    ("tuple_alpha", [1, 2, 3, 4], "a822473282cbce80"),
]


def _json(x: Any) -> Any:
    return json.loads(json.dumps(x, default=str))


def _records(name: str | None = None) -> list[Path]:
    return sorted((RUNS / name if name else RUNS).rglob("run.json"))


def _current_schema(config: dict[str, Any]) -> bool:
    """Whether a record's config has the keys the canonical form has now (older records lack fields
    added since, e.g. pretrain.selection_seed: their hashes could not be reproduced before either)."""
    from fusebench.training.config import OMITTED_WHEN_DEFAULT

    now = BenchmarkSpec().to_dict()
    optional: dict[str, set[str]] = {}  # fields written only when set (hash schema 1): present or not
    for path, _default in OMITTED_WHEN_DEFAULT:
        optional.setdefault(path[0] if len(path) > 1 else "", set()).add(path[-1])

    def keys(d: dict[str, Any], where: str) -> set[str]:
        return set(d) - optional.get(where, set())

    return keys(config, "") == keys(now, "") and all(
        keys(config[k], k) == keys(now[k], k) for k in now
        if isinstance(now[k], dict) and k not in ("options", "protocol_notes", "synthetic"))


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


# ---------------------------------------------------------------------------------------------
# the hash: every spec and every committed run
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", benchmarks.builtin())
def test_builtin_spec_hashes_as_its_committed_runs(name: str) -> None:
    recs = _records(name)
    if not recs:
        pytest.skip(f"no committed runs of {name}")
    if name in AWAITING_RERUN:
        pytest.skip(f"{name}: the spec moved to the issue-#22 protocol; its committed runs are of the previous "
                    "protocol until the board is re-run")
    rec = json.loads(recs[0].read_text())
    assert {json.loads(p.read_text())["config_hash"] for p in recs} == {rec["config_hash"]}
    if not _current_schema(rec["config"]):
        pytest.skip(f"{name}'s committed runs were written by an older PretrainConfig schema (fields added since are "
                    "absent); their hash was not reproducible from the current spec before this change either")
    syn = bool(rec["dataset"].get("synthetic"))
    spec = benchmarks.load(name, synthetic=syn)
    # what differs is what the runs were made with: --set values, or dataset.modalities filled from the data;
    # never a pretraining method's setting
    diff = _dotted_diff(_json(spec.to_dict()), rec["config"])
    legacy = set(M.legacy_map())
    assert not any(k.startswith("pretrain.") and (k.split(".")[1] in legacy or k.split(".")[1] == "methods")
                   for k in diff), diff
    if name == "quickstart":
        assert diff == {}  # the spec as committed
    if diff:
        spec = benchmarks.load(name, synthetic=syn, overrides=diff)
    assert spec.hash() == rec["config_hash"]
    assert _json(spec.to_dict()) == rec["config"]


def test_every_committed_record_round_trips_through_the_new_layout() -> None:
    paths = _records()
    assert len(paths) > 500
    current = 0
    for p in paths:
        rec = json.loads(p.read_text())
        assert config_hash(rec["config"]) == rec["config_hash"], p  # the hash function itself
        spec = spec_from_dict(rec["config"], str(p))
        for flat, (mid, opt) in M.legacy_map().items():  # the flat keys land on the method options
            if flat in rec["config"]["pretrain"]:
                assert getattr(spec.pretrain.method_options(mid), opt) == rec["config"]["pretrain"][flat], (p, flat)
        if _current_schema(rec["config"]):
            current += 1
            assert spec.hash() == rec["config_hash"], p
            assert _json(spec.to_dict()) == rec["config"], p
    assert current >= 600  # mv-*, quickstart, polyview-gaussian-mi


def test_hash_schema_1_legacy_keys_and_defaults() -> None:
    assert list(M.legacy_map()) == list(V1_LEGACY_DEFAULTS)
    pre = BenchmarkSpec().to_dict()["pretrain"]
    assert {k: pre[k] for k in V1_LEGACY_DEFAULTS} == V1_LEGACY_DEFAULTS
    assert "methods" not in pre  # no option differs from its default
    for k in V1_LEGACY_DEFAULTS:  # and the types are those of the old fields (1.0 hashes as "1.0", not "1")
        assert type(pre[k]) is type(V1_LEGACY_DEFAULTS[k])


@pytest.mark.parametrize("flat,value,want", QUICKSTART_OLD_HASHES)
def test_option_set_old_or_new_way_gives_the_old_hash(flat: str | None, value: Any, want: str) -> None:
    if flat is None:
        assert benchmarks.load("quickstart", overrides=QUICKSTART_AS_PINNED).hash() == want
        return
    mid, opt = M.legacy_map()[flat]
    with pytest.warns(M.DeprecatedKeyWarning, match=f"pretrain.{flat} is deprecated; write pretrain.methods.{mid}.{opt}"):
        via_alias = benchmarks.load("quickstart", overrides={**QUICKSTART_AS_PINNED, f"pretrain.{flat}": value})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        via_method = benchmarks.load("quickstart", overrides={**QUICKSTART_AS_PINNED,
                                                              f"pretrain.methods.{mid}.{opt}": value})
    assert via_alias.hash() == via_method.hash() == want
    assert via_method.to_dict()["pretrain"][flat] == value  # the canonical form has the old flat key
    # the record's config (canonical form) reads back into the same spec
    assert spec_from_dict(_json(via_method.to_dict())).hash() == want


def test_a_new_option_enters_the_hash_only_when_it_differs_from_its_default() -> None:
    base = benchmarks.load("quickstart")
    same = benchmarks.load("quickstart", overrides={"pretrain.methods.tuple_infonce.dropout": 0.1})
    other = benchmarks.load("quickstart", overrides={"pretrain.methods.tuple_infonce.dropout": 0.2})
    assert same.hash() == base.hash() and "methods" not in same.to_dict()["pretrain"]
    assert other.hash() != base.hash()
    assert other.to_dict()["pretrain"]["methods"] == {"tuple_infonce": {"dropout": 0.2}}
    back = spec_from_dict(_json(other.to_dict()))
    assert back.hash() == other.hash() and back.pretrain.method_options("tuple_infonce").dropout == 0.2
    # an empty block and no block are one configuration
    assert benchmarks.load("quickstart", overrides={"pretrain.methods": {"tuple_infonce": {}}}).hash() == base.hash()


# ---------------------------------------------------------------------------------------------
# spec loading
# ---------------------------------------------------------------------------------------------
GOOD = """
dataset: {id: quickstart, synthetic_only: true}
encoder: {id: mlp}
metrics: [acc]
"""


def _spec(tmp_path: Path, extra: str) -> Path:
    path = tmp_path / "methods-bench.yaml"
    path.write_text(GOOD + extra)
    return path


def test_method_options_are_typed_at_load(tmp_path: Path) -> None:
    spec = load_spec(_spec(tmp_path, "pretrain:\n  methods:\n    tuple_infonce: {candidates: 8, beta_max: 2, alpha: [1, 1, 1, 2]}\n"))
    opts = spec.pretrain.methods["tuple_infonce"]
    assert type(opts).__name__ == "TupleInfoNCEOptions"
    assert opts.candidates == 8 and opts.beta_max == 2.0 and isinstance(opts.beta_max, float)
    assert opts.alpha == [1.0, 1.0, 1.0, 2.0] and opts.sample_optimisation is False  # defaults filled
    assert spec.pretrain.method_options("ema_teacher").momentum == 0.99  # not mentioned: its defaults


@pytest.mark.parametrize("extra,words", [
    ("pretrain: {methods: {tuple_infonce: {candidate: 3}}}",
     ["pretrain.methods.tuple_infonce", "unknown options ['candidate']", "'candidate' -> 'candidates'", "valid options: disturbed"]),
    ("pretrain: {methods: {tuple_infonse: {candidates: 3}}}",
     ["pretrain.methods", "unknown pretrain method 'tuple_infonse'", "Did you mean 'tuple_infonce'"]),
    ("pretrain: {methods: {tuple_infonce: {candidates: many}}}", ["pretrain.methods.tuple_infonce.candidates", "expected int"]),
    ("pretrain: {methods: {ema_teacher: {momentum: 1.5}}}", ["pretrain.methods.ema_teacher", "momentum must be in [0, 1)"]),
    ("pretrain: {methods: {tuple_infonce: {dropout: 1.0}}}", ["pretrain.methods.tuple_infonce", "dropout must be in [0, 1)"]),
    ("pretrain: {methods: {view_rotation: true}}", ["pretrain.methods.view_rotation", "expected a mapping"]),
    ("pretrain: {tuple_candidates: 2, methods: {tuple_infonce: {candidates: 3}}}",
     ["pretrain.tuple_candidates = 2", "pretrain.methods.tuple_infonce.candidates = 3", "set one option twice"]),
])
def test_bad_method_options_name_file_key_and_valid_ones(tmp_path: Path, extra: str, words: list[str]) -> None:
    path = _spec(tmp_path, extra + "\n")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", M.DeprecatedKeyWarning)
        with pytest.raises(ConfigError) as err:
            load_spec(path)
    msg = str(err.value)
    assert str(path) in msg
    for w in words:
        assert w in msg, (w, msg)


def test_old_flat_keys_in_a_spec_file_and_in_set_are_mapped_with_a_warning(tmp_path: Path) -> None:
    old = _spec(tmp_path, "pretrain: {tuple_candidates: 8, ema_teacher: true, embedding_noise: 0.2}\n")
    with pytest.warns(M.DeprecatedKeyWarning) as caught:
        a = load_spec(old)
    assert {str(w.message).split(": ", 1)[1].split(" is")[0] for w in caught} == {
        "pretrain.tuple_candidates", "pretrain.ema_teacher", "pretrain.embedding_noise"}
    new = tmp_path / "new.yaml"
    new.write_text(GOOD + "name: methods-bench\npretrain:\n  methods:\n    tuple_infonce: {candidates: 8, embedding_noise: 0.2}\n"
                   "    ema_teacher: {enabled: true}\n")
    b = load_spec(new)
    assert a.hash() == b.hash() and a.to_dict() == b.to_dict()
    assert a.pretrain.method_options("tuple_infonce").candidates == 8 and a.pretrain.method_options("ema_teacher").enabled
    # --set with the old key overrides the spec's new key (the override wins, as for any --set)
    with pytest.warns(M.DeprecatedKeyWarning):
        c = load_spec(new, overrides={"pretrain.tuple_candidates": 5})
    assert c.pretrain.method_options("tuple_infonce").candidates == 5
    # a synthetic block with the old key: mapped too, and stored as written (it is part of the hash)
    syn = _spec(tmp_path, "synthetic: {pretrain.tuple_candidates: 2}\n")
    with pytest.warns(M.DeprecatedKeyWarning):
        d = load_spec(syn, synthetic=True)
    assert d.pretrain.method_options("tuple_infonce").candidates == 2
    assert d.to_dict()["synthetic"] == {"pretrain.tuple_candidates": 2}


def test_importing_methods_leaves_the_warning_filters_as_they_were() -> None:
    """A fresh interpreter: importing the module changes no process-wide warning filter, and an old
    flat key is still shown under Python's default filters (a FutureWarning needs none of its own)."""
    code = ("import sys, warnings\n"
            "import torch, fusebench.registry  # what the module imports (torch adds filters of its own)\n"
            "assert 'fusebench.training.methods' not in sys.modules\n"
            "before = list(warnings.filters)\n"
            "import fusebench.training.methods\n"
            "assert list(warnings.filters) == before, (before, warnings.filters)\n"
            "from fusebench import benchmarks\n"
            "benchmarks.load('quickstart', overrides={'pretrain.tuple_candidates': 8})\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "DeprecatedKeyWarning: --set: pretrain.tuple_candidates is deprecated" in done.stderr, done.stderr


def test_builtin_specs_use_no_deprecated_key() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", M.DeprecatedKeyWarning)
        for name in benchmarks.builtin():
            benchmarks.load(name)
            benchmarks.load(name, synthetic=True)


# ---------------------------------------------------------------------------------------------
# methods join a run by declaration
# ---------------------------------------------------------------------------------------------
DIMS = {"a": 5, "b": 6, "c": 7}


def _pre(objective: str, **methods) -> Pretrainer:
    torch.manual_seed(0)
    model = MLPEncoder(DIMS, num_features=8, hidden=16)
    return Pretrainer(model, objectives.build(objective), PretrainConfig(projection_dim=8, projection_hidden=16,
                                                                         methods=methods), total_steps=10)


@pytest.mark.parametrize("objective,methods,attached", [
    ("infonce_pwe", {}, []),
    ("infonce_pwe", {"view_rotation": {"enabled": True}}, ["view_rotation", "ema_teacher"]),
    ("m3g", {"ema_teacher": {"enabled": True}}, ["view_rotation", "ema_teacher"]),
    ("byol_pwe", {}, ["ema_teacher"]),
    ("byol_avg", {"view_rotation": {"enabled": True}}, ["ema_teacher"]),  # BYOL is not a view objective
    ("tuple_infonce", {}, ["tuple_infonce"]),
    ("tuple_infonce", {"ema_teacher": {"enabled": True}}, ["tuple_infonce", "ema_teacher"]),
])
def test_methods_attached_by_declaration_and_options(objective: str, methods: dict, attached: list[str]) -> None:
    pre = _pre(objective, **methods)
    assert list(pre.methods) == attached
    assert hasattr(pre, "teacher") == ("ema_teacher" in attached)
    assert hasattr(pre, "fusion") == ("tuple_infonce" in attached)
    # student parameters in the order the Pretrainer had before methods: encoder, projections, predictor, fusion
    names = [n.split(".")[0] for n, q in pre.named_parameters() if not n.startswith("teacher.")]
    assert names == sorted(names, key=["model", "objective", "proj", "predictor", "fusion"].index)


def test_tuple_dropout_option_is_the_augmentation_dropout() -> None:
    g = torch.Generator().manual_seed(3)
    batch = {"names": list(DIMS), "modalities": {m: torch.randn(8, d, generator=g) for m, d in DIMS.items()}}

    def loss(**opts) -> torch.Tensor:
        pre = _pre("tuple_infonce", tuple_infonce=opts)
        pre.train()
        torch.manual_seed(1)
        return pre(batch)

    torch.testing.assert_close(loss(dropout=0.1), loss(), rtol=0, atol=0)  # 0.1 is the old constant
    assert not torch.equal(loss(dropout=0.0), loss())


def test_runner_and_pretrainer_name_no_objective() -> None:
    """No string literal in the generic pretraining modules is an objective id (the method modules,
    tuple_method / tuple_optim / teacher, are where method-specific code lives)."""
    ids = set(objectives.available())
    allowed = {("fusebench/training/config.py", 'objective: str = "infonce_pwe"')}  # a spec's default, not a branch
    for rel in ("fusebench/training/runner.py", "fusebench/training/pretrain.py", "fusebench/training/config.py",
                "fusebench/training/methods.py", "fusebench/training/loop.py"):
        src = (ROOT / rel).read_text()
        for tok in tokenize.generate_tokens(io.StringIO(src).readline):
            if tok.type == tokenize.STRING and not tok.string.startswith(('"""', "'''", 'f"""')):
                text = tok.string.strip("rbfRBF")[1:-1]
                if any(r == rel and line in tok.line for r, line in allowed):
                    continue
                assert text not in ids, f"{rel}:{tok.start[0]} names objective {text!r}"
