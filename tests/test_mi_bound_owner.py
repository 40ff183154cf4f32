"""The objective owns where its MI bound is proven (the Gaussian MI cell branches on no objective id)."""
import pytest

from fusebench.cells.gaussian_mi import proven_bound


@pytest.mark.parametrize("objective, hparams, want", [
    ("pvc_geometric", None, "Theorem 2.2, Eq. 13"),
    ("pvc_arithmetic", None, "Theorem 2.2, Eq. 12"),
    ("pvc_arithmetic", {"variant": "paper"}, "Theorem 2.2, Eq. 12"),
    ("pvc_arithmetic", {"variant": "reference_code"}, None),
    ("suff_stats", None, "Theorem 2.4, Eq. 25"),
    ("multicrop", None, "Proposition 2.1, two-view bound"),
    ("infonce_pwe", None, "Proposition 2.1, two-view bound"),
    ("mv_infonce", None, None),
    ("m3g", None, None),
])
def test_the_built_ins_keep_their_proofs(objective, hparams, want):
    assert proven_bound(objective, hparams) == want


def test_a_registered_objective_declares_its_own_proof(monkeypatch):
    from fusebench import objectives
    from fusebench.objectives.infonce import InfoNCEPairwise

    class Declared(InfoNCEPairwise):
        mi_bound_proven = "Proposition 2.1, two-view bound"

    reg = objectives.OBJECTIVES
    for attr in ("_entries", "_meta", "_origin"):  # the registry as it was, after the test
        monkeypatch.setattr(reg, attr, dict(getattr(reg, attr)))
    reg.add("zz_declared_bound", Declared)
    assert proven_bound("zz_declared_bound") == "Proposition 2.1, two-view bound"
