"""Pretraining methods as units (fusebench.spec.methods): typed options under
``pretrain.methods.<id>``, checked at spec load; the old flat keys as deprecated aliases; methods attached
by declaration, never by an objective id in the runner or the Pretrainer. (The config hash: test_hash_schema.py.)"""

from __future__ import annotations

import ast
import io
import subprocess
import sys
import tokenize
import warnings
from pathlib import Path

import pytest
import torch

from fusebench.components.identity import spec_hash
from fusebench import benchmarks, objectives
from fusebench.encoders.mlp import MLPEncoder
from fusebench.spec import methods as M
from fusebench.spec.config import ConfigError, PretrainConfig
from fusebench.engine.pretrain import Pretrainer
from fusebench.components.spec_check import load_spec

ROOT = Path(__file__).resolve().parents[1]

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
    # (candidates and beta_max with sample_optimisation: true: without it they are read by nothing and refused,
    # test_sample_optimisation_options_without_it_are_refused)
    spec = load_spec(_spec(tmp_path, "pretrain:\n  methods:\n    tuple_infonce: {sample_optimisation: true, candidates: 8, "
                                     "beta_max: 2, alpha: [1, 1, 1, 2]}\n"))
    opts = spec.pretrain.methods["tuple_infonce"]
    assert type(opts).__name__ == "TupleInfoNCEOptions"
    assert opts.candidates == 8 and opts.beta_max == 2.0 and isinstance(opts.beta_max, float)
    assert opts.alpha == [1.0, 1.0, 1.0, 2.0] and opts.sample_optimisation is True
    assert opts.dropout == 0.1 and opts.zeta_grid == 11  # defaults filled
    assert spec.pretrain.method_options("ema_teacher").momentum == 0.99  # not mentioned: its defaults


@pytest.mark.parametrize("extra,words", [
    ("pretrain: {methods: {tuple_infonce: {candidate: 3}}}",
     ["pretrain.methods.tuple_infonce", "unknown options ['candidate']", "'candidates' for 'candidate'", "valid options: disturbed"]),
    ("pretrain: {methods: {tuple_infonse: {candidates: 3}}}",
     ["pretrain.methods", "unknown pretrain method 'tuple_infonse'", "Did you mean 'tuple_infonce'"]),
    ("pretrain: {methods: {tuple_infonce: {candidates: many}}}", ["pretrain.methods.tuple_infonce.candidates", "expected int"]),
    ("pretrain: {methods: {ema_teacher: {momentum: 1.5}}}", ["pretrain.methods.ema_teacher", "momentum must be in [0, 1)"]),
    ("pretrain: {methods: {tuple_infonce: {dropout: 1.0}}}", ["pretrain.methods.tuple_infonce", "dropout must be in [0, 1)"]),
    # values the sample optimisation clamped in silence (negative weights -> 0, all <= 0 -> uniform, the noise start
    # -> [0, beta_max]) and the loss took as given (a negative std acts as its size): refused at load
    ("pretrain: {methods: {tuple_infonce: {sample_optimisation: true, alpha: [1, -1, 1, 1]}}}",
     ["pretrain.methods.tuple_infonce", "alpha must be finite weights >= 0, not all 0", "[1.0, -1.0, 1.0, 1.0]"]),
    ("pretrain: {methods: {tuple_infonce: {alpha: [0, 0, 0, 0]}}}", ["pretrain.methods.tuple_infonce", "alpha must be"]),
    ("pretrain: {methods: {tuple_infonce: {embedding_noise: -0.1}}}",
     ["pretrain.methods.tuple_infonce", "embedding_noise must be a std >= 0, got -0.1"]),
    ("pretrain: {methods: {tuple_infonce: {sample_optimisation: true, embedding_noise: 2.0}}}",
     ["pretrain.methods.tuple_infonce", "embedding_noise (2.0, beta's start) must be <= beta_max (1.0)"]),
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


@pytest.mark.parametrize("block,named", [
    ("{candidates: 8}", "candidates"),
    ("{sample_optimisation: false, policy_lr: 0.1, val_size: 64, dropout: 0.2}", "policy_lr, val_size"),
    ("{beta_max: 2.0, policy_baseline: false, zeta_grid: 5}", "beta_max, zeta_grid, policy_baseline"),
])
def test_sample_optimisation_options_without_it_are_refused(tmp_path: Path, block: str, named: str) -> None:
    """With sample_optimisation off, Algorithm 1's options are read by nothing (the loss reads disturbed, alpha,
    embedding_noise and dropout): one set off its default would be recorded in the record and hashed into the cell
    and change nothing, so the spec is refused at load naming the file, the block and every such key (in the
    Options' field order). Set at their defaults they change nothing either way and are accepted, as is any value
    with sample_optimisation on."""
    path = _spec(tmp_path, f"pretrain: {{methods: {{tuple_infonce: {block}}}}}\n")
    with pytest.raises(ConfigError) as err:
        load_spec(path)
    msg = str(err.value)
    assert str(path) in msg and "pretrain.methods.tuple_infonce: " + named + " set with sample_optimisation: false" in msg
    assert "dropout" not in msg  # the augmentation's dropout is read with or without it
    on = block.replace("sample_optimisation: false, ", "").replace("{", "{sample_optimisation: true, ", 1)
    assert load_spec(_spec(tmp_path, f"pretrain: {{methods: {{tuple_infonce: {on}}}}}\n"))
    defaults = load_spec(_spec(tmp_path, "pretrain: {methods: {tuple_infonce: {candidates: 4, zeta_grid: 11, "
                                         "dropout: 0.2}}}\n"))  # at their defaults: nothing recorded, accepted
    assert defaults.pretrain.methods["tuple_infonce"].dropout == 0.2


GRID = "pretrain.per_objective.tuple_infonce.grid"
SO = "methods.tuple_infonce.sample_optimisation"


@pytest.mark.parametrize("over, point, problem", [
    # candidates searched with Algorithm 1 off: the global block says nothing of candidates, so the default 4 passes
    # and 8 is the point refused (every trial would compute the same thing)
    ({GRID: {"methods.tuple_infonce.candidates": [4, 8]}}, "{'methods.tuple_infonce.candidates': 8}",
     "candidates set with sample_optimisation: false"),
    # the switch searched while the global block sets candidates: the off point carries an option it never reads
    ({"pretrain.methods.tuple_infonce": {"sample_optimisation": True, "candidates": 8}, GRID: {SO: [True, False]}},
     "{'" + SO + "': False}", "candidates set with sample_optimisation: false"),
    # the same with an option the grid searches next to the switch: only the off points are refused (the first of them)
    ({GRID: {SO: [False, True], "methods.tuple_infonce.zeta_grid": [11, 5]}},
     "{'" + SO + "': False, 'methods.tuple_infonce.zeta_grid': 5}", "zeta_grid set with sample_optimisation: false"),
    # a value the method refuses, given only through the grid
    ({GRID: {"methods.tuple_infonce.dropout": [0.1, 1.5]}}, "{'methods.tuple_infonce.dropout': 1.5}",
     "dropout must be in [0, 1), got 1.5"),
    # two keys each valid alone, refused together: beta's start 0.5 above beta_max 0.3 with Algorithm 1 on
    ({"pretrain.methods.tuple_infonce": {"sample_optimisation": True},
      GRID: {"methods.tuple_infonce.embedding_noise": [0.1, 0.5], "methods.tuple_infonce.beta_max": [1.0, 0.3]}},
     "{'methods.tuple_infonce.beta_max': 0.3, 'methods.tuple_infonce.embedding_noise': 0.5}",
     "embedding_noise (0.5, beta's start) must be <= beta_max (0.3)"),
])
def test_every_grid_point_is_checked_by_the_joining_methods(over: dict, point: str, problem: str) -> None:
    """Each full point of a selection grid (global methods block, the objective's methods.* hyper-parameters, the
    point's keys) is checked by the method's own check at load, naming the grid, the point and the problem."""
    with pytest.raises(ConfigError) as err:
        benchmarks.load("quickstart", overrides=over)
    msg = str(err.value)
    assert GRID + ": at the point " + point + " the tuple_infonce method refuses" in msg, msg
    assert problem in msg, msg


def test_grid_points_the_method_accepts_load() -> None:
    """Not over-refusing: Algorithm 1's options searched with the switch on at every point (in the same grid, or in
    the global block) load, and so do defaults-valued options with the switch off."""
    on = benchmarks.load("quickstart", overrides={GRID: {SO: [True], "methods.tuple_infonce.candidates": [4, 8]}})
    assert on.pretrain.grid["tuple_infonce"]["methods.tuple_infonce.candidates"] == [4, 8]
    benchmarks.load("quickstart", overrides={"pretrain.methods.tuple_infonce": {"sample_optimisation": True},
                                             GRID: {"methods.tuple_infonce.candidates": [4, 8]}})
    benchmarks.load("quickstart", overrides={GRID: {SO: [True, False]}})  # nothing of Algorithm 1 set: both run
    benchmarks.load("quickstart", overrides={GRID: {"methods.tuple_infonce.dropout": [0.0, 0.5]}})
    # the global block sets candidates and Algorithm 1 on, the grid keeps it on at every point
    benchmarks.load("quickstart", overrides={"pretrain.methods.tuple_infonce": {"sample_optimisation": True,
                                                                                "candidates": 8},
                                             GRID: {SO: [True], "methods.tuple_infonce.policy_lr": [0.01, 0.1]}})


def test_old_flat_keys_in_a_spec_file_and_in_set_are_mapped_with_a_warning(tmp_path: Path) -> None:
    old = _spec(tmp_path, "pretrain: {tuple_sample_optimisation: true, tuple_candidates: 8, ema_teacher: true, "
                          "embedding_noise: 0.2}\n")
    with pytest.warns(M.DeprecatedKeyWarning) as caught:
        a = load_spec(old)
    assert {str(w.message).split(": ", 1)[1].split(" is")[0] for w in caught} == {
        "pretrain.tuple_sample_optimisation", "pretrain.tuple_candidates", "pretrain.ema_teacher",
        "pretrain.embedding_noise"}
    (tmp_path / "new").mkdir()
    new = tmp_path / "new" / "methods-bench.yaml"  # the same id: a spec's name: key must be its file's stem
    new.write_text(GOOD + "name: methods-bench\npretrain:\n  methods:\n    tuple_infonce: {sample_optimisation: true, candidates: 8, "
                   "embedding_noise: 0.2}\n"
                   "    ema_teacher: {enabled: true}\n")
    b = load_spec(new)
    assert spec_hash(a, "tuple_infonce") == spec_hash(b, "tuple_infonce") and a.to_dict() == b.to_dict()
    assert a.pretrain.method_options("tuple_infonce").candidates == 8 and a.pretrain.method_options("ema_teacher").enabled
    # --set with the old key overrides the spec's new key (the override wins, as for any --set)
    with pytest.warns(M.DeprecatedKeyWarning):
        c = load_spec(new, overrides={"pretrain.tuple_candidates": 5})
    assert c.pretrain.method_options("tuple_infonce").candidates == 5
    # a synthetic block with the old key: mapped too, and stored as written (it is part of the hash)
    syn = _spec(tmp_path, "pretrain: {methods: {tuple_infonce: {sample_optimisation: true}}}\n"
                          "synthetic: {pretrain.tuple_candidates: 2}\n")
    with pytest.warns(M.DeprecatedKeyWarning):
        d = load_spec(syn, synthetic=True)
    assert d.pretrain.method_options("tuple_infonce").candidates == 2
    assert d.to_dict()["synthetic"] == {"pretrain.tuple_candidates": 2}


def test_importing_methods_leaves_the_warning_filters_as_they_were() -> None:
    """A fresh interpreter: importing the module changes no process-wide warning filter, and an old
    flat key is still shown under Python's default filters (a FutureWarning needs none of its own)."""
    code = ("import sys, warnings\n"
            "import torch, fusebench.registry  # what the module imports (torch adds filters of its own)\n"
            "assert 'fusebench.spec.methods' not in sys.modules\n"
            "before = list(warnings.filters)\n"
            "import fusebench.spec.methods\n"
            "assert list(warnings.filters) == before, (before, warnings.filters)\n"
            "from fusebench import benchmarks\n"
            "benchmarks.load('quickstart', overrides={'pretrain.tuple_sample_optimisation': True, "
            "'pretrain.tuple_candidates': 8})\n")
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
    ids = set(objectives.OBJECTIVES.builtin())  # a plugin's id may be any word ('mean', 'sum'): not ours to forbid
    allowed = {("fusebench/spec/config.py", 'objective: str = "infonce_pwe"')}  # a spec's default, not a branch
    for rel in ("fusebench/sweep/runner.py", "fusebench/engine/pretrain.py", "fusebench/spec/config.py",
                "fusebench/spec/methods.py", "fusebench/engine/loop.py"):
        src = (ROOT / rel).read_text()
        # the table of the old flat keys names *method* ids (tuple_infonce is both a method and an objective)
        table = [n for n in ast.parse(src).body if isinstance(n, ast.AnnAssign)
                 and getattr(n.target, "id", "") == "RENAMED_PRETRAIN_KEYS"]
        skip = range(table[0].lineno, table[0].end_lineno + 1) if table else range(0)
        for tok in tokenize.generate_tokens(io.StringIO(src).readline):
            if tok.start[0] in skip:
                continue
            if tok.type == tokenize.STRING and not tok.string.startswith(('"""', "'''", 'f"""')):
                text = tok.string.strip("rbfRBF")[1:-1]
                if any(r == rel and line in tok.line for r, line in allowed):
                    continue
                assert text not in ids, f"{rel}:{tok.start[0]} names objective {text!r}"
