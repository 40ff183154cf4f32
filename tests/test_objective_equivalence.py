"""Same-loss declarations (``fusebench.objectives.equivalence``) checked against the losses themselves.

Every pair of built-in objectives of one input kind is enumerated from the registry, at k = 2..5
views (within both objectives' view limits):

- declared (or derived) at k: both objectives built with the same hyper-parameters (every combination
  of the shared ones' values both accept, the rest at their defaults) give the same value and the same
  gradient on seeded random float64 inputs, to 1e-6; where both honour masks, also under a mask;
- not declared at k: built with the same shared hyper-parameters, the value or the gradient differs
  by more than 1e-4, so a missing declaration fails here.

Inputs per kind: "views" -> views [k, n, d] (gradient w.r.t. the views); "pairs" (BYOL) -> predictions
and targets [k, n, d] (gradient w.r.t. the predictions; the targets are detached inside both losses);
"tuple" -> anchor [n, d], positive [n, d], negatives [n, m, d] (k is the number of modalities fused
before the loss, so the loss does not see it; ``tuple_infonce`` is the only tuple objective, so it has
no pair to check). The BYOL predictor and EMA teacher belong to the ``ema_teacher`` method, which both
BYOL objectives name: given the same predictions and targets, the losses are what differs, and that
is what is checked here. The expected partitions of the built-in objectives are written out by hand
from the loss definitions (see the module docstring of ``fusebench.objectives.equivalence``).
"""

from __future__ import annotations

import functools
import itertools
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fusebench.objectives import OBJECTIVES, available, build
from fusebench.objectives.equivalence import (BUILTIN, Condition, canonical, declarations, declared_of, groups,
                                              parse_condition, same_hparams, same_loss)
from fusebench.options import REQUIRED, options_of
from fusebench.registry import UnknownNameError

KS = (2, 3, 4, 5)
N, D, M_NEG = 6, 5, 7
#: values tried for a hyper-parameter two objectives share (besides both defaults)
TRIAL_VALUES = {"tau": (0.3,), "eps": (0.3,), "variant": ("paper", "reference_code", "public_port", "one_sided_mean")}
ATOL = 1e-6
DIFFER = 1e-4


def _kind(name: str) -> str:
    return getattr(OBJECTIVES.get(name), "input_kind", "views")


def _accepts(name: str, k: int) -> bool:
    cls = OBJECTIVES.get(name)
    if _kind(name) == "tuple":
        return True
    return cls.min_views <= k and (cls.max_views is None or k <= cls.max_views)


def _defaults(name: str) -> dict:
    return {o.name: o.default for o in options_of(OBJECTIVES.get(name)) or []}


def _buildable(name: str, hp: dict) -> bool:
    try:
        build(name, **hp)
    except ValueError:
        return False
    return True


def _shared_configs(a: str, b: str) -> list[tuple[dict, dict]]:
    """(hparams of a, hparams of b): every combination of values of the shared hyper-parameters that both
    objectives accept; the others at their defaults (not given)."""
    da, db = _defaults(a), _defaults(b)
    shared = sorted(set(da) & set(db))
    choices = []
    for name in shared:
        values = [v for v in (da[name], db[name], *TRIAL_VALUES.get(name, ())) if v is not REQUIRED]
        choices.append(list(dict.fromkeys(values)))
    out = []
    for combo in itertools.product(*choices):
        hp = dict(zip(shared, combo))
        if _buildable(a, hp) and _buildable(b, hp):
            out.append((hp, hp))
    return out


def _differ_config(a: str, b: str) -> tuple[dict, dict]:
    """One configuration for the 'must differ' check: shared hyper-parameters at a common value both accept
    (a trial value first), else each at its own default."""
    configs = _shared_configs(a, b)
    if configs:
        non_default = [c for c in configs if any(v in TRIAL_VALUES.get(n, ()) for n, v in c[0].items())]
        return (non_default or configs)[0]
    return {}, {}


def _inputs(kind: str, k: int, seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    if kind == "views":
        return [torch.randn(k, N, D, generator=g, dtype=torch.float64)]
    if kind == "pairs":
        return [torch.randn(k, N, D, generator=g, dtype=torch.float64) for _ in range(2)]
    if kind == "tuple":
        return [torch.randn(N, D, generator=g, dtype=torch.float64), torch.randn(N, D, generator=g, dtype=torch.float64),
                torch.randn(N, M_NEG, D, generator=g, dtype=torch.float64)]
    pytest.fail(f"no inputs defined for input_kind {kind!r}: extend _inputs")


@functools.lru_cache(maxsize=None)
def _evaluate(name: str, hp_items: tuple, k: int, seed: int = 0, masked: bool = False):
    """(value, gradients) of objective ``name`` with hyper-parameters ``hp_items`` on seeded inputs."""
    kind = _kind(name)
    inputs = _inputs(kind, k, seed)
    grad_of = [0] if kind in ("views", "pairs") else [0, 1, 2]
    for i in grad_of:
        inputs[i].requires_grad_(True)
    loss_fn = build(name, **dict(hp_items))
    kwargs = {}
    if masked:
        mask = torch.ones(k, N, dtype=torch.bool)
        mask[0, 1] = mask[1, 4] = mask[k - 1, 0] = False
        kwargs["mask"] = mask
    value = loss_fn(*inputs, **kwargs)
    value.backward()
    if kind == "pairs":
        assert inputs[1].grad is None  # the targets are detached inside the loss
    return float(value.detach()), tuple(inputs[i].grad.detach().clone() for i in grad_of)


def _items(hp: dict) -> tuple:
    return tuple(sorted(hp.items()))


def _pairs():
    ids = OBJECTIVES.builtin()  # fusebench's own: a plugin installed on this machine is its author's to declare
    for a, b in itertools.combinations(ids, 2):
        if _kind(a) == _kind(b):
            yield a, b


PAIR_CASES = [(a, b, k) for a, b in _pairs() for k in KS if _accepts(a, k) and _accepts(b, k)]
SAME_CASES = [c for c in PAIR_CASES if same_loss(*c)]
DIFF_CASES = [c for c in PAIR_CASES if not same_loss(*c)]


def _ids(cases):
    return [f"{a}-{b}-k{k}" for a, b, k in cases]


# ---------------------------------------------------------------------------------------------
# the declarations against the losses
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("a", "b", "k"), SAME_CASES, ids=_ids(SAME_CASES))
def test_declared_pairs_give_equal_values_and_gradients(a: str, b: str, k: int) -> None:
    configs = _shared_configs(a, b)
    assert configs, f"{a} and {b} are declared the same loss but share no hyper-parameter values both accept"
    for hp_a, hp_b in configs:
        assert same_hparams(hp_a, hp_b, a, b)
        for seed in (0, 1):
            va, ga = _evaluate(a, _items(hp_a), k, seed)
            vb, gb = _evaluate(b, _items(hp_b), k, seed)
            assert math.isclose(va, vb, rel_tol=ATOL, abs_tol=ATOL), (a, b, k, hp_a, seed, va, vb)
            for x, y in zip(ga, gb):
                assert torch.allclose(x, y, rtol=ATOL, atol=ATOL), (a, b, k, hp_a, seed, float((x - y).abs().max()))


@pytest.mark.parametrize(("a", "b", "k"), DIFF_CASES, ids=_ids(DIFF_CASES))
def test_undeclared_pairs_differ(a: str, b: str, k: int) -> None:
    hp_a, hp_b = _differ_config(a, b)
    va, ga = _evaluate(a, _items(hp_a), k)
    vb, gb = _evaluate(b, _items(hp_b), k)
    gap = max([abs(va - vb)] + [float((x - y).abs().max()) for x, y in zip(ga, gb)])
    assert gap > DIFFER, (f"{a} and {b} give the same value and gradient at k={k} ({hp_a}, {hp_b}) but no "
                          f"same_loss_as declaration says so (fusebench.objectives.equivalence)")


MASK_CASES = [c for c in SAME_CASES if all(getattr(OBJECTIVES.get(o), "supports_mask", False) for o in c[:2])]


@pytest.mark.parametrize(("a", "b", "k"), MASK_CASES, ids=_ids(MASK_CASES))
def test_declared_pairs_agree_under_masks(a: str, b: str, k: int) -> None:
    for hp, _ in _shared_configs(a, b):
        va, ga = _evaluate(a, _items(hp), k, 0, True)
        vb, gb = _evaluate(b, _items(hp), k, 0, True)
        assert math.isclose(va, vb, rel_tol=ATOL, abs_tol=ATOL), (a, b, k, hp, va, vb)
        assert all(torch.allclose(x, y, rtol=ATOL, atol=ATOL) for x, y in zip(ga, gb)), (a, b, k, hp)


def test_mask_cases_exist() -> None:
    # infonce_pwe and infonce_avg both honour masks and coincide at k = 2: the masked check is not empty
    assert ("infonce_avg", "infonce_pwe", 2) in MASK_CASES


def test_non_default_unshared_hyperparameter_breaks_the_identity() -> None:
    # why same_hparams requires the defaults of unshared hyper-parameters: at k = 2 the reference-code
    # variant of pvc_arithmetic is NT-Xent - log n (same gradient, different value)
    v_pwe, g_pwe = _evaluate("infonce_pwe", (), 2)
    v_ref, g_ref = _evaluate("pvc_arithmetic", (("variant", "reference_code"),), 2)
    assert v_ref == pytest.approx(v_pwe - math.log(N), abs=1e-9)
    assert torch.allclose(g_ref[0], g_pwe[0], atol=1e-9)
    assert not same_hparams({}, {"variant": "reference_code"}, "infonce_pwe", "pvc_arithmetic")


def test_unequal_shared_hyperparameters_break_the_identity() -> None:
    v1, _ = _evaluate("infonce_pwe", (("tau", 0.1),), 3)
    v2, _ = _evaluate("multicrop", (("tau", 0.3),), 3)
    assert abs(v1 - v2) > DIFFER and not same_hparams({"tau": 0.1}, {"tau": 0.3}, "infonce_pwe", "multicrop")


# ---------------------------------------------------------------------------------------------
# the partition of the built-in objectives, written out by hand
# ---------------------------------------------------------------------------------------------
ORDER = ["infonce_pwe", "infonce_avg", "multicrop", "pvc_geometric", "pvc_arithmetic", "suff_stats", "mv_infonce",
           "mv_dhel", "dhel", "byol_pwe", "byol_avg", "tuple_infonce", "matching_gap", "m3g"]


def test_builtin_groups_at_two_views() -> None:
    assert groups(ORDER, 2) == [
        ["infonce_pwe", "infonce_avg", "multicrop", "pvc_geometric", "pvc_arithmetic", "suff_stats"],
        ["mv_infonce"], ["mv_dhel", "dhel"], ["byol_pwe", "byol_avg"], ["tuple_infonce"], ["matching_gap"], ["m3g"],
    ]


@pytest.mark.parametrize("k", [3, 4, 6])
def test_builtin_groups_beyond_two_views(k: int) -> None:
    ids = [o for o in ORDER if o not in ("dhel", "matching_gap")]  # two-view losses
    assert groups(ids, k) == [
        ["infonce_pwe", "multicrop"], ["infonce_avg"], ["pvc_geometric"], ["pvc_arithmetic"], ["suff_stats"],
        ["mv_infonce"], ["mv_dhel"], ["byol_pwe"], ["byol_avg"], ["tuple_infonce"], ["m3g"],
    ]


def test_builtin_declarations() -> None:
    got = {pair: str(cond) for pair, cond in declarations().items() if pair[0] in ORDER}
    assert got == {
        ("multicrop", "infonce_pwe"): "all",
        ("infonce_avg", "infonce_pwe"): "k = 2", ("pvc_geometric", "infonce_pwe"): "k = 2",
        ("pvc_arithmetic", "infonce_pwe"): "k = 2", ("suff_stats", "infonce_pwe"): "k = 2",
        ("dhel", "mv_dhel"): "k = 2", ("byol_avg", "byol_pwe"): "k = 2",
    }


def test_first_named_id_is_displayed() -> None:
    assert groups(["multicrop", "m3g", "infonce_pwe"], 4) == [["multicrop", "infonce_pwe"], ["m3g"]]
    assert groups(["infonce_pwe", "m3g", "multicrop"], 4) == [["infonce_pwe", "multicrop"], ["m3g"]]
    # infonce_avg and suff_stats are linked through infonce_pwe, which need not be listed
    assert groups(["suff_stats", "infonce_avg"], 2) == [["suff_stats", "infonce_avg"]]
    assert groups([], 2) == []


def test_references_are_rows_of_their_own() -> None:
    assert groups(["none", "multicrop", "raw", "infonce_pwe"], 3, references=("none", "raw")) == [
        ["none"], ["multicrop", "infonce_pwe"], ["raw"]]


def test_unknown_ids_alone_on_request() -> None:
    # runs of an objective this install does not know (a plugin not installed) stay rows of their own
    assert groups(["alpha", "multicrop", "infonce_pwe", "beta"], 3, unknown="alone") == [
        ["alpha"], ["multicrop", "infonce_pwe"], ["beta"]]
    assert canonical("alpha", 3, ["multicrop", "alpha"], unknown="alone") == "alpha"
    with pytest.raises(UnknownNameError, match=r"unknown objective 'alpha'\. .*Valid objective ids: byol_avg"):
        groups(["alpha", "multicrop"], 3)


def test_canonical() -> None:
    among = ["m3g", "pvc_geometric", "infonce_pwe", "suff_stats"]
    assert canonical("suff_stats", 2, among) == "pvc_geometric"
    assert canonical("suff_stats", 3, among) == "suff_stats"
    assert canonical("multicrop", 3, among) == "infonce_pwe"  # not among: the first listed equivalent
    assert canonical("mv_infonce", 3, among) == "mv_infonce"  # not among, nothing equivalent: itself
    assert canonical("none", 2, ["none", "infonce_pwe"], references=["none"]) == "none"


def test_same_loss() -> None:
    assert same_loss("multicrop", "infonce_pwe", 5) and same_loss("pvc_arithmetic", "suff_stats", 2)
    assert not same_loss("pvc_arithmetic", "suff_stats", 3) and not same_loss("byol_avg", "byol_pwe", 3)
    assert not same_loss("infonce_pwe", "mv_infonce", 2)


# ---------------------------------------------------------------------------------------------
# hyper-parameters
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("a", "b", "oa", "ob", "expected"), [
    ({}, {"tau": 0.1}, "infonce_pwe", "multicrop", True),  # 0.1 is the default tau
    ({"tau": 0.1}, {"tau": 0.5}, "infonce_pwe", "multicrop", False),
    ({"tau": 1}, {"tau": 1.0}, "infonce_pwe", "multicrop", True),  # numbers by value
    ({"tau": 0.1}, {"tau": 0.1, "renormalise": False}, "infonce_pwe", "infonce_avg", True),
    ({"tau": 0.1}, {"tau": 0.1, "renormalise": True}, "infonce_pwe", "infonce_avg", False),
    ({"tau": 0.1}, {"variant": "paper"}, "infonce_pwe", "pvc_arithmetic", True),
    ({"variant": "reference_code"}, {"variant": "reference_code"}, "dhel", "mv_dhel", True),  # shared: equal
    ({"variant": "reference_code"}, {}, "dhel", "mv_dhel", False),
    ({}, {}, "byol_pwe", "byol_avg", True),
    ({"tau": 0.1}, {}, None, None, False),  # without ids, no defaults are known
    ({"tau": 0.1}, {"tau": 0.1}, None, None, True),
    ({"renormalise": True}, {"renormalise": 1}, None, None, False),  # booleans only equal booleans
    ({"tau": float("nan")}, {"tau": float("nan")}, None, None, False),
    ({"alpha": [1, 0]}, {"alpha": (1.0, 0.0)}, None, None, True),
])
def test_same_hparams(a, b, oa, ob, expected) -> None:
    assert same_hparams(a, b, oa, ob) is expected
    assert same_hparams(b, a, ob, oa) is expected  # symmetric


def test_same_hparams_bad_input() -> None:
    with pytest.raises(ValueError, match=r"same_hparams: a must be a mapping"):
        same_hparams([("tau", 0.1)], {})
    with pytest.raises(ValueError, match=r"same_hparams: b must be a mapping"):
        same_hparams({}, {1: 0.1})
    with pytest.raises(ValueError, match=r"objective_b must be an objective id"):
        same_hparams({}, {}, "infonce_pwe", 3)
    with pytest.raises(UnknownNameError, match=r"unknown objective 'infonce_pwee'"):
        same_hparams({}, {}, "infonce_pwe", "infonce_pwee")


# ---------------------------------------------------------------------------------------------
# conditions and bad input
# ---------------------------------------------------------------------------------------------
def test_parse_condition() -> None:
    assert parse_condition("all") == Condition() and parse_condition(2) == Condition(2)
    assert all(parse_condition("all").holds(k) for k in range(2, 9))
    assert [k for k in range(2, 9) if parse_condition(3).holds(k)] == [3]
    for bad in (1, 0, True, 2.0, "2", "always", None, "k <= 3"):
        with pytest.raises(ValueError, match=r"where: expected 'all' or the number of views N \(an integer >= 2\)"):
            parse_condition(bad, "where")
    # the old condition text is refused with the value to write instead
    with pytest.raises(ValueError, match=r"got 'k == 2' \(write 2\)"):
        parse_condition("k == 2", "where")


@pytest.mark.parametrize(("call", "match"), [
    (lambda: groups(["infonce_pwe"], 1), r"k must be an integer number of views >= 2, got 1"),
    (lambda: groups(["infonce_pwe"], True), r"k must be an integer number of views >= 2, got True"),
    (lambda: groups(["infonce_pwe"], 2.0), r"k must be an integer"),
    (lambda: groups("infonce_pwe", 2), r"objectives must be an iterable of ids \(strings\), got str"),
    (lambda: groups(["infonce_pwe", 3], 2), r"objectives must hold ids \(strings\), got 3"),
    (lambda: groups(["infonce_pwe", "multicrop", "infonce_pwe"], 2), r"each id once, got 'infonce_pwe'"),
    (lambda: groups(["infonce_pwe", "nope"], 2), r"unknown objective 'nope'"),
    (lambda: groups(["dhel", "mv_dhel"], 3), r"objective 'dhel' takes exactly 2 views, so it cannot have run at k=3"),
    (lambda: groups(["none"], 2, references="none"), r"references must be an iterable of ids"),
    (lambda: groups(["INFONCE_PWE"], 2), r"unknown objective 'INFONCE_PWE'\. Did you mean 'infonce_pwe'\?"),
    (lambda: groups(["infonce_pwe"], 2, unknown="skip"), r"unknown must be one of \('error', 'alone'\)"),
    (lambda: canonical(3, 2, ["infonce_pwe"]), r"objective must be an objective id"),
    (lambda: canonical("multicrop", 2, ["infonce_pwe", "infonce_pwe"]), r"among must list each id once"),
])
def test_bad_input(call, match) -> None:
    with pytest.raises(ValueError, match=match):
        call()


def test_tuple_objectives_ignore_view_limits() -> None:
    # tuple_infonce fuses the k modalities before the loss: any k is fine, and it stays alone
    assert groups(["tuple_infonce", "infonce_pwe"], 6) == [["tuple_infonce"], ["infonce_pwe"]]


# ---------------------------------------------------------------------------------------------
# declarations of other (plugin) classes: validated, not inherited
# ---------------------------------------------------------------------------------------------
def test_declarations_are_not_inherited(monkeypatch) -> None:
    from fusebench.objectives.multicrop import MultiCrop

    class Scaled(MultiCrop):  # a subclass that changes the loss inherits no declaration
        def loss(self, z, mask=None):
            return 2 * super().loss(z, mask)

    monkeypatch.setattr(OBJECTIVES, "_entries", {**OBJECTIVES._entries, "scaled_multicrop": Scaled})
    assert groups(["infonce_pwe", "multicrop", "scaled_multicrop"], 3) == [["infonce_pwe", "multicrop"],
                                                                          ["scaled_multicrop"]]


def test_same_class_under_two_ids_is_one_loss(monkeypatch) -> None:
    from fusebench.objectives.infonce import InfoNCEPairwise

    monkeypatch.setattr(OBJECTIVES, "_entries", {**OBJECTIVES._entries, "pwe_alias": InfoNCEPairwise})
    assert groups(["pwe_alias", "infonce_pwe", "infonce_avg"], 3) == [["pwe_alias", "infonce_pwe"], ["infonce_avg"]]


@pytest.mark.parametrize(("declared", "match"), [
    ({"infonce_pwee": "all"}, r"Bad \(objective 'bad_decl'\)\.same_loss_as: 'infonce_pwee' is not a registered"),
    ({"bad_decl": "all"}, r"cannot declare itself"),
    ({"byol_pwe": "all"}, r"takes input_kind 'views' but 'byol_pwe' takes 'pairs'"),
    ({"infonce_pwe": "k = 2"}, r"same_loss_as\['infonce_pwe'\]: expected 'all' or the number of views N"),
    (["infonce_pwe"], r"expected a mapping"),
])
def test_malformed_declarations_are_refused(monkeypatch, declared, match) -> None:
    from fusebench.objectives.base import MultiViewObjective

    bad = type("Bad", (MultiViewObjective,), {"same_loss_as": declared})
    monkeypatch.setattr(OBJECTIVES, "_entries", {**OBJECTIVES._entries, "bad_decl": bad})
    with pytest.raises(ValueError, match=match):
        groups(["infonce_pwe", "bad_decl"], 2)
    with pytest.raises(ValueError, match=match):
        declarations()


# ---------------------------------------------------------------------------------------------
# the light table of the built-ins (no torch) against the classes
# ---------------------------------------------------------------------------------------------
def _builtin_ids() -> list[str]:
    return [n for n in available() if getattr(OBJECTIVES.get(n), "__module__", "").startswith("fusebench.objectives.")]


def test_builtin_table_matches_the_classes() -> None:
    assert sorted(BUILTIN) == _builtin_ids()
    for name in BUILTIN:
        assert BUILTIN[name] == declared_of(OBJECTIVES.get(name)), name
    declarations()  # checks the same and raises on a difference


def test_a_stale_table_is_refused(monkeypatch) -> None:
    stale = BUILTIN["byol_avg"]._replace(same_loss_as={})
    monkeypatch.setitem(BUILTIN, "byol_avg", stale)
    with pytest.raises(ValueError, match=r"objective 'byol_avg': its class declares .* but "
                                         r"fusebench\.objectives\.equivalence\.BUILTIN lists .*update the table"):
        declarations()


@pytest.mark.parametrize("k", [2, 3])
def test_registry_path_gives_the_table_path_partition(monkeypatch, k: int) -> None:
    from fusebench.objectives.base import MultiViewObjective

    # a plugin id in the list makes groups() read the whole registry instead of the table
    monkeypatch.setattr(OBJECTIVES, "_entries", {**OBJECTIVES._entries,
                                                 "plugin_x": type("PluginX", (MultiViewObjective,), {})})
    ids = [o for o in BUILTIN if o not in ("dhel", "matching_gap")] if k > 2 else list(BUILTIN)
    assert [g for g in groups(ids + ["plugin_x"], k) if g != ["plugin_x"]] == groups(ids, k)


def test_builtin_questions_import_no_torch() -> None:
    code = ("import sys\n"
            "from fusebench.objectives.equivalence import canonical, groups, same_hparams, same_loss\n"
            "assert groups(['infonce_pwe', 'multicrop', 'none', 'alpha'], 2, references=['none'], unknown='alone')"
            " == [['infonce_pwe', 'multicrop'], ['none'], ['alpha']]\n"
            "assert canonical('suff_stats', 2, ['infonce_avg']) == 'infonce_avg' and same_loss('dhel', 'mv_dhel', 2)\n"
            "assert same_hparams({}, {'tau': 0.1}, 'infonce_pwe', 'multicrop')\n"
            "print(sorted(m for m in ('torch', 'numpy', 'scipy', 'fusebench.objectives.infonce') if m in sys.modules))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=Path(__file__).parents[1])
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "[]"
